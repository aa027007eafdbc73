"""Welfare of a Santa Fe solution, and the planner's optimum against the equilibrium.

The welfare (per patron, over [0, T]) of densities m moved by controls α is the bar's payoff
to those who go less the cost of moving, W = ∫₀ᵀ A F(A) dt − ∫₀ᵀ ∫ L(α) m dθ dt (L the
Lagrangian of H: ½α² for ½p²; g = 0). On the grid it is the scheme's own: the control of u^n
moves m^n to m^{n+1}, level n pays for A_n = Σ_i w_i χ_i m_i^{n+1}, and the cost of moving is
the Legendre transform of the Engquist–Osher Hamiltonian, L̂ = q₋ ∂Ĥ/∂q₋ + q₊ ∂Ĥ/∂q₊ − Ĥ
(q₋, q₊ the one-sided gradients of u^n, 0 at the walls):

    W = Σ_n Δt [A_n F(A_n) − Σ_i w_i m_i^{n+1} L̂_i(u^n)]                     (controls)

By the adjoint structure of the scheme, Σ_i w_i m_i^0 u_i^0 = Σ_n Δt Σ_i w_i m_i^{n+1}
(L̂_i − y_n χ_i) for the best response to any price path y, so the same number is

    W = −Σ_i w_i m_i^0 u_i^0 − Σ_n Δt (y_n − F(A_n)) A_n                      (values)

two computations that agree to round-off (tested). The planner (``objective="social"``)
maximises W; its controls are the best response to the price y = F + A F'. The equilibrium's
controls respond to y = F: ``welfare_loss`` W_opt − W_eq ≥ 0 is what selfish choices cost,
and ``price_of_anarchy`` W_opt / W_eq (NaN unless both are positive: the ratio means nothing
when a welfare is ≤ 0) its ratio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import array_api_compat
import numpy as np

from .core.backend import get_backend, to_numpy
from .core.errors import ParameterError, check_choice
from .numerics.fdm.sweeps import FiniteDifferences
from .pipeline import Discretization, Where, run
from .problems import problem_from_params
from .problems.santa_fe import OBJECTIVES, SantaFeBar, attendance_weights, payoff
from .results import Result, check_solves

#: What a planner's result adds to its summary (:func:`compare`).
COMPARISON = ("welfare", "equilibrium_welfare", "welfare_loss", "price_of_anarchy")


#: Members whose welfare is computed at once (bounds the temporaries: a few arrays of
#: (nt + 1) × nx values per member).
WELFARE_CHUNK = 256


def welfare(result: Result, problem: SantaFeBar | None = None) -> float:
    """W of a Santa Fe ``result`` (an equilibrium or the planner's optimum) from its controls
    (module docstring); ``problem``: the bar that was solved (default: rebuilt from
    ``result.params``; a bar whose parameters differ from the result's is refused)."""
    problem = _bar(result, problem)
    U, M = (np.asarray(to_numpy(a), dtype=np.float64) for a in (result.U, result.M))
    return controls_welfare(problem, U, M)


def welfares(results: Sequence[Result], problems: Sequence[SantaFeBar]) -> np.ndarray:
    """:func:`welfare` of each of ``results`` (of ``problems``), computed on the arrays where
    they are (a device's too), for runs of members that share a grid and a Hamiltonian in
    chunks of :data:`WELFARE_CHUNK`: one number per member comes back."""
    out, start = [], 0
    while start < len(results):
        stop = start + 1
        while (stop < len(results) and stop - start < WELFARE_CHUNK
               and np.shape(results[stop].M) == np.shape(results[start].M)
               and problems[stop].hamiltonian == problems[start].hamiltonian):
            stop += 1
        part = results[start:stop]
        xp = array_api_compat.array_namespace(part[0].M)
        U, M = (xp.stack([getattr(r, name) for r in part]) for name in ("U", "M"))
        out.append(np.asarray(to_numpy(batch_welfare(problems[start:stop], U, M, xp)),
                              dtype=np.float64))
        start = stop
    return np.concatenate(out)


def value_welfare(result: Result, problem: SantaFeBar | None = None) -> float:
    """W of ``result`` from its values: −Σ w m⁰ u⁰ − Σ_n Δt (y_n − F(A_n)) A_n, y the price
    its controls respond to (F for an equilibrium, F + A F' for the planner)."""
    problem = _bar(result, problem)
    U, M = (np.asarray(to_numpy(a), dtype=np.float64) for a in (result.U, result.M))
    grid = problem.grid(M.shape[1], M.shape[0] - 1)
    A = M[1:] @ attendance_weights(grid)[1]
    paid = problem.price(A) - problem.payoff(A)
    return float(-np.sum(grid.weights * M[0] * U[0]) - grid.dt * np.sum(paid * A))


def controls_welfare(problem: SantaFeBar, U: np.ndarray, M: np.ndarray) -> float:
    """W = Σ_n Δt [A_n F(A_n) − Σ_i w_i m_i^{n+1} L̂_i(u^n)] of values U and densities M
    ((nt+1, nx) each, float64) on the problem's grid."""
    return float(batch_welfare([problem], U[None], M[None], np)[0])


def batch_welfare(problems: Sequence[SantaFeBar], U: Any, M: Any, xp: Any) -> Any:
    """W of each member of the stacked values U and densities M ((B, nt+1, nx) arrays of
    the namespace ``xp``; ``problems``: the B bars, one grid and one Hamiltonian)."""
    first = problems[0]
    grid = first.grid(M.shape[-1], M.shape[-2] - 1)

    def put(a: Any) -> Any:   # a host array beside U (its dtype and device)
        return xp.asarray(np.asarray(a), dtype=U.dtype,
                          **({} if xp is np else {"device": U.device}))

    q = (U[:, :-1, 1:] - U[:, :-1, :-1]) / grid.h
    wall = xp.zeros(q.shape[:-1] + (1,), dtype=q.dtype,
                    **({} if xp is np else {"device": q.device}))
    q_left, q_right = xp.concat([wall, q], axis=-1), xp.concat([q, wall], axis=-1)
    H, dH_left, dH_right = first.hamiltonian.numerical(put(grid.x), q_left, q_right, None, xp)
    lagrangian = q_left * dH_left + q_right * dH_right - H
    A = xp.sum(M[:, 1:, :] * put(attendance_weights(grid)[1]), axis=-1)
    params = [put([[getattr(p, k)] for p in problems]) for k in ("threshold", "good", "bad",
                                                                  "eps")]
    paid = xp.sum(A * payoff(A, *params, xp), axis=-1)
    cost = xp.sum(xp.sum(put(grid.weights) * M[:, 1:, :] * lagrangian, axis=-1), axis=-1)
    return grid.dt * (paid - cost)


def price_welfare(problem: SantaFeBar, price: Any, nx: int = 201) -> float:
    """W of the best response to the price path ``price`` (nt values: the payoff of going at
    levels 1..nt, nt = len(price)) on the nx × nt grid, in float64 on the CPU: the welfare
    of any policy of that form, e.g. to check the planner's optimum (no price path does
    better near it)."""
    price = np.asarray(price, dtype=np.float64)
    if price.ndim != 1 or price.size < 1 or not np.isfinite(price).all():
        raise ParameterError(f"price of shape {price.shape} is invalid: must be a finite "
                             "path of nt >= 1 values (the payoff of going at levels 1..nt)")
    grid = problem.grid(nx, price.size)
    be = get_backend("numpy", "cpu", "float64")
    fd = FiniteDifferences(grid, problem.nu, be, hamiltonian=problem.hamiltonian,
                           compile_steps=False)
    chi = attendance_weights(grid)[0]
    U = fd.solve_hjb(problem.terminal_cost(grid, be), -price[:, None] * chi[None, :])
    M = fd.solve_fp(U, problem.initial_density(grid, be))
    fd.check_newton()
    return controls_welfare(problem, np.asarray(U), np.asarray(M))


def compare(optima: Sequence[Result], equilibria: Sequence[Result],
            problems: Sequence[SantaFeBar], seconds: float) -> list[Result]:
    """The planner's ``optima`` with the welfare of both in their summary (``welfare``,
    ``equilibrium_welfare``, ``welfare_loss``, ``price_of_anarchy``), the equilibrium's
    status in ``extra["equilibrium"]`` and its solve's ``seconds`` in the timings."""
    out = []
    bars = [p.for_objective("equilibrium") for p in problems]
    for opt, eq, w_opt, w_eq in zip(optima, equilibria, welfares(optima, bars),
                                    welfares(equilibria, bars), strict=True):
        w_opt, w_eq = float(w_opt), float(w_eq)
        ratio = w_opt / w_eq if w_opt > 0 and w_eq > 0 else math.nan
        summary = opt.summary | dict(zip(COMPARISON, (w_opt, w_eq, w_opt - w_eq, ratio),
                                         strict=True))
        extra = opt.extra | {"equilibrium": {
            "status": str(eq.status), "residual": eq.residual, "iterations": eq.iterations,
            "mean_attendance": eq.summary.get("mean_attendance")}}
        timings = opt.timings | {"equilibrium": seconds,
                                 "total": opt.timings.get("total", 0.0) + seconds}
        out.append(replace(opt, summary=summary, extra=extra, timings=timings))
    return out


@dataclass(frozen=True, eq=False)
class Objective(Discretization):
    """The problems of ``inner`` (a discretization given ``objective=None``) solved for
    ``objective``: "equilibrium" their equilibria; "social" their planners' optima and,
    with the same options, their equilibria, compared (:func:`compare`). Each solve goes
    through the pipeline with its own placement and memory plan. Refused before any work
    for an objective, a problem or a method this does not define."""

    inner: Discretization
    objective: str

    def checked(self) -> Objective:
        check_objective(self.objective, self.problems)
        if self.objective == "social":
            method = getattr(self.inner, "method", "fdm")
            if method != "fdm":
                raise ParameterError(f"method={method!r} is invalid with objective='social': "
                                     "the welfare is that of the finite-difference scheme "
                                     "(method='fdm')")
            if getattr(self.inner, "stationary", False):
                raise ParameterError("stationary=True is invalid with objective='social': the "
                                     "welfare compared is that of a finite horizon")
        return self

    @property
    def problems(self) -> Any:
        """The inner discretization's problems (a list for a single problem; a batch's as
        given, checked by :meth:`checked`)."""
        problem = self.inner.problem   # type: ignore[attr-defined]
        return problem if self.inner.batched else [problem]

    def place(self) -> Where:   # (each solve places itself)
        return Where(get_backend("numpy"))

    def memory(self, where: Where) -> tuple[dict[str, int], str]:   # (each solve plans its own)
        return {}, f"the {self.objective} of {len(self.problems)} problems"

    def start(self, where: Where, started: float) -> None:
        return None

    def iterate(self, state: None) -> list[Result]:
        def solve(problems: list[Any]) -> list[Result]:
            return run(replace(self.inner, problem=problems if self.inner.batched
                               else problems[0]))

        problems = list(self.problems)

        if self.objective == "equilibrium":
            return solve([p.for_objective("equilibrium") if isinstance(p, SantaFeBar) else p
                          for p in problems])
        optima = solve([p.for_objective("social") for p in problems])
        started = time.perf_counter()
        equilibria = solve([p.for_objective("equilibrium") for p in problems])
        return compare(optima, equilibria, problems, time.perf_counter() - started)

    def results(self, outcome: list[Result]) -> list[Result]:
        return outcome


def check_objective(objective: object, problems: Sequence[Any]) -> str:
    """``objective`` if it is one of :data:`~mfgwork.problems.santa_fe.OBJECTIVES` that every
    problem defines (the planner's: Santa Fe bars whose H is independent of m)."""
    check_choice("objective", objective, OBJECTIVES)
    if not isinstance(problems, list | tuple) or not problems:
        raise ParameterError(f"problems={problems!r:.80} is invalid: must be a non-empty "
                             "list of problems")
    for i, p in enumerate(problems if objective == "social" else ()):
        if not isinstance(p, SantaFeBar) or p.hamiltonian.depends_on_m:
            raise ParameterError(f"objective='social' is invalid for problem {i} "
                                 f"({p!r:.80}): the planner's problem is defined for "
                                 "mfgwork.SantaFeBar with a Hamiltonian independent of m")
    return objective


def _bar(result: Any, problem: SantaFeBar | None) -> SantaFeBar:
    """The Santa Fe bar of ``result`` (``problem``, else rebuilt from its params), refused
    in one line for any other result."""
    if (not isinstance(result, Result) or np.ndim(result.M) != 2
            or result.params.get("stationary")):
        raise ParameterError(f"result={type(result).__name__} is invalid: welfare needs the "
                             "Result of a 1-D Santa Fe solve over a finite horizon")
    if problem is None:
        problem = problem_from_params(dict(result.params))
    if not isinstance(problem, SantaFeBar) or problem.hamiltonian.depends_on_m:
        raise ParameterError(f"problem={problem!r:.80} is invalid: welfare is defined for "
                             "mfgwork.SantaFeBar with a Hamiltonian independent of m")
    check_solves(problem, result, objective=False)   # (W of either bar's controls)
    return problem
