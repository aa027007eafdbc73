"""Newton's updates of an HJB level on the device (:mod:`.fused_steps` records them with the
one-launch solves): the step's system into the solver's buffers, then Newton's control
(:func:`.triton_assembly.control_kernel`), the solve and the next system.

For H = ½|p|² the system is one launch of :func:`.triton_assembly.system_kernel` (the
stencil's constants kept on the device); for any other H it is the stencil's array code,
with Newton's measures per problem written where the control reads them."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problems.hamiltonians import Quadratic
from .fused_krylov import BLOCK, FusedBiCGStab


def fused_assembly_serves(stencil: Any) -> bool:
    """Whether the Triton system serves the stencil: H = ½|p|² itself (a subclass may
    redefine H)."""
    return type(stencil.hamiltonian) is Quadratic


class FusedAssembly:
    """The systems and Newton's control for a stencil's problems of shape ``shape``
    (..., ny, nx) and their solver ``solver`` (the HJB systems, J not transposed; with
    ``solver.transpose``, only :meth:`jacobian` for the FP steps)."""

    def __init__(self, stencil: Any, shape: tuple[int, ...], solver: FusedBiCGStab) -> None:
        import torch

        self.stencil, self.solver = stencil, solver
        self.triton = fused_assembly_serves(stencil)
        ny, nx = shape[-2:]
        self.B, self.shape = solver.B, (solver.B, ny, nx)
        like = solver.coefs

        def full(a: Any, *size: int) -> Any:
            t = torch.as_tensor(a, dtype=like.dtype, device=like.device)
            return torch.broadcast_to(t, (self.B, *size)).contiguous()

        def zeros(*size: int) -> Any:
            return torch.zeros(size, dtype=like.dtype, device=like.device)

        st = stencil
        if self.triton:
            self.ox, self.oy = full(st.ox, ny, nx - 1), full(st.oy, ny - 1, nx)
            self.inv_wx = full(st.inv_wx, nx)[0].contiguous()
            self.inv_wy = full(st.inv_wy.reshape(-1), ny)[0].contiguous()
            nu = np.broadcast_to(np.asarray(st.nu, dtype=np.float64).reshape(-1), (self.B,))
            self.nu = torch.as_tensor(nu.copy(), dtype=like.dtype, device=like.device)
            self.diffusion = tuple(full(d, ny, nx) for d in st.diffusion)
            self.to_active = tuple(full(a, ny, nx) for a in st.to_active)
            self.active = full(st.active, ny, nx)
            self.grid_params = torch.tensor([st.inv_hx, st.inv_hy, st.inv_dt],
                                            dtype=like.dtype, device=like.device)
            self.zero_F = zeros(*solver.shape)
            self.part_b = zeros(self.B, solver.tiles)   # Σ b² per tile of an FP start
        #: Newton's measures max|R|, max|u|, Σ R² per problem: per tile of the Triton
        #: system, in one column from the array code
        self.tiles = solver.tiles if self.triton else 1
        self.part = zeros(self.B, 3, self.tiles)
        self.buffers = [zeros(*solver.shape) for _ in range(2)]
        self.report = zeros(6)
        #: the control kernel's constants (:meth:`constants`) and their host values
        self.newton_params: tuple[tuple[float, ...], Any] | None = None
        self.control = {"PB": max(2, 1 << (self.B - 1).bit_length()),
                        "PT": max(2, 1 << (self.tiles - 1).bit_length())}

    def system(self, u: Any, u_out: Any, u_next: Any, F: Any, subtract: bool,
               m: Any = None) -> None:
        """J(u') and R(u') into the solver (the solve then starts from 0) and Newton's
        measures, u' = u − x (the solver's solution) with ``subtract``, else u; u' to
        ``u_out``; ``m`` the densities where H depends on them."""
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
        from . import triton_assembly as ta

        ta.system_kernel[(self.B, self.tiles)](
            u, s0["x"], u_out, u_next, F, self.ox, self.oy, self.inv_wx, self.inv_wy,
            self.nu, *self.diffusion, *self.to_active, self.active, s.coefs, s0["r"],
            s.r_hat, s.p, s.v, self.part, self.grid_params, *self.shape[-2:],
            SUBTRACT=subtract, BLOCK=BLOCK)

    def jacobian(self, u: Any) -> None:
        """J(u) and 1/diag into the solver's coefficients (the FP step's matrix; the Triton
        system only)."""
        self.system(u, self.buffers[0], u, self.zero_F, False)

    def fp_start(self, mass: Any, guess: Any) -> None:
        """The solver's start for Jᵀμ = ``mass``/Δt from ``guess`` (J from :meth:`jacobian`):
        x, r, r̂, the first p and v, and ‖b‖₂ (the Triton system only)."""
        import torch

        from . import triton_assembly as ta

        s = self.solver
        ta.fp_start_kernel[(self.B, self.tiles)](
            mass, guess, s.coefs, s.sets[0]["x"], s.sets[0]["r"], s.r_hat, s.p, s.v,
            self.part_b, self.grid_params, *self.shape[-2:], BLOCK=BLOCK)
        torch.sqrt(self.part_b.sum(-1), out=s.b_norm)

    def balanced(self, x: Any, mass: Any) -> Any:
        """The FP step's masses x scaled to keep the balance with ``mass`` (the masses
        before the step), as :meth:`.sweeps.Scheme2D._conserved` (the Triton system only)."""
        import torch

        from . import triton_assembly as ta

        out = torch.empty_like(x)
        ta.balance_kernel[(self.B,)](x, mass, self.solver.coefs, out, self.grid_params,
                                     *self.shape[-2:], BLOCK=1024)
        return out

    def constants(self, scheme: Any) -> Any:
        """The control kernel's constants from the scheme's current tolerances (Newton's
        test, Δt, the iteration cap, the update's tolerance bounds, γ): one device buffer,
        written in place when they change, so recorded replays read the current values
        (called before replays, outside a recording)."""
        import torch

        eta_max, gamma = scheme.forcing_constants()
        values = (scheme.newton_tol, self.stencil.grid.dt, float(scheme.max_krylov),
                  scheme.newton_rtol, eta_max, gamma)
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
            self.part, previous, s.status, s.ctl, s.b_norm, self.report,
            self.constants(scheme), self.B, self.tiles, FIRST=first, LAST=last,
            **self.control)

    def updates(self, u: Any, u_next: Any, F: Any, previous: Any, m: Any, scheme: Any,
                count: int) -> tuple[Any, Any, Any]:
        """``count`` Newton updates from u (module docstring of :mod:`.fused_steps`): (the
        last u, the last updates' ‖R‖₂ per problem, the report)."""
        previous = previous.clone()
        a, b = self.buffers
        self.system(u, a, u_next, F, False, m)
        self.decide(previous, scheme, True, count == 0)
        for i in range(count):
            self.solver.sets[0]["x"].zero_()
            self.solver.launch_solve()
            self.system(a, b, u_next, F, True, m)
            self.decide(previous, scheme, False, i == count - 1)
            a, b = b, a
        return a.clone(), previous, self.report[:5].clone()
