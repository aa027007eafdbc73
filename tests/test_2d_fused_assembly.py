"""The Triton assembly of the HJB step (here H = ½|p|²) and Newton's control on the device
(:mod:`mfgwork.numerics.fdm2d.triton_assembly`) against the stencil's array code and the
host's rule. On CUDA when there is one, else under Triton's CPU interpreter, else skipped."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw
from mfgwork.numerics.fdm2d import sweeps
from mfgwork.numerics.fdm2d.fused_assembly import FusedAssembly, fused_assembly_serves
from mfgwork.numerics.fdm2d.fused_krylov import FusedBiCGStab
from mfgwork.numerics.fdm2d.stencil import Stencil

torch = pytest.importorskip("torch")


@pytest.fixture
def device(monkeypatch) -> str:
    return triton_device(monkeypatch)


def _rooms(device: str, nx: int = 9) -> tuple[Stencil, list]:
    """Two rooms of one size with their own doors, obstacle and ν, as a batch."""
    be = mw.get_backend("torch", device, "float64")
    rooms = [mw.Room(door_widths=(0.2, 0.3)), mw.Room(sigma=0.5, door_widths=(0.4, 0.2))]
    grids = [r.grid(nx, nx, 4) for r in rooms]
    return Stencil(grids, [r.nu for r in rooms], rooms[0].hamiltonian, be), grids


def test_the_assembly_is_the_stencils_system(device):
    st, grids = _rooms(device)
    g = torch.Generator().manual_seed(2)
    shape = (2, *grids[0].active.shape)
    u, u_next, F = (torch.rand(shape, generator=g, dtype=torch.float64).to(device)
                    for _ in range(3))
    u = u * 3.0 - 1.0   # gradients of both signs
    x = 0.1 * torch.rand(shape, generator=g, dtype=torch.float64).to(device)
    solver = FusedBiCGStab(shape, u, False, 2, graphs=False, persistent=True)
    assembly = FusedAssembly(st, shape, solver)
    out = torch.zeros_like(u)
    solver.sets[0]["x"].copy_(x)
    assembly.system(u, out, u_next, F, subtract=True)
    assert bool((out == u - x).all())
    c, R = st.system(u - x, u_next, F, None)
    for got, ref in zip(solver.coefs[:5], c[:5], strict=True):
        assert float((got - ref).abs().max()) <= 1e-12 * float(ref.abs().max())
    assert float((solver.coefs[5] - 1.0 / c.diag).abs().max()) <= 1e-14 * float(
        (1.0 / c.diag).abs().max())
    for got in (solver.sets[0]["r"], solver.r_hat):
        assert float((got - R).abs().max()) <= 1e-12 * float(R.abs().max())
    assert float(solver.p[0].abs().max()) == 0.0 == float(solver.v[0].abs().max())
    part = assembly.part
    r_max, u_max, sq = part[:, 0].max(-1).values, part[:, 1].max(-1).values, part[:, 2].sum(-1)
    assert torch.allclose(r_max, R.abs().amax((-2, -1)), rtol=1e-12)
    assert bool((u_max == (u - x).abs().amax((-2, -1))).all())
    assert torch.allclose(sq, (R * R).sum((-2, -1)), rtol=1e-12)
    assert fused_assembly_serves(st)
    assert fused_assembly_serves(Stencil(grids[0], 0.1, mw.Power(q=2.0), st.backend))


def test_the_assembly_from_newtons_start_is_the_stencils_system(device):
    """The system at Newton's start of an HJB level, formed by the kernel from the guess's
    levels n and n+1 and u^{n+1} (:meth:`Scheme2D.newton_start`: exits keep their cost),
    and the FP step's Jacobian alone, rounded into a float32 solver by the same launch."""
    st, grids = _rooms(device)
    scheme = sweeps.Scheme2D(st, solver="krylov")
    g = torch.Generator().manual_seed(3)
    shape = (2, *grids[0].active.shape)
    g_n, g_next, u_next, F = (torch.rand(shape, generator=g, dtype=torch.float64).to(device)
                              * 3.0 - 1.0 for _ in range(4))
    solver = FusedBiCGStab(shape, u_next, False, 2, graphs=False, persistent=True)
    assembly = FusedAssembly(st, shape, solver)
    out = torch.zeros_like(u_next)
    assembly.system(g_n, out, u_next, F, subtract=False, start=g_next)
    start = scheme.newton_start(u_next, g_n, g_next)
    assert float((out - start).abs().max()) <= 1e-15 * float(start.abs().max())
    assert bool((out != g_n).any()) and bool((out != u_next).any())
    c, R = st.system(start, u_next, F, None)
    for got, ref in zip((*solver.coefs[:5], solver.sets[0]["r"]), (*c[:5], R), strict=True):
        assert float((got - ref).abs().max()) <= 1e-12 * float(ref.abs().max())
    low = FusedBiCGStab(shape, u_next, True, 2, graphs=False, persistent=True,
                        dtype=torch.float32)
    fp = FusedAssembly(st, shape, low)
    fp.jacobian(start)
    c = st.jacobian(start, None, exits=False)
    for got, rounded, ref in zip(fp.coefs[:5], low.coefs[:5], c[:5], strict=True):
        assert float((got - ref).abs().max()) <= 1e-12 * float(ref.abs().max())
        assert bool((rounded == got.to(torch.float32)).all())


@pytest.mark.parametrize("first", [True, False])
def test_the_control_is_the_hosts_newton_rule_per_problem(device, first):
    """Newton's test, the inexact update's tolerance and the skipped update, as
    :meth:`Scheme2D._newton_measures` and :meth:`Scheme2D._newton_rtol` decide them for each
    problem alone: a problem whose test passes makes no iteration while another updates."""
    st, grids = _rooms(device)
    scheme = sweeps.Scheme2D(st, solver="krylov")
    shape = (2, *grids[0].active.shape)
    g = torch.Generator().manual_seed(4)
    u, u_next, F = (torch.rand(shape, generator=g, dtype=torch.float64).to(device)
                    for _ in range(3))
    solver = FusedBiCGStab(shape, u, False, 2, graphs=False, persistent=True)
    assembly = FusedAssembly(st, shape, solver)
    assembly.system(u, torch.zeros_like(u), u_next, F, subtract=False)
    c, R = st.system(u, u_next, F, None)
    size, scale, norm = scheme._newton_measures(u, R)
    previous_host = None if first else 3.0 * norm
    previous = torch.zeros(2, dtype=torch.float64, device=device)
    if not first:
        previous.copy_(torch.as_tensor(previous_host))
        # the level's first update was made and its solve is reported
        assembly.report.copy_(torch.tensor([0.0, 1.0, 5.0, 1e-4, 1.0, 0.0]))
        solver.status.copy_(torch.tensor([[7.0, 1e-9, 1.0], [9.0, 2e-9, 1.0]],
                                         dtype=torch.float64))
        solver.ctl[0] = 1e-6
    assembly.decide(previous, scheme, first, False)
    report = assembly.report.cpu().numpy()
    # the report's test is each problem's over its own tolerance
    assert report[0] == pytest.approx(float(np.max(size)) / scheme.newton_tol, rel=1e-12)
    rtol = np.array([scheme._newton_rtol(scale[[i]], norm[[i]], None if first
                                         else previous_host[[i]]) for i in range(2)])
    # the solve stops at ‖r‖₂ ≤ ctl[0]·b_norm: each problem's tolerance is in its b_norm
    assert float(solver.ctl[0]) == 1.0
    assert float(solver.ctl[1]) == scheme.max_krylov   # the tests fail: updates follow
    assert torch.allclose(solver.b_norm.cpu(), torch.as_tensor(rtol * norm), rtol=1e-12)
    assert torch.allclose(previous.cpu(), torch.as_tensor(norm), rtol=1e-12)
    if first:
        assert list(report[1:5]) == [0.0, 0.0, 0.0, 1.0]
    else:
        assert list(report[1:3]) == [2.0, 14.0]
        assert report[3] == pytest.approx(2e-3, rel=1e-12) and report[4] == 1.0
    # once one test passes, that problem makes no iteration and keeps ‖R‖₂ of its last
    # update; once both pass, the next solve is skipped
    low, high = int(np.argmin(size)), int(np.argmax(size))
    before = previous.clone()
    previous[high] = 5.0 * float(norm[high])
    scheme.newton_tol = float(np.sqrt(size[low] * size[high]))
    assembly.decide(previous, scheme, False, False)
    assert float(solver.ctl[1]) == scheme.max_krylov and float(assembly.report[5]) == 0.0
    assert float(solver.b_norm[low]) == math.inf
    want = scheme._newton_rtol(scale[[high]], norm[[high]], 5.0 * norm[[high]]) * norm[high]
    assert float(solver.b_norm[high]) == pytest.approx(want, rel=1e-12)
    assert float(previous[low]) == float(before[low])
    assert float(previous[high]) == pytest.approx(float(norm[high]), rel=1e-12)
    before = previous.clone()
    scheme.newton_tol = 2.0 * float(np.max(size))
    assembly.decide(previous, scheme, True, False)
    assert float(solver.ctl[1]) == 0.0 and float(assembly.report[5]) == 1.0
    assert bool((previous == before).all())
    # a tolerance per problem (inexact Picard of a batch): the problem of the larger test
    # passes its loose one, the other updates against its tight one
    tols = np.empty(2)
    tols[high], tols[low] = 2.0 * size[high], 0.5 * size[low]
    scheme.newton_tol = tols
    assembly.decide(previous, scheme, True, False)
    assert float(solver.ctl[1]) == scheme.max_krylov and float(assembly.report[5]) == 0.0
    assert float(solver.b_norm[high]) == math.inf and math.isfinite(float(solver.b_norm[low]))
    assert float(assembly.report[0]) == pytest.approx(2.0, rel=1e-12)


def test_the_fp_start_and_the_balance_are_the_array_codes(device):
    """The FP step's start from a guess (x, r = r̂ = b − Jᵀx, p = v = 0, ‖b‖₂) and its mass
    balance, by the Triton kernels, against the solver's array start and
    :meth:`.sweeps.Scheme2D._conserved`."""
    from mfgwork.numerics.fdm2d.stencil import Coefficients

    st, grids = _rooms(device)
    g = torch.Generator().manual_seed(4)
    shape = (2, *grids[0].active.shape)
    u = (torch.rand(shape, generator=g, dtype=torch.float64) * 3.0 - 1.0).to(device)
    mass, guess, x = (torch.rand(shape, generator=g, dtype=torch.float64).to(device)
                      * st.active for _ in range(3))
    solver = FusedBiCGStab(shape, u, True, 2, graphs=False, persistent=True)
    assembly = FusedAssembly(st, shape, solver)
    assembly.jacobian(u)
    solver.p.fill_(1.0)
    solver.v.fill_(1.0)
    assembly.fp_start(mass, guess)
    c = Coefficients(*solver.coefs[:5], None)
    ref = FusedBiCGStab(shape, u, True, 2, graphs=False, persistent=True)
    ref.start(c[:5], mass * st.inv_dt, guess, st.operator(c, transpose=True))
    assert bool((solver.x == ref.x).all())
    scale = float((mass * st.inv_dt).abs().max())
    for got, want in ((solver.sets[0]["r"], ref.sets[0]["r"]), (solver.r_hat, ref.r_hat)):
        # the same operations (on CUDA the compilers may fuse multiply-adds differently)
        assert float((got - want).abs().max()) <= 1e-14 * scale
    assert torch.allclose(solver.b_norm, ref.b_norm, rtol=1e-14, atol=0.0)
    assert float(solver.p[0].abs().max()) == 0.0 == float(solver.v[0].abs().max())
    # from the masses plus the previous sweep's step, formed by the kernel
    r = solver.sets[0]["r"].clone()
    step = (guess + x, mass + x)   # its difference is guess − mass
    assembly.fp_start(mass, mass, step=step)
    assert float((solver.x - guess).abs().max()) <= 1e-15 * float(guess.abs().max())
    assert float((solver.sets[0]["r"] - r).abs().max()) <= 1e-13 * scale
    scheme = sweeps.Scheme2D(st, solver="krylov")
    balanced = assembly.balanced(x, mass)
    want = scheme._conserved(c, x, mass * st.inv_dt)
    assert float((balanced - want).abs().max()) <= 1e-14 * float(want.abs().max())
    rows = c.diag + c.W + c.E + c.S + c.N
    kept = (balanced * rows).sum((-2, -1))
    assert torch.allclose(kept, (mass * st.inv_dt).sum((-2, -1)), rtol=1e-14, atol=0.0)
    assert not torch.allclose((x * rows).sum((-2, -1)), kept, rtol=1e-3)


def _fp_step(device: str, seed: int, dtype: torch.dtype) -> tuple:
    """An FP step of two 13² rooms with a solver of ``dtype``, its Jacobian assembled:
    (stencil, u, the masses μⁿ, solver, assembly, J's coefficients)."""
    from mfgwork.numerics.fdm2d.stencil import Coefficients

    st, grids = _rooms(device, nx=13)
    g = torch.Generator().manual_seed(seed)
    shape = (2, *grids[0].active.shape)
    u = (torch.rand(shape, generator=g, dtype=torch.float64) * 3.0 - 1.0).to(device)
    mass = torch.rand(shape, generator=g, dtype=torch.float64).to(device) * st.active
    solver = FusedBiCGStab(shape, u, True, 2, graphs=False, persistent=True, dtype=dtype)
    assembly = FusedAssembly(st, shape, solver)
    assembly.jacobian(u)
    return st, u, mass, solver, assembly, Coefficients(*assembly.coefs[:5], None)


def test_a_mixed_precision_fp_step_reaches_float64_accuracy(device):
    """A float32 solver for float64 problems: the FP step's refinement rounds reach the
    exact solves' tolerance (far below float32's), the float64 solve's solution, and report
    the float64 residual; the mass balance uses J in float64; a step that starts at its
    solution costs no iteration."""
    from mfgwork.numerics.fdm2d.fused_assembly import MIXED_RTOL, ROUNDS

    st, u, mass, solver, assembly, c = _fp_step(device, 5, torch.float32)
    shape = tuple(u.shape)
    assert assembly.mixed and ROUNDS >= 2
    assert float((solver.coefs.double() - assembly.coefs).abs().max()) <= 1e-6 * float(
        assembly.coefs.abs().max())
    rtol = 1e-13
    solver.set_control(rtol, 400)
    x, report = assembly.fp_solve(mass, mass)
    b = mass * st.inv_dt
    residual = b - st.operator(c, transpose=True)(x)
    relative = (residual * residual).sum((-2, -1)).sqrt() / (b * b).sum((-2, -1)).sqrt()
    assert float(relative.max()) <= 10 * rtol < 1e-3 * MIXED_RTOL
    # the same residual up to its own rounding (about ε‖b‖; on CUDA with fused
    # multiply-adds)
    assert torch.allclose(report[:, 1], relative, rtol=1e-6, atol=1e-15)
    assert bool((report[:, 0] > 0).all()) and bool((report[:, 2] == 1.0).all())
    ref = FusedBiCGStab(shape, u, True, 2, graphs=False, persistent=True)
    want, _ = ref.solve(c[:5], b, None, st.operator(c, transpose=True), rtol=1e-14,
                        max_iter=400, fail=1e-12)
    assert float((x - want).abs().max()) <= 1e-11 * float(want.abs().max())
    balanced = assembly.balanced(x, mass)
    rows = c.diag + c.W + c.E + c.S + c.N
    assert torch.allclose((balanced * rows).sum((-2, -1)), b.sum((-2, -1)), rtol=1e-14,
                          atol=0.0)
    solver.set_control(float(report[:, 1].max()) * 1.01, 400)
    again, report = assembly.fp_solve(mass, x.clone())
    assert float(report[:, 0].max()) == 0.0 and bool((again == x).all())


@pytest.mark.parametrize("mixed", [False, True])
def test_an_fp_step_solves_each_problem_to_its_own_tolerance(device, mixed):
    """FP tolerances per problem (a batch's inexact Picard, ``set_tolerances``): each
    problem's solve stops at its own relative residual, the loose one in fewer iterations,
    also through the refinement rounds of a float32 solver."""
    st, u, mass, solver, assembly, c = _fp_step(device, 7, torch.float32 if mixed
                                                else torch.float64)
    assert assembly.mixed == mixed
    rtols = np.array([1e-2, 1e-11])
    solver.set_tolerances(rtols, 400)
    assert float(solver.ctl[0]) == pytest.approx(1e-11, rel=1e-6)   # (the solver's dtype)
    x, report = assembly.fp_solve(mass, mass)
    b = mass * st.inv_dt
    residual = b - st.operator(c, transpose=True)(x)
    relative = ((residual * residual).sum((-2, -1)).sqrt()
                / (b * b).sum((-2, -1)).sqrt()).cpu().numpy()
    assert relative[0] <= rtols[0] and relative[1] <= rtols[1]
    assert relative[0] > 1e3 * rtols[1]    # the loose problem is not solved further
    assert float(report[0, 0]) < float(report[1, 0])
    assert bool((report[:, 2] == 1.0).all())
    # the report's residuals are over l·‖b‖₂: within the tightest tolerance (the FP sweep's
    # check against it)
    assert float(report[:, 1].max()) <= 1.01e-11
    solver.set_tolerances(1e-11, 400)   # one tolerance again: no problem loosened
    assert bool((solver.loosen == 1.0).all())


def test_mixed_precision_newton_updates_ask_float32_accuracy_at_most(device):
    """The control's tightest update tolerance is MIXED_RTOL with a float32 solver, and a
    system after a skipped update (x = 0) leaves J, R and the measures as they were."""
    from mfgwork.numerics.fdm2d.fused_assembly import MIXED_RTOL

    st, grids = _rooms(device)
    shape = (2, *grids[0].active.shape)
    g = torch.Generator().manual_seed(6)
    u, u_next, F = (torch.rand(shape, generator=g, dtype=torch.float64).to(device)
                    for _ in range(3))
    scheme = sweeps.Scheme2D(st, solver="krylov")
    solver = FusedBiCGStab(shape, u, False, 2, graphs=False, persistent=True,
                           dtype=torch.float32)
    mixed = FusedAssembly(st, shape, solver)
    assert float(mixed.constants(scheme)[3]) == max(scheme.newton_rtol, MIXED_RTOL)
    plain = FusedAssembly(st, shape, FusedBiCGStab(shape, u, False, 2, graphs=False,
                                                   persistent=True))
    assert float(plain.constants(scheme)[3]) == scheme.newton_rtol
    out = torch.zeros_like(u)
    mixed.system(u, out, u_next, F, subtract=False)
    assert solver.coefs.dtype == torch.float32 and mixed.part.dtype == torch.float64
    kept = [a.clone() for a in (solver.coefs, solver.sets[0]["r"], mixed.part)]
    scheme.newton_tol = 1e300   # every test passes: the next update is skipped
    mixed.decide(torch.zeros(2, dtype=torch.float64, device=device), scheme, True, False)
    assert float(mixed.report[5]) == 1.0
    solver.coefs.fill_(7.0)   # would be overwritten by an assembly
    kept[0].fill_(7.0)
    later = u + 1.0
    mixed.system(later, out, u_next, F, subtract=True)
    assert bool((out == later).all())
    for a, b in zip(kept, (solver.coefs, solver.sets[0]["r"], mixed.part), strict=True):
        assert bool((a == b).all())
