"""The fused Triton step + deposit (CUDA): against the NumPy references and the plain torch
path, reproducible, and refused where it cannot run.

The kernel tests run on CUDA when there is one, else under Triton's CPU interpreter when
Triton is installed (``pip install triton``), else they are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw
from mfgwork.core.errors import ParameterError
from mfgwork.numerics.particles import ParticleFP, paths
from mfgwork.numerics.particles import triton_kernels as tk
from mfgwork.numerics.particles.self_checks import fused_deposit_check, fused_step_check

TOLERANCE = {"float64": 1e-12, "float32": 2e-5}
GRID = mw.Grid(-2.0, 3.0, 41, 1.0, 12)


@pytest.fixture
def fused_device(monkeypatch) -> str:
    """"cuda" where Triton compiles for a GPU, else "cpu" under Triton's interpreter."""
    device = triton_device(monkeypatch)
    if device == "cpu":
        monkeypatch.setattr(tk, "_KERNELS", None)  # jit it again, for the interpreter
    return device


def _solver(be: mw.Backend, device: str, fused: bool) -> ParticleFP:
    if device == "cuda":
        return ParticleFP(GRID, 0.7, be, n_particles=3000, seed=8, fused=fused)
    solver = ParticleFP(GRID, 0.7, be, n_particles=3000, seed=8, fused=False)
    if fused:  # the interpreter runs the kernel on CPU tensors, which ParticleFP never picks
        solver.path = paths.FUSED_TRITON
        solver.path.prepare(solver)
    return solver


def _drift_inputs(be: mw.Backend) -> tuple[object, object]:
    g = GRID
    U = np.array([np.sin(2 * g.x) * (1 + 0.1 * t) + 0.4 * g.x**2 for t in g.t])
    m0 = np.exp(-2 * (g.x - 0.5) ** 2)
    return be.asarray(U), be.asarray(m0 / np.dot(g.weights, m0))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("check", [fused_deposit_check, fused_step_check])
def test_fused_kernel_matches_the_numpy_reference(fused_device, dtype, check):
    be = mw.get_backend("torch", fused_device, dtype)
    value, ref = check(be)
    diff = np.max(np.abs(mw.to_numpy(value).astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert diff <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_solve_matches_plain_torch_and_repeats_bitwise(fused_device, dtype, monkeypatch):
    """Given the normals the fused kernel draws, the plain torch solve gives its densities."""
    be = mw.get_backend("torch", fused_device, dtype)
    U, m0 = _drift_inputs(be)
    solver = _solver(be, fused_device, fused=True)
    monkeypatch.setattr(paths.TORCH_OPS, "normals",
                        lambda fp, step, out: solver._fused_kernels.normals(step, out))
    plain = _solver(be, fused_device, fused=False).solve_fp(U, m0)
    fused = solver.solve_fp(U, m0)
    assert solver._fused_kernels is not None and solver.path.fused
    scale = float(plain.abs().max())
    assert float((fused - plain).abs().max()) <= 10 * TOLERANCE[dtype] * scale
    assert bool((solver.solve_fp(U, m0) == fused).all())
    mass = mw.to_numpy(fused) @ GRID.weights
    assert np.abs(mass - 1).max() < (1e-12 if dtype == "float64" else 1e-5)


def test_fused_is_refused_where_it_cannot_run():
    pytest.importorskip("torch")
    be = mw.get_backend("torch", "cpu", "float64")
    with pytest.raises(ParameterError, match="fused=True needs a torch CUDA backend"):
        ParticleFP(GRID, 0.7, be, n_particles=10, fused=True)
    with pytest.raises(ParameterError, match="fused='yes' is not allowed"):
        ParticleFP(GRID, 0.7, be, n_particles=10, fused="yes")
    assert not ParticleFP(GRID, 0.7, be, n_particles=10).fused


def test_fused_normals_are_standard_normal_and_keyed_by_seed_and_step(fused_device):
    """The kernel's increments: N(0, 1) (Kolmogorov–Smirnov), the same numbers for the same
    seed and step, independent between steps and seeds."""
    from scipy import stats

    be = mw.get_backend("torch", fused_device, "float64")
    n = 20_000
    draws = {}
    for seed, step in [(5, 0), (5, 1), (6, 0), (5, 0)]:
        kernels = tk.FusedKernels(11, 1.0, n, 0.1, 0.1, be.asarray(np.zeros(1)), seed=seed)
        draws.setdefault((seed, step), []).append(
            mw.to_numpy(kernels.normals(step, be.asarray(np.empty(n)))))
    first = draws[(5, 0)][0]
    assert np.array_equal(first, draws[(5, 0)][1])
    assert stats.kstest(first, "norm").pvalue > 1e-3
    for other in [draws[(5, 1)][0], draws[(6, 0)][0]]:
        assert abs(np.corrcoef(first, other)[0, 1]) < 0.05
        assert stats.ks_2samp(first, other).pvalue > 1e-3
    assert len({tk.step_seed(s, k) for s in range(50) for k in range(50)}) == 2500


@pytest.mark.parametrize(("n", "copies"), [(1000, 1), (20_000, 3), (50_000, 256)])
def test_packed_deposit_unpacks_to_the_two_sided_fixed_point_masses(fused_device, n, copies):
    """The packed fields of the fused deposit, filled here by NumPy as the kernel fills them,
    give exactly the integers of adding 2^k − r to node i and r to node i + 1; also with every
    particle of a slot at f = 1, where the fields are fullest."""
    torch = pytest.importorskip("torch")
    nx = 17
    fused = tk.FusedKernels(nx, 1.0, n, 0.1, 0.1,
                            torch.zeros(1, dtype=torch.float64, device=fused_device),
                            copies=copies)
    rng = np.random.default_rng(n)
    for cells, fractions in [(rng.integers(0, nx - 1, n), rng.uniform(0, 1, n)),
                             (np.full(n, nx - 2), np.ones(n))]:
        r = np.floor(fractions * 2.0**fused.k).astype(np.int64)
        packed = np.zeros(copies * nx, dtype=np.int64)
        copy = np.arange(n) // fused.block % copies  # the program's copy
        np.add.at(packed, copy * nx + cells, (1 << fused.shift) + r)
        two_sided = np.zeros(nx, dtype=np.int64)
        np.add.at(two_sided, cells, (1 << fused.k) - r)
        np.add.at(two_sided, cells + 1, r)
        mu = fused.integer_node_masses(torch.from_numpy(packed)[None].to(fused_device))[0]
        assert np.array_equal(mu.cpu().numpy(), two_sided)


def test_packing_leaves_enough_bits_or_refuses():
    # 10^6 particles in programs of 256, 256 copies: 16 programs a copy, 4096 particles a slot
    assert tk.packing_bits(10**6, 256, 256) == (37, 37 + 13)
    assert tk.packing_bits(10**7, 256, 256)[0] == 31
    assert tk.packing_bits(1000, 256, 256) == (40, 40 + 9)  # 4 programs, one a copy: 256
    with pytest.raises(ParameterError, match="n_particles=1000000000 with deposit_copies=1"):
        tk.packing_bits(10**9, 1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("copies", [3, 64])
def test_fused_deposit_counts_every_particle_once(fused_device, dtype, copies):
    """The count fields of the packed masses add up to N exactly and the node masses to
    N 2^k: no particle lost or doubled, for particles on nodes and walls too."""
    from mfgwork.numerics.particles.self_checks import GRID as CHECK_GRID
    from mfgwork.numerics.particles.self_checks import _inputs

    be = mw.get_backend("torch", fused_device, dtype)
    y = _inputs()[0][:3000]
    g = CHECK_GRID
    fused = tk.FusedKernels(g.nx, g.x_max - g.x_min, y.size, 0.1, 0.1,
                            be.asarray(g.weights), copies=copies)
    masses = fused.mass_buffer(1)
    fused.deposit(be.asarray(y), masses[0])
    assert int((masses >> fused.shift).sum()) == y.size
    assert int(fused.integer_node_masses(masses).sum()) == y.size << fused.k


def _unpacked(packed: np.ndarray, copies: int, nx: int, k: int, shift: int) -> np.ndarray:
    """The node masses of the packed fields by the formula μ_i = 2^k c_i − R_i + R_{i−1}."""
    fields = packed.reshape(packed.shape[0], copies, nx)
    counts = (fields >> shift).sum(axis=1)
    rights = (fields & ((1 << shift) - 1)).sum(axis=1)
    mu = counts * (1 << k) - rights
    mu[:, 1:] += rights[:, :-1]
    return mu


@pytest.mark.parametrize(("levels", "copies", "nx"), [(3, 1, 5), (2, 5, 17), (4, 40, 130)])
def test_unpacking_kernel_gives_the_node_mass_formula_exactly(fused_device, levels, copies, nx):
    """The kernel's μ of random packed fields (counts up to a slot's capacity, weights below
    count · 2^k) are the integers of the formula, over blocks of nodes and of copies."""
    import torch

    fused = tk.FusedKernels(nx, 1.0, 10**6, 0.1, 0.1, torch.zeros(1, dtype=torch.float64),
                            copies=copies)
    rng = np.random.default_rng(nx)
    counts = rng.integers(0, 1 << (fused.shift - fused.k), (levels, copies * nx))
    rights = np.floor(rng.uniform(0, 1, counts.shape) * (counts << fused.k)).astype(np.int64)
    packed = (counts << fused.shift) + rights
    mu = fused.integer_node_masses(torch.from_numpy(packed).to(fused_device))
    assert np.array_equal(mu.cpu().numpy(),
                          _unpacked(packed, copies, nx, fused.k, fused.shift))


def test_fused_solve_node_masses_count_every_particle_at_every_level(fused_device):
    be = mw.get_backend("torch", fused_device, "float64")
    solver = _solver(be, fused_device, fused=True)
    fused = solver._fused_kernels
    masses = solver.path.run(solver, *_drift_inputs(be))
    mu = fused.integer_node_masses(masses).cpu().numpy()
    assert np.array_equal(mu, _unpacked(masses.cpu().numpy(), fused.copies, fused.nx, fused.k,
                                        fused.shift))
    assert np.all(mu.sum(axis=1) == solver.n_particles << fused.k)
