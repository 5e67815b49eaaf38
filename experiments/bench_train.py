#!/usr/bin/env python
"""Training throughput, memory and aggregation bandwidth of jaxgraph on CPU.

Three parts, each configuration in its own subprocess (so an out-of-memory kill or a timeout
is reported instead of ending the run, and every configuration gets its own peak RSS):

1. **Training** (``Trainer.train_step``: forward + backward + Adam update, jitted
   ``shard_map`` with donation) of GCN and GraphSAGE (2 layers, hidden 128, dropout 0.5) on
   synthetic graphs (degree-corrected SBM, average degree 20, 128 features), on one device
   (``P = 1``) and on ``P = 8`` emulated CPU devices (METIS partition, Vanilla ring halo
   exchange). Reported: compile time (``train_step.lower(...).compile()``), the median epoch
   time over the epochs after the first, RSS after setup, the process peak RSS (high-water
   mark from ``resource.getrusage``) and minor page faults per epoch. The JAX CPU client has
   no device memory statistics (``Device.memory_stats()`` is ``None``), so RSS is the memory
   figure.
2. **Aggregation micro-benchmark**: variants of ``segment_sum_sorted`` (``out[v] = sum_{e:
   dst[e]=v} w[e] h[src[e]]``) on the single-device edge list of the same graphs, forward and
   backward (VJP w.r.t. ``h``), with their speed-up over the original one-shot
   ``take + segment_sum`` and their error against it.
3. **Bandwidth**: the achieved bandwidth of each aggregation variant, counting the bytes it
   must touch (``E*F*4`` gathered rows + ``E*8`` indices and weights + ``N*F*4`` written),
   against the copy bandwidth of this machine (NumPy copy into a warm buffer, i.e. the DRAM
   limit, and a jitted copy into freshly allocated memory, which pays the page faults that
   every new XLA buffer pays).

Usage::

    python experiments/bench_train.py                     # default run, ~15 min on 2 cores
    python experiments/bench_train.py --quick             # smoke run, small graphs
    python experiments/bench_train.py --sizes 100000 --models gcn --parts 1 8 --epochs 5
    python experiments/bench_train.py --agg baseline      # train with the original aggregation

The machine may be shared: the load average at start and end is printed; micro-benchmark
variants run interleaved (round robin) so that load changes hit all of them alike.
"""

from __future__ import annotations

# The emulated 8-device mesh needs the flag before jax is imported (here and in the workers,
# which inherit the environment).
import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_DEVICE_FLAG}=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# Benchmark the checkout this script lives in, whatever jaxgraph is pip-installed at the moment
# (an editable install can be re-pointed at another checkout while a long run is going on).
_REPO = Path(__file__).resolve().parents[1]
if (_REPO / "jaxgraph" / "__init__.py").exists() and str(_REPO) not in sys.path[:1]:
    sys.path.insert(0, str(_REPO))

GIB = 1 << 30
RESULT_TAG = "@@RESULT@@ "
AVG_DEGREE = 20
NUM_FEATURES = 128
NUM_CLASSES = 10
HIDDEN = 128
NUM_LAYERS = 2
SEED = 0


# ====================================================================== small utilities


def _peak_rss() -> int:
    """High-water mark of this process's resident set, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _fmt_bytes(b) -> str:
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "-"
    return f"{b / GIB:.2f} GiB" if b >= GIB / 4 else f"{b / (1 << 20):.0f} MiB"


def _fmt_s(t) -> str:
    if t is None or (isinstance(t, float) and math.isnan(t)):
        return "-"
    return f"{t:.3f}" if t < 10 else f"{t:.1f}"


def _emit(result: dict) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


def _table(headers: list[str], rows: list[list], title: str) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [title, "-" * len(line), line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


# ====================================================================== data (prep worker)


def _random_graph(n: int, avg_degree: float, num_features: int, num_classes: int, seed: int):
    """Fallback generator: a uniform random undirected graph built with NumPy (sort-based
    deduplication), Gaussian class-dependent features, a 60/20/20 random split."""
    from jaxgraph.graph import Graph

    rng = np.random.default_rng(seed)
    m = int(round(n * avg_degree / 2))
    s = rng.integers(0, n, m, dtype=np.int64)
    d = rng.integers(0, n, m, dtype=np.int64)
    key = np.concatenate([d * n + s, s * n + d])
    key.sort()
    key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    dst, src = np.divmod(key, n)
    keep = dst != src
    dst, src = dst[keep], src[keep]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    labels = rng.integers(0, num_classes, n).astype(np.int32)
    centres = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    features = rng.standard_normal((n, num_features), dtype=np.float32) + centres[labels]
    split = rng.random(n)
    return Graph(
        indptr=indptr,
        indices=src.astype(np.int32),
        features=features,
        labels=labels,
        train_mask=split < 0.6,
        val_mask=(split >= 0.6) & (split < 0.8),
        test_mask=split >= 0.8,
        name=f"uniform_n{n}",
    )


def make_graph(n: int, seed: int = SEED):
    """The benchmark graph: ``jaxgraph.data.synthetic.dc_sbm`` if it is available and works,
    else :func:`_random_graph`. Returns ``(graph, description)``."""
    try:
        from jaxgraph.data.synthetic import dc_sbm

        g = dc_sbm(n, NUM_CLASSES, AVG_DEGREE, num_features=NUM_FEATURES, seed=seed)
        return g, "dc_sbm"
    except Exception as e:  # noqa: BLE001 - any failure of the other module: fall back
        why = f"{type(e).__name__}: {e}".splitlines()[0][:120]
        return (
            _random_graph(n, AVG_DEGREE, NUM_FEATURES, NUM_CLASSES, seed),
            f"uniform random (dc_sbm unavailable: {why})",
        )


_GRAPH_FIELDS = ("indptr", "indices", "features", "labels", "train_mask", "val_mask", "test_mask")


def _graph_path(cache: Path, n: int) -> Path:
    return cache / f"graph_n{n}.npz"


def _shards_path(cache: Path, n: int, p: int) -> Path:
    return cache / f"shards_n{n}_p{p}.npz"


def load_graph(cache: Path, n: int):
    from jaxgraph.graph import Graph

    with np.load(_graph_path(cache, n)) as z:
        return Graph(**{k: z[k] for k in _GRAPH_FIELDS}, name=str(z["name"]))


def worker_prep(spec: dict) -> dict:
    """Builds the graph of one size and the halo-plan shards of every mesh size; saves them."""
    from jaxgraph.partition import build_halo_plan, partition_graph
    from jaxgraph.partition.shard import GraphShard

    cache, n = Path(spec["cache"]), spec["size"]
    t = time.perf_counter()
    g, generator = make_graph(n)
    gen_s = time.perf_counter() - t
    np.savez(_graph_path(cache, n), name=g.name, **{k: getattr(g, k) for k in _GRAPH_FIELDS})
    out = {"size": n, "generator": generator, "num_edges": g.num_edges, "gen_s": gen_s, "plans": {}}
    for p in spec["parts"]:
        t = time.perf_counter()
        try:
            parts = partition_graph(g, p, method="metis" if p > 1 else "contiguous", seed=SEED)
        except Exception as e:  # noqa: BLE001 - e.g. pymetis missing: contiguous blocks
            parts = partition_graph(g, p, method="contiguous")
            out.setdefault("notes", []).append(f"P={p}: METIS failed ({e!r}), contiguous used")
        part_s = time.perf_counter() - t
        t = time.perf_counter()
        plan = build_halo_plan(g, parts, num_parts=p)
        shards = GraphShard.from_plan(g, plan)
        plan_s = time.perf_counter() - t
        arrays = {k: v for k, v in shards._asdict().items() if k != "send_idx"}
        arrays.update({f"send_idx_{i}": a for i, a in enumerate(shards.send_idx)})
        np.savez(_shards_path(cache, n, p), **arrays)
        out["plans"][str(p)] = {
            "partition_s": part_s,
            "plan_s": plan_s,
            "Nl": plan.num_local_rows,
            "H": plan.num_halo_rows,
            "Em": plan.max_edges,
            "real_edges": int(plan.num_edges.sum()),
            "shard_bytes": int(sum(a.nbytes for a in arrays.values())),
            "num_train": int(g.train_mask.sum()),
            "num_classes": g.num_classes,
            "num_features": g.num_features,
            "num_send": len(shards.send_idx),
        }
        del plan, shards, arrays
    out["peak_rss"] = _peak_rss()
    return out


# ====================================================================== aggregation variants


def agg_baseline(h, src, dst, weight, num_segments):
    """The original one-shot formulation: ``segment_sum(take(h, src) * w, dst, sorted)``."""
    import jax
    import jax.numpy as jnp

    msgs = jnp.take(h, src, axis=0) * weight[:, None].astype(h.dtype)
    return jax.ops.segment_sum(msgs, dst, num_segments=num_segments, indices_are_sorted=True)


def agg_bcoo(h, src, dst, weight, num_segments):
    """``jax.experimental.sparse`` BCOO (rows = dst, sorted) times dense ``h``."""
    import jax.numpy as jnp
    from jax.experimental import sparse

    a = sparse.BCOO(
        (weight.astype(h.dtype), jnp.stack([dst, src], axis=1)),
        shape=(num_segments, h.shape[0]),
        indices_sorted=True,
        unique_indices=True,
    )
    return a @ h


def agg_csr_cumsum(h, src, dst, weight, num_segments):
    """CSR row pointer + prefix sums: ``out[v] = C[ptr[v+1]] - C[ptr[v]]`` with ``C`` the
    cumulative sum of the messages (fp32 cancellation grows with E)."""
    import jax.numpy as jnp

    msgs = jnp.take(h, src, axis=0) * weight[:, None].astype(h.dtype)
    csum = jnp.concatenate([jnp.zeros((1, h.shape[1]), h.dtype), jnp.cumsum(msgs, axis=0)])
    ptr = jnp.searchsorted(dst, jnp.arange(num_segments + 1, dtype=dst.dtype), side="left")
    return csum[ptr[1:]] - csum[ptr[:-1]]


def agg_chunked_autodiff(h, src, dst, weight, num_segments, chunk=4096):
    """``lax.scan`` over 4096-edge chunks, scatter-adding into the carry; plain autodiff (the
    transposed scan) instead of a custom VJP."""
    import jax
    import jax.numpy as jnp

    e = src.shape[0]
    k = e // chunk

    def add(acc, s, d, w):
        m = h.at[s].get(mode="promise_in_bounds") * w[:, None].astype(h.dtype)
        return acc.at[d].add(m, indices_are_sorted=True, mode="promise_in_bounds")

    def add_at(acc, i):
        sl = lambda a: jax.lax.dynamic_slice_in_dim(a, i * chunk, chunk)  # noqa: E731
        return add(acc, sl(src), sl(dst), sl(weight))

    acc = jnp.zeros_like(h, shape=(num_segments, h.shape[1]))
    if k:  # first chunk outside the scan: its result has the carry's shard_map type
        acc = add_at(acc, 0)
    if k > 1:
        acc, _ = jax.lax.scan(
            lambda acc, i: (add_at(acc, i), None), acc, jnp.arange(1, k, dtype=jnp.int32)
        )
    if e > k * chunk:
        acc = add(acc, src[k * chunk :], dst[k * chunk :], weight[k * chunk :])
    return acc


def library_impl() -> str:
    """Which ``segment_sum_sorted`` the installed library has (recorded by every worker, as
    the working tree may change while the benchmark runs)."""
    import hashlib

    from jaxgraph.models import propagate

    kind = "chunked" if hasattr(propagate, "_CHUNK_BYTES") else "one-shot"
    digest = hashlib.md5(Path(propagate.__file__).read_bytes()).hexdigest()[:8]
    return f"{kind} ({propagate.__file__}, md5 {digest})"


def agg_library(h, src, dst, weight, num_segments):
    from jaxgraph.models import propagate

    return propagate.segment_sum_sorted(h, src, dst, weight, num_segments)


# name -> (function, library chunk bytes override or None, description)
AGG_VARIANTS = {
    "baseline": (agg_baseline, None, "original: take + segment_sum(sorted), [E,F] temp"),
    "bcoo": (agg_bcoo, None, "jax.experimental.sparse BCOO @ h"),
    "csr_cumsum": (agg_csr_cumsum, None, "row pointer + cumsum differences"),
    "chunked_autodiff": (agg_chunked_autodiff, None, "scan over 4096-edge chunks, autodiff"),
    "library": (agg_library, None, "jaxgraph segment_sum_sorted as installed"),
    "library_512KiB": (agg_library, 512 << 10, "library, 512 KiB message chunks"),
    "library_8MiB": (agg_library, 8 << 20, "library, 8 MiB message chunks"),
    "library_32MiB": (agg_library, 32 << 20, "library, 32 MiB message chunks"),
    "scipy_csr": (None, None, "host reference: scipy CSR @ dense (1 thread, not jax)"),
}
DEFAULT_VARIANTS = (
    "baseline",
    "bcoo",
    "csr_cumsum",
    "chunked_autodiff",
    "library",
    "library_8MiB",
    "scipy_csr",
)
CUMSUM_MAX_EDGES = 5_000_000  # XLA's cumsum on CPU is slow (a minute at 20M x 128)
BCOO_MAX_EDGES = 5_000_000  # BCOO is baseline-speed and as slow; one size suffices


def worker_micro(spec: dict) -> dict:
    """Times every aggregation variant (forward and VJP) on the P = 1 edge list of one size."""
    import jax
    import jax.numpy as jnp

    from jaxgraph.models import propagate

    g = load_graph(Path(spec["cache"]), spec["size"])
    src_np, dst_np = g.edges()
    w_np, _ = g.gcn_norm()
    n, e, f = g.num_nodes, g.num_edges, g.num_features
    rng = np.random.default_rng(1)
    h, src, dst, w = (jnp.asarray(a) for a in (g.features, src_np, dst_np, w_np))
    ct = jnp.asarray(rng.standard_normal((n, f), dtype=np.float32))
    indptr = g.indptr
    del g
    touched = e * f * 4 + e * 8 + n * f * 4
    budget = spec["budget_s"]
    reps = spec["repeats"]

    def timed(fn, *args):
        f0 = _minor_faults()
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        return time.perf_counter() - t, _minor_faults() - f0, out

    def rel_err(a, ref):
        a = np.asarray(a)
        return float(np.max(np.abs(a - ref)) / max(float(np.max(np.abs(ref))), 1e-30))

    results, runners, refs = {}, {}, {}
    names = list(spec["variants"])
    if "baseline" in names:  # the reference for errors and speed-ups runs first
        names.remove("baseline")
        names.insert(0, "baseline")
    for name in names:
        fn, chunk_bytes, desc = AGG_VARIANTS[name]
        res = {"desc": desc, "fwd": [], "bwd": [], "fwd_faults": [], "bwd_faults": []}
        results[name] = res
        if name == "csr_cumsum" and e > CUMSUM_MAX_EDGES:
            res["skipped"] = (
                f"skipped: E = {e:,} > {CUMSUM_MAX_EDGES:,} (XLA CPU cumsum over "
                "[E, F] takes minutes; fp32 cancellation error grows with E)"
            )
            continue
        if name == "bcoo" and e > BCOO_MAX_EDGES:
            res["skipped"] = (
                f"skipped: E = {e:,} > {BCOO_MAX_EDGES:,} (on CPU BCOO @ dense lowers to the "
                "same gather + segment_sum as baseline; see the smaller size)"
            )
            continue
        if chunk_bytes is not None and not hasattr(propagate, "_CHUNK_BYTES"):
            res["skipped"] = "skipped: the installed segment_sum_sorted is not chunked"
            continue
        try:
            if name == "scipy_csr":
                import scipy.sparse as sp

                a = sp.csr_matrix((w_np, src_np, indptr), shape=(n, n))
                at = a.T.tocsr()  # precomputed transpose (not timed)
                hn, cn = np.asarray(h), np.asarray(ct)
                fwd = lambda a=a, hn=hn: a @ hn  # noqa: E731
                bwd = lambda at=at, cn=cn: at @ cn  # noqa: E731
                res["compile_s"] = 0.0
            else:

                def fwd_fn(h, src, dst, w, fn=fn):
                    return fn(h, src, dst, w, n)

                def bwd_fn(h, src, dst, w, ct, fn=fn):
                    return jax.vjp(lambda x: fn(x, src, dst, w, n), h)[1](ct)[0]

                saved = getattr(propagate, "_CHUNK_BYTES", None)
                if chunk_bytes is not None:
                    propagate._CHUNK_BYTES = chunk_bytes  # read at trace time
                try:
                    t = time.perf_counter()
                    cf = jax.jit(fwd_fn).lower(h, src, dst, w).compile()
                    cb = jax.jit(bwd_fn).lower(h, src, dst, w, ct).compile()
                    res["compile_s"] = time.perf_counter() - t
                finally:
                    if chunk_bytes is not None:
                        propagate._CHUNK_BYTES = saved
                fwd = lambda cf=cf: cf(h, src, dst, w)  # noqa: E731
                bwd = lambda cb=cb: cb(h, src, dst, w, ct)  # noqa: E731
            # warm-up call, also the correctness check; not a sample unless the variant is so
            # slow that the budget allows no further call (then it is the only sample)
            t_f, f_f, out_f = timed(fwd)
            t_b, f_b, out_b = timed(bwd)
            res["warmup_s"] = t_f + t_b
            if t_f + t_b > budget:
                res["fwd"], res["bwd"] = [t_f], [t_b]
                res["fwd_faults"], res["bwd_faults"] = [f_f], [f_b]
                res["desc"] += " [timed on the warm-up call only: slower than the budget]"
            if name == "baseline":
                refs["fwd"], refs["bwd"] = np.asarray(out_f), np.asarray(out_b)
            if refs:
                res["err_fwd"] = rel_err(out_f, refs["fwd"])
                res["err_bwd"] = rel_err(out_b, refs["bwd"])
            del out_f, out_b
            runners[name] = (fwd, bwd)
            res["spent"] = t_f + t_b
        except Exception as ex:  # noqa: BLE001 - report and go on with the others
            res["skipped"] = f"failed: {type(ex).__name__}: {str(ex).splitlines()[0][:150]}"
    # interleaved timing rounds
    for _ in range(reps):
        for name, (fwd, bwd) in runners.items():
            res = results[name]
            if res["fwd"] and res["spent"] > budget:
                continue
            for kind, fn in (("fwd", fwd), ("bwd", bwd)):
                dt, faults, out = timed(fn)
                del out
                res[kind].append(dt)
                res[kind + "_faults"].append(faults)
                res["spent"] += dt
    for res in results.values():
        for kind in ("fwd", "bwd"):
            ts = res[kind]
            res[kind + "_median"] = statistics.median(ts) if ts else None
            res[kind + "_min"] = min(ts) if ts else None
            res[kind + "_faults_median"] = statistics.median(res[kind + "_faults"]) if ts else None
    return {
        "size": spec["size"],
        "num_nodes": n,
        "num_edges": e,
        "num_features": f,
        "touched_bytes": touched,
        "variants": results,
        "peak_rss": _peak_rss(),
        "library_impl": library_impl(),
    }


def worker_copy(spec: dict) -> dict:
    """Copy bandwidth: NumPy copy into a warm buffer (DRAM limit) and a jitted copy into a
    freshly allocated XLA buffer (what a new [E, F] temporary costs here)."""
    import jax
    import jax.numpy as jnp

    nbytes = spec["bytes"]
    x = np.ones(nbytes // 4, np.float32)
    y = np.zeros_like(x)
    warm = []
    for _ in range(7):
        t = time.perf_counter()
        np.copyto(y, x)
        warm.append(time.perf_counter() - t)
    xj = jnp.asarray(x)
    del x, y
    add = jax.jit(lambda a: a + 1.0)
    jax.block_until_ready(add(xj))
    fresh, faults = [], []
    for _ in range(5):
        f0 = _minor_faults()
        t = time.perf_counter()
        jax.block_until_ready(add(xj))
        fresh.append(time.perf_counter() - t)
        faults.append(_minor_faults() - f0)
    # first touch of fresh NumPy memory (page-fault cost)
    t = time.perf_counter()
    z = np.empty(nbytes // 4, np.float32)
    z.fill(1.0)
    touch = time.perf_counter() - t
    del z
    return {
        "bytes": nbytes,
        "warm_copy_gbs": 2 * nbytes / statistics.median(warm) / 1e9,
        "warm_copy_best_gbs": 2 * nbytes / min(warm) / 1e9,
        "jit_fresh_copy_gbs": 2 * nbytes / statistics.median(fresh) / 1e9,
        "jit_fresh_faults": statistics.median(faults),
        "first_touch_us_per_page": touch / (nbytes / os.sysconf("SC_PAGE_SIZE")) * 1e6,
    }


# ====================================================================== training worker


def worker_train(spec: dict) -> dict:
    """Compiles and runs ``Trainer.train_step`` for one (size, model, P) configuration."""
    import jax

    from jaxgraph.comm.strategy import Vanilla
    from jaxgraph.mesh import make_mesh
    from jaxgraph.models import make_model, propagate
    from jaxgraph.partition.shard import GraphShard
    from jaxgraph.train import OptimConfig, Trainer, make_optimizer

    if spec["agg"] == "baseline":
        propagate.segment_sum_sorted = agg_baseline  # Propagator looks it up at trace time
    cache, n, p = Path(spec["cache"]), spec["size"], spec["parts"]
    meta = spec["plan"]
    with np.load(_shards_path(cache, n, p)) as z:
        fields = {k: z[k] for k in z.files if not k.startswith("send_idx_")}
        fields["send_idx"] = tuple(z[f"send_idx_{i}"] for i in range(meta["num_send"]))
    host = GraphShard(**fields)
    mesh = make_mesh(p)
    model = make_model(
        spec["model"],
        hidden=HIDDEN,
        out_dim=meta["num_classes"],
        num_layers=NUM_LAYERS,
        dropout=0.5,
    )
    trainer = Trainer(
        model, make_optimizer(OptimConfig()), Vanilla(), mesh, num_train=meta["num_train"]
    )
    shards = trainer.place_shards(host)
    del host, fields
    state = trainer.create_state(jax.random.key(SEED), meta["num_features"], {})
    jax.block_until_ready((state, shards))
    rss_setup = _current_rss()

    t = time.perf_counter()
    step = trainer.train_step.lower(state, shards).compile()
    compile_s = time.perf_counter() - t
    rss_compiled = _current_rss()

    times, faults, losses = [], [], []
    for epoch in range(spec["epochs"]):
        f0 = _minor_faults()
        t = time.perf_counter()
        state, metrics = step(state, shards)
        metrics = jax.device_get(metrics)
        times.append(time.perf_counter() - t)
        faults.append(_minor_faults() - f0)
        losses.append(float(metrics["loss"]))
        if epoch >= 2 and sum(times[1:]) > spec["epoch_budget_s"]:
            break  # at least two timed epochs; keep the run inside its time budget
    steady = times[1:] or times
    stats = jax.devices()[0].memory_stats()
    return {
        "compile_s": compile_s,
        "epoch_times": times,
        "epoch_median": statistics.median(steady),
        "epoch_min": min(steady),
        "first_epoch": times[0],
        "epochs_timed": len(steady),
        "faults_per_epoch": statistics.median(faults[1:] or faults),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "rss_setup": rss_setup,
        "rss_compiled": rss_compiled,
        "peak_rss": _peak_rss(),
        "device_peak_bytes": None if not stats else stats.get("peak_bytes_in_use"),
        "library_impl": library_impl(),
    }


WORKERS = {"prep": worker_prep, "micro": worker_micro, "copy": worker_copy, "train": worker_train}


def _run_worker(kind: str, spec: dict, timeout: float) -> dict:
    """Runs one worker in a subprocess; returns its result or ``{"error": why}``."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_worker",
        kind,
        "--_spec",
        json.dumps(spec),
    ]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "error": f"timed out after {timeout:.0f} s (raise --timeout to allow more)",
            "wall_s": time.perf_counter() - t,
        }
    wall = time.perf_counter() - t
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            out = json.loads(line[len(RESULT_TAG) :])
            out["wall_s"] = wall
            return out
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        why = f"killed by {sig}"
        if sig == "SIGKILL":
            why += " (most likely the kernel OOM killer: out of memory)"
    else:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        why = f"exit code {proc.returncode}: {tail[:200]}"
    return {"error": why, "wall_s": wall, "stderr_tail": proc.stderr[-3000:]}


def _worker_main(kind: str, spec_json: str) -> None:
    spec = json.loads(spec_json)
    _prefer_oom_kill()
    try:
        _emit(WORKERS[kind](spec))
    except MemoryError:
        _emit({"error": f"MemoryError (peak RSS {_fmt_bytes(_peak_rss())})"})
    except Exception as e:  # noqa: BLE001 - reported by the parent
        traceback.print_exc()
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        if "RESOURCE_EXHAUSTED" in str(e) or "Out of memory" in str(e):
            msg = "out of memory: " + msg
        _emit({"error": f"{type(e).__name__}: {msg}"})


# ====================================================================== orchestration


def _estimate_train_bytes(plan: dict, parts: int, agg: str) -> int:
    """A deliberately high estimate of a training step's peak RSS.

    Fitted on this benchmark's runs (peak RSS minus RSS after setup): about 8.5 row buffers
    ``[Nl, F]`` per device (activations, gradients, Adam-free node buffers, dropout masks) and
    3.5 ``[H, F]`` halo buffers (exchange, concatenation, its gradient); here 10 and 5, plus
    the shards twice (host copy and device copy during setup) and 1.5 GiB of runtime. The
    one-shot baseline aggregation adds an ``[E, F]`` message temporary (measured: +8 GB at
    1M nodes / 19.5M edges, P = 1, where ``E * F * 4`` is 10 GB).
    """
    row = NUM_FEATURES * 4
    est = 2 * plan["shard_bytes"] + int(1.5 * GIB)
    est += parts * (10 * plan["Nl"] + 5 * plan["H"]) * row
    if agg == "baseline":
        est += parts * plan["Em"] * row
    return int(est)


def _prefer_oom_kill() -> None:
    """Makes this worker the kernel OOM killer's first choice, so that running out of memory
    ends the worker (reported by the parent) rather than another process of a shared machine.

    (An address-space cap, ``RLIMIT_AS``, fits badly: XLA allocates each executable's whole
    temporary arena at once and a jax process maps 1.5 GB or more beyond its RSS.)
    """
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[100_000, 1_000_000],
        help="graph sizes (nodes); default 100000 1000000",
    )
    ap.add_argument("--models", nargs="+", default=["gcn", "sage"], choices=["gcn", "sage"])
    ap.add_argument(
        "--parts",
        type=int,
        nargs="+",
        default=[1, 8],
        help="mesh sizes; P > 1 runs on emulated CPU devices (at most 8)",
    )
    ap.add_argument(
        "--epochs",
        type=int,
        default=4,
        help="epochs per configuration; the first is not timed (default 4)",
    )
    ap.add_argument(
        "--epoch-budget",
        type=float,
        default=40.0,
        help="stop a configuration after this many timed seconds (>= 2 timed epochs)",
    )
    ap.add_argument(
        "--agg",
        choices=["library", "baseline"],
        default="library",
        help="aggregation used in training: the installed segment_sum_sorted or "
        "the original one-shot take + segment_sum",
    )
    ap.add_argument(
        "--variants",
        nargs="+",
        default=list(DEFAULT_VARIANTS),
        choices=list(AGG_VARIANTS),
        help="aggregation micro-benchmark variants",
    )
    ap.add_argument(
        "--micro-sizes",
        type=int,
        nargs="*",
        default=None,
        help="sizes of the micro-benchmark (default: --sizes)",
    )
    ap.add_argument(
        "--micro-repeats",
        type=int,
        default=3,
        help="timed rounds per variant after a warm-up call (default 3)",
    )
    ap.add_argument(
        "--micro-budget",
        type=float,
        default=20.0,
        help="stop timing a variant after this many seconds, warm-up included (>= 1 call)",
    )
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: sizes 3000 20000, 3 epochs, short micro-benchmark",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds per subprocess before it is reported as timed out",
    )
    ap.add_argument(
        "--cache-dir",
        default=None,
        help="where graphs and shards are stored (default: a temporary directory, "
        "removed at the end); an existing cache is reused",
    )
    ap.add_argument("--json", default=None, help="also write all results to this JSON file")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    ap.add_argument("--_spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        _worker_main(args._worker, args._spec)
        return 0
    if args.quick:
        args.sizes, args.epochs = [3000, 20_000], 3
        args.micro_repeats, args.micro_budget = 2, 5.0
    micro_sizes = args.sizes if args.micro_sizes is None else args.micro_sizes
    if any(p < 1 or p > 8 for p in args.parts):
        ap.error("--parts must lie in [1, 8] (8 emulated CPU devices)")

    signal.signal(signal.SIGTERM, _interrupt)  # clean up the cache and print what is done
    t_start = time.perf_counter()
    tmp = args.cache_dir is None
    cache = Path(tempfile.mkdtemp(prefix="bench_train_")) if tmp else Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    report = {
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "machine": {
            "cpus": os.cpu_count(),
            "mem_total": _mem_total(),
            "load_start": os.getloadavg(),
            "xla_flags": os.environ["XLA_FLAGS"],
            "versions": _versions(),
        },
        "prep": {},
        "train": [],
        "micro": {},
        "copy": None,
    }
    print(
        f"# bench_train: cpus={os.cpu_count()} mem={_fmt_bytes(_mem_total())} "
        f"load={report['machine']['load_start']} {report['machine']['versions']} "
        f"XLA_FLAGS={os.environ['XLA_FLAGS']!r} cache={cache}",
        flush=True,
    )
    try:
        all_sizes = sorted(set(args.sizes) | set([] if args.skip_micro else micro_sizes))
        for n in all_sizes:
            parts = sorted(set(args.parts)) if n in args.sizes and not args.skip_train else [1]
            meta = cache / f"prep_n{n}.json"
            prep = json.loads(meta.read_text()) if meta.exists() else {}
            if "error" in prep or not set(map(str, parts)) <= set(prep.get("plans", {})):
                print(f"# preparing n={n:,} (graph, partitions P={parts}) ...", flush=True)
                prep = _run_worker(
                    "prep", {"cache": str(cache), "size": n, "parts": parts}, args.timeout
                )
                if "error" not in prep:
                    meta.write_text(json.dumps(prep))
            else:
                print(f"# n={n:,}: reusing the graph and shards in {cache}", flush=True)
            report["prep"][n] = prep
            if "error" in prep:
                print(f"#   prep failed: {prep['error']}", flush=True)
                continue
            plans = " ".join(
                f"P={p}: Nl={v['Nl']:,} H={v['H']:,} Em={v['Em']:,} "
                f"(metis {v['partition_s']:.0f}s, plan {v['plan_s']:.0f}s)"
                for p, v in prep["plans"].items()
            )
            print(
                f"#   {prep['generator']}: E={prep['num_edges']:,} generated in "
                f"{prep['gen_s']:.1f}s; {plans}",
                flush=True,
            )

        if not args.skip_micro:
            report["copy"] = _run_worker("copy", {"bytes": GIB}, args.timeout)
            for n in micro_sizes:
                if "error" in report["prep"].get(n, {"error": 1}):
                    report["micro"][n] = {"error": "no graph (prep failed)"}
                    continue
                print(f"# aggregation micro-benchmark n={n:,} ...", flush=True)
                report["micro"][n] = _run_worker(
                    "micro",
                    {
                        "cache": str(cache),
                        "size": n,
                        "variants": args.variants,
                        "repeats": args.micro_repeats,
                        "budget_s": args.micro_budget,
                    },
                    args.timeout,
                )
                if "error" in report["micro"][n]:
                    print(f"#   failed: {report['micro'][n]['error']}", flush=True)
            print("\n" + render(report, sections=("micro",)) + "\n", flush=True)
            _save_json(args.json, report)

        if not args.skip_train:
            for n in args.sizes:
                prep = report["prep"].get(n, {})
                for p in sorted(set(args.parts)):
                    for model in args.models:
                        row = {"size": n, "parts": p, "model": model, "agg": args.agg}
                        if "error" in prep or str(p) not in prep.get("plans", {}):
                            row["error"] = "no shards (prep failed)"
                        else:
                            from jaxgraph.mesh import free_memory

                            plan = prep["plans"][str(p)]
                            need, avail = _estimate_train_bytes(plan, p, args.agg), free_memory()
                            if avail and need > avail:
                                row["error"] = (
                                    f"skipped: needs ~{_fmt_bytes(need)} (estimate), "
                                    f"{_fmt_bytes(avail)} available"
                                )
                            else:
                                print(f"# train n={n:,} {model} P={p} ...", flush=True)
                                row.update(
                                    _run_worker(
                                        "train",
                                        {
                                            "cache": str(cache),
                                            "size": n,
                                            "parts": p,
                                            "model": model,
                                            "agg": args.agg,
                                            "epochs": args.epochs,
                                            "epoch_budget_s": args.epoch_budget,
                                            "plan": plan,
                                        },
                                        args.timeout,
                                    )
                                )
                        if "error" in row:
                            print(f"#   {row['error']}", flush=True)
                        else:
                            print(
                                f"#   compile {row['compile_s']:.1f}s, epoch "
                                f"{row['epoch_median']:.3f}s, peak RSS "
                                f"{_fmt_bytes(row['peak_rss'])}",
                                flush=True,
                            )
                        report["train"].append(row)
                        _save_json(args.json, report)
    except KeyboardInterrupt:
        report["interrupted"] = True
        print("# interrupted: the tables below hold the results so far", flush=True)
    finally:
        if tmp:
            shutil.rmtree(cache, ignore_errors=True)
    report["machine"]["load_end"] = os.getloadavg()
    report["total_s"] = time.perf_counter() - t_start
    print()
    print(render(report))
    _save_json(args.json, report)
    return 0


def _save_json(path, report: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(report, indent=1, default=str))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("jax", "jaxlib", "flax", "optax"):
        try:
            out.append(f"{pkg}={version(pkg)}")
        except PackageNotFoundError:
            pass
    return " ".join(out)


def render(report: dict, sections=("train", "micro", "machine")) -> str:
    """The result tables as text (the given sections)."""
    blocks = []
    train = report["train"] if "train" in sections else []
    if train:
        rows = []
        for r in train:
            plan = report["prep"].get(r["size"], {}).get("plans", {}).get(str(r["parts"]), {})
            layout = f"{plan['Nl']:,}/{plan['H']:,}/{plan['Em']:,}" if plan else "-"
            if "error" in r:
                rows.append(
                    [
                        f"{r['size']:,}",
                        r["model"],
                        r["parts"],
                        layout,
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        r["error"],
                    ]
                )
                continue
            rows.append(
                [
                    f"{r['size']:,}",
                    r["model"],
                    r["parts"],
                    layout,
                    _fmt_s(r["compile_s"]),
                    _fmt_s(r["first_epoch"]),
                    _fmt_s(r["epoch_median"]),
                    _fmt_s(r["epoch_min"]),
                    r["epochs_timed"],
                    _fmt_bytes(r["rss_setup"]),
                    _fmt_bytes(r["peak_rss"]),
                    f"faults/epoch {r['faults_per_epoch']:,.0f}; loss {r['loss_first']:.3f}->"
                    f"{r['loss_last']:.3f}; "
                    + (
                        "one-shot baseline aggregation"
                        if r["agg"] == "baseline"
                        else f"library {r.get('library_impl', '?').split()[0]}"
                    ),
                ]
            )
        agg = train[0]["agg"]
        blocks.append(
            _table(
                [
                    "nodes",
                    "model",
                    "P",
                    "Nl/H/Em per device",
                    "compile s",
                    "1st epoch s",
                    "epoch s (median)",
                    "min s",
                    "n",
                    "RSS setup",
                    "peak RSS",
                    "notes",
                ],
                rows,
                f"TRAINING: Trainer.train_step (fwd + bwd + Adam), hidden {HIDDEN}, "
                f"{NUM_LAYERS} layers, {NUM_FEATURES} features, avg degree {AVG_DEGREE}, "
                f"aggregation = {agg}; epoch = median over epochs 2..n+1; peak RSS = "
                f"process high-water mark (getrusage); JAX CPU device memory_stats: "
                f"{'see json' if any(r.get('device_peak_bytes') for r in train) else 'n/a'}",
            )
        )
    copy = report.get("copy") if "micro" in sections else None
    limit = None
    if copy and "error" not in copy:
        limit = copy["warm_copy_gbs"]
        blocks.append(
            f"COPY BANDWIDTH (1 GiB, bytes read + written / time): NumPy copy into a warm buffer "
            f"{copy['warm_copy_gbs']:.1f} GB/s (best {copy['warm_copy_best_gbs']:.1f}) = the "
            f"limit used below; jitted copy into a fresh XLA buffer "
            f"{copy['jit_fresh_copy_gbs']:.2f} GB/s ({copy['jit_fresh_faults']:,.0f} page faults"
            f"/call); first touch of new memory {copy['first_touch_us_per_page']:.1f} us/page"
        )
    elif copy:
        blocks.append(f"COPY BANDWIDTH: failed: {copy['error']}")
    for n, m in report["micro"].items() if "micro" in sections else ():
        if "error" in m:
            blocks.append(f"AGGREGATION n={n:,}: failed: {m['error']}")
            continue
        base = m["variants"].get("baseline", {})
        bf, bb = base.get("fwd_median"), base.get("bwd_median")
        rows = []
        for name, v in m["variants"].items():
            if "skipped" in v:
                rows.append([name, "-", "-", "-", "-", "-", "-", "-", "-", v["skipped"]])
                continue
            fm, bm = v["fwd_median"], v["bwd_median"]
            gbs_f = m["touched_bytes"] / fm / 1e9 if fm else None
            gbs_b = m["touched_bytes"] / bm / 1e9 if bm else None
            rows.append(
                [
                    name,
                    _fmt_s(fm),
                    _fmt_s(bm),
                    f"{bf / fm:.2f}x" if bf and fm else "-",
                    f"{bb / bm:.2f}x" if bb and bm else "-",
                    f"{gbs_f:.2f}" if gbs_f else "-",
                    f"{100 * gbs_f / limit:.0f}%" if gbs_f and limit else "-",
                    f"{gbs_b:.2f}" if gbs_b else "-",
                    f"{v.get('err_fwd', float('nan')):.1e}/{v.get('err_bwd', float('nan')):.1e}",
                    f"n={len(v['fwd'])}, min {_fmt_s(v['fwd_min'])}/{_fmt_s(v['bwd_min'])}s, "
                    f"faults {v['fwd_faults_median']:,.0f}/{v['bwd_faults_median']:,.0f}, "
                    f"compile {v['compile_s']:.1f}s; {v['desc']}",
                ]
            )
        blocks.append(
            _table(
                [
                    "variant",
                    "fwd s",
                    "bwd s",
                    "fwd speed-up",
                    "bwd speed-up",
                    "fwd GB/s",
                    "of copy",
                    "bwd GB/s",
                    "rel err f/b",
                    "notes",
                ],
                rows,
                f"AGGREGATION n={m['num_nodes']:,} E={m['num_edges']:,} F={m['num_features']}"
                f" (P = 1 edge list, GCN weights): median seconds per call; bwd = VJP w.r.t. h;"
                f" GB/s = {m['touched_bytes'] / 1e9:.2f} GB that must be touched "
                f"(E*F*4 + E*8 + N*F*4) / time; speed-up and error vs baseline; library = "
                f"{m.get('library_impl', '?')}",
            )
        )
    mach = report["machine"]
    if "machine" in sections:
        load = lambda la: "-" if la is None else "/".join(f"{x:.1f}" for x in la)  # noqa: E731
        blocks.append(
            f"machine: {mach['cpus']} CPUs, {_fmt_bytes(mach['mem_total'])}, "
            f"{mach['versions']}; load average (1/5/15 min) at start "
            f"{load(mach['load_start'])}, at end {load(mach.get('load_end'))}; total "
            f"{report.get('total_s', 0):.0f} s"
        )
    return "\n\n".join(blocks)


if __name__ == "__main__":
    sys.exit(main())
