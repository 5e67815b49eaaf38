"""Single-device oracles: the models on the unpartitioned graph with plain dense ``jnp`` ops.

They share the flax models' parameter pytree but none of their code, so a distributed program
that matches them is checked against an independent implementation (for test-sized graphs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.graph import Graph


def oracle_forward(
    name: str,
    params,
    graph: Graph,
    *,
    num_layers: int,
    layer_norm: bool = False,
    heads: int = 4,
) -> jax.Array:
    """Logits ``f32[N, C]`` of model ``name`` without dropout on the whole ``graph``."""
    x = jnp.asarray(graph.features)
    adj = jnp.asarray((graph.adjacency() > 0).toarray(), jnp.float32)  # A[dst, src]
    a_gcn = jnp.asarray(graph.normalized_adjacency("gcn").toarray())
    a_mean = jnp.asarray(graph.normalized_adjacency("mean").toarray())
    h = x
    for layer in range(num_layers):
        last = layer == num_layers - 1
        if name == "gcn":
            p = params[f"conv{layer}"]
            h = a_gcn @ h @ p["kernel"] + p["bias"]
        elif name == "sage":
            ps, pn = params[f"self{layer}"], params[f"neigh{layer}"]
            h = h @ ps["kernel"] + ps["bias"] + (a_mean @ h) @ pn["kernel"]
        elif name == "gat":
            h = _gat_dense(params[f"conv{layer}"], h, adj, heads, concat=not last)
        else:
            raise ValueError(f"unknown model {name!r}")
        if not last:
            if layer_norm:
                h = _layer_norm(params[f"LayerNorm_{layer}"], h)
            h = jax.nn.relu(h)
    return h


def _layer_norm(p, h, eps=1e-6):
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    return (h - mean) / jnp.sqrt(var + eps) * p["scale"] + p["bias"]


def _gat_dense(p, h, adj, heads, concat):
    n = h.shape[0]
    z = (h @ p["proj"]["kernel"]).reshape(n, heads, -1)  # [N, K, D]
    s_src = jnp.einsum("nkd,kd->nk", z, p["att_src"][0])
    s_dst = jnp.einsum("nkd,kd->nk", z, p["att_dst"][0])
    e = jax.nn.leaky_relu(s_dst[:, None, :] + s_src[None, :, :], 0.2)  # [dst, src, K]
    # Multiplicity of each (dst, src) pair: an input self-loop kept as an edge and the added
    # self-loop are two attention terms, as in the distributed layer.
    mult = (adj + jnp.eye(n))[..., None]
    e = jnp.where(mult > 0, e, -jnp.inf)
    w = mult * jnp.exp(e - jax.lax.stop_gradient(e.max(axis=1, keepdims=True)))
    alpha = w / w.sum(axis=1, keepdims=True)
    out = jnp.einsum("vuk,ukd->vkd", alpha, z)
    out = out.reshape(n, -1) if concat else out.mean(axis=1)
    return out + p["bias"]


def oracle_loss(logits: jax.Array, graph: Graph, mask: np.ndarray | None = None) -> jax.Array:
    """Mean cross-entropy (BCE with logits for multi-label) over the nodes of ``mask``."""
    mask = graph.train_mask if mask is None else mask
    idx = np.flatnonzero(mask)
    z = logits[idx]
    if graph.multi_label:
        y = jnp.asarray(graph.labels[idx], jnp.float32)
        per = jnp.sum(jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z))), axis=-1)
    else:
        y = jnp.asarray(graph.labels[idx])
        per = jax.nn.logsumexp(z, axis=-1) - jnp.take_along_axis(z, y[:, None], axis=-1)[:, 0]
    return per.sum() / max(len(idx), 1)


def oracle_loss_and_grads(name: str, params, graph: Graph, **model_kwargs):
    """``(loss, grads)`` of :func:`oracle_loss` over the train mask, jitted once per call."""

    def loss(p):
        return oracle_loss(oracle_forward(name, p, graph, **model_kwargs), graph)

    return jax.jit(jax.value_and_grad(loss))(params)
