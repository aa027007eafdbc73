"""Every write and read of result files: atomic folders with a marker, JSON/CSV/NPZ, provenance.

Writers never destroy what they did not make. A result folder (a run, a sweep, a figures
folder, a book) holds a marker file, ``mfgwork.json`` (``{"kind": ..., "format": 1}``); a
scan's zarr store is known by the plan in its root attributes (:data:`SCAN_ATTR`).
:func:`check_target` allows a target only if it does not exist, is an empty folder, or is a
folder whose marker names the same kind, unchanged since it was written (a result that a
writer replaces: nothing added, moved in or changed in it after its marker was written last,
:func:`changes`). A
non-empty folder without a marker, or a result changed since, needs ``force=True``, and is
refused even then if it holds a notebook or a project's sources (:data:`PROJECT_FILES`);
with ``force`` it is kept aside under a new name (:func:`replace_folder`), never deleted.
Refused
in every case: a folder that holds, at any depth, a repository (:data:`VCS_MARKERS`: a
``.git`` folder or file, ``.hg``, ``.svn``, ...) or a result folder or zarr store that is not
an own part of the target (:data:`OWN_PARTS`: a sweep's runs, a run's figures; and the
parts its marker records: the results written into it while it was being written, such as a
notebook's own result in its run folder); a target inside a result folder or store that does
not hold it as its own part and is no longer being written (replacing the outer one would
delete it); a folder of another kind, a store, a folder whose ``mfgwork.json`` is
no marker (said what it is: a FIFO, a link, ...), a file, a link, a FIFO, the current
directory, the home folder, folders given as ``protect`` (e.g. the notebook's own folder),
the ancestors of each, a path under a file, a name too long for the writer's temporaries
(:data:`MAX_TARGET_BYTES`) and a target this process may not write.
:func:`check_file` is the rule of single-file writers, :func:`check_links` refuses result
folders whose parts are symbolic links.

:class:`atomic_folder` fills a temporary sibling ``.<name>.tmp-<pid>-<token>`` and renames
it to the target at the end, so an interrupted write never leaves a half result;
:func:`atomic_file` and :func:`atomic_path` do the same for one file, and
:func:`replace_folder` renames the folder it replaces aside to a temporary of its own (or,
where that folder is not an unchanged result, to a kept ``<name>.replaced-<time>``). Each
temporary has an owner record beside it (:mod:`mfgwork.core.temporaries`), and a writer
removes only the temporaries that such a record proves stale (their process has ended),
never one recognised by its name alone.

Readers (:func:`read_json`, :func:`read_npz`, :func:`load_table`) check that a file exists,
is a regular file (opened without blocking, so a FIFO or a device is refused, not waited
on or read without end) of bounded size, parses, and holds the expected keys, shapes, dtypes
and sizes (an NPZ's decompressed size is read from its headers before any array), and raise
:class:`~mfgwork.core.errors.LoadError` naming the file and what is wrong. Markers are read
only from a regular file of at most :data:`MAX_MARKER_BYTES`, never through a link.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import json
import os
import platform
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from . import memory
from .errors import LoadError, ParameterError, warn
from .temporaries import discard_temporary, in_progress, release_temporary
from .temporaries import remove_path as remove_path  # (the writers' API, here)
from .temporaries import remove_stale as remove_stale
from .temporaries import temporary_owner as temporary_owner
from .temporaries import temporary_sibling as temporary_sibling

MARKER = "mfgwork.json"
FORMAT = 1
#: Largest JSON file and largest decompressed NPZ the readers accept by default (bytes); an
#: NPZ is also refused when it would not fit in the host's available memory.
MAX_JSON_BYTES = 256 * 2**20
MAX_NPZ_BYTES = 2**30
#: Largest marker file read (bytes); a larger one is no marker.
MAX_MARKER_BYTES = 64 * 2**10
#: Packages a result depends on (recorded with every result and benchmark).
PACKAGES = ("mfgwork", "numpy", "scipy", "numba", "torch", "triton", "array-api-compat",
            "matplotlib", "papermill", "nbclient", "ipykernel", "xarray", "zarr", "dask")


# -- targets ---------------------------------------------------------------------------------
def _marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker if it is one: a JSON object naming a kind, read from a regular
    file (not a link) of at most :data:`MAX_MARKER_BYTES`."""
    try:
        value = read_json(Path(folder) / MARKER, max_bytes=MAX_MARKER_BYTES, follow=False)
    except LoadError:
        return None
    ok = isinstance(value, dict) and isinstance(value.get("kind"), str)
    return value if ok else None


def marker_kind(folder: Path) -> str | None:
    """The kind named by the folder's marker, or None (no marker; or one that is a link,
    not a regular file, larger than :data:`MAX_MARKER_BYTES`, or not a JSON object)."""
    marker = _marker(folder)
    return marker["kind"] if marker is not None else None


def marked_parts(folder: Path) -> set[tuple[str, ...]]:
    """The results that the result folder ``folder`` holds as its own parts by its marker
    (``parts``: those written into it while it was being written), as relative paths."""
    parts = (_marker(folder) or {}).get("parts", [])
    if not isinstance(parts, list):
        return set()
    return {tuple(Path(p).parts) for p in parts if isinstance(p, str)}


def _listing(folder: Path, limit: int = 4) -> str:
    names = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(names[:limit]) + (", …" if len(names) > limit else "")
    return f"{len(names)} entr{'y' if len(names) == 1 else 'ies'}: {shown}"


def _refuse(name: str, target: Any, what: str, how: str) -> ParameterError:
    return ParameterError(f"{name}={str(target)!r} is refused: {what}; {how}")


def _guard(path: Path, target: Any, name: str, kind: str, how: str,
           protect: Mapping[str | os.PathLike, str] | None) -> None:
    """Refuse the current directory, the home folder, the ``protect`` folders and the
    ancestors of each (``/`` among them)."""
    real = path.resolve()
    guarded = {Path.cwd().resolve(): "the current directory",
               Path.home().resolve(): "your home folder"}
    for p, what in (protect or {}).items():
        guarded.setdefault(Path(p).resolve(), what)
    for folder, what in guarded.items():
        if real == folder or real in folder.parents:
            role = what if real == folder else f"an ancestor of {what} ({folder})"
            raise _refuse(name, target, f"it is {role}, which a {kind} would replace", how)


def _not_a_link_or_special(path: Path, target: Any, name: str, how: str) -> None:
    if path.is_symlink():
        raise _refuse(name, target, f"it is a symbolic link (to {os.readlink(path)!r}), "
                      "which is never followed or replaced", how)
    if os.path.lexists(path):
        mode = os.lstat(path).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            raise _refuse(name, target,
                          f"it is {special_file_kind(mode)}, not a file or a folder", how)


def special_file_kind(mode: int) -> str:
    """What a file of ``os.lstat`` mode ``mode`` that is neither a folder nor a regular file is,
    in words (e.g. "a named pipe (FIFO)")."""
    for test, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "a special file"


def _check_parent(path: Path, target: Any, name: str, how: str) -> None:
    """The nearest existing ancestor of ``path`` must be a folder this process may write
    in (where the temporary sibling and the missing folders go)."""
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise _refuse(name, target, f"{parent} is a file, not a folder", how)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _refuse(name, target, f"the folder {parent} is not writable (permission "
                      "denied or a read-only file system)", how)


#: What ``force`` never replaces: a folder holding any of these, at any depth.
NOTEBOOK_SUFFIX = ".ipynb"
#: Files that mark a project's sources: a folder holding one (at any depth) is never
#: replaced, even with force.
PROJECT_FILES = {"pyproject.toml": "a project root", "setup.py": "a project root",
                 "setup.cfg": "a project root", "__init__.py": "a Python package",
                 "conf.py": "a Sphinx project", "Makefile": "a project root",
                 "CMakeLists.txt": "a project root", "Cargo.toml": "a project root",
                 "package.json": "a project root", "DESCRIPTION": "an R package"}
#: Results that a writer resumes, adding to them, and never replaces.
RESUMED = frozenset({"sweep", "scan"})
#: Entries of a result that others add without changing it (Jupyter's checkpoints of its
#: notebook, the macOS Finder's folder settings): they do not count as changes.
NOT_CHANGES = frozenset({".ipynb_checkpoints", ".DS_Store"})
#: Bytes a writer's temporaries add to a target's name at most (a notebook's result in its
#: run's temporary: two levels, with an owner record), and the longest target name (UTF-8
#: bytes) that leaves them room within a file name's 255.
TEMPORARY_BYTES = 88
MAX_TARGET_BYTES = 160
#: Names that mark a repository of a version-control system, as a folder or as a file (a
#: git worktree's or submodule's ``.git`` file): what holds one is never replaced.
VCS_MARKERS = (".git", ".hg", ".svn", ".bzr", "_darcs", ".fslckout", "_FOSSIL_", ".jj",
               ".pijul", ".sl", "CVS")
#: The files of a zarr store (v3, v2); the root attribute that marks a scan's store.
ZARR_FILES = ("zarr.json", ".zgroup", ".zarray")
SCAN_ATTR = "mfgwork_scan_plan"
#: Largest ``zarr.json`` read to tell a scan store (bytes); a larger one is another store.
MAX_STORE_META_BYTES = 2**20
#: The results a result of each kind holds as its own parts: (path below it, where ``*``
#: is one name and ``**`` any path, and the part's kind, None for any).
OWN_PARTS: dict[str, tuple[tuple[tuple[str, ...], str | None], ...]] = {
    "run": ((("figures",), "figures"),),
    "sweep": ((("runs", "*"), "run"),),
    "book": ((("work", "**"), None),),   # what the notebooks write beside themselves
    "scan": ((("**",), "zarr"),),        # its arrays
}


def _marker_problem(folder: Path) -> str | None:
    """Why the folder's ``mfgwork.json`` is no marker (a link, a special file, too large,
    not a JSON object naming a kind), or None if it is one or there is none."""
    marker = folder / MARKER
    try:
        info = os.lstat(marker)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"a symbolic link (to {os.readlink(marker)!r})"
    if stat.S_ISDIR(info.st_mode):
        return "a folder"
    if not stat.S_ISREG(info.st_mode):
        return special_file_kind(info.st_mode)
    if info.st_size > MAX_MARKER_BYTES:
        return f"a file of {info.st_size} bytes (a marker has at most {MAX_MARKER_BYTES})"
    return None if marker_kind(folder) is not None else "not a JSON object naming a kind"


def output_kind(folder: Path) -> tuple[str, str] | None:
    """What mfgwork output (or data store) ``folder`` is, from its own entries: (kind, what it
    is in words) with the kind its marker names; "damaged" for a marker that is none
    (:func:`_marker_problem`); "scan" for a scan's zarr store, "zarr" for another zarr store
    or array. None for any other folder."""
    kind = marker_kind(folder)
    if kind is not None:
        return kind, f"a {kind} folder"
    problem = _marker_problem(folder)
    if problem is not None:
        return "damaged", f"a folder whose {MARKER} is {problem}"
    if not any(os.path.lexists(folder / f) for f in ZARR_FILES):
        return None
    try:
        meta = read_json(folder / "zarr.json", max_bytes=MAX_STORE_META_BYTES, follow=False)
    except LoadError:
        meta = None
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    if isinstance(attrs, dict) and SCAN_ATTR in attrs:
        return "scan", "a scan store"
    return "zarr", "a zarr store"


_OUTPUT_FILES = frozenset((MARKER, *ZARR_FILES))


def _own_part(owner: str, part: tuple[str, ...], kind: str) -> bool:
    """Whether a result of kind ``owner`` holds a result of ``kind`` at the relative path
    ``part`` as its own (:data:`OWN_PARTS`)."""
    for pattern, allowed in OWN_PARTS.get(owner, ()):
        if allowed not in (None, kind):
            continue
        if pattern[-1] == "**":
            if len(part) >= len(pattern) and part[:len(pattern) - 1] == pattern[:-1]:
                return True
        elif len(part) == len(pattern) and all(p in ("*", q) for p, q in zip(pattern, part,
                                                                            strict=True)):
            return True
    return False


def changes(folder: Path, limit: int = 3) -> str | None:
    """What was added to, moved into or changed in the result folder ``folder`` after its
    marker was written, in words (None if nothing was, or if ``folder`` holds no marker: a
    folder that is no result is not judged here): its entries at any depth, links not
    followed and :data:`NOT_CHANGES` aside, whose status changed after the marker's (the
    ctime, which writing, renaming or moving an entry in sets, and no one can set back; a
    folder's changes when entries are added to it or removed). Its own parts (a run's
    figures folder, written later by a writer of its own) are judged by their own markers."""
    found = _changed_entries(folder, Path(), limit)
    if not found:
        return None
    return ", ".join(found[:limit]) + (", …" if len(found) >= limit else "") + \
        (" were" if len(found) > 1 else " was") + " added or changed"


def _changed_entries(folder: Path, prefix: Path, limit: int) -> list[str]:
    """The entries of :func:`changes` (at most about ``limit``), relative to the outermost
    folder (``prefix``: ``folder``'s path below it)."""
    try:
        written = os.lstat(folder / MARKER).st_ctime_ns
    except OSError:
        return []
    kind, parts = marker_kind(folder), marked_parts(folder)
    found, stack = [], [folder]
    while stack and len(found) < limit:
        here = stack.pop()
        with os.scandir(here) as it:
            entries = [e for e in it if e.name not in NOT_CHANGES
                       and not (here == folder and e.name == MARKER)]
        for e in entries:
            path, is_dir = Path(e.path), e.is_dir(follow_symlinks=False)
            part = path.relative_to(folder).parts
            inner = output_kind(path) if is_dir and (path / MARKER).exists() else None
            if inner is not None and kind is not None and (
                    _own_part(kind, part, inner[0]) or part in parts):
                found += _changed_entries(path, prefix / path.relative_to(folder), limit)
            elif e.stat(follow_symlinks=False).st_ctime_ns > written:
                found.append(str(prefix / path.relative_to(folder)) + ("/" if is_dir else ""))
            elif is_dir:
                stack.append(path)
    return found


def _check_name_length(path: Path, target: Any, name: str, how: str) -> None:
    """Refuse a target whose name leaves no room for the writer's temporaries."""
    size = len(os.fsencode(path.name))
    if size > MAX_TARGET_BYTES:
        raise _refuse(name, target, f"its name is {size} bytes long, and a writer's "
                      f"temporaries beside it need names of up to {size + TEMPORARY_BYTES} (a file "
                      f"name holds 255): at most {MAX_TARGET_BYTES} bytes", how)


def _check_ancestors(path: Path, kind: str, target: Any, name: str, how: str) -> None:
    """Refuse a target inside a result folder or a zarr store, unless the nearest such
    ancestor holds results of ``kind`` there as its own (a sweep's ``runs/NAME``), or is
    still being written (a temporary whose writer runs: a notebook's results go into its
    run folder, and become its parts): replacing that result would delete this one."""
    for parent in path.parents:
        found = output_kind(parent) if parent.is_dir() else None
        if found is None:
            continue
        if _own_part(found[0], path.relative_to(parent).parts, kind) or in_progress(parent):
            return
        raise _refuse(name, target, f"it is inside {found[1]} ({parent}), and a result is "
                      "never written inside another (replacing the outer one would delete "
                      f"it)", f"choose a folder outside {parent}")


def _nested(found: tuple[str, str], folder: Path) -> str:
    """A result or store found inside a target, in words."""
    if found[0] in ("scan", "zarr"):
        return f"{found[1]} ({folder})"
    return f"a result folder ({found[1]}: {folder})"


def _survey(path: Path, kind: str | None, *, force: bool) -> tuple[str | None, str | None]:
    """Walk the folder ``path`` without following links: the first folder a replacement
    could not remove (not readable and writable), and the first entry that forbids the
    replacement: a repository (:data:`VCS_MARKERS`) anywhere, a result or zarr store that
    is not an own part (:data:`OWN_PARTS`) of the result of ``kind`` that ``path`` is (of
    none: ``kind`` None), and, with ``force``, a notebook or a project root."""
    # (folder, kind of the result it is in, that result's root, its marked parts)
    stack = [(path, kind, path, marked_parts(path) if kind else set())]
    while stack:
        folder, owner, root, parts = stack.pop()
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            return str(folder), None
        with os.scandir(folder) as it:
            entries = list(it)
        marked = folder != path and any(e.name in _OUTPUT_FILES for e in entries)
        if marked and (found := output_kind(folder)) is not None:
            part = folder.relative_to(root).parts
            if owner is None or not (_own_part(owner, part, found[0]) or part in parts):
                return None, _nested(found, folder)
            owner, root, parts = found[0], folder, marked_parts(folder)
        for e in entries:
            is_dir = e.is_dir(follow_symlinks=False)
            if e.name in VCS_MARKERS:
                return None, f"a repository ({e.path})"
            if force and e.name.endswith(NOTEBOOK_SUFFIX) and not is_dir:
                return None, f"a notebook ({e.path})"
            if force and e.name in PROJECT_FILES and not is_dir:
                return None, f"{PROJECT_FILES[e.name]} ({e.path})"
            if is_dir:
                stack.append((Path(e.path), owner, root, parts))
    return None, None


def check_target(target: str | os.PathLike, kind: str, *, name: str = "out_dir",
                 force: bool = False, protect: Mapping[str | os.PathLike, str] | None = None,
                 legacy: Iterable[str] = (), what: str | None = None,
                 forceable: bool = True) -> Path:
    """``target`` as an absolute path if a writer of ``kind`` may replace (or resume) it;
    else :class:`ParameterError` saying what is there and how to choose another target.

    Allowed: a new path, an empty folder, a folder whose marker names ``kind`` (or that
    holds a ``legacy`` file, identifying a folder of this kind written before markers
    existed); with ``force``, also a non-empty folder without a marker, unless it holds,
    at any depth, a notebook (``*.ipynb``) or a project root (:data:`PROJECT_FILES`).
    Refused in every case: a folder holding, at any depth, a repository
    (:data:`VCS_MARKERS`, a folder or a file) or a result folder or zarr store that is not
    an own part of the target (:data:`OWN_PARTS`); a target inside a result folder or zarr
    store that does not hold it as its own part; a folder of another kind, a scan or zarr
    store (unless ``legacy`` names ``zarr.json``), a folder whose ``mfgwork.json`` is no
    marker, a file, a symbolic link, a FIFO or device, the current directory, the home
    folder, the ``protect`` folders (each with what it is, such as ``{notebook.parent: "the
    folder of the notebook run.ipynb"}``) and the ancestors of each (``/`` among them), a
    path under a file, and a target this process could not write (its parent, or a folder
    inside it that a replacement must remove, not writable). ``what`` names such a folder
    in messages (default: "<kind> folder"); ``forceable``: whether the writer takes
    ``force`` (else messages do not offer it).
    """
    path = as_path(target, name)
    what = what or f"{kind} folder"
    how = f"choose a new or empty folder, or a previous {what}"
    _check_name_length(path, target, name, how)
    _guard(path, target, name, what, how, protect)
    _not_a_link_or_special(path, target, name, how)
    if path.exists() and not path.is_dir():
        raise _refuse(name, target, f"it is an existing file, not a {what}", how)
    _check_parent(path, target, name, how)
    _check_ancestors(path, kind, target, name, how)
    if not path.is_dir():
        return path
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise _refuse(name, target, "it is a folder this process may not read and write "
                      "(permission denied or a read-only file system)", how)
    ours = True
    if any(path.iterdir()):
        ours = _is_ours(path, kind, legacy, target, name, what, how, forceable, force)
    blocked, forbidden = _survey(path, kind if ours else None, force=not ours)
    if blocked is not None:
        raise _refuse(name, target, f"the folder {blocked} could not be removed to replace it "
                      "(not writable: permission denied or a read-only file system)", how)
    if forbidden is not None:
        whose = f"it is a {what} that" if ours else f"it is not a {what} and"
        raise _refuse(name, target, f"{whose} holds {forbidden}, which force never replaces "
                      "and no writer deletes", how)
    if ours and kind not in RESUMED and not force and not in_progress(path) and (
            changed := changes(path)):
        raise _refuse(name, target, f"it is a previous {what}, but {changed} after it was "
                      "written, and a writer never deletes what it did not write",
                      f"move those out of it, or {how}" + (
                          " (or force it: --force / force=True, which keeps this folder "
                          "aside under a new name)" if forceable else ""))
    return path


def _is_ours(path: Path, kind: str, legacy: Iterable[str], target: Any, name: str,
             what: str, how: str, forceable: bool, force: bool) -> bool:
    """Whether the non-empty folder ``path`` is a result of ``kind``; refuses a result of
    another kind, a damaged marker, a store, and (without ``force``) any other folder."""
    found = output_kind(path)
    legacy = list(legacy)
    if found is not None and found[0] == kind:
        return True
    if (found is None or found[0] in ("damaged", "zarr")) and \
            any((path / f).is_file() for f in legacy):
        return True  # (a damaged marker is then the writer's to report)
    if found is not None and found[0] == "damaged":
        raise _refuse(name, target, f"it is not a {what}: a non-empty folder without "
                      f"{MARKER} as a marker: its {MARKER} is {_marker_problem(path)} "
                      f"({_listing(path)}); such a folder is never replaced, even with "
                      "force", f"remove or repair {path / MARKER}, or " + how)
    if found is not None:
        raise _refuse(name, target, f"it is {found[1]}, not a {what} (never replaced by "
                      "another kind of result, even with force)", how)
    if not force:
        marks = " or ".join([MARKER, *legacy])
        raise _refuse(name, target, f"it is not a {what}: a non-empty folder without "
                      f"{marks} ({_listing(path)})",
                      how + (" (or force it: --force / force=True)" if forceable else ""))
    return False


def check_file(target: str | os.PathLike, *, name: str, force: bool = False,
               ours: Callable[[Path], bool] | None = None) -> Path:
    """``target`` as an absolute path if a single-file writer may write it; else
    :class:`ParameterError`, before any work.

    Allowed: a new path (its missing folders are made), or an existing regular file that
    ``ours`` recognises as an earlier output of this writer, or any regular file with
    ``force``. Refused in every case: a folder, a symbolic link, a FIFO or device, a path
    under a file, a folder this process cannot write in, and a path inside (at any depth)
    an mfgwork output or a zarr store that is not still being written
    (:func:`_inside_output`).
    """
    path = as_path(target, name)
    how = "choose another file name"
    _check_name_length(path, target, name, how)
    _not_a_link_or_special(path, target, name, how)
    if path.is_dir():
        raise _refuse(name, target, "it is a folder, not a file", how)
    _check_parent(path, target, name, how)
    _inside_output(path, target, name)
    if path.exists() and not force and not (ours is not None and ours(path)):
        raise _refuse(name, target, "it is an existing file that this writer did not write",
                      how + " (or replace it: --force / force=True)")
    return path


def _inside_output(path: Path, target: Any, name: str) -> None:
    """Refuse a file inside an mfgwork output (a result, sweep or figures folder, a scan
    store, a folder with a damaged marker) or another zarr store: the nearest one among the
    folders above ``path``, as written and with links resolved; unless it is a temporary
    still being written (a notebook's files in its run's temporary folder)."""
    real = path.parent.resolve() / path.name
    for start in dict.fromkeys((path, real)):
        for parent in start.parents:
            found = output_kind(parent) if parent.is_dir() else None
            if found is None:
                continue
            if in_progress(parent):
                break
            where = {"zarr": f"a zarr store at {parent}",
                     "damaged": f"{parent}, {found[1]}"}.get(
                found[0], f"an mfgwork {found[1].removeprefix('a ')} at {parent}")
            raise _refuse(name, target, f"it lies inside {where}; a file is never added to "
                          "or replaced in another output, even with force",
                          f"choose a file outside {parent}")


def as_path(target: Any, name: str) -> Path:
    """``target`` (a str or ``os.PathLike`` naming a str path) as an absolute path; else
    :class:`ParameterError` naming ``name``."""
    value = os.fspath(target) if isinstance(target, str | os.PathLike) else None
    if not isinstance(value, str) or not value or "\0" in value:
        raise ParameterError(f"{name}={target!r:.80} ({type(target).__name__}) is invalid: "
                             "must be a non-empty path (str or os.PathLike) without NUL")
    return Path(os.path.abspath(value))


#: Longest name (UTF-8 bytes) of a file a writer makes from a name it is given, leaving
#: room for suffixes and temporaries within the file systems' 255.
MAX_NAME_BYTES = 200


def is_plain_name(name: Any) -> bool:
    """Whether ``name`` is a plain file name: a non-empty str without a path separator or
    NUL, not ``.`` or ``..``, of at most :data:`MAX_NAME_BYTES` bytes."""
    if not isinstance(name, str) or name in ("", ".", ".."):
        return False
    seps = {"/", os.sep, os.altsep} - {None}
    if "\0" in name or any(sep in name for sep in seps):
        return False
    try:
        return len(name.encode()) <= MAX_NAME_BYTES
    except UnicodeEncodeError:  # (a lone surrogate)
        return False


#: What :func:`is_plain_name` allows, in words.
PLAIN_NAME = (f"a plain file name (a non-empty str without '/' or NUL, not '.' or '..', at "
              f"most {MAX_NAME_BYTES} bytes)")


def check_links(folder: Path, *, name: str, depth: int | None = None) -> None:
    """Refuse the result folder ``folder`` if an entry in it, down to ``depth`` levels
    (every level with None), is a symbolic link: writers and cleanups never follow one out
    of their folder. Nothing is followed while looking."""
    stack = [(Path(folder), 1)]
    while stack:
        here, level = stack.pop()
        with os.scandir(here) as entries:
            for e in entries:
                if e.is_symlink():
                    where = Path(e.path).relative_to(folder)
                    raise ParameterError(
                        f"{name}={str(folder)!r} is refused: {where} in it is a symbolic link "
                        f"(to {os.readlink(e.path)!r}); a result folder is written only "
                        "through its own folders, never through a link: replace the link "
                        "by what it points to, or choose another folder")
                if e.is_dir(follow_symlinks=False) and (depth is None or level < depth):
                    stack.append((Path(e.path), level + 1))


def write_marker(folder: Path, kind: str, *, parts: bool = False) -> None:
    """Mark ``folder`` as a result of ``kind`` (atomically: an existing marker, or a link
    in its place, is replaced, never written through). With ``parts`` (a writer finishing
    ``folder``), the results and stores found in it are recorded as its own parts: they were
    written into it while it was being written (:func:`check_target` refuses any later)."""
    marker: dict[str, Any] = {"kind": kind, "format": FORMAT}
    found = _results_inside(folder) if parts else []
    if found:
        marker["parts"] = found
    write_json(folder / MARKER, marker, atomic=True)


def _results_inside(folder: Path) -> list[str]:
    """The outermost result folders and stores inside ``folder`` (relative paths; links
    are not followed)."""
    found, stack = [], [folder]
    while stack:
        here = stack.pop()
        with os.scandir(here) as it:
            entries = list(it)
        if here != folder and any(e.name in _OUTPUT_FILES for e in entries) and \
                output_kind(here) is not None:
            found.append(here.relative_to(folder).as_posix())
            continue
        stack += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    return sorted(found)


def replace_folder(tmp: Path, target: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target``, replacing what is there: the old
    folder is first renamed aside to a temporary of role ``old`` made for it (with its owner
    record), put back if the second rename fails, and removed after (its record stays
    while anything of it is left, so that a later writer removes the rest once this
    process has ended). An old folder that is not an unchanged result (no marker, or
    :func:`changes` since; only ``force`` lets :func:`check_target` pass it) is renamed to
    ``<target>.replaced-<time>`` instead and kept, with a warning saying where."""
    if not os.path.lexists(target):
        os.replace(tmp, target)
        return
    kept = _kept(target)
    aside = _aside(target) if kept else temporary_sibling(target, "old")
    os.replace(target, aside)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(aside, target)
        if not kept:
            release_temporary(aside)
        raise
    if kept:
        warn(f"{target} was not a result as mfgwork wrote it; it is kept as {aside}, and "
             "the new result took its place")
    else:
        discard_temporary(aside)


def _kept(folder: Path) -> bool:
    """Whether the folder ``folder``, about to be replaced, must be kept aside: it is not
    empty, not a temporary still being written and not a result unchanged since it was
    written."""
    if not folder.is_dir() or folder.is_symlink() or not any(folder.iterdir()) or \
            in_progress(folder):   # (a run's temporary, replaced by its notebook's result)
        return False
    return marker_kind(folder) is None or changes(folder) is not None


def _aside(target: Path) -> Path:
    """A new name beside ``target`` for a folder kept aside: ``<name>.replaced-<time>``
    (then ``-2``, ``-3``, ... where taken)."""
    stem = f"{target.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
    aside, n = target.with_name(stem), 1
    while os.path.lexists(aside):
        n += 1
        aside = target.with_name(f"{stem}-{n}")
    return aside


class atomic_folder:  # noqa: N801 - used as a context manager
    """``with atomic_folder(target, kind) as tmp:`` fill ``tmp``; on success it gets the
    marker of ``kind`` and becomes ``target`` by one rename; on error nothing is left.

    The target is checked (:func:`check_target`) on entry, before any work, and again at
    the rename.
    """

    def __init__(self, target: str | os.PathLike, kind: str, *, name: str = "out_dir",
                 force: bool = False, protect: Mapping[str | os.PathLike, str] | None = None
                 ) -> None:
        self.args = {"kind": kind, "name": name, "force": force, "protect": protect}
        self.target = check_target(target, **self.args)
        self.kind = kind

    def __enter__(self) -> Path:
        remove_stale(self.target)
        self.tmp = temporary_sibling(self.target, "tmp")
        os.chmod(self.tmp, 0o755)  # made private; a result folder is not
        return self.tmp

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                write_marker(self.tmp, self.kind, parts=True)
                check_target(self.target, **self.args)
                replace_folder(self.tmp, self.target)
        finally:
            discard_temporary(self.tmp)  # (nothing there after the rename: the record goes)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_path(path) as tmp:`` write the file ``tmp`` (a temporary sibling with its
    owner record), renamed to ``path`` on success (world-readable, like an ordinary file; a
    link at ``path`` is replaced, never written through); removed on error."""
    target = Path(os.path.abspath(os.fspath(path)))
    remove_stale(target)
    tmp = temporary_sibling(target, "tmp", directory=False)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        discard_temporary(tmp)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[Any]:
    """``with atomic_file(path) as fh:`` write to a temporary sibling, renamed to ``path``
    on success (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp, \
            open(tmp, mode, **({} if "b" in mode else {"newline": ""})) as fh:
        yield fh


# -- writing ---------------------------------------------------------------------------------
def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "as_dict"):
        return o.as_dict()
    return repr(o)


def dumps(obj: Any) -> str:
    """Indented, sorted JSON (NaN refused; NumPy scalars and arrays as numbers and lists)."""
    return json.dumps(obj, indent=2, sort_keys=True, default=_json_default,
                      allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any, *, atomic: bool = False) -> None:
    """``obj`` as JSON at ``path`` (through a temporary sibling with ``atomic=True``)."""
    text = dumps(obj)
    if atomic:
        with atomic_file(path) as fh:
            fh.write(text)
    else:
        Path(path).write_text(text)


def write_csv(path: str | os.PathLike, rows: list[dict[str, Any]],
              fields: list[str] | None = None) -> None:
    """Rows (dicts of scalars) as CSV; the header is ``fields`` or the union of keys in
    first-seen order; None is written as an empty cell."""
    fields = fields or list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)


def write_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Compressed NPZ of NumPy arrays (no object arrays, so it loads without pickle)."""
    np.savez_compressed(path, **{k: np.asarray(v) for k, v in arrays.items()})


def provenance() -> dict[str, Any]:
    """Versions of Python and of :data:`PACKAGES` (None where not installed), and the host."""
    return {"versions": {"python": sys.version.split()[0]} | dict(_installed()),
            "platform": platform.platform(), "machine": platform.machine()}


@functools.cache
def _installed() -> tuple[tuple[str, str | None], ...]:
    """(package, installed version) of :data:`PACKAGES`, read once a process (reading the
    metadata of fourteen packages took 15–24 ms, each time a scan made its attributes)."""
    versions = []
    for pkg in PACKAGES:
        try:
            versions.append((pkg, metadata.version(pkg)))
        except metadata.PackageNotFoundError:
            versions.append((pkg, None))
    return tuple(versions)


# -- reading ---------------------------------------------------------------------------------
def _open_regular(path: Path, max_bytes: int, *, follow: bool = True) -> int:
    """A descriptor of the regular file ``path`` of at most ``max_bytes`` bytes, opened
    without blocking (a FIFO, a device or a folder is refused, not waited on); with
    ``follow=False`` a link is refused. Else :class:`LoadError` naming the file."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise LoadError(path, "does not exist") from None
    except PermissionError:
        raise LoadError(path, "cannot be read (permission denied)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise LoadError(path, "is a symbolic link, which is not followed here") from None
        raise LoadError(path, f"cannot be opened ({exc.strerror or exc})") from None
    try:
        mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
        if stat.S_ISDIR(mode):
            raise LoadError(path, "is a folder, not a file")
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode)
                    or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
                    "not a regular file")
            raise LoadError(path, f"is not a regular file ({kind}): refused")
        if size > max_bytes:
            raise LoadError(path, f"is {size} bytes, more than the {max_bytes} allowed")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike, max_bytes: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (see
    :func:`_open_regular`); a file that holds more than its size says (``/proc`` files, a
    file growing while read) is refused."""
    path = Path(path)
    fd = _open_regular(path, max_bytes, follow=follow)
    try:
        size, parts, got = os.fstat(fd).st_size, [], 0
        while got <= size:
            part = os.read(fd, size + 1 - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    except OSError as exc:
        raise LoadError(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if got > size:
        raise LoadError(path, f"holds more than the {size} bytes its size says (a special "
                        "file, or one growing while read): refused")
    return b"".join(parts)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: str | os.PathLike, *, keys: Mapping[str, type | tuple[type, ...]] = {},
              max_bytes: int | None = None, follow: bool = True) -> Any:
    """The JSON value in the regular file ``path`` (at most ``max_bytes``, default
    :data:`MAX_JSON_BYTES`; through a link only with ``follow``); with ``keys``, it must be
    an object holding each key with a value of the given type(s). NaN and Infinity (not
    JSON), nesting deeper than Python can parse and integers of more digits than Python
    converts are refused as invalid."""
    path = Path(path)
    data = read_bytes(path, MAX_JSON_BYTES if max_bytes is None else max_bytes, follow=follow)
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        raise LoadError(path, "is not valid JSON here (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:  # (JSONDecodeError, int digits, NaN)
        raise LoadError(path, f"is not valid JSON ({str(exc)[:200]})") from None
    if keys:
        if not isinstance(value, dict):
            raise LoadError(path, f"must hold a JSON object, not {type(value).__name__}")
        for key, types in keys.items():
            if key not in value:
                raise LoadError(path, f"has no {key!r} entry")
            if not _is_instance(value[key], types):
                raise LoadError(path, f"has {key}={value[key]!r:.60}: must be "
                                f"{_type_names(types)}")
    return value


def _is_instance(value: Any, types: type | tuple[type, ...]) -> bool:
    """isinstance, except that a bool is not an int or a float here."""
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _type_names(types: type | tuple[type, ...]) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in types)


def load_table(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A table written by ``save_run`` (``<name>.json``: a list of flat rows)."""
    rows = read_json(path)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise LoadError(Path(path), "must hold a list of rows (JSON objects)")
    return rows


def _npz_headers(path: Path, fh: Any, max_bytes: int
                 ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of each array of the open NPZ file ``fh``, from the headers only; the
    sum of their sizes must stay below ``max_bytes`` (a small file may decompress to
    gigabytes)."""
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    total = 0
    try:
        with zipfile.ZipFile(fh) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise LoadError(path, f"holds {info.filename!r}, which is not an array")
                if info.filename[:-4] in out:
                    raise LoadError(path, f"holds two arrays named {info.filename[:-4]!r}: "
                                    "refused (which one is meant is not known)")
                total += info.file_size
                if total > max_bytes:
                    raise LoadError(path, f"decompresses to more than {max_bytes} bytes "
                                    f"(at {info.filename!r}); refused before reading (pass "
                                    "max_bytes= to read a larger file)")
                with zf.open(info) as fh:
                    read_header = (np.lib.format.read_array_header_1_0
                                   if np.lib.format.read_magic(fh) == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(fh)
                if dtype.hasobject:
                    raise LoadError(path, f"array {info.filename[:-4]!r} holds Python "
                                    "objects, which are not loaded (no pickle)")
                if np.prod(shape, dtype=np.float64) * dtype.itemsize > info.file_size:
                    raise LoadError(path, f"array {info.filename[:-4]!r} is truncated")
                out[info.filename[:-4]] = (tuple(shape), dtype)
    except LoadError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise LoadError(path, f"is not a readable NPZ file ({type(exc).__name__}: {exc})"
                        ) from None
    return out


def read_npz(path: str | os.PathLike, shapes: Mapping[str, tuple[str | int, ...]],
             optional: Iterable[str] = (), *, others: tuple[str | int, ...] | None = None,
             max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of an NPZ file, checked before they are read: each name of ``shapes``
    (except those in ``optional``) is present, real-valued (or boolean: masks), with the
    given shape, where a str entry is a dimension name that must agree across arrays (e.g.
    ``{"x": ("nx",), "M": ("nt+1", "nx")}``). Arrays not named must have the shape
    ``others`` (refused when it is None). Floating arrays must be finite."""
    path = Path(path)
    max_bytes = MAX_NPZ_BYTES if max_bytes is None else max_bytes
    max_bytes = min(max_bytes, memory.host_available() or max_bytes)
    with os.fdopen(_open_regular(path, max_bytes), "rb") as fh:
        headers = _npz_headers(path, fh, max_bytes)
        _check_shapes(path, headers, shapes, optional, others)
        fh.seek(0)
        try:
            with np.load(fh, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise LoadError(path, f"could not be read ({type(exc).__name__}: {exc})"
                            ) from None
    for key, a in arrays.items():
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
            raise LoadError(path, f"array {key!r} holds NaN or inf")
    return arrays


def _check_shapes(path: Path, headers: Mapping[str, tuple[tuple[int, ...], np.dtype]],
                  shapes: Mapping[str, tuple[str | int, ...]], optional: Iterable[str],
                  others: tuple[str | int, ...] | None) -> None:
    dims: dict[str, int] = {}
    if others is not None:
        shapes = dict(shapes) | {k: others for k in headers if k not in shapes}
    for key, spec in shapes.items():
        if key not in headers:
            if key in optional:
                continue
            raise LoadError(path, f"has no array {key!r} (it has {', '.join(headers) or 'none'})")
        shape, dtype = headers[key]
        if dtype.kind not in "fiub":
            raise LoadError(path, f"array {key!r} has dtype {dtype}: must be real numbers or "
                            "booleans")
        if len(shape) != len(spec):
            raise LoadError(path, f"array {key!r} has shape {shape}: must have {len(spec)} "
                            f"dimension(s) {spec}")
        for size, want in zip(shape, spec, strict=True):
            want = dims.setdefault(want, size) if isinstance(want, str) else want
            if size != want:
                raise LoadError(path, f"array {key!r} has shape {shape}, which does not agree "
                                f"with the other arrays ({_dims(spec, dims)})")
    extra = sorted(set(headers) - set(shapes))
    if extra:
        raise LoadError(path, f"holds unexpected arrays {extra}")


def _dims(spec: tuple[str | int, ...], dims: Mapping[str, int]) -> str:
    return "expected (" + ", ".join(f"{d}={dims.get(d, '?')}" if isinstance(d, str) else str(d)
                                    for d in spec) + ")"
