"""Writer targets: every writer refuses, before any work, what it must never replace.

A table of targets (``.``, ``..``, home, an ancestor of the current directory, a link,
a file, a FIFO, a path under a file, a folder of another kind, an unmarked folder, and with
``force`` a folder holding a notebook, a project root or a result folder) against every
folder writer (``save_run``, ``Result.save``, figures, ``run_notebook``, ``mw.sweep``,
``mw.scan``, the book builder) and every file writer (NetCDF export, ``write_csv``, the
animation page). Home and
the current directory are throwaway folders (HOME monkeypatched, chdir); each case checks
that the tree of the temporary folder is unchanged and that no heavy work ran. ``/`` is given
only to the checks themselves, never to a writer.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import load_book_builder, write_notebook

import mfgwork as mw
import mfgwork.analysis.plots  # noqa: F401 - imported (font cache built) before HOME moves
from mfgwork.analysis import plots2d
from mfgwork.core import storage
from mfgwork.core.errors import ParameterError
from mfgwork.workflows import runs, sweeps
from mfgwork.workflows import scan as scan_module

ROOT = Path(__file__).resolve().parents[1]
GRID = {"threshold": [0.4, 0.6]}
SOLVE = {"nx": 21, "nt": 20, "tol": 1e-8, "max_iter": 200}


builder = load_book_builder("book_build_targets")


def make_notebook(path: Path) -> Path:
    """A notebook with parameters ``delay`` and ``out_dir`` that saves a run."""
    return write_notebook(path, "delay = 0.0\nout_dir = ''",
                          "import mfgwork as mw\nmw.save_run(out_dir, parameters={})")


@pytest.fixture(scope="module")
def result() -> mw.Result:
    return mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False)


def folder_with(path: Path, files: dict[str, str], kind: str | None = None) -> Path:
    """Make the folder ``path`` (and its parents) holding ``files`` (name: text), marked as a
    result folder of ``kind`` when given."""
    path.mkdir(parents=True)
    if kind is not None:
        storage.write_marker(path, kind)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


@pytest.fixture
def place(tmp_path, monkeypatch) -> SimpleNamespace:
    """A throwaway world: HOME, a current directory two levels down, a notebook folder, an
    unrelated folder, a file, a FIFO, a link to a folder outside, and counters on the work."""
    work = {"papermill": 0, "solve_block": 0, "book": 0}

    def forbidden(key: str) -> Callable:
        def call(*args, **kwargs):
            work[key] += 1
            raise AssertionError(f"{key} ran although the target is refused")
        return call

    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", forbidden("papermill"))
    monkeypatch.setattr(scan_module, "solve_block", forbidden("solve_block"))
    monkeypatch.setattr(builder, "execute", forbidden("book"))
    home = tmp_path / "home"
    cwd = tmp_path / "projects" / "cwd"
    for d in (home, cwd):
        d.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    notebook = make_notebook(nbdir / "study.ipynb")
    unrelated = folder_with(tmp_path / "unrelated", {"thesis.tex": "years of work"})
    outside = folder_with(tmp_path / "outside", {".keep": "hidden, outside", "data.txt": "outside"})
    link = tmp_path / "link"
    link.symlink_to(outside)
    afile = tmp_path / "notes.txt"
    afile.write_text("notes")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "code.py").write_text("print(1)")
    with_nb = folder_with(tmp_path / "analysis", {"draft.ipynb": "{}", "data.csv": "1,2"})
    nested = tmp_path / "results"
    folder_with(nested / "a", {"metrics.json": "{}"}, kind="run")
    other_kind = folder_with(tmp_path / "a_sweep", {"sweep.json": "{}"}, kind="sweep")
    return SimpleNamespace(tmp=tmp_path, home=home, cwd=cwd, notebook=notebook,
                           unrelated=unrelated, outside=outside, link=link, file=afile,
                           fifo=fifo, project=project, with_nb=with_nb, nested=nested,
                           other_kind=other_kind, work=work)


# -- the table ---------------------------------------------------------------------------------
def _index(p: SimpleNamespace) -> sweeps.SweepIndex:
    return sweeps.SweepIndex(p.tmp, [{"run": "a", "status": "done", "error": None}], [])


def _dataset(p: SimpleNamespace):
    xr = pytest.importorskip("xarray")
    return xr.Dataset({"v": ("i", [1.0, 2.0])},
                      attrs={"scanned": "i", "problem_factory": "tests:fake"})


#: Writers: name -> (call(place, target, force), kind: "folder" or "file", takes force).
WRITERS: dict[str, tuple[Callable, str, bool]] = {
    "save_run": (lambda p, t, f: mw.save_run(t, parameters={"a": 1}, force=f), "folder", True),
    "Result.save": (lambda p, t, f: p.result.save(t, force=f), "folder", True),
    "figures": (lambda p, t, f: mw.plots.write_figures({}, t, force=f), "folder", True),
    "run_notebook": (lambda p, t, f: runs.run_notebook(p.notebook, {}, t, force=f), "folder",
                     True),
    "sweep": (lambda p, t, f: mw.sweep(p.notebook, {"delay": [0.0]}, t, workers=1,
                                       progress=False), "folder", False),
    "scan": (lambda p, t, f: mw.scan("santa_fe", GRID, store=t, device="cpu",
                                     progress=False, **SOLVE), "folder", False),
    "book": (lambda p, t, f: builder.build_book(t, small=True, force=f, log=lambda s: None),
             "folder", True),
    "netcdf": (lambda p, t, f: scan_module.to_netcdf(_dataset(p), t, force=f), "file", True),
    "write_csv": (lambda p, t, f: _index(p).write_csv(t, force=f), "file", True),
    "write_animation": (lambda p, t, f: plots2d.write_animation("<script></script>", t,
                                                                force=f), "file", True),
}

#: Targets: name -> (path(place), force, words expected from folder writers, from file
#: writers). None: the case does not apply to that kind of writer.
TARGETS: dict[str, tuple[Callable, bool, list[str] | None, list[str] | None]] = {
    ".": (lambda p: ".", True, ["current directory"], ["a folder, not a file"]),
    "..": (lambda p: "..", True, ["ancestor of the current directory"],
           ["a folder, not a file"]),
    "home": (lambda p: p.home, True, ["your home folder"], ["a folder, not a file"]),
    "ancestor": (lambda p: p.tmp, True, ["ancestor of the current directory"],
                 ["a folder, not a file"]),
    "symlink": (lambda p: p.link, True, ["symbolic link"], ["symbolic link"]),
    "file": (lambda p: p.file, True, ["existing file"], None),
    "foreign file": (lambda p: p.file, False, None, ["did not write", "--force"]),
    "FIFO": (lambda p: p.fifo, True, ["named pipe"], ["named pipe"]),
    "under a file": (lambda p: p.file / "out", True, ["notes.txt is a file, not a folder"],
                     ["notes.txt is a file, not a folder"]),
    "unmarked folder": (lambda p: p.unrelated, False, ["thesis.tex", "force"],
                        ["a folder, not a file"]),
    "another kind": (lambda p: p.other_kind, True, ["a sweep folder"],
                     ["a folder, not a file"]),
    "notebook folder": (lambda p: p.with_nb, True, ["draft.ipynb", "force never"],
                        ["a folder, not a file"]),
    "project root": (lambda p: p.project, True, [".git", "force never"],
                     ["a folder, not a file"]),
    "results inside": (lambda p: p.nested, True, ["a result folder", "force never"],
                       ["a folder, not a file"]),
    "notebook's own folder": (lambda p: p.notebook.parent, True, ["study.ipynb"],
                              ["a folder, not a file"]),
}
#: Writers without force see forced targets as plain refusals with their own words.
NO_FORCE_WORDS = {"unmarked folder": ["thesis.tex", "non-empty folder without"],
                  "another kind": ["sweep folder"], "notebook folder": ["draft.ipynb"],
                  "project root": ["refused"], "results inside": ["refused"]}


def _cases():
    for target, (_, force, folder_words, file_words) in TARGETS.items():
        for writer, (_, kind, takes_force) in WRITERS.items():
            words = folder_words if kind == "folder" else file_words
            if words is None:
                continue
            if not takes_force and target in NO_FORCE_WORDS:
                words = NO_FORCE_WORDS[target]
            yield pytest.param(writer, target, force, words, id=f"{writer}-{target}")


@pytest.mark.parametrize(("writer", "target", "force", "words"), list(_cases()))
def test_refused_before_work_and_nothing_touched(place, result, snapshot, writer, target,
                                                 force, words):
    place.result = result
    call, kind, takes_force = WRITERS[writer]
    path = TARGETS[target][0](place)
    if writer == "sweep" and target == "another kind":
        path = place.nested / "a"  # (a sweep folder is the sweep's own kind)
        words = ["a run folder, not a sweep folder"]
    if writer == "book" and target == "notebook's own folder":
        words = ["study.ipynb"]
    before = snapshot(place.tmp)
    with pytest.raises(ParameterError) as err:
        call(place, path, force and takes_force)
    for w in words:
        assert w in str(err.value), f"{w!r} not in {err.value}"
    assert snapshot(place.tmp) == before
    assert place.work == {"papermill": 0, "solve_block": 0, "book": 0}


def test_root_is_refused_by_the_checks_themselves(place):
    """``/`` is an ancestor of every current directory. Only the checks are called with it
    (they write nothing); the writers are shown to run them first by the table."""
    for kind in ("run", "sweep", "scan", "book", "figures"):
        with pytest.raises(ParameterError, match="'/' is refused: it is an ancestor of the "
                                                 "current directory"):
            storage.check_target("/", kind, force=True)
    with pytest.raises(ParameterError, match="'/' is refused: it is a folder, not a file"):
        storage.check_file("/", name="netcdf", force=True)


def test_the_table_covers_every_writer_and_target():
    cases = list(_cases())
    assert {c.values[0] for c in cases} == set(WRITERS)
    assert {c.values[1] for c in cases} == set(TARGETS)
    for writer in WRITERS:
        assert sum(c.values[0] == writer for c in cases) >= len(TARGETS) - 2


# -- force: what it may replace ----------------------------------------------------------------
def test_force_replaces_an_unmarked_folder_and_files(place):
    forced = mw.save_run(place.unrelated, parameters={"a": 1}, force=True)
    assert sorted(p.name for p in forced.iterdir()) == sorted(
        [storage.MARKER, "metrics.json", "parameters.json"])
    index = _index(place)
    path = index.write_csv(place.file, force=True)
    assert path.read_text().startswith("run,status,error")
    place.file.write_text("mine again")
    with pytest.raises(ParameterError, match="did not write"):
        index.write_csv(place.file)
    assert place.file.read_text() == "mine again"
    written = index.write_csv(place.tmp / "index.csv")
    index.rows[0]["status"] = "failed"
    assert index.write_csv(written) == written  # its own earlier output: replaced
    assert "a,failed" in written.read_text()


def test_netcdf_replaces_its_own_export_only(place):
    pytest.importorskip("h5netcdf")
    ds = _dataset(place)
    nc = scan_module.to_netcdf(ds, place.tmp / "out.nc")
    assert scan_module.to_netcdf(ds, nc) == nc  # an earlier export: replaced
    import h5py

    with h5py.File(place.tmp / "other.h5", "w") as f:
        f.attrs["title"] = "someone else's data"
    before = (place.tmp / "other.h5").read_bytes()
    with pytest.raises(ParameterError, match="did not write"):
        scan_module.to_netcdf(ds, place.tmp / "other.h5")
    assert (place.tmp / "other.h5").read_bytes() == before
    scan_module.to_netcdf(ds, place.tmp / "other.h5", force=True)
    assert [p.name for p in place.tmp.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("change", ["a copy of the attributes", "a forged mark",
                                    "a variable added", "an attribute changed"])
def test_netcdf_replaces_only_a_file_it_can_prove_it_wrote(place, change):
    pytest.importorskip("h5netcdf")
    import h5py

    ds = _dataset(place)
    nc = scan_module.to_netcdf(ds, place.tmp / "out.nc")
    with h5py.File(nc, "r") as f:
        attrs = dict(f.attrs)
    target = place.tmp / "theirs.h5"
    if change in ("a copy of the attributes", "a forged mark"):
        with h5py.File(target, "w") as f:  # someone else's file, with the scan's attributes
            f["data"] = np.arange(3.0)
            for key, value in attrs.items():
                if key != scan_module.EXPORT_ATTR or change == "a forged mark":
                    f.attrs[key] = value
    else:
        os.replace(nc, target)  # an export changed since
        with h5py.File(target, "r+") as f:
            if change == "a variable added":
                f["mine"] = np.arange(3.0)
            else:
                f["v"].attrs["scale_factor"] = 3.0
    before = target.read_bytes()
    with pytest.raises(ParameterError, match="did not write"):
        scan_module.to_netcdf(ds, target)
    assert target.read_bytes() == before


# -- the command line --------------------------------------------------------------------------
def _scan_args(store, *extra):
    return ["scan", "--problem", "santa_fe", "--grid", "threshold: [0.4, 0.6]", "-o",
            str(store), "-p", "nx", "21", "-p", "nt", "20", "--device", "cpu",
            "--no-progress", *extra]


@pytest.mark.parametrize(("store", "netcdf", "words"), [
    (lambda p: p.tmp, None, ["store=", "ancestor of the current directory"]),
    (lambda p: ".", None, ["store='.'", "the current directory"]),
    (lambda p: p.file / "s.zarr", None, ["store=", "notes.txt is a file, not a folder"]),
    (lambda p: p.link, None, ["store=", "symbolic link"]),
    (lambda p: p.tmp / "s.zarr", lambda p: p.file, ["netcdf=", "did not write", "--force"]),
    (lambda p: p.tmp / "s.zarr", lambda p: p.link, ["netcdf=", "symbolic link"]),
    (lambda p: p.tmp / "s.zarr", lambda p: p.unrelated, ["netcdf=", "a folder, not a file"]),
    (lambda p: p.tmp / "s.zarr", lambda p: p.fifo, ["netcdf=", "named pipe"]),
    (lambda p: p.tmp / "s.zarr", lambda p: p.file / "x.nc", ["netcdf=", "not a folder"]),
], ids=["-o ancestor", "-o .", "-o under a file", "-o link", "--netcdf foreign file",
        "--netcdf link", "--netcdf folder", "--netcdf FIFO", "--netcdf under a file"])
def test_scan_cli_refuses_targets_before_the_scan(place, capsys, snapshot, store, netcdf,
                                                   words):
    before = snapshot(place.tmp)
    extra = ["--netcdf", str(netcdf(place))] if netcdf else []
    assert mw_cli(_scan_args(store(place), *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for w in words:
        assert w in err[0]
    assert snapshot(place.tmp) == before and place.work["solve_block"] == 0


def mw_cli(args: list[str]) -> int:
    from mfgwork.__main__ import main

    return main(args)


def test_scan_cli_netcdf_force_and_rerun(tmp_path, monkeypatch, capsys):
    pytest.importorskip("h5netcdf")
    monkeypatch.chdir(tmp_path)
    nc, store = tmp_path / "scan.nc", tmp_path / "s.zarr"
    nc.write_text("not mine")
    assert mw_cli(_scan_args(store, "--netcdf", str(nc))) == 2
    assert nc.read_text() == "not mine" and not store.exists()
    assert mw_cli(_scan_args(store, "--netcdf", str(nc), "--force")) == 0
    first = nc.stat().st_ino
    assert mw_cli(_scan_args(store, "--netcdf", str(nc))) == 0  # resumed; its own export
    assert nc.stat().st_ino != first and "netcdf: " in capsys.readouterr().out


# -- unwritable targets (as a user without root's override of permissions) ---------------------
def _unprivileged() -> list[str]:
    """A command prefix under which file permissions apply to this user."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner",
            "--inh-caps=-all", "--"]


def _run(cmd: list[str], cwd: Path):
    import subprocess
    import sys

    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([*_unprivileged(), sys.executable, "-m", "mfgwork", *cmd], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_read_only_targets_are_refused_before_any_work(tmp_path):
    notebook = make_notebook(tmp_path / "study.ipynb")
    ro_parent = tmp_path / "ro_parent"
    ro_parent.mkdir()
    ro_target = tmp_path / "ro_target"
    (ro_target / "inner").mkdir(parents=True)
    (ro_target / "inner" / "old.txt").write_text("old")
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    try:
        ro_parent.chmod(0o555)
        (ro_target / "inner").chmod(0o555)
        out = _run(["run", str(notebook), "-o", str(ro_target), "--force"], tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert "inner could not be removed to replace it (not writable" in out.stderr
        assert not any(tmp_path.glob(".ro_target.*"))  # nothing started
        out = _run(["run", str(notebook), "-o", str(ro_parent / "run")], tmp_path)
        assert out.returncode == 2 and "ro_parent is not writable" in out.stderr, out.stderr
        out = _run(_scan_args(ro_parent / "s.zarr")[0:], tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert "store=" in out.stderr and "not writable" in out.stderr
        out = _run(["sweep", str(notebook), "--grid", "delay: [0.0]", "-o",
                    str(ro_parent / "sw")], tmp_path)
        assert out.returncode == 2 and "not writable" in out.stderr, out.stderr
    finally:
        ro_parent.chmod(0o755)
        (ro_target / "inner").chmod(0o755)
    assert (ro_target / "inner" / "old.txt").read_text() == "old"
    assert list(ro_parent.iterdir()) == []


# -- names and arguments of save_run ----------------------------------------------------------
@pytest.mark.parametrize(("argument", "name", "victim"), [
    ("tables", "../victim", "box/victim.json"),
    ("tables", "../../tablevictim", "tablevictim.json"),
    ("figures", "../../figvictim", "box/figvictim.png"),
    ("tables", "{tmp}/absvictim", "absvictim.json"),
    ("figures", "{tmp}/absfig", "absfig.png"),
    ("tables", "", None), ("tables", "..", None), ("figures", ".", None),
    ("tables", "a\0b", None), ("figures", "x" * 201, None),
    ("tables", "metrics", "box/run/metrics.json"), ("tables", "mfgwork", None),
    ("results", "r\0", None), ("results", "y" * 201, None),
    ("pages", "../pagevictim", "box/pagevictim.html"), ("pages", "{tmp}/abspage", None),
], ids=["table ..", "table ../..", "figure ../..", "table absolute", "figure absolute",
        "empty", "dot-dot", "dot", "NUL", "too long", "metrics", "marker", "result NUL",
        "result too long", "page ..", "page absolute"])
def test_save_run_names_stay_plain_file_names_inside_the_run(tmp_path, result, snapshot,
                                                             argument, name, victim):
    import matplotlib.pyplot as plt

    name = name.format(tmp=tmp_path)
    run = tmp_path / "box" / "run"
    mw.save_run(run, result)
    if victim is not None and not (tmp_path / victim).exists():
        (tmp_path / victim).write_text("not the run's")
    fig = plt.figure()
    value = {"tables": [{"a": 1}], "figures": fig, "results": result,
             "pages": "<p>a page</p>"}[argument]
    before = snapshot(tmp_path)
    try:
        with pytest.raises(ParameterError) as err:
            mw.save_run(run, result, **{argument: {name: value}})
    finally:
        plt.close(fig)
    assert f"{argument}={name!r:.80}" in str(err.value)
    assert "plain file name" in str(err.value)
    assert snapshot(tmp_path) == before  # nothing written, no temporary left


@pytest.mark.parametrize(("call", "words"), [
    (lambda r, p: mw.save_run(p, "notresult"), ["result='notresult' (str)", "Result"]),
    (lambda r, p: mw.save_run(p, r, metrics={"x": float("nan")}), ["metrics['x']=nan", "NaN"]),
    (lambda r, p: mw.save_run(p, metrics={"x": [1.0, float("inf")]}),
     ["metrics['x']=[1.0, inf]", "NaN or infinity"]),
    (lambda r, p: mw.save_run(p, r, parameters={1: 2}), ["parameters", "key 1 (int)", "str"]),
    (lambda r, p: mw.save_run(p, parameters=[1]), ["parameters=[1] (list)", "dict"]),
    (lambda r, p: mw.save_run(p, tables={"t": [1, 2]}), ["tables['t']=[1, 2]", "rows (dicts)"]),
    (lambda r, p: mw.save_run(p, tables={"t": [{"a": float("nan")}]}), ["tables['t']", "NaN"]),
    (lambda r, p: mw.save_run(p, figures={"f": 3}), ["figures['f']=3 (int)", "savefig"]),
    (lambda r, p: mw.save_run(p, r, results=["a"]), ["results=['a'] (list)", "dict"]),
    (lambda r, p: r.save(5), ["path=5 (int)", "str or os.PathLike"]),
    (lambda r, p: r.save(b"bytes"), ["path=b'bytes' (bytes)", "str or os.PathLike"]),
    (lambda r, p: mw.plots.write_figures({"../f": 3}, p), ["figures='../f'", "plain file"]),
    (lambda r, p: mw.save_run(p, pages={"p": b"<p>"}), ["pages['p']=b'<p>' (bytes)", "str"]),
    (lambda r, p: plots2d.animation_page("no player"), ["html='no player'", "player"]),
], ids=["result", "metrics nan", "metrics inf", "parameter key", "parameters list",
        "table rows", "table nan", "figure", "results list", "save int", "save bytes",
        "write_figures name", "page bytes", "page without a player"])
def test_save_run_refuses_bad_arguments_before_writing(tmp_path, result, snapshot, call,
                                                       words):
    before = snapshot(tmp_path)
    with pytest.raises(ParameterError) as err:
        call(result, tmp_path / "run")
    for w in words:
        assert w in str(err.value), f"{w!r} not in {err.value}"
    assert snapshot(tmp_path) == before


def test_a_page_is_written_with_its_run_and_never_into_it_after(tmp_path):
    page = plots2d.animation_page("<script>play()</script>", title="a & b")
    run = mw.save_run(tmp_path / "run", parameters={"a": 1}, pages={"anim": page})
    assert (run / "anim.html").read_text(encoding="utf-8") == page
    assert "<title>a &amp; b</title>" in page
    written = plots2d.write_animation("<script>play()</script>", tmp_path / "alone.html",
                                      title="a & b")
    assert written.read_text(encoding="utf-8") == page           # the same page either way
    with pytest.raises(ParameterError, match="inside an mfgwork run folder"):
        plots2d.write_animation("<script>play()</script>", run / "late.html")
    assert sorted(p.name for p in run.iterdir()) == sorted(
        ["anim.html", "metrics.json", "parameters.json", storage.MARKER])


# -- single-file writers inside an output -----------------------------------------------------
def _scan_store(path: Path) -> Path:
    """A folder that storage recognises as a scan's zarr store."""
    return folder_with(path, {"zarr.json": storage.dumps({
        "zarr_format": 3, "node_type": "group",
        "attributes": {storage.SCAN_ATTR: {"grid": {}}}})})


#: Outputs: name -> (make(folder), the file of it to replace, its kind in messages).
OUTPUTS: dict[str, tuple[Callable, str, str]] = {
    "scan": (_scan_store, "zarr.json", "an mfgwork scan store"),
    "sweep": (lambda f: folder_with(f, {"sweep.json": "{}", "index.csv": "run\n"}, "sweep"),
              "sweep.json", "an mfgwork sweep folder"),
    "run": (lambda f: folder_with(f, {"metrics.json": "{}"}, "run"), "metrics.json",
            "an mfgwork run folder"),
    "zarr": (lambda f: folder_with(f, {".zgroup": "{}"}), ".zgroup", "a zarr store"),
}
FILE_WRITERS = ("netcdf", "write_csv", "write_animation")


@pytest.mark.parametrize("where", ["its file", "a new file", "deeper"])
@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("writer", FILE_WRITERS)
def test_file_writers_never_write_inside_an_output(place, snapshot, writer, output, where):
    if writer == "netcdf":
        pytest.importorskip("h5netcdf")
    make, own, words = OUTPUTS[output]
    folder = make(place.tmp / "out")
    target = {"its file": folder / own, "a new file": folder / "new.out",
              "deeper": folder / "sub" / "deep" / "new.out"}[where]
    before = snapshot(place.tmp)
    for force in (False, True):
        with pytest.raises(ParameterError) as err:
            WRITERS[writer][0](place, target, force)
        assert f"lies inside {words} at {folder}" in str(err.value), err.value
        assert "even with force" in str(err.value)
    assert snapshot(place.tmp) == before


def test_a_file_goes_into_a_run_folder_only_while_it_is_written(tmp_path, snapshot):
    page = "<script></script>"
    finished = mw.save_run(tmp_path / "done", parameters={})
    before = snapshot(tmp_path)
    with pytest.raises(ParameterError, match="lies inside an mfgwork run folder"):
        plots2d.write_animation(page, finished / "anim.html")
    assert snapshot(tmp_path) == before
    tmp = storage.temporary_sibling(tmp_path / "running", "tmp")  # a run being written
    try:
        storage.write_marker(tmp, "run")
        written = plots2d.write_animation(page, tmp / "anim.html")
        assert plots2d.write_animation(page, written) == written  # its own page: replaced
        assert written.read_text().startswith(plots2d.ANIMATION_HEAD)
    finally:
        shutil.rmtree(tmp)
        storage.discard_temporary(tmp)


def test_a_link_into_an_output_is_followed_to_refuse(place, snapshot):
    store = _scan_store(place.tmp / "s.zarr")
    (place.tmp / "to_store").symlink_to(store)
    before = snapshot(place.tmp)
    with pytest.raises(ParameterError, match="lies inside an mfgwork scan store"):
        _index(place).write_csv(place.tmp / "to_store" / "zarr.json", force=True)
    assert snapshot(place.tmp) == before


def test_a_sweep_rewrites_its_own_index(tmp_path):
    sweep_folder = folder_with(tmp_path / "sw", {"sweep.json": "{}", "index.csv": ""},
                               "sweep")
    index = sweeps.SweepIndex(sweep_folder, [{"run": "a", "status": "done", "error": None}],
                              [])
    with pytest.raises(ParameterError, match="lies inside an mfgwork sweep folder"):
        index.write_csv(sweep_folder / "index.csv", force=True)
    index.append_csv(0)  # an empty index: written whole, by the sweep itself
    assert (sweep_folder / "index.csv").read_text().startswith("run,status,error")
    assert (sweep_folder / "sweep.json").read_text() == "{}"


@pytest.mark.parametrize("existing", [True, False], ids=["existing store", "new store"])
def test_scan_cli_refuses_netcdf_inside_the_store(place, capsys, snapshot, existing):
    store = place.tmp / "s.zarr"
    if existing:
        _scan_store(store)
    before = snapshot(place.tmp)
    assert mw_cli(_scan_args(store, "--netcdf", str(store / "zarr.json"), "--force")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: netcdf="), err
    assert "lies inside" in err[0] and str(store) in err[0]
    assert snapshot(place.tmp) == before and place.work["solve_block"] == 0


# -- the kernel of a run ----------------------------------------------------------------------
def test_an_unknown_kernel_is_refused_before_the_run(place, capsys, snapshot):
    def outside_home() -> dict[str, object]:  # (looking up kernels may make ~/.ipython)
        return {k: v for k, v in snapshot(place.tmp).items() if not k.startswith("home")}

    before = outside_home()
    out = place.tmp / "runs" / "study"
    assert mw_cli(["run", str(place.notebook), "--kernel", "nokernel", "-o", str(out),
                   "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --kernel='nokernel' is invalid"), err
    assert "installed Jupyter kernel (installed: " in err[0]
    with pytest.raises(ParameterError, match="kernel_name='nokernel' is invalid"):
        runs.run_notebook(place.notebook, {}, out, kernel_name="nokernel")
    with pytest.raises(ParameterError, match="kernel_name=3 is invalid"):
        runs.run_notebook(place.notebook, {}, out, kernel_name=3)
    assert outside_home() == before and place.work["papermill"] == 0
    with pytest.raises(ParameterError, match="kernel_name='nokernel' is invalid"):
        mw.sweep(place.notebook, {"threshold": [0.4, 0.6]}, place.tmp / "sweep",
                 kernel_name="nokernel", progress=False)
    assert outside_home() == before and place.work["papermill"] == 0
