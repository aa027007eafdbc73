"""A model's ``value`` recorded without SymPy: the name of its structure in the disk cache.

:func:`record` calls ``value(x, p, m, xp)`` once with placeholders (:class:`Node`) for x, p,
m and for the model's numeric fields (signed as :mod:`.symbolic` makes their symbols) and an
``xp`` whose every function records its call, and returns the text of the operations
performed, constants written exactly. The traced structure of :mod:`.symbolic` is a
function of that sequence of operations alone, so the text's hash names it: a process that
finds the structure cached under that name never imports SymPy.

The recorder follows straight-line arithmetic only. A call that branches on a placeholder
(``if p > 0``), converts one to a number (``float(self.c)``), hashes one, or hands one to
NumPy returns None, and the model is traced with SymPy as before (which refuses or traces
it concretely, as it always did).
"""

from __future__ import annotations

import hashlib
import numbers
from typing import Any


class Unfollowed(TypeError):
    """An operation the recorder does not follow (the model is then traced by SymPy)."""


def _text(value: Any) -> str:
    """The exact text of an operand: a placeholder's record or a constant with its type."""
    if isinstance(value, Node):
        return value.text
    if value is None or isinstance(value, bool | str):
        return repr(value)
    if isinstance(value, numbers.Number):
        return f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"
    raise Unfollowed(f"operand of type {type(value).__name__}")


def _apply(name: str, *args: Any, **kwargs: Any) -> Node:
    parts = [_text(a) for a in args] + [f"{k}={_text(v)}" for k, v in sorted(kwargs.items())]
    return Node(f"{name}({','.join(parts)})")


class Node:
    """A placeholder: every operation on it returns the record of that operation."""

    __slots__ = ("text",)
    __array_ufunc__ = None   # NumPy scalars defer to the reflected operators
    __hash__ = None          # type: ignore[assignment]

    def __init__(self, text: str) -> None:
        self.text = text

    def __bool__(self) -> bool:
        raise Unfollowed("a branch on a placeholder")

    def __float__(self) -> float:
        raise Unfollowed("a placeholder converted to a number")

    __int__ = __index__ = __complex__ = __float__   # type: ignore[assignment]

    def __call__(self, *args: Any, **kwargs: Any) -> Node:
        return _apply(self.text, *args, **kwargs)


def _operators() -> None:
    """Node's arithmetic, comparison and logical operators, each recording its name."""
    def forward(name: str) -> Any:
        return lambda self, other: _apply(name, self, other)

    def reflected(name: str) -> Any:
        return lambda self, other: _apply(name, other, self)

    for name in ("add", "sub", "mul", "truediv", "pow", "and", "or"):
        setattr(Node, f"__{name}__", forward(name))
        setattr(Node, f"__r{name}__", reflected(name))
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Node, f"__{name}__", forward(name))
    for name in ("neg", "pos", "abs"):
        setattr(Node, f"__{name}__", lambda self, name=name: _apply(name, self))


_operators()


class _Namespace:
    """The recording ``xp``: ``xp.name`` is a placeholder, called or used as a constant."""

    def __getattr__(self, name: str) -> Node:
        if name.startswith("__"):
            raise AttributeError(name)
        return Node(f"xp.{name}")


def placeholders(fields: dict[str, float]) -> dict[str, Node]:
    """A placeholder per numeric field, named by the field and the sign of its value."""
    return {k: Node(f"k_{k}{'+' if v > 0 else '-' if v < 0 else '0'}") for k, v in fields.items()}


def record(value: Any, proxy: Any) -> str | None:
    """The hash of the operations of ``value(proxy, x, p, m, xp)``, ``proxy`` a copy of the
    model whose fields are :func:`placeholders`, or None where the call does something the
    recorder does not follow (module docstring)."""
    try:
        text = _text(value(proxy, Node("x"), Node("p"), Node("m"), _Namespace()))
    except Exception:  # noqa: BLE001 - any failure of the user's code: SymPy decides
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:24]
