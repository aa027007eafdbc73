"""Optional packages: a feature that needs one of the extras of ``pyproject.toml`` checks for
its packages when it is called, before it creates anything, and says in one line which extra
installs them (``make run`` installs ``run``; ``make lab``, ``make book`` and ``make doctor``
install ``all``, which holds every extra but ``test``)."""

from __future__ import annotations

import importlib

from .errors import ParameterError

#: The Make targets that install an extra (besides ``make test``, which installs everything).
MAKE_TARGETS = {"run": "make run", "notebooks": "make lab", "scan": "make lab",
                "dask": "make lab", "torch": "make lab", "widgets": "make lab",
                "docs": "make book"}


class MissingExtraError(ParameterError, ImportError):
    """A feature was called without the optional packages it needs (an ImportError too)."""


def require(*modules: str, extra: str, feature: str) -> None:
    """Import ``modules`` (names such as ``"xarray"`` or ``"dask.array"``); if one cannot be
    imported, raise :class:`MissingExtraError` naming ``feature``, the missing packages and
    how to install the extra ``extra``."""
    missing = []
    for name in modules:
        try:   # the package first: a submodule imported earlier would be found without it
            importlib.import_module(name.split(".")[0])
            importlib.import_module(name)
        except ImportError:
            missing.append(name.split(".")[0])
    if missing:
        names = " and ".join(dict.fromkeys(missing))
        make = MAKE_TARGETS.get(extra)
        error = MissingExtraError(
            f"{feature} needs {names}, not installed here: install the '{extra}' extra "
            f"(pip install -e '.[{extra}]' in a checkout, pip install 'mfgwork[{extra}]' "
            f"otherwise{f', or {make}' if make else ''})")
        error.name = missing[0]
        raise error
