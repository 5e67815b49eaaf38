"""The embedding loop: walks -> data-parallel skip-gram -> feedback, round by round.

:func:`embed` runs one method on one graph:

* ``felog``: FeeST (FeLoG §5.1). Round 0 starts ``walks_per_node`` walks from every node with an
  out-edge; after each round the active set keeps the nodes whose neighbourhood consistency is
  still below ``mu`` (:mod:`jaxgraph.embed.feedback`), until it is empty, ``rounds`` rounds
  have run, or (option) the stop-ratio rule fires.
* ``deepwalk`` / ``node2vec``: ``rounds`` rounds from all nodes, with the same walker, trainer
  and learning-rate schedule, so the effect of the feedback is compared on equal terms.

Defaults come in named presets (:func:`jaxgraph.embed.job.preset`): ``"published"``
(:class:`EmbedConfig`'s own), ``"word2vec"``, ``"cpu"`` (:func:`cpu_config`) and ``"gpu"``
(:func:`gpu_config`). A config file describes a whole run, the graph (``[data]``, a
:class:`~jaxgraph.data.DataConfig`) and the device count (``parts``) included (``jaxgraph embed
--config run.toml``, or ``embed(load_embed_config("run.toml"))``; an example:
``experiments/configs/embed/astroph_felog.toml``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import Mesh

import jaxgraph.embed.sync  # noqa: F401  (registers HotspotSync and RandomSync)
from jaxgraph.atomic import atomic_write_bytes, atomic_write_text
from jaxgraph.configfile import check_int, from_dict, read_config_file
from jaxgraph.data.source import DataConfig, load_graph
from jaxgraph.embed.checkpoints import latest_state
from jaxgraph.embed.codec import FabcConfig, WalkCodec
from jaxgraph.embed.feedback import FeedbackConfig, initial_active_set
from jaxgraph.embed.health import HealthCheck
from jaxgraph.embed.merge import SYNC_TYPES, TableSync, sync_key
from jaxgraph.embed.pipeline import PipelineConfig, Span
from jaxgraph.embed.rounds import RoundLog, RoundRunner, run_rounds
from jaxgraph.embed.sgns import SkipGramConfig
from jaxgraph.embed.skipgram import SkipGramTrainer
from jaxgraph.embed.walks import WalkConfig, out_csr
from jaxgraph.graph import Graph

Method = Literal["felog", "deepwalk", "node2vec"]
METHODS = ("felog", "deepwalk", "node2vec")


@dataclasses.dataclass(frozen=True)
class EmbedConfig:
    """One embedding run.

    Attributes:
      method: ``felog`` (feedback on, walks of ``walk.kind``), ``deepwalk`` or ``node2vec``
        (feedback off; the walk kind must match the method).
      walk: walks per round (``walks_per_node`` walks from every start node).
      sgns: skip-gram trainer settings (default: word2vec's global decay over the run).
      feedback: the active-set rule (used by ``felog`` only).
      rounds: the maximum number of rounds (``felog``) or the fixed number (baselines).
      seed: seeds walks, pairs, negatives, tables and feedback.
      compress: FaBC (:mod:`jaxgraph.embed.compress`): each round's walks go to the device
        bitmap-compressed and are decoded there; None sends nothing (the trainer reads the host
        walks). The trained result is the same either way.
      sync: the trainer's periodic :class:`~jaxgraph.embed.merge.TableSync` (None:
        ``AllSync(sgns.merge)``), e.g. :class:`jaxgraph.embed.sync.HotspotSync`.
      pipeline: the RiPP schedule (:class:`~jaxgraph.embed.pipeline.PipelineConfig`); None is
        the sequential loop with no lag (each round walks from the previous round's feedback).
      health: the healthy range of a round's loss per pair and largest row norm, and whether a
        round outside it warns or ends the run (:mod:`jaxgraph.embed.health`).
      data: the graph to embed when :func:`embed` is given none
        (:class:`~jaxgraph.data.DataConfig`).
      parts: the number of devices the run trains on (a 1-D mesh of the first ``parts``).
    """

    method: Method = "felog"
    walk: WalkConfig = WalkConfig()
    sgns: SkipGramConfig = SkipGramConfig(lr_schedule="global")
    feedback: FeedbackConfig = FeedbackConfig()
    rounds: int = 10
    seed: int = 0
    compress: FabcConfig | None = None
    sync: TableSync | None = None
    pipeline: PipelineConfig | None = None
    health: HealthCheck = HealthCheck()
    data: DataConfig = DataConfig(
        num_nodes=2000, avg_degree=10.0, num_features=0, num_classes=5, homophily=0.8
    )
    parts: int = 1

    def __post_init__(self):
        object.__setattr__(self, "data", self.data.with_default("blogcatalog"))
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {METHODS}")
        if self.method in ("deepwalk", "node2vec") and self.walk.kind != self.method:
            raise ValueError(
                f"method {self.method!r} needs walk.kind={self.method!r}, got {self.walk.kind!r}"
            )
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.walk.walk_length < 2:
            raise ValueError(
                f"walk_length must be >= 2 to train (a walk of one node has no pairs), "
                f"got {self.walk.walk_length}"
            )
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative, got {self.seed}")
        p = self.parts  # a NumPy integer is taken here (sweeps index their counts)
        check_int("parts", int(p) if isinstance(p, np.integer) else p, 1)

    @property
    def uses_feedback(self) -> bool:
        return self.method == "felog"

    def replace(self, **changes) -> EmbedConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain tables (what :meth:`from_dict` and a config file read): the sync
        as ``{kind: fields}``, an absent FaBC or pipeline as None."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in d.items()}
        if self.sync is not None:
            out["sync"] = {sync_key(self.sync): dataclasses.asdict(self.sync)}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EmbedConfig:
        """An :class:`EmbedConfig` from tables as :meth:`to_dict` writes them (``compress`` and
        ``pipeline`` present: FaBC on / the given schedule; ``sync`` as ``{"hotspot" | "random"
        | "all": fields}``); fields left out keep the defaults (DeepWalk's published settings).
        An unknown key or a value out of range raises ``ValueError`` naming the key."""
        convert = {
            "compress": lambda v, where: _optional(FabcConfig, v, where),
            "pipeline": lambda v, where: _optional(PipelineConfig, v, where),
            "sync": _sync_from_dict,
        }
        d = dict(d)
        method = d.get("method", "felog")
        walk = d.get("walk", {})
        if isinstance(walk, dict) and "kind" not in walk:  # the walker the method needs
            d["walk"] = {**walk, "kind": walk_kind(method)}
        return from_dict(cls, d, "config", convert=convert)


def load_embed_config(path: str | Path) -> EmbedConfig:
    """Reads an :class:`EmbedConfig` from a ``.json`` or ``.toml`` file
    (:meth:`EmbedConfig.from_dict`; e.g. ``experiments/configs/embed/astroph_felog.toml``).
    An unreadable or malformed file, or an unknown or out-of-range key, raises ``ValueError``
    naming the file and the key."""
    d = read_config_file(path)
    try:
        return EmbedConfig.from_dict(d)
    except ValueError as e:
        raise ValueError(f"config file {path}: {e}") from e


def _optional(cls, value, where: str):
    return None if value is None else from_dict(cls, value, where)


def _sync_from_dict(value, where: str):
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in SYNC_TYPES:
        raise ValueError(
            f"{where} must be a table with one of the sections {sorted(SYNC_TYPES)} "
            f"(e.g. [sync.hotspot]), got {value!r}"
        )
    ((kind, fields),) = value.items()
    return from_dict(SYNC_TYPES[kind], fields or {}, f"{where}.{kind}")


def walk_kind(method: Method) -> str:
    """The walker a method starts with: node2vec walks for ``node2vec``, else DeepWalk's."""
    return "node2vec" if method == "node2vec" else "deepwalk"


def published_config(method: Method = "felog", **changes) -> EmbedConfig:
    """DeepWalk's published settings (:class:`EmbedConfig`'s own defaults) with the walker
    ``method`` needs."""
    return EmbedConfig(method=method, walk=WalkConfig(kind=walk_kind(method))).replace(**changes)


def cpu_config(method: Method = "felog", **changes) -> EmbedConfig:
    """The CPU-sized configuration of the experiments (walk length 40, window 5, 10 rounds of
    one walk per node)."""
    cfg = EmbedConfig(
        method=method,
        walk=WalkConfig(kind=walk_kind(method), walk_length=40, walks_per_node=1),
        sgns=SkipGramConfig(window=5),
        rounds=10,
    )
    return cfg.replace(**changes)


def gpu_config(method: Method = "felog", **changes) -> EmbedConfig:
    """The published settings with accelerator-sized steps: 16,384 pairs per device per step,
    negatives shared by groups of 8 pairs, and a row cap of 16 (at 16 times the default batch a
    frequent row's count per step is about 16 times larger; experiments/README.md, "Large
    batches")."""
    cfg = published_config(method)
    sgns = dataclasses.replace(cfg.sgns, batch_size=16384, shared_negatives=8, row_cap=16)
    return cfg.replace(sgns=sgns).replace(**changes)


@dataclasses.dataclass
class EmbedResult:
    """What :func:`embed` returns.

    Attributes:
      syn0: ``f32[N, d]`` input vectors (the embedding), after a final full average.
      syn1: ``f32[N, d]`` output (context) vectors.
      rounds: per-round log.
      stop_reason: ``"max_rounds"``, ``"active_set_empty"``, ``"stop_ratio"``,
        ``"unhealthy"`` (a round left its healthy range under ``health.action="stop"``) or
        ``"non_finite_loss"``.
      seconds: wall time of the round loop (compilation excluded; with a pipelined schedule,
        less than the sum of the operators' times).
      seconds_compile: compile time before the first round.
      snapshots: ``{r: f32[N, d]}`` input vectors after round ``r``, for the rounds asked for.
      elapsed: ``{r: seconds}`` wall time from the start of the round loop to the end of round
        ``r`` (rounds run by this call), for time-to-quality curves.
      trace: every operator's :class:`~jaxgraph.embed.pipeline.Span` (this process's rounds).
    """

    syn0: np.ndarray
    syn1: np.ndarray
    rounds: list[RoundLog]
    stop_reason: str
    seconds: float
    seconds_compile: float
    snapshots: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    elapsed: dict[int, float] = dataclasses.field(default_factory=dict)
    trace: list[Span] = dataclasses.field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.rounds)

    @property
    def pairs(self) -> int:
        return sum(r.pairs for r in self.rounds)

    def summary(self) -> dict[str, Any]:
        rounds = self.rounds
        return {
            "rounds": len(self.rounds),
            "stop_reason": self.stop_reason,
            "seconds": self.seconds,
            "seconds_compile": self.seconds_compile,
            "walks": sum(r.walks for r in self.rounds),
            "tokens": self.tokens,
            "pairs": self.pairs,
            "pairs_per_s": self.pairs / max(sum(r.seconds_train for r in self.rounds), 1e-9),
            "host_to_device_bytes": sum(r.walk_bytes_sent + r.train_input_bytes for r in rounds),
        }


def embed(
    config: EmbedConfig,
    graph: Graph | None = None,
    *,
    mesh: Mesh | None = None,
    log=None,
    snapshot_rounds: tuple[int, ...] = (),
    checkpoint_dir: str | Path | None = None,
    stop=None,
) -> EmbedResult:
    """Trains node embeddings with ``config.method`` (see the module docstring), on the
    schedule of ``config.pipeline`` (:mod:`jaxgraph.embed.pipeline`).

    Args:
      graph: walks follow out-edges; ``None`` loads ``config.data``.
      mesh: a 1-D mesh of ``config.parts`` devices (``None``: the first ``config.parts``).
      log: optional callable receiving each :class:`RoundLog` as it completes.
      snapshot_rounds: rounds after which to keep a copy of the input vectors (not timed).
      checkpoint_dir: write each round's corpus and train state there; a directory holding
        state checkpoints of the same run is resumed after its last complete round.
      stop: an optional ``threading.Event``; setting it stops the run
        (:class:`~jaxgraph.embed.pipeline.PipelineStopped`).

    Raises:
      ValueError: the graph has no edge (no walk can train anything), or ``mesh`` does not
        have ``config.parts`` devices.
      CheckpointError: a checkpoint in ``checkpoint_dir`` is corrupt or from another run.
    """
    if jax.process_count() > 1:
        # Every process computes the same host-side corpus, pairs and sync selections, so the
        # device programs line up; a timing-dependent schedule or a shared checkpoint would not.
        if config.pipeline is not None and config.pipeline.mode == "overlapped":
            raise ValueError(
                "a multi-process embedding run needs a reproducible schedule: pipeline mode "
                "'sequential' or 'deterministic', not 'overlapped'"
            )
        if checkpoint_dir is not None:
            raise ValueError("checkpoints of multi-process embedding runs are not supported")
    if mesh is None:
        from jaxgraph.mesh import make_mesh

        mesh = make_mesh(config.parts)
    elif mesh.size != config.parts:
        raise ValueError(
            f"the mesh has {mesh.size} devices but config.parts is {config.parts}; "
            "set parts to the mesh's size (or pass no mesh)"
        )
    if graph is None:
        graph = load_graph(config.data, seed=config.seed)
    csr = out_csr(graph)
    active = initial_active_set(csr[0])
    if active.size == 0:
        raise ValueError(f"graph {graph.name!r} has no edge: there is nothing to embed")
    sgns = config.sgns
    if sgns.lr_schedule == "global" and sgns.schedule_rounds is None:
        sgns = dataclasses.replace(sgns, schedule_rounds=config.rounds)
    degrees = np.diff(csr[0]).astype(np.int64)
    trainer = SkipGramTrainer(
        graph.num_nodes, sgns, mesh, seed=config.seed, degrees=degrees, sync=config.sync
    )
    codec = None
    if config.compress is not None:
        local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        codec = WalkCodec(config.compress, device=local[0])  # decodes on this process
    seconds_compile = trainer.compile()
    runner = RoundRunner(csr, config, trainer, codec, active, checkpoint_dir)
    stopped = False
    if checkpoint_dir is not None and (last := latest_state(checkpoint_dir)) is not None:
        stopped = runner.restore(last)
    snapshots: dict[int, np.ndarray] = {}
    elapsed: dict[int, float] = {}

    def after_round(entry: RoundLog) -> None:
        elapsed[entry.round] = time.perf_counter() - t0
        if log is not None:
            log(entry)
        if entry.round in snapshot_rounds:
            snapshots[entry.round] = trainer.input_vectors().copy()

    runner.after_round = after_round
    t0 = time.perf_counter()
    if not stopped:
        run_rounds(runner, stop=stop)
    seconds = time.perf_counter() - t0
    syn0, syn1 = trainer.embeddings()
    return EmbedResult(
        syn0=syn0,
        syn1=syn1,
        rounds=runner.rounds,
        stop_reason=runner.stop_reason,
        seconds=seconds,
        seconds_compile=seconds_compile,
        snapshots=snapshots,
        elapsed=elapsed,
        trace=runner.spans,
    )


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """``np.save`` made atomic (see :func:`atomic_write_bytes`)."""
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    atomic_write_bytes(path, buf.getvalue())


def save_nodes(path: str | Path, ids: np.ndarray) -> None:
    """The node id of every embedding row, one per line (atomic)."""
    atomic_write_text(path, "".join(f"{i}\n" for i in ids.tolist()))


def save_json(path: str | Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, default=_json_default) + "\n").encode())


def save_round_log(path: str | Path, rounds: list[RoundLog]) -> None:
    """One JSON object per round (JSON Lines), written atomically."""
    text = "".join(json.dumps(dataclasses.asdict(r), default=_json_default) + "\n" for r in rounds)
    atomic_write_bytes(path, text.encode())


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"cannot serialise {type(x).__name__}")
