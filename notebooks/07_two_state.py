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
# # Two states or a continuum: the El Farol game with go / stay-home patrons
#
# In Arthur's El Farol problem a patron has two options: go to the bar or stay home. The
# Santa Fe Bar model of this workbench adds a continuous preference $\theta$, pushed by a
# control and by noise, and a patron attends when $\theta > 0$. This notebook solves the
# classic two-option version as a **finite-state mean field game in continuous time** and
# compares the two: the attendance paths, the time each needs to reach its plateau, and what
# the noise $\sigma$ of the continuous model does compared with the cost of switching in the
# two-state one.
#
# **The two-state game.** A patron is at home (state 0) or at the bar (state 1) and controls
# the rate $\beta \ge 0$ at which it switches to the other state, at cost $c\,\beta^2/2$ per
# unit time ($c$: `switching_cost`). At the bar it earns $F(A(t))$ per unit time, at home
# nothing, with the smoothed payoff of the Santa Fe Bar
# $F(A) = G - (G - B)\,s\big((A - A^*)/\varepsilon\big)$, $s(z) = 1/(1 + e^{-z})$.
# Costs are minimised (the sign convention of the workbench): the running cost is $0$ at home
# and $-F(A)$ at the bar, and $u_i(t)$ is the smallest expected cost to go from state $i$:
#
# $$
# \begin{aligned}
# -u_i' + \frac{\big((u_i - u_j)_+\big)^2}{2c} &= f_i(A(t)), \quad u_i(T) = 0,
#   \qquad \beta_i^* = \frac{(u_i - u_j)_+}{c} &&\text{(HJB, backward)}\\
# m_1' &= \beta_0^*\,m_0 - \beta_1^*\,m_1, \quad m_0 = 1 - m_1, \quad A = m_1
#   &&\text{(Kolmogorov, forward)}
# \end{aligned}
# $$
#
# A patron leaves state $i$ when staying there costs more than switching, at a rate
# proportional to the difference. Both equations are discretized by implicit Euler (each HJB
# step is solved in closed form; the Kolmogorov step is its adjoint, so $m_0 + m_1 = 1$ to
# round-off). `mw.solve` couples them by Newton's method on the attendance path
# $A(t_1), \dots, A(t_{nt})$, with the exact Jacobian of the discrete scheme (one backward and
# one forward tangent sweep) and a line search on the potential of the game. It returns its
# iterate itself: `res.converged` says that the best response to the returned attendance
# path reproduces it to `tol` (the fixed-point residual `res.residual`).
#
# **The plateau.** In the middle of a long evening nobody switches, $u_0 = u_1$, which needs
# the two running costs to agree: $F(A) = 0$, that is
# $A = A^* + \varepsilon \log\big(G/(-B)\big)$ ($= 0.6347$ at the defaults).

# %% nbmake={"mock": {"nt": 40, "nt_two_state": 100, "nx": 41, "sigmas": [0.5, 1.0], "switching_costs": [1.0, 3.0]}} tags=["parameters"]
# horizon and the two models' parameters (shared payoff: mw.SantaFeBar defaults)
T = 10.0
sigma = 0.5  # noise of the continuous-θ model
switching_cost = 1.0  # c of the two-state model
attendance0 = 0.5  # A(0) of the two-state model (that of m0 ∝ exp(−θ²/2) in the other)
# grids: nt_two_state implicit steps; nx × nt for the continuous model
nt_two_state = 400
nx = 201
nt = 200
# the scans: σ of the continuous model, c of the two-state model
sigmas = [0.35, 0.5, 0.7, 1.0, 1.4]
switching_costs = [0.3, 1.0, 3.0, 10.0, 30.0]
# the plateau is reached when A stays within plateau_tol of it
plateau_tol = 0.01
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import mfgwork as mw
from mfgwork import game_plots
from mfgwork.analysis.studies import format_table
from mfgwork.core.errors import check_int, check_list, check_real
from mfgwork.finite_state import check_time_step
from mfgwork.workflows.runs import solve_options

# %matplotlib inline

two_state = mw.TwoStateElFarol(T=T, switching_cost=switching_cost, attendance0=attendance0)
continuous = mw.SantaFeBar(T=T, sigma=sigma)
nt_two_state = check_int("nt_two_state", nt_two_state, low=1)
solve_options(nx=nx, nt=nt, method="fdm", backend="numpy", device="cpu", tol=1e-8,
              max_iter=300)
sigmas = check_list("sigmas", sigmas, check_real, low=0.0)
switching_costs = check_list("switching_costs", switching_costs, check_real, low=0.0)
for c in [switching_cost, *switching_costs]:
    try:
        check_time_step(mw.TwoStateElFarol(T=T, switching_cost=c, attendance0=attendance0),
                        nt_two_state)
    except mw.ParameterError as exc:
        raise mw.ParameterError(f"nt_two_state={nt_two_state} is invalid for the switching "
                                f"cost {c:g}: {exc}") from None
plateau_tol = check_real("plateau_tol", plateau_tol, low=0.0, low_open=False)
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# solve both models
res_two = mw.solve(two_state, nt=nt_two_state)
res_cont = mw.solve(continuous, nx=nx, nt=nt, tol=1e-8, max_iter=300, progress=False)
level = two_state.plateau
print(f"two-state: converged={res_two.converged} ({res_two.iterations} iterations, "
      f"certified residual {res_two.residual:.1e}), mass error {res_two.mass_error:.1e}")
print(f"continuous θ: converged={res_cont.converged} ({res_cont.iterations} iterations)")
for name, r in (("two-state", res_two), ("continuous θ", res_cont)):
    if not r.converged:
        print(f"*** NOT AN EQUILIBRIUM: the {name} solve did not converge (residual "
              f"{r.residual:.1e}); its curves below are its best iterate, not an equilibrium")

# %% [markdown]
# ## 1. Attendance paths
#
# Both games start with half of the patrons at the bar and move to the plateau just above
# the threshold $A^* = 0.6$, where the payoff vanishes (dashed line). In the two-state game
# the patrons at home switch in at a high rate at first (the bar pays $F(1/2) \approx G$),
# and the rate falls as $A$ approaches the level where going no longer pays. In the
# continuous model the patrons drift in $\theta$ towards and across $0$, while the noise keeps
# sending some of them back: the plateau sits slightly lower, where a small positive payoff
# $F > 0$ draws back the patrons that the noise keeps carrying across $\theta = 0$.
# Neither game overshoots: anticipating a crowded bar, patrons stop coming just in time.

# %%
fig_paths = game_plots.plot_attendance_paths(
    {f"two states (c = {switching_cost:g})": (res_two.t, res_two.attendance),
     f"continuous θ (σ = {sigma:g})": (res_cont.t, res_cont.attendance)},
    level=level, threshold=two_state.threshold, title="Attendance A(t): two models")
summary = [{"model": "two states", "A(T/2)": float(res_two.attendance[nt_two_state // 2]),
            "time_to_plateau": mw.time_to_level(res_two.t, res_two.attendance, level,
                                                plateau_tol)},
           {"model": "continuous θ", "A(T/2)": float(res_cont.attendance[nt // 2]),
            "time_to_plateau": mw.time_to_level(res_cont.t, res_cont.attendance, level,
                                                plateau_tol)}]
print(format_table(summary))
fig_paths

# %% [markdown]
# ## 2. Switching rates
#
# The equilibrium control of the two-state game: the rate $\beta^*_{0}$ of going out (home
# → bar) and $\beta^*_{1}$ of coming home, and the difference of costs-to-go
# $u_1 - u_0$ that drives them. At the start staying home costs more
# ($u_0 > u_1$), so patrons go out at a rate $(u_0 - u_1)/c$; on the plateau $u_0 = u_1$ and
# nobody switches; near the end of the evening ($u(T) = 0$) there is no future left to
# optimise and the rates vanish.

# %%
fig_rates = game_plots.plot_switching(res_two)
fig_rates

# %% [markdown]
# ## 3. Noise against switching costs
#
# What sets the speed of the approach? In the two-state game it is the **switching cost**:
# a patron pays $c\beta^2/2$ for a rate $\beta$, so a dearer switch means a slower flow and
# a later plateau (the time grows roughly like $\sqrt c$ over the scan); the plateau level
# does not depend on $c$ (it is where $F = 0$), although with the dearest switch the
# attendance is still creeping towards it at $T/2$. In
# the continuous model the **noise** plays two roles: it spreads the preferences, so more
# patrons sit near the line $\theta = 0$ and have to be moved across, and it keeps pushing
# them back, so the drift must work against it. Larger $\sigma$ means a slower approach and
# a plateau slightly below the level where $F$ vanishes. The top row shows the time until
# $A$ stays within `plateau_tol` of the level, the bottom row the attendance at $T/2$.

# %%
rows_c = []
for c in switching_costs:
    r = mw.solve(mw.TwoStateElFarol(T=T, switching_cost=c, attendance0=attendance0),
                 nt=nt_two_state)
    rows_c.append({"switching_cost": c, "converged": r.converged,
                   "time_to_plateau": mw.time_to_level(r.t, r.attendance, level, plateau_tol),
                   "attendance_mid": float(r.attendance[nt_two_state // 2])})
rows_s = []
for s in sigmas:
    r = mw.solve(mw.SantaFeBar(T=T, sigma=s), nx=nx, nt=nt, tol=1e-8, max_iter=300,
                 progress=False)
    rows_s.append({"sigma": s, "converged": r.converged,
                   "time_to_plateau": mw.time_to_level(r.t, r.attendance, level, plateau_tol),
                   "attendance_mid": float(r.attendance[nt // 2])})
print(format_table(rows_c))
print(format_table(rows_s))
# plot certified equilibria only, and say which points are left out
failed = [(name, r[key]) for name, key, rows in (("two states", "switching_cost", rows_c),
                                                 ("continuous θ", "sigma", rows_s))
          for r in rows if not r["converged"]]
if failed:
    print("*** left out of the plots (not converged): "
          + ", ".join(f"{name} {value:g}" for name, value in failed))
fig_scan = game_plots.plot_plateau_study(
    {"two states: switching cost c": ("switching_cost", [r for r in rows_c if r["converged"]]),
     "continuous θ: noise σ": ("sigma", [r for r in rows_s if r["converged"]])},
    level=level)
fig_scan

# %% [markdown]
# ## 4. Reading
#
# - Both models settle at (or, with noise, just below) the attendance
#   $A^* + \varepsilon\log(G/(-B))$ where going out no longer pays: the plateau is a property
#   of the payoff, not of the dynamics.
# - The time to get there is set by the friction of the dynamics: the switching cost $c$ in
#   the two-state game (about $\sqrt c$), the noise $\sigma$ in the continuous model (a
#   milder effect: doubling $\sigma$ adds about half to the time).
# - The continuous model is richer in what it can say (who is close to changing their mind,
#   how preferences spread), and its noise is an honest source of heterogeneity; the
#   two-state model is the classic game, solved in milliseconds, and a check of the
#   continuous model: with little noise their plateaus agree.

# %%
if out_dir:
    mw.save_run(out_dir, res_two, parameters={
        "T": T, "sigma": sigma, "switching_cost": switching_cost, "attendance0": attendance0,
        "nt_two_state": nt_two_state, "nx": nx, "nt": nt, "sigmas": sigmas,
        "switching_costs": switching_costs, "plateau_tol": plateau_tol},
        metrics={"comparison": summary, "plateau_level": level},
        figures={"attendance_two_models": fig_paths, "switching_rates": fig_rates,
                 "noise_vs_switching_cost": fig_scan},
        tables={"comparison": summary, "switching_cost_scan": rows_c, "sigma_scan": rows_s})

# %% [markdown]
# ## Exercises
#
# 1. **Cheap switching.** Lower `switching_cost` to 0.01. What happens to the rates at
#    $t = 0$? Compare `res.iterations` with the damped fixed-point iteration alone,
#    `mw.solve(two_state, warmup=500, max_iter=500)` (the Anderson mixing of
#    `mw.solve`), and explain why cheap switching makes the best response to a given
#    attendance path jump (nearly everybody switches at once). Then set `T = 100` and
#    estimate how much a change of $10^{-15}$ in the plateau attendance changes the best
#    response there: why does the solve return its iterate, not the densities of the best
#    response to it (whose own best response `res.check()` would then compute)?
# 2. **Matching the models.** For $\sigma = 0.5$, find by bisection the switching cost $c$
#    whose two-state attendance reaches the plateau at the same time as the continuous
#    model. Do the two paths then agree at all times?
# 3. **A different start.** Set `attendance0 = 0.9` (an overcrowded bar at opening). Which
#    rate is active now, and how long does it take to empty the bar down to the plateau?
