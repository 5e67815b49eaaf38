"""LLVM intrinsics for the numba skip-gram kernels: a row prefetch, a step counter's acquire
load and release store, and the high half of a 64-bit product.

**Prefetch** (LLVM's ``llvm.prefetch``). The skip-gram kernel's rows are random and bound by
memory latency; asking for the rows of a pair two ahead while the current pair computes hides
some of it. The prefetch asks to read: one that asks to write takes a line from the other core
while its thread is updating the same hub rows, and on an R-MAT of 10,000 nodes halved the
2-thread rate (1.6M against 3.7M pairs/s).

**Counters.** A kernel's threads publish how many steps are written: a release store after a
step's table writes, an acquire load before the next step's, so a thread that sees a count also
sees those steps' updates (numba has no atomics on the CPU).

**Wide product.** ``mulhi(z, n)`` is ``floor(z n / 2**64)``: a uniform 64-bit ``z`` maps to an
index in ``[0, n)`` without a division, and the low half ``z n mod 2**64`` is the uniform position
inside that index's share (numba has no 128-bit integers).

numba caches a kernel by its own file: after changing this one, touch the files of the kernels
that use it (``_kernel_steps.py``, ``cpu_sgns.py``, ``cpu_hsoftmax.py``)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_LINE = 64  # bytes per cache line
_MAX_LINES = 16  # rows of at most 1 KiB are prefetched whole (d <= 256 float32)


@intrinsic
def prefetch_row(typingctx, table, row):
    """Asks the cache for the lines of ``table[row]`` (a C-contiguous 2-D array), to read; no
    effect on results, and no fault for any row (a prefetch never traps)."""
    if not (isinstance(table, types.Array) and table.ndim == 2 and table.layout == "C"):
        return None
    if not isinstance(row, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        r = context.cast(builder, args[1], sig.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        start = cgutils.get_item_pointer(context, builder, aryty, ary, [r, zero])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        base = builder.bitcast(start, i8p)
        width = cgutils.unpack_tuple(builder, ary.shape, 2)[1]
        itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        nbytes = builder.mul(width, context.get_constant(types.intp, itemsize))
        read, locality, data = ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)
        for line in range(_MAX_LINES):
            offset = context.get_constant(types.intp, _LINE * line)
            with builder.if_then(builder.icmp_signed("<", offset, nbytes)):
                builder.call(fn, [builder.gep(base, [offset]), read, locality, data])
        return context.get_dummy_value()

    return types.void(table, row), codegen


def _counter(context, builder, sig, args):
    """The address of ``counters[i]`` (``int64[T]``, C-contiguous)."""
    aryty = sig.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    i = context.cast(builder, args[1], sig.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, aryty, ary, [i])


def _is_counters(counters, i) -> bool:
    return (
        isinstance(counters, types.Array)
        and counters.ndim == 1
        and counters.dtype == types.int64
        and isinstance(i, types.Integer)
    )


@intrinsic
def load_acquire(typingctx, counters, i):
    """``counters[i]``, read with acquire ordering (never hoisted out of a waiting loop)."""
    if not _is_counters(counters, i):
        return None

    def codegen(context, builder, sig, args):
        return builder.load_atomic(_counter(context, builder, sig, args), "acquire", 8)

    return types.int64(counters, i), codegen


@intrinsic
def store_release(typingctx, counters, i, value):
    """``counters[i] = value`` with release ordering."""
    if not _is_counters(counters, i) or not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        value = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(value, _counter(context, builder, sig, args), "release", 8)
        return context.get_dummy_value()

    return types.void(counters, i, value), codegen


@intrinsic
def mulhi(typingctx, a, b):
    """The high 64 bits of the 128-bit product of ``a`` and ``b`` (both cast to ``uint64``)."""
    if not (isinstance(a, types.Integer) and isinstance(b, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        wide = ir.IntType(128)
        x, y = (
            builder.zext(context.cast(builder, v, t, types.uint64), wide)
            for v, t in zip(args, sig.args, strict=True)
        )
        high = builder.lshr(builder.mul(x, y), ir.Constant(wide, 64))
        return builder.trunc(high, ir.IntType(64))

    return types.uint64(a, b), codegen
