"""Starting iterates for ``mw.solve`` and ``mw.solve_batch`` (``initial=``).

A previous :class:`~mfgwork.Result` on the same grid starts from its U and M. For problems
whose coupling state is one path (Santa Fe: the attendance path A(t)), a result on another
grid (e.g. a coarse solve) or the path itself (levels 1..nt, or 0..nt as ``res.attendance``)
starts from that state, interpolated linearly in time onto the grid's levels. A result must
be of a 1-D solve on the problem's domain [x_min, x_max] (U and M (nt+1, nx), any nt ≥ 1 and
nx ≥ 3; any horizon): a 2-D, finite-state, several populations' or long-run result is
refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .core.backend import Backend, to_numpy
from .core.errors import ParameterError
from .core.grid import Grid
from .problems.base import MFGProblem, batch_coupling
from .results import Result


class Start(NamedTuple):
    """A member of a coarse batch as the start of a finer solve (what the coarse stage of a
    coarse-to-fine solve hands on, without building a :class:`~mfgwork.Result`): its
    densities M and values U (nt+1, nx), where the batch computed them, its iterations and,
    where the stage measured it (float64 Newton on a coupling state), L = ‖Φ'‖ of its best
    response there (:mod:`mfgwork.float64_floor`), and the amplification of its certificate
    (:attr:`~mfgwork.numerics.iteration.FixedPointResult.amplification`)."""

    M: Any
    U: Any
    iterations: int
    lipschitz: float | None = None
    amplification: float | None = None


def initial_state(initial: Any, problems: Sequence[MFGProblem], grid: Grid, be: Backend,
                  batched: bool) -> dict[str, Any]:
    """The starting iterate as keyword arguments of the iteration: ``M_init`` and ``U_init``,
    or ``z_init`` (the coupling states). ``initial``: None, a Result, or (batches) a sequence
    of one Result (or coarse :class:`Start`) per problem, or paths shaped (nt,) / (nt+1,)
    (batches: (B, nt) or (B, nt+1)). Errors name what is wrong, before any work."""
    if initial is None:
        return {}
    items = per_problem(initial, problems, grid, batched)
    results = [r for r in items if isinstance(r, Result | Start)]
    every = len(results) == len(items)
    if every and _one_grid([r.M for r in results], problems):
        # the Results' densities and values on the backend, each stacked once
        M, U = (be.stack([getattr(r, name) for r in results]) for name in ("M", "U"))
        _check_finite({"M": [M], "U": [U]}, be)
        if _same_grid(M[0], grid):
            return ({"M_init": M, "U_init": U} if batched
                    else {"M_init": M[0], "U_init": U[0]})
        for p in problems:
            _check_path_coupling(p, grid)
        return {"z_init": be.asarray(_result_paths(M, problems, grid, be)
                                     if batched else _path(results[0], problems[0], grid))}
    M, U = ([be.asarray(getattr(r, name)) for r in results] for name in ("M", "U"))
    _check_finite({"M": M, "U": U}, be)
    if every and all(_same_grid(m, grid) for m in M):
        xp = be.xp
        return ({"M_init": xp.stack(M), "U_init": xp.stack(U)} if batched
                else {"M_init": M[0], "U_init": U[0]})
    for p in problems:
        _check_path_coupling(p, grid)
    paths = [_path(item, p, grid) for item, p in zip(items, problems, strict=True)]
    return {"z_init": be.asarray(np.stack(paths) if batched else paths[0])}


def per_problem(initial: Any, problems: Sequence[MFGProblem], grid: Grid,
                batched: bool) -> list[Any]:
    """``initial`` split into one start per problem (None: [None] * n), each Result checked
    against its problem on ``grid`` (:func:`_check_result`); a wrong kind, count or shape is
    a ParameterError naming ``initial``."""
    n = len(problems)
    if initial is None or isinstance(initial, Result | Start):
        items = [initial] * n
    elif batched and isinstance(initial, (list, tuple)):
        if len(initial) != n:
            raise ParameterError(f"initial has {len(initial)} entries: must have one per "
                                 f"problem ({n})")
        items = list(initial)
    else:
        items = _paths(initial, n, batched)
    seen: set[int] = set()   # (one Result given for a whole batch is checked once)
    for i, (item, problem) in enumerate(zip(items, problems, strict=True)):
        if isinstance(item, Result) and id(item) not in seen:
            seen.add(id(item))
            _check_result(item, problem, grid, f"initial[{i}]" if batched else "initial")
    return items


def _paths(initial: Any, n: int, batched: bool) -> list[Any]:
    """``initial``, an array of coupling states, split into one path per problem."""
    arr = np.asarray(to_numpy(initial)) if not isinstance(initial, (str, dict)) else None
    if arr is None or arr.dtype.kind not in "iuf":
        kind = type(initial).__name__ if arr is None else f"dtype {arr.dtype}"
        raise ParameterError(f"initial={initial!r:.60} ({kind}) is invalid: must be None, an "
                             "mfgwork Result" + (", a list of Results (one per problem)" if batched
                                         else "") + " or an array of coupling states")
    if batched:
        if arr.ndim != 2 or arr.shape[0] != n:
            raise ParameterError(f"initial has shape {arr.shape}: a batch of {n} problems "
                                 f"needs one path per problem, ({n}, nt) or ({n}, nt+1)")
        return list(arr)
    return [arr]


def _check_result(result: Result, problem: MFGProblem, grid: Grid, name: str) -> None:
    """Refuse a Result that is not of a 1-D solve on the domain of ``problem`` (U and M
    (nt+1, nx), nt ≥ 1, nx ≥ 3, x over [x_min, x_max]), naming its kind."""
    shape = tuple(np.shape(result.M))
    x, t = (np.asarray(to_numpy(a), dtype=np.float64).ravel() for a in (result.x, result.t))
    one_d = (len(shape) == 2 and shape[0] >= 2 and shape[1] >= 3 and not result.labels
             and tuple(np.shape(result.U)) == shape and (t.size, x.size) == shape)
    if one_d and _spans(x, grid.x_min, grid.x_max):
        return
    kind = result.params.get("problem")
    labels = f", labels {list(result.labels)}" if result.labels else ""
    where = f", x over [{x[0]:g}, {x[-1]:g}]" if one_d else ""
    grids = ("(nt+1, nx) on any grid with nt >= 1 and nx >= 3"
             if problem.coupling_size(grid.nx, grid.nt) == grid.nt
             else f"of shape {(grid.nt + 1, grid.nx)}, this grid's")
    raise ParameterError(
        f"{name} is a {type(result).__name__}" + (f" of {kind!r}" if kind else "")
        + f" with dims {tuple(result.dims)}{labels}, M of shape {shape}{where}: must be a "
        f"Result of a 1-D solve on the domain of this {type(problem).__name__}, x over "
        f"[{grid.x_min:g}, {grid.x_max:g}] (U and M {grids})")


def _spans(nodes: np.ndarray, low: float, high: float) -> bool:
    """Whether ``nodes`` run from ``low`` to ``high`` (to a millionth of the span)."""
    return bool(np.allclose([nodes[0], nodes[-1]], [low, high], rtol=1e-6,
                            atol=1e-6 * (high - low)))


def _check_finite(arrays: dict[str, list[Any]], be: Backend) -> None:
    """Non-finite values in M or U of any warm-start Result are refused (the reductions run
    where the arrays are, one per array name and shape)."""
    xp = be.xp
    for name, values in arrays.items():
        shapes: dict[tuple[int, ...], list[Any]] = {}
        for a in values:
            shapes.setdefault(tuple(a.shape), []).append(a)
        if any(not bool(xp.all(xp.isfinite(xp.stack(same)))) for same in shapes.values()):
            raise ParameterError(f"initial has non-finite values in {name}: a warm start "
                                 "must be finite")


def _same_grid(M: Any, grid: Grid) -> bool:
    return tuple(M.shape) == (grid.nt + 1, grid.nx)


def _one_grid(M: Sequence[Any], problems: Sequence[MFGProblem]) -> bool:
    """Whether densities of one shape start problems of one domain and horizon (their
    coupling states then come from one batched computation)."""
    return (len({tuple(m.shape) for m in M}) == 1
            and len({(p.x_min, p.x_max, p.T) for p in problems}) == 1)


def _check_path_coupling(problem: MFGProblem, grid: Grid) -> None:
    if problem.coupling_size(grid.nx, grid.nt) != grid.nt:
        raise ParameterError(
            f"initial is invalid for {type(problem).__name__}: its coupling state is the "
            "density path, so it needs a Result on the same grid "
            f"(M of shape ({grid.nt + 1}, {grid.nx}))")


def _levels(states: np.ndarray, old: Grid, grid: Grid) -> np.ndarray:
    """Coupling states at the levels 0..nt of ``old`` interpolated linearly in time onto the
    levels 1..nt of ``grid`` (the last axis): one product with the weights of the
    interpolation (``np.interp`` of the identity's rows)."""
    weights = np.stack([np.interp(grid.t[1:], old.t, e) for e in np.eye(old.t.size)])
    return states @ weights


def _result_paths(M: Any, problems: Sequence[MFGProblem], grid: Grid, be: Backend
                  ) -> np.ndarray:
    """The coupling states (B, nt) on ``grid`` of the densities M (B, nt+1, nx, a backend
    array) of Results on one other grid (a coarse batch's): the states of all of them in
    one batched computation where they are, then one transfer."""
    old = problems[0].grid(M.shape[-1], M.shape[-2] - 1)
    coupling = batch_coupling([p.coupling(old, be) for p in problems], be)
    states = coupling.state(be.xp.concat([M[:, :1], M], axis=1))   # levels 0..nt of old
    return _levels(np.asarray(to_numpy(states), dtype=np.float64), old, grid)


def _path(item: Any, problem: MFGProblem, grid: Grid) -> np.ndarray:
    """The coupling state (levels 1..nt) of ``item`` on ``grid``: a path, or a Result's (or
    a coarse Start's)."""
    if isinstance(item, Result | Start):
        M = np.asarray(to_numpy(item.M), dtype=np.float64)
        old = problem.grid(M.shape[1], M.shape[0] - 1)
        host = problem.coupling(old, _numpy())
        return _levels(np.asarray(host.state(np.concatenate([M[:1], M])), dtype=np.float64),
                       old, grid)
    path = np.asarray(item, dtype=np.float64)
    if path.ndim != 1 or path.size < 2:
        raise ParameterError(f"initial has shape {path.shape}: a path must be ({grid.nt},) "
                             f"(levels 1..nt), or ({grid.nt + 1},) (levels 0..nt) or any other "
                             "length ≥ 2 (levels evenly spaced over [0, T], interpolated)")
    if not np.all(np.isfinite(path)):
        raise ParameterError("initial has non-finite values: a warm start must be finite")
    if path.size == grid.nt:
        return path
    return np.interp(grid.t[1:], np.linspace(0.0, grid.T, path.size), path)


def densities_on(results: Sequence[Result], problems: Sequence[MFGProblem], grid: Grid,
                 be: Backend) -> Any:
    """M (levels 0..nt) of each result, from one grid shared by all, interpolated linearly in
    t and x onto ``grid`` (same domain and horizon), each level renormalised to unit mass:
    (B, nt+1, nx) on ``be``, two matrix products per problem, I_t M I_xᵀ (the rows of I_t and
    I_x are the interpolation weights: ``np.interp`` of the identity)."""
    Ms = [np.asarray(to_numpy(r.M)) for r in results]
    old = problems[0].grid(Ms[0].shape[1], Ms[0].shape[0] - 1)
    xp = be.xp

    def weights(new: np.ndarray, nodes: np.ndarray) -> Any:
        eye = np.eye(nodes.size)
        return be.asarray(np.stack([np.interp(new, nodes, e) for e in eye], axis=1))

    in_t, in_x = weights(grid.t, old.t), weights(grid.x, old.x)
    out = in_t @ be.asarray(np.stack(Ms)) @ xp.permute_dims(in_x, (1, 0))
    mass = out @ be.asarray(grid.weights)
    return out / mass[..., None]


def _numpy() -> Backend:
    from .core.backend import get_backend

    return get_backend("numpy")
