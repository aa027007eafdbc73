"""Several populations sharing one observation.

K groups with shares w_k > 0, Σ_k w_k = 1, share the domain and the horizon; each has its own
single-population model (σ_k, m0_k, g_k, its payoff) and Hamiltonian, and m_k is a probability
density. What couples them is the path they all observe,

    z(t) = Σ_k w_k z_k(t),   z_k(t) the observation of group k's density m_k(t, ·),

and group k's running cost is its model's running cost for that shared path. Santa Fe
(:class:`SantaFePopulations`): z_k = A_k(t) = ∫_{θ>0} m_k(t, θ) dθ, the total attendance
A = Σ_k w_k A_k, and group k earns F_k(A) = G_k − (G_k − B_k) s((A − A*_k)/ε_k) when it
attends: regulars and newcomers with different thresholds and noise sharing one bar.

A group's model can be any single-population problem whose running cost passes through one
path (``coupling_size(nx, nt) == nt``, or, where its Hamiltonian depends on m, a coupling that
observes one: Santa Fe's attendance): what the solver needs per group is the running cost as a
function of the shared path, and, for Newton's method, the potential the coupling declares
(χ and the price slope; without one, Anderson mixing).

Congestion: a group whose Hamiltonian depends on m (``Congestion``) sees the density of the
whole population, ρ = Σ_k w_k m_k (a crowd slows everyone in it, whatever their group; with one
group, ρ = m as in a single-population solve). The groups then share the observation (z, ρ),
and the iteration runs on both (Anderson mixing; :mod:`mfgwork.numerics.populations`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, get_backend
from ..core.errors import ParameterError, check_real
from ..core.grid import Grid
from .base import MFGProblem
from .hamiltonians import Hamiltonian
from .santa_fe import SantaFeBar

#: How far from one the sum of the shares may be (the shares are not renormalised).
SHARE_TOLERANCE = 1e-12
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def observes_one_path(model: MFGProblem) -> bool:
    """Whether ``model``'s running cost passes through one observed path: its coupling state
    is that path, or (H depending on m) its coupling observes one (``coupling.observed``)."""
    if model.coupling_size(3, 2) == 2:
        return True
    if not model.hamiltonian.depends_on_m:
        return False
    coupling = model.coupling(model.grid(5, 2), get_backend("numpy"))
    observed = getattr(coupling, "observed", None)
    return observed is not None


@dataclass(frozen=True)
class Population:
    """One group: its ``name`` (an identifier, used to label its arrays), its ``share`` w_k
    of the whole population (0 < w_k ≤ 1) and its single-population ``model``, which holds
    its σ, m0, costs and Hamiltonian (e.g. ``SantaFeBar(threshold=0.7, sigma=0.8,
    hamiltonian=Power(2.5))``; default ½|p|²). A Hamiltonian that depends on m (congestion)
    sees the whole population's density ρ = Σ_k w_k m_k (module docstring)."""

    name: str
    share: float
    model: MFGProblem

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ParameterError(f"name={self.name!r:.80} is invalid: must be an identifier "
                                 "(letters, digits and _, not starting with a digit, at most "
                                 "64 characters): it labels the group's arrays")
        share = check_real("share", self.share, low=0.0, high=1.0, high_open=False)
        object.__setattr__(self, "share", share)
        if not isinstance(self.model, MFGProblem):
            raise ParameterError(f"model={self.model!r:.80} is invalid for population "
                                 f"{self.name!r}: must be an mfgwork.MFGProblem (e.g. "
                                 "mw.SantaFeBar(...))")
        if not observes_one_path(self.model):
            raise ParameterError(f"model={self.model!r:.80} is invalid for population "
                                 f"{self.name!r}: its running cost must pass through one "
                                 "observed path (as Santa Fe's attendance), not the whole "
                                 "density")

    @property
    def hamiltonian(self) -> Hamiltonian:
        """The group's Hamiltonian (its model's)."""
        return self.model.hamiltonian

    def params(self) -> dict[str, Any]:
        """JSON-ready: name, share and the model's parameters (with its Hamiltonian)."""
        return {"name": self.name, "share": self.share} | self.model.params()


@dataclass(frozen=True, eq=False)
class Populations:
    """K ≥ 1 groups (:class:`Population`) on one domain and horizon, coupled through the
    share-weighted sum of their observed paths (module docstring). The shares must sum to
    one within :data:`SHARE_TOLERANCE` (they are not renormalised); names are unique."""

    groups: tuple[Population, ...]
    name: str = field(default="populations", kw_only=True)

    state_name = "x"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(f"name={self.name!r:.80} is invalid: must be a non-empty str "
                                 "(the problem's name in its results)")
        groups = self.groups
        if not isinstance(groups, list | tuple) or not groups:
            raise ParameterError(f"groups={groups!r:.80} is invalid: must be a non-empty list "
                                 "of mfgwork.Population")
        for k, g in enumerate(groups):
            if not isinstance(g, Population):
                raise ParameterError(f"groups[{k}]={g!r:.80} is invalid: must be an "
                                     "mfgwork.Population(name, share, model)")
        names = [g.name for g in groups]
        for k, n in enumerate(names):
            if n in names[:k]:
                raise ParameterError(f"groups[{k}].name={n!r} is invalid: names must be "
                                     "unique (they label the groups' arrays)")
        total = float(np.sum([g.share for g in groups]))
        if abs(total - 1.0) > SHARE_TOLERANCE:
            shares = ", ".join(f"{g.name}={g.share!r}" for g in groups)
            raise ParameterError(f"groups[*].share={total:.15g} in sum ({shares}) is invalid: the "
                                 f"shares must sum to 1 within {SHARE_TOLERANCE:g} (they are "
                                 "not renormalised)")
        first = groups[0].model
        for k, g in enumerate(groups):
            for attr in ("x_min", "x_max", "T"):
                if getattr(g.model, attr) != getattr(first, attr):
                    raise ParameterError(
                        f"groups[{k}].model.{attr}={getattr(g.model, attr)!r} is invalid: the "
                        f"groups share the domain and T, so it must equal "
                        f"groups[0].model.{attr}={getattr(first, attr)!r}")
        object.__setattr__(self, "groups", tuple(groups))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groups)

    @property
    def shares(self) -> np.ndarray:
        """w (K,)."""
        return np.array([g.share for g in self.groups])

    @property
    def models(self) -> tuple[MFGProblem, ...]:
        return tuple(g.model for g in self.groups)

    @property
    def T(self) -> float:
        return self.groups[0].model.T

    def grid(self, nx: int, nt: int) -> Grid:
        return self.groups[0].model.grid(nx, nt)

    def params(self) -> dict[str, Any]:
        """JSON-ready description: the problem's name and one entry per group."""
        first = self.groups[0].model
        return {"problem": self.name, "x_min": first.x_min, "x_max": first.x_max,
                "T": first.T, "populations": [g.params() for g in self.groups]}

    def observables(self, grid: Grid, M: Any, backend: Backend) -> dict[str, Any]:
        """Each group's observables (``<key>_<name>``, from its model, M (K, nt+1, nx)) and
        their share-weighted sums (``<key>``: the whole population's, for observables linear
        in a density of mass one, as attendance and mean state are)."""
        per = [g.model.observables(grid, M[k], backend) for k, g in enumerate(self.groups)]
        out = {key: sum(g.share * o[key] for g, o in zip(self.groups, per, strict=True))
               for key in per[0] if all(key in o for o in per)}
        for g, o in zip(self.groups, per, strict=True):
            out |= {f"{key}_{g.name}": v for key, v in o.items()}
        return out

    def summary(self, grid: Grid, observables: dict[str, np.ndarray]) -> dict[str, float]:
        """Each group's model summary of its own observables, keys suffixed ``_<name>``."""
        out: dict[str, float] = {}
        for g in self.groups:
            own = {key.removesuffix(f"_{g.name}"): v for key, v in observables.items()
                   if key.endswith(f"_{g.name}")}
            out |= {f"{key}_{g.name}": v for key, v in g.model.summary(grid, own).items()}
        return out


@dataclass(frozen=True, eq=False)
class SantaFePopulations(Populations):
    """Santa Fe Bar with several groups (:class:`Population` of :class:`SantaFeBar` models)
    sharing one bar: the total attendance A = Σ_k w_k A_k sets every group's payoff
    F_k(A). Observables: ``attendance`` A(t), ``mean_state`` E[θ](t) and, per group,
    ``attendance_<name>`` A_k(t) and ``mean_state_<name>``; summary: the total attendance's
    mean, min and max, and per group its mean attendance and ``time_overcrowded_<name>``
    (time with A > A*_k)."""

    name: str = field(default="santa_fe_populations", kw_only=True)
    state_name = "θ"

    def __post_init__(self) -> None:
        super().__post_init__()
        for k, g in enumerate(self.groups):
            if not isinstance(g.model, SantaFeBar):
                raise ParameterError(f"groups[{k}].model={g.model!r:.80} is invalid: must be an "
                                     "mfgwork.SantaFeBar (use Populations for other models)")

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SantaFePopulations:
        """The problem whose :meth:`params` are ``params``."""
        return cls(tuple(Population(p["name"], p["share"], SantaFeBar.from_params(p))
                         for p in params["populations"]))

    def summary(self, grid: Grid, observables: dict[str, np.ndarray]) -> dict[str, float]:
        A = np.asarray(observables["attendance"], dtype=np.float64)
        out = {"mean_attendance": float(np.mean(A)), "max_attendance": float(np.max(A)),
               "min_attendance": float(np.min(A)),
               "final_mean_preference": float(observables["mean_state"][-1])}
        for g in self.groups:
            own = g.model.summary(grid, {"attendance": A,
                                         "mean_state": observables[f"mean_state_{g.name}"]})
            out[f"time_overcrowded_{g.name}"] = own["time_overcrowded"]
            out[f"mean_attendance_{g.name}"] = float(np.mean(observables[f"attendance_{g.name}"]))
        return out
