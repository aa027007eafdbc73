"""The guide's table of the options of ``mw.solve`` (docs/book/guide/options.md) is the
solvers' signatures: every solver of the front door's tables has a column, every option a row
with a meaning, and every cell the default of that solver (a dash where it takes none)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import mfgwork as mw
from mfgwork.solve import BATCH_SOLVERS, SOLVERS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "book" / "guide" / "options.md"


def table() -> tuple[list[str], dict[str, list[str]]]:
    """(the solver named in each column, {option: [meaning, cell per column]})."""
    lines = [line for line in PAGE.read_text(encoding="utf-8").splitlines()
             if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header, rows = cells[0], cells[2:]
    solvers = [re.search(r"`(\w+)`", h).group(1) for h in header[2:]]
    return solvers, {re.fullmatch(r"`(\w+)`", r[0]).group(1): r[1:] for r in rows}


def test_every_solver_of_the_front_door_has_a_column():
    solvers, _ = table()
    registered = {f.__name__ for f in [*SOLVERS.values(), *BATCH_SOLVERS.values()]}
    assert set(solvers) == registered and len(solvers) == len(registered)


def test_every_cell_is_the_default_of_its_solver():
    solvers, rows = table()
    taken = set()
    for column, name in enumerate(solvers):
        parameters = list(inspect.signature(getattr(mw, name)).parameters.values())[1:]
        taken |= {p.name for p in parameters}
        defaults = {p.name: p.default for p in parameters}
        for option, (meaning, *cells) in rows.items():
            assert meaning, f"{option} has no meaning"
            want = f"`{defaults[option]!r}`" if option in defaults else "–"
            assert cells[column] == want, (option, name, cells[column], want)
    assert set(rows) == taken   # no option missing, none that no solver takes
