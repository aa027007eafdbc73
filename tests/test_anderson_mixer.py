"""Anderson mixing (the in-place difference buffers) against the textbook formula."""

import numpy as np

from mfgwork.numerics.iteration import Anderson


def reference_steps(phi, z, depth, beta, lam, steps):
    """Type-II Anderson: γ = argmin ‖r − ΔR γ‖² + λ tr(ΔRᵀΔR) ‖γ‖²,
    z ← z + β r − (ΔZ + β ΔR) γ over the last ``depth`` differences."""
    zs, rs, out = [], [], []
    for _ in range(steps):
        r = phi(z) - z
        zs, rs = (zs + [z])[-depth - 1:], (rs + [r])[-depth - 1:]
        step = z + beta * r
        if len(zs) >= 2:
            dZ, dR = np.diff(np.array(zs), axis=0).T, np.diff(np.array(rs), axis=0).T
            gram = dR.T @ dR
            gamma = np.linalg.solve(gram + lam * np.trace(gram) * np.eye(len(gram)), dR.T @ r)
            step = step - (dZ + beta * dR) @ gamma
        out.append(step)
        z = step
    return out


def test_anderson_matches_the_textbook_formula_past_its_depth():
    rng = np.random.default_rng(1)
    n, depth = 40, 3
    A = 0.6 * rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)

    def phi(z):
        return A @ z + b

    scheme = Anderson(depth=depth, mixing=0.5, regularization=1e-6)
    mixer = scheme.start(False)
    z0 = np.zeros(n)
    expected = reference_steps(phi, z0, depth, 0.5, 1e-6, 8)
    z = z0
    for k, want in enumerate(expected):
        z = mixer.update(k, z, phi(z), np)
        assert np.max(np.abs(z - want)) <= 1e-12 * (1 + np.max(np.abs(want))), k
    assert np.linalg.norm(phi(z) - z) < 0.05 * np.linalg.norm(b)
