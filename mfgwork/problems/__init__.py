"""MFG problems: the generic type, Santa Fe Bar, the two-state El Farol game, and verification
problems."""

from .base import Coupling, MFGProblem
from .santa_fe import SantaFeBar
from .two_state import TwoStateElFarol
from .verification import HopfColeProblem

__all__ = ["Coupling", "HopfColeProblem", "MFGProblem", "SantaFeBar", "TwoStateElFarol"]
