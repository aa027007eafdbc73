"""The user guide's Python examples run as written: each page's blocks in order, in a fresh
process in a temporary folder, with every warning an error. A block that cannot run here is
marked in its fence, ```` ```python skip: REASON ````, and the reason is checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "book" / "guide"
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: the reasons a block may be skipped for: what the test machine lacks
SKIP_REASONS = ("needs a CUDA GPU", "needs Apple MPS", "needs papermill and a kernel")


def blocks(text: str) -> list[tuple[str | None, str]]:
    """(skip reason or None, code) of every Python block of a MyST page."""
    found = []
    for info, code in FENCE.findall(text):
        info = info.strip()
        if info and not info.startswith("skip:"):
            raise ValueError(f"unknown option {info!r} of a python block: only 'skip: REASON'")
        found.append((info.removeprefix("skip:").strip() or None, code))
    return found


def pages() -> list[Path]:
    return sorted(GUIDE.glob("*.md"))


def test_every_page_of_the_guide_is_in_its_table_of_contents():
    index = (GUIDE / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^(\w+)$", index.split("```{toctree}")[1], re.MULTILINE))
    assert listed == {p.stem for p in pages()} - {"index"}


def test_skip_marks_are_parsed_and_need_a_known_reason():
    text = ("```python\nprint(1)\n```\n\n```python skip: needs a CUDA GPU\nx = 1\n```\n")
    assert blocks(text) == [(None, "print(1)\n"), ("needs a CUDA GPU", "x = 1\n")]
    with pytest.raises(ValueError, match="unknown option"):
        blocks("```python run-me\nx = 1\n```\n")
    for page in pages():
        for reason, _ in blocks(page.read_text(encoding="utf-8")):
            assert reason is None or reason in SKIP_REASONS, f"{page.name}: {reason!r}"


def test_the_guide_has_an_example_on_every_page_that_solves():
    solving = [p for p in pages() if p.stem not in ("index", "workbench")]
    empty = [p.name for p in solving if not blocks(p.read_text(encoding="utf-8"))]
    assert not empty, f"pages without a Python example: {empty}"


#: runs each page's blocks in its own namespace and folder, in one process (one import of
#: mfgwork for the whole guide), and prints one line per page: ``PAGE ok N`` or the error
RUNNER = """
import os, sys, traceback, warnings
warnings.simplefilter("error")
for name, codes in PAGES:
    os.makedirs(name)
    os.chdir(name)
    namespace = {"__name__": "__main__"}
    try:
        for i, code in enumerate(codes):
            exec(compile(code, f"{name}.md block {i}", "exec"), namespace)
        print(f"@@ {name} ok {len(codes)}", flush=True)
    except BaseException:
        print(f"@@ {name} failed", traceback.format_exc().replace(chr(10), " | "), flush=True)
    os.chdir("..")
"""


def runnable(page: Path) -> list[str]:
    return [code for reason, code in blocks(page.read_text(encoding="utf-8")) if reason is None]


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, str]:
    """Every page's blocks run once: {page name: its line of the runner's output}."""
    folder = tmp_path_factory.mktemp("guide")
    todo = [(p.stem, runnable(p)) for p in pages() if runnable(p)]
    env = os.environ | {"MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", f"PAGES = {todo!r}\n" + RUNNER], cwd=folder,
                         env=env, capture_output=True, text=True, timeout=600)
    lines = [line.split(" ", 2) for line in out.stdout.splitlines() if line.startswith("@@ ")]
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return {name: rest for _, name, rest in lines}


@pytest.mark.parametrize("page", [p for p in pages() if p.stem != "index"], ids=lambda p: p.stem)
def test_every_python_block_runs(page, executed):
    if not runnable(page):
        pytest.skip(f"{page.name} has no Python block")
    assert executed.get(page.stem) == f"ok {len(runnable(page))}", executed.get(page.stem)
