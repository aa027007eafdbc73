"""The Hamiltonian protocol: the shipped models and the checks that refuse bad ones."""

import numpy as np
import pytest

import mfgwork.problems.hamiltonians as hm
from mfgwork.core.errors import ParameterError

X = np.linspace(-5.0, 5.0, 201)
SHIPPED = [hm.Quadratic(), hm.Power(1.5), hm.Power(2.0), hm.Power(3.0), hm.Congestion(1.0, 0.5),
           hm.Congestion(0.1, 1.0)]


@pytest.mark.parametrize("H", SHIPPED, ids=repr)
def test_shipped_models_pass_their_checks_and_derivatives_match_differences(H):
    H.check(X)
    p, m = np.linspace(-3.0, 3.0, 41) + 0.01, np.full(41, 0.7)
    d = 1e-6
    slope = (H.value(0.0, p + d, m, np) - H.value(0.0, p - d, m, np)) / (2 * d)
    curvature = (H.dp(0.0, p + d, m, np) - H.dp(0.0, p - d, m, np)) / (2 * d)
    dm = (H.value(0.0, p, m + d, np) - H.value(0.0, p, m - d, np)) / (2 * d)
    np.testing.assert_allclose(H.dp(0.0, p, m, np), slope, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H.dpp(0.0, p, m, np), curvature, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(H.dm(0.0, p, m, np), dm, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("H", SHIPPED, ids=repr)
def test_numerical_hamiltonian_is_monotone_and_consistent(H):
    q = np.linspace(-2.0, 2.0, 9)
    value, d_left, d_right = H.numerical(0.0, q, q, 0.5, np)
    np.testing.assert_allclose(value, H.value(0.0, q, 0.5, np), rtol=1e-14)  # consistency
    assert (d_left >= 0).all() and (d_right <= 0).all()                       # monotone


def test_quadratic_numerical_hamiltonian_is_the_godunov_formula():
    a, b = np.array([1.0, -1.0, 0.5]), np.array([-2.0, 1.0, -0.5])
    value, _, _ = hm.Quadratic().numerical(0.0, a, b, None, np)
    np.testing.assert_array_equal(value, 0.5 * (np.maximum(a, 0) ** 2 + np.minimum(b, 0) ** 2))


class _NotSmallestAtZero(hm.Hamiltonian):
    def value(self, x, p, m, xp):
        return (p - 1.0) ** 2

    def dp(self, x, p, m, xp):
        return 2.0 * (p - 1.0)


class _WrongDerivative(hm.Quadratic):
    def dp(self, x, p, m, xp):
        return 2.0 * p


class _NotConvex(hm.Hamiltonian):
    def value(self, x, p, m, xp):
        return xp.abs(p) ** 0.5

    def dp(self, x, p, m, xp):
        return 0.5 * xp.sign(p) * xp.abs(p) ** -0.5


class _NotFinite(hm.Quadratic):
    def value(self, x, p, m, xp):
        return xp.exp(p * p)

    def dp(self, x, p, m, xp):
        return 2 * p * xp.exp(p * p)


@pytest.mark.parametrize("H, words", [(_NotSmallestAtZero(), "smallest at p = 0"),
                                      (_WrongDerivative(), "dp does not match"),
                                      (_NotConvex(), "not"),
                                      (_NotFinite(), "not finite")])
def test_bad_hamiltonians_are_refused_with_the_reason(H, words):
    with pytest.raises(ParameterError, match=words):
        hm.check_hamiltonian(H, X)


@pytest.mark.parametrize("make, words", [(lambda: hm.Power(1.0), "q=1"),
                                         (lambda: hm.Power(3.5), "q=3.5"),
                                         (lambda: hm.Congestion(0.0, 0.5), "c=0"),
                                         (lambda: hm.Congestion(1.0, 1.5), "alpha=1.5")])
def test_parameters_out_of_range_are_named(make, words):
    with pytest.raises(ParameterError, match=words):
        make()


def test_a_non_hamiltonian_is_refused():
    with pytest.raises(ParameterError, match="hamiltonian="):
        hm.check_hamiltonian(lambda p: p * p, X)


def test_a_shipped_model_is_checked_once_per_domain_a_subclass_every_time(monkeypatch):
    calls = []
    check = hm.Hamiltonian.check
    monkeypatch.setattr(hm.Hamiltonian, "check", lambda self, x: calls.append(
        type(self).__name__) or check(self, x))
    hm._check_shipped.cache_clear()
    for x in (X, X, X + 1.0):
        hm.check_hamiltonian(hm.Power(1.7), x)
    assert calls == ["Power", "Power"]   # equal models on one domain share the check
    for _ in range(2):   # a subclass (which may be changed) is checked, and refused, each time
        with pytest.raises(ParameterError, match="not finite"):
            hm.check_hamiltonian(_NotFinite(), X)
    assert calls[2:] == ["_NotFinite", "_NotFinite"]
