"""N patrons against the mean field: realised attendance and the ε-Nash gap of the equilibrium.

Given a solved Santa Fe Bar equilibrium (U, m, A) of any Hamiltonian H(θ, p, m), N patrons all
play its feedback α*(t, θ) = −∂p H(θ, ∂θ u, m) (½|p|²: −∂θ u): each moves by
dθ = α* dt + σ dW with reflecting walls, from
θ_0 ~ m0, independently of the others (Euler–Maruyama, the kernels of the particle FP
solver). Their realised attendance A_N(t) = #{j : θ_j(t) > 0} / N (an exact count) is
random; the law of large numbers makes A_N → A, with fluctuations of order N^(−1/2).

Two measures of how good the mean-field approximation is for N patrons, per sample path:

- distance: max_t |A_N(t) − A(t)| over the time levels;
- ε-Nash gap: the expected gain of one patron (θ_0 ~ m0) who best-responds to the realised
  path A_N instead of following α*: ∫ m0 (v_N − u_N^BR)(0, θ) dθ ≥ 0, where u_N^BR solves the
  HJB equation with f = −F(A_N(t)) 1{θ > 0} and v_N the linear policy-evaluation equation of
  α* with the same f (:func:`mfgwork.numerics.fdm.policy.evaluate_policy`, whose running cost
  includes the Lagrangian L = p ∂p H − H of the feedback). The deviator is taken to know the
  whole path A_N in advance (and to leave it unchanged), so this is an upper bound on what a
  real deviator, who sees only the past, can gain.

Where H depends on m (congestion), the feedback, the deviator and the policy evaluation all see
the mean field's density m(t, θ) (the N patrons' own empirical density is not a function on
the grid): the gap then measures what the attendance's fluctuations are worth.

Because α* is optimal against A, the gain is second order in F(A_N) − F(A): expect the
gap to fall like N^(−1), faster than the distance and than the cost error
∫ m0 (v_N − v)(0) of following α* (first order, N^(−1/2); v the policy's value on the mean
field's path, = u for an equilibrium). The gap and the costs are computed on the host in
float64, on the result's grid.

The feedback of the planner's optimum (``objective="social"``) can be simulated the same way:
the patrons then earn the bar's payoff F, not the planner's price, and the gap is what one of
them gains by leaving the planner's policy (of order one: it is not an equilibrium).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import memory
from ..core.backend import Backend, get_backend, to_numpy
from ..core.errors import MAX_COUNT, ParameterError, check_flag, check_int
from ..core.frozen import freeze
from ..numerics.fdm.policy import evaluate_policy
from ..numerics.fdm.sweeps import FiniteDifferences
from ..numerics.particles.counting import CHUNK_PARTICLES, count_above
from ..numerics.particles.memory import estimate_bytes as particle_bytes
from ..numerics.particles.solver import fresh_seed
from ..problems.santa_fe import AttendanceCoupling, SantaFeBar
from ..results import Result, Status, check_solves

#: Float64 values per sample and time level besides the simulation: counts, A_N, |A_N − A|.
PATH_ARRAYS = 3
#: Float64 values per sample and grid node of the gaps: the running costs F, the policy
#: values of every level and their stacked copy, with margin.
GAP_ARRAYS = 4

#: The fields of an :class:`NPlayerResult` made read-only (arrays, mappings).
FROZEN = ("t", "mean_field", "attendance", "distance", "gap", "cost_error", "timings")


@dataclass(frozen=True)
class NPlayerResult:
    """Realised attendance of ``n_samples`` groups of N patrons and its distance to the mean
    field. Per sample: ``distance`` max_t |A_N − A|, ``gap`` the ε-Nash gain of one best
    response to A_N, ``cost_error`` ∫ m0 (v_N − u)(0), the change of the expected cost of
    following α* when the path is A_N instead of A. Summaries: root-mean-square over samples
    (distance, cost error) or mean (gap), each with its Monte Carlo standard error.
    ``status``: that of the mean-field equilibrium the patrons play (a :class:`~mfgwork.Status`:
    a comparison with an equilibrium that did not converge says little). Frozen, as
    :class:`~mfgwork.Result`."""

    n_players: int
    n_samples: int
    seed: int
    t: np.ndarray
    mean_field: np.ndarray
    attendance: np.ndarray
    distance: np.ndarray
    gap: np.ndarray | None
    cost_error: np.ndarray | None
    backend: str
    device: str
    dtype: str
    timings: dict[str, float] = field(default_factory=dict)
    status: Status = Status.CONVERGED

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        for name in FROZEN:   # read-only all the way down, as a Result
            object.__setattr__(self, name, freeze(getattr(self, name)))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled read-only again (pickle restores arrays writeable)."""
        self.__dict__.update({k: freeze(v) for k, v in state.items()})

    @property
    def distance_rms(self) -> tuple[float, float]:
        """RMS over samples of max_t |A_N − A|, and its standard error."""
        return _rms(self.distance)

    @property
    def gap_mean(self) -> tuple[float, float] | None:
        """Mean ε-Nash gap over samples, and its standard error."""
        return None if self.gap is None else _mean(self.gap)

    @property
    def cost_error_rms(self) -> tuple[float, float] | None:
        """RMS over samples of ∫ m0 (v_N − u)(0), and its standard error."""
        return None if self.cost_error is None else _rms(self.cost_error)

    @property
    def bias(self) -> float:
        """max_t |mean over samples of A_N − A|: what is left after averaging the fluctuations
        (the time-discretization difference between particles and FP, plus noise of order
        (N · n_samples)^(−1/2))."""
        return float(np.max(np.abs(self.attendance.mean(axis=0) - self.mean_field)))

    @property
    def summary(self) -> dict[str, float]:
        """The scalar headline numbers (as ``Result.summary``): distance, gap and cost error
        with their standard errors (gap and cost error when computed), and the bias."""
        out: dict[str, float] = {}
        out["distance"], out["distance_se"] = self.distance_rms
        if self.gap is not None:
            out["gap"], out["gap_se"] = self.gap_mean
            out["cost_error"], out["cost_error_se"] = self.cost_error_rms
        return out | {"bias": self.bias}

    def metrics(self) -> dict[str, Any]:
        """One flat, JSON-ready row: N, samples, seed, where it ran, :attr:`summary` and the
        timings (as ``time_<phase>``)."""
        row: dict[str, Any] = {"n_players": self.n_players, "n_samples": self.n_samples,
                               "seed": self.seed, "backend": self.backend,
                               "device": self.device, "dtype": self.dtype}
        return row | self.summary | {f"time_{k}": v for k, v in self.timings.items()}

    def __repr__(self) -> str:
        numbers = ", ".join(f"{k}={v:.3g}" for k, v in self.summary.items())
        return (f"NPlayerResult(n_players={self.n_players}, n_samples={self.n_samples}, "
                f"seed={self.seed}, {self.backend}/{self.device}/{self.dtype}, "
                f"{len(self.t)} time levels; {numbers})")


def _mean(v: np.ndarray) -> tuple[float, float]:
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))


def _rms(v: np.ndarray) -> tuple[float, float]:
    """sqrt(mean v²) and its standard error (delta method: se(mean v²) / (2 rms))."""
    mean_sq, se_sq = _mean(v**2)
    rms = float(np.sqrt(mean_sq))
    return rms, se_sq / (2 * rms) if rms > 0 else 0.0


def n_player(problem: SantaFeBar, result: Result, n_players: int, n_samples: int = 20,
             seed: int | None = None, backend: str | Backend = "numpy", device: str = "cpu",
             dtype: object = None, gap: bool = True) -> NPlayerResult:
    """Simulate ``n_samples`` independent groups of ``n_players`` patrons playing the
    equilibrium feedback α* = −∂p H(θ, ∂θ u, m) of ``result`` (a solved ``problem``, any
    Hamiltonian; ½|p|²: α* = −∂θ u); returns their
    attendance paths A_N, the distance max_t |A_N − A| and, per sample, the ε-Nash gap: the
    gain of one patron who best-responds to the realised path A_N instead of following α*.
    That patron knows the whole path in advance, so the gap is an upper bound on what a real
    deviator, who sees only the past, can gain. See the module docstring for the equations.

    The simulation runs on ``backend``/``device``/``dtype`` (as :func:`mfgwork.solve`), one
    sample after the other on NumPy, many in one batch on torch; ``seed`` (None: fresh,
    recorded) makes it reproducible. ``gap=False`` skips the best responses and policy
    evaluations (one HJB and one linear sweep per sample, on the host).
    """
    started = time.perf_counter()
    grid = _check(problem, result)
    if result.params.get("objective") == "social":   # the planner's feedback, whatever bar
        problem = problem.for_objective("social")
    n_players = check_int("n_players", n_players, low=1, high=MAX_COUNT)
    n_samples = check_int("n_samples", n_samples, low=2, high=MAX_COUNT)
    seed = fresh_seed() if seed is None else check_int("seed", seed, low=0)
    check_flag("gap", gap)
    be = get_backend(backend, device, dtype)
    check_size(grid, be, n_players, n_samples, gap)
    host = get_backend("numpy")
    U = np.asarray(to_numpy(result.U), dtype=np.float64)
    H = problem.hamiltonian
    density = (np.asarray(to_numpy(result.M), dtype=np.float64)[1:] if H.depends_on_m
               else None)
    m0 = problem.initial_density(grid, host)
    mean_field = np.asarray(to_numpy(result.attendance), dtype=np.float64)
    t0 = time.perf_counter()
    counts = count_above(be.asarray(U), be.asarray(m0), grid, problem.sigma, be, n_players,
                         n_samples, seed, cut=0.0, hamiltonian=H,
                         density=None if density is None else be.asarray(density))
    t1 = time.perf_counter()
    A_N = counts / n_players
    distance = np.max(np.abs(A_N - mean_field), axis=1)
    gaps = cost_error = None
    if gap:
        gaps, cost_error = _gaps(problem, grid, host, U, m0, A_N, density, mean_field)
    t2 = time.perf_counter()
    return NPlayerResult(n_players=n_players, n_samples=n_samples, seed=seed,
                         t=np.asarray(grid.t), mean_field=mean_field, attendance=A_N,
                         distance=distance, gap=gaps, cost_error=cost_error, backend=be.name,
                         device=be.device, dtype=be.dtype,
                         timings={"simulation": t1 - t0, "gap": t2 - t1,
                                  "total": t2 - started}, status=Status(result.status))


def _check(problem: SantaFeBar, result: Result) -> Any:
    if not isinstance(problem, SantaFeBar):
        raise ParameterError(f"problem={problem!r} is invalid: must be an mfgwork.SantaFeBar")
    if not isinstance(result, Result) or "attendance" not in result.observables:
        raise ParameterError(f"result={type(result).__name__} is invalid: must be the "
                             "mfgwork Result of solving the Santa Fe Bar problem")
    if result.params.get("stationary"):
        raise ParameterError("result=Result of the long run (stationary=True) is invalid: N "
                             "players are simulated over a finite horizon; pass the result of "
                             "mw.solve(problem, nx=..., nt=...)")
    check_solves(problem, result, objective=False)   # (the result's policy, either bar)
    for name in ("U", "M", "attendance"):
        values = np.asarray(to_numpy(getattr(result, name)))
        if values.dtype.kind not in "biuf" or not np.isfinite(values).all():
            raise ParameterError(f"result.{name} holds non-finite or non-real values: the "
                                 "result is not an equilibrium to simulate; solve the problem "
                                 "again (res.converged and res.residual say how it ended)")
    nt, nx = np.shape(to_numpy(result.U))
    return problem.grid(nx, nt - 1)


def check_size(grid: Any, be: Backend, n_players: int, n_samples: int, gap: bool) -> int:
    """Bytes of :func:`n_player`, refused before any work when they do not fit
    (:func:`mfgwork.core.memory.check_parts`): the agents simulated at once (one sample on
    NumPy, up to :data:`CHUNK_PARTICLES` agents of several samples on torch) grow with
    ``n_players``; the counts and paths per sample, and with ``gap`` its running costs and
    policy values on the grid, with ``n_samples``."""
    itemsize = 4 if be.dtype == "float32" else 8
    in_flight = n_players * (1 if be.name == "numpy" else
                             max(1, min(n_samples, CHUNK_PARTICLES // n_players)))
    per_sample = PATH_ARRAYS * 8 * (grid.nt + 1)
    if gap:
        per_sample += GAP_ARRAYS * 8 * (grid.nt + 1) * grid.nx
    return memory.check_parts(
        {"n_players": particle_bytes(in_flight, grid.nx, grid.nt, itemsize),
         "n_samples": n_samples * per_sample}, be,
        what=f"simulating {n_samples} samples of {n_players} players on an nx={grid.nx} x "
             f"nt={grid.nt} grid" + (" with their gaps" if gap else ""))


def _gaps(problem: SantaFeBar, grid: Any, host: Backend, U: np.ndarray, m0: np.ndarray,
          A_N: np.ndarray, density: np.ndarray | None = None, A: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: the best response's gain over α*, and α*'s cost change, against A_N
    (``density``: m^1..m^nt that H sees, where it depends on m). A patron earns the bar's
    payoff F (also under the planner's policy, whose U is the planner's, not the patron's
    value: the cost change is taken against α*'s value on the mean field's path ``A``)."""
    coupling = AttendanceCoupling(problem.for_objective("equilibrium"), grid, host)
    U_T = problem.terminal_cost(grid, host)
    weights = grid.weights * m0
    H = problem.hamiltonian
    F = np.stack([coupling.running_cost(a[1:]) for a in A_N])
    V0 = evaluate_policy(U, F, U_T, grid, problem.nu, host, hamiltonian=H,
                         density=density)[:, 0, :] @ weights
    fd = FiniteDifferences(grid, problem.nu, host, hamiltonian=H)
    best = np.array([fd.solve_hjb(U_T, F_s, U, density)[0] @ weights for F_s in F])
    if problem.objective == "equilibrium":
        return V0 - best, V0 - U[0] @ weights
    V = evaluate_policy(U, coupling.running_cost(A[1:])[None], U_T, grid, problem.nu, host,
                        hamiltonian=H, density=density)[0, 0, :] @ weights
    return V0 - best, V0 - V


def n_player_study(problem: SantaFeBar, result: Result, sizes: Sequence[int],
                   n_samples: int = 20, seed: int = 0, progress: bool | None = None,
                   **options: Any) -> list[NPlayerResult]:
    """:func:`n_player` for each N in ``sizes`` (seeds ``seed``, ``seed`` + 1, …);
    ``progress``: a tqdm bar over the sizes (None: shown when the study lasts over a second).
    """
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ParameterError(f"sizes={sizes!r} is invalid: must be a non-empty list of N")
    check_flag("progress", progress, optional=True)
    from ..core.progress import progress_bar

    bar = progress_bar(iterable=sizes, desc="N patrons", unit="N", leave=False,
                       disable=progress is False, delay=0.0 if progress else 1.0)
    return [n_player(problem, result, n, n_samples, seed + k, **options)
            for k, n in enumerate(bar)]


def fitted_slope(n: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(values) against log(n)."""
    n, values = np.asarray(n, dtype=float), np.asarray(values, dtype=float)
    if n.size < 2 or np.any(n <= 0) or np.any(values <= 0):
        raise ParameterError("fitted_slope needs at least two points with positive n and "
                             f"values, not n={n.tolist()}, values={values.tolist()}")
    return float(np.polyfit(np.log(n), np.log(values), 1)[0])
