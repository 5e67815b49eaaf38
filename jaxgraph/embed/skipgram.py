"""Skip-gram with negative sampling (SGNS) on the device: the update, the data-parallel trainer.

**The update** (:func:`sgns_update`; Mikolov et al. 2013, word2vec's ``skip-gram`` branch). For a
pair with input row ``s = syn0[i]``, positive output ``o_0 = syn1[t]`` and negatives
``o_1..o_K = syn1[n_k]`` drawn from ``count ** 0.75``::

    g_k   = (1[k = 0] - sigmoid(s . o_k)) * alpha        (k = 0..K)
    syn1[o_k] += g_k * s                                 (pre-update s)
    syn0[i]   += sum_k g_k * o_k                         (pre-update o_k)

A negative equal to the positive is skipped (``g = 0``), as in word2vec; the exact sigmoid
replaces word2vec's table clipped at ``|f| > 6``; the rate is per pair, not divided by ``B``.

**Batches** (where this deviates from word2vec). One step applies the updates of ``B`` pairs
computed from the *same* tables (Hogwild-like, as word2vec's threads). ``k`` updates of one row
summed from one stale value act as a step ``k`` times longer, which a sequential pass never takes
(each of its updates shrinks as ``sigmoid`` saturates): on hub-heavy graphs the summed step
overshoots, row norms grow and dot-product scores stop ranking edges. Two rules keep a step near
a sequential pass over the same pairs, whatever the degree distribution:

* *Interleaved batches* (``interleave = I``). One walk gives its pairs in runs (every centre
  token up to ``2 w``, sharing most rows with its neighbours), so the pairs of ``I`` consecutive
  steps are dealt round-robin: step ``s`` of a span trains pairs ``s, s + I, s + 2 I, ...``, and
  a batch holds pairs of a stretch of about ``I B``. Every pair is trained once, in a fixed
  order, the same on every backend and mesh.
* *A row cap* (``row_cap = c``). A row with ``k`` updates in one step (input row of ``syn0``,
  positive or negative row of ``syn1``) moves by ``min(1, c / k)`` times their sum: up to ``c``
  updates add as in word2vec, beyond that the row takes ``c`` times their mean.

With the cap on both tables and a narrow span (``I = 8``) link prediction scores above gensim's
at its DeepWalk settings, and node classification does not pay for the batching
(experiments/README.md, "Batches from a stretch of 8 steps" and the sections after it).
*Shared negatives* (``shared_negatives = G``, as GraphVite and PyTorch-BigGraph) give each group
of ``G`` pairs of a step one draw of ``K`` negatives (:func:`sgns_update`).

**Data parallelism** (:class:`SkipGramTrainer`). Each device of a 1-D mesh trains on its shard
of the round's walks with a full replica of both tables (``f32[P, N, d]``). A :class:`TableSync`
merges rows every ``sync_every`` steps by one of three rules (:func:`merge_rows`) --
:class:`AllSync` (every row, FeLoG's baseline) or a selective sync (:mod:`jaxgraph.embed.sync`);
a round ends with a full merge, so the feedback and the output read one consistent table.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from typing import Literal, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxgraph.embed import _hostrng as hr
from jaxgraph.embed.corpus import (
    COUNT_SOURCES,
    CountSource,
    alias_table,
    corpus_counts,
    keep_probability,
    negative_weights,
    skipgram_pairs,
)
from jaxgraph.embed.device_pairs import (
    MAX_WINDOW,
    DeviceWalks,
    gather_rows,
    keep_thresholds,
    key_words,
    pair_capacity,
    skipgram_pairs_device,
)
from jaxgraph.embed.sizes import padded_size
from jaxgraph.embed.walks import Walks
from jaxgraph.mesh import Bounded, place

LR_SCHEDULES = ("round", "linear", "global")
# Sum merges this many steps apart (or more) swing from round to round on a hub-heavy graph
# (merge_rows; experiments/README.md, "Fewer merges"); the trainer warns at them.
SUM_SWING_STEPS = 512


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
        at zero). ``0.5`` (default) is word2vec's range (and gensim's before 4.0), ``1.0``
        gensim 4's: at gensim's DeepWalk settings the wider start scores BlogCatalog's
        Micro-F1 slightly higher in one pass and leaves ca-AstroPh's AUC as it was
        (experiments/README.md, "The initial range"); a comparison with gensim 4 sets it.
      lr_decay: round ``r`` trains at ``alpha_0 * exp(-lr_decay * r)``.
      lr_schedule: ``"round"`` (constant within a round), ``"linear"`` (additionally decays
        linearly within a round to ``1e-4`` of the round's rate, by tokens processed) or
        ``"global"`` (word2vec's and gensim's schedule spread over the rounds: round ``r`` at
        token fraction ``f`` trains at ``alpha_0 * max(1 - (r + f) / R, 1e-4)`` with
        ``R = schedule_rounds``; ``lr_decay`` is unused). With rounds of equal size this is one
        linear decay over the whole corpus; a round that trains fewer walks (feedback) still
        takes its ``1/R`` share of the decay.
      schedule_rounds: ``R`` of the ``"global"`` schedule (:func:`jaxgraph.embed.run.embed`
        sets it to the run's rounds when it is None).
      batch_size: pairs per device per step.
      row_cap: a row that receives ``k`` updates in one step moves by ``min(1, row_cap / k)``
        times their sum (module docstring); None sums them (word2vec's first order, unstable
        on hub-heavy graphs). ``k`` grows with ``batch_size``, so a larger batch wants a
        larger cap (16 at 16,384 pairs per step: :func:`jaxgraph.embed.run.gpu_config`).
      shared_negatives: ``G``, pairs that share one draw of ``K`` negatives: each step's batch
        falls into groups of ``G`` pairs (consecutive in the batch, hence far apart in the
        walks: batches are interleaved), and every pair of a group takes the group's ``K``
        negatives. Each pair still sees ``K`` negatives from ``count ** 0.75``, so the expected
        update is word2vec's; a step gathers and scatters ``B (2 + K / G)`` rows instead of
        ``B (K + 2)``, and the negative term is a product per group. ``1`` (default): every
        pair draws its own (word2vec). A shared negative counts once per group under the row
        cap (:func:`sgns_update`). ``G = 32`` trains faster than ``G = 8`` and drops an R-MAT's
        cosine AUC below gensim's (experiments/README.md, "Negatives shared by 32 pairs").
      sync_every: steps between two table syncs (a round always ends with a full merge).
      interleave: ``I``, steps whose batches interleave: the pairs of ``I`` consecutive steps
        are dealt round-robin into them, so a batch draws its pairs from a stretch of about
        ``I B`` consecutive pairs of the walks (module docstring: with the row cap, a narrow
        stretch damps rows that recur within a few walks). None: the whole sync period.
      merge: how syncs combine replicas: ``"mean"`` (averaging, FeLoG's AllSync), ``"sum"``
        (every replica's change counts fully) or ``"touched"`` (each row takes the mean change
        of the replicas that changed it); see :func:`merge_rows`.
      block_pairs: memory bound: walks are cut into blocks of about this many pairs.
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
    init_scale: float = 0.5
    lr_decay: float = 0.1
    lr_schedule: Literal["round", "linear", "global"] = "round"
    schedule_rounds: int | None = None
    batch_size: int = 1024
    row_cap: int | None = 4
    shared_negatives: int = 1
    sync_every: int = 64
    interleave: int | None = 8
    merge: Merge = "mean"
    block_pairs: int = 1 << 23
    pairs: Literal["host", "device"] = "host"

    def __post_init__(self):
        for name in ("dim", "window", "negatives", "batch_size", "sync_every", "block_pairs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 1 <= self.shared_negatives <= self.batch_size or (
            self.batch_size % self.shared_negatives
        ):
            raise ValueError(
                f"shared_negatives must be in [1, batch_size = {self.batch_size}] and divide "
                f"it, got {self.shared_negatives}"
            )
        if self.interleave is not None and self.interleave < 1:
            raise ValueError(f"interleave must be >= 1 or None, got {self.interleave}")
        if self.row_cap is not None and self.row_cap < 1:
            raise ValueError(f"row_cap must be >= 1 or None, got {self.row_cap}")
        if self.counts not in COUNT_SOURCES:
            raise ValueError(f"counts must be one of {COUNT_SOURCES}, got {self.counts!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.schedule_rounds is not None and self.schedule_rounds < 1:
            raise ValueError(f"schedule_rounds must be >= 1, got {self.schedule_rounds}")
        check_merge(self.merge)
        if self.pairs not in ("host", "device"):
            raise ValueError(f"pairs must be 'host' or 'device', got {self.pairs!r}")
        if self.pairs == "device" and self.window > MAX_WINDOW:
            raise ValueError(f"pairs='device' needs window <= {MAX_WINDOW}, got {self.window}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a finite number > 0, got {self.lr}")
        if not (self.init_scale > 0 and math.isfinite(self.init_scale)):
            raise ValueError(f"init_scale must be a finite number > 0, got {self.init_scale}")
        if not math.isfinite(self.sample):
            raise ValueError(f"sample must be a finite number (<= 0: off), got {self.sample}")
        if not (self.lr_decay >= 0 and math.isfinite(self.lr_decay)):
            raise ValueError(f"lr_decay must be a finite number >= 0, got {self.lr_decay}")

    def round_lr(self, round_index: int) -> float:
        """The rate at the start of round ``r``: ``alpha_0 * exp(-lr_decay * r)``, or for the
        ``"global"`` schedule ``alpha_0 * max(1 - r / R, 1e-4)``."""
        if self.lr_schedule == "global":
            return float(self.step_rates(round_index, np.zeros(1))[0])
        return self.lr * math.exp(-self.lr_decay * round_index)

    def step_rates(self, round_index: int, frac: np.ndarray) -> np.ndarray:
        """Learning rates of the steps of round ``r`` that start at token fractions ``frac``
        (``0 <= frac < 1``, the share of the round's tokens before the step).

        Raises:
          ValueError: the ``"global"`` schedule without ``schedule_rounds``.
        """
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


# ---------------------------------------------------------------------- the update


def init_tables(key: jax.Array, num_nodes: int, dim: int, scale: float = 0.5) -> Tables:
    """``syn0 ~ U(-scale/d, scale/d)``, ``syn1 = 0``: word2vec's initialisation at
    ``scale = 0.5`` (the default), gensim 4's at ``scale = 1``.

    Shapes:
      ``-> Tables(f32[N, d], f32[N, d])``.
    """
    half = scale / dim
    syn0 = jax.random.uniform(key, (num_nodes, dim), jnp.float32, -half, half)
    return Tables(syn0, jnp.zeros((num_nodes, dim), jnp.float32))


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

    **Shared negatives** (``negatives: int32[B / G, K]``). Each group of ``G`` consecutive pairs
    of the batch (pairs of different walks, since batches are interleaved) takes one draw of
    ``K`` negatives. Every pair still sees ``K`` independent draws from ``count ** 0.75``, so
    each pair's expected update is word2vec's; the draws of a group are correlated. A step reads
    and writes ``2 + K / G`` random rows per pair instead of ``K + 2``, and the negative term is
    one ``[G, d] x [d, K]`` product per group. Under the row cap a shared negative counts once for
    its group, not ``G`` times: the cap bounds a row that recurs across the step, and counting
    the ``G`` pairs of one draw would scale every shared negative's step by ``c / G``, which
    costs dot-product AUC and lets row norms grow (experiments/README.md, "Shared negatives").
    Without the cap the update equals the per-pair one with the group's negatives repeated for
    each of its pairs.

    Args:
      syn0, syn1: the input and output tables.
      inputs: input (context) row of each pair.
      outputs: positive output (centre) row of each pair.
      negatives: ``K`` negative output rows per pair, or per group of ``G = B / len(negatives)``
        consecutive pairs that share them (``SkipGramConfig.shared_negatives``).
      weight: per-pair factor, ``0`` for padding pairs (which then change nothing) and ``1``
        otherwise.
      lr: learning rate ``alpha``.
      row_cap: a row with ``k`` live updates in the batch moves by ``min(1, row_cap / k)``
        times their sum; None sums them.

    Returns:
      ``(syn0', syn1', loss)`` with ``loss`` the weighted sum over pairs of
      ``-log sigmoid(s.o_0) - sum_k log sigmoid(-s.o_k)`` before the update.

    Shapes:
      ``syn0, syn1: f32[N, d]``, ``inputs, outputs: int32[B]``, ``negatives: int32[B, K]`` or
      ``int32[B / G, K]``, ``weight: f32[B]``, ``lr: f32[]``.
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
    loop of steps clears only the entries it touched.

    ``negatives`` is ``int32[B, K]``, or ``int32[B / G, K]`` when groups of ``G`` consecutive
    pairs share their negatives: the same update as ``int32[B, K]`` with each row repeated
    ``G`` times, computed as a product per group so a shared row is gathered and scattered
    once."""
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
        # negative counts once for its group (module docstring).
        ids = jnp.concatenate([inputs, n + outputs, n + negatives.reshape(-1)])
        hits = jnp.concatenate(
            [
                (weight > 0).astype(jnp.int32),
                (w[:, 0] > 0).astype(jnp.int32),
                jnp.any((w[:, 1:] > 0).reshape(groups, share, negs), axis=1)
                .astype(jnp.int32)
                .reshape(-1),
            ]
        )
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
    a flag, or a count when one entry stands for several updates.

    Shapes:
      ``ids: int32[E]`` in ``[0, M)``, ``live: bool[E]`` or ``int32[E]``, ``scratch:
      int32[M]`` -> ``(int32[E], int32[M])``.
    """
    counted = scratch.at[ids].add(live.astype(jnp.int32))
    return jnp.maximum(counted[ids], 1), counted.at[ids].set(0)


def sgns_update_reference(syn0, syn1, inputs, outputs, negatives, weight, lr, row_cap=None):
    """NumPy (float64) oracle of :func:`sgns_update`: the closed form pair by pair, summed per
    row, each row's sum scaled by ``min(1, row_cap / k)`` for its ``k`` live updates (a
    negative shared by a group of pairs counts once for the group).

    Returns:
      ``(syn0', syn1')`` as ``float64`` arrays.
    """
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


# ---------------------------------------------------------------------- syncs


class TableSync(Protocol):
    """Merges (some) table rows across the replicas; called inside ``shard_map``.

    ``__call__(tables, anchor, *, axis_name) -> (tables, anchor)`` on one replica's
    ``Tables(f32[N, d], f32[N, d])``. ``anchor`` is the value of the tables at the previous
    merge (``None`` unless ``needs_anchor``); the sync returns the new anchor. ``merge`` names
    the rule the closing full sync of a round uses; ``rows(num_nodes)`` is the number of rows
    (of both tables together) that one call all-reduces, for communication accounting.

    A *planned* sync (:mod:`jaxgraph.embed.sync`) also has ``plan(update_counts,
    round_update_counts, sync_index, seed, pending_counts=...) -> SyncPlan``, called on the host
    before each periodic sync with the trainer's counts (of the run, of the round, and since
    each row's last merge); it is then called as
    ``__call__(tables, anchor, index, *, axis_name)`` with the plan's replicated row index
    (:func:`indexed_sync_program`), or replaced by a full merge when the plan's index is None.
    """

    merge: Merge
    needs_anchor: bool

    def __call__(self, tables: Tables, anchor: Tables | None, *, axis_name: str): ...

    def rows(self, num_nodes: int) -> int: ...


Merge = Literal["mean", "sum", "touched"]
MERGES = ("mean", "sum", "touched")


def check_merge(merge: str) -> None:
    """Raises a ValueError naming the allowed rules unless ``merge`` is one of :data:`MERGES`."""
    if merge not in MERGES:
        raise ValueError(f"merge must be one of {', '.join(MERGES)}, got {merge!r}")


def merge_block(t: jax.Array, a: jax.Array | None, merge: Merge, *, axis_name: str) -> jax.Array:
    """Merges one block of rows across ``axis_name`` (``t``: this replica's rows, ``a``: their
    anchor, the value at the last merge): ``f32[R, d] -> f32[R, d]`` (replicated).

    ``"mean"``: ``pmean(t)``. ``"sum"``: ``a + psum(t - a)``. ``"touched"``: ``a + psum(t - a)
    / k`` with ``k`` the number of replicas whose row changed since the anchor (at least 1).
    """
    if merge == "mean":
        return jax.lax.pmean(t, axis_name)
    if a is None:
        raise ValueError(f"merge={merge!r} needs the anchor tables")
    if merge == "sum":
        # a + psum(t - a), one elementwise pass shorter.
        return jax.lax.psum(t, axis_name) - (jax.lax.axis_size(axis_name) - 1) * a
    delta = t - a  # f32[R, d]
    total = jax.lax.psum(delta, axis_name)
    changed = jnp.any(delta != 0, axis=-1).astype(t.dtype)  # f32[R]
    k = jnp.maximum(jax.lax.psum(changed, axis_name), 1.0)
    return a + total / k[:, None]


def merge_rows(
    tables: Tables,
    anchor: Tables | None,
    merge: Merge,
    *,
    axis_name: str,
    input_rows: jax.Array | None = None,
):
    """Merges whole tables across ``axis_name``: ``Tables[N, d] -> Tables[N, d]`` (replicated),
    and returns the new anchor (None for ``"mean"``, which needs none).

    ``input_rows`` (``int32[C]``, replicated; repeats allowed) restricts the merge of ``syn0``
    to those rows; ``syn1`` is merged whole. The result is the full merge's whenever every
    other ``syn0`` row is unchanged on every replica since the last merge: such a row is
    equal on all replicas and to its anchor, so every rule leaves it as it is. ``syn0``
    changes only at the input rows of the trained pairs, which the host knows, so the trainer
    passes the inputs trained since the last merge (:class:`SkipGramTrainer`); ``syn1`` also
    changes at the negatives, drawn on the devices.

    A merge reads and writes every row of both tables and the anchor, so it is bound by memory
    bandwidth; merging ``syn0`` at its trained rows only is what makes it cheaper
    (experiments/README.md, "Where a round's time goes").

    ``"mean"`` (FeLoG, DistGER): ``pmean`` (model averaging; each replica's update counts
    ``1/P``). With a merge after every step, ``P`` devices at ``alpha`` equal one device training
    on the union of their batches at ``alpha / P``, so a round on ``P`` devices moves the tables
    about as far as ``1/P`` of a round on one device.
    ``"sum"``: ``anchor + psum(tables - anchor)``: every replica's update counts fully, so
    ``P`` replicas merged after every step equal one device on the union of their batches at
    ``alpha``. Over a sync period a hub changes on every replica, and the sum of ``P`` such
    changes, each computed from the same anchor, overshoots: it diverges at 4 and 8 replicas on
    an R-MAT of 2^14 nodes, and with 2 replicas merged every 512 steps or more the dot-product
    AUC swings from one round to the next while loss per pair and row norms stay healthy
    (experiments/README.md, "Fewer merges" and "Merge rules on more replicas").
    ``"touched"``: each row takes the mean of the changes of the replicas that changed it: a
    row trained on one replica keeps its whole change (as ``"sum"``), a hub trained on all
    ``P`` takes the mean of their changes (as ``"mean"``), so no row's merged step is ``P``
    steps computed from one stale value; it stays healthy where ``"sum"`` diverges.

    ``tests/embed/test_skipgram.py`` checks the mean and sum identities on several mesh sizes,
    a replica simulation for longer sync periods, and the ``"touched"`` rule row by row.
    """
    anchors = (None, None) if anchor is None else anchor
    if input_rows is None:
        new = Tables(
            *(
                merge_block(t, a, merge, axis_name=axis_name)
                for t, a in zip(tables, anchors, strict=True)
            )
        )
        return (new, anchor) if merge == "mean" else (new, new)
    a0 = None if anchor is None else anchor.syn0[input_rows]
    rows = merge_block(tables.syn0[input_rows], a0, merge, axis_name=axis_name)  # f32[C, d]
    syn1 = merge_block(tables.syn1, anchors[1], merge, axis_name=axis_name)
    new = Tables(tables.syn0.at[input_rows].set(rows), syn1)
    if merge == "mean":
        return new, anchor
    return new, Tables(anchor.syn0.at[input_rows].set(rows), syn1)


@dataclasses.dataclass(frozen=True)
class AllSync:
    """Merges every row of ``syn0`` and ``syn1`` (the AllSync baseline of FeLoG §6.6).

    The trainer passes the ``syn0`` rows trained since the last merge when it knows them
    (host-built pairs), and the rest of ``syn0``, unchanged on every replica, is left as it
    is: the same tables as merging every row, with fewer rows moved (``RoundStats.sync_rows``
    counts those merged). With one replica the trainer skips the periodic merges (the merge of
    one replica is the identity).

    Attributes:
      merge: ``"mean"`` (default; averaging all rows, as FeLoG / DistGER), ``"sum"`` (adds
        every replica's change since the last merge) or ``"touched"``; see :func:`merge_rows`.
    """

    merge: Merge = "mean"

    def __post_init__(self):
        check_merge(self.merge)

    @property
    def needs_anchor(self) -> bool:
        return self.merge != "mean"

    def __call__(self, tables, anchor, input_rows=None, *, axis_name):
        """Merges every row; with ``input_rows``, only those of ``syn0`` need merging and the
        rest are left as they are (exact; see :func:`merge_rows`)."""
        return merge_rows(tables, anchor, self.merge, axis_name=axis_name, input_rows=input_rows)

    def rows(self, num_nodes: int) -> int:
        return 2 * num_nodes


# ---------------------------------------------------------------------- device programs


def _train_chunk(
    tables,
    inputs,
    outputs,
    weights,
    lr,
    num_steps,
    first_step,
    key,
    accept,
    alias,
    *,
    axis_name,
    negatives,
    row_cap,
    share=1,
    span=None,
):
    """The first ``num_steps`` of ``S`` buffered SGNS steps on this device's replica.

    ``num_steps`` (``S'``) is traced, so one compiled program serves every chunk length;
    buffer slots past its ``S' B`` pairs are never read. Batches are interleaved (module
    docstring) within spans of ``I = span`` steps (None: the whole chunk): step ``s`` of the
    span starting at step ``g`` trains pairs ``g B + (s - g) + I' j`` (``j < B``) of the
    flattened buffer, ``I' = min(I, S' - g)`` the span's length.
    Step ``s`` draws its negatives from ``fold_in(fold_in(key, first_step + s), device)``,
    ``K`` for every group of ``share`` consecutive pairs of its batch.

    Shapes (per device):
      ``tables: Tables(f32[1, N, d], f32[1, N, d])``, ``inputs, outputs: int32[1, S, B]``,
      ``weights: f32[1, S, B]``, ``lr: f32[S]``, ``num_steps, first_step: int32[]``
      (replicated), ``accept: f32[N]``, ``alias: int32[N]`` -> ``(Tables, loss f32[1])``.
    """
    device = jax.lax.axis_index(axis_name)
    batch = inputs.shape[-1]
    n = tables.syn0.shape[1]
    # in, out: int32[S B]; w: f32[S B]
    flat_in, flat_out, flat_w = (a[0].reshape(-1) for a in (inputs, outputs, weights))
    lane = jnp.arange(batch, dtype=jnp.int32)  # int32[B]
    span = num_steps if span is None else jnp.minimum(span, num_steps)

    def step(s, carry):
        syn0, syn1, loss, scratch = carry  # f32[N, d], f32[N, d], f32[], int32[2N] | None
        k = jax.random.fold_in(jax.random.fold_in(key, first_step + s), device)
        neg = sample_negatives(k, accept, alias, (batch // share, negatives))  # int32[B/G, K]
        g = (s // span) * span  # first step of s's span
        at = g * batch + (s - g) + lane * jnp.minimum(span, num_steps - g)  # int32[B]
        ins, outs, w = flat_in[at], flat_out[at], flat_w[at]  # int32[B], int32[B], f32[B]
        syn0, syn1, step_loss, scratch = _sgns_step(
            syn0, syn1, ins, outs, neg, w, lr[s], row_cap, scratch
        )
        return syn0, syn1, loss + step_loss, scratch

    loss0 = jax.lax.pcast(jnp.zeros((), jnp.float32), axis_name, to="varying")
    scratch = None
    if row_cap is not None:
        scratch = jax.lax.pcast(jnp.zeros(2 * n, jnp.int32), axis_name, to="varying")
    syn0, syn1, loss, _ = jax.lax.fori_loop(
        0, num_steps, step, (tables.syn0[0], tables.syn1[0], loss0, scratch)
    )
    return Tables(syn0[None], syn1[None]), loss[None]


def _sync_tables(tables, anchor, *, axis_name, sync):
    """Shapes (per device): ``Tables(f32[1, N, d], f32[1, N, d])`` and the same (or ``None``)
    anchor -> same."""
    squeeze = lambda t: None if t is None else Tables(*(a[0] for a in t))
    unsqueeze = lambda t: None if t is None else Tables(*(a[None] for a in t))
    tables, anchor = sync(squeeze(tables), squeeze(anchor), axis_name=axis_name)
    return unsqueeze(tables), unsqueeze(anchor)


@functools.lru_cache(maxsize=32)
def train_program(
    mesh: Mesh,
    axis_name: str,
    negatives: int,
    row_cap: int | None = None,
    share: int = 1,
    span: int | None = None,
):
    """The jitted data-parallel training program (cached per mesh, ``K`` and row cap).

    ``train(tables, inputs, outputs, weights, lr, num_steps, first_step, key, accept, alias)
    -> (tables, loss f32[P])`` runs the first ``num_steps`` buffered steps on every replica;
    replica ``p`` draws the negatives of step ``s`` from
    ``fold_in(fold_in(key, first_step + s), p)``. Tables are ``f32[P, N, d]`` sharded on
    ``axis_name`` (donated), the pair buffers ``[P, S, B]`` likewise; the rest is replicated.
    """
    shard, rep = P(axis_name), P()
    return jax.jit(
        jax.shard_map(
            functools.partial(
                _train_chunk,
                axis_name=axis_name,
                negatives=negatives,
                row_cap=row_cap,
                share=share,
                span=span,
            ),
            mesh=mesh,
            in_specs=(shard, shard, shard, shard, rep, rep, rep, rep, rep, rep),
            out_specs=(shard, shard),
        ),
        donate_argnums=0,
    )


def _train_buffered(
    tables,
    inputs,
    outputs,
    count,
    updates,
    lr,
    num_steps,
    start,
    first_step,
    key,
    accept,
    alias,
    *,
    axis_name,
    negatives,
    batch,
    row_cap,
    share=1,
    span=None,
):
    """:func:`_train_chunk` on steps ``start .. start + num_steps`` of pair buffers held on
    the device (:func:`pairs_program`): the chunk is pairs ``start B .. (start + num_steps) B``
    of this device's buffer (interleaved into steps as there), weight 0 from ``count`` on.
    ``updates`` accumulates the rows trained (input and positive output row of every pair) per
    device.

    Shapes (per device):
      ``inputs, outputs: int32[1, M]`` with ``M >= (start + S) B``, ``count: int32[1]``,
      ``updates: int32[1, N]``, ``lr: f32[S]``, ``start: int32[]`` (replicated), the rest as in
      :func:`_train_chunk` -> ``(Tables, loss f32[1], updates)``.
    """
    size = lr.shape[0] * batch
    lo = start * batch
    x_in = jax.lax.dynamic_slice(inputs[0], (lo,), (size,))
    x_out = jax.lax.dynamic_slice(outputs[0], (lo,), (size,))
    at = lo + jnp.arange(size, dtype=jnp.int32)
    live = (at < count[0]) & (at < lo + num_steps * batch)
    shape = (1, lr.shape[0], batch)
    tables, loss = _train_chunk(
        tables,
        x_in.reshape(shape),
        x_out.reshape(shape),
        live.astype(jnp.float32).reshape(shape),
        lr,
        num_steps,
        first_step,
        key,
        accept,
        alias,
        axis_name=axis_name,
        negatives=negatives,
        row_cap=row_cap,
        share=share,
        span=span,
    )
    hits = live.astype(jnp.int32)
    updates = updates[0].at[x_in].add(hits).at[x_out].add(hits)
    return tables, loss, updates[None]


@functools.lru_cache(maxsize=32)
def buffered_train_program(
    mesh: Mesh,
    axis_name: str,
    negatives: int,
    batch: int,
    row_cap: int | None = None,
    share: int = 1,
    span: int | None = None,
):
    """The jitted :func:`_train_buffered` (tables and ``updates`` donated): ``train(tables,
    inputs, outputs, count, updates, lr, num_steps, start, first_step, key, accept, alias) ->
    (tables, loss f32[P], updates)``; buffers, counts and ``updates`` sharded on
    ``axis_name``."""
    shard, rep = P(axis_name), P()
    return jax.jit(
        jax.shard_map(
            functools.partial(
                _train_buffered,
                axis_name=axis_name,
                negatives=negatives,
                batch=batch,
                row_cap=row_cap,
                share=share,
                span=span,
            ),
            mesh=mesh,
            in_specs=(shard,) * 5 + (rep,) * 7,
            out_specs=(shard, shard, shard),
        ),
        donate_argnums=(0, 4),
    )


def _device_pairs(nodes, lengths, ids, thresh_hi, thresh_lo, key, *, window, capacity, axis_name):
    """Per device: ``nodes int32[1, W_p, L]``, ``lengths int32[1, W_p]``, ``ids uint32[1,
    W_p]`` -> ``(inputs int32[1, M], outputs int32[1, M], count int32[1], all counts
    int32[P])`` (the last replicated)."""
    ins, outs, count = skipgram_pairs_device(
        nodes[0], lengths[0], ids[0], thresh_hi, thresh_lo, key, window=window, capacity=capacity
    )
    # Every device's count, replicated (a one-hot psum: the result is mesh-invariant).
    slot = jax.nn.one_hot(
        jax.lax.axis_index(axis_name), jax.lax.axis_size(axis_name), dtype=jnp.int32
    )
    return ins[None], outs[None], count[None], jax.lax.psum(slot * count, axis_name)


@functools.lru_cache(maxsize=32)
def pairs_program(mesh: Mesh, axis_name: str, window: int, capacity: int):
    """The jitted per-device pair builder: every device enumerates the skip-gram pairs of its
    own walks (:func:`jaxgraph.embed.device_pairs.skipgram_pairs_device`) into a buffer of
    ``capacity`` slots."""
    shard, rep = P(axis_name), P()
    return jax.jit(
        jax.shard_map(
            functools.partial(_device_pairs, window=window, capacity=capacity, axis_name=axis_name),
            mesh=mesh,
            in_specs=(shard, shard, shard, rep, rep, rep),
            out_specs=(shard, shard, shard, rep),
        )
    )


def _sync_tables_indexed(tables, anchor, index, *, axis_name, sync):
    """Shapes (per device): ``Tables(f32[1, N, d], f32[1, N, d])``, the same (or ``None``)
    anchor and ``index: int32[C]`` (replicated) -> tables and anchor."""
    squeeze = lambda t: None if t is None else Tables(*(a[0] for a in t))
    unsqueeze = lambda t: None if t is None else Tables(*(a[None] for a in t))
    tables, anchor = sync(squeeze(tables), squeeze(anchor), index, axis_name=axis_name)
    return unsqueeze(tables), unsqueeze(anchor)


@functools.lru_cache(maxsize=32)
def indexed_sync_program(mesh: Mesh, axis_name: str, sync: TableSync):
    """The jitted ``(tables, anchor, index) -> (tables, anchor)`` of a planned sync: ``index:
    int32[C]`` replicated, tables ``f32[P, N, d]`` sharded on ``axis_name`` (both donated)."""
    shard = P(axis_name)
    return jax.jit(
        jax.shard_map(
            functools.partial(_sync_tables_indexed, axis_name=axis_name, sync=sync),
            mesh=mesh,
            in_specs=(shard, shard, P()),
            out_specs=(shard, shard),
        ),
        donate_argnums=(0, 1),
    )


@functools.lru_cache(maxsize=32)
def sync_program(mesh: Mesh, axis_name: str, sync: TableSync):
    """The jitted ``(tables, anchor) -> (tables, anchor)`` applying ``sync`` on every replica
    (tables ``f32[P, N, d]`` sharded on ``axis_name``, both donated)."""
    shard = P(axis_name)
    return jax.jit(
        jax.shard_map(
            functools.partial(_sync_tables, axis_name=axis_name, sync=sync),
            mesh=mesh,
            in_specs=(shard, shard),
            out_specs=(shard, shard),
        ),
        donate_argnums=(0, 1),
    )


# ---------------------------------------------------------------------- control


@dataclasses.dataclass
class RoundStats:
    """What one :meth:`SkipGramTrainer.train_round` did (host-side numbers)."""

    walks: int
    tokens: int
    pairs: int
    steps: int
    syncs: int
    sync_rows: int
    lr: float
    loss: float
    seconds_pairs: float
    seconds: float
    # Bytes of training input moved host -> device: the pair buffers (``pairs="host"``) or the
    # walk rows (``pairs="device"``; 0 when the walks were decoded on a device already).
    input_bytes: int = 0
    # The largest row norm of syn0 and syn1 after the round's closing merge.
    max_norm: float = float("nan")


class SkipGramTrainer:
    """Data-parallel SGNS over the devices of a 1-D mesh, one round of walks at a time.

    Args:
      num_nodes: vocabulary size ``N`` (node ids ``0..N-1``).
      config: :class:`SkipGramConfig`.
      mesh: a 1-D mesh (:func:`jaxgraph.mesh.make_mesh`); one replica per device.
      seed: seeds the table initialisation, the walk shuffling, the pairs and the negatives.
      degrees: ``int[N]`` node degrees; required when ``config.counts == "degree"``.
      sync: the periodic :class:`TableSync` (default ``AllSync(config.merge)``).

    Raises:
      ValueError: non-positive ``num_nodes``, a mesh that is not 1-D, missing or mis-shaped
        ``degrees``, the ``"global"`` schedule without ``schedule_rounds``.
    """

    def __init__(
        self,
        num_nodes: int,
        config: SkipGramConfig,
        mesh: Mesh,
        *,
        seed: int = 0,
        degrees: np.ndarray | None = None,
        sync: TableSync | None = None,
    ):
        if num_nodes <= 0:
            raise ValueError(f"num_nodes must be positive, got {num_nodes}")
        if len(mesh.axis_names) != 1:
            raise ValueError(f"the trainer needs a 1-D mesh, got axes {mesh.axis_names}")
        if config.counts == "degree":
            if degrees is None or np.shape(degrees) != (num_nodes,):
                raise ValueError("counts='degree' needs degrees of shape [num_nodes]")
        config.round_lr(0)  # an incomplete schedule ('global' without its rounds) fails here
        self.num_nodes = num_nodes
        self.config = config
        self.mesh = mesh
        self.axis_name = mesh.axis_names[0]
        self.num_devices = mesh.shape[self.axis_name]
        self.seed = seed
        self.sync = sync or AllSync(config.merge)
        if self.sync.merge != config.merge:
            raise ValueError(
                f"sync merges by {self.sync.merge!r} but config.merge is {config.merge!r}"
            )
        if (
            self.num_devices > 1
            and self.sync.merge == "sum"
            and config.sync_every >= SUM_SWING_STEPS
        ):
            warnings.warn(
                f"merge='sum' every {config.sync_every} steps: summed replica changes over "
                "long periods overshoot on hub-heavy graphs (on an R-MAT of 2^16 nodes the "
                "dot AUC swings from round to round at 512 and 4,096 steps, with healthy loss "
                "and row norms; experiments/README.md, 'Fewer merges'); merge more often than "
                f"every {SUM_SWING_STEPS} steps, or use merge='mean' or 'touched'",
                stacklevel=2,
            )
        self.degrees = None if degrees is None else np.asarray(degrees, np.int64)
        self.counts = np.zeros(num_nodes, np.int64)  # corpus counts of all rounds so far
        # Row updates per node from the trained pairs (input row of syn0 + positive output row
        # of syn1; negatives are drawn on the device and not counted), all rounds so far; the
        # hotness that selective syncs read (jaxgraph.embed.sync).
        self.update_counts = np.zeros(num_nodes, np.int64)
        self.round_update_counts = np.zeros(num_nodes, np.int64)  # the same, this round only
        # round_update_counts at each row's last merge: the difference is the pending count.
        self._merged_round_counts = np.zeros(num_nodes, np.int64)
        self.periodic_syncs = 0  # keys the row draws of planned syncs
        self._planned = hasattr(self.sync, "plan")
        # Every program with collectives is Bounded (jaxgraph.mesh): on an emulated CPU mesh
        # each call waits for its result, so a round never queues collectives into the
        # rendezvous abort of that runtime; elsewhere dispatch stays asynchronous.
        cap = config.row_cap
        share, span = config.shared_negatives, config.interleave
        self._train = Bounded(
            train_program(mesh, self.axis_name, config.negatives, cap, share, span), mesh
        )
        self._train_buffered = Bounded(
            buffered_train_program(
                mesh, self.axis_name, config.negatives, config.batch_size, cap, share, span
            ),
            mesh,
        )
        self._full_sync = Bounded(
            sync_program(mesh, self.axis_name, AllSync(self.sync.merge)), mesh
        )
        self._periodic_sync = Bounded(
            indexed_sync_program(mesh, self.axis_name, self.sync)
            if self._planned
            else sync_program(mesh, self.axis_name, self.sync),
            mesh,
        )
        # AllSync merges syn0 at the input rows trained since the last merge only (exact:
        # merge_rows), when the host builds the pairs and so knows them; one replica needs no
        # periodic merge at all.
        self._skip_untouched = isinstance(self.sync, AllSync) and not self._planned
        if self._skip_untouched:
            self._input_rows_sync = Bounded(
                indexed_sync_program(mesh, self.axis_name, self.sync), mesh
            )
        # The host sees the inputs only when it builds the pairs; one replica never reads them.
        self._tracks_inputs = (
            self._skip_untouched and self.num_devices > 1 and config.pairs == "host"
        )
        self._inputs_since_merge = np.zeros(num_nodes, bool)
        self._shard = NamedSharding(mesh, P(self.axis_name))
        self._rep = NamedSharding(mesh, P())
        self._step = 0  # global step counter: keys the negatives
        self._input_bytes = 0  # training input moved host -> device, all rounds
        self._since_sync = 0
        self.tables = self._init(jax.random.key(seed))
        # Row-update counts of device-built pairs, int32[P, N] per device until read back.
        self._zero_updates = jax.jit(
            lambda: jnp.zeros((self.num_devices, num_nodes), jnp.int32),
            out_shardings=self._shard,
        )
        self._sum_updates = jax.jit(lambda u: jnp.sum(u, axis=0), out_shardings=self._rep)
        self._updates = self._zero_updates() if config.pairs == "device" else None
        # The last merged value, for merge="sum" (a separate buffer: both are donated).
        self.anchor = self._copy(self.tables) if self.sync.needs_anchor else None

    def _flush_updates(self) -> None:
        """Adds the device-side update counts to the host counters and clears them."""
        if self._updates is None:
            return
        total = np.asarray(self._sum_updates(self._updates)).astype(np.int64)
        self.update_counts += total
        self.round_update_counts += total
        self._updates = self._zero_updates()

    def _copy(self, tables: Tables) -> Tables:
        return jax.jit(
            lambda t: jax.tree.map(jnp.copy, t), out_shardings=Tables(self._shard, self._shard)
        )(tables)

    def _init(self, key) -> Tables:
        n, d, p = self.num_nodes, self.config.dim, self.num_devices

        def init():
            t = init_tables(key, n, d, self.config.init_scale)
            return Tables(*(jnp.broadcast_to(a, (p, n, d)) for a in t))

        return jax.jit(init, out_shardings=Tables(self._shard, self._shard))()

    def compile(self) -> float:
        """Compiles the programs (a zero-step chunk, the syncs ahead of time) without changing
        the tables, so that round timings exclude compilation. With ``pairs="device"`` the pair
        builder and the buffered step take their shapes from the corpus (walk rows per device,
        padded to a size class), so they compile in the first round of each size class; so do
        AllSync's merges of the trained input rows (:meth:`_input_rows`: at most 9 sizes;
        experiments/README.md, "Where a round's time goes").

        Returns:
          the seconds spent.
        """
        t0 = time.perf_counter()
        empty = [np.zeros(0, np.int32)] * self.num_devices
        accept, alias = place_all(alias_table(np.ones(self.num_nodes)), self._rep)
        key = jax.random.key(self.seed)
        loss = self._run(
            empty, empty, [0] * self.num_devices, 0, 0, np.zeros(0), key, accept, alias
        )
        if not self._planned:  # a planned sync's index size varies: compiled on first use
            self._periodic_sync.lower(self.tables, self.anchor).compile()
        self._full_sync.lower(self.tables, self.anchor).compile()
        jax.block_until_ready((self.tables, loss))
        return time.perf_counter() - t0

    # .................................................................. rounds

    def train_round(self, walks: Walks | DeviceWalks, round_index: int) -> RoundStats:
        """Trains one pass over ``walks`` at the round's learning rate, then merges the replicas.

        The walks are shuffled (seeded), cut into blocks of about ``block_pairs`` pairs and, in
        each block, split evenly over the devices; a device trains only on its own walks.
        ``walks`` may already be on a device (:class:`DeviceWalks`, single-process runs); with
        ``pairs="host"`` they are then read back.
        """
        t0 = time.perf_counter()
        cfg = self.config
        n, b = self.num_nodes, cfg.batch_size
        if isinstance(walks, DeviceWalks):
            if cfg.pairs == "host":
                w = walks.num_walks
                walks = Walks(np.asarray(walks.nodes)[:w], np.asarray(walks.lengths))
            elif jax.process_count() > 1:
                raise ValueError("walks on a device are for single-process runs: pass host walks")
        if isinstance(walks, DeviceWalks):
            round_counts = walks.counts(n)
        else:
            round_counts = corpus_counts(walks, n)
        self.counts += round_counts
        self.round_update_counts[:] = 0
        self._merged_round_counts[:] = 0  # the previous round ended with a full merge
        counts = self.counts if cfg.counts == "corpus" else self.degrees
        lr = cfg.round_lr(round_index)
        stats = RoundStats(walks.num_walks, walks.num_tokens, 0, 0, 0, 0, lr, 0.0, 0.0, 0.0)
        if walks.num_walks == 0 or counts.sum() == 0:
            stats.seconds = time.perf_counter() - t0
            return stats
        keep = keep_probability(counts, cfg.sample)
        accept, alias = place_all(alias_table(negative_weights(counts)), self._rep)
        key = jax.random.fold_in(jax.random.key(self.seed), round_index)
        pair_key = hr.round_key(self.seed, hr.PURPOSE_PAIRS, round_index)
        device_args = None
        if cfg.pairs == "device":
            device_args = place_all((*keep_thresholds(keep), key_words(pair_key)), self._rep)
        sent0 = self._input_bytes
        order = round_walk_order(self.seed, round_index, walks.num_walks)
        tokens = walks.lengths[order].astype(np.int64)
        token_end = np.cumsum(tokens)
        est_pairs = token_end[-1] * (cfg.window + 1)
        num_blocks = max(1, math.ceil(est_pairs / cfg.block_pairs))
        losses = []
        t_pairs = 0.0
        for block in np.array_split(np.arange(walks.num_walks), num_blocks):
            if block.size == 0:
                continue
            tp = time.perf_counter()
            if device_args is None:
                ins, outs, per_dev = self._block_pairs(walks, order[block], keep, pair_key)
                run = functools.partial(self._run, ins, outs, per_dev)
            else:
                buffers, per_dev = self._device_block_pairs(walks, order[block], device_args)
                run = functools.partial(self._run_buffered, buffers)
            t_pairs += time.perf_counter() - tp
            steps = max(math.ceil(m / b) for m in per_dev)
            if steps == 0:
                continue
            stats.pairs += int(sum(per_dev))
            # Learning rate per step, by token progress through the round.
            done0 = token_end[block[0]] - tokens[block[0]]
            frac = (done0 + (token_end[block[-1]] - done0) * np.arange(steps) / steps) / (
                token_end[-1]
            )
            alphas = cfg.step_rates(round_index, frac)
            start = 0
            while start < steps:
                take = min(cfg.sync_every - self._since_sync, steps - start)
                loss = run(start, take, alphas, key, accept, alias)
                losses.append(loss)
                stats.steps += take
                start += take
                self._since_sync += take
                if self._since_sync >= cfg.sync_every and start < steps:
                    rows = self._sync_periodic()
                    stats.sync_rows += rows
                    stats.syncs += rows > 0
                    self._since_sync = 0
        self._flush_updates()
        # Round end: a full merge, so the feedback and the output read one table.
        self.tables, self.anchor = self._full_sync(self.tables, self.anchor)
        self._merged_round_counts[:] = self.round_update_counts
        self._inputs_since_merge[:] = False
        self._since_sync = 0
        stats.input_bytes = self._input_bytes - sent0
        stats.syncs += 1
        stats.sync_rows += 2 * n
        stats.loss = float(sum(float(jnp.sum(x)) for x in losses)) / max(stats.pairs, 1)
        stats.max_norm = float(_max_row_norm(self.tables))
        stats.seconds_pairs = t_pairs
        stats.seconds = time.perf_counter() - t0
        return stats

    def _sync_periodic(self) -> int:
        """Runs one periodic sync; returns the rows (of both tables) it all-reduced (0: none
        was needed)."""
        sync_index = self.periodic_syncs
        self.periodic_syncs += 1
        if self._skip_untouched:
            if self.num_devices == 1:
                return 0  # merging one replica is the identity
            index = self._input_rows()
            self._inputs_since_merge[:] = False
            if index is None:
                self.tables, self.anchor = self._full_sync(self.tables, self.anchor)
                return 2 * self.num_nodes
            self.tables, self.anchor = self._input_rows_sync(
                self.tables, self.anchor, place(index, self._rep)
            )
            return index.size + self.num_nodes
        if not self._planned:
            self.tables, self.anchor = self._periodic_sync(self.tables, self.anchor)
            return self.sync.rows(self.num_nodes)
        self._flush_updates()
        plan = self.sync.plan(
            self.update_counts,
            self.round_update_counts,
            sync_index,
            self.seed,
            pending_counts=self.pending_counts,
        )
        if plan.index is None:
            self.tables, self.anchor = self._full_sync(self.tables, self.anchor)
            self._merged_round_counts[:] = self.round_update_counts
        else:
            index = place(plan.index, self._rep)
            self.tables, self.anchor = self._periodic_sync(self.tables, self.anchor, index)
            self._merged_round_counts[plan.index] = self.round_update_counts[plan.index]
        return plan.rows

    def _input_rows(self) -> np.ndarray | None:
        """The ``syn0`` rows trained since the last merge, ``int32[C]`` padded (by repeating
        the first) to ``C = ceil(N / 2^k)``, ``2 <= k <= 10``, the smallest that holds them;
        None (a full merge) with device-built pairs, whose inputs the host does not see, or
        when they are more than a quarter of the rows: the gather and scatter of an indexed
        merge then cost about what they save."""
        if not self._tracks_inputs:
            return None
        rows = np.flatnonzero(self._inputs_since_merge)
        n = self.num_nodes
        caps = [-(-n // (1 << k)) for k in range(10, 1, -1)]  # ascending
        cap = next((c for c in caps if c >= rows.size), None)
        if cap is None or cap >= n:
            return None
        index = np.full(cap, rows[0] if rows.size else 0, np.int32)
        index[: rows.size] = rows
        return index

    @property
    def pending_counts(self) -> np.ndarray:
        """``int64[N]`` row updates since each row was last merged (host counts; device-built
        pairs' counts are added at each planned sync and at the end of a round)."""
        return self.round_update_counts - self._merged_round_counts

    def _block_pairs(self, walks, ids, keep, pair_key):
        """Pairs of the walks ``ids``, split over the devices: ``(ins, outs, counts)`` with
        ``ins[p], outs[p]: int32[M_p]``."""
        ins, outs, counts = [], [], []
        for part in np.array_split(ids, self.num_devices):
            sub = Walks(walks.nodes[part], walks.lengths[part])
            i, o = skipgram_pairs(sub, part, keep, self.config.window, pair_key)
            ins.append(i)
            outs.append(o)
            counts.append(i.shape[0])
        return ins, outs, counts

    def _run(self, ins, outs, per_dev, start, take, alphas, key, accept, alias):
        """Steps ``start .. start + take`` of every device's pair stream, in one call.

        The buffers always hold ``sync_every`` steps (one compiled shape); a device whose stream
        is shorter gets zero-weight padding pairs.
        """
        b, p, cap = self.config.batch_size, self.num_devices, self.config.sync_every
        x_in = np.zeros((p, cap, b), np.int32)
        x_out = np.zeros((p, cap, b), np.int32)
        x_w = np.zeros((p, cap, b), np.float32)
        lo, hi = start * b, (start + take) * b
        trained = []
        for d in range(p):
            m = max(0, min(hi, per_dev[d]) - lo)
            x_in[d].reshape(-1)[:m] = ins[d][lo : lo + m]
            x_out[d].reshape(-1)[:m] = outs[d][lo : lo + m]
            x_w[d].reshape(-1)[:m] = 1.0
            trained += [ins[d][lo : lo + m], outs[d][lo : lo + m]]
            if self._tracks_inputs:
                self._inputs_since_merge[ins[d][lo : lo + m]] = True
        updates = np.bincount(np.concatenate(trained), minlength=self.num_nodes)
        self.update_counts += updates
        self.round_update_counts += updates
        lr = np.zeros(cap, np.float32)
        lr[:take] = alphas[start : start + take]
        self._input_bytes += x_in.nbytes + x_out.nbytes + x_w.nbytes
        x_in, x_out, x_w = place_all((x_in, x_out, x_w), self._shard)
        lr, num_steps, first = place_all((lr, np.int32(take), np.int32(self._step)), self._rep)
        self._step += take
        self.tables, loss = self._train(
            self.tables, x_in, x_out, x_w, lr, num_steps, first, key, accept, alias
        )
        return loss

    def _device_block_pairs(self, walks, ids, device_args):
        """Moves the walks ``ids`` to the devices (split as in :meth:`_block_pairs`) and builds
        their pairs there: ``((inputs, outputs, counts), per_device_counts)`` with the buffers
        ``int32[P, M]`` and ``counts int32[P]`` sharded over the mesh."""
        cfg, p = self.config, self.num_devices
        parts = np.array_split(ids, p)
        wp = padded_size(max(1, max(part.size for part in parts)))
        index = np.zeros((p, wp), np.int32)
        lengths = np.zeros((p, wp), np.int32)  # padding rows have length 0: no pairs
        for d, part in enumerate(parts):
            index[d, : part.size] = part
            lengths[d, : part.size] = walks.lengths[part]
        if isinstance(walks, DeviceWalks):  # rows move device -> device
            rows = gather_rows(walks.nodes, jax.device_put(index, walks.nodes.sharding))
            nodes = jax.device_put(rows, self._shard)
        else:
            rows = np.asarray(walks.nodes)[index]
            self._input_bytes += rows.nbytes
            nodes = place(rows, self._shard)
        self._input_bytes += lengths.nbytes + index.nbytes
        lengths, ids_dev = place_all((lengths, index.astype(np.uint32)), self._shard)
        length = nodes.shape[-1]
        capacity = pair_capacity(wp, length, cfg.window) + cfg.sync_every * cfg.batch_size
        build = Bounded(pairs_program(self.mesh, self.axis_name, cfg.window, capacity), self.mesh)
        inputs, outputs, counts, all_counts = build(nodes, lengths, ids_dev, *device_args)
        return (inputs, outputs, counts), [int(c) for c in np.asarray(all_counts)]

    def _run_buffered(self, buffers, start, take, alphas, key, accept, alias):
        """:meth:`_run` on pair buffers built on the devices (same batches, same order)."""
        cap = self.config.sync_every
        lr = np.zeros(cap, np.float32)
        lr[:take] = alphas[start : start + take]
        lr, num_steps, start, first_step = place_all(
            (lr, np.int32(take), np.int32(start), np.int32(self._step)), self._rep
        )
        self._step += take
        inputs, outputs, counts = buffers
        self.tables, loss, self._updates = self._train_buffered(
            self.tables,
            inputs,
            outputs,
            counts,
            self._updates,
            lr,
            num_steps,
            start,
            first_step,
            key,
            accept,
            alias,
        )
        return loss

    # .................................................................. output

    def replicas(self) -> Tables:
        """The device tables, ``Tables(f32[P, N, d], f32[P, N, d])``."""
        return self.tables

    def embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        """A full average of the replicas, then ``(syn0, syn1)`` as host ``f32[N, d]``."""
        self.tables, self.anchor = self._full_sync(self.tables, self.anchor)
        self._inputs_since_merge[:] = False
        return _local_replica(self.tables.syn0), _local_replica(self.tables.syn1)

    def input_vectors(self) -> np.ndarray:
        """``syn0`` as merged at the end of the last round (every replica holds it), read from
        this process's first device, ``f32[N, d]``."""
        return _local_replica(self.tables.syn0)


@jax.jit
def _max_row_norm(tables: Tables) -> jax.Array:
    """The largest row norm over both tables and every replica: ``Tables[P, N, d] -> f32[]``."""
    return jnp.sqrt(jnp.max(jnp.stack([jnp.max(jnp.sum(t * t, axis=-1)) for t in tables])))


def _local_replica(table: jax.Array) -> np.ndarray:
    """The replica ``[N, d]`` of ``table: [P, N, d]`` on this process's first device (after a
    full merge every replica is the same, on every process)."""
    shard = min(table.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.asarray(shard.data)[0]


def place_all(values, sharding):
    """Host arrays (a tuple), identical on every process, placed as ``sharding``."""
    return tuple(place(v, sharding) for v in values)
