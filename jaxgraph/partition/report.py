"""Quality and communication statistics of a partition.

The *pair volume* ``V[i, j]`` is the number of distinct nodes of part ``i`` with an out-edge
into part ``j`` (the halo ``j`` needs from ``i``). The ring of :class:`~jaxgraph.partition.HaloPlan`
pads round ``r`` to ``S_r = max_d V[d, (d + r) % P]`` rows per device, of which only
``sum_d V[d, (d + r) % P]`` are useful.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxgraph.graph import Graph
from jaxgraph.partition.partitioners import check_parts


def halo_triples(graph: Graph, parts: np.ndarray, num_parts: int):
    """Every distinct ``(owner, needer, node)`` of a halo exchange (node ``u`` of part ``i`` is
    needed by part ``j != i`` when ``u`` has an out-edge into ``j``): three ``int64[T]``,
    sorted, ``T = sum(pair_volume)``."""
    n = graph.num_nodes
    src, dst = graph.edges()
    owner = parts[src].astype(np.int64)
    needer = parts[dst].astype(np.int64)
    cut = owner != needer
    key = np.unique((owner[cut] * num_parts + needer[cut]) * n + src[cut])
    pair, node = np.divmod(key, n)
    owner_t, needer_t = np.divmod(pair, num_parts)
    return owner_t, needer_t, node


def ring_round_volumes(pair_volume: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(round_rows, useful_rows)``, two ``int64[P - 1]``: ``S_r = max_d V[d, (d+r) % P]``
    and ``sum_d V[d, (d+r) % P]`` for each ring round ``r``."""
    p = pair_volume.shape[0]
    d = np.arange(p)[None, :]
    r = np.arange(1, p)[:, None]
    per_round = pair_volume[d, (d + r) % p]  # [P - 1, P]: row r - 1 = what each d sends
    padded = per_round.max(axis=1, initial=0).astype(np.int64)
    return padded, per_round.sum(axis=1).astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class PartitionReport:
    """Statistics of a partition (see :func:`partition_report`).

    Attributes:
      graph_name: name of the partitioned graph.
      num_parts: ``P``.
      num_nodes: ``N``.
      num_edges: number of directed edges ``E`` of the graph (input self-loops included).
      sizes: ``int64[P]`` number of nodes owned by each part (may contain zeros).
      edge_cut: number of directed edges ``u -> v`` with ``parts[u] != parts[v]``.
      edge_cut_undirected: ``edge_cut // 2`` when the graph is symmetric, else ``None``.
      balance: ``max(sizes) / mean(sizes)`` (1.0 = perfectly balanced).
      remote_ratio: ``float64[P]``, per part the fraction of the distinct in-neighbours of its
        nodes owned by another part (0 without in-neighbours).
      pair_volume: ``int64[P, P]``, ``V[i, j]`` above; zero diagonal.
      round_rows: ``int64[P - 1]``, ``S_r`` = padded payload rows per device in ring round ``r``.
      round_useful_rows: ``int64[P - 1]``, rows needed in ring round ``r`` (all devices).
    """

    graph_name: str
    num_parts: int
    num_nodes: int
    num_edges: int
    sizes: np.ndarray
    edge_cut: int
    edge_cut_undirected: int | None
    balance: float
    remote_ratio: np.ndarray
    pair_volume: np.ndarray
    round_rows: np.ndarray
    round_useful_rows: np.ndarray

    @property
    def halo_rows(self) -> int:
        """Total halo rows needed over all parts (``sum(pair_volume)``)."""
        return int(self.pair_volume.sum())

    @property
    def ring_padded_rows(self) -> int:
        """Rows moved by one ring exchange over the whole mesh, padding included."""
        return int(self.num_parts * self.round_rows.sum())

    @property
    def ring_useful_rows(self) -> int:
        """Rows of one ring exchange that a receiver actually needs (``= halo_rows``)."""
        return int(self.round_useful_rows.sum())

    @property
    def ring_efficiency(self) -> float:
        """``ring_useful_rows / ring_padded_rows`` (1.0 when nothing is exchanged)."""
        padded = self.ring_padded_rows
        return self.ring_useful_rows / padded if padded else 1.0

    def format(self) -> str:
        """A human-readable multi-line table of the statistics."""
        p, undirected = self.num_parts, self.edge_cut_undirected
        lines = [
            f"partition of {self.graph_name!r}: N={self.num_nodes}, E={self.num_edges}, P={p}",
            f"edge cut: {self.edge_cut} directed"
            + (f" ({undirected} undirected)" if undirected is not None else "")
            + (f", {self.edge_cut / self.num_edges:.1%} of edges" if self.num_edges else ""),
            f"balance (max/mean size): {self.balance:.3f}",
            "",
            f"{'part':>5} {'nodes':>8} {'remote':>8} {'halo in':>8} {'halo out':>8}",
        ]
        halo_in = self.pair_volume.sum(axis=0)
        halo_out = self.pair_volume.sum(axis=1)
        for i in range(p):
            lines.append(
                f"{i:>5} {int(self.sizes[i]):>8} {self.remote_ratio[i]:>8.1%} "
                f"{int(halo_in[i]):>8} {int(halo_out[i]):>8}"
            )
        lines += ["", "pair volume (rows sent, sender i -> receiver j):"]
        width = max(5, len(str(int(self.pair_volume.max(initial=0)))) + 1)
        lines.append(" " * 6 + "".join(f"{j:>{width}}" for j in range(p)))
        for i in range(p):
            row = "".join(f"{int(v):>{width}}" for v in self.pair_volume[i])
            lines.append(f"{i:>5} {row}")
        if p > 1:
            lines += ["", f"ring schedule ({p - 1} rounds):"]
            lines.append(f"{'round':>6} {'S_r':>8} {'padded':>9} {'useful':>9} {'eff':>7}")
            for r in range(1, p):
                s, u = int(self.round_rows[r - 1]), int(self.round_useful_rows[r - 1])
                eff = f"{u / (p * s):.1%}" if s else "-"
                lines.append(f"{r:>6} {s:>8} {p * s:>9} {u:>9} {eff:>7}")
            lines.append(
                f"{'total':>6} {int(self.round_rows.sum()):>8} {self.ring_padded_rows:>9} "
                f"{self.ring_useful_rows:>9} {self.ring_efficiency:>7.1%}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def save_heatmap(self, path) -> None:
        """Saves the pair-volume matrix as a heatmap PNG (or any format matplotlib infers),
        without pyplot (no global backend change)."""
        from matplotlib.figure import Figure

        p = self.num_parts
        fig = Figure(figsize=(1.0 + 0.6 * max(p, 4), 0.6 * max(p, 4)), layout="constrained")
        ax = fig.add_subplot()
        im = ax.imshow(self.pair_volume, cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, label="halo rows")
        ax.set_xlabel("receiver part j")
        ax.set_ylabel("sender part i")
        ax.set_xticks(range(p))
        ax.set_yticks(range(p))
        ax.set_title(f"pair volume, {self.graph_name} (P={p})")
        if p <= 16:
            vmax = self.pair_volume.max(initial=0)
            for i in range(p):
                for j in range(p):
                    v = int(self.pair_volume[i, j])
                    color = "black" if vmax and v > vmax / 2 else "white"
                    ax.text(j, i, str(v), ha="center", va="center", fontsize=8, color=color)
        fig.savefig(path)


def partition_report(graph: Graph, parts, *, num_parts: int | None = None) -> PartitionReport:
    """The statistics of the partition ``parts: int[N]`` of ``graph``; ``num_parts`` defaults
    to ``max(parts) + 1`` (pass it when trailing parts may be empty)."""
    parts, p = check_parts(parts, graph.num_nodes, num_parts)
    n = graph.num_nodes
    sizes = np.bincount(parts, minlength=p).astype(np.int64)
    src, dst = graph.edges()
    edge_cut = int(np.count_nonzero(parts[src] != parts[dst]))

    # Distinct (needing part, in-neighbour) pairs: the in-neighbourhood of each part.
    key = np.unique(parts[dst].astype(np.int64) * n + src)
    need_part, need_node = np.divmod(key, n)
    remote = parts[need_node] != need_part
    total = np.bincount(need_part, minlength=p)
    remote_count = np.bincount(need_part[remote], minlength=p)
    remote_ratio = np.divide(
        remote_count, total, out=np.zeros(p, np.float64), where=total > 0, dtype=np.float64
    )

    owner, needer, _ = halo_triples(graph, parts, p)
    pair_volume = np.bincount(owner * p + needer, minlength=p * p).reshape(p, p).astype(np.int64)
    round_rows, round_useful = ring_round_volumes(pair_volume)
    return PartitionReport(
        graph_name=graph.name,
        num_parts=p,
        num_nodes=n,
        num_edges=graph.num_edges,
        sizes=sizes,
        edge_cut=edge_cut,
        edge_cut_undirected=edge_cut // 2 if graph.is_symmetric() else None,
        balance=float(sizes.max() / sizes.mean()),
        remote_ratio=remote_ratio,
        pair_volume=pair_volume,
        round_rows=round_rows,
        round_useful_rows=round_useful,
    )
