"""Newton's method on the attendance path, per member of a batch (and for single solves):
certificates checked by an independent best response, hard members, float32, iteration
counts, the torch tangent Jacobian, warm and coarse-to-fine starts, generic problems."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import independent_residual

import mfgwork as mw
from mfgwork.numerics.batch_newton import BatchNewton
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

torch = pytest.importorskip("torch")

SMALL = {"nx": 31, "nt": 30, "progress": False}
HARD = mw.SantaFeBar(threshold=0.2, sigma=0.1, eps=0.001)
MIXED = [mw.SantaFeBar(), mw.SantaFeBar(threshold=0.8, sigma=0.3, eps=0.005), HARD,
         mw.SantaFeBar(threshold=0.5, sigma=1.5, eps=0.01, good=4.0, bad=-12.0)]


def test_torch_tangent_jacobian_matches_compiled_one_and_central_differences():
    from mfgwork.numerics.fdm.tangent_torch import tangent_jacobian_torch
    from mfgwork.numerics.potential import observed_path_jacobian

    grid = mw.SantaFeBar().grid(21, 16)
    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    problems = [mw.SantaFeBar(sigma=0.3), mw.SantaFeBar(sigma=0.8)]
    rng = np.random.default_rng(3)
    Us, mus, refs = [], [], []
    for p in problems:
        fd = FiniteDifferences(grid, p.nu, be)

        def respond(y, fd=fd, p=p):
            U = fd.solve_hjb(np.zeros(grid.nx), -y[:, None] * chi[None, :])
            return U, fd.solve_fp(U, p.initial_density(grid, be)) * grid.weights

        y = rng.uniform(-2.0, 2.0, grid.nt)
        U, mu = respond(y)
        h = 1e-6
        D_fd = np.stack([(respond(y + h * e)[1][1:] @ chi - respond(y - h * e)[1][1:] @ chi)
                         / (2 * h) for e in np.eye(grid.nt)], axis=1)
        Us.append(U), mus.append(mu)
        refs.append((observed_path_jacobian(U, mu, chi, p.nu, grid), D_fd))
    T = torch.from_numpy
    D = tangent_jacobian_torch(T(np.stack(Us)), T(np.stack(mus)), T(chi),
                               T(np.array([p.nu for p in problems])), grid.h, grid.dt,
                               T(1.0 / (grid.h * grid.weights))).numpy()
    for b, (compiled, central) in enumerate(refs):
        scale = np.max(np.abs(compiled))
        assert np.max(np.abs(D[b] - compiled)) < 1e-12 * scale
        assert np.max(np.abs(D[b] - central)) < 1e-7 * scale
    assert np.max(np.abs(D[0] - D[1])) > 1e-3 * np.max(np.abs(D[0]))  # each member its own


@pytest.mark.parametrize("matrix_free, jacobian_dtype", [(True, None), (False, "float64"),
                                                          (False, "float32")])
def test_every_member_is_certified_by_an_independent_best_response(monkeypatch, matrix_free,
                                                                   jacobian_dtype):
    """Conjugate gradients (the CPU's choice) and the dense batched tangent Jacobian with
    batched Cholesky (the devices'; its Jacobians in float32 as on CUDA, or float64) all
    certify every member, the hard one included."""
    monkeypatch.setattr(BatchNewton, "matrix_free", property(lambda self: matrix_free))
    init = BatchNewton.__init__

    def with_jacobian_dtype(self, *args, **kwargs):
        init(self, *args, **kwargs | {"jacobian_dtype": jacobian_dtype})

    monkeypatch.setattr(BatchNewton, "__init__", with_jacobian_dtype)
    out = mw.solve_batch(MIXED, backend="torch", tol=1e-8, **SMALL)
    for p, res in zip(MIXED, out, strict=True):
        assert res.converged and res.residual <= 1e-8
        assert res.params["iteration"]["scheme"] == "newton"
        assert independent_residual(p, res.M) == pytest.approx(res.residual, rel=1e-4)
        assert res.check() == pytest.approx(res.residual, rel=1e-6)


def test_hard_member_inside_an_easy_batch_converges_where_anderson_gives_up():
    batch = [mw.SantaFeBar(threshold=0.4), HARD, mw.SantaFeBar(threshold=0.7, sigma=0.8)]
    out = mw.solve_batch(batch, backend="torch", tol=1e-6, max_iter=120, **SMALL)
    assert all(r.converged for r in out)
    assert independent_residual(HARD, out[1].M) <= 1e-6 * (1 + 1e-4)
    # easy members stop on their own certificate, before the hard one
    assert max(out[0].iterations, out[2].iterations) < out[1].iterations
    with pytest.warns(mw.ConvergenceWarning):
        old = mw.solve_batch(batch, backend="torch", tol=1e-6, max_iter=120,
                             iteration=mw.Anderson(), **SMALL)
    assert not old[1].converged


def test_iteration_counts_drop_on_small_grids():
    """Median iterations per member ≤ 25 (Anderson mixing, the previous batch default, needs
    more than twice that on the same members)."""
    problems = [mw.SantaFeBar(threshold=a, sigma=s) for a in (0.3, 0.55, 0.8)
                for s in (0.4, 0.7, 1.0)]
    new = mw.solve_batch(problems, backend="torch", tol=1e-8, **SMALL)
    old = mw.solve_batch(problems, backend="torch", tol=1e-8, iteration=mw.Anderson(), **SMALL)
    assert all(r.converged for r in new) and all(r.converged for r in old)
    new_median = np.median([r.iterations for r in new])
    assert new_median <= 25 < np.median([r.iterations for r in old]) / 2


def test_single_solves_take_newton_from_the_start():
    problem = mw.SantaFeBar(threshold=0.3, sigma=0.7, eps=0.02)
    res = mw.solve(problem, tol=1e-9, **SMALL)
    old = mw.solve(problem, tol=1e-9, iteration="anderson", **SMALL)
    assert res.converged and old.converged
    assert res.params["iteration"]["system"] == "conjugate gradients (matrix-free)"
    assert res.iterations < old.iterations / 2
    assert independent_residual(problem, res.M) <= 1e-9 * (1 + 1e-4)


def test_float32_members_reach_the_float32_floor():
    problems = [mw.SantaFeBar(), mw.SantaFeBar(threshold=0.4, sigma=0.4, eps=0.03),
                mw.SantaFeBar(threshold=0.8, sigma=1.0, eps=0.01)]
    out = mw.solve_batch(problems, backend="torch", dtype="float32", tol=3e-4, **SMALL)
    for p, res in zip(problems, out, strict=True):
        assert mw.to_numpy(res.M).dtype == np.float32
        assert res.converged and res.residual <= 3e-4
        assert independent_residual(p, res.M) <= 3.3e-4  # float64 check of float32 densities


def test_newton_in_mps_emulation_keeps_float32(mps_emulation):
    problems = [mw.SantaFeBar(), mw.SantaFeBar(threshold=0.4, sigma=0.6, eps=0.05)]
    out = mw.solve_batch(problems, backend=mps_emulation, tol=3e-4, **SMALL)
    for p, res in zip(problems, out, strict=True):
        assert res.params["iteration"]["system_dtype"] == "float32"
        assert res.converged and independent_residual(p, res.M) <= 3.3e-4


def test_initial_starts_batches_from_results_or_paths():
    problems = [mw.SantaFeBar(threshold=0.4), mw.SantaFeBar(threshold=0.6, eps=0.01)]
    cold = mw.solve_batch(problems, backend="torch", tol=1e-8, **SMALL)
    again = mw.solve_batch(problems, backend="torch", tol=1e-8, initial=cold, **SMALL)
    paths = np.stack([mw.to_numpy(r.attendance) for r in cold])
    from_paths = mw.solve_batch(problems, backend="torch", tol=1e-8, initial=paths, **SMALL)
    for c, a, b in zip(cold, again, from_paths, strict=True):
        assert a.converged and b.converged
        assert a.iterations <= 4 < c.iterations and b.iterations <= 4
    coarse = mw.solve_batch(problems, backend="torch", nx=16, nt=15, tol=1e-6, progress=False)
    fine = mw.solve_batch(problems, backend="torch", tol=1e-8, initial=coarse, **SMALL)
    assert all(f.converged and f.iterations < c.iterations for f, c in zip(fine, cold,
                                                                           strict=True))
    with pytest.raises(mw.ParameterError, match="one per problem"):
        mw.solve_batch(problems, backend="torch", initial=cold[:1], **SMALL)
    with pytest.raises(mw.ParameterError, match=r"initial has shape \(1, 31\)"):
        mw.solve_batch(problems, backend="torch", initial=paths[:1], **SMALL)


def test_single_solve_accepts_a_path_and_starts_fine_grids_from_a_coarse_solve():
    problem = mw.SantaFeBar(threshold=0.45, sigma=0.4)
    res = mw.solve(problem, nx=103, nt=102, tol=1e-8, progress=False)
    direct = mw.solve(problem, nx=103, nt=102, tol=1e-8, progress=False, coarse=False)
    assert res.converged and direct.converged
    assert res.extra["coarse_iterations"] > 0 and direct.extra["coarse_iterations"] is None
    assert res.iterations < direct.iterations
    assert independent_residual(problem, res.M) <= 1e-8 * (1 + 1e-4)
    warm = mw.solve(problem, nx=103, nt=102, tol=1e-8, progress=False,
                    initial=mw.to_numpy(res.attendance))
    assert warm.converged and warm.iterations <= 4
    with pytest.raises(mw.ParameterError, match="density path"):
        mw.solve(mw.HopfColeProblem(), nx=21, nt=20, initial=np.ones(20), progress=False)


def test_generic_problems_keep_anderson_mixing_in_batches():
    """Problems without a potential (the verification problems) iterate as before: the batch
    reproduces the single solves and the exact Hopf–Cole solutions to first order."""
    problems = [mw.HopfColeProblem(sigma=s) for s in (0.4, 0.6)]
    out = mw.solve_batch(problems, backend="torch", nx=41, nt=40, tol=1e-9, progress=False)
    for p, res in zip(problems, out, strict=True):
        assert res.converged and res.params["iteration"]["scheme"] == "anderson"
        grid = p.grid(41, 40)
        exact = p.exact_m(grid.t[:, None], grid.x[None, :])
        assert np.max(np.abs(mw.to_numpy(res.M) - exact)) < 0.05 * np.max(exact)
        one = mw.solve(p, nx=41, nt=40, tol=1e-9, progress=False)
        assert np.max(np.abs(mw.to_numpy(res.M) - one.M)) <= 1e-8 * np.max(one.M)


def test_batches_on_fine_grids_start_from_a_coarse_batch():
    problems = [mw.SantaFeBar(), mw.SantaFeBar(threshold=0.4, sigma=0.3, eps=0.01)]
    out = mw.solve_batch(problems, nx=103, nt=102, backend="torch", tol=1e-8, progress=False)
    for p, res in zip(problems, out, strict=True):
        assert res.converged and isinstance(res.extra["coarse_iterations"], int)
        assert res.iterations <= 10
        assert independent_residual(p, res.M) <= 1e-8 * (1 + 1e-4)


@pytest.mark.parametrize("poisoned_call", [2, 4])
def test_a_non_finite_best_response_stops_newton_with_an_error(monkeypatch, poisoned_call):
    from mfgwork.problems import santa_fe

    original = santa_fe.StackedAttendanceCoupling.state
    calls = []

    def poisoned(self, M):   # the observed path of a best response (the first call: z_0)
        calls.append(1)
        z = original(self, M)
        return z * float("nan") if len(calls) == poisoned_call else z

    monkeypatch.setattr(santa_fe.StackedAttendanceCoupling, "state", poisoned)
    with pytest.raises(mw.SolverError, match=f"non-finite values at iteration "
                                             f"{poisoned_call - 1} of Newton"):
        mw.solve_batch(MIXED[:2], backend="torch", coarse=False, tol=1e-10, **SMALL)


def test_a_stall_at_the_precision_floor_says_why():
    """A long horizon with a steep payoff and little noise: the iterate goes far below tol
    but one more best response amplifies its rounding above it; the warning says so, with
    the amplification and the accuracy that is reachable: the float64 floor
    FLOOR_FACTOR · L² ε from the best response's Lipschitz constant L (here about 3e5), which
    the certificate reached."""
    bar = mw.SantaFeBar(T=80, sigma=0.05, threshold=0.55, eps=0.01)
    with pytest.warns(mw.ConvergenceWarning, match=r"amplifies the rounding .* about "
                      r"\de\+0[4-6]-fold.* L = [\d.]+e\+0[4-6]") as caught:
        res = mw.solve(bar, nx=101, progress=False)
    floor = res.extra["reachable_tol"]
    assert res.status == "stalled" and 1e-8 < res.residual <= floor["tol"] < 1e-5
    assert res.check() == pytest.approx(res.residual, rel=1e-6)
    said = float(str(caught[-1].message).split("so about ")[1].split(" ")[0])
    assert said == pytest.approx(res.residual, rel=0.5)


def test_the_state_machine_interpreted_on_devices_is_the_compiled_one(monkeypatch):
    """Devices run :func:`advance`'s Python source (no Numba to load); on random states,
    refused trials (:func:`backtrack`, zero curvature included) and a whole batch solve it
    gives the compiled results bit for bit."""
    from types import SimpleNamespace

    from mfgwork.numerics import batch_newton as bn

    assert bn.state_machine(SimpleNamespace(kind="cuda"), 1) is bn._interpreted_advance
    assert bn.state_machine(SimpleNamespace(kind="cuda"), bn.COMPILED_STEP_FROM) is bn.advance
    assert bn.state_machine(mw.get_backend("numpy"), 1) is bn.advance
    rng = np.random.default_rng(5)
    B = 48
    for k in range(60):
        runs = []
        for machine in (bn.advance, bn._interpreted_advance):
            state = rng.bit_generator.state
            host = list(bn._NewtonState.first(np.zeros((B, 1)), None, 1.0, np).host())
            host[0][:] = rng.choice([bn.TRIAL, bn.CERTIFY, bn.DONE], B)
            host[1][:] = rng.random(B)                               # t
            host[3][:] = rng.integers(0, 14, B)                      # halvings
            host[4][:] = np.where(rng.random(B) < 0.2, np.inf, 10.0 ** rng.uniform(-12, 3, B))
            for i in (5, 6, 7):                                      # rel, trigger, best
                host[i][:] = 10.0 ** rng.uniform(-12, 0, B)
            host[8][:], host[9][:] = rng.random(B) < 0.5, rng.random(B) < 0.2
            sums = 10.0 ** rng.uniform(-30, 10, (7, B))
            sums[0, :8] = np.where(np.isfinite(host[4][:8]), host[4][:8], 0.0) ** 2
            moves, step = np.zeros((4, B), dtype=bool), np.zeros(B)
            out = machine(k, sums, 10.0 ** rng.uniform(-10, -4, B),
                          rng.choice([bn.FLOOR_HALVINGS, 12], B), moves, step, *host)
            runs.append((out, [a.tobytes() for a in (moves, step, *host)]))
            rng.bit_generator.state = state
        rng.random()
        assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert bn.backtrack(0.5, 1.0, 0.0) == 0.25                       # zero curvature: t / 2
    assert bn.backtrack(0.5, np.inf, 1e200) == 0.05                  # no overflow raised

    res = mw.solve(MIXED, **SMALL)
    monkeypatch.setattr(bn, "state_machine", lambda backend, size: bn._interpreted_advance)
    again = mw.solve(MIXED, **SMALL)
    for a, b in zip(res, again, strict=True):
        assert np.array_equal(a.M, b.M) and a.history["residual"] == b.history["residual"]


def test_slopes_where_the_states_are_equal_the_hosts():
    """The price slopes a device batch takes where its coupling states are (torch, float64)
    equal the host's NumPy ones, for every member and for a subset; a potential whose slope
    is NumPy-only takes none there."""
    torch = pytest.importorskip("torch")
    from mfgwork.numerics.batch_newton import member_potentials
    from mfgwork.problems.base import ScalarPotential

    grid = mw.SantaFeBar().grid(41, 40)
    host = mw.get_backend("numpy")
    for objective in ("equilibrium", "social"):
        problems = [mw.SantaFeBar(threshold=t, eps=e, objective=objective)
                    for t, e in ((0.4, 0.05), (0.6, 0.01), (0.8, 0.1))]
        potentials = member_potentials([p.coupling(grid, host).potential() for p in problems])
        z = np.random.default_rng(1).uniform(0.0, 1.0, (3, 40))
        for members in (np.arange(3), np.array([0, 2])):
            expected = potentials.price_slope(z[members], members)
            index = None if members.size == 3 else torch.as_tensor(members)
            got = potentials.price_slope_on(torch.as_tensor(z[members]), members, index)
            assert got.dtype == torch.float64
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-13, atol=0.0)
    numpy_only = [ScalarPotential(chi=p.chi, price_slope=p.price_slope)
                  for p in potentials.members]
    assert member_potentials(numpy_only).price_slope_on(
        torch.as_tensor(z), np.arange(3), None) is None


def test_first_triggers_follow_the_coarse_amplification():
    from mfgwork.numerics.batch_newton import AMPLIFIED, first_triggers

    assert first_triggers([None, float("nan")], 1e-8) is None
    got = first_triggers([None, 50.0, 0.2, 10 * AMPLIFIED], 1e-8)
    np.testing.assert_allclose(got, [1e-8, 1e-10, 1e-8, 1e-8])


def test_a_fine_solve_certifies_first_below_its_coarse_amplification(monkeypatch):
    """A coarse-to-fine solve hands the amplification of each coarse certificate on: the fine
    iteration evaluates its first certificate only below 0.5 tol / amplification, where the
    coarse stage showed that one above would fail (here one iteration fewer, the same
    accuracy, certified apart)."""
    from mfgwork import fdm1d

    problem = mw.SantaFeBar(threshold=0.3, sigma=0.05)
    triggers = []
    first = fdm1d.first_triggers

    def seen(amplification, tol):
        triggers.append((list(amplification), first(amplification, tol)))
        return triggers[-1][1]

    monkeypatch.setattr(fdm1d, "first_triggers", seen)
    res = mw.solve(problem, tol=1e-8, progress=False)
    (amplification,), trigger = triggers[0]
    assert 1.0 < amplification < 1e3 and trigger[0] == pytest.approx(0.5e-8 / amplification)
    monkeypatch.setattr(fdm1d, "first_triggers", lambda amplification, tol: None)
    plain = mw.solve(problem, tol=1e-8, progress=False)
    assert res.converged and plain.converged
    assert res.iterations < plain.iterations
    assert independent_residual(problem, res.M) <= 1e-8 * (1 + 1e-4)


def test_fused_iteration_sums_equal_the_generic_ones(monkeypatch):
    """On CUDA the changes of U and M in an iteration's sums are one Triton pass each; they
    equal the generic sums (and a non-finite value still shows in its row)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from mfgwork.numerics import batch_newton

    be = mw.get_backend("torch", "cuda", "float32")
    newton = BatchNewton(None, grid=mw.SantaFeBar().grid(41, 40), nu=np.ones(3), backend=be,
                         tol=1e-8)
    rng = torch.Generator(device="cuda").manual_seed(0)
    R, g = (torch.rand((3, 40), dtype=torch.float64, device="cuda", generator=rng)
            for _ in range(2))
    U, U_old, M, M_old, F = (torch.rand((3, 41, 41), device="cuda", generator=rng)
                             for _ in range(5))
    M[1, 3, 4] = float("nan")
    fused = newton._iteration_sums(R, g, U, U_old, M, M_old, F)
    monkeypatch.setattr(batch_newton, "fused_norms", lambda *args, **kwargs: False)
    generic = newton._iteration_sums(R, g, U, U_old, M, M_old, F)
    assert np.isnan(fused[4:6, 1]).all() and np.isnan(generic[4:6, 1]).all()
    finite = np.isfinite(generic)
    np.testing.assert_allclose(fused[finite], generic[finite], rtol=1e-5)


@pytest.mark.parametrize("old", ["both", "U only", "M only", "none"])
def test_host_iteration_sums_equal_the_array_ones(old):
    """The NumPy iteration's sums are one compiled pass (:func:`host_sums`); they equal the
    torch backend's array sums on the same values, with no old U or M, either or both (a
    change of 0), and a non-finite value shows in its row."""
    torch = pytest.importorskip("torch")
    grid = mw.SantaFeBar().grid(41, 40)
    host, arrays = (BatchNewton(None, grid=grid, nu=np.ones(3), backend=be, tol=1e-8)
                    for be in (mw.get_backend("numpy"), mw.get_backend("torch", "cpu")))
    rng = np.random.default_rng(1)
    R, g = (rng.random((3, 40)) for _ in range(2))
    U, U_old, M, M_old, F = (rng.random((3, 41, 41)) for _ in range(5))
    U_old = U_old if old in ("both", "U only") else None
    M_old = M_old if old in ("both", "M only") else None
    U[2, 5, 6] = np.inf
    args = (R, g, U, U_old, M, M_old, F)
    compiled = host._iteration_sums(*args)
    reference = arrays._iteration_sums(*(None if a is None else torch.from_numpy(a)
                                         for a in args))
    assert not np.isfinite(compiled[3, 2])
    finite = np.isfinite(reference)
    assert (np.isfinite(compiled) == finite).all()
    np.testing.assert_allclose(compiled[finite], reference[finite], rtol=1e-13)
    if U_old is None:
        assert (compiled[2] == 0).all()
