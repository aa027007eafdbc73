"""Every notebook reads as a page of the course: a title, Markdown math that MathJax can pair
up, and two or three exercises at the end."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
EXERCISE = re.compile(r"^\d+\. ", re.MULTILINE)


def markdown(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_has_a_title_and_ends_with_exercises(path):
    nb = nbformat.read(path, as_version=4)
    first, last = nb.cells[0], nb.cells[-1]
    assert first.cell_type == "markdown" and first.source.startswith("# "), \
        f"{path.name}: the first cell must be Markdown with the '# title' of the page"
    assert last.cell_type == "markdown" and last.source.startswith("## Exercises"), \
        f"{path.name}: the last cell must be a '## Exercises' Markdown cell"
    count = len(EXERCISE.findall(last.source))
    assert 2 <= count <= 3, f"{path.name}: {count} numbered exercises, expected two or three"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_markdown_math_delimiters_pair_up(path):
    for source in markdown(path):
        text = CODE_SPAN.sub("", source)
        display = text.count("$$")
        assert display % 2 == 0, f"{path.name}: unpaired $$ in {source[:80]!r}"
        inline = text.replace("$$", "").count("$")
        assert inline % 2 == 0, f"{path.name}: unpaired $ in {source[:80]!r}"


# --- the prose agrees with the code --------------------------------------------------------

#: phrasings of a stopping rule the library does not have (it stops on the certified residual)
OLD_RULES = [r"relative changes? of \$?U\$? and \$?M\$? (?:are |is )?below",
             r"until \$?U\$? and \$?M\$? stop changing", r"cannot go much below"]
NUMBER = r"\$?(\d+(?:\.\d+)?)\s*(?:\\times\s*10\^\{(-?\d+)\}|[eE](-?\d+))\$?"
#: what the text says the float32 floor of tol is: "3e-4 in float32", "raised to 3e-4"
FLOAT32_FLOOR = [re.compile(NUMBER + r"\s+in float32"),
                 re.compile(r"rais(?:e|es|ed) (?:[\w`]+ ){0,6}?to " + NUMBER)]
SPAN = re.compile(r"`([^`\n]+)`")
ROOTS = ("mw", "mfgwork", "plots", "studies", "runs", "game_plots", "sweep_plots")
ASSIGNED = re.compile(r"^\s*(\w+)\s*=(?!=)")


def _text(path: Path) -> str:
    """All cells (Markdown and code with its comments), whitespace collapsed."""
    nb = nbformat.read(path, as_version=4)
    return " ".join(" ".join(c.source.replace("#", " ").split()) for c in nb.cells)


def _float32_floor() -> float:
    import warnings

    import mfgwork as mw
    from mfgwork.fdm1d import reachable_tol

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reachable_tol(1e-300, mw.get_backend("numpy", "cpu", "float32"))


def _value(match: re.Match) -> float:
    mantissa, power, exponent = match.groups()
    return float(mantissa) * 10.0 ** int(power if power is not None else exponent)


def _callable(dotted: str):
    import mfgwork as mw

    root, *names = dotted.split(".")
    obj = mw if root in ("mw", "mfgwork") else getattr(mw, root)
    for name in names:
        obj = getattr(obj, name)
    return obj


def _parameters(fn) -> set[str] | None:
    """The keyword names ``fn`` accepts (None: any, it takes ``**kwargs``)."""
    import inspect

    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _entry_parameters() -> set[str]:
    import mfgwork as mw

    names: set[str] = set()
    for fn in (mw.solve, mw.solve_continuous, mw.solve_batch, mw.scan, mw.sweep, mw.n_player,
               mw.n_player_study, mw.solve_two_state, mw.SantaFeBar, mw.TwoStateElFarol,
               mw.MFGProblem, mw.placement, mw.ParticleFP, mw.Anderson):
        names |= _parameters(fn) or set()
    return names


def _assigned_in_code(path: Path) -> set[str]:
    import ast

    nb = nbformat.read(path, as_version=4)
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines()
                           if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_no_stopping_rule_the_library_does_not_have(path):
    text = _text(path)
    for rule in OLD_RULES:
        found = re.search(rule, text)
        assert not found, f"{path.name} says {found.group(0)!r}, which the library does not " \
                          "do: it stops when the certified fixed-point residual is ≤ tol " \
                          "(a tol below the floor of the dtype raised to it)"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_quoted_float32_floor_is_the_library_s(path):
    text, floor = _text(path), _float32_floor()
    for pattern in FLOAT32_FLOOR:
        for match in pattern.finditer(text):
            sentence = text[max(0, match.start() - 300):match.end() + 100]
            if pattern is FLOAT32_FLOOR[1] and "float32" not in sentence:
                continue
            assert _value(match) == pytest.approx(floor), \
                f"{path.name} quotes {match.group(0)!r} as the float32 floor of tol: it is " \
                f"{floor:g}"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_calls_and_parameters_named_in_the_text_exist(path):
    """A Markdown code span that calls the package (`mw.solve(..., tol=...)`) uses keywords of
    that callable; one that sets a name (`method="particles"`, `nx = nt = 101`) names a
    parameter of an entry point of the package or a variable of the notebook."""
    import ast

    known = _entry_parameters() | _assigned_in_code(path)
    for source in markdown(path):
        for span in SPAN.findall(source):
            try:
                tree = ast.parse(span)
            except SyntaxError:
                continue
            calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and ast.unparse(node.func).split(".")[0] in ROOTS]
            for call in calls:
                dotted = ast.unparse(call.func)
                accepted = _parameters(_callable(dotted))
                unknown = [k.arg for k in call.keywords
                           if k.arg and accepted is not None and k.arg not in accepted]
                assert not unknown, f"{path.name}: `{span}` passes {unknown}, which " \
                                    f"{dotted} does not take"
            if calls or "(" in span or not ASSIGNED.match(span):
                continue
            names = re.findall(r"(\w+)\s*=(?!=)", span)
            unknown = [n for n in names if n not in known]
            assert not unknown, f"{path.name}: `{span}` names {unknown}: no such parameter"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The old stopping rule, a wrong float32 floor and an unknown keyword are all caught."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("Iterate until $U$ and $M$ stop changing; float32 "
                                      "tolerances are raised to 1e-6. Try "
                                      "`mw.solve(problem, tolerance=1e-3)` and `rtol=1e-3`."),
        nbformat.v4.new_code_cell("x = 1")])
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    for check in (test_no_stopping_rule_the_library_does_not_have,
                  test_quoted_float32_floor_is_the_library_s,
                  test_calls_and_parameters_named_in_the_text_exist):
        with pytest.raises(AssertionError):
            check(path)
