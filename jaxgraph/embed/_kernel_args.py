"""Argument checks of the compiled CPU skip-gram kernels (:mod:`jaxgraph.embed.cpu_sgns`,
:mod:`jaxgraph.embed.cpu_hsoftmax`): every array is checked and converted before a kernel runs,
so bad input raises ``ValueError`` with the argument's name and changes nothing; and the
page-aligned arrays the kernels' rows live in (:func:`page_aligned`)."""

from __future__ import annotations

import math
import numbers

import numpy as np

PAGE = 4096  # bytes


def page_aligned(shape: tuple[int, ...], dtype=np.float32, fill=None) -> np.ndarray:
    """A C-contiguous array whose data starts a memory page (uninitialised, or all ``fill``).

    NumPy aligns to 16 bytes, so a table's 512-byte rows (``d = 128``) each span 9 cache lines
    and every 64-byte vector access splits two; the CPU kernels ran 12-23 % slower on such
    tables than on page-aligned ones."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + PAGE, np.uint8)
    start = -buffer.ctypes.data % PAGE
    out = buffer[start : start + nbytes].view(dtype).reshape(shape)
    if fill is not None:
        out.fill(fill)
    return out


def check_tables(syn0, syn1, *, replicas: bool = False) -> tuple[int, ...]:
    """Raises ``ValueError`` unless both tables are writeable, C-contiguous ``float32[N, d]``
    (``float32[R, N, d]`` with ``replicas``) NumPy arrays of one shape and distinct memory;
    returns their shape."""
    want = "float32[R, N, d]" if replicas else "float32[N, d]"
    for name, table in (("syn0", syn0), ("syn1", syn1)):
        if not isinstance(table, np.ndarray):
            raise ValueError(f"{name} must be a NumPy array (updated in place), got {type(table)}")
        if table.dtype != np.float32 or table.ndim != 2 + replicas:
            raise ValueError(f"{name} must be {want}, got {table.dtype}{list(table.shape)}")
        if not table.flags.c_contiguous or not table.flags.writeable:
            raise ValueError(f"{name} must be C-contiguous and writeable (it is updated in place)")
    if syn0.shape != syn1.shape:
        raise ValueError(f"syn0 and syn1 must have one shape, got {syn0.shape} and {syn1.shape}")
    if np.may_share_memory(syn0, syn1):
        raise ValueError("syn0 and syn1 must not share memory")
    if syn0.shape[-2] >= 2**30:
        raise ValueError(f"at most 2**30 rows, got {syn0.shape[-2]}")
    return syn0.shape


def check_ids(name: str, ids, num_rows: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``ids`` as contiguous ``int32``; raises ``ValueError`` for a non-integer array, another
    ``shape`` or an id outside ``[0, num_rows)``."""
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, got {ids.dtype}")
    if shape is not None and ids.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_rows):
        raise ValueError(
            f"{name} must be row ids in [0, {num_rows}), got values in [{ids.min()}, {ids.max()}]"
        )
    return np.ascontiguousarray(ids, np.int32)


def check_floats(name: str, values, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as contiguous finite ``float32[shape]``, else ``ValueError``."""
    values = np.asarray(values)
    if values.shape != shape or not np.issubdtype(values.dtype, np.floating):
        want = ", ".join(map(str, shape))
        raise ValueError(f"{name} must be float[{want}], got {values.dtype}{list(values.shape)}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(values, np.float32)


def check_cap(row_cap) -> int:
    """``row_cap`` as the kernel's integer (0: None), else ``ValueError``."""
    if row_cap is None:
        return 0
    if isinstance(row_cap, bool) or not isinstance(row_cap, numbers.Integral) or row_cap < 1:
        raise ValueError(f"row_cap must be an integer >= 1 or None, got {row_cap!r}")
    return int(row_cap)


def check_alias(accept, alias, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The alias table as contiguous ``(f32[N], int32[N])`` over the ``N`` table rows."""
    accept = check_floats("accept", accept, (num_rows,))
    return accept, check_ids("alias", alias, num_rows, (num_rows,))


def check_key(key) -> np.uint64:
    if isinstance(key, bool) or not isinstance(key, numbers.Integral) or not 0 <= key < 2**64:
        raise ValueError(f"key must be an integer in [0, 2**64), got {key!r}")
    return np.uint64(key)


def check_chunk(inputs, outputs, weights, lrs, num_steps, span, num_rows: int):
    """A chunk's pairs (``inputs, outputs: int[S, B]``, ``weights: f[S, B]``, ``lrs: f[S]``)
    checked and the first ``num_steps`` steps flattened: ``(flat_in, flat_out, flat_w, lrs,
    B, span)`` with ``span`` resolved (None: all ``num_steps``)."""
    inputs = np.asarray(inputs)
    if inputs.ndim != 2 or inputs.shape[1] < 1:
        raise ValueError(f"inputs must be int[S, B], got shape {inputs.shape}")
    s_all, b = inputs.shape
    if not isinstance(num_steps, numbers.Integral) or not 0 <= num_steps <= s_all:
        raise ValueError(f"num_steps must be an integer in [0, {s_all}], got {num_steps!r}")
    if np.shape(outputs) != (s_all, b):
        raise ValueError(f"outputs must have shape {(s_all, b)}, got {np.shape(outputs)}")
    if span is not None and (not isinstance(span, numbers.Integral) or span < 1):
        raise ValueError(f"span must be an integer >= 1 or None, got {span!r}")
    used = slice(0, num_steps)
    flat_in = check_ids("inputs", inputs[used], num_rows).reshape(-1)
    flat_out = check_ids("outputs", np.asarray(outputs)[used], num_rows).reshape(-1)
    flat_w = check_floats("weights", weights, (s_all, b))[used].reshape(-1)
    lrs = check_floats("lrs", lrs, (s_all,))
    span = num_steps if span is None else min(int(span), num_steps)
    return flat_in, flat_out, flat_w, lrs, b, span


def check_step(syn0, syn1, inputs, outputs, weight, lr, row_cap):
    """One step's common arguments checked: ``(N, d, inputs, outputs, weight, cap)`` with
    ``inputs, outputs: int32[B]``, ``weight: f32[B]`` and the cap as :func:`check_cap`."""
    n, d = check_tables(syn0, syn1)
    inputs = check_ids("inputs", inputs, n)
    if inputs.ndim != 1:
        raise ValueError(f"inputs must be int[B], got shape {inputs.shape}")
    b = inputs.shape[0]
    outputs = check_ids("outputs", outputs, n, (b,))
    weight = check_floats("weight", weight, (b,))
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    return n, d, inputs, outputs, weight, check_cap(row_cap)


def one_replica(syn0, syn1, inputs, outputs, weights):
    """One replica's tables ``f32[N, d]`` (checked) and chunk ``[S, B]`` as the replica-axis
    arguments of the kernels' ``train_replicas`` (views with a leading axis of 1)."""
    check_tables(syn0, syn1)
    return (syn0[None], syn1[None], *(np.asarray(a)[None] for a in (inputs, outputs, weights)))


def check_replicas(syn0, syn1, inputs, outputs, weights, lrs, num_steps, span, copies=1):
    """``R`` replicas' tables ``f32[R C, N, d]`` (``C = copies`` of each) and chunks
    (``inputs, outputs: int[R, S, B]``, ``weights: f[R, S, B]``, one ``lrs: f[S]``) checked,
    each chunk as :func:`check_chunk`: ``(R, N, d, flat, lrs, B, span)`` with ``flat`` the
    stacked ``(flat_in, flat_out, flat_w)`` of shape ``[R, S' B]``."""
    tables, n, d = check_tables(syn0, syn1, replicas=True)
    if not isinstance(copies, numbers.Integral) or copies < 1 or tables % copies:
        raise ValueError(
            f"copies must be an integer >= 1 that divides the tables' leading axis ({tables}), "
            f"got {copies!r}"
        )
    r = tables // copies
    arrays = {"inputs": inputs, "outputs": outputs, "weights": weights}
    for name, a in arrays.items():
        if np.ndim(a) < 1 or np.shape(a)[0] != r:
            raise ValueError(
                f"{name} must hold one chunk per replica ({r}), got shape {np.shape(a)}"
            )
    chunks = [
        check_chunk(*(np.asarray(a)[i] for a in arrays.values()), lrs, num_steps, span, n)
        for i in range(r)
    ]
    # One replica's arrays as views (no copy).
    flat = tuple(
        np.stack([c[j] for c in chunks]) if r > 1 else chunks[0][j][None] for j in range(3)
    )
    return (r, n, d, flat, *chunks[0][3:])
