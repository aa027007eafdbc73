"""The HJB Newton steps and the FP steps of :class:`.sweeps.Scheme2D` on the fused Krylov
path (:mod:`.fused_krylov`), each step's host work a few calls.

A step is a function of fixed buffers: on CUDA it is recorded once per shape as a CUDA graph
(checked bitwise against the eager call, :func:`mfgwork.core.cuda_graphs.record_checked`)
and replayed, whatever the Hamiltonian's array code. Where the solver runs a solve in one
launch (:attr:`.fused_krylov.FusedBiCGStab.persistent`) the solves are inside the recording:

- **Newton**: a level is up to three Newton updates (four in a batch: :data:`UPDATES`) on
  the device: assembly of J and R, the stopping test, the tolerance of the inexact update
  (the rule of :meth:`.sweeps.Scheme2D._newton_rtol`, evaluated on the device), the solve
  and u ← u − δ; an update whose test already passes is skipped (a solve of zero
  iterations), and each level leaves a small report (the test, the updates and Krylov
  iterations made, the worst solve). A sweep (:meth:`FusedSteps.sweep`) makes
  :data:`LEVELS_PER_READ` levels, one after the other, by one replay, then reads their
  reports; a level whose test did not pass is replayed alone from where it stopped until it
  passes, and the levels after it are made again;
- **FP**: a level assembles J and the right-hand side and solves from the guess; a sweep
  (:meth:`FusedSteps.fp_sweep`) makes :data:`LEVELS_PER_READ` levels by one replay, and the
  solves' reports are kept on the device and read once per sweep (:meth:`FusedSteps.
  fp_report`).

One replay for many levels keeps the host's work (a replay, the copies of its inputs) off
the critical path: per level it cost about as much as the device's work (measured on an
H100, the 101² room, about 120 µs of host time per level and replay).

Otherwise (chunks) a step's recording holds the assembly, the measures and the solver's
start, and the host drives the solver's chunks. The arithmetic is that of the unfused path:
only the solver's start (the FP solves from the previous sweep's step) and the Krylov
iterates differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.cuda_graphs import record_checked
from ...core.errors import SolverError, warn
from .fused_assembly import FusedAssembly, fused_assembly_serves
from .fused_krylov import FusedBiCGStab
from .stencil import Coefficients

#: Newton updates per level in a replay, for a single problem and for a batch: inside the
#: fixed point (inexact sweeps from the previous iterate) a level of the room takes one
#: update, a batch's levels about two (the test waits for all its problems); an update whose
#: test already passes costs about 10 µs (no Krylov iteration), while a level that needs more
#: than a replay makes the rest of its group again (measured on an H100, warm: the 101² room
#: 0.83-0.87 s with 3 updates, 0.96-0.99 s with 4; 64 rooms 29.5 s with 2, 19.3 s with 3,
#: 14.9-15.4 s with 4, 15.7 s with 6).
UPDATES = (3, 4)
#: Levels of an HJB or FP sweep made by one replay (and read at once).
LEVELS_PER_READ = 10
#: Whether float64 problems with a Triton system solve in mixed precision where the solves
#: run in one launch and a batch has at least :data:`MIXED_NODES` nodes: float32 iterations inside
#: float64 Newton updates and FP refinement rounds (:mod:`.fused_assembly`). Measured on an
#: H100: an iteration of 64 rooms of 101², bound by memory bandwidth, 27 µs in float32
#: against 60 µs in float64 (``benchmarks/krylov_layout.py``); the equilibrium, warm, in
#: float64 / mixed: 64 rooms 12.8 / 9.3 s, 16 rooms 4.7 / 4.0 s. A single room's iteration
#: is bound by latency, not bandwidth: mixed, its equilibrium took 0.93 s against 0.71 s
#: (the refinement rounds' launches).
MIXED = True
#: The fewest nodes of a batch (problems × ny × nx) solved in mixed precision.
MIXED_NODES = 16 * 101 * 101


class _Recorded:
    """``fn(*inputs)`` on fixed input buffers (loaded by :meth:`load` or changed in place),
    its outputs in :attr:`outputs`; a CUDA graph replay when ``graphs`` and the recording
    matches the eager call, else an eager call."""

    def __init__(self, fn: Callable[..., Any], inputs: list[Any], graphs: bool,
                 what: str) -> None:
        import torch

        # contiguous buffers: the kernels take a level's arrays as contiguous blocks
        self.fn, self.graph = fn, None
        self.inputs = [a.clone(memory_format=torch.contiguous_format) for a in inputs]
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
        self.assemblies: dict[int, FusedAssembly] = {}
        #: the reports (iterations, relative residual, barriers met) of this FP sweep's
        #: one-launch solves, per level
        self._fp_reports: list[Any] = []
        #: whether new solvers may solve in one launch (:meth:`_drop_one_launch`)
        self.one_launch = True

    def solver(self, transpose: bool, like: Any) -> FusedBiCGStab:
        """The solver of J (``transpose``: Jᵀ) for problems like ``like``: float32
        iterations for float64 problems where :data:`MIXED` applies (a batch of at least
        :data:`MIXED_NODES` nodes, a Triton system) and the solves run in one launch, else in
        ``like``'s precision; in chunks once one-launch solves could not run
        (:meth:`_drop_one_launch`)."""
        import torch

        key = (transpose, tuple(like.shape))
        if key not in self.solvers:
            mixed = (MIXED and self.one_launch and like.dtype == torch.float64
                     and math.prod(like.shape) >= MIXED_NODES
                     and fused_assembly_serves(self.stencil))
            for dtype in ([torch.float32] if mixed else []) + [like.dtype]:
                solver = FusedBiCGStab(like.shape, like, transpose, self.steps,
                                       self.scheme.use_cuda_graphs,
                                       persistent=None if self.one_launch else False,
                                       dtype=dtype)
                if solver.persistent or not solver.mixed:   # mixed: one launch a solve only
                    break
            self.solvers[key] = solver
        return self.solvers[key]

    def _drop_one_launch(self, solvers: list[FusedBiCGStab]) -> None:
        """Solve in chunks from now on: ``solvers`` no longer run one launch per solve, and
        those in mixed precision are dropped (with their assemblies), so that the next
        :meth:`solver` call makes them again in the problems' precision."""
        self.one_launch = False
        for key, solver in list(self.solvers.items()):
            if any(solver is s for s in solvers):
                solver.persistent = False
                if solver.mixed:
                    del self.solvers[key]
                    self.assemblies.pop(id(solver), None)

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

    def _finish(self, solver: FusedBiCGStab, coefs: tuple[Any, ...], b: Any, x0: Any | None,
                transpose: bool, rtol: float) -> Any:
        apply = self.stencil.operator(Coefficients(*coefs, None), transpose)
        x, k = solver.finish(b, x0, apply, rtol=rtol, max_iter=self.scheme.max_krylov,
                             fail=self.fail * rtol)
        self.scheme.krylov_iterations += k
        return x

    # -- HJB ---------------------------------------------------------------------------------
    def newton_level(self, u: Any, u_next: Any, F_n: Any, m: Any | None, max_newton: int,
                     where: str) -> Any:
        """u^n by Newton from ``u`` with the host's test between the solver's chunks (the
        test and the inexact updates of :meth:`.sweeps.Scheme2D.solve_hjb`): where
        :meth:`sweep` leaves levels to the caller."""
        return self._host_newton(self.solver(False, u), u, u_next, F_n, m, max_newton, where)

    def _newton_replay(self, solver: FusedBiCGStab, u: Any, u_next: Any, F_n: Any,
                       m: Any | None, previous: Any = None) -> _Recorded:
        """The recording of :data:`UPDATES` Newton updates (:meth:`.fused_assembly.
        FusedAssembly.updates`: (u, u^{n+1}, F^n, the last update's ‖R‖₂ per problem (0: none
        yet), [m]) ↦ (u, that ‖R‖₂, report: test, updates made, Krylov iterations, worst solve
        residual over its tolerance, barriers met)), loaded with a level's start and run."""
        import torch

        if previous is None:
            previous = torch.zeros(solver.B, dtype=u.dtype, device=u.device)
        assembly = self._assembly(solver, u)

        def updates(u: Any, u_next: Any, F_n: Any, previous: Any, *m: Any) -> tuple:
            return assembly.updates(u, u_next, F_n, previous, m[0] if m else None,
                                    self.scheme, _updates(solver))

        return self._step("Newton updates", updates,
                          [u, u_next, F_n, previous] + ([] if m is None else [m]))

    def _unmet(self, solver: FusedBiCGStab) -> None:
        self._drop_one_launch([solver])
        warn(f"the {solver.programs} programs per problem of the one-launch BiCGStab "
             "did not run at once; solving in chunks from now on", RuntimeWarning)

    def _check(self, worst: float, where: str) -> None:
        if worst > self.fail:
            raise SolverError(f"BiCGStab did not converge in {self.scheme.max_krylov} "
                              f"iterations at {where} (relative residual {worst:.3g} × its "
                              "tolerance)")

    def sweep(self, levels: list[Any], F: Any, guess: Any | None,
              m_of: Callable[[int], Any], max_newton: int, where: Callable[[int], str]) -> int:
        """The HJB sweep's levels nt−1..0 into ``levels`` (levels[nt] given) by one-launch
        solves: :data:`LEVELS_PER_READ` levels at a time by one replay (each level
        :data:`UPDATES` Newton updates from its start, :meth:`.sweeps.Scheme2D.newton_start`
        of ``guess``, or the level above without one), then one read of their reports; a
        level whose test did not pass goes on from where its replay ended, replaying until
        it passes, and the levels after it in that group are made again. Returns −1 when
        done, else the level from which the caller solves level by level in chunks
        (one-launch solves cannot run here)."""
        nt = len(levels) - 1
        solver = self.solver(False, levels[nt])
        self._assembly(solver, levels[nt]).constants(self.scheme)
        if guess is None:   # a zero guess starts each level from the level above, bitwise
            guess = self.xp.zeros((*levels[nt].shape[:-2], nt + 1, *levels[nt].shape[-2:]),
                                  dtype=levels[nt].dtype, device=levels[nt].device)
        n = nt - 1
        while n >= 0 and solver.persistent:
            low = max(n - LEVELS_PER_READ + 1, 0)
            step = self._newton_group(solver, levels[n + 1], F, guess, low, n + 1)
            group = step.outputs[0].clone()
            rows = step.outputs[2].cpu().tolist()
            if min(row[4] for row in rows) < 1.0:
                self._unmet(solver)
                return n
            for k in range(n, low - 1, -1):
                size, made, krylov, worst, _ = rows[k - low]
                levels[k] = group[k - low]
                self.scheme.newton_iterations += int(made)
                self.scheme.krylov_iterations += int(krylov)
                self._check(worst, where(k))
                if size > 1.0:   # a problem's test over its tolerance
                    out = self._device_newton(solver, levels[k], levels[k + 1],
                                              F[..., k, :, :], m_of(k), max_newton, where(k),
                                              step.outputs[1][k - low].clone(), int(made))
                    if out is None:
                        return k
                    levels[k] = out
                    n = k - 1
                    break
            else:
                n = low - 1
        return n

    def _newton_group(self, solver: FusedBiCGStab, u_top: Any, F: Any, guess: Any,
                      low: int, high: int) -> _Recorded:
        """The recording of the levels high−1..low, one after the other, each by
        :data:`UPDATES` Newton updates (:meth:`.fused_assembly.FusedAssembly.updates`) from
        its start: (u^high, F^low..high−1, guess^low..high, [m^low+1..high]) ↦ (u of the
        levels low..high−1, the last updates' ‖R‖₂ per level and problem, the levels'
        reports), loaded and run."""
        import torch

        scheme, density = self.scheme, self.scheme.density
        assembly = self._assembly(solver, u_top)
        zero = torch.zeros(solver.B, dtype=u_top.dtype, device=u_top.device)

        def group(u_top: Any, F: Any, g: Any, *m: Any) -> tuple[Any, Any, Any]:
            u_next, out = u_top, []
            for i in range(F.shape[0] - 1, -1, -1):
                out.append(assembly.updates(g[i], u_next, F[i], zero, m[0][i] if m else None,
                                            scheme, _updates(solver), start=g[i + 1]))
                u_next = out[-1][0]
            return tuple(torch.stack([o[j] for o in out[::-1]]) for j in range(3))

        inputs = [u_top, _levels_first(F, low, high), _levels_first(guess, low, high + 1)]
        inputs += [] if density is None else [_levels_first(density, low, high)]
        return self._step("Newton group", group, inputs)

    def _device_newton(self, solver: FusedBiCGStab, u: Any, u_next: Any, F_n: Any,
                       m: Any | None, max_newton: int, where: str, previous: Any = None,
                       made: int = 0) -> Any | None:
        """Newton in replays of :data:`UPDATES` updates each (module docstring), from u and
        the last update's ‖R‖₂ ``previous`` after ``made`` updates; None when the solver's
        programs did not run at once (it then solves in chunks, and the caller starts again
        from ``u``)."""
        step = self._newton_replay(solver, u, u_next, F_n, m, previous)
        while True:
            size, new, krylov, worst, met = step.outputs[2].tolist()
            if met < 1.0:
                self._unmet(solver)
                return None
            self.scheme.newton_iterations += int(new)
            self.scheme.krylov_iterations += int(krylov)
            made += int(new)
            self._check(worst, where)
            if size <= 1.0:
                return step.outputs[0].clone()
            if made >= max_newton:
                raise SolverError(f"HJB Newton did not converge at {where} in {max_newton} "
                                  "iterations")
            step.inputs[0].copy_(step.outputs[0])
            step.inputs[3].copy_(step.outputs[1])
            step()

    def _assembly(self, solver: FusedBiCGStab, like: Any) -> FusedAssembly:
        """The device systems and Newton's control for this solver's problems."""
        key = id(solver)
        if key not in self.assemblies:
            self.assemblies[key] = FusedAssembly(self.stencil, tuple(like.shape), solver)
        return self.assemblies[key]

    def _host_newton(self, solver: FusedBiCGStab, u: Any, u_next: Any, F_n: Any,
                     m: Any | None, max_newton: int, where: str) -> Any:
        """Newton with the host's test and the solver's chunks between replays."""
        scheme, st, xp = self.scheme, self.stencil, self.xp

        def assemble(u: Any, u_next: Any, F_n: Any, *m: Any) -> tuple[Any, ...]:
            c, R = st.system(u, u_next, F_n, m[0] if m else None)
            solver.start(c[:5], R, None, None)
            return (*c[:5], R, xp.stack([xp.reshape(a, (-1,))
                                         for a in scheme.newton_measures(u, R)]))

        step = self._step("Newton", assemble, [u, u_next, F_n] + ([] if m is None else [m]))
        previous = None
        for _ in range(max_newton + 1):
            size, scale, norm = np.asarray(step.outputs[-1].cpu().numpy(), dtype=np.float64)
            if bool(np.all(size <= scheme.newton_tol)):
                return step.inputs[0].clone()
            x = self._finish(solver, step.outputs[:5], step.outputs[5], None, False,
                             scheme._newton_rtol(scale, norm, previous))
            previous = norm
            scheme.newton_iterations += 1
            step.inputs[0].sub_(x)
            step()
        raise SolverError(f"HJB Newton did not converge at {where} in {max_newton} iterations")

    # -- FP ----------------------------------------------------------------------------------
    def fp_level(self, u_n: Any, m: Any | None, mass: Any, guess: Any) -> Any:
        """μ^{n+1} from J(u^n)ᵀ μ^{n+1} = μ^n/Δt by the solver's chunks, the solve started
        from ``guess`` (where :meth:`fp_sweep` leaves the levels to the caller)."""
        st, scheme = self.stencil, self.scheme
        solver = self.solver(True, mass)
        inputs = [u_n, mass, guess] + ([] if m is None else [m])

        def assemble(u_n: Any, mass: Any, guess: Any, *m: Any) -> tuple[Any, ...]:
            c = st.jacobian(u_n, m[0] if m else None, exits=False)
            b = mass * st.inv_dt
            solver.start(c[:5], b, guess, st.operator(c, transpose=True))
            return (*c[:5], b)

        step = self._step("FP", assemble, inputs)
        x = self._finish(solver, step.outputs[:5], step.outputs[5], step.inputs[2], True,
                         float(np.min(scheme.krylov_rtol)))   # chunks: the tightest
        return scheme._conserved(Coefficients(*step.outputs[:5], None), x, step.outputs[5])

    def fp_sweep(self, U: Any, density: Any | None, masses: list[Any],
                 last: list[Any] | None) -> bool:
        """An FP sweep by one-launch solves into ``masses`` (masses[0] given), in groups of
        :data:`LEVELS_PER_READ` levels by one replay each, every solve started from
        ``last``'s step (the previous sweep's masses) added to the masses of this sweep; the
        reports wait for :meth:`fp_report`. False (nothing done) where the solves run in
        chunks: the caller solves level by level."""
        import torch

        xp = self.xp
        solver = self.solver(True, masses[0])
        if not solver.persistent:
            return False
        nt = U.shape[-3] - 1
        solver.set_tolerances(self.scheme.krylov_rtol, self.scheme.max_krylov)
        # without a last sweep, zero steps: each solve starts from the masses before
        previous = xp.zeros_like(U) if last is None else xp.stack(last, axis=-3)
        solve = self._fp_solve(solver, masses[0])

        def group(U: Any, mass: Any, last: Any, *m: Any) -> tuple[Any, Any]:
            out, status = [], []
            for i in range(U.shape[0]):
                mass, report = solve(U[i], mass, (last[i + 1], last[i]),
                                     *(mi[i] for mi in m))
                out.append(mass)
                status.append(report)
            return torch.stack(out), torch.stack(status)

        for low in range(0, nt, LEVELS_PER_READ):
            high = min(low + LEVELS_PER_READ, nt)
            inputs = [_levels_first(U, low, high), masses[-1],
                      _levels_first(previous, low, high + 1)]
            inputs += [] if density is None else [_levels_first(density, low, high)]
            step = self._step("FP group", group, inputs)
            masses.extend(step.outputs[0].clone().unbind(0))
            self._fp_reports.extend(step.outputs[1].clone().unbind(0))
        return True

    def _fp_solve(self, solver: FusedBiCGStab, like: Any) -> Callable[..., tuple[Any, Any]]:
        """(u^n, μ^n, the previous sweep's (μ^{n+1}, μ^n), [m]) ↦ (μ^{n+1}, the solve's
        status): the FP step's assembly, start (from μ^n plus the previous sweep's step) and
        one-launch solve, its masses kept in balance (:meth:`.sweeps.Scheme2D._conserved`)."""
        st, scheme = self.stencil, self.scheme
        assembly = self._assembly(solver, like)

        def solve(u_n: Any, mass: Any, step: tuple[Any, Any], *m: Any) -> tuple[Any, Any]:
            if assembly.triton:
                assembly.jacobian(u_n, m[0] if m else None)
                x, status = assembly.fp_solve(mass, mass, step=step)
                return assembly.balanced(x, mass), status
            guess = mass + (step[0] - step[1])
            c = st.jacobian(u_n, m[0] if m else None, exits=False)
            solver.start(c[:5], mass * st.inv_dt, guess, st.operator(c, transpose=True))
            if solver.B > 1:   # each problem's own tolerance
                solver.b_norm.mul_(solver.loosen)
            solver.launch_solve()
            return scheme._conserved(Coefficients(*solver.coefs[:5], None), solver.x,
                                     mass * st.inv_dt), solver.status.clone()

        return solve

    def fp_report(self) -> bool:
        """After an FP sweep: count the one-launch solves' iterations; False (and chunks
        from now on) if a solve's programs did not run at once: the sweep is to be made
        again. :class:`SolverError` if a solve stopped above ``fail`` × its tolerance."""
        if not self._fp_reports:
            return True
        import torch

        reports = torch.stack(self._fp_reports).cpu()   # (levels, B, 3)
        self._fp_reports = []
        if float(reports[..., 2].min()) < 1.0:
            self._drop_one_launch(list(self.solvers.values()))
            warn("the programs of the one-launch BiCGStab did not run at once; "
                 "solving in chunks from now on", RuntimeWarning)
            return False
        self.scheme.krylov_iterations += int(reports[..., 0].max(-1).values.sum())
        worst = float(reports[..., 1].max())
        rtol = float(np.min(self.scheme.krylov_rtol))   # the residuals are over l·‖b‖₂
        if worst > self.fail * rtol:
            raise SolverError(f"BiCGStab did not converge in {self.scheme.max_krylov} "
                              f"iterations in an FP step (relative residual {worst:.3g} > "
                              f"{self.fail * rtol:.3g})")
        return True


def _levels_first(a: Any, low: int, high: int) -> Any:
    """The levels low..high−1 of a (..., levels, ny, nx) path as (levels, ..., ny, nx), so
    that in a recording's (contiguous) input buffer each level is a contiguous block."""
    return a[..., low:high, :, :].movedim(-3, 0)


def _updates(solver: FusedBiCGStab) -> int:
    """The Newton updates per level of a replay for this solver's problems (:data:`UPDATES`)."""
    return UPDATES[solver.B > 1]
