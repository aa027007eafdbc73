"""Helpers shared by several test modules: an equilibrium's residual computed independently of
the solver that found it, small notebooks with parameters, and the book builder loaded from
its file, and temporaries of a process that has ended."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

ROOT = Path(__file__).resolve().parents[1]


def independent_residual(problem: mw.SantaFeBar, M: object) -> float:
    """‖A(BR(A)) − A‖ / ‖A(BR(A))‖ for the attendance path A of M (levels 1..nt, any backend's
    array), from the finite-difference solvers directly: NumPy float64 sweeps, the HJB started
    from the terminal cost (not the solver's own residual)."""
    M = np.asarray(mw.to_numpy(M), dtype=np.float64)
    grid = problem.grid(M.shape[1], M.shape[0] - 1)
    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    A = M[1:] @ (grid.weights * chi)
    fd = FiniteDifferences(grid, problem.nu, be)
    M_br = fd.solve_fp(fd.solve_hjb(np.zeros(grid.nx), -problem.payoff(A)[:, None] * chi),
                       problem.initial_density(grid, be))
    A_br = M_br[1:] @ (grid.weights * chi)
    return float(np.linalg.norm(A_br - A) / np.linalg.norm(A_br))


#: the modules of Triton kernels of the finite differences (jitted when imported)
TRITON_KERNEL_MODULES = ("fdm.triton_kernels", "fdm.triton_coop", "fdm.triton_tangent_coop",
                         "fdm2d.triton_krylov", "fdm2d.triton_assembly")


def triton_device(monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the fused kernels run here: "cuda", or "cpu" under Triton's interpreter, with
    every kernel module jitted again for it (a module imported before, without the
    interpreter, would mix compiled helpers into interpreted kernels); skips without torch
    or Triton."""
    torch = pytest.importorskip("torch")
    from mfgwork.numerics.fdm import kernels, triton_sweeps

    if not kernels._triton_installed():
        pytest.skip("Triton is not installed")
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_sweeps, "_KERNELS", {})
    for module in TRITON_KERNEL_MODULES:
        monkeypatch.delitem(sys.modules, f"mfgwork.numerics.{module}", raising=False)
    return "cpu"


def write_notebook(path: Path, parameters: str, *body: str) -> Path:
    """Write to ``path`` a python3 notebook: a cell tagged ``parameters`` holding
    ``parameters``, then one code cell per ``body``; return ``path`` (nbformat imported
    here: the kernel tests that use this module run where notebooks are not installed)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    params = new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, *(new_code_cell(b) for b in body)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


def load_book_builder(name: str) -> ModuleType:
    """``docs/book/build.py`` executed as a new module called ``name`` (each test module
    its own, so that monkeypatching one leaves the others alone)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MAKE_TEMPORARIES = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("temporaries", sys.argv[1])
temporaries = importlib.util.module_from_spec(spec)
spec.loader.exec_module(temporaries)
made = []
for t, role, d, s in json.loads(sys.argv[2]):
    target = made[int(t[1:])] if t.startswith("#") else Path(t)
    made.append(temporaries.temporary_sibling(target, role, directory=d, suffix=s))
print(json.dumps([str(p) for p in made]))
"""


def dead_temporaries(*specs: tuple[Path, str, bool, str]) -> list[Path]:
    """Temporaries made, with their owner records, by a process that has ended (as a killed
    writer leaves them): one per ``(target, role, directory, suffix)``; a target ``"#i"`` is
    the i-th temporary of the list (a temporary of a temporary)."""
    module = ROOT / "mfgwork" / "core" / "temporaries.py"
    arg = json.dumps([[str(t), role, directory, suffix] for t, role, directory, suffix in specs])
    out = subprocess.run([sys.executable, "-c", _MAKE_TEMPORARIES, str(module), arg],
                         capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in json.loads(out)]


# -- models of one's own, shared by the model tests ---------------------------------------------
def _benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, where the benchmarks write models as a user does."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


#: Notebook 09's model, as the notebook writes it (hand-written dp and dpp).
Current = _benchmark("models").Current
#: A user's isotropic model slowed by the crowd (the room benchmark's).
Relativistic = _benchmark("room").Relativistic


@dataclass(frozen=True)
class Crowded(mw.Hamiltonian):
    """x, p and m together, a general power: (1 + x²/4) |p|^q / (q (c + m₊)^a)."""

    q: float = 1.7
    c: float = 0.5
    a: float = 0.5
    depends_on_m = True

    def value(self, x, p, m, xp):
        return ((1.0 + 0.25 * x * x) * xp.abs(p) ** self.q / self.q
                * (self.c + xp.maximum(m, 0.0 * m)) ** (-self.a))


def tangent_planes(lower, diag, upper, c, P: int, log_c: int, nx: int) -> np.ndarray:
    """The seven planes of the chunked tangent layout (``triton_tangent.chunk_planes``) built
    from the bands of ``triton_tangent.tangent_bands``: the reference of the plane tests."""
    zero = np.zeros((diag.shape[0], 1))
    ref = np.zeros((diag.shape[0], 7, P << log_c))
    ref[:, 1] = 1.0
    for k, plane in enumerate([np.hstack([zero, lower[:, 1:]]), diag,
                               np.hstack([upper[:, :-1], zero]), np.hstack([zero, upper[:, :-1]]),
                               np.hstack([lower[:, 1:], zero]), np.hstack([zero, c[:, :-1]]),
                               np.hstack([c[:, :-1], zero])]):
        ref[:, k, :nx] = plane
    i = np.arange(P << log_c)
    expected = np.empty_like(ref)
    expected[..., (i % P) * (1 << log_c) + i // P] = ref
    return expected
