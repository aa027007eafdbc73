"""What differs between two plans (of a sweep, of a scan), in words for an error message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: a key that one of the plans does not have
_UNSET = object()


def plan_differences(earlier: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What differs from ``earlier`` to ``now``, key by key, one level into mappings:
    ``fixed: nx 21 → 41, nt 21 → 41; spec: sigma [0.3, 0.6] → [0.3]``."""
    parts = []
    for key in now:
        old, new = earlier.get(key, _UNSET), now[key]
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            names = [*old, *(k for k in new if k not in old)]
            items = [f"{k} {_shown(old.get(k, _UNSET))} → {_shown(new.get(k, _UNSET))}"
                     for k in names if old.get(k, _UNSET) != new.get(k, _UNSET)]
            parts.append(f"{key}: {', '.join(items)}")
        else:
            parts.append(f"{key}: {_shown(old)} → {_shown(new)}")
    return "; ".join(parts)


def _shown(value: Any) -> str:
    """A value in a message: plain, short; ``(not set)`` where absent."""
    if value is _UNSET:
        return "(not set)"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
