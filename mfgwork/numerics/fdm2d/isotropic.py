"""An isotropic model H(x, |p|, m) as functions of s = |p|², for the 2-D scheme's compiled
paths (numba on the CPU, Triton on CUDA).

The stencil's numerical Hamiltonian (:mod:`.stencil`) is Ĥ = H(x, √P², m) with
P² = Σ_axes (q_b)_+² + (q_f)_−², and ∂Ĥ/∂q_b = D (q_b)_+, ∂Ĥ/∂q_f = D (q_f)_− with
D = ∂p H(x, √P², m)/√P² (0 where P² = 0). Written in s = P², with G(s) = H(x, √s, m):

    Ĥ = G(P²),   D = 2 G'(P²)

so ½|p|² is G = s/2, D = 1 and the congestion model G = s/(2 (c + m)^α), D = (c + m)^(−α):
neither takes a square root, and the kernels are those of ½|p|² with two model calls.

:func:`radial_structure` derives G and D from the model's traced expression
(:func:`mfgwork.problems.symbolic.trace`) with SymPy and returns them as a
:class:`~mfgwork.problems.symbolic.Structure` whose variable p stands for s: ``value`` G,
``dp`` D, ``dpp`` D', ``dm`` ∂m G, ``at_zero`` G(0). The printers of :mod:`.symbolic` then
make its numba scalar functions (:func:`~mfgwork.problems.symbolic.scalar_source`:
``H_and_p(s, x, m, prm, aux, i)`` is (G, D)) and its ``@triton.jit`` functions
(:func:`~mfgwork.problems.symbolic.triton_source`: ``H_and_p(s, x, m, prm)``), which the
templates :mod:`.assembly_loops` and :mod:`.triton_system` call. D is taken as 0 where
s = 0 (where it may be infinite, e.g. |p|^q/q with q < 2: its factor (q_b)_+ is 0 there).
A model whose H reads x is not served (2-D nodes have two coordinates): the array path of
:meth:`~mfgwork.problems.hamiltonians.Hamiltonian.numerical_nd` takes it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import replace
from typing import Any

from ...problems.hamiltonians import Hamiltonian
from ...problems.symbolic import GENERATOR_VERSION, Expressions, Structure

#: Version of the derivation below (part of the structure's key).
RADIAL_VERSION = "1"

_RADIAL: dict[str, Structure | str] = {}


def radial_structure(hamiltonian: Hamiltonian) -> Structure | str:
    """The s-form structure of ``hamiltonian`` (module docstring), or why there is none
    (its value cannot be traced, it is not isotropic, or H reads x). Its key names the
    model's structure and this derivation; its expressions are derived (SymPy) only when
    its code is generated."""
    if not hamiltonian.isotropic:
        return f"{hamiltonian!r} is not isotropic"
    traced = hamiltonian.traced()
    if traced is None:
        return f"the value of {hamiltonian!r} cannot be traced"
    structure = traced.structure
    if structure.reads_x:
        return "its H reads x (a 2-D node has two coordinates)"
    if structure.key not in _RADIAL:
        text = "|".join(["radial", RADIAL_VERSION, GENERATOR_VERSION, structure.key,
                         _fingerprint()])
        _RADIAL[structure.key] = replace(
            structure, key=hashlib.sha256(text.encode()).hexdigest()[:20], sources={},
            half_square=False, derive=lambda: _derive_radial(structure.expressions), array={})
    return _RADIAL[structure.key]


@functools.cache
def _fingerprint() -> str:
    """A hash of this module (the derivation below is part of the key)."""
    with open(__file__, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:24]


def _derive_radial(expressions: Expressions) -> Expressions:
    """G, D = 2 G', D', ∂m G and G(0) in s (written p), from H's expressions."""
    import sympy as sp

    p, m = sp.Symbol("p", real=True), sp.Symbol("m", real=True)
    s = sp.Symbol("s", positive=True)
    G = sp.powsimp(expressions.value.subs(p, sp.sqrt(s)), force=True)
    D = _almost_everywhere(2 * sp.diff(G, s))
    dD = _almost_everywhere(sp.diff(D, s))
    Gm = _almost_everywhere(sp.diff(G, m))
    as_p = {s: p}
    return replace(expressions, value=G.xreplace(as_p), dp=D.xreplace(as_p),
                   dpp=dD.xreplace(as_p), dm=Gm.xreplace(as_p))


def _almost_everywhere(expr: Any) -> Any:
    """``expr`` with Dirac deltas (of kinks) dropped, powers merged, factors 1.0 gone."""
    import sympy as sp

    expr = expr.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.Integer(0))
    return sp.powsimp(expr, force=True).xreplace({sp.Float(1.0): sp.Integer(1)})
