"""A device batch's Newton iteration evaluated by a recorded CUDA graph.

At coarse grids a batch's Newton iteration on a GPU costs the host's launches rather than the
GPU's work: the running cost, the fused HJB and FP sweeps, the observed state, the residual
and the iteration's sums are a few dozen small launches, measured on an H200 (1024 Santa Fe
problems at 51², float32) at 1.6 ms of host time an iteration (a tiny torch operation took
14 µs of it, a Triton launch 62 µs). From the second iteration on, every evaluation has the
same shapes and is seeded by the current U (:meth:`~.batch_newton.BatchNewton.step`), so it
is recorded there
(:class:`~mfgwork.core.cuda_graphs.GraphedCall`, its first replay checked bitwise against
the eager evaluation by :func:`~mfgwork.core.cuda_graphs.record_checked`, which falls back to
eager evaluations with a RuntimeWarning where they differ) and replayed after. The HJB
sweep's Newton status is read with the sums, in the iteration's one host read. A replay's
time is booked as the HJB phase's (its FP phase is 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.backend import Backend
from ..core.cuda_graphs import record_checked
from .fdm.kernels import FusedTriton
from .fdm.sweeps import FiniteDifferences

#: Values of a batch's U (problems × levels × nodes) up to which its evaluations are recorded:
#: a coarse stage's 1024 × 52 × 51 (2.7·10⁶), not a fine grid's, whose iterations the GPU's
#: work bounds and whose recording would hold its arrays once more
RECORDED_VALUES = 1 << 23
#: Smallest batch whose evaluations are recorded (smaller ones, single solves above all,
#: do not pay the recording)
RECORDED_FROM = 64


def recorded_sweeps(hjb: Any, fp: Any, backend: Backend, levels: int, nodes: int, batch: int
                    ) -> FiniteDifferences | None:
    """The sweeps of a system whose evaluations :class:`RecordedEvaluation` may record: its
    ``hjb`` and ``fp`` the fused Triton sweeps of one :class:`~.fdm.sweeps.FiniteDifferences`
    on CUDA, for a Hamiltonian that does not depend on m, a batch of at least
    :data:`RECORDED_FROM` problems and at most :data:`RECORDED_VALUES` values; else None."""
    fd = getattr(hjb, "__self__", None)
    if (backend.kind != "cuda" or not isinstance(fd, FiniteDifferences)
            or hjb != fd.solve_hjb or fp != fd.solve_fp
            or not isinstance(fd.kernels, FusedTriton) or fd.hamiltonian.depends_on_m
            or batch < RECORDED_FROM or batch * levels * nodes > RECORDED_VALUES):
        return None
    return fd


class RecordedEvaluation:
    """``evaluate(w, U, M) -> (U_w, M_w, g, R, sums, status)``: the best response at the
    points w (B, nt) seeded by the current U, its residual R = g − w, the iteration's sums
    against the current U and M (device, (7, B)) and the HJB sweep's Newton status (device,
    (2, B)); eager at the first call, which records it, replayed after (outputs copied out:
    an accepted point keeps them)."""

    def __init__(self, evaluate: Callable[..., tuple[Any, ...]]) -> None:
        self.evaluate = evaluate
        self.graphed: Any = None
        self.recorded = False

    def __call__(self, w: Any, U: Any, M: Any) -> tuple[Any, ...]:
        if self.graphed is not None:
            return self.graphed.run(w, U, M)
        eager = self.evaluate(w, U, M)
        if not self.recorded:
            self.recorded = True
            self.graphed = record_checked(self.evaluate, eager, w, U, M,
                                          what="batched Newton iteration's evaluation")
        return eager
