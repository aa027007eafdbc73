"""Verification problems with exact solutions.

Hopf–Cole. With H = ½|p|² and f = 0, u = −2ν log φ turns the HJB equation into the backward
heat equation ∂t φ + ν ∂xx φ = 0, and m = φ ψ solves the FP equation when ψ solves the
forward heat equation ∂t ψ = ν ∂xx ψ (check: the FP flux ν ∂x m + m ∂x u = ν(φ ∂x ψ − ψ ∂x φ)).
Cosines in x − x_min satisfy the Neumann conditions of both, so on Ω = [x_min, x_max] with
L = x_max − x_min, k = π j / L, k' = π j' / L:

    φ(t, x) = 1 + a e^{−ν k² (T − t)} cos(k (x − x_min))     (|a| < 1 keeps φ > 0)
    ψ(t, x) = 1 + b e^{−ν k'² t} cos(k' (x − x_min))         (|b| < 1 keeps ψ > 0)
    u = −2ν log φ,  m = φ ψ / Z,  Z = ∫ φ(0) ψ(0) dx  (∫ φ ψ dx does not change in time)

give exact solutions with g = u(T), m0 = m(0) and f = 0.

Ergodic. For the long run (λ − ν v'' + ½ v'² = f(x, m), −ν m'' − (m v')' = 0, ∫ m = 1,
∫ v = 0) pick v(x) = a cos(k (x − x_min)) with k = π j / L (Neumann): its stationary density
is the Gibbs density m*(x) = e^{−v/ν} / ∫ e^{−v/ν} (zero flux ν m' + m v' = 0), and the
monotone local coupling

    f(x, m) = m − m*(x) + λ* − ν v''(x) + ½ v'(x)²

makes (v, m*, λ*) the exact ergodic solution, for any λ* (unique: f increases in m).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import check_int, check_real
from .base import MFGProblem


class HopfColeProblem(MFGProblem):
    """Uncoupled problem (f = 0) whose U and M are known exactly (see the module docstring)."""

    def __init__(self, x_min: float = 0.0, x_max: float = 1.0, T: float = 1.0,
                 sigma: float = 0.6, a: float = 0.5, b: float = 0.5, mode_u: int = 1,
                 mode_m: int = 2) -> None:
        for name, value in (("a", a), ("b", b)):
            object.__setattr__(self, name, check_real(name, value, low=-1.0, high=1.0))
        object.__setattr__(self, "mode_u", check_int("mode_u", mode_u, low=1))
        object.__setattr__(self, "mode_m", check_int("mode_m", mode_m, low=1))
        super().__init__(x_min=x_min, x_max=x_max, T=T, sigma=sigma, m0=self._m0,
                         g=self._g, f=_no_coupling, name="hopf_cole")

    def params(self) -> dict[str, Any]:
        return super().params() | {"a": self.a, "b": self.b, "mode_u": self.mode_u,
                                   "mode_m": self.mode_m}

    def _k(self, mode: int) -> float:
        return np.pi * mode / (self.x_max - self.x_min)

    def phi(self, t: Any, x: Any, xp: Any = np) -> Any:
        k = self._k(self.mode_u)
        return 1.0 + self.a * np.exp(-self.nu * k**2 * (self.T - t)) * xp.cos(k * (x - self.x_min))

    def psi(self, t: Any, x: Any, xp: Any = np) -> Any:
        k = self._k(self.mode_m)
        return 1.0 + self.b * np.exp(-self.nu * k**2 * t) * xp.cos(k * (x - self.x_min))

    @property
    def normalization(self) -> float:
        """Z = ∫ φ(0, x) ψ(0, x) dx, in closed form."""
        length = self.x_max - self.x_min
        same = self.mode_u == self.mode_m
        amp = self.a * np.exp(-self.nu * self._k(self.mode_u) ** 2 * self.T)
        return length * (1.0 + (0.5 * amp * self.b if same else 0.0))

    def exact_u(self, t: Any, x: Any) -> np.ndarray:
        """u(t, x) on NumPy arrays (broadcasting t against x)."""
        return -2.0 * self.nu * np.log(self.phi(t, x))

    def exact_m(self, t: Any, x: Any) -> np.ndarray:
        """m(t, x) on NumPy arrays (broadcasting t against x)."""
        return self.phi(t, x) * self.psi(t, x) / self.normalization

    def _g(self, x: Any) -> Any:
        import array_api_compat

        xp = array_api_compat.array_namespace(x)
        return -2.0 * self.nu * xp.log(self.phi(self.T, x, xp))

    def _m0(self, x: Any) -> Any:
        import array_api_compat

        xp = array_api_compat.array_namespace(x)
        return self.phi(0.0, x, xp) * self.psi(0.0, x, xp)


class ErgodicProblem(MFGProblem):
    """A coupled problem whose ergodic solution (v, m*, λ*) is known exactly (module
    docstring); T and m0 serve finite-horizon solves of the same problem."""

    def __init__(self, x_min: float = 0.0, x_max: float = 1.0, sigma: float = 0.6,
                 a: float = 0.3, mode: int = 1, ergodic_constant: float = 0.25,
                 T: float = 1.0) -> None:
        object.__setattr__(self, "a", check_real("a", a))
        object.__setattr__(self, "mode", check_int("mode", mode, low=1))
        object.__setattr__(self, "ergodic_constant",
                           check_real("ergodic_constant", ergodic_constant))
        super().__init__(x_min=x_min, x_max=x_max, T=T, sigma=sigma, m0=_uniform,
                         g=_zero, f=self._f, name="ergodic")

    def params(self) -> dict[str, Any]:
        return super().params() | {"a": self.a, "mode": self.mode,
                                   "ergodic_constant": self.ergodic_constant}

    def exact_v(self, x: Any, xp: Any = np) -> Any:
        """v(x) = a cos(k (x − x_min)), Σ-free: ∫ v = 0 for every mode."""
        k = np.pi * self.mode / (self.x_max - self.x_min)
        return self.a * xp.cos(k * (x - self.x_min))

    def exact_m(self, x: Any, xp: Any = np) -> Any:
        """m*(x) = e^{−v/ν} / Z, Z by a fine quadrature (a Bessel function in closed form)."""
        fine = np.linspace(self.x_min, self.x_max, 20001)
        Z = np.trapezoid(np.exp(-self.exact_v(fine) / self.nu), fine)
        return xp.exp(-self.exact_v(x, xp) / self.nu) / Z

    def _f(self, t: float, x: Any, m: Any) -> Any:
        import array_api_compat

        xp = array_api_compat.array_namespace(x)
        k = np.pi * self.mode / (self.x_max - self.x_min)
        dv = -self.a * k * xp.sin(k * (x - self.x_min))
        d2v = -self.a * k * k * xp.cos(k * (x - self.x_min))
        return (m - self.exact_m(x, xp) + self.ergodic_constant - self.nu * d2v
                + 0.5 * dv * dv)


def _uniform(x: Any) -> Any:
    """m0 = 1 (normalized by the solver)."""
    return 0.0 * x + 1.0


def _zero(x: Any) -> Any:
    """g = 0."""
    return 0.0 * x


def _no_coupling(t: float, x: Any, m: Any) -> Any:
    """f = 0."""
    return 0.0 * x
