"""Triton's installation key, remembered across processes.

Before it loads even a cached kernel, Triton computes once per process a key of its own
installation (``triton_key``: SHA-256 of its compiler, backend and language modules and of
``libtriton``, about 500 MB read, 0.4 s on an H200 host), part of every kernel's cache key.
:func:`remember_key` keeps that key in :func:`~.compiling.model_cache_dir` beside the version,
the folder and the size and modification time of every file and folder the key reads; a later
process whose installation still matches all of them gets the stored key without reading the
files. Any difference (an upgrade, a reinstall, an edited module, a file added) computes it
afresh, Triton's own way. :mod:`.triton_setup` imports Triton and calls it for the package's
kernels (this module imports no Triton: it is given the module).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .compiling import model_cache_dir
from .storage import LoadError, atomic_file, read_bytes

#: The file, in the model cache folder, holding the remembered key.
KEY_FILE = "triton-key.json"
#: The folders of the Triton package whose files the key reads (with ``_C``: ``libtriton``).
KEY_FOLDERS = ("compiler", "backends", "language", "_C")
_MAX_BYTES = 1 << 22


def installation(root: Path, key_module: Path) -> list[list[Any]]:
    """(path relative to ``root``, size, modification time in ns) of each file and folder
    under :data:`KEY_FOLDERS` of the Triton package at ``root``, and of ``key_module`` (the
    module that computes the key)."""
    entries = []
    for name in KEY_FOLDERS:
        for folder, dirs, files in os.walk(root / name):
            dirs.sort()
            for path in [folder, *(os.path.join(folder, f) for f in sorted(files))]:
                info = os.stat(path)
                entries.append([os.path.relpath(path, root), info.st_size, info.st_mtime_ns])
    info = os.stat(key_module)
    entries.append([os.path.relpath(key_module, root), info.st_size, info.st_mtime_ns])
    return entries


def stored_key(file: Path, signature: dict[str, Any]) -> str | None:
    """The key stored in ``file`` under ``signature``, or None (no file, another signature,
    anything unreadable)."""
    try:
        record = json.loads(read_bytes(file, _MAX_BYTES))
    except (LoadError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("signature") != signature:
        return None
    key = record.get("key")
    return key if isinstance(key, str) else None


def remember_key(module: Any, folder: Path | None = None) -> bool:
    """Make the Triton ``module`` take its installation key from ``folder`` (default
    :func:`~.compiling.model_cache_dir`) where the installation is unchanged, else compute it
    Triton's way and store it there, when the key is first asked for; False where this Triton
    computes its key otherwise (nothing is changed then)."""
    original = _key_function(module)
    if original is None:
        return False
    known: list[str] = []

    def triton_key() -> str:
        if not known:
            known.append(_key(module, original, folder or model_cache_dir()))
        return known[0]

    for name, loaded in list(sys.modules.items()):
        if (name.split(".")[0] == module.__name__
                and getattr(loaded, "triton_key", None) is original):
            loaded.triton_key = triton_key
    return True


def _key(module: Any, original: Callable[[], str], folder: Path) -> str:
    """The stored key of ``module``'s installation, else ``original()`` (then stored)."""
    root = Path(module.__file__).resolve().parent
    key_module = Path(sys.modules[original.__module__].__file__).resolve()
    signature = {"version": module.__version__, "root": str(root),
                 "files": installation(root, key_module)}
    file = folder / KEY_FILE
    key = stored_key(file, signature)
    if key is None:
        key = original()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with atomic_file(file) as fh:
                json.dump({"signature": signature, "key": key}, fh)
        except (OSError, ValueError):
            pass   # (an unwritable cache only costs the next process the reading)
    return key


def _key_function(module: Any) -> Callable[[], str] | None:
    """Triton's own cached ``triton_key`` (``functools.lru_cache`` in ``runtime.cache``, as in
    Triton 3.6 to 3.8), or None."""
    function = getattr(sys.modules.get(f"{module.__name__}.runtime.cache"), "triton_key", None)
    return function if hasattr(function, "cache_info") else None
