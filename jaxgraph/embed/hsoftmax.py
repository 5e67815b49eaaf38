"""Skip-gram with hierarchical softmax (Mikolov et al. 2013; DeepWalk's published objective).

**The tree** (:func:`huffman_tree`). A Huffman tree over node weights, as word2vec builds it over
word counts: the ``N`` nodes are its leaves, its ``N - 1`` inner nodes are rows ``0 .. N - 2``
of ``syn1`` (the root is row ``N - 2``), and a node's path from the root is its *points* (inner
rows) and *code* (``1`` where the path turns to the lighter child). Frequent nodes get short
paths. The trainer builds the tree once, from the node degrees (a random walk visits a node in
proportion to its degree, so degrees are the corpus counts it expects), and keeps it for the
run: ``syn1``'s inner rows keep their meaning only under one tree.

**The update** (:func:`hs_update`; word2vec's ``hs`` branch). For a pair with input row
``s = syn0[i]`` and output (centre) node ``t`` with points ``p_1..p_L`` and code ``c_1..c_L``::

    g_l       = (1 - c_l - sigmoid(s . syn1[p_l])) * alpha       (l = 1..L)
    syn1[p_l] += g_l * s                                         (pre-update s)
    syn0[i]   += sum_l g_l * syn1[p_l]                           (pre-update syn1)

A batch applies ``B`` pairs' updates computed from the same tables; the row cap of
:mod:`jaxgraph.embed.sgns` applies to the input rows and the inner rows alike.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.embed.sgns import row_multiplicity


class HuffmanTree(NamedTuple):
    """The paths of the ``N`` leaves, padded to the longest path ``L``: ``points: int32[N, L]``
    (inner rows of ``syn1``, root first; padding ``0``) and ``labels: f32[N, L]`` (the target
    ``1 - code`` of each point; padding ``-1``)."""

    points: jax.Array | np.ndarray
    labels: jax.Array | np.ndarray


def huffman_tree(weights: np.ndarray) -> HuffmanTree:
    """The Huffman tree of ``N >= 2`` non-negative ``weights`` (see the module docstring).

    Merges the two lightest subtrees until one is left (ties: the subtree made first, leaves in
    id order), as word2vec's two-queue construction does over counts sorted in descending
    order. Raises ``ValueError`` for fewer than two nodes or a negative or non-finite weight.
    """
    w = np.asarray(weights, np.float64)
    n = w.shape[0]
    if w.ndim != 1 or n < 2:
        raise ValueError(f"a Huffman tree needs at least 2 weights, got shape {w.shape}")
    if not np.all(np.isfinite(w) & (w >= 0)):
        raise ValueError("Huffman weights must be finite and >= 0")
    parent = np.zeros(2 * n - 1, np.int64)
    bit = np.zeros(2 * n - 1, np.int8)
    heap = [(w[v], v) for v in range(n)]
    heapq.heapify(heap)
    for inner in range(n, 2 * n - 1):
        (w1, a), (w2, b) = heapq.heappop(heap), heapq.heappop(heap)
        parent[a] = parent[b] = inner
        bit[b] = 1  # the heavier (or later) child
        heapq.heappush(heap, (w1 + w2, inner))
    root = 2 * n - 2
    depth = np.zeros(2 * n - 1, np.int64)
    for v in range(root - 1, -1, -1):  # a parent's id is above its children's
        depth[v] = depth[parent[v]] + 1
    length = int(depth[:n].max())
    points = np.zeros((n, length), np.int32)
    labels = np.full((n, length), -1.0, np.float32)
    leaves, v = np.arange(n), np.arange(n)
    for up in range(length):  # the ancestor ``up`` levels above each leaf, all leaves at once
        live = depth[leaves] > up
        level = depth[leaves[live]] - 1 - up
        points[leaves[live], level] = parent[v[live]] - n
        labels[leaves[live], level] = 1.0 - bit[v[live]]
        v = np.where(live, parent[v], v)
    return HuffmanTree(points, labels)


def hs_update(
    syn0: jax.Array,
    syn1: jax.Array,
    inputs: jax.Array,
    outputs: jax.Array,
    tree: HuffmanTree,
    weight: jax.Array,
    lr: jax.Array | float,
    *,
    row_cap: int | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One batched hierarchical-softmax step (the module docstring's update).

    Shapes:
      ``syn0, syn1: f32[N, d]``, ``inputs, outputs: int32[B]``, ``weight: f32[B]`` (``0``:
      padding) -> ``(syn0', syn1', loss)``, ``loss`` the weighted sum over pairs of
      ``-sum_l log sigmoid((1 - 2 c_l) s . syn1[p_l])`` before the update.
    """
    scratch = None if row_cap is None else jnp.zeros(2 * syn0.shape[0], jnp.int32)
    syn0, syn1, loss, _ = hs_step(syn0, syn1, inputs, outputs, tree, weight, lr, row_cap, scratch)
    return syn0, syn1, loss


def hs_step(syn0, syn1, inputs, outputs, tree, weight, lr, row_cap, scratch):
    """:func:`hs_update` with the row cap's counting buffer carried by the caller (as
    :func:`jaxgraph.embed.sgns._sgns_step`)."""
    n, d = syn0.shape
    b = inputs.shape[0]
    points, labels = tree.points[outputs], tree.labels[outputs]  # int32[B, L], f32[B, L]
    w = weight[:, None] * (labels >= 0).astype(syn0.dtype)  # f32[B, L]
    s = syn0[inputs]  # f32[B, d]
    o = syn1[points]  # f32[B, L, d]
    f = jnp.einsum("bd,bld->bl", s, o)
    g = (labels - jax.nn.sigmoid(f)) * (lr * w)
    loss = -jnp.sum(w * jax.nn.log_sigmoid(jnp.where(labels > 0.5, f, -f)))
    ds = jnp.einsum("bl,bld->bd", g, o)
    do = g[:, :, None] * s[:, None, :]  # f32[B, L, d]
    flat = points.reshape(-1)
    if row_cap is not None:
        ids = jnp.concatenate([inputs, n + flat])
        hits = jnp.concatenate([weight > 0, w.reshape(-1) > 0]).astype(jnp.int32)
        k, scratch = row_multiplicity(ids, hits, scratch)
        scale = jnp.minimum(1.0, row_cap / k.astype(syn0.dtype))
        ds = ds * scale[:b, None]
        do = do * scale[b:].reshape(b, -1, 1)
    syn0 = syn0.at[inputs].add(ds)
    syn1 = syn1.at[flat].add(do.reshape(-1, d))
    return syn0, syn1, loss, scratch


def hs_update_reference(syn0, syn1, inputs, outputs, tree, weight, lr, row_cap=None):
    """NumPy (float64) oracle of :func:`hs_update`, ``(syn0', syn1')``: word2vec's update pair
    by pair from the same tables, summed per row, each row's sum scaled by ``min(1, row_cap /
    k)`` for its ``k`` live updates."""
    syn0 = np.asarray(syn0, np.float64)
    syn1 = np.asarray(syn1, np.float64)
    points, labels = np.asarray(tree.points), np.asarray(tree.labels)
    d0, d1 = np.zeros_like(syn0), np.zeros_like(syn1)
    k0, k1 = np.zeros(len(syn0)), np.zeros(len(syn1))
    for b in range(len(inputs)):
        s = syn0[inputs[b]]
        k0[inputs[b]] += weight[b] > 0
        for p, label in zip(points[outputs[b]], labels[outputs[b]], strict=True):
            if label < 0:
                continue
            g = (label - 1.0 / (1.0 + np.exp(-s @ syn1[p]))) * lr * weight[b]
            d1[p] += g * s
            d0[inputs[b]] += g * syn1[p]
            k1[p] += weight[b] > 0
    if row_cap is not None:
        d0 *= np.minimum(1.0, row_cap / np.maximum(k0, 1))[:, None]
        d1 *= np.minimum(1.0, row_cap / np.maximum(k1, 1))[:, None]
    return syn0 + d0, syn1 + d1
