"""Building a run: the one place where a config (or a test's hand-made parts) becomes a
:class:`Run`, the graph, plan, strategy, model, trainer, placed shards and initial state that
:func:`jaxgraph.train.train` loops over.

:func:`build_run` derives every part from a :class:`~jaxgraph.train.config.TrainConfig`;
:func:`assemble_run` puts together parts made by hand (tests, experiment scripts that pick a
plan or a strategy themselves). Both end in the same assembly: a :class:`Trainer` on the mesh,
the plan's shards placed on it, and a state holding the strategy's initial ``comm_state``.

A CPU-sized run::

    run = build_run(TrainConfig(data=DataConfig("cora"), parts=4, epochs=2))
    state, metrics = run.trainer.train_step(run.state, run.shards)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import optax
from jax.sharding import Mesh

from jaxgraph.comm.adaptive import AssignConfig
from jaxgraph.comm.strategy import CommStrategy, GraphShard, Vanilla
from jaxgraph.distributed import check_same_on_all_processes
from jaxgraph.graph import Graph
from jaxgraph.mesh import make_mesh
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.train.config import DataConfig, OptimConfig, TrainConfig
from jaxgraph.train.state import Trainer, TrainState

METHODS = ("vanilla", "quant-8", "quant-4", "quant-2", "quant-32", "quant-random", "adaqp")
# 1D block-row methods (jaxgraph.comm.stale): Sancus takes any
# "sancus-<e|a|h><bound>[-w<warmup>][-clip<th>]"; these are examples.
METHODS += ("cagnet", "sancus-e1", "sancus-a1", "sancus-h0.04", "skipg")
# Stale halo exchange on the ring (jaxgraph.comm.pipegcn).
METHODS += ("pipegcn", "pipegcn-f", "pipegcn-g", "pipegcn-fg", "pipegcn-sync")
# The aggregation whose coefficients weigh a message in the adaptive assignment; GAT's
# attention coefficients are data-dependent and take the mean aggregator's as a proxy.
_MODEL_NORM = {"gcn": "gcn", "sage": "mean", "gat": "mean"}
SYNTHETIC = ("sbm", "rmat")


def make_strategy(
    method: str,
    *,
    period: int = 40,
    seed: int = 0,
    model: str = "gcn",
    assign: AssignConfig | None = None,
    chunks: int = 0,
) -> CommStrategy:
    """The communication strategy named ``method`` (one of :data:`METHODS`).

    ``pipegcn[-f|-g|-fg|-sync]`` is PipeGCN (:mod:`jaxgraph.comm.pipegcn`); ``cagnet``,
    ``sancus-...`` and ``skipg[-<Δ>][-w<warmup>]`` run on the block-row layout
    (:func:`jaxgraph.comm.stale.make_block_strategy`).

    ``quant-<b>`` sends every halo message as ``b``-bit codes (``quant-32``: uncompressed
    through the same path); ``quant-random`` draws a width from ``assign.widths`` (default
    {2, 4, 8}) per message every ``period`` epochs; ``adaqp`` re-solves the widths every
    ``period`` epochs from traced messages (settings ``assign``; ``model`` names the
    aggregation that weighs them). For these two, ``chunks`` chooses the layout of the
    exchange (:func:`jaxgraph.comm.quantized.bucket_state`): ``0`` re-jits the step for every
    new assignment, ``J >= 1`` compiles one step for all of them.
    """
    if method == "vanilla":
        return Vanilla()
    if method == "adaqp":
        from jaxgraph.comm.adaptive import Adaptive

        return Adaptive(
            assign or AssignConfig(),
            period=period,
            norm=_MODEL_NORM.get(model, "mean"),
            seed=seed,
            chunks=chunks,
        )
    if method.startswith("quant-") and method in METHODS:
        from jaxgraph.comm.quantized import Quantized

        bits = method.removeprefix("quant-")
        if bits != "random":  # a fixed width ignores `chunks` and the candidate widths
            return Quantized(int(bits), period=period, seed=seed)
        widths = (assign or AssignConfig()).widths
        return Quantized(bits, period=period, seed=seed, chunks=chunks, widths=widths)
    if method.startswith("pipegcn"):
        from jaxgraph.comm.pipegcn import make_pipegcn

        return make_pipegcn(method)
    if method == "cagnet" or method.startswith(("sancus-", "skipg")):
        from jaxgraph.comm.stale import make_block_strategy

        return make_block_strategy(method)
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def exchange_chunks(config: TrainConfig) -> int:
    """The exchange layout in force: ``exchange_chunks``, or the backend's default."""
    if config.exchange_chunks is not None:
        return config.exchange_chunks
    from jaxgraph.comm.quantized import default_chunks

    return default_chunks()


def assignment_period(config: TrainConfig) -> int:
    """Epochs per bit-assignment period: ``assign_period``, or ``epochs // 5`` (AdaQP)."""
    return config.assign_period or max(config.epochs // 5, 1)


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
    """Adam with L2 weight decay added to the gradient (``torch.optim.Adam(weight_decay=)``
    semantics, as in the reference GCN setup)."""
    parts = [optax.add_decayed_weights(cfg.weight_decay)] if cfg.weight_decay else []
    return optax.chain(*parts, optax.adam(cfg.learning_rate))


def load_graph(cfg: DataConfig) -> Graph:
    """A bundled dataset by name, or a synthetic graph (``sbm``, ``rmat``) of the given size."""
    from jaxgraph.data import DATASETS, dc_sbm, load_dataset, rmat

    if cfg.name == "sbm":
        return dc_sbm(
            cfg.num_nodes,
            cfg.num_classes,
            cfg.avg_degree,
            num_features=cfg.num_features,
            seed=cfg.seed,
        )
    if cfg.name == "rmat":
        return rmat(
            cfg.num_nodes,
            int(cfg.num_nodes * cfg.avg_degree),
            seed=cfg.seed,
            num_features=cfg.num_features,
            num_classes=cfg.num_classes,
        )
    if cfg.name not in DATASETS:
        raise ValueError(
            f"unknown dataset {cfg.name!r}; choose one of {', '.join(DATASETS + SYNTHETIC)}"
        )
    return load_dataset(cfg.name, seed=cfg.seed)


@dataclasses.dataclass
class Run:
    """An assembled run (:func:`build_run`, :func:`assemble_run`).

    Attributes:
      graph: the whole graph (host).
      plan: the halo or block-row plan of the partition (host).
      strategy: the communication strategy.
      model: the flax model.
      trainer: the jitted programs on the mesh.
      shards: the plan's per-device shards, placed on the mesh.
      state: the initial train state (parameters from the seed, the strategy's initial
        ``comm_state``).
    """

    graph: Graph
    plan: Any
    strategy: CommStrategy
    model: nn.Module
    trainer: Trainer
    shards: GraphShard
    state: TrainState

    @property
    def layer_dims(self) -> tuple[int, ...]:
        """The width of the rows each layer exchanges."""
        return self.model.layer_input_dims(self.graph.num_features)

    @property
    def mesh(self) -> Mesh:
        return self.trainer.mesh


def assemble_run(
    graph: Graph,
    plan,
    strategy: CommStrategy,
    model: nn.Module,
    mesh: Mesh | int,
    *,
    seed: int = 0,
    optimizer: optax.GradientTransformation | None = None,
    split: bool = True,
    **trainer_kw,
) -> Run:
    """A :class:`Run` from parts made by hand.

    Args:
      graph, plan, strategy, model: the parts (``plan`` of ``graph``'s partition, of the
        layout ``strategy.layout`` names).
      mesh: the mesh, or its number of devices (a 1-D mesh of the first devices).
      seed: draws the initial parameters.
      optimizer: default Adam (:class:`OptimConfig`'s defaults).
      split: shards with the central/marginal edge split (:meth:`GraphShard.from_plan`).
      trainer_kw: further :class:`Trainer` arguments (``local_grad_clip`` defaults to the
        strategy's).
    """
    mesh = make_mesh(mesh) if isinstance(mesh, int) else mesh
    trainer_kw.setdefault("local_grad_clip", strategy.local_grad_clip)
    trainer = Trainer(
        model,
        optimizer or make_optimizer(OptimConfig()),
        strategy,
        mesh,
        num_train=int(graph.train_mask.sum()),
        **trainer_kw,
    )
    shards = trainer.place_shards(GraphShard.from_plan(graph, plan, split=split))
    comm = strategy.init_state(plan, model.layer_input_dims(graph.num_features))
    state = trainer.create_state(jax.random.key(seed), graph.num_features, comm)
    return Run(graph, plan, strategy, model, trainer, shards, state)


def build_run(config: TrainConfig, graph: Graph | None = None) -> Run:
    """The run ``config`` describes: its graph (``graph``, or :func:`load_graph` of
    ``config.data``), partition, plan, strategy, model, trainer, placed shards and initial
    state.

    Raises:
      ValueError: an unknown method or dataset, or more parts than nodes.
    """
    strategy = make_strategy(
        config.method,
        period=assignment_period(config),
        seed=config.seed,
        model=config.model.name,
        assign=config.assign,
        chunks=exchange_chunks(config),
    )
    graph = load_graph(config.data) if graph is None else graph
    if config.parts > graph.num_nodes:
        raise ValueError(
            f"cannot split {graph.num_nodes} nodes of {graph.name!r} into {config.parts} parts"
        )
    mesh = make_mesh(config.parts)
    if config.method == "adaqp" and config.assign.interconnect == "measure":
        from jaxgraph.comm.costmodel import measure

        # Transfer costs timed on this mesh: payloads from 64 KiB to 4 MiB per device pair.
        strategy.cost = measure(mesh, (1 << 16, 1 << 20, 1 << 22), repeats=3)
    parts = partition_graph(graph, config.parts, method=config.partition, seed=config.seed)
    check_same_on_all_processes("the graph or its partition", graph.indptr, graph.indices, parts)
    if strategy.layout == "block":  # CAGNET / Sancus / SkipG: all blocks
        from jaxgraph.partition.blockhalo import build_block_halo_plan

        plan = build_block_halo_plan(graph, parts, num_parts=config.parts)
    else:
        plan = build_halo_plan(graph, parts, num_parts=config.parts)
    m = config.model
    model = make_model(
        m.name,
        hidden=m.hidden,
        out_dim=graph.num_classes,
        num_layers=m.num_layers,
        dropout=m.dropout,
        layer_norm=m.layer_norm,
        heads=m.heads,
    )
    return assemble_run(
        graph, plan, strategy, model, mesh, seed=config.seed, optimizer=make_optimizer(config.optim)
    )
