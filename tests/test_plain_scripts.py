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

pytest.importorskip("xarray")
pytest.importorskip("torch")

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
print(json.dumps({"status": [str(s) for s in ds.status.values],
                  "finished_by": [str(s) for s in ds.finished_by.values],
                  "threads": len(threads)}))
"""


def run_script(folder: Path, source: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python script.py`` in ``folder`` with this checkout importable."""
    script = folder / "script.py"
    script.write_text(textwrap.dedent(source))
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_a_scan_from_a_plain_script_finishes_its_points_in_parallel_once(tmp_path):
    done = run_script(tmp_path, SCAN_SCRIPT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "top-level.log").read_text() == "ran\n"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["threads"] == 2
    assert out["status"] == ["not_converged"] * 2            # max_iter=2: kept, not failed
    assert all(f in ("single", "single-warm", "batch") for f in out["finished_by"])
