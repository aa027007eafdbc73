"""The folders are layers: a module imports only from its own layer or the layers below it;
the imports form no circle, and no module imports another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mfgwork"
#: Bottom to top. Top-level modules not named here are the front door (solve, results, …).
LAYERS = ["core", "problems", "numerics", "front door", "analysis", "workflows", "apps"]
#: Folders of package data (no code).
DATA = {"data"}


def layer(module: str) -> str | None:
    """The layer of a dotted module below ``mfgwork`` (None: the package's own
    ``__init__``/``__main__``, which may import anything)."""
    head = module.split(".")[0]
    if head in ("", "__init__", "__main__"):
        return None
    return head if head in LAYERS else "front door"


def imported(path: Path, text: str | None = None) -> list[tuple[str, str | None, str | None]]:
    """What ``path`` (its source ``text``, read if None) imports from below ``mfgwork``,
    module-level and function-level alike: ``(module, name, bound)`` for ``from module import
    name [as bound]`` (relative or absolute), ``(module, None, bound)`` for ``import
    mfgwork.module [as bound]`` (``bound`` None without ``as``); the package is ``""``."""
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = here[:-1]
    found: list[tuple[str, str | None, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module == "mfgwork" or (node.module or "").startswith("mfgwork."):
                source = node.module.removeprefix("mfgwork").removeprefix(".")
            else:
                continue
            found += [(source, a.name, a.asname or a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix("mfgwork").removeprefix("."), None, a.asname)
                      for a in node.names if a.name == "mfgwork" or a.name.startswith("mfgwork.")]
    return found


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` (below ``mfgwork``; ``""``: the package) names a module or package."""
    folder = PACKAGE.joinpath(*dotted.split(".")) if dotted else PACKAGE
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def submodule(source: str, name: str | None) -> str | None:
    """The module ``from source import name`` imports (``import source``: ``source``), or None
    where ``name`` is not a module."""
    if name is None:
        return source
    dotted = f"{source}.{name}".removeprefix(".")
    return dotted if is_module(dotted) else None


def imports(path: Path) -> list[str]:
    """Modules below ``mfgwork`` that ``path`` imports (relative and absolute imports):
    ``from .x import y`` imports the module ``x.y`` where that is one, else ``x``."""
    return [submodule(source, name) or source for source, name, _ in imported(path)]


def module_layer(path: Path) -> str | None:
    return layer(".".join(path.relative_to(PACKAGE).with_suffix("").parts))


#: Every module with a layer (the package's ``__init__``/``__main__`` may import anything).
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if module_layer(p) is not None)


def test_only_the_package_entry_points_have_no_layer():
    exempt = sorted(p.name for p in PACKAGE.rglob("*.py") if module_layer(p) is None)
    assert exempt == ["__init__.py", "__main__.py"]
    assert len(MODULES) > 20 and PACKAGE / "core" / "__init__.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_its_layer_or_below(path):
    own = module_layer(path)
    upward = [m for m in imports(path)
              if (other := layer(m)) is not None and LAYERS.index(other) > LAYERS.index(own)]
    assert upward == [], f"{path.relative_to(PACKAGE)} ({own}) imports from above: {upward}"


def test_every_folder_is_a_known_layer():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders <= set(LAYERS) | DATA, folders - set(LAYERS) - DATA


def test_relative_imports_resolve_to_their_layer():
    assert "core.errors" in imports(PACKAGE / "core" / "backend.py")
    assert "core.backend" in imports(PACKAGE / "numerics" / "iteration.py")
    assert layer("workflows.runs") == "workflows" and layer("solve") == "front door"


def dotted_name(path: Path) -> str:
    """The module name of ``path`` below ``mfgwork`` (a package: its folder; the package: "")."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every module of the package (its ``__init__`` included) and the modules it imports."""
    return {dotted_name(p): set(imports(p)) - {dotted_name(p)}
            for p in sorted(PACKAGE.rglob("*.py"))}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A circle of imports ``[a, b, ..., a]`` in ``graph`` (depth-first), or ``[]``."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return []
        for target in sorted(graph.get(node, ())):
            if cycle := visit(target, [*path, node]):
                return cycle
        done.add(node)
        return []

    for start in sorted(graph):
        if cycle := visit(start, []):
            return cycle
    return []


def test_imports_form_no_circle():
    graph = import_graph()
    assert {"", "numerics.fdm.kernels", "numerics.fdm.tridiag"} <= graph.keys()
    assert "numerics.fdm.tridiag" in graph["numerics.fdm.kernels"]
    cycle = find_cycle(graph)
    assert cycle == [], "import circle: " + " -> ".join(m or "mfgwork" for m in cycle)


def test_the_circle_finder_finds_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def is_private(name: str) -> bool:
    """A name with a leading underscore (dunders such as ``__doc__`` are not private)."""
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path, text: str | None = None) -> list[str]:
    """``module._name`` for each private name that ``path`` (source ``text``) takes from another
    module of the package: ``from module import _name``, or ``alias._name`` where ``alias`` is
    a module it imported (``from . import module as alias``, ``import mfgwork.module as
    alias``)."""
    found = imported(path, text)
    taken = [f"{source}.{name}".removeprefix(".") for source, name, _ in found
             if name is not None and is_private(name)]
    modules = {bound: submodule(source, name) for source, name, bound in found
               if bound is not None and submodule(source, name) is not None}
    tree = ast.parse(path.read_text() if text is None else text)
    return taken + [f"{modules[node.value.id]}.{node.attr}".removeprefix(".")
                    for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules and is_private(node.attr)]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_crosses_modules(path):
    crossing = private_imports(path)
    assert crossing == [], f"{path.relative_to(PACKAGE)} uses private names of others: {crossing}"


def test_private_names_are_found_imported_and_through_a_module():
    source = ("from .iteration import _hidden, fixed_point\n"
              "from . import iteration as it\n"
              "from .fdm import kernels\n"
              "import mfgwork.solve as front\n"
              "def f():\n"
              "    from ..core.storage import _inner\n"
              "    return it._helper, kernels._probe(), front._step, it.__doc__, fixed_point._x\n")
    assert sorted(private_imports(PACKAGE / "numerics" / "example.py", source)) == [
        "core.storage._inner", "numerics.fdm.kernels._probe", "numerics.iteration._helper",
        "numerics.iteration._hidden", "solve._step"]


@pytest.mark.parametrize("name", ["results.py", "results2d.py"])
def test_the_result_family_imports_no_solver(name):
    """A result reaches its certificate through the table the solvers fill
    (``results.CERTIFICATES``): its modules import only the core and the problems (what a
    result is made of), never a solver."""
    found = imports(PACKAGE / name)
    assert found and all(m.split(".")[0] in ("core", "problems", "results") for m in found), \
        found


#: The longest a function of ``mfgwork/numerics`` may be (lines, docstring included).
LONGEST = 80


@pytest.mark.parametrize("path", sorted((PACKAGE / "numerics").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_numerics_function_is_longer_than_80_lines(path):
    where = str(path.relative_to(PACKAGE / "numerics"))
    long = {(where, node.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > LONGEST}
    assert long == set(), f"functions over {LONGEST} lines: {sorted(long)}"
