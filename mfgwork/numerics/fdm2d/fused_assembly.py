"""Newton's updates of an HJB level on the device (:mod:`.fused_steps` records them with the
one-launch solves): the step's system into the solver's buffers, then Newton's control
(:func:`.triton_assembly.control_kernel`), the solve and the next system.

For every isotropic model with Triton kernels (:func:`.triton_assembly.model_system`: its
value traced, H free of x) the system is one launch of the model's system kernel (the
stencil's constants kept on the device, the density the step sees read where H depends on
m); for any other H it is the stencil's array code, with Newton's measures per problem
written where the control reads them.

**Mixed precision** (a float32 solver for float64 problems, the Triton system): the systems,
the measures and Newton's test stay in float64 and the solver iterates on J and R rounded to
float32, so an update is accurate to :data:`MIXED_RTOL` at best (J's rounding alone leaves
about κ(J)·6e-8) and Newton takes the updates it needs to pass its test on the exact R. An
FP step is float64 iterative refinement: x ← x + d, Jᵀd = b − Jᵀx solved in float32 to the
larger of the step's tolerance and :data:`MIXED_RTOL` × the round's residual,
:data:`ROUNDS` rounds (a round whose residual already meets the tolerance costs no
iteration), then the float64 residual of x is the step's report and float64 J keeps the
mass balance."""

from __future__ import annotations

from typing import Any

import numpy as np

from .fused_krylov import BLOCK, FusedBiCGStab

#: The tightest relative residual asked of a float32 solve (mixed precision: Newton's
#: updates and the FP steps' refinement rounds).
MIXED_RTOL = 1e-5
#: Refinement rounds of a mixed-precision FP step: three rounds reach 1e-13 (the exact
#: solves' tolerance) from a start as far as the right-hand side itself.
ROUNDS = 3


def fused_assembly_serves(stencil: Any) -> bool:
    """Whether the Triton system serves the stencil's model (it has a system kernel,
    :func:`.triton_assembly.model_system`)."""
    from . import triton_assembly as ta

    return ta.model_system(stencil.hamiltonian) is not None


def geometry_flags(stencil: Any) -> Any:
    """The stencil's geometry for the model's system kernel (:mod:`.triton_system`): an int16
    array (..., ny, nx) whose bits (:data:`.triton_assembly.FLAG_BITS`) say which of the node's W,
    E, S, N edges are open, which of its W, E, S, N neighbours are active with it, and
    whether it is active (one pass of two bytes a node, where eleven arrays of floats held
    the same)."""
    import torch

    st = stencil
    pad = torch.nn.functional.pad
    ox, oy = st.ox, st.oy
    bits = (pad(ox, (1, 0)), pad(ox, (0, 1)), pad(oy, (0, 0, 1, 0)), pad(oy, (0, 0, 0, 1)),
            *st.to_active, st.active)
    flags = sum((b != 0).to(torch.int32) << n for n, b in enumerate(bits))
    return flags.to(torch.int16)


class FusedAssembly:
    """The systems and Newton's control for a stencil's problems of shape ``shape``
    (..., ny, nx) and their solver ``solver`` (the HJB systems, J not transposed; with
    ``solver.transpose``, only :meth:`jacobian` and the FP steps). A solver in mixed
    precision (:attr:`.FusedBiCGStab.mixed`) is the module docstring's (the Triton system
    only)."""

    def __init__(self, stencil: Any, shape: tuple[int, ...], solver: FusedBiCGStab) -> None:
        import torch

        from . import triton_assembly as ta

        self.stencil, self.solver = stencil, solver
        kernel = ta.model_system(stencil.hamiltonian)
        self.triton = kernel is not None
        ny, nx = shape[-2:]
        self.B, self.shape = solver.B, (solver.B, ny, nx)
        dtype, device = solver.problem_dtype, solver.coefs.device
        self.mixed = solver.mixed
        if self.mixed and not self.triton:
            raise ValueError("a solver of another precision serves only the Triton system "
                             f"(hamiltonian={stencil.hamiltonian!r} has none)")

        def zeros(*size: int) -> Any:
            return torch.zeros(size, dtype=dtype, device=device)

        st = stencil
        if self.triton:
            g = st.grid

            def line(a: Any) -> Any:
                return torch.as_tensor(a, dtype=dtype, device=device)

            self.flags = torch.broadcast_to(geometry_flags(st), (self.B, ny, nx)).contiguous()
            self.inv_wx, self.inv_wy = line(1.0 / g.wx), line(1.0 / g.wy)
            self.inv_hwx, self.inv_hwy = line(1.0 / (g.hx * g.wx)), line(1.0 / (g.hy * g.wy))
            nu = np.broadcast_to(np.asarray(st.nu, dtype=np.float64).reshape(-1), (self.B,))
            self.nu = torch.as_tensor(nu.copy(), dtype=dtype, device=device)
            self.grid_params = torch.tensor([st.inv_hx, st.inv_hy, st.inv_dt],
                                            dtype=dtype, device=device)
            self.zero_F = zeros(*solver.shape)
            self.kernel = kernel[0]
            self.fields = torch.tensor(kernel[1], dtype=dtype, device=device)
            self.part_b = zeros(self.B, 2, solver.tiles)   # Σ b², Σ r² per tile, FP start
            self.part_balance = zeros(self.B, 2, solver.tiles)   # the balance's sums
        #: mixed precision: J in float64 (the solver holds it rounded) and the FP step's x
        fp_mixed = self.mixed and solver.transpose
        self.coefs = zeros(6, *solver.shape) if fp_mixed else solver.coefs
        #: the FP step's x: the solver's, or (mixed) two float64 buffers that the
        #: refinement rounds go back and forth between, and the step's report
        self.xs = [zeros(*solver.shape) for _ in range(2)] if fp_mixed else [
            solver.sets[0]["x"]]
        self.fp_report = zeros(self.B, 3)
        #: Newton's measures max|R|, max|u|, Σ R² per problem: per tile of the Triton
        #: system, in one column from the array code
        self.tiles = solver.tiles if self.triton else 1
        self.part = zeros(self.B, 3, self.tiles)
        self.buffers = [zeros(*solver.shape) for _ in range(2)]
        self.report = zeros(6)
        self.never = zeros(1)   # the system kernel's flag of a skipped update, never set
        #: the control kernel's constants (:meth:`constants`) and their host values
        self.newton_params: tuple[tuple[float, ...], Any] | None = None
        self.control = {"PB": max(2, 1 << (self.B - 1).bit_length()),
                        "PT": max(2, 1 << (self.tiles - 1).bit_length())}

    def system(self, u: Any, u_out: Any, u_next: Any, F: Any, subtract: bool,
               m: Any = None, coefs: Any = None, jacobian: bool = False,
               start: Any = None) -> None:
        """J(u') and R(u') into the solver (the solve then starts from 0) and Newton's
        measures, u' = u − x (the solver's solution) with ``subtract``, else u; u' to
        ``u_out``; ``m`` the densities where H depends on them; J to ``coefs`` instead of
        the solver's (the Triton system; with ``jacobian``, J alone, and rounded into the
        solver's too; ``m`` then read only where H depends on it, contiguous (B, ny,
        nx)). ``start`` (the Triton system): u' is Newton's start from the guess's
        levels n (``u``) and n+1 (``start``), :meth:`.sweeps.Scheme2D.newton_start`. The
        Triton system after a skipped update (the control's flag: x = 0) only copies u to
        ``u_out``: J, R and the measures stand."""
        s = self.solver
        s0 = s.sets[0]
        if not self.triton:
            u_out.copy_(u - s0["x"] if subtract else u)
            c, R = self.stencil.system(u_out, u_next, F, m)
            s.start(c[:5], R, None, None)
            for i, a in enumerate((R.abs().amax((-2, -1)), u_out.abs().amax((-2, -1)),
                                   (R * R).sum((-2, -1)))):
                self.part[:, i, 0] = a.reshape(self.B)
            return
        target = s.coefs if coefs is None else coefs
        self.kernel[(self.B, self.tiles)](
            u, s0["x"] if start is None else start, u_out, u_next, F,
            self.zero_F if m is None else m, self.fields, self.flags,
            self.inv_wx, self.inv_wy, self.inv_hwx, self.inv_hwy, self.nu, target, s.coefs,
            s0["r"], s.r_hat, s.p, s.v, self.part, self.grid_params,
            self.report[5:] if subtract else self.never, *self.shape[-2:], SUBTRACT=subtract,
            START=start is not None, JACOBIAN=jacobian,
            LOW=jacobian and target is not s.coefs, BLOCK=BLOCK)

    def jacobian(self, u: Any, m: Any = None) -> None:
        """J(u) (with the density ``m`` where H depends on it) and 1/diag into the solver's
        coefficients (the FP step's matrix; the Triton system only; mixed precision: into
        :attr:`coefs`, and rounded into the solver's by the same launch)."""
        self.system(u, self.buffers[0], u, self.zero_F, False, m, coefs=self.coefs,
                    jacobian=True)

    def fp_start(self, mass: Any, guess: Any, correction: Any = None, out: int = 0,
                 step: tuple[Any, Any] | None = None) -> None:
        """The solver's start for Jᵀμ = ``mass``/Δt from x = ``guess`` (+ ``correction``, a
        refinement round's; + step[0] − step[1], the previous sweep's step) into
        ``xs[out]`` (J from :meth:`jacobian`): r, r̂, the first p and
        v, l² Σ b² and Σ r² per tile, and the solver's l·‖b‖₂ (l the problem's ``loosen``,
        :meth:`.fused_krylov.FusedBiCGStab.set_tolerances`; the Triton system only; with mixed
        precision the solver's x is 0, to solve for the correction of x, and its norm is
        the refinement's, :meth:`fp_solve`)."""
        import torch

        from . import triton_assembly as ta

        s = self.solver
        d, d0 = (guess if correction is None else correction, guess) if step is None else step
        ta.fp_start_kernel[(self.B, self.tiles)](
            mass, guess, d, d0, self.coefs, self.xs[out], s.sets[0]["r"], s.r_hat, s.p, s.v,
            self.part_b, s.loosen, self.grid_params, *self.shape[-2:],
            ADD=correction is not None, STEP=step is not None, BLOCK=BLOCK)
        if self.mixed:
            s.sets[0]["x"].zero_()
        else:
            torch.sqrt(self.part_b[:, 0].sum(-1), out=s.b_norm)   # l·‖b‖₂
            torch.sum(self.part_b[:, 1], -1, out=s.initial)

    def fp_solve(self, mass: Any, guess: Any, step: tuple[Any, Any] | None = None
                 ) -> tuple[Any, Any]:
        """The FP step's solve Jᵀμ = ``mass``/Δt from ``guess`` (+ step[0] − step[1]: the
        previous sweep's step, added by the start's kernel; J from :meth:`jacobian`) to the
        solver's tolerance: (x, status: iterations, relative residual ‖b − Jᵀx‖₂/‖b‖₂,
        barriers met, per problem); with mixed precision by :data:`ROUNDS` refinement
        rounds (module docstring), the residual that of x in float64."""
        from . import triton_assembly as ta

        s = self.solver
        self.fp_start(mass, guess, step=step)
        if not self.mixed:
            s.launch_solve()
            return s.x, s.status.clone()

        def refine(first: bool, last: bool) -> None:
            ta.refine_kernel[(1,)](self.part_b, s.status, s.ctl, s.b_norm, s.initial,
                                   self.fp_report, self.B, self.tiles, RTOL=MIXED_RTOL,
                                   FIRST=first, LAST=last, **self.control)

        refine(True, False)
        for i in range(ROUNDS):
            s.launch_solve()
            self.fp_start(mass, self.xs[i % 2], s.sets[0]["x"], out=(i + 1) % 2)
            refine(False, i == ROUNDS - 1)
        return self.xs[ROUNDS % 2], self.fp_report.clone()

    def balanced(self, x: Any, mass: Any) -> Any:
        """The FP step's masses x scaled to keep the balance with ``mass`` (the masses
        before the step), as :meth:`.sweeps.Scheme2D._conserved` (the Triton system only)."""
        import torch

        from . import triton_assembly as ta

        out = torch.empty_like(x)
        grid = (self.B, self.tiles)
        ta.balance_sums_kernel[grid](x, mass, self.coefs, self.part_balance,
                                     self.grid_params, *self.shape[-2:], BLOCK=BLOCK)
        ta.balance_scale_kernel[grid](x, self.part_balance, out, *self.shape[-2:],
                                      BLOCK=BLOCK, PT=self.control["PT"])
        return out

    def constants(self, scheme: Any) -> Any:
        """The control kernel's constants from the scheme's current tolerances (Newton's
        tightest test, Δt, the iteration cap, the update's tolerance bounds (the lower one at
        least :data:`MIXED_RTOL` with mixed precision), γ, then each problem's test): one
        device buffer,
        written in place when they change, so recorded replays read the current values
        (called before replays, outside a recording)."""
        import torch

        eta_max, gamma = scheme.forcing_constants()
        rtol_min = max(scheme.newton_rtol, MIXED_RTOL) if self.mixed else scheme.newton_rtol
        tols = np.broadcast_to(np.asarray(scheme.newton_tol, dtype=np.float64), (self.B,))
        values = (float(tols.min()), self.stencil.grid.dt, float(scheme.max_krylov),
                  rtol_min, eta_max, gamma, *map(float, tols))
        host = torch.tensor(values, dtype=self.part.dtype)
        if self.newton_params is None:
            self.newton_params = (values, host.to(self.part.device))
        elif self.newton_params[0] != values:
            buffer = self.newton_params[1]
            buffer.copy_(host)
            self.newton_params = (values, buffer)
        return self.newton_params[1]

    def decide(self, previous: Any, scheme: Any, first: bool, last: bool) -> None:
        """Newton's control after a system (module docstring of :mod:`.triton_assembly`)."""
        from . import triton_assembly as ta

        s = self.solver
        ta.control_kernel[(1,)](
            self.part, previous, s.status, s.ctl, s.b_norm, s.initial, self.report,
            self.constants(scheme), self.B, self.tiles, FIRST=first, LAST=last,
            **self.control)

    def updates(self, u: Any, u_next: Any, F: Any, previous: Any, m: Any, scheme: Any,
                count: int, start: Any = None) -> tuple[Any, Any, Any]:
        """``count`` Newton updates from u, or from Newton's start of the guess's levels n
        (``u``) and n+1 (``start``), :meth:`.sweeps.Scheme2D.newton_start`, formed by the
        Triton system on the fly (module docstring of :mod:`.fused_steps`): (the last u, the
        last updates' ‖R‖₂ per problem, the report)."""
        previous = previous.clone()
        a, b = self.buffers
        if start is not None and not self.triton:
            u, start = scheme.newton_start(u_next, u, start), None
        self.system(u, a, u_next, F, False, m, start=start)
        self.decide(previous, scheme, True, count == 0)
        for i in range(count):
            self.solver.sets[0]["x"].zero_()
            self.solver.launch_solve()
            self.system(a, b, u_next, F, True, m)
            self.decide(previous, scheme, False, i == count - 1)
            a, b = b, a
        return a.clone(), previous, self.report[:5].clone()
