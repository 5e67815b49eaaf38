"""Full-graph distributed training: state, programs, loop, checkpoints, configs."""

from jaxgraph.train.build import (
    Run,
    assemble_run,
    build_run,
    load_graph,
    make_optimizer,
    make_strategy,
)
from jaxgraph.train.checkpoint import CheckpointError, restore_checkpoint, save_checkpoint
from jaxgraph.train.config import DataConfig, ModelConfig, OptimConfig, TrainConfig, load_config
from jaxgraph.train.loop import NonFiniteLoss, train
from jaxgraph.train.methods import (
    CAGNET,
    AdaQP,
    Method,
    PipeGCN,
    Quantized,
    Sancus,
    SkipG,
    Vanilla,
    parse_method,
    register_method,
)
from jaxgraph.train.state import Trainer, TrainState

__all__ = [
    "CAGNET",
    "AdaQP",
    "Method",
    "PipeGCN",
    "Quantized",
    "Sancus",
    "SkipG",
    "Vanilla",
    "parse_method",
    "register_method",
    "CheckpointError",
    "DataConfig",
    "ModelConfig",
    "NonFiniteLoss",
    "OptimConfig",
    "Run",
    "TrainConfig",
    "TrainState",
    "Trainer",
    "assemble_run",
    "build_run",
    "load_config",
    "load_graph",
    "make_optimizer",
    "make_strategy",
    "restore_checkpoint",
    "save_checkpoint",
    "train",
]
