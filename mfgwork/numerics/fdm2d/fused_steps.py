"""The HJB Newton steps and the FP steps of :class:`.sweeps.Scheme2D` on the fused Krylov
path (:mod:`.fused_krylov`), each step's host work a few calls.

A step's assembly (J and R, or J and the FP right-hand side), its measures and the start of
its BiCGStab solve form one function of fixed buffers: on CUDA it is recorded once per shape
as a CUDA graph (checked bitwise against the eager call, :func:`mfgwork.core.cuda_graphs.
record_checked`) and replayed, so a Newton update costs one replay, one read of the
measures, the solver's chunks and one subtraction, whatever the Hamiltonian's array code.
The arithmetic is that of the unfused path: only the solver's start (the FP solves from the
previous sweep's step) and the Krylov iterates differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.cuda_graphs import record_checked
from ...core.errors import SolverError
from .fused_krylov import FusedBiCGStab
from .stencil import Coefficients


class _Recorded:
    """``fn(*inputs)`` on fixed input buffers (loaded by :meth:`load` or changed in place),
    its outputs in :attr:`outputs`; a CUDA graph replay when ``graphs`` and the recording
    matches the eager call, else an eager call."""

    def __init__(self, fn: Callable[..., Any], inputs: list[Any], graphs: bool,
                 what: str) -> None:
        self.fn, self.inputs, self.graph = fn, [a.clone() for a in inputs], None
        self.outputs = fn(*self.inputs)   # eagerly first: compiles the kernels it launches
        if graphs:
            self.graph = record_checked(fn, self.outputs, *self.inputs, what=what)
        if self.graph is not None:
            self.inputs, self.outputs = self.graph.inputs, self.graph.outputs

    def load(self, *inputs: Any) -> None:
        for buffer, a in zip(self.inputs, inputs, strict=True):
            buffer.copy_(a)

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.graph.replay()
        else:
            self.outputs = self.fn(*self.inputs)


class FusedSteps:
    """The fused steps of one :class:`.sweeps.Scheme2D` (its stencil, tolerances and
    counters), with their recordings and solvers per shape."""

    def __init__(self, scheme: Any, steps: int, fail: float) -> None:
        self.scheme, self.stencil, self.xp = scheme, scheme.stencil, scheme.xp
        self.steps, self.fail = steps, fail
        self.solvers: dict[tuple, FusedBiCGStab] = {}
        self.recorded: dict[tuple, _Recorded] = {}

    def solver(self, transpose: bool, like: Any) -> FusedBiCGStab:
        key = (transpose, tuple(like.shape))
        if key not in self.solvers:
            self.solvers[key] = FusedBiCGStab(like.shape, like, transpose, self.steps,
                                              self.scheme.use_cuda_graphs)
        return self.solvers[key]

    def _step(self, name: str, fn: Callable[..., Any], inputs: list[Any]) -> _Recorded:
        """The recording of ``fn`` for these inputs' shapes, loaded with them and run."""
        key = (name, *(tuple(a.shape) for a in inputs))
        step = self.recorded.get(key)
        if step is None:
            self.recorded[key] = _Recorded(fn, inputs, self.scheme.use_cuda_graphs,
                                           f"2-D {name} step")
            return self.recorded[key]
        step.load(*inputs)
        step()
        return step

    def _finish(self, solver: FusedBiCGStab, coefs: tuple[Any, ...], b: Any, transpose: bool,
                rtol: float) -> Any:
        x, k = solver.finish(b, self.stencil.operator(Coefficients(*coefs, None), transpose),
                             rtol=rtol, max_iter=self.scheme.max_krylov,
                             fail=self.fail * rtol)
        self.scheme.krylov_iterations += k
        return x

    def newton_level(self, u: Any, u_next: Any, F_n: Any, m: Any | None, max_newton: int,
                     where: str) -> Any:
        """u^n by Newton from ``u`` (the test and the inexact updates of
        :meth:`.sweeps.Scheme2D.solve_hjb`)."""
        scheme, st, xp = self.scheme, self.stencil, self.xp
        solver = self.solver(False, u)

        def assemble(u: Any, u_next: Any, F_n: Any, *m: Any) -> tuple[Any, ...]:
            c, R = st.system(u, u_next, F_n, m[0] if m else None)
            solver.start(c[:5], R, None, None)
            return (*c[:5], R, xp.stack([xp.reshape(a, (-1,))
                                         for a in scheme.newton_measures(u, R)]))

        step = self._step("Newton", assemble, [u, u_next, F_n] + ([] if m is None else [m]))
        previous = None
        for _ in range(max_newton + 1):
            size, scale, norm = np.asarray(step.outputs[-1].cpu().numpy(), dtype=np.float64)
            if float(np.max(size)) <= scheme.newton_tol:
                return step.inputs[0].clone()
            x = self._finish(solver, step.outputs[:5], step.outputs[5], False,
                             scheme._newton_rtol(scale, norm, previous))
            previous = norm
            scheme.newton_iterations += 1
            step.inputs[0].sub_(x)
            step()
        raise SolverError(f"HJB Newton did not converge at {where} in {max_newton} iterations")

    def fp_level(self, u_n: Any, m: Any | None, mass: Any, guess: Any) -> Any:
        """μ^{n+1} from J(u^n)ᵀ μ^{n+1} = μ^n/Δt, the solve started from ``guess``."""
        st = self.stencil
        solver = self.solver(True, mass)

        def assemble(u_n: Any, mass: Any, guess: Any, *m: Any) -> tuple[Any, ...]:
            c = st.jacobian(u_n, m[0] if m else None, exits=False)
            b = mass * st.inv_dt
            solver.start(c[:5], b, guess, st.operator(c, transpose=True))
            return (*c[:5], b)

        step = self._step("FP", assemble, [u_n, mass, guess] + ([] if m is None else [m]))
        return self._finish(solver, step.outputs[:5], step.outputs[5], True,
                            self.scheme.krylov_rtol)
