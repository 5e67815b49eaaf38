"""Typed, frozen run configurations for full-graph training.

A config file (``--config path.json`` or ``.toml``) holds the same nested sections as
:class:`TrainConfig` (``parts = 4``, ``[data]``, ``[method.adaqp]``: :mod:`jaxgraph.train.methods`);
command-line options override it. Every field is checked on construction; an error names the
field, its allowed values and the value given.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jaxgraph.configfile import check, check_int, from_dict, is_real, load_config_file
from jaxgraph.data.source import DataConfig
from jaxgraph.options import flag
from jaxgraph.partition.partitioners import METHODS as PARTITIONERS
from jaxgraph.train.methods import Method, Vanilla, method_from_dict, parse_method


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The GNN.

    Attributes:
      name: the model: gcn, sage (mean aggregation), gat or a registered one.
      hidden: the width of every hidden layer.
      num_layers: the number of graph layers.
      dropout: the dropout rate of every layer's input.
      layer_norm: normalize each hidden layer's output.
      heads: the attention heads of gat (and of a registered model with a heads field).
    """

    name: str = flag("--model", "gcn")
    hidden: int = 64
    num_layers: int = flag("--layers", 2)
    dropout: float = 0.5
    layer_norm: bool = False
    heads: int = 4

    def __post_init__(self):
        from jaxgraph.models import MODEL_TYPES as models  # built in and registered

        check("model.name", self.name in models, self.name, f"one of {', '.join(models)}")
        for name in ("hidden", "num_layers", "heads"):
            check_int(f"model.{name}", getattr(self, name), 1)
        d = self.dropout
        check("model.dropout", is_real(d) and 0 <= d < 1, d, "a number in [0, 1)")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Adam with L2 weight decay.

    Attributes:
      learning_rate: Adam's step size.
      weight_decay: the L2 penalty added to the gradient.
    """

    learning_rate: float = flag("--lr", 0.01)
    weight_decay: float = 5e-4

    def __post_init__(self):
        lr, wd = self.learning_rate, self.weight_decay
        check("optim.learning_rate", is_real(lr) and lr > 0, lr, "a finite number > 0")
        check("optim.weight_decay", is_real(wd) and wd >= 0, wd, "a finite number >= 0")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A full-graph training run.

    Attributes:
      data: the graph (default cora).
      model: the GNN.
      optim: the optimizer.
      parts: number of graph parts = mesh size.
      partition: ``metis``, ``random`` or ``contiguous``.
      method: the communication method by name or short spelling (in code, a typed
        :class:`~jaxgraph.train.methods.Method` such as ``AdaQP(period=10)``; a spelling is
        parsed on construction by :func:`~jaxgraph.train.methods.parse_method`).
      epochs: the number of training epochs.
      seed: seeds the parameters, dropout and the stochastic messages.
      eval_every: evaluate every this many epochs (and at the last epoch).
      checkpoint_every: write a checkpoint every this many epochs (0 = never).
      workdir: where metrics (``metrics.jsonl``) and checkpoints go (``None`` = nowhere).
      progress: show a progress bar.
      allow_nonfinite: keep training through a non-finite loss (to study divergence);
        by default the run stops at that epoch with an error.
    """

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    method: Method = Vanilla()
    parts: int = 8
    partition: str = "metis"
    epochs: int = 200
    seed: int = 0
    eval_every: int = 1
    checkpoint_every: int = 0
    workdir: str | None = None
    progress: bool = True
    allow_nonfinite: bool = False

    def __post_init__(self):
        object.__setattr__(self, "method", parse_method(self.method))
        object.__setattr__(self, "data", self.data.with_default("cora"))
        for name, low in (("parts", 1), ("epochs", 1), ("seed", 0), ("eval_every", 1)):
            check_int(name, getattr(self, name), low)
        check_int("checkpoint_every", self.checkpoint_every, 0, what=" (0: never)")
        part = self.partition
        check("partition", part in PARTITIONERS, part, f"one of {', '.join(PARTITIONERS)}")
        if self.data.graph is None and self.data.name in ("sbm", "rmat"):
            n = self.data.num_nodes
            check_int(
                "parts", self.parts, 1, n, f" (at most data.num_nodes = {n}, one node per part)"
            )

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "method": self.method.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return from_dict(cls, d, "config", convert={"method": lambda v, _: method_from_dict(v)})


def load_config(path: str | Path) -> TrainConfig:
    """Reads a ``.json`` or ``.toml`` config file (a ValueError names the file and the key)."""
    return load_config_file(path, TrainConfig.from_dict)
