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
# # Parameter scan: the Santa Fe Bar over thresholds × noise levels
#
# `mw.scan` solves a problem at every point of a parameter grid and returns an
# [xarray](https://docs.xarray.dev) `Dataset`: one dimension per scanned parameter (here the
# threshold $A^*$ and the noise $\sigma$) plus time `t` and the preference `x` $= \theta$.
# It holds the density `M` and the value `U`, the model's observables (the attendance $A(t)$,
# the mean preference) and their summaries (mean attendance, time overcrowded), and per-point
# metrics: `converged`, `status`, `iterations`, `residual`, `mass_error`, `wall_time`,
# `device`, `message`. Everything below is named selection (`ds.sel(sigma=0.5)`) and xarray's
# own plotting.
#
# The points are solved in blocks: on a GPU each block is one batched solve
# (`mw.solve` of a list, a leading batch axis); on the CPU the compiled NumPy solver takes them
# one by one. With `store` set, each finished block is written into a zarr store and a rerun
# resumes where the last one stopped; `mw.open_scan(store)` opens it lazily, and
# `ds.to_netcdf(...)` (or `python -m mfgwork scan ... --netcdf FILE`) exports NetCDF.
#
# The defaults are small (a 5 × 3 grid at 41 × 40, seconds on a laptop). The 32 × 32 scan at
# 201² on a GPU, as a run folder:
#
# ```bash
# python -m mfgwork run notebooks/05_parameter_scan.ipynb -p n_threshold 32 -p n_sigma 32 \
#     -p nx 201 -p nt 201 -p tol 1e-6 -p device cuda -p dtype float32 \
#     -p store scans/santa_fe_32x32.zarr -o runs/parameter_scan
# ```
#
# The same scan from the command line, without the figures:
# `python -m mfgwork scan --problem santa_fe --grid grid.yaml -o scans/santa_fe.zarr
# -p nx 201 -p nt 201 --device auto`, with `grid.yaml` holding
# `threshold: {linspace: [0.3, 0.9, 32]}` and `sigma: {linspace: [0.3, 1.0, 32]}`.

# %% nbmake={"mock": {"n_sigma": 2, "n_threshold": 3, "nt": 20, "nx": 21}} tags=["parameters"]
# the grid: thresholds A* and noise levels sigma, evenly spaced (both ends included)
threshold_min = 0.3
threshold_max = 0.9
n_threshold = 5
sigma_min = 0.3
sigma_max = 1.0
n_sigma = 3
# the solver: grid points, time steps, tolerance, iterations, device ("auto": a GPU if any)
nx = 41
nt = 40
tol = 1e-8
max_iter = 300
device = "auto"
dtype = None
# a zarr store to write (and resume); "" keeps the scan in memory
store = ""
# the noise level whose attendance paths A(t) are drawn (the nearest scanned value)
slice_sigma = 0.5
# run folder to write (figures and the per-point table); "" writes nothing
out_dir = ""

# %%
import numpy as np
from matplotlib.figure import Figure

import mfgwork as mw

# %matplotlib inline

grid = {"threshold": {"linspace": [threshold_min, threshold_max, n_threshold]},
        "sigma": {"linspace": [sigma_min, sigma_max, n_sigma]}}
ds = mw.scan(mw.SantaFeBar, grid, nx=nx, nt=nt, tol=tol, max_iter=max_iter, device=device,
             dtype=dtype, store=store or None)
ds = ds.load()  # small enough here; a large store stays lazy until selected
ds

# %% [markdown]
# ## Status of the points
#
# A point that fails or does not converge stays in the dataset with its status, residual and
# message; it does not stop the scan.

# %%
status = ds.status.values.astype(str)
print({s: int((status == s).sum()) for s in ("converged", "not_converged", "failed")})
for point in ds.where(ds.status != "converged", drop=True).message.values.ravel():
    print(point)

# %% [markdown]
# ## Heatmaps over the grid
#
# Mean attendance $\langle A \rangle$ (mean of $A(t)$ over the time levels): it follows the
# threshold, settling just above it where the payoff of going vanishes. Time overcrowded:
# total time with $A(t) > A^*$. The iterations (best responses) and the final fixed-point residual show
# where the equilibrium is harder to reach (steep payoffs against little noise).

# %%
fig_maps = Figure(figsize=(11, 8), layout="constrained")  # displayed once, by the last line
axes = fig_maps.subplots(2, 2)
ds.mean_attendance.plot(x="threshold", y="sigma", ax=axes[0, 0], cmap="viridis")
ds.time_overcrowded.plot(x="threshold", y="sigma", ax=axes[0, 1], cmap="magma")
ds.iterations.plot(x="threshold", y="sigma", ax=axes[1, 0], cmap="cividis")
np.log10(ds.residual).assign_attrs(long_name="log10 residual").plot(
    x="threshold", y="sigma", ax=axes[1, 1], cmap="Greys")
for ax, title in zip(axes.flat, ["mean attendance", "time overcrowded", "iterations",
                                 "final residual (log10)"], strict=True):
    ax.set_title(title)
fig_maps

# %% [markdown]
# ## Attendance paths at one noise level
#
# $A(t)$ for every threshold at the scanned $\sigma$ nearest to `slice_sigma`; dotted lines:
# the thresholds $A^*$.

# %%
row = ds.sel(sigma=slice_sigma, method="nearest")
fig_paths = Figure(figsize=(8, 4.5), layout="constrained")
ax = fig_paths.subplots()
row.attendance.plot.line(x="t", hue="threshold", ax=ax)
for thr in row.threshold.values:
    ax.axhline(thr, color="0.6", lw=0.8, ls=":")
ax.set(title=f"attendance A(t) at σ = {float(row.sigma):.3g}", xlabel="time t",
       ylabel="attendance A(t)")
fig_paths

# %% [markdown]
# ## The density at one point
#
# $m(t, \theta)$ at the middle of the grid, selected by name.

# %%
middle = ds.isel(threshold=ds.sizes["threshold"] // 2, sigma=ds.sizes["sigma"] // 2)
fig_density = Figure(figsize=(8, 4), layout="constrained")
ax = fig_density.subplots()
middle.M.plot(x="t", y="x", ax=ax, cmap="viridis", cbar_kwargs={"label": "density m(t, θ)"})
ax.set(title=f"m(t, θ) at A* = {float(middle.threshold):.3g}, σ = {float(middle.sigma):.3g}",
       xlabel="time t", ylabel="preference θ")
fig_density

# %% [markdown]
# ## The run folder
#
# The figures and one row per point (parameters, summaries, metrics) as `points.json` /
# `points.csv`.

# %%
per_point = ["mean_attendance", "time_overcrowded", "iterations", "residual", "mass_error",
             "wall_time", "status", "device"]
rows = ds[per_point].to_dataframe().reset_index().to_dict("records")
figures = {"scan_heatmaps": fig_maps, "attendance_slice": fig_paths,
           "density_point": fig_density}
if out_dir:
    folder = mw.save_run(out_dir, parameters={"grid": grid, "nx": nx, "nt": nt,
                                              "tol": tol, "max_iter": max_iter,
                                              "device": device, "dtype": dtype,
                                              "store": store},
                         metrics={"points": int(ds.status.size),
                                  "converged": int((status == "converged").sum()),
                                  "scan_attributes": dict(ds.attrs)},
                         figures=figures, tables={"points": rows})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **The offset above the threshold.** Plot `ds.mean_attendance - ds.threshold` against the
#    threshold for each σ and compare it with $\varepsilon \log(G/(-B)) \approx 0.035$. Why is
#    it a little smaller (think of the first moments of the evening, before the plateau)?
# 2. **Where the iteration works hardest.** Rerun with `-p sigma_min 0.1`. Where do the
#    iterations grow, and is every point still `converged` with a residual below `tol`?
# 3. **Resuming.** Set `store` to a zarr path, interrupt the scan halfway and rerun it: which
#    blocks are solved again? Open the store with `mw.open_scan` and select one point by name.
