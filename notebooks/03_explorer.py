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
# (HJB backward, Fokker–Planck forward, Picard on the attendance path
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
# %matplotlib inline
import mfgwork as mw

explorer = mw.widgets.explore(threshold=threshold, sigma=sigma, good=good, bad=bad, eps=eps,
                              T=T, nx=nx, method=method, backend=backend, device=device)
explorer

# %% [markdown]
# The current solution is `explorer.result` (an `mw.Result`), the control values
# `explorer.settings()`. Headless runs write the figures of the starting values:

# %%
if out_dir:
    if explorer.error:
        raise mw.SolverError(explorer.error)
    print("wrote", mw.save_run(out_dir, explorer.result, parameters=explorer.settings(),
                               figures=explorer.figures))
else:
    print("out_dir is empty: no run folder written")
