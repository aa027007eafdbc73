"""The fast paths of the 2-D CPU solver against plain references: the compiled ILU-BiCGStab
against a sparse direct solve, inexact Newton updates against tight ones."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import mfgwork as mw
from mfgwork.numerics.fdm2d import equilibrium as eq
from mfgwork.numerics.fdm2d import sweeps
from mfgwork.numerics.fdm2d.ilu_kernels import ilu_bicgstab, transpose_stencil
from mfgwork.numerics.fdm2d.stencil import Stencil


def stencil_matrix(nx, D, W, E, S, N):
    """The 5-point matrix of a flattened stencil (rows k = j·nx + i)."""
    n = D.size
    k = np.arange(n)
    A = sp.diags(D) + sp.csr_matrix((W[1:], (k[1:], k[1:] - 1)), shape=(n, n))
    A = A + sp.csr_matrix((E[:-1], (k[:-1], k[:-1] + 1)), shape=(n, n))
    A = A + sp.csr_matrix((S[nx:], (k[nx:], k[nx:] - nx)), shape=(n, n))
    return (A + sp.csr_matrix((N[:-nx], (k[:-nx], k[:-nx] + nx)), shape=(n, n))).tocsc()


@pytest.mark.parametrize("relax", [0.0, 0.9])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize(("nx", "ny"), [(13, 9), (4, 10)])  # odd and even rows (in pairs)
def test_ilu_bicgstab_matches_a_sparse_direct_solve(relax, transpose, nx, ny):
    rng = np.random.default_rng(3)
    W, E, S, N = (-rng.random((ny, nx)) for _ in range(4))
    W[:, 0] = E[:, -1] = S[0, :] = N[-1, :] = 0.0  # no neighbours beyond the grid
    D = 5.0 - (W + E + S + N)
    if transpose:
        W, E, S, N = transpose_stencil(W, E, S, N)
    flat = [np.ascontiguousarray(a).reshape(-1) for a in (D, W, E, S, N)]
    b = rng.standard_normal(nx * ny)
    x = np.zeros_like(b)
    its, rel = ilu_bicgstab(nx, *flat, b, x, 1e-13, 500, relax)
    exact = sla.spsolve(stencil_matrix(nx, *flat), b)
    assert 0 < its < 60 and rel <= 1e-13
    assert np.max(np.abs(x - exact)) <= 1e-11 * np.max(np.abs(exact))


def room_setup(n=31, nt=30, solver="ilu"):
    setup = eq.build(mw.Room(congestion=1.0), n, n, nt, mw.get_backend("numpy"), solver)
    return setup, np.stack([setup.m0] * (nt + 1), axis=-3)


def test_inexact_newton_gives_the_tight_best_response(monkeypatch):
    setup, M = room_setup()
    U1, M1, _ = eq.best_response(setup, M)
    loose = setup.scheme.krylov_iterations
    monkeypatch.setattr(sweeps, "NEWTON_ETA_MAX", setup.scheme.newton_rtol)  # tight updates
    setup, M = room_setup()
    U2, M2, _ = eq.best_response(setup, M)
    tight = setup.scheme.krylov_iterations
    assert loose < tight
    assert np.max(np.abs(U1 - U2)) <= 1e-10 * (1 + np.max(np.abs(U2)))
    assert np.max(np.abs(M1 - M2)) <= 1e-10 * np.max(M2)


@pytest.mark.parametrize("solver", ["ilu", "krylov"])
def test_warm_started_sweeps_give_the_cold_best_response(solver):
    """Near the fixed point, Newton from the previous iterate's U and FP solves from the
    previous sweep's masses (shifted by this sweep's change at the level before) take fewer
    iterations and reach the best response of cold sweeps: with ILU-BiCGStab and with the
    matrix-free Jacobi-BiCGStab of torch and MPS."""
    room = mw.Room(congestion=1.0)
    r = mw.solve_2d(room, nx=31, nt=30, tol=1e-3, progress=False)
    warm, _ = room_setup(solver=solver)
    U0, M0, _ = eq.best_response(warm, r.M, r.U)
    cold, _ = room_setup(solver=solver)
    U1c, M1c, _ = eq.best_response(cold, M0)  # no guess, no previous FP sweep
    k0, n0 = warm.scheme.krylov_iterations, warm.scheme.newton_iterations
    U1, M1, _ = eq.best_response(warm, M0, U0)
    assert warm.scheme.newton_iterations - n0 < 0.7 * cold.scheme.newton_iterations
    assert warm.scheme.krylov_iterations - k0 < 0.7 * cold.scheme.krylov_iterations
    assert np.max(np.abs(U1 - U1c)) <= 1e-10 * (1 + np.max(np.abs(U1c)))
    assert np.max(np.abs(M1 - M1c)) <= 1e-10 * np.max(M1c)
    assert (M1 >= 0).all()


def test_fp_sweep_reuses_the_hjb_jacobians():
    """The FP sweep of the U an HJB sweep just returned takes that sweep's last Newton
    matrices J(U^n, m^{n+1}); assembled afresh (another U object, by the array code) they
    give the same M (to round-off: the Newton systems of H = ½|p|² are compiled)."""
    a, M = room_setup()
    F = a.coupling.running_cost(a.coupling.state(M))
    U = a.scheme.solve_hjb(a.U_T, F)
    reused = a.scheme.solve_fp(U, a.m0)
    b, _ = room_setup()
    fresh = b.scheme.solve_fp(U.copy(), b.m0)
    assert np.max(np.abs(reused - fresh)) <= 1e-12 * np.max(fresh)
    assert a.scheme._jacobians[0] is U and b.scheme._jacobians is None


def test_compiled_quadratic_system_matches_the_array_code():
    """The one-pass system of H = ½|p|² against the generic isotropic array code."""
    room = mw.Room(door_widths=(0.15, 0.1))
    grid = room.grid(23, 17, 10)
    be = mw.get_backend("numpy")
    fast = Stencil(grid, room.nu, room.hamiltonian, be)
    slow = Stencil(grid, room.nu, room.hamiltonian, be)
    slow._compiled = None
    assert fast._compiled is not None
    rng = np.random.default_rng(5)
    u, u_next, F = (rng.standard_normal(grid.active.shape) for _ in range(3))
    (cf, Rf), (cs, Rs) = fast.system(u, u_next, F, None), slow.system(u, u_next, F, None)
    for a, b in zip((*cf[:5], Rf), (*cs[:5], Rs), strict=True):
        assert np.max(np.abs(a - b)) <= 1e-12 * (1 + np.max(np.abs(b)))
    assert cf.out is None and cs.out is None


HARD_BARS = {"eps": 0.02, "spill": 0.5, "T": 4.0}  # steep payoffs and spill-over


def test_newton_on_the_attendance_pair_is_certified_and_matches_the_fixed_point():
    from mfgwork.best_response import best_response_residual_2d

    bars = mw.TwoBars(**HARD_BARS)
    grid = {"nx": 13, "nt": 12, "tol": 1e-10, "progress": False}
    newton = mw.solve_2d(bars, **grid)
    fixed = mw.solve_2d(bars, **grid, max_iter=400,
                        iteration=mw.Anderson(depth=5, mixing=0.5, newton=False))
    info = newton.extra["coupling_newton"]
    assert fixed.extra["coupling_newton"] is None and fixed.converged
    assert info["reason"] == "converged" and newton.converged
    assert newton.iterations == info["steps"] < fixed.iterations
    assert info["evaluations"] < fixed.iterations  # fewer best responses, too
    # the independent best response (sparse direct solves) certifies the Newton result
    assert best_response_residual_2d(newton, bars) <= 1e-9
    assert np.max(np.abs(newton.attendance - fixed.attendance)) <= 1e-8
    assert np.max(np.abs(newton.M - fixed.M)) <= 1e-8 * np.max(fixed.M)


def test_a_stalled_newton_hands_over_to_the_fixed_point(monkeypatch):
    from mfgwork.numerics import coupling_newton

    monkeypatch.setattr(coupling_newton, "MIN_STEP", 2.0)  # no step length is accepted
    r = mw.solve_2d(mw.TwoBars(T=2.0), nx=9, nt=6, tol=1e-9, progress=False)
    info = r.extra["coupling_newton"]
    assert info["reason"] == "stalled" and info["steps"] == 1
    assert r.converged and r.check() <= 1e-8
    assert r.iterations == len(r.history["residual"]) > info["steps"]
    assert r.history["time_hjb"][0] == 0.0 < r.history["time_hjb"][1]


def test_newton_out_of_steps_returns_its_certified_best_with_a_warning():
    with pytest.warns(mw.ConvergenceWarning, match="max_iter=3"):
        r = mw.solve_2d(mw.TwoBars(T=2.0), nx=9, nt=6, tol=1e-12, max_iter=3, progress=False)
    assert not r.converged and r.iterations == 3 == r.extra["coupling_newton"]["steps"]
    assert r.residual == pytest.approx(r.check(), rel=1e-6)


def test_bicgstab_starts_from_a_guess():
    """The matrix-free BiCGStab from x0: a start that meets the tolerance costs no iteration
    and is returned as it is; a start near the solution takes fewer iterations than x = 0
    to the same tolerance."""
    from mfgwork.numerics.fdm2d.krylov import bicgstab

    setup, M = room_setup(n=21, nt=8, solver="krylov")
    st = setup.scheme.stencil
    c, _ = st.system(setup.U_T + 0.0 * M[0], setup.U_T, 1.0 + 0.0 * M[0], None)
    op = st.operator(c, transpose=True)
    b = M[0] * st.volumes * st.active * st.inv_dt
    inv = 1.0 / c.diag

    def solve(x0, rtol):
        return bicgstab(op, b, inv, np, rtol=rtol, max_iter=500, fail=1e3 * rtol,
                        check_every=2, x0=x0)

    x, k_cold = solve(None, 1e-12)
    assert k_cold > 4
    same, k = solve(x, 1e-6)
    assert k == 0 and same is x
    near = x * (1.0 + 1e-4 * np.cos(np.arange(x.size).reshape(x.shape)))
    y, k_near = solve(near, 1e-12)
    assert 0 < k_near < k_cold
    assert np.linalg.norm(b - op(y)) <= 1e-12 * np.linalg.norm(b)
    assert np.max(np.abs(y - x)) <= 1e-9 * np.max(np.abs(x))


@pytest.mark.parametrize("transpose", [False, True])
def test_the_neumann_preconditioner_halves_the_iterations_to_the_same_solution(transpose):
    """M⁻¹ = D⁻¹ − D⁻¹ Ō D⁻¹ (the one-launch solves' preconditioner) on a congested room's
    HJB J and FP Jᵀ: J M⁻¹ = I − Ō D⁻¹ Ō D⁻¹ on a random vector, and the matrix-free
    BiCGStab reaches the sparse direct solution in at most 0.6× the iterations of the
    inverse diagonal."""
    from mfgwork.numerics.fdm2d.krylov import bicgstab

    setup = eq.build(mw.Room(congestion=4.0, door_widths=(0.1, 0.1)), 41, 41, 40,
                     mw.get_backend("numpy"), "krylov")
    nt = setup.grids[0].nt
    M = np.stack([setup.m0] * (nt + 1), axis=-3)
    U = setup.scheme.solve_hjb(setup.U_T, setup.coupling.running_cost(M))
    st = setup.scheme.stencil
    c = st.jacobian(U[nt // 2], None, exits=False)
    op = st.operator(c, transpose)
    neumann = st.neumann(c, transpose)
    v = np.random.default_rng(3).standard_normal(c.diag.shape)

    def off(a):
        return op(a) - c.diag * a

    assert np.allclose(op(neumann(v)), v - off(off(v / c.diag) / c.diag), rtol=0, atol=1e-12)
    b = st.active * np.cos(np.arange(v.size).reshape(v.shape))
    A = stencil_matrix(41, *(np.ravel(a) for a in c[:5]))
    exact = sla.spsolve(A.T.tocsc() if transpose else A, np.ravel(b)).reshape(b.shape)
    counts = []
    for precondition in (1.0 / c.diag, neumann):
        x, k = bicgstab(op, b, precondition, np, rtol=1e-10, max_iter=2000, fail=1e-9,
                        check_every=1)
        assert np.max(np.abs(x - exact)) <= 1e-7 * np.max(np.abs(exact))
        counts.append(k)
    assert counts[1] <= 0.6 * counts[0]
