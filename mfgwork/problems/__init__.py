"""MFG problems: the generic type, Santa Fe Bar, the two-state El Farol game, and verification
problems. A problem owns its coupling (how the density enters the HJB equation) and its
observables. Imports from ``core`` only."""

from ..core.errors import ParameterError
from .base import Coupling, MFGProblem
from .hamiltonians import Congestion, Hamiltonian, Power, Quadratic
from .populations import Population, Populations, SantaFePopulations
from .santa_fe import SantaFeBar
from .two_state import TwoStateElFarol
from .verification import HopfColeProblem

#: Problems that can be rebuilt from the ``params`` they record (``params["problem"]``).
REBUILDABLE = {SantaFeBar.name_default: SantaFeBar}


def problem_from_params(params: dict) -> MFGProblem:
    """The problem a result's ``params`` describe, for the problems in :data:`REBUILDABLE`
    (others hold user callables, which are not stored)."""
    name = params.get("problem")
    cls = REBUILDABLE.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ParameterError(f"problem=None is invalid for a result of problem "
                             f"{name!r:.80}: pass the problem that was solved "
                             f"(only {', '.join(map(repr, REBUILDABLE))} results are rebuilt "
                             "from their params)")
    try:
        return cls.from_params(params)
    except KeyError as exc:
        raise ParameterError(f"the result's params lack {exc.args[0]!r}, which a {name} "
                             "problem needs: pass the problem that was solved") from None
    except TypeError as exc:
        raise ParameterError(f"the result's params do not describe a {name} problem "
                             f"({exc}): pass the problem that was solved") from None


__all__ = ["Congestion", "Coupling", "Hamiltonian", "HopfColeProblem", "MFGProblem",
           "Population", "Populations", "Power", "Quadratic", "SantaFeBar",
           "SantaFePopulations", "TwoStateElFarol"]
