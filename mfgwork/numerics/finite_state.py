"""Implicit Euler sweeps of a two-state mean field game with switching-rate control.

States 0 and 1; leaving state i at rate β ≥ 0 costs c β²/2 per unit time. With the
cost-minimisation convention of mfgwork, the value u = (u_0, u_1) solves

    −u_i' + ((u_i − u_j)_+)² / (2c) = f_i(t),   u(T) = u_T,   β_i* = (u_i − u_j)_+ / c,

and the distribution m = (m_0, m_1) the Kolmogorov equation m_1' = β_0* m_0 − β_1* m_1.

HJB step (implicit Euler, from u^{n+1} to u^n with running cost f^n): the gap
d = u_1 − u_0 solves the scalar equation d/Δt + d|d|/(2c) = r, r = d^{n+1}/Δt + f_1^n − f_0^n,
whose left side is increasing, so d = 2Δt r / (1 + √(1 + 2Δt²|r|/c)) exactly (no Newton);
then u_i^n = u_i^{n+1} + Δt (f_i^n − (β_i c)²/(2c)) with the rates of d. The sweep carries the
gap itself (:meth:`TwoStateScheme.sweep_hjb`): u grows like T·max|f|, and rates recomputed
from differences of u lose the gap to rounding on long horizons.

Kolmogorov step (implicit Euler, the adjoint of the linearised HJB step, as in Achdou's
scheme): with the rates β^n of u^n, (I − Δt Qᵀ) m^{n+1} = m^n, solved in closed form:
m_0^{n+1} = (m_0^n + Δt β_1 S)/(1 + Δt(β_0 + β_1)), m_1^{n+1} likewise, S = m_0^n + m_1^n.
Masses stay ≥ 0 and their sum is conserved to rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class TwoStateScheme:
    """The sweeps on ``nt`` steps of size ``dt`` with switching cost ``c``; arrays are NumPy,
    U and M of shape (nt + 1, 2), running costs F of shape (nt, 2)."""

    def __init__(self, nt: int, dt: float, switching_cost: float) -> None:
        self.nt, self.dt, self.c = nt, dt, switching_cost

    def rates(self, U: Any) -> np.ndarray:
        """β* = ((u_0 − u_1)_+, (u_1 − u_0)_+) / c at each level, shape (…, 2)."""
        U = np.asarray(U)
        return self.gap_rates(U[..., 1] - U[..., 0])

    def gap_rates(self, gap: Any) -> np.ndarray:
        """β* = ((−d)_+, (d)_+) / c of the gaps d = u_1 − u_0, shape (…, 2)."""
        d = np.asarray(gap)
        return np.stack([np.maximum(-d, 0.0), np.maximum(d, 0.0)], axis=-1) / self.c

    def sweep_hjb(self, U_T: Any, F: Any) -> tuple[np.ndarray, np.ndarray]:
        """U with U[nt] = U_T, backward through the running costs F, and the gaps
        d^n = u_1^n − u_0^n as carried by the sweep, shape (nt + 1,)."""
        from .finite_state_kernels import hjb_sweep

        U, gap = np.empty((self.nt + 1, 2)), np.empty(self.nt + 1)
        U[-1] = U_T
        hjb_sweep(U, gap, np.ascontiguousarray(F, dtype=np.float64), self.dt, self.c)
        return U, gap

    def solve_hjb(self, U_T: Any, F: Any, guess: Any | None = None) -> np.ndarray:
        """U with U[nt] = U_T, backward through the running costs F (``guess`` is unused:
        each step is solved exactly)."""
        return self.sweep_hjb(U_T, F)[0]

    def sweep_fp(self, gap: Any, m0: Any) -> np.ndarray:
        """M with M[0] = m0, forward with the rates of the gap d^n on step n → n + 1."""
        from .finite_state_kernels import fp_sweep

        M = np.empty((self.nt + 1, 2))
        M[0] = m0
        fp_sweep(np.ascontiguousarray(self.gap_rates(gap)), M, self.dt)
        return M

    def solve_fp(self, U: Any, m0: Any) -> np.ndarray:
        """M with M[0] = m0, forward with the rates of U[n] on step n → n + 1."""
        U = np.asarray(U)
        return self.sweep_fp(U[:, 1] - U[:, 0], m0)

    def best_response(self, U_T: Any, F: Any, m0: Any
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U, gaps, M): the value of the running costs F and the distributions it moves."""
        U, gap = self.sweep_hjb(U_T, F)
        return U, gap, self.sweep_fp(gap, m0)

    def hjb_residual(self, U: Any, F: Any) -> np.ndarray:
        """(u^n − u^{n+1})/Δt + ((u_i − u_j)_+)²/(2c) − f^n at every step, shape (nt, 2):
        zero for a solution of the implicit scheme (an independent check of the sweep)."""
        U = np.asarray(U)
        leave = self.rates(U[:-1]) * self.c
        return (U[:-1] - U[1:]) / self.dt + leave**2 / (2.0 * self.c) - F

