#!/usr/bin/env python
"""Is the halo exchange asynchronous around the local aggregation? Reads the scheduled HLO.

Builds a :class:`~jaxgraph.train.Trainer` (GCN; ``--method``: the Vanilla ring exchange or a
quantized one, one exchange per bit-width and round) for a small synthetic
graph (degree-corrected SBM, 2,000 nodes, METIS into ``P = min(8, devices)`` parts), lowers and
compiles its training step twice, with the aggregation split by edge source (local-source
edges before the exchange, halo-source edges after it; ``GraphShard.from_plan(split=True)``)
and unsplit (one aggregation after the exchange), and writes the optimized HLO
(``compiled.as_text()``) of each to ``--out``. For each it reports, from the entry computation
of the scheduled module (``is_scheduled=true``: instructions are listed in schedule order):

* the number of collective-permutes (the ring rounds of the forward and backward exchanges);
* whether they are asynchronous, i.e. ``collective-permute-start`` / ``-done`` pairs (or
  ``async-start`` / ``async-done`` around one), as XLA:GPU emits them, and how many pairs XLA
  marked ``is_sync`` (async ops it found nothing to overlap with);
* per async pair, the compute ops (fusions, scatters, gathers, dots, ...) scheduled between a
  start and its done: work that runs while the collective is in flight. With the split, the
  local-source aggregation (a scatter-add, in a fusion on GPU) can sit there.

XLA:CPU runs collectives synchronously (plain ``collective-permute``), so on CPU the script
says so and reports counts only. Nothing is executed: the step is compiled from abstract
shapes, so no device memory is used.

With a single GPU, ``P = 1`` has no exchange; the script then re-runs itself in a
subprocess with JAX's mock GPU topology (``JAX_MOCK_GPU_TOPOLOGY=1x8x1``: eight mocked
single-GPU processes, compile only), so the GPU schedule of an 8-part ring can be read on one
GPU. If that fails, it reports why and falls back to the real devices.

Usage::

    python experiments/hlo_overlap.py                      # CPU: emulated 8-device mesh
    python experiments/hlo_overlap.py --out /tmp/hlo_overlap --model sage
    python experiments/hlo_overlap.py --mock-gpus 4        # one GPU: mock 4 GPUs, not 8

Finishes in about 10-20 s on a 2-core CPU.
"""

from __future__ import annotations

# The emulated 8-device CPU mesh needs the flag before jax is imported; it only affects the
# host platform, so it is harmless on a GPU machine.
import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_DEVICE_FLAG}=8").strip()
# Only compiles: never grab most of a GPU's memory (a mocked-topology child may need it).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
if (_REPO / "jaxgraph" / "__init__.py").exists() and str(_REPO) not in sys.path[:1]:
    sys.path.insert(0, str(_REPO))

MAX_PARTS = 8
MOCK_TOPOLOGY_ENV = "JAX_MOCK_GPU_TOPOLOGY"
# Opcodes that do real work on the device (GPU fuses nearly everything into `fusion`).
COMPUTE_OPCODES = frozenset(
    {"fusion", "scatter", "gather", "dot", "convolution", "custom-call", "reduce", "sort", "while"}
)


# ====================================================================== HLO parsing


@dataclasses.dataclass(frozen=True)
class Instr:
    """One instruction of a scheduled HLO computation."""

    name: str
    opcode: str
    operands: tuple[str, ...]
    line: str


_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:^|[\s)}\]])([a-z][a-z0-9\-]*)\(")
_OPERAND = re.compile(r"%([\w.\-]+)")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


def parse_computations(text: str) -> tuple[dict[str, list[Instr]], str | None]:
    """Splits HLO module text into computations (instructions in listed order).

    Returns:
      ``(computations, entry_name)``: name -> instructions, and the ENTRY computation's name.
    """
    comps: dict[str, list[Instr]] = {}
    entry, current = None, None
    for raw in text.splitlines():
        line = raw.rstrip()
        if current is None:
            m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
            if m and not line.startswith("HloModule"):
                current = m.group(2)
                comps[current] = []
                if m.group(1):
                    entry = current
            continue
        if line.lstrip().startswith("}"):  # "}" or '}, execution_thread="..."'
            current = None
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        name, rhs = m.groups()
        op = _OPCODE.search(rhs)
        if op is None:
            continue
        args_start = op.end()
        depth, end = 1, args_start
        while end < len(rhs) and depth:
            depth += {"(": 1, ")": -1}.get(rhs[end], 0)
            end += 1
        operands = tuple(_OPERAND.findall(rhs[args_start : end - 1]))
        comps[current].append(Instr(name, op.group(1), operands, line))
    return comps, entry


def _calls_collective_permute(instr: Instr, comps: dict[str, list[Instr]]) -> bool:
    m = _CALLS.search(instr.line)
    called = comps.get(m.group(1), []) if m else []
    return any(i.opcode == "collective-permute" for i in called)


@dataclasses.dataclass
class Report:
    """What the schedule of one compiled step says about its collective-permutes."""

    variant: str
    scheduled: bool
    compile_s: float = 0.0
    sync_permutes: int = 0
    async_pairs: int = 0
    marked_sync: int = 0
    pairs_with_compute: int = 0
    compute_between: list[int] = dataclasses.field(default_factory=list)
    scatters_between: list[int] = dataclasses.field(default_factory=list)

    @property
    def permutes(self) -> int:
        return self.sync_permutes + self.async_pairs


def analyse(text: str, variant: str) -> Report:
    """Counts collective-permutes in the entry computation and, for async start/done pairs,
    the compute ops scheduled between them."""
    comps, entry = parse_computations(text)
    header = text.split("\n", 1)[0]
    report = Report(variant, scheduled="is_scheduled=true" in header)
    instrs = comps.get(entry, [])
    # Synchronous permutes anywhere (a loop body would hold them too); async pairs in ENTRY.
    report.sync_permutes = sum(
        i.opcode == "collective-permute" and not _inside_async(name, comps)
        for name, body in comps.items()
        for i in body
    )
    starts: dict[str, int] = {}
    for pos, ins in enumerate(instrs):
        is_start = ins.opcode == "collective-permute-start" or (
            ins.opcode == "async-start" and _calls_collective_permute(ins, comps)
        )
        if is_start:
            starts[ins.name] = pos
            continue
        if ins.opcode not in ("collective-permute-done", "async-done"):
            continue
        start = next((starts.pop(o) for o in ins.operands if o in starts), None)
        if start is None:
            continue
        between = instrs[start + 1 : pos]
        compute = [i for i in between if i.opcode in COMPUTE_OPCODES]
        report.async_pairs += 1
        report.marked_sync += '"is_sync":true' in instrs[start].line.replace(" ", "")
        report.pairs_with_compute += bool(compute)
        report.compute_between.append(len(compute))
        report.scatters_between.append(
            sum(i.opcode == "scatter" or "scatter" in i.name for i in compute)
        )
    return report


def _inside_async(comp_name: str, comps: dict[str, list[Instr]]) -> bool:
    """Whether ``comp_name`` is the body of an ``async-start`` (counted as an async pair)."""
    return any(
        i.opcode == "async-start" and re.search(rf"calls=%?{re.escape(comp_name)}\b", i.line)
        for body in comps.values()
        for i in body
    )


# ====================================================================== building the step


def _abstract_inputs(trainer, graph, plan, comm_state, *, split: bool):
    """Abstract ``(state, shards)`` with their shardings: compile without placing data.

    ``comm_state`` is the strategy's host state (leaves ``[P, ...]``, sharded on the mesh
    axis like the graph shards)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxgraph.partition.shard import GraphShard
    from jaxgraph.train.state import TrainState

    replicated = NamedSharding(trainer.mesh, P())
    sharded = NamedSharding(trainer.mesh, P(trainer.axis_name))

    def init(key):
        param_key, rng = jax.random.split(key)
        params = trainer.init_params(param_key, graph.num_features)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=trainer.tx.init(params),
            comm_state=None,
            rng=rng,
        )

    def spec(a, sharding):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    state = jax.tree.map(lambda a: spec(a, replicated), jax.eval_shape(init, jax.random.key(0)))
    comm = jax.tree.map(lambda a: spec(np.asarray(a), sharded), comm_state)
    state = state.replace(comm_state=comm)
    host = GraphShard.from_plan(graph, plan, split=split)
    shards = jax.tree.map(lambda a: spec(np.asarray(a), sharded), host)
    return state, shards


def run(args, devices=None) -> list[Report]:
    import jax

    from jaxgraph.data import dc_sbm
    from jaxgraph.mesh import make_mesh
    from jaxgraph.models import make_model
    from jaxgraph.partition import build_halo_plan, partition_graph
    from jaxgraph.partition.halo import split_edges_by_source
    from jaxgraph.train import OptimConfig, Trainer, make_optimizer, make_strategy, parse_method

    backend = jax.default_backend()
    mocked = os.environ.get(MOCK_TOPOLOGY_ENV, "") or ("compile-only" if devices else "")
    devices = jax.devices() if devices is None else devices
    num_parts = min(MAX_PARTS, len(devices))
    print(
        f"backend {backend} ({devices[0].device_kind}), {len(devices)} devices"
        + (f" ({mocked})" if mocked else "")
        + f", jax {jax.__version__}; P = {num_parts}"
    )
    graph = dc_sbm(args.nodes, num_features=args.features, seed=0)
    try:
        parts = partition_graph(graph, num_parts, method="metis", seed=0)
    except Exception as e:  # noqa: BLE001 - e.g. pymetis missing: random parts still work
        print(f"METIS failed ({e!r}); random partition")
        parts = partition_graph(graph, num_parts, method="random", seed=0)
    plan = build_halo_plan(graph, parts, num_parts=num_parts)
    central = int(plan.num_central.sum())
    local_edges = int(split_edges_by_source(plan).num_local_edges.sum())
    print(
        f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges; Nl = {plan.num_local_rows}, "
        f"H = {plan.num_halo_rows}; central rows {central} / {graph.num_nodes}, local-source "
        f"edges {local_edges} / {int(plan.num_edges.sum())}"
    )
    model = make_model(args.model, hidden=args.hidden, out_dim=graph.num_classes, dropout=0.5)
    method = parse_method(args.method)
    if "chunks" in method.options():  # quant-random: exact buffers, an exchange per width
        method = method.replace(chunks=0)
    strategy = make_strategy(method, model=args.model)
    comm_state = strategy.init_state(plan, model.layer_input_dims(graph.num_features))
    trainer = Trainer(
        model,
        make_optimizer(OptimConfig()),
        strategy,
        make_mesh(num_parts, devices=devices),
        num_train=int(graph.train_mask.sum()),
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    for split in (True, False):
        variant = "split" if split else "unsplit"
        state, shards = _abstract_inputs(trainer, graph, plan, comm_state, split=split)
        lowered = trainer.train_step.lower(state, shards)
        t_lower = time.perf_counter()
        text = lowered.compile().as_text()
        tag = f"{args.model}_{args.method}_{variant}_{backend}_p{num_parts}"
        path = out / f"train_step_{tag}.hlo.txt"
        path.write_text(text)
        report = analyse(text, variant)
        report.compile_s = time.perf_counter() - t_lower
        reports.append(report)
        print(f"{variant}: compiled in {report.compile_s:.1f} s -> {path}")
    summary = out / f"summary_{args.model}_{args.method}_{backend}_p{num_parts}.json"
    summary.write_text(
        json.dumps(
            {
                "backend": backend,
                "method": args.method,
                "parts": num_parts,
                "mocked": mocked,
                "reports": [dataclasses.asdict(r) for r in reports],
            },
            indent=1,
        )
    )
    _print_table(reports, backend, num_parts)
    return reports


def _print_table(reports: list[Report], backend: str, num_parts: int) -> None:
    cols = (
        "variant",
        "sched",
        "c-permutes",
        "async pairs",
        "is_sync",
        "pairs w/ compute",
        "compute ops between (sum/max)",
        "scatters between",
    )
    rows = [
        (
            r.variant,
            "yes" if r.scheduled else "no",
            str(r.permutes),
            str(r.async_pairs),
            str(r.marked_sync),
            f"{r.pairs_with_compute}/{r.async_pairs}",
            f"{sum(r.compute_between)}/{max(r.compute_between, default=0)}",
            str(sum(r.scatters_between)),
        )
        for r in reports
    ]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    print()
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    print()
    if num_parts == 1:
        print("P = 1: no halo exchange, no collective-permute; nothing to overlap.")
    elif all(r.async_pairs == 0 for r in reports) and backend == "cpu":
        print(
            "cpu: every collective-permute is synchronous (plain collective-permute, no "
            "-start/-done pairs: XLA:CPU runs collectives synchronously), so the exchange "
            "cannot overlap compute here. Run on a GPU (XLA:GPU emits async pairs) to see the "
            "schedule."
        )
    elif all(r.async_pairs == 0 for r in reports):
        print(f"{backend}: no async collective-permute pairs; the exchange is synchronous.")
    else:
        for r in reports:
            print(
                f"{r.variant}: {r.pairs_with_compute} of {r.async_pairs} async "
                "collective-permutes have compute scheduled between start and done; compute "
                f"ops per pair in schedule order: {r.compute_between}"
            )


# ====================================================================== entry point


# Ways to ask JAX for a mocked topology (the flag's spelling has varied between releases); the
# child exits with _NOT_MOCKED when the one it was given left it with too few devices.
_MOCK_ENVS = (
    lambda n: {MOCK_TOPOLOGY_ENV: f"1x{n}x1"},  # 1 slice x n hosts x 1 GPU
    lambda n: {MOCK_TOPOLOGY_ENV: f"1x1x{n}"},  # 1 slice x 1 host x n GPUs
    lambda n: {"JAX_MOCK_NUM_GPU_PROCESSES": str(n)},
    lambda n: {"MOCK_NUM_GPU_PROCESSES": str(n)},
)
_NOT_MOCKED = 3
_EXPECT_ENV = "JAXGRAPH_MOCK_DEVICES"


def compile_only_devices(count: int):
    """``count`` compile-only GPU devices of this machine's kind (JAX's topology API), or
    None with the reason printed: the step is compiled for an ``count``-GPU host without
    those GPUs being there."""
    from jax.experimental import topologies

    errors = []
    for kwargs in ({"topology": f"1x1x{count}"}, {"topology": f"1x{count}x1"}):
        try:
            devices = topologies.get_topology_desc(platform="cuda", **kwargs).devices
        except Exception as e:  # noqa: BLE001 - the option spelling differs between releases
            errors.append(f"{kwargs}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if len(devices) >= count:
            print(f"compile-only topology {kwargs}: {len(devices)} devices")
            return devices
        errors.append(f"{kwargs}: {len(devices)} device(s)")
    print("no compile-only topology: " + "; ".join(errors))
    return None


def _rerun_mocked(args, argv: list[str]) -> bool:
    """Re-runs this script with a mocked multi-GPU topology; True if it succeeded."""
    cmd = [sys.executable, __file__, *argv, "--no-mock"]
    for make_env in _MOCK_ENVS:
        extra = make_env(args.mock_gpus)
        env = dict(os.environ, JAX_CUDA_VISIBLE_DEVICES="0", **extra)
        env[_EXPECT_ENV] = str(args.mock_gpus)
        print(f"one GPU: re-running with {extra}", flush=True)
        try:
            proc = subprocess.run(cmd, env=env, timeout=args.mock_timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"mocked run timed out after {args.mock_timeout} s")
            return False
        if proc.returncode == 0:
            return True
        if proc.returncode != _NOT_MOCKED:
            print(f"mocked run failed (exit {proc.returncode})")
            return False
    print("no mocked topology took effect; falling back to the real devices")
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default="/tmp/hlo_overlap", help="directory for the HLO text")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--model", choices=("gcn", "sage"), default="gcn")
    parser.add_argument(
        "--method",
        choices=("vanilla", "quant-8", "quant-4", "quant-2", "quant-random"),
        default="vanilla",
        help="halo exchange to compile (quantized: one ring exchange per width and round)",
    )
    parser.add_argument(
        "--mock-gpus",
        type=int,
        default=MAX_PARTS,
        help="with fewer GPUs than this, re-run under a mocked topology of this many GPUs",
    )
    parser.add_argument("--mock-timeout", type=float, default=45.0)
    parser.add_argument("--no-mock", action="store_true", help="never mock a GPU topology")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)

    import jax

    few_gpus = (
        not args.no_mock
        and not os.environ.get(MOCK_TOPOLOGY_ENV)
        and jax.default_backend() == "gpu"
        and jax.device_count() < min(MAX_PARTS, args.mock_gpus)
    )
    if few_gpus:
        devices = compile_only_devices(args.mock_gpus)
        if devices is not None:
            try:
                run(args, devices)
                return 0
            except Exception as e:  # noqa: BLE001 - fall back to a mocked topology
                print(f"compiling for the compile-only topology failed: {type(e).__name__}: {e}")
        if _rerun_mocked(args, argv):
            return 0
    expect = int(os.environ.get(_EXPECT_ENV, "0"))
    if expect and jax.device_count() < expect:
        print(f"mocked topology not in effect: {jax.device_count()} device(s), wanted {expect}")
        return _NOT_MOCKED
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
