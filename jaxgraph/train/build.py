"""Building a run: a :class:`Run` (the graph, plan, strategy, model, trainer, placed shards and
initial state that :func:`jaxgraph.train.train` loops over) from a
:class:`~jaxgraph.train.config.TrainConfig` (:func:`build_run`) or from parts made by hand
(:func:`assemble_run`). A CPU-sized run::

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

from jaxgraph.comm.strategy import CommStrategy, Controller
from jaxgraph.data.source import load_graph
from jaxgraph.distributed import check_same_on_all_processes
from jaxgraph.graph import Graph
from jaxgraph.mesh import make_mesh
from jaxgraph.models import make_model
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.shard import GraphShard
from jaxgraph.train.config import OptimConfig, TrainConfig
from jaxgraph.train.methods import AdaQP, Method, RunInfo, parse_method
from jaxgraph.train.state import Trainer, TrainState


def make_strategy(
    method: Method | str, *, epochs: int = 200, seed: int = 0, model: str = "gcn"
) -> CommStrategy:
    """The communication strategy of ``method`` (a typed method or its short spelling): the
    method itself, its own exchange, checked against a run of ``epochs`` epochs of ``model``."""
    method = parse_method(method)
    method.check_run(RunInfo(epochs, seed, model))
    return method


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
    """Adam with L2 weight decay added to the gradient (``torch.optim.Adam(weight_decay=)``
    semantics, as in the reference GCN setup)."""
    parts = [optax.add_decayed_weights(cfg.weight_decay)] if cfg.weight_decay else []
    return optax.chain(*parts, optax.adam(cfg.learning_rate))


@dataclasses.dataclass
class Run:
    """An assembled run (:func:`build_run`, :func:`assemble_run`).

    Attributes:
      graph: the whole graph (host).
      plan: the halo or block-row plan of the partition (host).
      strategy: the communication strategy (its device half: the exchange).
      controller: the strategy's host half, bound to ``plan`` and the layer widths.
      model: the flax model.
      trainer: the jitted programs on the mesh.
      shards: the plan's per-device shards, placed on the mesh.
      state: the initial train state (parameters from the seed, the controller's initial
        ``comm_state``).
    """

    graph: Graph
    plan: Any
    strategy: CommStrategy
    controller: Controller
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
    cost=None,
    run: RunInfo | None = None,
    **trainer_kw,
) -> Run:
    """A :class:`Run` from parts made by hand.

    Args:
      graph, plan, strategy, model: the parts (``plan`` of the layout ``strategy.layout``).
      mesh: the mesh, or its number of devices (a 1-D mesh of the first devices).
      optimizer: default Adam (:class:`OptimConfig`'s defaults).
      split: shards with the central/marginal edge split (:meth:`GraphShard.from_plan`).
      cost, run: a cost model measured on the mesh, and the run's length, seed and model
        (default: 200 epochs, ``seed``, GCN), for the controller.
      trainer_kw: further :class:`Trainer` arguments (``local_grad_clip``: the strategy's).
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
    dims = model.layer_input_dims(graph.num_features)
    controller = strategy.controller(plan, dims, cost=cost, run=run or RunInfo(seed=seed))
    state = trainer.create_state(jax.random.key(seed), graph.num_features, controller.init_state())
    return Run(graph, plan, strategy, controller, model, trainer, shards, state)


def build_run(config: TrainConfig, graph: Graph | None = None) -> Run:
    """The run ``config`` describes, on ``graph`` or :func:`load_graph` of ``config.data`` (a
    ValueError for an unknown method or dataset, or more parts than nodes)."""
    method = strategy = config.method  # a method is its own exchange
    run = RunInfo(config.epochs, config.seed, config.model.name)
    method.check_run(run)  # before any data is read
    graph = load_graph(config.data, split=True) if graph is None else graph
    if config.parts > graph.num_nodes:
        raise ValueError(
            f"cannot split {graph.num_nodes} nodes of {graph.name!r} into {config.parts} parts"
        )
    mesh = make_mesh(config.parts)
    cost = None
    if isinstance(method, AdaQP) and method.assign.interconnect == "measure":
        from jaxgraph.comm.costmodel import measure

        # Transfer costs timed on this mesh: payloads from 64 KiB to 4 MiB per device pair.
        cost = measure(mesh, (1 << 16, 1 << 20, 1 << 22), repeats=3)
    parts = partition_graph(graph, config.parts, method=config.partition, seed=config.seed)
    check_same_on_all_processes("the graph or its partition", graph.indptr, graph.indices, parts)
    if strategy.layout == "block":  # CAGNET / Sancus / SkipG: all blocks
        from jaxgraph.partition.blockhalo import build_block_halo_plan

        plan = build_block_halo_plan(graph, parts, num_parts=config.parts)
    else:
        plan = build_halo_plan(graph, parts, num_parts=config.parts)
    model_kw = dataclasses.asdict(config.model)  # make_model's arguments, by name
    model = make_model(model_kw.pop("name"), out_dim=graph.num_classes, **model_kw)
    opt = make_optimizer(config.optim)
    return assemble_run(
        graph, plan, strategy, model, mesh, seed=config.seed, optimizer=opt, cost=cost, run=run
    )
