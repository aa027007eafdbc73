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


# -- the tangent linear sweeps (:mod:`.triton_tangent`) ------------------------------------
# Bands and factors are laid out [x, system] with system s = b·nt + n (problem b, level n);
# the directions of a problem are the lanes of its programs, [level, x, direction] in the
# history of δu and [x, direction] in the forward state δμ.

@triton.jit
def thomas_factor_kernel(band_ptr, fac_ptr, S, NX, BLOCK: tl.constexpr):
    """Thomas factors (cp, inv) of J(u^n) and of J(u^n)ᵀ for every system s, one per lane:
    inv_i = 1/(b_i − a_i cp_{i−1}), cp_i = c_i inv_i; J(u)ᵀ has lower band upper_{i−1} and
    upper band lower_{i+1}. ``band_ptr``: lower, diag, upper (3, NX, S); ``fac_ptr``: cp, inv,
    cp_t, inv_t (4, NX, S)."""
    s = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = s < S
    plane = NX * S
    cp = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    cp_t = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    for i in range(NX):
        at = band_ptr + i * S + s
        a = tl.load(at, mask=valid, other=0.0)
        d = tl.load(at + plane, mask=valid, other=1.0)
        c = tl.load(at + 2 * plane, mask=valid, other=0.0)
        a_t = tl.load(at + 2 * plane - S, mask=valid & (s * 0 + i >= 1), other=0.0)
        c_t = tl.load(at + S, mask=valid & (s * 0 + i + 1 < NX), other=0.0)
        inv = 1.0 / (d - a * cp)
        cp = c * inv
        inv_t = 1.0 / (d - a_t * cp_t)
        cp_t = c_t * inv_t
        out = fac_ptr + i * S + s
        tl.store(out, cp, mask=valid)
        tl.store(out + plane, inv, mask=valid)
        tl.store(out + 2 * plane, cp_t, mask=valid)
        tl.store(out + 3 * plane, inv_t, mask=valid)

@triton.jit
def factor_at(ptr, i, S, s0, NX, ok):
    """The band or factor value of row i (0 past the grid), broadcast over the lanes."""
    return tl.load(ptr + i * S + s0, mask=ok & (s0 * 0 + i < NX), other=0.0)

@triton.jit
def backward_loads(hist_n, fac_ptr, band_ptr, chi_ptr, i, n, S, s0, NX, NT, j, jv, plane):
    """Row i of the backward sweep at level n: a_i, inv_i and the right-hand side
    δu^{n+1}_i/Δt − [j = n] χ_i (direction j vanishes at level n + 1 for j ≤ n)."""
    ok = jv & (j * 0 + i < NX)
    a = factor_at(band_ptr, i, S, s0, NX, jv)
    inv = factor_at(fac_ptr + plane, i, S, s0, NX, jv)
    prev = tl.load(hist_n + NX * NT + i * NT, mask=ok & (j > n), other=0.0)
    chi = tl.load(chi_ptr + tl.minimum(i, NX - 1) + j * 0, mask=ok & (j == n), other=0.0)
    return a, inv, prev, chi

@triton.jit
def forward_loads(hist_n, dmu, fac_ptr, band_ptr, i, n, S, s0, NX, NT, j, jv, plane):
    """Row i of the forward sweep at level n: the lower band upper_{i−1} and inv of J(u^n)ᵀ,
    δμ^n_i, the transport weights c_{i−1}, c_i and δu^n at rows i − 1, i, i + 1."""
    ok = jv & (j * 0 + i < NX)
    a_t = factor_at(band_ptr + 2 * plane - S, i, S, s0, NX, jv & (j * 0 + i >= 1))
    inv_t = factor_at(fac_ptr + 3 * plane, i, S, s0, NX, jv)
    m = tl.load(dmu + i * NT, mask=ok & (j * 0 + n > 0), other=0.0)
    c_l = factor_at(band_ptr + 3 * plane - S, i, S, s0, NX, jv & (j * 0 + i >= 1))
    c_r = factor_at(band_ptr + 3 * plane, i, S, s0, NX - 1, jv)
    take = ok & (j >= n)
    d_l = tl.load(hist_n + (i - 1) * NT, mask=take & (j * 0 + i >= 1), other=0.0)
    d_c = tl.load(hist_n + i * NT, mask=take, other=0.0)
    d_r = tl.load(hist_n + (i + 1) * NT, mask=take & (j * 0 + i + 1 < NX), other=0.0)
    return a_t, inv_t, m, c_l, c_r, d_l, d_c, d_r

@triton.jit
def forward_rhs(a_t, inv_t, m, c_l, c_r, d_l, d_c, d_r, x, inv_dt):
    """One elimination step of J(u^n)ᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n, K_n = Dᵀ diag(c) D."""
    rhs = m * inv_dt - c_l * (d_c - d_l) + c_r * (d_r - d_c)
    return (rhs - a_t * x) * inv_t

@triton.jit
def tangent_sweep_kernel(band_ptr, fac_ptr, chi_ptr, hist_ptr, dmu_ptr, D_ptr, params_ptr,
                         NB, NX, NT, NBLK, BD: tl.constexpr):
    """D[b, n, j] = χ·δμ^{n+1}_j for the directions j of block ``pid % NBLK`` of problem
    ``pid // NBLK``: the backward sweep J_n δu^n = δu^{n+1}/Δt − [j = n] χ (levels j..0, into
    the history), then the forward sweep J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n (levels 0..nt−1,
    δμ in place). Rows go in groups of four, their loads issued before the serial steps."""
    pid = tl.program_id(0)
    b = pid // NBLK
    j = (pid % NBLK) * BD + tl.arange(0, BD)
    jv = j < NT
    jmax = tl.minimum((pid % NBLK) * BD + BD - 1, NT - 1)
    dt = tl.load(params_ptr)
    inv_dt = 1.0 / dt
    S = NB * NT
    plane = NX * S
    zero = tl.zeros([BD], tl.float32).to(hist_ptr.dtype.element_ty)
    lanes = tl.arange(0, BD) * 0
    hist = hist_ptr + b.to(tl.int64) * NT * NX * NT + j
    dmu = dmu_ptr + b.to(tl.int64) * NX * NT + j
    for k in range(0, jmax + 1):
        n = jmax - k
        s0 = lanes + b * NT + n
        hist_n = hist + n * NX * NT
        x = zero
        for i0 in range(0, NX, 4):
            a0, v0, p0, c0 = backward_loads(hist_n, fac_ptr, band_ptr, chi_ptr, i0, n, S, s0,
                                            NX, NT, j, jv, plane)
            a1, v1, p1, c1 = backward_loads(hist_n, fac_ptr, band_ptr, chi_ptr, i0 + 1, n, S,
                                            s0, NX, NT, j, jv, plane)
            a2, v2, p2, c2 = backward_loads(hist_n, fac_ptr, band_ptr, chi_ptr, i0 + 2, n, S,
                                            s0, NX, NT, j, jv, plane)
            a3, v3, p3, c3 = backward_loads(hist_n, fac_ptr, band_ptr, chi_ptr, i0 + 3, n, S,
                                            s0, NX, NT, j, jv, plane)
            x = (p0 * inv_dt - c0 - a0 * x) * v0
            tl.store(hist_n + i0 * NT, x, mask=jv)
            x = (p1 * inv_dt - c1 - a1 * x) * v1
            tl.store(hist_n + (i0 + 1) * NT, x, mask=jv & (lanes + i0 + 1 < NX))
            x = (p2 * inv_dt - c2 - a2 * x) * v2
            tl.store(hist_n + (i0 + 2) * NT, x, mask=jv & (lanes + i0 + 2 < NX))
            x = (p3 * inv_dt - c3 - a3 * x) * v3
            tl.store(hist_n + (i0 + 3) * NT, x, mask=jv & (lanes + i0 + 3 < NX))
        x = zero
        for r0 in range(0, NX, 4):
            i = NX - 1 - r0
            y0 = tl.load(hist_n + i * NT, mask=jv, other=0.0)
            q0 = factor_at(fac_ptr, i, S, s0, NX, jv)
            y1 = tl.load(hist_n + (i - 1) * NT, mask=jv & (lanes + i >= 1), other=0.0)
            q1 = factor_at(fac_ptr, i - 1, S, s0, NX, jv & (lanes + i >= 1))
            y2 = tl.load(hist_n + (i - 2) * NT, mask=jv & (lanes + i >= 2), other=0.0)
            q2 = factor_at(fac_ptr, i - 2, S, s0, NX, jv & (lanes + i >= 2))
            y3 = tl.load(hist_n + (i - 3) * NT, mask=jv & (lanes + i >= 3), other=0.0)
            q3 = factor_at(fac_ptr, i - 3, S, s0, NX, jv & (lanes + i >= 3))
            x = y0 - q0 * x
            tl.store(hist_n + i * NT, x, mask=jv)
            x = y1 - q1 * x
            tl.store(hist_n + (i - 1) * NT, x, mask=jv & (lanes + i >= 1))
            x = y2 - q2 * x
            tl.store(hist_n + (i - 2) * NT, x, mask=jv & (lanes + i >= 2))
            x = y3 - q3 * x
            tl.store(hist_n + (i - 3) * NT, x, mask=jv & (lanes + i >= 3))
    for n in range(0, NT):
        s0 = lanes + b * NT + n
        hist_n = hist + n * NX * NT
        x = zero
        for i0 in range(0, NX, 4):
            t0, v0, m0, cl0, cr0, dl0, dc0, dr0 = forward_loads(
                hist_n, dmu, fac_ptr, band_ptr, i0, n, S, s0, NX, NT, j, jv, plane)
            t1, v1, m1, cl1, cr1, dl1, dc1, dr1 = forward_loads(
                hist_n, dmu, fac_ptr, band_ptr, i0 + 1, n, S, s0, NX, NT, j, jv, plane)
            t2, v2, m2, cl2, cr2, dl2, dc2, dr2 = forward_loads(
                hist_n, dmu, fac_ptr, band_ptr, i0 + 2, n, S, s0, NX, NT, j, jv, plane)
            t3, v3, m3, cl3, cr3, dl3, dc3, dr3 = forward_loads(
                hist_n, dmu, fac_ptr, band_ptr, i0 + 3, n, S, s0, NX, NT, j, jv, plane)
            x = forward_rhs(t0, v0, m0, cl0, cr0, dl0, dc0, dr0, x, inv_dt)
            tl.store(dmu + i0 * NT, x, mask=jv)
            x = forward_rhs(t1, v1, m1, cl1, cr1, dl1, dc1, dr1, x, inv_dt)
            tl.store(dmu + (i0 + 1) * NT, x, mask=jv & (lanes + i0 + 1 < NX))
            x = forward_rhs(t2, v2, m2, cl2, cr2, dl2, dc2, dr2, x, inv_dt)
            tl.store(dmu + (i0 + 2) * NT, x, mask=jv & (lanes + i0 + 2 < NX))
            x = forward_rhs(t3, v3, m3, cl3, cr3, dl3, dc3, dr3, x, inv_dt)
            tl.store(dmu + (i0 + 3) * NT, x, mask=jv & (lanes + i0 + 3 < NX))
        x = zero
        z = zero
        for r0 in range(0, NX, 4):
            i = NX - 1 - r0
            y0 = tl.load(dmu + i * NT, mask=jv, other=0.0)
            q0 = factor_at(fac_ptr + 2 * plane, i, S, s0, NX, jv)
            w0 = tl.load(chi_ptr + i + lanes)
            y1 = tl.load(dmu + (i - 1) * NT, mask=jv & (lanes + i >= 1), other=0.0)
            q1 = factor_at(fac_ptr + 2 * plane, i - 1, S, s0, NX, jv & (lanes + i >= 1))
            w1 = tl.load(chi_ptr + i - 1 + lanes, mask=(lanes + i) >= 1, other=0.0)
            y2 = tl.load(dmu + (i - 2) * NT, mask=jv & (lanes + i >= 2), other=0.0)
            q2 = factor_at(fac_ptr + 2 * plane, i - 2, S, s0, NX, jv & (lanes + i >= 2))
            w2 = tl.load(chi_ptr + i - 2 + lanes, mask=(lanes + i) >= 2, other=0.0)
            y3 = tl.load(dmu + (i - 3) * NT, mask=jv & (lanes + i >= 3), other=0.0)
            q3 = factor_at(fac_ptr + 2 * plane, i - 3, S, s0, NX, jv & (lanes + i >= 3))
            w3 = tl.load(chi_ptr + i - 3 + lanes, mask=(lanes + i) >= 3, other=0.0)
            x = y0 - q0 * x
            tl.store(dmu + i * NT, x, mask=jv)
            z += w0 * x
            x = y1 - q1 * x
            tl.store(dmu + (i - 1) * NT, x, mask=jv & (lanes + i >= 1))
            z += w1 * x
            x = y2 - q2 * x
            tl.store(dmu + (i - 2) * NT, x, mask=jv & (lanes + i >= 2))
            z += w2 * x
            x = y3 - q3 * x
            tl.store(dmu + (i - 3) * NT, x, mask=jv & (lanes + i >= 3))
            z += w3 * x
        tl.store(D_ptr + b.to(tl.int64) * NT * NT + n * NT + j, z, mask=jv)
