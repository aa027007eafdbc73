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
# # Santa Fe Bar: the equilibrium of a crowd-averse coordination game
#
# A continuum of agents with a preference $\theta \in [-\theta_{max}, \theta_{max}]$; those with
# $\theta > 0$ go to the bar. Going pays $F(A)$, which falls from $G$ to $B$ as the attendance
# $A(t) = \int_{\theta>0} m(t,\theta)\,d\theta$ crosses the threshold $A^*$ (smoothed over a
# width $\varepsilon$). Agents steer their preference at quadratic cost and are shaken by noise
# $\sigma$. See `00_primer.ipynb` for the equations and how to read the result.
#
# Run it headless into a run folder (parameters, metrics, arrays, figures and this notebook):
#
# ```bash
# python -m mfgwork run notebooks/01_santa_fe_bar.ipynb -p threshold 0.5 -o runs/santa_fe_bar_05
# ```

# %% nbmake={"mock": {"nt": 50, "nx": 51}} tags=["parameters"]
# model (mfgwork.SantaFeBar)
threshold = 0.6  # A*: attendance above which the bar is crowded, in (0, 1)
sigma = 0.5  # noise on the preference
T = 10.0  # time horizon
theta_max = 5.0  # preferences live in [-theta_max, theta_max]
good = 10.0  # G: payoff of an uncrowded bar
bad = -5.0  # B: payoff of a crowded bar
eps = 0.05  # smoothing width of the threshold
# discretization and solver (mfgwork.solve)
nx = 201  # grid points in theta, walls included
nt = 201  # time steps
method = "fdm"  # "fdm" (finite differences) or "particles"
backend = "numpy"  # "numpy" or "torch"
device = "cpu"  # "cpu", "cuda", "mps" or "auto"
n_particles = 100000  # particles only
seed = 0  # particles only: random seed
tol = 1e-8  # stop when the certified fixed-point residual is at most tol
max_iter = 200  # at most this many iterations (each one best response)
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %% [markdown]
# Check every parameter before any work: a bad value stops here with the library's message.

# %%
# check the parameters
import mfgwork as mw
from mfgwork import plots, runs

# %matplotlib inline

problem = mw.SantaFeBar(threshold=threshold, sigma=sigma, T=T, theta_max=theta_max,
                        good=good, bad=bad, eps=eps)
options = runs.solve_options(nx=nx, nt=nt, method=method, backend=backend, device=device,
                             tol=tol, max_iter=max_iter, n_particles=n_particles, seed=seed)
problem, options

# %% [markdown]
# ## Solve
#
# `mw.solve` iterates on the attendance path $A(t)$, each iteration one best response (HJB
# backward, Fokker–Planck forward), until the returned solution is a fixed point to `tol`: one
# best response to its attendance path reproduces it to a relative residual `res.residual` ≤
# `tol`. The result records which iteration ran (`res.scheme`, its settings in
# `res.params["iteration"]`), printed first below. The relative changes of $U$ and $M$ between
# the last iterates (`final_change_U`, `final_change_M`) are recorded, but they stop nothing.

# %%
res = mw.solve(problem, **options)
print("iteration:", plots.describe_iteration(res))
metrics = res.metrics()
{k: metrics[k] for k in ("converged", "iterations", "residual", "final_change_U",
                         "final_change_M", "mass_error", "mean_attendance", "time_overcrowded",
                         "timings")}

# %% [markdown]
# ## Attendance
#
# Where $F(A) = 0$ agents at $\theta = 0$ are indifferent; the attendance settles at that level,
# $A = A^* + \varepsilon \log(G / (-B))$, just above the threshold (dotted line), after a short
# transient from $A(0) = 1/2$. The band is $A^* \pm \varepsilon$, where the payoff switches.

# %%
level = plots.equilibrium_attendance(res.params)
A = mw.to_numpy(res.attendance)
print(f"F(A) = 0 at A = {level:.4f}; A(T/2) = {A[len(A) // 2]:.4f}")
fig_attendance = plots.plot_attendance(res)
fig_attendance

# %% [markdown]
# ## Density and value function
#
# The density $m(t, \theta)$ (heatmap; agents above the dashed line attend) and snapshots of
# $m$ and of the value function $u$.

# %%
fig_heatmap = plots.plot_density_heatmap(res)
fig_heatmap

# %%
fig_density = plots.plot_density_snapshots(res)
fig_density

# %%
fig_value = plots.plot_value_snapshots(res)
fig_value

# %% [markdown]
# ## Convergence and phase portrait
#
# The fixed-point residual $\|\Phi(z) - z\| / \|\Phi(z)\|$ of each iterate (log scale; the
# legend names the iteration that ran) and the certificates (diamonds): the residual of the
# densities of an iterate, which is what the solve returns. An iterate below `tol` (dotted) is
# not yet a solution: the next best response certifies its densities, and where that
# certificate is above `tol` the iteration goes on. The star is the certified residual of the
# returned solution, which decides convergence; then the path of $(E[\theta](t), A(t))$.

# %%
fig_convergence = plots.plot_convergence(res)
fig_convergence

# %%
fig_phase = plots.plot_phase_portrait(res)
fig_phase

# %% [markdown]
# ## Run folder
#
# `parameters.json`, `metrics.json` (iterations, errors, mass error, timings, device, dtype,
# package versions), `arrays.npz` (x, t, U, M, attendance; read back with `mw.load`) and
# `figures/*.png` (and `*.pdf`, vector, for print).

# %%
figures = {"attendance": fig_attendance, "density_heatmap": fig_heatmap,
           "density_snapshots": fig_density, "value_snapshots": fig_value,
           "convergence": fig_convergence, "phase_portrait": fig_phase}
if out_dir:
    folder = mw.save_run(out_dir, res, parameters=options, figures=figures)
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **A run folder.** Run this notebook from the command line with `-p threshold 0.5` into a
#    run folder, read it back with `mw.load`, and compare the mean attendance in `metrics.json`
#    with $A^* + \varepsilon \log(G/(-B))$. Why is the mean over $[0, T]$ a little below the
#    plateau?
# 2. **Grid convergence.** Solve with `nx = nt = 51, 101, 201, 401` and record $A(T/2)$. Is the
#    difference to the finest grid halved with $h$, as a first-order scheme should be?
# 3. **Particles against finite differences.** Solve with `method="particles"` and
#    `n_particles` $= 10^4, 10^5, 10^6$ and measure the largest difference of $A(t)$ to the
#    finite-difference solution on the same grid. How does it scale with the number of
#    particles $N$ (expect $N^{-1/2}$)?
