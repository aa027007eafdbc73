"""Type aliases shared by the layers (annotations only)."""

from __future__ import annotations

from typing import Any

Array = Any
"""An array of the active backend: a NumPy array or a torch tensor (on any device)."""
