"""Typed, frozen run configurations for full-graph training.

A config file (``--config path.json`` or ``.toml``) holds the same nested sections as
:class:`TrainConfig`; command-line flags override it. Example (CPU-sized)::

    jaxgraph train --dataset cora --model gcn --parts 8 --method vanilla --epochs 200
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from jaxgraph.comm.adaptive import AssignConfig


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which graph to train on.

    ``name`` is a bundled dataset (see ``jaxgraph datasets``) or a synthetic generator:
    ``sbm`` (degree-corrected SBM with class-dependent features) or ``rmat``.
    """

    name: str = "cora"
    num_nodes: int = 10_000
    avg_degree: float = 20.0
    num_features: int = 128
    num_classes: int = 8
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str = "gcn"
    hidden: int = 64
    num_layers: int = 2
    dropout: float = 0.5
    layer_norm: bool = False
    heads: int = 4


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    learning_rate: float = 0.01
    weight_decay: float = 5e-4


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A full-graph training run.

    Attributes:
      parts: number of graph parts = mesh size.
      partition: ``metis``, ``random`` or ``contiguous``.
      method: communication strategy (``vanilla``, ``quant-8``, ``quant-4``, ``quant-2``,
        ``quant-32``, ``quant-random``, ``adaqp``).
      assign_period: epochs per bit-assignment period of the quantized methods
        (0 = ``epochs // 5``, as AdaQP).
      assign: settings of the adaptive bit assignment (method ``adaqp``).
      exchange_chunks: layout of the quantized exchange under changing assignments
        (``quant-random``, ``adaqp``): ``J >= 1`` keeps one layout, and one compiled step, for
        the whole run, every round's transfer padded to a multiple of ``1 / 2^J`` of the
        round's 8-bit capacity; ``0`` sizes the buffers exactly for each assignment and
        compiles a new step for each (see :func:`jaxgraph.comm.quantized.bucket_state`).
        ``None``: :func:`jaxgraph.comm.quantized.default_chunks` for the backend (chunked on
        CPU, exact on accelerators).
      compile_ahead: compile the step of an assignment the strategy has already decided
        (``quant-random``'s next draw, ``adaqp`` with ``assign.lookahead``) in a background
        thread while the current one trains, instead of at the period boundary.
      eval_every: evaluate every this many epochs (and at the last epoch).
      checkpoint_every: write a checkpoint every this many epochs (0 = never).
      workdir: where metrics (``metrics.jsonl``) and checkpoints go (``None`` = nowhere).
    """

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optim: OptimConfig = OptimConfig()
    assign: AssignConfig = AssignConfig()
    parts: int = 8
    partition: str = "metis"
    method: str = "vanilla"
    assign_period: int = 0
    exchange_chunks: int | None = None
    compile_ahead: bool = True
    epochs: int = 200
    seed: int = 0
    eval_every: int = 1
    checkpoint_every: int = 0
    workdir: str | None = None
    progress: bool = True

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return _from_dict(cls, d, "config")


def load_config(path: str | Path) -> TrainConfig:
    """Reads a ``.json`` or ``.toml`` config file.

    Raises:
      ValueError: for an unknown file type, malformed content or an unknown key (the message
        names the file and the key).
    """
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read config file {path}: {e}") from e
    try:
        if path.suffix == ".json":
            d = json.loads(text)
        elif path.suffix == ".toml":
            d = tomllib.loads(text.decode())
        else:
            raise ValueError(f"config file {path} must end in .json or .toml")
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"config file {path} is malformed: {e}") from e
    try:
        return TrainConfig.from_dict(d)
    except ValueError as e:
        raise ValueError(f"config file {path}: {e}") from e


def _from_dict(cls, d: dict[str, Any], where: str):
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a table/object, got {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where}; known: {sorted(fields)}")
    kwargs = {}
    for k, v in d.items():
        default = fields[k].default
        if dataclasses.is_dataclass(default):
            kwargs[k] = _from_dict(type(default), v, f"{where}.{k}")
        else:
            kwargs[k] = v
    return cls(**kwargs)
