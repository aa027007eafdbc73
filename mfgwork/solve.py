"""The front door: ``mw.solve(problem_or_list, **options)`` looks up the kind of the problem in
:data:`SOLVERS` (a list's in :data:`BATCH_SOLVERS`), checks the options against that kind's
and runs it (each kind a :class:`~mfgwork.pipeline.Discretization` through the one pipeline,
:func:`mfgwork.pipeline.run`). :func:`register_kind` adds a kind of one's own."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .core.errors import ParameterError
from .fdm1d import solve_batch, solve_continuous
from .finite_state import solve_two_state
from .pipeline import Discretization, solver_of
from .placement import device_backend
from .problems import TwoStateElFarol
from .problems.base import MFGProblem
from .results import Result


def solve(problem: Any, **options: Any) -> Any:
    """Solve ``problem`` of any kind and return its :class:`~mfgwork.Result`; a list (or
    tuple) of problems of one kind is a batch, and returns their results in order.

    The solver is looked up by the problem's type in :data:`SOLVERS` (its most specific
    class there: a subclass of MFGProblem with an entry of its own gets that one), a
    batch's in :data:`BATCH_SOLVERS` by its first problem's type, and ``options`` go to it:

    - :class:`~mfgwork.MFGProblem` (Santa Fe, generic, verification problems):
      :func:`solve_continuous` (``nx``, ``nt``, ``method``, ``backend``, ``device``,
      ``dtype``, ``tol``, ``max_iter``, ``iteration``, ``n_particles``, ``seed``, ...);
      a list: :func:`solve_batch`;
    - :class:`~mfgwork.MFGProblem2D`: :func:`mfgwork.solve_2d`; a list:
      :func:`mfgwork.solve_2d_batch`;
    - :class:`~mfgwork.Populations`: :func:`mfgwork.solve_populations`;
    - :class:`~mfgwork.TwoStateElFarol`: :func:`mfgwork.solve_two_state` (``nt``, ``tol``,
      ``max_iter``, ``iteration``, ``warmup``; NumPy float64 on the CPU).

    ``device="cuda"`` or ``"mps"`` (or ``"cuda:1"``) without ``backend`` runs on PyTorch, the
    library of the accelerators here. An option the problem's solver does not take, a problem
    of no kind in the table, or a batch of several kinds is a
    :class:`~mfgwork.ParameterError` naming it, before any work; so is, with
    ``stationary=True`` (the long run), an option of a 1-D finite horizon that the long run
    does not take (:func:`mfgwork.long_run.check_long_run`).
    """
    options = _device_implies_torch(options)
    if isinstance(problem, list | tuple):
        solver = _batch_solver(problem)
        _check_options(problem[0], solver, options)
        return solver(list(problem), **options)
    solver = solver_for(problem, SOLVERS)
    _check_options(problem, solver, options)
    return solver(problem, **options)


@functools.lru_cache(maxsize=64)
def _options_of(solver: Callable[..., Any]) -> tuple[str, ...]:
    """The options a solver takes: its parameters after the first (the problem)."""
    return tuple(inspect.signature(solver).parameters)[1:]


def _device_implies_torch(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``backend="torch"`` where a device of PyTorch's alone is asked for
    and no backend is (:func:`mfgwork.placement.device_backend`; NumPy, the other answer, is
    the solvers' default already)."""
    if "backend" not in options and device_backend(options.get("device")) == "torch":
        return options | {"backend": "torch"}
    return options


def _batch_solver(problems: Sequence[Any]) -> Callable[..., list[Any]]:
    """The batch solver of ``problems`` (:data:`BATCH_SOLVERS`), all of one kind."""
    if not problems:
        raise ParameterError(f"problem={problems!r} is invalid: a batch must hold at least one "
                             "problem")
    for i, p in enumerate(problems):
        try:
            solver_for(p, SOLVERS)
        except ParameterError as exc:   # not a problem at all: said with its place
            raise ParameterError(f"problem[{i}]{str(exc)[len('problem'):]}") from None
    kinds = [kind_in(p, BATCH_SOLVERS) for p in problems]
    if kinds[0] is None:
        raise ParameterError(f"problem[0]={problems[0]!r:.80} is invalid in a list: a "
                             f"{type(problems[0]).__name__} has no batched path; solve each "
                             "with mw.solve, or batch "
                             + " or ".join(f"mfgwork.{k.__name__}" for k in BATCH_SOLVERS))
    for i, kind in enumerate(kinds):
        if kind is not kinds[0]:
            raise ParameterError(f"problem[{i}]={problems[i]!r:.80} is invalid in this batch: "
                                 f"a batch is of one kind, and problem[0] is an "
                                 f"mfgwork.{kinds[0].__name__}")
    return BATCH_SOLVERS[kinds[0]]


def kind_in(problem: Any, table: dict[type, Any]) -> type | None:
    """The most specific type of ``problem`` that ``table`` holds (the first class of its
    method resolution order there), or None."""
    return next((kind for kind in type(problem).__mro__ if kind in table), None)


def solver_for(problem: Any, table: dict[type, Callable[..., Any]]) -> Callable[..., Any]:
    """The entry of ``table`` for ``problem``: that of its most specific type
    (:func:`kind_in`)."""
    kind = kind_in(problem, table)
    if kind is not None:
        return table[kind]
    kinds = [f"an mfgwork.{k.__name__}" for k in table]
    one_of = ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else kinds[0]
    raise ParameterError(f"problem={problem!r:.80} is invalid: must be {one_of} "
                         "(e.g. mw.SantaFeBar() or mw.MFGProblem(...))")


def _check_options(problem: Any, solver: Callable[..., Any], options: dict[str, Any]) -> None:
    """Refuse options that the solver of ``problem``'s kind does not take."""
    accepted = _options_of(solver)
    unknown = [n for n in options if n not in accepted]
    if unknown:
        raise ParameterError(f"{unknown[0]}={options[unknown[0]]!r:.60} is invalid for a "
                             f"{type(problem).__name__} problem: its solver "
                             f"{solver.__name__} takes {', '.join(accepted)}")


#: The solver of each problem kind (:func:`solve` takes the entry of the problem's most
#: specific class): a function ``(problem, **options) -> Result`` with its options as
#: keywords with defaults, a discretization's by :func:`~mfgwork.pipeline.solver_of`
#: (:func:`register_kind`).
SOLVERS: dict[type, Callable[..., Result]] = {
    MFGProblem: solve_continuous, TwoStateElFarol: solve_two_state}
#: The batch solver of each problem kind that has one (:func:`solve` of a list).
BATCH_SOLVERS: dict[type, Callable[..., list[Any]]] = {MFGProblem: solve_batch}


def register_kind(problem_type: type, kind: type[Discretization], name: str | None = None
                  ) -> Callable[..., Any]:
    """Make ``mw.solve`` solve the problems of ``problem_type`` (and of its subclasses without
    an entry of their own) by the discretization ``kind``: a list of them where
    ``kind.batched``. Returns the solver (:func:`~mfgwork.pipeline.solver_of`, named
    ``name``, by default ``solve_`` and the kind's name in lower case) whose options are
    ``kind``'s fields. Refused for a ``kind`` that is no
    :class:`~mfgwork.pipeline.Discretization` dataclass, or a ``problem_type`` that is no
    class."""
    if not isinstance(problem_type, type):
        raise ParameterError(f"problem_type={problem_type!r:.80} is invalid: must be a class")
    if not (isinstance(kind, type) and issubclass(kind, Discretization)
            and dataclasses.is_dataclass(kind)):
        raise ParameterError(f"kind={kind!r:.80} is invalid: must be a dataclass subclass of "
                             "mfgwork.Discretization")
    solver = solver_of(kind, name or f"solve_{kind.__name__.lower()}")
    (BATCH_SOLVERS if kind.batched else SOLVERS)[problem_type] = solver
    return solver
