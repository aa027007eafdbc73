"""Optional packages: a feature that needs one of the extras of ``pyproject.toml`` checks for
its packages when it is called, before it creates anything, and says in one line which extra
installs them (``make run`` installs ``run``; ``make lab``, ``make book`` and ``make doctor``
install ``all``, which holds every extra but ``test``)."""

from __future__ import annotations

import importlib.util

from .errors import ParameterError

#: The Make targets that install an extra (besides ``make test``, which installs everything).
MAKE_TARGETS = {"run": "make run", "notebooks": "make lab", "scan": "make lab",
                "dask": "make lab", "torch": "make lab", "widgets": "make lab",
                "docs": "make book"}


def _installed(name: str) -> bool:
    """Whether ``name`` and its package can be imported (a package blocked by a ``None`` in
    ``sys.modules`` counts as missing, as ``import`` treats it)."""
    try:
        return all(importlib.util.find_spec(part) is not None
                   for part in dict.fromkeys((name.split(".")[0], name)))
    except (ImportError, ValueError):
        return False


class MissingExtraError(ParameterError, ImportError):
    """A feature was called without the optional packages it needs (an ImportError too)."""


def require(*modules: str, extra: str, feature: str) -> None:
    """Find ``modules`` (names such as ``"xarray"`` or ``"dask.array"``; found, not imported,
    so the check costs little); if one is missing, raise :class:`MissingExtraError` naming
    ``feature``, the missing packages and how to install the extra ``extra``."""
    missing = [name.split(".")[0] for name in modules if not _installed(name)]
    if missing:
        names = " and ".join(dict.fromkeys(missing))
        make = MAKE_TARGETS.get(extra)
        error = MissingExtraError(
            f"{feature} needs {names}, not installed here: install the '{extra}' extra "
            f"(pip install -e '.[{extra}]' in a checkout, pip install 'mfgwork[{extra}]' "
            f"otherwise{f', or {make}' if make else ''})")
        error.name = missing[0]
        raise error
