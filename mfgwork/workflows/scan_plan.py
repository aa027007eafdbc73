"""The plan of a parameter scan: the problem factory, the grid checked against its signature,
the solver options, and what makes two scans the same computation (its hash)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import memory
from ..core.backend import Backend, get_backend
from ..core.errors import ParameterError, ResolutionWarning, check_int, warn
from ..core.grid import MAX_POINTS as MAX_GRID
from ..numerics.iteration import check_stopping
from ..problems import PROBLEMS, MFGProblem, problem_name
from ..problems.two_d import MFGProblem2D
from .specs import (
    SpecError,
    SweepSpec,
    coerce_parameter,
    parse_spec,
    read_spec,
    signature_parameters,
)

#: Fields a scan can keep, and the default.
FIELDS = ("M", "U")
#: Solver options, with their defaults (the type rule of specs applies to them too); ``ny``
#: (None: ``nx``) is for 2-D problems only.
SOLVE_OPTIONS: dict[str, Any] = {"nx": 201, "nt": 201, "tol": 1e-8, "max_iter": 200,
                                 "dtype": None, "backend": None, "iteration": None, "ny": None}
#: Largest number of points a scan plans unless ``max_points`` says otherwise (each point's
#: problem is built once before any solve).
MAX_POINTS = 100_000
#: Float64 values per point and time level besides the fields: observables and margin.
PATH_VALUES = 8
#: What a scan solves: a continuous problem (1-D), or one on a 2-D state space.
Problem = MFGProblem | MFGProblem2D

@dataclass(frozen=True)
class ScanPlan:
    """What a scan computes: the problem factory, the parsed grid and the solver options."""

    factory: Callable[..., Problem]
    spec: SweepSpec
    options: dict[str, Any]
    keep: tuple[str, ...]
    #: The points are 2-D problems (:class:`~mfgwork.MFGProblem2D`; ``options`` has ``ny``).
    two_d: bool = False

    @property
    def dims(self) -> tuple[str, ...]:
        """One dimension per axis, named by its first parameter."""
        return tuple(names[0] for names, _ in self.spec.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for _, values in self.spec.axes)

    def parameters(self, index: Sequence[int]) -> dict[str, Any]:
        """The full parameter set of the point at grid ``index``."""
        params = dict(self.spec.fixed)
        for (names, values), i in zip(self.spec.axes, index, strict=True):
            params.update(zip(names, values[i], strict=True))
        return params

    def grid(self, problem: Problem) -> Any:
        """The grid of the scan's options for ``problem`` (a Grid, or a Grid2D in 2-D)."""
        opts = self.options
        if self.two_d:
            return problem.grid(opts["nx"], opts["ny"], opts["nt"])
        return problem.grid(opts["nx"], opts["nt"])

    def problem(self, index: Sequence[int]) -> Problem:
        params = self.parameters(index)
        try:
            problem = self.factory(**params)
        except ParameterError as exc:
            raise ParameterError(f"the point {params} is invalid: {exc}") from None
        except TypeError as exc:  # e.g. a parameter without a default left out of the grid
            raise ParameterError(f"problem={factory_name(self.factory)} cannot be built from "
                                 f"{params}: {exc}") from None
        if not isinstance(problem, MFGProblem | MFGProblem2D):
            raise ParameterError(f"problem={factory_name(self.factory)} returned {problem!r:.80}:"
                                 " must return an mfgwork.MFGProblem or MFGProblem2D (a scan "
                                 "solves continuous problems, 1-D in batches, 2-D point by "
                                 f"point; a {type(problem).__name__} has no batched path: "
                                 "solve its points with mw.solve)")
        return problem

    def identity(self) -> dict[str, Any]:
        """What makes two scans the same computation (JSON-ready)."""
        return {"problem": factory_name(self.factory), "grid": self.spec.as_dict(),
                "options": {k: as_json_value(v) for k, v in self.options.items()},
                "keep": list(self.keep)}

    def hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def factory_name(factory: Callable[..., Any]) -> str:
    """A problem factory's name: its short name in the problem registry
    (:data:`mfgwork.problems.PROBLEMS`), else ``module:qualname``."""
    return problem_name(factory) or (
        f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}")


def as_json_value(v: Any) -> Any:
    """An option as JSON: scalars as they are, an iteration scheme by its description."""
    if v is None or isinstance(v, str | int | float | bool):
        return v
    describe = getattr(v, "describe", None)
    return describe() if callable(describe) else repr(v)


def make_plan(problem: Callable[..., Problem] | str, grid: Any,
              fixed: Mapping[str, Any] | None, options: Mapping[str, Any],
              keep: Sequence[str], max_points: int = MAX_POINTS,
              build_points: bool = True) -> ScanPlan:
    """Check everything that can be checked before work and return the plan: the grid
    against the problem's parameters and ``max_points`` (counted before any axis is
    expanded), the solver options, ``keep``, and (``build_points``; else call
    :func:`check_points` later, e.g. after :func:`check_size`) every point's problem. The
    option ``ny`` (None: ``nx``) is for 2-D problems only, and in their options only."""
    factory = resolve_problem(problem)
    declared = signature_parameters(factory)
    max_points = check_int("max_points", max_points, low=1)
    opts = SOLVE_OPTIONS | dict(options)
    ny = opts.pop("ny", None)
    opts["nx"] = check_int("nx", opts["nx"], low=3, high=MAX_GRID)
    opts["nt"] = check_int("nt", opts["nt"], low=1, high=MAX_GRID)
    opts["tol"], opts["max_iter"] = check_stopping(opts["tol"], opts["max_iter"])
    from ..numerics.iteration import make_scheme

    make_scheme(opts["iteration"])
    if isinstance(keep, str) or not isinstance(keep, Sequence) or not all(
            isinstance(k, str) and k in FIELDS for k in keep):
        raise ParameterError(f"keep={keep!r:.80} is invalid: must be a list or tuple holding "
                             f"only names of {FIELDS} (e.g. ('M',) or ())")
    spec = parse_spec(read_spec(grid), fixed, declared, reserved=(),
                      owner=f"problem {factory_name(factory)}", max_points=max_points)
    if not spec.axes:
        raise SpecError("the grid has no axis to scan: give at least one parameter a list, "
                        "linspace or range")
    plan = ScanPlan(factory, spec, opts, tuple(dict.fromkeys(keep)))
    if "objective" in opts:   # the first point stands for the factory's kind
        from ..welfare import check_objective

        check_objective(opts["objective"], [plan.problem((0,) * len(plan.shape))])
    if isinstance(plan.problem((0,) * len(plan.shape)), MFGProblem2D):
        opts["ny"] = opts["nx"] if ny is None else check_int("ny", ny, low=3, high=MAX_GRID)
        plan = ScanPlan(factory, spec, opts, plan.keep, two_d=True)
    elif ny is not None:
        raise ParameterError(f"ny={ny!r} is invalid for problem={factory_name(factory)}: its "
                             "points are 1-D (ny is the second axis of a 2-D problem's grid)")
    if build_points:
        check_points(plan)
    return plan


def check_size(plan: ScanPlan, be: Backend, in_memory: bool) -> None:
    """Refuse, before any solve (and before a grid is built), a scan whose first point does
    not fit on ``be`` (as :func:`mfgwork.solve` or :func:`mfgwork.solve_2d` refuses it) or,
    with ``in_memory`` (no store), whose fields and paths for every point do not fit in host
    memory; see :mod:`mfgwork.core.memory`. (:func:`check_points` checks the largest point.)"""
    _check_point_size(plan, be, plan.problem((0,) * len(plan.shape)))
    if not in_memory:
        return
    opts = plan.options
    nx, nt, ny = opts["nx"], opts["nt"], opts.get("ny", 1)
    points = math.prod(plan.shape)
    itemsize = 4 if be.dtype == "float32" else 8
    per_point = (len(plan.keep) * itemsize * nx * ny + 8 * PATH_VALUES) * (nt + 1)
    memory.check_parts({"the scan grid's points": points * per_point}, get_backend("numpy"),
                       what=f"the Dataset of {points} points with fields {plan.keep} on an "
                            f"{_size_text(plan)} grid (store=None keeps it in memory)")


def _size_text(plan: ScanPlan) -> str:
    opts = plan.options
    return (f"nx={opts['nx']} x ny={opts['ny']} x nt={opts['nt']}" if plan.two_d
            else f"nx={opts['nx']} x nt={opts['nt']}")


def _coupling_size(plan: ScanPlan, problem: Problem) -> int:
    opts = plan.options
    if plan.two_d:
        return problem.coupling_size(opts["nx"], opts["ny"], opts["nt"])
    return problem.coupling_size(opts["nx"], opts["nt"])


def _check_point_size(plan: ScanPlan, be: Backend, problem: Problem) -> None:
    """The memory estimate of :func:`mfgwork.solve` (:func:`mfgwork.solve_2d` in 2-D) for one
    point's ``problem`` on the scan's grid, refused as they refuse it."""
    from ..numerics.iteration import make_scheme

    opts = plan.options
    nx, nt = opts["nx"], opts["nt"]
    if plan.two_d:
        from ..pipeline import Where
        from ..solve2d import FDM2D

        parts, what = FDM2D(problem, nx=nx, ny=opts["ny"], nt=nt, iteration=opts["iteration"]
                            ).checked().memory(Where(be))
        memory.check_parts(parts, be, what=what)
    else:
        memory.check_fdm(nx, nt, be, [_coupling_size(plan, problem)],
                         getattr(make_scheme(opts["iteration"]), "depth", 0),
                         what=f"one point of the scan ({_size_text(plan)})")


def _check_scales(plan: ScanPlan, be: Backend, problem: Problem) -> None:
    """The steps h, Δt, ν and the diffusion numbers ν Δt / h² of one point, checked as
    :func:`mfgwork.solve` checks them (:meth:`mfgwork.core.grid.Grid.check_scales`, per axis
    in 2-D) on the scan's grid, without building the point's grid or its masks."""
    from ..core.grid import Grid

    opts = plan.options
    axes = [(problem.x_min, problem.x_max, opts["nx"])]
    if plan.two_d:
        axes.append((problem.y_min, problem.y_max, opts["ny"]))
    for low, high, n in axes:
        Grid(low, high, n, problem.T, opts["nt"]).check_scales(problem.sigma, be.dtype)


def resolve_problem(problem: Callable[..., MFGProblem] | str) -> Callable[..., MFGProblem]:
    """A problem class or factory from itself, a name of the problem registry
    (:data:`mfgwork.problems.PROBLEMS`) or ``"module:callable"``."""
    if isinstance(problem, str):
        if problem in PROBLEMS:
            return PROBLEMS[problem]
        module, _, attr = problem.partition(":")
        if attr:
            import importlib

            try:
                target: Any = importlib.import_module(module)
                for part in attr.split("."):
                    target = getattr(target, part)
            except (ImportError, AttributeError) as exc:
                raise ParameterError(f"problem={problem!r} cannot be imported: {exc}") from None
            problem = target
        else:
            raise ParameterError(f"problem={problem!r} is unknown: must be one of "
                                 f"{', '.join(map(repr, PROBLEMS))} or 'module:callable'")
    if isinstance(problem, MFGProblem) or not callable(problem):
        raise ParameterError(f"problem={problem!r} is invalid: must be a problem class or a "
                             "factory of problems (e.g. mw.SantaFeBar), called with each "
                             "point's parameters")
    return problem


def check_points(plan: ScanPlan, be: Backend | None = None) -> list[Problem]:
    """Construct every point's problem (cheap; validates the values) and check that they are
    of one kind (1-D or 2-D) and share the domain and horizon, so the scan has one grid;
    return them (in C order of the grid).
    With ``be``, check every point as :func:`mfgwork.solve` checks it before work, on the
    scan's grid: the memory of the largest point (by its coupling state) and, once per
    distinct σ (the domain and T are shared), the steps and diffusion numbers; a refusal
    names the first point concerned. What the grid is too coarse to resolve
    (:meth:`mfgwork.MFGProblem.unresolved`) is warned once per reason."""
    first = largest = grid = None
    most = 0                                        # the largest point's coupling state
    by_sigma: dict[float, tuple[int, ...]] = {}
    unresolved: dict[str, None] = {}                # what the grid misses, once each
    problems = []
    for index in np.ndindex(*plan.shape):
        p = plan.problem(index)
        problems.append(p)
        if first is None:
            first = p
            grid = plan.grid(p) if be is not None else None
        else:
            _check_same_grid(plan, index, p, first)
        by_sigma.setdefault(p.sigma, index)
        if be is not None:
            unresolved |= dict.fromkeys(p.unresolved(grid))
            if (size := _coupling_size(plan, p)) > most:
                largest, most = p, size
    if be is None:
        return problems
    _check_point_size(plan, be, largest)
    for index in by_sigma.values():
        try:
            _check_scales(plan, be, problems[int(np.ravel_multi_index(index, plan.shape))])
        except ParameterError as exc:
            raise ParameterError(f"{exc} (at the scan point {plan.parameters(index)})") \
                from None
    for reason in unresolved:   # before any work: the solves (on Dask workers too) say it late
        warn(f"{reason} (points of the scan)", ResolutionWarning)
    return problems


def _check_same_grid(plan: ScanPlan, index: tuple[int, ...], p: Problem, first: Problem
                     ) -> None:
    """The point at ``index`` is of the first point's kind (1-D or 2-D), on its domain and
    horizon."""
    if isinstance(p, MFGProblem2D) != plan.two_d:
        raise ParameterError(f"the point {plan.parameters(index)} gives a "
                             f"{type(p).__name__}, unlike the first point: a scan's points "
                             "are all 1-D or all 2-D problems")
    shared = ("x_min", "x_max", "y_min", "y_max", "T") if plan.two_d else ("x_min", "x_max", "T")
    for name in shared:
        if getattr(p, name) != getattr(first, name):
            raise ParameterError(
                f"the point {plan.parameters(index)} has {name}={getattr(p, name)!r} but "
                f"the first point {name}={getattr(first, name)!r}: a scan shares one "
                "grid in t and the state, so scanned parameters may not change the "
                "domain or T")


def split_parameters(problem: Callable[..., MFGProblem] | str, parameters: Mapping[str, Any]
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``NAME VALUE`` pairs of the command line into fixed problem parameters and solver
    options (:data:`SOLVE_OPTIONS`, checked by the type rule of specs); an unknown name is
    refused, listing both."""
    declared = signature_parameters(resolve_problem(problem))
    fixed, options = {}, {}
    for name, value in parameters.items():
        if name in declared:
            fixed[name] = value
        elif name in SOLVE_OPTIONS:
            options[name] = coerce_parameter(name, value, SOLVE_OPTIONS[name], "the scan")
        else:
            raise ParameterError(
                f"parameter {name!r} is unknown: the problem has "
                f"{', '.join(sorted(declared))}; solver options are "
                f"{', '.join(SOLVE_OPTIONS)}")
    return fixed, options
