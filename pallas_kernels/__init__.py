"""Pallas kernels, each with its pure-jnp reference and a wrapper that library code calls.

Kernel APIs live in their modules (the package attribute ``quantize`` is the module, not the
function), e.g. ``from pallas_kernels.quantize import dequantize, quantize``:

* `pallas_kernels.quantize`: stochastic row-wise message quantization (the kernels and the
  public `quantize` / `dequantize`); `pallas_kernels.quantize_ref` its formulas and jnp
  references, `pallas_kernels.packing` AdaQP's packing of codes into bytes and
  `pallas_kernels.random_bits` the counter-based random bits both draw from.
* `pallas_kernels.bitmap`: decoding FaBC's bitmap-compressed walk corpora.

The backend choice shared by every wrapper is re-exported here.
"""

from pallas_kernels import quantize as quantize
from pallas_kernels.backend import Backend as Backend
from pallas_kernels.backend import default_backend as default_backend
