"""A user's script works as written: ``mw.scan`` and ``mw.sweep`` called at the top level of a
plain script (no ``if __name__ == "__main__":``) run their parallel parts without running the
script again (a process started by spawn imports ``__main__`` anew: the script's top level ran
once more in every worker, and the pool broke)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCAN_SCRIPT = """\
import json
import threading

import mfgwork as mw
from mfgwork.workflows import scan_solve

with open("top-level.log", "a") as log:     # one line each time this top level runs
    log.write("ran\\n")

# the parallel finishing of a 201 x 201 scan, at 21 x 20: every point goes to the threads
scan_solve.PARALLEL_MIN_CELLS = 0
scan_solve._cores = lambda: 2
both = threading.Barrier(2, timeout=20)     # the two points are finished at the same time
finish_one = scan_solve._finish_one
threads = set()


def finish_together(*job):
    threads.add(threading.get_ident())
    both.wait()
    return finish_one(*job)


scan_solve._finish_one = finish_together
ds = mw.scan(mw.SantaFeBar, {"eps": [0.001, 0.002]},
             fixed={"threshold": 0.6, "sigma": 0.3, "T": 5.0}, backend="torch", device="cpu",
             nx=21, nt=20, max_iter=2, progress=False)
try:        # a Dask LocalCluster's workers are spawned: refused before a store exists
    mw.scan(mw.SantaFeBar, {"eps": [0.05]}, store="scan.zarr", nx=21, nt=20, dask=True,
            progress=False)
except mw.ParameterError as exc:
    refused = str(exc)
print(json.dumps({"status": [str(s) for s in ds.status.values],
                  "finished_by": [str(s) for s in ds.finished_by.values],
                  "threads": len(threads), "refused": refused}))
"""


def run_script(folder: Path, source: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python script.py`` in ``folder`` with this checkout importable."""
    script = folder / "script.py"
    script.write_text(textwrap.dedent(source))
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_a_scan_from_a_plain_script_finishes_its_points_in_parallel_once(tmp_path):
    """Two points a torch batch leaves open, finished together by two threads; a scan on a
    Dask LocalCluster, whose workers would run the script again, refused with the line and
    the cure before a store or a cluster exists."""
    pytest.importorskip("xarray")
    pytest.importorskip("torch")
    pytest.importorskip("distributed")
    done = run_script(tmp_path, SCAN_SCRIPT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "top-level.log").read_text() == "ran\n"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["threads"] == 2
    assert out["status"] == ["not_converged"] * 2            # max_iter=2: kept, not failed
    assert all(f in ("single", "single-warm", "batch") for f in out["finished_by"])
    line = 1 + next(i for i, text in enumerate(SCAN_SCRIPT.splitlines()) if "dask=True" in text)
    assert out["refused"].startswith("mw.scan(dask=True) starts worker processes that would")
    assert f"(line {line} is outside if __name__" in out["refused"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["script.py", "top-level.log"]


SWEEP_SCRIPT = """\
import nbformat

import mfgwork as mw

with open("top-level.log", "a") as log:     # one line each time this top level runs
    log.write("ran\\n")

nb = nbformat.v4.new_notebook()
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                             "language": "python"}
parameters = nbformat.v4.new_code_cell("level = 0\\nout_dir = None")
parameters.metadata["tags"] = ["parameters"]
nb.cells = [parameters, nbformat.v4.new_code_cell(
    "import pathlib\\npathlib.Path(out_dir).mkdir(exist_ok=True)\\n"
    "(pathlib.Path(out_dir) / 'level.txt').write_text(str(level))")]
nbformat.write(nb, "tiny.ipynb")
index = mw.sweep("tiny.ipynb", {"level": [1]}, "sweep", workers=1, progress=False)
print(index.counts(), index[0]["error"])
"""


@pytest.mark.slow
def test_a_sweep_from_a_plain_script_runs_in_its_workers_once(tmp_path):
    """One run in one local worker: the worker runs the notebook, not the script."""
    pytest.importorskip("papermill")
    done = run_script(tmp_path, SWEEP_SCRIPT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "top-level.log").read_text() == "ran\n"
    assert done.stdout.strip().splitlines()[-1] == "{'done': 1, 'failed': 0, 'pending': 0} None"
    runs = list((tmp_path / "sweep" / "runs").iterdir())
    assert [(r / "level.txt").read_text() for r in runs] == ["1"]


def test_a_sweep_worker_that_dies_is_an_error_of_its_run_only():
    """A worker process that ends without answering: the run's error says so (the sweep
    records it and goes on)."""
    from mfgwork.workflows.sweeps import _ask

    dead = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    dead.wait()
    with pytest.raises(RuntimeError, match=r"ended \(exit status 3\) during run r1"):
        _ask(dead, {"name": "r1"})


GUARD_SCRIPT = """\
from mfgwork.core.processes import unguarded_script_line

print(unguarded_script_line())
if True:
    print(unguarded_script_line())
if "__main__" == __name__:
    print(unguarded_script_line())


def later():
    return unguarded_script_line()


if __name__ == "__main__":
    print(later())
print(later())
"""


def test_a_call_outside_the_main_guard_is_found_by_its_line(tmp_path):
    done = run_script(tmp_path, GUARD_SCRIPT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3", "5", "None", "None", "16"]
