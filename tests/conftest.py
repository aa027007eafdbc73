"""Shared fixtures: backends to run the solvers on, mocked accelerator availability, the
notebooks executed once per test run, and a guard that fails a test writing into the
checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import mfgwork as mw
from mfgwork.core.ansi import strip_ansi

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture
def mps_emulation() -> mw.Backend:
    """torch on the CPU in float32 with no host round trips in loops: the MPS code path."""
    pytest.importorskip("torch")
    return mw.mps_emulation()


@pytest.fixture
def mock_accelerators(monkeypatch):
    """Pretend CUDA and/or MPS are available: ``mock_accelerators(cuda=1, mps=True)``."""
    torch = pytest.importorskip("torch")

    def apply(cuda: int = 0, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(mw.core.backend, "_warned_mps_float32", False)

    return apply


BACKENDS = [
    pytest.param(("numpy", "cpu", None), id="numpy"),
    pytest.param(("torch", "cpu", "float64"), id="torch-cpu-f64"),
    pytest.param("mps-emulation", id="mps-emulation"),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> mw.Backend:
    """Every backend the CPU can run: NumPy, torch CPU float64, MPS emulation."""
    if request.param == "mps-emulation":
        pytest.importorskip("torch")
        return mw.mps_emulation()
    name, device, dtype = request.param
    if name == "torch":
        pytest.importorskip("torch")
    return mw.get_backend(name, device, dtype)


@pytest.fixture
def op_recorder():
    """``(mode, seen)``: inside ``with mode:`` every torch op is recorded by name in
    ``seen["ops"]`` and the dtypes of the tensors it returns in ``seen["dtypes"]``."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, set] = {"dtypes": set(), "ops": set()}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen["ops"].add(str(func))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    seen["dtypes"].add(t.dtype)
            return out

    return Record(), seen


def tree_snapshot(folder) -> dict[str, object]:
    """Every entry under ``folder`` (links not followed): its content, link target or kind."""
    import os
    from pathlib import Path

    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


@pytest.fixture
def snapshot():
    """``snapshot(folder)``: every entry under it, to prove a folder untouched."""
    return tree_snapshot


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of executed notebooks and tests that drive a browser are end-to-end: ``slow``
    (``pytest -m "not slow"`` leaves them out for a quick check)."""
    for item in items:
        if "notebook_runs" in getattr(item, "fixturenames", ()) or \
                item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)


#: TRITON_INTERPRET as the test run found it (set for the whole run, it is no test's own)
_INTERPRET_OUTSIDE = os.environ.get("TRITON_INTERPRET")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test under Triton's CPU interpreter (TRITON_INTERPRET=1, set for it by
    :func:`helpers.triton_device`) runs in a thread of its own, on a fresh Python stack.
    CPython (since 3.11) keeps the frames in 16 KiB chunks and unmaps a chunk when the first
    frame in it returns: where pytest's own frames put the interpreter's calls across a
    chunk's edge, every call there maps and unmaps one (measured: the 2-D fused solves of
    tests/test_2d_fused_krylov.py, 8 million page faults and 63 s of system time in 238 s of
    CPU time; in a thread none, 166 s). The test's outcome (an exception: a failed
    assertion, a skip) is raised here as it was there."""
    if os.environ.get("TRITON_INTERPRET") != "1" or _INTERPRET_OUTSIDE == "1":
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    raised: list[BaseException] = []

    def run() -> None:
        try:
            pyfuncitem.obj(**args)
        except BaseException as exc:  # noqa: BLE001 - raised again in pytest's thread
            raised.append(exc)

    thread = threading.Thread(target=run, name=pyfuncitem.name, daemon=True)
    thread.start()
    thread.join()
    if raised:
        raise raised[0]
    return True


# -- the checkout stays as it was --------------------------------------------------------------
#: Caches that tools keep in the checkout: bytecode and numba's compiled kernels in
#: __pycache__, the databases of pytest and hypothesis. Not looked at.
CACHES = {"__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache"}
#: Folders whose presence is looked at, not their content: git's, the environment, and
#: ``make book``'s output (thousands of files).
OPAQUE = {".git", ".venv", "build"}


def checkout_files(root: Path = ROOT) -> set[str]:
    """Every path below ``root`` outside the caches and the opaque folders."""
    found = set()
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root)
        found.update(str(base / name) for name in dirs + files if name not in CACHES)
        dirs[:] = [d for d in dirs if d not in CACHES | OPAQUE and not d.endswith(".egg-info")]
    return found


@pytest.fixture(autouse=True)
def checkout_untouched() -> Iterator[None]:
    """Fail a test that leaves new files or folders in the checkout: tests write only to
    temporary folders. (Under pytest-xdist a test of the other worker, running at the same
    time, may be the writer: the message says so.)"""
    before = checkout_files()
    yield
    new = sorted(checkout_files() - before)
    if new:
        shown = ", ".join(new[:10]) + (f" and {len(new) - 10} more" if len(new) > 10 else "")
        other = " (or a test running beside it in another worker)" \
            if os.environ.get("PYTEST_XDIST_WORKER") else ""
        pytest.fail(f"this test{other} wrote into the checkout {ROOT}: {shown}; tests write "
                    "only to temporary folders (tmp_path)", pytrace=False)


# -- every notebook executed once per test run -------------------------------------------------
#: The parameters each notebook is executed at, once per test run, by papermill into a run
#: folder: small sizes, enough for the checks of its outputs (tests/test_notebooks.py, …) and
#: for the course book (tests/test_book.py), which renders these executions.
NOTEBOOK_PARAMETERS: dict[str, dict] = {
    "00_primer.ipynb": {"sizes": [11, 21, 41], "nx_santa_fe": 41, "nt_santa_fe": 40},
    "01_santa_fe_bar.ipynb": {"nx": 41, "nt": 40, "threshold": 0.5, "tol": 1e-7},
    "02_cpu_vs_accelerator.ipynb": {"nx": 16, "nt": 15, "tol": 1e-5},
    "03_explorer.ipynb": {"threshold": 0.5, "nx": 52},
    "04_sweep_summary.ipynb": {"demo_nx": 21, "demo_thresholds": [0.4, 0.8]},
    "05_parameter_scan.ipynb": {"n_threshold": 3, "n_sigma": 2, "nx": 21, "nt": 20,
                                "device": "cpu", "slice_sigma": 0.3},
    "06_n_patrons.ipynb": {"nx": 61, "nt": 60, "sizes": [100, 1000, 10000], "n_samples": 8,
                           "fit_max_n": 10000},
    "07_two_state.ipynb": {"nx": 41, "nt": 40, "nt_two_state": 100, "sigmas": [0.5, 1.0],
                           "switching_costs": [1.0, 3.0, 10.0]},
    "08_accelerator_payoff.ipynb": {"batch_sizes": [1, 2, 4], "particle_counts": [1000, 4000],
                                    "nx": 21, "nt": 20, "iterations": 2,
                                    "emulation_batch_sizes": [1],
                                    "emulation_particle_counts": [1000]},
    "09_your_model.ipynb": {"nx": 16, "nt": 15, "emulate_mps": True},
    "10_congestion_and_populations.ipynb": {"nx": 21, "nt": 20, "tol": 1e-5},
    "11_crowd_in_a_room.ipynb": {"nx": 13, "nt": 12, "frames": 6, "nx_accelerator": 11,
                                 "nt_accelerator": 8, "nx_bars": 11, "nt_bars": 10,
                                 "T_bars": 2.0, "scan_thresholds": [0.4, 0.7], "nx_scan": 11,
                                 "nt_scan": 10},
    "12_planner.ipynb": {"nx": 41, "nt": 20, "T": 4.0, "map_thresholds": [0.3, 0.6, 0.9],
                         "map_eps": [0.05, 0.1], "nx_map": 21, "nt_map": 20,
                         "n_players": 300, "n_samples": 4},
    "13_long_run.ipynb": {"nx": 41, "horizons": [10.0, 40.0], "steps_per_unit": 3,
                          "sizes": [21, 41, 81]},
    "14_common_noise.ipynb": {"nx": 41, "depth": 3},
}
#: Executed through the command line (``python -m mfgwork run``), as ``make run`` does.
VIA_COMMAND_LINE = {"01_santa_fe_bar.ipynb"}


@dataclass(frozen=True)
class NotebookRun:
    """One executed notebook: its run folder, the executed notebook in it, its parameters,
    the folder it was executed in (a copy of notebooks/), and what the command line printed
    (notebooks run through it)."""

    folder: Path
    parameters: dict
    work: Path
    stdout: str = ""

    @property
    def notebook(self) -> Path:
        return self.folder / f"{self.folder.name}.ipynb"


def shared_tmp(tmp_path_factory) -> Path:
    """A temporary folder common to every pytest-xdist worker of this run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _execute(name: str, work: Path, out: Path) -> str:
    """Run ``work/name`` at its NOTEBOOK_PARAMETERS into ``out``; return the printed text."""
    from mfgwork.workflows import runs

    notebook, parameters = work / name, NOTEBOOK_PARAMETERS[name]
    if name not in VIA_COMMAND_LINE:
        runs.run_notebook(notebook, parameters, out)
        return ""
    values = [a for k, v in parameters.items() for a in ("-p", k, json.dumps(v))]
    proc = subprocess.run([sys.executable, "-m", "mfgwork", "run", str(notebook), *values,
                           "-o", str(out)], capture_output=True, text=True, cwd=out.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m mfgwork run {name} exited {proc.returncode}: "
                           f"{proc.stderr[-3000:]}")
    return proc.stdout


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory) -> Callable[[str], NotebookRun]:
    """``notebook_runs(name)``: the notebook executed at NOTEBOOK_PARAMETERS[name], once per
    test run whichever test (and pytest-xdist worker) asks first, from a copy of notebooks/
    in a temporary folder (what a notebook writes beside itself stays there). A failed
    execution fails every test that asks for it, with its message."""
    pytest.importorskip("papermill")
    from filelock import FileLock

    shared = shared_tmp(tmp_path_factory) / "notebook-runs"
    work = shared / "work" / "notebooks"
    (shared / "runs").mkdir(parents=True, exist_ok=True)
    with FileLock(shared / "work.lock"):
        if not work.is_dir():
            shutil.copytree(NOTEBOOKS, work, ignore=shutil.ignore_patterns(
                "*.py", ".ipynb_checkpoints", "__pycache__"))
    seen: dict[str, NotebookRun] = {}

    def get(name: str) -> NotebookRun:
        if name not in NOTEBOOK_PARAMETERS:
            raise KeyError(f"{name} has no entry in NOTEBOOK_PARAMETERS (tests/conftest.py)")
        if name not in seen:
            home = shared / "runs" / Path(name).stem  # the run folder alone in it
            out, done, failed = home / home.name, home / "stdout.txt", home / "error.txt"
            home.mkdir(exist_ok=True)
            with FileLock(home / "run.lock"):
                if not (done.is_file() or failed.is_file()):
                    try:
                        done.write_text(_execute(name, work, out))
                    except Exception as exc:
                        failed.write_text(f"{type(exc).__name__}: {strip_ansi(str(exc))}")
            if failed.is_file():
                pytest.fail(f"{name} at {NOTEBOOK_PARAMETERS[name]}: {failed.read_text()}",
                            pytrace=False)
            seen[name] = NotebookRun(out, NOTEBOOK_PARAMETERS[name], work, done.read_text())
        return seen[name]

    return get
