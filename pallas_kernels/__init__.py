"""Pallas kernels, each with its pure-jnp reference and a wrapper that library code calls.

Kernel APIs live in their modules (the package attribute ``quantize`` is the module, e.g.
``from pallas_kernels.quantize import dequantize, quantize``):
`pallas_kernels.quantize` (stochastic row-wise message quantization; its formulas in
`pallas_kernels.quantize_ref`, packing in `pallas_kernels.packing`, random bits in
`pallas_kernels.random_bits`) and `pallas_kernels.bitmap` (decoding FaBC's walk corpora).
The backend choice shared by every wrapper is re-exported here.
"""

from pallas_kernels import quantize as quantize
from pallas_kernels.backend import Backend as Backend
from pallas_kernels.backend import default_backend as default_backend
