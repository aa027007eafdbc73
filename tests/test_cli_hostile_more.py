"""Hostile command lines, second round: long grid texts, a NetCDF export onto its own store,
Ctrl-C, a killed kernel's temporaries, unreachable schedulers, ``build.py --executed``, the
message of a store holding another scan, and messages that point to the right option."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import load_book_builder, write_notebook

import mfgwork as mw
from mfgwork.__main__ import main
from mfgwork.workflows import runs, scan, sweeps
from mfgwork.workflows.specs import SpecError, read_spec

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["-p", "nx", "21", "-p", "nt", "20", "--no-progress"]
LONG_GRID = "{threshold: [" + ", ".join(f"{0.3 + 0.005 * k:.3f}" for k in range(81)) + "]}"


def _scan(*args: str) -> list[str]:
    return ["scan", "--problem", "santa_fe", *args, *SMALL]


def _notebook(tmp_path: Path, *body: str, name: str = "nb.ipynb") -> Path:
    return write_notebook(tmp_path / name, 'out_dir = "x"\na = 1.0', *body)


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# -- 1. grid texts ------------------------------------------------------------------------------
def test_a_grid_text_longer_than_a_file_name_is_read_as_yaml(tmp_path, capsys):
    assert len(LONG_GRID) > 255
    assert len(read_spec(LONG_GRID)["threshold"]) == 81
    store = tmp_path / "s.zarr"
    assert main(_scan("--grid", LONG_GRID, "-o", str(store), "--max-points", "10")) == 2
    assert "plans 81 points, more than max_points=10" in capsys.readouterr().err
    assert not store.exists()


def test_an_empty_mapping_text_is_an_empty_spec_not_a_missing_file(tmp_path, capsys):
    with pytest.raises(SpecError, match="grid spec is an empty mapping") as err:
        read_spec("{}")
    assert "does not exist" not in str(err.value)
    assert main(_scan("--grid", "{}", "-o", str(tmp_path / "s.zarr"))) == 2
    assert "empty mapping" in capsys.readouterr().err


# -- 2. --netcdf onto the store ------------------------------------------------------------------
def test_netcdf_equal_to_the_store_is_refused_before_the_scan(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    code = main(_scan("--grid", "{threshold: [0.5]}", "-o", str(store), "--netcdf", str(store)))
    assert code == 2 and "is the store of this scan" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# -- 3. Ctrl-C ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("command", "module", "name", "kept"), [
    ("run", runs, "run_notebook", "the run left nothing"),
    ("sweep", sweeps, "sweep", "resume"),
    ("scan", scan, "scan", "resume")])
def test_ctrl_c_prints_one_line_and_exits_130(tmp_path, capsys, monkeypatch, command, module,
                                              name, kept):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, interrupted)
    argv = {"run": ["run", "nb.ipynb", "-o", str(tmp_path / "r")],
            "sweep": ["sweep", "nb.ipynb", "--grid", "{a: [1]}", "-o", str(tmp_path / "w")],
            "scan": _scan("--grid", "{threshold: [0.5]}", "-o", str(tmp_path / "s"))}[command]
    try:
        code = main(argv)
    except KeyboardInterrupt:   # (else it would stop pytest itself)
        pytest.fail("the KeyboardInterrupt escaped the command line")
    assert code == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted; ") and kept in err and err.count("\n") == 1


def test_ctrl_c_at_the_terminal_stops_a_sweep_without_traceback(tmp_path):
    notebook = _notebook(tmp_path, "import pathlib, time\n"
                                   "pathlib.Path(f'started-{a}').touch()\ntime.sleep(120)")
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "mfgwork", "sweep", str(notebook), "--grid", "{a: [1, 2]}",
           "-o", str(out), "--workers", "1", "--no-progress"]
    env = os.environ | {"PYTHONPATH": str(ROOT)}

    def reset() -> None:   # (a shell without job control starts it with SIGINT ignored)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=reset)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("started-*")) and proc.poll() is None:
            assert time.monotonic() < deadline, "the notebook did not start"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)   # as a terminal's Ctrl-C: the whole group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().startswith("interrupted; "), err
    assert list((out / "runs").iterdir()) == [] and list((out / "failed").iterdir()) == []


# -- 4. a kernel killed while its save_run writes ------------------------------------------------
def test_a_kernel_killed_in_its_save_run_leaves_no_temporary(tmp_path):
    notebook = _notebook(tmp_path, "import os\nimport mfgwork as mw\n"
                                   "import mfgwork.core.storage as s\n"
                                   "s.write_json = lambda *a, **k: os._exit(1)\n"
                                   "mw.save_run(out_dir, parameters={'a': a})")
    parent = tmp_path / "runs"
    parent.mkdir()
    with pytest.raises(runs.NotebookError, match="DeadKernelError"):
        runs.run_notebook(notebook, {}, parent / "r")
    assert _hidden(parent) == []
    assert sorted(p.name for p in parent.iterdir()) == ["r.failed.ipynb"]


# -- 5. schedulers ------------------------------------------------------------------------------
@pytest.fixture
def quick_connect():
    """Dask gives up connecting after 1 s (instead of 30)."""
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        yield


def test_an_unreachable_scheduler_leaves_no_sweep_folder(tmp_path, capsys, quick_connect):
    notebook = _notebook(tmp_path, "pass")
    out, empty = tmp_path / "new", tmp_path / "empty"
    empty.mkdir()
    for folder in (out, empty):
        code = main(["sweep", str(notebook), "--grid", "{a: [1, 2]}", "-o", str(folder),
                     "--scheduler", "tcp://127.0.0.1:1", "--no-progress"])
        assert code == 2 and "cannot be reached" in capsys.readouterr().err
    assert not out.exists() and list(empty.iterdir()) == []


def test_an_unreachable_scheduler_leaves_no_scan_store(tmp_path, capsys, quick_connect):
    store = tmp_path / "s.zarr"
    code = main(_scan("--grid", "{threshold: [0.5]}", "-o", str(store),
                      "--scheduler", "tcp://127.0.0.1:1"))
    assert code == 2 and "cannot be reached" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["sweep", "scan"])
def test_scheduler_and_dask_together_are_refused(tmp_path, capsys, command):
    notebook = _notebook(tmp_path, "pass")
    out = tmp_path / "out"
    both = ["--scheduler", "tcp://127.0.0.1:1", "--dask"]
    argv = (["sweep", str(notebook), "--grid", "{a: [1]}", "-o", str(out), *both]
            if command == "sweep" else _scan("--grid", "{threshold: [0.5]}", "-o", str(out),
                                             *both))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--dask" in err and "--scheduler" in err and "only one" in err
    assert not out.exists()


# -- 6. build.py --executed ---------------------------------------------------------------------
builder = load_book_builder("book_build_cli_hostile_more")


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_book_executed_must_be_a_folder(tmp_path, capsys, kind):
    executed = tmp_path / "executed"
    if kind == "file":
        executed.write_text("not a folder")
    with pytest.raises(SystemExit) as exit_:
        builder.main(["-o", str(tmp_path / "book"), "--executed", str(executed)])
    assert exit_.value.code == 2 and "--executed=" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["executed"] if kind == "file"
                                                          else [])


# -- 7. a store holding another scan; --keep --------------------------------------------------
def test_a_store_of_other_kept_fields_names_keep_not_placement(tmp_path, capsys):
    store = str(tmp_path / "s.zarr")
    assert main(_scan("--grid", "{threshold: [0.5]}", "-o", store, "--keep", "M")) == 0
    assert main(_scan("--grid", "{threshold: [0.5]}", "-o", store, "--device", "cpu")) == 2
    out, err = capsys.readouterr()
    assert "(there → here: keep: M → M,U)" in err and "placement" not in err
    assert out.startswith("1 point: 1 converged")   # (the scan made with --keep M)


def test_keep_naming_a_field_twice_is_refused(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    assert main(_scan("--grid", "{threshold: [0.5]}", "-o", str(store), "--keep", "M,M")) == 2
    assert "--keep='M,M' is invalid" in capsys.readouterr().err
    assert not store.exists()


# -- 8. messages --------------------------------------------------------------------------------
def test_out_dir_as_a_parameter_points_to_dash_o(tmp_path, capsys):
    notebook = _notebook(tmp_path, "pass")
    assert main(["run", str(notebook), "-p", "out_dir", "x", "-o", str(tmp_path / "r")]) == 2
    assert "-o OUT" in capsys.readouterr().err
    assert main(["sweep", str(notebook), "--grid", "{a: [1]}", "-p", "out_dir", "x",
                 "-o", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "-o OUT" in err and "remove it from the spec" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.ipynb"]


def test_a_solver_option_in_a_scan_grid_points_to_dash_p(tmp_path, capsys):
    assert main(_scan("--grid", "{nx: [21, 41]}", "-o", str(tmp_path / "s.zarr"))) == 2
    assert "set them with -p NAME VALUE" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_doctor_clear_cache_honours_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["doctor", "--clear-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"removed": 0,
                                                   "path": str(tmp_path / "cache")}


def test_a_sweep_of_one_run_says_one_run(tmp_path, capsys):
    notebook = _notebook(tmp_path, "import mfgwork as mw\nmw.save_run(out_dir)")
    assert main(["sweep", str(notebook), "--grid", "{a: [1]}", "-o", str(tmp_path / "w"),
                 "--workers", "1", "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("1 run: 1 done")
    assert mw.load_sweep(tmp_path / "w").counts()["done"] == 1


def test_an_interrupt_inside_a_compiled_loop_is_no_failed_point():
    """A Ctrl-C that lands inside a numba call comes back as its SystemError with the
    interrupt as context: a scan raises the interrupt (and stops, to resume), never records
    the point as failed; any other error stays a failed point."""
    from mfgwork.workflows.scan_solve import raise_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set")  # noqa: B904
    except SystemError as exc:
        wrapped = exc
    with pytest.raises(KeyboardInterrupt):
        raise_interrupt(wrapped)
    raise_interrupt(ValueError("a failing point"))   # (returns: recorded as failed)
