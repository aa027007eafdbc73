"""``python -m mfgwork doctor``: versions, backends and devices, and a per-kernel self-check.

Every kernel the package has is run on every usable backend/device and compared with the
NumPy float64 reference: the table reports the max abs difference, the tolerance for the
dtype, the time of the first call (compilation included) and of a second one. A warning a
check raises is reported in its row. Other modules add their kernels with
:func:`register_check`.

The backends are grouped by device: the CPU ("numpy" and torch on "cpu") and each
accelerator ("cuda", "mps"). With an accelerator present, the CPU group runs in a child
process (a new Python program: the caller's script is not run again; the backends are
rebuilt there from name, device and dtype) while this process runs the accelerator groups,
so the first-call compilations of Numba and Triton overlap; the "first" column then
includes their contention, which the report says. With the CPU group alone, all runs here.
A child that dies, raises or overruns :data:`CHILD_TIMEOUT_S` gives failed rows.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..core.backend import Backend, available_backends, device_info, get_backend, to_numpy
from ..core.compiling import clear_triton_cache, numba_cache_dir, triton_cache_summary
from ..core.errors import ParameterError
from ..core.storage import provenance

Check = Callable[[Backend], tuple[Any, np.ndarray]]
CHECKS: dict[str, Check] = {}
APPLIES: dict[str, Callable[[Backend], bool]] = {}

TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


def register_check(name: str, applies: Callable[[Backend], bool] | None = None
                   ) -> Callable[[Check], Check]:
    """Register ``fn(backend) -> (value on backend, NumPy float64 reference)``, run on the
    backends where ``applies(backend)`` (default: all).

    The difference is measured relative to max(1, max |reference|).
    """
    def wrap(fn: Check) -> Check:
        CHECKS[name] = fn
        if applies is not None:
            APPLIES[name] = applies
        return fn
    return wrap


def _rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


@register_check("elementwise")
def _check_elementwise(be: Backend) -> tuple[Any, np.ndarray]:
    a = _rng().standard_normal(10_000)
    xp = be.xp
    x = be.asarray(a)
    return xp.exp(-(x**2)) * xp.sin(x) + xp.clip(x, 0.0, None), \
        np.exp(-(a**2)) * np.sin(a) + np.clip(a, 0.0, None)


@register_check("conversion")
def _check_conversion(be: Backend) -> tuple[Any, np.ndarray]:
    a = _rng().standard_normal((64, 33))
    return be.asarray(to_numpy(be.asarray(a))), a


@register_check("tridiagonal")
def _check_tridiagonal(be: Backend) -> tuple[Any, np.ndarray]:
    from scipy.linalg import solve_banded

    from ..numerics.fdm.kernels import tridiagonal_solver

    rng = _rng()
    n = 201
    lower, upper = -rng.uniform(0, 1, (2, n))
    diag = 1.0 + np.abs(lower) + np.abs(upper)
    rhs = rng.standard_normal(n)
    ab = np.vstack([np.r_[0.0, upper[:-1]], diag, np.r_[lower[1:], 0.0]])
    ref = solve_banded((1, 1), ab, rhs)
    solve = tridiagonal_solver(be)
    return solve(*(be.asarray(v) for v in (lower, diag, upper, rhs))), ref


@register_check("fdm santa fe 52x52")
def _check_fdm(be: Backend) -> tuple[Any, np.ndarray]:
    from ..problems import SantaFeBar
    from ..solve import solve

    kw = {"nx": 52, "nt": 52, "max_iter": 300, "progress": False}
    # float32: its residual floor (a smaller tol would be raised to it, with a warning)
    res = solve(SantaFeBar(), backend=be, tol=1e-8 if be.dtype == "float64" else 3e-4, **kw)
    # the reference second: where the CPU checks run side by side, their process has often
    # compiled (and cached) the same Numba kernels by then
    ref = solve(SantaFeBar(), tol=1e-8, **kw)
    return res.M, ref.M


def _fused_fdm_applies(be: Backend) -> bool:
    from ..numerics.fdm.kernels import TRITON, fdm_kernels

    return be.name == "torch" and fdm_kernels(be) is TRITON


@register_check("fused fdm sweeps", applies=_fused_fdm_applies)
def _check_fused_fdm(be: Backend) -> tuple[Any, np.ndarray]:
    """HJB then FP sweeps of 4 problems (own ν, running cost, terminal cost) at 101 × 50."""
    from ..core.grid import Grid
    from ..numerics.fdm import numba_kernels
    from ..numerics.fdm.sweeps import MAX_NEWTON, FiniteDifferences

    rng = _rng()
    grid = Grid(-2.0, 2.0, 101, 1.0, 50)
    nu = rng.uniform(0.05, 0.5, 4)
    F = 2 * rng.standard_normal((4, grid.nt, grid.nx))
    U_T = np.cos(2 * grid.x) * rng.uniform(0.5, 2.0, (4, 1))
    m0 = np.exp(-grid.x**2) / np.dot(grid.weights, np.exp(-grid.x**2))
    fd = FiniteDifferences(grid, nu[:, None], be)
    U = fd.solve_hjb(be.asarray(U_T), be.asarray(F))
    M = fd.solve_fp(U, be.asarray(np.broadcast_to(m0, (4, grid.nx))))
    fd.check_newton()
    inv_hw, inv_w = 1.0 / (grid.h * grid.weights), 1.0 / grid.weights
    U_ref = np.empty((4, grid.nt + 1, grid.nx))
    mu_ref = np.empty_like(U_ref)
    for b in range(4):
        U_ref[b, -1] = U_T[b]
        numba_kernels.hjb_sweep(U_ref[b], F[b], U_ref[b], False, nu[b], grid.h, grid.dt,
                                inv_hw, inv_w, 64 * np.finfo(float).eps, MAX_NEWTON)
        mu_ref[b, 0] = m0 * grid.weights
        numba_kernels.fp_sweep(U_ref[b], mu_ref[b], nu[b], grid.h, grid.dt, inv_hw)
    return be.xp.concat([U, M]), np.concatenate([U_ref, mu_ref * inv_w])


@register_check("particle deposit")
def _check_particle_deposit(be: Backend) -> tuple[Any, np.ndarray]:
    from ..numerics.particles.self_checks import deposit_check

    return deposit_check(be)


@register_check("particle step")
def _check_particle_step(be: Backend) -> tuple[Any, np.ndarray]:
    from ..numerics.particles.self_checks import step_check

    return step_check(be)


def _fused_applies(be: Backend) -> bool:
    from ..numerics.particles.triton_kernels import fused_available

    return fused_available(be)


@register_check("fused particle deposit", applies=_fused_applies)
def _check_fused_deposit(be: Backend) -> tuple[Any, np.ndarray]:
    from ..numerics.particles.self_checks import fused_deposit_check

    return fused_deposit_check(be)


@register_check("fused particle step", applies=_fused_applies)
def _check_fused_step(be: Backend) -> tuple[Any, np.ndarray]:
    from ..numerics.particles.self_checks import fused_step_check

    return fused_step_check(be)


#: Seconds the parent waits for the child process running the CPU checks (the CPU group on a
#: machine without compiled kernels takes ~10 s); a child still running then is stopped.
CHILD_TIMEOUT_S = 600.0

#: The ``check`` of the row standing for a backend whose child process failed.
CHILD_ROW = "(child process)"


def run_checks(backends: list[Backend] | None = None, checks: list[str] | None = None,
               in_child: list[Backend] | None = None,
               timeout_s: float = CHILD_TIMEOUT_S) -> list[dict[str, Any]]:
    """Run the ``checks`` (default: all registered, in registration order) on every backend
    (default: :func:`usable_backends`); one row per (check, backend), in backend order, then
    check order.

    ``in_child``: the backends whose checks run in a child process while this one
    runs the rest (default: :func:`child_backends`, the CPU group when an accelerator group is
    there too). The child rebuilds them from (name, device, dtype) and imports the modules
    that registered the checks; a backend whose child died, raised or ran past ``timeout_s``
    seconds gives one failed row (check ``"(child process)"``) saying what happened.
    """
    backends = usable_backends() if backends is None else list(backends)
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ParameterError(f"checks={unknown!r} are not registered: must be among "
                             f"{list(CHECKS)}")
    child = child_backends(backends) if in_child is None else list(in_child)
    bad = [be for be in child if be not in backends or be.emulate_mps]
    if bad:
        raise ParameterError(f"in_child={bad!r} is invalid: must be among the backends, "
                             "without MPS emulation (a child rebuilds a backend from its "
                             "name, device and dtype)")
    if not child:
        return [row for be in backends for row in _backend_rows(be, names)]
    with _Child([_spec(be) for be in child], names, timeout_s) as running:
        here = {_spec(be): _backend_rows(be, names) for be in backends if be not in child}
        there = running.rows()
    return [row for be in backends for row in (here | there)[_spec(be)]]


def child_backends(backends: list[Backend]) -> list[Backend]:
    """The backends to check in a child process: the CPU group when the backends span more
    than one device (the accelerator groups stay in this process), else none."""
    if len({be.device for be in backends}) < 2:
        return []
    return [be for be in backends if be.kind == "cpu"]


def _backend_rows(be: Backend, names: list[str]) -> list[dict[str, Any]]:
    """The rows of the ``names`` that apply to ``be``; a name not registered in this process
    (in a child: a check registered by a call, not by importing its module) is a failed row."""
    rows = []
    for name in names:
        fn = CHECKS.get(name)
        if fn is not None and name in APPLIES and not APPLIES[name](be):
            continue
        row = _row(name, _spec(be))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if fn is None:
                    raise LookupError(f"check {name!r} is not registered in this process")
                t0 = be.timer()
                fn(be)  # the first call: compilation and first-call costs
                row["first_s"] = be.timer() - t0
                t0 = be.timer()
                value, ref = fn(be)
                row["time_s"] = be.timer() - t0
                ref = np.asarray(ref, dtype=np.float64)
                diff = np.max(np.abs(to_numpy(value).astype(np.float64) - ref))
                row["max_abs_diff"] = float(diff / max(1.0, np.max(np.abs(ref))))
                row["ok"] = bool(row["max_abs_diff"] <= row["tolerance"])
            except Exception as exc:  # a failing kernel is a row, not a crash
                row.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        if caught:
            row["warnings"] = list(dict.fromkeys(str(w.message) for w in caught))
        rows.append(row)
    return rows


Spec = tuple[str, str, str]


def _spec(be: Backend) -> Spec:
    return be.name, be.device, be.dtype


def _row(check: str, spec: Spec) -> dict[str, Any]:
    name, device, dtype = spec
    return {"check": check, "backend": name, "device": device, "dtype": dtype,
            "tolerance": TOLERANCE[dtype]}


def _child_main(fd: int) -> None:
    """The child process: read (specs, check names, modules) from standard input, import the
    modules registering the checks, then send ``("rows", (spec, rows))`` per backend, or
    ``("error", text)`` if something raised, through the pipe ``fd``."""
    conn = Connection(fd, readable=False)
    try:
        specs, names, modules = pickle.load(sys.stdin.buffer)
        for module in modules:
            importlib.import_module(module)
        for spec in specs:
            conn.send(("rows", (spec, _backend_rows(get_backend(*spec), names))))
    except BaseException as exc:  # reported by the parent on the rows still missing
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class _Child:
    """A fresh Python process (started as a new program, never forked: CUDA may be
    initialised here, and the caller's script is not run again) checking the backends of
    ``specs``; :meth:`rows` collects them, within ``timeout_s`` of the start."""

    def __init__(self, specs: list[Spec], names: list[str], timeout_s: float) -> None:
        self.specs, self.deadline = specs, time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        modules = list(dict.fromkeys(f.__module__ for n in names
                                     for f in (CHECKS[n], APPLIES.get(n)) if f is not None))
        read, write = os.pipe()
        code = (f"import sys; sys.path[:0] = {sys.path!r}; "
                f"from {__name__} import _child_main; _child_main({write})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, pass_fds=(write,))
        os.close(write)  # so that the child's exit reads as end of file here
        self.conn = Connection(read, writable=False)
        try:
            pickle.dump((specs, names, modules), self.proc.stdin)
            self.proc.stdin.close()
        except OSError:   # the child died at once: :meth:`rows` reports it
            pass

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()
        try:
            if exc[0] is None:  # (else this process is failing: stop the child at once)
                self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rows(self) -> dict[Spec, list[dict[str, Any]]]:
        out: dict[Spec, list[dict[str, Any]]] = {}
        error = None
        while error is None and len(out) < len(self.specs):
            if not self.conn.poll(max(0.0, self.deadline - time.monotonic())):
                self.proc.kill()
                error = f"did not finish within {self.timeout_s:g} s and was stopped"
                continue
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                try:
                    code = self.proc.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    code = None
                error = f"exited with code {code} before finishing"
                continue
            if kind == "rows":
                out[payload[0]] = payload[1]
            else:
                error = f"raised {payload}"
        failed = {"ok": False, "error": f"the child process {error}"}
        return out | {spec: [_row(CHILD_ROW, spec) | failed]
                      for spec in self.specs if spec not in out}


def usable_backends() -> list[Backend]:
    """NumPy float64, then torch on each device in float64 (float32 on MPS) and float32."""
    out = [get_backend("numpy", "cpu")]
    for device in available_backends().get("torch", []):
        dtypes = ["float32"] if device == "mps" else ["float64", "float32"]
        out += [get_backend("torch", device, dt) for dt in dtypes]
    return out


def versions() -> dict[str, str | None]:
    """Python, the platform and the packages of :func:`mfgwork.core.storage.provenance`
    (None: not installed)."""
    prov = provenance()
    return {"python": prov["versions"]["python"], "platform": prov["platform"]} | \
        prov["versions"]


def cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo; else what the platform says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_info() -> dict[str, Any]:
    """The CPU as this process sees it: model, cores usable here and on the host, memory."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return device_info("cpu") | {"name": cpu_model(), "cores": os.cpu_count(),
                                 "usable_cores": usable, "machine": platform.machine()}


def report() -> dict[str, Any]:
    """Versions, devices, compiled-kernel caches and the check rows; ``side_by_side``: the
    CPU checks ran in a child process while this one ran the accelerator checks."""
    backends = usable_backends()
    devices = [cpu_info() if d == "cpu" else device_info(d)
               for d in dict.fromkeys(be.device for be in backends)]
    caches = {"triton": triton_cache_summary(), "numba": {"path": numba_cache_dir()}}
    child = child_backends(backends)
    return {"versions": versions(), "backends": available_backends(), "devices": devices,
            "caches": caches, "side_by_side": bool(child),
            "checks": run_checks(backends, in_child=child)}


def format_report(rep: dict[str, Any]) -> str:
    lines = ["mfgwork doctor", ""]
    installed = {k: v for k, v in rep["versions"].items() if v is not None}
    lines += [f"  {k:<16} {v}" for k, v in installed.items()]
    missing = [k for k, v in rep["versions"].items() if v is None]
    if missing:
        lines.append(f"  {'not installed':<16} {', '.join(missing)} (optional)")
    lines += ["", "Devices:"]
    lines += [f"  {_device_line(d)}" for d in rep["devices"]]
    if "caches" in rep:
        triton = rep["caches"]["triton"]
        lines += ["", "Compiled kernels (reused by later processes):",
                  f"  triton  {triton['path']} ({triton['entries']} entries, "
                  f"{triton['bytes'] / 2**20:.1f} MiB; TRITON_CACHE_DIR moves it, "
                  "python -m mfgwork doctor --clear-cache empties it)",
                  f"  numba   {rep['caches']['numba']['path']} (NUMBA_CACHE_DIR moves it)"]
    lines += ["", "Checks against NumPy float64 (first: the first call, compilation included):",
              f"  {'check':<22} {'backend':<7} {'device':<7} {'dtype':<8} "
              f"{'max|diff|':>10} {'tol':>7} {'first':>9} {'time':>9}  status"]
    if rep.get("side_by_side"):
        lines.insert(-1, "  (the CPU checks ran in a child process side by side with the "
                         "accelerator checks: first includes their contention)")
    for r in rep["checks"]:
        diff = f"{r['max_abs_diff']:10.2e}" if "max_abs_diff" in r else f"{'-':>10}"
        first, t = (f"{1e3 * r[k]:7.2f}ms" if k in r else f"{'-':>9}"
                    for k in ("first_s", "time_s"))
        status = "ok" if r["ok"] else "FAIL " + r.get("error", "")
        lines.append(f"  {r['check']:<22} {r['backend']:<7} {r['device']:<7} {r['dtype']:<8} "
                     f"{diff} {r['tolerance']:7.0e} {first} {t}  {status}")
        lines += [f"      warning: {w}" for w in r.get("warnings", [])]
    return "\n".join(lines)


def _device_line(d: dict[str, Any]) -> str:
    """One line per device: what it is, how many, and its memory."""
    mem = ", ".join(f"{k.removeprefix('memory_')} {_gib(d[k])}" for k in
                    ("memory_total", "memory_allocated", "memory_reserved", "memory_peak")
                    if d.get(k) is not None)
    if d["kind"] == "cpu":
        usable = d.get("usable_cores")
        cores = f"{d.get('cores')} cores" + (f" ({usable} usable by this process)"
                                             if usable and usable != d.get("cores") else "")
        what = f"{d['name']} ({d.get('machine')}), {cores}"
    else:
        what = f"{d['name'] or 'unnamed'}, {d['count']} device(s)"
    return f"{d['device']:<8} {what}" + (f"; memory: {mem}" if mem else "")


def _gib(v: int) -> str:
    return f"{v / 2**30:.1f} GiB"


def main(as_json: bool = False, clear_cache: bool = False) -> int:
    if clear_cache:
        removed, path = clear_triton_cache(), triton_cache_summary()["path"]
        print(json.dumps({"removed": removed, "path": str(path)}, indent=2) if as_json
              else f"removed {removed} compiled kernels from {path}")
        return 0
    t0 = time.perf_counter()
    rep = report()
    rep["elapsed_s"] = time.perf_counter() - t0
    print(json.dumps(rep, indent=2) if as_json else format_report(rep))
    return 0 if all(r["ok"] for r in rep["checks"]) else 1
