"""Fused, batched HJB and FP sweeps in Triton (CUDA): the whole time loop in one launch.

The same scheme as :mod:`.numba_kernels` and :mod:`.operators`: implicit Euler, Godunov
Hamiltonian ½[(D⁻u)₊² + (D⁺u)₋²], Neumann walls; at each HJB time step Newton's method with
the exact tridiagonal Jacobian, stopping per problem when the last update is at most
``tol (1 + max|u|)``, and FP as the exact adjoint J(u^n)ᵀ μ^{n+1} = μ^n / Δt in cell masses.

Problems are independent and each is a sequential chain of small tridiagonal (Thomas) solves,
so the batch is the parallel axis: one program owns a block of ``BLOCK`` problems and runs
the whole sweep for them, each thread one problem. Arrays are laid out [level, x, problem]
(problem fastest), so every load and store of a block is coalesced; the Thomas coefficients
live in a small [x, problem] scratch that stays in cache. A problem whose Newton iteration
did not converge at some time step is flagged (the first such step in sweep order), never
silently accepted; the caller turns the flag into the CPU path's error.

Scalars (h, Δt, the Newton tolerance) travel in a small tensor of the working dtype: Triton
would pass Python floats as float32.
"""

from __future__ import annotations

from typing import Any

BLOCK = 32  # problems per program: one warp, one problem per thread
NUM_WARPS = 1

_KERNELS: dict[str, Any] = {}
_PARAMS: dict[tuple, Any] = {}


def _kernels() -> dict[str, Any]:
    """The jitted kernels (defined on first use, so importing this module needs no Triton;
    under ``TRITON_INTERPRET=1`` they run on CPU tensors)."""
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def hjb_sweep_kernel(U_ptr, F_ptr, G_ptr, nu_ptr, inv_hw_ptr, inv_w_ptr, params_ptr,
                         cp_ptr, dp_ptr, status_ptr, B, NX, NT, max_newton,
                         USE_GUESS: tl.constexpr, BLOCK: tl.constexpr):
        b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        valid = b < B
        h = tl.load(params_ptr)
        dt = tl.load(params_ptr + 1)
        tol = tl.load(params_ptr + 2)
        inv_h = 1.0 / h
        inv_dt = 1.0 / dt
        nu = tl.load(nu_ptr + b, mask=valid, other=0.0)
        zero = nu * 0.0
        row = NX * B
        cp_b = cp_ptr + b
        dp_b = dp_ptr + b
        bad = tl.full([BLOCK], -1, tl.int32)
        iterations = tl.zeros([BLOCK], tl.int32)
        u_lvl = U_ptr + (NT - 1) * row + b  # level n (being solved)
        f_lvl = F_ptr + (NT - 1) * row + b
        g_lvl = G_ptr + (NT - 1) * row + b
        for k in range(NT):
            n = NT - 1 - k
            nxt = u_lvl + row  # level n + 1 (known)
            for i in range(NX):
                if USE_GUESS:
                    start = tl.load(g_lvl + i * B, mask=valid, other=0.0)
                else:
                    start = tl.load(nxt + i * B, mask=valid, other=0.0)
                tl.store(u_lvl + i * B, start, mask=valid)
            active = valid
            it = 0
            while (it < max_newton) & (tl.max(active.to(tl.int32), axis=0) > 0):
                # forward: bands and residual of row i, then Thomas elimination
                cp = zero
                dp = zero
                for i in range(NX):
                    # neighbours read again rather than carried in registers: Triton loses a
                    # loop variable assigned from another (u_l = u_c); at a wall the
                    # neighbour is the point itself, so q = 0 there
                    has_right = i < NX - 1
                    right = tl.minimum(i + 1, NX - 1)
                    u_l = tl.load(u_lvl + tl.maximum(i - 1, 0) * B, mask=valid, other=0.0)
                    u_c = tl.load(u_lvl + i * B, mask=valid, other=0.0)
                    u_r = tl.load(u_lvl + right * B, mask=valid, other=0.0)
                    ihw = tl.load(inv_hw_ptr + i)
                    ql = (u_c - u_l) * inv_h
                    qr = (u_r - u_c) * inv_h
                    lo = tl.where(i > 0, -nu * ihw - tl.maximum(ql, 0.0) * inv_h, 0.0)
                    up = tl.where(has_right, -nu * ihw + tl.minimum(qr, 0.0) * inv_h, 0.0)
                    diag = inv_dt - lo - up
                    lo_q = tl.maximum(ql, 0.0)
                    up_q = tl.minimum(qr, 0.0)
                    res = ((u_c - tl.load(nxt + i * B, mask=valid, other=0.0)) * inv_dt
                           - nu * tl.load(inv_w_ptr + i) * (qr - ql)
                           + 0.5 * (lo_q * lo_q + up_q * up_q)
                           - tl.load(f_lvl + i * B, mask=valid, other=0.0))
                    r = 1.0 / (diag - lo * cp)
                    cp = up * r
                    dp = (res - lo * dp) * r
                    tl.store(cp_b + i * B, cp, mask=valid)
                    tl.store(dp_b + i * B, dp, mask=valid)
                # backward substitution and the update, on the problems still iterating
                du = zero
                step = zero
                size = zero
                for j in range(NX):
                    i = NX - 1 - j
                    du = (tl.load(dp_b + i * B, mask=valid, other=0.0)
                          - tl.load(cp_b + i * B, mask=valid, other=0.0) * du)
                    u = tl.load(u_lvl + i * B, mask=valid, other=0.0)
                    u = tl.where(active, u - du, u)
                    tl.store(u_lvl + i * B, u, mask=valid)
                    step = tl.maximum(step, tl.abs(du))
                    size = tl.maximum(size, tl.abs(u))
                iterations += active.to(tl.int32)
                active = active & ~(step <= tol * (1.0 + size))  # NaN keeps iterating
                it += 1
            bad = tl.where(active & (bad < 0), n, bad)
            u_lvl -= row
            f_lvl -= row
            g_lvl -= row
        tl.store(status_ptr + b, bad, mask=valid)
        tl.store(status_ptr + B + b, iterations, mask=valid)

    @triton.jit
    def fp_sweep_kernel(U_ptr, mu_ptr, nu_ptr, inv_hw_ptr, params_ptr, cp_ptr, dp_ptr,
                        B, NX, NT, BLOCK: tl.constexpr):
        b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        valid = b < B
        h = tl.load(params_ptr)
        dt = tl.load(params_ptr + 1)
        inv_h = 1.0 / h
        inv_dt = 1.0 / dt
        nu = tl.load(nu_ptr + b, mask=valid, other=0.0)
        zero = nu * 0.0
        row = NX * B
        cp_b = cp_ptr + b
        dp_b = dp_ptr + b
        u_lvl = U_ptr + b
        mu_lvl = mu_ptr + b
        for _n in range(NT):
            # J(u^n)ᵀ: row i has lower_t = upper_{i−1}, upper_t = lower_{i+1}
            cp = zero
            dp = zero
            for i in range(NX):
                has_right = i < NX - 1
                left = tl.maximum(i - 1, 0)  # (neighbours read again, as in the HJB kernel)
                right = tl.minimum(i + 1, NX - 1)
                u_l = tl.load(u_lvl + left * B, mask=valid, other=0.0)
                u_c = tl.load(u_lvl + i * B, mask=valid, other=0.0)
                u_r = tl.load(u_lvl + right * B, mask=valid, other=0.0)
                ihw_l = tl.load(inv_hw_ptr + left)
                ihw_c = tl.load(inv_hw_ptr + i)
                ihw_r = tl.load(inv_hw_ptr + right)
                ql = (u_c - u_l) * inv_h
                qr = (u_r - u_c) * inv_h
                lo = tl.where(i > 0, -nu * ihw_c - tl.maximum(ql, 0.0) * inv_h, 0.0)
                up = tl.where(has_right, -nu * ihw_c + tl.minimum(qr, 0.0) * inv_h, 0.0)
                diag = inv_dt - lo - up
                lo_t = tl.where(i > 0, -nu * ihw_l + tl.minimum(ql, 0.0) * inv_h, 0.0)
                up_t = tl.where(has_right, -nu * ihw_r - tl.maximum(qr, 0.0) * inv_h, 0.0)
                rhs = tl.load(mu_lvl + i * B, mask=valid, other=0.0) * inv_dt
                r = 1.0 / (diag - lo_t * cp)
                cp = up_t * r
                dp = (rhs - lo_t * dp) * r
                tl.store(cp_b + i * B, cp, mask=valid)
                tl.store(dp_b + i * B, dp, mask=valid)
            mu_lvl += row
            x = zero
            for j in range(NX):
                i = NX - 1 - j
                x = (tl.load(dp_b + i * B, mask=valid, other=0.0)
                     - tl.load(cp_b + i * B, mask=valid, other=0.0) * x)
                tl.store(mu_lvl + i * B, x, mask=valid)
            u_lvl += row

    _KERNELS.update(hjb=hjb_sweep_kernel, fp=fp_sweep_kernel)
    return _KERNELS


def _batch_last(a: Any) -> Any:
    """(B, levels, nx) → contiguous (levels, nx, B)."""
    return a.permute(1, 2, 0).contiguous()


def _grid(B: int) -> tuple[int]:
    return ((B + BLOCK - 1) // BLOCK,)


def _params(values: tuple[float, ...], like: Any) -> Any:
    """The scalars as a tensor of ``like``'s dtype and device (cached: a copy from the host
    would wait for the device)."""
    key = (values, like.dtype, like.device)
    if key not in _PARAMS:
        import torch

        _PARAMS[key] = torch.tensor(values, dtype=like.dtype, device=like.device)
    return _PARAMS[key]


def hjb_sweep(U_T: Any, F: Any, guess: Any | None, nu: Any, h: float, dt: float,
              inv_hw: Any, inv_w: Any, tol: float, max_newton: int) -> tuple[Any, Any]:
    """Backward HJB sweep for a batch: U (B, nt+1, nx) with U[:, nt] = U_T (B, nx), running
    costs F (B, nt, nx), optional Newton seeds ``guess`` (B, nt+1, nx), ν per problem (B,).

    Returns U and a status tensor (2, B) of int32 left on the device: row 0 the first time
    index (in sweep order, i.e. the largest n) whose Newton iteration did not converge in
    ``max_newton`` iterations, −1 when all did; row 1 the Newton iterations per problem.
    """
    import torch

    B, nt, nx = F.shape
    U = torch.empty((nt + 1, nx, B), dtype=F.dtype, device=F.device)
    U[nt] = U_T.transpose(0, 1)
    Ft = _batch_last(F)
    G = U if guess is None else _batch_last(guess)
    scratch = torch.empty((2, nx, B), dtype=F.dtype, device=F.device)
    status = torch.empty((2, B), dtype=torch.int32, device=F.device)
    _kernels()["hjb"][_grid(B)](
        U, Ft, G, nu, inv_hw, inv_w, _params((h, dt, tol), F), scratch[0], scratch[1],
        status, B, nx, nt, max_newton, USE_GUESS=guess is not None, BLOCK=BLOCK,
        num_warps=NUM_WARPS)
    return U.permute(2, 0, 1).contiguous(), status


def fp_sweep(U: Any, mu0: Any, nu: Any, h: float, dt: float, inv_hw: Any) -> Any:
    """Forward FP sweep for a batch: cell masses μ (B, nt+1, nx) from μ0 (B, nx), transported
    by U (B, nt+1, nx): J(U[n])ᵀ μ^{n+1} = μ^n / Δt."""
    import torch

    B, levels, nx = U.shape
    mu = torch.empty((levels, nx, B), dtype=U.dtype, device=U.device)
    mu[0] = mu0.transpose(0, 1)
    scratch = torch.empty((2, nx, B), dtype=U.dtype, device=U.device)
    _kernels()["fp"][_grid(B)](
        _batch_last(U), mu, nu, inv_hw, _params((h, dt), U), scratch[0], scratch[1],
        B, nx, levels - 1, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return mu.permute(2, 0, 1).contiguous()
