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
# # The long run
#
# Every Santa Fe solve of the earlier notebooks has the same shape: the attendance leaves
# $A(0) \approx 1/2$, rests on a plateau, and leaves the plateau again near the end of the
# evening, when moving is no longer worth anything. The plateau does not depend on the
# horizon $T$: it is the **long run** of the game. As $T \to \infty$ the value behaves like
# $u(t, \theta) \approx \lambda (T - t) + v(\theta)$ and the density settles to $m(\theta)$,
# which solve the **ergodic** system
#
# $$
# \lambda - \nu v'' + \tfrac12 |v'|^2 = f(\theta, m), \qquad
# -\nu m'' - (m\,v')' = 0, \qquad \int m = 1, \quad \int v = 0 .
# $$
#
# $\lambda$, the *ergodic constant*, is a patron's cost per unit time in the long run. This
# notebook solves the system directly (`mw.solve(bar, stationary=True)`, no time grid),
# watches finite horizons approach it, and checks the solver against an exact ergodic
# solution.

# %% nbmake={"mock": {"horizons": [10.0, 40.0], "nx": 41, "sizes": [21, 41]}} tags=["parameters"]
# the bar (the other Santa Fe Bar parameters at their defaults)
threshold = 0.6
eps = 0.05
sigma = 0.5
# grid (nx points in θ); the finite horizons T, each with steps_per_unit steps per unit time
nx = 201
horizons = [10.0, 30.0, 120.0]
steps_per_unit = 5
# the grids of the check against the exact ergodic solution
sizes = [41, 81, 161, 321]
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import numpy as np

import mfgwork as mw
from mfgwork import game_plots
from mfgwork.analysis.studies import ergodic_refinement, fitted_order, format_table
from mfgwork.core.errors import check_int, check_list, check_real
from mfgwork.problems.verification import ErgodicProblem

# %matplotlib inline

bar = mw.SantaFeBar(threshold=threshold, eps=eps, sigma=sigma)
nx = check_int("nx", nx, low=3)
horizons = check_list("horizons", horizons, check_real, low=0.0)
steps_per_unit = check_int("steps_per_unit", steps_per_unit, low=1)
for i, horizon in enumerate(horizons):   # round(steps_per_unit * T) steps for each T
    if round(steps_per_unit * horizon) < 1:
        raise mw.ParameterError(f"horizons[{i}]={horizon!r} is invalid with steps_per_unit="
                                f"{steps_per_unit}: it gets round(steps_per_unit * T) = 0 time "
                                f"steps; must be > {0.5 / steps_per_unit:g}")
sizes = check_list("sizes", sizes, check_int, min_len=2, low=3)
if len(set(sizes)) < 2:
    raise mw.ParameterError(f"sizes={sizes} is invalid: the observed orders are fitted over "
                            "the grids, so it must list at least two different nx")
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# solve the long run
long_run = mw.solve(bar, nx=nx, stationary=True)
A_long = long_run.summary["mean_attendance"]
lam = long_run.summary["ergodic_constant"]
print(f"{long_run.status} in {long_run.iterations} Newton steps, certified residual "
      f"{long_run.check():.1e}: attendance {A_long:.6f}, λ = {lam:.3e}")

# %% [markdown]
# ## 1. Finite horizons approach the long run
#
# Each finite-horizon solve leaves the plateau near its two ends; in its middle it approaches
# the stationary solution as $T$ grows (left: the time axis scaled by $T$; right: the
# densities halfway through the evening against the stationary one). The approach is slow:
# the patrons far from the threshold feel the coupling weakly, and the tails of the density
# relax on the time scale of the noise over the whole domain. The value's average falls at
# the rate $\lambda$ in the middle of a long horizon: a second, independent estimate of the
# ergodic constant.

# %%
finite = [mw.solve(mw.SantaFeBar(threshold=threshold, eps=eps, sigma=sigma, T=T), nx=nx,
                   nt=int(round(steps_per_unit * T)), progress=False) for T in horizons]
rows = []
for res in finite:
    t, U = np.asarray(res.t), np.asarray(res.U)
    w = bar.grid(nx, t.size - 1).weights
    a, b = t.size // 4, t.size // 2
    rows.append({"T": float(t[-1]), "converged": bool(res.converged),
                 "attendance_gap_at_T/2": float(res.attendance[t.size // 2]) - A_long,
                 "lambda_from_the_value": float((U[a] @ w - U[b] @ w)
                                                / ((t[b] - t[a]) * w.sum())),
                 "lambda_long_run": lam})
print(format_table(rows))
fig_long_run = game_plots.plot_long_run(long_run, finite)
fig_long_run

# %% [markdown]
# ## 2. Against an exact ergodic solution
#
# Choose $v(x) = a\cos(kx)$ on $[0, 1]$ (it satisfies the Neumann conditions). Its stationary
# density is the Gibbs density $m^*(x) \propto e^{-v(x)/\nu}$ (the flux $\nu m' + m v'$
# vanishes), and the monotone coupling
# $f(x, m) = m - m^*(x) + \lambda^* - \nu v''(x) + \tfrac12 v'(x)^2$ makes
# $(v, m^*, \lambda^*)$ the exact ergodic solution for any $\lambda^*$
# (`mfgwork.problems.verification.ErgodicProblem`). The scheme is first order: every error
# halves with $h$.

# %%
refinement = ergodic_refinement(ErgodicProblem(), sizes, tol=1e-11)
orders = {key: fitted_order(refinement, key) for key in ("error_m", "error_v", "error_lambda")}
print(format_table(refinement))
print("observed orders", {k: round(v, 3) for k, v in orders.items()})

# %%
if out_dir:
    mw.save_run(out_dir, long_run, parameters={
        "threshold": threshold, "eps": eps, "sigma": sigma, "nx": nx, "horizons": horizons,
        "steps_per_unit": steps_per_unit, "sizes": sizes},
        metrics={"attendance": A_long, "ergodic_constant": lam, "orders": orders,
                 "certificate": long_run.check()},
        figures={"long_run": fig_long_run},
        tables={"horizons": rows, "refinement": refinement})

# %% [markdown]
# ## Exercises
#
# 1. **Noise.** Solve the long run for `sigma = 0.3, 0.5, 1.0`. How do the stationary
#    attendance and $\lambda$ move? Compare with the level $A^* + \varepsilon\log(G/(-B))$
#    where the payoff vanishes.
# 2. **A faster approach.** Rerun section 1 with `sigma = 1.0`. Does the middle of the
#    evening reach the long run sooner? Relate it to the time $\theta_{max}^2/\nu$ the noise
#    needs to cross the domain.
# 3. **Other models.** Solve the long run with `hamiltonian=mw.Power(1.5)` and
#    `hamiltonian=mw.Congestion()` (notebook 10). Which changes the stationary attendance
#    more?
