"""The program for HiGHS through cvxpy: one parametrized program per structure, cached, solved
under a time limit and a relative gap.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import threading

import numpy as np
import scipy.sparse as sparse

from jaxgraph.comm.assign.problem import Problem, _Model, _NoSolution

SOLVER = "HIGHS"


def load_solver() -> None:
    """Imports cvxpy and its solver interfaces now (about 1 s, once per process), so that the
    first solve of a run does not pay for it. A missing solver is reported by the solve."""
    try:
        _check_solver()
    except _NoSolution:
        pass


def _check_solver() -> None:
    """Raises :class:`_NoSolution` naming the cause if cvxpy or HiGHS is missing."""
    try:
        import cvxpy as cp
    except ImportError as e:  # pragma: no cover - cvxpy is a dependency
        raise _NoSolution(f"cvxpy is not importable ({e})") from e
    installed = _installed_solvers(cp.installed_solvers)
    if SOLVER not in installed:
        raise _NoSolution(
            f"MIP solver {SOLVER} is not installed (cvxpy installed solvers: {installed})"
        )


@functools.lru_cache(maxsize=4)
def _installed_solvers(query) -> tuple[str, ...]:
    """``query()`` (cvxpy's ``installed_solvers``, which probes every solver interface), once per
    process and function (a replaced query is asked anew)."""
    return tuple(query())


class _Program:
    """The cvxpy program of one structure (groups, channels, costs in seconds) with the variance
    costs as a parameter: DPP, so cvxpy canonicalizes it once per structure. Times are in units
    of ``unit`` (``T_n``), keeping the coefficients near 1 (HiGHS drops entries below 1e-9)."""

    def __init__(self, model: _Model, unit: float, pairs: np.ndarray):
        import cvxpy as cp

        num_groups, num_widths = model.var.shape
        num_ch = model.gamma.size
        cols = np.arange(num_groups * num_widths)
        onehot = sparse.csr_matrix(
            (np.ones(cols.size), (cols // num_widths, cols)), shape=(num_groups, cols.size)
        )
        load = sparse.csr_matrix(
            ((model.sec / unit).ravel(), (np.repeat(model.channel, num_widths), cols)),
            shape=(num_ch, cols.size),
        )
        in_round = sparse.csr_matrix(
            (np.ones(num_ch), (np.arange(num_ch), model.round_of)),
            shape=(num_ch, model.num_rounds),
        )
        # Each round's time is its bottleneck at the narrowest width plus y_r >= 0.
        narrowest = np.bincount(model.channel, weights=model.sec[:, 0], minlength=num_ch)
        floor = np.zeros(model.num_rounds)
        np.maximum.at(floor, model.round_of, narrowest + model.gamma)
        # Groups of one channel with equal row counts cost the same at every width, so an
        # optimum gives the heavier one at least the lighter one's width: these order
        # constraints (`pairs`) cut the symmetric solutions HiGHS would otherwise search.
        order = _order_matrix(pairs, num_widths, cols.size)
        self.x = cp.Variable(cols.size, boolean=True)
        y = cp.Variable(model.num_rounds, nonneg=True)  # round time above `floor`, / T_n
        self.cost = cp.Parameter(cols.size)  # lam (V - V_widest) / (V_n - V_u) >= 0
        self.problem = cp.Problem(
            cp.Minimize(self.cost @ self.x + (model.a_time * unit) * cp.sum(y)),
            [
                onehot @ self.x == 1,
                load @ self.x + model.gamma / unit <= in_round @ (floor / unit + y),
                order @ self.x >= 0,
            ],
        )
        self.lock = threading.Lock()  # one solve at a time: the parameter is shared state


_PROGRAMS: collections.OrderedDict[bytes, _Program] = collections.OrderedDict()
_PROGRAMS_LOCK = threading.Lock()
PROGRAM_CACHE_SIZE = 128  # programs kept (a run of L layers and P parts needs (2L - 1)(P - 1))


def _order_pairs(model: _Model) -> np.ndarray:
    """``int64[n, 2]`` (heavier, lighter): consecutive groups, by descending weight (ties by
    index), among the groups of one channel whose per-width seconds are equal."""
    classes: dict[tuple, list[int]] = {}
    for j in range(model.channel.size):
        classes.setdefault((int(model.channel[j]), model.sec[j].tobytes()), []).append(j)
    pairs = []
    for members in classes.values():
        members.sort(key=lambda j: (-model.var[j, 0], j))
        pairs += zip(members[:-1], members[1:], strict=True)
    return np.asarray(pairs, np.int64).reshape(-1, 2)


def _order_matrix(pairs: np.ndarray, num_widths: int, num_cols: int) -> sparse.csr_matrix:
    """Rows ``sum_{i >= k} x[a, i] - sum_{i >= k} x[b, i]`` (to be ``>= 0``) for every pair
    ``(a, b)`` and threshold ``k = 1 .. W - 1``: ``a``'s width index is at least ``b``'s."""
    thresholds = np.arange(1, num_widths)
    pair, k, i = np.meshgrid(
        np.arange(pairs.shape[0]), thresholds, np.arange(num_widths), indexing="ij"
    )
    keep = i >= k  # [pairs, W - 1, W]
    row = (pair * thresholds.size + k - 1)[keep]
    heavier = (pairs[pair, 0] * num_widths + i)[keep]
    lighter = (pairs[pair, 1] * num_widths + i)[keep]
    return sparse.csr_matrix(
        (
            np.concatenate([np.ones(row.size), -np.ones(row.size)]),
            (np.concatenate([row, row]), np.concatenate([heavier, lighter])),
        ),
        shape=(pairs.shape[0] * thresholds.size, num_cols),
    )


def _structure(model: _Model, unit: float, pairs: np.ndarray) -> bytes:
    """A digest of everything in a :class:`_Program` but the variance costs."""
    h = hashlib.blake2b(digest_size=20)
    scalars = np.array([unit, model.a_time, model.num_rounds, *model.var.shape], np.float64)
    for a in (model.sec, model.gamma, model.channel, model.round_of, pairs, scalars):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.digest()


@contextlib.contextmanager
def _program(model: _Model, unit: float):
    """The cached :class:`_Program` of ``model``'s structure, held for one solve (a fresh,
    uncached one if another thread is solving the cached one)."""
    pairs = _order_pairs(model)
    key = _structure(model, unit, pairs)
    with _PROGRAMS_LOCK:
        program = _PROGRAMS.get(key)
        if program is not None:
            _PROGRAMS.move_to_end(key)
    if program is None or not program.lock.acquire(blocking=False):
        fresh = _Program(model, unit, pairs)
        fresh.lock.acquire()
        if program is None:
            with _PROGRAMS_LOCK:
                _PROGRAMS[key] = fresh
                while len(_PROGRAMS) > PROGRAM_CACHE_SIZE:
                    _PROGRAMS.popitem(last=False)
        program = fresh
    try:
        yield program
    finally:
        program.lock.release()


def _milp(problem: Problem, model: _Model, time_limit: float, mip_rel_gap: float):
    """Solves the program with HiGHS through cvxpy (checked by :func:`_check_solver`). Returns
    ``(choice int[K], status, gap)``; raises :class:`_NoSolution` when there is no usable
    integer solution."""
    num_groups, num_widths = model.var.shape
    # mip_abs_gap = 0 leaves the relative gap as the only optimality stop (HiGHS's default 1e-6
    # is not small next to a normalized objective). threads = 1: the parallelism is across
    # programs and rounds (_solve_all's pool). HiGHS keeps one scheduler per calling thread,
    # sized by its first run, and refuses another size: hence always the pool's threads.
    options = {
        "time_limit": float(time_limit),
        "mip_rel_gap": float(mip_rel_gap),
        "mip_abs_gap": 0.0,
        "output_flag": False,
        "threads": 1,
    }
    try:
        with _program(model, model.t_nadir) as program:
            program.cost.value = model.a_var * (model.var - model.var[:, -1:]).ravel()
            prob = program.problem
            # cvxpy's documented low-level path, without Problem.solve's "Solution may be
            # inaccurate" UserWarning on a time limit (an expected outcome here).
            data, chain, inverse = prob.get_problem_data(SOLVER)
            raw = chain.solve_via_data(prob, data, solver_opts=options)
            result = chain.invert(raw, inverse)
            values = (result.primal_vars or {}).get(program.x.id)
    except Exception as e:  # any solver failure falls back: the training run must go on
        raise _NoSolution(f"MIP solver {SOLVER} raised {type(e).__name__}: {e}") from e
    info = raw.get("info") if isinstance(raw, dict) else None
    feasible = getattr(info, "primal_solution_status", 2) == 2  # kSolutionStatusFeasible
    if result.status not in ("optimal", "optimal_inaccurate", "user_limit") or not feasible:
        raise _NoSolution(
            f"MIP solver {SOLVER} found no integer solution (status {result.status}, "
            f"HiGHS {raw.get('model_status') if isinstance(raw, dict) else raw!r}, "
            f"time_limit {time_limit} s)"
        )
    values = np.asarray(values, np.float64).reshape(num_groups, num_widths)
    if not np.all(np.isfinite(values)) or np.any(np.abs(values.sum(axis=1) - 1.0) > 0.5):
        raise _NoSolution(f"MIP solver {SOLVER} returned a non-integral assignment")
    gap = getattr(info, "mip_gap", None)
    gap = float(gap) if gap is not None and np.isfinite(gap) else None
    return np.argmax(values, axis=1), result.status, gap
