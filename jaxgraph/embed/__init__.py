"""Random-walk graph embedding with a feedback-coupled active set (FeLoG, DeepWalk, node2vec).

* :mod:`jaxgraph.embed.walks`: DeepWalk and node2vec walks on the host (numba).
* :mod:`jaxgraph.embed.corpus`: counts, sub-sampling, negative tables and skip-gram pairs.
* :mod:`jaxgraph.embed.sgns`: the SGNS hyper-parameters and update (JAX).
* :mod:`jaxgraph.embed.merge`: how replicas merge (:class:`TableSync`, the merge rules, AllSync);
  :mod:`jaxgraph.embed.sync` the selective syncs.
* :mod:`jaxgraph.embed.programs` and :mod:`jaxgraph.embed.skipgram`: the data-parallel
  trainer's ``shard_map`` programs and its host driver.
* :mod:`jaxgraph.embed.sequential`: word2vec's update one pair at a time (numba), the reference
  the trainer's quality is measured against.
* :mod:`jaxgraph.embed.feedback`: neighbourhood consistency and the active-set rule (FeeST).
* :mod:`jaxgraph.embed.compress` and :mod:`jaxgraph.embed.codec`: FaBC's format and its use in
  a run.
* :mod:`jaxgraph.embed.run`: a run (:func:`embed`); :mod:`jaxgraph.embed.rounds` its operators,
  :mod:`jaxgraph.embed.pipeline` their schedule, :mod:`jaxgraph.embed.checkpoints` their files;
  :mod:`jaxgraph.embed.job` the ``jaxgraph embed`` command.
* :mod:`jaxgraph.embed.evaluate` and :mod:`jaxgraph.embed.retrieval`: link prediction, node
  classification and retrieval metrics.
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
