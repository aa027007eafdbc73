"""The grid-spec language shared by sweeps and scans, and the one parameter type rule."""

from __future__ import annotations

import pytest

import mfgwork as mw
from mfgwork.workflows.specs import (
    SpecError,
    coerce_parameter,
    parse_spec,
    read_spec,
    signature_parameters,
)


@pytest.mark.parametrize("text", [
    "threshold: [0.4, 0.5]\nsigma: [0.3]\nthreshold: [0.9]",
    '{"threshold": [0.4], "sigma": [0.3], "threshold": [0.9]}',
    "threshold: {linspace: [0.3, 0.9, 3], linspace: [0, 1, 2]}",
])
def test_duplicate_keys_are_refused(text, tmp_path):
    with pytest.raises(SpecError, match="duplicate key 'threshold'|duplicate key 'linspace'"):
        read_spec(text)
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="duplicate key"):
        read_spec(path)


@pytest.mark.parametrize(("value", "default", "expected"), [
    (2, 1.0, 2.0), (2.5, 1.0, 2.5), (4, 3, 4), (4.0, 3, 4), (True, False, True),
    ("cuda", "cpu", "cuda"), ("anything", None, "anything"), (1, ..., 1)])
def test_type_rule_converts_within_a_kind(value, default, expected):
    out = coerce_parameter("p", value, default)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(("value", "default"), [
    ("1.0", 1.0), (2.5, 3), (True, 3), (1, False), (3, "a"), (None, 1.0), (True, 1.0)])
def test_type_rule_refuses_other_kinds(value, default):
    with pytest.raises(mw.ParameterError, match=r"p=.* is invalid: the notebook expects"):
        coerce_parameter("p", value, default)


def test_problem_signature_declares_scan_parameters():
    declared = signature_parameters(mw.SantaFeBar)
    assert declared == {"threshold": 0.6, "sigma": 0.5, "T": 10.0, "theta_max": 5.0,
                        "good": 10.0, "bad": -5.0, "eps": 0.05, "hamiltonian": None,
                        "objective": "equilibrium"}

    def factory(strength: float, n: int = 2, *, label: str = "a", **extra: float) -> None:
        return None

    assert signature_parameters(factory) == {"strength": 0.0, "n": 2, "label": "a"}
    spec = parse_spec({"strength": [1, 2], "n": 3.0}, None, signature_parameters(factory),
                      reserved=(), owner="factory")
    assert spec.fixed == {"n": 3} and spec.axes == ((("strength",), ((1.0,), (2.0,))),)
    with pytest.raises(SpecError, match="unknown parameter.*'speed'.*factory has label, n, "
                                        "strength"):
        parse_spec({"speed": [1]}, None, signature_parameters(factory), reserved=(),
                   owner="factory")
