"""The stencil's constants on the device and the launches of :mod:`.triton_assembly`: the
HJB step's system for H = ½|p|² in one launch and Newton's control in another
(:mod:`.fused_steps` records them with the one-launch solves)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...problems.hamiltonians import Quadratic
from .fused_krylov import BLOCK, FusedBiCGStab


def fused_assembly_serves(stencil: Any) -> bool:
    """Whether :class:`FusedAssembly` serves the stencil: H = ½|p|² itself (a subclass may
    redefine H) and a problem's arrays on the last two axes."""
    return type(stencil.hamiltonian) is Quadratic


class FusedAssembly:
    """The launches for a stencil's problems of shape ``shape`` (..., ny, nx), their solver
    ``solver`` (the HJB systems, J not transposed) and scalars of Newton's control."""

    def __init__(self, stencil: Any, shape: tuple[int, ...], solver: FusedBiCGStab) -> None:
        import torch

        self.stencil, self.solver = stencil, solver
        ny, nx = shape[-2:]
        self.B, self.shape = solver.B, (solver.B, ny, nx)
        like = solver.coefs

        def full(a: Any, *size: int) -> Any:
            t = torch.as_tensor(a, dtype=like.dtype, device=like.device)
            return torch.broadcast_to(t, (self.B, *size)).contiguous()

        st = stencil
        self.ox, self.oy = full(st.ox, ny, nx - 1), full(st.oy, ny - 1, nx)
        self.inv_wx = full(st.inv_wx, nx)[0].contiguous()
        self.inv_wy = full(st.inv_wy.reshape(-1), ny)[0].contiguous()
        nu = np.broadcast_to(np.asarray(st.nu, dtype=np.float64).reshape(-1), (self.B,))
        self.nu = torch.as_tensor(nu.copy(), dtype=like.dtype, device=like.device)
        self.diffusion = tuple(full(d, ny, nx) for d in st.diffusion)
        self.to_active = tuple(full(a, ny, nx) for a in st.to_active)
        self.active = full(st.active, ny, nx)
        self.tiles = solver.tiles
        self.part = torch.zeros(self.B, 3, self.tiles, dtype=like.dtype, device=like.device)
        self.zero_F = torch.zeros(self.shape, dtype=like.dtype, device=like.device)
        self.buffers = [torch.zeros(self.shape, dtype=like.dtype, device=like.device)
                        for _ in range(2)]
        self.report = torch.zeros(6, dtype=like.dtype, device=like.device)
        self.grid_params = torch.tensor([st.inv_hx, st.inv_hy, st.inv_dt], dtype=like.dtype,
                                        device=like.device)
        self.newton_params: tuple[Any, Any] | None = None
        self.control = {"PB": max(2, 1 << (self.B - 1).bit_length()),
                        "PT": max(2, 1 << (self.tiles - 1).bit_length())}

    def system(self, u: Any, u_out: Any, u_next: Any, F: Any, subtract: bool) -> None:
        """J(u') and R(u') into the solver (the solve then starts from 0) and Newton's
        partial measures, u' = u − x (the solver's solution) with ``subtract``, else u;
        u' to ``u_out``."""
        from . import triton_assembly as ta

        s = self.solver
        s0 = s.sets[0]
        ta.system_kernel[(self.B, self.tiles)](
            u, s0["x"], u_out, u_next, F, self.ox, self.oy, self.inv_wx, self.inv_wy,
            self.nu, *self.diffusion, *self.to_active, self.active, s.coefs, s0["r"],
            s.r_hat, s.p, s.v, self.part, self.grid_params, *self.shape[-2:],
            SUBTRACT=subtract, BLOCK=BLOCK)

    def jacobian(self, u: Any) -> None:
        """J(u) and 1/diag into the solver's coefficients (the FP step's matrix)."""
        self.system(u, self.buffers[0], u, self.zero_F, False)

    def decide(self, previous: Any, scheme: Any, first: bool, last: bool) -> None:
        """Newton's control after an assembly (module docstring of :mod:`.triton_assembly`)."""
        import torch

        from . import triton_assembly as ta
        eta_max, gamma = scheme.forcing_constants()

        values = (scheme.newton_tol, self.stencil.grid.dt, float(scheme.max_krylov),
                  scheme.newton_rtol, eta_max, gamma)
        if self.newton_params is None or self.newton_params[0] != values:
            self.newton_params = (values, torch.tensor(values, dtype=self.part.dtype,
                                                       device=self.part.device))
        s = self.solver
        ta.control_kernel[(1,)](
            self.part, previous, s.status, s.ctl, s.b_norm, self.report,
            self.newton_params[1], self.B, self.tiles, FIRST=first, LAST=last, **self.control)

    def updates(self, u: Any, u_next: Any, F: Any, previous: Any, scheme: Any,
                count: int) -> tuple[Any, Any, Any]:
        """``count`` Newton updates from u (module docstring of :mod:`.fused_steps`): (the
        last u, the last updates' ‖R‖₂ per problem, the report)."""
        previous = previous.clone()
        a, b = self.buffers
        self.system(u, a, u_next, F, False)
        self.decide(previous, scheme, True, count == 0)
        for i in range(count):
            self.solver.sets[0]["x"].zero_()
            self.solver.launch_solve()
            self.system(a, b, u_next, F, True)
            self.decide(previous, scheme, False, i == count - 1)
            a, b = b, a
        return a.reshape(u.shape).clone(), previous, self.report[:5].clone()
