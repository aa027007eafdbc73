"""The cooperative Triton sweeps (layout "program": a program per problem, lanes over x,
parallel cyclic reduction) against the compiled NumPy float64 loops and against the per-thread
kernels (layout "thread"): every member of a batch, both dtypes, the same Newton iterations.

They run on CUDA when there is one, else under Triton's CPU interpreter (TRITON_INTERPRET=1)
at small sizes when Triton is installed, else skip.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import triton_device
from test_fdm_triton import TOLERANCE, _mass_tolerance, _reference_sweeps, _rel

import mfgwork as mw
from mfgwork.numerics.fdm import kernels, numba_kernels, triton_sweeps
from mfgwork.numerics.fdm.sweeps import FiniteDifferences


@pytest.fixture
def device(monkeypatch) -> str:
    """CUDA, or the interpreter on CPU tensors."""
    return triton_device(monkeypatch)


def _batch(nx: int, nt: int, B: int, seed: int = 4) -> dict:
    """B problems on [−1, 2]: ν, running costs, terminal costs and initial cell masses."""
    grid = mw.Grid(-1.0, 2.0, nx, 1.0, nt)
    rng = np.random.default_rng(seed)
    m0 = np.exp(-((grid.x - rng.uniform(-0.5, 1.5, (B, 1))) ** 2))
    return {"grid": grid, "nu": rng.uniform(0.02, 0.5, B),
            "F": 3 * rng.standard_normal((B, nt, nx)),
            "U_T": np.sin(3 * grid.x) * rng.uniform(0.5, 2.0, (B, 1)),
            "mu0": m0 * grid.weights / (m0 @ grid.weights)[:, None]}


def _sweeps(data: dict, layout: str, device: str, dtype: str, guess: np.ndarray | None = None,
            max_newton: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """U, μ (float64 copies) and the Newton status of one HJB and one FP sweep."""
    import torch

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=getattr(torch, dtype),
                               device=device)

    grid = data["grid"]
    inv_hw = t(1.0 / (grid.h * grid.weights))
    U, status = triton_sweeps.hjb_sweep(
        t(data["U_T"]), t(data["F"]), None if guess is None else t(guess), t(data["nu"]),
        grid.h, grid.dt, inv_hw, t(1.0 / grid.weights), 64 * float(np.finfo(dtype).eps),
        max_newton, layout=layout)
    mu = triton_sweeps.fp_sweep(U, t(data["mu0"]), t(data["nu"]), grid.h, grid.dt, inv_hw,
                                layout=layout)
    return (U.double().cpu().numpy(), mu.double().cpu().numpy(),
            status.cpu().numpy())


# 9 points padded to 16 lanes, exactly 16, and (on CUDA) 201 points in 256 lanes of 4 warps:
# gathers through shared memory rather than warp shuffles
@pytest.mark.parametrize("nx", [9, 16, 201])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_each_member_matches_numpy_and_the_thread_layout(device, dtype, nx):
    if device == "cpu" and nx > 32:
        pytest.skip("too slow for the interpreter: runs on CUDA")
    data = _batch(nx, 3, 3) if device == "cpu" else _batch(nx, 40, 37)
    U, mu, status = _sweeps(data, "program", device, dtype)
    U_thread, mu_thread, status_thread = _sweeps(data, "thread", device, dtype)
    np.testing.assert_array_equal(status[0], status_thread[0])  # no step left unconverged
    # Newton iterations: the same in float64; in float32 the two solvers' roundings may move
    # a step across the stopping test (measured on an H100: one problem of 37 took 122
    # iterations against 121)
    slack = 0 if dtype == "float64" else 1
    assert np.abs(status[1] - status_thread[1]).max() <= slack
    assert (status[0] == -1).all() and (status[1] >= data["grid"].nt).all()
    # parallel cyclic reduction rounds a little more than Thomas: measured on an H100 at
    # 201 points, float32 FP 1.3e-4 against NumPy float64 (the float32 tol floor is 3e-4)
    tolerance = TOLERANCE[dtype] if dtype == "float64" or nx < 100 else 3e-4
    for b in range(len(data["nu"])):
        U_ref, mu_ref = _reference_sweeps(data["grid"], data["nu"][b], data["U_T"][b],
                                          data["F"][b], data["mu0"][b])
        assert _rel(U[b], U_ref) <= tolerance
        assert _rel(mu[b], mu_ref) <= tolerance
        assert _rel(U[b], U_thread[b]) <= tolerance
        assert _rel(mu[b], mu_thread[b]) <= tolerance
    # mass: PCR at 201 points rounds more than Thomas (within 20 ε a step): float32 drifted
    # 23 ε a step on an H100, float64 20.03 ε a step on an H200
    mass = _mass_tolerance(dtype, data["grid"].nt) * (2 if nx > 100 else 1)
    assert np.abs(mu.sum(axis=2) - 1).max() <= mass
    assert mu.min() >= 0


def test_a_block_far_wider_than_the_grid_gives_the_same_sweeps(device, monkeypatch):
    data = _batch(9, 3, 2, seed=7)
    U, mu, status = _sweeps(data, "program", device, "float64")
    program = triton_sweeps._program

    def wide(B: int, nx: int, layout: str | None) -> dict | None:
        launch = program(B, nx, layout)
        launch["LOG_X"] += 3   # 128 lanes for 9 points
        return launch

    monkeypatch.setattr(triton_sweeps, "_program", wide)
    U_wide, mu_wide, status_wide = _sweeps(data, "program", device, "float64")
    np.testing.assert_array_equal(status_wide, status)
    assert _rel(U_wide, U) <= 1e-12 and _rel(mu_wide, mu) <= 1e-12


def test_newton_seeded_by_a_guess_matches_numpy_and_the_thread_layout(device):
    data = _batch(12, 3, 2, seed=5)
    grid = data["grid"]
    guess = np.sin(2 * grid.x) * np.ones((2, grid.nt + 1, 1))
    U, _, status = _sweeps(data, "program", device, "float64", guess=guess)
    U_thread, _, status_thread = _sweeps(data, "thread", device, "float64", guess=guess)
    np.testing.assert_array_equal(status, status_thread)
    for b in range(2):
        U_ref = np.empty((grid.nt + 1, grid.nx))
        U_ref[-1] = data["U_T"][b]
        numba_kernels.hjb_sweep(U_ref, data["F"][b], guess[b], True, data["nu"][b], grid.h,
                                grid.dt, 1.0 / (grid.h * grid.weights), 1.0 / grid.weights,
                                64 * np.finfo(float).eps, 50)
        assert _rel(U[b], U_ref) <= TOLERANCE["float64"]
        assert _rel(U[b], U_thread[b]) <= TOLERANCE["float64"]


def test_a_newton_step_that_does_not_converge_is_flagged_for_its_problem(device):
    data = _batch(8, 3, 2)
    data["F"][:] = 0.0
    data["U_T"][:] = 0.0
    data["F"][1, 1, 3] = 50.0  # a kink that two Newton steps cannot resolve, in problem 1 only
    U, _, status = _sweeps(data, "program", device, "float64", max_newton=2)
    _, _, status_thread = _sweeps(data, "thread", device, "float64", max_newton=2)
    np.testing.assert_array_equal(status, status_thread)
    bad, iterations = status
    assert list(bad) == [-1, 1]
    assert iterations[0] == data["grid"].nt < iterations[1]  # zero data: one Newton step each
    assert np.isfinite(U).all()


def test_the_solver_takes_the_layout_of_the_module_setting(device, monkeypatch):
    monkeypatch.setattr(triton_sweeps, "LAYOUT", "program")
    monkeypatch.setattr(triton_sweeps, "_LAUNCHED", set())
    data = _batch(10, 3, 2, seed=6)
    grid = data["grid"]
    be = mw.get_backend("torch", device, "float64")
    fd = FiniteDifferences(grid, data["nu"][:, None], be, kernels=kernels.TRITON)
    U = fd.solve_hjb(be.asarray(data["U_T"]), be.asarray(data["F"]))
    M = fd.solve_fp(U, be.asarray(data["mu0"] / grid.weights))
    fd.check_newton()
    assert triton_sweeps._LAUNCHED == {"hjb_program", "fp_program"}
    for b in range(2):
        U_ref, mu_ref = _reference_sweeps(grid, data["nu"][b], data["U_T"][b], data["F"][b],
                                          data["mu0"][b])
        assert _rel(U[b], U_ref) <= TOLERANCE["float64"]
        assert _rel(M[b], mu_ref / grid.weights) <= TOLERANCE["float64"]


def test_an_unknown_layout_is_refused_by_name():
    pytest.importorskip("torch")
    with pytest.raises(ValueError,
                       match=r"layout='warp' is not one of \('auto', 'thread', 'program'\)"):
        triton_sweeps.hjb_sweep(None, np.zeros((1, 2, 3)), None, None, 0.1, 0.1, None, None,
                                1e-9, 5, layout="warp")


def test_auto_takes_the_measured_layout_per_sweep_batch_and_dtype(monkeypatch):
    torch = pytest.importorskip("torch")
    f32, f64 = torch.zeros(1, dtype=torch.float32), torch.zeros(1, dtype=torch.float64)
    monkeypatch.setattr(triton_sweeps, "THREAD_FROM", {"float64": 3072})
    choose = triton_sweeps.chosen_layout
    assert choose("hjb", 3071, f64) == choose("fp", 10**6, f64) == "program"
    assert choose("hjb", 3072, f64) == "thread"
    assert choose("hjb", 10**6, f32) == "program"
    assert choose("hjb", 1, f64, "thread") == choose("fp", 10**6, f32, "thread") == "thread"
    monkeypatch.setattr(triton_sweeps, "LAYOUT", "thread")
    assert choose("fp", 1, f32) == "thread"


def test_a_nan_in_the_data_is_flagged_not_taken_for_convergence(device):
    data = _batch(8, 3, 2)
    data["F"][0, 1, 4] = np.nan
    _, _, status = _sweeps(data, "program", device, "float32")
    bad, iterations = status
    assert list(bad) == [1, -1]
    assert iterations[0] >= 50 > iterations[1]


@pytest.mark.parametrize("layout", ["program", "thread"])
def test_newton_starts_from_the_guess_shifted_by_the_change_at_the_later_level(device, layout):
    """A guess off the solution by a constant per problem: shifted by the change found at
    level n + 1, it starts Newton at the solution, so every level converges in its first
    iteration (from the unshifted guess each would take several)."""
    data = _batch(12, 5, 2, seed=6)
    grid = data["grid"]
    exact, _, status = _sweeps(data, layout, device, "float64")
    assert (status[1] > 2 * grid.nt).all()   # from u^{n+1}: more than two per level
    guess = exact + np.array([3.0, -2.0])[:, None, None]
    U, _, status = _sweeps(data, layout, device, "float64", guess=guess)
    np.testing.assert_array_equal(status[1], [grid.nt, grid.nt])
    assert _rel(U, exact) <= TOLERANCE["float64"]
    for b in range(2):   # the compiled loops start the same way
        U_ref = np.empty((grid.nt + 1, grid.nx))
        U_ref[-1] = data["U_T"][b]
        its, bad = numba_kernels.hjb_sweep(U_ref, data["F"][b], guess[b], True, data["nu"][b],
                                           grid.h, grid.dt, 1.0 / (grid.h * grid.weights),
                                           1.0 / grid.weights, 64 * np.finfo(float).eps, 50)
        assert (its, bad) == (grid.nt, -1)
