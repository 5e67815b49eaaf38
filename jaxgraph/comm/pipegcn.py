"""PipeGCN: pipelined halo exchange with one step of staleness in both passes.

Wan et al., "PipeGCN: Efficient full-graph training of graph convolutional networks with
pipelined feature communication", ICLR 2022. Runs on the Vanilla ring of the
:class:`~jaxgraph.partition.HaloPlan`, but a layer never waits for this step's messages:

- **Forward.** At step ``t`` layer ``l`` aggregates the halo rows sent at step ``t - 1`` (zeros
  at step 0); this step's boundary rows are sent now and stored for step ``t + 1``.
- **Backward.** The halo gradients ``dL/dh_halo`` go back along the reversed ring; the owners add
  those of step ``t - 1`` (zeros at step 0): a ``custom_vjp`` injects the stored one, the fresh
  one leaves through the exchange's probe (:meth:`PipeGCN.absorb_probes` stores it).
- **Order.** Exchange before dropout: the receiver masks the halo (the reference drops out
  ``cat(h, halo)``).
- **Smoothing** (PipeGCN-F / -G): ``avg <- gamma avg + (1 - gamma) recv`` per layer (``gamma =
  0.95``), started at zero without bias correction, used in place of the received rows.
- ``stale=False``: the synchronous ring after dropout, Vanilla bit for bit.

``comm_state`` is a :class:`PipeLayer` per layer. Staleness hides bytes, quantization cuts them:

- ``quantize=None``: fp32 rows and gradients.
- ``quantize=b``: ``b``-bit codes (:mod:`jaxgraph.comm.quantized`), one layout a layer and pass.
- ``quantize="adaptive"``: AdaQP's widths, re-solved each period (:class:`StaleAdaptiveController`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxgraph.comm.adaptive import (
    AdaptiveState,
    AssignConfig,
    check_adaptive,
    check_adaptive_run,
    trace_returned_rows,
    trace_sent_rows,
    zero_trace_probe,
)
from jaxgraph.comm.adaqp import AdaptiveController
from jaxgraph.comm.blockrow import replace_layer
from jaxgraph.comm.method import (
    Method,
    RunInfo,
    bits_label,
    check_quantize,
    chunks_or_default,
    match_spelling,
    parse_bits_or_mode,
)
from jaxgraph.comm.qring import (
    quantized_halo,
    quantized_halo_gradient,
    quantized_ring_exchange,
    slot_variances,
)
from jaxgraph.comm.ring import ring_exchange, ring_perm
from jaxgraph.comm.strategy import CommStrategy, Controller, ring_bytes
from jaxgraph.comm.wirebytes import exchange_bytes
from jaxgraph.configfile import from_dict
from jaxgraph.mesh import to_host, to_varying, varying_axes
from jaxgraph.options import flag
from jaxgraph.partition.buckets import BitAssignment, ExchangeLayout, bucket_state

DEFAULT_MOMENTUM = 0.95


class PipeLayer(NamedTuple):
    """One layer's ``comm_state`` (per device; leaves ``[P, ...]`` on the host).

    Attributes:
      halo: ``f32[H, F]``, the halo rows (or their average) the next step reads; None when
        synchronous.
      grad: ``f32[Nl, F]``, the halo gradients received (or their average), scatter-added onto
        the local rows, which the next step adds; None at layer 0 and when synchronous.
      fwd, bwd: the layer's fixed quantized layouts (``quantize=b``), else None.
    """

    halo: Any = None
    grad: Any = None
    fwd: ExchangeLayout | None = None
    bwd: ExchangeLayout | None = None


class StaleProbe(NamedTuple):
    """The probe of a layer under adaptive widths: the halo gradient sent back (``grad``) and
    the trace of its rows (``trace``)."""

    grad: Any
    trace: tuple


def reverse_ring_scatter(
    g_halo: jax.Array, send_idx, *, num_local: int, axis_name: str, num_parts: int
) -> jax.Array:
    """Halo-row gradients ``[H, F]`` back to their owners, scatter-added onto the rows they
    came from (``[num_local, F]``): the transpose of :func:`~jaxgraph.comm.ring.ring_exchange`,
    round ``r`` travelling ``d -> d - r`` (pad slots carry zeros: no edge reads them)."""
    g = jnp.zeros((num_local, g_halo.shape[-1]), g_halo.dtype)
    start = 0
    for r, idx in enumerate(send_idx, start=1):
        size = idx.shape[0]
        back = jax.lax.ppermute(
            g_halo[start : start + size], axis_name, ring_perm(num_parts, -r)
        )  # f32[S_r, F]
        g = g.at[idx].add(back)
        start += size
    return g


def stale_halo(h_local, probe, halo, grad, route, *, send_back):
    """The stored halo ``halo [H, F]`` as this step's halo, with PipeGCN's stale backward.

    Backward: the cotangent of ``h_local [Nl, F]`` is ``grad`` (what the peers sent at the
    previous step) and that of ``probe`` is ``send_back(g_halo, route)``, the halo cotangent
    sent to the owners now (a :class:`StaleProbe` with adaptive widths). ``route`` holds the
    index arrays and keys ``send_back`` needs, passed rather than closed over.
    """

    @jax.custom_vjp
    def inject(h_local, probe, halo, grad, route):
        del h_local, probe, grad, route
        return halo

    def fwd(h_local, probe, halo, grad, route):
        return halo, (grad, route)

    def bwd(res, g_halo):
        grad, route = res
        # Typed like the state it becomes: varying over the mesh even with no rounds (P = 1).
        axes = varying_axes(grad)
        fresh = jax.tree.map(lambda x: to_varying(x, axes), send_back(g_halo, route))
        return grad, fresh, None, None, None

    inject.defvjp(fwd, bwd)
    return inject(h_local, probe, halo, grad, route)


@dataclasses.dataclass(frozen=True)
class PipeGCN(Method, CommStrategy):
    """Pipelined ring exchange: halo rows and halo gradients one step stale.

    Attributes:
      stale: ``False`` runs the synchronous exchange (staleness off), for comparison.
      feature_momentum: ``gamma`` of the moving average of the stale halo rows (PipeGCN-F),
        in ``[0, 1)``; ``None`` for none.
      gradient_momentum: ``gamma`` of the moving average of the stale halo gradients
        (PipeGCN-G), in ``[0, 1)``; ``None`` for none.
      quantize: ``None`` (fp32 rows), or ``2``, ``4``, ``8``: the halo rows and halo
        gradients travel stochastically quantized at that width (the kernels and wire format
        of :mod:`jaxgraph.comm.quantized`); ``32``: the quantized byte path with exact rows.
        ``"adaptive"``: AdaQP's widths (needs ``stale``).
      period, assign, chunks, score: the adaptive widths' settings, as
        :class:`~jaxgraph.comm.adaqp.AdaQP`'s; they apply to ``quantize="adaptive"`` only.
    """

    stale: bool = True
    feature_momentum: float | None = None
    gradient_momentum: float | None = None
    quantize: int | Literal["adaptive"] | None = None
    period: int = flag("--assign-period", 0)
    assign: AssignConfig = AssignConfig()
    chunks: int | None = flag("--exchange-chunks", None)
    score: Literal["sum", "squares"] = "sum"

    # Quantized rows carry fp32 (scale, lo): the layouts' and the program's row parameters.
    param_dtype: ClassVar[str] = "float32"
    key: ClassVar[str] = "pipegcn"
    spellings: ClassVar[str] = "pipegcn[-sync|-f|-g|-fg][-q<bits>|-qadaptive]"
    modes: ClassVar[tuple[str, ...]] = ("quantize",)
    _ADAPTIVE_ONLY: ClassVar[tuple[str, ...]] = ("period", "assign", "chunks", "score")

    @classmethod
    def parse(cls, text: str) -> PipeGCN | None:
        """``pipegcn``, ``-sync``, ``-f`` / ``-g`` / ``-fg`` (momentum 0.95; ``-f0.9g0.8``
        sets it), each with ``-q<2|4|8|32>`` or, stale, ``-qadaptive``."""
        g = match_spelling(
            r"pipegcn(?:-(?P<sync>sync)|-(?=[fg])(?P<f>f(?P<fm>0?\.\d+)?)?(?P<g>g(?P<gm>0?\.\d+)?)?)?"
            r"(?:-q(?P<q>2|4|8|32|adaptive))?",
            text,
        )
        if g is None:
            return None
        quantize = parse_bits_or_mode(g["q"])
        if g["sync"]:
            return cls(stale=False, quantize=quantize)
        f, m = _momentum(g["f"], g["fm"]), _momentum(g["g"], g["gm"])
        return cls(feature_momentum=f, gradient_momentum=m, quantize=quantize)

    @classmethod
    def taker(cls, field: str) -> str:
        return "pipegcn-qadaptive" if field in cls._ADAPTIVE_ONLY else cls.key

    def __post_init__(self):
        for name in ("feature_momentum", "gradient_momentum"):
            m = getattr(self, name)
            if m is not None and not 0.0 <= m < 1.0:
                raise ValueError(f"pipegcn.{name} must lie in [0, 1), got {m!r}")
        if not self.stale and (self.feature_momentum, self.gradient_momentum) != (None, None):
            raise ValueError("pipegcn momenta smooth stale halos: they need stale = true")
        if self.quantize == "adaptive":
            if not self.stale:
                raise ValueError(
                    "pipegcn.quantize = 'adaptive' needs stale = true (adaptive widths on the "
                    "synchronous ring are method adaqp)"
                )
            check_adaptive("pipegcn", self)
            return
        if isinstance(self.assign, dict):
            object.__setattr__(
                self, "assign", from_dict(AssignConfig, self.assign, "pipegcn.assign")
            )
        check_quantize("pipegcn", self.quantize, adaptive=True)
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in self._ADAPTIVE_ONLY:
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"pipegcn.{name} applies to quantize='adaptive' only")

    def options(self) -> tuple[str, ...]:
        fields = super().options()
        if self.adaptive:
            return fields
        return tuple(f for f in fields if f not in self._ADAPTIVE_ONLY)

    def label(self) -> str:
        bits = bits_label(self.quantize)
        if not self.stale:
            return "pipegcn-sync" + bits
        tag = ""
        for letter, m in (("f", self.feature_momentum), ("g", self.gradient_momentum)):
            if m is not None:
                tag += letter if m == DEFAULT_MOMENTUM else f"{letter}{m:g}"
        return (f"pipegcn-{tag}" if tag else "pipegcn") + bits

    @property
    def name(self) -> str:
        return self.label()

    def exchange_chunks(self) -> int:
        return chunks_or_default(self.chunks) if self.adaptive else 0

    def check_run(self, run: RunInfo) -> None:
        if self.adaptive:
            check_adaptive_run(self, run)

    @property
    def exchange_before_dropout(self) -> bool:
        # Synchronous: Vanilla's order, so that it is Vanilla bit for bit.
        return self.stale

    @property
    def adaptive(self) -> bool:
        """Whether the widths are AdaQP's, re-solved every period."""
        return self.quantize == "adaptive"

    def pipe_state(self, plan, layer_dims) -> tuple[PipeLayer, ...]:
        """Per layer, the zero stale halo (``halo: [P, H, F]``) and, after the first layer,
        the zero halo gradient (``grad: [P, Nl, F]``)."""
        p, nl, h = plan.num_parts, plan.num_local_rows, plan.num_halo_rows
        return tuple(
            PipeLayer(
                halo=np.zeros((p, h, f), np.float32),
                grad=np.zeros((p, nl, f), np.float32) if layer else None,
            )
            for layer, f in enumerate(layer_dims)
        )

    def init_state(self, plan, layer_dims, *, epoch=0):
        # Zeros are also the shape template a checkpoint restores into, whatever the epoch.
        del epoch
        if self.adaptive:
            # AdaQP's state and the pipeline's buffers, under RunInfo's defaults.
            return StaleAdaptiveController(self, plan, layer_dims).init_state()
        layers = (
            self.pipe_state(plan, layer_dims) if self.stale else (PipeLayer(),) * len(layer_dims)
        )
        if self.quantize is None:
            return layers if self.stale else ()
        # One fixed layout per layer and direction.
        layouts = bucket_state(plan, BitAssignment.uniform(plan, len(layer_dims), self.quantize))
        return tuple(st._replace(fwd=f, bwd=b) for st, f, b in zip(layers, *layouts, strict=True))

    def controller(self, plan, layer_dims, *, cost=None, run=None):
        if self.adaptive:
            return StaleAdaptiveController(self, plan, layer_dims, cost=cost, run=run)
        return Controller(self, plan, layer_dims)

    def _layer(self, comm_state, layer) -> PipeLayer:
        """``layer``'s buffers and layouts (layouts None for fp32 rows)."""
        if self.adaptive:
            layouts = comm_state.layouts
            st = comm_state.pipe[layer]
            return st._replace(fwd=layouts.fwd[layer], bwd=layouts.bwd[layer])
        return comm_state[layer]

    def _with_layer(self, comm_state, layer, new: PipeLayer):
        if self.adaptive:
            pipe = replace_layer(comm_state.pipe, layer, new._replace(fwd=None, bwd=None))
            return comm_state._replace(pipe=pipe)
        return replace_layer(comm_state, layer, new)

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        quantized = self.quantize is not None
        if quantized and key is None:
            raise ValueError("the quantized exchange needs a PRNG key")
        st = self._layer(comm_state, layer) if comm_state else PipeLayer()
        fwd_layout, bwd_layout = st.fwd, st.bwd
        nbytes = self._bytes(h_local, shard, fwd_layout, bwd_layout, layer, axis_name, num_parts)
        if not self.stale:
            if quantized:
                h_remote = quantized_ring_exchange(
                    h_local, fwd_layout, bwd_layout, key, axis_name=axis_name, num_parts=num_parts
                )
            else:
                h_remote = ring_exchange(
                    h_local, shard.send_idx, axis_name=axis_name, num_parts=num_parts
                )
            return h_remote, comm_state, nbytes
        # This step's boundary rows, for the next step: no gradient flows through them.
        h_sent = jax.lax.stop_gradient(h_local)
        if quantized:
            fkey = jax.random.fold_in(key, 0)
            recv = quantized_halo(
                h_sent, fwd_layout, fkey, axis_name=axis_name, num_parts=num_parts
            )
        else:
            recv = ring_exchange(h_sent, shard.send_idx, axis_name=axis_name, num_parts=num_parts)
        if probe is None:  # layer 0: the input is data, nothing to send back
            h_remote = st.halo
        else:
            num_local = h_local.shape[0]
            if quantized:
                route = (bwd_layout, jax.random.key_data(jax.random.fold_in(key, 1)))
                traced = self.adaptive
                round_rows = tuple(fwd_layout.round_rows)

                def send_back(g_halo, route):
                    layout, key_data = route
                    g = quantized_halo_gradient(
                        g_halo,
                        layout,
                        jax.random.wrap_key_data(key_data),
                        num_local,
                        axis_name=axis_name,
                        num_parts=num_parts,
                    )
                    if not traced:
                        return g
                    # The backward messages' trace, slot by slot, as AdaQP's exchange has it.
                    return StaleProbe(g, slot_variances(g_halo, round_rows))
            else:
                route = tuple(shard.send_idx)

                def send_back(g_halo, route):
                    return reverse_ring_scatter(
                        g_halo, route, num_local=num_local, axis_name=axis_name, num_parts=num_parts
                    )

            h_remote = stale_halo(h_local, probe, st.halo, st.grad, route, send_back=send_back)
        new = st._replace(halo=_smooth(st.halo, recv, self.feature_momentum))
        comm_state = self._with_layer(comm_state, layer, new)
        if self.adaptive:  # the forward messages' trace, at the sender
            comm_state = trace_sent_rows(comm_state, layer, h_sent, shard.send_idx)
        return h_remote, comm_state, nbytes

    def _bytes(self, h_local, shard, fwd_layout, bwd_layout, layer, axis_name, num_parts):
        """Bytes one device sends at ``layer``: forward rows, and gradient rows after the
        first layer (whose input is data)."""
        if self.quantize is None:
            return ring_bytes(h_local, shard.send_idx, layer)
        dim = h_local.shape[-1]
        nbytes = exchange_bytes(fwd_layout, dim, axis_name, num_parts)
        if layer > 0:
            nbytes = nbytes + exchange_bytes(bwd_layout, dim, axis_name, num_parts)
        return nbytes

    def probes(self, comm_state, num_layers):
        if not self.stale:
            return None

        def probe(layer):  # layer 0 has none: its input is data
            grad = jnp.zeros_like(self._layer(comm_state, layer).grad)
            return StaleProbe(grad, zero_trace_probe(comm_state, layer)) if self.adaptive else grad

        return tuple(None if layer == 0 else probe(layer) for layer in range(num_layers))

    def absorb_probes(self, comm_state, probe_grads):
        if not self.stale:
            return comm_state
        out = comm_state
        for layer, fresh in enumerate(probe_grads):
            if fresh is None:
                continue
            if self.adaptive:
                out = trace_returned_rows(out, layer, fresh.trace)
                fresh = fresh.grad
            st = self._layer(out, layer)
            grad = _smooth(st.grad, fresh, self.gradient_momentum)
            out = self._with_layer(out, layer, st._replace(grad=grad))
        return out


class StaleAdaptiveController(AdaptiveController):
    """AdaQP's :class:`~jaxgraph.comm.adaqp.AdaptiveController` for PipeGCN with adaptive
    widths, carrying the stale halos and gradients across each change of widths."""

    def state_of(self, assignment, **kw) -> AdaptiveState:
        # Zero buffers (a shape template); update() puts the live ones in.
        pipe = self.exchange.pipe_state(self.plan, self.layer_dims)
        return super().state_of(assignment, **kw)._replace(pipe=pipe)

    def update(self, comm_state, *, epoch):
        new = super().update(comm_state, epoch=epoch)
        if new is None:
            return None
        return new._replace(pipe=jax.tree.map(to_host, comm_state.pipe))


def _momentum(flag, value) -> float | None:
    if not flag:
        return None
    return DEFAULT_MOMENTUM if value is None else float(value)


def _smooth(avg, recv, momentum):
    """``momentum * avg + (1 - momentum) * recv``, or ``recv`` without smoothing."""
    if momentum is None:
        return recv
    return momentum * avg + (1.0 - momentum) * recv


__all__ = [
    "PipeGCN",
    "PipeLayer",
    "StaleAdaptiveController",
    "StaleProbe",
    "reverse_ring_scatter",
    "stale_halo",
]
