"""Space-time grid: ``nx`` points on [x_min, x_max] including both walls, ``nt`` time steps.

Each grid point i owns a control volume of width ``weights[i]``: h inside, h/2 at the two walls.
Integrals are the trapezoidal rule ∫ φ dx ≈ Σ_i w_i φ_i, and densities have Σ_i w_i m_i = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .errors import MAX_COUNT, ParameterError, check_int, check_real

#: Largest diffusion number ν Δt / h² accepted: the implicit FP step conserves mass up to
#: about ε·r (measured: 6e-11 at r = 5e4, 2e-9 at r = 5e6 in float64), so beyond this the
#: mass error leaves round-off.
MAX_DIFFUSION_NUMBER = 1e5
#: Smallest space step accepted relative to the largest |x| of the domain: below it the
#: positions x_i carry relative errors above about 1e-6 in h (float64 round-off 2.2e-16).
MIN_RELATIVE_STEP = 2.2e-10
#: Largest nx or nt accepted.
MAX_POINTS = MAX_COUNT


@dataclass(frozen=True)
class Grid:
    """``nx`` nodes on [x_min, x_max], walls included (h = (x_max − x_min)/(nx − 1)), and
    ``nt`` implicit Euler steps on [0, T] (Δt = T/nt); ``weights`` are the control volumes
    of the module docstring."""

    x_min: float
    x_max: float
    nx: int
    T: float
    nt: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "nx", check_int("nx", self.nx, low=3, high=MAX_POINTS))
        object.__setattr__(self, "nt", check_int("nt", self.nt, low=1, high=MAX_POINTS))
        check_real("T", self.T, low=0.0)
        check_real("x_min", self.x_min)
        check_real("x_max", self.x_max, low=float(self.x_min))

    def check_scales(self, sigma: float, dtype: str = "float64", steady: bool = False
                     ) -> float:
        """Check the quantities the scheme is built from, before any work: h, Δt, ν = σ²/2
        finite, > 0 and normal (not denormal) in float64 and in ``dtype``; h resolved next to
        the coordinates (grid points that differ by more than round-off, h at least
        :data:`MIN_RELATIVE_STEP` times the largest |x|); and the diffusion number
        r = ν Δt / h² at most :data:`MAX_DIFFUSION_NUMBER`. Returns r; a
        :class:`ParameterError` names what to change. ``steady``: a system without time
        steps (the long run): Δt and r are not checked (r is returned as 0)."""
        def setting() -> str:   # (said only in a refusal)
            return (f"x_min={self.x_min!r}, x_max={self.x_max!r}, T={self.T!r}, "
                    f"sigma={sigma!r}, nx={self.nx}, nt={self.nt}")

        with np.errstate(all="ignore"):
            h, dt = np.float64(self.x_max) - np.float64(self.x_min), np.float64(self.T)
            h, dt = h / (self.nx - 1), dt / self.nt
            nu = np.float64(sigma) ** 2 / 2
            hh = h * h
            r = nu * dt / hh
        info = np.finfo(np.float64 if dtype == "float64" else np.float32)
        for name, value, cause in (
                ("h = (x_max - x_min)/(nx - 1)", h, "x_min, x_max or nx"),
                *([] if steady else [("dt = T/nt", dt, "T or nt")]),
                ("nu = sigma**2/2", nu, "sigma")):
            if not (np.isfinite(value) and info.tiny <= value <= info.max):
                raise ParameterError(f"{name} = {float(value)!r} is out of the range of "
                                     f"{dtype} (normal numbers {info.tiny:.3g} to "
                                     f"{info.max:.3g}; {setting()}): change {cause}")
        scale = max(abs(self.x_min), abs(self.x_max))
        if h < MIN_RELATIVE_STEP * scale:
            raise ParameterError(
                f"h = (x_max - x_min)/(nx - 1) = {float(h):.3g} is below {MIN_RELATIVE_STEP:g}"
                f" times the largest |x| = {scale:.3g} ({setting()}): grid points that far from 0"
                " differ by little more than round-off; shift the domain towards 0 or use "
                "fewer points nx")
        if steady:
            return 0.0
        if not (np.isfinite(hh) and info.tiny <= r):
            raise ParameterError(
                f"the diffusion number nu*dt/h**2 = {float(r):.3g} underflows in {dtype} "
                f"({setting()}): h is far too large for sigma and T; use a smaller domain "
                "(x_min, x_max) or larger sigma or T")
        if not (np.isfinite(r) and r <= MAX_DIFFUSION_NUMBER):
            raise ParameterError(
                f"the diffusion number nu*dt/h**2 = {float(r):.3g} is above "
                f"{MAX_DIFFUSION_NUMBER:g} ({setting()}): the implicit scheme would lose mass "
                f"conservation (mass error about {float(r) * 2.2e-16:.1g} instead of "
                f"round-off); lower sigma or T, or raise nt or lower nx")
        return float(r)

    @property
    def h(self) -> float:
        """Space step."""
        return (self.x_max - self.x_min) / (self.nx - 1)

    @property
    def dt(self) -> float:
        """Time step."""
        return self.T / self.nt

    @cached_property
    def x(self) -> np.ndarray:
        """Grid points, shape (nx,)."""
        return np.linspace(self.x_min, self.x_max, self.nx)

    @cached_property
    def t(self) -> np.ndarray:
        """Time levels, shape (nt + 1,)."""
        return np.linspace(0.0, self.T, self.nt + 1)

    @cached_property
    def weights(self) -> np.ndarray:
        """Control-volume widths (trapezoidal quadrature weights), shape (nx,)."""
        return trapezoid_weights(self.nx, self.h)

    def cell_fraction_above(self, threshold: float) -> np.ndarray:
        """Fraction of each control volume lying in {x > threshold}: 0, 1, or in between.

        This is the finite-volume value of the indicator 1{x > threshold}; it makes the
        discrete attendance Σ w_i χ_i m_i exact for densities constant on each volume.
        """
        lo = np.maximum(self.x - self.h / 2, self.x_min)
        hi = np.minimum(self.x + self.h / 2, self.x_max)
        return np.clip((hi - np.maximum(lo, threshold)) / (hi - lo), 0.0, 1.0)


def trapezoid_weights(n: int, h: float) -> np.ndarray:
    """Trapezoidal weights of ``n`` points spaced ``h`` apart: h inside, h/2 at both ends."""
    w = np.full(n, h)
    w[0] = w[-1] = h / 2
    return w
