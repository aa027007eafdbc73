"""The plan of a parameter scan: the problem factory, the grid checked against its signature,
the solver options, and what makes two scans the same computation (its hash)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ParameterError, check_int
from ..numerics.iteration import check_stopping
from ..problems import MFGProblem, SantaFeBar
from .specs import (
    SpecError,
    SweepSpec,
    coerce_parameter,
    parse_spec,
    read_spec,
    signature_parameters,
)

#: Problems known by name to the command line (any ``module:callable`` works too).
PROBLEMS: dict[str, Callable[..., MFGProblem]] = {"santa_fe": SantaFeBar}
#: Fields a scan can keep, and the default.
FIELDS = ("M", "U")
#: Solver options, with their defaults (the type rule of specs applies to them too).
SOLVE_OPTIONS: dict[str, Any] = {"nx": 201, "nt": 201, "tol": 1e-8, "max_iter": 200,
                                 "dtype": None, "backend": None, "iteration": None}

@dataclass(frozen=True)
class ScanPlan:
    """What a scan computes: the problem factory, the parsed grid and the solver options."""

    factory: Callable[..., MFGProblem]
    spec: SweepSpec
    options: dict[str, Any]
    keep: tuple[str, ...]

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

    def problem(self, index: Sequence[int]) -> MFGProblem:
        params = self.parameters(index)
        try:
            problem = self.factory(**params)
        except ParameterError as exc:
            raise ParameterError(f"the point {params} is invalid: {exc}") from None
        except TypeError as exc:  # e.g. a parameter without a default left out of the grid
            raise ParameterError(f"problem={factory_name(self.factory)} cannot be built from "
                                 f"{params}: {exc}") from None
        if not isinstance(problem, MFGProblem):
            raise ParameterError(f"problem={factory_name(self.factory)} returned {problem!r}: must "
                                 "return an mfgwork.MFGProblem")
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
    """A problem factory's name: its key in :data:`PROBLEMS`, else ``module:qualname``."""
    for key, value in PROBLEMS.items():
        if value is factory:
            return key
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"


def as_json_value(v: Any) -> Any:
    """An option as JSON: scalars as they are, an iteration scheme by its description."""
    if v is None or isinstance(v, str | int | float | bool):
        return v
    describe = getattr(v, "describe", None)
    return describe() if callable(describe) else repr(v)


def make_plan(problem: Callable[..., MFGProblem] | str, grid: Any,
              fixed: Mapping[str, Any] | None, options: Mapping[str, Any],
              keep: Sequence[str]) -> ScanPlan:
    """Check everything that can be checked before work and return the plan: the grid
    against the problem's parameters, the solver options, ``keep``, and every point's
    problem (constructed once, which validates its parameters, and sharing one domain)."""
    factory = resolve_problem(problem)
    declared = signature_parameters(factory)
    spec = parse_spec(read_spec(grid), fixed, declared, reserved=(),
                      owner=f"problem {factory_name(factory)}")
    if not spec.axes:
        raise SpecError("the grid has no axis to scan: give at least one parameter a list, "
                        "linspace or range")
    keep = tuple(keep)
    for name in keep:
        if name not in FIELDS:
            raise ParameterError(f"keep={keep!r} is invalid: may hold only {FIELDS}")
    opts = SOLVE_OPTIONS | dict(options)
    opts["nx"] = check_int("nx", opts["nx"], low=3)
    opts["nt"] = check_int("nt", opts["nt"], low=1)
    opts["tol"], opts["max_iter"] = check_stopping(opts["tol"], opts["max_iter"])
    from ..numerics.iteration import make_scheme

    make_scheme(opts["iteration"])
    plan = ScanPlan(factory, spec, opts, tuple(dict.fromkeys(keep)))
    _check_points(plan)
    return plan


def resolve_problem(problem: Callable[..., MFGProblem] | str) -> Callable[..., MFGProblem]:
    """A problem class or factory from itself, a name of :data:`PROBLEMS` or
    ``"module:callable"``."""
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


def _check_points(plan: ScanPlan) -> None:
    """Construct every point's problem (cheap; validates the values) and check that they share
    the domain and horizon, so the scan has one grid."""
    first = None
    for index in np.ndindex(*plan.shape):
        p = plan.problem(index)
        if first is None:
            first = p
            continue
        for name in ("x_min", "x_max", "T"):
            if getattr(p, name) != getattr(first, name):
                raise ParameterError(
                    f"the point {plan.parameters(index)} has {name}={getattr(p, name)!r} but "
                    f"the first point {name}={getattr(first, name)!r}: a scan shares one "
                    "grid in t and x, so scanned parameters may not change the domain or T")


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
