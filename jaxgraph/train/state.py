"""The train state and the distributed training / evaluation programs."""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxgraph.comm.strategy import CommStrategy, Vanilla
from jaxgraph.mesh import Bounded, place
from jaxgraph.models.propagate import Propagator
from jaxgraph.partition.shard import GraphShard


@flax.struct.dataclass
class TrainState:
    """Everything a training step reads and writes, as one pytree.

    Attributes:
      step: ``int32[]`` number of optimizer steps taken.
      params: model parameters, replicated on every device.
      opt_state: optax state, replicated.
      comm_state: the strategy's state; every leaf has a leading mesh axis ``[P, ...]`` and
        is sharded along it (one slice per device).
      rng: ``key[]`` replicated PRNG key, split once per step.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    comm_state: Any
    rng: jax.Array


def _squeeze(tree):
    return jax.tree.map(lambda a: a[0], tree)


def _unsqueeze(tree):
    return jax.tree.map(lambda a: a[None], tree)


def _specs(tree, *axes):
    """``P(*axes)`` for every leaf: sharded along ``axes``, replicated without."""
    return jax.tree.map(lambda _: P(*axes), tree)


def _dummy_shard(in_dim: int) -> GraphShard:
    """A one-node, edge-free shard: enough to trace a model for parameter shapes."""
    z = np.zeros
    return GraphShard(
        x=z((1, in_dim), np.float32),
        labels=z(1, np.int32),
        train_mask=z(1, bool),
        val_mask=z(1, bool),
        test_mask=z(1, bool),
        local_mask=np.ones(1, bool),
        edge_src=z(1, np.int32),
        edge_dst=z(1, np.int32),
        edge_mask=z(1, bool),
        gcn_edge_weight=z(1, np.float32),
        gcn_self_weight=z(1, np.float32),
        mean_edge_weight=z(1, np.float32),
        send_idx=(),
    )


def masked_loss_sum(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> jax.Array:
    """Sum over ``mask`` of cross-entropy (``labels: int[N]``) or BCE-with-logits
    (``labels: bool[N, C]``). ``logits: [N, C] -> []``."""
    if labels.ndim == 2:
        y = labels.astype(logits.dtype)
        per = jnp.sum(optax.sigmoid_binary_cross_entropy(logits, y), axis=-1)
    else:
        per = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
    return jnp.sum(jnp.where(mask, per, 0.0))


def _eval_counts(logits, labels, masks):
    """Per mask: (correct, total) for single-label, (tp, fp, fn) for multi-label."""
    out = {}
    for name, mask in masks.items():
        if labels.ndim == 2:
            pred = logits > 0
            m = mask[:, None]
            out[name] = jnp.stack(
                [
                    jnp.sum(pred & labels & m),
                    jnp.sum(pred & ~labels & m),
                    jnp.sum(~pred & labels & m),
                ]
            ).astype(jnp.float32)
        else:
            correct = (jnp.argmax(logits, -1) == labels) & mask
            out[name] = jnp.stack([jnp.sum(correct), jnp.sum(mask)]).astype(jnp.float32)
    return out


def counts_to_score(counts: np.ndarray) -> float:
    """Accuracy from ``(correct, total)`` or micro-F1 from ``(tp, fp, fn)``."""
    counts = np.asarray(counts, np.float64)
    if counts.shape[0] == 2:
        return float(counts[0] / counts[1]) if counts[1] else float("nan")
    tp, fp, fn = counts
    return float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else float("nan")


class Trainer:
    """Builds and runs the jitted ``shard_map`` programs of one training configuration.

    Args:
      model: a flax model from :mod:`jaxgraph.models`.
      mesh: a one-dimensional mesh; its axis is the graph-part axis.
      num_train: the global number of training nodes (the loss is the sum of per-node losses
        divided by this count, so gradients equal the single-device mean).
      local_grad_clip: optional threshold ``th`` of local gradient clipping (Sancus, Peng et
        al., VLDB'22, Sec. 5.2.2): each device's partial gradient ``δ_i`` (the terms of its own
        rows; they sum to the full gradient) is scaled to L2 norm at most ``th_i = sqrt(P) *
        th`` before the sum over devices. ``None``: the exact global-mean gradient.
    """

    def __init__(
        self,
        model,
        tx: optax.GradientTransformation,
        strategy: CommStrategy,
        mesh: Mesh,
        *,
        num_train: int,
        local_grad_clip: float | None = None,
    ):
        if num_train <= 0:
            raise ValueError("the graph has no training nodes (train_mask is all False)")
        self.model = model
        self.tx = tx
        self.strategy = strategy
        self.mesh = mesh
        self.axis_name = mesh.axis_names[0]
        self.num_parts = mesh.devices.size
        self.num_train = int(num_train)
        self.local_grad_clip = local_grad_clip
        self.trace_count = 0
        # On an emulated CPU mesh each call waits for its result (jaxgraph.mesh.Bounded), so
        # a plain Python loop over train_step cannot queue collectives into a deadlock.
        self.train_step = Bounded(jax.jit(self._train_step, donate_argnums=0), mesh)
        self.eval_step = Bounded(jax.jit(self._eval_step), mesh)
        self._loss_and_grads_jit = Bounded(jax.jit(self._loss_and_grads_program), mesh)

    # ------------------------------------------------------------------ creation

    def place_shards(self, shards: GraphShard) -> GraphShard:
        """Host ``[P, ...]`` arrays -> device arrays sharded along the mesh axis (each process
        passes the same host arrays and places only its own devices' slices)."""
        sharding = NamedSharding(self.mesh, P(self.axis_name))
        return jax.tree.map(lambda a: place(a, sharding), shards)

    def place_comm_state(self, comm_state):
        """Host ``comm_state`` (leaves ``[P, ...]``) -> device arrays sharded on the mesh axis."""
        return self.place_shards(comm_state)

    def init_params(self, key: jax.Array, in_dim: int):
        prop = Propagator(
            _dummy_shard(in_dim), Vanilla(), {}, axis_name=self.axis_name, num_parts=1
        )
        x = jnp.zeros((1, in_dim), jnp.float32)
        return self.model.init({"params": key}, x, prop, train=False)["params"]

    def create_state(self, key: jax.Array, in_dim: int, comm_state) -> TrainState:
        """The initial state, built directly with its final shardings, around the strategy's
        host-side ``comm_state`` (leaves ``[P, ...]``)."""
        replicated = NamedSharding(self.mesh, P())
        comm_state = self.place_comm_state(comm_state)

        def init(key):
            param_key, rng = jax.random.split(key)
            params = self.init_params(param_key, in_dim)
            return TrainState(
                step=jnp.zeros((), jnp.int32),
                params=params,
                opt_state=self.tx.init(params),
                comm_state=None,
                rng=rng,
            )

        shapes = jax.eval_shape(init, key)
        out_shardings = jax.tree.map(lambda _: replicated, shapes)
        state = jax.jit(init, out_shardings=out_shardings)(key)
        return state.replace(comm_state=comm_state)

    def state_specs(self, state: TrainState):
        return TrainState(
            step=P(),
            params=_specs(state.params),
            opt_state=_specs(state.opt_state),
            comm_state=_specs(state.comm_state, self.axis_name),
            rng=P(),
        )

    # ------------------------------------------------------------------ programs

    def _train_step(self, state: TrainState, shards: GraphShard):
        self.trace_count += 1
        axis = self.axis_name
        rng, step_key = jax.random.split(state.rng)

        def body(state: TrainState, shards: GraphShard):
            shard = _squeeze(shards)  # x: f32[Nl, F], edge_*: [Em]
            loss, grads, comm_state, nbytes = self._loss_and_grads(
                state.params, _squeeze(state.comm_state), shard, step_key
            )
            # `params` enter replicated: shard_map's transpose of their implicit broadcast is a
            # psum, so `grads` is already the gradient of the global mean loss.
            updates, opt_state = self.tx.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
            new_state = state.replace(
                step=state.step + 1,
                params=params,
                opt_state=opt_state,
                comm_state=_unsqueeze(comm_state),
            )
            metrics = {
                "loss": jax.lax.psum(loss, axis),
                "bytes_moved": jax.lax.psum(nbytes, axis),
                # Replicated parameters: the same on every device, no collective needed.
                "params_finite": _all_finite(params),
            }
            return new_state, metrics

        specs = self.state_specs(state)
        out_state, metrics = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(specs, _specs(shards, axis)),
            out_specs=(specs, {"loss": P(), "bytes_moved": P(), "params_finite": P()}),
        )(state, shards)
        return out_state.replace(rng=rng), metrics

    def _loss_and_grads(self, params, comm_state, shard: GraphShard, step_key):
        """This device's share of the loss, and the gradient of the global loss."""
        axis = self.axis_name
        dev_key = jax.random.fold_in(step_key, jax.lax.axis_index(axis))
        dropout_key, comm_key = jax.random.split(dev_key)

        def loss_fn(params, probes):
            prop = Propagator(
                shard,
                self.strategy,
                comm_state,
                axis_name=axis,
                num_parts=self.num_parts,
                key=comm_key,
                probes=probes,
            )
            logits = self.model.apply(
                {"params": params}, shard.x, prop, train=True, rngs={"dropout": dropout_key}
            )  # f32[Nl, C]
            loss = masked_loss_sum(logits, shard.labels, shard.train_mask) / self.num_train
            return loss, (prop.comm_state, prop.bytes_moved)

        # Zeros whose cotangents carry what the exchange's backward pass records, or None.
        probes = self.strategy.probes(comm_state, self.model.num_layers)
        clip = self.local_grad_clip
        if clip is not None:
            # Differentiate w.r.t. a device-varying copy of the replicated params: the
            # gradient is then this device's partial δ_i (no implicit psum), clipped here.
            params = jax.tree.map(lambda a: jax.lax.pcast(a, (axis,), to="varying"), params)
        (loss, (new_comm, nbytes)), (grads, probe_grads) = jax.value_and_grad(
            loss_fn, argnums=(0, 1), has_aux=True
        )(params, probes)
        if clip is not None:
            th = float(np.sqrt(self.num_parts) * clip)
            grads, _ = optax.clip_by_global_norm(th).update(grads, optax.EmptyState())
            grads = jax.lax.psum(grads, axis)
        if probes is not None:
            new_comm = self.strategy.absorb_probes(new_comm, probe_grads)
        return loss, grads, new_comm, nbytes

    def loss_and_grads(self, state: TrainState, shards: GraphShard):
        """The global training loss and its parameter gradients, without an update (the
        program a training step runs before the optimizer), for the key of ``state.rng``."""
        return self._loss_and_grads_jit(state, shards)

    def _loss_and_grads_program(self, state: TrainState, shards: GraphShard):
        axis = self.axis_name
        _, step_key = jax.random.split(state.rng)

        def body(params, comm_state, shards):
            loss, grads, _, _ = self._loss_and_grads(
                params, _squeeze(comm_state), _squeeze(shards), step_key
            )
            return jax.lax.psum(loss, axis), grads

        specs = self.state_specs(state)
        return jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(specs.params, specs.comm_state, _specs(shards, axis)),
            out_specs=(P(), specs.params),
        )(state.params, state.comm_state, shards)

    def _eval_logits(self, params, shard: GraphShard) -> jax.Array:
        """This device's evaluation-mode logits ``[Nl, C]`` (Vanilla exchange, no dropout)."""
        prop = Propagator(shard, Vanilla(), {}, axis_name=self.axis_name, num_parts=self.num_parts)
        return self.model.apply({"params": params}, shard.x, prop, train=False)

    def _eval_step(self, params, shards: GraphShard):
        """Full-precision, synchronous distributed forward; psum'd score counts per split."""
        axis = self.axis_name

        def body(params, shards):
            shard = _squeeze(shards)
            logits = self._eval_logits(params, shard)
            loss = masked_loss_sum(logits, shard.labels, shard.val_mask)
            counts = _eval_counts(
                logits,
                shard.labels,
                {"train": shard.train_mask, "val": shard.val_mask, "test": shard.test_mask},
            )
            nval = jnp.sum(shard.val_mask).astype(jnp.float32)
            return jax.lax.psum((counts, loss, nval), axis)

        counts, loss, nval = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(_specs(params), _specs(shards, axis)),
            out_specs=P(),
        )(params, shards)
        return counts, loss / jnp.maximum(nval, 1.0)

    def logits(self, params, shards: GraphShard) -> jax.Array:
        """Evaluation-mode logits ``[P, Nl, C]`` (Vanilla exchange, no dropout)."""
        axis = self.axis_name

        def body(params, shards):
            return self._eval_logits(params, _squeeze(shards))[None]

        program = jax.jit(
            jax.shard_map(
                body,
                mesh=self.mesh,
                in_specs=(_specs(params), _specs(shards, axis)),
                out_specs=P(axis),
            )
        )
        return Bounded(program, self.mesh)(params, shards)


def _all_finite(tree) -> jax.Array:
    """Whether every entry of every leaf is finite (a scalar bool)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)
