"""The Makefile: each command installs what it needs (make run only the notebook's runtime),
and make lab runs as root with --allow-root, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True,
                          text=True, timeout=60, env=os.environ | (env or {}))


def extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]


@pytest.mark.parametrize(("target", "installs"), [
    ("run", "run"), ("test", "all,test"), ("book", "all"), ("lab", "all"), ("lint", "all,test")])
def test_each_command_installs_its_set_once_with_a_message(tmp_path, target, installs):
    """make -n on a fresh environment: the pip line of the command's extras, announced."""
    venv = tmp_path / "venv"
    out = make("-n", target, f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    pip = [line for line in out.stdout.splitlines() if " -m pip install " in line]
    assert len(pip) == 1 and pip[0].endswith(f'-e ".[{installs}]"'), out.stdout
    assert "--quiet" not in pip[0]  # pip's progress is shown
    assert f"installing mfgwork[{installs}]" in out.stdout and "first run only" in out.stdout


def test_make_run_needs_only_the_run_extra(tmp_path):
    """The main job's extra holds no accelerator, lab, docs or test package; notebook 01 and
    the command line it goes through import none of them."""
    run = " ".join(extras()["run"])
    for heavy in ("torch", "triton", "jupyterlab", "sphinx", "xarray", "dask", "pytest"):
        assert heavy not in run
    # the notebook's py:percent twin, with a small grid injected after its parameters cell
    source = (ROOT / "notebooks" / "01_santa_fe_bar.py").read_text()
    params = source.index('tags=["parameters"]')
    end = source.index("\n# %%", params)
    (tmp_path / "main_job.py").write_text(source[:end] + "\nnx, nt = 41, 40" + source[end:])
    script = (
        "import runpy, sys\n"
        "ran = runpy.run_path('main_job.py')\n"
        "assert ran['res'].converged and ran['res'].U.shape == (41, 41)\n"
        "import mfgwork.__main__\n"
        "heavy = ('torch', 'triton', 'jupyterlab', 'sphinx', 'xarray', 'zarr', 'dask',\n"
        "         'ipywidgets', 'playwright', 'pytest')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env=os.environ | {"MPLBACKEND": "Agg"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def fake_lab(tmp_path) -> dict[str, str]:
    """make variables for the lab recipe with a stand-in for Python that prints its
    arguments, and a stand-in for ``id`` whose uid the test chooses."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
                    'echo "ARGV: $*"\n')
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-all").touch()
    return {"PY": str(fake), "VENV": str(venv)}


def fake_id(folder: Path, uid: int) -> dict[str, str]:
    folder.mkdir()
    (folder / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (folder / "id").chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("uid", [0, 1000])
def test_lab_as_root_adds_allow_root_and_says_so(fake_lab, tmp_path, uid):
    out = make("lab", *[f"{k}={v}" for k, v in fake_lab.items()],
               env=fake_id(tmp_path / "bin", uid) | {"LAB_TOKEN": "t"})
    assert out.returncode == 0, out.stderr
    argv = next(line for line in out.stdout.splitlines() if line.startswith("ARGV: "))
    assert ("--allow-root" in argv.split()) == (uid == 0)
    assert ("running as root" in out.stdout) == (uid == 0)
