"""One scheme for every Hamiltonian: ½|p|² unchanged, mass and positivity for each model,
certified Santa Fe equilibria with power and congestion Hamiltonians (checked by an
independent best response), agreement across backends, and bad models refused up front."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.errors import ParameterError
from mfgwork.numerics.fdm import kernels
from mfgwork.numerics.fdm.policy import evaluate_policy
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.particles.paths import nodal_drift
from mfgwork.problems import problem_from_params

MODELS = [mw.Quadratic(), mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5),
          mw.Congestion(0.2, 1.0)]
NEW_MODELS = [mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5)]
MILD = {"eps": 0.5, "sigma": 1.0, "T": 4.0}   # where the Anderson iteration converges
SMALL = {"nx": 31, "nt": 30, "progress": False}


class GenericQuadratic(mw.Quadratic):
    """½|p|² seen by the scheme as any other model (not the specialised kernels)."""


def _inputs(grid, seed=3):
    rng = np.random.default_rng(seed)
    F = 2 * rng.standard_normal((grid.nt, grid.nx))
    U_T = np.sin(2 * grid.x)
    m0 = np.exp(-4 * (grid.x - 0.3) ** 2)
    density = 0.5 + rng.random((grid.nt, grid.nx))
    return F, U_T, m0 / (m0 @ grid.weights), density


def _sweeps(H, be, kernel=None, n=41):
    grid = mw.Grid(-1.0, 2.0, n, 1.0, n - 1)
    F, U_T, m0, density = _inputs(grid)
    fd = FiniteDifferences(grid, 0.2, be, hamiltonian=H, kernels=kernel)
    frozen = be.asarray(density) if H.depends_on_m else None
    U = fd.solve_hjb(be.asarray(U_T), be.asarray(F), None, frozen)
    M = fd.solve_fp(U, be.asarray(m0), frozen)
    return grid, np.asarray(mw.to_numpy(U), np.float64), np.asarray(mw.to_numpy(M), np.float64)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_quadratic_generic_path_matches_the_compiled_loops():
    be = mw.get_backend("numpy")
    _, U, M = _sweeps(mw.Quadratic(), be)
    assert FiniteDifferences(mw.Grid(0, 1, 5, 1, 4), 0.1, be).kernels is kernels.COMPILED_LOOPS
    for H, kernel in [(mw.Quadratic(), kernels.HOST_ARRAYS), (GenericQuadratic(), None)]:
        _, U2, M2 = _sweeps(H, be, kernel)
        assert _rel(U2, U) <= 1e-12 and _rel(M2, M) <= 1e-12


@pytest.mark.parametrize("H", MODELS[1:] + [mw.Power(1.1), mw.Power(2.0)], ids=repr)
def test_compiled_model_loops_match_the_array_path(H):
    be = mw.get_backend("numpy")
    assert FiniteDifferences(mw.Grid(0, 1, 5, 1, 4), 0.1, be, hamiltonian=H
                             ).kernels is kernels.COMPILED_LOOPS
    _, U, M = _sweeps(H, be)
    _, U2, M2 = _sweeps(H, be, kernels.HOST_ARRAYS)
    assert _rel(U, U2) <= 1e-12 and _rel(M, M2) <= 1e-12
    _, U3, M3 = _sweeps(H, mw.get_backend("torch", "cpu"))   # zero-copy views of tensors
    assert _rel(U3, U2) <= 1e-12 and _rel(M3, M2) <= 1e-12


def test_a_subclass_of_a_shipped_model_runs_compiled_loops_of_its_own_expression():
    class Steeper(mw.Power):
        def value(self, x, p, m, xp):
            return 2.0 * super().value(x, p, m, xp)

    H = Steeper(1.5)
    fd = FiniteDifferences(mw.Grid(0, 1, 5, 1, 4), 0.1, mw.get_backend("numpy"),
                           hamiltonian=H)
    assert fd.kernels is kernels.COMPILED_LOOPS
    assert H.traced().structure.key != mw.Power(1.5).traced().structure.key
    p = np.linspace(-2.0, 2.0, 9)
    assert np.allclose(H.dp(None, p, None, np), 2.0 * np.sign(p) * np.abs(p) ** 0.5)
    _, U, M = _sweeps(H, mw.get_backend("numpy"))
    _, U2, M2 = _sweeps(H, mw.get_backend("numpy"), kernels.HOST_ARRAYS)
    assert _rel(U, U2) <= 1e-12 and _rel(M, M2) <= 1e-12


@pytest.mark.parametrize("corner", [{}, {"threshold": 0.3, "sigma": 0.3, "eps": 0.02},
                                    {"threshold": 0.8, "sigma": 1.0, "eps": 0.1}], ids=str)
def test_power_below_two_runs_newton_at_the_defaults(corner):
    """|p|^1.5/1.5 at Santa Fe's defaults and corners of the box: Newton's method on the
    attendance path with the capped curvature, certified by an independent best response."""
    problem = mw.SantaFeBar(hamiltonian=mw.Power(1.5), **corner)
    res = mw.solve(problem, nx=52, nt=52, tol=1e-6, max_iter=60, progress=False)
    assert res.converged and res.residual <= 1e-6
    assert res.params["iteration"]["scheme"] == "newton"
    assert "approximate tangent" in res.extra["newton_on_coupling"]
    assert _independent_residual(problem, res) <= 1e-6


@pytest.mark.parametrize("corner", [{}, {"threshold": 0.3, "sigma": 0.3, "eps": 0.02},
                                    {"threshold": 0.8, "sigma": 1.0, "eps": 0.1}], ids=str)
def test_congestion_reaches_the_coupled_equilibrium_at_the_defaults(corner):
    """Congestion at Santa Fe's defaults (where Anderson on the density path stalled) and
    corners of the box: the frozen-density iteration reaches the fully coupled equilibrium,
    certified by an independent best response on the density path."""
    problem = mw.SantaFeBar(hamiltonian=mw.Congestion(1.0, 0.5), **corner)
    res = mw.solve(problem, nx=52, nt=52, tol=1e-6, max_iter=100, progress=False)
    assert res.converged and res.residual <= 1e-6
    assert _independent_residual(problem, res) <= 1e-6
    assert res.iterations <= 60


def test_congestion_on_a_fine_grid_starts_from_the_coarse_equilibrium():
    problem = mw.SantaFeBar(hamiltonian=mw.Congestion(1.0, 0.5))
    res = mw.solve(problem, nx=103, nt=102, tol=1e-6, max_iter=100, progress=False)
    cold = mw.solve(problem, nx=103, nt=102, tol=1e-6, max_iter=100, progress=False,
                    coarse=False)
    assert res.converged and cold.converged
    assert res.extra["coarse_iterations"] > 0 and cold.extra["coarse_iterations"] is None
    assert res.iterations < cold.iterations
    assert _independent_residual(problem, res) <= 1e-6
    A, A_cold = (np.asarray(mw.to_numpy(r.attendance)) for r in (res, cold))
    assert np.max(np.abs(A - A_cold)) <= 1e-4   # the one equilibrium, reached twice


def test_batches_of_power_problems_run_newton_like_single_solves():
    problems = [mw.SantaFeBar(hamiltonian=mw.Power(1.5), sigma=s) for s in (0.3, 0.8)]
    batch = mw.solve_batch(problems, nx=41, nt=40, tol=1e-6, progress=False)
    for p, r in zip(problems, batch, strict=True):
        single = mw.solve(p, nx=41, nt=40, tol=1e-6, progress=False)
        assert r.converged and r.params["iteration"]["scheme"] == "newton"
        assert r.iterations == single.iterations
        assert _rel(np.asarray(mw.to_numpy(r.M)), np.asarray(mw.to_numpy(single.M))) <= 1e-10


def test_quadratic_solves_are_unchanged():
    default = mw.solve(mw.SantaFeBar(), **SMALL)
    explicit = mw.solve(mw.SantaFeBar(hamiltonian=mw.Quadratic()), **SMALL)
    np.testing.assert_array_equal(mw.to_numpy(explicit.M), mw.to_numpy(default.M))
    assert default.extra["fdm_kernels"] == kernels.COMPILED_LOOPS.name
    assert default.params["hamiltonian"] == {"name": "quadratic"}


@pytest.mark.parametrize("H", MODELS, ids=repr)
def test_fp_conserves_mass_and_positivity_for_every_model(H):
    for be in (mw.get_backend("numpy"), mw.get_backend("torch", "cpu")):
        grid, U, M = _sweeps(H, be)
        assert np.max(np.abs(M @ grid.weights - 1.0)) <= 1e-12
        assert M.min() >= 0.0


@pytest.mark.parametrize("H", NEW_MODELS, ids=repr)
def test_policy_evaluation_reproduces_the_solved_value(H):
    """v = U for the running cost U was solved with (the frozen-control running cost is the
    Lagrangian Σ q ∂Ĥ/∂q − Ĥ)."""
    be = mw.get_backend("numpy")
    grid = mw.Grid(-1.0, 2.0, 41, 1.0, 40)
    F, U_T, _, density = _inputs(grid)
    fd = FiniteDifferences(grid, 0.2, be, hamiltonian=H)
    frozen = density if H.depends_on_m else None
    U = fd.solve_hjb(U_T, F, None, frozen)
    v = evaluate_policy(U, F, U_T, grid, 0.2, be, H, frozen)
    assert _rel(v, U) <= 1e-10
    cheaper = evaluate_policy(U, F - 1.0, U_T, grid, 0.2, be, H, frozen)  # any other cost:
    best = fd.solve_hjb(U_T, F - 1.0, None, frozen)                       # BR costs ≤ v
    assert (best <= cheaper + 1e-10).all()


def _independent_residual(problem, res):
    """Relative fixed-point residual of res.M from NumPy float64 sweeps started from the
    terminal cost: on the attendance path (H independent of m) or on the densities."""
    M = np.asarray(mw.to_numpy(res.M), np.float64)
    grid = problem.grid(M.shape[1], M.shape[0] - 1)
    be = mw.get_backend("numpy")
    fd = FiniteDifferences(grid, problem.nu, be, hamiltonian=problem.hamiltonian,
                           kernels=kernels.HOST_ARRAYS)
    chi = grid.cell_fraction_above(0.0)
    A = M[1:] @ (grid.weights * chi)
    F = -problem.payoff(A)[:, None] * chi
    density = M[1:] if problem.hamiltonian.depends_on_m else None
    M_br = fd.solve_fp(fd.solve_hjb(np.zeros(grid.nx), F, None, density),
                       problem.initial_density(grid, be), density)
    if density is None:
        z, z_br = A, M_br[1:] @ (grid.weights * chi)
    else:
        z, z_br = M[1:], M_br[1:]
    return float(np.linalg.norm(z_br - z) / np.linalg.norm(z_br))


@pytest.mark.parametrize("H", NEW_MODELS, ids=repr)
def test_santa_fe_equilibria_are_certified(H):
    problem = mw.SantaFeBar(hamiltonian=H, **MILD)
    res = mw.solve(problem, tol=1e-8, **SMALL)
    assert res.converged and res.residual <= 1e-8
    assert res.check() <= 1e-8
    assert _independent_residual(problem, res) <= 1e-8
    mass = np.asarray(mw.to_numpy(res.M)) @ problem.grid(31, 30).weights
    assert np.max(np.abs(mass - 1.0)) <= 1e-12
    if not H.depends_on_m:
        assert res.params["iteration"]["scheme"] == "newton"
        assert H.bounded_curvature or "approximate tangent" in res.extra["newton_on_coupling"]
    else:   # the outer iteration on the frozen density, Newton on the attendance inside
        assert "frozen" in res.extra["newton_on_coupling"]
        assert res.params["iteration"]["scheme"] == "newton"
        assert res.extra["outer_iterations"] >= 1
    rebuilt = problem_from_params(res.params)
    assert rebuilt.hamiltonian == H


def test_the_models_change_the_equilibrium():
    A = {repr(H): mw.to_numpy(mw.solve(mw.SantaFeBar(hamiltonian=H, **MILD),
                                       **SMALL).attendance)
         for H in [mw.Quadratic(), *NEW_MODELS]}
    values = list(A.values())
    assert min(np.max(np.abs(a - b)) for i, a in enumerate(values) for b in values[i + 1:]) > 1e-3


@pytest.mark.parametrize("H", NEW_MODELS, ids=repr)
def test_backends_agree(H, mps_emulation):
    _, U, M = _sweeps(H, mw.get_backend("numpy"))
    _, U64, M64 = _sweeps(H, mw.get_backend("torch", "cpu", "float64"))
    assert _rel(U64, U) <= 1e-10 and _rel(M64, M) <= 1e-10
    _, U32, M32 = _sweeps(H, mps_emulation)
    assert _rel(U32, U) <= 1e-4 and _rel(M32, M) <= 1e-4
    problem = mw.SantaFeBar(hamiltonian=H, **MILD)
    a, b = (mw.solve(problem, backend=name, tol=1e-10, **SMALL) for name in ("numpy", "torch"))
    assert a.converged and b.converged
    assert _rel(mw.to_numpy(b.M), mw.to_numpy(a.M)) <= 1e-9


def test_batches_of_congestion_problems_match_single_solves():
    H = mw.Congestion(1.0, 0.5)
    problems = [mw.SantaFeBar(hamiltonian=H, **MILD),
                mw.SantaFeBar(threshold=0.5, hamiltonian=H, **MILD),
                mw.SantaFeBar(hamiltonian=mw.Power(3.0), **MILD)]
    batch = mw.solve_batch(problems, backend="torch", tol=1e-9, **SMALL)
    for p, res in zip(problems, batch, strict=True):
        single = mw.solve(p, tol=1e-9, **SMALL)
        assert res.converged and res.params["hamiltonian"] == p.hamiltonian.params()
        assert _rel(mw.to_numpy(res.M), mw.to_numpy(single.M)) <= 1e-7


def test_particle_drift_is_minus_dp_h():
    grid = mw.Grid(0.0, 1.0, 11, 1.0, 4)
    rng = np.random.default_rng(0)
    U, m = rng.standard_normal((5, 11)), 0.5 + rng.random((5, 11))
    H = mw.Congestion(0.5, 1.0)
    grad = (U[:, 2:] - U[:, :-2]) / (2 * grid.h)
    b = nodal_drift(U, grid.h, H, grid.x, m)
    np.testing.assert_allclose(b[:, 1:-1], -grad / (0.5 + m[:, 1:-1]))
    assert (b[:, [0, -1]] == 0).all()
    np.testing.assert_array_equal(nodal_drift(U, grid.h, mw.Quadratic(), grid.x),
                                  nodal_drift(U, grid.h))


def test_particles_run_a_congestion_model():
    problem = mw.SantaFeBar(hamiltonian=mw.Congestion(1.0, 0.5), **MILD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        res = mw.solve(problem, method="particles", n_particles=20_000, seed=1, tol=1e-2,
                       max_iter=30, **SMALL)
    fdm = mw.solve(problem, **SMALL)
    assert np.max(np.abs(mw.to_numpy(res.attendance) - mw.to_numpy(fdm.attendance))) < 0.05


class _NotConvex(mw.Hamiltonian):
    def value(self, x, p, m, xp):
        return -xp.cos(p) + 1.0

    def dp(self, x, p, m, xp):
        return xp.sin(p)


class _NotFinite(mw.Quadratic):
    def value(self, x, p, m, xp):
        return xp.exp(p * p)

    def dp(self, x, p, m, xp):
        return 2 * p * xp.exp(p * p)


class _WrongDerivative(mw.Quadratic):
    def dp(self, x, p, m, xp):
        return 0.5 * p


@pytest.mark.parametrize("H, words", [(_NotConvex(), "not convex"), (_NotFinite(), "not finite"),
                                      (_WrongDerivative(), "dp does not match"),
                                      ("quadratic", "must be an mfgwork.Hamiltonian")])
def test_bad_hamiltonians_are_refused_before_any_solve(H, words):
    with pytest.raises(ParameterError, match=f"hamiltonian=.*{words}"):
        mw.SantaFeBar(hamiltonian=H)
    with pytest.raises(ParameterError, match=f"hamiltonian=.*{words}"):
        mw.MFGProblem(x_min=0.0, x_max=1.0, T=1.0, sigma=0.5, m0=lambda x: 1.0 + 0 * x,
                      g=lambda x: 0 * x, f=lambda t, x, m: 0 * x, hamiltonian=H)


def test_a_density_dependent_model_needs_the_density():
    grid = mw.Grid(0.0, 1.0, 11, 1.0, 4)
    fd = FiniteDifferences(grid, 0.1, mw.get_backend("numpy"), hamiltonian=mw.Congestion())
    with pytest.raises(ParameterError, match="density=None"):
        fd.solve_hjb(np.zeros(11), np.zeros((4, 11)))

    class Soft(mw.Hamiltonian):   # tanh: the fused Triton kernels do not print it
        def value(self, x, p, m, xp):
            return p * xp.tanh(p)

    with pytest.raises(ParameterError, match="carry"):
        FiniteDifferences(grid, 0.1, mw.get_backend("torch", "cpu"), hamiltonian=Soft(),
                          kernels=kernels.TRITON)


class _Heavy(mw.Hamiltonian):
    """H = ½ (1 + x²/10) p²: moving costs more far from θ = 0 (a model of one's own)."""

    name = "heavy"

    def value(self, x, p, m, xp):
        return 0.5 * (1.0 + 0.1 * x * x) * p * p

    def dp(self, x, p, m, xp):
        return (1.0 + 0.1 * x * x) * p

    def dpp(self, x, p, m, xp):
        return 1.0 + 0.1 * x * x + 0.0 * p


def test_a_model_of_ones_own_runs_newton_and_is_certified():
    problem = mw.SantaFeBar(hamiltonian=_Heavy(), **MILD)
    res = mw.solve(problem, tol=1e-8, **SMALL)
    assert res.converged and res.params["iteration"]["scheme"] == "newton"
    assert res.check(problem) <= 1e-8 and _independent_residual(problem, res) <= 1e-8
    torch_res = mw.solve(problem, backend="torch", tol=1e-10, **SMALL)
    assert _rel(mw.to_numpy(torch_res.M), mw.to_numpy(res.M)) <= 1e-6
    with pytest.raises(ParameterError, match="only the shipped models"):
        problem_from_params(res.params)


def test_frozen_density_tangent_matches_finite_differences():
    """The tangent sweeps of the congestion game with its density frozen (the inner Newton
    of the frozen-density iteration): central differences of the best response in the
    payoff path, symmetric, and the batched torch sweeps agree."""
    import torch

    from mfgwork.numerics.fdm.tangent import tangent_jacobian
    from mfgwork.numerics.fdm.tangent_torch import tangent_jacobian_torch
    from mfgwork.numerics.potential import tangent_operands

    H = mw.Congestion(0.5, 1.0)
    problem = mw.SantaFeBar(threshold=0.4, sigma=0.3, eps=0.01, hamiltonian=H)
    grid = problem.grid(21, 16)
    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    fd = FiniteDifferences(grid, problem.nu, be, hamiltonian=H)
    m0 = problem.initial_density(grid, be)
    density = 0.2 + np.random.default_rng(2).random((grid.nt, grid.nx))

    def respond(y):
        U = fd.solve_hjb(np.zeros(grid.nx), -y[:, None] * chi[None, :], None, density)
        return U, fd.solve_fp(U, m0, density) * grid.weights

    y = np.random.default_rng(1).uniform(-2.0, 2.0, grid.nt)
    U, mu = respond(y)
    D = tangent_jacobian(*tangent_operands(U, mu, chi, problem.nu, grid, H, density), grid.dt)
    step = 1e-6
    D_fd = np.stack([(respond(y + step * e)[1][1:] @ chi - respond(y - step * e)[1][1:] @ chi)
                     / (2 * step) for e in np.eye(grid.nt)], axis=1)
    assert np.max(np.abs(D - D_fd)) < 1e-7 * np.max(np.abs(D))
    assert np.max(np.abs(D - D.T)) < 1e-12 * np.max(np.abs(D))
    t = torch.as_tensor
    D_torch = tangent_jacobian_torch(t(U)[None], t(mu)[None], t(chi), t([problem.nu]), grid.h,
                                     grid.dt, t(1.0 / (grid.h * grid.weights)), H, t(grid.x),
                                     t(density))[0].numpy()
    # (parallel cyclic reduction rounds differently: ½|p|² differs by 8e-9 here too)
    assert np.max(np.abs(D_torch - D)) < 1e-7 * np.max(np.abs(D))


def test_the_compile_warm_up_covers_the_model_solved():
    """The first solve of a model compiles that model's loops apart from its timed phases
    (once per process and dtype); a model no compiled loops carry has nothing to compile."""
    from mfgwork.numerics.fdm import warmup

    numpy = mw.get_backend("numpy", "cpu", "float32")   # a dtype no other test warms here
    warmup.compile_kernels(numpy, mw.Power(3.0))
    assert (numpy.dtype, mw.Power(3.0).traced().structure.key) in warmup._compiled
    assert warmup.compile_kernels(numpy, mw.Power(1.5)) == 0.0     # same loops, same process

    class Opaque(mw.Quadratic):   # a value the tracer cannot read: the generic array path
        def value(self, x, p, m, xp):
            return 0.5 * xp.asarray(p) * p if isinstance(p, np.ndarray) else float(p)

        def dp(self, x, p, m, xp):
            return p

        def dpp(self, x, p, m, xp):
            return 1.0 + 0.0 * p

    with pytest.warns(UserWarning, match="cannot be traced"):
        assert warmup.compile_kernels(numpy, Opaque()) == 0.0
    assert not any(key[1] is Opaque for key in warmup._compiled)
