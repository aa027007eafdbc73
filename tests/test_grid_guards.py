"""Grids refused before any work: axis counts computed from their definitions (zip lengths,
ranges that overflow), scan points checked as ``mw.solve`` checks them before a store is made,
numbers read alike from grid YAML and ``-p``, grids too coarse for their model, and models
that read m without declaring it.

Every refusal is checked for its type, for what it names and for the absence of the work it
guards (replaced by a function that fails)."""

from __future__ import annotations

import random
import re
import warnings

import nbformat
import numpy as np
import pytest

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.core.errors import ResolutionWarning
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows import specs
from mfgwork.workflows.specs import SpecError, count_points, parse_spec


def _never(*args, **kwargs):
    raise AssertionError("heavy work started although the request should have been refused")


@pytest.fixture
def no_expansion(monkeypatch):
    """Building an axis's values, the scan's points or its layout fails the test."""
    for target, name in ((specs, "_range"), (specs, "_linspace"),
                         (scan_module, "check_points"), (scan_module, "make_layout"),
                         (scan_module, "_run")):
        monkeypatch.setattr(target, name, _never)


@pytest.fixture
def notebook(tmp_path):
    """A notebook with a parameters cell (threshold, out_dir) that is never executed."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    cell = nbformat.v4.new_code_cell("threshold = 0.6\nout_dir = None")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    return path


# -- item 7: axis counts from their definitions -------------------------------------------------
HUGE_ZIP = {"threshold": [0.4, 0.6], "eps": {"range": [0.1, 1e8, 1e-1]},
            "zip": [["threshold", "eps"]]}
OVERFLOWING_RANGE = {"threshold": {"range": [0.1, 0.9, 1e-310]}}


def test_a_zip_of_unequal_lengths_is_refused_before_building_the_longer(no_expansion):
    with pytest.raises(SpecError, match=r"equal length, got threshold: 2, eps: 999999999$"):
        parse_spec(HUGE_ZIP, max_points=1000)
    with pytest.raises(SpecError, match=r"threshold: 2, eps: 999999999"):
        mw.scan(mw.SantaFeBar, HUGE_ZIP, device="cpu", progress=False)


@pytest.mark.parametrize("grid", [OVERFLOWING_RANGE, {"threshold": {"range": [-1e308, 1e308,
                                                                              1.0]}},
                                  {"nx": {"range": [3, 10**300, 1]}}],
                         ids=["quotient-overflows", "difference-overflows", "huge-int"])
def test_a_range_beyond_any_count_is_a_spec_error(grid, no_expansion):
    name = next(iter(grid))
    with pytest.raises(SpecError, match=rf"parameter '{name}': range .* has more than 2\*\*53"):
        parse_spec(grid, max_points=1000)


def test_an_overflowing_range_is_refused_by_scan_and_sweep_on_the_command_line(
        tmp_path, notebook, capsys, no_expansion):
    grid = "{threshold: {range: [0.1, 0.9, 1.0e-310]}}"
    store, folder = tmp_path / "store.zarr", tmp_path / "sweep"
    assert cli(["scan", "--problem", "santa_fe", "--grid", grid, "-o", str(store),
                "--device", "cpu", "--no-progress"]) == 2
    assert cli(["sweep", str(notebook), "--grid", grid, "-o", str(folder),
                "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("'threshold': range [0.1, 0.9, 1e-310] has more than 2**53") == 2
    assert not store.exists() and not folder.exists()


def test_counts_match_the_expanded_grid():
    """The count made without expanding is the number of points the spec builds, on random
    ranges (integers and floats, both directions, ends reached up to round-off), linspaces
    and zips; an integer range counts as Python's range."""
    rng = random.Random(39)
    for _ in range(200):
        a = rng.choice([rng.randint(-20, 20), round(rng.uniform(-2, 2), rng.randint(0, 3))])
        step = rng.choice([rng.randint(1, 5), round(rng.uniform(0.05, 1), 2)])
        n = rng.randint(1, 12)
        b = a + step * rng.choice([n, n - 0.5, n + 1e-12, n - 1e-12])
        axis = {"range": [a, b, step]} if rng.random() < 0.5 else {"range": [b, a, -step]}
        raw = {"x": axis, "y": {"linspace": [0.0, 1.0, rng.randint(1, 3)]}, "z": [1, 2, 3]}
        if rng.random() < 0.5:
            raw |= {"u": ["p", "q", "r"], "zip": [["z", "u"]]}
        assert count_points(raw) == len(parse_spec(raw).runs()), raw
        if all(isinstance(v, int) for v in axis["range"]):
            assert count_points({"x": axis}) == len(range(*axis["range"]))


# -- item 11: one reading of numbers -----------------------------------------------------------
TOKENS = ["1e300", "1.0e5", "-2E-3", "+.5e1", "1e-310", "1_000", "0.5", "7", "true", "null",
          "cpu", "1e", "e5", "1e3x", "\"1e3\"", "[1e2, 2.5e-1]", "{a: 1e2}"]


@pytest.mark.parametrize("token", TOKENS)
def test_grid_yaml_and_p_values_read_the_same(token):
    from mfgwork.workflows.runs import parse_value

    assert specs.read_spec(f"value: {token}")["value"] == parse_value(token)


def test_exponent_numbers_in_a_grid_reach_the_problem_as_floats(no_expansion):
    spec = parse_spec("T: [1e300, 2e1]\nsigma: 5e-1", declared={"T": 10.0, "sigma": 0.5})
    assert spec.axes == ((("T",), ((1e300,), (20.0,))),) and spec.fixed == {"sigma": 0.5}
    with pytest.raises(SpecError, match=r"sigma='5e-1x' \(str\) is invalid: .* expects a float"):
        parse_spec("sigma: [5e-1x]", declared={"sigma": 0.5})


# -- item 8: scan points checked as mw.solve checks them, before a store exists ----------------
@pytest.fixture
def no_scan_solve(monkeypatch):
    """Making the layout (hence the store) or solving a block fails the test."""
    for name in ("make_layout", "_run"):
        monkeypatch.setattr(scan_module, name, _never)


@pytest.mark.parametrize(("fixed", "options", "named"), [
    ({"T": 1e18}, {}, r"diffusion number nu\*dt/h\*\*2 = 2\.49e\+17 is above"),
    ({"sigma": 1e-300}, {}, r"nu = sigma\*\*2/2 = 0\.0 is out of the range of float64"),
    ({}, {"nx": 10**6}, r"diffusion number .* nx=1000000"),
    ({}, {"nx": 10**7, "nt": 20}, r"diffusion number .* nx=10000000, nt=20"),
], ids=["T-1e18", "sigma-1e-300", "nx-1e6", "nx-1e7"])
def test_scan_refuses_points_that_solve_refuses(fixed, options, named, tmp_path,
                                                no_scan_solve):
    with pytest.raises(mw.ParameterError, match=named) as by_solve:
        mw.solve(mw.SantaFeBar(**fixed), **options, progress=False)
    store = tmp_path / "store.zarr"
    with pytest.raises(mw.ParameterError, match=named) as by_scan:
        mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.6]}, fixed=fixed, **options,
                store=store, device="cpu", progress=False)
    assert str(by_scan.value).startswith(str(by_solve.value))
    assert "at the scan point" in str(by_scan.value) and not store.exists()


def test_cli_scan_exits_2_before_making_the_store(tmp_path, capsys, no_scan_solve):
    store = tmp_path / "store.zarr"
    code = cli(["scan", "--problem", "santa_fe", "--grid", "threshold: [0.4, 0.6]", "-p", "T",
                "1e18", "-o", str(store), "--device", "cpu", "--no-progress"])
    assert code == 2 and not store.exists() and not any(tmp_path.iterdir())
    assert "T=1e+18" in capsys.readouterr().err


def test_scan_checks_every_sigma_not_only_the_first_point(no_scan_solve):
    with pytest.raises(mw.ParameterError, match=r"sigma=1e-300.*at the scan point "
                                                r"\{'sigma': 1e-300\}"):
        mw.scan(mw.SantaFeBar, {"sigma": [0.5, 0.3, 1e-300]}, nx=21, nt=20, device="cpu",
                progress=False)


def congested_or_not(threshold: float = 0.6, congested: bool = False) -> mw.SantaFeBar:
    """Santa Fe whose coupling state is the attendance path, or with congestion (H depends
    on m) the whole density path: nx times larger."""
    return mw.SantaFeBar(threshold=threshold,
                         hamiltonian=mw.Congestion() if congested else None)


def test_scan_counts_the_memory_of_its_largest_point(monkeypatch, no_scan_solve):
    monkeypatch.setenv("MFGWORK_MAX_MEMORY", "200 MiB")  # 46 MiB without congestion, 275 with
    grid = {"threshold": [0.5, 0.6], "congested": [False, True]}
    with pytest.raises(mw.ParameterError, match=r"^nx, nt too large: one point of the scan"):
        mw.scan(congested_or_not, grid, nx=501, nt=2000, keep=(), device="cpu",
                progress=False)
    with pytest.raises(AssertionError, match="heavy work started"):   # the first point fits
        mw.scan(congested_or_not, {"threshold": [0.5, 0.6]}, nx=501, nt=2000, keep=(),
                device="cpu", progress=False)


# -- item 9: grids too coarse for their model; plots span the domain ----------------------------
def test_santa_fe_on_a_grid_coarser_than_its_model_warns_what_it_resolves():
    with pytest.warns(ResolutionWarning, match=r"nx=3 gives the θ step h = 5 on \[-5, 5\].*"
                                               r"use nx >= 11 \(h <= 1\)"):
        mw.solve(mw.SantaFeBar(), nx=3, nt=4, progress=False)
    with pytest.warns(ResolutionWarning, match=r"use nx >= 5 \(h <= 0.25\)"):
        mw.solve(mw.SantaFeBar(theta_max=0.5), nx=3, nt=4, progress=False)
    with pytest.warns(ResolutionWarning, match=r"nx=9"):
        mw.solve_batch([mw.SantaFeBar(), mw.SantaFeBar(threshold=0.5)], nx=9, nt=4,
                       progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResolutionWarning)
        mw.solve(mw.SantaFeBar(), nx=11, nt=4, progress=False)


def test_a_room_on_a_grid_that_misses_its_doors_warns():
    with pytest.warns(ResolutionWarning) as caught:
        mw.solve_2d(mw.Room(), nx=3, nt=2, progress=False)
    text = " | ".join(str(w.message) for w in caught)
    assert "door on the right wall y=0.25, width 0.1 holds no node of the 3 x 3 grid" in text
    assert "spread 0.1 of the initial crowd" in text and "nx, ny >= 11" in text
    problem = mw.MFGProblem2D(0.0, 1.0, 0.0, 1.0, 1.0, 0.3, lambda X, Y: 1.0 + 0 * X,
                              lambda X, Y: 0 * X, lambda t, X, Y, m: m,
                              obstacles=(mw.Obstacle(0.3, 0.4, 0.3, 0.4),))
    assert "holds no node" in " ".join(problem.unresolved(problem.grid(3, 3, 2)))
    assert problem.unresolved(problem.grid(21, 21, 2)) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResolutionWarning)
        mw.solve_2d(mw.Room(), nx=11, nt=2, progress=False)


def test_a_scan_warns_once_before_any_work_when_its_grid_is_too_coarse(no_scan_solve):
    with pytest.warns(ResolutionWarning, match=r"nx=5 gives .* \(points of the scan\)") as caught, \
            pytest.raises(AssertionError, match="heavy work started"):
        mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.5, 0.6]}, nx=5, nt=4, device="cpu",
                progress=False)
    assert len([w for w in caught if issubclass(w.category, ResolutionWarning)]) == 1


def test_the_heatmaps_span_the_domain_not_beyond():
    import matplotlib

    from mfgwork.analysis import plots, plots2d

    matplotlib.use("Agg")
    with pytest.warns(ResolutionWarning):
        coarse = mw.solve(mw.SantaFeBar(), nx=3, nt=4, progress=False)
    ax = plots.plot_density_heatmap(coarse).axes[0]
    assert ax.get_ylim() == pytest.approx((-5.0, 5.0))
    assert ax.get_xlim() == pytest.approx((0.0, 10.0))
    with pytest.warns(ResolutionWarning):
        room = mw.solve_2d(mw.Room(), nx=5, nt=2, progress=False)
    ax = plots2d.plot_density_2d(room, times=[0.0]).axes[0]
    assert ax.get_xlim() == pytest.approx((0.0, 1.0)) and ax.get_ylim() == pytest.approx((0, 1))


class ReadsM(mw.Hamiltonian):
    """H = ½|p|²/(1 + m), which reads m but does not declare depends_on_m."""

    name = "reads_m"
    isotropic = True

    def value(self, x, p, m, xp):
        return 0.5 * p**2 / (1 + m)

    def dp(self, x, p, m, xp):
        return p / (1 + m)

    def dpp(self, x, p, m, xp):
        return 1 / (1 + m) + 0 * p


class UntracedReadsM(ReadsM):
    """The same H through a function the tracer does not know (so only sampling finds m)."""

    def value(self, x, p, m, xp):
        return 0.5 * xp.float_power(p, 2) / (1 + m)


def test_a_model_reading_m_without_declaring_it_is_refused_when_the_problem_is_built():
    traced = r"invalid: its value reads m \(H = .*\) but the class does not declare " \
        r"depends_on_m = True"
    sampled = r"invalid: its value or dp failed with m=None.*declare depends_on_m = True"
    for H, declare in ((ReadsM(), traced), (UntracedReadsM(), sampled)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # (the untraced model's note)
            with pytest.raises(mw.ParameterError, match=declare):
                mw.SantaFeBar(hamiltonian=H)
            with pytest.raises(mw.ParameterError, match=declare):
                mw.Room(hamiltonian=H)
    declared = type("Declared", (ReadsM,), {"depends_on_m": True,
                                            "dm": lambda self, x, p, m, xp: -self.value(
                                                x, p, m, xp) / (1 + m)})
    assert mw.SantaFeBar(hamiltonian=declared()).hamiltonian.depends_on_m


# -- item 11: the accuracy a tol below round-off reaches, said honestly --------------------------
def test_a_tol_below_round_off_states_an_approximate_floor_that_the_result_keeps():
    """The warning's range holds: the solve ends converged at 100 ε or stalled with its
    residual inside the stated range, saying so."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = mw.solve(mw.SantaFeBar(sigma=0.3, threshold=0.4), nx=21, nt=20, tol=1e-20,
                       progress=False)
    said = [str(w.message) for w in caught if str(w.message).startswith("tol=")]
    assert len(said) == 1 and re.match(r"tol=1e-20 is below what float64 resolves; iterating to "
                                       r"tol=2\.2e-14 instead \(approximate: .* measured 1e-16 "
                                       r"to 8e-13.*status 'stalled'", said[0])
    assert res.status in ("converged", "stalled") and res.residual <= 8e-13
    assert (res.status == "stalled") == any(isinstance(w.message, mw.ConvergenceWarning)
                                            for w in caught)
    assert res.converged == (res.residual <= 100 * np.finfo(float).eps)


def test_a_grid_its_caller_writes_into_changes_no_later_solve():
    """``problem.grid`` gives the caller arrays of its own: writing them (hostile, or a
    plotting helper working in place) leaves the next solve as it was."""
    problem = mw.SantaFeBar()
    before = mw.solve(problem, nx=41, nt=40, progress=False)
    grid = problem.grid(41, 40)
    grid.x[:] = 0.0
    grid.weights[:] = 1.0
    after = mw.solve(problem, nx=41, nt=40, progress=False)
    assert np.array_equal(before.M, after.M)
