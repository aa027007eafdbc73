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
# # Santa Fe Bar explorer
#
# Drag a slider and watch the equilibrium move: every change re-solves the mean field game
# (HJB backward, Fokker–Planck forward, iterated on the attendance path
# $A(t) = \int_{\theta>0} m(t,\theta)\,d\theta$) and redraws the attendance $A(t)$ against the
# threshold $A^*$, the density $m(t, \theta)$ and the convergence history. Sliders act on
# release. A setting that cannot be solved (for example a good payoff $G$ below the bad one $B$)
# shows the library's message under the controls; the last good figures stay.
#
# Open it with `make lab` (JupyterLab on 127.0.0.1 with a token). For zoomable figures install
# `ipympl` (`pip install -e ".[widgets]"`) and replace `%matplotlib inline` by
# `%matplotlib widget` below.
#
# Headless (papermill), the explorer is built at the parameters below and, when `out_dir` is
# set, its figures are written to `out_dir/figures/`:
#
# ```bash
# python -m mfgwork run notebooks/03_explorer.ipynb -p threshold 0.5 -o runs/explorer
# ```

# %% tags=["parameters"]
# starting values of the sliders (mfgwork.SantaFeBar)
threshold = 0.6  # A*: attendance above which the bar is crowded
sigma = 0.5  # noise on the preference
good = 10.0  # G: payoff of an uncrowded bar
bad = -5.0  # B: payoff of a crowded bar
eps = 0.05  # smoothing width of the threshold
T = 10.0  # time horizon
# solver (mfgwork.solve): grid nx = nt, one of 52, 101, 151, 201
nx = 101
method = "fdm"  # "fdm" or "particles"
backend = "numpy"  # "numpy" or "torch"
device = "cpu"  # "cpu", "cuda" or "mps"
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters (within the ranges of the sliders, the grids and devices offered)
import mfgwork as mw
from mfgwork.core.errors import check_choice, check_real
from mfgwork.fdm1d import METHODS

# %matplotlib inline

for name, value in (("threshold", threshold), ("sigma", sigma), ("good", good), ("bad", bad),
                    ("eps", eps), ("T", T)):
    _, low, high, _ = mw.widgets.SLIDERS[name]
    check_real(name, value, low=low, high=high, low_open=False, high_open=False)
mw.SantaFeBar(threshold=threshold, sigma=sigma, good=good, bad=bad, eps=eps, T=T)  # G >= B
if isinstance(nx, bool) or nx not in mw.widgets.GRIDS:
    raise mw.ParameterError(f"nx={nx!r} is invalid: must be one of "
                            f"{', '.join(map(str, mw.widgets.GRIDS))} (the explorer's grids)")
check_choice("method", method, METHODS)
check_choice("backend", backend, tuple(mw.available_backends()))
check_choice("device", device, tuple(mw.available_backends()[backend]))
if not isinstance(out_dir, str):
    raise mw.ParameterError(f"out_dir={out_dir!r} is invalid: must be a folder name (str), "
                            "or \"\" to write nothing")

# %%
explorer = mw.widgets.explore(threshold=threshold, sigma=sigma, good=good, bad=bad, eps=eps,
                              T=T, nx=nx, method=method, backend=backend, device=device)
explorer

# %% [markdown]
# The current solution is `explorer.result` (an `mw.Result`), the control values
# `explorer.settings()`, the figures `explorer.figures`. Here they are at the starting values,
# as still images: the ones a static page of this notebook (the course book) shows in place of
# the controls, and the ones a headless run writes.

# %%
from IPython.display import display

for figure in explorer.figures.values():
    display(figure)

# %% [markdown]
# ## What the controls change
#
# The game (see the primer): agents with a preference $\theta \in [-\theta_{max},
# \theta_{max}]$ go to the bar when $\theta > 0$, the attendance is
# $A(t) = \int_{\theta > 0} m(t, \theta)\,d\theta$, and going pays
#
# $$F(A) = G - (G - B)\, s\!\left(\frac{A - A^*}{\varepsilon}\right), \qquad
#   s(z) = \frac{1}{1 + e^{-z}}.$$
#
# Agents steer $\theta$ at quadratic cost, are shaken by noise of size $\sigma$, and settle
# where the marginal agent at $\theta = 0$ is indifferent, $F(A) = 0$:
#
# $$A_{eq} = A^* + \varepsilon \log\frac{G}{-B} \qquad (G > 0 > B).$$
#
# Each slider changes one term of these formulas; the numbers below are for the 101 × 101
# grid, the other values at their defaults.
#
# - **threshold $A^*$**: where the payoff switches from good to bad. The plateau follows it
#   one for one, $A_{eq} - A^* = \varepsilon \log(G/(-B))$ does not depend on it ($A^* = 0.3$:
#   plateau 0.335; $0.8$: 0.834). The further $A^*$ is from the starting attendance
#   $A(0) = 1/2$, the more agents must change their mind and the longer the transient.
# - **σ**: the noise on the preference. It does not move the plateau (indifference does not
#   involve $\sigma$) but shapes the road to it: with little noise the density stays narrow
#   and the transient is short, with more noise it spreads across $\theta = 0$, so agents keep
#   crossing over and the attendance takes longer to settle (to within 0.01 of the plateau:
#   $t \approx 0.6$ at $\sigma = 0.5$, $1.2$ at $\sigma = 1.5$). Little noise also makes the
#   fixed point harder: watch the convergence panel, and the status line, which says when
#   `max_iter` is reached before the tolerance.
# - **good $G$ and bad $B$**: only their ratio moves the plateau, through
#   $\varepsilon \log(G/(-B))$. With $G = -B$ it sits exactly at $A^*$ and the bar is never
#   overcrowded; a larger $G$ lifts it above $A^*$ ($G = 20$: 0.669), a more negative $B$ lowers
#   it ($B = -20$: 0.565). Outside $G > 0 > B$ there is no indifference level: if the crowded
#   bar still pays ($B > 0$) nearly everyone goes, if even the empty bar does not ($G < 0$)
#   nearly everyone stays home. $G < B$ is refused with the library's message.
# - **ε**: the width of the switch. A small ε is a sharp threshold (plateau close to $A^*$, a
#   steep payoff, a harder fixed point: more iterations); a large ε a gentle slope, and the
#   plateau moves up with it ($\varepsilon = 0.2$: 0.736). At $\varepsilon = 0.5$ the
#   transient no longer reaches the level of the formula before the horizon ends.
# - **T**: the horizon. The plateau does not depend on it; a short horizon leaves mostly
#   transient and end effect, a long one mostly plateau. Near $t = T$ the attendance relaxes a
#   little: with nothing left to gain after $T$, moving is not worth its cost.
# - **method, grid, device**: how the same equilibrium is computed, not which one. A finer grid
#   changes the curves by the discretization error (first order: halving $h$ halves it); the
#   particle method adds sampling noise of order $N^{-1/2}$; the device changes the time per
#   solve (in the status line) and, in float32, the last digits.
#
# **What to look for.** In the attendance panel, the plateau against the dotted level of the
# formula and the band $A^* \pm \varepsilon$ where the payoff switches; the length of the
# transient from $A(0) = 1/2$; the dip at the end. In the density panel, where the mass sits
# relative to the dashed line $\theta = 0$ and how wide it is. In the convergence panel, how
# many iterations each setting needs and whether the residual falls steadily.

# %%
if out_dir:
    if explorer.error:
        raise mw.SolverError(explorer.error)
    folder = mw.save_run(out_dir, explorer.result, parameters=explorer.settings(),
                         figures=explorer.figures)
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **The plateau formula.** Set $G = 10$, $B = -5$, $\varepsilon = 0.05$ and move $A^*$
#    from 0.3 to 0.8. Read the plateau off the attendance panel (or
#    `explorer.result.attendance`) and compare it with $A^* + \varepsilon \log(G/(-B))$.
#    Then set $G = -B$: where is the plateau, and how long is the bar overcrowded?
# 2. **Noise and the transient.** For $\sigma = 0.2, 0.5, 1.0, 1.5$, measure the time at which
#    $A(t)$ first comes within 0.01 of the plateau. Explain the trend with the density panel.
#    Which setting needs the most iterations?
# 3. **No indifference.** Set $B = 2$ (a crowded bar still pays). What does the attendance do,
#    and why does the formula for the plateau no longer apply? What happens with $G = -2$?
