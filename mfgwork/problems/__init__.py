"""MFG problems: the generic type, Santa Fe Bar, and verification problems."""

from .base import Coupling, MFGProblem
from .santa_fe import SantaFeBar
from .verification import HopfColeProblem

__all__ = ["Coupling", "HopfColeProblem", "MFGProblem", "SantaFeBar"]
