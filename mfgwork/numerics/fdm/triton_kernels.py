"""The Triton kernels of :mod:`.triton_sweeps` (imported on first use: it needs Triton).

Each program owns a block of problems, one per thread, and runs a whole sweep for them.
Arrays are laid out [level, x, problem]; rows go in groups of four, each group's loads issued
before its serial Thomas elimination, so that their latencies overlap. A neighbour is read
again rather than carried from the previous row in a register: Triton lost a loop variable
assigned from another one (``u_l = u_c``).
"""

import triton
import triton.language as tl


@triton.jit
def load_row(ptr, i, NX, B, valid):
    """Row i (clamped to the grid: at a wall the neighbour is the point itself, so the
    edge gradient q is 0 there) of a [x, problem] array at one level."""
    return tl.load(ptr + tl.minimum(tl.maximum(i, 0), NX - 1) * B, mask=valid, other=0.0)

@triton.jit
def hjb_row(u_l, u_c, u_r, nxt, f_lvl, inv_hw_ptr, inv_w_ptr, i, nu, inv_h, inv_dt,
            NX, B, valid):
    """Jacobian bands (lower, diag, upper) and residual R of HJB row i."""
    row = tl.minimum(i, NX - 1)
    ihw = tl.load(inv_hw_ptr + row)
    ql = (u_c - u_l) * inv_h
    qr = (u_r - u_c) * inv_h
    lo = tl.where(i > 0, -nu * ihw - tl.maximum(ql, 0.0) * inv_h, 0.0)
    up = tl.where(i < NX - 1, -nu * ihw + tl.minimum(qr, 0.0) * inv_h, 0.0)
    lq = tl.maximum(ql, 0.0)
    uq = tl.minimum(qr, 0.0)
    res = ((u_c - tl.load(nxt + row * B, mask=valid, other=0.0)) * inv_dt
           - nu * tl.load(inv_w_ptr + row) * (qr - ql) + 0.5 * (lq * lq + uq * uq)
           - tl.load(f_lvl + row * B, mask=valid, other=0.0))
    return lo, inv_dt - lo - up, up, res

@triton.jit
def fp_row(u_l, u_c, u_r, mu_lvl, inv_hw_ptr, i, nu, inv_h, inv_dt, NX, B, valid):
    """Bands of row i of J(u)ᵀ (lower_t = upper_{i−1}, upper_t = lower_{i+1}) and μ_i/Δt."""
    row = tl.minimum(i, NX - 1)
    ihw_l = tl.load(inv_hw_ptr + tl.maximum(row - 1, 0))
    ihw_c = tl.load(inv_hw_ptr + row)
    ihw_r = tl.load(inv_hw_ptr + tl.minimum(row + 1, NX - 1))
    ql = (u_c - u_l) * inv_h
    qr = (u_r - u_c) * inv_h
    lo = tl.where(i > 0, -nu * ihw_c - tl.maximum(ql, 0.0) * inv_h, 0.0)
    up = tl.where(i < NX - 1, -nu * ihw_c + tl.minimum(qr, 0.0) * inv_h, 0.0)
    lo_t = tl.where(i > 0, -nu * ihw_l + tl.minimum(ql, 0.0) * inv_h, 0.0)
    up_t = tl.where(i < NX - 1, -nu * ihw_r - tl.maximum(qr, 0.0) * inv_h, 0.0)
    rhs = tl.load(mu_lvl + row * B, mask=valid, other=0.0) * inv_dt
    return lo_t, inv_dt - lo - up, up_t, rhs

@triton.jit
def eliminate(cp, dp, lo, diag, up, rhs, cp_b, dp_b, i, NX, B, valid):
    """One forward step of the Thomas algorithm (row i; rows past the grid not stored)."""
    r = 1.0 / (diag - lo * cp)
    cp = up * r
    dp = (rhs - lo * dp) * r
    inside = valid & ((valid.to(tl.int32) * 0 + i) < NX)
    tl.store(cp_b + i * B, cp, mask=inside)
    tl.store(dp_b + i * B, dp, mask=inside)
    return cp, dp

@triton.jit
def hjb_update(du, dp_i, cp_i, u, active, u_lvl, i, B, valid, step, size):
    """Back substitution at row i (i < 0: past the grid, ignored) and the Newton update
    of the problems still iterating; returns du, the largest |du| and |u|."""
    du = dp_i - cp_i * du
    u = tl.where(active, u - du, u)
    inside = (valid.to(tl.int32) * 0 + i) >= 0
    tl.store(u_lvl + i * B, u, mask=valid & inside)
    step = tl.where(inside, tl.maximum(step, tl.abs(du)), step)
    size = tl.where(inside, tl.maximum(size, tl.abs(u)), size)
    return du, step, size

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
        # Newton starts from the guess or from level n + 1: the first iteration reads
        # it there, and every iteration writes level n
        if USE_GUESS:
            src = g_lvl
        else:
            src = nxt
        active = valid
        it = 0
        while (it < max_newton) & (tl.max(active.to(tl.int32), axis=0) > 0):
            cp = zero
            dp = zero
            for i0 in range(0, NX, 4):
                u0 = load_row(src, i0 - 1, NX, B, valid)
                u1 = load_row(src, i0, NX, B, valid)
                u2 = load_row(src, i0 + 1, NX, B, valid)
                u3 = load_row(src, i0 + 2, NX, B, valid)
                u4 = load_row(src, i0 + 3, NX, B, valid)
                u5 = load_row(src, i0 + 4, NX, B, valid)
                lo0, dg0, up0, rs0 = hjb_row(u0, u1, u2, nxt, f_lvl, inv_hw_ptr, inv_w_ptr,
                                             i0, nu, inv_h, inv_dt, NX, B, valid)
                lo1, dg1, up1, rs1 = hjb_row(u1, u2, u3, nxt, f_lvl, inv_hw_ptr, inv_w_ptr,
                                             i0 + 1, nu, inv_h, inv_dt, NX, B, valid)
                lo2, dg2, up2, rs2 = hjb_row(u2, u3, u4, nxt, f_lvl, inv_hw_ptr, inv_w_ptr,
                                             i0 + 2, nu, inv_h, inv_dt, NX, B, valid)
                lo3, dg3, up3, rs3 = hjb_row(u3, u4, u5, nxt, f_lvl, inv_hw_ptr, inv_w_ptr,
                                             i0 + 3, nu, inv_h, inv_dt, NX, B, valid)
                cp, dp = eliminate(cp, dp, lo0, dg0, up0, rs0, cp_b, dp_b, i0, NX, B, valid)
                cp, dp = eliminate(cp, dp, lo1, dg1, up1, rs1, cp_b, dp_b, i0 + 1, NX, B,
                                   valid)
                cp, dp = eliminate(cp, dp, lo2, dg2, up2, rs2, cp_b, dp_b, i0 + 2, NX, B,
                                   valid)
                cp, dp = eliminate(cp, dp, lo3, dg3, up3, rs3, cp_b, dp_b, i0 + 3, NX, B,
                                   valid)
            # back substitution from the last row down, four rows per group
            du = zero
            step = zero
            size = zero
            for j0 in range(0, NX, 4):
                i = NX - 1 - j0
                d0 = load_row(dp_b, i, NX, B, valid)
                c0 = load_row(cp_b, i, NX, B, valid)
                v0 = load_row(src, i, NX, B, valid)
                d1 = load_row(dp_b, i - 1, NX, B, valid)
                c1 = load_row(cp_b, i - 1, NX, B, valid)
                v1 = load_row(src, i - 1, NX, B, valid)
                d2 = load_row(dp_b, i - 2, NX, B, valid)
                c2 = load_row(cp_b, i - 2, NX, B, valid)
                v2 = load_row(src, i - 2, NX, B, valid)
                d3 = load_row(dp_b, i - 3, NX, B, valid)
                c3 = load_row(cp_b, i - 3, NX, B, valid)
                v3 = load_row(src, i - 3, NX, B, valid)
                du, step, size = hjb_update(du, d0, c0, v0, active, u_lvl, i, B, valid,
                                            step, size)
                du, step, size = hjb_update(du, d1, c1, v1, active, u_lvl, i - 1, B, valid,
                                            step, size)
                du, step, size = hjb_update(du, d2, c2, v2, active, u_lvl, i - 2, B, valid,
                                            step, size)
                du, step, size = hjb_update(du, d3, c3, v3, active, u_lvl, i - 3, B, valid,
                                            step, size)
            iterations += active.to(tl.int32)
            active = active & ~(step <= tol * (1.0 + size))  # NaN keeps iterating
            src = u_lvl
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
        # J(u^n)ᵀ μ^{n+1} = μ^n / Δt, rows in groups of four as in the HJB kernel
        cp = zero
        dp = zero
        for i0 in range(0, NX, 4):
            u0 = load_row(u_lvl, i0 - 1, NX, B, valid)
            u1 = load_row(u_lvl, i0, NX, B, valid)
            u2 = load_row(u_lvl, i0 + 1, NX, B, valid)
            u3 = load_row(u_lvl, i0 + 2, NX, B, valid)
            u4 = load_row(u_lvl, i0 + 3, NX, B, valid)
            u5 = load_row(u_lvl, i0 + 4, NX, B, valid)
            lo0, dg0, up0, rs0 = fp_row(u0, u1, u2, mu_lvl, inv_hw_ptr, i0, nu, inv_h,
                                        inv_dt, NX, B, valid)
            lo1, dg1, up1, rs1 = fp_row(u1, u2, u3, mu_lvl, inv_hw_ptr, i0 + 1, nu, inv_h,
                                        inv_dt, NX, B, valid)
            lo2, dg2, up2, rs2 = fp_row(u2, u3, u4, mu_lvl, inv_hw_ptr, i0 + 2, nu, inv_h,
                                        inv_dt, NX, B, valid)
            lo3, dg3, up3, rs3 = fp_row(u3, u4, u5, mu_lvl, inv_hw_ptr, i0 + 3, nu, inv_h,
                                        inv_dt, NX, B, valid)
            cp, dp = eliminate(cp, dp, lo0, dg0, up0, rs0, cp_b, dp_b, i0, NX, B, valid)
            cp, dp = eliminate(cp, dp, lo1, dg1, up1, rs1, cp_b, dp_b, i0 + 1, NX, B, valid)
            cp, dp = eliminate(cp, dp, lo2, dg2, up2, rs2, cp_b, dp_b, i0 + 2, NX, B, valid)
            cp, dp = eliminate(cp, dp, lo3, dg3, up3, rs3, cp_b, dp_b, i0 + 3, NX, B, valid)
        mu_lvl += row
        x = zero
        for j0 in range(0, NX, 4):
            i = NX - 1 - j0
            d0 = load_row(dp_b, i, NX, B, valid)
            c0 = load_row(cp_b, i, NX, B, valid)
            d1 = load_row(dp_b, i - 1, NX, B, valid)
            c1 = load_row(cp_b, i - 1, NX, B, valid)
            d2 = load_row(dp_b, i - 2, NX, B, valid)
            c2 = load_row(cp_b, i - 2, NX, B, valid)
            d3 = load_row(dp_b, i - 3, NX, B, valid)
            c3 = load_row(cp_b, i - 3, NX, B, valid)
            x = d0 - c0 * x
            tl.store(mu_lvl + i * B, x, mask=valid)
            x = d1 - c1 * x
            tl.store(mu_lvl + (i - 1) * B, x, mask=valid & (b * 0 + i >= 1))
            x = d2 - c2 * x
            tl.store(mu_lvl + (i - 2) * B, x, mask=valid & (b * 0 + i >= 2))
            x = d3 - c3 * x
            tl.store(mu_lvl + (i - 3) * B, x, mask=valid & (b * 0 + i >= 3))
        u_lvl += row
