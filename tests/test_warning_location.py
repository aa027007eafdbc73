"""A warning raised deep inside mfgwork is attributed to the line of the caller's code that
called it (what a notebook shows under the cell), not to a line of the package."""

from __future__ import annotations

import warnings

import mfgwork as mw
from mfgwork.core.errors import PACKAGE


def _caught(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def test_warnings_from_deep_inside_point_at_the_calling_line():
    cases = {
        "ConvergenceWarning of the Newton iteration":
            lambda: mw.solve(mw.SantaFeBar(), nx=21, nt=20, max_iter=2, progress=False),
        "float32 floor of tol, through the front door and a batch":
            lambda: mw.solve([mw.SantaFeBar()] * 2, nx=21, nt=20, backend="torch",
                             dtype="float32", tol=1e-9, progress=False),
        "coarse grid (ResolutionWarning)":
            lambda: mw.solve(mw.SantaFeBar(), nx=9, nt=10, progress=False),
    }
    for what, call in cases.items():
        caught = _caught(call)
        assert caught, what
        assert {w.filename for w in caught} == {__file__}, (what, [(w.filename, w.lineno)
                                                                   for w in caught])
        assert not any(w.filename.startswith(PACKAGE) for w in caught)


def test_a_scan_says_the_float32_floor_of_tol_once_at_the_scan_line():
    """The scan warns once that tol is below float32's floor, before any block (its blocks
    do not repeat it), attributed to the line that called the scan."""
    caught = _caught(lambda: mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.6, 0.8]}, nx=21,
                                     nt=20, tol=1e-6, dtype="float32", device="cpu",
                                     chunk_size=1, progress=False))
    floor = [w for w in caught if "is below what float32 resolves" in str(w.message)]
    assert len(floor) == 1 and floor[0].filename == __file__
