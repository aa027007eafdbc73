"""Read-only mappings, lists and arrays for results: they compare, serialise (JSON, pickle)
and copy as ``dict``, ``list`` and ``ndarray`` do, and refuse every change, so that a
result's arrays, parameters, timings, history and extras stay what the solve recorded.
``d | {...}`` gives a changed plain ``dict`` (the way to build a changed copy with
``dataclasses.replace``), ``a.copy()`` a changeable array."""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"this {type(self).__name__[len('Frozen'):].lower()} is part of a frozen "
                    "result and cannot change: build a changed copy, e.g. "
                    "dataclasses.replace(res, extra=res.extra | {...})")


class FrozenDict(dict):
    """A ``dict`` that refuses changes (its values frozen by :func:`freeze`)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, tuple[dict]]:
        return freeze, (dict(self),)

    def copy(self) -> dict:
        """A plain (changeable) copy."""
        return dict(self)


class FrozenList(list):
    """A ``list`` that refuses changes (its items frozen by :func:`freeze`)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple[Any, tuple[list]]:
        return freeze, (list(self),)

    def copy(self) -> list:
        """A plain (changeable) copy."""
        return list(self)


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that refuses writes (``array`` itself as it is, if it does)."""
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


#: The types :func:`freeze` returns as they are at once: the leaves of most results, the
#: frozen containers, and each type found at run time to be none of dict, list, tuple or
#: NumPy array (tensors, say)
_KEPT = {float, int, bool, str, type(None), FrozenDict, FrozenList}


def complete(mapping: FrozenDict, values: dict[str, Any]) -> None:
    """Set ``values`` (frozen) in the frozen ``mapping``: only while its maker alone holds it
    (the timings a batch's members share, completed once they are built and before they are
    returned)."""
    dict.update(mapping, {k: freeze(v) for k, v in values.items()})


def freeze(value: Any) -> Any:
    """``value`` with every dict a :class:`FrozenDict`, every list a :class:`FrozenList` and
    every NumPy array a read-only view (:func:`read_only`), all the way down (tuples rebuilt
    around their frozen items; anything else as it is; a frozen container, made here, as
    it is)."""
    kind = type(value)
    if kind in _KEPT or isinstance(value, (FrozenDict, FrozenList)):
        return value
    if isinstance(value, np.ndarray):
        return read_only(value)
    if isinstance(value, dict):
        return FrozenDict({k: v if type(v) in _KEPT else freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList([v if type(v) in _KEPT else freeze(v) for v in value])
    if isinstance(value, tuple):
        if not hasattr(value, "_fields"):
            return tuple(freeze(v) for v in value)
    else:
        _KEPT.add(kind)
    return value
