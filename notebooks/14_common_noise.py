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
# # Common noise
#
# In every game so far each patron's randomness is her own: $\sigma$ moves her preference,
# and with a continuum of patrons these idiosyncratic shocks average out, so the attendance
# $A(t)$ is a deterministic path. A **common noise** is a shock that everyone sees at once
# and that does not average out. Here the bar's attractiveness, the payoff `good` of an
# uncrowded bar, takes one of two values and switches as a two-state Markov chain: the
# evening is cut into `depth` epochs of equal length, and the state of each epoch is revealed
# to everyone at its start, drawn from row $s$ of the transition matrix after state $s$
# (the first one with probabilities ½, ½).
#
# The equilibrium is now **conditional** on the history. Each history
# $(s_0, \dots, s_l)$ is a node of a scenario tree; on it the patrons solve the HJB with that
# node's payoff, knowing the law of what comes next. At a revelation time $t_{l+1}$ their
# value is the expected value over the next state,
#
# $$
# u(t_{l+1}^-, \theta) = \sum_{s'} p(s' \mid s_l)\, u_{s'}(t_{l+1}^+, \theta),
# $$
#
# and the density of a node starts where its parent's density ended. The leaves of the tree
# are the $2^{\text{depth}}$ **scenarios**: each has its own attendance path, and its
# probability is the product of the chain's transitions along it. The chain here stays in
# its state with probability `persistence`.

# %% nbmake={"mock": {"depth": 3, "nx": 41}} tags=["parameters"]
# grid (nx points in θ, as many time steps, rounded up to a multiple of depth)
nx = 201
# the epochs, and the payoff good of an uncrowded bar in the two noise states
depth = 6
values = [12.0, 8.0]
# the chain stays in its state with probability persistence; the persistences compared
persistence = 0.8
persistences = [0.5, 0.95]
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import numpy as np
from matplotlib.figure import Figure

import mfgwork as mw
from mfgwork.analysis.studies import format_table
from mfgwork.core.errors import check_int, check_list, check_real
from mfgwork.problems.common_noise import MAX_SCENARIOS
from mfgwork.problems.santa_fe import MAX_PAYOFF

# %matplotlib inline

bar = mw.SantaFeBar()
nx = check_int("nx", nx, low=3)
# two epochs at least (the study compares them), 2^depth scenarios at most MAX_SCENARIOS
depth = check_int("depth", depth, low=2, high=MAX_SCENARIOS.bit_length() - 1)
values = check_list("values", values, check_real, min_len=2, max_len=2, low=bar.bad,
                    high=MAX_PAYOFF, low_open=False, high_open=False)   # good >= bad
persistence = check_real("persistence", persistence, low=0.0, high=1.0, low_open=False,
                         high_open=False)
persistences = check_list("persistences", persistences, check_real, min_len=2, max_len=2,
                          low=0.0, high=1.0, low_open=False, high_open=False)
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
# build the noise and estimate its cost


def chain(p: float, state_values=values) -> mw.CommonNoise:
    """The bar whose good switches between state_values, staying put with probability p."""
    q = round(1.0 - p, 12)
    return mw.CommonNoise(bar, "good", state_values, transition=[[p, q], [q, p]], depth=depth)


noise = chain(persistence)
print(noise)
print(noise.estimate(nx, nx))

# %% [markdown]
# ## 1. The cost, before solving
#
# `noise.estimate(nx, nt)` counts the tree before any work: the scenarios, the nodes (every
# history, $2 + 4 + \dots + 2^{\text{depth}}$), the **cells** (node time steps times grid
# points: one sweep over the tree, against $n_t n_x$ for the bar alone), the memory held and
# the seconds on one CPU core. Each node is an epoch of $n_t/\text{depth}$ steps, so the
# work grows like the number of nodes over the depth, about $2^{\text{depth}+1}/\text{depth}$
# times one solve of the bar. A tree too large for the memory is refused before it starts.
#
# ## 2. The conditional equilibrium
#
# `mw.solve(noise)` finds the equilibrium on the whole tree at once (Newton's method on the
# attendance of every node, each direction by GMRES with the exact tangent of the scheme on
# the tree), starting from the bar's own equilibrium of each state. The result has one path
# per scenario: `U` and `M` have dimensions (scenario, t, θ), `res.attendance` is
# (scenarios, nt + 1), and `res.arrays["probability"]` is the law of the scenarios.

# %%
res = mw.solve(noise, nx=nx, nt=nx)
probability = res.arrays["probability"]
print(f"{res.status}: {noise.scenarios} scenarios, {res.extra['newton_steps']} Newton steps, "
      f"{res.extra['tangent_products']} tangent products, {res.timings['total']:.2f} s "
      f"(estimated {noise.estimate(nx, nx)['seconds']:.2f} s); probabilities sum to "
      f"{probability.sum():.15f}")
print(f"expected mean attendance {res.summary['mean_attendance']:.6f} "
      f"(the probability-weighted summary)")
fig_fan = mw.plots.plot_attendance_fan(res)
fig_fan

# %% [markdown]
# Every scenario leaves $A(0) = 1/2$ together; at each revelation (dotted lines) the paths
# split, the good news raising the attendance and the bad news lowering it, each line as
# opaque as its scenario is likely. The black line is the expected attendance and the band
# holds the middle 80% of the scenarios' law. Between two revelations the scenarios that
# share a history coincide: two paths in the first epoch, four in the second, and so on.
#
# ## 3. The certificate
#
# As for every solve, the returned densities are certified by a best response: `res.check()`
# solves the HJB on the whole tree against the coupling of the returned densities, then the
# Fokker–Planck equation for the resulting controls, and compares the attendance it finds
# with the one it started from. `res.residual` is the largest relative difference over the
# scenarios; `res.arrays["scenario_residual"]` holds each scenario's.

# %%
certificate = res.check()
scenario_residual = res.arrays["scenario_residual"]
print(f"res.residual {res.residual:.3e}, res.check() {certificate:.3e}")
worst = int(np.argmax(scenario_residual))
print(f"largest scenario residual {scenario_residual[worst]:.3e} "
      f"({res.labels['scenario'][worst]}), smallest {scenario_residual.min():.3e}")

# %% [markdown]
# ## 4. Two checks that do not use the certificate
#
# **(a) No noise.** With the same payoff in both states the news carries nothing: every
# scenario must be the bar's own equilibrium, `mw.solve(bar)` on the same grid (the time
# steps rounded up to a multiple of the depth).
#
# **(b) A chain that never moves.** With the identity as transition matrix, the first state
# decides the whole evening: the scenario that stays in state $s$ must be the deterministic
# equilibrium of the bar with that state's payoff.

# %%
noiseless = chain(persistence, [bar.good, bar.good])
steps = noiseless.steps(nx)
res_noiseless = mw.solve(noiseless, nx=nx, nt=nx)
alone = mw.solve(bar, nx=nx, nt=steps, progress=False)
noiseless_difference = float(np.max(np.abs(np.asarray(res_noiseless.M)
                                           - np.asarray(alone.M)[None])))
print(f"(a) equal states: max |ΔM| over {noiseless.scenarios} scenarios = "
      f"{noiseless_difference:.1e}")

frozen = mw.CommonNoise(bar, "good", values, transition=np.eye(2), depth=depth)
res_frozen = mw.solve(frozen, nx=nx, nt=nx)
persistent_difference = 0.0
for s, value in enumerate(values):
    k = int(np.flatnonzero((res_frozen.arrays["noise_state"] == s).all(axis=1))[0])
    own = mw.solve(mw.SantaFeBar(good=value), nx=nx, nt=steps, progress=False)
    gap = float(np.max(np.abs(np.asarray(res_frozen.M)[k] - np.asarray(own.M))))
    persistent_difference = max(persistent_difference, gap)
    print(f"(b) scenario {res_frozen.labels['scenario'][k]} against the bar with good = "
          f"{value:g}: max |ΔM| = {gap:.1e}")

# %% [markdown]
# ## 5. What the news predicts
#
# The same two states with a chain that forgets at once (persistence ½: the next state is a
# coin toss whatever today's) and one that remembers (persistence 0.95). Split the scenarios
# by the first state and take the expected attendance of each half,
# $E[A(t) \mid s_0]$. Their gap is the patrons' response to the first piece of news. During
# the first epoch both chains show it; but with persistence ½ it shrinks **before** the
# second revelation, since the patrons know that the payoff after it no longer depends on
# today's, and it is gone in the second epoch, where only the density's memory remains. With
# a persistent chain the news is also news about the future and the gap lasts. A state
# $k$ epochs ahead is still the first one with probability $\frac12(1 + (2p - 1)^k)$, and the
# attendance responds nearly linearly to the payoff: the gap in the middle of the second
# epoch is nearly $2p - 1$ times that of the first. The expected attendance hardly moves
# with the persistence; its spread over the scenarios grows with it.

# %%
rows, conditional = [], {}
for p in persistences:
    r = mw.solve(chain(p), nx=nx, nt=nx)
    P, A = r.arrays["probability"], np.asarray(r.attendance)
    first = r.arrays["noise_state"][:, 0]
    given = [P[first == s] @ A[first == s] / P[first == s].sum() for s in range(len(values))]
    conditional[p] = given
    mean = P @ A
    spread = np.sqrt(P @ (A - mean) ** 2)
    L = steps // depth
    gap = given[0] - given[1]
    rows.append({"persistence": p, "converged": bool(r.converged),
                 "mean_attendance": r.summary["mean_attendance"],
                 "mean_spread": float(spread.mean()),
                 "gap_mid_epoch_1": float(gap[L // 2]),
                 "gap_end_epoch_1": float(gap[L]),
                 "gap_mid_epoch_2": float(gap[L + L // 2]),
                 "gap_ratio": float(gap[L + L // 2] / gap[L // 2]),
                 "correlation": 2 * p - 1})
print(format_table(rows))

fig_persistence = Figure(figsize=(8, 4.5), layout="constrained")
ax = fig_persistence.subplots()
t = np.asarray(res.t)
for p, style in zip(persistences, ["--", "-"], strict=True):
    for s, color in enumerate(["tab:green", "tab:red"]):
        ax.plot(t, conditional[p][s], color=color, ls=style,
                label=f"persistence {p:g}, first state good = {values[s]:g}")
for start in t[::steps // depth][1:-1]:
    ax.axvline(start, color="0.5", lw=0.8, ls=":")
ax.set(xlabel="time t", ylabel="E[A(t) | first state]",
       title="The expected attendance given the first piece of news")
ax.legend(fontsize="small")
fig_persistence

# %%
if out_dir:
    mw.save_run(out_dir, res, parameters={
        "nx": nx, "depth": depth, "values": values, "persistence": persistence,
        "persistences": persistences},
        metrics={"certificate": certificate, "probability_sum": float(probability.sum()),
                 "noiseless_difference": noiseless_difference,
                 "persistent_difference": persistent_difference},
        figures={"attendance_fan": fig_fan, "persistence": fig_persistence},
        tables={"persistence": rows})

# %% [markdown]
# ## Exercises
#
# 1. **Depth.** Solve with `depth = 3, 6, 9` at the same persistence. How do the estimate
#    and the measured time grow? Does the expected attendance change?
# 2. **Asymmetric news.** Make the bad state stickier than the good one,
#    `mw.CommonNoise(bar, "good", values, transition=[[0.7, 0.3], [0.1, 0.9]], depth=depth)`.
#    Where does the expected attendance settle late
#    in the evening, and why?
# 3. **Anticipation.** For persistence ½, plot the gap $E[A \mid s_0 = \text{good}] -
#    E[A \mid s_0 = \text{bad}]$ over the first epoch. When does it start to shrink? Relate
#    it to how far ahead a patron of the Santa Fe Bar looks (compare `sigma = 0.3` and
#    `sigma = 1.0`).
