"""A model defined outside jaxgraph: GIN, registered as ``gin``.

GIN (Xu et al., ICLR 2019) sums its in-neighbours' rows, which neither of the propagator's
normalised aggregations does, so its layer gathers ``[local rows | halo rows]`` from the
propagator and sums over the shard's edges itself.

Importing this file registers the model ``gin`` with ``jaxgraph train``: ``--model gin``, a
config file's ``[model] name = "gin"`` and, from Python, ``TrainConfig(model=ModelConfig("gin"))``
then train it under any method. Run as a script, the file is the ``jaxgraph`` command line with
the model added::

    python docs/examples/gin_model.py train --dataset sbm --nodes 200 --num-features 16 \
        --parts 2 --epochs 20 --hidden 16 --model gin --method pipegcn
"""

import sys

import flax.linen as nn
import jax

from jaxgraph.models import Propagator, register_model, segment_sum_sorted


class GIN(nn.Module):
    """Graph isomorphism network: ``h'_v = MLP((1 + eps_l) h_v + sum_{u in N_in(v)} h_u)``.

    Each layer: dropout, the sum aggregation (one exchange of the layer's input rows), a
    two-layer MLP; ReLU between layers (after a LayerNorm with ``layer_norm``), the last
    layer's output is the logits. ``make_model`` passes the run's ``[model]`` values by these
    names.

    Attributes:
      hidden: the width of every hidden layer.
      out_dim: the number of classes (the logits' width).
      num_layers: the number of graph layers (the trainer reads it: one exchange each).
      dropout: the dropout rate of every layer's input.
      layer_norm: normalize each hidden layer's output.
    """

    hidden: int
    out_dim: int
    num_layers: int = 2
    dropout: float = 0.0
    layer_norm: bool = False

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
            h = propagate.drop(h, layer=layer, dropout=drop)  # in the strategy's order
            h_all = propagate.gather(h, layer=layer)  # f32[Nl + H, F]: local, then halo rows
            weight = s.edge_mask.astype(h.dtype)  # f32[Em]: pad edges weigh 0
            neigh = segment_sum_sorted(h_all, s.edge_src, s.edge_dst, weight, h.shape[0])
            eps = self.param(f"eps{layer}", nn.initializers.zeros, ())
            h = (1.0 + eps) * h + neigh  # f32[Nl, F]
            width = self.out_dim if last else self.hidden
            h = nn.Dense(width, name=f"mlp{layer}_0")(nn.relu(nn.Dense(width)(h)))
            if not last:
                if self.layer_norm:
                    h = nn.LayerNorm()(h)
                h = nn.relu(h)
        return h


register_model("gin", GIN)  # --model gin, [model] name = "gin", ModelConfig("gin")


if __name__ == "__main__":
    from jaxgraph.cli import main

    sys.exit(main())
