"""A 2-D batch narrows its evaluations to the problems still iterating (the settled ones keep
their arrays): the same certified equilibria at the same iterations, at less cost."""

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics import iteration
from mfgwork.numerics.fdm2d import equilibrium as eq

#: congestion from none to strong: the rooms settle at different iterations
ROOMS = [mw.Room(congestion=c) for c in (0.0, 0.5, 2.0, 4.0)]
GRID = {"nx": 21, "nt": 12, "tol": 1e-7, "progress": False, "backend": "torch"}


@pytest.fixture
def narrowings(monkeypatch):
    """The rows of each narrowing the batch makes."""
    calls = []
    narrow = eq._Narrowing.__call__

    def recorded(self, rows):
        calls.append(list(rows))
        return narrow(self, rows)

    monkeypatch.setattr(eq._Narrowing, "__call__", recorded)
    return calls


def test_a_narrowed_batch_reaches_the_equilibria_of_the_whole_batch(monkeypatch, narrowings):
    narrowed = mw.solve_2d_batch(ROOMS, **GRID)
    monkeypatch.setattr(iteration, "NARROW", 0.0)   # never narrowed
    whole = mw.solve_2d_batch(ROOMS, **GRID)
    its = [r.iterations for r in whole]
    assert len(set(its)) > 1
    # each narrowing keeps fewer rooms ...
    sizes = [len(ROOMS)] + [len(rows) for rows in narrowings]
    assert len(sizes) > 1 and all(b < a for a, b in zip(sizes, sizes[1:], strict=False))
    # ... the rooms not yet settled: every room left out settled before every room kept
    for rows in narrowings:
        out = [t for i, t in enumerate(its) if i not in rows]
        assert max(out) < min(its[i] for i in rows)
    for a, b in zip(narrowed, whole, strict=True):
        assert a.converged and b.converged and a.iterations == b.iterations
        assert a.check() <= 1e-7 and a.mass_error <= 1e-13
        assert np.max(np.abs(a.M - b.M)) <= 1e-5 * np.max(b.M)
        assert np.max(np.abs(a.U - b.U)) <= 1e-5 * np.max(np.abs(b.U))
    # the solver counts add the narrowed setups' to the batch's
    ratio = narrowed[0].extra["krylov_iterations"] / whole[0].extra["krylov_iterations"]
    assert 0.9 < ratio < 1.1

