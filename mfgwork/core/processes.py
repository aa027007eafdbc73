"""Whether worker processes started by spawn would run the caller's script again.

A process started by ``multiprocessing``'s spawn or forkserver (a Dask ``LocalCluster``'s
workers among them) imports the parent's ``__main__`` anew: the top level of a script runs
again in every worker, up to the call that started them, unless that call sits under
``if __name__ == "__main__":``. mfgwork's own pools need no guard (threads, and worker
interpreters of their own); a feature that starts such processes checks here first and
refuses with a clear message rather than running the script again.
"""

from __future__ import annotations

import ast
import sys
from types import FrameType

from .errors import ParameterError


def unguarded_script_line() -> int | None:
    """The line of the running script's top level (``__main__`` with a file) that leads to
    this call, when that line is outside an ``if __name__ == "__main__":`` block; None when it
    is inside one, or when no script's top level is running (a notebook, an interactive
    session, another thread)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = _top_level_frame(main)
    if path is None or frame is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for statement in tree.body:
        if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
            return None if _is_main_guard(statement) else line
    return None


def check_spawn_safe(feature: str) -> None:
    """Refuse ``feature`` (which starts worker processes by spawn) from a script's top level
    outside ``if __name__ == "__main__":``, before any work."""
    line = unguarded_script_line()
    if line is not None:
        script = getattr(sys.modules["__main__"], "__file__", "the script")
        raise ParameterError(
            f"{feature} starts worker processes that would run {script} again from its top "
            f"(line {line} is outside if __name__ == \"__main__\":): put the script's work "
            "under that guard, or use mfgwork's local workers (the default), which need none")


def _top_level_frame(main: object) -> FrameType | None:
    frame = sys._getframe(1)
    namespace = getattr(main, "__dict__", None)
    while frame is not None:
        if frame.f_globals is namespace and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def _is_main_guard(statement: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either order of the comparison)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, *test.comparators]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    values = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]
