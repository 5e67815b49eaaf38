"""Skip-gram with negative sampling (SGNS): its hyper-parameters and its update on one replica.

**The update** (:func:`sgns_update`; Mikolov et al. 2013, word2vec's ``skip-gram`` branch). For a
pair with input row ``s = syn0[i]``, positive output ``o_0 = syn1[t]`` and negatives
``o_1..o_K = syn1[n_k]`` drawn from ``count ** 0.75``::

    g_k   = (1[k = 0] - sigmoid(s . o_k)) * alpha        (k = 0..K)
    syn1[o_k] += g_k * s                                 (pre-update s)
    syn0[i]   += sum_k g_k * o_k                         (pre-update o_k)

A negative equal to the positive is skipped (``g = 0``), as in word2vec; the exact sigmoid
replaces word2vec's table clipped at ``|f| > 6``; the rate is per pair, not divided by ``B``.

**Batches** (where this deviates from word2vec). One step applies the updates of ``B`` pairs
computed from the *same* tables, so ``k`` updates of one row act as one step ``k`` times longer,
which overshoots on hub-heavy graphs. Two rules keep a step near a sequential pass:
*interleaved batches* (``interleave = I``: step ``s`` of a span of ``I`` steps trains pairs
``s, s + I, s + 2 I, ...``, so a batch spans about ``I B`` pairs, not the runs of shared rows
one walk gives; every pair is trained once, in a fixed order) and *a row cap* (``row_cap = c``:
a row with ``k`` updates in one step moves by ``min(1, c / k)`` times their sum).

*Shared negatives* (``shared_negatives = G``, as GraphVite and PyTorch-BigGraph; 4 by default)
give each group of ``G`` pairs of a step one draw of ``K`` negatives. The merge rules
(:data:`MERGES`) are :mod:`jaxgraph.embed.merge`'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numba
import numpy as np

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import COUNT_SOURCES, CountSource
from jaxgraph.embed.device_pairs import MAX_WINDOW

LR_SCHEDULES = ("round", "linear", "global")
OBJECTIVES = ("negative", "hierarchical")
KERNELS = ("auto", "jax", "cpu")

Merge = Literal["mean", "sum", "touched"]
MERGES = ("mean", "sum", "touched")


def check_merge(merge: str) -> None:
    """Raises a ValueError naming the allowed rules unless ``merge`` is one of :data:`MERGES`."""
    if merge not in MERGES:
        raise ValueError(f"merge must be one of {', '.join(MERGES)}, got {merge!r}")


@dataclasses.dataclass(frozen=True)
class SkipGramConfig:
    """Skip-gram hyper-parameters (word2vec / FeLoG defaults).

    Attributes:
      dim: embedding dimension ``d``.
      window: maximum window ``w``; the effective window is uniform on ``{1..w}``.
      negatives: negatives ``K`` per pair.
      sample: sub-sampling threshold ``s`` (``<= 0``: off).
      counts: where node counts (negatives, sub-sampling) come from: ``"corpus"`` (occurrences
        in all walks trained so far) or ``"degree"`` (out-degree, as the public FeLoG code).
      lr: initial learning rate ``alpha_0``.
      init_scale: ``syn0`` starts uniform on ``[-init_scale / d, init_scale / d]`` (``syn1``
        at zero). ``1.0`` (default) is gensim 4's range, ``0.5`` word2vec's.
      lr_decay: round ``r`` trains at ``alpha_0 * exp(-lr_decay * r)``.
      lr_schedule: ``"round"`` (constant within a round), ``"linear"`` (additionally decays
        linearly within a round to ``1e-4`` of the round's rate, by tokens processed) or
        ``"global"`` (word2vec's and gensim's schedule spread over the rounds: round ``r`` at
        token fraction ``f`` trains at ``alpha_0 * max(1 - (r + f) / R, 1e-4)`` with
        ``R = schedule_rounds``; ``lr_decay`` is unused). A round that trains fewer walks
        (feedback) still takes its ``1/R`` share of the decay.
      schedule_rounds: ``R`` of the ``"global"`` schedule (:func:`jaxgraph.embed.run.embed`
        sets it to the run's rounds when it is None).
      batch_size: pairs per device per step.
      row_cap: a row that receives ``k`` updates in one step moves by ``min(1, row_cap / k)``
        times their sum (module docstring); None sums them (word2vec's first order, unstable
        on hub-heavy graphs).
      shared_negatives: ``G``, pairs that share one draw of ``K`` negatives: each step's batch
        falls into groups of ``G`` pairs (consecutive in the batch, hence far apart in the
        walks: batches are interleaved), and every pair of a group takes the group's ``K``
        negatives, so a step touches ``2 + K / G`` random rows per pair instead of ``2 + K``.
        ``4`` (default: docs/embedding.md, "Presets", gives what it saves and costs); ``1``:
        every pair draws its own (word2vec); see :func:`sgns_update`.
      sync_every: steps between two table syncs (a round always ends with a full merge);
        ``merge="sum"`` on ``P`` replicas syncs at least every ``min(8 N / B, 64) / (P - 1)``
        steps (``8 N / B`` alone on 2), which keeps it from diverging (see :func:`sum_period`).
      interleave: ``I``, steps whose batches interleave: the pairs of ``I`` consecutive steps
        are dealt round-robin into them, so a batch draws its pairs from a stretch of about
        ``I B`` consecutive pairs of the walks (module docstring: with the row cap, a narrow
        stretch damps rows that recur within a few walks). None: the whole sync period.
      merge: how syncs combine replicas: ``"mean"`` (averaging, FeLoG's AllSync), ``"sum"``
        (every replica's change counts fully) or ``"touched"`` (each row takes the mean change
        of the replicas that changed it); see :func:`merge_rows`.
      block_pairs: memory bound: walks are cut into blocks of about this many pairs.
      objective: the output layer: ``"negative"`` (negative sampling, ``negatives`` per pair)
        or ``"hierarchical"`` (hierarchical softmax over a Huffman tree of the node degrees,
        DeepWalk's published objective; :mod:`jaxgraph.embed.hsoftmax`; ``negatives`` and
        ``shared_negatives`` are unused).
      kernel: what trains on host-built pairs: ``"jax"`` (the JAX program, any backend),
        ``"cpu"`` (:mod:`jaxgraph.embed.cpu_sgns` and :mod:`jaxgraph.embed.cpu_hsoftmax`,
        compiled kernels with the same update for CPU devices, single-process; its negatives
        come from other random streams) or ``"auto"`` (default: ``"cpu"`` where those hold on
        a CPU backend, else ``"jax"``).
      threads: the CPU kernel's threads (None: numba's count for the calling thread, all
        cores unless ``numba.set_num_threads`` lowered it). On one device, ``1 < T <= 4``
        threads train ``T`` copies of the tables, each a contiguous ``T``-th of every sync
        period, and the copies' changes are summed every ``sync_every`` steps of each (at
        most :func:`sum_period`'s); a run repeats its bits.
        Otherwise they are split among the replicas, which train at once; above one on a
        replica, its steps overlap (their writes in step order), so a run's bits vary
        (:mod:`~jaxgraph.embed._kernel_steps`).
      pairs: where the skip-gram pairs are built: ``"host"`` (numba, then moved to the
        devices, 8 bytes per pair) or ``"device"`` (the walks move, 4 bytes per token, and each
        device builds the pairs of its walks; :mod:`jaxgraph.embed.device_pairs`). Both give
        the same pairs in the same order, hence the same tables.
    """

    dim: int = 128
    window: int = 10
    negatives: int = 5
    sample: float = 1e-3
    counts: CountSource = "corpus"
    lr: float = 0.025
    init_scale: float = 1.0
    lr_decay: float = 0.1
    lr_schedule: Literal["round", "linear", "global"] = "round"
    schedule_rounds: int | None = None
    batch_size: int = 1024
    row_cap: int | None = 4
    shared_negatives: int = 4
    sync_every: int = 64
    interleave: int | None = 8
    merge: Merge = "mean"
    block_pairs: int = 1 << 23
    objective: Literal["negative", "hierarchical"] = "negative"
    kernel: Literal["auto", "jax", "cpu"] = "auto"
    threads: int | None = None
    pairs: Literal["host", "device"] = "host"

    def __post_init__(self):
        for name in ("dim", "window", "negatives", "batch_size", "sync_every", "block_pairs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        g, b = self.shared_negatives, self.batch_size
        if not 1 <= g <= b or b % g:
            message = f"shared_negatives must be in [1, batch_size = {b}] and divide it, got {g}"
            raise ValueError(message)
        for name in ("interleave", "row_cap"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}")
        for name, allowed in (("counts", COUNT_SOURCES), ("lr_schedule", LR_SCHEDULES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.schedule_rounds is not None and self.schedule_rounds < 1:
            raise ValueError(f"schedule_rounds must be >= 1, got {self.schedule_rounds}")
        check_merge(self.merge)
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        if self.kernel == "cpu" and self.pairs != "host":
            raise ValueError(
                "kernel='cpu' trains host-built pairs: set pairs='host', or kernel='jax'"
            )
        cores = numba.config.NUMBA_NUM_THREADS  # what numba may use on this machine
        if self.threads is not None and not 1 <= self.threads <= cores:
            raise ValueError(f"threads must be in [1, {cores}] or None, got {self.threads}")
        if self.pairs not in ("host", "device"):
            raise ValueError(f"pairs must be 'host' or 'device', got {self.pairs!r}")
        if self.pairs == "device" and self.window > MAX_WINDOW:
            raise ValueError(f"pairs='device' needs window <= {MAX_WINDOW}, got {self.window}")
        for name, value in (("lr", self.lr), ("init_scale", self.init_scale)):
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not math.isfinite(self.sample):
            raise ValueError(f"sample must be a finite number (<= 0: off), got {self.sample}")
        if not (self.lr_decay >= 0 and math.isfinite(self.lr_decay)):
            raise ValueError(f"lr_decay must be a finite number >= 0, got {self.lr_decay}")

    def kernel_in_use(self) -> str:
        """``"cpu"`` or ``"jax"``: what trains host-built pairs here (``kernel``, with ``"auto"``
        resolved); raises ``ValueError`` for ``"cpu"`` in a multi-process run."""
        if self.kernel == "cpu" and jax.process_count() > 1:
            raise ValueError("kernel='cpu' trains the replicas of one process: use kernel='jax'")
        if self.kernel != "auto":
            return self.kernel
        fits = self.pairs == "host" and jax.process_count() == 1
        return "cpu" if fits and jax.default_backend() == "cpu" else "jax"

    def round_lr(self, round_index: int) -> float:
        """The rate at the start of round ``r``: ``alpha_0 * exp(-lr_decay * r)``, or for the
        ``"global"`` schedule ``alpha_0 * max(1 - r / R, 1e-4)``."""
        if self.lr_schedule == "global":
            return float(self.step_rates(round_index, np.zeros(1))[0])
        return self.lr * math.exp(-self.lr_decay * round_index)

    def step_rates(self, round_index: int, frac: np.ndarray) -> np.ndarray:
        """Learning rates of the steps of round ``r`` that start at token fractions ``frac``
        (``0 <= frac < 1``, the share of the round's tokens before the step); raises
        ``ValueError`` for the ``"global"`` schedule without ``schedule_rounds``."""
        frac = np.asarray(frac, np.float64)
        if self.lr_schedule == "global":
            if self.schedule_rounds is None:
                raise ValueError("lr_schedule='global' needs schedule_rounds (the run's rounds)")
            left = 1.0 - (round_index + frac) / self.schedule_rounds
            return self.lr * np.maximum(left, 1e-4)
        lr = self.lr * math.exp(-self.lr_decay * round_index)
        if self.lr_schedule == "round":
            return np.full(frac.shape, lr)
        return lr * np.maximum(1.0 - frac, 1e-4)


def round_walk_order(seed: int, round_index: int, num_walks: int) -> np.ndarray:
    """The order in which round ``r`` trains its walks: a permutation of ``num_walks`` seeded by
    ``(seed, r)``, ``int64[W]``."""
    return np.random.default_rng([seed, hr.PURPOSE_SHUFFLE, round_index]).permutation(num_walks)


class Tables(NamedTuple):
    """The two SGNS tables. Per replica ``f32[N, d]``; in the trainer ``f32[P, N, d]`` with the
    leading mesh axis sharded (replica ``p`` on device ``p``)."""

    syn0: jax.Array
    syn1: jax.Array


def init_tables(key: jax.Array, num_nodes: int, dim: int, scale: float = 0.5) -> Tables:
    """``syn0 ~ U(-scale/d, scale/d)``, ``syn1 = 0`` (``Tables(f32[N, d], f32[N, d])``):
    word2vec's initialisation at ``scale = 0.5`` (the default), gensim 4's at ``scale = 1``."""
    half = scale / dim
    syn0 = jax.random.uniform(key, (num_nodes, dim), jnp.float32, -half, half)
    return Tables(syn0, jnp.zeros((num_nodes, dim), jnp.float32))


class NegativeTable(NamedTuple):
    """The negatives' alias table (:func:`jaxgraph.embed.corpus.alias_table`): ``accept:
    f32[N]``, ``alias: int32[N]``."""

    accept: jax.Array | np.ndarray
    alias: jax.Array | np.ndarray


def sample_negatives(
    key: jax.Array, accept: jax.Array, alias: jax.Array, shape: tuple[int, ...]
) -> jax.Array:
    """Draws node ids from an alias table (:func:`jaxgraph.embed.corpus.alias_table`).

    Shapes:
      ``accept: f32[N]``, ``alias: int32[N]`` -> ``int32[shape]``.
    """
    k_idx, k_u = jax.random.split(key)
    i = jax.random.randint(k_idx, shape, 0, accept.shape[0], jnp.int32)
    u = jax.random.uniform(k_u, shape, jnp.float32)
    return jnp.where(u < accept[i], i, alias[i])


def sgns_update(
    syn0: jax.Array,
    syn1: jax.Array,
    inputs: jax.Array,
    outputs: jax.Array,
    negatives: jax.Array,
    weight: jax.Array,
    lr: jax.Array | float,
    *,
    row_cap: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One batched SGNS step (see the module docstring for the formula and recurring rows).

    **Shared negatives** (``negatives: int32[B / G, K]``): each group of ``G`` consecutive pairs
    takes one draw of ``K`` negatives, so each pair's expected update is still word2vec's, and a
    step moves ``2 + K / G`` rows per pair instead of ``K + 2``. Without the cap the update
    equals the per-pair one with the group's negatives repeated; under the cap a shared negative
    counts once for its group, not ``G`` times (which would scale its step by ``c / G``).

    Args:
      inputs, outputs: input (context) and positive output (centre) row of each pair.
      negatives: ``K`` negative output rows per pair, or per group of ``G = B / len(negatives)``
        consecutive pairs that share them (``SkipGramConfig.shared_negatives``).
      weight: per-pair factor, ``0`` for padding pairs (which then change nothing), else ``1``.
      row_cap: a row with ``k`` live updates moves by ``min(1, row_cap / k)`` times their sum
        (None: the sum).

    Returns:
      ``(syn0', syn1', loss)``, ``loss`` the weighted sum over pairs of ``-log sigmoid(s.o_0) -
      sum_k log sigmoid(-s.o_k)`` before the update (tables ``f32[N, d]``, ``weight: f32[B]``).
    """
    if inputs.shape[0] % negatives.shape[0]:
        raise ValueError(
            f"negatives must have one row per pair or per group of pairs: {negatives.shape[0]} "
            f"rows do not divide {inputs.shape[0]} pairs"
        )
    scratch = None if row_cap is None else jnp.zeros(2 * syn0.shape[0], jnp.int32)
    syn0, syn1, loss, _ = _sgns_step(
        syn0, syn1, inputs, outputs, negatives, weight, lr, row_cap, scratch
    )
    return syn0, syn1, loss


def _sgns_step(syn0, syn1, inputs, outputs, negatives, weight, lr, row_cap, scratch):
    """:func:`sgns_update` with the counting buffer of the row cap carried by the caller
    (``scratch: int32[2N]``, all zero in and out; None when ``row_cap`` is None), so that a
    loop of steps clears only the entries it touched. A shared negative row is gathered and
    scattered once per group."""
    syn0, syn1 = jnp.asarray(syn0), jnp.asarray(syn1)
    n, d = syn0.shape
    b, (groups, negs) = inputs.shape[0], negatives.shape
    share = b // groups
    s = syn0[inputs]  # f32[B, d]
    o_pos = syn1[outputs]  # f32[B, d]
    o_neg = syn1[negatives]  # f32[B/G, K, d]
    s_grouped = s.reshape(groups, share, d)
    f_neg = jnp.einsum("ngd,nkd->ngk", s_grouped, o_neg).reshape(b, negs)
    f = jnp.concatenate([jnp.sum(s * o_pos, axis=-1)[:, None], f_neg], axis=1)  # f32[B, K+1]
    per_pair = jnp.broadcast_to(negatives[:, None, :], (groups, share, negs)).reshape(b, negs)
    positive = jnp.arange(negs + 1) == 0  # bool[K+1]
    # word2vec skips a negative that happens to be the positive itself.
    live = jnp.concatenate([jnp.ones((b, 1), bool), per_pair != outputs[:, None]], axis=1)
    w = weight[:, None] * live.astype(f.dtype)  # f32[B, K+1]
    g = (positive.astype(f.dtype) - jax.nn.sigmoid(f)) * (lr * w)
    loss = -jnp.sum(w * jax.nn.log_sigmoid(jnp.where(positive, f, -f)))
    g_pos, g_neg = g[:, 0], g[:, 1:].reshape(groups, share, negs)
    ds = g_pos[:, None] * o_pos + jnp.einsum("ngk,nkd->ngd", g_neg, o_neg).reshape(b, d)
    do_pos = g_pos[:, None] * s  # f32[B, d]
    do_neg = jnp.einsum("ngk,ngd->nkd", g_neg, s_grouped)  # f32[B/G, K, d]
    if row_cap is not None:
        # One count over both tables: syn0 row i is id i, syn1 row j is id N + j. A shared
        # negative counts once for its group.
        ids = jnp.concatenate([inputs, n + outputs, n + negatives.reshape(-1)])
        neg_hits = jnp.any((w[:, 1:] > 0).reshape(groups, share, negs), axis=1).reshape(-1)
        hits = jnp.concatenate([weight > 0, w[:, 0] > 0, neg_hits]).astype(jnp.int32)
        k, scratch = row_multiplicity(ids, hits, scratch)
        scale = jnp.minimum(1.0, row_cap / k.astype(f.dtype))  # f32[2B + K B/G]
        ds = ds * scale[:b, None]
        do_pos = do_pos * scale[b : 2 * b, None]
        do_neg = do_neg * scale[2 * b :].reshape(groups, negs, 1)
    syn0 = syn0.at[inputs].add(ds)
    syn1 = syn1.at[outputs].add(do_pos).at[negatives.reshape(-1)].add(do_neg.reshape(-1, d))
    return syn0, syn1, loss, scratch


def row_multiplicity(
    ids: jax.Array, live: jax.Array, scratch: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """How many live updates share each entry's id: ``k[i] = sum_j live[j] [ids[j] = ids[i]]``
    (at least 1), counted in ``scratch`` (zero on entry, and zero again on return: only the
    entries of ``ids`` are cleared, so the cost is ``O(len(ids))``, not ``O(M)``). ``live`` is
    a flag, or a count when one entry stands for several updates. ``ids: int32[E]`` in
    ``[0, M)``, ``scratch: int32[M]`` -> ``(k int32[E], scratch int32[M])``.
    """
    counted = scratch.at[ids].add(live.astype(jnp.int32))
    return jnp.maximum(counted[ids], 1), counted.at[ids].set(0)


def sgns_update_reference(syn0, syn1, inputs, outputs, negatives, weight, lr, row_cap=None):
    """NumPy (float64) oracle of :func:`sgns_update`, ``(syn0', syn1')``: the closed form pair
    by pair, summed per row, each row's sum scaled by ``min(1, row_cap / k)`` for its ``k`` live
    updates (a negative shared by a group of pairs counts once for the group)."""
    syn0 = np.asarray(syn0, np.float64)
    syn1 = np.asarray(syn1, np.float64)
    share = len(inputs) // len(negatives)
    d0, d1 = np.zeros_like(syn0), np.zeros_like(syn1)
    k0, k1 = np.zeros(len(syn0)), np.zeros(len(syn1))
    for b in range(len(inputs)):
        s = syn0[inputs[b]]
        targets = [outputs[b], *negatives[b // share]]
        for k, t in enumerate(targets):
            if k > 0 and t == outputs[b]:
                continue
            label = 1.0 if k == 0 else 0.0
            g = (label - 1.0 / (1.0 + np.exp(-s @ syn1[t]))) * lr * weight[b]
            d1[t] += g * s
            d0[inputs[b]] += g * syn1[t]
        k0[inputs[b]] += weight[b] > 0
        k1[outputs[b]] += weight[b] > 0
    for n, group in enumerate(negatives):
        pairs = range(n * share, (n + 1) * share)
        for t in group:
            k1[t] += any(weight[b] > 0 and outputs[b] != t for b in pairs)
    if row_cap is not None:
        d0 *= np.minimum(1.0, row_cap / np.maximum(k0, 1))[:, None]
        d1 *= np.minimum(1.0, row_cap / np.maximum(k1, 1))[:, None]
    return syn0 + d0, syn1 + d1
