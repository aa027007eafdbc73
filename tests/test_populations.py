"""Several populations sharing one bar: one group is Santa Fe, two identical groups are one,
regulars and newcomers reach a certified equilibrium (each group's best response recomputed
here from the finite-difference sweeps), backends agree, results round-trip, bad input is
refused before work."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.errors import ConvergenceWarning, ParameterError
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.populations import PathNewton

REGULARS = mw.SantaFeBar(threshold=0.5, sigma=0.3)
NEWCOMERS = mw.SantaFeBar(threshold=0.7, sigma=0.8)


def bar(**shares_models) -> mw.SantaFePopulations:
    return mw.SantaFePopulations([mw.Population(name, share, model)
                                  for name, (share, model) in shares_models.items()])


MIXED = bar(regulars=(0.6, REGULARS), newcomers=(0.4, NEWCOMERS))


def attendance(problem: mw.SantaFeBar, M: np.ndarray) -> np.ndarray:
    """A_k at levels 0..nt of one group's densities (NumPy)."""
    grid = problem.grid(M.shape[-1], M.shape[-2] - 1)
    return M @ (grid.weights * grid.cell_fraction_above(0.0))


def independent_best_responses(pops: mw.SantaFePopulations, M: object
                               ) -> tuple[float, list[float]]:
    """The total and per-group residuals of the densities M (K, nt+1, nx) from each group's
    own sweeps (NumPy float64, HJB from the terminal cost), at the total attendance
    A = Σ_k w_k A_k observed from M."""
    M = np.asarray(mw.to_numpy(M), dtype=np.float64)
    models = [g.model for g in pops.groups]
    A_k = np.stack([attendance(m, M[k]) for k, m in enumerate(models)])[:, 1:]
    A = sum(g.share * A_k[k] for k, g in enumerate(pops.groups))
    grid = models[0].grid(M.shape[-1], M.shape[-2] - 1)
    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    responses = []
    for m in models:
        fd = FiniteDifferences(grid, m.nu, be, hamiltonian=m.hamiltonian)
        U = fd.solve_hjb(np.zeros(grid.nx), -m.payoff(A)[:, None] * chi)
        responses.append(attendance(m, fd.solve_fp(U, m.initial_density(grid, be)))[1:])
    total = sum(g.share * r for g, r in zip(pops.groups, responses, strict=True))
    per_group = [float(np.linalg.norm(r - a) / np.linalg.norm(r))
                 for r, a in zip(responses, A_k, strict=True)]
    return float(np.linalg.norm(total - A) / np.linalg.norm(total)), per_group


def relative(a: object, b: object) -> float:
    a, b = (np.asarray(mw.to_numpy(v), dtype=np.float64) for v in (a, b))
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("n", [41, 105])   # 105: both start from a coarse 51 × 51 solve
def test_one_population_reproduces_santa_fe(n):
    single = mw.SantaFeBar(threshold=0.6, sigma=0.5)
    ref = mw.solve(single, nx=n, nt=n, tol=1e-12)
    res = mw.solve_populations(bar(all=(1.0, single)), nx=n, nt=n, tol=1e-12)
    assert res.converged and res.residual <= 1e-12 and res.populations == ("all",)
    assert res.U.shape == res.M.shape == (1, n + 1, n)
    assert relative(res.U[0], ref.U) <= 1e-12
    assert relative(res.M[0], ref.M) <= 1e-12
    assert np.max(np.abs(res.attendance - ref.attendance)) <= 1e-12
    assert np.array_equal(res.attendance, res.attendance_all)


def test_each_group_keeps_its_hamiltonian():
    power = mw.SantaFeBar(threshold=0.5, sigma=0.4, hamiltonian=mw.Power(2.5))
    ref = mw.solve(power, nx=41, nt=41, tol=1e-12)
    one = mw.solve_populations(bar(all=(1.0, power)), nx=41, nt=41, tol=1e-12)
    assert relative(one.M[0], ref.M) <= 1e-12 and relative(one.U[0], ref.U) <= 1e-12
    assert one.params["populations"][0]["hamiltonian"] == {"name": "power", "q": 2.5}
    # a power and a quadratic group (Newton; for q < 2, whose ∂pp H is unbounded at p = 0,
    # with the curvature capped: an approximate tangent, the certificate exact)
    for q, scheme in ((2.5, "newton"), (1.5, "newton")):
        pops = bar(power=(0.5, mw.SantaFeBar(threshold=0.5, sigma=0.4,
                                             hamiltonian=mw.Power(q))),
                   quadratic=(0.5, NEWCOMERS))
        res = mw.solve_populations(pops, nx=41, nt=41)
        assert res.converged and res.params["iteration"]["scheme"] == scheme
        total, groups = independent_best_responses(pops, res.M)
        assert max(total, *groups) <= 1e-8
        assert mw.SantaFePopulations.from_params(res.params).groups[0].hamiltonian == \
            mw.Power(q)


def test_two_identical_populations_are_one():
    single = mw.SantaFeBar(threshold=0.55, sigma=0.6)
    ref = mw.solve(single, nx=51, nt=51, tol=1e-12)
    res = mw.solve_populations(bar(a=(0.5, single), b=(0.5, single)), nx=51, nt=51, tol=1e-12)
    assert res.converged
    for k in range(2):
        assert relative(res.U[k], ref.U) <= 1e-10
        assert relative(res.M[k], ref.M) <= 1e-10
    assert np.max(np.abs(res.attendance - ref.attendance)) <= 1e-10


@pytest.mark.parametrize("system", ["gmres", "dense"])
def test_regulars_and_newcomers_certified_by_each_groups_best_response(system):
    res = mw.solve_populations(MIXED, nx=81, nt=81, tol=1e-8, newton_system=system)
    assert res.converged and res.residual <= 1e-8
    assert res.iterations <= 25 and res.extra["newton_steps"] >= 1
    assert res.extra["stopped"] == res.extra["newton_stopped"] == "converged"
    total, groups = independent_best_responses(MIXED, res.M)
    assert total <= 1e-8 and max(groups) <= 1e-8
    assert res.residual == pytest.approx(max(total, *groups), rel=1e-6, abs=1e-14)
    assert res.extra["path_residual"] == pytest.approx(total, rel=1e-6, abs=1e-14)
    assert res.extra["group_residuals"] == pytest.approx(dict(zip(MIXED.names, groups,
                                                                  strict=True)), abs=1e-10)
    assert np.max(np.abs(res.mass - 1.0)) <= 1e-12        # per group and level
    assert res.mass.shape == (2, 82) and float(np.min(res.M)) >= 0.0
    A_k = [attendance(g.model, res.M[k]) for k, g in enumerate(MIXED.groups)]
    assert np.allclose(res.attendance_regulars, A_k[0], rtol=0, atol=1e-14)
    assert np.allclose(res.attendance, 0.6 * A_k[0] + 0.4 * A_k[1], rtol=0, atol=1e-14)
    # different thresholds and noise: the groups behave differently
    assert abs(res.summary["mean_attendance_regulars"]
               - res.summary["mean_attendance_newcomers"]) > 0.1
    assert res.check() == pytest.approx(res.residual, rel=1e-6, abs=1e-14)


def test_three_groups_and_the_generic_type_are_certified():
    groups = [mw.Population("a", 0.2, mw.SantaFeBar(threshold=0.3, sigma=0.4, eps=0.02)),
              mw.Population("b", 0.3, mw.SantaFeBar(threshold=0.6, sigma=1.0, good=20.0)),
              mw.Population("c", 0.5, mw.SantaFeBar(threshold=0.8, sigma=0.25))]
    santa_fe = mw.SantaFePopulations(groups)
    res = mw.solve_populations(santa_fe, nx=51, nt=51)
    assert res.converged and res.populations == ("a", "b", "c")
    total, per_group = independent_best_responses(santa_fe, res.M)
    assert max(total, *per_group) <= 1e-8
    # the generic type: the same equilibrium, each group's own model summary
    generic = mw.solve_populations(mw.Populations(groups), nx=51, nt=51)
    assert np.array_equal(generic.M, res.M) and generic.params["problem"] == "populations"
    assert generic.summary["mean_attendance_b"] == pytest.approx(np.mean(res.attendance_b))
    assert np.array_equal(generic.attendance, res.attendance)


def test_gmres_and_dense_newton_reach_the_same_equilibrium():
    a = mw.solve_populations(MIXED, nx=61, nt=61, tol=1e-10, newton_system="gmres")
    b = mw.solve_populations(MIXED, nx=61, nt=61, tol=1e-10, newton_system="dense")
    assert a.extra["krylov_products"] > 0 and b.extra["krylov_products"] == 0
    assert relative(a.M, b.M) <= 1e-8 and relative(a.U, b.U) <= 1e-8


def test_anderson_alone_agrees_with_newton():
    newton = mw.solve_populations(MIXED, nx=41, nt=41, tol=1e-10)
    anderson = mw.solve_populations(MIXED, nx=41, nt=41, tol=1e-10, iteration="anderson")
    assert anderson.converged and anderson.params["iteration"]["scheme"] == "anderson"
    assert anderson.iterations > newton.iterations
    assert relative(anderson.M, newton.M) <= 1e-7


def test_groups_without_a_potential_are_solved_by_anderson(monkeypatch):
    from mfgwork.problems.santa_fe import AttendanceCoupling

    monkeypatch.setattr(AttendanceCoupling, "potential", lambda self: None)
    res = mw.solve_populations(MIXED, nx=41, nt=41)
    assert res.converged and res.params["iteration"]["scheme"] == "anderson"
    assert "newton_steps" not in res.extra
    total, groups = independent_best_responses(MIXED, res.M)
    assert max(total, *groups) <= 1e-8


def test_a_stalled_newton_is_continued_by_anderson(monkeypatch):
    # an ascent direction: every line search fails, Newton stops as stalled
    monkeypatch.setattr(PathNewton, "_direction", lambda self, point: -point["R"])
    res = mw.solve_populations(MIXED, nx=41, nt=41, tol=1e-8, max_iter=200)
    assert res.extra["newton_stopped"] == "stalled" and res.extra["fallback"]["iterations"] > 0
    assert res.extra["stopped"] == "converged"
    total, groups = independent_best_responses(MIXED, res.M)
    assert res.converged and max(total, *groups) <= 1e-8


def test_a_warm_start_from_a_result_or_a_path_saves_iterations():
    cold = mw.solve_populations(MIXED, nx=61, nt=61, tol=1e-10)
    coarse = mw.solve_populations(MIXED, nx=31, nt=31, tol=1e-10)
    for initial in (cold, coarse, cold.attendance, cold.attendance[1:]):
        warm = mw.solve_populations(MIXED, nx=61, nt=61, tol=1e-10, initial=initial)
        assert warm.converged and warm.iterations < cold.iterations
        assert relative(warm.M, cold.M) <= 1e-8


def test_not_converged_says_so_and_its_residual_is_rechecked():
    with pytest.warns(ConvergenceWarning, match="stopped after 2 iterations .max_iter=2"):
        res = mw.solve_populations(MIXED, nx=41, nt=41, tol=1e-10, max_iter=2)
    assert not res.converged and res.residual > 1e-10 and res.extra["stopped"] == "max_iter"
    total, groups = independent_best_responses(MIXED, res.M)
    assert max(total, *groups) == pytest.approx(res.residual, rel=1e-6)


def test_torch_cpu_float64_agrees_with_numpy():
    pytest.importorskip("torch")
    ref = mw.solve_populations(MIXED, nx=41, nt=41)
    res = mw.solve_populations(MIXED, nx=41, nt=41, backend="torch", dtype="float64")
    assert res.converged and res.backend == "torch"
    for key in ("U", "M"):
        assert relative(getattr(res, key), getattr(ref, key)) <= 1e-10
    assert relative(res.attendance, ref.attendance) <= 1e-10


def test_float32_mps_emulation_agrees_with_numpy(mps_emulation):
    ref = mw.solve_populations(MIXED, nx=41, nt=41)
    res = mw.solve_populations(MIXED, nx=41, nt=41, backend=mps_emulation, tol=1e-3)
    assert res.converged and res.dtype == "float32" and res.extra["certified_in"] == "float32"
    assert np.max(np.abs(mw.to_numpy(res.attendance) - ref.attendance)) <= 1e-4
    assert relative(res.M, ref.M) <= 1e-4 and relative(res.U, ref.U) <= 1e-4
    assert max(independent_best_responses(MIXED, res.M)[1]) <= 1e-3


def test_float32_on_the_cpu_is_certified_in_float64():
    pytest.importorskip("torch")
    res = mw.solve_populations(MIXED, nx=41, nt=41, backend="torch", dtype="float32", tol=1e-3)
    assert res.converged and res.dtype == "float32" and res.extra["certified_in"] == "float64"
    total, groups = independent_best_responses(MIXED, res.M)
    assert res.residual == pytest.approx(max(total, *groups), rel=1e-3)
    assert res.check() == pytest.approx(res.residual, rel=1e-6)


def test_save_and_load_round_trip(tmp_path):
    res = mw.solve_populations(MIXED, nx=31, nt=31)
    loaded = mw.load(res.save(tmp_path / "run"))
    assert loaded.populations == ("regulars", "newcomers")
    assert loaded.U.shape == (2, 32, 31) and np.array_equal(loaded.M, res.M)
    assert set(loaded.observables) == set(res.observables)
    assert np.array_equal(loaded.attendance_newcomers, res.attendance_newcomers)
    assert loaded.extra["group_residuals"] == res.extra["group_residuals"]
    assert loaded.check() == pytest.approx(res.residual, rel=1e-6, abs=1e-14)
    assert mw.SantaFePopulations.from_params(loaded.params).params() == MIXED.params()


def test_a_warm_start_from_other_groups_is_refused(no_work):
    other = mw.Result(x=np.zeros(3), t=np.zeros(3), U=np.zeros((1, 3, 3)), M=np.zeros((1, 3, 3)),
                      converged=True, iterations=1, history={}, params={}, timings={},
                      dims=("population", "t", "x"), labels={"population": ("all",)})
    with pytest.raises(ParameterError, match="initial is a result of the populations"):
        mw.solve_populations(MIXED, nx=31, nt=31, initial=other)


def test_a_loaded_result_with_the_wrong_group_count_is_refused(tmp_path):
    res = mw.solve_populations(MIXED, nx=31, nt=31)
    res = dataclasses.replace(res, labels={"population": ("only",)}, dims=res.dims)
    with pytest.raises(mw.LoadError, match="'U'"):
        mw.load(res.save(tmp_path / "run"))


def test_a_loaded_result_with_bad_group_names_is_refused(tmp_path):
    res = mw.solve_populations(MIXED, nx=31, nt=31)
    res = dataclasses.replace(res, labels={"population": (1, 2)})
    with pytest.raises(mw.LoadError, match="labels"):
        mw.load(res.save(tmp_path / "run"))


# -- bad input, refused before any work --------------------------------------------------------
@pytest.fixture
def no_work(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("heavy work started although the request should have been "
                             "refused")

    module = sys.modules["mfgwork.populations"]
    monkeypatch.setattr(module, "setup", never)
    monkeypatch.setattr(module, "equilibrium", never)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: bar(a=(0.6, REGULARS), b=(0.3, NEWCOMERS)), r"share=0\.9 in sum"),
    (lambda: mw.SantaFePopulations([]), "groups=.*non-empty"),
    (lambda: mw.SantaFePopulations([REGULARS]), r"groups\[0\]=.*Population"),
    (lambda: bar(a=(0.5, REGULARS), b=(0.5, mw.SantaFeBar(T=5.0))), r"groups\[1\]\.model\.T"),
    (lambda: bar(a=(0.5, REGULARS), b=(0.5, mw.SantaFeBar(theta_max=4.0))),
     r"groups\[1\]\.model\.x_min"),
    (lambda: mw.SantaFePopulations([mw.Population("a", 0.5, REGULARS),
                                    mw.Population("a", 0.5, NEWCOMERS)]),
     r"groups\[1\]\.name='a'.*unique"),
    (lambda: mw.Population("a b", 1.0, REGULARS), "name='a b'"),
    (lambda: mw.Population("a", 1.5, REGULARS), "share"),
    (lambda: mw.Population("a", "half", REGULARS), "share"),
    (lambda: mw.Population("a", 1.0, "bar"), "model='bar'"),
    (lambda: mw.Population("a", 1.0, mw.MFGProblem(0, 1, 1, 0.5, np.exp, np.sin,
                                                   lambda t, x, m: m)),
     "one observed path"),
    (lambda: mw.Population("a", 1.0, mw.MFGProblem(0, 1, 1, 0.5, np.exp, np.sin,
                                                   lambda t, x, m: m,
                                                   hamiltonian=mw.Congestion())),
     "one observed path"),
])
def test_bad_problems_are_refused(make, match):
    with pytest.raises(ParameterError, match=match):
        make()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"problem": REGULARS}, "problem=.*Populations"),
    ({"nx": 2}, "nx"),
    ({"nt": "ten"}, "nt"),
    ({"tol": 0.0}, "tol"),
    ({"max_iter": 0}, "max_iter"),
    ({"backend": "jax"}, "backend"),
    ({"device": "tpu"}, "device"),
    ({"dtype": "float16"}, "dtype"),
    ({"iteration": "newton"}, "iteration"),
    ({"newton_system": "lu"}, "newton_system"),
    ({"progress": "yes"}, "progress"),
    ({"coarse": 1}, "coarse"),
    ({"method": "particles"}, "method"),
    ({"newton_system": "dense", "nx": 501, "nt": 501}, "newton_system='dense'"),
    ({"initial": np.zeros(7)}, r"initial=.*shape \(31,\) or \(32,\)"),
    ({"initial": np.full(31, np.nan)}, "initial=.*finite"),
    ({"initial": "warm"}, "initial="),
    ({"max_memory": 1000}, "memory|nx, nt"),
])
def test_bad_arguments_are_refused_before_work(no_work, kwargs, match):
    kwargs = {"problem": MIXED, "nx": 31, "nt": 31} | kwargs
    with pytest.raises((ParameterError, mw.BackendError), match=match):   # as mw.solve
        mw.solve_populations(**kwargs)
