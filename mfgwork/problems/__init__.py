"""MFG problems: the generic type, Santa Fe Bar, the two-state El Farol game, and verification
problems. A problem owns its coupling (how the density enters the HJB equation) and its
observables. Imports from ``core`` only."""

from ..core.errors import ParameterError
from .base import Coupling, MFGProblem
from .common_noise import CommonNoise
from .hamiltonians import Congestion, Hamiltonian, Power, Quadratic
from .populations import Population, Populations, SantaFePopulations
from .room import Room
from .santa_fe import SantaFeBar
from .two_bars import TwoBars
from .two_state import TwoStateElFarol
from .verification import HopfColeProblem

#: The problem registry: every problem class known by name, under its short name (the command
#: line, scans) and under the name its results record in ``params["problem"]``. Those with
#: a ``from_params`` are rebuilt from a result's params (:func:`problem_from_params`); the
#: others hold user callables, which are not stored.
PROBLEMS: dict[str, type] = {
    "santa_fe": SantaFeBar, SantaFeBar.name_default: SantaFeBar,
    "santa_fe_populations": SantaFePopulations,
    "two_state": TwoStateElFarol, TwoStateElFarol.name: TwoStateElFarol,
    TwoBars.name_default: TwoBars, Room.name_default: Room,
}
#: The names of :data:`PROBLEMS` whose class can be rebuilt from its params.
REBUILDABLE = tuple(name for name, cls in PROBLEMS.items() if hasattr(cls, "from_params"))


def problem_name(cls: object) -> str | None:
    """The short name of a problem class in :data:`PROBLEMS` (its first), else None."""
    return next((name for name, known in PROBLEMS.items() if known is cls), None)


def problem_class(name: object) -> type | None:
    """The class of the problems whose results record ``name`` (``params["problem"]``): one of
    :data:`PROBLEMS` or common noise; None for a problem of one's own."""
    if not isinstance(name, str):
        return None
    return CommonNoise if name == CommonNoise.name else PROBLEMS.get(name)


def problem_from_params(params: dict) -> MFGProblem | TwoStateElFarol:
    """The problem a result's ``params`` describe, for the problems of the registry that
    are rebuilt from their params (:data:`REBUILDABLE`), and common noise on one of them."""
    name = params.get("problem")
    cls = problem_class(name)
    if not hasattr(cls, "from_params"):
        raise ParameterError(f"problem=None is invalid for a result of problem "
                             f"{name!r:.80}: pass the problem that was solved "
                             f"(only {', '.join(map(repr, REBUILDABLE))} results are rebuilt "
                             "from their params)")
    if cls is CommonNoise:   # the noise on its model, rebuilt first (and refused there)
        model = params.get("model")
        model = problem_from_params(model if isinstance(model, dict) else {})
    try:
        return (CommonNoise.from_params(params, model) if cls is CommonNoise
                else cls.from_params(params))
    except KeyError as exc:
        raise ParameterError(f"the result's params lack {exc.args[0]!r}, which a {name} "
                             "problem needs: pass the problem that was solved") from None
    except TypeError as exc:
        raise ParameterError(f"the result's params do not describe a {name} problem "
                             f"({exc}): pass the problem that was solved") from None
    except ParameterError as exc:   # (e.g. a Hamiltonian of one's own)
        raise ParameterError(f"{exc}: pass the problem that was solved") from None


__all__ = ["PROBLEMS", "REBUILDABLE", "CommonNoise", "Congestion", "Coupling", "Hamiltonian",
           "HopfColeProblem", "MFGProblem", "Population", "Populations", "Power", "Quadratic",
           "SantaFeBar", "SantaFePopulations", "TwoStateElFarol", "problem_class",
           "problem_from_params", "problem_name"]
