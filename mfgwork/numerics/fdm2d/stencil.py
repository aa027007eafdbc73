"""The 5-point upwind stencil of the implicit HJB step and of its adjoint, the FP step.

On the nodes of a :class:`~mfgwork.core.grid2d.Grid2D` (control widths wx_i, wy_j, spacings
hx, hy) with edge gradients q = (u_east − u)/hx on open x-edges (0 on closed ones: walls and
obstacles), likewise in y, and at node k the backward/forward gradients q_b, q_f of each axis:

    (L u)_k = (q_fx − q_bx)/wx_i + (q_fy − q_by)/wy_j                   diffusion
    Ĥ_k = H(x_k, √P², m_k),  P² = Σ_axes (q_b)_+² + (q_f)_−²              (isotropic H)

The implicit Euler step from u^{n+1} to u = u^n solves, at the active nodes,

    R(u) = (u − u^{n+1})/Δt − ν L u + Ĥ(u) − F^n = 0,

with u fixed at the exits (their cost) and m = m^{n+1} in Ĥ (Achdou's pairing of levels).
Its Jacobian J has, per node, the neighbour coefficients (≤ 0)

    W = −ν/(hx wx) − ∂Ĥ/∂q_bx / hx,   E = −ν/(hx wx) + ∂Ĥ/∂q_fx / hx   (S, N likewise in y)

on open edges and diag = 1/Δt − (W + E + S + N): an M-matrix whose rows sum to 1/Δt, so
‖J⁻¹‖_∞ ≤ Δt (a Newton update is at most Δt·max|R|). In the system the coefficients towards
exit nodes drop out (u is known there). The FP step is the adjoint: with cell masses μ = V m,
J(u^n)ᵀ μ^{n+1} = μ^n/Δt on the active nodes, so μ ≥ 0 and Σ μ^n = Σ μ^{n+1} + Σ_d outflow_d
with outflow_d = Δt Σ_k μ_k^{n+1} o_k^d, o_k^d = −(coefficients of k towards the exit nodes of
door d) ≥ 0 (an exit node belongs to one door: :attr:`~mfgwork.core.grid2d.Grid2D.door_index`).

Everything here is array-API code on arrays (..., ny, nx): a leading batch axis serves
problems of one grid size with their own masks, ν and exit costs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...core.grid2d import Grid2D


class Coefficients(NamedTuple):
    """The Jacobian on the full grid: ``diag`` (1 at inactive nodes) and the neighbour
    coefficients W, E, S, N restricted to active pairs; ``out`` the exit coefficients o^d per
    door (None in the Newton systems, which do not need them)."""

    diag: Any
    W: Any
    E: Any
    S: Any
    N: Any
    out: Any  # (..., doors, ny, nx): o^d of each door d


#: (axis, step) of the four neighbours W, E, S, N.
NEIGHBOURS = ((-1, -1), (-1, 1), (-2, -1), (-2, 1))


def shift(v: Any, axis: int, step: int, xp: Any) -> Any:
    """w with w[..., k] = v[..., k + step] along ``axis`` (−1: x, −2: y), 0 beyond the edge."""
    n = v.shape[axis]
    if axis == -1:
        zero = xp.zeros_like(v[..., :1])
        return (xp.concat([v[..., 1:], zero], axis=-1) if step > 0 else
                xp.concat([zero, v[..., : n - 1]], axis=-1))
    zero = xp.zeros_like(v[..., :1, :])
    return (xp.concat([v[..., 1:, :], zero], axis=-2) if step > 0 else
            xp.concat([zero, v[..., : n - 1, :]], axis=-2))


def _pad(v: Any, axis: int, side: str, xp: Any) -> Any:
    """Edge values (one fewer along ``axis``) as node values, 0 at the ``side`` end."""
    zero = xp.zeros_like(v[..., :1]) if axis == -1 else xp.zeros_like(v[..., :1, :])
    parts = [zero, v] if side == "first" else [v, zero]
    return xp.concat(parts, axis=axis)


class Stencil:
    """The constants of the scheme on grids of one size for a backend.

    ``grids``: one :class:`Grid2D`, or a list (a batch: same extents, sizes and T; their own
    obstacles and exits). ``nu``: a scalar or one value per grid. ``hamiltonian``: an isotropic
    :class:`~mfgwork.problems.hamiltonians.Hamiltonian`.
    """

    def __init__(self, grids: Grid2D | list[Grid2D], nu: Any, hamiltonian: Any,
                 backend: Any) -> None:
        batched = isinstance(grids, list | tuple)
        self.grids = list(grids) if batched else [grids]
        g = self.grid = self.grids[0]
        self.batched, self.backend, self.xp = batched, backend, backend.xp
        self.hamiltonian = hamiltonian
        stack = (lambda f: np.stack([f(gr) for gr in self.grids])) if batched else (
            lambda f: f(g))
        asarray = backend.asarray
        active = stack(lambda gr: gr.active)
        exit_ = stack(lambda gr: gr.exit)
        self.active_np, self.exit_np = active, exit_
        self.doors = max(len(gr.exits) for gr in self.grids)
        door_index = stack(lambda gr: gr.door_index)
        self.active = asarray(active.astype(np.float64))
        self.exit_value = asarray(stack(lambda gr: gr.exit_cost))
        ox = stack(lambda gr: gr.open_x).astype(np.float64)
        oy = stack(lambda gr: gr.open_y).astype(np.float64)
        nu = np.asarray(nu, dtype=np.float64)
        nu = nu.reshape(-1, 1, 1) if (batched and nu.ndim) else nu
        self.nu = nu
        inv_hwx = 1.0 / (g.hx * g.wx)            # (nx,)
        inv_hwy = (1.0 / (g.hy * g.wy))[:, None]  # (ny, 1)
        # diffusion parts of the neighbour coefficients, on open edges only
        dW = -nu * inv_hwx * _pad_np(ox, -1, "first")
        dE = -nu * inv_hwx * _pad_np(ox, -1, "last")
        dS = -nu * inv_hwy * _pad_np(oy, -2, "first")
        dN = -nu * inv_hwy * _pad_np(oy, -2, "last")
        self.diffusion = tuple(asarray(d) for d in (dW, dE, dS, dN))
        # masks of the neighbours that are active / exits of door d (0 beyond the grid), the
        # latter stacked over the doors (..., doors, ny, nx)
        act = active.astype(np.float64)
        self.to_active = tuple(asarray(act * _shift_np(act, a, s)) for a, s in NEIGHBOURS)
        doors = (door_index[..., None, :, :] == np.arange(self.doors)[:, None, None])
        self.to_door = tuple(asarray(act[..., None, :, :] * _shift_np(doors.astype(np.float64),
                                                                     a, s))
                             for a, s in NEIGHBOURS)
        self.ox, self.oy = asarray(ox), asarray(oy)
        self.inv_wx, self.inv_wy = asarray(1.0 / g.wx), asarray((1.0 / g.wy)[:, None])
        self.inv_hx, self.inv_hy, self.inv_dt = 1.0 / g.hx, 1.0 / g.hy, 1.0 / g.dt
        self.nu_arr = asarray(nu)
        self.volumes = asarray(g.volumes)
        X, Y = g.mesh
        self.coords = (asarray(X), asarray(Y))
        # one NumPy float64 problem: the model's compiled assembly, where it has one
        self._compiled = None
        if backend.name == "numpy" and not batched and backend.dtype == "float64":
            self._compiled = self._compiled_constants(ox, oy, g, (dW, dE, dS, dN))
        self._node_values: tuple[np.ndarray, np.ndarray] | None = None

    def _compiled_constants(self, ox: np.ndarray, oy: np.ndarray, g: Grid2D,
                            diffusion: tuple[np.ndarray, ...]) -> tuple | None:
        """(module, prm, the assembly's constants) of :func:`.assembly_kernels.
        compiled_system` for the model, or None where it has none."""
        from .assembly_kernels import compiled_system

        found = compiled_system(self.hamiltonian)
        if found is None:
            return None
        module, prm = found
        return (module, prm, (ox, oy, self.inv_hx, self.inv_hy, 1.0 / g.wx, 1.0 / g.wy,
                              *diffusion, *self.to_active, self.active, float(self.nu),
                              self.inv_dt))

    def _aux(self, module: Any, prm: np.ndarray, m: Any) -> tuple[np.ndarray, np.ndarray]:
        """(the density the step sees (zeros where H ignores m), the model's p-free node values
        for it): computed again only when the density changes (the Newton iterations of a
        level see the same)."""
        dens = np.zeros(self.grid.active.shape) if m is None else m
        kept = self._node_values
        if kept is None or not np.array_equal(kept[0], dens):
            aux = np.empty((max(module.NAUX, 1), dens.size))
            module.node_values(dens, prm, aux)
            kept = self._node_values = (np.array(dens, dtype=np.float64), aux)
        return kept

    def gradients(self, u: Any) -> tuple[list[Any], list[Any]]:
        """([q_bx, q_by], [q_fx, q_fy]) at the nodes (0 across closed edges)."""
        xp = self.xp
        gx = (u[..., :, 1:] - u[..., :, :-1]) * self.ox * self.inv_hx
        gy = (u[..., 1:, :] - u[..., :-1, :]) * self.oy * self.inv_hy
        return ([_pad(gx, -1, "first", xp), _pad(gy, -2, "first", xp)],
                [_pad(gx, -1, "last", xp), _pad(gy, -2, "last", xp)])

    def hamiltonian_terms(self, u: Any, m: Any) -> tuple[Any, list[Any], list[Any], Any]:
        """(Ĥ, ∂Ĥ/∂q_b, ∂Ĥ/∂q_f, ν L u) at the nodes."""
        back, fwd = self.gradients(u)
        value, d_back, d_fwd = self.hamiltonian.numerical_nd(self.coords, back, fwd, m,
                                                             self.xp)
        lap = (fwd[0] - back[0]) * self.inv_wx + (fwd[1] - back[1]) * self.inv_wy
        return value, d_back, d_fwd, self.nu_arr * lap

    def coefficients(self, d_back: list[Any], d_fwd: list[Any],
                     exits: bool = True) -> Coefficients:
        """J's coefficients from the Hamiltonian's derivatives (module docstring); the exit
        coefficients ``out`` only with ``exits`` (None otherwise: Newton does not need them)."""
        dW, dE, dS, dN = self.diffusion
        W = dW - d_back[0] * self.inv_hx
        E = dE + d_fwd[0] * self.inv_hx
        S = dS - d_back[1] * self.inv_hy
        N = dN + d_fwd[1] * self.inv_hy
        diag = self.inv_dt - (W + E + S + N)
        full = (W, E, S, N)
        out = -sum(c[..., None, :, :] * e for c, e in zip(full, self.to_door, strict=True)
                   ) if exits else None
        W, E, S, N = (c * a for c, a in zip(full, self.to_active, strict=True))
        diag = self.active * diag + (1.0 - self.active)
        return Coefficients(diag, W, E, S, N, out)

    def system(self, u: Any, u_next: Any, F_n: Any, m: Any) -> tuple[Coefficients, Any]:
        """J(u) (without ``out``) and R(u) (0 at inactive nodes) of the HJB step with running
        cost F_n."""
        if self._compiled is not None and F_n.shape == u.shape == u_next.shape and (
                m is None or m.shape == u.shape):
            module, prm, constants = self._compiled
            *c, R = module.model_system(u, u_next, F_n, *self._aux(module, prm, m), prm,
                                        *constants)
            return Coefficients(*c, None), R
        value, d_back, d_fwd, diffusion = self.hamiltonian_terms(u, m)
        R = ((u - u_next) * self.inv_dt - diffusion + value - F_n) * self.active
        return self.coefficients(d_back, d_fwd, exits=False), R

    def jacobian(self, u: Any, m: Any, exits: bool = True) -> Coefficients:
        """J(u) alone (the FP step's matrix, transposed there; ``out`` only with ``exits``)."""
        _, d_back, d_fwd, _ = self.hamiltonian_terms(u, m)
        return self.coefficients(d_back, d_fwd, exits)

    def velocity(self, u: Any, m: Any) -> tuple[Any, Any]:
        """The optimal velocity α* = −∂p Ĥ per axis: −(∂Ĥ/∂q_b + ∂Ĥ/∂q_f), 0 off the
        active nodes."""
        _, d_back, d_fwd, _ = self.hamiltonian_terms(u, m)
        return tuple(-(b + f) * self.active for b, f in zip(d_back, d_fwd, strict=True))

    def apply(self, c: Coefficients, v: Any) -> Any:
        """J v (v and J v are 0 at inactive nodes when the right-hand side is); slices
        updated in place, two array operations per neighbour."""
        out = c.diag * v
        out[..., :, 1:] += c.W[..., :, 1:] * v[..., :, :-1]
        out[..., :, :-1] += c.E[..., :, :-1] * v[..., :, 1:]
        out[..., 1:, :] += c.S[..., 1:, :] * v[..., :-1, :]
        out[..., :-1, :] += c.N[..., :-1, :] * v[..., 1:, :]
        return out

    def operator(self, c: Coefficients, transpose: bool = False) -> Any:
        """v ↦ J v (Jᵀ v with ``transpose``) for the coefficients ``c``."""
        return ((lambda v: self.apply_transpose(c, v)) if transpose
                else (lambda v: self.apply(c, v)))

    def neumann(self, c: Coefficients, transpose: bool = False) -> Any:
        """v ↦ M⁻¹ v, M⁻¹ = D⁻¹ − D⁻¹ Ō D⁻¹: the first two terms of the Neumann series of
        J⁻¹ (Jᵀ⁻¹ with ``transpose``), J = D + Ō with Ō its off-diagonal part (the
        preconditioner of the one-launch solves, :data:`.fused_krylov.NEUMANN`)."""
        op, inv = self.operator(c, transpose), 1.0 / c.diag

        def precondition(v: Any) -> Any:
            y = inv * v
            return y - inv * (op(y) - c.diag * y)
        return precondition

    def apply_transpose(self, c: Coefficients, v: Any) -> Any:
        """Jᵀ v: (Jᵀ v)_l = Σ_k J_kl v_k."""
        out = c.diag * v
        out[..., :, :-1] += c.W[..., :, 1:] * v[..., :, 1:]
        out[..., :, 1:] += c.E[..., :, :-1] * v[..., :, :-1]
        out[..., :-1, :] += c.S[..., 1:, :] * v[..., 1:, :]
        out[..., 1:, :] += c.N[..., :-1, :] * v[..., :-1, :]
        return out


def _pad_np(v: np.ndarray, axis: int, side: str) -> np.ndarray:
    return _pad(v, axis, side, _NumpyConcat)


def _shift_np(v: np.ndarray, axis: int, step: int) -> np.ndarray:
    return shift(v, axis, step, _NumpyConcat)


class _NumpyConcat:
    """The two NumPy functions the padding helpers need (for host-side constants)."""

    zeros_like = staticmethod(np.zeros_like)
    concat = staticmethod(np.concatenate)
