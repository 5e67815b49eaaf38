"""Dense single-device references for stale exchanges: a 2-layer GCN whose cross-part edges
read given (stale) rows and whose first layer's output receives an injected gradient."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.models.oracle import oracle_loss


def split_adjacency(graph, parts):
    """``(Â_in, Â_cross)``: Â's entries between nodes of the same part, and the rest."""
    a = graph.normalized_adjacency("gcn").toarray()
    same = parts[:, None] == parts[None, :]
    return jnp.asarray(np.where(same, a, 0.0)), jnp.asarray(np.where(same, 0.0, a))


def stale_gcn(params, graph, parts, *, halo=(None, None), inject=None):
    """Loss and layer inputs of a 2-layer GCN (no dropout) with stale cross-part rows.

    Layer ``l`` aggregates ``Â_in H_l + Â_cross R_l``, with ``R_l = halo[l]`` (a constant) or,
    for ``None``, ``stop_gradient(H_l)`` (the current rows, carrying no gradient). ``inject``
    (``[N, hidden]`` or ``None``) is added to the gradient of ``H_1`` (the term
    ``<inject, H_1>`` in the loss).

    Returns:
      ``(loss, (H_0, H_1), grads, dZ_1)``: the loss (without the injected term), the layer
      inputs, the parameter gradients (with it), and ``dL/dZ_1`` where ``Z_1`` is the second
      layer's aggregation.
    """
    a_in, a_cross = split_adjacency(graph, parts)
    x = jnp.asarray(graph.features)

    def agg(h, layer):
        r = halo[layer]
        return a_in @ h + a_cross @ (jax.lax.stop_gradient(h) if r is None else r)

    def loss_fn(params, dz1):
        p0, p1 = params["conv0"], params["conv1"]
        h1 = jax.nn.relu(agg(x, 0) @ p0["kernel"] + p0["bias"])
        z1 = agg(h1, 1) + dz1
        loss = oracle_loss(z1 @ p1["kernel"] + p1["bias"], graph)
        total = loss if inject is None else loss + jnp.sum(jax.lax.stop_gradient(inject) * h1)
        return total, (loss, (x, h1))

    zero = jnp.zeros((graph.num_nodes, params["conv0"]["kernel"].shape[1]))
    (_, (loss, inputs)), (grads, dz1) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
        params, zero
    )
    return loss, inputs, grads, dz1


def halo_gradient(graph, parts, dz1):
    """The cotangent of layer 1's cross-part rows summed per source node: ``Â_crossᵀ dZ_1``."""
    _, a_cross = split_adjacency(graph, parts)
    return a_cross.T @ dz1
