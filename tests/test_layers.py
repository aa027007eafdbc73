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


def imported(path: Path) -> list[tuple[str, str | None]]:
    """What ``path`` imports from below ``mfgwork``, module-level and function-level alike:
    ``(module, name)`` for ``from module import name`` (relative or absolute), ``(module,
    None)`` for ``import mfgwork.module``; the package itself is the module ``""``."""
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = here[:-1]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module == "mfgwork" or (node.module or "").startswith("mfgwork."):
                source = node.module.removeprefix("mfgwork").removeprefix(".")
            else:
                continue
            found += [(source, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name.removeprefix("mfgwork").removeprefix("."), None) for a in node.names
                      if a.name == "mfgwork" or a.name.startswith("mfgwork.")]
    return found


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` (below ``mfgwork``; ``""``: the package) names a module or package."""
    folder = PACKAGE.joinpath(*dotted.split(".")) if dotted else PACKAGE
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def imports(path: Path) -> list[str]:
    """Modules below ``mfgwork`` that ``path`` imports (relative and absolute imports):
    ``from .x import y`` imports the module ``x.y`` where that is one, else ``x``."""
    return [f"{source}.{name}".removeprefix(".") if name and is_module(
                f"{source}.{name}".removeprefix(".")) else source
            for source, name in imported(path)]


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
    assert cycle == [], "import circle: " + " -> ".join(cycle)


def test_the_circle_finder_finds_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
