"""The generic torch path of the FDM sweeps (MPS, and CUDA without Triton), under emulation:
few kernel launches per time step, float32 only, no host reads in the time loop, agreement
with NumPy float64, and ``torch.compile`` checked with an eager fallback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.compiling import CheckedCompile, check_compile_steps, wants_compile
from mfgwork.core.profiling import kernel_launches
from mfgwork.numerics.fdm import sweeps
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.fdm.tridiag import (
    pcr_apply,
    pcr_factor,
    solve_lapack,
    solve_pcr_zero_ends,
)

torch = pytest.importorskip("torch")

# Kernels of the generic path for n unknowns, L = ⌈log2 n⌉ PCR levels: a Newton iteration
# of ½|p|² is 5 (system) + 1 (unit diagonal) + 3 L (PCR, its last division folded into the
# update), an HJB step adds 1 (its rhs), an FP step is one matrix-vector product with the
# inverse step matrix where all fit in DENSE_FP_ENTRIES, else 2 L. Achieved
# (benchmarks/torch_path.py, nx = 52, 4 Newton iterations): 97.3 per HJB step and 2.5 per
# FP step, sweep set-up included; before, 338 and 27.0 (and 801 and 151 before the first
# launch reduction).


def _levels(n: int) -> int:
    return int(np.ceil(np.log2(n)))


def _newton_launches(n: int) -> int:
    return 6 + 3 * _levels(n)


def _santa_fe_inputs(be: mw.Backend, n: int = 52):
    problem = mw.SantaFeBar()
    grid = problem.grid(n, n)
    F = problem.coupling(grid, be).running_cost(be.asarray(np.linspace(0.3, 0.9, grid.nt)))
    return problem, grid, F, problem.terminal_cost(grid, be), problem.initial_density(grid, be)


def test_kernel_launches_per_time_step_stay_reduced(mps_emulation):
    problem, grid, F, U_T, m0 = _santa_fe_inputs(mps_emulation)
    fd = FiniteDifferences(grid, problem.nu, mps_emulation)
    (U, _), hjb = kernel_launches(fd._hjb_fixed, U_T, F, None, 4)
    M, fp = kernel_launches(fd.solve_fp, U, m0)
    hjb_per_step, fp_per_step = sum(hjb.values()) / grid.nt, sum(fp.values()) / grid.nt
    print(f"launches per time step: HJB {hjb_per_step:.1f} (4 Newton), FP {fp_per_step:.1f}")
    assert hjb["aten::mul"] > 0 and fp["aten::mul"] > 0   # the profiler sees the kernels
    assert hjb_per_step <= 4 * _newton_launches(grid.nx) + 1 + 1   # (set-up, per step)
    assert fp_per_step <= 1 + 2.5
    mass = mw.to_numpy(M).astype(np.float64) @ grid.weights   # the reduced FP keeps Σ w m = 1
    assert np.max(np.abs(mass - 1.0)) <= 2e-5 and mw.to_numpy(M).min() >= 0.0


def _batch_of_two(be: mw.Backend, nx: int, nt: int):
    grid = mw.Grid(0.0, 1.0, nx, 1.0, nt)
    fd = FiniteDifferences(grid, np.array([[0.1], [0.3]]), be)
    F = be.asarray(np.cos(3 * grid.x) * np.ones((2, nt, 1)))
    return grid, fd, F, be.asarray(np.sin(2 * grid.x)), be.asarray(np.ones(nx))


@pytest.mark.parametrize(("nx", "dense"), [(52, True), (201, False)])
def test_launches_per_time_step_grow_with_log_n(mps_emulation, monkeypatch, nx, dense):
    """Ten more time steps cost exactly ten times the kernels of a step: 4 (6 + 3 L) + 1 for
    HJB with 4 Newton iterations, and 1 (inverse step matrices) or 2 L for FP, L = ⌈log2
    nx⌉, whatever the batch."""
    if not dense:
        monkeypatch.setattr(sweeps, "DENSE_FP_ENTRIES", 0)
    counts = []
    for nt in (10, 20):
        _, fd, F, U_T, m0 = _batch_of_two(mps_emulation, nx, nt)
        fd.solve_fp(fd._hjb_fixed(U_T, F, None, 4)[0], m0)   # constants made once
        (U, _), hjb = kernel_launches(fd._hjb_fixed, U_T, F, None, 4)
        _, fp = kernel_launches(fd.solve_fp, U, m0)
        counts.append((sum(hjb.values()), sum(fp.values())))
    (hjb10, fp10), (hjb20, fp20) = counts
    assert (hjb20 - hjb10, fp20 - fp10) == (10 * (4 * _newton_launches(nx) + 1),
                                           10 * (1 if dense else 2 * _levels(nx)))


def test_fp_with_inverse_step_matrices_is_the_reduced_sweep(mps_emulation, monkeypatch):
    """The FP sweep by inverse step matrices and by PCR levels agree to float32 rounding
    and both keep Σ w m = 1 to a few roundings per step."""
    grid, fd, F, U_T, m0 = _batch_of_two(mps_emulation, 52, 20)
    U = fd._hjb_fixed(U_T, F, None, 4)[0]
    dense = mw.to_numpy(fd.solve_fp(U, m0)).astype(np.float64)
    monkeypatch.setattr(sweeps, "DENSE_FP_ENTRIES", 0)
    reduced = mw.to_numpy(fd.solve_fp(U, m0)).astype(np.float64)
    assert _rel(dense, reduced) <= 2e-6
    for M in (dense, reduced):
        drift = np.max(np.abs(M @ grid.weights - 1.0))
        assert drift <= 4 * grid.nt * np.finfo(np.float32).eps and M.min() >= 0.0


@pytest.mark.parametrize("margin", [1.0, 1e-2])
@pytest.mark.parametrize("n", [3, 17, 52, 201, 1000])
def test_pcr_in_float32_is_as_accurate_as_lapack_in_float32(n, margin):
    """A batch of diagonally dominant M-matrices (diagonal = margin + off-diagonal sums):
    float32 PCR is within 4 times the error of float32 LAPACK against float64 LAPACK, in
    3 + 3 ⌈log2 n⌉ kernels whatever the batch."""
    rng = np.random.default_rng(n)
    lower, upper = -rng.uniform(0, 1, (2, 6, n))
    lower[..., 0] = upper[..., -1] = 0.0
    diag = margin + np.abs(lower) + np.abs(upper)
    rhs = rng.standard_normal((6, n))
    ref = solve_lapack(lower, diag, upper, rhs)
    bands32 = [v.astype(np.float32) for v in (lower, diag, upper, rhs)]
    solve_pcr_zero_ends(*(torch.from_numpy(v) for v in bands32))   # constants made once
    x, launches = kernel_launches(solve_pcr_zero_ends, *(torch.from_numpy(v) for v in bands32))
    lapack32 = np.max(np.abs(solve_lapack(*bands32) - ref))
    assert np.max(np.abs(x.numpy() - ref)) <= 4 * lapack32 + 4 * np.finfo(np.float32).eps
    assert sum(launches.values()) == 3 + 3 * _levels(n)


def test_batched_sweeps_in_float32_agree_with_numpy_float64(mps_emulation):
    """A batch of three diffusions under MPS emulation against the NumPy float64 loops
    solving each problem alone: U within a few float32 roundings, M (from the same U) too."""
    problem, grid, F, U_T, m0 = _santa_fe_inputs(mps_emulation, 40)
    nu = np.array([[0.5], [1.0], [2.0]]) * problem.nu
    fd = FiniteDifferences(grid, nu, mps_emulation)
    U = fd.solve_hjb(U_T, F[None].expand(3, -1, -1))
    M = fd.solve_fp(U, m0)
    be64 = mw.get_backend()
    m0_64 = mw.to_numpy(m0).astype(np.float64)
    for b in range(3):
        ref = FiniteDifferences(grid, float(nu[b, 0]), be64)
        U64 = ref.solve_hjb(mw.to_numpy(U_T).astype(np.float64),
                            mw.to_numpy(F).astype(np.float64))
        M64 = ref.solve_fp(mw.to_numpy(U[b]).astype(np.float64), m0_64)
        assert _rel(U[b], U64) <= 5e-7 and _rel(M[b], M64) <= 1e-5


def test_kernel_count_sees_every_kernel_and_no_view():
    """Views launch nothing; a composite counts its kernels; an operation whose only calls
    are kernel-free bookkeeping (clamp, matrix products) is one kernel."""
    x, m = torch.ones(3, 2, 8), torch.ones(4, 2)
    counts = [sum(kernel_launches(f)[1].values()) for f in (
        lambda: x.unfold(-1, 4, 2).mT.flatten(0, 1)[1:],
        lambda: torch.nn.functional.pad(x, (2, 2)),
        lambda: torch.clamp(x, min=0.0),
        lambda: m @ x[0],
        lambda: m @ x)]
    assert counts == [0, 2, 1, 1, 1]


def test_sweeps_are_float32_without_host_reads_in_the_time_loop(mps_emulation, op_recorder):
    record, seen = op_recorder

    problem, grid, F, U_T, m0 = _santa_fe_inputs(mps_emulation, 21)
    fd = FiniteDifferences(grid, problem.nu, mps_emulation)
    with record:
        U, sizes = fd._hjb_fixed(U_T, F, None, 3)
        M = fd.solve_fp(U, m0)
    assert seen["dtypes"] == {torch.float32}, seen["dtypes"]
    assert not any("_local_scalar_dense" in op or "item" in op for op in seen["ops"])
    assert tuple(sizes.shape) == (2,) and M.dtype == torch.float32


@pytest.mark.parametrize("n", [2, 3, 17, 52, 201])
def test_pcr_factor_and_apply_match_lapack(n):
    rng = np.random.default_rng(n)
    lower, upper = -rng.uniform(0, 1, (2, 3, 5, n))
    lower[..., 0] = upper[..., -1] = 0.0
    diag = 0.5 + np.abs(lower) + np.abs(upper)
    rhs = rng.standard_normal((3, 5, n))
    inv_diag, levels = pcr_factor(*(torch.from_numpy(v) for v in (lower, diag, upper)))
    x = pcr_apply(levels, torch.from_numpy(rhs) * inv_diag)
    assert len(levels) == int(np.ceil(np.log2(n)))
    assert np.allclose(x.numpy(), solve_lapack(lower, diag, upper, rhs), rtol=1e-12,
                       atol=1e-12)


def _rel(a, b) -> float:
    a = mw.to_numpy(a).astype(np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_seed_case_on_the_generic_path_is_the_numpy_scheme():
    """The 52 × 52, 5-iteration case on the generic path in float64 (emulation's code path
    with float64 tensors) reproduces the compiled NumPy loops to round-off (Anderson mixing:
    the same iterates on both)."""
    kw = {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-9, "progress": False,
          "iteration": mw.Anderson()}
    generic64 = mw.Backend(name="torch", device="cpu", dtype="float64", emulate_mps=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        ref = mw.solve(mw.SantaFeBar(), **kw)
        res = mw.solve(mw.SantaFeBar(), backend=generic64, **kw)
    assert res.iterations == ref.iterations == 5
    assert max(_rel(res.U, ref.U), _rel(res.M, ref.M), _rel(res.attendance, ref.attendance)
               ) <= 1e-10


def test_converged_float32_emulation_agrees_with_numpy_float64(mps_emulation):
    """float32 under MPS emulation within 1e-4 relative in U, M and A at the equilibrium."""
    kw = {"nx": 52, "nt": 52, "max_iter": 300, "progress": False}
    ref = mw.solve(mw.SantaFeBar(), tol=2e-5, **kw)
    res = mw.solve(mw.SantaFeBar(), backend=mps_emulation, tol=3e-4, **kw)  # float32's floor
    errors = [_rel(res.U, ref.U), _rel(res.M, ref.M), _rel(res.attendance, ref.attendance)]
    assert res.converged and max(errors) <= 1e-4, errors
    assert res.extra["compiled_steps"]["compiled"] is False   # 'auto' leaves emulation eager


def test_newton_steps_drop_when_the_guess_is_close(mps_emulation):
    """A sweep from the converged U needs fewer Newton iterations: the next sweep uses one
    fewer, and the result still agrees with the adaptive float64 loops."""
    problem, grid, F, U_T, _ = _santa_fe_inputs(mps_emulation, 31)
    fd = FiniteDifferences(grid, problem.nu, mps_emulation)
    U = fd.solve_hjb(U_T, F)
    steps = fd.newton_steps
    U2 = fd.solve_hjb(U_T, F, guess=U)
    assert fd.newton_steps == steps - 1
    be64 = mw.get_backend()
    ref = FiniteDifferences(grid, problem.nu, be64).solve_hjb(
        problem.terminal_cost(grid, be64), mw.to_numpy(F).astype(np.float64))
    assert _rel(U2, ref) <= 1e-5



def test_a_guess_off_by_a_constant_is_as_good_as_the_solution(mps_emulation):
    """Newton starts from the guess shifted by the change found at the later level, so a
    guess off the converged U by a constant serves as well as U itself: one fewer fixed
    Newton step on the device path, and one iteration per level in the adaptive array path
    of a batch."""
    problem, grid, F, U_T, _ = _santa_fe_inputs(mps_emulation, 31)
    fd = FiniteDifferences(grid, problem.nu, mps_emulation)
    U = fd.solve_hjb(U_T, F)
    steps = fd.newton_steps
    U2 = fd.solve_hjb(U_T, F, guess=U + 3.0)
    assert fd.newton_steps == steps - 1
    assert _rel(U2, mw.to_numpy(U).astype(np.float64)) <= 1e-5
    be = mw.get_backend()
    batch_F = np.stack([mw.to_numpy(F).astype(np.float64)] * 2)
    batch_U_T = np.stack([mw.to_numpy(U_T).astype(np.float64)] * 2)
    batch = FiniteDifferences(grid, problem.nu, be)
    exact = batch.solve_hjb(batch_U_T, batch_F)
    assert batch.newton_iterations > 2 * grid.nt   # from u^{n+1}
    batch.newton_iterations = 0
    again = batch.solve_hjb(batch_U_T, batch_F, guess=exact - np.array([1.0, 4.0])[:, None, None])
    assert batch.newton_iterations == grid.nt
    assert _rel(again, exact) <= 1e-13


@pytest.mark.parametrize("failure", ["raises", "differs"])
def test_checked_compile_falls_back_to_eager(monkeypatch, failure):
    def broken_compile(fn, **kwargs):
        def compiled(*args):
            if failure == "raises":
                raise RuntimeError("no compiler here")
            return fn(*args) * 1.01
        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    step = CheckedCompile(lambda a: a * 2.0, "default", "test step", rtol=1e-6)
    a = torch.arange(4.0)
    with pytest.warns(RuntimeWarning, match="torch.compile of the test step disabled"):
        assert torch.equal(step(a), a * 2.0)
    assert step.active is False
    assert torch.equal(step(a + 1), (a + 1) * 2.0)   # eager from now on, no second warning


def test_checked_compile_keeps_an_agreeing_compile(monkeypatch):
    calls = []

    def fake_compile(fn, **kwargs):
        def compiled(*args):
            calls.append(1)
            return fn(*args)
        return compiled

    monkeypatch.setattr(torch, "compile", fake_compile)
    step = CheckedCompile(lambda a: a + 1.0, "default", "test step", rtol=1e-6)
    step(torch.zeros(3))
    step(torch.zeros(3))
    assert step.active and len(calls) == 2 and "compiled" in step.reason


def test_compile_setting_per_device(mock_accelerators, mps_emulation):
    assert wants_compile("auto", mps_emulation)[0] is None
    assert wants_compile(False, mps_emulation) == (None, "compile_steps=False")
    mock_accelerators(mps=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mps = mw.get_backend("torch", "mps")
    mode, why = wants_compile("auto", mps)
    assert mode == "default" and "Metal" in why   # torch 2.13 has Inductor's MPS backend
    assert wants_compile("max-autotune", mps)[0] == "max-autotune"


def test_bad_compile_setting_is_a_parameter_error():
    with pytest.raises(mw.ParameterError, match="compile_steps='fast' is invalid"):
        mw.solve(mw.SantaFeBar(), nx=21, nt=20, compile_steps="fast")
    assert check_compile_steps("reduce-overhead") == "reduce-overhead"
