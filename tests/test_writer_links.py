"""Result folders are written only through their own folders, and leftovers of killed writes
go: a sweep or scan resume refuses parts that are symbolic links (proving the folder the link
points to untouched), and removes stale temporaries of dead processes, nested ones included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import dead_temporaries, write_notebook

import mfgwork as mw
from mfgwork.core import storage
from mfgwork.core.errors import ParameterError
from mfgwork.workflows import sweeps

SPEC = {"delay": [0.0, 0.5]}


def dead_pid() -> int:
    """The id of a process that has ended."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.fixture
def notebook(tmp_path) -> Path:
    (tmp_path / "nb").mkdir()
    return write_notebook(tmp_path / "nb" / "study.ipynb", "delay = 0.0\nout_dir = ''", "pass")


@pytest.fixture
def executed(monkeypatch) -> list[list[str]]:
    """Sweeps plan and clean as usual, but their runs are recorded instead of executed."""
    calls: list[list[str]] = []
    monkeypatch.setattr(sweeps, "_execute",
                        lambda index, tasks, *a: calls.append([t["name"] for t in tasks]))
    return calls


@pytest.fixture
def sweep_folder(tmp_path, notebook, executed) -> Path:
    out = tmp_path / "sw"
    mw.sweep(notebook, SPEC, out, workers=1, progress=False)
    assert [n.split("-")[0] for n in executed[0]] == ["delay=0.0", "delay=0.5"]
    executed.clear()
    return out


@pytest.fixture
def names(sweep_folder) -> list[str]:
    """The run names of the sweep, in plan order."""
    return [row["run"] for row in mw.load_sweep(sweep_folder)]


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").write_text("a hidden file outside the sweep")
    (folder / ".delay=0.0.json.tmp-1-abcdefgh").write_text("named like a temporary")
    (folder / "data.txt").write_text("outside")
    (folder / "sub" / "metrics.json").write_text("{}")
    return folder


def _link(part: Path, to: Path) -> None:
    if part.is_dir():
        shutil.rmtree(part)
    part.unlink(missing_ok=True)
    part.symlink_to(to, target_is_directory=to.is_dir())


# -- sweeps: parts that are links --------------------------------------------------------------
@pytest.mark.parametrize("part", ["failed", "runs", "locks", "runs/{0}", "mfgwork.json",
                                  "index.csv", "sweep.lock"])
def test_sweep_resume_refuses_linked_parts(sweep_folder, names, notebook, outside, executed,
                                           part, capsys, snapshot):
    part = part.format(*names)
    target = outside / "data.txt" if part in ("mfgwork.json", "index.csv", "sweep.lock") \
        else outside
    _link(sweep_folder / part, target)
    before = snapshot(outside)
    with pytest.raises(ParameterError) as err:
        mw.sweep(notebook, SPEC, sweep_folder, workers=1, progress=False)
    assert f"{part} in it is a symbolic link" in str(err.value)
    from mfgwork.__main__ import main

    assert main(["sweep", str(notebook), "--grid", "delay: [0.0, 0.5]", "-o",
                 str(sweep_folder), "--no-progress"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert snapshot(outside) == before and executed == []


@pytest.mark.parametrize(("part", "make"), [
    ("index.csv", Path.mkdir), ("sweep.lock", Path.mkdir), ("spec.yaml", os.mkfifo),
    ("runs", Path.touch), ("failed", Path.touch)])
def test_sweep_resume_refuses_parts_of_the_wrong_type(sweep_folder, notebook, executed, part,
                                                      make):
    target = sweep_folder / part
    if target.is_dir():
        shutil.rmtree(target)
    target.unlink(missing_ok=True)
    make(target)
    with pytest.raises(ParameterError, match=f"its {part} is not a"):
        mw.sweep(notebook, SPEC, sweep_folder, workers=1, progress=False)
    assert executed == []


@pytest.mark.parametrize("part", ["runs", "locks", "failed", "runs/{0}"])
def test_a_worker_never_writes_through_a_link(sweep_folder, names, notebook, outside, part,
                                              snapshot):
    part = part.format(*names)
    _link(sweep_folder / part, outside)
    before = snapshot(outside)
    task = {"folder": str(sweep_folder), "name": names[0], "notebook": str(notebook),
            "parameters": {"delay": 0.0}}
    with pytest.raises(ParameterError, match="symbolic link"):
        sweeps.execute_run(task)
    assert snapshot(outside) == before


def test_a_linked_pending_run_is_not_counted_done(sweep_folder, names, notebook, outside,
                                                  executed):
    _link(sweep_folder / "runs" / names[1], outside / "sub")
    with pytest.raises(ParameterError) as err:
        mw.sweep(notebook, SPEC, sweep_folder, workers=1, progress=False)
    assert f"runs/{names[1]} in it is a symbolic link" in str(err.value)
    (sweep_folder / "runs" / names[1]).unlink()
    mw.sweep(notebook, SPEC, sweep_folder, workers=1, progress=False)
    assert executed == [names]


# -- sweeps: leftovers of killed runs ----------------------------------------------------------
def test_sweep_resume_removes_stale_temporaries_nested_ones_included(sweep_folder, names,
                                                                     notebook, executed):
    dead = dead_pid()
    a, b = names
    runs_dir, failed = sweep_folder / "runs", sweep_folder / "failed"
    made = dead_temporaries((runs_dir / a, "tmp", True, ""), ("#0", "tmp", True, ""),
                            (runs_dir / b, "running", False, ".ipynb"),
                            (runs_dir / b, "kernel", True, ""),
                            (failed / f"{a}.json", "tmp", False, ""),
                            (sweep_folder / "index.csv", "tmp", False, ""))
    (made[1] / "metrics.json").write_text("{}")
    # kept: a hidden file that is not a temporary, a temporary of a live process, and
    # names of temporaries without an owner record (a user's own backups)
    notes = failed / ".notes"
    notes.write_text("mine")
    live = storage.temporary_sibling(failed / f"{b}.json", "tmp", directory=False)
    backups = [runs_dir / f".{a}.tmp-{dead}-abcdefgh", failed / f".{b}.json.tmp-{dead}-ijk",
               runs_dir / f".{b}.old-2023-backup"]
    for p in backups:
        (p / "data").mkdir(parents=True)
    mw.sweep(notebook, SPEC, sweep_folder, workers=1, progress=False)
    assert not any(os.path.lexists(p) or os.path.lexists(f"{p}.mfgwork-owner") for p in made)
    assert sorted(p.name for p in runs_dir.iterdir()) == sorted(p.name for p in backups
                                                                if p.parent == runs_dir)
    assert notes.read_text() == "mine" and live.exists() and all(p.is_dir() for p in backups)
    assert executed == [names]


def test_temporary_owner_reads_nested_names():
    owner = storage.temporary_owner
    assert owner(".run.tmp-12-abcdefgh") == ("run", [12])
    assert owner("..run.tmp-12-abcdefgh.tmp-34-ijklmnop") == ("run", [34, 12])
    assert owner(".index.csv.tmp-5-a_b9") == ("index.csv", [5])
    assert owner(".run.running-7-abcdefgh.ipynb") == ("run", [7])
    assert owner(".run.running-7-abcdefgh.ipynb.mfgwork-owner") == ("run", [7])
    assert owner("run") is None and owner(".run.tmp-x-abc") is None
    assert owner(".run.lock") is None and owner(".notes") is None


def test_remove_stale_removes_only_what_an_owner_record_proves(tmp_path, outside, snapshot):
    target = tmp_path / "run"
    stale, nested, other, linked, forged, piped = dead_temporaries(
        (target, "tmp", True, ""), ("#0", "tmp", True, ""), (tmp_path / "runs", "tmp", True, ""),
        (target, "tmp", True, ""), (target, "old", True, ""), (target, "tmp", False, ""))
    live = storage.temporary_sibling(target, "tmp")
    linked.rmdir()
    linked.symlink_to(outside)  # removed as a link, never followed
    record = Path(f"{forged}.mfgwork-owner")  # a record naming another temporary: kept
    record.write_text(record.read_text().replace(forged.name, stale.name))
    Path(f"{piped}.mfgwork-owner").unlink()
    os.mkfifo(f"{piped}.mfgwork-owner")  # a FIFO as record: kept, never waited on
    dead = dead_pid()
    named_only = [tmp_path / f".run.tmp-{dead}-abcdefgh", tmp_path / ".run.old-2023-backup",
                  tmp_path / ".run.tmp-mybackup"]
    for p in named_only:
        p.mkdir()
    before = snapshot(outside)
    assert sorted(storage.remove_stale(target)) == sorted([stale, nested, linked])
    assert not any(os.path.lexists(f"{p}.mfgwork-owner") for p in (stale, nested, linked))
    assert live.is_dir() and other.is_dir() and forged.is_dir() and piped.is_file()
    assert all(p.is_dir() for p in named_only) and snapshot(outside) == before


def test_a_reused_process_id_is_a_process_that_has_ended():
    from mfgwork.core import temporaries

    me = os.getpid()
    assert not temporaries.has_ended(me, temporaries.process_start(me))
    parent = os.getppid()
    assert not temporaries.has_ended(parent, temporaries.process_start(parent))
    assert temporaries.has_ended(parent, "another start") == \
        (temporaries.process_start(parent) is not None)
    assert temporaries.has_ended(dead_pid(), None)


# -- scans -------------------------------------------------------------------------------------
SCAN = {"nx": 21, "nt": 20, "tol": 1e-8, "max_iter": 200}


def _scan(store: Path):
    return mw.scan("santa_fe", {"threshold": [0.4, 0.6]}, store=store, device="cpu",
                   chunk_size=1, progress=False, **SCAN)


def test_scan_removes_leftovers_of_killed_creations_only(tmp_path):
    pytest.importorskip("zarr")
    store = tmp_path / "s.zarr"
    killed, = dead_temporaries((store, "tmp", True, ""))
    backups = [tmp_path / ".s.zarr.tmp-mybackup", tmp_path / f".s.zarr.tmp-{dead_pid()}-abcdefgh"]
    for p in [killed, *backups]:
        (p / "M").mkdir(parents=True)
        (p / "zarr.json").write_text("{}")
    mine = tmp_path / ".s.zarr.notes"
    mine.write_text("not a temporary")
    ds = _scan(store)
    assert bool(ds.done.all())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".s.zarr.notes", "s.zarr", *(p.name for p in backups)])


@pytest.mark.parametrize("part", ["M", "M/c", "done", "attendance/c/1"])
def test_scan_resume_refuses_a_linked_array_folder(tmp_path, part, snapshot):
    pytest.importorskip("zarr")
    store = tmp_path / "s.zarr"
    _scan(store)
    (store / "done" / "c" / "1").unlink()  # the second block must be solved again
    outside = tmp_path / "outside"
    shutil.copytree(store / part, outside)
    _link(store / part, outside)
    before = snapshot(outside)
    with pytest.raises(ParameterError, match=f"{part} in it is a symbolic link"):
        _scan(store)
    assert snapshot(outside) == before
