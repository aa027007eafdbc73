"""Hamiltonians H(x, p, m): what a model says about the cost of moving, written once.

Convention (ν = σ²/2): the HJB equation is −∂t u − ν Δu + H(x, ∂x u, m) = f(t, x, m), the
optimal control is α* = −∂p H(x, ∂x u, m), and the FP equation transports m by it:
∂t m − ν Δm − ∂x(m ∂p H(x, ∂x u, m)) = 0. H is convex in p and smallest at p = 0 (an agent
who does not move pays least), which is what makes the upwind splitting below monotone.

The scheme needs, at node i with the one-sided gradients q_{i−1} (backward) and q_i
(forward), the Engquist–Osher numerical Hamiltonian

    Ĥ_i = H(x_i, (q_{i−1})_+, m_i) + H(x_i, (q_i)_−, m_i) − H(x_i, 0, m_i)

and its partial derivatives ∂Ĥ/∂q_{i−1} = ∂p H(x_i, (q_{i−1})_+, m_i) ≥ 0 and
∂Ĥ/∂q_i = ∂p H(x_i, (q_i)_−, m_i) ≤ 0 (:meth:`Hamiltonian.numerical`): the Newton Jacobian of
the HJB step and, by adjointness, the FP matrix. Tangent sweeps (Newton on the coupling) also
use ∂pp H; models whose H depends on m give ∂m H.

On 2-D grids an *isotropic* H (a function of |p|: ``isotropic = True``) is discretised as
Ĥ = H(x, √P², m) with P² = Σ_axes [(q_back)_+² + (q_fwd)_−²] (:meth:`Hamiltonian.numerical_nd`);
by the chain rule ∂Ĥ/∂q_back = ∂p H(x, √P², m) (q_back)_+ / √P² ≥ 0 and
∂Ĥ/∂q_fwd = ∂p H(x, √P², m) (q_fwd)_− / √P² ≤ 0 (0 where P = 0): monotone again. For
H = ½|p|² this is the sum of the 1-D Godunov Hamiltonians of the axes.

Every method takes arrays of one namespace ``xp`` (NumPy or torch, any device) and works
elementwise with broadcasting, so the same definition serves every backend.

A model is one definition: :meth:`Hamiltonian.value`. Its derivatives ∂p H, ∂pp H, ∂m H are
derived from it symbolically (:mod:`.symbolic`: ``value`` traced with SymPy symbols, the
model's numeric fields included, then differentiated and printed as array code and as the
compiled CPU scheme's scalar functions). ``dp``, ``dpp`` and ``dm`` written by hand are still
accepted: :meth:`Hamiltonian.check` compares them with the derived ones. A ``value`` that
cannot be traced (an operation outside the traced ``xp``) keeps the generic array path if
``dp`` and ``dpp`` are written by hand (with a one-line note), and is refused otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..core.errors import ParameterError, check_real, warn
from .symbolic import Traced, trace


def _positive(v: Any, xp: Any) -> Any:
    return 0.5 * (v + xp.abs(v))


def _negative(v: Any, xp: Any) -> Any:
    return 0.5 * (v - xp.abs(v))


_NOTED: set[type] = set()


class Hamiltonian:
    """Base class: subclasses define :meth:`value` (and ``depends_on_m = True`` where H
    depends on the density); :meth:`dp`, :meth:`dpp` and :meth:`dm` are derived from it
    (module docstring), or written by hand and checked."""

    #: Short name, recorded in a result's params.
    name = "hamiltonian"
    #: Whether H depends on m (then FP's drift does too, and the coupling state is the density).
    depends_on_m = False
    #: Whether H depends on p only through |p| (then :meth:`numerical_nd` serves 2-D grids).
    isotropic = False

    @property
    def bounded_curvature(self) -> bool:
        """Whether ∂pp H is bounded (near p = 0); where it is not, the tangent sweeps of
        Newton's method on the coupling state cap it near p = 0 (an approximate tangent)."""
        return True

    def value(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        """H(x, p, m)."""
        raise NotImplementedError

    def traced(self) -> Traced | None:
        """The model traced from :meth:`value` (:func:`.symbolic.trace`), or None where it
        cannot be traced (then it runs the generic array path with its own dp and dpp)."""
        found = trace(self)
        if isinstance(found, str):
            if type(self) not in _NOTED and self._hand_written("dp", "dpp"):
                _NOTED.add(type(self))
                warn(f"note: {type(self).__name__}.value cannot be traced ({found}); "
                     "it runs the generic array path with its own dp and dpp",
                     UserWarning)
            return None
        return found

    def _hand_written(self, *names: str) -> bool:
        return all(getattr(type(self), n) is not getattr(Hamiltonian, n) for n in names)

    def _derived(self, name: str) -> Any:
        found = trace(self)
        if isinstance(found, str):
            raise ParameterError(f"hamiltonian={self!r} is invalid: its value cannot be traced "
                                 f"({found}), so {name} cannot be derived; write value with "
                                 "the functions of xp the tracer knows, or define dp and dpp")
        return found.array_function(name)

    def dp(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        """∂p H(x, p, m) (derived from :meth:`value`)."""
        return self._derived("dp")(x, p, m, xp)

    def dpp(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        """∂pp H(x, p, m) (derived from :meth:`value`)."""
        return self._derived("dpp")(x, p, m, xp)

    def dm(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        """∂m H(x, p, m) (derived; zero unless the model depends on m)."""
        if not self.depends_on_m:
            return 0.0 * p
        return self._derived("dm")(x, p, m, xp)

    def params(self) -> dict[str, Any]:
        """JSON-ready description; ``class`` names a class of one's own that bears a shipped
        model's ``name`` (a subclass: it is not rebuilt from its params)."""
        own = SHIPPED.get(self.name) not in (None, type(self))
        return {"name": self.name} | ({"class": type(self).__name__} if own else {})

    def numerical(self, x: Any, q_left: Any, q_right: Any, m: Any, xp: Any
                  ) -> tuple[Any, Any, Any]:
        """(Ĥ, ∂Ĥ/∂q_left, ∂Ĥ/∂q_right) of the Engquist–Osher splitting (module docstring)."""
        a, b = _positive(q_left, xp), _negative(q_right, xp)
        zero = 0.0 * a
        h = self.value(x, a, m, xp) + self.value(x, b, m, xp) - self.value(x, zero, m, xp)
        return h, self.dp(x, a, m, xp), self.dp(x, b, m, xp)

    def numerical_nd(self, x: Any, q_back: list[Any], q_fwd: list[Any], m: Any, xp: Any
                     ) -> tuple[Any, list[Any], list[Any]]:
        """(Ĥ, [∂Ĥ/∂q_back per axis], [∂Ĥ/∂q_fwd per axis]) of the isotropic form
        Ĥ = H(x, √P², m) (module docstring); only for ``isotropic`` Hamiltonians."""
        if not self.isotropic:
            raise ParameterError(f"hamiltonian={self!r} is invalid on a 2-D grid: it must be "
                                 "isotropic (a function of |p|, isotropic = True)")
        back = [_positive(q, xp) for q in q_back]
        fwd = [_negative(q, xp) for q in q_fwd]
        P2 = sum(a * a for a in back) + sum(b * b for b in fwd)
        r = xp.sqrt(P2)
        safe = xp.where(r > 0, r, 1.0 + 0.0 * r)
        slope = self.dp(x, r, m, xp)
        return (self.value(x, r, m, xp), [slope * (a / safe) for a in back],
                [slope * (b / safe) for b in fwd])

    def check(self, x: np.ndarray, p_max: float = 1e3, m_max: float = 1e3) -> None:
        """Refuse (ParameterError) a Hamiltonian that is not finite, not convex in p, not
        smallest at p = 0, or whose ∂p H disagrees with the slope of H, on samples of x,
        p ∈ [−p_max, p_max] and m ∈ [0, m_max] (NumPy float64; before any work). Without
        ``depends_on_m`` the samples pass m=None, as the solvers do: a model that reads m
        without declaring it is refused here, saying so (from its traced expression, or from
        the error of an untraceable one)."""
        traced = self._checked_trace()
        p = np.concatenate([-np.logspace(3, -3, 61), [0.0], np.logspace(-3, 3, 61)])
        p = p * (p_max / 1e3)
        xs = np.asarray(x, dtype=np.float64).reshape(-1)[:: max(1, x.size // 7)]
        ms = np.array([0.0, 1e-3, 0.1, 1.0, 10.0, m_max]) if self.depends_on_m else np.zeros(1)
        X, M, P = np.meshgrid(xs, ms, p, indexing="ij")
        where = f"{self!r}"
        density = M if self.depends_on_m else None   # what the solvers pass without m
        with np.errstate(all="ignore"):
            try:
                values = [np.asarray(f(X, P, density, np), dtype=np.float64) * np.ones_like(P)
                          for f in (self.value, self.dp)]
            except TypeError as exc:
                if self.depends_on_m:
                    raise
                raise ParameterError(
                    f"hamiltonian={where} is invalid: its value or dp failed with m=None, what "
                    f"the solvers pass to a Hamiltonian that does not depend on m "
                    f"({exc}): if H reads the density m, declare depends_on_m = True in its "
                    "class (∂m H is derived from value)") from None
        H, Hp = values
        if not (np.isfinite(H).all() and np.isfinite(Hp).all()):
            raise ParameterError(f"hamiltonian={where} is invalid: H or ∂p H is not finite for "
                                 f"some |p| <= {p_max:g}, m in [0, {m_max:g}] on the domain")
        zero = H[..., p.size // 2: p.size // 2 + 1]
        scale = 1.0 + np.abs(H)
        if (H < zero - 1e-12 * scale).any():
            raise ParameterError(f"hamiltonian={where} is invalid: H(x, p, m) must be smallest "
                                 "at p = 0 (the upwind scheme's monotone splitting needs it)")
        slopes = np.diff(Hp, axis=-1)
        if (slopes < -1e-9 * (1.0 + np.abs(Hp[..., 1:]))).any():
            raise ParameterError(f"hamiltonian={where} is invalid: it is not convex in p "
                                 "(∂p H decreases somewhere)")
        secant = np.diff(H, axis=-1) / np.diff(P, axis=-1)
        low, high = np.minimum(Hp[..., :-1], Hp[..., 1:]), np.maximum(Hp[..., :-1], Hp[..., 1:])
        tol = 1e-6 * (1.0 + np.abs(secant))
        if ((secant < low - tol) | (secant > high + tol)).any():
            raise ParameterError(f"hamiltonian={where} is invalid: its dp does not match the "
                                 "slope of its value (check the derivative)")
        if traced is not None:
            self._check_hand_written(traced, X, P * (1.0 + 1.234567e-6), M)

    def _checked_trace(self) -> Traced | None:
        """:meth:`traced`, refusing a model whose value reads m without declaring
        ``depends_on_m = True``, or that cannot be traced and lacks dp and dpp."""
        found = trace(self)
        if isinstance(found, str) and not self._hand_written("dp", "dpp"):
            raise ParameterError(f"hamiltonian={self!r} is invalid: its value cannot be traced "
                                 f"({found}); write value with the functions of xp the tracer "
                                 "knows (abs, maximum, minimum, sqrt, exp, log, sign, where, "
                                 "clip, ...), or define dp and dpp")
        if not isinstance(found, str) and found.structure.reads_m and not self.depends_on_m:
            raise ParameterError(f"hamiltonian={self!r} is invalid: its value reads m (H = "
                                 f"{found.structure.value}) but the class does not declare "
                                 "depends_on_m = True")
        return self.traced()

    def _check_hand_written(self, traced: Traced, X: np.ndarray, P: np.ndarray,
                            M: np.ndarray) -> None:
        """Refuse a hand-written dp, dpp or dm that differs from the derived one (relative
        1e-6) on the samples (p off the kinks at round numbers)."""
        for name in ("dp", "dpp", "dm"):
            if not self._hand_written(name) or (name == "dm" and not self.depends_on_m):
                continue
            with np.errstate(all="ignore"):
                given = np.asarray(getattr(self, name)(X, P, M, np), dtype=np.float64)
                derived = np.asarray(traced.array_function(name)(X, P, M, np), dtype=np.float64)
            given, derived = np.broadcast_arrays(given, derived)
            finite = np.isfinite(derived) & (P != 0)
            bad = finite & ~(np.abs(given - derived) <= 1e-6 * (1.0 + np.abs(derived)))
            if bad.any():
                i = np.argmax(bad)
                raise ParameterError(
                    f"hamiltonian={self!r} is invalid: its {name} does not match the derivative "
                    f"of its value (at p={P.flat[i]:.6g}, m={M.flat[i]:.6g}: {name} = "
                    f"{given.flat[i]:.6g}, derived {derived.flat[i]:.6g}); drop it (it is "
                    "derived) or correct it")


@dataclass(frozen=True)
class Quadratic(Hamiltonian):
    """H = ½ |p|²: the control costs ½|α|², α* = −p."""

    name = "quadratic"
    isotropic = True

    def numerical(self, x: Any, q_left: Any, q_right: Any, m: Any, xp: Any
                  ) -> tuple[Any, Any, Any]:
        """Ĥ = ½ [(q_left)_+² + (q_right)_−²] (Godunov), in the fewest array operations
        (a subclass that redefines H gets the general splitting)."""
        if type(self) is not Quadratic:
            return super().numerical(x, q_left, q_right, m, xp)
        a, b = xp.clip(q_left, min=0.0), xp.clip(q_right, max=0.0)
        return 0.5 * (a * a + b * b), a, b

    def value(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        return 0.5 * p * p

    @staticmethod
    def same_model(hamiltonian: Hamiltonian) -> bool:
        """Whether ``hamiltonian``'s traced expression is ½|p|² (whatever its class): the
        array paths specialise that expression, not a type."""
        traced = hamiltonian.traced()
        return traced is not None and traced.structure.half_square


@dataclass(frozen=True)
class Power(Hamiltonian):
    """H = |p|^q / q, 1 < q ≤ 3: the control costs |α|^q' / q' with 1/q + 1/q' = 1.
    ∂pp H = (q − 1)|p|^(q−2) is unbounded at p = 0 for q < 2."""

    q: float = 1.5
    name = "power"
    isotropic = True

    def __post_init__(self) -> None:
        q = check_real("q", self.q, low=1.0, high=3.0, high_open=False)
        object.__setattr__(self, "q", q)

    def value(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        return xp.abs(p) ** self.q / self.q

    @property
    def bounded_curvature(self) -> bool:
        return self.q >= 2.0

    def params(self) -> dict[str, Any]:
        return super().params() | {"q": self.q}


@dataclass(frozen=True)
class Congestion(Hamiltonian):
    """H = |p|² / (2 (c + m)^α), c > 0, 0 < α ≤ 1: moving through a crowd costs more;
    α* = −p / (c + m)^α. Non-separable: FP's drift depends on m."""

    c: float = 1.0
    alpha: float = 0.5
    name = "congestion"
    isotropic = True
    depends_on_m = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "c", check_real("c", self.c, low=0.0))
        object.__setattr__(self, "alpha", check_real("alpha", self.alpha, low=0.0, high=1.0,
                                                     high_open=False))

    def value(self, x: Any, p: Any, m: Any, xp: Any) -> Any:
        return 0.5 * p * p * (self.c + _positive(m, xp)) ** (-self.alpha)

    def params(self) -> dict[str, Any]:
        return super().params() | {"c": self.c, "alpha": self.alpha}


SHIPPED: dict[str, type[Hamiltonian]] = {"quadratic": Quadratic, "power": Power,
                                          "congestion": Congestion}


def hamiltonian_from_params(params: object) -> Hamiltonian:
    """The shipped Hamiltonian whose :meth:`Hamiltonian.params` are ``params`` (a record
    without ``class``: those of one's own are refused)."""
    name = params.get("name") if isinstance(params, dict) else None
    if name not in SHIPPED or "class" in params:
        raise ParameterError(f"hamiltonian={params!r:.80} is invalid: only the shipped models "
                             f"({', '.join(SHIPPED)}) are rebuilt from their params, not a "
                             "model of one's own")
    return SHIPPED[name](**{k: v for k, v in params.items() if k != "name"})


def check_hamiltonian(value: object, x: np.ndarray) -> Hamiltonian:
    """``value`` if it is a :class:`Hamiltonian` that passes :meth:`Hamiltonian.check`."""
    if not isinstance(value, Hamiltonian):
        raise ParameterError(f"hamiltonian={value!r:.80} is invalid: must be an "
                             "mfgwork.Hamiltonian (Quadratic(), Power(q), Congestion(c, alpha) "
                             "or a subclass defining value)")
    if type(value) in SHIPPED.values():   # frozen, compared by value: checked once per domain
        _check_shipped(value, np.ascontiguousarray(x, dtype=np.float64).reshape(-1).tobytes())
    else:
        value.check(x)
    return value


@lru_cache(maxsize=64)
def _check_shipped(value: Hamiltonian, x: bytes) -> None:
    """:meth:`Hamiltonian.check` of a shipped model on the nodes ``x`` (their float64 bytes:
    a key hashed at the cost of a copy, not of a tuple of floats; a refusal is not cached:
    it is raised again)."""
    value.check(np.frombuffer(x, dtype=np.float64).copy())
