"""GNN models that aggregate through a communication-agnostic propagator."""

from jaxgraph.models.gnn import (
    GAT,
    GCN,
    MODEL_TYPES,
    MODELS,
    GraphSAGE,
    make_model,
    register_model,
)
from jaxgraph.models.propagate import Propagator, segment_sum_sorted

__all__ = [
    "GAT",
    "GCN",
    "MODELS",
    "MODEL_TYPES",
    "GraphSAGE",
    "Propagator",
    "make_model",
    "register_model",
    "segment_sum_sorted",
]
