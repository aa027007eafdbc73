"""The README's Python examples, copied as written: each block runs, in order, in a fresh
process in a temporary folder, and raises no warning but those the README documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

#: warnings the README announces where the examples raise them: none so far. Each entry is
#: (category, message regex) for ``warnings.filterwarnings``, with the README's words on it.
DOCUMENTED: list[tuple[str, str]] = []


def blocks() -> list[str]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_readme_has_python_examples():
    found = blocks()
    assert len(found) >= 1 and all("mw." in b for b in found)


def test_every_python_example_runs_without_unexpected_warnings(tmp_path):
    """All blocks in one process (a later block may use a name of an earlier one), each
    executed as written, with every warning an error (NumPy's and the package's alike)."""
    filters = "".join(f"warnings.filterwarnings('ignore', {m!r}, {c})\n" for c, m in DOCUMENTED)
    code = ("import warnings\nwarnings.simplefilter('error')\n" + filters
            + "import mfgwork as mw\n"
            + "".join(f"exec(compile({b!r}, 'README block {i}', 'exec'))\n"
                      f"print('block {i} ok', flush=True)\n" for i, b in enumerate(blocks())))
    env = os.environ | {"MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stdout.count(" ok") == len(blocks())
    assert "Warning" not in out.stderr, out.stderr[-3000:]   # (progress bars go there)
