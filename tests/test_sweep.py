"""Sweeps: spec checks, expansion and naming; end-to-end runs in worker processes and on a
Dask LocalCluster; a failing run recorded without stopping the others; resume after SIGKILL
of the sweep process."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.workflows.specs import SpecError, parse_spec, run_name

pytest.importorskip("papermill")


@pytest.fixture(scope="module")
def tiny_notebook(tmp_path_factory) -> Path:
    """A notebook that solves Santa Fe on a 21 x 21 grid and writes a run folder."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell(
        "threshold = 0.6\nsigma = 0.5\nnx = 21\nnt = 21\ndevice = 'cpu'\nout_dir = None")
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import mfgwork as mw\n"
        "res = mw.solve(mw.SantaFeBar(threshold=threshold, sigma=sigma), nx=nx, nt=nt,"
        " device=device, tol=1e-6)\n"
        "mw.save_run(out_dir, res)")
    nb.cells = [params, body]
    path = tmp_path_factory.mktemp("nb") / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


# -- specs ---------------------------------------------------------------------------------------
NOTEBOOK_DEFAULTS = {"threshold": 0.6, "sigma": 0.5, "nx": 21, "device": "cpu", "out_dir": None}


def test_expansion_linspace_range_zip() -> None:
    spec = parse_spec({"threshold": {"linspace": [0.3, 0.9, 7]}, "nx": {"range": [21, 42, 10]},
                       "sigma": [0.4, 0.8], "device": ["cpu", "auto"],
                       "zip": [["sigma", "device"]]}, None, NOTEBOOK_DEFAULTS)
    runs = spec.runs()
    assert len(runs) == 7 * 3 * 2
    assert sorted({r.parameters["threshold"] for r in runs}) == [0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                                                  0.9]
    assert {r.parameters["nx"] for r in runs} == {21, 31, 41}
    assert {(r.parameters["sigma"], r.parameters["device"]) for r in runs} == {
        (0.4, "cpu"), (0.8, "auto")}
    assert len({r.name for r in runs}) == len(runs)
    floats = parse_spec({"sigma": {"range": [0.1, 0.5, 0.1]}}, None, NOTEBOOK_DEFAULTS).runs()
    assert [r.parameters["sigma"] for r in floats] == [0.1, 0.2, 0.3, 0.4]


def test_fixed_parameters_and_coercion_keep_names_stable() -> None:
    a = parse_spec({"sigma": [1, 0.5]}, {"nx": 21.0}, NOTEBOOK_DEFAULTS).runs()
    b = parse_spec("sigma: [1.0, 0.5]\nnx: 21", None, NOTEBOOK_DEFAULTS).runs()
    assert [r.parameters for r in a] == [r.parameters for r in b]
    assert type(a[0].parameters["sigma"]) is float and type(a[0].parameters["nx"]) is int
    assert [r.name for r in a] == [r.name for r in b]
    p = {"sigma": 0.5, "threshold": 0.6}
    assert run_name(p, ["sigma"]) == run_name(dict(reversed(p.items())), ["sigma"])
    assert run_name(p, ["sigma"]) != run_name(p | {"threshold": 0.61}, ["sigma"])
    assert run_name(p, ["sigma"]).startswith("sigma=0.5-")


@pytest.mark.parametrize(("spec", "words"), [
    ("temperature: [1, 2]", ["unknown parameter", "temperature", "threshold"]),
    ("threshold: []", ["threshold", "empty list"]),
    ("threshold: [0.5, fast]", ["threshold", "'fast'", "float"]),
    ("nx: [21, 30.5]", ["nx", "30.5", "int"]),
    ("threshold: [0.5, 0.6\nsigma: [0.3]", ["not valid YAML"]),
    ("threshold: {linspace: [0.3, 0.9]}", ["threshold", "linspace"]),
    ("threshold: [0.4, 0.5]\nsigma: [0.3]\nzip: [[threshold, sigma]]", ["equal length"]),
    ("out_dir: [a, b]", ["out_dir", "set by the sweep"]),
])
def test_bad_specs_rejected_before_any_run(tiny_notebook, tmp_path, spec, words) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(spec)
    out = tmp_path / "sweep"
    with pytest.raises(SpecError) as err:
        mw.sweep(tiny_notebook, grid, out, workers=1, progress=False)
    for w in words:
        assert w in str(err.value)
    assert not out.exists()


def test_cli_reports_bad_spec(tiny_notebook, tmp_path, capsys) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text('{"threshold": [0.5], "bogus": [1]}')
    code = cli(["sweep", str(tiny_notebook), "--grid", str(grid), "-o", str(tmp_path / "s")])
    assert code == 2
    assert "bogus" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


# -- end to end ----------------------------------------------------------------------------------
def _csv(folder: Path) -> list[dict[str, str]]:
    with open(folder / "index.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _stamp(folder: Path) -> dict[str, int]:
    """Inode of each finished run's metrics file: changes if the run is written again."""
    return {p.name: (p / "metrics.json").stat().st_ino
            for p in (folder / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")}


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


GRID = {"threshold": [0.4, 0.6, 1.5], "sigma": [0.4, 0.6]}


@pytest.fixture(scope="module")
def finished_sweep(tiny_notebook, tmp_path_factory) -> Path:
    """3 thresholds x 2 noise levels at 21 x 21 with 2 workers; threshold 1.5 is outside
    (0, 1), so those two runs fail."""
    out = tmp_path_factory.mktemp("sweep") / "santa_fe"
    index = mw.sweep(tiny_notebook, GRID, out, {"nx": 21}, workers=2, progress=False)
    assert isinstance(index, mw.SweepIndex)
    return out


@pytest.mark.slow
def test_sweep_end_to_end_with_a_failing_combination(finished_sweep) -> None:
    index = mw.load_sweep(finished_sweep)
    assert len(index) == 6 and index.counts() == {"done": 4, "failed": 2, "pending": 0}
    for row in index.where(status="failed"):
        assert row["threshold"] == 1.5
        assert "threshold" in row["error"] and "1.5" in row["error"]
    for row in index.where(status="done"):
        res = mw.load(index.run_folder(row))
        assert res.params["threshold"] == row["threshold"]
        assert res.params["sigma"] == row["sigma"] and res.M.shape == (22, 21)
        assert row["converged"] is True and row["iterations"] > 0
        assert row["wall_time"] > row["solve_time"] > 0 and row["device"] == "cpu"
    for sigma in (0.4, 0.6):
        rows = sorted(index.where(status="done", sigma=sigma), key=lambda r: r["threshold"])
        attendance = [r["mean_attendance"] for r in rows]
        assert attendance == sorted(attendance), "mean attendance must grow with A*"
    on_disk = _csv(finished_sweep)
    assert [r["run"] for r in on_disk] == [r["run"] for r in index]
    assert [r["status"] for r in on_disk] == [r["status"] for r in index]
    (finished_sweep / "index.csv").unlink()                 # rebuilt from the run folders
    mw.load_sweep(finished_sweep).write_csv()
    assert _csv(finished_sweep) == on_disk
    assert (finished_sweep / "spec.yaml").is_file()
    assert _leftovers(finished_sweep) == []


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_retries_failed_only_when_asked(
        tiny_notebook, finished_sweep) -> None:
    before = _stamp(finished_sweep)
    failed = {p.name: p.stat().st_mtime_ns for p in (finished_sweep / "failed").iterdir()}
    again = mw.sweep(tiny_notebook, GRID, finished_sweep, {"nx": 21}, workers=2,
                     progress=False)
    assert again.counts() == {"done": 4, "failed": 2, "pending": 0}
    assert _stamp(finished_sweep) == before
    assert {p.name: p.stat().st_mtime_ns for p in (finished_sweep / "failed").iterdir()
            } == failed
    retried = mw.sweep(tiny_notebook, GRID, finished_sweep, {"nx": 21}, workers=2,
                       retry_failed=True, progress=False)
    assert retried.counts() == {"done": 4, "failed": 2, "pending": 0}
    assert _stamp(finished_sweep) == before
    after = {p.name: p.stat().st_mtime_ns for p in (finished_sweep / "failed").iterdir()}
    assert after.keys() == failed.keys() and all(after[k] > failed[k] for k in failed)


@pytest.mark.slow
def test_dask_local_cluster(tiny_notebook, tmp_path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "dask"
    index = mw.sweep(tiny_notebook, {"threshold": [0.4, 0.6], "sigma": [0.4, 0.6]}, out,
                     workers=2, dask=True, progress=False)
    assert index.counts() == {"done": 4, "failed": 0, "pending": 0}
    assert [r["status"] for r in _csv(out)] == ["done"] * 4
    assert all(mw.load(index.run_folder(r)).M.shape == (22, 21) for r in index)


def test_stale_temporaries_removed_unless_their_process_still_runs(tmp_path) -> None:
    from helpers import dead_temporaries

    from mfgwork.core import storage
    from mfgwork.workflows.sweeps import _clean_stale

    for sub in ("runs", "locks", "failed"):
        (tmp_path / sub).mkdir()
    a, b = tmp_path / "runs" / "a-0123456789ab", tmp_path / "runs" / "b-0123456789ab"
    dead_temporaries((a, "tmp", True, ""), (a, "running", False, ".ipynb"),
                     (tmp_path / "index.csv", "tmp", False, ""))
    # b: a straggler still running (this process) keeps its own
    straggler = [storage.temporary_sibling(b, "tmp"),
                 storage.temporary_sibling(b, "running", directory=False, suffix=".ipynb")]
    _clean_stale(tmp_path)
    assert _leftovers(tmp_path) == sorted(f"runs/{p.name}{end}" for p in straggler
                                          for end in ("", ".mfgwork-owner"))


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_resume_after_sigkill_of_the_sweep_process(tiny_notebook, tmp_path) -> None:
    import psutil

    out, grid = tmp_path / "killed", tmp_path / "grid.yaml"
    grid.write_text("threshold: [0.3, 0.45, 0.6]\n")   # three runs on two workers
    cmd = [sys.executable, "-m", "mfgwork", "sweep", str(tiny_notebook), "--grid", str(grid),
           "-o", str(out), "--workers", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _stamp_safe(out):
        time.sleep(0.2)
    children = _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _stamp(out)
    assert 1 <= len(done_before) < 3, "the sweep must be killed mid-way"
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"workers or kernels outlived the killed sweep: {alive}"

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    index = mw.load_sweep(out)
    assert index.counts() == {"done": 3, "failed": 0, "pending": 0}
    after = _stamp(out)
    assert sorted(after) == sorted(r["run"] for r in index)           # one folder per run
    assert {k: after[k] for k in done_before} == done_before            # none run twice
    assert [r["status"] for r in _csv(out)] == ["done"] * 3
    assert _leftovers(out) == []


def _stamp_safe(folder: Path) -> dict[str, int]:
    return _stamp(folder) if (folder / "runs").is_dir() else {}
