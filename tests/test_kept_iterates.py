"""The kept iterates of the fixed-point loop (best certified, lowest): rows taken from other
iterates by host masks, never writing an evaluation's arrays, and the mixing's small solves
on torch (no host synchronisation) against NumPy."""

import numpy as np
import pytest
import torch

from mfgwork.numerics.iteration import Anderson, _Iterate


def _namespace(kind):
    import array_api_compat

    return array_api_compat.array_namespace(np.zeros(1) if kind == "numpy" else torch.zeros(1))


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_takes_match_a_row_by_row_reference_and_never_write_their_sources(kind):
    rng = np.random.default_rng(3)
    xp = _namespace(kind)
    B, shape = 6, (4, 5)
    as_array = (lambda a: a) if kind == "numpy" else torch.from_numpy
    best, lowest = _Iterate(None), _Iterate(None)
    ref_best, ref_lowest = np.full((B, *shape), np.nan), np.full((B, *shape), np.nan)
    evaluations = []
    for step in range(12):
        U = rng.standard_normal((B, *shape))
        evaluations.append((U.copy(), as_array(U)))
        improved = rng.random(B) < (1.0 if step == 0 else 0.5)
        if step % 4 == 3:
            improved[:] = True   # every row: a reference to the evaluation
        better = rng.random(B) < 0.4
        from_lowest = better & (rng.random(B) < 0.5)
        if lowest.U is not None:   # best first, from the previous iterate or the lowest one
            prev = evaluations[-2][1]
            best.take(better & ~from_lowest, prev, prev, xp)
            best.take(from_lowest, lowest.U, lowest.M, xp, shared=lowest.owned)
            ref_best[better & ~from_lowest] = evaluations[-2][0][better & ~from_lowest]
            ref_best[from_lowest] = ref_lowest[from_lowest]
        lowest.take(improved, evaluations[-1][1], evaluations[-1][1], xp)
        ref_lowest[improved] = U[improved]
        for slot, ref in ((best, ref_best), (lowest, ref_lowest)):
            if slot.U is not None:
                rows = ~np.isnan(ref[:, 0, 0])
                np.testing.assert_array_equal(np.asarray(slot.U)[rows], ref[rows])
                np.testing.assert_array_equal(np.asarray(slot.M)[rows], ref[rows])
    for original, array in evaluations:   # the evaluations' own arrays are untouched
        np.testing.assert_array_equal(np.asarray(array), original)


def test_a_shared_source_is_copied_so_later_row_writes_do_not_leak():
    xp = _namespace("numpy")
    lowest, best = _Iterate(None), _Iterate(None)
    a, b = np.zeros((3, 2)), np.ones((3, 2))
    lowest.take(np.array([True, True, True]), a, a, xp)
    lowest.take(np.array([True, False, False]), b, b, xp)   # lowest now owns its rows
    assert lowest.owned
    best.take(np.array([True, True, True]), lowest.U, lowest.M, xp, shared=lowest.owned)
    lowest.take(np.array([False, True, False]), b, b, xp)
    np.testing.assert_array_equal(best.U, [[1, 1], [0, 0], [0, 0]])
    np.testing.assert_array_equal(a, 0.0)


def test_the_batched_mixing_on_torch_matches_numpy():
    rng = np.random.default_rng(5)
    B, n = 4, 30
    A = 0.5 * rng.standard_normal((B, n, n)) / np.sqrt(n)
    c = rng.standard_normal((B, n))

    def phi(z, xp):
        return xp.tanh(xp.squeeze(A_ @ z[..., None], axis=-1) + c_)

    steps = {}
    for kind in ("numpy", "torch"):
        xp = _namespace(kind)
        A_, c_ = (A, c) if kind == "numpy" else (torch.from_numpy(A), torch.from_numpy(c))
        mixer = Anderson(depth=3, mixing=0.5).start(batched=True)
        z = c_ * 0.0
        for k in range(1, 9):
            z = mixer.update(k, z, phi(z, xp), xp)
        steps[kind] = np.asarray(z)
    np.testing.assert_allclose(steps["torch"], steps["numpy"], rtol=0, atol=1e-12)
