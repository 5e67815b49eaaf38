"""GNN models that aggregate through a communication-agnostic propagator."""

from jaxgraph.models.gnn import GAT, GCN, MODELS, GraphSAGE, make_model
from jaxgraph.models.propagate import Propagator, segment_sum_sorted

__all__ = ["GAT", "GCN", "MODELS", "GraphSAGE", "Propagator", "make_model", "segment_sum_sorted"]
