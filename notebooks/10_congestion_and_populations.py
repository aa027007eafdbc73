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
# # Santa Fe under other costs of moving, and with two groups of patrons
#
# The Santa Fe Bar of the primer has patrons who steer their preference $\theta$ at the cost
# $\tfrac12\alpha^2$ (the Hamiltonian $H = \tfrac12 p^2$) and who all read the bar alike. This
# notebook keeps the payoff $F(A) = G - (G - B)\,s\big((A - A^*)/\varepsilon\big)$ and changes
# the rest, one thing at a time:
#
# - **congestion**, `mw.Congestion(c, alpha)`: $H = p^2 / \big(2\,(c + m)^\alpha\big)$, so
#   the speed $\alpha^* = -\partial_\theta u / (c + m)^\alpha$ is lower where the density is
#   high: changing one's mind is harder in a crowd of like-minded patrons;
# - **power Hamiltonians**, `mw.Power(q)`: $H = |p|^q/q$, the cost of moving at speed $\alpha$
#   being $|\alpha|^{q'}/q'$ with $1/q + 1/q' = 1$. For $q = 1.5$ ($q' = 3$) small moves cost
#   much less than under the quadratic cost and large ones more; for $q = 3$ ($q' = 1.5$) small
#   moves cost more and large ones less;
# - **two groups** sharing one bar (`mw.SantaFePopulations`): regulars and newcomers with
#   their own threshold and noise; the attendance they all read is the share-weighted sum of
#   the groups' attendances.
#
# The noise $\sigma$ stays as it is: it keeps carrying patrons across $\theta = 0$, and the cost
# of moving decides how cheaply they can be brought back.

# %% nbmake={"mock": {"nt": 20, "nx": 21, "tol": 1e-05}} tags=["parameters"]
# the shared Santa Fe payoff is mw.SantaFeBar's default (A* = 0.6, G = 10, B = −5, ε = 0.05)
sigma = 0.5  # noise of the one-population models
congestion_c = 1.0  # c of mw.Congestion(c, alpha)
congestion_alpha = 0.5  # alpha of mw.Congestion(c, alpha)
powers = [1.5, 3.0]  # q of mw.Power(q)
# two groups: regulars (share, threshold A*, σ) and newcomers (the rest of the patrons)
share_regulars = 0.6
threshold_regulars = 0.6
sigma_regulars = 0.3
threshold_newcomers = 0.5
sigma_newcomers = 0.8
# grid and solver
nx = 101  # grid points in θ, walls included
nt = 100  # time steps
tol = 1e-8  # stop when the certified fixed-point residual is at most tol
t_early = 0.2  # the time at which the table reads the early attendance
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters, then solve every model from a cold start
import numpy as np

import mfgwork as mw
from mfgwork import game_plots, plots
from mfgwork.analysis.studies import format_table

# %matplotlib inline

models = {"quadratic": mw.SantaFeBar(sigma=sigma)}
models[f"congestion c={congestion_c:g}, α={congestion_alpha:g}"] = mw.SantaFeBar(
    sigma=sigma, hamiltonian=mw.Congestion(congestion_c, congestion_alpha))
for q in powers:
    models[f"power q={q:g}"] = mw.SantaFeBar(sigma=sigma, hamiltonian=mw.Power(q))
groups = mw.SantaFePopulations((
    mw.Population("regulars", share_regulars,
                  mw.SantaFeBar(threshold=threshold_regulars, sigma=sigma_regulars)),
    mw.Population("newcomers", 1.0 - share_regulars,
                  mw.SantaFeBar(threshold=threshold_newcomers, sigma=sigma_newcomers))))
options = {"nx": nx, "nt": nt, "tol": tol, "progress": False}

results = {name: mw.solve(problem, **options)
           for name, problem in (models | {"two groups": groups}).items()}
for name, r in results.items():
    if not r.converged:
        print(f"*** NOT AN EQUILIBRIUM: {name} did not converge (residual {r.residual:.1e}); "
              "its curves below are its best iterate")

# %% [markdown]
# ## 1. One table
#
# Every model is solved by the same call, `mw.solve(problem, **options)` (the one front door,
# for the two groups as for a single population), from a cold start, on the same grid, to the
# same `tol`. The first table says how each solve went: whether it converged, its
# `iterations` (the best responses it computed, each one HJB sweep backward and one
# Fokker–Planck sweep forward, line searches and certificates included), the Newton steps
# among them, the certified residual (one best response to the returned equilibrium
# reproduces it to this relative residual) and the wall time of the solve in seconds. The
# second reads the equilibria: the attendance early on ($t$ = `t_early`), at $T/2$ and at $T$,
# how far $A(T/2)$ lies below the level where the payoff vanishes,
# $A^* + \varepsilon\log(G/(-B))$, and the mean attendance.
#
# Every solve is Newton's method on the attendance path $A(t)$, which the payoff reads
# (`res.params["iteration"]`, printed below the tables, names the method and how each Newton
# system is solved); what differs is how exact the Newton step can be and what surrounds it
# (`res.extra["newton_on_coupling"]`, printed where a model has a note):
#
# - **quadratic and $q = 3$**: the game has a potential, so the Newton system is symmetric and
#   positive definite, with the exact tangent of the discrete scheme; it is solved
#   matrix-free by conjugate gradients. No note.
# - **$q = 1.5$**: $\partial_{pp} H = (q - 1)\,|p|^{q - 2}$ is unbounded at $p = 0$ (a tiny
#   gradient already sets patrons moving), so the tangent is approximate: it caps the
#   curvature by evaluating it at a small floor of $|p|$. The line search and the
#   certificate use the exact scheme, so the answer is certified like the others; the
#   approximate step costs a few more Newton steps.
# - **congestion**: $H$ depends on the density, so the coupling state is the whole density,
#   not only $A(t)$. The solver freezes the density that $H$ sees, solves that game (a
#   potential game again) by Newton on $A(t)$, and updates the frozen density by an outer
#   Anderson iteration (`res.extra["outer_iterations"]`), each outer iterate certified by one
#   best response of the fully coupled system. It needs the most best responses of the five.
# - **two groups**: the groups read the shared attendance with payoffs of their own, so the
#   Newton system is not symmetric; it is solved by GMRES, with Anderson mixing as a fallback
#   should the line search fail.
#
# The first solve of a fresh Python session also loads the compiled loops of the sweeps from
# Numba's cache: `res.timings["compile"]`, printed below and left out of the `seconds`
# column. The very first run after an install compiles them instead, a few seconds more,
# part of which (the loops of `mw.Power`, `mw.Congestion` and of the Newton tangents) falls
# inside the first solve that uses them: solve again to see the steady times.

# %%
level = plots.equilibrium_attendance(models["quadratic"].params())
rows = []
for name, r in results.items():
    t, A = mw.to_numpy(r.t), mw.to_numpy(r.attendance)
    rows.append({"model": name, "converged": r.converged, "iterations": r.iterations,
                 "newton_steps": r.extra.get("newton_steps", 0), "residual": r.residual,
                 "seconds": r.timings["total"] - r.timings.get("compile", 0.0),
                 "A_early": float(np.interp(t_early, t, A)), "A_mid": float(A[nt // 2]),
                 "gap_mid": level - float(A[nt // 2]), "A_end": float(A[-1]),
                 "mean_attendance": float(A.mean())})
print(format_table(rows, ["model", "converged", "iterations", "newton_steps", "residual",
                          "seconds"]))
print(f"\nF(A) = 0 at A = {level:.4f}; A_early at t = {t_early:g}, A_mid at T/2, "
      f"gap_mid = {level:.4f} - A(T/2)")
print(format_table(rows, ["model", "A_early", "A_mid", "gap_mid", "A_end",
                          "mean_attendance"]))
print(f"\nloading the compiled loops: {results['quadratic'].timings.get('compile', 0.0):.2f} s")
solvers = {name: {"scheme": r.params["iteration"]["scheme"],
                  "system": r.params["iteration"].get("system"),
                  "note": r.extra.get("newton_on_coupling"),
                  "outer_iterations": r.extra.get("outer_iterations")}
           for name, r in results.items()}
for name, how in solvers.items():
    print(f"{name}: {how['scheme']} ({how['system']})"
          + (f"; {how['note']}" if how["note"] else "")
          + (f"; {how['outer_iterations']} outer iterations" if how["outer_iterations"] else ""))

# %% [markdown]
# ## 2. Attendance paths
#
# All four one-population games climb from $A(0) = 1/2$ to a plateau just below the level
# where going no longer pays (dashed), and relax a little before $T$, when nothing is left to
# gain. The plateau is a property of the payoff, so it hardly moves; the costs of moving show
# in how the patrons get there and how closely they hold it (the second figure zooms in).
# At the defaults ($\sigma = 0.5$, 101 × 100):
#
# - **$q = 3$** starts fastest (the highest attendance up to $t \approx 0.5$: large moves are
#   cheap, so the strong early pull of an uncrowded bar is followed at once) and then holds
#   the plateau least well: it sits about
#   $9 \times 10^{-4}$ below the level, and relaxes most before $T$. Small corrections are
#   expensive, so a larger payoff $F(A) > 0$ is needed to bring back the patrons that the
#   noise carries across $\theta = 0$.
# - **$q = 1.5$** starts slowest (the lowest attendance up to $t \approx 0.3$: large moves
#   are expensive), then overtakes the others and holds the plateau best,
#   about $2 \times 10^{-5}$ below the level, and stays there until $T$: tiny corrections cost
#   almost nothing, so the smallest payoff suffices to hold the marginal patrons against the
#   noise.
# - **congestion** is a little slower than the quadratic game all through the climb
#   (patrons near $\theta = 0$, where the density is high, move more slowly) and sits a
#   little lower on the plateau, for the same reason as $q = 3$, to a much smaller degree.
#
# The numbers behind each claim are in the table above (`A_early`, `gap_mid`, `A_end`).

# %%
single = {name: (r.t, r.attendance) for name, r in results.items() if name != "two groups"}
fig_paths = game_plots.plot_attendance_paths(
    single | {"two groups (whole bar)": (results["two groups"].t,
                                         results["two groups"].attendance)},
    level=level, threshold=0.6, title="Attendance A(t)")
fig_paths

# %%
fig_zoom = game_plots.plot_attendance_paths(single, level=level,
                                            title="Attendance close to the plateau")
fig_zoom.axes[0].set_ylim(level - 0.015, level + 0.002)
fig_zoom

# %% [markdown]
# ## 3. Densities
#
# Left, the density of preferences at $T/2$, $m(T/2, \theta)$, of every one-population game
# (the patrons above $\theta = 0$ attend). The four curves nearly meet at $\theta = 0$, where
# the marginal patrons decide, since the attendance is nearly the same for all; they differ
# most at the peak just above the line, which at the defaults is highest for $q = 3$, then
# congestion and the quadratic game, and lowest for $q = 1.5$. Right, the two groups of
# section 4, each density weighted by its share, early ($t = T/10$, dotted) and at $T/2$: the
# regulars' density moves above $\theta = 0$ and the newcomers' below it.

# %%
from matplotlib.figure import Figure

fig_density = Figure(figsize=(10.5, 3.8), layout="constrained")
ax_single, ax_groups = fig_density.subplots(1, 2)
for name, r in results.items():
    if name != "two groups":
        ax_single.plot(mw.to_numpy(r.x), mw.to_numpy(r.M)[nt // 2], label=name)
ax_single.set(xlabel="preference θ", ylabel="density m(T/2, θ)",
              title="One population: m at T/2")
ax_single.axvline(0.0, color="gray", lw=0.8)
ax_single.legend(fontsize="small")
pops = results["two groups"]
for k, (name, share) in enumerate(zip(groups.names, groups.shares, strict=True)):
    for n, ls in ((nt // 10, ":"), (nt // 2, "-")):
        ax_groups.plot(mw.to_numpy(pops.x), share * mw.to_numpy(pops.M)[k, n], ls=ls,
                       color=f"C{k}", label=f"{name}, t = {pops.t[n]:.3g}")
ax_groups.axvline(0.0, color="gray", lw=0.8)
ax_groups.set(xlabel="preference θ", ylabel="share × density w_k m_k(t, θ)",
              title="Two groups sharing one bar")
ax_groups.legend(fontsize="small")
fig_density

# %% [markdown]
# ## 4. Two groups split the bar
#
# Regulars (a share `share_regulars` of the patrons, threshold `threshold_regulars`, little
# noise) and newcomers (the rest, a lower threshold, more noise) read the same attendance
# $A = w_{reg} A_{reg} + w_{new} A_{new}$. Each group's payoff vanishes at its own level,
# $A^*_k + \varepsilon\log(G/(-B))$: $0.635$ for the regulars and $0.535$ for the newcomers at
# the defaults. Between these two levels the bar pays the regulars and not the newcomers, so
# at the defaults (shares 0.6 / 0.4) the regulars go (their attendance climbs towards 1), the
# newcomers stay home (theirs falls towards 0), and the whole bar settles near the regulars'
# share, 0.6, inside that interval: no patron of either group wants to change. (The table
# below reads each group's attendance at $T/2$.) With a share
# of regulars above 0.635 or below 0.535 the split would be different (exercise 2).

# %%
fig_groups = game_plots.plot_attendance_paths(
    {f"{name} A_{name}(t)": (pops.t, pops.observables[f"attendance_{name}"])
     for name in groups.names} | {"whole bar A(t)": (pops.t, pops.attendance)},
    title="Two groups: attendance of each and of the bar")
group_rows = [{"group": name, "share": share,
               "A_mid": float(mw.to_numpy(pops.observables[f"attendance_{name}"])[nt // 2]),
               "group_residual": pops.extra["group_residuals"][name]}
              for name, share in zip(groups.names, groups.shares, strict=True)]
print(format_table(group_rows))
print(f"whole bar: A(T/2) = {rows[-1]['A_mid']:.4f}; certified residual "
      f"{pops.residual:.1e} (the largest of the shared path's and each group's); "
      f"check: {pops.check(groups):.1e}")
fig_groups

# %%
figures = {"attendance_paths": fig_paths, "attendance_zoom": fig_zoom,
           "densities": fig_density, "two_groups": fig_groups}
if out_dir:
    parameters = options | {
        "sigma": sigma, "congestion_c": congestion_c, "congestion_alpha": congestion_alpha,
        "powers": powers, "share_regulars": share_regulars,
        "threshold_regulars": threshold_regulars, "sigma_regulars": sigma_regulars,
        "threshold_newcomers": threshold_newcomers, "sigma_newcomers": sigma_newcomers,
        "t_early": t_early}
    folder = mw.save_run(out_dir, results["quadratic"], parameters=parameters,
                         metrics={"comparison": rows, "groups": group_rows,
                                  "solvers": solvers, "plateau_level": level},
                         figures=figures,
                         tables={"comparison": rows, "groups": group_rows})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **Noise against the cost of moving.** Solve the quadratic and the $q = 3$ games with
#    $\sigma = 0.3$ and $\sigma = 0.8$. How does `gap_mid` change with $\sigma$ for each? Explain
#    with the flux of patrons that the noise carries across $\theta = 0$ and the speed that a
#    small gradient buys under each cost.
# 2. **Who gets the bar.** Set `share_regulars = 0.8`, then 0.4. Which group fills the bar, and
#    where does the whole attendance settle? Compare with the levels
#    $A^*_k + \varepsilon \log(G/(-B))$ of the two groups.
# 3. **Heavier congestion, and a warm start.** Raise `congestion_alpha` to 1 and lower
#    `congestion_c` to 0.2. How many iterations does the solve need, and how much slower is
#    the climb to the plateau? Does the plateau itself move? Then solve the heavier game again
#    from the default one's equilibrium (the `initial` option of `mw.solve`): how many best
#    responses does the warm start save? The start changes the iterations, not the answer:
#    compare the two attendance paths.
