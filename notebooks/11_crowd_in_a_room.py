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
# # A crowd in a room, and two bars: mean field games in two dimensions
#
# The classical picture of a mean field game is a crowd leaving a room: every agent heads for
# a door, knowing that everybody else does too, and the crowd that forms in front of the
# doors is part of what each agent weighs. This page solves that game on a square room with
# two doors and an obstacle, looks at the density, the velocity field and the flux through the
# doors, animates the evacuation, and asks what congestion changes. It then solves the same
# equations with PyTorch (on the accelerator when there is one), and finally a second 2-D
# game: two bars, with a preference for each.
#
# **The room.** On $\Omega = [0, 1]^2$ minus the obstacle, an agent at $x$ controls its velocity
# $\alpha$, moves by $dX = \alpha\,dt + \sigma\,dW$, pays $\tfrac12|\alpha|^2$ for moving,
# $1 + \kappa\,m(t, x)$ per unit time spent in the room ($\kappa$: `congestion`, the cost of
# standing in a crowd), nothing once it leaves through a door, and $1$ if it is still inside
# at $T$. With $\nu = \sigma^2/2$ the value $u$ and the density $m$ solve
#
# $$
# \begin{aligned}
# -\partial_t u - \nu\,\Delta u + \tfrac12 |\nabla u|^2 &= 1 + \kappa\, m,
#   & u(T) &= 1, \quad u = 0 \text{ at the doors},\\
# \partial_t m - \nu\,\Delta m - \operatorname{div}(m\,\nabla u) &= 0,
#   & m(0) &= m_0,
# \end{aligned}
# $$
#
# the HJB equation backward in time, the Fokker–Planck equation forward, with zero flux
# through the walls and the obstacle, and the optimal velocity
# $\alpha^* = -\nabla u$. Mass that reaches a door leaves: the mass in the room plus the mass
# that has left stays $1$. Since the cost $1 + \kappa m$ increases with the density, the
# equilibrium is unique.
#
# **The scheme** (`mw.solve` of a room) is the one of the 1-D solver on an $n_x \times n_x$ grid:
# implicit Euler in time, a monotone upwind discretization of $\tfrac12|\nabla u|^2$ with
# Newton's method at each HJB step, and the Fokker–Planck step as the adjoint of the
# linearized HJB step, so that $m \ge 0$ and mass plus outflow is conserved to round-off.
# On NumPy each linear system is solved by BiCGStab preconditioned by an incomplete LU
# factorization (ILU(0), compiled with numba; `mw.solve(room, solver="direct")` takes
# SuperLU's sparse LU instead); with PyTorch by a matrix-free BiCGStab with a Jacobi
# preconditioner (on CUDA with Triton, each solve one kernel launch, preconditioned by the
# first two terms of the Neumann series of $J^{-1}$: half the iterations). The coupling is
# iterated as the result records (`res.scheme`, printed below), and the solve stops when the
# **certified fixed-point residual** is at most `tol`: one best response to the returned
# density path (an HJB sweep against it, then a Fokker–Planck sweep) reproduces that path to a
# relative accuracy `tol`.

# %% nbmake={"mock": {"T_bars": 2.0, "frames": 6, "nt": 12, "nt_accelerator": 8, "nt_bars": 10, "nt_scan": 10, "nx": 13, "nx_accelerator": 11, "nx_bars": 11, "nx_scan": 11, "scan_thresholds": [0.4, 0.7]}} tags=["parameters"]
# the room: noise, congestion cost (and a larger one), door width
T = 1.0
sigma = 0.3
congestion = 1.0
congestion_high = 8.0
door_width = 0.1
# grid: nx × nx nodes, nt time steps; the certified tolerance
nx = 41
nt = 40
tol = 1e-6
# frames of the animation (at most nt + 1)
frames = 30
# accelerator: "auto" (CUDA, else MPS), "cuda", "mps" or "none";
# its grid and the tolerance of its float32 rows
accelerator = "auto"
nx_accelerator = 21
nt_accelerator = 20
tol_float32 = 1e-4
# two bars: horizon, grid; the scan: spill-over, thresholds, grid
T_bars = 4.0
nx_bars = 31
nt_bars = 30
spill = 0.5
scan_thresholds = [0.4, 0.6, 0.8]
nx_scan = 21
nt_scan = 20
# run folder; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters, then solve the room on the CPU (NumPy, float64)
import numpy as np
from IPython.display import HTML

import mfgwork as mw
from mfgwork import plots, plots2d, studies

# %matplotlib inline

room = mw.Room(T=T, sigma=sigma, congestion=congestion, door_widths=(door_width, door_width))
crowded = mw.Room(T=T, sigma=sigma, congestion=congestion_high,
                  door_widths=(door_width, door_width))
plots2d.frame_indices(nt, frames)
targets, note = studies.comparison_targets(accelerator)
bars = mw.TwoBars(thresholds=(0.6, 0.4), T=T_bars)
scan_grid = {"threshold_1": scan_thresholds, "threshold_2": scan_thresholds}
for a in scan_thresholds:  # the scan's thresholds, checked before any solve
    mw.TwoBars(threshold_1=a, threshold_2=a, T=T_bars, spill=spill)
res = mw.solve(room, nx=nx, nt=nt, tol=tol, progress=False)
print(f"{room}: {res.status} in {res.iterations} iterations ({plots.describe_iteration(res)}), "
      f"certified residual "
      f"{res.residual:.1e} (tol {tol:g}), {res.timings['total']:.1f} s")
if not res.converged:
    print("*** NOT AN EQUILIBRIUM: the figures below show the best iterate")

# %% [markdown]
# ## 1. Is it an equilibrium?
#
# Three checks, each computed independently of the iteration:
#
# - `res.residual` is the residual the solver certified: the best response to the returned
#   densities reproduces them to that relative accuracy;
# - `res.check()` computes one best response again from scratch, in NumPy float64 with
#   another linear solver (SuperLU's sparse LU), and returns its residual: the same number
#   up to the accuracy of the sweeps that certified it (a thousandth of `tol`: inside the
#   fixed point each sweep is solved only about a thousand times finer than the residual
#   it is to reduce);
# - `res.mass_error` is the largest deviation of mass in the room plus cumulative outflow
#   from the initial mass $1$: round-off, since the Fokker–Planck step is the adjoint of the
#   HJB linearization and keeps the balance exactly whatever the tolerance of its solve.

# %%
check = res.check()
certificate = {"residual": res.residual, "check": check, "mass_error": res.mass_error,
               "min_density": float(res.M.min()), "mass_left_at_T": float(res.mass[-1])}
print(studies.format_table([certificate]))

# %% [markdown]
# ## 2. The crowd
#
# Snapshots of $m(t, x, y)$ (each panel on its own colour scale: the crowd spreads and leaves,
# so later densities are much smaller): the crowd starts as a blob left of the obstacle,
# splits around it, and queues in front of the two doors (red) on the right wall. The noise
# carries some agents into the far corners, and a few percent of the crowd is still in the
# room at $T$ (`mass_left_at_T` in the table above).

# %%
fig_density = plots2d.plot_density_2d(res)
fig_density

# %% [markdown]
# The optimal velocity $\alpha^* = -\nabla u$ over the density at $t = T/4$: agents go around
# the obstacle, towards the nearer door, and speed up close to it, where the value drops to
# $0$.

# %%
fig_velocity = plots2d.plot_velocity_field(res, time=T / 4)
fig_velocity

# %% [markdown]
# The flux through each door (left), split by door from the scheme's own outflow, and the
# mass balance (right): mass in the room plus cumulative outflow is the dotted line at $1$;
# its legend gives the largest deviation. The two doors are symmetric about the centre of the
# obstacle and of the starting blob, so they share the crowd equally.

# %%
fig_flux = plots2d.plot_exit_flux(res)
fig_flux

# %% [markdown]
# ## 3. The evacuation, animated
#
# `plots2d.animation_html` renders the density over time as an HTML/JavaScript player
# (matplotlib's `FuncAnimation`, its frames embedded as images, at most `frames` of them,
# evenly spaced): it plays here and in the book, and loads nothing from the network.
# `plots2d.write_animation` writes it as a page of its own.

# %%
animation = plots2d.animation_html(res, frames=frames)
HTML(animation)

# %% [markdown]
# ## 4. What congestion changes
#
# The same room with the congestion cost raised from `congestion` to `congestion_high`.
# Standing in a crowd is now dear, and that has two effects. The agents avoid the densest
# places, so the crowd spreads out: the largest density after the first quarter of the
# evening drops. And every moment spent in the room costs more where others are, so they
# hurry: the flux through the doors is higher and half of the crowd is out sooner. The table
# compares the largest density from $T/4$ on, the peak flux, the time by which half of the
# crowd has left, and the mass left at $T$.
#
# In JupyterLab, `mw.widgets.explore(mw.Room())` opens an explorer of the room: sliders for
# the door width and the congestion cost re-solve it, and a time slider picks the density
# shown.

# %%
res_high = mw.solve(crowded, nx=nx, nt=nt, tol=tol, progress=False)


def evacuation_row(kappa, r):
    half = np.flatnonzero(r.mass <= 0.5)
    return {"congestion": kappa, "converged": r.converged, "iterations": r.iterations,
            "peak_density": float(r.M[nt // 4:].max()), "peak_flux": float(r.exit_flux.max()),
            "half_gone_at": float(r.t[half[0]]) if half.size else None,
            "mass_left_at_T": float(r.mass[-1])}


congestion_table = [evacuation_row(congestion, res), evacuation_row(congestion_high, res_high)]
print(studies.format_table(congestion_table))
fig_congestion = plots2d.plot_evacuation({f"κ = {congestion:g}": res,
                                          f"κ = {congestion_high:g}": res_high})
fig_congestion

# %%
fig_density_high = plots2d.plot_density_2d(res_high, times=[T / 4, T / 2])
fig_density_high

# %% [markdown]
# ## 5. On the accelerator
#
# The same room with PyTorch, on the rows of `studies.comparison_targets`: the NumPy float64
# reference, PyTorch on the CPU under the rules of Apple's MPS (float32, no host round trips
# inside loops), and the accelerator when one is present (CUDA in float32 and float64, or
# MPS in float32). PyTorch solves each linear system by Jacobi-preconditioned BiCGStab,
# NumPy by ILU-preconditioned BiCGStab: the same discrete equations, two linear solvers.
# float64 rows agree with the reference far below `tol`; float32 rows iterate to
# `tol_float32` and agree with the reference to about that or better.
# The grid is `nx_accelerator` (small by default: one solve is a sequential chain of time
# steps, and PyTorch on the CPU pays a dispatch cost per operation; on a GPU, raise it).

# %%
print(note)
reference = None
accelerator_table = []
for target in targets:
    backend = mw.get_backend(target["backend"], target.get("device", "cpu"),
                             target.get("dtype"))
    r = mw.solve(room, nx=nx_accelerator, nt=nt_accelerator, backend=backend,
                 tol=tol_float32 if backend.dtype == "float32" else tol, progress=False)
    if reference is None:
        reference = r
    accelerator_table.append({
        "label": target["label"], "solver": r.extra["solver"], "converged": r.converged,
        "iterations": r.iterations, "wall_time_s": r.timings["total"],
        "rel_error_M": float(np.max(np.abs(r.M - reference.M)) / np.max(reference.M)),
        "rel_error_U": float(np.max(np.abs(r.U - reference.U)) / np.max(np.abs(reference.U))),
        "mass_error": r.mass_error})
print(studies.format_table(accelerator_table))

# %% [markdown]
# ## 6. Two bars
#
# A second game on a 2-D state space: each patron has a preference
# $\theta = (\theta_1, \theta_2) \in [-5, 5]^2$, one for each of two bars, and goes to bar $j$
# when $\theta_j > 0$ (possibly to both). Each bar pays the Santa Fe payoff
# $F_j(C) = G - (G - B)\, s\big((C - A^*_j)/\varepsilon\big)$ on its crowd
# $C_1 = A_1 + s A_2$, $C_2 = A_2 + s A_1$, where $A_j(t)$ is the fraction of patrons with
# $\theta_j > 0$ and $s$ (`spill`) says how much a crowd at one bar deters from the other:
#
# $$
# f(t, \theta, m) = -F_1(C_1(t))\,\mathbb 1\{\theta_1 > 0\} - F_2(C_2(t))\,\mathbb 1\{\theta_2 > 0\},
# \qquad g = 0 .
# $$
#
# The coupling state is the pair of attendance paths, and the certificate is the same: one
# best response reproduces them to `tol`.
#
# **Independent bars.** With $s = 0$ (and uncorrelated initial preferences) the bars do not
# interact, $u$ is the sum of two 1-D values and the marginals of $m$ are two 1-D Santa Fe
# equilibria. The discrete scheme is separable too, so the 2-D solve and two 1-D solves
# (`mw.SantaFeBar`, same grid) agree to the tolerance of the solves, not just to the
# discretization error: the table gives the largest differences of the attendance paths and
# of the marginal densities.

# %%
bars_tol = 1e-10
res_bars = mw.solve(bars, nx=nx_bars, nt=nt_bars, tol=bars_tol, max_iter=400,
                    progress=False)
weights = mw.Grid(-5.0, 5.0, nx_bars, T_bars, nt_bars).weights
marginals = [(res_bars.M * weights[:, None]).sum(axis=1),
             (res_bars.M * weights[None, :]).sum(axis=2)]
one_d, bars_table = {}, []
for j, threshold in enumerate(bars.thresholds):
    one = mw.solve(mw.SantaFeBar(threshold=threshold, T=T_bars), nx=nx_bars, nt=nt_bars,
                   tol=bars_tol, max_iter=400, progress=False)
    one_d[f"1-D Santa Fe, A* = {threshold:g}"] = (one.t, one.attendance)
    bars_table.append({
        "bar": j + 1, "threshold": threshold, "converged_2d": res_bars.converged,
        "converged_1d": one.converged,
        "max_diff_attendance": float(np.max(np.abs(res_bars.attendance[:, j]
                                                   - mw.to_numpy(one.attendance)))),
        "max_diff_marginal": float(np.max(np.abs(marginals[j] - mw.to_numpy(one.M))))})
print(studies.format_table(bars_table))
fig_bars = plots2d.plot_bar_attendance(res_bars, references=one_d)
fig_bars

# %% [markdown]
# The density of the preferences $(\theta_1, \theta_2)$: the patrons drift right of
# $\theta_1 = 0$ until bar 1's attendance is near the level where its payoff vanishes,
# $A^*_1 + \varepsilon\log(G/(-B)) \approx 0.635$, and above $\theta_2 = 0$ until bar 2's is
# near $0.435$; the noise keeps the density spread.

# %%
fig_bars_density = plots2d.plot_density_2d(res_bars, times=[0.0, T_bars / 2, T_bars])
fig_bars_density

# %% [markdown]
# ## 7. Scanning both thresholds
#
# With spill-over ($s$ = `spill`) the bars compete: a crowd at one deters patrons from the
# other. How does the attendance of each bar at $T/2$ depend on both thresholds?
# `mw.scan` solves the game at every point of `scan_thresholds` × `scan_thresholds` on the
# coarser grid `nx_scan` × `nx_scan`, `nt_scan` steps. `mw.TwoBars` takes the pair
# `thresholds` and, for a scan, its components `threshold_1` and `threshold_2`, one axis
# each. Each point is one `mw.solve` with its own certificate (a point with spill-over
# takes several tens of best responses): `converged` is true only where the certified
# residual is at most `tol`, and `residual`, `iterations` and `message` say how each point
# ended. The result is an xarray Dataset with labelled axes: the density `M` over
# (threshold_1, threshold_2, t, y, x), with y = θ2 and x = θ1 (`keep=("M",)` leaves out
# the value function), and the attendance over (threshold_1, threshold_2, t, bar). With
# `store="bars.zarr"` the same call writes the points into a zarr store as they are
# solved, and running it again resumes an interrupted scan.

# %%
scan_bars = mw.scan(mw.TwoBars, scan_grid, fixed={"T": T_bars, "spill": spill}, nx=nx_scan,
                    nt=nt_scan, tol=tol, max_iter=400, keep=("M",), progress=False)
print(f"{int(scan_bars.converged.sum())} of {scan_bars.converged.size} points converged "
      f"(certified residual <= {tol:g}), {float(scan_bars.wall_time.sum()):.1f} s of solves")
half = scan_bars.attendance.isel(t=nt_scan // 2)  # A_j at T/2
scan_rows = [{"threshold_1": float(a1), "threshold_2": float(a2),
              "converged": bool(scan_bars.converged.loc[a1, a2]),
              "iterations": int(scan_bars.iterations.loc[a1, a2]),
              "residual": float(scan_bars.residual.loc[a1, a2]),
              "A1(T/2)": float(half.loc[a1, a2, 1]), "A2(T/2)": float(half.loc[a1, a2, 2])}
             for a1 in scan_bars.threshold_1.values for a2 in scan_bars.threshold_2.values]
print(studies.format_table(scan_rows))
scan_bars

# %% [markdown]
# **Reading the scan.** For a fixed threshold of bar 1, raising bar 2's threshold fills
# bar 2 and empties bar 1: through the spill-over, bar 2's larger crowd lowers what bar 1
# pays. The game is symmetric in the two bars: swapping the thresholds swaps the
# attendances, and with equal thresholds the bars are equally full.

# %% [markdown]
# ## Run folder
#
# With `out_dir` set the run folder holds the figures (PNG and PDF), the tables (JSON and
# CSV), the room's solution as a 2-D result folder (`room/`, read back by
# `mw.load`) and the animation as a page of its own (`room_animation.html`).

# %%
if out_dir:
    parameters = {"T": T, "sigma": sigma, "congestion": congestion,
                  "congestion_high": congestion_high, "door_width": door_width, "nx": nx,
                  "nt": nt, "tol": tol, "frames": frames, "accelerator": accelerator,
                  "nx_accelerator": nx_accelerator, "nt_accelerator": nt_accelerator,
                  "tol_float32": tol_float32, "T_bars": T_bars, "nx_bars": nx_bars,
                  "nt_bars": nt_bars, "spill": spill, "scan_thresholds": scan_thresholds,
                  "nx_scan": nx_scan, "nt_scan": nt_scan}
    folder = mw.save_run(
        out_dir, parameters=parameters,
        metrics={"room": res.metrics(), "certificate": certificate, "accelerator_note": note},
        figures={"density_2d": fig_density, "velocity_field": fig_velocity,
                 "exit_flux": fig_flux, "evacuation": fig_congestion,
                 "density_2d_congested": fig_density_high, "bar_attendance": fig_bars,
                 "bar_density": fig_bars_density},
        tables={"congestion": congestion_table, "accelerator": accelerator_table,
                "independent_bars": bars_table, "threshold_scan": scan_rows},
        results={"room": res}, pages={"room_animation": plots2d.animation_page(animation)})
    print("wrote", folder)
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **Doors.** Make one door wider (`mw.Room(door_widths=(0.1, 0.3))`) and compare the
#    flux through each door with `plots2d.plot_exit_flux`. Does the wide door take three
#    times the crowd? Move the starting blob (`mw.Room(start=(0.25, 0.3))`): when does
#    the crowd prefer the farther, wider door?
# 2. **Congestion in the Hamiltonian.** Replace the congestion cost by a congestion of
#    motion, `mw.Room(congestion=0.0, hamiltonian=mw.Congestion(1.0, 0.5))` (moving in a
#    crowd is slow: $H = |p|^2 / (2 (1 + m)^{1/2})$). Compare the evacuation with the
#    congestion cost of section 4: which one makes the queues longer?
# 3. **Correlated tastes.** In the two-bar game correlate the preferences,
#    `mw.TwoBars(rho=0.6, spill=0.0)` (patrons who like one bar tend to like the other).
#    Are the bars still two 1-D problems? Which quantity of the independent-bars table stops
#    being small, and why?
