"""The one pipeline (mfgwork.pipeline): every kind runs check → place → plan memory → start →
iterate → Results → certify, in that order; memory is refused before any set-up; a kind is a
frozen dataclass whose fields are its options, reached by ``mw.solve`` through one table
entry."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.pipeline import Discretization, Where, run, solver_of

solve_module = importlib.import_module("mfgwork.solve")


class Toy:
    """A problem of a kind of its own: the fixed point of z = cos(z) (no MFG at all)."""


@dataclass(frozen=True, eq=False)
class Cosine(Discretization):
    """z = cos(z) by fixed-point iteration, to ``tol``; ``calls`` records the stages."""

    problem: Toy
    tol: float = 1e-10
    bytes_needed: int = 8
    max_memory: Any = None
    calls: list | None = None

    def _called(self, stage: str) -> None:
        self.calls.append(stage)

    def checked(self) -> Cosine:
        self._called("checked")
        if not 0 < self.tol < 1:
            raise mw.ParameterError(f"tol={self.tol!r} is invalid: must be in (0, 1)")
        return self

    def place(self) -> Where:
        self._called("place")
        return Where(get_backend("numpy"), {"placement": "here"})

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        self._called("memory")
        return {"bytes_needed": self.bytes_needed}, "a cosine"

    def start(self, where: Where, started: float) -> float:
        self._called("start")
        return 1.0

    def iterate(self, z: float) -> tuple[float, int]:
        self._called("iterate")
        for k in range(1, 1000):
            z, before = float(np.cos(z)), z
            if abs(z - before) <= self.tol:
                return z, k
        raise AssertionError("no fixed point")

    def results(self, outcome: tuple[float, int]) -> list[Any]:
        self._called("results")
        return [outcome]

    def certify(self, outcome: tuple[float, int], results: list[Any]) -> list[Any]:
        self._called("certify")
        z = results[0][0]
        assert abs(np.cos(z) - z) <= 2 * self.tol   # one more map: the certificate
        return results


def test_every_stage_runs_once_in_the_pipelines_order():
    calls: list[str] = []
    (z, iterations), = run(Cosine(Toy(), calls=calls))
    assert calls == ["checked", "place", "memory", "start", "iterate", "results", "certify"]
    assert abs(z - 0.7390851332151607) < 1e-9 and iterations > 10


def test_memory_that_does_not_fit_is_refused_before_the_set_up():
    calls: list[str] = []
    with pytest.raises(mw.ParameterError, match=r"bytes_needed too large: a cosine needs"):
        run(Cosine(Toy(), bytes_needed=10**6, max_memory=1000, calls=calls))
    assert calls == ["checked", "place", "memory"]
    with pytest.raises(mw.ParameterError, match=r"tol=2 is invalid"):
        run(Cosine(Toy(), tol=2, calls=calls))


def test_a_kind_checked_into_another_runs_the_others_stages():
    """``checked`` may hand the solve to another discretization (as stationary=True hands a
    1-D problem to its long run): the pipeline runs that one's stages."""
    calls: list[str] = []

    @dataclass(frozen=True, eq=False)
    class Loose(Cosine):
        def checked(self) -> Cosine:
            calls.append("loose")
            return Cosine(self.problem, tol=1e-4, calls=calls).checked()

    (z, _), = run(Loose(Toy(), calls=calls))
    assert calls[:2] == ["loose", "checked"] and abs(np.cos(z) - z) < 1e-3


def test_a_new_kind_is_one_table_entry_with_its_fields_as_options(monkeypatch):
    solver = solver_of(Cosine, "solve_cosine")
    assert solver.__name__ == "solve_cosine"
    assert list(inspect.signature(solver).parameters) == [
        "problem", "tol", "bytes_needed", "max_memory", "calls"]
    monkeypatch.setitem(solve_module.SOLVERS, Toy, solver)
    z, _ = mw.solve(Toy(), tol=1e-6, calls=[])
    assert abs(np.cos(z) - z) < 1e-5
    with pytest.raises(mw.ParameterError, match=r"nx=41 is invalid for a Toy problem: its "
                       r"solver solve_cosine takes tol, bytes_needed, max_memory, calls"):
        mw.solve(Toy(), nx=41)


def test_the_kinds_of_the_front_door_are_discretizations_with_their_options_as_fields():
    """The 1-D and two-state entries of mw.solve's tables run the pipeline: their functions
    are the discretizations' own (signature = fields), and the same solve through the
    function and through run() gives the same arrays."""
    for solver in (mw.solve_continuous, mw.solve_batch, mw.solve_two_state):
        kind = solver.__wrapped__
        assert issubclass(kind, Discretization)
        assert inspect.signature(solver).parameters == inspect.signature(kind).parameters
    small = {"nx": 41, "nt": 40, "progress": False}
    res = mw.solve(mw.SantaFeBar(), **small)
    again, = run(mw.solve_continuous.__wrapped__(mw.SantaFeBar(), **small))
    np.testing.assert_array_equal(res.M, again.M)
    kind = mw.solve_two_state.__wrapped__
    assert replace(kind(mw.TwoStateElFarol()), nt=50).checked().nt == 50


def test_register_kind_adds_a_kind_to_the_front_door_and_refuses_what_is_none(monkeypatch):
    monkeypatch.setattr(solve_module, "SOLVERS", dict(solve_module.SOLVERS))
    monkeypatch.setattr(solve_module, "BATCH_SOLVERS", dict(solve_module.BATCH_SOLVERS))
    solver = mw.register_kind(Toy, Cosine)
    assert solver.__name__ == "solve_cosine" and solve_module.SOLVERS[Toy] is solver
    z, _ = mw.solve(Toy(), calls=[])
    assert abs(np.cos(z) - z) < 1e-9

    @dataclass(frozen=True, eq=False)
    class Cosines(Cosine):
        batched = True

        def results(self, outcome):
            return [outcome] * len(self.problem)

    mw.register_kind(Toy, Cosines, name="solve_cosines")
    assert len(mw.solve([Toy(), Toy()], calls=[])) == 2
    with pytest.raises(mw.ParameterError, match=r"kind=.* is invalid: must be a dataclass "
                       r"subclass of mfgwork.Discretization"):
        mw.register_kind(Toy, lambda problem: None)
    with pytest.raises(mw.ParameterError, match=r"problem_type=.* is invalid: must be a class"):
        mw.register_kind(Toy(), Cosine)


def test_a_particle_solve_declares_its_particles_to_the_memory_plan(monkeypatch):
    """method='particles': the plan holds the particles besides the grid's arrays, refused
    before the set-up (no solver built), blaming the particles where they take the most."""
    fdm1d = importlib.import_module("mfgwork.fdm1d")

    def never(*args, **kwargs):
        raise AssertionError("set-up before the memory check")

    monkeypatch.setattr(fdm1d, "solvers", never)
    with pytest.raises(mw.ParameterError, match=r"^n_particles too large: a particle solve "
                       r"with n_particles=10000000"):
        mw.solve(mw.SantaFeBar(), method="particles", n_particles=10**7, nx=41, nt=40,
                 max_memory="100 MB")
    kind = fdm1d.FDM1D(mw.SantaFeBar(), method="particles", n_particles=1000, nx=41, nt=40)
    parts, _ = kind.memory(Where(get_backend("numpy")))
    alone, _ = kind.checked().memory(Where(get_backend("numpy")))
    grid_only, _ = fdm1d.FDM1D(mw.SantaFeBar(), nx=41, nt=40).memory(Where(get_backend("numpy")))
    assert parts == alone and parts["nx, nt"] > grid_only["nx, nt"] and parts["n_particles"] > 0
