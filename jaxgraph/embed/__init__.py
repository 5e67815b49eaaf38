"""Random-walk graph embedding with a feedback-coupled active set (FeLoG, DeepWalk, node2vec).

A run (:func:`embed`, :mod:`jaxgraph.embed.run`) walks on the host (:mod:`~jaxgraph.embed.walks`,
:mod:`~jaxgraph.embed.corpus`), trains SGNS (:mod:`~jaxgraph.embed.sgns`) data-parallel
(:mod:`~jaxgraph.embed.skipgram`, :mod:`~jaxgraph.embed.programs`) with replica merges
(:mod:`~jaxgraph.embed.merge`, :mod:`~jaxgraph.embed.sync`), and feeds back the active set
(:mod:`~jaxgraph.embed.feedback`); :mod:`~jaxgraph.embed.compress` and
:mod:`~jaxgraph.embed.codec` compress the walks, :mod:`~jaxgraph.embed.rounds`,
:mod:`~jaxgraph.embed.pipeline` and :mod:`~jaxgraph.embed.checkpoints` run the rounds, and
:mod:`~jaxgraph.embed.job` is the ``jaxgraph embed`` command. :mod:`~jaxgraph.embed.sequential`
is the one-pair-at-a-time reference; :mod:`~jaxgraph.embed.evaluate` and
:mod:`~jaxgraph.embed.retrieval` measure the embeddings.
"""

from jaxgraph.embed.feedback import FeedbackConfig, neighbour_consistency, update_active_set
from jaxgraph.embed.merge import AllSync, TableSync
from jaxgraph.embed.rounds import RoundLog
from jaxgraph.embed.run import (
    EmbedConfig,
    EmbedResult,
    cpu_config,
    embed,
    gpu_config,
    load_embed_config,
)
from jaxgraph.embed.sgns import SkipGramConfig, Tables, sgns_update
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.walks import WalkConfig, Walks, out_csr, random_walks

__all__ = [
    "AllSync",
    "EmbedConfig",
    "load_embed_config",
    "EmbedResult",
    "FeedbackConfig",
    "RoundLog",
    "SkipGramConfig",
    "SkipGramTrainer",
    "TableSync",
    "Tables",
    "WalkConfig",
    "Walks",
    "cpu_config",
    "gpu_config",
    "embed",
    "neighbour_consistency",
    "out_csr",
    "random_walks",
    "sgns_update",
    "update_active_set",
]
