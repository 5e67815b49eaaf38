"""The control layer of full-graph training: data, plan, mesh, loop, logging, checkpoints."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxgraph.atomic import atomic_write_text
from jaxgraph.distributed import check_same_on_all_processes, is_primary
from jaxgraph.graph import Graph
from jaxgraph.train.build import Run, build_run, load_graph, make_optimizer, make_strategy
from jaxgraph.train.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    read_header,
    read_leaves,
    restore_checkpoint,
    save_checkpoint,
)
from jaxgraph.train.config import TrainConfig
from jaxgraph.train.state import counts_to_score


@dataclasses.dataclass
class _Best:
    epoch: int = 0
    val: float = -math.inf
    train: float = math.nan
    test: float = math.nan


def train(config: TrainConfig, *, graph: Graph | None = None) -> dict[str, Any]:
    """Trains ``config`` end to end and returns the summary (also the last metrics line).

    Metrics go to ``<workdir>/metrics.jsonl`` (one JSON object per epoch) and checkpoints to
    ``<workdir>/checkpoints``. If the workdir already holds a checkpoint of the same run, the
    run resumes from it and reproduces exactly the metrics an uninterrupted run would log.

    Multi-process runs (:mod:`jaxgraph.distributed`): every process calls this with the same
    config and returns the summary; process 0 writes metrics and summary, every process its
    own shards of each checkpoint (the workdir must be on a file system all of them see).
    """
    run = build_run(config, graph)
    graph, controller, trainer, shards = run.graph, run.controller, run.trainer, run.shards
    workdir = Path(config.workdir) if config.workdir else None
    ckpt_dir = workdir / "checkpoints" if workdir else None
    state, start_epoch, best = _resume(run, config, ckpt_dir)
    primary = is_primary()  # writes metrics, summary and checkpoints
    metrics_path = workdir / "metrics.jsonl" if workdir and primary else None
    if metrics_path is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        _truncate_metrics(metrics_path, start_epoch)

    t0 = time.perf_counter()
    steps = _StepCache(run, config)
    steps.step_for(state)
    eval_step = trainer.eval_step.lower(state.params, shards).compile()
    compile_time = time.perf_counter() - t0

    epoch_times, epoch_bytes, last, stopped = [], [], {}, None
    overhead = {"solve": 0.0, "rejit": 0.0}
    used_ahead = 0
    bar = tqdm(
        range(start_epoch + 1, config.epochs + 1),
        disable=not (config.progress and primary),
        desc=f"{graph.name} {config.model.name} P={config.parts} {config.method.label()}",
        unit="epoch",
    )
    for epoch in bar:
        t = time.perf_counter()
        new_comm = controller.update(state.comm_state, epoch=epoch)
        assign_log = {}
        if new_comm is not None:
            state = state.replace(comm_state=trainer.place_comm_state(new_comm))
            t_solved = time.perf_counter()
            fresh, was_ahead = steps.status(state)
            steps.step_for(state)  # a new buffer layout compiles a new step (or waits)
            assign_log = {
                "assign_time": t_solved - t,
                "rejit_time": time.perf_counter() - t_solved,
                **controller.log(epoch),
            }
            if fresh:
                assign_log["compiled_ahead"] = was_ahead
                used_ahead += was_ahead
            overhead["solve"] += assign_log["assign_time"]
            overhead["rejit"] += assign_log["rejit_time"]
        train_step = steps.step_for(state)
        t = time.perf_counter()
        state, metrics = train_step(state, shards)
        steps.compile_ahead(state, epoch)  # host work while the step runs
        metrics = jax.device_get(metrics)
        epoch_times.append(time.perf_counter() - t)
        epoch_bytes.append(float(metrics["bytes_moved"]))
        record = {
            "epoch": epoch,
            "loss": float(metrics["loss"]),
            "bytes_moved": float(metrics["bytes_moved"]),
            "epoch_time": epoch_times[-1],
            **assign_log,
        }
        if epoch % config.eval_every == 0 or epoch == config.epochs:
            counts, val_loss = jax.device_get(eval_step(state.params, shards))
            scores = {k: counts_to_score(v) for k, v in counts.items()}
            record.update(val_loss=float(val_loss), **{f"{k}_score": v for k, v in scores.items()})
            if scores["val"] > best.val:
                best = _Best(epoch, scores["val"], scores["train"], scores["test"])
            bar.set_postfix(loss=f"{record['loss']:.4f}", val=f"{scores['val']:.4f}")
        if metrics_path is not None:
            with metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        finite = math.isfinite(record["loss"]) and bool(metrics["params_finite"])
        if not (config.allow_nonfinite or finite):
            stopped = epoch  # no checkpoint of this state
            last = record if math.isfinite(record["loss"]) else last
            break
        if ckpt_dir and config.checkpoint_every and epoch % config.checkpoint_every == 0:
            header = {"config": config.to_dict(), "best": dataclasses.asdict(best)}
            save_checkpoint(ckpt_dir, epoch, state, header)
        last = record
    bar.close()
    steps.close()

    wall = time.perf_counter() - t0
    summary = _summary(
        config, graph, best, last, epoch_times, epoch_bytes, overhead, wall, compile_time
    )
    summary.update(compiled_steps=len(steps.compiled), compiled_ahead=used_ahead)
    if stopped is not None:
        summary.update(stopped_at=stopped, stop_reason="non_finite_loss")
    if workdir is not None and primary:
        atomic_write_text(workdir / "summary.json", json.dumps(summary, indent=2))
    if stopped is not None:
        raise NonFiniteLoss(stopped, last)
    return summary


class NonFiniteLoss(RuntimeError):
    """The training loss, or the parameters after an update, became NaN or infinite
    (``TrainConfig.allow_nonfinite`` is off): the run stopped at that epoch, its metrics and
    summary written up to there, no checkpoint of the non-finite state."""

    def __init__(self, epoch: int, last: dict[str, Any]):  # `last`: the last finite record
        self.epoch = epoch
        finite = (
            f"the last finite loss was {last['loss']:.6g} at epoch {last['epoch']}"
            if last
            else "no epoch had a finite loss"
        )
        super().__init__(
            f"the training loss or the parameters after the update are not finite at epoch "
            f"{epoch}; {finite}. Training stopped (no checkpoint of this state was written); "
            "lower the learning rate, or set allow_nonfinite (--allow-nonfinite) to train on"
        )


class _StepCache:
    """One compiled train step per ``comm_state`` signature (e.g. per bit assignment); with the
    method's ``compile_ahead``, the next decided state's step compiles in a background thread."""

    def __init__(self, run: Run, config: TrainConfig):
        self.run, self.epochs = run, config.epochs
        self.compiled = {}
        self.ahead = {}  # signature -> Future of a step compiling in the background
        self.pool = ThreadPoolExecutor(1, "compile-ahead") if config.method.compile_ahead else None

    def _compile(self, state):
        return self.run.trainer.train_step.lower(state, self.run.shards).compile()

    def status(self, state) -> tuple[bool, bool]:
        """``(fresh, compiled ahead)``: whether ``state``'s step is not compiled yet, and
        whether it is compiling (or compiled) in the background."""
        sig = _signature(state.comm_state)
        fresh = sig not in self.compiled
        return fresh, fresh and sig in self.ahead

    def step_for(self, state):
        sig = _signature(state.comm_state)
        if sig not in self.compiled:
            future = self.ahead.pop(sig, None)
            self.compiled[sig] = future.result() if future is not None else self._compile(state)
        return self.compiled[sig]

    def compile_ahead(self, state, epoch: int) -> None:
        """Starts compiling the step of the strategy's next, already decided, state."""
        if self.pool is None:
            return
        run = self.run
        upcoming = run.controller.upcoming(state.comm_state, epoch=epoch)
        if upcoming is None or upcoming[0] > self.epochs:
            return
        placed = run.trainer.place_comm_state(upcoming[1])
        sig = _signature(placed)
        if sig not in self.compiled and sig not in self.ahead:
            # Lowered from shapes only: the buffers of `state` are donated to the next step.
            abstract = jax.tree.map(_abstract, state.replace(comm_state=placed))
            self.ahead[sig] = self.pool.submit(self._compile, abstract)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _summary(config, graph, best, last, epoch_times, epoch_bytes, overhead, wall, compile_time):
    """The run's summary (``summary.json``): best-validation scores, timings, bytes."""
    steady = epoch_times[1:] or epoch_times
    return {
        "dataset": graph.name,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "model": config.model.name,
        "parts": config.parts,
        "method": config.method.label(),
        "epochs": config.epochs,
        "best_epoch": best.epoch,
        "best_val": best.val,
        "train_at_best": best.train,
        "test_at_best": best.test,
        "final_loss": last.get("loss", math.nan),
        "median_epoch_time": statistics.median(steady) if steady else math.nan,
        "compile_time": compile_time,
        "exchange_chunks": config.method.exchange_chunks(),
        # Re-assignments: the host-side decision (traces to the host, solve, new buffers) and
        # the compilation of the step for the new layout, in seconds and as wall-clock shares.
        "assign_solve_time": overhead["solve"],
        "assign_rejit_time": overhead["rejit"],
        "assign_overhead": overhead["solve"] + overhead["rejit"],
        "assign_overhead_share": (overhead["solve"] + overhead["rejit"]) / wall
        if wall > 0
        else math.nan,
        "assign_solve_share": overhead["solve"] / wall if wall > 0 else math.nan,
        "wall_time": wall,
        "bytes_per_epoch": last.get("bytes_moved", math.nan),
        "mean_bytes_per_epoch": statistics.fmean(epoch_bytes) if epoch_bytes else math.nan,
        "metric": "micro_f1" if graph.multi_label else "accuracy",
    }


def _resume(run: Run, config: TrainConfig, ckpt_dir: Path | None):
    """``(state, completed epochs, best so far)``: the run's fresh state, or the state of the
    latest checkpoint in ``ckpt_dir`` (which must belong to the same run)."""
    path = latest_checkpoint(ckpt_dir) if ckpt_dir is not None else None
    start_epoch = 0
    if path is not None:
        header = read_header(path)
        _check_same_run(path, header["config"], config)
        start_epoch = header["epoch"]
    check_same_on_all_processes("the checkpoint to resume from", np.int64(start_epoch))
    if path is None:
        return run.state, 0, _Best()
    prefix = ".comm_state"  # the controller reads its leaves by their path below comm_state
    saved = {k.removeprefix(prefix): v for k, v in read_leaves(path, prefix).items()}
    try:
        comm = run.controller.resume(epoch=start_epoch, saved=saved)
    except ValueError as e:
        raise CheckpointError(
            f"checkpoint {path} does not match this run's {config.method.label()} state: {e} "
            "(a checkpoint of another method, or of an earlier jaxgraph whose state had other "
            "fields)"
        ) from None
    state = run.trainer.create_state(jax.random.key(config.seed), run.graph.num_features, comm)
    state, header = restore_checkpoint(path, state)
    return state, start_epoch, _Best(**header["best"])


def _abstract(x):
    """An array -> its shape, dtype and sharding (what lowering needs)."""
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x


def _signature(tree) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return (treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves))


def _check_same_run(path: Path, saved: dict[str, Any], config: TrainConfig) -> None:
    """A checkpoint may be resumed with a different epoch budget, nothing else."""
    now = json.loads(json.dumps(config.to_dict()))  # as saved: tuples read back as lists
    ignore = {"epochs", "progress", "workdir", "checkpoint_every", "eval_every"}
    diff = sorted(
        k for k in set(saved) | set(now) if k not in ignore and saved.get(k) != now.get(k)
    )
    if diff:
        raise CheckpointError(
            f"checkpoint {path} belongs to a different run: settings {diff} differ "
            f"(saved {[saved.get(k) for k in diff]}, now {[now.get(k) for k in diff]}); "
            "use another workdir or delete the checkpoints"
        )


def _truncate_metrics(path: Path, last_epoch: int) -> None:
    """Drops metric lines past the checkpoint we resume from (written before a kill)."""
    if not path.exists():
        return
    keep = [
        line
        for line in path.read_text().splitlines()
        if line.strip() and json.loads(line)["epoch"] <= last_epoch
    ]
    atomic_write_text(path, "".join(line + "\n" for line in keep))


__all__ = ["NonFiniteLoss", "load_graph", "make_optimizer", "make_strategy", "train"]
