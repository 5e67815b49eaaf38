"""A model defined outside jaxgraph: GIN, trained under any method through the Python API.

GIN (Xu et al., ICLR 2019) sums its in-neighbours' rows, which neither of the propagator's
normalised aggregations does, so its layer gathers ``[local rows | halo rows]`` from the
propagator and sums over the shard's edges itself. ``fit`` is the training loop of
``jaxgraph.train.train`` reduced to its core, for a model that ``TrainConfig`` cannot name.
"""

import flax.linen as nn
import jax
import numpy as np

from jaxgraph.comm.method import RunInfo
from jaxgraph.models import Propagator, segment_sum_sorted
from jaxgraph.partition import build_halo_plan, partition_graph
from jaxgraph.partition.blockhalo import build_block_halo_plan
from jaxgraph.train import assemble_run, parse_method
from jaxgraph.train.state import counts_to_score


class GIN(nn.Module):
    """Graph isomorphism network: ``h'_v = MLP((1 + eps_l) h_v + sum_{u in N_in(v)} h_u)``.

    Each layer: dropout, the sum aggregation (one exchange of the layer's input rows), a
    two-layer MLP; ReLU between layers, the last layer's output is the logits.

    Attributes:
      hidden: the width of every hidden layer.
      out_dim: the number of classes (the logits' width).
      num_layers: the number of graph layers (the trainer reads it: one exchange each).
      dropout: the dropout rate of every layer's input.
    """

    hidden: int
    out_dim: int
    num_layers: int = 2
    dropout: float = 0.0

    def layer_input_dims(self, in_dim: int) -> tuple[int, ...]:
        """The width of the rows layer ``l`` exchanges (strategies size their state by it)."""
        return (in_dim,) + (self.hidden,) * (self.num_layers - 1)

    @nn.compact
    def __call__(self, x: jax.Array, propagate: Propagator, *, train: bool) -> jax.Array:
        """``x: f32[Nl, F] -> logits f32[Nl, out_dim]`` on this device's local rows."""
        s = propagate.shard
        h = x
        for layer in range(self.num_layers):
            last = layer == self.num_layers - 1
            drop = nn.Dropout(self.dropout, deterministic=not train)
            if propagate.exchange_before_dropout:  # the strategy's order (PipeGCN)
                h = propagate.prefetch(h, layer=layer, dropout=drop)
            else:
                h = drop(h)
            h_all = propagate.gather(h, layer=layer)  # f32[Nl + H, F]: local, then halo rows
            weight = s.edge_mask.astype(h.dtype)  # f32[Em]: pad edges weigh 0
            neigh = segment_sum_sorted(h_all, s.edge_src, s.edge_dst, weight, h.shape[0])
            eps = self.param(f"eps{layer}", nn.initializers.zeros, ())
            h = (1.0 + eps) * h + neigh  # f32[Nl, F]
            width = self.out_dim if last else self.hidden
            h = nn.Dense(width, name=f"mlp{layer}_0")(nn.relu(nn.Dense(width)(h)))
            if not last:
                h = nn.relu(h)
        return h


def fit(graph, model, method="vanilla", *, parts=2, epochs=2, seed=0):
    """Trains ``model`` on ``graph`` over ``parts`` devices with ``method`` (a
    :class:`~jaxgraph.train.Method` or its spelling).

    Returns:
      ``(losses, scores, run, state)``: the training loss of every epoch, the final
      ``{"train", "val", "test"}`` scores (accuracy, or micro-F1 for multi-label graphs), the
      assembled run and the trained state.
    """
    method = parse_method(method)
    owner = partition_graph(graph, parts, method="metis", seed=seed)
    if method.layout == "block":  # CAGNET, Sancus, SkipG
        plan = build_block_halo_plan(graph, owner, num_parts=parts)
    else:
        plan = build_halo_plan(graph, owner, num_parts=parts)
    # RunInfo.model names the aggregation whose coefficients weigh a message in AdaQP's
    # assignment; "sage" (the mean) is the closest of the built-in ones to GIN's sum.
    info = RunInfo(epochs=epochs, seed=seed, model="sage")
    run = assemble_run(graph, plan, method, model, parts, seed=seed, run=info)
    state, losses = run.state, []
    for epoch in range(1, epochs + 1):
        # The method's host half decides between epochs (AdaQP's widths, random draws).
        new = run.controller.update(state.comm_state, epoch=epoch)
        if new is not None:
            state = state.replace(comm_state=run.trainer.place_comm_state(new))
        state, metrics = run.trainer.train_step(state, run.shards)
        losses.append(float(metrics["loss"]))
    counts, _ = jax.device_get(run.trainer.eval_step(state.params, run.shards))
    scores = {split: counts_to_score(np.asarray(c)) for split, c in counts.items()}
    return losses, scores, run, state


if __name__ == "__main__":
    from jaxgraph.cli import emulate_cpu_devices
    from jaxgraph.data import dc_sbm

    emulate_cpu_devices(2)  # on a CPU: two devices, set before JAX starts its backend

    g = dc_sbm(200, 4, 6.0, num_features=16, seed=0)
    losses, scores, _, _ = fit(g, GIN(hidden=16, out_dim=g.num_classes), "pipegcn", epochs=20)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, test accuracy {scores['test']:.3f}")
