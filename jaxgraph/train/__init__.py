"""Full-graph distributed training: state, programs, loop, checkpoints, configs."""

from jaxgraph.train.checkpoint import CheckpointError, restore_checkpoint, save_checkpoint
from jaxgraph.train.config import DataConfig, ModelConfig, OptimConfig, TrainConfig, load_config
from jaxgraph.train.loop import METHODS, load_graph, make_optimizer, make_strategy, train
from jaxgraph.train.state import Trainer, TrainState

__all__ = [
    "METHODS",
    "CheckpointError",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "TrainState",
    "Trainer",
    "load_config",
    "load_graph",
    "make_optimizer",
    "make_strategy",
    "restore_checkpoint",
    "save_checkpoint",
    "train",
]
