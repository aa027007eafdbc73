"""``torch.compile`` where the installed torch supports the device, checked, with a fallback.

:func:`compile_support` says whether TorchInductor can generate code for a backend's device
with this installation (CUDA: Triton importable; MPS: Inductor's Metal code generator
present; CPU: a C++ compiler on the PATH). :class:`CheckedCompile` wraps a function: its first
call runs both the compiled and the eager function and keeps the compiled one only if it ran
and agrees with the eager result to a few hundred ulps; otherwise it warns once and stays
eager. The eager function is always correct, so nothing is lost but speed.

Compiled kernels persist between processes: Triton's in its cache folder
(:func:`triton_cache_dir`: ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``, else
``~/.triton/cache``), Numba's in ``__pycache__`` beside the package's modules (or
``NUMBA_CACHE_DIR``); the compiled CPU scheme of each model structure in a module written
into :func:`model_cache_dir`, with Numba's cache beside it, and Triton's key of its own
installation (:mod:`.triton_key`). ``python -m mfgwork doctor`` shows them;
``python -m mfgwork doctor --clear-cache`` empties Triton's. :func:`announce_compilation`
says in the progress output when a kernel is compiled rather than loaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .backend import Backend
from .compile_clock import compile_clock
from .errors import ParameterError, warn

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_compile_steps(value: object) -> bool | str:
    """``compile_steps`` if it is True, False, "auto" or a ``torch.compile`` mode name."""
    if value is True or value is False or (isinstance(value, str) and (
            value == "auto" or value in COMPILE_MODES)):
        return value  # type: ignore[return-value]
    raise ParameterError(f"compile_steps={value!r} is invalid: must be True, False, 'auto' or "
                         f"a torch.compile mode ({', '.join(map(repr, COMPILE_MODES))})")


def compile_support(backend: Backend) -> tuple[bool, str]:
    """(whether ``torch.compile`` can generate code for ``backend``'s device here, why)."""
    if backend.name != "torch":
        return False, f"backend={backend.name!r} is not torch"
    if backend.kind == "cuda":
        if importlib.util.find_spec("triton") is None:
            return False, "Inductor needs Triton on CUDA, and Triton is not installed"
        return True, "CUDA with Triton"
    if backend.kind == "mps":
        if importlib.util.find_spec("torch._inductor.codegen.mps") is None:
            return False, "this torch has no Inductor code generator for MPS (Metal)"
        return True, "MPS with Inductor's Metal code generator"
    if shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"):
        return True, "CPU with a C++ compiler"
    return False, "Inductor needs a C++ compiler on the CPU, and none is on the PATH"


def wants_compile(setting: bool | str, backend: Backend) -> tuple[str | None, str]:
    """The ``torch.compile`` mode to use for ``setting`` on ``backend`` (None: run eagerly),
    and why. ``"auto"``: compile on CUDA and MPS where supported (not on the CPU, nor under
    MPS emulation, where a compilation costs more than it saves); True or a mode name
    ("default", "reduce-overhead", "max-autotune"): compile wherever supported."""
    if check_compile_steps(setting) is False:
        return None, "compile_steps=False"
    supported, why = compile_support(backend)
    if setting == "auto" and not (backend.kind in ("cuda", "mps") and not backend.emulate_mps):
        return None, "compile_steps='auto' compiles on CUDA and MPS only"
    if not supported:
        return None, why
    return ("default" if setting in (True, "auto") else str(setting)), why


class CheckedCompile:
    """``fn`` under ``torch.compile(mode=mode)``, checked against eager ``fn`` at the first
    call (relative difference at most ``rtol`` of the largest output value).

    ``torch.compile`` is called at that first call, not here: it imports TorchDynamo (seconds
    in a fresh process), which a solve whose steps run in other kernels never needs."""

    def __init__(self, fn: Callable[..., Any], mode: str, what: str, rtol: float) -> None:
        self.fn, self.mode, self.what, self.rtol = fn, mode, what, rtol
        self.compiled: Callable[..., Any] | None = None
        self.active: bool | None = None   # None until the first call has checked it
        self.reason = "not called yet"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.active:
            return self.compiled(*args, **kwargs)  # type: ignore[misc]
        if self.active is False:
            return self.fn(*args, **kwargs)
        eager = self.fn(*args, **kwargs)
        expected = [a.clone() for a in _flat(eager)]   # fn may write into a buffer it is given
        try:
            import torch

            self.compiled = torch.compile(self.fn, mode=self.mode, dynamic=False)
            out = self.compiled(*args, **kwargs)
            worst = max(_relative_difference(a, b) for a, b in zip(_flat(out), expected,
                                                                     strict=True))
            self.active = worst <= self.rtol
            self.reason = (f"compiled (first call within {worst:.1e} of eager)" if self.active
                           else f"its result differs from eager by {worst:.1e} > {self.rtol:.0e}")
        except Exception as exc:  # the eager function is always correct; fall back to it
            self.active, self.reason = False, f"{type(exc).__name__}: {exc}"
        if not self.active:
            warn(f"torch.compile of the {self.what} disabled ({self.reason}); "
                 "running eagerly", RuntimeWarning)
        return eager


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _relative_difference(a: Any, b: Any) -> float:
    import torch

    scale = torch.clamp(b.abs().max(), min=torch.finfo(b.dtype).tiny)
    return float(((a - b).abs().max() / scale).item())


_ANNOUNCED: set[str] = set()
#: The name of a Triton cache entry: a SHA-256 in base32 (Triton 3), or a hex digest (older)
_CACHE_ENTRY = re.compile(r"^(?:[A-Z2-7]{52}|[0-9a-f]{32}|[0-9a-f]{64})$")
#: The files Triton writes into an entry: a kernel's stages, metadata and groups, and the
#: driver's compiled helpers
_ARTEFACT = re.compile(r"\.(?:json|cubin|ptx|ttir|ttgir|llir|amdgcn|hsaco|so|c|source)$")
#: A write of Triton's still in progress, or cut short, inside an entry
_PUTTING = re.compile(r"^tmp\.pid_\w+$")


def triton_cache_dir() -> Path:
    """Where Triton keeps compiled kernels (its own rule: ``TRITON_CACHE_DIR``, else
    ``$TRITON_HOME/.triton/cache``, with ``TRITON_HOME`` defaulting to the home folder)."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    return Path(os.environ.get("TRITON_HOME") or Path.home()) / ".triton" / "cache"


def numba_cache_dir() -> str:
    """Where Numba keeps the compiled NumPy-backend loops."""
    return os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside the mfgwork modules"


#: The environment variable naming the folder of the generated model modules.
ENV_MODEL_CACHE = "MFGWORK_MODEL_CACHE"


def model_cache_dir() -> Path:
    """Where the generated module of each model structure (and Numba's cache of it) is kept:
    ``MFGWORK_MODEL_CACHE``, else ``$XDG_CACHE_HOME/mfgwork/models``, else
    ``~/.cache/mfgwork/models``."""
    if os.environ.get(ENV_MODEL_CACHE):
        return Path(os.environ[ENV_MODEL_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mfgwork" / "models"


def _entries(folder: Path, *, strict: bool = False) -> list[Path]:
    """The cache entries of a Triton cache folder: folders named by a digest, and with
    ``strict`` (what is counted or removed) only those holding Triton's files alone
    (:func:`_is_entry`); lookups take the names alone (no walk inside each entry)."""
    if not folder.is_dir():
        return []
    return [p for p in folder.iterdir()
            if (_is_entry(p) if strict else
                p.is_dir() and not p.is_symlink() and _CACHE_ENTRY.match(p.name))]


def _is_entry(path: Path) -> bool:
    """Whether ``path`` is a Triton cache entry: a folder (not a link) named as Triton names
    them (:data:`_CACHE_ENTRY`) holding at least one of its files (:data:`_ARTEFACT`), and
    only those and its temporary folders of the same (a user's folder fails one of these)."""
    if path.is_symlink() or not path.is_dir() or not _CACHE_ENTRY.match(path.name):
        return False
    found = False
    for child in path.iterdir():
        if child.is_symlink():
            return False
        if child.is_dir():
            if not _PUTTING.match(child.name) or any(
                    c.is_symlink() or not c.is_file() or not _ARTEFACT.search(c.name)
                    for c in child.iterdir()):
                return False
        elif child.is_file() and _ARTEFACT.search(child.name):
            found = True
        else:
            return False
    return found


def cached_kernels(names: Iterable[str]) -> set[str]:
    """The Triton kernels among ``names`` (function names) with a compiled entry in the
    cache (for some argument types)."""
    wanted = set(names)
    return {name for entry in _entries(triton_cache_dir()) for name in wanted
            if (entry / f"{name}.json").exists()}


def triton_cache_summary() -> dict[str, Any]:
    """The Triton cache folder, its number of entries and their size in bytes."""
    folder = triton_cache_dir()
    entries = _entries(folder, strict=True)
    size = sum(f.stat().st_size for e in entries for f in e.iterdir() if f.is_file())
    return {"path": str(folder), "entries": len(entries), "bytes": size}


def clear_triton_cache() -> int:
    """Remove the compiled entries of Triton's cache folder (folders named by a digest that
    hold Triton's files alone, :func:`_is_entry`, so a mistaken ``TRITON_CACHE_DIR`` loses
    nothing else); returns how many were removed."""
    entries = _entries(triton_cache_dir(), strict=True)
    for entry in entries:
        shutil.rmtree(entry)
    return len(entries)


def announce_compilation(names: Iterable[str], device: str = "CUDA") -> bool:
    """Say in the progress output (stderr, above any progress bar) that the kernels ``names``
    are being compiled because the cache holds no build of one of them; once per process
    (True when it said so)."""
    compile_clock()   # (Triton is imported by now: its builds are timed from here)
    names = [n for n in names if n not in _ANNOUNCED]
    if not names or "" in _ANNOUNCED:
        return False
    _ANNOUNCED.update(names)
    if cached_kernels(names) == set(names):
        return False
    _ANNOUNCED.add("")   # said once: later compilations in this process stay quiet
    message = (f"mfgwork: compiling the {device} kernels (first use; cached in "
               f"{triton_cache_dir()})")
    try:
        from tqdm.std import tqdm

        tqdm.write(message, file=sys.stderr)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        print(message, file=sys.stderr)
    return True
