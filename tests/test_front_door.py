"""One front door: iteration schemes without state between solves, a frozen Result with a
status, one solve for every problem kind, and the modules below it without cycles."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import pickle
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import torch_installed
from mfgwork.results import STATUSES

solve_module = importlib.import_module("mfgwork.solve")
fdm1d = importlib.import_module("mfgwork.fdm1d")

SMALL = {"nx": 41, "nt": 40, "progress": False}


# -- iteration schemes hold no state between solves ---------------------------------------
def _spy_fallback(monkeypatch):
    offered = []
    original = fdm1d._newton_fallback

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        offered.append(out is not None)
        return out

    monkeypatch.setattr(fdm1d, "_newton_fallback", spy)
    return offered


def test_anderson_by_name_and_by_instance_are_the_same_solve(monkeypatch):
    offered = _spy_fallback(monkeypatch)
    problem = mw.SantaFeBar(eps=0.1)
    by_name = mw.solve(problem, iteration="anderson", **SMALL)
    by_instance = mw.solve(problem, iteration=mw.Anderson(), **SMALL)
    assert offered == [True, True]   # the Newton continuation is not switched off
    np.testing.assert_array_equal(by_name.U, by_instance.U)
    np.testing.assert_array_equal(by_name.M, by_instance.M)
    assert by_name.iterations == by_instance.iterations
    assert by_name.history["residual"] == by_instance.history["residual"]
    assert by_name.params["iteration"] == by_instance.params["iteration"]
    with pytest.warns(mw.ConvergenceWarning):
        mw.solve(problem, iteration=mw.Anderson(newton=False), max_iter=3, **SMALL)
    assert offered[-1] is False   # mixing alone, when asked for


@pytest.mark.parametrize("scheme", [mw.Anderson(), mw.Relaxation(0.5), mw.FictitiousPlay()],
                         ids=lambda s: type(s).__name__)
def test_a_scheme_object_reused_gives_identical_solves(scheme):
    problem = mw.SantaFeBar(eps=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)   # the same either way
        first = mw.solve(problem, iteration=scheme, max_iter=30, **SMALL)
        second = mw.solve(problem, iteration=scheme, max_iter=30, **SMALL)
    np.testing.assert_array_equal(first.U, second.U)
    assert first.history["residual"] == second.history["residual"]


def test_schemes_are_frozen_settings():
    scheme = mw.Anderson(depth=3)
    with pytest.raises(AttributeError):
        scheme.depth = 4
    a, b = scheme.start(), scheme.start(batched=True)
    assert a is not b and a.scheme is scheme
    relax = mw.Relaxation(0.3)
    assert relax.start() is relax   # no memory: the scheme is its own mixer


# -- one frozen Result with a status ------------------------------------------------------
@pytest.fixture(scope="module")
def santa_fe():
    return mw.solve(mw.SantaFeBar(), **SMALL)


def test_a_result_cannot_be_mutated(santa_fe):
    for name, value in (("converged", False), ("residual", 1.0), ("params", {}),
                        ("status", "failed"), ("U", None)):
        with pytest.raises(AttributeError):
            setattr(santa_fe, name, value)
    changed = replace(santa_fe, params=santa_fe.params | {"note": 1})
    assert changed.params["note"] == 1 and "note" not in santa_fe.params


@pytest.mark.parametrize("change", [
    lambda r: r.params.__setitem__("threshold", 0.1), lambda r: r.params.update(T=1.0),
    lambda r: r.params["hamiltonian"].__setitem__("name", "x"),
    lambda r: r.timings.pop("total"), lambda r: r.history["residual"].append(0.0),
    lambda r: r.history["residual"].__setitem__(0, 0.0), lambda r: r.extra.clear(),
    lambda r: r.summary.setdefault("x", 1.0), lambda r: r.observables.__delitem__("attendance"),
])
def test_a_result_is_frozen_all_the_way_down(santa_fe, change):
    """Its mappings and their lists refuse changes, and still read, compare, copy and
    serialise as dicts and lists."""
    before = json.dumps({k: getattr(santa_fe, k) for k in ("params", "timings", "history")})
    with pytest.raises(TypeError, match="part of a frozen result"):
        change(santa_fe)
    after = json.dumps({k: getattr(santa_fe, k) for k in ("params", "timings", "history")})
    assert after == before
    assert santa_fe.history["residual"] == list(santa_fe.history["residual"])
    assert pickle.loads(pickle.dumps(santa_fe)).params == santa_fe.params
    assert type(santa_fe.extra | {"a": 1}) is dict


@pytest.mark.parametrize("name", ["x", "t", "U", "M", "attendance"])
def test_a_result_s_arrays_refuse_writes_and_stay_so_through_pickle(santa_fe, name):
    """Its arrays are read-only views (also after pickling); a copy is changeable, and a
    tensor made from one does not alias it."""
    before = np.array(getattr(santa_fe, name))
    for res in (santa_fe, pickle.loads(pickle.dumps(santa_fe))):
        with pytest.raises(ValueError, match="read-only"):
            getattr(res, name)[...] = 0.0
        np.testing.assert_array_equal(getattr(res, name), before)
    changeable = getattr(santa_fe, name).copy()
    changeable[...] = 0.0
    np.testing.assert_array_equal(getattr(santa_fe, name), before)
    if torch_installed():
        tensor = mw.get_backend("torch").asarray(getattr(santa_fe, name))
        tensor.zero_()
        np.testing.assert_array_equal(getattr(santa_fe, name), before)


def test_an_n_player_result_is_frozen_all_the_way_down(santa_fe):
    from mfgwork.analysis.n_player import n_player

    res = n_player(mw.SantaFeBar(), santa_fe, n_players=20, n_samples=4, seed=1)
    for array in (res.t, res.attendance, res.distance, res.mean_field):
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0.0
    with pytest.raises(TypeError, match="part of a frozen result"):
        res.timings.clear()
    assert isinstance(res.status, mw.Status) and res.status == "converged"
    again = pickle.loads(pickle.dumps(res))
    with pytest.raises(ValueError, match="read-only"):
        again.attendance[...] = 0.0
    np.testing.assert_array_equal(again.attendance, res.attendance)


def test_status_is_converged_exactly_when_converged(santa_fe):
    assert santa_fe.converged and santa_fe.status == "converged"
    assert santa_fe.metrics()["status"] == "converged"
    with pytest.raises(mw.ParameterError, match="status='max_iter' is invalid"):
        replace(santa_fe, status="max_iter")
    with pytest.raises(mw.ParameterError, match="status='done' is invalid"):
        replace(santa_fe, converged=False, status="done")


def test_a_status_is_an_enumeration_with_a_message_and_reads_as_its_name(santa_fe, tmp_path):
    """``res.status`` is a :class:`mw.Status`: equal to its name, written as its name in
    JSON and text, with a message per value; a loaded run gets one back."""
    assert isinstance(santa_fe.status, mw.Status) and santa_fe.status is mw.Status.CONVERGED
    assert f"{santa_fe.status}" == str(santa_fe.status) == "converged"
    assert json.loads(json.dumps({"s": santa_fe.status})) == {"s": "converged"}
    messages = {s: s.message for s in mw.Status}
    assert len(set(messages.values())) == len(mw.Status) == len(STATUSES)
    assert all(len(m) > 40 for m in messages.values())
    assert "max_iter" in mw.Status.MAX_ITER.message and "float64" in mw.Status.FAILED.message
    santa_fe.save(tmp_path / "run")
    assert mw.load(tmp_path / "run").status is mw.Status.CONVERGED
    assert replace(santa_fe, converged=False, status="failed").status is mw.Status.FAILED


def _unconverged(**kw):
    with pytest.warns(mw.ConvergenceWarning):
        return mw.solve(mw.SantaFeBar(threshold=0.2, sigma=0.1, eps=0.001), **SMALL, **kw)


def test_status_max_iter_when_the_budget_runs_out(tmp_path):
    res = _unconverged(max_iter=3, iteration="relaxation")
    assert not res.converged and res.iterations == 3 and res.status == "max_iter"
    loaded = mw.load(res.save(tmp_path / "run"))
    assert loaded.status == "max_iter" and loaded.metrics()["status"] == "max_iter"


def test_status_stalled_when_the_iteration_gives_up(tmp_path):
    """Anderson alone at a steep corner: the residual stops halving, certificates are
    refused, and the iteration stops before its budget."""
    res = _unconverged(max_iter=400, tol=1e-6, iteration=mw.Anderson(newton=False))
    assert not res.converged and res.iterations < 400 and res.status == "stalled"
    loaded = mw.load(res.save(tmp_path / "run"))
    assert loaded.status == "stalled"


def test_two_state_statuses():
    with pytest.warns(mw.ConvergenceWarning, match=r"max_iter=2 reached"):
        res = mw.solve(mw.TwoStateElFarol(switching_cost=0.3), nt=400, max_iter=2)
    assert res.status == "max_iter"
    with pytest.warns(mw.ConvergenceWarning, match=r"\(stalled"):  # below its rounding
        res = mw.solve(mw.TwoStateElFarol(switching_cost=0.3), nt=50, tol=1e-15)
    assert res.status == "stalled" and res.iterations < 500


def test_old_runs_without_status_derive_it(tmp_path, santa_fe):
    folder = santa_fe.save(tmp_path / "run")
    path = folder / "metrics.json"
    for converged, iterations, status in ((True, 7, "converged"), (False, 200, "max_iter"),
                                          (False, 17, "stalled")):
        metrics = json.loads(path.read_text())
        for key in ("status", "dims", "labels", "arrays"):
            metrics.pop(key, None)
        metrics |= {"converged": converged, "iterations": iterations}
        path.write_text(json.dumps(metrics))
        assert mw.load(folder).status == status   # params["max_iter"] = 200
    metrics = json.loads(path.read_text()) | {"status": "converged", "converged": False}
    path.write_text(json.dumps(metrics))
    with pytest.raises(mw.LoadError, match="status='converged' with converged=False"):
        mw.load(folder)


def test_failed_when_the_float32_certificate_does_not_hold(monkeypatch):
    """A float32 solve whose certificate does not hold in float64 ends as "failed"."""
    monkeypatch.setattr(importlib.import_module("mfgwork.precision"), "residual_on",
                        lambda res, problem, be: 1.0)
    with pytest.warns(mw.ConvergenceWarning, match="did not hold in float64"):
        res = mw.solve(mw.SantaFeBar(), dtype="float32", backend="torch", tol=1e-3, **SMALL)
    assert not res.converged and res.status == "failed" and res.residual == 1.0


# -- one front door for every problem kind ------------------------------------------------
def test_solve_of_the_two_state_game_is_solve_two_state(tmp_path):
    problem = mw.TwoStateElFarol(switching_cost=0.5)
    res = mw.solve(problem, nt=200)
    ref = mw.solve_two_state(problem, nt=200)
    assert isinstance(res, mw.Result) and isinstance(ref, mw.Result)
    for name in ("t", "U", "M", "x", "gap", "attendance"):
        np.testing.assert_array_equal(getattr(res, name), getattr(ref, name))
    assert (res.residual, res.iterations, res.status) == (ref.residual, ref.iterations,
                                                           "converged")
    assert res.dims == ("t", "state") and res.states == ("home", "bar")
    assert res.mass_error < 1e-13 and res.check() == pytest.approx(res.residual, abs=1e-15)
    metrics = res.metrics()
    assert metrics["states"] == ["home", "bar"] and "nx" not in metrics
    assert metrics["evaluations"] == res.extra["evaluations"] >= res.iterations
    loaded = mw.load(res.save(tmp_path / "two"))
    np.testing.assert_array_equal(loaded.gap, res.gap)
    np.testing.assert_array_equal(mw.switching_rates(loaded), mw.switching_rates(res))
    assert loaded.labels == {"state": ("home", "bar")} and loaded.status == "converged"
    assert loaded.check() == pytest.approx(res.residual, abs=1e-15)   # rebuilt from params


def test_solve_refuses_options_and_problems_it_has_no_solver_for():
    with pytest.raises(mw.ParameterError, match=r"nx=41 is invalid for a TwoStateElFarol "
                       r"problem: its solver solve_two_state takes nt, tol"):
        mw.solve(mw.TwoStateElFarol(), nx=41)
    with pytest.raises(mw.ParameterError, match=r"warmup=3 is invalid for a SantaFeBar"):
        mw.solve(mw.SantaFeBar(), warmup=3)
    with pytest.raises(mw.ParameterError, match=r"must be an mfgwork.MFGProblem, an "
                       r"mfgwork.TwoStateElFarol, an mfgwork.CommonNoise, an "
                       r"mfgwork.Populations or an mfgwork.MFGProblem2D"):
        mw.solve("santa_fe")
    with pytest.raises(mw.ParameterError, match=r"problems\[1\]=TwoStateElFarol.* has no "
                       r"batched path"):
        mw.solve_batch([mw.SantaFeBar(), mw.TwoStateElFarol()], nx=21, nt=20)


def test_the_solver_table_is_one_entry_per_kind():
    assert solve_module.SOLVERS == {mw.MFGProblem: mw.solve_continuous,
                                    mw.TwoStateElFarol: mw.solve_two_state,
                                    mw.Populations: mw.solve_populations,
                                    mw.MFGProblem2D: mw.solve_2d,
                                    mw.CommonNoise: mw.solve_common_noise}
    res = mw.solve(mw.SantaFeBar(), **SMALL)
    ref = mw.solve_continuous(mw.SantaFeBar(), **SMALL)
    np.testing.assert_array_equal(res.M, ref.M)


def test_a_list_is_a_batch_of_its_kind():
    """``mw.solve(list)`` is the batch solver of the problems' kind, results in order."""
    assert solve_module.BATCH_SOLVERS == {mw.MFGProblem: mw.solve_batch,
                                          mw.MFGProblem2D: mw.solve_2d_batch}
    bars = [mw.SantaFeBar(threshold=a) for a in (0.4, 0.7)]
    for got, ref in zip(mw.solve(bars, **SMALL), mw.solve_batch(bars, **SMALL), strict=True):
        np.testing.assert_array_equal(got.M, ref.M)
    assert mw.solve(bars[0], **SMALL).params == mw.solve((bars[0],), **SMALL)[0].params
    rooms = [mw.Room(), mw.Room(sigma=0.4)]
    small = {"nx": 11, "nt": 10, "progress": False}
    for got, ref in zip(mw.solve(rooms, **small), mw.solve_2d_batch(rooms, **small),
                        strict=True):
        np.testing.assert_array_equal(got.M, ref.M)


@pytest.mark.parametrize(("batch", "pattern"), [
    ([], r"problem=\[\] is invalid: a batch must hold at least one problem"),
    (["x"], r"problem\[0\]='x' is invalid: must be an mfgwork.MFGProblem"),
    ([mw.SantaFeBar(), 3], r"problem\[1\]=3 is invalid: must be an mfgwork.MFGProblem"),
    ([mw.SantaFeBar(), mw.Room()], r"problem\[1\]=Room.* is invalid in this batch: a batch "
                                   r"is of one kind, and problem\[0\] is an mfgwork.MFGProblem"),
    ([mw.TwoStateElFarol()], r"a TwoStateElFarol has no batched path; solve each with "
                             r"mw.solve, or batch mfgwork.MFGProblem or mfgwork.MFGProblem2D"),
])
def test_a_list_of_no_batchable_kind_is_refused_naming_its_member(batch, pattern):
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.solve(batch, **SMALL)
    with pytest.raises(mw.ParameterError, match=r"warmup=3 is invalid for a SantaFeBar "
                       r"problem: its solver solve_batch takes nx, nt, backend"):
        mw.solve([mw.SantaFeBar()], warmup=3)


def test_an_accelerator_without_a_backend_is_pytorch(monkeypatch):
    """``device="cuda"``/``"mps"`` alone means torch; an explicit ``backend`` is kept."""
    seen = []
    original = solve_module.SOLVERS[mw.MFGProblem]

    @functools.wraps(original)
    def spy(problem, **options):
        seen.append(options)

    monkeypatch.setitem(solve_module.SOLVERS, mw.MFGProblem, spy)
    for options in ({"device": "cuda"}, {"device": "cuda:1"}, {"device": "mps"},
                    {"device": "cpu"}, {"device": "cuda", "backend": "numpy"}, {}):
        mw.solve(mw.SantaFeBar(), **options)
    assert [o.get("backend") for o in seen] == ["torch", "torch", "torch", None, "numpy", None]


# -- the modules below the front door: no cycles, one registry, one placement -------------
PACKAGE = Path(mw.__file__).resolve().parent


def _module_imports(deferred: bool) -> dict[str, set[str]]:
    """Module -> the mfgwork modules it imports: its top-level import statements, and with
    ``deferred`` also those inside functions (which run later: a cycle through them does
    not break an import, but still ties the modules together)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        name = ".".join(p for p in parts if p != "__init__")
        found = set()
        tree = ast.parse(path.read_text())
        for node in (ast.walk(tree) if deferred else tree.body):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = [*package[: len(package) - node.level + 1],
                            *(node.module.split(".") if node.module else [])]
                elif node.module and node.module.startswith("mfgwork."):
                    base = node.module.split(".")[1:]
                else:
                    continue
                for alias in node.names:   # ``from .x import y``: the module x.y or x
                    sub = [*base, alias.name]
                    found.add(".".join(sub if _is_module(sub) else base))
            elif isinstance(node, ast.Import):
                found |= {a.name.removeprefix("mfgwork.") for a in node.names
                          if a.name.startswith("mfgwork.")}
        graph[name] = {m for m in found if m and m != name}
    return graph


def _is_module(parts: list[str]) -> bool:
    target = PACKAGE.joinpath(*parts)
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (one path each), by depth-first search."""
    state: dict[str, int] = {}
    found = []

    def visit(node, trail):
        if state.get(node) == 1:
            found.append([*trail[trail.index(node):], node])
            return
        if state.get(node) == 2:
            return
        state[node] = 1
        for other in sorted(graph.get(node, ())):
            visit(other, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])
    return found


def test_the_module_graph_has_no_cycle():
    assert _cycles(_module_imports(deferred=False)) == []
    graph = _module_imports(deferred=True)
    # the certificate is the solvers' entry in the results' table: results imports no solver
    assert "results" in graph["best_response"] and not {"best_response", "solve"} & graph[
        "results"]
    assert "solve" not in graph["workflows.scan_plan"]
    # deferred imports too: no cycle outside the finite-difference kernels' own package
    outside = [c for c in _cycles(graph) if not all(m.startswith("numerics.fdm.") for m in c)]
    assert outside == []


@pytest.mark.parametrize("module", ["mfgwork.results", "mfgwork.best_response",
                                    "mfgwork.solve", "mfgwork.fdm1d", "mfgwork.finite_state"])
def test_a_front_door_module_imports_alone(module):
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                         text=True, cwd=PACKAGE.parent, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_registry_rebuilds_every_rebuildable_problem():
    from mfgwork.problems import PROBLEMS, REBUILDABLE, problem_from_params, problem_name

    assert set(PROBLEMS.values()) == {mw.SantaFeBar, mw.TwoStateElFarol, mw.SantaFePopulations,
                                      mw.TwoBars, mw.Room}
    assert set(REBUILDABLE) == {"santa_fe", "santa_fe_bar", "two_state", "two_state_el_farol",
                                "santa_fe_populations"}
    built = {mw.SantaFeBar: mw.SantaFeBar(threshold=0.45, sigma=0.7, eps=0.08),
             mw.TwoStateElFarol: mw.TwoStateElFarol(switching_cost=2.5, attendance0=0.2),
             mw.SantaFePopulations: mw.SantaFePopulations((
                 mw.Population("regulars", 0.7, mw.SantaFeBar(threshold=0.5, sigma=0.3)),
                 mw.Population("newcomers", 0.3, mw.SantaFeBar(threshold=0.7,
                                                               hamiltonian=mw.Power(3.0)))))}
    for name in REBUILDABLE:
        cls = PROBLEMS[name]
        again = problem_from_params(built[cls].params() | {"nx": 41, "tol": 1e-8})
        assert type(again) is cls and again.params() == built[cls].params()
        assert built[cls].params()["problem"] in PROBLEMS   # the name results record
    assert {problem_name(c) for c in built} == {"santa_fe", "two_state", "santa_fe_populations"}
    from mfgwork.workflows.scan_plan import factory_name, resolve_problem

    assert resolve_problem("santa_fe_bar") is resolve_problem("santa_fe") is mw.SantaFeBar
    assert factory_name(mw.SantaFeBar) == "santa_fe"
    with pytest.raises(mw.ParameterError, match="pass the problem that was solved"):
        problem_from_params({"problem": "my_model"})


def test_the_scan_is_placed_by_mfgwork_placement(monkeypatch, mock_accelerators):
    pytest.importorskip("torch")
    asked = []
    original = importlib.import_module("mfgwork.placement").placement

    def spy(*args, **kwargs):
        asked.append(kwargs.get("batch_size"))
        return original(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module("mfgwork.placement"), "placement", spy)
    mock_accelerators(cuda=1)   # an accelerator, but fewer points than its crossover
    ds = mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.6]}, nx=21, nt=20, tol=1e-6,
                 progress=False)
    assert asked == [2]
    assert ds.attrs["backend"] == "numpy" and "2 problems" in ds.attrs["placement"]
    assert bool(ds["converged"].all())


def test_scans_and_batches_name_the_kinds_they_do_not_take():
    with pytest.raises(mw.ParameterError, match=r"a TwoStateElFarol has no batched path"):
        mw.scan("two_state", {"switching_cost": [1.0, 2.0]}, nx=21, nt=20, device="cpu",
                progress=False)


def test_per_population_arrays_are_labelled_and_saved(tmp_path, santa_fe):
    """What a solve of several populations returns: a leading labelled population axis on U,
    M and the per-population observables, through metrics, save and load."""
    two = replace(santa_fe, U=np.stack([santa_fe.U, 2 * santa_fe.U]),
                  M=np.stack([santa_fe.M, santa_fe.M]),
                  observables={"attendance": np.stack([santa_fe.attendance] * 2),
                               "total": 2 * santa_fe.attendance},
                  dims=("population", "t", "θ"),
                  labels={"population": ("regulars", "newcomers")})
    assert two.mass.shape == (2, santa_fe.t.size)
    assert two.mass_error == pytest.approx(santa_fe.mass_error)
    assert two.observable_dims("attendance") == ("population", "t")
    assert two.observable_dims("total") == ("t",)
    loaded = mw.load(two.save(tmp_path / "pops"))
    assert loaded.dims == two.dims and loaded.labels == two.labels
    np.testing.assert_array_equal(loaded.U, two.U)
    np.testing.assert_array_equal(loaded.attendance, two.attendance)
    with pytest.raises(mw.ParameterError, match="must name the 3 axes"):
        replace(two, dims=("t", "θ"))


def test_a_new_problem_kind_is_one_table_entry(monkeypatch, santa_fe):
    """What the solver of several populations (or any new kind) needs: one entry of
    SOLVERS; the most specific class of a problem wins over its base classes."""
    class Groups:
        pass

    class Special(mw.SantaFeBar):
        pass

    calls = []

    def solve_groups(problem, nx=201, nt=201, tol=1e-8):
        calls.append((type(problem).__name__, nx, nt, tol))
        return santa_fe

    monkeypatch.setitem(solve_module.SOLVERS, Groups, solve_groups)
    monkeypatch.setitem(solve_module.SOLVERS, Special, solve_groups)
    assert mw.solve(Groups(), nx=21) is santa_fe and mw.solve(Special(), nt=5) is santa_fe
    assert calls == [("Groups", 21, 201, 1e-8), ("Special", 201, 5, 1e-8)]
    with pytest.raises(mw.ParameterError, match=r"method='fdm' is invalid for a Groups "
                       r"problem: its solver solve_groups takes nx, nt, tol"):
        mw.solve(Groups(), method="fdm")


#: The solvers' own names, kept as aliases of ``mw.solve``; only their modules call them.
OLD_NAMES = {"solve_continuous", "solve_batch", "solve_2d", "solve_2d_batch",
             "solve_populations", "solve_two_state"}
DEFINING = {"solve.py", "solve2d.py", "populations.py", "finite_state.py"}


def _old_name_calls(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if name in OLD_NAMES:
                calls.append(f"{path.name}:{node.lineno} {name}")
    return calls


def test_the_package_and_the_notebooks_solve_through_the_front_door():
    paths = [p for p in PACKAGE.rglob("*.py")
             if not (p.parent == PACKAGE and p.name in DEFINING)]
    paths += sorted((PACKAGE.parent / "notebooks").glob("*.py"))
    assert len(paths) > 100
    assert [c for p in paths for c in _old_name_calls(p)] == []
