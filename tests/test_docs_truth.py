"""What the documents say about a solve comes from the solve: the iteration that the convergence
figure's legend and the notebooks name is the Result's, the figure tells certificates from
iterates, the timings add up with the compilation where it happens, and long work shows
progress in a terminal only."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
from helpers import write_notebook

import mfgwork as mw
from mfgwork import plots
from mfgwork.core import progress

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

#: The iterations a document may name, and how it names them.
SCHEME_WORDS = re.compile(r"\b(Anderson|Picard|Newton|fictitious play|relaxation)\b")
#: Notebooks whose solves are Santa Fe solves with the default iteration.
SANTA_FE_NOTEBOOKS = ("01_santa_fe_bar", "02_cpu_vs_accelerator", "03_explorer",
                      "05_parameter_scan")


@pytest.fixture(scope="module")
def solves() -> dict[str, mw.Result]:
    bar = mw.SantaFeBar()
    return {"default": mw.solve(bar, nx=31, nt=30, progress=False),
            "anderson": mw.solve(bar, nx=31, nt=30, iteration="anderson", progress=False)}


def _legend(result: mw.Result) -> list[str]:
    ax = plots.plot_convergence(result).axes[0]
    return [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.mark.parametrize("kind", ["default", "anderson"])
def test_the_convergence_legend_names_the_iteration_of_the_result(solves, kind):
    res = solves[kind]
    labels = " | ".join(_legend(res))
    named = plots.SCHEME_NAMES[res.scheme]
    assert res.scheme == res.params["iteration"]["scheme"]
    assert named in labels and plots.describe_iteration(res) in labels
    others = [n for s, n in plots.SCHEME_NAMES.items() if s != res.scheme and n not in named]
    assert not [n for n in others if n in labels], labels
    assert ("Newton steps" in labels) == ("fallback" in plots.describe_iteration(res))


@pytest.mark.parametrize("kind", ["default", "anderson"])
def test_the_figure_draws_the_certificates_apart_from_the_iterates(solves, kind):
    """The certificates decide: the result's residual is the last (lowest) one ≤ tol, and
    the figure draws exactly those entries in their own series."""
    res = solves[kind]
    residual = np.array(res.history["residual"])
    certificate = np.array(res.history["certificate"], dtype=bool)
    assert certificate.size == residual.size and certificate[-1]
    assert res.converged and res.residual == pytest.approx(residual[certificate].min())
    ax = plots.plot_convergence(res).axes[0]
    drawn = next(line for line in ax.lines if line.get_label().startswith("certificate"))
    np.testing.assert_array_equal(drawn.get_xdata(), np.flatnonzero(certificate) + 1)
    iterates = next(line for line in ax.lines if line.get_label().startswith("residual of"))
    np.testing.assert_array_equal(iterates.get_xdata(), np.flatnonzero(~certificate) + 1)


def test_the_two_state_result_names_the_iteration_that_ran():
    """Newton's method on the attendance path (notebook 07 says so), the mixing scheme only
    where the warmup takes every iteration."""
    game = mw.TwoStateElFarol()
    newton = mw.solve(game, nt=100)
    assert newton.scheme == "newton" and newton.params["iteration"]["mixing"]["scheme"] \
        == "anderson"
    with warnings.catch_warnings():   # three mixing iterations need not converge
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        mixed = mw.solve(game, nt=100, warmup=3, max_iter=3)
    assert mixed.scheme == "anderson"
    assert plots.SCHEME_NAMES["newton"] in " ".join(_legend(newton))


def _prose(path: Path) -> str:
    """The Markdown and the code comments of a notebook."""
    nb = nbformat.read(path, as_version=4)
    parts = [c.source for c in nb.cells if c.cell_type == "markdown"]
    parts += [line.split("#", 1)[1] for c in nb.cells if c.cell_type == "code"
              for line in c.source.splitlines() if "#" in line]
    return "\n".join(parts)


@pytest.mark.parametrize("name", SANTA_FE_NOTEBOOKS)
def test_santa_fe_notebooks_name_no_iteration_but_the_results(solves, name):
    """A notebook's prose names an iteration only where the Result's description of its
    Santa Fe solves does (or where it names the per-step Newton's method of HJB, which that
    description shares), never one that does not run."""
    ran = plots.describe_iteration(solves["default"])
    prose = _prose(NOTEBOOKS / f"{name}.ipynb")
    wrong = {w for w in SCHEME_WORDS.findall(prose) if w not in ran}
    assert not wrong, f"{name} names {sorted(wrong)}; its Santa Fe solves run {ran!r}"


def test_santa_fe_notebook_prints_the_iteration_from_the_result():
    nb = nbformat.read(NOTEBOOKS / "01_santa_fe_bar.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "plots.describe_iteration(res)" in code


def test_a_run_folder_records_the_iteration_and_the_timings_of_its_result(solves, tmp_path):
    res = solves["default"]
    folder = mw.save_run(tmp_path / "run", res, parameters={"nx": 31})
    parameters = json.loads((folder / "parameters.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    assert parameters["iteration"]["scheme"] == res.scheme == "newton"
    assert metrics["timings"] == pytest.approx(res.timings)
    assert metrics["history"]["certificate"] == res.history["certificate"]


FRESH_SOLVE = """
import json, sys
import mfgwork as mw
res = mw.solve(mw.SantaFeBar(), nx=102, nt=102, progress=False)
folder = mw.save_run(sys.argv[1], res)
print(json.dumps({"timings": res.timings, "coupling": res.history["time_coupling"],
                  "metrics": json.loads((folder / "metrics.json").read_text())["timings"]}))
"""


def test_a_first_solve_in_a_fresh_process_records_its_compilation(tmp_path):
    """Empty kernel caches: the first solve compiles, and says so in ``compile``; no phase
    carries compilation (the coarse start and the first Newton iteration are fast), and the
    parts add up to the total, in the result and in the run folder's metrics.json."""
    env = os.environ | {"MFGWORK_MODEL_CACHE": str(tmp_path / "models"),
                        "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, "-c", FRESH_SOLVE, str(tmp_path / "run")],
                         capture_output=True, text=True, env=env, timeout=600, check=True)
    report = json.loads(out.stdout)
    timings = report["timings"]
    assert timings["compile"] > 0.0
    parts = sum(v for k, v in timings.items() if k != "total")
    assert parts == pytest.approx(timings["total"], rel=1e-9)
    assert 0.0 <= timings["other"] <= 0.05 * timings["total"]   # the phases hold the work
    assert timings["coarse"] > 0.0
    assert max(timings["coarse"], *report["coupling"]) < 0.1 * timings["compile"]
    assert report["metrics"] == pytest.approx(timings)


# --- progress -------------------------------------------------------------------------------

def test_a_kernel_without_ipywidgets_gets_the_text_bar_and_no_warning(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    progress._widgets_importable.cache_clear()   # (looked up once per process)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            bar = progress.progress_bar(total=2, disable=True)
    finally:
        progress._widgets_importable.cache_clear()
    from tqdm.std import tqdm

    assert type(bar) is tqdm


def test_a_delayed_bar_is_made_only_once_its_delay_has_passed(monkeypatch):
    """A solve's bar (shown after a second unless asked for): nothing is built while the run
    is shorter than the delay; at the first update after it, one tqdm bar with the count, the
    postfix and the start time so far, which then takes every update."""
    import time

    made = []

    class Bar:
        def __init__(self, **options):
            self.options, self.n = options, options.get("initial", 0)
            self.postfix, self.closed, self.start_t = {}, 0, None
            made.append(self)

        def update(self, n):
            self.n += n

        def set_postfix(self, values, refresh=True):
            self.postfix = dict(values)

        def refresh(self):
            pass

        def close(self):
            self.closed += 1

    monkeypatch.setattr(progress, "progress_bar", lambda **options: Bar(**options))
    bar = progress.delayed_bar(0.2, total=10, desc="fixed point")
    started = time.time()
    bar.update(2)
    bar.set_postfix(residual="1e-3", refresh=False)
    assert made == [] and bar.n == 2
    time.sleep(0.25)
    bar.update(3)
    assert len(made) == 1
    shown = made[0]
    assert shown.options == {"initial": 5, "total": 10, "desc": "fixed point"}
    assert shown.postfix == {"residual": "1e-3"} and abs(shown.start_t - started) < 0.1
    bar.update(1)
    bar.set_postfix(residual="1e-4", refresh=False)
    bar.close()
    assert (shown.n, shown.postfix, shown.closed, len(made)) == (6, {"residual": "1e-4"}, 1, 1)
    quick = progress.delayed_bar(60.0, total=3)
    quick.update(3)
    quick.close()
    assert len(made) == 1
    assert type(progress.delayed_bar(0.0, total=1)) is Bar


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(("command", "target"), [
    (["sweep", "nb.ipynb", "--grid", "x: [1]", "-o", "out"], "mfgwork.workflows.sweeps.sweep"),
    (["scan", "--problem", "santa_fe", "--grid", "threshold: [0.5]", "-o", "out"],
     "mfgwork.workflows.scan.scan"),
    (["run", "nb.ipynb"], "mfgwork.workflows.runs.main")])
def test_the_commands_show_progress_only_on_a_terminal_unless_told_not_to(monkeypatch, command,
                                                                         target):
    """What each command asks of its workflow: progress on a terminal, none under
    --no-progress, none when stderr is a pipe or a file."""
    import importlib

    from mfgwork.__main__ import main

    class Asked(Exception):
        pass

    seen = []

    def record(*args, progress=None, **kwargs):
        seen.append(progress)
        raise Asked

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, record)
    for tty, extra in ((True, []), (True, ["--no-progress"]), (False, [])):
        monkeypatch.setattr(sys, "stderr", _Stream(tty))
        with pytest.raises(Asked):
            main([*command, *extra])
    assert seen == [True, False, False]


def _in_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``argv`` with stderr on a pseudo-terminal of 100 columns; its exit status and what
    it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, env=os.environ | {"PYTHONPATH": str(ROOT)})
    os.close(slave)
    chunks, deadline = [], time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:   # the other end closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        proc.stdout.close()
        proc.kill() if proc.poll() is None else None
    return proc.wait(), b"".join(chunks).decode(errors="replace")


def test_run_shows_its_cells_in_a_terminal(tmp_path):
    """From the start (the kernel takes seconds), then the cells done of all, the elapsed
    and the remaining time. (--no-progress and pipes: the test above.)"""
    notebook = write_notebook(tmp_path / "tiny.ipynb", 'out_dir = ""\nx = 1', "y = x + 1")
    status, shown = _in_a_terminal([sys.executable, "-m", "mfgwork", "run", str(notebook),
                                    "-o", str(tmp_path / "run")], tmp_path)
    assert status == 0, shown
    assert shown.lstrip().startswith("tiny.ipynb: starting a kernel"), shown
    assert re.search(r"\d+/\d+ \[\d\d:\d\d<\d\d:\d\d", shown), shown
