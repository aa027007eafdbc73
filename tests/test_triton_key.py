"""Triton's installation key, remembered across processes (``mfgwork.core.triton_key``):
the stored key is Triton's own, later processes take it without Triton computing it, and any
change to the installation computes it again."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mfgwork.core import triton_key as key_memory

ROOT = Path(__file__).resolve().parents[1]


class FakeTriton:
    """A Triton-shaped package in ``tmp_path`` whose ``runtime.cache.triton_key`` (an
    ``lru_cache`` function, as Triton's) counts its computations."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.root = tmp_path / name
        for folder in key_memory.KEY_FOLDERS:
            (self.root / folder).mkdir(parents=True)
            (self.root / folder / "part.py").write_text(f"# {folder}\n")
        (self.root / "runtime").mkdir()
        cache_file = self.root / "runtime" / "cache.py"
        cache_file.write_text("# the key's module\n")
        self.module = types.ModuleType(name)
        self.module.__file__ = str(self.root / "__init__.py")
        self.module.__version__ = "1.0"
        self.computed = 0

        @functools.lru_cache
        def triton_key() -> str:
            self.computed += 1
            return f"key-{self.computed}"

        cache = types.ModuleType(f"{name}.runtime.cache")
        cache.__file__ = str(cache_file)
        triton_key.__module__ = cache.__name__
        cache.triton_key = triton_key
        self.cache, self.names = cache, [name, cache.__name__]

    def start_process(self) -> None:
        """A fresh process: the package as just imported, with Triton's own function."""
        self.original.cache_clear()
        self.cache.triton_key = self.original
        sys.modules.update({self.names[0]: self.module, self.names[1]: self.cache})

    def key(self, folder: Path) -> str:
        self.start_process()
        assert key_memory.remember_key(self.module, folder) is True
        return self.cache.triton_key()


@pytest.fixture
def fake(tmp_path, request):
    package = FakeTriton(tmp_path, f"faketriton_{request.node.name.replace('[', '_')[:40]}")
    package.original = package.cache.triton_key
    yield package
    for name in package.names:
        sys.modules.pop(name, None)


def test_stored_key_is_reused_and_a_changed_installation_computes_it_again(fake, tmp_path):
    store = tmp_path / "cache"
    assert fake.key(store) == "key-1" and fake.computed == 1
    record = json.loads((store / key_memory.KEY_FILE).read_text())
    assert record["key"] == "key-1" and record["signature"]["version"] == "1.0"
    assert fake.key(store) == "key-1" and fake.computed == 1     # a later process reads it
    assert fake.cache.triton_key() == "key-1" and fake.computed == 1

    part = fake.root / "backends" / "part.py"
    part.write_text("# edited, longer than before\n")
    assert fake.key(store) == "key-2" and fake.computed == 2     # an edited module
    assert fake.key(store) == "key-2" and fake.computed == 2
    (fake.root / "language" / "new.py").write_text("")
    assert fake.key(store) == "key-3"                              # a module added
    os.utime(fake.root / "_C" / "part.py", ns=(1, 1))
    assert fake.key(store) == "key-4"                              # same size, other time
    fake.module.__version__ = "1.1"
    assert fake.key(store) == "key-5"                              # an upgrade
    assert fake.key(store) == "key-5" and fake.computed == 5


@pytest.mark.parametrize("damage", ["text", "json", "other key", "fifo", "folder"])
def test_a_damaged_store_is_computed_again(fake, tmp_path, damage):
    store = tmp_path / "cache"
    assert fake.key(store) == "key-1"
    file = store / key_memory.KEY_FILE
    if damage == "text":
        file.write_bytes(b"\x00not json")
    elif damage == "json":
        file.write_text("[1, 2]")
    elif damage == "other key":
        record = json.loads(file.read_text())
        file.write_text(json.dumps(record | {"key": 7}))
    elif damage == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        file.unlink()
        os.mkfifo(file)
    else:
        file.unlink()
        file.mkdir()
    assert fake.key(store) == "key-2"   # (a FIFO is not waited on; nothing is raised)


def test_an_unwritable_store_still_gives_the_key(fake, tmp_path):
    blocked = tmp_path / "a file"
    blocked.write_text("")
    assert fake.key(blocked / "cache") == "key-1"
    assert fake.key(blocked / "cache") == "key-2"   # (nothing could be stored)
    assert blocked.read_text() == ""


def test_an_unknown_layout_is_left_alone(fake, tmp_path):
    fake.start_process()
    fake.cache.triton_key = lambda: "plain"   # (not Triton's cached function)
    assert key_memory.remember_key(fake.module, tmp_path) is False
    assert fake.cache.triton_key() == "plain" and not list(tmp_path.glob("*.json"))


_PROCESS = """
import json, sys
import triton.runtime.cache as cache
original = cache.triton_key
import mfgwork.core.triton_setup
import triton.runtime.autotuner as autotuner
key = cache.triton_key()
print(json.dumps({"same": key == original.__wrapped__(), "computed": original.cache_info().misses,
                  "autotuner": autotuner.triton_key is cache.triton_key,
                  "replaced": cache.triton_key is not original}))
"""


def test_the_real_triton_key_is_stored_and_read_by_the_next_process(tmp_path):
    if importlib.util.find_spec("triton") is None:   # (not imported here: the interpreter
        pytest.skip("Triton is not installed")          # tests import it in their mode)
    env = os.environ | {"MFGWORK_MODEL_CACHE": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _PROCESS], env=env, cwd=tmp_path,
                                      capture_output=True, text=True, check=True).stdout)
            for _ in range(2)]
    assert all(r["same"] and r["autotuner"] and r["replaced"] for r in runs)
    assert [r["computed"] for r in runs] == [1, 0]
    assert (tmp_path / key_memory.KEY_FILE).is_file()
