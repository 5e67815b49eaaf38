r"""A training method defined outside jaxgraph: halo rows travel the ring as 16-bit floats.

Importing this file registers the method ``half`` (spelled ``half`` or ``half-bf16``) with
``jaxgraph train``: its ``--method`` choice, its option ``--wire-dtype``, its config-file
section ``[method.half]``. Run as a script, the file is the ``jaxgraph`` command line with the
method added::

    python docs/examples/half_method.py train --dataset sbm --nodes 64 --num-features 8 \
        --parts 2 --epochs 2 --method half-bf16
"""

import dataclasses
import sys
from typing import ClassVar, Literal

import jax.numpy as jnp

from jaxgraph.comm.method import Method, register_method
from jaxgraph.comm.ring import ring_exchange
from jaxgraph.comm.strategy import CommStrategy


@register_method
@dataclasses.dataclass(frozen=True)
class Half(Method, CommStrategy):
    """Vanilla's ring exchange with every halo row, and its gradient, sent as a 16-bit float.

    Attributes:
      wire_dtype: the 16-bit format on the wire: float16 (10-bit mantissa, range +-65504) or
        bfloat16 (7-bit mantissa, float32's range).
    """

    wire_dtype: Literal["float16", "bfloat16"] = "float16"

    key: ClassVar[str] = "half"  # --method half, [method.half]
    spellings: ClassVar[str] = "half[-bf16]"  # what parse() reads, for error messages

    def __post_init__(self):
        if self.wire_dtype not in ("float16", "bfloat16"):
            raise ValueError(
                f"half.wire_dtype must be 'float16' or 'bfloat16', got {self.wire_dtype!r}"
            )

    @classmethod
    def parse(cls, text: str):
        if text == "half-bf16":
            return cls(wire_dtype="bfloat16")
        return super().parse(text)  # "half", or None: not this type's spelling

    def label(self) -> str:
        return "half" if self.wire_dtype == "float16" else "half-bf16"

    @property
    def name(self) -> str:
        return self.label()

    def exchange(
        self, h_local, shard, comm_state, *, layer, axis_name, num_parts, key=None, probe=None
    ):
        del key, probe  # deterministic, and records nothing in the backward pass
        wire = jnp.dtype(self.wire_dtype)
        # h_local: f32[Nl, F] -> f16[Nl, F]; each ring round r sends f16[S_r, F];
        # halo: f16[H, F] in the plan's halo order. Autodiff transposes the casts and the
        # ring, so the gradient rows travel back as 16-bit floats too.
        halo = ring_exchange(
            h_local.astype(wire), shard.send_idx, axis_name=axis_name, num_parts=num_parts
        )
        rows = sum(idx.shape[0] for idx in shard.send_idx)  # static: sum_r S_r
        passes = 1 if layer == 0 else 2  # the first layer's input is data: no gradient
        bytes_moved = jnp.float32(passes * rows * h_local.shape[-1] * wire.itemsize)
        return halo.astype(h_local.dtype), comm_state, bytes_moved


if __name__ == "__main__":
    from jaxgraph.cli import main

    sys.exit(main())
