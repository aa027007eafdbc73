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
# # From N patrons to the mean field
#
# W. B. Arthur's El Farol problem is a game of **100 patrons**: each decides whether to go to
# the bar, and the bar is fun only if it is not crowded. The Santa Fe Bar model of this
# workbench replaces the patrons by a **continuum**: a density $m(t, \theta)$ of preferences,
# an attendance $A(t) = \int_{\theta > 0} m(t, \theta)\,d\theta$, and an equilibrium feedback
# $\alpha^*(t, \theta) = -\partial_\theta u(t, \theta)$. This notebook asks how good that
# approximation is for a finite number $N$ of patrons:
#
# 1. If $N$ patrons all play $\alpha^*$, how far is their realised attendance $A_N(t)$ from
#    the mean-field $A(t)$?
# 2. Is $\alpha^*$ still (nearly) optimal for one of them, that is, how much could a patron
#    gain by deviating? This is the $\varepsilon$ of an $\varepsilon$-Nash equilibrium.

# %% nbmake={"mock": {"n_samples": 4, "nt": 40, "nx": 41, "sizes": [100, 1000]}} tags=["parameters"]
# width of the payoff's threshold in F (the other Santa Fe Bar parameters at their defaults)
eps = 0.05
# grid of the mean-field solve (nx points in θ, nt time steps)
nx = 401
nt = 400
# numbers of patrons N, and independent samples (groups of N patrons) per N
sizes = [100, 1000, 10000, 100000]
n_samples = 20
# the slopes are fitted over N <= fit_max_n (above it the discretization floor shows)
fit_max_n = 10000
seed = 0
# where the patrons are simulated ("numpy"/"cpu", or "torch" with "cpu" | "cuda" | "mps")
backend = "numpy"
device = "cpu"
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import numpy as np

import mfgwork as mw
from mfgwork import game_plots
from mfgwork.analysis.n_player import check_size, fitted_slope
from mfgwork.analysis.studies import format_table
from mfgwork.core.errors import MAX_COUNT, check_int, check_list
from mfgwork.workflows.runs import solve_options

# %matplotlib inline

problem = mw.SantaFeBar(eps=eps)
solve_options(nx=nx, nt=nt, method="fdm", backend="numpy", device="cpu", tol=1e-8,
              max_iter=300)
sizes = check_list("sizes", sizes, check_int, low=1, high=MAX_COUNT)
n_samples = check_int("n_samples", n_samples, low=2, high=MAX_COUNT)
fit_max_n = check_int("fit_max_n", fit_max_n, low=1)
if sum(n <= fit_max_n for n in set(sizes)) < 2:
    raise mw.ParameterError(f"fit_max_n={fit_max_n} is invalid with sizes={sizes}: the slopes "
                            "are fitted over N <= fit_max_n, which must hold at least two "
                            "distinct sizes")
seed = check_int("seed", seed, low=0)
patrons_backend = mw.get_backend(backend, device)
try:   # the largest group of patrons fits in memory
    check_size(problem.grid(nx, nt), patrons_backend, max(sizes), n_samples, gap=True)
except mw.ParameterError as exc:
    raise mw.ParameterError(f"sizes={sizes} with n_samples={n_samples} is invalid: {exc}"
                            ) from None
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# solve the mean-field game
result = mw.solve(problem, nx=nx, nt=nt, tol=1e-8, max_iter=300, progress=False)
print(f"mean field: converged={result.converged} in {result.iterations} iterations, "
      f"A(T) = {float(result.attendance[-1]):.4f}")

# %% [markdown]
# ## 1. N patrons playing the equilibrium feedback
#
# Patron $j = 1, \dots, N$ starts from an independent draw $\theta_j(0) \sim m_0$ and moves by
#
# $$
# d\theta_j = \alpha^*(t, \theta_j)\,dt + \sigma\,dW_j, \qquad
# \alpha^* = -\partial_\theta u \quad \text{(reflecting walls at } \pm\theta_{max}),
# $$
#
# simulated by Euler–Maruyama on the time levels of the solve with the kernels of the
# particle Fokker–Planck solver. The patrons do not react to one another: each plays the
# mean-field feedback. What they produce is a random attendance path, an exact count
#
# $$ A_N(t_n) = \frac{1}{N}\,\#\{j : \theta_j(t_n) > 0\}. $$
#
# `mw.n_player(problem, result, N, n_samples, seed)` simulates `n_samples` independent
# groups of $N$ patrons and measures, per group:
#
# - the **distance** $\max_n |A_N(t_n) - A(t_n)|$ (we report its root-mean-square over the
#   groups, with a Monte Carlo standard error);
# - the **cost error** $\int m_0\,(v_N - u)(0, \theta)\,d\theta$: how much the expected cost
#   of following $\alpha^*$ changes when the attendance is $A_N$ rather than $A$. Here $v_N$
#   solves the linear *policy-evaluation* equation
#   $-\partial_t v - \nu\,\partial_{\theta\theta} v - \alpha^* \partial_\theta v
#   = \tfrac12|\alpha^*|^2 - F(A_N(t))\,\mathbf 1\{\theta > 0\}$;
# - the **$\varepsilon$-Nash gap** $\int m_0\,(v_N - u_N^{BR})(0, \theta)\,d\theta \ge 0$:
#   what one patron gains by playing the best response to the realised path instead of
#   $\alpha^*$; $u_N^{BR}$ solves the HJB equation with running cost
#   $-F(A_N(t))\,\mathbf 1\{\theta > 0\}$. The deviator is assumed to know the whole path in
#   advance, so this is an upper bound on what a real deviator, who only sees the past, gains.

# %%
study = mw.n_player_study(problem, result, sizes, n_samples=n_samples, seed=seed,
                          backend=backend, device=device)
rows = [r.metrics() for r in study]
print(format_table(rows, ["n_players", "distance", "distance_se", "cost_error", "gap",
                          "gap_se", "bias", "time_simulation"]))

# %% [markdown]
# ## 2. Realised attendance against the mean field
#
# Each thin line is the attendance of one group of $N$ patrons; the thick line is the
# mean-field $A(t)$. With 100 patrons the paths scatter by several percentage points (several
# patrons) around the mean field; every factor 100 in $N$ divides the scatter by
# about 10. All paths rise from $A(0) \approx 1/2$ to the plateau just above the threshold
# $A^* = 0.6$, where the payoff $F$ vanishes: the mean field describes the *shape* of the
# dynamics already for small $N$.

# %%
fig_paths = game_plots.plot_n_player_paths(study)
fig_paths

# %% [markdown]
# ## 3. How fast does the mean field take over?
#
# **Theory.** At each time the $N$ patrons are independent, each at the bar with probability
# $A(t)$, so $A_N(t)$ has mean $A(t)$ and standard deviation $\sqrt{A(1 - A)/N}$: the central
# limit theorem gives a distance of order $N^{-1/2}$ (the maximum over time of a Gaussian
# process of that size). The cost error is linear in $F(A_N) - F(A)$, so it also falls like
# $N^{-1/2}$. The gap falls faster in the end: $\alpha^*$ is the best response to $A$, so a
# small change of the path changes the best achievable cost and the cost of $\alpha^*$ by the
# same first-order amount (an envelope argument), and what is left is second order,
# $O(|F(A_N) - F(A)|^2) = O(N^{-1})$. "Small" means small against the width $\varepsilon$ of
# the payoff's threshold: $F$ drops from $G$ to $B$ over a few $\varepsilon = 0.05$ of
# attendance, while the fluctuations are about $0.5/\sqrt N$, so the $N^{-1}$ regime starts
# only well beyond $N = (0.5/0.05)^2 = 100$; below, $F(A_N)$ swings over its whole range and
# the gap falls more slowly. The classical bound $\varepsilon_N = O(N^{-1/2})$ for
# $\varepsilon$-Nash equilibria of mean field games is an upper bound; here the gap ends up
# falling faster.
#
# **Measured.** The left panel shows the distance with its fitted slope (over
# $N \le$ `fit_max_n`), the right panel the cost error and the gap; error bars are two
# standard errors. The dotted line is the **bias** $\max_t |\overline{A_N}(t) - A(t)|$ of the
# path averaged over all groups: the patrons' Euler–Maruyama dynamics and the
# finite-difference Fokker–Planck equation agree only up to the discretization error
# (first order in the grid: halving $h$ halves it). Once the fluctuations fall below it,
# the distance and the gap level off at that floor; a finer grid lowers it.

# %%
fig_convergence = game_plots.plot_n_player_convergence(rows, fit_max_n=fit_max_n)
n = np.array(sizes, dtype=float)
fitted = n <= fit_max_n
slopes = {key: fitted_slope(n[fitted], np.array([r[key] for r in rows])[fitted])
          for key in ("distance", "cost_error", "gap")}
print("fitted slopes over N <=", fit_max_n, {k: round(v, 3) for k, v in slopes.items()})
fig_convergence

# %% [markdown]
# ## 4. What it means for the El Farol bar with 100 patrons
#
# The numbers below read the smallest $N$ of the study (100 with the default parameters,
# Arthur's bar): the typical largest deviation of the attendance from the mean field over
# the evening, in patrons, and the gain of a perfectly informed deviator per unit time,
# compared with the payoff of an uncrowded bar $G$.

# %%
smallest = rows[0]
reading = {"n_players": smallest["n_players"],
           "typical_max_deviation_patrons": smallest["distance"] * smallest["n_players"],
           "gap": smallest["gap"], "gap_per_unit_time": smallest["gap"] / problem.T,
           "gap_per_unit_time_over_G": smallest["gap"] / problem.T / problem.good}
print(reading)

# %% [markdown]
# With 100 patrons the attendance strays from the mean-field path by about ten patrons at its
# worst moment of the evening. That is as wide as the payoff's threshold ($\varepsilon = 0.05$,
# five patrons): on a given night the bar is often clearly overcrowded or clearly pleasant
# where the mean field predicts the indifference level $F = 0$, and a patron who knew the
# night's attendance in advance could gain several percent of $G$ per unit time. For Arthur's
# 100 patrons the mean-field equilibrium describes the average night and the shape of the
# dynamics well, but it is only a rough $\varepsilon$-Nash equilibrium; with $10^4$ patrons
# the gap is already about ten times smaller, and it keeps falling like $1/N$. A smoother
# payoff (larger $\varepsilon$) makes the same attendance errors cost less (Exercise 1).

# %%
if out_dir:
    mw.save_run(out_dir, result, parameters={
        "eps": eps, "nx": nx, "nt": nt, "sizes": sizes, "n_samples": n_samples,
        "fit_max_n": fit_max_n, "seed": seed, "backend": backend, "device": device},
        metrics={"slopes": slopes, "reading_100": reading},
        figures={"n_player_paths": fig_paths, "n_player_convergence": fig_convergence},
        tables={"n_player": rows})

# %% [markdown]
# ## Exercises
#
# 1. **Smoother payoff.** Set the parameter `eps = 0.2` and rerun. How do the cost
#    error and the gap change at $N = 100$? Explain with the slope $F'(A)$ of the payoff.
# 2. **The floor.** Rerun with `nx = nt = 101` and then `201`. Check that the bias roughly
#    halves when $h$ halves, and find the $N$ beyond which the distance no longer falls.
# 3. **A myopic deviator.** The gap assumes a deviator who knows the whole path $A_N$. Write
#    the cost of a deviator who plays the best response to the *mean-field* path $A$ instead
#    (hint: that is $\alpha^*$ itself). What does this say about how much of the gap is the
#    value of information?
