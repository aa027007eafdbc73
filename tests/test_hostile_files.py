"""Hostile files met by the readers: FIFOs, devices, sparse giants, /proc files, deep or huge
JSON, unreadable files, inconsistent results. Each is refused with a LoadError or a
ParameterError naming the file (exit 2 on the command line of sweep and scan), quickly, and
without touching anything outside the target."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import write_notebook

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.core import storage
from mfgwork.core.errors import LoadError, ParameterError
from mfgwork.workflows import sweeps

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


@contextlib.contextmanager
def deadline(seconds: float = 20.0):
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""
    def expired(signum, frame):
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False)
    return res.save(tmp_path_factory.mktemp("saved") / "run")


@pytest.fixture
def run(saved, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(saved, copy)
    return copy


@pytest.fixture
def notebook(tmp_path) -> Path:
    folder = tmp_path / "nb"
    folder.mkdir()
    return write_notebook(folder / "nb.ipynb", 'a = 1\nout_dir = ""', "pass")


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    """Nothing here may start a notebook or a sweep's runs."""
    import papermill

    def refuse(*args, **kwargs):
        raise AssertionError("work was started")

    monkeypatch.setattr(papermill, "execute_notebook", refuse)
    monkeypatch.setattr(sweeps, "_execute", refuse)


def _denied(monkeypatch, target: Path) -> None:
    """Opening ``target`` fails as for a chmod-000 file read by a user (tests run as root)."""
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if Path(os.fspath(path)) == target:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)


# -- markers (item: read markers only from regular files of bounded size) ----------------------
def _fifo(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    os.mkfifo(folder / storage.MARKER)
    return folder / storage.MARKER


def _sparse(path: Path, size: int = 8 * 2**30) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


MARKERS = {
    "fifo": _fifo,
    "link to /dev/zero": lambda f: (f.mkdir(exist_ok=True),
                                    (f / storage.MARKER).symlink_to("/dev/zero")),
    "sparse 8 GiB": lambda f: (f.mkdir(exist_ok=True), _sparse(f / storage.MARKER)),
    "link to a run marker": lambda f: (f.mkdir(exist_ok=True), (f / storage.MARKER).symlink_to(
        Path(__file__).resolve())),
}


@pytest.mark.parametrize("kind", list(MARKERS))
def test_hostile_marker_is_no_marker_and_never_blocks(kind, tmp_path, saved, notebook, capsys):
    target = tmp_path / "target"
    MARKERS[kind](target)
    (target / "keep.txt").write_text("mine")
    with deadline():
        assert storage.marker_kind(target) is None
        with pytest.raises(ParameterError, match="without mfgwork.json"):
            mw.load(saved).save(target)
        assert cli(["run", str(notebook), "-o", str(target)]) == 2
        assert "without mfgwork.json" in capsys.readouterr().err
        assert cli(["sweep", str(notebook), "--grid", "a: [1, 2]", "-o", str(target),
                    "--no-progress"]) == 2
        assert "without mfgwork.json" in capsys.readouterr().err
        (target / "sweep.json").write_text("{}")  # a sweep folder of before markers
        assert cli(["sweep", str(notebook), "--grid", "a: [1, 2]", "-o", str(target),
                    "--no-progress"]) == 2
        assert capsys.readouterr().err.startswith("error: ")
    assert (target / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("name", ["metrics.json", "parameters.json", "arrays.npz"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "sparse", "/proc/self/pagemap",
                                  "folder"])
def test_hostile_result_file_is_a_load_error(kind, name, run):
    path = run / name
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        _sparse(path)
    elif kind == "folder":
        path.mkdir()
    else:
        if not Path(kind).exists():
            pytest.skip(f"{kind} is not here")
        path.symlink_to(kind)
    with deadline(), pytest.raises(LoadError) as err:
        mw.load(run)
    assert str(path) in str(err.value)


# -- raw errors that are LoadErrors or ParameterErrors --------------------------------------------
def _edit(run: Path, name: str, change) -> None:
    data = json.loads((run / name).read_text())
    change(data)
    (run / name).write_text(json.dumps(data))


LOADS = {
    "200000-deep JSON": lambda r: (r / "metrics.json").write_text("[" * 200_000
                                                                   + "]" * 200_000),
    "5000-digit integer": lambda r: (r / "metrics.json").write_text(
        (r / "metrics.json").read_text().replace('"iterations": ', '"iterations": '
                                                 + "9" * 5000 + ", \"x\": ", 1)),
    "NaN residual with converged true": lambda r: (r / "metrics.json").write_text(
        (r / "metrics.json").read_text().replace('"residual": ', '"residual": NaN, "r": ', 1)),
    "infinite residual": lambda r: _edit(r, "metrics.json",
                                         lambda d: d.update(residual=1e400)),
    "negative residual": lambda r: _edit(r, "metrics.json", lambda d: d.update(residual=-1.0)),
    "residual a string": lambda r: _edit(r, "metrics.json", lambda d: d.update(residual="0")),
    "non-UTF-8 parameters": lambda r: (r / "parameters.json").write_bytes(b'{"a": "\xff"}'),
    "two M.npy members": lambda r: _two_members(r / "arrays.npz"),
}


def _two_members(path: Path) -> None:
    import zipfile

    arrays = dict(np.load(path))
    np.save(path.with_name("M.npy"), np.zeros_like(arrays["M"]))
    with zipfile.ZipFile(path, "a") as zf, pytest.warns(UserWarning, match="Duplicate"):
        zf.write(path.with_name("M.npy"), "M.npy")
    path.with_name("M.npy").unlink()


@pytest.mark.parametrize("case", list(LOADS))
def test_corrupt_result_is_a_load_error_naming_the_file(case, run):
    LOADS[case](run)
    with pytest.raises(LoadError) as err:
        mw.load(run)
    assert str(run) in str(err.value)


def test_unreadable_file_is_a_load_error(run, monkeypatch):
    _denied(monkeypatch, run / "metrics.json")
    with pytest.raises(LoadError, match="metrics.json: cannot be read .permission denied"):
        mw.load(run)
    monkeypatch.undo()
    _denied(monkeypatch, run / "arrays.npz")
    with pytest.raises(LoadError, match="arrays.npz: cannot be read .permission denied"):
        mw.load(run)


@pytest.mark.skipif(ROOT, reason="root reads chmod-000 files; the monkeypatched test covers it")
def test_chmod_000_file_and_folder_are_load_errors(run):
    (run / "metrics.json").chmod(0)
    with pytest.raises(LoadError, match="metrics.json"):
        mw.load(run)
    (run / "metrics.json").chmod(0o644)
    run.chmod(0)
    try:
        with pytest.raises(LoadError):
            mw.load(run)
    finally:
        run.chmod(0o755)


@pytest.mark.parametrize(("change", "word"), [
    (lambda p: p.update(problem=["santa_fe"]), "['santa_fe']"),
    (lambda p: p.pop("sigma"), "'sigma'"),
    (lambda p: p.update(sigma="wide"), "sigma"),
])
def test_check_with_damaged_parameters_is_a_parameter_error(change, word, run):
    _edit(run, "parameters.json", change)
    res = mw.load(run)
    with pytest.raises(ParameterError) as err:
        res.check()
    assert word in str(err.value)


# -- values changed after saving: the digests, and M a density as a second line ------------------
def _arrays(run: Path, change) -> None:
    with np.load(run / "arrays.npz") as data:
        arrays = {k: data[k] for k in data.files}
    change(arrays)
    np.savez_compressed(run / "arrays.npz", **arrays)


def _drop_digests(run: Path) -> None:
    _edit(run, "metrics.json", lambda d: d.pop("array_sha256"))


CHANGED = {
    "M times 3": (lambda a: a.update(M=3 * a["M"]), "'M' differs from the SHA-256"),
    "M negated": (lambda a: a.update(M=-a["M"]), "'M' differs from the SHA-256"),
    "U shifted by 1e-12": (lambda a: a.update(U=a["U"] + 1e-12), "'U' differs"),
    "t rescaled": (lambda a: a.update(t=2 * a["t"]), "'t' differs"),
    "attendance rewritten": (lambda a: a.update(attendance=a["attendance"][::-1].copy()),
                             "'attendance' differs"),
}


@pytest.mark.parametrize("case", list(CHANGED))
def test_array_changed_after_saving_is_a_load_error_naming_it(case, run):
    change, message = CHANGED[case]
    _arrays(run, change)
    with pytest.raises(LoadError, match=message) as err:
        mw.load(run)
    assert str(run / "arrays.npz") in str(err.value)


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: a.update(M=3 * a["M"]), "mass off by 2"),
    (lambda a: a.update(M=-a["M"]), "'M' has the value -"),
    (lambda a: a.update(M=1.0001 * a["M"]), "mass error 0.0001"),
])
def test_run_without_digests_is_checked_as_a_density(change, message, run):
    _drop_digests(run)
    with pytest.warns(RuntimeWarning, match="unverified"):
        assert mw.load(run).converged   # an earlier run: read, with a warning
    _arrays(run, change)
    with pytest.raises(LoadError, match=message), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mw.load(run)


def test_digests_name_arrays_added_or_removed(run):
    _edit(run, "metrics.json", lambda d: d["array_sha256"].pop("mean_state"))
    with pytest.raises(LoadError, match="'mean_state', of which metrics.json records no"):
        mw.load(run)
    _edit(run, "metrics.json", lambda d: d["array_sha256"].update(extra="0" * 64))
    with pytest.raises(LoadError, match="no array 'extra', whose digest"):
        mw.load(run)


def test_every_array_of_a_saved_run_is_digested(saved):
    metrics = json.loads((saved / "metrics.json").read_text())
    with np.load(saved / "arrays.npz") as data:
        assert set(metrics["array_sha256"]) == set(data.files) >= {"x", "t", "U", "M"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mw.load(saved)   # verified, quietly


# -- the command line ----------------------------------------------------------------------------
def _sweep_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "sw"
    folder.mkdir()
    storage.write_marker(folder, "sweep")
    return folder


def _cli_sweep(notebook, grid, out):
    return ["sweep", str(notebook), "--grid", str(grid), "-o", str(out), "--no-progress"]


CLI = {
    "unreadable notebook": lambda t, nb, mp: (_denied(mp, nb), _cli_sweep(nb, "a: [1]",
                                                                           t / "s"))[1],
    "notebook not JSON": lambda t, nb, mp: (nb.write_text("{not json"),
                                            _cli_sweep(nb, "a: [1]", t / "s"))[1],
    "notebook JSON but not a notebook": lambda t, nb, mp: (nb.write_text('{"cells": 3}'),
                                                           _cli_sweep(nb, "a: [1]", t / "s"))[1],
    "notebook a FIFO": lambda t, nb, mp: (nb.unlink(), os.mkfifo(nb),
                                          _cli_sweep(nb, "a: [1]", t / "s"))[2],
    "grid a folder": lambda t, nb, mp: (_cli_sweep(nb, t, t / "s")),
    "grid missing": lambda t, nb, mp: (_cli_sweep(nb, "missing_grid", t / "s")),
    "grid unreadable": lambda t, nb, mp: ((t / "g.yaml").write_text("a: [1]"),
                                          _denied(mp, t / "g.yaml"),
                                          _cli_sweep(nb, t / "g.yaml", t / "s"))[2],
    "grid a FIFO": lambda t, nb, mp: (os.mkfifo(t / "g.yaml"),
                                      _cli_sweep(nb, t / "g.yaml", t / "s"))[1],
    "grid not UTF-8": lambda t, nb, mp: ((t / "g.yaml").write_bytes(b"a: [\xff]"),
                                         _cli_sweep(nb, t / "g.yaml", t / "s"))[1],
    "grid nested too deeply": lambda t, nb, mp: (
        (t / "g.yaml").write_text("a: " + "[" * 100_000 + "]" * 100_000),
        _cli_sweep(nb, t / "g.yaml", t / "s"))[1],
    "index.csv a folder": lambda t, nb, mp: ((_sweep_folder(t) / "index.csv").mkdir(),
                                             _cli_sweep(nb, "a: [1]", t / "sw"))[1],
    "index.csv a link": lambda t, nb, mp: (
        (_sweep_folder(t) / "index.csv").symlink_to(t / "elsewhere.csv"),
        _cli_sweep(nb, "a: [1]", t / "sw"))[1],
    "sweep.lock a folder": lambda t, nb, mp: ((_sweep_folder(t) / "sweep.lock").mkdir(),
                                              _cli_sweep(nb, "a: [1]", t / "sw"))[1],
    "sweep.lock a link": lambda t, nb, mp: (
        (_sweep_folder(t) / "sweep.lock").symlink_to(t / "elsewhere.lock"),
        _cli_sweep(nb, "a: [1]", t / "sw"))[1],
    "scan store unreadable": lambda t, nb, mp: (
        (t / "st.zarr").mkdir(), (t / "st.zarr" / "zarr.json").write_text("{}"),
        _denied(mp, t / "st.zarr" / "zarr.json"),
        ["scan", "--problem", "santa_fe", "--grid", "threshold: [0.5]", "-o",
         str(t / "st.zarr"), "--device", "cpu", "--no-progress"])[3],
}
WORDS = {"grid a folder": "is a folder", "grid missing": "'missing_grid' does not exist",
         "index.csv a link": "symbolic link", "sweep.lock a folder": "sweep.lock is not a file",
         "notebook a FIFO": "existing .ipynb file", "grid a FIFO": "FIFO",
         "unreadable notebook": "permission",
         "grid unreadable": "permission", "scan store unreadable": "permission"}


@pytest.mark.parametrize("case", list(CLI))
def test_command_line_refuses_with_exit_2(case, tmp_path, notebook, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    args = CLI[case](work, notebook, monkeypatch)
    before = sorted(p.name for p in work.iterdir())
    with deadline():
        code = cli(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.splitlines()) == 1
    assert WORDS.get(case, "") in err
    assert sorted(p.name for p in work.iterdir()) == before  # nothing made or removed
    assert not (work / "elsewhere.csv").exists() and not (work / "elsewhere.lock").exists()


def test_grid_rule_text_or_path(tmp_path, monkeypatch):
    from mfgwork.workflows.specs import SpecError, read_spec

    monkeypatch.chdir(tmp_path)
    assert read_spec("a: [1, 2]") == {"a": [1, 2]}
    assert read_spec("{a: [1, 2]}") == {"a": [1, 2]}
    Path("grid").write_text("b: [3]")
    assert read_spec("grid") == {"b": [3]}
    for missing in ("missing_grid", "grids/g.yaml", "g.json"):
        with pytest.raises(SpecError, match="does not exist"):
            read_spec(missing)


def test_crossover_table_file_is_read_as_checked_json(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    for name in ("fifo.json", "list.json", "deep.json", "missing.json"):
        with deadline(), pytest.raises(LoadError, match=name):
            mw.crossover_table(tmp_path / name)
