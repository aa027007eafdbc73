"""Parameter-grid specifications for sweeps and scans: parse, check, expand, name points.

A spec is a YAML or JSON mapping (read by a safe YAML loader that refuses duplicate keys)
from parameter names (a notebook's for sweeps, a problem's for scans) to values::

    threshold: {linspace: [0.3, 0.9, 13]}   # 13 evenly spaced values, both ends included
    sigma: [0.3, 0.5, 0.8]                  # an explicit list
    nx: {range: [51, 202, 50]}              # a, a+step, ... up to b excluded (like range)
    method: fdm                             # a scalar: the same value in every run
    zip: [[threshold, eps]]                 # optional: these axes advance together

The runs are the cartesian product of the axes, in the order they appear, where each
``zip`` group counts as one axis whose lists must have equal lengths. Every axis is counted
from its definition (exact integers, before any list is built) and refused beyond 2**53
values or the caller's limit. A run is named by the SHA-256 of its full parameter set
(sorted JSON) behind a readable slug of the values that vary, so the same parameters always
map to the same run folder.

:func:`coerce_parameter` is the one type rule for parameters given against defaults
(notebook runs, sweeps and scans): the value must have the default's type, except that an
int is accepted (and converted) for a float and an integral float for an int.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import storage
from ..core.errors import MAX_COUNT, LoadError, ParameterError

#: Parameters the sweep sets itself, one value per run; a spec may not set them.
RESERVED = ("out_dir",)

Scalar = str | int | float | bool | None


class SpecError(ParameterError):
    """A grid specification is malformed or does not fit the notebook or problem."""


@dataclass(frozen=True)
class Run:
    """One point of a sweep: its folder name and its full parameter set."""

    name: str
    parameters: dict[str, Scalar]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec: axes (each a tuple of names with a list of value tuples) and the
    parameters shared by every run."""

    axes: tuple[tuple[tuple[str, ...], tuple[tuple[Scalar, ...], ...]], ...]
    fixed: dict[str, Scalar]

    @property
    def varying(self) -> tuple[str, ...]:
        """Names of the parameters that change from run to run."""
        return tuple(n for names, _ in self.axes for n in names)

    def runs(self) -> list[Run]:
        """The runs of the cartesian product, in spec order."""
        out = []
        for combo in itertools.product(*(values for _, values in self.axes)):
            params = dict(self.fixed)
            for (names, _), vals in zip(self.axes, combo, strict=True):
                params.update(zip(names, vals, strict=True))
            out.append(Run(run_name(params, self.varying), params))
        return out

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready, fully expanded form of the spec (lists, no ranges)."""
        return {"axes": [{"names": list(names), "values": [list(v) for v in values]}
                         for names, values in self.axes],
                "fixed": dict(self.fixed)}


# -- reading -----------------------------------------------------------------------------------
def read_spec(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """The raw mapping of a spec given as a mapping, a path to a YAML/JSON file, or YAML text.

    A string is a file path when it is one line and names something that exists, ends in
    ``.yaml``, ``.yml`` or ``.json``, or has no ``:`` (YAML text of a mapping always has
    one) and does not start with ``{``: so ``missing_grid`` is a file that does not exist,
    not the text of a spec, and ``{}`` is an empty spec. A text that no file can be named
    by (too long, say) is YAML text. The file must be a readable regular file (see
    :func:`mfgwork.core.storage.read_bytes`)."""
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, str | os.PathLike):
        raise SpecError(f"grid={source!r:.80} ({type(source).__name__}) is invalid: must be "
                        "a mapping of parameter names to values, a path to a YAML/JSON file "
                        "or YAML text")
    import yaml

    text, where = str(source), "grid spec"
    path = Path(source)
    if isinstance(source, os.PathLike) or ("\n" not in text and _names_file(path, text)):
        text, where = _read_file(path), f"grid spec {str(path)!r}"
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where} is not valid YAML/JSON: {exc}") from None
    except RecursionError:
        raise SpecError(f"{where} is not valid YAML/JSON here (nested too deeply)") from None
    if raw == {}:
        raise SpecError(f"{where} is an empty mapping: give at least one parameter with its "
                        "values, e.g. {threshold: [0.4, 0.6]}")
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a non-empty mapping of parameter names to values, "
                        f"got {type(raw).__name__}: {raw!r:.80}")
    return raw


def _names_file(path: Path, text: str) -> bool:
    """Whether the one-line string ``text`` (``path``) is read as a file name rather than
    as YAML text (see :func:`read_spec`)."""
    if _exists(path) or path.suffix.lower() in (".yaml", ".yml", ".json"):
        return True
    return ":" not in text and not text.lstrip().startswith("{")


def _exists(path: Path) -> bool:
    """Whether something (a link included) is at ``path``; False where the name cannot be
    one of a file (an OSError such as a name too long, or a NUL byte)."""
    try:
        return path.exists() or path.is_symlink()
    except (OSError, ValueError):
        return False


def _read_file(path: Path) -> str:
    """The text of a spec file; a SpecError saying why it cannot be read."""
    if not _exists(path):
        raise SpecError(f"grid spec file {str(path)!r} does not exist (a spec given as text "
                        "is a YAML mapping, with a ':')")
    try:
        return storage.read_bytes(path, storage.MAX_JSON_BYTES).decode("utf-8")
    except LoadError as exc:
        raise SpecError(f"grid spec file {str(path)!r} {exc.reason}") from None
    except UnicodeDecodeError:
        raise SpecError(f"grid spec file {str(path)!r} is not UTF-8 text") from None


def load_yaml(text: str) -> Any:
    """``text`` read by the safe loader of specs (:func:`_unique_key_loader`): the one reading
    of grid specs and of command-line values (``-p NAME VALUE``)."""
    import yaml

    return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader


#: Numbers with an exponent that YAML 1.1 reads as strings (``1e300``, ``1.0e5``: its float
#: needs a dot and a signed exponent), read as floats by specs and by ``-p`` values alike.
EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _unique_key_loader() -> type:
    """A ``yaml.SafeLoader`` that refuses a mapping with the same key twice (JSON too, which
    it reads as YAML): the plain loader would keep the last value silently. A plain scalar
    such as ``1e300`` (:data:`EXPONENT_NUMBER`) is a float, as YAML 1.2 and JSON read it."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, list | dict):  # unhashable: the base class reports it
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                          re.compile(f"^(?:{EXPONENT_NUMBER.pattern})$"),
                                          list("-+0123456789."))
    return UniqueKeyLoader


def parse_spec(source: str | os.PathLike | Mapping[str, Any],
               fixed: Mapping[str, Any] | None = None,
               declared: Mapping[str, Any] | None = None, *,
               reserved: Iterable[str] = RESERVED, owner: str = "the notebook",
               max_points: int | None = None, limit_name: str = "max_points") -> SweepSpec:
    """Parse ``source`` into a :class:`SweepSpec`; ``fixed`` adds parameters shared by every
    point (``-p NAME VALUE``). With ``declared`` (name -> default: a notebook's, from
    :func:`mfgwork.workflows.runs.notebook_parameters`, or a problem's, from
    :func:`signature_parameters`), names must be declared and values must fit the type of
    the defaults (:func:`coerce_parameter`). ``reserved`` names are set per point by the
    caller and refused; ``owner`` names the declaring side in messages. ``max_points``
    refuses grids with more points (``limit_name`` is the caller's name for it), counted
    before any axis is expanded. The same values twice on an axis (after the type rule, so
    ``1`` and ``1.0`` for a float) are refused: every point is a distinct parameter set."""
    reserved = tuple(reserved)
    raw = read_spec(source)
    if fixed is not None and not isinstance(fixed, Mapping):
        raise SpecError(f"fixed={fixed!r:.80} ({type(fixed).__name__}) is invalid: must be a "
                        "mapping of parameter names to values, or None")
    zips = _zip_groups(raw.pop("zip", None), raw)
    lengths = axis_lengths(raw, zips)
    if max_points is not None:
        check_count(math.prod(lengths.values()), max_points, limit_name)
    fixed = dict(fixed or {})
    for name in fixed:
        if name in raw:
            raise SpecError(f"parameter {name!r} is given both in the grid spec and with -p")
    items = list(raw.items()) + list(fixed.items())
    for name, _ in items:
        if not isinstance(name, str):
            raise SpecError(f"parameter name {name!r} must be a string")
        if name in reserved:
            where = "the fixed parameters (-p)" if name in fixed else "the spec"
            raise SpecError(f"parameter {name!r} is set by the sweep for each run (its run "
                            f"folder under the sweep folder, given as out_dir: -o OUT on the "
                            f"command line); remove it from {where}")
    if declared is not None:
        unknown = [n for n, _ in items if n not in declared]
        if unknown:
            raise SpecError(f"unknown parameter(s) {', '.join(map(repr, unknown))}: {owner} "
                            f"has {', '.join(sorted(set(declared) - set(reserved)))}")
    defaults = {n: (declared or {}).get(n, ...) for n, _ in items}
    lists = {n: [_coerce(n, v, defaults[n], owner) for v in _values(n, spec)]
             for n, spec in raw.items()}
    consts = {n: _coerce(n, _scalar(n, v), defaults[n], owner) for n, v in fixed.items()}
    for n in [n for n, v in lists.items() if not isinstance(raw[n], list | dict)]:
        consts[n] = lists.pop(n)[0]                      # a bare scalar in the spec

    axes, seen = [], set()
    for name in lists:
        if name in seen:
            continue
        group = next((g for g in zips if name in g), (name,))
        values = tuple(zip(*(lists[n] for n in group), strict=True))  # (lengths checked)
        _check_distinct(group, values)
        axes.append((group, values))
        seen.update(group)
    return SweepSpec(axes=tuple(axes), fixed=consts)


def _check_distinct(group: tuple[str, ...], values: tuple[tuple[Scalar, ...], ...]) -> None:
    """Refuse an axis that lists the same value (tuple, for a zip group) twice."""
    keys = [json.dumps(v) for v in values]
    if len(set(keys)) < len(keys):
        twice = next(v for k, v in zip(keys, values, strict=True) if keys.count(k) > 1)
        shown = twice[0] if len(group) == 1 else dict(zip(group, twice, strict=True))
        raise SpecError(f"parameter {', '.join(map(repr, group))} lists the value {shown!r} "
                        "more than once (after conversion to the declared type): every point "
                        "of a grid must be a distinct parameter set")


def check_count(planned: int, max_points: int, limit_name: str = "max_points") -> None:
    """Refuse a grid of more than ``max_points`` points (``limit_name``: its option, whose
    name after ``max_`` says what a point is: runs, points)."""
    if planned > max_points:
        unit = limit_name.removeprefix("max_")
        raise SpecError(f"the grid spec plans {planned} {unit}, more than {limit_name}="
                        f"{max_points}: make the grid coarser or split it, or raise "
                        f"{limit_name}")


def count_points(raw: Mapping[str, Any]) -> int:
    """The exact number of points a raw spec asks for, computed from list lengths and
    linspace/range arguments without expanding any axis; a zip group counts as one axis.
    A malformed axis or zip group, or a zip of unequal lengths, raises :class:`SpecError`."""
    raw = dict(raw)
    zips = _zip_groups(raw.pop("zip", None), raw)
    return math.prod(axis_lengths(raw, zips).values())


def axis_lengths(raw: Mapping[str, Any], zips: Iterable[tuple[str, ...]]) -> dict[str, int]:
    """Each axis's number of values (a zip group under its first name), counted from its
    definition (:func:`axis_length`), before any list is built. The parameters of a zip group
    must have the same length: else :class:`SpecError` naming each length."""
    counts = {name: axis_length(name, spec) for name, spec in raw.items()}
    for group in zips:
        lengths = {n: counts.pop(n) for n in group}
        if len(set(lengths.values())) > 1:
            raise SpecError(f"zipped parameters must have lists of equal length, got "
                            f"{', '.join(f'{n}: {k}' for n, k in lengths.items())}")
        if group:
            counts[group[0]] = lengths[group[0]]
    return counts


def axis_length(name: str, spec: Any) -> int:
    """The exact number of values of one axis (1 for a scalar), from its definition: a
    list's length, a linspace's n, a range's ceil((b - a) / step) (Python integers, never
    overflowing); refuses what :func:`_values` would refuse, with the same messages."""
    if isinstance(spec, list):
        if not spec:
            raise SpecError(f"parameter {name!r} has an empty list of values")
        return len(spec)
    if isinstance(spec, dict):
        kind, args = _mapping_args(name, spec)
        return _linspace_count(name, args[2]) if kind == "linspace" \
            else _range_count(name, *args)
    return 1


def _zip_groups(spec: Any, raw: Mapping[str, Any]) -> list[tuple[str, ...]]:
    if spec is None:
        return []
    if not isinstance(spec, list) or not all(isinstance(g, list) for g in spec):
        raise SpecError(f"zip must be a list of lists of parameter names, got {spec!r}")
    groups, used = [], set()
    for g in spec:
        for n in g:
            if n not in raw or not isinstance(raw[n], list | dict):
                raise SpecError(f"zip names {n!r}, which is not a list or range in the spec")
            if n in used:
                raise SpecError(f"zip names {n!r} more than once")
            used.add(n)
        groups.append(tuple(g))
    return groups


# -- values ------------------------------------------------------------------------------------
def _values(name: str, spec: Any) -> list[Scalar]:
    """The list of values of one axis."""
    if isinstance(spec, list):
        if not spec:
            raise SpecError(f"parameter {name!r} has an empty list of values")
        return [_scalar(name, v) for v in spec]
    if isinstance(spec, dict):
        kind, args = _mapping_args(name, spec)
        return _linspace(name, *args) if kind == "linspace" else _range(name, *args)
    return [_scalar(name, spec)]


def _mapping_args(name: str, spec: dict[Any, Any]) -> tuple[str, list[int | float]]:
    """``("linspace" | "range", [a, b, n | step])`` of an axis given as a mapping, checked:
    three numbers, each finite in float64."""
    if len(spec) != 1 or next(iter(spec)) not in ("linspace", "range"):
        raise SpecError(f"parameter {name!r}: a mapping must be {{linspace: [a, b, n]}} or "
                        f"{{range: [a, b, step]}}, got {spec!r:.200}")
    kind, args = next(iter(spec.items()))
    if not isinstance(args, list) or len(args) != 3 or not all(map(_is_finite, args)):
        raise SpecError(f"parameter {name!r}: {kind} takes three finite numbers (within the "
                        f"range of float64), got {args!r:.200}")
    return kind, args


def _linspace_count(name: str, n: int | float) -> int:
    """A linspace's count ``n``: an integer >= 1 (an integral float is accepted)."""
    if not (isinstance(n, int) or n.is_integer()) or n < 1:
        raise SpecError(f"parameter {name!r}: linspace count n={n!r} must be an integer >= 1")
    return int(n)


def _range_count(name: str, a: float, b: float, step: float) -> int:
    """The number of values a, a + step, ... before b: ``len(range(a, b, step))`` for
    integers (by integer arithmetic: any size), else ceil((b - a) / step - 1e-9) (an end
    point reached up to round-off stays excluded), at least 1; refused beyond
    :data:`MAX_COUNT` (a quotient that overflows float64 included)."""
    if step == 0 or b == a or (b > a) != (step > 0):
        raise SpecError(f"parameter {name!r}: range [{_listed(a, b, step)}] is empty "
                        f"(step must be non-zero and point from a to b)")
    quotient = (float(b) - float(a)) / float(step)  # inf when it overflows
    if all(isinstance(v, int) for v in (a, b, step)):
        count = -((a - b) // step)                      # len(range(a, b, step)), exact
    else:
        count = math.ceil(quotient - 1e-9) if quotient <= MAX_COUNT else MAX_COUNT + 1
    if count > MAX_COUNT:
        raise SpecError(f"parameter {name!r}: range [{_listed(a, b, step)}] has more than 2**53 "
                        f"values ((b - a) / step = {quotient:.3g}): a range must have at most "
                        "2**53 values (and a grid at most the scan's or sweep's limit): make "
                        "the step larger")
    return max(1, count)


def _listed(*values: float) -> str:
    """Finite numbers as a spec lists them, an integer of 16 digits or more as 1e+300."""
    return ", ".join(f"{v:.6g}" if abs(v) >= 10**15 else str(v) for v in values)


def _linspace(name: str, a: float, b: float, n: float) -> list[Scalar]:
    n = _linspace_count(name, n)
    if n == 1:
        return [_tidy(a)]
    return [_tidy(a + (b - a) * k / (n - 1)) for k in range(n)]


def _range(name: str, a: float, b: float, step: float) -> list[Scalar]:
    count = _range_count(name, a, b, step)
    if all(isinstance(v, int) for v in (a, b, step)):
        return list(range(a, b, step))
    return [_tidy(a + k * step) for k in range(count)]


def _tidy(v: float) -> float:
    """Round away binary noise (0.30000000000000004 -> 0.3) so names and hashes are stable."""
    return float(f"{v:.12g}")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_finite(v: Any) -> bool:
    """A number within the range of float64 (an int of any size converts to a finite one)."""
    if not _is_number(v):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _scalar(name: str, v: Any) -> Scalar:
    if v is None or isinstance(v, str | bool):
        return v
    if _is_number(v):
        if not _is_finite(v):
            raise SpecError(f"parameter {name!r}: value {v!r:.60} is invalid: must be a finite "
                            "number within the range of float64")
        return v
    raise SpecError(f"parameter {name!r}: value {v!r} ({type(v).__name__}) is not allowed: "
                    f"use numbers, strings, booleans or null")


def _coerce(name: str, v: Scalar, default: Any, owner: str) -> Scalar:
    try:
        return coerce_parameter(name, v, default, owner)
    except ParameterError as exc:
        raise SpecError(str(exc)) from None


# -- the type rule -----------------------------------------------------------------------------
def coerce_parameter(name: str, value: Any, default: Any, owner: str = "the notebook") -> Any:
    """``value`` checked against the type of ``default`` (the one rule for runs, sweeps and
    scans): a float default takes an int or a float (returned as float), an int default an
    int or an integral float (returned as int), a bool default a bool only; any other default
    a value of its type. A default of None or ``...`` (none declared) takes anything.
    Raises :class:`~mfgwork.core.errors.ParameterError` naming the parameter, the value and
    the type expected."""
    if default is ... or default is None:
        return value
    want = type(default)
    if want is float and _is_number(value):
        return float(value)
    if want is int and _is_number(value) and float(value).is_integer():
        return int(value)
    if isinstance(default, bool) or isinstance(value, bool):
        ok = type(value) is want
    else:
        ok = isinstance(value, want)
    if ok:
        return value
    kind = want.__name__
    raise ParameterError(f"{name}={value!r} ({type(value).__name__}) is invalid: {owner} "
                         f"expects {'an' if kind[0] in 'aeiou' else 'a'} {kind} like its "
                         f"default {default!r}")


_PROTOTYPES = {float: 0.0, int: 0, bool: False, str: "", "float": 0.0, "int": 0,
               "bool": False, "str": ""}


def signature_parameters(factory: Callable[..., Any]) -> dict[str, Any]:
    """Name -> default of the keyword parameters of ``factory`` (a problem class: those of
    its ``__init__``). A parameter without a default is typed by its annotation where that is
    float, int, bool or str (a value of that type stands for the default), else ``...``."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        raise ParameterError(f"problem={factory!r} is invalid: its parameters cannot be "
                             "read (it needs a Python signature)") from None
    out: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            continue
        if p.default is not p.empty:
            out[p.name] = p.default
        else:
            out[p.name] = _PROTOTYPES.get(p.annotation, ...)
    return out


# -- naming ------------------------------------------------------------------------------------
def parameters_hash(parameters: Mapping[str, Scalar]) -> str:
    """SHA-256 (hex) of the sorted, compact JSON of ``parameters``."""
    blob = json.dumps(dict(parameters), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_name(parameters: Mapping[str, Scalar], varying: Iterable[str] = (),
             digits: int = 12) -> str:
    """``<slug>-<hash prefix>``: the slug shows the ``varying`` values, the hash names the
    full parameter set."""
    slug = "_".join(f"{n}={parameters[n]}" for n in varying)
    slug = re.sub(r"[^A-Za-z0-9._=+-]+", "-", slug)[:80].strip("-_.")
    digest = parameters_hash(parameters)[:digits]
    return f"{slug}-{digest}" if slug else digest
