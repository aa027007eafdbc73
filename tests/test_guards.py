"""Size guards, inputs that would make a result meaningless, and Python errors that must be ours.

Every refusal is checked for its type, for the parameter it names and for the absence of any
heavy work (the solver or the expansion it guards is replaced by a function that fails)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows import scan_plan, specs
from mfgwork.workflows.specs import SpecError, parse_spec


def _never(*args, **kwargs):
    raise AssertionError("heavy work started although the request should have been refused")


def _generic(**over):
    fields = dict(x_min=-1.0, x_max=1.0, T=1.0, sigma=0.5, m0=lambda x: 1.0 + 0.0 * x,
                  g=lambda x: 0.0 * x, f=lambda t, x, m: m)
    return mw.MFGProblem(**(fields | over))


@pytest.fixture(scope="module")
def solved():
    problem = mw.SantaFeBar()
    return problem, mw.solve(problem, nx=21, nt=20, progress=False)


# -- item 3: sizes -----------------------------------------------------------------------------
@pytest.fixture
def no_scan_work(monkeypatch):
    """Scans that would expand an axis, build the points or solve fail the test."""
    for target, name in ((specs, "_range"), (specs, "_linspace"),
                         (scan_plan, "check_points"), (scan_module, "check_points"),
                         (scan_module, "make_layout"),
                         (scan_module, "_run")):
        monkeypatch.setattr(target, name, _never)


@pytest.mark.parametrize("grid", [
    {"threshold": {"range": [0.1, 0.9, 1e-9]}},
    {"threshold": {"linspace": [0.1, 0.9, 10**6]}},
    {"threshold": {"linspace": [0.1, 0.9, 10**4]}, "sigma": {"linspace": [0.1, 1.0, 10**4]}},
], ids=["range-1e-9", "1e6-points", "1e4x1e4"])
def test_scan_point_count_is_refused_before_expanding(grid, no_scan_work):
    with pytest.raises(SpecError, match=r"plans \d+ points, more than max_points=100000"):
        mw.scan(mw.SantaFeBar, grid, device="cpu", progress=False)


def test_scan_refuses_a_grid_that_solve_refuses(monkeypatch):
    for name in ("check_points", "make_layout", "_run"):
        monkeypatch.setattr(scan_module, name, _never)
    with pytest.raises(mw.ParameterError, match=r"^nx, nt too large") as solve_refusal:
        mw.solve(mw.SantaFeBar(), nx=10**5, nt=10**5)
    with pytest.raises(mw.ParameterError, match=r"^nx, nt too large") as scan_refusal:
        mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.6]}, nx=10**5, nt=10**5, device="cpu",
                progress=False)
    assert "nx=100000 x nt=100000" in str(solve_refusal.value)
    assert "nx=100000 x nt=100000" in str(scan_refusal.value)


def test_scan_without_store_refuses_a_dataset_beyond_memory(monkeypatch):
    for name in ("check_points", "make_layout", "_run"):
        monkeypatch.setattr(scan_module, name, _never)
    monkeypatch.setenv("MFGWORK_MAX_MEMORY", "64 MiB")
    with pytest.raises(mw.ParameterError, match=r"scan grid's points too large.*store=None"):
        mw.scan(mw.SantaFeBar, {"threshold": {"linspace": [0.3, 0.9, 1000]}}, device="cpu",
                progress=False)


def test_cli_scan_refuses_a_huge_range_before_writing(tmp_path, capsys, no_scan_work):
    from mfgwork.__main__ import main

    store = tmp_path / "store"
    code = main(["scan", "--problem", "santa_fe", "--grid",
                 "{threshold: {range: [0.1, 0.9, 1.0e-9]}}", "-o", str(store),
                 "--device", "cpu"])
    assert code == 2
    assert "max_points=100000" in capsys.readouterr().err
    assert not store.exists()


@pytest.mark.parametrize("nt", [10**9, 10**8])
def test_two_state_refuses_nt_beyond_memory(nt, monkeypatch):
    monkeypatch.setattr(sys.modules["mfgwork.finite_state"], "TwoStateScheme", _never)
    monkeypatch.setenv("MFGWORK_MAX_MEMORY", "1 GiB")
    with pytest.raises(mw.ParameterError, match=rf"^nt too large: a two-state solve with "
                                                rf"nt={nt}"):
        mw.solve_two_state(mw.TwoStateElFarol(), nt=nt)


def test_two_state_refuses_an_underflowing_step(monkeypatch):
    monkeypatch.setattr(sys.modules["mfgwork.finite_state"], "TwoStateScheme", _never)
    with pytest.raises(mw.ParameterError, match=r"dt = T/nt = .* nt"):
        mw.solve_two_state(mw.TwoStateElFarol(T=1e-300), nt=10**10)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"n_players": 10**12}, "n_players"),
    ({"n_players": 100, "n_samples": 10**9}, "n_samples"),
    ({"n_players": 100, "n_samples": 10**6}, "n_samples"),
])
def test_n_player_refuses_sizes_beyond_memory(kwargs, named, solved, monkeypatch):
    monkeypatch.setattr(sys.modules["mfgwork.analysis.n_player"], "count_above", _never)
    monkeypatch.setenv("MFGWORK_MAX_MEMORY", "4 GiB")
    with pytest.raises(mw.ParameterError, match=rf"^{named} too large") as refusal:
        mw.n_player(*solved, **kwargs)
    assert "n_particles" not in str(refusal.value)


def test_anderson_depth_is_blamed_for_what_it_adds():
    with pytest.raises(mw.ParameterError, match=r"depth=1000000000 is invalid"):
        mw.Anderson(depth=1e9)
    with pytest.raises(mw.ParameterError, match=r"^the Anderson depth too large"):
        mw.solve(_generic(), nx=2001, nt=2001, iteration=mw.Anderson(depth=900),
                 max_memory="1 GiB")
    with pytest.raises(mw.ParameterError, match=r"^nx, nt too large"):
        mw.solve(_generic(), nx=2001, nt=2001, max_memory="100 MiB")


# -- item 4: results that would mean nothing ----------------------------------------------------
def test_f_turning_complex_after_its_first_call_is_an_error():
    calls = []

    def f(t, x, m):
        calls.append(t)
        return m + 0j if len(calls) > 20 else m

    with pytest.raises(mw.SolverError, match=r"^f returned complex values at t="):
        mw.solve(_generic(f=f), nx=21, nt=20, progress=False)
    assert len(calls) > 20


def test_n_player_refuses_a_result_with_non_finite_values(solved):
    problem, res = solved
    for name in ("U", "M"):
        broken = dataclasses.replace(res, **{name: np.where(np.ones_like(res.U, bool), np.nan,
                                                             getattr(res, name))})
        with pytest.raises(mw.ParameterError, match=rf"result\.{name} holds non-finite"):
            mw.n_player(problem, broken, 100, n_samples=2, seed=0)


@pytest.mark.parametrize(("problem", "named"), [
    (lambda: _generic(sigma=1e-170), r"nu = sigma\*\*2/2 = 0\.0 is out of the range"),
    (lambda: _generic(x_min=0.0, x_max=1e-310), r"h = \(x_max - x_min\)/\(nx - 1\) = .* out"),
    (lambda: _generic(T=1e-320), r"dt = T/nt = .* out of the range"),
    (lambda: _generic(x_min=1e17, x_max=1e17 + 1000.0), r"h = .* below .* largest \|x\|"),
    (lambda: _generic(x_min=-1e160, x_max=1e160), r"nu\*dt/h\*\*2 = .* underflows"),
])
def test_steps_that_underflow_or_lose_precision_are_refused(problem, named, monkeypatch):
    monkeypatch.setattr(sys.modules["mfgwork.fdm1d"], "_equilibrium", _never)
    with pytest.raises(mw.ParameterError, match=named):
        mw.solve(problem(), nx=21, nt=20, progress=False)


def test_float32_steps_are_checked_in_float32():
    pytest.importorskip("torch")
    with pytest.raises(mw.ParameterError, match=r"out of the range of float32"):
        mw.solve(_generic(sigma=1e-25), nx=21, nt=20, backend="torch", dtype="float32")


# -- item 5: errors that name the parameter -----------------------------------------------------
@pytest.mark.parametrize(("build", "named"), [
    (lambda: mw.SantaFeBar(theta_max=1e200), r"theta_max=1e\+200 is invalid"),
    (lambda: mw.SantaFeBar(good=1e308), r"good=1e\+308 is invalid"),
    (lambda: mw.TwoStateElFarol(bad=-1e308), r"bad=-1e\+308 is invalid"),
    (lambda: mw.SantaFeBar(T=10**400), r"T=1000000000\d*\.\.\.\(401 digits\) is invalid"),
    (lambda: mw.solve(mw.SantaFeBar(), max_memory="1e400 B"), r"max_memory='1e400 B'"),
    (lambda: mw.solve(mw.SantaFeBar(), nx=10**400), r"nx=1000000000\d*\.\.\.\(401 digits"),
    (lambda: mw.solve(mw.SantaFeBar(), tol=1e308), r"tol=1e\+308 is invalid"),
    (lambda: mw.solve(mw.SantaFeBar(), progress="yes"), r"progress='yes' \(str\) is invalid"),
    (lambda: mw.solve(mw.SantaFeBar(), backend=np.array([1, 2])), r"backend=array"),
    (lambda: mw.solve(mw.SantaFeBar(), device=np.array([1, 2])), r"device=array"),
    (lambda: mw.solve(mw.SantaFeBar(), dtype=np.float64(np.nan)), r"dtype=.*not a number"),
    (lambda: mw.solve(mw.SantaFeBar(), compile_steps=np.array([1])), r"compile_steps="),
    (lambda: mw.scan(mw.SantaFeBar, None), r"grid=None \(NoneType\) is invalid"),
    (lambda: mw.scan(mw.SantaFeBar, 5), r"grid=5 \(int\) is invalid"),
    (lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, fixed=3), r"fixed=3 \(int\)"),
    (lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, keep=None), r"keep=None"),
    (lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, store=3), r"store=3 \(int\)"),
    (lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, scheduler=3), r"scheduler=3"),
    (lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, dask="no"), r"dask='no'"),
    (lambda: mw.sweep(None, {"threshold": [0.5]}, "unused"), r"notebook=None \(NoneType\)"),
    (lambda: _generic(name=None), r"name=None is invalid"),
])
def test_bad_values_raise_errors_naming_the_parameter(build, named):
    with pytest.raises((mw.ParameterError, mw.BackendError), match=named):
        build()


@pytest.mark.parametrize("values", [[0.5, 0.5], [1, 1.0]])
def test_one_rule_for_repeated_values_in_scans_and_sweeps(values):
    with pytest.raises(SpecError, match=r"parameter 'sigma' lists the value (0\.5|1\.0) more"):
        parse_spec({"sigma": values}, declared={"sigma": 0.5})
    with pytest.raises(SpecError, match=r"more than once"):
        mw.scan(mw.SantaFeBar, {"sigma": values}, device="cpu", progress=False)
    with pytest.raises(SpecError, match=r"'threshold', 'eps' lists the value"):
        parse_spec({"threshold": [0.5, 0.5], "eps": [0.1, 0.1], "zip": [["threshold", "eps"]]})
    assert len(parse_spec({"threshold": [0.5, 0.5], "eps": [0.1, 0.2],
                           "zip": [["threshold", "eps"]]}).runs()) == 2


def test_solve_batch_of_mixed_kinds_on_torch_solves_each_kind():
    pytest.importorskip("torch")
    generic = mw.MFGProblem(-5.0, 5.0, 10.0, 0.5, lambda x: 1.0 + 0.0 * x, lambda x: 0.0 * x,
                            lambda t, x, m: m)
    problems = [mw.SantaFeBar(threshold=0.5), generic, mw.SantaFeBar(threshold=0.7)]
    results = mw.solve_batch(problems, nx=41, nt=40, backend="torch", dtype="float64",
                             progress=False)
    assert [r.params["problem"] for r in results] == ["santa_fe_bar", "generic",
                                                      "santa_fe_bar"]
    assert [r.extra["batch_size"] for r in results] == [2, 1, 2]
    for problem, res in zip(problems, results, strict=True):
        alone = mw.solve(problem, nx=41, nt=40, progress=False)
        assert res.converged
        np.testing.assert_allclose(mw.to_numpy(res.M), alone.M, atol=1e-7)
