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
# # Santa Fe Bar on CPU and accelerator: wall time and relative error
#
# One question, asked of every machine: *how long does one equilibrium of the Santa Fe Bar
# take, and how far is the answer from the float64 reference?* The same problem is solved by
# the same code on
#
# - **NumPy, CPU, float64**: the reference row;
# - **PyTorch, CPU, float32 under the MPS rules** (`mw.mps_emulation()`): what Apple's MPS
#   computes, since MPS has no float64, and the way it computes it (no host round trip inside
#   the time loop);
# - **the accelerator** when one is present: CUDA (float32 and float64), else MPS (float32), else
#   a note says there is none.
#
# ```bash
# python -m mfgwork run notebooks/02_cpu_vs_accelerator.ipynb -p nx 101 -p nt 101 -o runs/cpu_vs_accelerator
# ```
#
# ## What is measured
#
# **Wall time** is the time of one call to `mw.solve`, from the parameters to the converged
# $U$, $M$ and $A$: all iterations, each one best response (an HJB sweep backward and a
# Fokker–Planck sweep forward). A first solve of one iteration runs before it on every target
# (`warmup`), so that loading libraries, compiling kernels and starting the device are not
# counted. The table
# also gives the iterations and the time per iteration: rows that stop after a different
# number of iterations are compared per iteration too.
#
# **Relative error** of a quantity $X \in \{U, M, A\}$ against the reference $X_{ref}$ is
#
# $$
# e_X = \frac{\max_{n,i} |X^n_i - X^n_{ref,i}|}{\max_{n,i} |X^n_{ref,i}|},
# $$
#
# the largest difference over the whole $(t, \theta)$ grid, scaled by the size of the
# reference ($A$ has only the time index). Every row solves the same discrete equations on the
# same grid, so $e_X$ measures arithmetic and stopping, **not** the discretization error: that
# one is the same for every row, and far larger (first order in $h$, see the primer).
#
# **float32 against float64.** A float64 number carries about 16 significant digits (unit
# round-off $2^{-53} \approx 1.1 \times 10^{-16}$), a float32 number about 7
# ($2^{-24} \approx 6 \times 10^{-8}$). Every time step rounds, and the rounding errors of the
# Newton solves and of the $n_t$ steps add up, so a float32 solution cannot be trusted much below
# a relative $10^{-6}$, and its fixed-point residual not below $3 \times 10^{-4}$. Two
# consequences. The stopping tolerance `tol` (every row stops when one best response to its
# solution reproduces it to a relative residual below `tol`) must stay above what the dtype
# resolves: `mw.solve` raises a smaller `tol` to the floor of the dtype,
# $100\,\epsilon$ in float64 and $3 \times 10^{-4}$ in float32 (where the rounding of the
# attendance path is amplified by the steep payoff in the residual); the `tol` column of the
# table gives the tolerance each row iterated to. And float32 rows are expected to differ from
# the reference by about $10^{-6}$–$10^{-5}$, while float64 rows on another backend or device
# agree with it to round-off, $10^{-13}$ or below (sums taken in another order).
# %% nbmake={"mock": {"nt": 10, "nx": 11}} tags=["parameters"]
threshold = 0.6  # A*
sigma = 0.5  # noise on the preference
nx = 52  # grid points in theta (52 x 52 is the reference benchmark grid)
nt = 52  # time steps
tol = 1e-5  # the tolerance of every row (raised to 3e-4, the residual floor, in float32)
max_iter = 200  # at most this many iterations (each one best response)
accelerator = "auto"  # "auto" (CUDA, else MPS), "cuda", "mps" or "none"
warmup = True  # time a second solve, after a one-iteration warm-up
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import mfgwork as mw
from mfgwork import plots, runs, studies

# %matplotlib inline

problem = mw.SantaFeBar(threshold=threshold, sigma=sigma)
options = runs.solve_options(nx=nx, nt=nt, method="fdm", backend="numpy", device="cpu",
                             tol=tol, max_iter=max_iter)
targets, note = studies.comparison_targets(accelerator)
print(note)
[t["label"] for t in targets]

# %% [markdown]
# ## Solve on every target
#
# Each target sets its own backend, device and dtype; all share the grid, `tol` and
# `max_iter`. The first row is the reference, so its errors are 0 by definition.

# %%
# each target sets its own backend, device and dtype
table, results = studies.compare_backends(problem, targets, warmup=warmup, progress=False,
                                          **options)
print(studies.format_table(table, ["label", "wall_time_s", "iterations", "time_per_iteration_s",
                                   "rel_error_U", "rel_error_M", "rel_error_A", "tol",
                                   "converged"]))

# %% [markdown]
# **Reading the table.** Every row must say `converged`; a row that did not converge is not
# comparable. The float32 row differs from the reference by a few $10^{-6}$: the round-off of
# float32 carried through the time steps and the iteration, plus stopping at a slightly
# different iterate. The mass error of float32 is of the same order, for the same reason; in
# float64 it is at round-off.
#
# ## The figure
#
# Left, the wall time of each row on a logarithmic axis (the label on each bar is the time in
# seconds); right, the relative errors of $U$, $M$ and $A$ of each row, also logarithmic. The
# reference row has no error bars (its errors are zero), float64 rows sit at $10^{-13}$ or
# below, float32 rows near $10^{-6}$. Read the two panels together: a row is only worth its speed if its
# error is below what the question needs. For the attendance of the Santa Fe Bar, the
# discretization error of the 52 × 52 grid is a few $10^{-2}$ (about $4.5 \times 10^{-2}$
# relative against a 401-point solution, halving with $h$), four orders of magnitude above the
# float32 error: float32 is ample.
# %%
fig_comparison = plots.plot_backend_comparison(table)
fig_comparison

# %% [markdown]
# ## Why one solve is fastest on one CPU core
#
# A finite-difference solve is a **sequential chain of small problems**. The HJB sweep goes
# backward in time: step $n$ needs $u^{n+1}$, and each step is a few Newton iterations, each a
# tridiagonal solve of $n_x$ unknowns; the Fokker–Planck sweep then goes forward, step $n+1$
# needing $m^n$. With $n_x = n_t = 52$ one best response is about a hundred time steps and a
# few hundred tridiagonal solves of 52 unknowns, one after the other.
#
# - On the **CPU**, the NumPy backend runs these loops compiled (Numba), each tridiagonal
#   system solved by the Thomas algorithm: a step costs microseconds, and the data stay in the
#   core's cache.
#   One core is all the problem can use, and more cores would not help.
# - On a **GPU**, each operation of a step is a kernel launch that costs a few microseconds
#   whatever its size, and a step needs tens of them (residual, Jacobian bands, the cyclic
#   reduction of the tridiagonal solve, the update). The GPU's thousands of threads have 52
#   numbers to work on: it waits on launches, not on arithmetic. CUDA graphs (the sweep
#   recorded once and replayed) cut the launch cost, but a single solve stays slower than on
#   the CPU.
# - **PyTorch on the CPU** under the MPS rules shows the same effect without a GPU: every
#   tensor operation has a fixed dispatch cost, and the time loop avoids host round trips by
#   doing a fixed number of Newton iterations per step, checked once after the sweep.
#
# The accelerator pays off when there is enough independent work per step: **many problems at
# once** (a parameter grid solved as a batch with `mw.solve` of a list, one problem per row of a
# leading batch axis) and **particles** (a million independent agents per time step, see
# `mw.ParticleFP`). Placement is measured, not assumed: `device="auto"` chooses from such
# measurements.

# %% [markdown]
# ## Run folder
#
# `comparison.json` / `comparison.csv` hold the table (collect them from a GPU run), the
# reference solution is in `arrays.npz`, devices and versions in `metrics.json`.

# %%
devices = {row["device"]: mw.device_info(row["device"]) for row in table}
if out_dir:
    parameters = options | {"accelerator": accelerator}
    folder = mw.save_run(out_dir, results[0], parameters=parameters,
                         metrics={"note": note, "comparison": table, "devices": devices},
                         figures={"backend_comparison": fig_comparison},
                         tables={"comparison": table})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **Round-off, not discretization.** Run this notebook with `nx = nt = 101` and then 201.
#    Does the float32 error $e_U$ change with the grid? Compare it with the discretization
#    error: solve in float64 at `nx = nt = 52` and at 201, and measure the largest difference
#    of the attendance paths $A(t)$ (interpolate the coarse one onto the fine times with
#    `numpy.interp`).
# 2. **Where float32 stops.** Lower `tol` to $10^{-7}$, then $10^{-9}$. Which rows iterate
#    longer, and what does the `tol` column of the float32 row say? Do the float32 errors get
#    smaller? Which `tol` would you choose for a study computed in float32?
# 3. **Per iteration.** From the table, compute the time per time step of one sweep
#    (`time_per_iteration_s` divided by $2 n_t$) for each row. How many microseconds is a
#    time step on the CPU, and, if you have one, on the accelerator? What does that say about
#    kernel launch costs?
