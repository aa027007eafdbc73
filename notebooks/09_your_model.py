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
# # Your own model: a cost of moving, a coupling and an initial density
#
# A model of this workbench is a handful of choices: a domain and a horizon $T$, the noise
# $\sigma$, where the agents start ($m_0$), what they pay at the end ($g$), what they pay on
# the way given where everybody else is ($f(t, x, m)$), and what it costs them to move (the
# Hamiltonian $H(x, p, m)$). With $\nu = \sigma^2/2$ the equations are
#
# $$
# \begin{aligned}
# -\partial_t u - \nu\,\partial_{xx} u + H(x, \partial_x u, m) &= f(t, x, m(t,\cdot)),
#   & u(T, x) &= g(x) && \text{(HJB, backward)}\\
# \partial_t m - \nu\,\partial_{xx} m - \partial_x\big(m\,\partial_p H(x, \partial_x u, m)\big)
#   &= 0, & m(0, x) &= m_0(x) && \text{(Fokker–Planck, forward)}
# \end{aligned}
# $$
#
# with reflecting walls. An agent who pays $L(\alpha)$ per unit time to move at velocity
# $\alpha$ has the Hamiltonian $H(p) = \sup_\alpha\,(-\alpha p - L(\alpha))$ and moves at
# $\alpha^* = -\partial_p H(x, \partial_x u, m)$; for $L = \tfrac12\alpha^2$ this is
# $H = \tfrac12 p^2$ and $\alpha^* = -\partial_x u$ (the primer's case).
#
# This notebook writes a new model in fewer than thirty lines, solves it on the CPU and on an
# accelerator, certifies the equilibrium, plots it, and shows what happens to a model the
# scheme cannot take.

# %% nbmake={"mock": {"emulate_mps": true, "nt": 15, "nx": 16}} tags=["parameters"]
# the model: a current that makes moving right cheaper than moving left
right = 2.0  # moving right at speed α costs α²/(2·right)
left = 0.5  # moving left at speed α costs α²/(2·left)
crowd = 1.0  # κ: running cost κ·m of standing in a crowd
target = 0.4  # terminal cost 2·(x − target)²: where the agents want to be at T
sigma = 0.3  # noise
T = 1.0  # horizon
# discretization and solver (mfgwork.solve)
nx = 101  # grid points in x on [−1, 1], walls included
nt = 100  # time steps
tol = 1e-8  # stop when the certified fixed-point residual is at most tol
max_iter = 300
accelerator = "auto"  # "auto" (CUDA, else MPS), "cuda", "mps" or "none"
# also the MPS-emulation row (torch on this CPU in float32): off by default, since compiling
# its torch steps for this Hamiltonian takes a minute or two on a CPU
emulate_mps = False
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %% [markdown]
# ## 1. The model in fewer than thirty lines
#
# **The cost of moving.** A current carries the agents to the right: moving right at speed
# $\alpha > 0$ costs $\alpha^2/(2\,r)$, moving left costs $\alpha^2/(2\,l)$, with $r$ = `right`
# and $l$ = `left`. Its Hamiltonian is
#
# $$H(p) = \tfrac12\big(r\,(p_-)^2 + l\,(p_+)^2\big), \qquad
#   \partial_p H = r\,p_- + l\,p_+, \qquad \partial_{pp} H = r \text{ for } p < 0,\ l \text{ for } p > 0,$$
#
# with $p_+ = \max(p, 0)$ and $p_- = \min(p, 0)$: an agent whose value decreases to the right
# ($p < 0$) moves right at $\alpha^* = -r\,p$. It is convex and smallest at $p = 0$, which the
# scheme needs (its upwind splitting is monotone only then).
#
# **A subclass of `mw.Hamiltonian`** gives `value` (and sets the class attribute
# `depends_on_m` where H reads the density). It takes the grid `x`, the gradient `p`, the density `m` and the array
# namespace `xp` (NumPy, or torch on any device). That one definition is the model: its
# derivatives $\partial_p H$, $\partial_{pp} H$ (and $\partial_m H$) are derived from it
# symbolically, and every path of the scheme is generated from it and cached on disk: the
# compiled loops on the CPU, the fused kernels on CUDA, the array path on MPS. `dp` and `dpp`
# written by hand, as below, are accepted and checked against the derived ones; section 5
# compares the speed of this model with the shipped `mw.Quadratic()`.
#
# **The rest of the model.** The agents start in a bump around $x = -0.5$, want to be near
# `target` at $T$ ($g = 2\,(x - \text{target})^2$), and dislike crowds: $f(t, x, m) = \kappa\,m$,
# a local coupling (the cost at $x$ is the density at $x$). `mw.MFGProblem` checks every
# parameter and the Hamiltonian on the domain before any work.

# %%
from dataclasses import dataclass

import mfgwork as mw


@dataclass(frozen=True)
class Current(mw.Hamiltonian):
    """H(p) = ½ (right·(p₋)² + left·(p₊)²): moving right is cheaper when right > left."""

    right: float = 2.0
    left: float = 0.5
    name = "current"

    def value(self, x, p, m, xp):
        return 0.5 * (self.right * xp.minimum(p, 0.0 * p) ** 2
                      + self.left * xp.maximum(p, 0.0 * p) ** 2)

    def dp(self, x, p, m, xp):
        return self.right * xp.minimum(p, 0.0 * p) + self.left * xp.maximum(p, 0.0 * p)

    def dpp(self, x, p, m, xp):  # right for p < 0, left for p > 0
        return 0.5 * (self.right + self.left) - 0.5 * (self.right - self.left) * xp.sign(p)

    def params(self):
        return {"name": self.name, "right": self.right, "left": self.left}


def m0(x):  # a bump around x = −0.5 (need not be normalized)
    return (0.2**2 - (x + 0.5) ** 2).clip(min=0.0)


def g(x):  # terminal cost: be near the target at T
    return 2.0 * (x - target) ** 2


def f(t, x, m):  # running cost: the crowd where you stand
    return crowd * m


problem = mw.MFGProblem(x_min=-1.0, x_max=1.0, T=T, sigma=sigma, m0=m0, g=g, f=f,
                        hamiltonian=Current(right=right, left=left), name="current")
problem

# %% [markdown]
# ## 2. Solve on the CPU and on an accelerator
#
# One call to `mw.solve` per target: NumPy on the CPU in float64 (the reference), then, with
# `emulate_mps = True`, PyTorch in float32 as Apple's MPS computes (`mw.mps_emulation()`: on
# the CPU, under MPS's rules), and CUDA in float32 and float64 when a GPU is present. The
# same Hamiltonian runs everywhere: the
# scheme calls its methods with the namespace of the backend. Each row iterates until one best
# response to its solution reproduces it to a relative residual ≤ `tol`; in float32 a `tol`
# below what the dtype resolves is raised to its floor (the `tol` column). The errors are
# relative to the float64 reference, $\max|X - X_{ref}| / \max|X_{ref}|$ for $X = U, M$.

# %%
from mfgwork import plots, studies

# %matplotlib inline

targets, note = studies.comparison_targets(accelerator)
if not emulate_mps:
    targets = [t for t in targets if t["backend"] != mw.mps_emulation()]
    note += " The MPS-emulation row is off (emulate_mps = False)."
print(note)
options = {"nx": nx, "nt": nt, "tol": tol, "max_iter": max_iter, "progress": False}
table, results = studies.compare_backends(problem, targets, **options)
print(studies.format_table(table, ["label", "wall_time_s", "iterations", "converged", "tol",
                                   "rel_error_U", "rel_error_M", "mass_error"]))
res = results[0]  # the NumPy float64 reference

# %% [markdown]
# **Reading the table.** Every row must say `converged`. A float32 row agrees with the float64
# reference to about $10^{-5}$ in $U$ and $10^{-4}$ in $M$ at the defaults (101 × 100): the
# round-off of float32 carried through the time steps, and a stop at a looser `tol`. A float64
# row on another device (CUDA) agrees to round-off. A float32 CUDA result that claims
# convergence is certified again by one best response in float64
# (`res.extra["certificate"]`); on MPS, which has no float64, the float32 certificate stands.
# A single solve is a chain of small time steps, which suits one CPU core;
# `08_accelerator_payoff.ipynb` shows where an accelerator pays off (batches, particles).
# The kernels that ran each row are in `res.extra["fdm_kernels"]`: for this Hamiltonian on
# the CPU, the generic array sweeps.

# %%
fig_backends = plots.plot_backend_comparison(table)
fig_backends

# %% [markdown]
# ## 3. Certify the equilibrium
#
# Two numbers say that `res` is an equilibrium and not just the last iterate:
#
# - `res.residual`, the certified fixed-point residual: the relative distance between the
#   solution's coupling state (here the density $m$ at every time) and that of one best
#   response to it. `res.converged` is `True` exactly when it is ≤ `tol`.
# - `res.check(problem)`: the same best response computed again, independently of the
#   iteration that produced `res` (for a model of your own, pass the problem: only built-in
#   models are rebuilt from a result's parameters).
#
# The mass error says that $\int m = 1$ at every time, to round-off.

# %%
check = res.check(problem)
print(f"converged: {res.converged} in {res.iterations} iterations")
print(f"certified residual {res.residual:.2e} <= tol {tol:g}: {res.residual <= tol}")
print(f"independent best response: residual {check:.2e}; mass error {res.mass_error:.1e}")

# %% [markdown]
# ## 4. The equilibrium
#
# The density leaves the bump at $x = -0.5$ for the target, spread by the crowd cost (agents
# avoid each other) and by the noise, and gathers again near the target as $T$ approaches,
# where the terminal cost pulls it in. The convergence history shows the residual of
# every iteration against `tol` and the certified residual of the returned solution.

# %%
fig_heatmap = plots.plot_density_heatmap(res)
fig_heatmap

# %%
fig_convergence = plots.plot_convergence(res)
fig_convergence

# %% [markdown]
# ## 5. What the current does
#
# The same game with a symmetric cost of moving, `mw.Quadratic()` ($H = \tfrac12 p^2$, moving
# either way at speed $\alpha$ costs $\tfrac12\alpha^2$), against the current. With
# $r > 1 > l$ the trip to the right is cheaper, so the agents travel further towards the
# target by time $T$: the mean position $E[x](t)$ (`res.observables["mean_state"]`) of the
# current lies above that of the symmetric game, and ends closer to the target. Both are
# certified equilibria.
#
# Both solves run the same compiled loops, generated from each model's `value`
# (`res.extra["fdm_kernels"]` says which ran), and take a similar time per best response: a
# model of your own is neither less correct nor slower than a shipped one. Its first solve in
# a fresh environment compiles the loops for it (`res.timings["compile"]`, left out of the
# table), which later solves and later sessions reuse.

# %%
from matplotlib.figure import Figure

symmetric = mw.MFGProblem(x_min=-1.0, x_max=1.0, T=T, sigma=sigma, m0=m0, g=g, f=f,
                          hamiltonian=mw.Quadratic(), name="symmetric")
res_sym = mw.solve(symmetric, **options)
mean = {"current": res.observables["mean_state"],
        "symmetric": mw.to_numpy(res_sym.observables["mean_state"])}
print(f"symmetric: converged {res_sym.converged}, certified residual {res_sym.residual:.1e}")
for label, path in mean.items():
    print(f"{label:9s}: E[x](T) = {path[-1]:+.4f} (target {target:g})")
speed = [{"model": label, "kernels": r.extra["fdm_kernels"], "iterations": r.iterations,
          "seconds": r.timings["total"] - r.timings.get("compile", 0.0)}
         for label, r in (("current", res), ("symmetric", res_sym))]
for row in speed:
    row["ms_per_iteration"] = 1e3 * row["seconds"] / row["iterations"]
print(studies.format_table(speed))

fig_mean = Figure(figsize=(6.4, 4.0), layout="constrained")
ax = fig_mean.add_subplot()
for label, path in mean.items():
    ax.plot(res.t, path, label=label)
ax.axhline(target, color="gray", ls=":", label="target")
ax.set(xlabel="time t", ylabel="mean position E[x](t)", title="Where the crowd is")
ax.legend()
fig_mean

# %% [markdown]
# ## 6. A model the scheme cannot take
#
# The scheme needs $H$ convex in $p$, smallest at $p = 0$, finite, and `dp` the derivative of
# `value`. `mw.MFGProblem` checks this on samples of $x$ and $p$ (and of $m$ where H depends
# on it) before any work, and refuses a Hamiltonian that fails with a `ParameterError` saying
# what is wrong. Two examples: a cost that grows only logarithmically, $H = \log(1 + p^2)$,
# which is smallest at 0 but not convex for $|p| > 1$; and the current with a slip in its
# derivative (`dp` returns twice the slope of `value`).

# %%
@dataclass(frozen=True)
class Logarithmic(mw.Hamiltonian):
    def value(self, x, p, m, xp):
        return xp.log(1.0 + p * p)

    def dp(self, x, p, m, xp):
        return 2.0 * p / (1.0 + p * p)

    def dpp(self, x, p, m, xp):
        return 2.0 * (1.0 - p * p) / (1.0 + p * p) ** 2


@dataclass(frozen=True)
class SlippedCurrent(Current):
    def dp(self, x, p, m, xp):
        return 2.0 * super().dp(x, p, m, xp)


refused = {}
for wrong in (Logarithmic(), SlippedCurrent()):
    try:
        mw.MFGProblem(x_min=-1.0, x_max=1.0, T=T, sigma=sigma, m0=m0, g=g, f=f,
                      hamiltonian=wrong)
    except mw.ParameterError as err:
        refused[type(wrong).__name__] = str(err)
        print(f"{type(wrong).__name__}: ParameterError: {err}\n")

# %% [markdown]
# ## Run folder
#
# `metrics.json` holds the backend table and both residuals, `backends.json` / `.csv` the
# table, `arrays.npz` the NumPy float64 solution, `figures/` the plots.

# %%
figures = {"backend_comparison": fig_backends, "density_heatmap": fig_heatmap,
           "convergence": fig_convergence, "mean_position": fig_mean}
if out_dir:
    parameters = options | {"right": right, "left": left, "crowd": crowd, "target": target,
                            "sigma": sigma, "T": T, "accelerator": accelerator}
    metrics = {"note": note, "backends": table, "check": check, "refused": refused,
               "final_mean": {k: float(v[-1]) for k, v in mean.items()},
               "symmetric_converged": res_sym.converged, "speed": speed}
    folder = mw.save_run(out_dir, res, parameters=parameters, metrics=metrics,
                         figures=figures, tables={"backends": table})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **A sticky cost.** An agent who pays $\tfrac12\alpha^2 + k|\alpha|$ to move (a fixed
#    price per unit distance) has $H(p) = \tfrac12\big((|p| - k)_+\big)^2$: zero for
#    $|p| \le k$. Write it as a subclass (`dp` is $\operatorname{sign}(p)\,(|p| - k)_+$, `dpp`
#    is $1$ where $|p| > k$ and $0$ elsewhere), solve with $k = 0.5$, and find where the
#    agents stop moving. Is the equilibrium still certified?
# 2. **A non-local coupling.** Replace $f = \kappa\,m$ by a cost of being far from the crowd's
#    mean, $f(t, x, m) = \kappa\,(x - \bar x)^2$ with $\bar x = \sum_i x_i m_i / \sum_i m_i$
#    on the uniform grid (`f` receives arrays of the active backend: write
#    `(x * m).sum() / m.sum()`). How do the mean position and the spread of the density
#    change against the local coupling?
# 3. **Break it on purpose.** Set `left = -0.5` and read the error. Which property of $H$
#    fails, and why would the upwind scheme go wrong without it? Then make the current depend
#    on the position (`right` larger in the middle of the domain, through `x` in `value`,
#    `dp` and `dpp`) and solve again.
