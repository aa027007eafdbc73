"""Measuring where the accelerator pays off: wall time against batch size and particle count.

- :func:`time_fdm_batches`: a grid of Santa Fe problems (thresholds × σ) solved by
  :func:`mfgwork.solve_batch` with a fixed number of Picard iterations, for growing batch
  sizes: on NumPy a loop of compiled solves, on torch one batched computation.
- :func:`time_particles`: one particle Fokker–Planck solve for growing particle counts.
- :func:`crossover`: the smallest measured size from which the accelerator is at least as
  fast as the CPU at every larger measured size (None if it never is).
- :func:`measure_table`: the crossover table of :mod:`mfgwork.placement` for this machine
  (written by ``benchmarks/crossover.py``); :func:`table_frame` flattens a table for plots.

Times are medians over ``repeats`` runs after one warm-up run (compilation and first-call
costs excluded), with the device synchronized before the clock is read.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ..core.backend import Backend, device_info, get_backend, mps_emulation, to_numpy
from ..core.errors import ConvergenceWarning
from ..numerics.particles import ParticleFP
from ..problems.santa_fe import SantaFeBar
from ..solve import solve
from .style import DPI, styled

FDM_CASE = {"nx": 101, "nt": 101, "iterations": 3}
PARTICLE_CASE = {"nx": 101, "nt": 100}


def batch_problems(n: int) -> list[SantaFeBar]:
    """``n`` Santa Fe problems over thresholds 0.3–0.8 × σ 0.4–1.0 (a near-square grid)."""
    k = int(np.ceil(np.sqrt(n)))
    grid = [(a, s) for a in np.linspace(0.3, 0.8, k) for s in np.linspace(0.4, 1.0, k)]
    return [SantaFeBar(threshold=float(a), sigma=float(s)) for a, s in grid[:n]]


def _median_time(run: Callable[[], Any], backend: Backend, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        t0 = backend.timer()
        run()
        times.append(backend.timer() - t0)
    return statistics.median(times[1:])


def time_fdm_batches(sizes: Sequence[int], backend: str | Backend = "numpy",
                     device: str = "cpu", *, nx: int = FDM_CASE["nx"],
                     nt: int = FDM_CASE["nt"], iterations: int = FDM_CASE["iterations"],
                     repeats: int = 1) -> dict[str, Any]:
    """Seconds per ``solve_batch`` of each size (``iterations`` Picard iterations each)."""
    be = get_backend(backend, device) if isinstance(backend, str) else backend
    seconds = []
    for n in sizes:
        problems = batch_problems(int(n))

        def run(problems: list[SantaFeBar] = problems) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", UserWarning)   # tol below the dtype's floor
                solve(problems, nx=nx, nt=nt, backend=be, tol=1e-300,
                      max_iter=iterations, progress=False)

        seconds.append(_median_time(run, be, repeats))
    return {"sizes": [int(n) for n in sizes], "seconds": seconds}


def time_particles(sizes: Sequence[int], backend: str | Backend = "numpy",
                   device: str = "cpu", *, nx: int = PARTICLE_CASE["nx"],
                   nt: int = PARTICLE_CASE["nt"], repeats: int = 1) -> dict[str, Any]:
    """Seconds per particle FP solve (Santa Fe at its defaults, U of the FDM equilibrium)."""
    be = get_backend(backend, device) if isinstance(backend, str) else backend
    problem = SantaFeBar()
    grid = problem.grid(nx, nt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = solve(problem, nx=nx, nt=nt, tol=1e-6, progress=False)
    U = be.asarray(to_numpy(ref.U))
    m0 = problem.initial_density(grid, be)
    seconds = []
    for n in sizes:
        fp = ParticleFP(grid, problem.sigma, be, n_particles=int(n), seed=0)
        seconds.append(_median_time(lambda fp=fp: fp.solve_fp(U, m0), be, repeats))
    return {"sizes": [int(n) for n in sizes], "seconds": seconds}


def crossover(cpu: dict[str, Any], accelerator: dict[str, Any]) -> int | None:
    """The smallest size from which ``accelerator`` is at least as fast as ``cpu`` at every
    larger size measured by both (None if it is not at the largest)."""
    cpu_times = dict(zip(cpu["sizes"], cpu["seconds"], strict=True))
    common = [(n, t) for n, t in zip(accelerator["sizes"], accelerator["seconds"], strict=True)
              if n in cpu_times]
    found = None
    for n, t in sorted(common, reverse=True):
        if t > cpu_times[n]:
            break
        found = n
    return found


def machine(kind: str) -> dict[str, Any]:
    """Name, kind and host of the device ``kind`` ("cpu", "cuda", "mps")."""
    import platform

    info = device_info(kind)
    return {"name": info.get("name"), "kind": kind, "host": platform.node(),
            "cores": info.get("cores"), "memory_total": info.get("memory_total")}


def measure_table(batch_sizes: Sequence[int], particle_sizes: Sequence[int], *,
                  accelerators: Sequence[str] = ("cuda", "mps"),
                  emulation_batch_sizes: Sequence[int] = (),
                  emulation_particle_sizes: Sequence[int] = (), nx: int = FDM_CASE["nx"],
                  nt: int = FDM_CASE["nt"], iterations: int = FDM_CASE["iterations"],
                  particle_nx: int = PARTICLE_CASE["nx"], particle_nt: int = PARTICLE_CASE["nt"],
                  repeats: int = 1, progress: Callable[[str], None] | None = None
                  ) -> dict[str, Any]:
    """The crossover table for this machine: the CPU side (NumPy, compiled loops), every
    accelerator in ``accelerators`` that is present (others marked not measured), and,
    with sizes given, MPS emulation (torch on this CPU in float32: information only, never
    used for placement). The FDM case is ``nx`` × ``nt`` with ``iterations`` Picard
    iterations; the particle case ``particle_nx`` × ``particle_nt``."""
    from ..core.backend import available_devices, torch_installed

    say = progress or (lambda message: None)
    present = available_devices("torch") if torch_installed() else []
    fdm_case = {"nx": nx, "nt": nt, "iterations": iterations}
    particle_case = {"nx": particle_nx, "nt": particle_nt}
    say("cpu: fdm batches")
    cpu = {"measured": True, "machine": machine("cpu"),
           "fdm_batch": time_fdm_batches(batch_sizes, repeats=repeats, **fdm_case)}
    say("cpu: particles")
    cpu["particles"] = time_particles(particle_sizes, repeats=repeats, **particle_case)
    entries: dict[str, Any] = {}
    targets = [(kind, get_backend("torch", kind) if kind in present else None)
               for kind in accelerators]
    if emulation_batch_sizes or emulation_particle_sizes:
        targets.append(("mps-emulation", mps_emulation()))
    for kind, be in targets:
        if be is None:
            entries[kind] = {"measured": False, "note": f"no {kind} device on the machine "
                             f"that wrote this table ({cpu['machine']['host']})"}
            continue
        emulated = kind == "mps-emulation"
        sizes_b = emulation_batch_sizes if emulated else batch_sizes
        sizes_p = emulation_particle_sizes if emulated else particle_sizes
        say(f"{kind}: fdm batches")
        fdm = time_fdm_batches(sizes_b, be, repeats=repeats, **fdm_case) if sizes_b else {}
        say(f"{kind}: particles")
        particles = (time_particles(sizes_p, be, repeats=repeats, **particle_case)
                     if sizes_p else {})
        entry = {"measured": True, "machine": machine("cpu" if emulated else kind),
                 "dtype": be.dtype, "fdm_batch": fdm, "particles": particles}
        for name, series in (("fdm_batch", fdm), ("particles", particles)):
            if series:
                series["crossover"] = crossover(cpu[name], series)
        if emulated:
            entry["note"] = ("torch on the CPU in float32 under the MPS rules: shows the "
                             "batching effect on a CPU; never used for placement")
        entries[kind] = entry
    return {"format": 1, "written_by": "benchmarks/crossover.py",
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cases": {"fdm_batch": fdm_case | {"problems": "Santa Fe, thresholds x sigma"},
                      "particles": particle_case | {"what": "one particle FP solve"}},
            "cpu": cpu, "accelerators": entries}


def table_frame(table: dict[str, Any], label: str = "") -> list[dict[str, Any]]:
    """The measured series of ``table`` as rows (target, method, size, seconds, source)."""
    rows = []
    sides = [("cpu (numpy)", table["cpu"])] + [
        (kind, e) for kind, e in table.get("accelerators", {}).items() if e.get("measured")]
    for target, entry in sides:
        for method in ("fdm_batch", "particles"):
            series = entry.get(method) or {}
            for n, t in zip(series.get("sizes", []), series.get("seconds", []), strict=True):
                rows.append({"target": target, "method": method, "size": n, "seconds": t,
                             "source": label})
    return rows


def crossovers(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """B* and N* of every measured accelerator entry of ``table`` (None: not reached)."""
    return {kind: {m: (e.get(m) or {}).get("crossover") for m in ("fdm_batch", "particles")}
            for kind, e in table.get("accelerators", {}).items() if e.get("measured")}


@styled
def plot_crossover(rows: Sequence[dict[str, Any]]) -> Any:
    """Wall time against batch size (FDM) and particle count, log-log, one line per target
    and source (solid: the first source, e.g. the shipped table; dashed: the others)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.2), dpi=DPI, layout="constrained")
    axes = dict(zip(("fdm_batch", "particles"), fig.subplots(1, 2), strict=True))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    colors = {t: f"C{i}" for i, t in enumerate(targets)}
    for method, ax in axes.items():
        for source in sources:
            for target in targets:
                pts = sorted((r["size"], r["seconds"]) for r in rows if r["method"] == method
                             and r["source"] == source and r["target"] == target)
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", color=colors[target],
                            linestyle="-" if source == sources[0] else "--",
                            label=f"{target} ({source})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes["fdm_batch"].set(xlabel="problems in the batch B", ylabel="wall time of the batch [s]",
                          title="Finite differences: a batch of Santa Fe problems")
    axes["particles"].set(xlabel="particles N", ylabel="wall time of one FP solve [s]",
                          title="Particles: one Fokker–Planck solve")
    return fig
