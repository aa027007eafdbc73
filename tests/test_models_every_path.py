"""Every model on every path: the n-player game, several populations, particles, the array
path that MPS runs (its kernel launches per time step) and each 1-D sweep against NumPy
float64, for ½|p|², |p|^1.5/1.5, |p|³/3, congestion and notebook 09's model (a user's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from helpers import Crowded, Current, triton_device

import mfgwork as mw
from mfgwork.analysis.n_player import _gaps, n_player
from mfgwork.numerics.fdm import kernels
from mfgwork.numerics.fdm.policy import evaluate_policy
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.particles.counting import count_above
from mfgwork.problems.santa_fe import AttendanceCoupling

HOST = mw.get_backend("numpy")
MODELS = [mw.Quadratic(), mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5), Current()]
#: models other than ½|p|², whose feedback is not −∂x u
OTHERS = MODELS[1:]


def _ids(H) -> str:
    return repr(H)


_SOLVED: dict = {}


def solved(H, nx: int = 41, nt: int = 40):
    """Santa Fe with ``H`` solved on a small grid (once per module)."""
    key = (repr(H), nx, nt)
    if key not in _SOLVED:
        problem = mw.SantaFeBar(hamiltonian=H)
        _SOLVED[key] = problem, mw.solve(problem, nx=nx, nt=nt, tol=1e-9, progress=False)
    return _SOLVED[key]


def _density(H, result):
    """m^1..m^nt of the result where H depends on m, else None."""
    return np.asarray(result.M)[1:] if H.depends_on_m else None


# -- n players ----------------------------------------------------------------------------------
@pytest.mark.parametrize("H", OTHERS, ids=_ids)
def test_n_players_follow_the_feedback_of_their_model(H):
    """Averaged over 8 samples of 20 000 patrons, the realised attendance is the mean field's
    within the particle scheme's discretization bias (1.3 % for ½|p|² on this grid); agents
    driven by −∂x u instead (the feedback of ½|p|², what n_player used for every model) miss
    it by 3 to 23 %."""
    problem, result = solved(H)
    res = n_player(problem, result, 20_000, 8, seed=1, gap=False)
    assert res.bias <= 0.02, res.bias
    grid = problem.grid(41, 40)
    m0 = problem.initial_density(grid, HOST)
    quadratic_drift = count_above(np.asarray(result.U), m0, grid, problem.sigma, HOST, 20_000,
                                  8, seed=1) / 20_000
    assert np.max(np.abs(quadratic_drift.mean(axis=0) - np.asarray(result.attendance))) > 0.025


def test_n_players_on_the_mps_path_follow_their_model(mps_emulation):
    """The torch kernels (MPS emulation, float32) drive the patrons by the model's feedback
    too, the density H sees moved to the device."""
    problem, result = solved(mw.Congestion(1.0, 0.5))
    res = n_player(problem, result, 5_000, 8, seed=2, backend=mps_emulation, gap=False)
    assert res.dtype == "float32" and res.bias <= 0.02, res.bias


@pytest.mark.parametrize("H", OTHERS, ids=_ids)
def test_policy_evaluation_and_gap_of_every_model(H):
    """Following α* = −∂p H against the path it was solved for costs exactly U (the policy
    evaluation with H's Lagrangian, to the HJB sweep's Newton tolerance), so the ε-Nash gap
    vanishes on the mean-field path; a crowded path costs more and a best response gains."""
    problem, result = solved(H)
    grid = problem.grid(41, 40)
    U, A = np.asarray(result.U), np.asarray(result.attendance)
    density = _density(H, result)
    F = AttendanceCoupling(problem, grid, HOST).running_cost(A[1:])
    V = evaluate_policy(U, F, problem.terminal_cost(grid, HOST), grid, problem.nu, HOST,
                        hamiltonian=H, density=density)
    assert np.max(np.abs(V - U)) <= 1e-8 * np.max(np.abs(U))   # U's Newton tolerance
    m0 = problem.initial_density(grid, HOST)
    gap, cost = _gaps(problem, grid, HOST, U, m0, np.stack([A, A + 0.02]), density)
    assert abs(gap[0]) < 1e-6 and abs(cost[0]) < 1e-4
    assert gap[1] > 1e-3 and cost[1] > 0.1


# -- several populations ------------------------------------------------------------------------
@pytest.mark.parametrize("H", OTHERS, ids=_ids)
def test_one_population_of_every_model_is_the_single_solve(H):
    """One group of share 1 reaches the equilibrium of the single-population solve (Newton on
    the attendance, or for congestion the frozen-density iteration) from its own iteration
    (Newton on the shared path; Anderson on the path and the density for congestion)."""
    problem, ref = solved(H)
    res = mw.solve_populations(mw.SantaFePopulations([mw.Population("all", 1.0, problem)]),
                               nx=41, nt=40, tol=1e-9, progress=False)
    assert res.converged and res.residual <= 1e-9
    M, M_ref = np.asarray(res.M)[0], np.asarray(ref.M)
    assert np.max(np.abs(M - M_ref)) <= 1e-6 * np.max(M_ref)


@pytest.mark.parametrize("H", OTHERS, ids=_ids)
def test_two_populations_of_every_model_are_certified(H):
    """A group with the model beside a ½|p|² group (other threshold and noise): converged,
    certified by every group's best response, and the certificate recomputes."""
    groups = mw.SantaFePopulations([
        mw.Population("own", 0.6, mw.SantaFeBar(hamiltonian=H)),
        mw.Population("other", 0.4, mw.SantaFeBar(threshold=0.7, sigma=0.8))])
    res = mw.solve_populations(groups, nx=41, nt=40, tol=1e-8, progress=False)
    assert res.converged and max(res.extra["group_residuals"].values()) <= 1e-8
    assert res.check(groups) == pytest.approx(res.residual, rel=1e-6, abs=1e-12)


def test_a_congested_group_sees_the_whole_population():
    """At the equilibrium, the congested group's value is its best response with H seeing
    ρ = Σ_k w_k m_k (the crowd of both groups), not its own density alone."""
    H = mw.Congestion(1.0, 0.5)
    own, other = mw.SantaFeBar(hamiltonian=H), mw.SantaFeBar(threshold=0.7, sigma=0.8)
    groups = mw.SantaFePopulations([mw.Population("own", 0.5, own),
                                    mw.Population("other", 0.5, other)])
    res = mw.solve_populations(groups, nx=41, nt=40, tol=1e-10, progress=False)
    grid = own.grid(41, 40)
    M = np.asarray(res.M)
    F = AttendanceCoupling(own, grid, HOST).running_cost(np.asarray(res.attendance)[1:])
    fd = FiniteDifferences(grid, own.nu, HOST, hamiltonian=H)
    U_T = own.terminal_cost(grid, HOST)

    def error(density):
        return np.max(np.abs(fd.solve_hjb(U_T, F, None, density) - np.asarray(res.U)[0]))

    assert error(0.5 * (M[0, 1:] + M[1, 1:])) <= 1e-7
    assert error(M[0, 1:]) > 1e-3


# -- particles ----------------------------------------------------------------------------------
def _particle_l1(H, backend, drift_of, n=50_000):
    """Time-averaged Σ w |m_particles − m_fdm| of one particle FP solve driven by −∂p H of
    ``drift_of`` (None: ½|p|²) from the FDM equilibrium U of ``H`` (and its density)."""
    problem, result = solved(H)
    grid = problem.grid(41, 40)
    m0 = problem.initial_density(grid, HOST)
    fp = mw.ParticleFP(grid, problem.sigma, backend, n_particles=n, seed=3,
                       hamiltonian=drift_of)
    density = _density(H, result) if drift_of is not None else None
    M = fp.solve_fp(*(None if a is None else backend.asarray(a)
                      for a in (np.asarray(result.U), m0, density)))
    M = np.asarray(mw.to_numpy(M), dtype=np.float64)
    return float(np.mean(np.abs(M - np.asarray(result.M)) @ grid.weights))


@pytest.mark.parametrize("H", OTHERS, ids=_ids)
def test_particles_of_every_model_match_the_fdm_density(H):
    """50 000 particles driven by −∂p H(x, ∂x u, m) of the model's equilibrium U reproduce its
    FDM density within the particle method's error here (0.031 in time-averaged L1 for
    ½|p|², from h = 0.25 and the noise; bound 1.5 times that); driven by −∂x u instead they
    miss it by 0.06 to 0.39."""
    assert _particle_l1(H, HOST, H) <= 0.045
    assert _particle_l1(H, HOST, None) > 0.045


def test_particles_on_the_mps_path_follow_a_users_model(mps_emulation):
    """The torch kernels (MPS emulation, float32) take a user's hand-written dp as torch code
    (the density H sees on the device: the n-player test above)."""
    assert _particle_l1(Current(), mps_emulation, Current()) <= 0.045


# -- each model on each 1-D path against NumPy float64 -----------------------------------------
def _sweep_data(H, nx: int, nt: int) -> dict:
    grid = mw.Grid(-1.0, 2.0, nx, 0.8, nt)
    rng = np.random.default_rng(11)
    m0 = np.exp(-4 * (grid.x - 0.3) ** 2)
    return {"grid": grid, "F": 2 * rng.standard_normal((nt, nx)), "U_T": np.sin(2 * grid.x),
            "m0": m0 / (m0 @ grid.weights),
            "density": 0.5 + rng.random((nt, nx)) if H.depends_on_m else None}


def _run_sweeps(H, d: dict, be, kernel=None) -> tuple[np.ndarray, np.ndarray, str]:
    """U and M of one HJB and one FP sweep on ``be`` (``kernel``: None for the table's)."""
    fd = FiniteDifferences(d["grid"], 0.2, be, hamiltonian=H, kernels=kernel)
    density = None if d["density"] is None else be.asarray(d["density"])
    U = fd.solve_hjb(be.asarray(d["U_T"]), be.asarray(d["F"]), None, density)
    M = fd.solve_fp(U, be.asarray(d["m0"]), density)
    return (*(np.asarray(mw.to_numpy(a), dtype=np.float64) for a in (U, M)), fd.kernels.name)


def _reference(H, d: dict) -> tuple[np.ndarray, np.ndarray]:
    return _run_sweeps(H, d, HOST, kernels.HOST_ARRAYS)[:2]


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


#: (backend, kernels, expected kernels' name, tolerance against NumPy float64)
PATHS = {
    "numba": (lambda: HOST, None, kernels.COMPILED_LOOPS.name, 1e-10),
    "torch-cpu": (lambda: mw.get_backend("torch", "cpu", "float64"), None,
                  kernels.COMPILED_LOOPS_TORCH.name, 1e-10),
    "mps-code-float64": (lambda: mw.Backend(name="torch", device="cpu", dtype="float64",
                                            emulate_mps=True), None, kernels.ARRAY_API.name,
                         1e-10),
    "mps-emulation": (mw.mps_emulation, None, kernels.ARRAY_API.name, 2e-5),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("H", MODELS, ids=_ids)
def test_each_model_on_each_path_is_the_numpy_float64_scheme(H, path):
    """One HJB and one FP sweep (15 × 6) on each CPU path of the kernel table against the
    NumPy float64 array sweeps: 1e-10 in float64, the float32 floor under MPS emulation."""
    pytest.importorskip("torch") if path != "numba" else None
    make, kernel, name, tol = PATHS[path]
    d = _sweep_data(H, 15, 6)
    U_ref, M_ref = _reference(H, d)
    U, M, used = _run_sweeps(H, d, make(), kernel)
    assert used == name
    assert _rel(U, U_ref) <= tol and _rel(M, M_ref) <= tol


@dataclass(frozen=True)
class Shifted(mw.Hamiltonian):
    """H(x, 0, m) ≠ 0: |p|^1.5/1.5 + k x² + √(1 + m²)/5 (the Newton rows subtract H at 0)."""

    k: float = 0.3
    depends_on_m = True

    def value(self, x, p, m, xp):
        return xp.abs(p) ** 1.5 / 1.5 + self.k * x * x + 0.2 * xp.sqrt(1.0 + m * m)


def test_a_model_with_a_cost_at_rest_on_the_mps_code_is_the_numpy_scheme():
    """The MPS code's rows Ĥ = H(q₊) + H(q₋) − H(0) where H(x, 0, m) is not zero."""
    pytest.importorskip("torch")
    d = _sweep_data(Shifted(), 15, 6)
    U, M, _ = _run_sweeps(Shifted(), d, PATHS["mps-code-float64"][0]())
    U_ref, M_ref = _reference(Shifted(), d)
    assert _rel(U, U_ref) <= 1e-10 and _rel(M, M_ref) <= 1e-10


@pytest.mark.parametrize("H", [mw.Quadratic(), Current()], ids=_ids)
def test_each_model_on_the_fused_triton_sweeps_is_the_numpy_float64_scheme(H, monkeypatch):
    """The fused Triton sweeps (on CUDA, else under TRITON_INTERPRET=1 at 12 × 4) against
    the NumPy float64 array sweeps, within 1e-10: ½|p|² and notebook 09's model here, every
    shipped model against the compiled loops in ``tests/test_fdm_triton_models.py``."""
    device = triton_device(monkeypatch)
    d = _sweep_data(H, 12, 4)
    U_ref, M_ref = _reference(H, d)
    U, M, used = _run_sweeps(H, d, mw.get_backend("torch", device, "float64"), kernels.TRITON)
    assert used == kernels.TRITON.name
    assert _rel(U, U_ref) <= 1e-10 and _rel(M, M_ref) <= 1e-10


# -- kernel launches of the MPS path ------------------------------------------------------------
#: Kernels a model's Newton rows may add per Newton iteration to those of ½|p|² (one clamp and
#: one product): its generated H and ∂p H on the pair of one-sided gradients (8 for the powers,
#: 9 for congestion, 12 for notebook 09's model; 31 for the powers through the splitting of
#: value and dp, before).
MODEL_KERNELS = 12


def _launches(H, be, nt: int) -> tuple[int, set]:
    """Operations that launch a kernel (every aten operation dispatched but views and
    allocations, as :func:`mfgwork.core.profiling.kernel_launches` counts them; here by a
    dispatch mode, which costs no profiler) of one HJB sweep (4 Newton iterations a step) and
    one FP sweep on a 20-node grid, and their names."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from mfgwork.core.profiling import NO_KERNEL

    grid = mw.Grid(-1.0, 2.0, 20, 1.0, nt)
    fd = FiniteDifferences(grid, 0.1, be, hamiltonian=H)
    F, U_T = be.asarray(np.cos(3 * grid.x) * np.ones((nt, 1))), be.asarray(np.sin(2 * grid.x))
    density = be.asarray(0.5 + np.ones((nt, grid.nx))) if H.depends_on_m else None
    m0 = be.asarray(np.ones(grid.nx))
    seen: list[str] = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = f"aten::{func._opname}"
            if name not in NO_KERNEL:
                seen.append(name)
            return func(*args, **(kwargs or {}))

    fd.solve_fp(fd._hjb_fixed(U_T, F, None, 4, density)[0], m0, density)   # constants made
    with Count():
        fd.solve_fp(fd._hjb_fixed(U_T, F, None, 4, density)[0], m0, density)
    return len(seen), set(seen)


def test_every_model_launches_few_kernels_per_time_step_on_the_mps_path(mps_emulation):
    """Under MPS emulation a model's Newton rows are its generated (H, ∂p H) evaluated once on
    the clamped pair of one-sided gradients: one more time step (HJB with 4 Newton
    iterations, and FP) costs at most ``MODEL_KERNELS`` more kernels per Newton iteration
    than for ½|p|² (measured per HJB step at 52 nodes: 97 for ½|p|², 129 for the powers, 133
    for congestion, 145 for notebook 09's model; before, 242 to 326), FP one kernel a step as for
    ½|p|² (its matrices reduced once per sweep), and no host read."""
    quadratic = [_launches(mw.Quadratic(), mps_emulation, nt)[0] for nt in (2, 3)]
    for H in OTHERS:
        (short, _), (long, ops) = (_launches(H, mps_emulation, nt) for nt in (2, 3))
        extra = (long - short) - (quadratic[1] - quadratic[0])
        print(f"{H!r}: {extra / 4:.1f} more kernels per Newton iteration than ½|p|²")
        assert extra <= 4 * MODEL_KERNELS
        assert not any("local_scalar_dense" in op or "item" in op for op in ops)


@pytest.mark.parametrize("H", [*OTHERS, Crowded()], ids=_ids)
def test_the_generated_array_code_runs_on_raw_torch(H):
    """The derived functions print max/min against a constant as ``clip`` (raw torch's
    maximum and minimum take tensors only: max(m, 0) of a crowded model failed there) and
    agree with NumPy; so does the pair (H, ∂p H) of the MPS path's Newton rows."""
    torch = pytest.importorskip("torch")
    x, p, m = _samples()
    traced = H.traced()
    for name in ("value", "dp", "dpp", "dm", "pair"):
        on_torch = traced.array_function(name)(*(torch.from_numpy(a) for a in (x, p, m)), torch)
        with np.errstate(divide="ignore"):   # ∂pp |p|^1.5 at p = 0
            on_numpy = traced.array_function(name)(x, p, m, np)
        np.testing.assert_allclose(np.asarray([np.asarray(v) for v in np.broadcast_arrays(
            *(on_torch if name == "pair" else [on_torch]))]), np.asarray(np.broadcast_arrays(
                *(on_numpy if name == "pair" else [on_numpy]))), rtol=1e-14, atol=1e-14)
    value, slope = traced.array_function("pair")(x, p, m, np)
    np.testing.assert_allclose(value, H.value(x, p, m if H.depends_on_m else None, np),
                               rtol=1e-13)
    np.testing.assert_allclose(slope, H.dp(x, p, m if H.depends_on_m else None, np),
                               rtol=1e-13, atol=1e-15)


def _samples():
    rng = np.random.default_rng(5)
    p = np.concatenate([-np.logspace(-2, 1, 10), [0.0], np.logspace(-2, 1, 10)])
    return rng.uniform(-1.0, 1.0, p.size), p, rng.uniform(-0.5, 3.0, p.size)
