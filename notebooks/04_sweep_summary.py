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
# # Sweep summary: the Santa Fe Bar over a parameter grid
#
# Reads a sweep folder written by `python -m mfgwork sweep` (or `mw.sweep(...)`): its index of
# runs (status, parameters, headline metrics) and the arrays of each finished run, loaded with
# `mw.load` (NPZ + JSON, no pickle). It draws the mean attendance and the time overcrowded
# against the threshold $A^*$ for each noise level $\sigma$, the attendance paths $A(t)$ on a
# grid, and the time per run on each device.
#
# A sweep, then this summary as a run folder:
#
# ```bash
# python -m mfgwork sweep notebooks/01_santa_fe_bar.ipynb --grid grid.yaml -p nx 101 -p nt 101 -o sweeps/santa_fe
# python -m mfgwork run notebooks/04_sweep_summary.ipynb -p sweep_dir sweeps/santa_fe -o runs/sweep_summary
# ```
#
# with for instance `grid.yaml`:
#
# ```yaml
# threshold: {linspace: [0.3, 0.9, 13]}
# sigma: [0.3, 0.5, 0.8]
# device: [cpu, auto]
# ```
#
# Left empty, `sweep_dir` runs a small demonstration sweep (the thresholds `demo_thresholds` ×
# 2 noise levels on a `demo_nx` × `demo_nx` grid) into `sweeps/demo_41x41_A0.4-0.6-0.8` (named
# by `demo_nx` and `demo_thresholds`) at the top of the repository; run again, it is reused.

# %% nbmake={"mock": {"demo_nx": 21, "demo_thresholds": [0.4, 0.8]}} tags=["parameters"]
# the sweep folder to summarize; "" runs the small demonstration sweep
sweep_dir = ""
# parameter on the horizontal axis, and the one that tells the curves apart
x = "threshold"
by = "sigma"
# column that groups the timing bars
group_time = "device"
# the demonstration sweep, used only when sweep_dir is empty: its thresholds (each run with
# the noise levels 0.3 and 0.6) and its grid (nx = nt)
demo_thresholds = [0.4, 0.6, 0.8]
demo_nx = 41
# run folder to write (figures and the index table); "" writes nothing
out_dir = ""

# %% [markdown]
# Check every parameter before any work: a bad value stops here, before the demonstration
# sweep runs. The columns `x`, `by` and `group_time` are those of the sweep (for the
# demonstration: its parameters, the headline metrics and the Santa Fe summary).

# %%
# check the parameters
from pathlib import Path

import mfgwork as mw
from mfgwork import sweep_plots
from mfgwork.core.errors import check_choice, check_int, check_list, check_real
from mfgwork.workflows.sweeps import METRICS

# %matplotlib inline

if not isinstance(sweep_dir, str):
    raise mw.ParameterError(f"sweep_dir={sweep_dir!r} is invalid: must be the path of a sweep "
                            "folder, or \"\" for the demonstration sweep")
demo_thresholds = check_list("demo_thresholds", demo_thresholds, check_real, low=0.0,
                             high=1.0, distinct=True)
demo_nx = check_int("demo_nx", demo_nx, low=3)
if sweep_dir:
    try:
        index = mw.load_sweep(sweep_dir)
    except mw.LoadError as exc:
        raise mw.ParameterError(f"sweep_dir={sweep_dir!r} is invalid: {exc.reason}") from None
    columns = tuple(index.columns)
else:
    columns = ("threshold", "sigma", "nx", "nt", *METRICS, "mean_attendance",
               "max_attendance", "min_attendance", "time_overcrowded", "final_mean_preference")
for name, value in (("x", x), ("by", by), ("group_time", group_time)):
    check_choice(name, value, columns)
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
if not sweep_dir:
    named = "-".join(f"{a:g}" for a in demo_thresholds)
    sweep_dir = Path("..") / "sweeps" / f"demo_{demo_nx}x{demo_nx}_A{named}"
    mw.sweep("01_santa_fe_bar.ipynb",
             {"threshold": demo_thresholds, "sigma": [0.3, 0.6]}, sweep_dir,
             {"nx": demo_nx, "nt": demo_nx}, workers=2)
index = mw.load_sweep(sweep_dir)
index

# %% [markdown]
# ## Mean attendance and time overcrowded
#
# The mean attendance $\langle A \rangle$ (mean of $A(t)$ over the time levels) follows the
# threshold, settling just above it where the payoff vanishes; the time overcrowded is the
# total time with $A(t) > A^*$.

# %%
fig_metrics = sweep_plots.plot_sweep_metrics(index, x=x, by=by)
fig_metrics

# %% [markdown]
# ## Attendance paths
#
# $A(t)$ of each run, one row per noise level (at most six thresholds shown); dashed: $A^*$.

# %%
fig_grid = sweep_plots.plot_attendance_grid(index, rows=by, cols=x)
fig_grid

# %% [markdown]
# ## Time per run
#
# Wall time of each run (kernel start, papermill, the solve, figures and the run folder) next
# to the solve alone, per device: median over the runs, bars from the fastest to the slowest.

# %%
fig_time = sweep_plots.plot_wall_time(index, by=group_time)
fig_time

# %% [markdown]
# ## Failed runs and the run folder
#
# Failed runs keep their error in the index (and in `failed/` of the sweep folder); the
# summary's run folder holds the figures and the index as `index.json` / `index.csv`.

# %%
for row in index.where(status="failed"):
    print(row["run"], "->", row["error"])
figures = {"sweep_metrics": fig_metrics, "attendance_grid": fig_grid, "wall_time": fig_time}
if out_dir:
    folder = mw.save_run(out_dir, parameters={"sweep_dir": str(sweep_dir), "x": x,
                                              "by": by}, figures=figures,
                         tables={"index": index.rows})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **The plateau over a grid.** Sweep `threshold` over `{linspace: [0.3, 0.9, 13]}` and
#    `sigma` over `[0.3, 0.5, 0.8]` at `nx = nt = 101`, summarize it, and plot the mean
#    attendance minus the threshold (from the index) against the threshold. Compare it with
#    $\varepsilon \log(G/(-B))$; why is it a little smaller, and does $\sigma$ matter?
# 2. **Payoffs.** Sweep `good` over `[5, 10, 20]` at a fixed threshold. How do the mean
#    attendance and the time overcrowded change, and why is the bar never overcrowded when
#    $G = -B$?
# 3. **Resuming.** Start a sweep of a dozen runs, interrupt it (Ctrl-C) halfway and run the same
#    command again. Which runs are executed the second time? Make one run fail (an invalid
#    value such as `threshold: [0.5, 1.5]`) and find its error in the index and in `failed/`.
