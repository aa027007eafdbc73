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
# # The planner and the price of anarchy
#
# At the Santa Fe Bar equilibrium each patron decides for herself, and the bar fills until
# going is worth nothing to the last patron who goes: the payoff $F(A)$ is spent on
# crowding. A **planner** who chooses everyone's moves maximises the total welfare instead,
#
# $$
# W = \int_0^T A(t)\,F(A(t))\,dt \;-\; \mathbb E \int_0^T \tfrac12 |\alpha_t|^2\,dt ,
# $$
#
# the payoff of those who go less the cost of moving (per patron). This is **mean field
# control**. Its optimality conditions are again an HJB–FP system, with the *marginal*
# payoff in place of $F$:
#
# $$
# P(A) = \frac{d}{dA}\big(A\,F(A)\big) = F(A) + A\,F'(A) .
# $$
#
# One more patron at the bar earns $F(A)$ but lowers the payoff of all the others by
# $A\,F'(A) < 0$; the planner counts both, the patron only the first. This notebook solves
# both problems, checks that the planner's solution is optimal by two independent
# computations, maps the **price of anarchy** $W_{opt} / W_{eq}$ over the threshold and the
# width of the payoff, and lets $N$ patrons follow the planner's policy.

# %% nbmake={"mock": {"T": 4.0, "nt": 20, "nx": 41}} tags=["parameters"]
# the bar (the other Santa Fe Bar parameters at their defaults)
threshold = 0.6
eps = 0.05
sigma = 0.5
T = 10.0
# grid of the solves (nx points in θ, nt time steps)
nx = 201
nt = 201
# the map of the price of anarchy: thresholds × payoff widths ε, on an nx_map × nt_map grid
map_thresholds = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
map_eps = [0.03, 0.05, 0.1, 0.2]
nx_map = 101
nt_map = 100
# N patrons following each policy, in n_samples groups
n_players = 1000
n_samples = 8
seed = 0
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import numpy as np

import mfgwork as mw
from mfgwork import game_plots
from mfgwork.analysis.n_player import check_size
from mfgwork.analysis.studies import format_table
from mfgwork.core.errors import MAX_COUNT, check_int, check_list, check_real
from mfgwork.problems.santa_fe import attendance_weights
from mfgwork.welfare import value_welfare
from mfgwork.workflows.runs import solve_options

# %matplotlib inline

bar = mw.SantaFeBar(threshold=threshold, eps=eps, sigma=sigma, T=T)
solve_options(nx=nx, nt=nt, method="fdm", backend="numpy", device="cpu", tol=1e-8,
              max_iter=300)
map_thresholds = check_list("map_thresholds", map_thresholds, check_real, low=0.0, high=1.0,
                            distinct=True)
map_eps = check_list("map_eps", map_eps, check_real, low=0.0, distinct=True)
nx_map = check_int("nx_map", nx_map, low=3)
nt_map = check_int("nt_map", nt_map, low=1)
n_players = check_int("n_players", n_players, low=1, high=MAX_COUNT)
n_samples = check_int("n_samples", n_samples, low=2, high=MAX_COUNT)
seed = check_int("seed", seed, low=0)
check_size(bar.grid(nx, nt), mw.get_backend("numpy"), n_players, n_samples, gap=True)
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# solve the equilibrium and the planner's problem
equilibrium = mw.solve(bar, nx=nx, nt=nt, progress=False)
optimum = mw.solve(bar, objective="social", nx=nx, nt=nt, progress=False)
s = optimum.summary
print(f"equilibrium: {equilibrium.status}, {equilibrium.iterations} iterations, "
      f"mean attendance {equilibrium.summary['mean_attendance']:.4f}")
print(f"planner:     {optimum.status}, {optimum.iterations} iterations, "
      f"mean attendance {s['mean_attendance']:.4f}")
print(f"welfare: planner {s['welfare']:.3f}, equilibrium {s['equilibrium_welfare']:.3f}, "
      f"lost {s['welfare_loss']:.3f}, price of anarchy {s['price_of_anarchy']:.2f}")

# %% [markdown]
# ## 1. Two attendance paths, two prices
#
# Both solutions start from the same half-full bar, $A(0) \approx 1/2$. The patrons crowd in
# up to the level where $F$ vanishes, just above the threshold $A^*$; the planner holds the
# bar below the threshold, where the marginal price $P = F + A F'$ vanishes (right panel: the
# dashed lines are the mean attendances). Below $A^*$ the two prices almost agree; around it
# $P$ plunges far below $F$: the crowding a patron causes is worth more than the payoff she
# gets. Above the threshold $P$ *rises* again (for small $\varepsilon$): the planner's
# problem is not convex, and Newton's method on the attendance path solves a symmetric but
# indefinite system there.

# %%
fig_paths = game_plots.plot_planner(bar, equilibrium, optimum)
fig_paths

# %% [markdown]
# ## 2. Is it the optimum? Two checks that do not use the solver
#
# **The welfare, computed twice.** From the controls: the payoff less the cost of the
# scheme's own controls, $\sum_n \Delta t\,[A_n F(A_n) - \sum_i w_i m_i^{n+1}
# \hat L_i(u^n)]$ (`mw.welfare`). From the values: the scheme's adjoint structure gives
# $\sum_i w_i m^0_i u^0_i = \sum_n \Delta t \sum_i w_i m^{n+1}_i (\hat L_i - y_n \chi_i)$
# for the best response to any price path $y$, so $W = -\sum_i w_i m^0_i u^0_i -
# \sum_n \Delta t\,(y_n - F(A_n)) A_n$. The two agree to the solve's tolerance (to
# round-off at a tight one).
#
# **First-order optimality.** `mw.price_welfare(bar, y)` is the welfare of the best
# response to a price path $y$ (one HJB and one FP solve). At the planner's prices its
# derivative along any direction vanishes; at the equilibrium's prices it does not.

# %%
grid = bar.grid(nx, nt)
weights = attendance_weights(grid)[1]
y_opt = bar.for_objective("social").price(np.asarray(optimum.M)[1:] @ weights)
y_eq = bar.payoff(np.asarray(equilibrium.M)[1:] @ weights)
rng = np.random.default_rng(seed)
step, slopes = 1e-3, []
for _ in range(3):
    d = rng.standard_normal(nt)
    d /= np.linalg.norm(d)
    slopes.append({
        "at the optimum": (mw.price_welfare(bar, y_opt + step * d, nx)
                           - mw.price_welfare(bar, y_opt - step * d, nx)) / (2 * step),
        "at the equilibrium": (mw.price_welfare(bar, y_eq + step * d, nx)
                               - mw.price_welfare(bar, y_eq - step * d, nx)) / (2 * step)})
checks = {"welfare_from_controls": mw.welfare(optimum),
          "welfare_from_values": value_welfare(optimum),
          "largest_slope_at_optimum": max(abs(r["at the optimum"]) for r in slopes),
          "smallest_slope_at_equilibrium": min(abs(r["at the equilibrium"]) for r in slopes)}
print(format_table(slopes, ["at the optimum", "at the equilibrium"]))
print(checks)

# %% [markdown]
# ## 3. The price of anarchy over the threshold and the payoff's width
#
# A scan with `objective="social"` solves both problems at every point and stores the two
# welfares. The loss grows with the threshold (a larger bar has more to lose) and as the
# payoff gets steeper (smaller $\varepsilon$: crowding costs more). Where the equilibrium's
# welfare is not positive (low thresholds: the patrons crowd a small bar into losses) the
# ratio is undefined and left blank; the loss is not.

# %%
scan = mw.scan(mw.SantaFeBar, {"threshold": map_thresholds, "eps": map_eps},
               fixed={"sigma": sigma, "T": T}, nx=nx_map, nt=nt_map, objective="social",
               progress=False)
fig_map = game_plots.plot_price_of_anarchy(scan)
poa = scan["price_of_anarchy"].values
print(f"{int(scan['converged'].sum())} of {scan['converged'].size} points converged; "
      f"smallest loss {float(scan['welfare_loss'].min()):.3f}")
fig_map

# %% [markdown]
# ## 4. N patrons told to follow the planner
#
# `mw.n_player` lets $N$ patrons play a policy and measures the $\varepsilon$-Nash gap: what
# one patron gains by leaving it for her best response (against the bar's own payoff $F$).
# For the equilibrium the gap is small and falls with $N$; for the planner's policy it is of
# order one whatever $N$: the optimum is not an equilibrium. A planner who wants it must
# change what the patrons pay: a toll of $-A F'(A)$ on going, the crowding they cause, makes
# the planner's price their own.

# %%
patrons = {name: mw.n_player(bar, res, n_players=n_players, n_samples=n_samples, seed=seed)
           for name, res in (("equilibrium", equilibrium), ("planner", optimum))}
rows = [{"policy": name, "mean_attendance": float(np.mean(p.attendance)),
         "distance": p.distance_rms[0], "gap": p.gap_mean[0], "gap_se": p.gap_mean[1]}
        for name, p in patrons.items()]
print(format_table(rows, ["policy", "mean_attendance", "distance", "gap", "gap_se"]))

# %%
if out_dir:
    mw.save_run(out_dir, optimum, parameters={
        "threshold": threshold, "eps": eps, "sigma": sigma, "T": T, "nx": nx, "nt": nt,
        "map_thresholds": map_thresholds, "map_eps": map_eps, "nx_map": nx_map,
        "nt_map": nt_map, "n_players": n_players, "n_samples": n_samples, "seed": seed},
        metrics={"summary": dict(s), "checks": checks,
                 "price_of_anarchy": np.where(np.isnan(poa), None, poa).tolist(),
                 "welfare_loss": scan["welfare_loss"].values.tolist()},
        figures={"planner_paths": fig_paths, "price_of_anarchy": fig_map},
        tables={"n_patrons": rows})

# %% [markdown]
# ## Exercises
#
# 1. **The toll.** Solve `mw.SantaFeBar` with the payoff of going lowered by the planner's
#    toll $-A F'(A)$ at the optimum's attendance (write it as your own model, notebook 09).
#    Check that its equilibrium is the planner's optimum.
# 2. **Noise.** Rerun with `sigma = 1.0`. The patrons cannot stay put: how do the two
#    welfares and their ratio change?
# 3. **Steep payoffs.** Set `eps = 0.01` and a low `threshold = 0.3`. Newton's method may
#    stall (`optimum.converged` is False): the planner's problem has several critical
#    points there. Start from the optimum at `eps = 0.03` (`initial=`) and compare.
