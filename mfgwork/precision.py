"""float32 finite-difference results checked, and where needed finished, in float64.

A float32 solve certifies its fixed point with float32 sweeps; where the price is steep (small
ε), float32 rounding amplified by the coupling sets a floor on that certificate. The float64
best response is the stronger check and decides (:func:`certify_in_float64`); a torch batch
whose float32 iteration cannot bring a member in is finished in float64 on its device from
that member's iterate (:func:`finish_in_float64`). MPS has no float64: there the float32
certificate stands.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import array_api_compat

from .best_response import batch_residuals_on, residual_on
from .core.backend import Backend, get_backend
from .core.compile_clock import book_phase, compile_clock
from .core.errors import ConvergenceWarning, warn
from .core.frozen import FrozenDict, freeze
from .problems.base import MFGProblem
from .results import Result, updated


def has_float64(be: Backend) -> bool:
    """Whether ``be`` computes in float32 on a device that also has float64 (not MPS)."""
    return be.dtype == "float32" and be.kind != "mps" and not be.emulate_mps


def certify_in_float64(results: list[Result], problems: Sequence[MFGProblem], be: Backend,
                        tol: float, timings: dict[str, float],
                        stacked: tuple[Any, Any] | None = None) -> list[Result]:
    """``results`` with the float32 finite-difference ones certified again by one best
    response in float64 (:func:`float64_residuals`: a torch batch at once on its device,
    otherwise in NumPy on the host); ``residual`` becomes the float64 one. A result that
    claimed convergence and whose float64 residual exceeds ``tol`` gets ``converged=False``,
    status ``"failed"``, ``extra["certificate"]["message"]`` and a ConvergenceWarning. A
    result that stopped at the float32 floor (its float32 certificate, rounding amplified by
    a steep price, stays above ``tol``) but whose densities pass in float64 is converged:
    the float64 best response is the stronger check. Nothing is done on MPS (and its
    emulation), which has no float64: there the float32 certificate stands.
    ``timings["certify"]``: the seconds spent. ``stacked``: the results' (M, U) stacked
    (B, nt + 1, nx) where the caller holds them (a batch's own arrays)."""
    if not has_float64(be):
        return results
    started, built = time.perf_counter(), compile_clock()
    checked = [b for b, res in enumerate(results) if res.method == "fdm"]
    residuals = dict(zip(checked, float64_residuals(
        [results[b] for b in checked], [problems[b] for b in checked], be,
        stacked if len(checked) == len(results) else None), strict=True))
    failed, changes = [], []
    for b, res in enumerate(results):
        if b not in residuals:
            changes.append({})
            continue
        residual = float(residuals[b])
        held = residual <= tol
        record: dict[str, Any] = {"dtype": "float64", "residual": residual,
                                  "float32_residual": res.residual, "held": held}
        if res.converged and not held:
            record["message"] = (f"the float32 certificate (residual {res.residual:.3g}) did "
                                 f"not hold in float64: residual {residual:.3g} > tol={tol:g}")
            failed.append(residual)
        elif held and not res.converged:
            record["message"] = (f"certified in float64 (residual {residual:.3g} <= "
                                 f"tol={tol:g}); the float32 certificate stopped at "
                                 f"{res.residual:.3g}, float32 rounding amplified by the "
                                 "coupling")
        status = "converged" if held else ("failed" if res.converged else res.status)
        changes.append({"residual": residual, "converged": held, "status": status,
                        "extra": FrozenDict(res.extra | {"certificate": freeze(record)})})
    if failed:
        warn(f"the float32 certificate did not hold in float64 for {len(failed)} of "
             f"{len(results)} problems (float64 residual up to {max(failed):.3g} > "
             f"tol={tol:g}); returning them with converged=False",
             ConvergenceWarning)
    book_phase(timings, "certify", started, built)
    return updated(results, changes, timings=timings)   # (one frozen copy, shared)


def float64_residuals(results: list[Result], problems: Sequence[MFGProblem], be: Backend,
                      stacked: tuple[Any, Any] | None = None) -> list[float]:
    """The float64 residuals of float32 ``results``: a torch batch as one batched best
    response in float64 on its device (from their (M, U) ``stacked`` where given); otherwise
    one best response each in NumPy float64."""
    if not results:
        return []
    if be.name == "torch" and len(results) > 1:
        device = get_backend("torch", be.device, "float64")
        return list(batch_residuals_on(results, list(problems), device, stacked))
    host = get_backend("numpy", "cpu", "float64")
    return [residual_on(res, problem, host) for res, problem in zip(results, problems,
                                                                      strict=True)]


def finish_in_float64(results: list[Result], problems: Sequence[MFGProblem], be: Backend,
                      tol: float, timings: dict[str, float],
                      solve_again: Callable[[list[MFGProblem], list[Result] | None, Backend],
                                            list[Result]]) -> list[Result]:
    """``results`` of a float32 torch batch with the members that did not converge solved
    again by ``solve_again(problems, initial, backend)`` in float64 on the same device:
    started from their float32 iterates, and those still open from the solver's own start
    (``initial=None``; an iterate stuck far from the equilibrium can be a worse start).
    Returned as float32 arrays certified again in float64 (the cast is checked, not
    assumed); ``extra["finished"]`` records it, with the float64 iterations and the start.
    ``timings["finish"]``: the seconds spent (not recorded, and ``results`` returned as they
    are, where no member is left open)."""
    if be.name != "torch" or not has_float64(be):
        return results
    if all(res.converged or res.method != "fdm" for res in results):
        return results
    out = list(results)
    started, built = time.perf_counter(), compile_clock()
    float64 = get_backend("torch", be.device, "float64")
    for start in ("iterate", "solver"):
        open_ = [b for b, res in enumerate(out) if not res.converged and res.method == "fdm"]
        if not open_:
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the count is warned below
            again = solve_again([problems[b] for b in open_],
                                [results[b] for b in open_] if start == "iterate" else None,
                                float64)
        cast = [_as_float32(res) for res in again]
        residuals = float64_residuals(cast, [problems[b] for b in open_], be)
        for b, res, residual in zip(open_, cast, residuals, strict=True):
            before = results[b]
            record = {"dtype": "float64", "start": start, "iterations": res.iterations,
                      "residual": residual, "float32_residual": before.residual,
                      "held": residual <= tol}
            if residual <= tol:   # (the float32 iterate's certificate, kept, is superseded)
                extra = before.extra | {"finished": record}
                if "certificate" in extra:
                    extra["certificate"] = dict(extra["certificate"]) | {
                        "superseded": "by the float64 finish, extra['finished']"}
                out[b] = replace(res, params=before.params, residual=residual, converged=True,
                                 status="converged", extra=extra,
                                 iterations=before.iterations + res.iterations,
                                 timings=timings)
            else:
                out[b] = replace(out[b], extra=before.extra | {"finished": record})
    book_phase(timings, "finish", started, built)
    out = updated(out, timings=timings)   # (one frozen copy, shared)
    left = [r.residual for r in out if not r.converged]
    if left:
        warn(f"{len(left)} of {len(results)} float32 problems did not converge, also "
             f"when solved again in float64 (residual up to {max(left):.3g} > "
             f"tol={tol:g}); returning them with converged=False",
             ConvergenceWarning)
    return out


def _as_float32(res: Result) -> Result:
    """``res`` with its arrays cast to float32 (a float64 result returned to a float32 batch)."""
    def cast(a: Any) -> Any:
        xp = array_api_compat.array_namespace(a)
        return xp.astype(a, xp.float32)

    return replace(res, U=cast(res.U), M=cast(res.M), dtype="float32",
                   observables={k: cast(v) for k, v in res.observables.items()})
