"""mfgwork: a Jupyter-first research workbench for mean field games.

    import mfgwork as mw
    res = mw.solve(mw.SantaFeBar(threshold=0.6), nx=201, nt=201)

Convention (ν = σ²/2, reflecting walls):
    HJB  −∂t u − ν ∂xx u + H(x, ∂x u, m) = f(t, x, m),  u(T) = g
    FP    ∂t m − ν ∂xx m − ∂x(m ∂p H(x, ∂x u, m)) = 0,  m(0) = m0
with H = ½|p|² by default (``hamiltonian=``: Quadratic, Power, Congestion or your own).
PyTorch is imported only when a torch backend is asked for.
"""

from .analysis.n_player import NPlayerResult, n_player, n_player_study
from .common_noise import solve_common_noise
from .core.backend import (
    Backend,
    available_backends,
    available_devices,
    device_info,
    from_numpy,
    get_backend,
    mps_emulation,
    to_numpy,
)
from .core.errors import (
    BackendError,
    ConvergenceWarning,
    LoadError,
    ParameterError,
    ResolutionWarning,
    SolverError,
)
from .core.grid import Grid
from .core.grid2d import Exit, Grid2D, Obstacle
from .finite_state import solve_two_state, switching_rates, time_to_level
from .numerics.iteration import Anderson, FictitiousPlay, Relaxation
from .numerics.particles import ParticleFP
from .pipeline import Discretization, Where
from .placement import Placement, crossover_table, placement
from .populations import solve_populations
from .problems import (
    Congestion,
    Hamiltonian,
    HopfColeProblem,
    MFGProblem,
    Power,
    Quadratic,
    SantaFeBar,
    TwoStateElFarol,
)
from .problems.common_noise import CommonNoise
from .problems.populations import Population, Populations, SantaFePopulations
from .problems.room import Room
from .problems.two_bars import TwoBars
from .problems.two_d import MFGProblem2D
from .results import Result, Status, load, save_run
from .results2d import Result2D
from .solve import register_kind, solve, solve_batch, solve_continuous
from .solve2d import solve_2d, solve_2d_batch
from .welfare import price_welfare, welfare

__version__ = "0.1.0"

__all__ = [
    "Anderson", "Backend", "BackendError", "ConvergenceWarning", "FictitiousPlay", "Grid",
    "ResolutionWarning",
    "HopfColeProblem", "LoadError", "MFGProblem", "ParameterError", "Relaxation", "Result",
    "Status",
    "SantaFeBar",
    "SolverError", "available_backends", "available_devices", "device_info", "from_numpy",
    "get_backend", "load", "mps_emulation", "save_run", "solve", "solve_batch", "to_numpy",
    "SweepIndex", "load_sweep", "sweep", "ParticleFP", "NPlayerResult", "n_player",
    "n_player_study", "TwoStateElFarol", "solve_two_state", "switching_rates", "time_to_level",
    "solve_continuous",
    "Placement", "crossover_table", "placement", "open_scan", "scan",
    "Hamiltonian", "Quadratic", "Power", "Congestion",
    "Population", "Populations", "SantaFePopulations", "solve_populations",
    "Exit", "Grid2D", "Obstacle", "MFGProblem2D", "Room", "TwoBars", "Result2D",
    "solve_2d", "solve_2d_batch", "welfare", "price_welfare",
    "CommonNoise", "solve_common_noise",
    "Discretization", "Where", "register_kind",
]


# Modules a notebook reaches as ``mw.<name>`` (or ``from mfgwork import <name>``), loaded on
# first use: they pull in matplotlib, papermill or ipywidgets, which ``import mfgwork`` avoids.
LAZY_MODULES = {
    "plots": "analysis.plots", "studies": "analysis.studies", "runs": "workflows.runs",
    "sweep_plots": "workflows.sweep_plots", "widgets": "apps.explorer",
    "game_plots": "analysis.game_plots", "crossover": "analysis.crossover",
    "plots2d": "analysis.plots2d",
}


# Functions of the workflows (scans and sweeps: stores, Dask, YAML specs), imported on first
# use: about 30 ms of ``import mfgwork`` that a solve does not need.
LAZY_NAMES = {"scan": "workflows.scan", "open_scan": "workflows.scan",
              "sweep": "workflows.sweeps", "load_sweep": "workflows.sweeps",
              "SweepIndex": "workflows.sweeps"}


def __getattr__(name: str) -> object:
    import importlib

    if name in LAZY_MODULES:
        return importlib.import_module(f".{LAZY_MODULES[name]}", __name__)
    if name in LAZY_NAMES:
        value = getattr(importlib.import_module(f".{LAZY_NAMES[name]}", __name__), name)
        globals()[name] = value   # (found directly from now on)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY_MODULES) | set(LAZY_NAMES))
