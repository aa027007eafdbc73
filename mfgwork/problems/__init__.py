"""MFG problems: the generic type, Santa Fe Bar, the two-state El Farol game, and verification
problems. A problem owns its coupling (how the density enters the HJB equation) and its
observables. Imports from ``core`` only."""

from ..core.errors import ParameterError
from .base import Coupling, MFGProblem
from .santa_fe import SantaFeBar
from .two_state import TwoStateElFarol
from .verification import HopfColeProblem

#: Problems that can be rebuilt from the ``params`` they record (``params["problem"]``).
REBUILDABLE = {SantaFeBar.name_default: SantaFeBar}


def problem_from_params(params: dict) -> MFGProblem:
    """The problem a result's ``params`` describe, for the problems in :data:`REBUILDABLE`
    (others hold user callables, which are not stored)."""
    cls = REBUILDABLE.get(params.get("problem"))
    if cls is None:
        raise ParameterError(f"problem=None is invalid for a result of problem "
                             f"{params.get('problem')!r}: pass the problem that was solved "
                             f"(only {', '.join(map(repr, REBUILDABLE))} results are rebuilt "
                             "from their params)")
    return cls.from_params(params)


__all__ = ["Coupling", "HopfColeProblem", "MFGProblem", "SantaFeBar", "TwoStateElFarol"]
