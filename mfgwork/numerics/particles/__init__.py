"""Particle Fokker–Planck solver (Euler–Maruyama, reflecting walls, CIC or KDE density) and
its numba, torch and Triton kernels. Imports from ``core`` only."""

from .density import DENSITIES, kde_densities, silverman_bandwidth
from .memory import estimate_bytes
from .solver import DEFAULT_PARTICLES, ParticleFP, check_particle_args

__all__ = ["DENSITIES", "DEFAULT_PARTICLES", "ParticleFP", "check_particle_args",
           "estimate_bytes", "kde_densities", "silverman_bandwidth"]
