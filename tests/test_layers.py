"""The folders are layers: a module imports only from its own layer or the layers below it."""

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


def imports(path: Path) -> list[str]:
    """Modules below ``mfgwork`` that ``path`` imports (relative and absolute imports)."""
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = here[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [] if node.module else [a.name for a in node.names]
                found += [".".join([*target, n]) for n in names] or [".".join(target)]
            elif node.module and node.module.startswith("mfgwork."):
                found.append(node.module.removeprefix("mfgwork."))
        elif isinstance(node, ast.Import):
            found += [a.name.removeprefix("mfgwork.") for a in node.names
                      if a.name.startswith("mfgwork.")]
    return found


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
