"""Small numerical studies that the notebooks present as tables.

- :func:`compare_backends`: one problem solved on several backends/devices/dtypes; wall time
  and the relative errors of U, M and A against the first entry (the float64 reference),
  measured as max |X − X_ref| / max |X_ref| over the whole (t, x) grid.
- :func:`refinement_study`: a problem with an exact solution (``exact_u``, ``exact_m``, e.g.
  :class:`mfgwork.HopfColeProblem`) solved on finer and finer grids (nt = nx − 1, so
  Δt ∝ h); max-norm errors of U and M and the observed order log(e_k / e_{k+1}) /
  log(h_k / h_{k+1}).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.backend import available_devices, mps_emulation, to_numpy, torch_installed
from ..core.errors import ConvergenceWarning, ParameterError, check_int
from ..problems.base import MFGProblem
from ..results import Result
from ..solve import solve


def comparison_targets(accelerator: str = "auto") -> tuple[list[dict[str, Any]], str]:
    """The rows of the CPU-vs-accelerator comparison and a note on what is (not) present.

    Always NumPy float64 (the reference) and torch CPU float32 under the MPS rules
    (:func:`mfgwork.mps_emulation`); then the accelerator: ``"auto"`` picks CUDA, else MPS;
    ``"cuda"``/``"mps"`` ask for one; ``"none"`` skips it. CUDA gets a float32 and a float64
    row, MPS float32 only (it has no float64).
    """
    allowed = ("auto", "cuda", "mps", "none")
    if accelerator not in allowed:
        raise ParameterError(f"accelerator={accelerator!r} is invalid: must be one of "
                             f"{', '.join(map(repr, allowed))}")
    targets: list[dict[str, Any]] = [
        {"label": "numpy cpu float64", "backend": "numpy", "device": "cpu", "dtype": "float64"}]
    if not torch_installed():
        return targets, "PyTorch is not installed: only the NumPy reference was run."
    targets.append({"label": "torch cpu float32 (MPS emulation)", "backend": mps_emulation()})
    devices = available_devices("torch")
    wanted = {"auto": ("cuda", "mps"), "none": ()}.get(accelerator, (accelerator,))
    found = next((d for d in wanted if d in devices), None)
    if found == "cuda":
        targets += [{"label": f"torch cuda {dt}", "backend": "torch", "device": "cuda",
                     "dtype": dt} for dt in ("float32", "float64")]
        note = "Accelerator: CUDA."
    elif found == "mps":
        targets.append({"label": "torch mps float32", "backend": "torch", "device": "mps",
                        "dtype": "float32"})
        note = "Accelerator: Apple MPS (float32)."
    elif accelerator == "none":
        note = "No accelerator requested (accelerator='none')."
    else:
        note = (f"No accelerator found (asked for {accelerator!r}; torch devices here: "
                f"{', '.join(devices)}): the table has the CPU rows only.")
    return targets, note


#: the warning of :func:`mfgwork.solve` when it raises ``tol`` to the floor of the dtype.
TOL_RAISED = r"tol=.* is below what"


def relative_error(a: Any, ref: Any) -> float:
    """max |a − ref| / max |ref| (float64, on NumPy copies)."""
    a64, r64 = (np.asarray(to_numpy(v), dtype=np.float64) for v in (a, ref))
    scale = float(np.max(np.abs(r64)))
    return float(np.max(np.abs(a64 - r64)) / (scale if scale > 0 else 1.0))


def compare_backends(problem: MFGProblem, targets: Sequence[dict[str, Any]], *,
                     warmup: bool = True, **solve_options: Any
                     ) -> tuple[list[dict[str, Any]], list[Result]]:
    """Solve ``problem`` once per target (``backend``, ``device``, ``dtype`` as for
    :func:`mfgwork.solve`; ``label`` names the row) and compare with the first target.

    ``warmup`` runs a 1-iteration solve per target first, so that library loading, kernel
    compilation and device start-up are not in the wall time. A ``tol`` below the residual
    floor of a target's dtype is raised to it without a warning: the row's ``tol`` says what
    it iterated to. Returns the table rows and the results (arrays converted to NumPy).
    """
    if not targets:
        raise ParameterError("targets=[] is invalid: give at least the reference target")
    rows, results = [], []
    for target in targets:
        kwargs = {k: v for k, v in target.items() if k != "label"}
        if warmup:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.filterwarnings("ignore", TOL_RAISED, UserWarning)
                solve(problem, **(solve_options | kwargs | {"max_iter": 1, "progress": False}))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", TOL_RAISED, UserWarning)
            start = time.perf_counter()
            res = solve(problem, **(solve_options | kwargs))
            wall = time.perf_counter() - start
        results.append(res.to_numpy())
        rows.append({"label": target.get("label", f"{res.backend} {res.device} {res.dtype}"),
                     "backend": res.backend, "device": res.device, "dtype": res.dtype,
                     "wall_time_s": wall, "iterations": res.iterations,
                     "time_per_iteration_s": wall / max(res.iterations, 1),
                     "converged": res.converged, "tol": res.params["tol"],
                     "mass_error": res.mass_error})
    ref, ref_time = results[0], rows[0]["wall_time_s"]
    for row, res in zip(rows, results, strict=True):
        row["rel_error_U"] = relative_error(res.U, ref.U)
        row["rel_error_M"] = relative_error(res.M, ref.M)
        row["rel_error_A"] = (relative_error(res.attendance, ref.attendance)
                              if "attendance" in ref.observables else None)
        row["time_ratio"] = row["wall_time_s"] / ref_time
    return rows, results


def refinement_study(problem: MFGProblem, sizes: Sequence[int], **solve_options: Any
                     ) -> list[dict[str, Any]]:
    """Errors against the exact solution on grids with ``nx`` in ``sizes`` and nt = nx − 1.

    Rows: nx, nt, h, dt, error_U = max |U − u|, error_M = max |M − m| over all grid points,
    and order_U / order_M observed between this grid and the previous one (None first).
    """
    for name in ("exact_u", "exact_m"):
        if not callable(getattr(problem, name, None)):
            raise ParameterError(f"problem={problem!r} is invalid: a refinement study needs an "
                                 f"exact solution ({name}), e.g. mw.HopfColeProblem()")
    sizes = [check_int("sizes", n, low=3) for n in sizes]
    if len(sizes) < 2 or sorted(set(sizes)) != sizes:
        raise ParameterError(f"sizes={sizes!r} is invalid: must be at least two increasing "
                             "grid sizes")
    rows: list[dict[str, Any]] = []
    for nx in sizes:
        res = solve(problem, nx=nx, nt=nx - 1, **solve_options).to_numpy()
        t, x = res.t[:, None], res.x[None, :]
        row = {"nx": nx, "nt": nx - 1, "h": float(res.x[1] - res.x[0]),
               "dt": float(res.t[1] - res.t[0]),
               "error_U": float(np.max(np.abs(res.U - problem.exact_u(t, x)))),
               "error_M": float(np.max(np.abs(res.M - problem.exact_m(t, x)))),
               "order_U": None, "order_M": None}
        if rows:
            prev = rows[-1]
            for key in ("U", "M"):
                row[f"order_{key}"] = _order(prev[f"error_{key}"], row[f"error_{key}"],
                                             prev["h"], row["h"])
        rows.append(row)
    return rows


def ergodic_refinement(problem: MFGProblem, sizes: Sequence[int], **solve_options: Any
                       ) -> list[dict[str, Any]]:
    """Errors of the long run (``mw.solve(problem, stationary=True)``) against the exact
    ergodic solution of ``problem`` (``exact_v``, ``exact_m``, ``ergodic_constant``, e.g.
    :class:`mfgwork.problems.verification.ErgodicProblem`) on ``nx`` in ``sizes``. Rows: nx, h,
    error_m, error_v = max |m − m*|, max |v − v*| over the nodes, error_lambda = |λ − λ*|
    (:func:`fitted_order` reads their order)."""
    for name in ("exact_v", "exact_m", "ergodic_constant"):
        if getattr(problem, name, None) is None:
            raise ParameterError(f"problem={problem!r:.80} is invalid: an ergodic refinement "
                                 f"needs the exact ergodic solution ({name}), e.g. "
                                 "mfgwork.problems.verification.ErgodicProblem()")
    rows = []
    for nx in [check_int("sizes", n, low=3) for n in sizes]:
        res = solve(problem, nx=nx, stationary=True, **solve_options).to_numpy()
        x = res.x
        rows.append({"nx": nx, "h": float(x[1] - x[0]),
                     "error_m": float(np.max(np.abs(res.M[0] - problem.exact_m(x)))),
                     "error_v": float(np.max(np.abs(res.U[0] - problem.exact_v(x)))),
                     "error_lambda": abs(res.summary["ergodic_constant"]
                                         - problem.ergodic_constant)})
    return rows


def _order(e_coarse: float, e_fine: float, h_coarse: float, h_fine: float) -> float | None:
    if e_coarse <= 0 or e_fine <= 0:
        return None
    return math.log(e_coarse / e_fine) / math.log(h_coarse / h_fine)


def fitted_order(rows: Sequence[dict[str, Any]], key: str = "error_U") -> float:
    """Slope of log(error) against log(h) by least squares over all rows."""
    h = np.array([r["h"] for r in rows], dtype=np.float64)
    e = np.array([r[key] for r in rows], dtype=np.float64)
    return float(np.polyfit(np.log(h), np.log(e), 1)[0])



def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows as a fixed-width text table (floats in 4 significant digits)."""
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    body = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)
