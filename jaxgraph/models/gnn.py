"""GCN, GraphSAGE and GAT (flax Linen) over a :class:`Propagator`, and the registry of models
that ``--model`` and a config file's ``[model] name`` choose from (:func:`register_model`).

The models run unchanged under every communication strategy: all cross-device traffic happens
inside the propagator. Layer ``l`` aggregates, then transforms (as the distributed systems
reproduced here do), so the rows that travel at layer ``l`` have its input's width.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxgraph.configfile import check_new_name
from jaxgraph.models.propagate import Propagator

MODELS = ("gcn", "sage", "gat")
"""The built-in models' names (:data:`MODEL_TYPES` holds them and the registered ones)."""


class _Stack(nn.Module):
    """Shared layer loop: dropout -> conv -> (LayerNorm) -> ReLU, the last conv plain (where
    the strategy exchanges before dropout, :meth:`Propagator.prefetch` drops out the halo too)."""

    hidden: int
    out_dim: int
    num_layers: int = 2
    dropout: float = 0.5
    layer_norm: bool = False

    def conv(self, h, propagate, layer, width, last):  # pragma: no cover - abstract
        raise NotImplementedError

    @nn.compact
    def __call__(self, x: jax.Array, propagate: Propagator, *, train: bool) -> jax.Array:
        """``x: f32[Nl, F] -> logits f32[Nl, out_dim]``."""
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {self.num_layers}")
        h = x
        for layer in range(self.num_layers):
            last = layer == self.num_layers - 1
            drop = nn.Dropout(self.dropout, deterministic=not train)
            h = propagate.drop(h, layer=layer, dropout=drop)
            h = self.conv(h, propagate, layer, self.out_dim if last else self.hidden, last)
            if not last:
                if self.layer_norm:
                    h = nn.LayerNorm()(h)
                h = nn.relu(h)
        return h

    def layer_input_dims(self, in_dim: int) -> tuple[int, ...]:
        """Width of the rows exchanged at each layer."""
        return (in_dim,) + (self.hidden,) * (self.num_layers - 1)


class GCN(_Stack):
    """Graph convolution (Kipf & Welling, 2017): ``H' = Â H W + b``."""

    def conv(self, h, propagate, layer, width, last):
        h = propagate(h, layer=layer, norm="gcn")
        return nn.Dense(width, name=f"conv{layer}")(h)


class GraphSAGE(_Stack):
    """GraphSAGE with the mean aggregator (Hamilton et al., 2017):
    ``h'_v = W_self h_v + W_neigh mean_{u in N_in(v)} h_u + b``."""

    def conv(self, h, propagate, layer, width, last):
        neigh = propagate(h, layer=layer, norm="mean")
        self_term = nn.Dense(width, name=f"self{layer}")(h)
        return self_term + nn.Dense(width, use_bias=False, name=f"neigh{layer}")(neigh)


class GATConv(nn.Module):
    """One multi-head graph attention layer (Veličković et al., 2018) with self-loops.

    ``α_vu = softmax_u(LeakyReLU(a_src·W h_u + a_dst·W h_v))`` over ``u in N_in(v) ∪ {v}``;
    ``h'_v = ||_k sum_u α^k_vu W^k h_u`` (concatenated heads) or the mean over heads.
    """

    heads: int
    width: int
    concat: bool
    negative_slope: float = 0.2

    @nn.compact
    def __call__(self, h: jax.Array, propagate: Propagator, layer: int) -> jax.Array:
        s = propagate.shard
        n = propagate.num_local
        h_all = propagate.gather(h, layer=layer)  # f32[Nl + H, F]
        z = nn.Dense(self.heads * self.width, use_bias=False, name="proj")(h_all)
        z = z.reshape(z.shape[0], self.heads, self.width)  # [Nl + H, K, D]
        init = nn.initializers.glorot_uniform()
        a_src = self.param("att_src", init, (1, self.heads, self.width))
        a_dst = self.param("att_dst", init, (1, self.heads, self.width))
        score_src = jnp.sum(z * a_src, axis=-1)  # [Nl + H, K]
        score_dst = jnp.sum(z[:n] * a_dst, axis=-1)  # [Nl, K]

        leaky = lambda e: nn.leaky_relu(e, self.negative_slope)  # noqa: E731
        e_edge = leaky(score_src[s.edge_src] + score_dst[s.edge_dst])  # [Em, K]
        e_edge = jnp.where(s.edge_mask[:, None], e_edge, -jnp.inf)
        e_self = leaky(score_src[:n] + score_dst)  # [Nl, K]
        seg_max = jax.ops.segment_max(e_edge, s.edge_dst, num_segments=n, indices_are_sorted=True)
        m = jax.lax.stop_gradient(jnp.maximum(seg_max, e_self))  # [Nl, K]
        p_edge = jnp.where(s.edge_mask[:, None], jnp.exp(e_edge - m[s.edge_dst]), 0.0)
        p_self = jnp.exp(e_self - m)
        denom = p_self + jax.ops.segment_sum(
            p_edge, s.edge_dst, num_segments=n, indices_are_sorted=True
        )  # [Nl, K]
        msgs = p_edge[..., None] * z[s.edge_src]  # [Em, K, D]
        num = p_self[..., None] * z[:n] + jax.ops.segment_sum(
            msgs, s.edge_dst, num_segments=n, indices_are_sorted=True
        )
        out = num / denom[..., None]  # [Nl, K, D]
        out = out.reshape(n, -1) if self.concat else out.mean(axis=1)
        bias = self.param("bias", nn.initializers.zeros, (out.shape[-1],))
        return out + bias


class GAT(_Stack):
    """Multi-head GAT: hidden layers concatenate ``heads`` heads of ``hidden // heads`` units
    (ELU-free, ReLU between layers as in the other models); the last layer averages heads."""

    heads: int = 4

    def conv(self, h, propagate, layer, width, last):
        if not last and width % self.heads:
            raise ValueError(f"GAT hidden size {width} is not divisible by heads={self.heads}")
        per_head = width if last else width // self.heads
        conv = GATConv(self.heads, per_head, concat=not last, name=f"conv{layer}")
        return conv(h, propagate, layer)


MODEL_TYPES: dict[str, Callable[..., nn.Module]] = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT}
"""Every model by name: the built-in ones, then those of :func:`register_model` in the order of
registration (``MODEL_TYPES.pop(name)`` removes a registered one again, as tests do)."""


def register_model(name: str, cls: Callable[..., nn.Module]) -> None:
    """Adds a model: :func:`make_model` then builds it by ``name``, and so do
    ``TrainConfig(model=ModelConfig(name=name))``, ``--model name`` and a config file's
    ``[model] name = "name"`` (the error messages that list the models list it too).

    ``cls`` (a flax Linen module class, or any callable returning a module) is called as
    ``cls(hidden=, out_dim=, num_layers=, dropout=, layer_norm=)`` with the values of the run's
    :class:`~jaxgraph.train.config.ModelConfig`, and with ``heads=`` too when it is a dataclass
    with a ``heads`` field. The module keeps the built-in models' contract: called as ``(x,
    propagate, *, train)`` on ``x: f32[Nl, F]``, one device's local rows, it returns the logits
    ``f32[Nl, out_dim]`` and calls ``propagate`` (or its ``gather`` or ``prefetch``) once per
    layer with that layer's index; it has the attribute ``num_layers`` and the method
    ``layer_input_dims(in_dim)``, the width of the rows each layer exchanges (the trainer reads
    both), and its dropout draws from flax's ``"dropout"`` stream. Methods that weigh messages
    by the aggregation's coefficients (AdaQP's adaptive widths) use the mean aggregator's for a
    registered model.

    Args:
      name: the model's name, as ``--model`` gives it.
      cls: the module class.

    Raises:
      ValueError: a name that is not a word, or that a built-in or registered model holds.
      TypeError: a ``cls`` that is not callable.
    """
    check_new_name("model", name, MODELS, MODEL_TYPES, "model")
    if not callable(cls):
        raise TypeError(f"model {name!r} is not a class or callable: {cls!r}")
    MODEL_TYPES[name] = cls


def make_model(
    name: str,
    *,
    hidden: int,
    out_dim: int,
    num_layers: int = 2,
    dropout: float = 0.5,
    layer_norm: bool = False,
    heads: int = 4,
) -> nn.Module:
    """Builds a model by name (one of :data:`MODEL_TYPES`; a ValueError for another).
    ``heads`` goes to GAT and to a registered dataclass module with a ``heads`` field."""
    if name not in MODEL_TYPES:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_TYPES)}")
    cls = MODEL_TYPES[name]
    kw = dict(hidden=hidden, out_dim=out_dim, num_layers=num_layers, dropout=dropout)
    if "heads" in getattr(cls, "__dataclass_fields__", ()):
        kw["heads"] = heads
    model = cls(layer_norm=layer_norm, **kw)
    if not callable(getattr(model, "layer_input_dims", None)):
        what = type(model).__name__
        raise TypeError(f"model {name!r} ({what}) has no method layer_input_dims(in_dim)")
    return model
