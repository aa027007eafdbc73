"""Template of the 2-D HJB step's compiled assembly (numba), written once for every isotropic
model.

Not imported as it stands: :func:`.assembly_kernels.compiled_system` writes, for each model
structure, a module made of the model's generated scalar functions in s = |p|²
(:func:`.isotropic.radial_structure` printed by :func:`mfgwork.problems.symbolic.
scalar_source`: ``NAUX``, ``model_aux``, ``H_and_p`` giving (G, D), ``H_zero`` giving G(0))
followed by this source,
and imports it from the model cache folder, where numba caches its machine code.

With the edge gradients of :mod:`.stencil` and a = (q_b)_+, b = (q_f)_− per axis,
s = Σ_axes (a² + b²), Ĥ = G(s), ∂Ĥ/∂q_b = D a, ∂Ĥ/∂q_f = D b (where s = 0: Ĥ = G(0), D = 0,
the model's functions not evaluated at s = 0, where D may be infinite); R and
the coefficients as in :mod:`.stencil` (the array code there is the reference: a test
compares the two).
"""
# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import numpy as np
from numba import njit

from mfgwork.numerics.fdm.model_loops import heaviside, power, sign  # noqa: F401


@njit(cache=True, nogil=True)
def node_values(m, prm, aux):  # pragma: no cover - compiled
    """The model's p-free values of each node (``model_aux``) for the density m (ny, nx),
    into aux[:, j·nx + i]."""
    if NAUX > 0:
        nx = m.shape[1]
        for j in range(m.shape[0]):
            for i in range(nx):
                model_aux(0.0, m[j, i], prm, aux, j * nx + i)


@njit(cache=True, nogil=True)
def model_system(u, u_next, F, m, aux, prm, ox, oy, inv_hx, inv_hy, inv_wx, inv_wy, dW, dE,
                 dS, dN, to_W, to_E, to_S, to_N, active, nu, inv_dt):  # pragma: no cover
    """(diag, W, E, S, N, R) of the HJB step at u, arrays (ny, nx); m the density the step
    sees (zeros where H ignores it), aux its :func:`node_values`."""
    ny, nx = u.shape
    diag, W, E = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    S, N, R = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    for j in range(ny):
        for i in range(nx):
            c = u[j, i]
            gxb = (c - u[j, i - 1]) * ox[j, i - 1] * inv_hx if i > 0 else 0.0
            gxf = (u[j, i + 1] - c) * ox[j, i] * inv_hx if i < nx - 1 else 0.0
            gyb = (c - u[j - 1, i]) * oy[j - 1, i] * inv_hy if j > 0 else 0.0
            gyf = (u[j + 1, i] - c) * oy[j, i] * inv_hy if j < ny - 1 else 0.0
            ax, ay = max(gxb, 0.0), max(gyb, 0.0)
            bx, by = min(gxf, 0.0), min(gyf, 0.0)
            p2 = (ax * ax + ay * ay) + (bx * bx + by * by)
            if p2 > 0.0:
                value, slope = H_and_p(p2, 0.0, m[j, i], prm, aux, j * nx + i)
            else:
                value, slope = H_zero(0.0, m[j, i], prm, aux, j * nx + i), 0.0
            lap = (gxf - gxb) * inv_wx[i] + (gyf - gyb) * inv_wy[j]
            act = active[j, i]
            R[j, i] = ((c - u_next[j, i]) * inv_dt - nu * lap + value - F[j, i]) * act
            w = dW[j, i] - slope * ax * inv_hx
            e = dE[j, i] + slope * bx * inv_hx
            s = dS[j, i] - slope * ay * inv_hy
            n = dN[j, i] + slope * by * inv_hy
            diag[j, i] = act * (inv_dt - (w + e + s + n)) + (1.0 - act)
            W[j, i] = w * to_W[j, i]
            E[j, i] = e * to_E[j, i]
            S[j, i] = s * to_S[j, i]
            N[j, i] = n * to_N[j, i]
    return diag, W, E, S, N, R
