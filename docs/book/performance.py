"""The book's performance page, generated from the measurements in ``benchmarks/baselines``.

Each :class:`Section` names one JSON file (what was measured, and where), the rows to show
and their columns; :func:`write_page` renders every section as a Markdown table, with a bar
chart of its time column, into a Sphinx source folder. A section whose file is missing, or
whose rows lack a column, fails the build (:class:`PerformanceError`): the page never shows
a number that is not in a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASELINES = Path(__file__).resolve().parents[2] / "benchmarks" / "baselines"
PAGE = "performance.md"
FIGURES = "performance"

Row = Mapping[str, Any]


class PerformanceError(ValueError):
    """A baseline file is missing, unreadable or lacks what its section shows."""


@dataclass(frozen=True)
class Column:
    """One column: the row's ``key``, its header and how a value is written."""

    key: str
    header: str
    fmt: Callable[[Any], str] = str


@dataclass(frozen=True)
class Section:
    """One table of the page: ``rows(data)`` picks the rows of the file ``name``."""

    name: str
    title: str
    text: str
    columns: Sequence[Column]
    rows: Callable[[Any], Sequence[Row]] = lambda data: data["rows"]
    #: the column drawn as bars (seconds, log scale), labelled by the ``label`` columns
    bars: str | None = None
    label: Sequence[str] = field(default_factory=tuple)


def seconds(value: float) -> str:
    """A duration at a readable unit: 4 min 54 s, 1.32 s, 27 ms, 61 µs."""
    value = float(value)
    if value >= 120.0:
        minutes, rest = divmod(round(value), 60)
        return f"{minutes} min {rest} s"
    if value >= 1.0:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def number(value: Any) -> str:
    """Integers as they are, floats to three significant digits, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def where(**wanted: Any) -> Callable[[Any], list[Row]]:
    """The rows of ``data["rows"]`` whose entries equal ``wanted``."""
    return lambda data: [r for r in data["rows"]
                         if all(r.get(k) == v for k, v in wanted.items())]


def warm(data: Any) -> list[Row]:
    """Timing rows of a process's later runs (``run_in_process`` > 1: nothing compiled)."""
    return [r for r in data["rows"] if r.get("run_in_process", 2) > 1]


#: The columns of ``benchmarks/latency.py``'s rows (:func:`_latency_rows`).
LATENCY_COLUMNS = [Column("case", "case"), Column("before_s", "before", seconds),
                   Column("after_s", "after", seconds),
                   Column("solve_before_s", "solve before", seconds),
                   Column("solve_after_s", "solve after", seconds),
                   Column("ratio", "after / before", number)]

#: The columns of ``benchmarks/common_noise.py``'s rows.
COMMON_NOISE_COLUMNS = [Column("depth", "depth", number), Column("scenarios", "scenarios", number),
                        Column("tree_s", "tree", seconds), Column("model_s", "model", seconds),
                        Column("ratio", "ratio", number),
                        Column("estimate_s", "estimate (1 core)", seconds),
                        Column("best_responses", "best responses", number),
                        Column("tangent_products", "tangent products", number),
                        Column("residual", "residual", number)]


def _latency_rows(data: Any) -> list[Row]:
    """The rows of ``benchmarks/latency.py``: each case's fastest run before and after."""
    return [{"case": r["case"], "before_s": r["before"]["min_s"],
             "after_s": r["after"]["min_s"], "ratio": r["ratio"],
             "solve_before_s": r["before"].get("solve_s"),
             "solve_after_s": r["after"].get("solve_s")} for r in data["rows"]]


def _outside_loop_rows(data: Any) -> list[Row]:
    """The rows of ``benchmarks/outside_loop.py``: each box and dtype's batch and scan,
    before and after."""
    return [{"row": name, "batch_before_s": r["before"]["batch_s"],
             "batch_after_s": r["after"]["batch_s"], "scan_before_s": r["before"]["scan_s"],
             "scan_after_s": r["after"]["scan_s"],
             "machinery": r["after"]["scan_s"] / r["after"]["batch_s"] - 1.0,
             "converged": r["after"]["scan_converged"]} for name, r in data["rows"].items()]


def _scan_reads_rows(data: Any) -> list[Row]:
    """The rows of ``benchmarks/scan_reads.py``: each way of storing a block, its write and
    one point's read against zarr's block chunks."""
    base = data["rows"]["zarr, block chunks"]
    return [{"way": way, "write_s": r["write"], "write_ratio": r["write"] / base["write"],
             "read_s": r["read"], "read_ratio": r["read"] / base["read"]}
            for way, r in data["rows"].items()]


def _planner_batch_rows(data: Any) -> list[Row]:
    """The rows of ``benchmarks/planner.py --batch-side``: one per dtype."""
    return [{"dtype": dtype} | data[dtype] for dtype in ("float32", "float64")]


SECTIONS: list[Section] = [
    Section(
        "commands_2core.json", "The make commands on a two-core machine",
        "Wall time of the two commands and of the book, on a fresh clone of a two-core "
        "machine; the file's note says how and when each row was measured.",
        [Column("command", "command"), Column("condition", "condition"),
         Column("time_s", "time", seconds)]),
    Section(
        "fdm_batch_single_h100.json", "One Santa Fe solve: CPU against CUDA",
        "A single finite-difference solve of the Santa Fe defaults (201², `benchmarks/"
        "fdm_batch.py`) is a sequential chain of small tridiagonal solves: a GPU is not much "
        "faster than one CPU core's compiled loops. Rows `single`: one solve; rows `numpy`: "
        "the per-problem time of a loop on one core and of a process pool.",
        [Column("case", "case"), Column("target", "target"),
         Column("time_s", "time", seconds), Column("per_problem_s", "per problem", seconds),
         Column("iterations", "iterations", number)],
        bars="time_s", label=("case", "target")),
    Section(
        "models_h200.json", "Every model on the fused CUDA kernels (H200)",
        "Santa Fe at 201², tol 1e-6, each model's kernels generated from its `value` "
        "(`benchmarks/models_device.py --device cuda --batch 1024 --repeats 2`): "
        "one float64 solve and a batch of 1024 (thresholds × σ) in float32 and float64; "
        "`× quadratic` is the time over the quadratic row of the same case in the same run, "
        "`first call` includes compiling the model's kernels.",
        [Column("case", "case"), Column("dtype", "dtype"), Column("model", "model"),
         Column("time_s", "time", seconds), Column("first_call_s", "first call", seconds),
         Column("iterations", "iterations", number),
         Column("ratio_to_quadratic", "× quadratic", number)],
        bars="time_s", label=("case", "dtype", "model")),
    Section(
        "batch_equilibria_cpu.json", "Hard Santa Fe problems on a CPU",
        "30 random points of the box threshold 0.15–0.92, σ 0.08–1.8, ε 0.0008–0.15, T 4–25, "
        "three payoff pairs, grids 81² and 121², tol 1e-6, each result checked by an "
        "independent best response (`benchmarks/batch_equilibria.py --cases box`). `after`: "
        "Newton's method on the attendance path (the default); `before`: Anderson mixing.",
        [Column("solver", "solver"), Column("variant", "iteration"),
         Column("certified", "certified", number), Column("problems", "of", number),
         Column("median_iterations", "median iterations", number),
         Column("coarse_iterations_median", "on 51² first", number),
         Column("time_s", "time", seconds)],
        bars="time_s", label=("solver", "variant")),
    Section(
        "batch_equilibria_h100.json", "1024 Santa Fe problems in one batch on an H100",
        "`easy`: thresholds 0.3–0.8 × σ 0.4–1.0 at 201²; `hard`: thresholds 0.2–0.9 × ε "
        "0.001–0.1 at σ 0.3, 201² (`benchmarks/batch_equilibria.py --device cuda --cases "
        "easy,hard`). Every result certified by a best response in float64.",
        [Column("case", "case"), Column("solver", "solver"),
         Column("certified", "certified", number), Column("problems", "of", number),
         Column("median_iterations", "median iterations", number),
         Column("time_s", "time", seconds), Column("warm_up_s", "first call", seconds)],
        bars="time_s", label=("case", "solver")),
    Section(
        "kernel_picard_h100.json", "The fused CUDA sweeps (H100)",
        "One HJB and one FP sweep at 201², `benchmarks/kernel_picard.py`: a problem per "
        "program whose lanes span x (parallel cyclic reduction in registers), or a problem "
        "per thread (a Thomas solve each).",
        [Column("sweep", "sweep"), Column("layout", "layout"), Column("dtype", "dtype"),
         Column("problems", "problems", number), Column("seconds", "time", seconds)]),
    Section(
        "fdm_batch_picard_h100.json", "A batch of 1024 Picard solves (H100)",
        "Whole solves of 1024 problems by Picard iterations (`benchmarks/fdm_batch.py "
        "--iteration picard`), against a NumPy loop on one core and a 16-core process pool.",
        [Column("case", "case"), Column("target", "target"), Column("dtype", "dtype"),
         Column("batch", "batch", number), Column("time_s", "time", seconds),
         Column("iterations", "iterations", number),
         Column("converged", "converged", number)],
        bars="time_s", label=("case", "target", "dtype")),
    Section(
        "torch_path_mps_emulation.json", "The generic torch path (MPS emulation)",
        "Kernel launches per time step of the generic torch path, which MPS and CUDA without "
        "Triton run, counted under `mw.mps_emulation()` on Santa Fe at 52² with 5 Picard "
        "iterations (`benchmarks/torch_path.py`): before and after the launch reduction.",
        [Column("label", "code"), Column("hjb_per_step", "HJB launches / step", number),
         Column("fp_per_step", "FP launches / step", number),
         Column("time_s", "time", seconds), Column("ratio_to_numpy", "× NumPy", number)]),
    Section(
        "room_h100.json", "The 2-D room on an H100",
        "`benchmarks/room.py`: the 101 × 101 × 100 room and the 201 × 201 × 200 room to tol "
        "1e-6, 16 and 64 rooms in one batch, float64, one-launch Krylov solves with the "
        "Neumann preconditioner. Later runs of one process (the first pays the CUDA context, "
        "the kernels' loading and the graphs' recording).",
        [Column("case", "case"), Column("nx", "nx", number), Column("batch", "batch", number),
         Column("iterations", "iterations", number),
         Column("krylov_iterations", "Krylov iterations", number),
         Column("wall_s", "time", seconds)],
        rows=warm, bars="wall_s", label=("case",)),
    Section(
        "room_models_h200.json", "64 rooms with congestion on an H200",
        "64 rooms of 101 × 101 × 100 to tol 1e-6 in one batch, float64, with ½|p|² and with "
        "congestion |p|²/(2(1 + m)^0.5), whose kernels are generated from its `value` "
        "(`benchmarks/room.py --device cuda --batch 64 --models quadratic,congestion "
        "--repeat 2`); the second run of each in one process.",
        [Column("case", "case"), Column("model", "model"),
         Column("iterations", "iterations", number), Column("wall_s", "time", seconds),
         Column("time_ratio_to_quadratic", "× quadratic", number)],
        rows=warm, bars="wall_s", label=("case", "model")),
    Section(
        "room_h200_neumann.json", "The room's preconditioners on an H200: Neumann series",
        "The same cases, in one call with the next table: the first two terms of the Neumann "
        "series of J⁻¹ as the preconditioner.",
        [Column("case", "case"), Column("krylov_iterations", "Krylov iterations", number),
         Column("wall_s", "time", seconds)], rows=warm),
    Section(
        "room_h200_jacobi.json", "The room's preconditioners on an H200: Jacobi",
        "The inverse diagonal as the preconditioner.",
        [Column("case", "case"), Column("krylov_iterations", "Krylov iterations", number),
         Column("wall_s", "time", seconds)], rows=warm),
    Section(
        "preconditioner_cpu.json", "Krylov iterations per preconditioner (CPU)",
        "BiCGStab iterations on the room's HJB and FP systems (`benchmarks/preconditioner.py`,"
        " 101²): Jacobi against the two-term Neumann series.",
        [Column("system", "system"), Column("rtol", "rtol", number),
         Column("jacobi", "Jacobi", number), Column("neumann", "Neumann", number)]),
    Section(
        "krylov_layout_h100.json", "Launch layouts of the batched BiCGStab (H100)",
        "A float64 BiCGStab iteration of 64 rooms in ten launch layouts "
        "(`benchmarks/krylov_layout.py`); it is bound by memory bandwidth.",
        [Column("layout", "layout"), Column("block", "block", number),
         Column("programs", "programs", number), Column("warps", "warps", number),
         Column("s_per_iteration", "per iteration", seconds)]),
    Section(
        "room_h100_narrow_fused.json", "Narrowing a batch on the fused CUDA path (H100)",
        "64 rooms with the batch narrowed to the rooms still iterating (`benchmarks/room.py "
        "--narrow-fused`); measured slower than without it, so it is off on this path.",
        [Column("case", "case"), Column("run_in_process", "run in process", number),
         Column("wall_s", "time", seconds)]),
    Section(
        "two_state_cpu.json", "The two-state game (CPU)",
        "Switching costs × horizons at nt = 400 (`benchmarks/two_state.py`): Newton's method "
        "on the attendance path, certified by an independent best response.",
        [Column("switching_cost", "switching cost", number), Column("T", "T", number),
         Column("converged", "converged", number), Column("iterations", "iterations", number),
         Column("independent_residual", "independent residual", number),
         Column("time_s", "time", seconds)]),
    Section(
        "certificate_floor_cpu_1core.json", "Float64 over long horizons: the floor named first",
        "Santa Fe at 201 × 201, tol 1e-8, T 10 to 160 × σ 0.03 to 0.3 × three thresholds "
        "(`benchmarks/certificate_floor.py`, one core); the rows whose float64 certificate "
        "floor 0.05 L² ε lies above tol, named before the fine iteration from the coarse "
        "stage's L (said: before) and, had one stopped above it, after. A solve converges "
        "to tol or within its floor; the others of the grid converge to tol.",
        [Column("T", "T", number), Column("sigma", "σ", number),
         Column("threshold", "threshold", number), Column("status", "status"),
         Column("residual", "residual", number), Column("iterations", "iterations", number),
         Column("floor", "floor", number), Column("lipschitz", "L", number),
         Column("said", "said")],
        rows=lambda data: [r for r in data["rows"] if r["floor"] is not None]),
    Section(
        "latency_cpu_1core.json", "The first solve of a process on one CPU core",
        "Fresh processes on one core of a two-core AMD EPYC machine (`taskset -c 1 python "
        "benchmarks/latency.py --baseline ffaf094 --rounds 3`, `before` the code at ffaf094, "
        "`after` this page's: Newton's iteration compiled on the CPU, its per-solve work "
        "done once, and the models and populations added since, which the import and the "
        "cold caches now pay for; the scans, the sweeps and SciPy's solvers are imported "
        "on first use): "
        "`import`, then the first default Santa Fe solve and the first of a model no process "
        "solved (Power(1.5)), with every cache empty (`cold`) or written by an earlier "
        "process (`warm`); `solve` is the first solve's own time inside the process; `seed` "
        "(52², 5 iterations) and `default` (201², tol 1e-8) are later solves in one process.",
        LATENCY_COLUMNS, rows=_latency_rows, bars="after_s", label=("case",)),
    Section(
        "latency_cuda_h200.json", "The first solve of a process on CUDA (H200)",
        "Fresh processes (`benchmarks/latency.py --device cuda --rounds 2 --repeats 2 "
        "--cases first room`, `before` the code at ffaf094, `after` this page's: Triton's "
        "installation key remembered between processes, the Newton state machine of small "
        "batches interpreted on the device, loading no Numba, and the scans, the sweeps and "
        "SciPy's solvers imported on first use): "
        "the first Santa Fe solve (float64, 201², tol 1e-8) and the first 101² room, with every "
        "cache empty (`cold`) or written by an earlier process (`warm`). `before` and `after` "
        "are the whole process; `solve` is the first solve's own time inside it, after "
        "PyTorch's import (about 1.5 s, any PyTorch program's), CUDA's start included "
        "(about 0.3–0.5 s). H200 hosts differ: the file's note gives another host's figures.",
        LATENCY_COLUMNS, rows=_latency_rows, bars="after_s", label=("case",)),
    Section(
        "outside_loop_h200.json", "1024 points on one GPU: the batch and the scan (H200)",
        "A 32 × 32 Santa Fe box at 201² (`benchmarks/outside_loop.py --device cuda --rounds 1 "
        "--repeats 2`, `before` the code at ffaf094, `after` this page's: the coarse "
        "stage's iterations replayed from a recorded CUDA graph, the float32 members "
        "certified in float64 from one stacked copy, the Results built as copies of one "
        "checked member, a scan's fields cut into slabs of at most 16 MiB and stored raw, "
        "written on several threads while the result is opened; each process freezes its "
        "warm-up's "
        "leftovers out of CPython's full collections, which otherwise add 0.24–0.31 s to a "
        "run at random): "
        "`easy` threshold 0.3–0.9 × σ 0.3–1.0, `hard` threshold 0.2–0.9 × ε 0.001–0.1 at "
        "σ 0.3; float32 to tol 1e-6, float64 to 1e-8. `batch` is "
        "`mw.solve(list)`, `scan` is `mw.scan` into a new store, end to end; `machinery` is "
        "scan / batch − 1 after: mostly the fields' write (331 MB in float32), the store's "
        "set-up and the opening of the result. The file's note gives the same rows against "
        "ef44b04 on a slower host.",
        [Column("row", "box, dtype"), Column("batch_before_s", "batch before", seconds),
         Column("batch_after_s", "batch after", seconds),
         Column("scan_before_s", "scan before", seconds),
         Column("scan_after_s", "scan after", seconds),
         Column("machinery", "machinery after", number),
         Column("converged", "converged", number)],
        rows=_outside_loop_rows, bars="scan_after_s", label=("row",)),
    Section(
        "scan_reads_h200.json", "Writing a scan's block and reading one point (H200 host)",
        "A block of 32 × 32 Santa Fe points at 201² in float32 (331 MB of fields, random "
        "values: `benchmarks/scan_reads.py --rounds 5`) written into a new store with its "
        "record and `done` flag, then one point's `U` read through `mw.open_scan` from the "
        "page cache: every variable one chunk a block through zarr (the earlier stores), the "
        "same chunks written as files directly, and the fields cut into slabs of at most "
        "16 MiB (the stores made now).",
        [Column("way", "way"), Column("write_s", "write", seconds),
         Column("write_ratio", "ratio", number), Column("read_s", "read one point", seconds),
         Column("read_ratio", "ratio", number)],
        rows=_scan_reads_rows, bars="read_s", label=("way",)),
    Section(
        "long_run_cpu_1core.json", "The long run against the finite horizon (one core)",
        "Santa Fe at 201², NumPy on one core (`benchmarks/long_run.py`): the stationary solve "
        "(`stationary=True`) and the finite-horizon equilibrium (T = 10, 201 steps, tol "
        "1e-8), each the fastest of five, their ratio (target ≤ 2), Newton steps, the "
        "certified residual and the stationary attendance. The file also holds the middle of "
        "long horizons against it and the orders against an exact ergodic solution.",
        [Column("model", "model"), Column("stationary_s", "stationary", seconds),
         Column("finite_s", "finite horizon", seconds), Column("ratio", "ratio", number),
         Column("newton_steps", "Newton steps", number),
         Column("residual", "residual", number), Column("attendance", "attendance", number)],
        bars="stationary_s", label=("model",)),
    Section(
        "common_noise_cpu_1core.json", "Common noise on a scenario tree (one core)",
        "Santa Fe whose payoff `good` switches between 12 and 8 (persistence 0.8), trees of "
        "depth 2, 4 and 6 (4 to 64 scenarios) at 201², tol 1e-8, NumPy on one core "
        "(`benchmarks/common_noise.py`): the conditional equilibrium on the tree and the "
        "model's own equilibrium on the same grid, each the fastest of three, their ratio, "
        "the one-core estimate made before the solve, best responses, tangent products and "
        "the certified residual (target: depth 6 ≤ 5 s).",
        COMMON_NOISE_COLUMNS, bars="tree_s", label=("depth",)),
    Section(
        "common_noise_h200.json", "Common noise on a scenario tree (H200)",
        "The same trees with every solve on torch float64 on one H200 (`benchmarks/"
        "common_noise.py --device cuda`): each level of the tree one batched sweep on the "
        "device, the tangent products of Newton's method on the host's cores (target: depth "
        "6 ≤ 1 s).",
        COMMON_NOISE_COLUMNS, bars="tree_s", label=("depth",)),
    Section(
        "planner_cpu_1core.json", "The planner's optimum against the equilibrium (one core)",
        "Santa Fe at 201², tol 1e-8, σ 0.5, NumPy on one core (`benchmarks/planner.py`): the "
        "equilibrium and the planner's problem alone, each the fastest of three, their ratio "
        "(target ≤ 2), iterations, and the welfare of both (W_opt / W_eq where both are "
        "positive).",
        [Column("threshold", "threshold", number), Column("eps", "ε", number),
         Column("equilibrium_s", "equilibrium", seconds),
         Column("planner_s", "planner", seconds), Column("ratio", "ratio", number),
         Column("equilibrium_iterations", "its (eq.)", number),
         Column("planner_iterations", "its (planner)", number),
         Column("welfare", "W_opt", number), Column("equilibrium_welfare", "W_eq", number),
         Column("price_of_anarchy", "W_opt / W_eq", number)],
        bars="planner_s", label=("threshold", "eps")),
    Section(
        "planner_h200.json", "1024 planners and equilibria as batches (one H200)",
        "The 32 × 32 box threshold 0.3–0.9 × ε 0.03–0.1 at 201² on CUDA "
        "(`benchmarks/planner.py --batch-side 32 --device cuda`): a batch of equilibria, one "
        "of planners, and `objective=\"social\"` (both, and their welfares), the second run "
        "of each.",
        [Column("dtype", "dtype"), Column("equilibrium_s", "equilibria", seconds),
         Column("planner_s", "planners", seconds),
         Column("objective_social_s", "objective='social'", seconds),
         Column("planner_converged", "converged", number),
         Column("equilibrium_max_iterations", "max its (eq.)", number),
         Column("planner_max_iterations", "max its (planner)", number)],
        rows=_planner_batch_rows, bars="planner_s", label=("dtype",)),
    Section(
        "particles_h200.json", "The fused particle step before and after (one H200)",
        "One particle FP solve of Santa Fe at 201² (`benchmarks/particles.py --backend torch "
        "--device cuda --sizes 1e6 --dtypes float32,float64 --modes fused`, run from both "
        "revisions one after the other, joined by `--compare`): the solve's time per step, "
        "CUDA graph replayed, before and after the node masses are unpacked from the packed "
        "deposit buffer by one kernel that reads it once (targets at 10⁶: ≤ 15 µs float32, "
        "≤ 20 µs float64).",
        [Column("dtype", "dtype"), Column("n", "particles", number),
         Column("before_step_s", "step before", seconds),
         Column("after_step_s", "step after", seconds), Column("ratio", "speed-up", number)],
        bars="after_step_s", label=("dtype", "n")),
    Section(
        "scan_gpus_h200x2.json", "A scan of 10⁵ points over one and two GPUs (2 × H200)",
        "Santa Fe threshold × σ × ε, 47 values each, at 201² in float32, tol 1e-6, one Dask "
        "worker per GPU (`benchmarks/scan_gpus.py --gpus 1,2 --side 47`; the store keeps the "
        "paths). 8 blocks of about 13 000 points on one GPU and on two; one cluster per row, "
        "warmed up before the timed scan.",
        [Column("workers", "GPUs", number), Column("points", "points", number),
         Column("wall_s", "time", seconds), Column("points_per_s", "points per second", number),
         Column("speedup", "speed-up", number), Column("converged", "converged", number)]),
]


def load(folder: Path, name: str) -> Any:
    """The parsed JSON file ``folder/name``."""
    path = folder / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PerformanceError(f"{path}: {exc}") from None


def machine(data: Mapping[str, Any]) -> str:
    """Where a file was measured, as the file says (card, device or host), or ''."""
    for key in ("card", "device", "host"):
        if isinstance(data.get(key), str):
            return data[key]
    devices = data.get("devices") or data.get("machine")
    if isinstance(devices, Mapping):
        named = {k: v.get("name") if isinstance(v, Mapping) else v
                 for k, v in devices.items() if k in MACHINE_KEYS}
        return ", ".join(f"{k}: {v}" for k, v in named.items() if isinstance(v, str | int))
    return ""


#: the entries of a file's ``machine`` / ``devices`` that say where it was measured
MACHINE_KEYS = ("name", "cpu", "cores", "cpu_cores_used", "cuda", "gpu", "device")


def table(section: Section, rows: Sequence[Row]) -> str:
    """The rows as a Markdown table of the section's columns (a dash where a row has no
    value); a column that no row has is an error."""
    if not rows:
        raise PerformanceError(f"{section.name}: no rows to show")
    absent = [c.key for c in section.columns if all(c.key not in row for row in rows)]
    if absent:
        raise PerformanceError(f"{section.name}: no row has {absent}")
    head = "| " + " | ".join(c.header for c in section.columns) + " |"
    rule = "|" + "|".join("---" for _ in section.columns) + "|"
    body = ["| " + " | ".join(c.fmt(row[c.key]) if row.get(c.key) is not None else "–"
                              for c in section.columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def bar_chart(section: Section, rows: Sequence[Row], target: Path) -> None:
    """A horizontal bar chart (log scale) of the section's ``bars`` column, as SVG."""
    from matplotlib.figure import Figure

    shown = [r for r in rows if r.get(section.bars)]
    labels = [" · ".join(str(r.get(k, "")) for k in section.label) for r in shown]
    fig = Figure(figsize=(6.4, 0.35 * len(shown) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(shown)), [r[section.bars] for r in shown], color="tab:blue")
    ax.set_yticks(range(len(shown)), labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("wall time (s, log scale)")
    ax.set_title(section.title, fontsize=10)
    fig.savefig(target)


def render(folder: Path = BASELINES, figures: Path | None = None) -> str:
    """The page's Markdown; with ``figures``, its bar charts are written there."""
    parts = ["# Performance", "",
             "Every number on this page is read from a JSON file of `benchmarks/baselines/`, "
             "named by what was measured and where, when the book is built; the script that "
             "wrote it is named with each table. Timings depend on the machine and on what "
             "else ran on it: read them as orders of magnitude and ratios.", ""]
    for section in SECTIONS:
        data = load(folder, section.name)
        rows = section.rows(data)
        where_ = machine(data)
        parts += [f"## {section.title}", "", section.text, "",
                  f"`benchmarks/baselines/{section.name}`" + (f" ({where_})" if where_ else ""),
                  "", table(section, rows), ""]
        if section.bars and figures is not None:
            figures.mkdir(parents=True, exist_ok=True)
            svg = figures / (Path(section.name).stem + ".svg")
            bar_chart(section, rows, svg)
            parts += [f"![{section.title}]({figures.name}/{svg.name})", ""]
    return "\n".join(parts)


def write_page(src: Path, folder: Path = BASELINES) -> Path:
    """Write ``performance.md`` and its figures into the Sphinx source folder ``src``."""
    page = src / PAGE
    page.write_text(render(folder, src / FIGURES), encoding="utf-8")
    return page
