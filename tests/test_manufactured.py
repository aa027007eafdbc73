"""Manufactured solutions for each shipped Hamiltonian: smooth u, m on [0, 1] with reflecting
walls made exact by source terms (HJB: the running cost; FP: an explicit source), and the
observed order of the scheme (first order in h and Δt, refined together), with the fully
coupled discrete system where H depends on m (a fixed point on the density H sees)."""

from __future__ import annotations

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

SIGMA, T = 0.5, 0.5
NU = 0.5 * SIGMA**2
D = 1e-5   # step of the central differences that differentiate the exact solution


def exact_u(t, x):
    """u with ∂x u = −c(t) x²(1 − x)², c = 4 e^(−2t): zero at both walls to second order,
    so |∂x u|^(q−1) stays smooth for every q > 1."""
    c = 4.0 * np.exp(-2.0 * t)
    return -c * (x**3 / 3 - x**4 / 2 + x**5 / 5)


def exact_m(t, x):
    """m = 1 + b(t) cos(π x): ∫ m = 1 and ∂x m = 0 at the walls."""
    return 1.0 + 0.4 * np.exp(-t) * np.cos(np.pi * x)


def _dx(f, t, x):
    return (f(t, x + D) - f(t, x - D)) / (2 * D)


def sources(H, t, x):
    """(f, S): f = −∂t u − ν ∂xx u + H(x, ∂x u, m), S = ∂t m − ν ∂xx m − ∂x(m ∂p H)."""
    def ux(t, x):
        return _dx(exact_u, t, x)

    def flux(t, x):
        return exact_m(t, x) * H.dp(x, ux(t, x), exact_m(t, x), np)

    u_t = (exact_u(t + D, x) - exact_u(t - D, x)) / (2 * D)
    m_t = (exact_m(t + D, x) - exact_m(t - D, x)) / (2 * D)
    f = -u_t - NU * _dx(ux, t, x) + H.value(x, ux(t, x), exact_m(t, x), np)
    S = m_t - NU * _dx(lambda t, x: _dx(exact_m, t, x), t, x) - _dx(flux, t, x)
    return f, S


def errors(H, n: int) -> tuple[float, float]:
    """Largest errors of U and M on the n × n grid (the coupled fixed point if H depends on
    m)."""
    grid = mw.Grid(0.0, 1.0, n, T, n)
    t, x = grid.t[:, None], grid.x[None, :]
    f, S = sources(H, t, x)
    fd = FiniteDifferences(grid, NU, mw.get_backend("numpy"), hamiltonian=H)
    density = exact_m(t, x)[1:]
    for _ in range(60 if H.depends_on_m else 1):
        U = fd.solve_hjb(exact_u(T, grid.x), f[:-1], None, density)
        M = fd.solve_fp(U, exact_m(0.0, grid.x), density, source=S[1:])
        change = np.max(np.abs(M[1:] - density))
        density = M[1:]
        if change < 1e-13:
            break
    if H.depends_on_m:
        assert change < 1e-11   # the coupled discrete system, not one frozen step
    return float(np.max(np.abs(U - exact_u(t, x)))), float(np.max(np.abs(M - exact_m(t, x))))


MODELS = [mw.Quadratic(), mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5)]


@pytest.mark.parametrize("H", MODELS, ids=repr)
def test_observed_order_is_one_in_h_and_dt(H):
    sizes = (21, 41, 81)
    errs = np.array([errors(H, n) for n in sizes])
    orders = np.log2(errs[:-1] / errs[1:])
    print(f"{H!r}: errors U {errs[:, 0]}, M {errs[:, 1]}; orders U {orders[:, 0]}, "
          f"M {orders[:, 1]}")
    assert (errs[-1] < 0.05).all()
    assert ((orders > 0.8) & (orders < 1.3)).all(), orders
