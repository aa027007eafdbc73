"""Every isotropic model on every 2-D path: the room's best response with ½|p|², |p|^1.5/1.5,
congestion and a user's model, by the compiled CPU assembly (numba), the array code (NumPy and
torch, float64 and float32) and the Triton system (under the interpreter on the CPU), against
the NumPy float64 array code with SuperLU; the congestion room's mass balance and positivity;
no ½|p|² left in the 2-D numerics."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers import Relativistic, triton_device

import mfgwork as mw
from mfgwork.numerics.fdm2d import equilibrium as eq
from mfgwork.numerics.fdm2d.stencil import Stencil

MODELS = {"quadratic": mw.Quadratic(), "power-1.5": mw.Power(1.5),
          "congestion": mw.Congestion(1.0, 0.5), "user": Relativistic()}
NX, NT = 11, 5
#: Relative agreement with the reference in float64, and in float32 (its rounding floor on
#: a best response: two sweeps of solves to 1e-6).
FLOAT64, FLOAT32 = 1e-10, 1e-4


def _relative(a, b) -> float:
    a, b = (np.asarray(mw.to_numpy(v), dtype=np.float64) for v in (a, b))
    return float(np.abs(a - b).max() / np.abs(b).max())


def _best_response(H, backend, solver, compiled=True):
    """(U, M') of one best response of the room to a crowd that has moved (its density m0
    spread at later levels), by ``solver`` on ``backend`` (``compiled=False``: the array code
    even where a compiled assembly exists), and the setup."""
    setup = eq.build(mw.Room(hamiltonian=H), NX, NX, NT, backend, solver)
    if not compiled:
        setup.scheme.stencil._compiled = None
    xp = backend.xp
    levels = [setup.m0 * (1.0 + 0.3 * n) / (1.0 + 0.3 * NT) for n in range(NT + 1)]
    M = xp.stack(levels, axis=-3)
    U, M_new, _ = eq.best_response(setup, M)
    return U, M_new, setup


@pytest.fixture(scope="module")
def reference():
    """The NumPy float64 array code with SuperLU, per model."""
    be = mw.get_backend("numpy")
    return {k: _best_response(H, be, "direct", compiled=False)[:2] for k, H in MODELS.items()}


@pytest.mark.parametrize("name", MODELS)
def test_the_compiled_assembly_is_the_array_code(name):
    """The compiled system of each model (its generated functions in s = |p|²) against the
    stencil's array code, at random u (gradients of both signs) and at a flat u (s = 0
    everywhere: Ĥ = H(0), no slope, where |p|^1.5's D is infinite); the density changed in
    place in between (the node values kept for it follow)."""
    H = MODELS[name]
    room = mw.Room(hamiltonian=H)
    grid = room.grid(13, 11, 4)
    be = mw.get_backend("numpy")
    fast = Stencil(grid, room.nu, H, be)
    slow = Stencil(grid, room.nu, H, be)
    slow._compiled = None
    assert fast._compiled is not None
    rng = np.random.default_rng(1)
    m = 2.0 * rng.random(grid.active.shape) if H.depends_on_m else None
    for u in (3.0 * rng.random(grid.active.shape) - 1.0, np.ones(grid.active.shape)):
        u_next, F = rng.random(u.shape), rng.random(u.shape)
        (cf, Rf), (cs, Rs) = fast.system(u, u_next, F, m), slow.system(u, u_next, F, m)
        for got, want in zip((*cf[:5], Rf), (*cs[:5], Rs), strict=True):
            assert np.isfinite(got).all()
            assert np.abs(got - want).max() <= 1e-13 * max(np.abs(want).max(), 1.0)
        if m is not None:
            m *= 3.0


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("path", ["numba", "numpy-krylov", "torch-float64", "torch-float32"])
def test_each_path_gives_the_reference_best_response(reference, name, path):
    """The room's best response of each model on each CPU path against the NumPy float64
    array code with SuperLU: within 1e-10 in float64, the float32 floor in float32."""
    backend, solver, tol = {"numba": (("numpy",), "ilu", FLOAT64),
                            "numpy-krylov": (("numpy",), "krylov", FLOAT64),
                            "torch-float64": (("torch", "cpu", "float64"), "krylov", FLOAT64),
                            "torch-float32": (("torch", "cpu", "float32"), "krylov", FLOAT32),
                            }[path]
    if backend[0] == "torch":
        pytest.importorskip("torch")
    U, M, setup = _best_response(MODELS[name], mw.get_backend(*backend), solver)
    assert (setup.scheme.stencil._compiled is not None) == (backend[0] == "numpy")
    U_ref, M_ref = reference[name]
    assert _relative(U, U_ref) <= tol
    assert _relative(M, M_ref) <= tol


def test_the_models_give_different_rooms(reference):
    """The comparisons above can tell the models apart."""
    values = list(reference.values())
    for i, (U, _) in enumerate(values):
        for U_other, _ in values[i + 1:]:
            assert _relative(U, U_other) > 1e-3


@pytest.mark.parametrize("solver", ["ilu", "direct"])
def test_the_congestion_room_keeps_its_mass_and_stays_positive(solver):
    """The equilibrium with congestion: certified, m ≥ 0, and each FP step's mass balance
    Σμⁿ = Σμⁿ⁺¹ + outflow to round-off with the densities that step saw (the FP sweep of the
    compiled Newton matrices against the outflow of the array code)."""
    room = mw.Room(hamiltonian=mw.Congestion(1.0, 0.5))
    res = mw.solve_2d(room, nx=NX, nt=NT, solver=solver, tol=1e-8, progress=False)
    assert res.converged and res.residual <= 1e-8
    assert float(np.min(res.M)) >= 0.0
    be = mw.get_backend("numpy")
    setup = eq.build(room, NX, NX, NT, be, solver)
    U, M, z = eq.best_response(setup, be.asarray(res.M))
    assert float(np.min(M)) >= 0.0
    scheme = setup.scheme
    scheme.density = z   # the densities the sweeps saw
    flows = np.asarray(scheme.outflow(U, M)).sum(axis=-1)
    mass = (M * scheme.stencil.volumes).sum(axis=(-2, -1))
    assert np.abs(mass + np.cumsum(flows) - mass[0]).max() <= 1e-13
    assert flows[1:].min() > 0.0   # the doors are open: mass leaves


@pytest.fixture
def device(monkeypatch) -> str:
    return triton_device(monkeypatch)


@pytest.mark.parametrize("name", MODELS)
def test_the_triton_system_is_the_reference_system(device, name):
    """Each model's Triton system (its generated functions in s = |p|²; the density read
    where H depends on m) against the NumPy float64 array code: the Newton system (J, R) of
    a batch of two rooms, and the FP step's J alone."""
    import torch

    from mfgwork.numerics.fdm2d.fused_assembly import FusedAssembly
    from mfgwork.numerics.fdm2d.fused_krylov import FusedBiCGStab

    H = MODELS[name]
    rooms = [mw.Room(hamiltonian=H, door_widths=(0.2, 0.3)),
             mw.Room(hamiltonian=H, sigma=0.5, door_widths=(0.4, 0.2))]
    grids = [r.grid(9, 9, 4) for r in rooms]
    nu = [r.nu for r in rooms]
    be = mw.get_backend("torch", device, "float64")
    st = Stencil(grids, nu, H, be)
    ref = Stencil(grids, nu, H, mw.get_backend("numpy"))
    rng = np.random.default_rng(5)
    shape = (2, 9, 9)
    u, u_next, F = 3.0 * rng.random(shape) - 1.0, rng.random(shape), rng.random(shape)
    u[0, :3, :3] = 0.5   # a flat corner: s = 0
    m = 2.0 * rng.random(shape) if H.depends_on_m else None

    def tensor(a):
        return None if a is None else torch.as_tensor(a, device=device)

    solver = FusedBiCGStab(shape, tensor(u), False, 2, graphs=False, persistent=True)
    assembly = FusedAssembly(st, shape, solver)
    assert assembly.triton
    assembly.system(tensor(u), torch.zeros(shape, dtype=torch.float64, device=device),
                    tensor(u_next), tensor(F), subtract=False, m=tensor(m))
    c, R = ref.system(u, u_next, F, m)
    for got, want in zip((*solver.coefs[:5], solver.sets[0]["r"]), (*c[:5], R), strict=True):
        assert _relative(got, want) <= 1e-13
    fp = FusedAssembly(st, shape, FusedBiCGStab(shape, tensor(u), True, 2, graphs=False,
                                                 persistent=True))
    fp.jacobian(tensor(u_next), tensor(m))
    for got, want in zip(fp.coefs[:5], ref.jacobian(u_next, m, exits=False)[:5], strict=True):
        assert _relative(got, want) <= 1e-13


def test_no_half_square_is_written_in_the_2d_numerics():
    """The 2-D paths take the model's functions: no ½|p|² of their own, no gate on it."""
    folder = Path(mw.__file__).parent / "numerics" / "fdm2d"
    pattern = re.compile(r"Quadratic|same_model|0\.5\s*\*\s*\(\s*\(?\s*(\w+)\s*\*\s*\1\b")
    found = [(path.name, line.strip()) for path in sorted(folder.glob("*.py"))
             for line in path.read_text().splitlines() if pattern.search(line)]
    assert found == []


def test_a_2d_model_that_reads_x_or_is_not_isotropic_is_refused_at_definition():
    """A point of the plane has two coordinates: a model whose H reads x is refused when the
    2-D problem is made, saying so (before, a TypeError deep inside the first sweep); so is
    one that says it is isotropic while H(p) ≠ H(−p) (the scheme would take its branch p > 0
    alone, silently)."""

    class Uphill(mw.Hamiltonian):
        isotropic = True

        def value(self, x, p, m, xp):
            return 0.5 * (1.0 + x * x) * p * p

    class Current(mw.Hamiltonian):
        isotropic = True

        def value(self, x, p, m, xp):
            return xp.minimum(p, 0.0 * p) ** 2 + 0.25 * xp.maximum(p, 0.0 * p) ** 2

    with pytest.raises(mw.ParameterError, match="reads x"):
        mw.Room(hamiltonian=Uphill())
    with pytest.raises(mw.ParameterError, match=r"H\(-p\)"):
        mw.Room(hamiltonian=Current())
    assert mw.Room(hamiltonian=Relativistic()).hamiltonian == Relativistic()
