"""BiCGStab of the 2-D scheme as fused Triton launches (:mod:`.fused_krylov`) against the
array-operation iterations, and a whole fused 2-D solve against the eager one.

On CUDA when there is one, else under Triton's CPU interpreter at tiny sizes, else skipped.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw
from mfgwork.core.errors import SolverError
from mfgwork.numerics.fdm2d import krylov, sweeps
from mfgwork.numerics.fdm2d.fused_krylov import FusedBiCGStab
from mfgwork.numerics.fdm2d.stencil import Coefficients, Stencil

torch = pytest.importorskip("torch")
xp = pytest.importorskip("array_api_compat.torch")


@pytest.fixture
def device(monkeypatch) -> str:
    return triton_device(monkeypatch)


def _system(shape: tuple[int, ...], device: str, seed: int) -> tuple[Coefficients, object]:
    """A diagonally dominant M-matrix stencil with walls (zero couplings) and a right-hand
    side, float64."""
    g = torch.Generator().manual_seed(seed)
    W, E, S, N = (-torch.rand(shape, generator=g, dtype=torch.float64) for _ in range(4))
    E[..., :, 3] = 0.0   # a wall between columns 3 and 4
    W[..., :, 4] = 0.0
    diag = 2.0 - (W + E + S + N)
    b = torch.rand(shape, generator=g, dtype=torch.float64)
    return Coefficients(*(a.to(device) for a in (diag, W, E, S, N)), None), b.to(device)


def _apply(c: Coefficients, transpose: bool):
    return ((lambda v: Stencil.apply_transpose(None, c, v)) if transpose
            else (lambda v: Stencil.apply(None, c, v)))


def _preconditioner(c: Coefficients, transpose: bool):
    """The one-launch solve's M⁻¹ (:data:`.fused_krylov.NEUMANN`) as array code."""
    from mfgwork.numerics.fdm2d import fused_krylov

    return Stencil.neumann(Stencil.__new__(Stencil), c, transpose) if fused_krylov.NEUMANN \
        else 1.0 / c.diag


def _relative_residuals(c, b, x, transpose):
    r = b - _apply(c, transpose)(x)
    return (torch.linalg.vector_norm(r, dim=(-2, -1))
            / torch.linalg.vector_norm(b, dim=(-2, -1)).clamp(min=1e-300))


@pytest.mark.parametrize("shape", [(7, 9), (3, 6, 5)])
@pytest.mark.parametrize("transpose", [False, True])
def test_fused_chunks_follow_the_array_iterations(device, shape, transpose):
    c, b = _system(shape, device, seed=len(shape) + transpose)
    if len(shape) == 3:
        b[1] = 0.0   # a problem already solved: every division by 0 is by 1 instead
    one = 1.0 + 0.0 * krylov._dot(b, b, xp)
    state = (0.0 * b, b, 0.0 * b, 0.0 * b, one, one, one)
    for steps in (2, 6):
        solver = FusedBiCGStab(b.shape, b, transpose, steps, graphs=False)
        solver.start(c[:5], b, None, _apply(c, transpose))
        solver.run_chunk()
        eager = krylov.iterate(_apply(c, transpose), 1.0 / c.diag, b, state, steps, xp)
        s = solver.sets[0]
        fused = (s["x"], s["r"], s["p"], s["v"],
                 *(s["scalars"][:, i].reshape(eager[4].shape) for i in range(3)))
        for a, f in zip(eager, fused, strict=True):
            assert bool(torch.isfinite(f).all())
            assert float((a - f).abs().max()) <= 1e-12 * (1.0 + float(a.abs().max()))
        worst = _relative_residuals(c, b, s["x"], transpose).max()
        assert float(solver.worst[0]) == pytest.approx(float(worst), rel=1e-6, abs=1e-14)
    if len(shape) == 3:
        assert float(s["x"][1].abs().max()) == 0.0


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_a_fused_solve_reaches_its_tolerance_from_zero_or_a_guess(device, transpose,
                                                                   persistent):
    c, b = _system((2, 8, 7), device, seed=5)
    solver = FusedBiCGStab(b.shape, b, transpose, 4, graphs=False, persistent=persistent)
    apply = _apply(c, transpose)
    x, k = solver.solve(c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert float(_relative_residuals(c, b, x, transpose).max()) <= 1e-11
    assert k % 4 == 0 if not persistent else k > 0
    guess = x * (1.0 + 1e-6)
    y, k_guess = solver.solve(c[:5], b, guess, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert float(_relative_residuals(c, b, y, transpose).max()) <= 1e-11 and k_guess < k
    assert x.data_ptr() != y.data_ptr() != solver.x.data_ptr()   # results are not buffers
    with pytest.raises(SolverError, match="did not converge in 4 iterations"):
        solver.solve(c[:5], b, None, apply, rtol=1e-14, max_iter=4, fail=1e-13)
    with pytest.raises(ValueError, match="steps=3"):
        FusedBiCGStab(b.shape, b, transpose, 3, graphs=False)


@pytest.mark.parametrize("spread", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_one_launch_follows_the_array_iterations_per_problem(device, monkeypatch, transpose,
                                                              spread):
    """Each problem of a one-launch solve stops at its own iteration, where its iterate is
    that of the array recurrence after as many iterations; a solved problem takes none
    (its programs shared by the others, or, in batches too large to share, idle)."""
    from mfgwork.numerics.fdm2d import fused_krylov

    monkeypatch.setattr(fused_krylov, "SPREAD_BATCH", 1024 if spread else 2)
    c, b = _system((3, 6, 9), device, seed=11)
    b[1] = 0.0
    b[2] *= torch.linspace(0.0, 1.0, 9, dtype=b.dtype, device=b.device) ** 4
    solver = FusedBiCGStab(b.shape, b, transpose, 2, graphs=False, persistent=True)
    x, k = solver.solve(c[:5], b, None, _apply(c, transpose), rtol=1e-10, max_iter=100,
                        fail=1e-9)
    counts = [int(a) for a in solver.status[:, 0].tolist()]
    assert counts[1] == 0 and k == max(counts) and bool((x[1] == 0.0).all())
    for i in (0, 2):
        one = 1.0 + 0.0 * krylov._dot(b[i], b[i], xp)
        state = (0.0 * b[i], b[i], 0.0 * b[i], 0.0 * b[i], one, one, one)
        ci = Coefficients(*(a[i] for a in c[:5]), None)
        precondition = _preconditioner(ci, transpose)
        ref = krylov.iterate(_apply(ci, transpose), precondition, b[i], state, counts[i],
                             xp)[0]
        assert float((ref - x[i]).abs().max()) <= 1e-12 * float(ref.abs().max())
        assert float(_relative_residuals(ci, b[i], x[i], transpose)) <= 1e-10
        shorter = krylov.iterate(_apply(ci, transpose), precondition, b[i], state,
                                 counts[i] - 1, xp)[0]
        assert float(_relative_residuals(ci, b[i], shorter, transpose)) > 1e-10


@pytest.mark.parametrize("transpose", [False, True])
def test_one_launch_layouts_of_several_programs_agree(device, transpose):
    """Programs that each own a contiguous run of a problem's tiles (their neighbours' values
    read from L2, their own through L1) solve as one program does: the iterations differ
    only in the order of the inner products' partial sums (CUDA: under the interpreter the
    programs of a launch run one after the other and cannot meet at a barrier)."""
    if not torch.cuda.is_available():
        pytest.skip("several programs per problem meet at barriers on CUDA only")
    c, b = _system((3, 41, 43), device, seed=5)
    solutions = []
    for layout in [(256, 1, 4), (256, 3, 4), (256, 7, 4), (512, 4, 8)]:
        solver = FusedBiCGStab(b.shape, b, transpose, 2, graphs=False, persistent=True,
                               layout=layout)
        x, _ = solver.solve(c[:5], b, None, _apply(c, transpose), rtol=1e-11, max_iter=400,
                            fail=1e-10)
        assert solver.persistent and bool((solver.status[:, 2] == 1.0).all())
        assert float(_relative_residuals(c, b, x, transpose).max()) <= 1e-11
        solutions.append(x)
    for x in solutions[1:]:
        assert float((x - solutions[0]).abs().max()) <= 1e-9 * float(solutions[0].abs().max())


@pytest.mark.parametrize("transpose", [False, True])
def test_the_problems_left_iterating_share_the_launchs_programs(device, transpose):
    """A problem left alone in a batch's launch takes the programs of the problems that
    take no iteration (all its tiles: CUDA; under the interpreter the layout's one), and
    solves as it does beside the others (the inner products' partial sums in another
    order)."""
    c, b = _system((100, 41, 43) if device == "cuda" else (5, 6, 9), device, seed=7)
    apply = _apply(c, transpose)
    solver = FusedBiCGStab(b.shape, b, transpose, 2, graphs=False, persistent=True)
    together, _ = solver.solve(c[:5], b, None, apply, rtol=1e-11, max_iter=400, fail=1e-10)
    counts = solver.status[:, 0].clone()
    alone = torch.zeros_like(b)
    alone[3] = b[3]
    x, k = solver.solve(c[:5], alone, None, apply, rtol=1e-11, max_iter=400, fail=1e-10)
    assert solver.status[:, 0].tolist() == [0.0] * 3 + [k] + [0.0] * (b.shape[0] - 4)
    assert float(x[torch.arange(b.shape[0]) != 3].abs().max()) == 0.0
    assert abs(k - int(counts[3])) <= 1 and bool((solver.status[:, 2] == 1.0).all())
    one = Coefficients(*(a[3:4] for a in c[:5]), None)
    assert float(_relative_residuals(one, b[3:4], x[3:4], transpose)[0]) <= 1e-11
    ref = together[3]
    assert float((x[3] - ref).abs().max()) <= 1e-9 * float(ref.abs().max())
    if device == "cuda":
        assert solver.most == -(-41 * 43 // solver.one_launch["BLOCK"]) > solver.programs


def _unmet_barriers(monkeypatch):
    """Two programs per problem that give up waiting at once: under the interpreter they
    run one after the other, as programs that do not run at once would."""
    from mfgwork.numerics.fdm2d import fused_krylov

    if not torch.cuda.is_available():
        monkeypatch.setattr(fused_krylov, "one_launch_layout", lambda *a: (512, 2))
        monkeypatch.setattr(fused_krylov, "BARRIER_POLLS", 4)
        return True
    return False


def test_a_one_launch_solve_whose_programs_cannot_meet_ends_and_solves_in_chunks(
        device, monkeypatch):
    if not _unmet_barriers(monkeypatch):
        pytest.skip("programs that do not run at once are simulated under the interpreter")
    c, b = _system((2, 9, 8), device, seed=3)
    solver = FusedBiCGStab(b.shape, b, False, 4, graphs=False, persistent=True)
    with pytest.warns(RuntimeWarning, match="did not run at once"):
        x, k = solver.solve(c[:5], b, None, _apply(c, False), rtol=1e-12, max_iter=200,
                            fail=1e-9)
    assert not solver.persistent and k % 4 == 0
    assert float(_relative_residuals(c, b, x, False).max()) <= 1e-11


@pytest.mark.parametrize("launch", ["one", "one-power", "chunks", "unmet", "batch",
                                    "batch-mixed", "unmet-mixed"])
def test_a_fused_room_solve_matches_the_eager_one(device, monkeypatch, launch):
    """The fused steps (Newton's updates on the device with one-launch solves, with the
    Triton systems of ½|p|² and of another H; the host's Newton with chunks; one-launch
    solves whose programs cannot meet, which fall back to chunks; a batch of two rooms,
    whose levels the recordings hold as contiguous blocks; float32 iterations in float64
    Newton updates and refinement rounds, falling back to float64 chunks) give the eager
    solve (at the exact solves' accuracy: two iterations of inexact Picard would compare
    solvers at their tolerance). Under the interpreter a 5² grid (its time grows with every
    Krylov iteration), and the chunks only after the fallback of "unmet": from its first
    level on, that solve is the one of "chunks"."""
    from mfgwork.numerics.fdm2d import fused_krylov, fused_steps

    if launch.startswith("unmet") and not _unmet_barriers(monkeypatch):
        pytest.skip("programs that do not run at once are simulated under the interpreter")
    if launch == "chunks" and not torch.cuda.is_available():
        pytest.skip("under the interpreter the chunks run in [unmet], after its fallback")
    mixed = launch.endswith("-mixed")
    monkeypatch.setattr(fused_steps, "MIXED_NODES", 0 if mixed else 10**12)
    made = []

    class Spy(FusedBiCGStab):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append((self.dtype, self.persistent))

    monkeypatch.setattr(fused_steps, "FusedBiCGStab", Spy)
    launch = launch.removesuffix("-mixed")
    monkeypatch.setattr(fused_krylov, "ONE_LAUNCH", launch != "chunks")
    monkeypatch.setattr(sweeps, "INEXACT", 0.0)
    room = mw.Room(congestion=1.0, hamiltonian=mw.Power(q=1.5) if launch == "one-power"
                   else None)
    size = {"nx": 5, "nt": 2} if device == "cpu" else {"nx": 31, "nt": 20}
    common = dict(**size, tol=1e-10, backend="torch", device=device, dtype="float64",
                  progress=False, max_iter=2)
    rooms = [room, mw.Room(congestion=3.0, door_widths=(0.3, 0.15), sigma=0.2)]
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(sweeps, "fused_available", lambda backend, fused=fused: fused)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out[fused] = (mw.solve_2d_batch(rooms, **common) if launch == "batch"
                          else [mw.solve_2d(room, **common)])
        assert any(issubclass(x.category, mw.ConvergenceWarning) for x in w)
        unmet = [x for x in w if "did not run at once" in str(x.message)]
        assert bool(unmet) == (fused and launch == "unmet")
    assert ((torch.float32, True) in made) == mixed
    if launch == "unmet":   # in chunks, in float64
        assert (torch.float64, False) in made
    for a, b in zip(out[False], out[True], strict=True):
        assert b.extra["krylov_iterations"] > 0
        assert b.extra["newton_iterations"] == pytest.approx(a.extra["newton_iterations"],
                                                             rel=0.1)
        for k in ("U", "M", "outflow"):
            ref = getattr(a, k)
            assert np.max(np.abs(ref - getattr(b, k))) <= 1e-10 * (1 + np.max(np.abs(ref)))
        assert b.mass_error <= 1e-12


@pytest.mark.parametrize("mixed", [False, True])
def test_a_fused_batch_at_each_problem_s_accuracy_reaches_the_equilibria(device, monkeypatch,
                                                                          mixed):
    """Inexact Picard in a fused batch: the room without congestion asks accuracies far
    below the congested one's (more than the FP check's factor), each problem's Newton
    test and FP solves follow its own, and both reach the eager batch's equilibria (at a
    tolerance below float32's rounding, 6e-8, in mixed precision too). Under the
    interpreter a 7² grid (on a 5² one, every problem's Newton test at the loosest one's
    still converges), two time steps and a congestion of 1 (fewer Picard iterations than
    3): its time grows with every level of every iteration."""
    from mfgwork.numerics.fdm2d import fused_steps

    monkeypatch.setattr(fused_steps, "MIXED_NODES", 0 if mixed else 10**12)
    rooms = [mw.Room(congestion=0.0), mw.Room(congestion=1.0 if device == "cpu" else 3.0,
                                              door_widths=(0.3, 0.15))]
    size = {"nx": 7, "nt": 2} if device == "cpu" else {"nx": 31, "nt": 20}
    tol = 1e-8 if device == "cpu" else 1e-9
    common = dict(**size, tol=tol, backend="torch", device=device, dtype="float64",
                  progress=False)
    asked = []
    resolve = sweeps.Scheme2D.resolve

    def recorded(self, residual):
        asked.append(np.array(1.0 if residual is None else residual, ndmin=1))
        resolve(self, residual)

    monkeypatch.setattr(sweeps.Scheme2D, "resolve", recorded)
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(sweeps, "fused_available", lambda backend, fused=fused: fused)
        asked.clear()
        out[fused] = mw.solve_2d_batch(rooms, **common)
        spread = max(float(a.max() / a.min()) for a in asked if a.size == 2)
        assert spread > sweeps.KRYLOV_FAIL   # the loose problem's residual > fail · tight
    for a, b in zip(out[False], out[True], strict=True):
        assert a.converged and b.converged and b.residual <= tol
        assert np.max(np.abs(a.M - b.M)) <= 1e-7 * np.max(a.M)
        assert b.mass_error <= 1e-12


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA graphs")
def test_without_cuda_graphs_the_recordings_fall_back_to_eager_calls(device):
    """Asked for CUDA graphs where none can be recorded, the solver's chunks and the
    recorded steps say so once and give the eager results."""
    from mfgwork.numerics.fdm2d.fused_steps import _Recorded

    c, b = _system((2, 5, 6), device, seed=9)
    apply = _apply(c, False)
    with pytest.warns(RuntimeWarning, match="CUDA graph of the fused BiCGStab"):
        x, k = FusedBiCGStab(b.shape, b, False, 4, graphs=True).solve(
            c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    y, k_eager = FusedBiCGStab(b.shape, b, False, 4, graphs=False).solve(
        c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert k == k_eager and bool((x == y).all())
    with pytest.warns(RuntimeWarning, match="CUDA graph of the 2-D test step disabled"):
        step = _Recorded(lambda a: a * 2.0, [b], graphs=True, what="2-D test step")
    step.load(b + 1.0)
    step()
    assert bool((step.outputs == 2.0 * (b + 1.0)).all())
