"""Temporaries of the writers, and the proof that one may be removed.

A writer fills a temporary beside its target, ``.<target>.<role>-<pid>-<token>[suffix]``
(role: tmp, old, running, kernel or failed; token: 16 random hex digits), and renames it at
the end. Before it creates the temporary it writes an owner record beside it,
``<temporary name>.mfgwork-owner``: a small JSON object with the temporary's name, the token,
the process id, the host and the process's start (boot id and start tick on Linux, else the
start time psutil reads; None where neither is known).

A temporary is removed (:func:`remove_stale`) only if its record proves it: the record is a
regular file that names this temporary, its token and its process id, written on this host,
and that process has ended (no process has the id, or the one that has it started at
another time: the id was reused). A kept temporary (role ``failed``) of this process may
also go. A name alone proves nothing: ``.results.old-2023-backup`` or a temporary whose
record is missing, unreadable or names something else is left alone, and never blocks a
writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

#: The roles of temporaries; ``failed`` ones are kept for the user until the next write.
ROLES = ("tmp", "old", "running", "kernel", "failed")
#: Ends the name of a temporary's owner record.
RECORD = ".mfgwork-owner"
#: Largest owner record read (bytes).
MAX_RECORD_BYTES = 4096
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<role>" + "|".join(ROLES) +
                        r")-(?P<pid>\d+)-(?P<token>[a-z0-9_]+)(\.[a-z]+)?")


# -- the process -----------------------------------------------------------------------------
def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as a string equal for the same process and different
    for a later one with the same id; None if unknown (no ``/proc`` and no psutil)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
        return f"{boot}:{stat.rsplit(')', 1)[1].split()[19]}"  # field 22: start time, ticks
    except (OSError, IndexError):
        pass
    try:
        import psutil

        return f"psutil:{psutil.Process(pid).create_time():.6f}"
    except Exception:  # noqa: BLE001 - psutil missing, or no such process
        return None


def _this_process() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": process_start(os.getpid())}


def has_ended(pid: int, started: str | None) -> bool:
    """Whether process ``pid``, which started at ``started`` (:func:`process_start`), has
    provably ended: no process has that id, or the one that has it started at another
    time. This process, and a process of unknown start, have not."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OverflowError:  # (not a process id of this system)
        return True
    except PermissionError:  # (a process of another user)
        pass
    now = process_start(pid)
    return started is not None and now is not None and now != started


# -- names and records -----------------------------------------------------------------------
def temporary_owner(name: str) -> tuple[str, list[int]] | None:
    """The target name and the process ids of a temporary's (or its record's) file name, or
    None if it is not one. A temporary of a temporary (``..NAME.tmp-1-ab.tmp-2-cd``: a
    notebook's ``save_run`` into its run's temporary folder) belongs to NAME, with both
    ids (the outer one first)."""
    name = name.removesuffix(RECORD)
    pids: list[int] = []
    while m := _TEMPORARY.fullmatch(name):
        pids.append(int(m["pid"]))
        name = m["name"]
    return (name, pids) if pids else None


def record_path(tmp: Path) -> Path:
    """The owner record of the temporary ``tmp``."""
    return tmp.with_name(tmp.name + RECORD)


def _write_record(tmp: Path, token: str) -> None:
    data = json.dumps({"temporary": tmp.name, "token": token, **_this_process()})
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(record_path(tmp), flags, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(data)


def _read_small_json(path: Path) -> Any:
    """The JSON value of the regular file ``path`` (not a link, opened without blocking, at
    most :data:`MAX_RECORD_BYTES`), or None."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            return None
        try:
            return json.loads(fh.read(MAX_RECORD_BYTES + 1))
        except (ValueError, RecursionError):
            return None


def _record(tmp: Path) -> dict[str, Any] | None:
    """The owner record of ``tmp`` if it is one that this code wrote for it (a regular
    file, not a link, naming ``tmp``, the token and the process id of its name), else None."""
    m = _TEMPORARY.fullmatch(tmp.name)
    record = _read_small_json(record_path(tmp))
    if m is None or not isinstance(record, dict):
        return None
    wanted = {"temporary": tmp.name, "token": m["token"], "pid": int(m["pid"])}
    if any(record.get(k) != v or isinstance(record.get(k), bool) for k, v in wanted.items()):
        return None
    return record


def in_progress(tmp: Path) -> bool:
    """Whether ``tmp`` is a temporary that a writer still fills: its owner record is valid
    and its process, on this host, has not ended."""
    record = _record(tmp)
    if record is None or record.get("host") != socket.gethostname():
        return False
    started = record.get("started")
    return not has_ended(record["pid"], started if isinstance(started, str) else None)


def removable(tmp: Path) -> bool:
    """Whether a writer may remove the temporary ``tmp`` (see the module docstring)."""
    record = _record(tmp)
    if record is None or record.get("host") != socket.gethostname():
        return False
    started = record.get("started")
    started = started if isinstance(started, str) else None
    kept_by_me = record["pid"] == os.getpid() and started == process_start(os.getpid()) \
        and _TEMPORARY.fullmatch(tmp.name)["role"] == "failed"
    return kept_by_me or has_ended(record["pid"], started)


# -- making and removing ---------------------------------------------------------------------
def temporary_sibling(target: Path, role: str, *, directory: bool = True,
                      suffix: str = "") -> Path:
    """A new temporary folder (or empty file) beside ``target`` with its owner record
    (written first: a temporary never exists without one). ``role``: one of :data:`ROLES`."""
    if role not in ROLES:
        raise ValueError(f"role={role!r} is not one of {ROLES}")
    target.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    tmp = target.parent / f".{target.name}.{role}-{os.getpid()}-{token}{suffix}"
    _write_record(tmp, token)
    try:
        if directory:
            os.mkdir(tmp, 0o700)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            os.close(os.open(tmp, flags, 0o600))
    except BaseException:
        record_path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def release_temporary(tmp: Path) -> None:
    """Drop the owner record of ``tmp``, which was renamed to its target or removed."""
    record_path(tmp).unlink(missing_ok=True)


def discard_temporary(tmp: Path) -> None:
    """Remove the temporary ``tmp`` that this process made, then its owner record."""
    remove_path(tmp)
    if not os.path.lexists(tmp):
        release_temporary(tmp)


def remove_path(p: Path) -> None:
    """Remove a file, a link (itself) or a folder tree (``shutil.rmtree`` does not follow
    the links inside it)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def remove_stale(target: Path) -> list[Path]:
    """Remove the temporaries of earlier writes to ``target`` (nested ones included) that
    their owner records prove removable (:func:`removable`), and records left without their
    temporary; links among them are removed, never followed. Returns the temporaries."""
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        names = {p.name.removesuffix(RECORD) for p in target.parent.iterdir()}
        for name in sorted(names):
            owner = temporary_owner(name)
            tmp = target.parent / name
            if owner is None or owner[0] != target.name or not removable(tmp):
                continue
            if os.path.lexists(tmp):
                remove_path(tmp)
                removed.append(tmp)
            if not os.path.lexists(tmp):
                release_temporary(tmp)
    return removed
