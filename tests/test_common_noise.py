"""Common noise (``mw.CommonNoise``): the conditional equilibrium on the scenario tree against
the model's own equilibria where the noise is no noise, the tree's tangent against finite
differences, the certificate, the backends, and hostile inputs."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.numerics.scenario_tree import TreeScheme, TreeTangent

SMALL = {"nx": 41, "nt": 24}
SHOCK = {"transition": [[0.8, 0.2], [0.3, 0.7]], "depth": 3}


def shock(**kw):
    return mw.CommonNoise(mw.SantaFeBar(), "good", kw.pop("values", [12.0, 8.0]),
                          **(SHOCK | kw))


@pytest.fixture(scope="module")
def solved():
    return mw.solve(shock(), **SMALL, tol=1e-10)


def test_the_noiseless_limit_is_the_model():
    """Every state alike: each scenario is the model's equilibrium, to round-off."""
    res = mw.solve(shock(values=[10.0, 10.0]), **SMALL, tol=1e-12)
    ref = mw.solve(mw.SantaFeBar(), **SMALL, tol=1e-12)
    assert res.converged and res.M.shape == (8, 25, 41)
    assert np.max(np.abs(res.M - ref.M[None])) < 1e-11
    assert np.max(np.abs(res.U - ref.U[None])) < 1e-10


def test_a_chain_that_never_moves_is_the_model_of_each_state():
    """With the identity as transition the first state stays: the scenario that keeps it is
    the deterministic equilibrium of that state (the other scenarios have probability 0 and
    still their conditional equilibrium)."""
    res = mw.solve(shock(transition=np.eye(2)), **SMALL, tol=1e-12)
    assert res.converged
    assert res.arrays["probability"].tolist() == [0.5, 0, 0, 0, 0, 0, 0, 0.5]
    for scenario, good in ((0, 12.0), (7, 8.0)):
        ref = mw.solve(mw.SantaFeBar(good=good), **SMALL, tol=1e-12)
        assert np.max(np.abs(res.M[scenario] - ref.M)) < 1e-11
        assert np.max(np.abs(res.U[scenario] - ref.U)) < 1e-10


def test_the_tree_tangent_is_the_derivative_of_the_scheme():
    """D v by the compiled tree sweeps against central differences of the best response on
    the tree, and diag(π) D symmetric (the Hessian of the expected potential)."""
    noise = shock()
    scheme = TreeScheme(noise, 31, 18, get_backend("numpy"))
    rng = np.random.default_rng(3)
    tree = noise.tree
    z = np.clip(0.55 + 0.1 * rng.standard_normal((tree.nodes, scheme.steps)), 0, 1)
    U, M, _ = scheme.respond(z)
    product = TreeTangent(scheme, U, M)

    chi = scheme.potentials.chi
    y = np.where(tree.node_states[:, None] == 0, noise.states[0].price(z),
                 noise.states[1].price(z))

    def observed(prices):
        scheme.coupling.running_cost = lambda _: -prices[..., None] * chi
        try:
            return scheme.respond(z)[2]
        finally:
            del scheme.coupling.running_cost

    v, w = rng.standard_normal((2, *z.shape))
    h = 1e-6
    fd = (observed(y + h * v) - observed(y - h * v)) / (2 * h)
    Dv = product(v)
    assert np.max(np.abs(Dv - fd)) < 1e-6 * np.max(np.abs(fd))
    pi = tree.probability[:, None]
    assert np.sum(pi * w * Dv) == pytest.approx(np.sum(pi * v * product(w)), rel=1e-10)


def test_the_certificate_is_one_best_response_on_every_scenario(solved):
    res = solved
    assert res.converged and res.status == "converged"
    assert res.residual == pytest.approx(np.max(res.arrays["scenario_residual"]))
    assert res.check() == pytest.approx(res.residual, rel=1e-6, abs=1e-14)
    assert res.residual <= 1e-10
    assert res.mass_error < 1e-12 and np.min(res.M) >= 0
    p = res.arrays["probability"]
    assert p.sum() == pytest.approx(1.0)
    states = res.arrays["noise_state"]
    law = 0.5 * np.prod([np.array(SHOCK["transition"])[states[:, k - 1], states[:, k]]
                         for k in range(1, 3)], axis=0)
    np.testing.assert_allclose(p, law)
    assert res.labels["scenario"][1] == "12-12-8" and len(res.labels["epoch"]) == 3


def test_a_more_attractive_bar_draws_more_patrons(solved):
    """In the first epoch, the scenarios that start with good = 12 have the higher
    attendance; the summary is the scenarios' mean under their law."""
    A = solved.attendance
    first = slice(1, 8)
    start = solved.arrays["noise_state"][:, 0]
    assert np.all(A[start == 0, first].min(axis=0) > A[start == 1, first].max(axis=0))
    means = A.mean(axis=1)
    assert solved.summary["mean_attendance"] == pytest.approx(
        float(solved.arrays["probability"] @ means))


def test_nt_is_whole_epochs_and_the_estimate_comes_first():
    noise = shock()
    assert noise.steps(24) == 24 and noise.steps(25) == 27
    est = noise.estimate(41, 25)
    assert est["scenarios"] == 8 and est["nodes"] == 14 and est["cells"] == 14 * 9 * 41
    res = mw.solve(noise, nx=41, nt=25, tol=1e-6)
    assert res.params["nt"] == 27 and res.M.shape[1] == 28 and res.converged


def test_the_backends_agree(solved):
    on_torch = mw.solve(shock(), **SMALL, tol=1e-10, backend="torch")
    assert on_torch.backend == "torch" and on_torch.converged
    assert np.max(np.abs(mw.to_numpy(on_torch.M) - solved.M)) < 1e-10
    assert np.max(np.abs(mw.to_numpy(on_torch.U) - solved.U)) < 1e-9
    with pytest.warns(UserWarning, match="float32"):
        emulated = mw.solve(shock(), **SMALL, backend=mw.mps_emulation())
    assert emulated.dtype == "float32" and emulated.converged
    assert np.max(np.abs(mw.to_numpy(emulated.M) - solved.M)) < 1e-4


def test_save_load_and_check_again(solved, tmp_path):
    back = mw.load(solved.save(tmp_path / "run"))
    assert back.dims == ("scenario", "t", "θ") and back.labels == solved.labels
    np.testing.assert_array_equal(back.M, solved.M)
    assert back.check() == pytest.approx(solved.residual, rel=1e-6, abs=1e-14)
    figures = mw.plots.standard_figures(solved)
    assert set(figures) == {"attendance_fan", "convergence"}


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"parameter": "colour"}, r"parameter='colour' is invalid: must be one of \["),
    ({"values": [12.0, -9.0]}, r"good=-9.0 is invalid"),
    ({"values": "12"}, r"values='12' is invalid: must be a sequence"),
    ({"transition": [[0.5, 0.6], [0.5, 0.5]]}, r"transition=.* is invalid: entries must be"),
    ({"transition": [[1.0]]}, r"transition of shape \(1, 1\) is invalid: must have shape"),
    ({"initial": [0.2, 0.2]}, r"initial=.* is invalid"),
    ({"depth": 0}, r"depth=0 is invalid"),
    ({"depth": 17}, r"depth=17 is invalid with 2 states: 2\^17 scenarios exceed 65536"),
    ({"names": ["a", "a"]}, r"names=\['a', 'a'\] is invalid: must be 2 distinct labels"),
    ({"names": ["", "b"]}, r"names=\['', 'b'\] is invalid: .* none empty"),
    ({"names": ["a", "a-a"]}, r"names=\['a', 'a-a'\] is invalid: .* two scenarios alike"),
])
def test_bad_noise_is_refused_naming_what_to_change(kwargs, pattern):
    args = {"parameter": "good", "values": [12.0, 8.0]} | SHOCK
    args |= kwargs
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.CommonNoise(mw.SantaFeBar(), args.pop("parameter"), args.pop("values"), **args)


def test_every_scenario_has_a_label_of_its_own():
    noise = mw.CommonNoise(mw.SantaFeBar(), "bad", [-5.0, -8.0], **SHOCK)
    assert noise.names == ("-5", "-8") and len(set(noise.labels)) == noise.scenarios == 8
    assert shock(names=["a", "b-c"]).labels[:2] == ("a-a-a", "a-a-b-c")


@pytest.mark.parametrize(("args", "pattern"), [
    ({"nx": "a"}, r"^nx='a' \(str\) is invalid"), ({"nx": 2}, r"^nx=2 is invalid")])
def test_the_estimate_checks_its_arguments_as_the_solve_does(args, pattern):
    with pytest.raises(mw.ParameterError, match=pattern):
        shock().estimate(**args)


def test_what_the_tree_cannot_solve_is_refused_before_any_work(monkeypatch):
    module = importlib.import_module("mfgwork.common_noise")

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(module, "TreeScheme", no_work)
    generic = mw.MFGProblem(-1.0, 1.0, 1.0, 0.5, m0=lambda x: 1 + 0 * x,
                            g=lambda x: 0 * x, f=lambda t, x, m: m)
    with pytest.raises(mw.ParameterError, match="rebuilt from its parameters"):
        mw.CommonNoise(generic, "sigma", [0.5], transition=[[1.0]], depth=2)
    with pytest.raises(mw.ParameterError, match="the noise may move the coupling only"):
        mw.solve(mw.CommonNoise(mw.SantaFeBar(), "sigma", [0.5, 0.3], **SHOCK), **SMALL)
    congested = mw.SantaFeBar(hamiltonian=mw.Congestion(0.5))
    with pytest.raises(mw.ParameterError, match="scalar observed path with a potential"):
        mw.solve(mw.CommonNoise(congested, "good", [12.0, 8.0], **SHOCK), **SMALL)
    planner = mw.SantaFeBar(objective="social")
    with pytest.raises(mw.ParameterError, match="objective='social' is invalid"):
        mw.solve(mw.CommonNoise(planner, "good", [12.0, 8.0], **SHOCK), **SMALL)
    with pytest.raises(mw.ParameterError, match="depth too large: the 8 scenarios"):
        mw.solve(shock(), **SMALL, max_memory="100 KiB")
    with pytest.raises(mw.ParameterError, match="noise=.* is invalid: must be an "
                                                "mfgwork.CommonNoise"):
        mw.solve_common_noise(mw.SantaFeBar())
    with pytest.raises(mw.ParameterError, match="n_particles=10 is invalid for a CommonNoise"):
        mw.solve(shock(), n_particles=10)


def test_threads_share_a_level_without_changing_the_product(monkeypatch):
    """The nodes of a level split among threads give the serial product exactly."""
    module = importlib.import_module("mfgwork.numerics.scenario_tree")
    noise = shock(depth=5)
    scheme = TreeScheme(noise, 21, 10, get_backend("numpy"))
    z = np.full((noise.tree.nodes, scheme.steps), 0.6)
    U, M, _ = scheme.respond(z)
    v = np.random.default_rng(5).standard_normal(z.shape)
    monkeypatch.setattr(module, "threads", lambda: 1)
    serial = TreeTangent(scheme, U, M)(v)
    monkeypatch.setattr(module, "threads", lambda: 3)
    np.testing.assert_array_equal(TreeTangent(scheme, U, M)(v), serial)
