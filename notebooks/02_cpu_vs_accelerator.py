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
# The same problem solved by the same code on
#
# - **NumPy, CPU, float64**: the reference;
# - **PyTorch, CPU, float32 under the MPS rules** (`mw.mps_emulation()`): what Apple's MPS
#   computes, since MPS has no float64;
# - **the accelerator** when one is present: CUDA (float32 and float64), else MPS (float32), else
#   a note says there is none.
#
# Relative errors are max |X − X_ref| / max |X_ref| over the whole (t, θ) grid for X = U, M and
# the attendance A. All rows stop at the same `tol`; float32 cannot resolve relative changes much
# below 1e-6, so `tol` is set above that. Wall times exclude a first, one-iteration warm-up solve
# (library loading, kernel compilation, device start-up).
#
# ```bash
# python -m mfgwork run notebooks/02_cpu_vs_accelerator.ipynb -p nx 101 -p nt 101 -o runs/cpu_vs_accelerator
# ```

# %% nbmake={"mock": {"nt": 10, "nx": 11}} tags=["parameters"]
threshold = 0.6  # A*
sigma = 0.5  # noise on the preference
nx = 52  # grid points in theta (52 x 52 is the reference benchmark grid)
nt = 52  # time steps
tol = 1e-5  # the same tolerance for every row (float32 cannot go much below 1e-6)
max_iter = 200  # at most this many Picard iterations
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

# %%
# each target sets its own backend, device and dtype
table, results = studies.compare_backends(problem, targets, warmup=warmup, progress=False,
                                          **options)
print(studies.format_table(table, ["label", "wall_time_s", "iterations", "time_per_iteration_s",
                                   "rel_error_U", "rel_error_M", "rel_error_A", "converged"]))

# %%
fig_comparison = plots.plot_backend_comparison(table)
fig_comparison

# %% [markdown]
# ## Run folder
#
# `comparison.json` / `comparison.csv` hold the table (collect them from a GPU run), the
# reference solution is in `arrays.npz`, devices and versions in `metrics.json`.

# %%
devices = {row["device"]: mw.device_info(row["device"]) for row in table}
if out_dir:
    parameters = options | {"accelerator": accelerator}
    print("wrote", mw.save_run(out_dir, results[0], parameters=parameters,
                               metrics={"note": note, "comparison": table, "devices": devices},
                               figures={"backend_comparison": fig_comparison},
                               tables={"comparison": table}))
else:
    print("out_dir is empty: no run folder written")
