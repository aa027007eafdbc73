"""A worker process of a local sweep (:func:`main`, started by the sweep with its own pid).

It reads tasks from stdin (pickled dicts, one after another), runs each by
:func:`~mfgwork.workflows.sweeps.execute_run` and writes back one pickled answer per task:
``{"result": ...}`` or ``{"error": (type name, message)}``. Whatever it or its kernels print
goes to stderr, so stdout carries the answers alone. It ends at the end of its input, and as
soon as the sweep process (its first argument, a pid) dies, with the kernels it started.

A fresh interpreter rather than a ``multiprocessing`` child: a child started by spawn or
forkserver imports the caller's ``__main__`` again, which re-ran a script that calls
``mw.sweep`` without ``if __name__ == "__main__":`` in every worker.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import time


def watch_parent(parent_pid: int) -> None:
    """When the process ``parent_pid`` dies (even by SIGKILL), kill this process's children
    (its kernels) and exit, so no run of a dead sweep keeps writing."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        with contextlib.suppress(Exception):
            import psutil

            for child in psutil.Process().children(recursive=True):
                child.kill()
        os._exit(1)

    threading.Thread(target=watch, name="mfgwork-watch-parent", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Serve tasks until stdin ends (see the module docstring)."""
    parent_pid = int((argv if argv is not None else sys.argv[1:])[0])
    watch_parent(parent_pid)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())   # prints (kernels' too) go to stderr
    tasks = sys.stdin.buffer
    from .sweeps import execute_run

    while True:
        try:
            task = pickle.load(tasks)
        except EOFError:
            return 0
        try:
            answer = {"result": execute_run(task)}
        except Exception as exc:  # noqa: BLE001 - reported to the sweep as the run's error
            answer = {"error": (type(exc).__name__, str(exc))}
        pickle.dump(answer, answers)
        answers.flush()


if __name__ == "__main__":
    sys.exit(main())
