"""A model is one definition: derivatives derived from ``value`` (checked against finite
differences), the compiled CPU scheme built from it (checked against the array path), models
that read m undeclared refused at definition time, untraceable models kept on the array path,
the compiled module reused across processes, and no ½|p|² literal or type gate left in the
converted numerics."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers import Crowded, Current

import mfgwork as mw
from mfgwork.core.errors import ParameterError
from mfgwork.numerics.fdm import kernels
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

ROOT = Path(__file__).resolve().parents[1]




class UserHalfSquare(mw.Hamiltonian):
    """½|p|² written by a user: value only."""

    def value(self, x, p, m, xp):
        return p * p / 2

    def __repr__(self) -> str:  # a stable test id (pytest-xdist workers compare them)
        return "UserHalfSquare()"




MODELS = [mw.Quadratic(), mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5),
          mw.Congestion(0.2, 1.0), Current(), UserHalfSquare()]


def _samples():
    rng = np.random.default_rng(5)
    p = np.concatenate([-np.logspace(-2, 1, 20), np.logspace(-2, 1, 20)]) * (1 + 1e-3 *
                                                                             rng.random(40))
    return rng.uniform(-1.0, 1.0, p.size), p, rng.uniform(0.05, 3.0, p.size)


@pytest.mark.parametrize("H", [*MODELS, Crowded()], ids=repr)
def test_derived_derivatives_match_finite_differences(H):
    point = dict(zip("xpm", _samples(), strict=True))
    step = 1e-6
    for name, of, var in (("dp", H.value, "p"), ("dpp", H.dp, "p"), ("dm", H.value, "m")):
        if name == "dm" and not H.depends_on_m:
            assert np.all(H.dm(*point.values(), np) == 0.0)
            continue
        derived = H.traced().array_function(name)(*point.values(), np)
        up, down = (point | {var: point[var] + s} for s in (step, -step))
        central = (of(*up.values(), np) - of(*down.values(), np)) / (2 * step)
        assert np.allclose(derived, central, rtol=1e-6, atol=1e-6), name


def _sweeps(H, kernel, n=41):
    grid = mw.Grid(-1.0, 2.0, n, 1.0, n - 1)
    rng = np.random.default_rng(3)
    F = 2 * rng.standard_normal((grid.nt, grid.nx))
    m0 = np.exp(-4 * (grid.x - 0.3) ** 2)
    density = 0.5 + rng.random((grid.nt, grid.nx)) if H.depends_on_m else None
    fd = FiniteDifferences(grid, 0.2, mw.get_backend("numpy"), hamiltonian=H, kernels=kernel)
    U = fd.solve_hjb(np.sin(2 * grid.x), F, None, density)
    return U, fd.solve_fp(U, m0 / (m0 @ grid.weights), density), fd.kernels


@pytest.mark.parametrize("H", MODELS, ids=repr)
def test_every_model_runs_the_compiled_loops_as_the_array_path(H):
    U, M, used = _sweeps(H, None)
    assert used is kernels.COMPILED_LOOPS
    U2, M2, _ = _sweeps(H, kernels.HOST_ARRAYS)
    for a, b in ((U, U2), (M, M2)):
        assert np.max(np.abs(a - b)) <= 1e-10 * np.max(np.abs(b))


def test_fields_are_arguments_of_one_structure():
    assert mw.Power(1.5).traced().structure is mw.Power(3.0).traced().structure
    assert mw.Power(1.5).traced().values == (1.5,)
    assert mw.Quadratic.same_model(UserHalfSquare())
    assert not mw.Quadratic.same_model(mw.Power(2.0 + 1e-9))


def test_fields_in_slots_or_set_in_init_are_arguments_too():
    @dataclass(frozen=True, slots=True)
    class Slotted(mw.Hamiltonian):
        k: float = 1.0

        def value(self, x, p, m, xp):
            return 0.5 * self.k * p * p

    class Plain(mw.Hamiltonian):
        def __init__(self, k):
            self.k = k

        def value(self, x, p, m, xp):
            return self.k * p * p

    p = np.linspace(-2.0, 2.0, 5)
    for H in (Slotted(3.0), Plain(3.0)):
        assert H.traced().values == (3.0,)
        assert np.allclose(H.dp(None, p, None, np), H.value(None, 1.0, None, np) * 2 * p)


def test_a_model_reading_m_undeclared_is_refused_at_definition():
    class Undeclared(mw.Hamiltonian):
        def value(self, x, p, m, xp):
            return 0.5 * p * p / (1.0 + m * m)

    with pytest.raises(ParameterError, match="reads m .* depends_on_m = True"):
        mw.MFGProblem(x_min=-1.0, x_max=1.0, T=1.0, sigma=0.5, m0=lambda x: 1.0 + 0 * x,
                      g=lambda x: 0 * x, f=lambda t, x, m: m, hamiltonian=Undeclared())


def test_a_wrong_hand_written_derivative_is_refused():
    @dataclass(frozen=True)
    class WrongCurvature(Current):
        def dpp(self, x, p, m, xp):
            return 2.0 * super().dpp(x, p, m, xp)

    with pytest.raises(ParameterError, match="its dpp does not match the derivative"):
        WrongCurvature().check(np.linspace(-1, 1, 11))
    Current().check(np.linspace(-1, 1, 11))


def test_an_untraceable_model_keeps_the_array_path_or_is_refused():
    class Opaque(mw.Hamiltonian):   # float() of its argument: not traceable
        def value(self, x, p, m, xp):
            return 0.5 * p * p if isinstance(p, np.ndarray) else float(p)

    with pytest.raises(ParameterError, match="cannot be traced .* define dp and dpp"):
        Opaque().check(np.linspace(-1, 1, 11))

    class OpaqueWithDerivatives(Opaque):
        def dp(self, x, p, m, xp):
            return p

        def dpp(self, x, p, m, xp):
            return 1.0 + 0.0 * p

    with pytest.warns(UserWarning, match="cannot be traced"):
        H = OpaqueWithDerivatives()
        assert kernels.fdm_kernels(mw.get_backend("numpy"), H) is kernels.HOST_ARRAYS
    H.check(np.linspace(-1, 1, 11))


_PROBE = """
import json, numpy as np, mfgwork as mw
from mfgwork.numerics.fdm import numba_kernels
module, prm = numba_kernels.compiled_model(mw.Power(1.5))
U, mu = np.zeros((3, 5)), np.ones((3, 5))
module.fp_sweep(U, mu, np.zeros((1, 5)), np.linspace(-1, 1, 5), prm, 0.1, 0.5, 0.5, np.ones(5))
stats = module.fp_sweep.stats
print(json.dumps({"hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values()), "file": module.__file__}))
"""


def test_the_compiled_model_is_loaded_by_a_second_process(tmp_path):
    env = os.environ | {"MFGWORK_MODEL_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_CACHE_DIR", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                                      capture_output=True, text=True).stdout)
            for _ in range(2)]
    assert runs[0]["misses"] == 1 and runs[0]["hits"] == 0       # compiled, written
    assert runs[1]["misses"] == 0 and runs[1]["hits"] == 1       # loaded
    assert Path(runs[0]["file"]).parent == tmp_path == Path(runs[1]["file"]).parent


_WARM = """
import json, sys, mfgwork as mw
res = [mw.solve(mw.SantaFeBar(hamiltonian=h), nx=41, nt=41, tol=1e-6, backend="torch",
                device="cpu", progress=False) for h in (mw.Power(1.5), mw.Congestion())]
print(json.dumps({"sympy": "sympy" in sys.modules, "U": [r.U.tolist() for r in res],
                  "converged": [bool(r.converged) for r in res]}))
"""


def test_a_process_whose_cache_holds_the_models_never_imports_sympy(tmp_path):
    """The structures (keys, flags, array code) are read from the model cache under the hash
    of the recorded operations: SymPy runs in the first process only, and an entry that is
    damaged, or whose H is not the model's, is derived and written again, with the same
    results every time (one process meets both entries, one of each model: each is
    rewritten, and the results are those of the models' own H)."""
    env = os.environ | {"MFGWORK_MODEL_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}

    def run() -> dict:
        return json.loads(subprocess.run([sys.executable, "-c", _WARM], env=env, check=True,
                                         capture_output=True, text=True).stdout)

    first, second = run(), run()
    assert first["sympy"] and not second["sympy"]
    entries = sorted(tmp_path.glob("mfgwork_structure_*.json"))
    assert len(entries) == 2
    entries[0].write_text('{"names": ["q"], "key": 3')     # damaged: derived again
    changed = json.loads(entries[1].read_text())   # valid, but its H is not the model's
    written = changed["sources"]["value"]
    changed["sources"]["value"] = written.replace("return", "return 2.0 *")
    entries[1].write_text(json.dumps(changed))
    third = run()
    assert third["sympy"] and json.loads(entries[0].read_text())["key"]
    assert json.loads(entries[1].read_text())["sources"]["value"] == written
    for later in (second, third):
        assert later["converged"] == first["converged"] == [True, True]
        assert later["U"] == first["U"]


def test_a_generated_module_is_found_by_name_and_a_damaged_one_written_again(tmp_path,
                                                                          monkeypatch):
    """A module written by an earlier process is imported without generating its source;
    one changed or damaged from outside (its digest line does not match, or it does not
    import) is generated and written again."""
    from mfgwork.numerics.fdm import numba_kernels

    monkeypatch.setenv("MFGWORK_MODEL_CACHE", str(tmp_path))
    made = []

    def load():
        return numba_kernels.load_cached({}, "key", lambda: made.append(1) or "VALUE = 42\n",
                                         "mfgwork_probe", lambda: ("template",))

    assert load().VALUE == 42 and made == [1]
    assert load().VALUE == 42 and made == [1]          # found by its name: not generated
    (path,) = tmp_path.glob("mfgwork_probe_*.py")
    signed = path.read_text()
    for damage in ("garbage (\n", signed.replace("42", "43")):   # broken, or changed
        path.write_text(damage)
        assert load().VALUE == 42 and path.read_text() == signed
    assert made == [1, 1, 1]


def test_the_recorded_operations_name_the_structure():
    """The same operations give one name, and a field's sign, a constant, an operation or the
    order of operands another; a branch on a field is not followed (SymPy decides)."""
    from mfgwork.problems import recording

    def name(value, **fields):
        class Model:
            pass

        model = Model()
        for k, node in recording.placeholders(fields).items():
            setattr(model, k, node)
        return recording.record(lambda self, x, p, m, xp: value(self, p, m, xp), model)

    power = name(lambda s, p, m, xp: xp.abs(p) ** s.q / s.q, q=1.5)
    assert power == name(lambda s, p, m, xp: xp.abs(p) ** s.q / s.q, q=3.0)
    assert power != name(lambda s, p, m, xp: xp.abs(p) ** s.q / s.q, q=-1.0)
    assert power != name(lambda s, p, m, xp: xp.abs(p) ** s.q * s.q, q=1.5)
    half = name(lambda s, p, m, xp: p * p / 2)
    assert half != name(lambda s, p, m, xp: p * p / 2.0)       # (int and float differ)
    assert half != name(lambda s, p, m, xp: p * p / 3)
    assert half != name(lambda s, p, m, xp: 2 / (p * p))
    assert half != name(lambda s, p, m, xp: p * p / (2 + m))
    assert name(lambda s, p, m, xp: p * p if s.c > 0 else p, c=1.0) is None
    assert name(lambda s, p, m, xp: p * float(s.c), c=1.0) is None
    assert name(lambda s, p, m, xp: np.sqrt(p)) is None


# -- no ½|p|² literal and no type gate in the converted numerics ---------------------------------
GATE = re.compile(r"type\([^)]*\)\s+is\s+(not\s+)?Quadratic\b|isinstance\([^)]*\bQuadratic\b|"
                  r"carried[^=\n]*=\s*\([^)]*\bQuadratic\b")
HALF_SQUARE = re.compile(r"0\.5\s*\*\s*\(?\s*(max|min)\(.*\*\*\s*2|half_inv_h2|"
                         r"0\.5\s*/\s*h\w*\s*\*\*\s*2|0\.5\s*\*\s*\(\s*(\w+)\s*\*\s*\2\b|"
                         r"\[0, 0, 0\.5, 0\.5")
#: Sites not converted yet (the next step: generated stacked rows for the array/MPS step);
#: (file below mfgwork/numerics, text of the line). The 1-D Triton kernels, their tangents and
#: the batched Newton's gate take the model's generated functions; the 2-D paths choose their
#: ½|p|² specialisation by the model's expression (``Quadratic.same_model``), not its type.
ALLOWED = [("fdm/operators.py", "half_inv_h2"), ("fdm/operators.py", "0.5 / h**2"),
           ("fdm/operators.py", "[0, 0, 0.5, 0.5")]


def _flagged(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if GATE.search(line) or HALF_SQUARE.search(line)]


def test_the_check_recognises_the_old_hand_written_sites():
    old = ("ham = 0.5 * (max(ql, 0.0) ** 2 + min(qr, 0.0) ** 2)\n"
           "if type(fd.hamiltonian) is Quadratic:\n"
           "carried: tuple = (Quadratic, Power, Congestion)\n"
           "value = 0.5 * (a * a + b * b)\n")
    assert len(_flagged(old)) == 4


def test_no_half_square_literal_or_type_gate_outside_the_allowed_sites():
    numerics = ROOT / "mfgwork" / "numerics"
    found = [(path.relative_to(numerics).as_posix(), line)
             for path in sorted(numerics.rglob("*.py")) for line in _flagged(path.read_text())]
    left = [(f, line) for f, line in found
            if not any(f == file and text in line for file, text in ALLOWED)]
    assert left == []
