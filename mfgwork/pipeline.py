"""The one pipeline behind ``mw.solve``: check → place → plan memory → start → iterate →
certify → Results.

Every kind of problem is solved by a :class:`Discretization`: a frozen dataclass whose first
field is the problem (or, for a batch, the list of problems) and whose other fields are the
options of ``mw.solve`` for that kind, with their defaults (the guide's options table is
made of these fields). It owns its grid, the memory it needs and its kernels, and implements
the stages that :func:`run` calls in this order, the same for every kind:

1. :meth:`~Discretization.checked`: the options and the problem checked (a
   :class:`~mfgwork.ParameterError` naming the option, its value and what is allowed) and
   normalised (e.g. ``tol`` as a float), before any work;
2. :meth:`~Discretization.place`: where it runs (:func:`mfgwork.placement.resolve`, the one
   placement rule) as a :class:`Where`, the backend and the placement's record;
3. :meth:`~Discretization.memory`: the bytes it needs, by the options they grow with,
   refused by :func:`mfgwork.core.memory.check_parts` against ``max_memory`` before any
   allocation on the grid;
4. :meth:`~Discretization.start`: the set-up on the backend (grid, kernels, first iterate)
   as the kind's state;
5. :meth:`~Discretization.iterate`: the equilibrium from that state, as the kind's outcome;
6. :meth:`~Discretization.results`: one frozen :class:`~mfgwork.Result` per problem;
7. :meth:`~Discretization.certify`: the Results with their certificate checked again where
   the iteration's own cannot stand alone (e.g. float32 iterations re-certified by one best
   response in float64).

A kind that is solved through another (a problem's long run, a batch solved one problem
after the other) returns that other discretization from ``checked`` or runs it inside its
stages: every solve goes through :func:`run`.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .core import memory
from .core.backend import Backend
from .results import Result


@dataclass(frozen=True)
class Where:
    """Where a solve runs: its ``backend`` (library, device and dtype) and what the placement
    records in the results' params (``{"placement": ...}`` where it chose, else empty)."""

    backend: Backend
    record: Mapping[str, Any] = field(default_factory=dict)


class Discretization(ABC):
    """How one kind of problem is solved (module docstring); subclasses are frozen
    dataclasses of the problem and the options. ``batched``: the first field is a list of
    problems solved together (``mw.solve`` of a list)."""

    batched: ClassVar[bool] = False
    #: The option that bounds the memory of a solve (None where the kind takes none)
    max_memory: Any = None

    @abstractmethod
    def checked(self) -> Discretization:
        """This discretization with its options checked and normalised (no work done)."""

    @abstractmethod
    def place(self) -> Where:
        """Where it runs."""

    @abstractmethod
    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        """(bytes by the options they grow with, what is solved: "a two-state solve with
        nt=400") for :func:`mfgwork.core.memory.check_parts`."""

    @abstractmethod
    def start(self, where: Where, started: float) -> Any:
        """The state the iteration starts from (the set-up done on ``where``); ``started``:
        the :func:`time.perf_counter` at which the solve began, for its timings."""

    @abstractmethod
    def iterate(self, state: Any) -> Any:
        """The equilibrium from ``state``: the iteration's outcome."""

    @abstractmethod
    def results(self, outcome: Any) -> list[Result]:
        """One :class:`~mfgwork.Result` per problem, in order."""

    def certify(self, outcome: Any, results: list[Result]) -> list[Result]:
        """``results`` (of ``outcome``) with their certificates checked again where needed
        (default: the iteration's own stand)."""
        return results


def run(discretization: Discretization) -> list[Result]:
    """The stages of ``discretization`` in order (module docstring): its Results."""
    started = time.perf_counter()
    checked = discretization.checked()
    where = checked.place()
    parts, what = checked.memory(where)
    memory.check_parts(parts, where.backend, what=what, max_memory=checked.max_memory)
    outcome = checked.iterate(checked.start(where, started))
    return checked.certify(outcome, checked.results(outcome))


def solver_of(kind: type[Discretization], name: str) -> Callable[..., Any]:
    """``kind`` as the function ``name(problem, **options)``, with the signature and
    docstring of its fields, that returns the pipeline's Result (its list of Results for a
    batched kind): the entry of the front door's tables, and the kind's own name in
    ``mfgwork`` (``mw.solve_two_state``, ...)."""
    def solver(*args: Any, **options: Any) -> Any:   # any argument by position or name
        solved = run(kind(*args, **options))
        return solved if kind.batched else solved[0]

    solver.__name__ = solver.__qualname__ = name
    solver.__module__ = kind.__module__
    solver.__signature__ = inspect.signature(kind).replace(   # type: ignore[attr-defined]
        return_annotation="list[Result]" if kind.batched else "Result")
    solver.__doc__ = kind.__doc__
    solver.__wrapped__ = kind   # type: ignore[attr-defined]
    return solver
