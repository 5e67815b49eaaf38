"""LLVM intrinsics for the numba skip-gram kernels: a row prefetch, a step counter's acquire
load and release store, the high half of a 64-bit product, and six row updates in one pass.

**Prefetch** (LLVM's ``llvm.prefetch``). The skip-gram kernel's rows are random and bound by
memory latency; asking for the rows of a pair two ahead while the current pair computes hides
some of it. The prefetch asks to read: one that asks to write takes a line from the other core
while its thread is updating the same hub rows, and on an R-MAT of 10,000 nodes halved the
2-thread rate (1.6M against 3.7M pairs/s).

**Counters.** A kernel's threads publish how many steps are written: a release store after a
step's table writes, an acquire load before the next step's, so a thread that sees a count also
sees those steps' updates (numba has no atomics on the CPU).

**Six row updates** (``axpy_rows``). The write pass adds multiples of a pair's input row to its
six output rows. As six loops LLVM vectorises each but reloads the input row six times; as one
loop it cannot prove the rows apart and keeps it scalar. The intrinsic writes the one loop in
vectors of 8 floats, each row's load, update and store in program order, so a row named twice
still takes both updates.

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


_LANES = 8  # floats per vector of the row updates (one AVX register; LLVM splits or joins)


@intrinsic
def axpy_rows(typingctx, y, rows, coefs, x, i):
    """``y[rows[j]] += coefs[j] * x[i]`` for the six ``j``, in one pass over ``x[i]`` in vectors
    of 8 floats: each vector of ``x[i]`` is loaded once and each row's is loaded, updated and
    stored in turn, so a row named twice takes both updates (``y, x``: C-contiguous 2-D
    float32 arrays of one width; ``rows``: int64[6]; ``coefs``: float32[6])."""
    f32 = types.float32
    table = types.Array(f32, 2, "C")
    if not (y == table and x == table and isinstance(i, types.Integer)):
        return None
    if not (isinstance(rows, types.Array) and rows.dtype == types.int64 and rows.ndim == 1):
        return None
    if not (isinstance(coefs, types.Array) and coefs.dtype == f32 and coefs.ndim == 1):
        return None

    def codegen(context, builder, sig, args):
        ty, trows, tcoefs, tx, ti = sig.args
        ya = context.make_array(ty)(context, builder, args[0])
        ra = context.make_array(trows)(context, builder, args[1])
        ca = context.make_array(tcoefs)(context, builder, args[2])
        xa = context.make_array(tx)(context, builder, args[3])
        intp = context.get_value_type(types.intp)
        zero = ir.Constant(intp, 0)
        row = context.cast(builder, args[4], ti, types.intp)
        xp = cgutils.get_item_pointer(context, builder, tx, xa, [row, zero])
        ys, cs = [], []
        for j in range(6):
            k = ir.Constant(intp, j)
            r = builder.load(cgutils.get_item_pointer(context, builder, trows, ra, [k]))
            ys.append(cgutils.get_item_pointer(context, builder, ty, ya, [r, zero]))
            cs.append(builder.load(cgutils.get_item_pointer(context, builder, tcoefs, ca, [k])))
        width = cgutils.unpack_tuple(builder, xa.shape, 2)[1]
        lanes = ir.Constant(intp, _LANES)
        vty = ir.VectorType(ir.FloatType(), _LANES)
        vfma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty, vty, vty]), "llvm.fma.v8f32"
        )
        sfma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.FloatType(), [ir.FloatType()] * 3), "llvm.fma.f32"
        )
        cvs = []
        for c in cs:
            v = ir.Constant(vty, ir.Undefined)
            for lane in range(_LANES):
                v = builder.insert_element(v, c, ir.Constant(ir.IntType(32), lane))
            cvs.append(v)
        blocks = builder.sdiv(width, lanes)
        with cgutils.for_range(builder, blocks) as loop:
            at = builder.mul(loop.index, lanes)
            xv = builder.load(builder.bitcast(builder.gep(xp, [at]), vty.as_pointer()), align=4)
            for yp, cv in zip(ys, cvs, strict=True):
                p = builder.bitcast(builder.gep(yp, [at]), vty.as_pointer())
                builder.store(builder.call(vfma, [cv, xv, builder.load(p, align=4)]), p, align=4)
        with cgutils.for_range(builder, builder.sub(width, builder.mul(blocks, lanes))) as loop:
            at = builder.add(builder.mul(blocks, lanes), loop.index)
            xs = builder.load(builder.gep(xp, [at]))
            for yp, c in zip(ys, cs, strict=True):
                p = builder.gep(yp, [at])
                builder.store(builder.call(sfma, [c, xs, builder.load(p)]), p)
        return context.get_dummy_value()

    return types.void(y, rows, coefs, x, i), codegen
