"""1D block-row layout of the normalised adjacency (CAGNET-style).

Nodes are placed on ``P * B`` padded positions, ``B`` per device: device ``i`` owns block ``i``
and computes its output rows as ``sum_j Â_ij @ X_j``, where ``Â_ij`` is the block of the
normalised adjacency (rows = destinations) with the rows of block ``i`` and the columns of
block ``j``, stored as padded COO, and ``X_j`` the feature rows of block ``j``.

Block ``i`` holds the contiguous ids ``[i * B0, (i + 1) * B0)``, ``B0 = ceil(N / P)``, or with
``parts`` the nodes of part ``i`` by ascending id (a good partition makes the off-diagonal
blocks sparse). Padded position ``q`` is block ``q // B``, local row ``q % B``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from jaxgraph.graph import Graph
from jaxgraph.partition.halo import _check_pad_multiple, _group_positions, _round_up
from jaxgraph.partition.partitioners import _check_num_parts, check_parts


@dataclasses.dataclass(frozen=True, eq=False)
class BlockRowPlan:
    """Per-device blocks of the normalised adjacency in a 1D block-row layout.

    Attributes:
      num_parts: ``P``.
      num_nodes: global ``N``.
      block_size: ``B``, padded rows per device.
      norm: the normalisation of the stored blocks, ``"gcn"`` or ``"mean"``.
      perm: ``int32[N]`` padded position in ``[0, P * B)`` of each global node.
      row_nodes: ``int32[P, B]`` global id of each padded row (0 on pad rows).
      row_mask: ``bool[P, B]`` True on real rows.
      block_rows: ``int32[P, P, Z]``; ``block_rows[i, j]`` = block-local row (destination)
        of each stored entry of ``Â_ij`` (``Z``: the largest nnz, at least 1, padded).
      block_cols: ``int32[P, P, Z]`` block-local column (source).
      block_vals: ``float32[P, P, Z]`` entry values; pad entries are 0 everywhere.
      block_nnz: ``int32[P, P]`` number of real entries of each block. Real entries come
        first, sorted by ``(row, col)``.
    """

    num_parts: int
    num_nodes: int
    block_size: int
    norm: str
    perm: np.ndarray
    row_nodes: np.ndarray
    row_mask: np.ndarray
    block_rows: np.ndarray
    block_cols: np.ndarray
    block_vals: np.ndarray
    block_nnz: np.ndarray

    @property
    def max_nnz(self) -> int:
        """``Z``, padded entries per block."""
        return int(self.block_vals.shape[2])

    def shard_nodes(self, array) -> np.ndarray:
        """``[N, ...]`` (global ids) -> ``[P, B, ...]`` (padded block-row layout, pads 0)."""
        array = np.asarray(array)
        if array.shape[:1] != (self.num_nodes,):
            raise ValueError(
                f"expected a per-node array with leading dimension {self.num_nodes}, "
                f"got shape {array.shape}"
            )
        out = np.zeros((self.num_parts * self.block_size,) + array.shape[1:], array.dtype)
        out[self.perm] = array
        return out.reshape((self.num_parts, self.block_size) + array.shape[1:])

    def unshard_nodes(self, array):
        """Inverse of :meth:`shard_nodes`, ``[P, B, ...] -> [N, ...]`` (NumPy or JAX arrays)."""
        if tuple(array.shape[:2]) != (self.num_parts, self.block_size):
            raise ValueError(
                f"expected a [P={self.num_parts}, B={self.block_size}, ...] array, "
                f"got shape {tuple(array.shape)}"
            )
        flat = array.reshape((self.num_parts * self.block_size,) + tuple(array.shape[2:]))
        return flat[self.perm]

    def dense_block(self, i: int, j: int) -> np.ndarray:
        """``Â_ij`` as a dense ``float32[B, B]`` array (for tests and debugging)."""
        out = np.zeros((self.block_size, self.block_size), np.float32)
        k = int(self.block_nnz[i, j])
        np.add.at(
            out, (self.block_rows[i, j, :k], self.block_cols[i, j, :k]), self.block_vals[i, j, :k]
        )
        return out


def build_block_row_plan(
    graph: Graph,
    num_parts: int,
    *,
    norm: Literal["gcn", "mean"] = "gcn",
    parts=None,
    pad_multiple: int = 1,
) -> BlockRowPlan:
    """Splits the normalised adjacency of ``graph`` into ``P x P`` padded COO blocks.

    Args:
      num_parts: ``P >= 1`` (at most ``N``).
      norm: ``"gcn"`` (:meth:`Graph.normalized_adjacency`, with the GCN self-loops) or
        ``"mean"``.
      parts: optional ``int[N]`` owner part of each node; block ``i`` then holds part ``i``.
      pad_multiple: round ``B`` and ``Z`` up to a multiple of this; results do not depend on it.

    Raises:
      ValueError: on an unknown ``norm``, an invalid ``num_parts`` or ``parts``, or
        ``pad_multiple < 1``.
    """
    if norm not in ("gcn", "mean"):
        raise ValueError(f"unknown normalisation {norm!r}; expected 'gcn' or 'mean'")
    pad_multiple = _check_pad_multiple(pad_multiple)
    n = graph.num_nodes
    p = _check_num_parts(num_parts, n)

    if parts is None:
        b0 = -(-n // p)  # block membership does not depend on pad_multiple
        b = _round_up(b0, pad_multiple)
        block, row = np.divmod(np.arange(n, dtype=np.int64), b0)
        perm = block * b + row
    else:
        parts, _ = check_parts(parts, n, p)
        order = np.lexsort((np.arange(n), parts))  # by (part, id)
        rank, sizes = _group_positions(parts[order], p)
        b = _round_up(max(int(sizes.max()), 1), pad_multiple)
        perm = np.empty(n, np.int64)
        perm[order] = parts[order].astype(np.int64) * b + rank
    row_nodes = np.zeros(p * b, np.int32)
    row_nodes[perm] = np.arange(n)
    row_mask = np.zeros(p * b, bool)
    row_mask[perm] = True

    coo = graph.normalized_adjacency(norm).tocoo()
    bi, lr = np.divmod(perm[coo.row], b)
    bj, lc = np.divmod(perm[coo.col], b)
    order = np.lexsort((lc, lr, bj, bi))
    block = (bi * p + bj)[order]
    pos, nnz = _group_positions(block, p * p)
    z = _round_up(max(int(nnz.max(initial=0)), 1), pad_multiple)
    block_rows = np.zeros((p * p, z), np.int32)
    block_cols = np.zeros((p * p, z), np.int32)
    block_vals = np.zeros((p * p, z), np.float32)
    block_rows[block, pos] = lr[order]
    block_cols[block, pos] = lc[order]
    block_vals[block, pos] = coo.data[order]

    return BlockRowPlan(
        num_parts=p,
        num_nodes=n,
        block_size=b,
        norm=norm,
        perm=perm.astype(np.int32),
        row_nodes=row_nodes.reshape(p, b),
        row_mask=row_mask.reshape(p, b),
        block_rows=block_rows.reshape(p, p, z),
        block_cols=block_cols.reshape(p, p, z),
        block_vals=block_vals.reshape(p, p, z),
        block_nnz=nnz.reshape(p, p).astype(np.int32),
    )
