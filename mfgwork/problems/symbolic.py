"""A model written once: H(x, p, m) traced into a SymPy expression, its derivatives derived.

A Hamiltonian's ``value(x, p, m, xp)`` is called once with SymPy symbols for x, p and m, with
:data:`NAMESPACE` as ``xp`` (``abs``, ``maximum``, ``minimum``, ``sqrt``, ``exp``, ``log``,
``sign``, ``where``, ``clip``, … build SymPy expressions) and with the model's numeric fields
replaced by SymPy symbols (positive or negative as their values are). SymPy differentiates
the expression: ∂p H, ∂pp H, ∂m H (a.e.: Dirac deltas of kinks dropped, sign² and
Heaviside² taken as 1 and Heaviside). Each derivative is printed twice:

* as array code in ``xp`` (NumPy or torch, any device; :attr:`Structure.array`), which the
  generic array path (and the MPS path) calls;
* as numba scalar functions (:func:`scalar_source`), which the compiled CPU scheme takes
  (:mod:`mfgwork.numerics.fdm.numba_kernels`: one template, every model);
* as ``@triton.jit`` functions (:func:`triton_source`), which the fused Triton sweeps take
  (:mod:`mfgwork.numerics.fdm.triton_sweeps`: the same mechanism, one module per structure).

Because the fields are symbols, ``Power(1.5)`` and ``Power(3)`` share one structure (one
compiled module); their values are runtime arguments (:meth:`Traced.values`). A model whose
expression reads m without declaring ``depends_on_m = True`` is refused at definition time
(:meth:`~mfgwork.problems.hamiltonians.Hamiltonian.check`). A model whose ``value`` cannot be
traced (it uses an operation outside :data:`NAMESPACE`) is not refused if it defines ``dp`` and
``dpp`` by hand: it keeps the generic array path, with a one-line note
(:func:`trace` returns None and says why); without them it is refused.

Why SymPy: a model is a short closed-form expression, so symbolic differentiation gives exact
derivatives (no tape, no dual numbers inside the compiled loops), one expression prints as
code for every backend (array code for NumPy/torch here, numba scalars, later Triton ``@jit``
functions), and the expression itself is a stable cache key.

How the cache works (:func:`mfgwork.core.compiling.model_cache_dir`): a structure is named by
the hash of the operations its ``value`` performs (:mod:`.recording`, no SymPy) and of this
module's code; what the solvers read of it (key, flags, array code) is written there as JSON
at its first derivation, and its generated modules (numba scalar functions with the scheme's
template; Triton functions with the sweeps) under the hash of the structure's key and their
templates, numba's ``cache=True`` keeping the machine code beside them. A process whose cache
holds a model reads these files and never imports SymPy; SymPy derives and prints only what
is missing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.compiling import model_cache_dir
from ..core.storage import atomic_file
from . import recording

#: Version of the printers below (part of every cache key).
GENERATOR_VERSION = "2"


def _sympy() -> Any:
    import sympy

    return sympy


class _Namespace:
    """The ``xp`` a model's ``value`` sees when traced: NumPy-like names that build SymPy
    expressions."""

    def __getattr__(self, name: str) -> Any:
        sp = _sympy()
        table = {"abs": sp.Abs, "sqrt": sp.sqrt, "exp": sp.exp, "log": sp.log,
                 "sign": sp.sign, "sin": sp.sin, "cos": sp.cos, "tan": sp.tan,
                 "tanh": sp.tanh, "sinh": sp.sinh, "cosh": sp.cosh, "arctan": sp.atan,
                 "atan": sp.atan, "pi": sp.pi, "e": sp.E,
                 "maximum": lambda a, b: sp.Max(a, b), "minimum": lambda a, b: sp.Min(a, b),
                 "square": lambda a: sp.sympify(a) ** 2,
                 "log1p": lambda a: sp.log(1 + a), "expm1": lambda a: sp.exp(a) - 1,
                 "where": lambda c, a, b: sp.Piecewise((a, c), (b, True)),
                 "clip": _clip, "zeros_like": lambda a, **k: sp.Integer(0),
                 "ones_like": lambda a, **k: sp.Integer(1),
                 "asarray": lambda a, **k: sp.sympify(a)}
        if name not in table:
            raise AttributeError(f"xp.{name} is not traced (the traced xp knows "
                                 f"{', '.join(sorted(table))})")
        return table[name]


def _clip(a: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002 - xp's names
    sp = _sympy()
    out = sp.sympify(a)
    if min is not None:
        out = sp.Max(out, min)
    if max is not None:
        out = sp.Min(out, max)
    return out


#: The traced ``xp``.
NAMESPACE = _Namespace()


@dataclass(frozen=True)
class Expressions:
    """The SymPy expressions of a structure: ``value``, ``dp``, ``dpp``, ``dm``, ``at_zero``
    (H at p = 0) in the symbols x, p, m and ``symbols`` (the fields')."""

    symbols: tuple[Any, ...]
    value: Any
    dp: Any
    dpp: Any
    dm: Any
    at_zero: Any


@dataclass(frozen=True, eq=False)
class Structure:
    """A traced model structure (shared by every value of its fields), in what the solvers
    read without SymPy and what only code generation reads.

    ``names``: the numeric fields that are symbols, in the order of :meth:`Traced.values`;
    ``reads_m``, ``reads_x``: whether H depends on m, on x; ``zero_at_rest``: whether
    H(x, 0, m) ≡ 0; ``half_square``: whether H is ½ p²; ``key``: a hash of the expression
    and of the generator; ``sources``: the array code of "value", "dp", "dpp", "dm" and
    "pair" (:func:`_pair_source`). ``derive()`` gives the :class:`Expressions` (SymPy;
    called at the first access of ``value``, ``dp``, …: code generation on a cache miss)."""

    names: tuple[str, ...]
    reads_m: bool
    reads_x: bool
    zero_at_rest: bool
    half_square: bool
    key: str
    sources: dict[str, str]
    derive: Any = field(repr=False)
    array: dict[str, Any] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def expressions(self) -> Expressions:
        return self.derive()

    symbols = property(lambda self: self.expressions.symbols)
    value = property(lambda self: self.expressions.value)
    dp = property(lambda self: self.expressions.dp)
    dpp = property(lambda self: self.expressions.dpp)
    dm = property(lambda self: self.expressions.dm)
    at_zero = property(lambda self: self.expressions.at_zero)

    def function(self, name: str) -> Any:
        """``f(x, p, m, xp, *fields)`` of the array code ``name`` (compiled once)."""
        if name not in self.array:
            self.array[name] = _compiled_source(self.sources[name])
        return self.array[name]


@dataclass(frozen=True)
class Traced:
    """A model's :class:`Structure` and the values of its fields."""

    structure: Structure
    values: tuple[float, ...]

    def array_function(self, name: str) -> Any:
        """``f(x, p, m, xp)`` evaluating ``name`` ("value", "dp", "dpp", "dm"; "pair": the
        tuple (H, ∂p H) together) elementwise in the namespace ``xp``."""
        fn = self.structure.function(name)
        values = self.values

        def evaluate(x: Any, p: Any, m: Any, xp: Any) -> Any:
            return fn(x, p, m, _library(xp), *values)

        return evaluate


def _library(xp: Any) -> Any:
    """The array library behind an ``array_api_compat`` namespace (the generated code calls
    only functions that NumPy and torch share; compat's torch ``sign`` reads the host)."""
    name = getattr(xp, "__name__", "")
    if name.startswith("array_api_compat.torch"):
        import torch

        return torch
    return np if name.startswith("array_api_compat.numpy") else xp


_STRUCTURES: dict[tuple, Structure | str] = {}


def _attributes(hamiltonian: Any) -> dict[str, Any]:
    """The instance attributes of ``hamiltonian``: its ``__dict__`` and its slots."""
    names = list(getattr(hamiltonian, "__dict__", {}))
    for cls in type(hamiltonian).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    found = {}
    for name in names:
        if name not in ("__dict__", "__weakref__") and hasattr(hamiltonian, name):
            found[name] = getattr(hamiltonian, name)
    return found


def _fields(hamiltonian: Any) -> dict[str, float]:
    """The real-valued public fields of ``hamiltonian`` (sorted by name)."""
    attributes = _attributes(hamiltonian)
    return {k: float(v) for k, v in sorted(attributes.items())
            if isinstance(v, numbers.Real) and not isinstance(v, bool) and not k.startswith("_")
            and math.isfinite(float(v))}


def _field_symbol(name: str, value: float) -> Any:
    sp = _sympy()
    sign = {1: {"positive": True}, -1: {"negative": True}}.get(int(np.sign(value)),
                                                              {"zero": True})
    return sp.Symbol(f"k_{name}", real=True, **sign)


def trace(hamiltonian: Any) -> Traced | str:
    """The :class:`Traced` model of ``hamiltonian``, or why its ``value`` cannot be traced."""
    fields = _fields(hamiltonian)
    key = (type(hamiltonian), tuple((k, int(np.sign(v))) for k, v in fields.items()))
    if key not in _STRUCTURES:
        _STRUCTURES[key] = _cached_structure(hamiltonian, fields)
    structure = _STRUCTURES[key]
    if structure == _CONCRETE:   # its value branches on a field: traced with the values
        key = (type(hamiltonian), tuple(fields.items()))
        if key not in _STRUCTURES:
            _STRUCTURES[key] = _trace_structure(hamiltonian, fields, symbolic=False)
        structure = _STRUCTURES[key]
    if isinstance(structure, str):
        return structure
    return Traced(structure, tuple(fields[k] for k in structure.names))


def _cached_structure(hamiltonian: Any, fields: dict[str, float]) -> Structure | str:
    """The structure of ``hamiltonian`` with its fields as symbols: read from the model
    cache under the hash of its recorded operations (:mod:`.recording`; SymPy is imported
    only if code is generated later), else traced with SymPy and written there."""
    recorded = recording.record(type(hamiltonian).value,
                                _proxy(hamiltonian, recording.placeholders(fields)))
    path = None if recorded is None else _summary_path(recorded)
    if path is not None:
        found = _read_summary(path, lambda: _trace_structure(hamiltonian, fields,
                                                             symbolic=True).expressions)
        if found is not None and _agrees(found, hamiltonian, fields):
            return found
    structure = _trace_structure(hamiltonian, fields, symbolic=True)
    if path is not None and isinstance(structure, Structure):
        _write_summary(path, structure)
    return structure


@functools.cache
def generator_fingerprint() -> str:
    """A hash of the tracer, the printers and the recorder (this module and
    :mod:`.recording`): part of every cache key, so that changed code writes new entries."""
    digest = hashlib.sha256(GENERATOR_VERSION.encode())
    for module in (__file__, recording.__file__):
        with open(module, "rb") as fh:
            digest.update(fh.read())
    return digest.hexdigest()[:24]


def _summary_path(recorded: str) -> Path:
    name = hashlib.sha256(f"{generator_fingerprint()}|{recorded}".encode()).hexdigest()[:24]
    return model_cache_dir() / f"mfgwork_structure_{name}.json"


_SUMMARY_FLAGS = ("reads_m", "reads_x", "zero_at_rest", "half_square")
_SOURCES = ("value", "dp", "dpp", "dm", "pair")


def _read_summary(path: Path, derive: Any) -> Structure | None:
    """The :class:`Structure` written at ``path`` (None where it is missing or damaged)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        names, key, sources = tuple(data["names"]), data["key"], data["sources"]
        flags = {k: data[k] for k in _SUMMARY_FLAGS}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (all(isinstance(n, str) for n in names) and isinstance(key, str)
            and all(isinstance(v, bool) for v in flags.values())
            and isinstance(sources, dict) and set(sources) == set(_SOURCES)
            and all(isinstance(v, str) for v in sources.values())):
        return None
    return Structure(names, key=key, sources=sources, derive=derive, **flags)


#: Points (x, p, m) at which a structure read from the cache must give the model's own H.
_PROBE = tuple(np.meshgrid(np.linspace(-1.0, 1.0, 3), np.array([-2.5, -0.4, 0.0, 0.3, 1.7]),
                           np.array([0.0, 0.6, 3.0]), indexing="ij"))


def _agrees(structure: Structure, hamiltonian: Any, fields: dict[str, float]) -> bool:
    """Whether every array code of a structure read from the cache compiles and its H is
    the model's own ``value`` at :data:`_PROBE` (relative 1e-9): an entry changed or
    damaged from outside is derived and written again. (Its ∂p H is checked against the
    slopes of ``value`` by :meth:`~mfgwork.problems.hamiltonians.Hamiltonian.check`.)"""
    x, p, m = _PROBE
    try:
        for name in structure.sources:
            structure.function(name)
        with np.errstate(all="ignore"):
            derived = np.asarray(structure.function("value")(x, p, m, np, *(
                fields[k] for k in structure.names)), dtype=np.float64)
            given = np.asarray(type(hamiltonian).value(
                hamiltonian, x, p, m if structure.reads_m else None, np), dtype=np.float64)
    except Exception:  # noqa: BLE001 - code that does not run: the entry is not used
        return False
    return bool(np.allclose(derived, given * np.ones_like(derived), rtol=1e-9, atol=1e-12,
                            equal_nan=True))


def _write_summary(path: Path, structure: Structure) -> None:
    """Write ``structure``'s summary at ``path`` atomically (skipped where the model cache
    cannot be written: the generated modules say so)."""
    data = {"names": list(structure.names), "key": structure.key,
            "sources": structure.sources} | {k: getattr(structure, k) for k in _SUMMARY_FLAGS}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as fh:
            json.dump(data, fh, indent=1)
    except OSError:
        pass


#: What :func:`_trace_structure` returns when the fields cannot be symbols.
_CONCRETE = "trace with the values of the fields"


def _proxy(hamiltonian: Any, substitutions: dict[str, Any]) -> Any:
    """A copy of ``hamiltonian`` whose fields are ``substitutions`` (frozen or slotted
    alike), or ``hamiltonian`` itself where there are none."""
    if not substitutions:
        return hamiltonian
    proxy = object.__new__(type(hamiltonian))
    for name, value in (_attributes(hamiltonian) | substitutions).items():
        object.__setattr__(proxy, name, value)
    return proxy


def _call_value(hamiltonian: Any, substitutions: dict[str, Any]) -> Any:
    """``value`` of a copy of ``hamiltonian`` whose fields are ``substitutions``, traced."""
    sp = _sympy()
    x, p, m = _xpm()
    proxy = _proxy(hamiltonian, substitutions)
    out = sp.sympify(type(hamiltonian).value(proxy, x, p, m, NAMESPACE))
    if not isinstance(out, sp.Expr):
        raise TypeError(f"value returned {type(out).__name__}, not an expression")
    return out


def _xpm() -> tuple[Any, Any, Any]:
    sp = _sympy()
    return sp.Symbol("x", real=True), sp.Symbol("p", real=True), sp.Symbol("m", real=True)


def _trace_structure(hamiltonian: Any, fields: dict[str, float], symbolic: bool
                     ) -> Structure | str:
    """Trace with the fields as symbols (``symbolic``; else as their values), differentiate,
    and print the array code; :data:`_CONCRETE` when the symbols fail but fields exist."""
    symbols = {k: _field_symbol(k, v) for k, v in fields.items()} if symbolic else {}
    try:
        value = _call_value(hamiltonian, symbols)
    except Exception as exc:  # any failure of the user's code under tracing
        return _CONCRETE if symbols else f"{type(exc).__name__}: {exc}"
    names = tuple(k for k in symbols if symbols[k] in value.free_symbols)
    return _derive(value, names, tuple(symbols[k] for k in names))


def _clean(expr: Any, p: Any) -> Any:
    """Derivative ``expr`` almost everywhere: Dirac deltas dropped, sign(·)^(2k) → 1,
    Heaviside(·)^k → Heaviside(·), even powers of a symbol as powers of its absolute
    value (so that |p|^q / p² merges into |p|^(q − 2))."""
    sp = _sympy()
    expr = expr.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.Integer(0))
    expr = expr.replace(lambda e: e.is_Pow and isinstance(e.base, sp.sign)
                        and e.exp.is_even, lambda e: sp.Integer(1))
    expr = expr.replace(lambda e: e.is_Pow and isinstance(e.base, sp.Heaviside)
                        and e.exp.is_positive and e.exp.is_integer, lambda e: e.base)
    expr = expr.replace(lambda e: e.is_Pow and e.base.is_Symbol and e.exp.is_even,
                        lambda e: sp.Abs(e.base) ** e.exp)
    expr = expr.replace(lambda e: e.is_Mul and _ramp_step(e) is not None, _ramp_step)
    expr = expr.replace(lambda e: e.is_Mul and sp.Float(1.0) in e.args,
                        lambda e: e.func(*(a for a in e.args if a != sp.Float(1.0))))
    return sp.powsimp(expr, force=True)


def _ramp_step(product: Any) -> Any:
    """``product`` with each step Heaviside(±a) beside its ramp max(0, a) (min(0, a)) dropped
    (the derivative of a one-sided square: the ramp vanishes where the step does), or None
    where it has none."""
    sp = _sympy()
    args = list(product.args)
    for ramp in [a for a in args if isinstance(a, sp.Max | sp.Min) and len(a.args) == 2
                 and 0 in a.args]:
        inner = ramp.args[1] if ramp.args[0] == 0 else ramp.args[0]
        step = sp.Heaviside(inner if isinstance(ramp, sp.Max) else -inner)
        found = [a for a in args if isinstance(a, sp.Heaviside) and a.args[0] == step.args[0]]
        if found:
            args.remove(found[0])
            return product.func(*args)
    return None


def _derive(value: Any, names: tuple[str, ...], symbols: tuple[Any, ...]) -> Structure:
    sp = _sympy()
    x, p, m = _xpm()
    fractions = {r: sp.Float(r) for r in value.atoms(sp.Rational) if not r.is_Integer}
    value = sp.powsimp(value.xreplace(fractions), force=True)   # p*p/2 is 0.5*p**2
    dp = _clean(sp.diff(value, p), p)
    dpp = _clean(sp.diff(dp, p), p)
    dm = _clean(sp.diff(value, m), p)
    at_zero = sp.powsimp(value.subs(p, 0), force=True)
    expressions = Expressions(symbols, value, dp, dpp, dm, at_zero)
    key_text = "|".join([GENERATOR_VERSION, *names, sp.srepr(value)])
    sources = {name: _array_source(getattr(expressions, name), symbols)
               for name in ("value", "dp", "dpp", "dm")} | {"pair": _pair_source(expressions)}
    return Structure(names, reads_m=m in value.free_symbols, reads_x=x in value.free_symbols,
                     zero_at_rest=bool(at_zero == 0),
                     half_square=bool(sp.expand(value - sp.Rational(1, 2) * p**2) == 0),
                     key=hashlib.sha256(key_text.encode()).hexdigest()[:20], sources=sources,
                     derive=lambda: expressions)


# -- printing -------------------------------------------------------------------------------
def _printers() -> tuple[type, type]:
    from sympy.printing.pycode import PythonCodePrinter

    sp = _sympy()

    class ScalarPrinter(PythonCodePrinter):
        """Python scalar code that numba compiles (``math`` functions, helpers of the
        template: ``power``, ``sign``, ``heaviside``)."""

        def __init__(self, names: dict[Any, str]) -> None:
            super().__init__({"strict": True, "fully_qualified_modules": True})
            self.names = names

        def _print_Symbol(self, s: Any) -> str:
            return self.names.get(s, s.name)

        _print_Dummy = _print_Symbol

        def _print_Float(self, f: Any) -> str:
            return repr(float(f))

        def _print_Rational(self, r: Any) -> str:
            return repr(float(r))

        def _print_Integer(self, i: Any) -> str:
            return repr(float(i))

        def _print_Abs(self, e: Any) -> str:
            return f"abs({self._print(e.args[0])})"

        def _print_sign(self, e: Any) -> str:
            return f"sign({self._print(e.args[0])})"

        def _print_Heaviside(self, e: Any) -> str:
            h0 = e.args[1] if len(e.args) > 1 else sp.Rational(1, 2)
            return f"heaviside({self._print(e.args[0])}, {self._print(h0)})"

        def _nested(self, fn: str, args: Any) -> str:
            out = self._print(args[0])
            for a in args[1:]:
                out = f"{fn}({out}, {self._print(a)})"
            return out

        def _print_Max(self, e: Any) -> str:
            return self._nested("max", e.args)

        def _print_Min(self, e: Any) -> str:
            return self._nested("min", e.args)

        def _print_Pow(self, e: Any, rational: bool = False) -> str:
            if e.base.is_Pow and e.base.exp == -1 and not e.exp.is_Number:
                return self._print_Pow(sp.Pow(e.base.base, -e.exp, evaluate=False))
            base, k = f"({self._print(e.base)})", e.exp
            if k.is_Number and float(k).is_integer() and 1 <= abs(float(k)) <= 4:
                product = " * ".join([base] * int(abs(float(k))))
                return f"({product})" if k > 0 else f"(1.0 / ({product}))"
            if k == sp.Rational(1, 2):
                return f"{self.sqrt}({base})"
            if k == sp.Rational(-1, 2):
                return f"(1.0 / {self.sqrt}({base}))"
            return self._power(base, k)

        sqrt = "math.sqrt"

        def _power(self, base: str, k: Any) -> str:
            return f"power({base}, {self._print(k)})"

    class ArrayPrinter(ScalarPrinter):
        """Elementwise code in the namespace ``xp``; sub-expressions free of x, p and m are
        printed as scalars."""

        sqrt = "xp.sqrt"

        def _print(self, e: Any, **kwargs: Any) -> str:
            if (isinstance(e, sp.Basic) and not e.is_Atom and isinstance(e, sp.Expr)
                    and not (e.free_symbols & set(_xpm()))):
                return self.scalar._print(e)
            return super()._print(e, **kwargs)

        def _print_Abs(self, e: Any) -> str:
            return f"xp.abs({self._print(e.args[0])})"

        def _print_sign(self, e: Any) -> str:
            return f"xp.sign({self._print(e.args[0])})"

        def _print_Heaviside(self, e: Any) -> str:
            a = self._print(e.args[0])
            h0 = self._print(e.args[1] if len(e.args) > 1 else sp.Rational(1, 2))
            return f"xp.where({a} > 0, 1.0, xp.where({a} < 0, 0.0, {h0}))"

        def _extreme(self, e: Any, fn: str, bound: str, pick: Any) -> str:
            """``fn`` of the arguments that are arrays, the constant ones folded into one
            ``xp.clip`` bound (raw torch's maximum and minimum take tensors only)."""
            arrays = [a for a in e.args if a.free_symbols & set(_xpm())]
            constants = [a for a in e.args if a not in arrays]
            out = self._nested(fn, arrays)
            if constants:
                out = f"xp.clip({out}, {bound}={self._print(pick(*constants))})"
            return out

        def _print_Max(self, e: Any) -> str:
            return self._extreme(e, "xp.maximum", "min", sp.Max)

        def _print_Min(self, e: Any) -> str:
            return self._extreme(e, "xp.minimum", "max", sp.Min)

        def _print_Piecewise(self, e: Any) -> str:
            out = "float('nan')"
            for expr, cond in reversed(e.args):
                out = (self._print(expr) if cond is sp.true
                       else f"xp.where({self._print(cond)}, {self._print(expr)}, {out})")
            return out

        def _print_And(self, e: Any) -> str:
            return " & ".join(f"({self._print(a)})" for a in e.args)

        def _print_Or(self, e: Any) -> str:
            return " | ".join(f"({self._print(a)})" for a in e.args)

        def _print_Function(self, e: Any) -> str:
            name = {"atan": "atan", "asin": "asin", "acos": "acos"}.get(
                type(e).__name__, type(e).__name__)
            if name in ("exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "atan"):
                return f"xp.{name}({', '.join(self._print(a) for a in e.args)})"
            return super()._print_Function(e)

        _print_exp = _print_log = _print_sin = _print_cos = _print_tan = _print_Function
        _print_tanh = _print_sinh = _print_cosh = _print_atan = _print_Function

        def _power(self, base: str, k: Any) -> str:
            return f"({base} ** ({self._print(k)}))"

    return ScalarPrinter, ArrayPrinter


def _ramps(expr: Any) -> Any:
    """``expr`` with each pair of terms c·a + c·|a| written 2c·max(a, 0) (one array operation
    instead of four: the positive part ½(m + |m|) of a congestion model)."""
    sp = _sympy()

    def fold(add: Any) -> Any:
        terms = list(add.args)
        for term in terms:
            c, a = term.as_coeff_Mul()
            if isinstance(a, sp.Abs) and (partner := c * a.args[0]) in terms:
                terms.remove(term)
                terms.remove(partner)
                ramp = sp.Max(a.args[0], 0)
                return add.func(*terms, ramp if float(2 * c) == 1.0 else 2 * c * ramp)
        return add

    return expr.replace(lambda e: e.is_Add and fold(e) != e, fold)


def _pair_source(expressions: Expressions) -> str:
    """Source of ``f(x, p, m, xp, *fields)`` returning (H, ∂p H) elementwise together, their
    common sub-expressions computed once (``sympy.cse``, the powers shared as in
    :func:`scalar_source`): the fewest array operations, each a kernel launch on a device."""
    sp = _sympy()
    value = _share_powers(expressions.value, expressions.dp)
    shared, (h, hp) = sp.cse([_ramps(value), _ramps(expressions.dp)], optimizations="basic")
    scalar_cls, array_cls = _printers()
    names = {s: f"k{i}" for i, s in enumerate(expressions.symbols)}
    names |= {sym: f"t{j}" for j, (sym, _) in enumerate(shared)}
    printer = array_cls(names)
    printer.scalar = scalar_cls(names)
    _, p, _ = _xpm()
    lines = [f"    t{j} = {printer.doprint(e)}" for j, (_, e) in enumerate(shared)]
    body = [printer.doprint(e) if p in e.free_symbols or any(
        t in e.free_symbols for t, _ in shared) else f"({printer.doprint(e)}) + 0.0 * p"
        for e in (h, hp)]
    args = ", ".join(["x", "p", "m", "xp", *(f"k{i}" for i in range(len(names) - len(
        shared)))])
    return f"def f({args}):\n" + "\n".join(lines) + f"\n    return {body[0]}, {body[1]}\n"


def _compiled_source(source: str) -> Any:
    """The function ``f`` defined by ``source`` (generated by the printers here)."""
    namespace: dict[str, Any] = {"math": math, "power": _pow, "sign": _sign,
                                 "heaviside": _heaviside}
    exec(source, namespace)  # noqa: S102 - our own printer
    return namespace["f"]


def _array_source(expr: Any, symbols: tuple[Any, ...]) -> str:
    """Source of ``f(x, p, m, xp, *fields)`` evaluating ``expr`` elementwise (shaped like p)."""
    scalar_cls, array_cls = _printers()
    _, p, _ = _xpm()
    names = {s: f"k{i}" for i, s in enumerate(symbols)}
    printer = array_cls(names)
    printer.scalar = scalar_cls(names)
    body = printer.doprint(_ramps(expr))
    if p not in expr.free_symbols:
        body = f"({body}) + 0.0 * p"
    args = ", ".join(["x", "p", "m", "xp", *names.values()])
    return f"def f({args}):\n    return {body}\n"


def _pow(b: float, e: float) -> float:
    return b ** e


def _sign(a: float) -> float:
    return float(np.sign(a))


def _heaviside(a: float, h0: float) -> float:
    return 1.0 if a > 0 else (0.0 if a < 0 else h0)


def scalar_source(structure: Structure) -> str:
    """numba source of the model functions the compiled scheme calls, for the fields in the
    array ``prm`` (in the order of ``structure.names``) and the node values ``aux``:

    * ``NAUX``, ``DEPENDS_ON_M``: module constants;
    * ``model_aux(x, m, prm, aux, i)``: the sub-expressions of H and ∂p H free of p (they
      depend on the node and its density only) into ``aux[:, i]``, computed once per time
      step (once per sweep if H ignores m);
    * ``H_and_p(p, x, m, prm, aux, i)``: (H, ∂p H) at node i;
    * ``H_zero(x, m, prm, aux, i)``: H at p = 0;
    * ``H(p, x, m, prm)``, ``H_p``, ``H_pp``, ``H_m``: the plain derivatives.
    """
    sp = _sympy()
    x, p, m = _xpm()
    scalar_cls, _ = _printers()
    params = {s: f"prm[{i}]" for i, s in enumerate(structure.symbols)}
    value = _share_powers(structure.value, structure.dp)
    hoisted, aux = _hoist([value, structure.dp, structure.at_zero], p)
    aux_names = {sym: f"aux[{j}, i]" for j, (sym, _) in enumerate(aux)}
    plain, node = scalar_cls(params), scalar_cls(params | aux_names)
    jit = "@njit(cache=True, nogil=True)"
    lines = [f"NAUX = {len(aux)}", f"DEPENDS_ON_M = {structure.reads_m}", "", "", jit,
             "def model_aux(x, m, prm, aux, i):"]
    lines += [f"    aux[{j}, i] = {plain.doprint(e)}" for j, (_, e) in enumerate(aux)]
    lines += ["    return None", "", "", jit, "def H_and_p(p, x, m, prm, aux, i):",
              f"    return {node.doprint(hoisted[0])}, {node.doprint(hoisted[1])}", "", "",
              jit, "def H_zero(x, m, prm, aux, i):", f"    return {node.doprint(hoisted[2])}"]
    for name, expr in (("H", structure.value), ("H_p", structure.dp),
                       ("H_pp", structure.dpp), ("H_m", structure.dm)):
        lines += ["", "", jit, f"def {name}(p, x, m, prm):",
                  f"    return {plain.doprint(sp.sympify(expr))}"]
    return "\n".join(lines) + "\n"


def _share_powers(value: Any, dp: Any) -> Any:
    """``value`` with each b^e whose b^(e − 1) is in ``dp`` written b · b^(e − 1) (kept
    unevaluated), so that H and ∂p H computed together take one power (|p|^q / q and
    sign(p) |p|^(q − 1): one square root for q = 1.5)."""
    sp = _sympy()
    powers = {(e.base, e.exp) for e in dp.atoms(sp.Pow)}
    return value.replace(
        lambda e: e.is_Pow and not e.exp.is_Number and (e.base, e.exp - 1) in powers,
        lambda e: sp.Mul(e.base, sp.UnevaluatedExpr(e.base ** (e.exp - 1)), evaluate=False))


def _hoist(exprs: list[Any], p: Any) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """``exprs`` with their largest sub-expressions free of p replaced by symbols, and the
    (symbol, sub-expression) pairs (shared among ``exprs``)."""
    sp = _sympy()
    found: dict[Any, Any] = {}

    def collect(e: Any) -> None:
        if isinstance(e, sp.Expr) and not e.is_Atom and p not in e.free_symbols:
            if not (e.is_Mul and len(e.args) == 2 and e.args[0] == -1 and e.args[1].is_Atom):
                found.setdefault(e, sp.Dummy(f"aux{len(found)}", real=True))
                return
        for a in e.args:
            collect(a)

    for e in exprs:
        collect(e)
    return [e.xreplace(found) for e in exprs], [(s, e) for e, s in found.items()]


# -- Triton ---------------------------------------------------------------------------------
#: Helpers of the generated Triton functions. ``_pow``: b^e for an exponent free of x, p and
#: m (a uniform scalar: the common exponents by square roots and products, one branch taken
#: per program); ``_pow_t``: b^e elementwise as exp(e·log|b|) (libdevice's pow need not be
#: there, e.g. under the interpreter), b < 0 signed by the parity of an integer e (NaN for
#: another e), 0^0 = 1.
TRITON_HELPERS = '''
@triton.jit
def _sign_t(a):
    return tl.where(a > 0.0, 1.0, tl.where(a < 0.0, -1.0, 0.0))


@triton.jit
def _heaviside_t(a, h0):
    return tl.where(a > 0.0, 1.0, tl.where(a < 0.0, 0.0, h0))


@triton.jit
def _pow_t(b, e):
    e = b * 0.0 + e
    r = tl.exp(e * tl.log(tl.abs(b)))
    whole = e == tl.floor(e)
    odd = whole & (tl.floor(e * 0.5) * 2.0 != e)
    r = tl.where(b < 0.0, tl.where(odd, -r, tl.where(whole, r, tl.sqrt(b))), r)
    return tl.where(e == 0.0, 1.0, r)


@triton.jit
def _pow(b, e):
    if e == 0.5:
        r = tl.sqrt(b)
    elif e == 1.5:
        r = b * tl.sqrt(b)
    elif e == -0.5:
        r = 1.0 / tl.sqrt(b)
    elif e == 1.0:
        r = b * 1.0
    elif e == 2.0:
        r = b * b
    elif e == 3.0:
        r = b * b * b
    elif e == -1.0:
        r = 1.0 / b
    else:
        r = _pow_t(b, e)
    return r
'''


def _triton_printer() -> type:
    sp = _sympy()
    scalar_cls, array_cls = _printers()

    class TritonPrinter(array_cls):
        """Elementwise Triton code (``tl`` functions, the helpers of
        :data:`TRITON_HELPERS`); a function Triton lacks raises NotImplementedError."""

        sqrt = "tl.sqrt"

        def _print(self, e: Any, **kwargs: Any) -> str:
            return scalar_cls._print(self, e, **kwargs)

        def _print_Abs(self, e: Any) -> str:
            return f"tl.abs({self._print(e.args[0])})"

        def _print_sign(self, e: Any) -> str:
            return f"_sign_t({self._print(e.args[0])})"

        def _print_Heaviside(self, e: Any) -> str:
            h0 = e.args[1] if len(e.args) > 1 else sp.Rational(1, 2)
            return f"_heaviside_t({self._print(e.args[0])}, {self._print(h0)})"

        def _print_Max(self, e: Any) -> str:
            return self._nested("tl.maximum", e.args)

        def _print_Min(self, e: Any) -> str:
            return self._nested("tl.minimum", e.args)

        def _print_Piecewise(self, e: Any) -> str:
            out = None
            for expr, cond in reversed(e.args):
                value = f"({self._print(expr)}) * 1.0"
                out = (value if cond is sp.true or out is None
                       else f"tl.where({self._print(cond)}, {value}, {out})")
            return out

        def _print_Function(self, e: Any) -> str:
            name = type(e).__name__
            if name not in ("exp", "log", "sin", "cos"):
                raise NotImplementedError(f"{name} has no Triton counterpart here")
            return f"tl.{name}({', '.join(self._print(a) for a in e.args)})"

        _print_exp = _print_log = _print_sin = _print_cos = _print_Function
        _print_tan = _print_tanh = _print_sinh = _print_cosh = _print_atan = _print_Function

        def _print_NumberSymbol(self, e: Any) -> str:
            return repr(float(e))

        _print_Pi = _print_Exp1 = _print_NumberSymbol

        def _power(self, base: str, k: Any) -> str:
            uniform = not (k.free_symbols & set(_xpm()))
            return f"{'_pow' if uniform else '_pow_t'}({base}, {self._print(k)})"

    return TritonPrinter


def triton_source(structure: Structure) -> str:
    """``@triton.jit`` source of the model functions the fused Triton sweeps call, elementwise
    on blocks, with the fields as a tuple ``prm`` (loaded once per program by
    ``model_params(prm_ptr)`` from a tensor in the order of ``structure.names``; one dummy
    where there is none):

    * ``DEPENDS_ON_M``: a ``tl.constexpr`` (kernels load the density only where it is True);
    * ``H_and_p(p, x, m, prm)``: (H, ∂p H); ``H_p``: ∂p H alone; ``H_zero(x, m, prm)``:
      H at p = 0; ``H_pp(p, x, m, prm)``: ∂pp H.

    Raises NotImplementedError where the expression uses a function Triton lacks here."""
    sp = _sympy()
    printer = _triton_printer()({s: f"prm[{i}]" for i, s in enumerate(structure.symbols)})
    value = _share_powers(structure.value, structure.dp)
    loads = ", ".join(f"tl.load(prm_ptr + {i})" for i in range(max(1, len(structure.names))))

    def body(expr: Any) -> str:
        text = printer.doprint(sp.sympify(expr))
        if "math." in text:
            raise NotImplementedError(f"{text} has no Triton counterpart here")
        return text

    lines = ["", f"DEPENDS_ON_M = tl.constexpr({structure.reads_m})", "", "",
             "@triton.jit", "def model_params(prm_ptr):", f"    return ({loads},)", "", "",
             "@triton.jit", "def H_and_p(p, x, m, prm):",
             f"    return {body(value)}, {body(structure.dp)}"]
    for name, args, expr in (("H_p", "p, x, m, prm", structure.dp),
                             ("H_zero", "x, m, prm", structure.at_zero),
                             ("H_pp", "p, x, m, prm", structure.dpp)):
        lines += ["", "", "@triton.jit", f"def {name}({args}):", f"    return {body(expr)}"]
    return TRITON_HELPERS + "\n".join(lines) + "\n"
