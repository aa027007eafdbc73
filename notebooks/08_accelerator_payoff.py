# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # When does the accelerator pay off?
#
# A GPU (CUDA) or Apple's MPS has thousands of arithmetic units, yet a single
# finite-difference solve of the Santa Fe Bar runs faster on one CPU core. This notebook
# shows where the accelerator starts to win, from measurements:
#
# - the **crossover table shipped with the package** (`mw.crossover_table()`, written by
#   `benchmarks/crossover.py` on the machine it names), which `device="auto"` uses;
# - a **fresh small measurement on this machine** (`mw.crossover.measure_table`).
#
# Both time two kinds of work against their size: a **batch of B finite-difference problems**
# (a parameter grid of thresholds × σ, solved by `mw.solve` of a list: on the CPU a loop of
# compiled solves, on the accelerator one batched computation) and **one particle
# Fokker–Planck solve with N particles**.
#
# ```bash
# python -m mfgwork run notebooks/08_accelerator_payoff.ipynb -p nx 101 -p nt 101 -o runs/payoff
# ```

# %% nbmake={"mock": {"batch_sizes": [1, 2], "emulation_batch_sizes": [1], "emulation_particle_counts": [1000], "nt": 20, "nx": 21, "particle_counts": [1000]}} tags=["parameters"]
batch_sizes = [1, 4, 16]  # problems per batch (fresh measurement)
particle_counts = [1000, 10000, 100000]  # particles (fresh measurement)
nx = 41  # grid points of the fresh FDM measurement
nt = 40  # time steps of the fresh FDM measurement
iterations = 2  # Picard iterations per FDM solve (fixed, so every size does the same work)
# MPS emulation (torch on this CPU, float32), e.g. [1, 4] and [1000, 10000]: off by default
# ([] skips it), since compiling its torch steps takes about a minute on a CPU
emulation_batch_sizes = []  # MPS emulation batch sizes
emulation_particle_counts = []  # MPS emulation particle counts
repeats = 1  # timed runs per size (after one warm-up run); the median is kept
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import mfgwork as mw
from mfgwork.core.errors import MAX_COUNT, check_int, check_list
from mfgwork.numerics.particles.memory import check_fits
from mfgwork.workflows.runs import solve_options

# %matplotlib inline

batch_sizes = check_list("batch_sizes", batch_sizes, check_int, low=1)
particle_counts = check_list("particle_counts", particle_counts, check_int, low=1,
                             high=MAX_COUNT)
iterations = check_int("iterations", iterations, low=1)
solve_options(nx=nx, nt=nt, method="fdm", backend="numpy", device="cpu", tol=1e-8,
              max_iter=iterations)
emulation_batch_sizes = check_list("emulation_batch_sizes", emulation_batch_sizes, check_int,
                                   min_len=0, low=1)
emulation_particle_counts = check_list("emulation_particle_counts", emulation_particle_counts,
                                       check_int, min_len=0, low=1, high=MAX_COUNT)
repeats = check_int("repeats", repeats, low=1)
for name, counts in (("particle_counts", particle_counts),
                     ("emulation_particle_counts", emulation_particle_counts)):
    try:   # the particles and the grid fit in memory
        check_fits(max(counts, default=1), nx, nt, mw.get_backend("numpy"))
    except mw.ParameterError as exc:
        raise mw.ParameterError(f"{name}={counts} is invalid: {exc}") from None
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# the table shipped with the package
shipped = mw.crossover_table()
machine = shipped["cpu"]["machine"]
print(f"shipped table: measured {shipped['measured_at']} on {machine['host']} "
      f"({machine['name']}, {machine['cores']} cores), cases {shipped['cases']}")
for kind, entry in shipped["accelerators"].items():
    print(f"  {kind:14s} measured: {entry['measured']}  {entry.get('note', '')}")
print("crossovers (B*, N*):", mw.crossover.crossovers(shipped))

# %% [markdown]
# ## A fresh measurement here
#
# The same two experiments, small enough for a laptop: the CPU side, every accelerator
# present (CUDA, MPS), and, with `emulation_batch_sizes` and `emulation_particle_counts`
# given (empty by default), MPS emulation (torch on this CPU in float32 under the MPS rules),
# which stands in for a device when there is none: it is not an accelerator, but it runs the
# accelerator's code path, one small tensor operation after another. The fresh FDM case is
# the notebook's `nx` × `nt` grid with `iterations` Picard iterations, and the particles move
# on the same grid, so with the small defaults the fresh curves sit below the table's.

# %%
fresh = mw.crossover.measure_table(
    batch_sizes, particle_counts, nx=nx, nt=nt, iterations=iterations,
    particle_nx=nx, particle_nt=nt, emulation_batch_sizes=emulation_batch_sizes,
    emulation_particle_sizes=emulation_particle_counts, repeats=repeats, progress=print)
rows_shipped = mw.crossover.table_frame(shipped, "shipped table")
rows_fresh = mw.crossover.table_frame(fresh, "measured here")
print("crossovers here (B*, N*):", mw.crossover.crossovers(fresh))
for r in rows_fresh:
    print(f"{r['target']:14s} {r['method']:10s} {r['size']:>9d} {r['seconds']:9.4f} s")

# %%
fig_wall_time = mw.crossover.plot_crossover(rows_shipped + rows_fresh)
fig_wall_time

# %% [markdown]
# ## Reading the curves
#
# **Sequential time steps.** An implicit finite-difference solve marches backward in time for
# the value function and forward for the density: step n needs step n + 1 (or n − 1). Each
# step is a Newton iteration or two on a tridiagonal system of a few hundred unknowns. On the
# CPU the compiled loop does a whole time step in a few microseconds. On a GPU the same step is
# a chain of small kernels (the generic torch path launches about a hundred per Newton
# iteration, `benchmarks/torch_path.py` counts them), and each launch costs several
# microseconds whatever its size. A single solve is therefore **latency-bound**: the device
# waits on the host, and more arithmetic units do not help.
#
# **Latency versus throughput.** An accelerator is built for throughput: many independent
# operations at once. The time of one kernel is almost the same for 200 numbers as for
# 200 000, so the wall time of a batched solve stays nearly flat as B grows, while the CPU
# loop grows linearly with B (the curve of slope one on the log-log plot).
#
# **Batching.** `mw.solve` of a list puts B problems on a leading axis: every kernel launch now
# serves the whole batch, so the cost per problem falls like 1/B until the device is full.
# The crossover B* is where the flat accelerator curve meets the rising CPU line. Particles
# are independent of each other by nature: one time step moves all N of them, so the
# accelerator wins as soon as N is large enough to hide the launch cost, at N*.
#
# **Where the crossover lies.** It depends on the machine (the CPU's speed per core, the
# device's launch latency), on the grid (a finer grid gives the CPU more work per step but
# the GPU hardly any more time), and on the code path (fused kernels or CUDA graphs cut the
# launch cost; MPS emulation, on the CPU, has the launch cost without the throughput, so it
# never wins). That is why `device="auto"` reads measured crossovers rather than a rule of
# thumb, and falls back to a stated rule for a device the table does not hold:

# %%
for size in (1, 16, 256):
    batch = [mw.SantaFeBar(threshold=0.3 + 0.5 * i / max(size - 1, 1)) for i in range(size)]
    print(f"batch of {size:4d}:", mw.placement(batch, nx=nx, nt=nt))
for n in (10_000, 1_000_000):
    print(f"{n:>9d} particles:", mw.placement(mw.SantaFeBar(), "particles", n_particles=n))

# %% [markdown]
# ## Run folder
#
# `measured_here.json`/`.csv` hold the fresh times, `shipped.json`/`.csv` the table's, and
# `metrics.json` both tables' crossovers and the machines.

# %%
if out_dir:
    parameters = {"batch_sizes": batch_sizes, "particle_counts": particle_counts, "nx": nx,
                  "nt": nt, "iterations": iterations, "repeats": repeats,
                  "emulation_batch_sizes": emulation_batch_sizes,
                  "emulation_particle_counts": emulation_particle_counts}
    metrics = {"crossovers_shipped": mw.crossover.crossovers(shipped),
               "crossovers_here": mw.crossover.crossovers(fresh),
               "machine_shipped": shipped["cpu"]["machine"],
               "machine_here": fresh["cpu"]["machine"],
               "table_here": fresh}
    folder = mw.save_run(out_dir, parameters=parameters, metrics=metrics,
                         figures={"wall_time": fig_wall_time},
                         tables={"measured_here": rows_fresh, "shipped": rows_shipped})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. Run the notebook with `-p nx 201 -p nt 201` and the same batch sizes. Does B* move up or
#    down, and why (count the CPU's work per time step and the accelerator's launches)?
# 2. Plot the time **per problem** (seconds / B) from `rows_fresh`. Where does the CPU's
#    curve flatten, and where does the accelerator's stop falling?
# 3. On a machine with a GPU, run `python benchmarks/crossover.py --out my_table.json` and
#    compare `mw.placement(batch, table=mw.crossover_table("my_table.json"))` with the
#    shipped table's answer for the same batch.
