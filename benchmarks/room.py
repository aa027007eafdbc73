"""2-D benchmark: the crowd leaving a room (mw.Room) and the two bars (mw.TwoBars), wall time
to a certified tolerance.

Cases
  room-101      101 × 101 nodes, 100 time steps, to tol 1e-6 (NumPy + SuperLU on one core;
                torch matrix-free Jacobi-BiCGStab on the CPU and, with --device cuda, the GPU)
  batch-16      16 rooms (4 door widths × 4 congestion strengths) in one batch, 101 × 101 × 100
                (the smallest batch solved in mixed precision by default; --device only)
  batch-64      64 rooms (8 door widths × 8 congestion strengths) in one batch, 101 × 101 × 100
                (torch on --device only)
  room-201      201 × 201 nodes, 200 time steps (torch on --device only)
  two-bars      mw.TwoBars() at 101 × 101 × 100, NumPy ILU: the fixed point alone
                (Anderson, ``newton=False``, the baseline) against Newton–Krylov on the
                attendance pair (the default); the table gives the time ratio to the baseline
  two-bars-hard the same for a steeper payoff with spill-over (eps=0.02, spill=0.5)
  two-bars-easy the same for a flatter payoff (eps=0.2)

Models: ``--models quadratic,congestion`` solves each room case once per Hamiltonian
(:data:`MODELS`: ½|p|² (the default), |p|^1.5/1.5, |p|³/3, congestion |p|²/(2(1 + m)^0.5) and
a user's isotropic model written as a user writes it); the table's ``× quad`` column gives
the time of a row against the quadratic row of the same case, target and run, measured in
the same process, ``×/it`` the same per iteration and ``cpu ×`` the ratio of the process's CPU
time (what the load of a shared machine changes least). ``--batch N`` adds the case
``batch-N``: N = k² rooms (k door widths × k congestion strengths) in one batch at
101 × 101 × 100 (torch on --device only).

After the two-bars case, one dense finite-difference Jacobian of the best-response map
(2 nt products, what each step of a dense Newton would cost) is timed, against the whole
Newton–Krylov solve.

BRs: the best responses evaluated (the fixed point's iterations and the evaluations inexact
Picard made again at a finer accuracy; Newton: its steps' line searches, certificates and
finite-difference products, each with the HJB sweep seeded by the last best response).
``--max-iter`` caps the iterations of every case (Newton's steps for Newton; the table then
gives the time per iteration too, and ``converged`` says whether the cap was hit);
``--nx``/``--nt`` scale every case down for a quick local run; ``--krylov chunks`` runs the
fused CUDA BiCGStab in chunks of three launches an iteration instead of one launch a solve.
``--repeat N`` solves each case N times in one process (the first solve in a process pays
the device's first use: CUDA context, loading the compiled kernels; the table's ``run``
column counts them). ``--tail K1,K2`` follows each batch case by the K rooms that took the
most iterations in its last run, solved as a batch of their own (cases ``batch-64-tailK``):
an iteration's cost once only they iterate, against the whole batch's (whose rows record
every room's iteration count and every iteration's seconds). ``--narrow-fused``: a batch on
the fused CUDA path evaluates only the rooms still iterating once a quarter have settled
(the default elsewhere). ``--precision float64``: the fused CUDA BiCGStab iterates in
float64 instead of float32 inside float64 Newton updates and refinement rounds (mixed, the
default for batches; the problems and the results are float64 either way).
``--preconditioner jacobi``: the one-launch solves precondition by the inverse diagonal
instead of the two-term Neumann series (:data:`.fused_krylov.NEUMANN`). ``--mixing M``: the
2-D default Anderson mixing (:func:`mfgwork.solve2d.default_iteration`) with β = M (on
NumPy at 101², congestion 4: 44 iterations with β = 0.5, 34 with 0.3, 32 with 0.2; at
congestion 1, 18, 20 and 21). ``--one-core``
runs the process on one CPU core with one thread (OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 and
the BLAS threads set before NumPy is imported: the script restarts itself; CPU affinity
pinned to one core).

    python benchmarks/room.py [--device cuda] [--cases room-101,batch-64] [--one-core]
                              [--models quadratic,congestion] [--batch 64]
                              [--krylov one-launch|chunks] [--repeat N] [--tail 16,4,1]
                              [--narrow-fused] [--precision mixed|float64]
                              [--preconditioner neumann|jacobi] [--mixing M]
                              [--out F.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS",
                                 "OPENBLAS_NUM_THREADS")}
if "--one-core" in sys.argv[1:] and any(os.environ.get(k) != v for k, v in ONE_THREAD.items()):
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ONE_THREAD})

import numpy as np  # noqa: E402  (after the thread settings above)

import mfgwork as mw  # noqa: E402
from mfgwork import solve2d  # noqa: E402
from mfgwork.core.storage import provenance  # noqa: E402
from mfgwork.numerics.fdm2d import equilibrium, fused_krylov, fused_steps  # noqa: E402

CASES = {"room-101": (101, 100, 1), "batch-16": (101, 100, 16),
         "batch-64": (101, 100, 64), "room-201": (201, 200, 1),
         "two-bars": (101, 100, 1), "two-bars-hard": (101, 100, 1),
         "two-bars-easy": (101, 100, 1)}
#: The problem of each single case (the batch builds its rooms with :func:`rooms`).
PROBLEMS = {"room-101": mw.Room, "room-201": mw.Room, "two-bars": mw.TwoBars,
            "two-bars-hard": lambda: mw.TwoBars(eps=0.02, spill=0.5),
            "two-bars-easy": lambda: mw.TwoBars(eps=0.2)}
#: The iterations compared on the two-bars cases: the fixed point first (the baseline).
ITERATIONS = {"fixed-point": mw.Anderson(depth=5, mixing=0.5, newton=False), "newton": None}


@dataclasses.dataclass(frozen=True)
class Relativistic(mw.Hamiltonian):
    """A user's isotropic model, slowed by the crowd: (√(1 + |p|²) − 1) (1 + m₊)^(−a)."""

    a: float = 0.3
    isotropic = True
    depends_on_m = True

    def value(self, x, p, m, xp):
        return (xp.sqrt(1.0 + p * p) - 1.0) * (1.0 + xp.maximum(m, 0.0 * m)) ** (-self.a)


#: The Hamiltonians of ``--models`` (the rooms' H; the quadratic row is the reference).
MODELS = {"quadratic": mw.Quadratic(), "power-1.5": mw.Power(1.5), "power-3": mw.Power(3.0),
          "congestion": mw.Congestion(1.0, 0.5), "user": Relativistic()}


def rooms(n: int, hamiltonian: mw.Hamiltonian | None = None) -> list[mw.Room]:
    """n = k² rooms: door widths 0.05..0.2 × congestion 0..4, each with ``hamiltonian``."""
    k = round(n**0.5)
    return [mw.Room(door_widths=(float(w), float(w)), congestion=float(c),
                    hamiltonian=hamiltonian)
            for w in np.linspace(0.05, 0.2, k) for c in np.linspace(0.0, 4.0, k)]


def measure(case: str, target: tuple[str, str, str | None, str | None], nx: int, nt: int,
            batch: int, tol: float, max_iter: int, iteration: str = "default",
            problems: list[mw.Room] | None = None, mixing: float | None = None,
            model: str = "quadratic") -> dict:
    """One solve of ``case`` (``problems``: the batch's rooms instead of :func:`rooms`;
    ``mixing``: the default iteration's β instead of the library's; ``model``: the rooms'
    Hamiltonian, a key of :data:`MODELS`)."""
    backend, device, dtype, solver = target
    be = mw.get_backend(backend, device, dtype)
    scheme = ITERATIONS.get(iteration)
    if scheme is None and mixing is not None:
        scheme = dataclasses.replace(solve2d.default_iteration(be.dtype), mixing=mixing)
    start, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        if batch == 1 and problems is None:
            problem = (PROBLEMS[case]() if case.startswith("two-bars")
                       else PROBLEMS[case](hamiltonian=MODELS[model]))
            out = [mw.solve_2d(problem, nx=nx, nt=nt, backend=be, tol=tol,
                               max_iter=max_iter, solver=solver, progress=False,
                               iteration=scheme)]
        else:
            out = mw.solve_2d_batch(problems or rooms(batch, MODELS[model]), nx=nx, nt=nt,
                                    backend=be,
                                    tol=tol, max_iter=max_iter, solver=solver, progress=False,
                                    iteration=scheme)
    be.synchronize()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    r = out[0]
    its = max(o.iterations for o in out)
    phases = zip(*(r.history[f"time_{p}"] for p in ("hjb", "fp", "coupling")), strict=True)
    newton = r.extra["coupling_newton"]
    fixed = len(r.history["residual"]) - (newton["steps"] if newton else 0)
    return {"case": case, "model": model, "backend": backend, "device": device,
            "dtype": be.dtype,
            "solver": r.extra["solver"], "iteration": iteration, "nx": nx, "nt": nt,
            "batch": batch, "tol": tol, "wall_s": wall, "cpu_s": cpu,
            "per_iteration_s": wall / max(its, 1),
            "iterations": its,
            "best_responses": fixed + r.extra["reevaluations"] + (newton["evaluations"]
                                                                   if newton else 0),
            "coupling_newton": newton,
            "converged": all(o.converged for o in out),
            "residual": max(o.residual for o in out),
            "mass_error": max(o.mass_error for o in out),
            "newton_iterations": r.extra["newton_iterations"],
            "krylov_iterations": r.extra["krylov_iterations"],
            "factorizations": r.extra["factorizations"],
            "timings": r.timings, "load_average": os.getloadavg(),
            # per problem, the iteration at which it settled; per iteration, its seconds
            "iterations_per_problem": [o.iterations for o in out],
            "iteration_s": [sum(t) for t in phases]}


def dense_jacobian(case: str, nx: int, nt: int) -> dict:
    """The wall time of one dense Jacobian of R(z) = Φ(z) − z by finite differences (the
    products of :class:`~mfgwork.numerics.coupling_newton.BestResponses` along every
    unit direction) at the first iterate of the solve (agents who do not move)."""
    from mfgwork.numerics.coupling_newton import BestResponses
    from mfgwork.numerics.fdm2d import equilibrium as eq
    from mfgwork.numerics.iteration import evaluator

    be = mw.get_backend("numpy")
    setup = eq.build(PROBLEMS[case](), nx, nx, nt, be, "ilu")
    evaluate = evaluator(setup.coupling, setup.scheme.solve_hjb, setup.scheme.solve_fp,
                          setup.U_T, setup.m0, be)
    newton = BestResponses(evaluate, setup.coupling.project, be)
    point = newton.respond(setup.coupling.state(np.stack([setup.m0] * (nt + 1))), None)
    start = time.perf_counter()
    for e in np.eye(point.z.size):
        newton.product(point, e.reshape(point.z.shape))
    wall = time.perf_counter() - start
    return {"case": case, "dense_jacobian_s": wall, "products": point.z.size,
            "s_per_product": wall / point.z.size, "load_average": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="a torch device besides the CPU")
    parser.add_argument("--cases", default=None, help="comma-separated (default: all that run "
                        "on the chosen devices, or only batch-N with --batch)")
    parser.add_argument("--models", default="quadratic",
                        help="comma-separated Hamiltonians of the room cases (" +
                        ", ".join(MODELS) + "); the table gives each row's time against the "
                        "quadratic row of its case, target and run")
    parser.add_argument("--batch", type=int, default=None,
                        help="add the case batch-N: N = k² rooms at 101 x 101 x 100 (--device)")
    parser.add_argument("--cpu-targets", default="numpy,numpy-direct,torch-cpu")
    parser.add_argument("--nx", type=int, default=None)
    parser.add_argument("--nt", type=int, default=None)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--out", default="benchmarks/results/room.json")
    parser.add_argument("--one-core", action="store_true",
                        help="one CPU core, one thread (see the module docstring)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="solve each case this many times in the process: the first "
                        "pays the process's first use of the device (CUDA context, loading "
                        "the compiled kernels), the later ones are the warm solves")
    parser.add_argument("--tail", default="",
                        help="comma-separated K: after a batch case, the K rooms that took the "
                        "most iterations solved as a batch of their own (--repeat times): "
                        "what an iteration costs once only the slowest rooms still iterate")
    parser.add_argument("--narrow-fused", action="store_true",
                        help="a batch on the fused CUDA path narrows its evaluations to the "
                        "rooms still iterating, as batches elsewhere do (off by default there: "
                        "each new batch size records its own graphs)")
    parser.add_argument("--krylov", choices=("one-launch", "chunks"), default="one-launch",
                        help="how the fused CUDA BiCGStab runs: each solve in one launch, or "
                        "in chunks of three launches an iteration (the earlier way)")
    parser.add_argument("--precision", choices=("mixed", "float64"), default="mixed",
                        help="the fused CUDA BiCGStab's iterations for float64 problems: "
                        "float32 inside float64 Newton updates and refinement rounds (the "
                        "default), or float64")
    parser.add_argument("--preconditioner", choices=("neumann", "jacobi"), default="neumann",
                        help="the one-launch solves' preconditioner: the two-term Neumann "
                        "series (the default) or the inverse diagonal")
    parser.add_argument("--mixing", type=float, default=None,
                        help="the 2-D default Anderson mixing's β (default: the library's)")
    args = parser.parse_args(argv)
    fused_krylov.ONE_LAUNCH = args.krylov == "one-launch"
    fused_krylov.NEUMANN = args.preconditioner == "neumann"
    fused_steps.MIXED = args.precision == "mixed"
    equilibrium.NARROW_FUSED = args.narrow_fused
    if args.one_core and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cpu = {"numpy": ("numpy", "cpu", None, "ilu"), "numpy-direct": ("numpy", "cpu", None, "direct"),
           "numpy-krylov": ("numpy", "cpu", None, "krylov"),
           "torch-cpu": ("torch", "cpu", "float64", None)}
    # the quadratic first: the others' ratios are to its solve of the same run
    models = sorted(args.models.split(","), key=lambda m: m != "quadratic")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(MODELS)}")
    table = dict(CASES)
    cases = args.cases.split(",") if args.cases else ([] if args.batch else list(CASES))
    if args.batch:
        table[f"batch-{args.batch}"] = (101, 100, args.batch)
        cases.append(f"batch-{args.batch}")
    plan = []
    for case in cases:
        nx, nt, batch = table[case]
        nx, nt = args.nx or nx, args.nt or nt
        if case.startswith("two-bars"):
            plan += [(case, cpu["numpy"], nx, nt, batch, it, "quadratic") for it in ITERATIONS]
            continue
        targets = [cpu[t] for t in args.cpu_targets.split(",") if t] if case == "room-101" \
            else []
        if args.device:
            targets.append(("torch", args.device, None, None))
        for t in targets:
            plan.append([(case, t, nx, nt, batch, "default", m) for m in models])
            if batch > 1:
                plan += [[(f"{case}-tail{k}", t, nx, nt, int(k), "default", m)
                          for m in models] for k in args.tail.split(",") if k]
    # each run of a case and target solves every model in turn (the ratios compare solves
    # made close together in time)
    runs = [(item, i + 1) for group in plan for i in range(args.repeat)
            for item in (group if isinstance(group, list) else [group])]
    rows = []
    print(f"{'case':13} {'model':10} {'target':28} {'iteration':11} {'grid':>14} {'batch':>5} "
          f"{'run':>3} {'its':>4} {'BRs':>4} {'wall s':>8} {'ratio':>6} {'× quad':>6} "
          f"{'×/it':>6} {'cpu ×':>6} {'residual':>9} {'mass err':>9} conv")
    for (case, target, nx, nt, batch, iteration, model), run in runs:
        problems = None
        if "-tail" in case:   # the slowest rooms of the batch case's last run
            full = next(r for r in reversed(rows) if r["case"] == case.split("-tail")[0]
                        and r["model"] == model)
            slowest = np.argsort(full["iterations_per_problem"], kind="stable")[::-1]
            every = rooms(full["batch"], MODELS[model])
            problems = [every[i] for i in slowest[:batch]]
        row = measure(case, target, nx, nt, batch, args.tol, args.max_iter, iteration,
                      problems, args.mixing, model)
        row["run_in_process"] = run
        if case.startswith("two-bars"):   # against the fixed point's run of the same number
            base = next(r for r in rows if r["case"] == case and r["run_in_process"] == run
                        and r["iteration"] == "fixed-point") if iteration == "newton" else row
            row["time_ratio_to_fixed_point"] = row["wall_s"] / base["wall_s"]
        name = f"{row['backend']}-{row['device']}-{row['dtype']}-{row['solver']}"
        quad = next((r for r in rows if r["case"] == case and r["model"] == "quadratic"
                     and r["target"] == name and r["run_in_process"] == run), None)
        quad = row if model == "quadratic" else quad
        if quad is not None:
            row["time_ratio_to_quadratic"] = row["wall_s"] / quad["wall_s"]
            row["per_iteration_ratio_to_quadratic"] = (row["per_iteration_s"]
                                                       / quad["per_iteration_s"])
            row["cpu_ratio_to_quadratic"] = row["cpu_s"] / quad["cpu_s"]
        row["target"] = name
        rows.append(row)
        ratio = row.get("time_ratio_to_fixed_point")
        print(f"{case:13} {model:10} {name:28} {iteration:11} {f'{nx}x{nx}x{nt}':>14} "
              f"{batch:>5} {row['run_in_process']:>3} {row['iterations']:>4} "
              f"{row['best_responses']:>4} {row['wall_s']:8.2f} "
              f"{'' if ratio is None else f'{ratio:.2f}':>6} "
              f"{_ratio(row, 'time_ratio_to_quadratic'):>6} "
              f"{_ratio(row, 'per_iteration_ratio_to_quadratic'):>6} "
              f"{_ratio(row, 'cpu_ratio_to_quadratic'):>6} {row['residual']:9.2e} "
              f"{row['mass_error']:9.1e} {row['converged']}", flush=True)
    dense = []
    for (case, _, nx, nt, _, iteration, _), _ in runs:
        if case == "two-bars" and iteration == "newton" and not any(
                d["case"] == case for d in dense):
            dense.append(dense_jacobian(case, nx, nt))
            solve = next(r for r in rows if r["case"] == case and r["iteration"] == "newton")
            print(f"{case}: one dense finite-difference Jacobian ({dense[-1]['products']} "
                  f"products, {dense[-1]['s_per_product']:.3f} s each): "
                  f"{dense[-1]['dense_jacobian_s']:.1f} s, against {solve['wall_s']:.1f} s "
                  "for the whole Newton-Krylov solve", flush=True)
    print(f"load average (1, 5, 15 min): {os.getloadavg()}")
    devices = {"cpu": platform.processor() or platform.machine(),
               "cpu_cores_used": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else None}
    if args.device:
        devices[args.device] = mw.device_info(args.device).get("name")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "dense_jacobian": dense, "devices": devices,
                               "krylov": args.krylov, "narrow_fused": args.narrow_fused,
                               "precision": args.precision,
                               "preconditioner": args.preconditioner,
                               "mixing": args.mixing, "models": models,
                               "provenance": provenance()}, indent=1,
                              default=str))
    print(f"wrote {out}; devices: {devices}")
    return 0


def _ratio(row: dict, key: str) -> str:
    return f"{row[key]:.2f}" if key in row else ""


if __name__ == "__main__":
    sys.exit(main())
