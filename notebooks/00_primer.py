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
# # A primer on mean field games with mfgwork
#
# A mean field game describes a continuum of small, identical agents. Each one controls its
# own state to minimise a cost that depends on the distribution of everybody else; the
# distribution in turn is what results when everyone plays optimally. An equilibrium is a
# fixed point of that loop. This notebook states the equations and our sign convention, shows
# how they are discretized, checks the solver against an exact solution, and reads the
# equilibrium of the Santa Fe Bar game.

# %% nbmake={"mock": {"nt_santa_fe": 30, "nx_santa_fe": 31, "sizes": [11, 21]}} tags=["parameters"]
sizes = [21, 41, 81, 161]  # grid sizes nx of the refinement study; nt is nx - 1
sigma = 0.6  # noise of the verification problem
nx_santa_fe = 101  # grid of the Santa Fe Bar example
nt_santa_fe = 101
# run folder to write; "" writes nothing (python -m mfgwork run sets it)
out_dir = ""

# %%
# check the parameters
import mfgwork as mw
from mfgwork import plots, runs, studies

# %matplotlib inline

verification = mw.HopfColeProblem(sigma=sigma)
santa_fe = mw.SantaFeBar()
options = runs.solve_options(nx=nx_santa_fe, nt=nt_santa_fe, method="fdm", backend="numpy",
                             device="cpu", tol=1e-8, max_iter=200)
verification, santa_fe

# %% [markdown]
# ## 1. The MFG system and our sign convention
#
# On $\Omega = [x_{min}, x_{max}]$ and $t \in [0, T]$, with $\nu = \sigma^2/2$:
#
# $$
# \begin{aligned}
# -\partial_t u - \nu\,\partial_{xx} u + \tfrac12 (\partial_x u)^2 &= f(t, x, m(t,\cdot)),
#   & u(T, x) &= g(x) && \text{(HJB, backward)}\\
# \partial_t m - \nu\,\partial_{xx} m - \partial_x\big(m\,\partial_x u\big) &= 0,
#   & m(0, x) &= m_0(x) && \text{(Fokker–Planck, forward)}
# \end{aligned}
# $$
#
# - $u(t, x)$ is the **value function**: the smallest expected cost from state $x$ at time $t$.
#   Costs are minimised, so a *payoff* enters $f$ with a minus sign.
# - An agent controls its velocity $\alpha$ at cost $\tfrac12\alpha^2$ per unit time; the optimal
#   control is $\alpha^* = -\partial_x u$, so agents move by $dX = -\partial_x u\,dt + \sigma\,dW$:
#   down the gradient of the value function.
# - $m(t, \cdot)$ is the **density** of agents, $\int m\,dx = 1$ at every time; $m$ is carried by
#   the optimal drift and spread by the noise.
# - The walls reflect: $\partial_x u = 0$ and zero flux, $\nu\,\partial_x m + m\,\partial_x u = 0$.
# - The coupling $f$ may depend on the whole density at time $t$ (local, e.g. $f = m$, or
#   non-local, e.g. through an average).
#
# `mw.MFGProblem(x_min, x_max, T, sigma, m0, g, f)` states any such problem.

# %% [markdown]
# ## 2. The discretization
#
# - **Grid.** `nx` points $x_i$ including both walls, spacing $h$; each point owns a control
#   volume $w_i$ ($h$ inside, $h/2$ at the walls), and $\int \varphi \approx \sum_i w_i \varphi_i$.
#   `nt` implicit time steps $\Delta t = T/n_t$.
# - **Hamiltonian.** $\tfrac12 (\partial_x u)^2$ is replaced by the monotone upwind
#   (Godunov / Engquist–Osher) form $\tfrac12\big[(q_{i-1})_+^2 + (q_i)_-^2\big]$ with edge
#   gradients $q_i = (u_{i+1} - u_i)/h$: information is taken from the side it comes from, which
#   keeps the scheme stable and first order.
# - **HJB.** Implicit Euler backward in time; each step solves a nonlinear system $R(u) = 0$ by
#   **Newton's method**, whose Jacobian is tridiagonal (a diagonally dominant M-matrix).
# - **Fokker–Planck.** Implicit Euler forward in time with the **transpose of that Jacobian**
#   (the FP operator is the adjoint of the linearised HJB operator, as in Achdou's scheme). Its
#   columns sum to one, so mass is conserved to round-off and $m \ge 0$.
# - **Coupling.** A fixed point: from a guess of the density (for Santa Fe, of the attendance
#   path), solve HJB backward, then FP forward, and take the next guess from both (Newton's
#   method on the attendance path for a game with a potential such as Santa Fe; Anderson
#   mixing with damping otherwise; `res.scheme` names the one that ran) until the returned
#   solution is a fixed point to `tol`: one best response to its attendance path reproduces it
#   to a relative residual `res.residual` ≤ `tol`.

# %% [markdown]
# ## 3. Verification against an exact solution
#
# With $f = 0$ the Hopf–Cole transform $u = -2\nu \log\varphi$ turns HJB into a backward heat
# equation for $\varphi$, and $m = \varphi\psi$ solves FP when $\psi$ solves the forward heat
# equation. Cosine modes satisfy the reflecting walls, which gives an exact pair $(u, m)$
# (`mw.HopfColeProblem`). We solve on finer and finer grids with $\Delta t \propto h$ and
# measure the max-norm errors: a first-order scheme halves its error when $h$ halves.

# %%
rows = studies.refinement_study(verification, sizes, progress=False)
print(studies.format_table(rows))
order_U = studies.fitted_order(rows, "error_U")
order_M = studies.fitted_order(rows, "error_M")
print(f"observed order: U {order_U:.3f}, M {order_M:.3f}")

# %%
fig_refinement = plots.plot_refinement(rows)
fig_refinement

# %% [markdown]
# ## 4. The Santa Fe Bar
#
# Agents have a preference $\theta \in [-\theta_{max}, \theta_{max}]$ for going to the bar; those
# with $\theta > 0$ go. The attendance is $A(t) = \int_{\theta > 0} m(t, \theta)\,d\theta$ and going
# pays
#
# $$F(A) = G - (G - B)\, s\!\left(\frac{A - A^*}{\varepsilon}\right),
#   \qquad s(z) = \frac{1}{1 + e^{-z}},$$
#
# which falls from $G$ (an uncrowded bar) to $B < 0$ (a crowded one) as $A$ crosses the
# threshold $A^*$. Staying home pays 0, so the running cost is $f = -F(A(t))\,\mathbf 1\{\theta > 0\}$,
# with $g = 0$ and $m_0 \propto e^{-\theta^2/2}$. Since $F$ decreases in $A$ the game is
# crowd-averse: the coupling is monotone and the equilibrium unique.

# %%
fig_payoff = plots.plot_payoff(santa_fe)
fig_payoff

# %% [markdown]
# **How to read its equilibrium.** If the bar pays ($F > 0$), the agents near $\theta = 0$ drift
# up and attendance rises; if it is crowded ($F < 0$) they drift down. Attendance therefore
# settles where the marginal agent is indifferent, $F(A) = 0$:
#
# $$A = A^* + \varepsilon \log\frac{G}{-B}\qquad(= 0.6 + 0.05 \log 2 \approx 0.6347
#   \text{ for the defaults}),$$
#
# just above the threshold. It starts at $A(0) = 1/2$ (the symmetric $m_0$) and reaches that
# level after a short transient; near $t = T$ it relaxes because nothing is left to gain.

# %%
res = mw.solve(santa_fe, **options)
level = plots.equilibrium_attendance(santa_fe.params())
A = mw.to_numpy(res.attendance)
print(f"converged: {res.converged} in {res.iterations} iterations; mass error {res.mass_error:.1e}")
print(f"F(A) = 0 at A = {level:.4f}; A(T/2) = {A[len(A) // 2]:.4f}")
fig_attendance = plots.plot_attendance(res)
fig_attendance

# %%
fig_heatmap = plots.plot_density_heatmap(res)
fig_heatmap

# %% [markdown]
# Next: `01_santa_fe_bar.ipynb` explores the parameters and writes run folders;
# `02_cpu_vs_accelerator.ipynb` compares NumPy with PyTorch on the CPU and an accelerator.

# %%
figures = {"refinement": fig_refinement, "payoff": fig_payoff, "attendance": fig_attendance,
           "density_heatmap": fig_heatmap}
if out_dir:
    parameters = options | {"sizes": sizes, "sigma_verification": sigma}
    folder = mw.save_run(out_dir, res, parameters=parameters,
                         metrics={"order_U": order_U, "order_M": order_M,
                                  "equilibrium_attendance": level},
                         figures=figures, tables={"refinement": rows})
    print("wrote", ", ".join(sorted(p.name for p in folder.iterdir())))
else:
    print("out_dir is empty: no run folder written")

# %% [markdown]
# ## Exercises
#
# 1. **Order of convergence.** Run the refinement study with `sizes = [21, 41, 81, 161, 321]`
#    and then with $\sigma = 0.3$ and $\sigma = 1.0$. Does the fitted order approach 1? Which
#    parts of the scheme (Section 2) limit it to first order, and which error, in $U$ or in $M$,
#    is larger?
# 2. **The sign convention at work.** Take the Santa Fe solution `res` and plot $u$ at
#    $t = T/2$ against $\theta$ (`plots.plot_value_snapshots(res)`). Where does $u$ decrease,
#    and which way do the agents drift ($\alpha^* = -\partial_\theta u$)? Check that this matches
#    the sign of $F(A(t))$.
# 3. **The plateau.** Solve $F(A) = 0$ by hand to obtain $A = A^* + \varepsilon \log(G/(-B))$.
#    Then solve the game with `mw.SantaFeBar(threshold=0.5, good=20.0)` and compare $A(T/2)$ with
#    the formula. How does the difference change when the grid is refined?
