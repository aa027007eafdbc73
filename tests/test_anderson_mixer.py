"""Anderson mixing (the in-place difference buffers) against the textbook formula."""

import numpy as np
import pytest

from mfgwork.numerics.iteration import Anderson


def reference_steps(phi, z, depth, beta, lam, steps, columns=False):
    """Type-II Anderson: γ = argmin ‖r − ΔR γ‖² + λ tr(ΔRᵀΔR) ‖γ‖² (``columns``:
    + λ Σ_j ‖ΔR_j‖² γ_j²), z ← z + β r − (ΔZ + β ΔR) γ over the last ``depth``
    differences."""
    zs, rs, out = [], [], []
    for _ in range(steps):
        r = phi(z) - z
        zs, rs = (zs + [z])[-depth - 1:], (rs + [r])[-depth - 1:]
        step = z + beta * r
        if len(zs) >= 2:
            dZ, dR = np.diff(np.array(zs), axis=0).T, np.diff(np.array(rs), axis=0).T
            gram = dR.T @ dR
            shift = np.diag(np.diag(gram)) if columns else np.trace(gram) * np.eye(len(gram))
            gamma = np.linalg.solve(gram + lam * shift, dR.T @ r)
            step = step - (dZ + beta * dR) @ gamma
        out.append(step)
        z = step
    return out


@pytest.mark.parametrize("columns", [False, True])
def test_anderson_matches_the_textbook_formula_past_its_depth(columns):
    """The mixer against the formula, regularized by the whole history or (``columns``,
    ``column_scaling``) each difference against its own size."""
    rng = np.random.default_rng(1)
    n, depth = 40, 3
    A = 0.6 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)

    def phi(z):
        return A @ z + b

    scheme = Anderson(depth=depth, mixing=0.5, regularization=1e-6, column_scaling=columns)
    mixer = scheme.start(False)
    z0 = np.zeros(n)
    expected = reference_steps(phi, z0, depth, 0.5, 1e-6, 8, columns=columns)
    z = z0
    for k, want in enumerate(expected):
        z = mixer.update(k, z, phi(z), np)
        assert np.max(np.abs(z - want)) <= 1e-12 * (1 + np.max(np.abs(want))), k
    assert np.linalg.norm(phi(z) - z) < 0.05 * np.linalg.norm(b)


def test_scaled_columns_outgrow_a_far_start():
    """From a start far from the fixed point, whose first differences are huge, the mixing
    with each difference regularized against its own size converges in about half the
    steps that the regularization scaled by the whole history takes."""
    rng = np.random.default_rng(1)
    n = 40
    A = 0.05 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    steps = {}
    for columns in (False, True):
        mixer = Anderson(depth=8, mixing=0.5, column_scaling=columns).start()
        z = np.zeros(n)
        z[0] = 1e6
        for k in range(80):
            if np.linalg.norm(A @ z + b - z) <= 1e-10 * np.linalg.norm(b):
                break
            z = mixer.update(k, z, A @ z + b, np)
        steps[columns] = k
    assert steps[True] < 0.6 * steps[False] and steps[True] < 25, steps


def test_the_kept_gram_matrix_is_the_historys_through_restarts_and_wraparound():
    """Batched (torch) mixing past its depth, with restarts (a problem whose residual jumps):
    the Gram matrix kept a row and a column at a time is ΔRᵀΔR of the history held."""
    torch = pytest.importorskip("torch")
    xp = pytest.importorskip("array_api_compat.torch")
    rng = np.random.default_rng(3)
    n, depth = 30, 3
    A = torch.as_tensor(0.7 * rng.standard_normal((2, n, n)) / np.sqrt(n))
    b = torch.as_tensor(rng.standard_normal((2, n)))
    mixer = Anderson(depth=depth, mixing=0.5, restart=1.5).start(True)
    z = torch.zeros(2, n, dtype=torch.float64)
    restarts = 0
    for k in range(12):
        gz = (A @ z[..., None])[..., 0] + b
        if k in (4, 8):
            gz = gz + 10.0   # a jump: both problems restart from their best iterate
        z = mixer.update(k, z, gz, xp)
        s = mixer._state
        restarts += int((s["age"] == 0).sum()) if k > 0 else 0
        if "dR" in s:
            want = s["dR"] @ s["dR"].transpose(1, 2)
            assert torch.allclose(s["gram"], want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
    assert restarts >= 2 and len(mixer._state["order"]) == depth
