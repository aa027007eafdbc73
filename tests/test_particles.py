"""Particle FP solver: moments against Euler–Maruyama theory, convergence to the FDM density,
reproducibility, the MPS path, mass and domain, kernels against the NumPy references, inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics.particles import ParticleFP, silverman_bandwidth
from mfgwork.numerics.particles.self_checks import deposit_check, step_check

OU_GRID = mw.Grid(-5.0, 5.0, 201, 1.0, 50)
OU_A, OU_SIGMA, OU_X0, OU_S0 = 1.5, 0.6, 1.0, 0.3


def torch_or_skip():
    return pytest.importorskip("torch")


def ou_inputs(be: mw.Backend) -> tuple[object, object]:
    """U = a x²/2 at every level (drift −a x) and a Gaussian m0, on the backend."""
    g = OU_GRID
    U = np.tile(0.5 * OU_A * g.x**2, (g.nt + 1, 1))
    m0 = np.exp(-0.5 * ((g.x - OU_X0) / OU_S0) ** 2)
    return be.asarray(U), be.asarray(m0 / np.dot(g.weights, m0))


def ou_moments() -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance at every level of the Euler–Maruyama chain for dX = −aX dt + σ dW,
    started from the piecewise-linear interpolant of m0 (what the sampler draws from)."""
    g = OU_GRID
    fine = np.linspace(g.x_min, g.x_max, 200 * (g.nx - 1) + 1)
    m = np.interp(fine, g.x, np.exp(-0.5 * ((g.x - OU_X0) / OU_S0) ** 2))
    m /= np.trapezoid(m, fine)
    mean = [np.trapezoid(fine * m, fine)]
    var = [np.trapezoid((fine - mean[0]) ** 2 * m, fine)]
    c = 1 - OU_A * g.dt
    for _ in range(g.nt):
        mean.append(c * mean[-1])
        var.append(c * c * var[-1] + OU_SIGMA**2 * g.dt)
    return np.array(mean), np.array(var)


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_ornstein_uhlenbeck_moments_within_four_standard_errors(name):
    if name == "torch":
        torch_or_skip()
    be = mw.get_backend(name, "cpu", "float64")
    n = 40_000
    solver = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=n, seed=11)
    M = mw.to_numpy(solver.solve_fp(*ou_inputs(be)))
    mean, var = ou_moments()
    g = OU_GRID
    # CIC deposits conserve the first moment exactly: the mean of M is the particles' mean.
    m_mean = M @ (g.weights * g.x)
    z_mean = (m_mean - mean) / np.sqrt(var / n)
    assert np.max(np.abs(z_mean)) < 4, z_mean
    x = mw.to_numpy(solver.positions)
    se_var = var[-1] * np.sqrt(2 / (n - 1))
    assert abs(np.var(x, ddof=1) - var[-1]) < 4 * se_var
    assert abs(np.mean(x) - m_mean[-1]) < 1e-12
    # the mean really moves: a wrong drift sign or time level would be many errors away
    assert abs(mean[-1] - mean[0]) > 50 * np.sqrt(var[-1] / n)


@pytest.fixture(scope="module")
def santa_fe_fdm() -> mw.Result:
    return mw.solve(mw.SantaFeBar(), nx=52, nt=52, progress=False)


def noise_floor(n: int) -> float:
    """1/√N, the lowest tol that N particles resolve (a smaller tol is raised, with a warning)."""
    return 1.0 / math.sqrt(n)


def l1_in_time(M: np.ndarray, ref: np.ndarray, grid: mw.Grid) -> float:
    """Time-averaged L1 distance Σ_i w_i |m_i − ref_i| between two density paths."""
    return float(np.mean(np.abs(M - ref) @ grid.weights))


def test_santa_fe_particles_approach_fdm_like_inverse_sqrt_n(santa_fe_fdm):
    grid = mw.Grid(-5.0, 5.0, 52, 10.0, 52)
    sizes = [250, 1000, 4000, 16000]
    dist = []
    for n in sizes:
        res = mw.solve(mw.SantaFeBar(), nx=52, nt=52, method="particles", n_particles=n,
                       seed=0, tol=noise_floor(n), progress=False)
        assert res.converged and res.params["n_particles"] == n and res.params["seed"] == 0
        dist.append(l1_in_time(res.M, santa_fe_fdm.M, grid))
    slope = np.polyfit(np.log(sizes), np.log(dist), 1)[0]
    print(f"L1 distances {np.round(dist, 4)}, slope {slope:.3f}")
    assert -0.75 <= slope <= -0.3
    assert dist[-1] < 0.06


def test_seed_reproduces_and_differs_numpy():
    p = mw.SantaFeBar()
    kw = {"nx": 31, "nt": 20, "method": "particles", "n_particles": 3000,
          "tol": noise_floor(3000), "progress": False}
    a = mw.solve(p, seed=5, **kw)
    b = mw.solve(p, seed=5, **kw)
    c = mw.solve(p, seed=6, **kw)
    assert np.array_equal(a.M, b.M) and np.array_equal(a.U, b.U)
    assert a.iterations == b.iterations
    assert not np.array_equal(a.M, c.M)


def test_fresh_seed_is_recorded_and_replays():
    p = mw.SantaFeBar()
    kw = {"nx": 31, "nt": 20, "method": "particles", "n_particles": 2000,
          "tol": noise_floor(2000), "progress": False}
    a = mw.solve(p, **kw)
    b = mw.solve(p, seed=a.params["seed"], **kw)
    assert np.array_equal(a.M, b.M)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_cpu_is_deterministic(dtype):
    torch_or_skip()
    be = mw.get_backend("torch", "cpu", dtype)
    U, m0 = ou_inputs(be)
    first = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=5000, seed=3)
    again = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=5000, seed=3)
    other = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=5000, seed=4)
    M1, M1_again = first.solve_fp(U, m0), first.solve_fp(U, m0)
    assert bool((M1 == M1_again).all()) and bool((M1 == again.solve_fp(U, m0)).all())
    assert not bool((M1 == other.solve_fp(U, m0)).all())


def test_mps_emulation_agrees_with_float64_within_monte_carlo_error(santa_fe_fdm,
                                                                     mps_emulation):
    """FP only, on the FDM equilibrium U: attendance and mean of float32 (MPS rules) against
    float64, independent draws, each within 4 standard errors of the difference."""
    torch_or_skip()
    g = mw.Grid(-5.0, 5.0, 52, 10.0, 52)
    n = 20_000
    chi_w = g.weights * g.cell_fraction_above(0.0)
    out = {}
    for be in (mw.get_backend("torch", "cpu", "float64"), mps_emulation):
        solver = ParticleFP(g, 0.5, be, n_particles=n, seed=1)
        M = mw.to_numpy(solver.solve_fp(be.asarray(santa_fe_fdm.U), be.asarray(
            santa_fe_fdm.M[0]))).astype(np.float64)
        assert M.dtype == np.float64 and str(solver.positions.dtype) == f"torch.{be.dtype}"
        out[be.dtype] = (M @ chi_w, M @ (g.weights * g.x), M @ (g.weights * g.x**2))
    A64, mean64, second64 = out["float64"]
    A32, mean32, _ = out["float32"]
    se_A = np.sqrt(2 * np.clip(A64 * (1 - A64), 1e-12, None) / n)
    se_mean = np.sqrt(2 * (second64 - mean64**2) / n)
    assert np.max(np.abs(A32 - A64) / se_A) < 4
    assert np.max(np.abs(mean32 - mean64) / se_mean) < 4
    assert np.max(np.abs(A64 - santa_fe_fdm.attendance)) < 0.05


def test_mps_emulation_coupled_solve_converges(mps_emulation):
    kw = {"nx": 31, "nt": 20, "progress": False}
    fdm = mw.solve(mw.SantaFeBar(), tol=1e-4, **kw)
    res = mw.solve(mw.SantaFeBar(), method="particles", n_particles=4000, seed=2,
                   backend=mps_emulation, tol=noise_floor(4000), **kw)
    M = mw.to_numpy(res.M).astype(np.float64)
    assert res.converged and res.dtype == "float32"
    assert l1_in_time(M, fdm.M, mw.Grid(-5.0, 5.0, 31, 10.0, 20)) < 0.1


def huge_step_solver(be: mw.Backend, density: str = "cic") -> tuple[ParticleFP, object]:
    """Strong drift into the right wall and noise far larger than the domain."""
    g = mw.Grid(-1.0, 1.0, 41, 2.0, 10)
    U = np.tile(-20.0 * g.x, (g.nt + 1, 1))
    solver = ParticleFP(g, 30.0, be, n_particles=4000, seed=9, density=density)
    return solver, solver.solve_fp(be.asarray(U), be.asarray(np.ones(g.nx) / 2.0))


@pytest.mark.parametrize("density", ["cic", "kde"])
def test_mass_is_one_and_particles_stay_inside(backend, density):
    solver, M = huge_step_solver(backend, density)
    g = solver.grid
    M = mw.to_numpy(M).astype(np.float64)
    tol = 10 * g.nx * backend.eps
    assert M.shape == (g.nt + 1, g.nx)
    assert np.max(np.abs(M @ g.weights - 1.0)) <= tol
    assert np.min(M) >= 0
    x = mw.to_numpy(solver.positions)
    assert np.min(x) >= g.x_min and np.max(x) <= g.x_max
    assert np.ptp(x) > 1.5  # the huge steps really spread particles over the whole domain


def test_particles_pile_up_at_the_wall_they_are_pushed_to():
    g = mw.Grid(-1.0, 1.0, 41, 2.0, 40)
    U = np.tile(-2.0 * g.x, (g.nt + 1, 1))  # drift −∂x u = +2
    solver = ParticleFP(g, 0.2, mw.get_backend(), n_particles=5000, seed=1)
    M = solver.solve_fp(U, np.ones(g.nx) / 2.0)
    assert np.min(solver.positions) > 0.0
    assert M[-1, -1] > 10 * M[-1, g.nx // 2]


def test_kde_is_smoother_and_closer_to_fdm_than_cic_at_small_n(santa_fe_fdm):
    g = mw.Grid(-5.0, 5.0, 52, 10.0, 52)
    be = mw.get_backend()
    dist = {}
    for density in ("cic", "kde"):
        solver = ParticleFP(g, 0.5, be, n_particles=500, seed=4, density=density)
        M = solver.solve_fp(santa_fe_fdm.U, santa_fe_fdm.M[0])
        dist[density] = l1_in_time(M, santa_fe_fdm.M, g)
    assert dist["kde"] < dist["cic"]


def test_silverman_bandwidth_of_a_binned_gaussian():
    x = np.linspace(-8, 8, 801)
    p = np.exp(-0.5 * x**2)
    p /= p.sum()
    n = 10_000
    bw = silverman_bandwidth(p[None, :], x, n, mw.get_backend().xp)
    assert bw[0] == pytest.approx(0.9 * n ** (-0.2), rel=0.02)
    heavy_tails = 0.9 * np.exp(-0.5 * (x / 0.5) ** 2) / 0.5 + 0.1 * np.exp(-0.5 * (x / 4) ** 2) / 4
    heavy_tails /= heavy_tails.sum()
    bw2 = silverman_bandwidth(heavy_tails[None, :], x, n, np)
    sd2 = np.sqrt(np.sum(heavy_tails * x**2))
    assert bw2[0] < 0.6 * 0.9 * sd2 * n ** (-0.2)  # the IQR term, not σ̂, sets it
    tiny = silverman_bandwidth(p[None, :], x, 10**12, np)
    assert tiny[0] == pytest.approx(x[1] - x[0])  # floored at the grid spacing


@pytest.mark.parametrize("check", [deposit_check, step_check])
def test_kernels_match_numpy_reference(backend, check):
    value, ref = check(backend)
    value = mw.to_numpy(value).astype(np.float64)
    tol = 1e-10 if backend.dtype == "float64" else 1e-4
    assert np.max(np.abs(value - ref)) <= tol * max(1.0, np.max(np.abs(ref)))


def test_numba_and_torch_cpu_see_the_same_grid_and_interpolation():
    """Same positions and increments through both step kernels: identical to round-off."""
    torch_or_skip()
    a, ref = step_check(mw.get_backend())
    b, _ = step_check(mw.get_backend("torch", "cpu", "float64"))
    assert np.max(np.abs(a - mw.to_numpy(b))) < 1e-12
    assert np.ptp(ref) > 9  # the inputs reach both walls


@pytest.mark.parametrize("kwargs, match", [
    ({"n_particles": 0}, "n_particles=0"),
    ({"n_particles": -5}, "n_particles=-5"),
    ({"n_particles": 1.5}, "n_particles=1.5"),
    ({"n_particles": "1000"}, "n_particles='1000'"),
    ({"n_particles": True}, "n_particles=True"),
    ({"n_particles": 100, "seed": -1}, "seed=-1"),
    ({"n_particles": 100, "seed": 0.5}, "seed=0.5"),
    ({"n_particles": 10**15}, "^n_particles too large"),
])
def test_bad_particle_arguments_are_rejected_up_front(kwargs, match):
    with pytest.raises(mw.ParameterError, match=match):
        mw.solve(mw.SantaFeBar(), method="particles", tol=0.1, **kwargs)


def test_particle_arguments_only_with_particles():
    with pytest.raises(mw.ParameterError, match="only to method='particles'"):
        mw.solve(mw.SantaFeBar(), n_particles=1000)


def test_memory_error_states_the_estimate():
    estimate = (r"^n_particles too large: a particle solve with n_particles=1000000000000000, "
                r"nx=11, nt=5 \(112 bytes per particle in float64.*\) needs about [0-9.e+]+ GiB")
    with pytest.raises(mw.ParameterError, match=estimate):
        ParticleFP(mw.Grid(-1, 1, 11, 1.0, 5), 0.5, mw.get_backend(), n_particles=10**15)


def test_solver_rejects_bad_density_and_shapes():
    g = mw.Grid(-1.0, 1.0, 11, 1.0, 5)
    with pytest.raises(mw.ParameterError, match="density='histogram'"):
        ParticleFP(g, 0.5, mw.get_backend(), n_particles=10, density="histogram")
    solver = ParticleFP(g, 0.5, mw.get_backend(), n_particles=10)
    with pytest.raises(mw.ParameterError, match="positions"):
        _ = solver.positions
    with pytest.raises(mw.ParameterError, match=r"U has shape \(5, 11\)"):
        solver.solve_fp(np.zeros((5, 11)), np.ones(11))
    with pytest.raises(mw.ParameterError, match=r"m0 has shape \(10,\)"):
        solver.solve_fp(np.zeros((6, 11)), np.ones(10))


def test_cuda_memory_estimate_is_checked_against_free_device_memory(monkeypatch):
    torch = torch_or_skip()
    from mfgwork.numerics.particles.memory import check_fits

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    cuda = mw.Backend(name="torch", device="cuda", dtype="float32")
    assert check_fits(10**6, 201, 201, cuda, copies=64) < 2**30
    with pytest.raises(mw.ParameterError, match=r"about 1 GiB is free on torch/cuda"):
        check_fits(10**8, 201, 201, cuda, copies=64)


class _BrokenGraph:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("capture not supported here")


class _WrongGraph:
    """A "replay" that draws other random numbers than the eager solve."""

    def __init__(self, fn, *inputs, generator=None, seed=None):
        self.fn, self.generator, self.seed = fn, generator, seed

    def run(self, *inputs):
        self.generator.manual_seed(self.seed + 1)
        return self.fn(*inputs)


@pytest.mark.parametrize("graph, reason", [(_BrokenGraph, "capture not supported"),
                                           (_WrongGraph, "differs from the eager call")])
def test_cuda_graph_falls_back_to_the_eager_loop(monkeypatch, graph, reason):
    """The graph path's safety net, exercised on the CPU: a graph that cannot be recorded or
    that disagrees with the eager solve is dropped with a warning; results stay eager."""
    torch_or_skip()
    from mfgwork.core import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "GraphedCall", graph)
    be = mw.get_backend("torch", "cpu", "float64")
    U, m0 = ou_inputs(be)
    eager = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=2000, seed=3).solve_fp(U, m0)
    solver = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=2000, seed=3)
    solver.use_cuda_graph = True
    with pytest.warns(RuntimeWarning, match=reason):
        first = solver.solve_fp(U, m0)
    assert not solver.use_cuda_graph
    assert bool((first == eager).all()) and bool((solver.solve_fp(U, m0) == eager).all())


def test_failing_compiled_step_falls_back_to_plain_ops():
    torch_or_skip()
    be = mw.get_backend("torch", "cpu", "float64")
    U, m0 = ou_inputs(be)
    plain = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=2000, seed=3).solve_fp(U, m0)
    solver = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=2000, seed=3)

    def broken(*args):
        raise RuntimeError("no compiler")

    solver._advance = broken
    with pytest.warns(RuntimeWarning, match="no compiler"):
        M = solver.solve_fp(U, m0)
    assert bool((M == plain).all())


@pytest.mark.parametrize("density", ["cic", "kde"])
@pytest.mark.parametrize("path", ["mps-emulation", "torch-float64"])
def test_device_paths_have_no_host_sync_and_mps_no_float64(path, density, op_recorder):
    """Every aten op of a solve on the MPS path (emulated) and on the CUDA path (the same ops
    on the CPU): no ``.item()``-style read back to the host (``_local_scalar_dense``); on the
    MPS path, float32 or integer results only."""
    torch = torch_or_skip()
    be = mw.mps_emulation() if path == "mps-emulation" else mw.get_backend("torch", "cpu",
                                                                           "float64")
    record, seen = op_recorder
    U, m0 = ou_inputs(be)
    solver = ParticleFP(OU_GRID, OU_SIGMA, be, n_particles=500, seed=1, density=density,
                        deposit_copies=3)
    with record:
        M = solver.solve_fp(U, m0)
    assert M.dtype == be.native_dtype
    if path == "mps-emulation":
        assert torch.float64 not in seen["dtypes"], seen["dtypes"]
    assert not any("_local_scalar_dense" in op for op in seen["ops"])
    assert any("index_add" in op for op in seen["ops"])  # the recorder sees the kernels


def test_default_deposit_copies_respect_the_memory_cap():
    from mfgwork.numerics.particles.solver import (
        COPIES_MAX_BYTES,
        CUDA_DEPOSIT_COPIES,
        default_copies,
    )

    assert default_copies(False, 201, 200) == 1
    assert default_copies(True, 201, 200) == CUDA_DEPOSIT_COPIES
    big = default_copies(True, 2001, 4000)
    assert 1 <= big < CUDA_DEPOSIT_COPIES
    assert big * 8 * 2001 * 4001 <= COPIES_MAX_BYTES < (big + 1) * 8 * 2001 * 4001
    assert default_copies(True, 100_001, 100_000) == 1
