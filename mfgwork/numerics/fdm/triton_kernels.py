"""Template of the fused Triton kernels of :mod:`.triton_sweeps`, written once for every model.

Not imported as it stands (it needs Triton, and the model's functions): as the compiled CPU
scheme does (:mod:`.model_loops`), :func:`.triton_sweeps.model_kernels` writes, for each
model structure, one module made of the model's generated ``@triton.jit`` functions
(:func:`mfgwork.problems.symbolic.triton_source`: ``DEPENDS_ON_M``, ``model_params``,
``H_and_p``, ``H_p``, ``H_zero``, ``H_pp``) followed by this source, :mod:`.triton_coop` and
:mod:`.triton_tangent_coop`, and imports it from the model cache folder; Triton's cache keys
on the source of a kernel and of the functions it calls, so a later process loads it.

Each program owns a block of problems, one per thread, and runs a whole sweep for them.
Arrays are laid out [level, x, problem]; rows go in groups of four, each group's loads issued
before its serial Thomas elimination, so that their latencies overlap. A neighbour is read
again rather than carried from the previous row in a register: Triton lost a loop variable
assigned from another one (``u_l = u_c``). The Engquist–Osher Hamiltonian of row i is
Ĥ_i = H(x_i, (q_{i−1})_+, m_i) + H(x_i, (q_i)_−, m_i) − H(x_i, 0, m_i); the model's fields
``prm`` are loaded once per program, the density only where H depends on m.
"""
# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import triton
import triton.language as tl


@triton.jit
def node_density(m_lvl, i, NX, B, valid):
    """The density that H sees at row i (clamped) of a [x, problem] level (0 where H does
    not depend on m: nothing is loaded)."""
    if DEPENDS_ON_M:
        m = tl.load(m_lvl + tl.minimum(tl.maximum(i, 0), NX - 1) * B, mask=valid, other=0.0)
    else:
        m = 0.0
    return m

@triton.jit
def load_row(ptr, i, NX, B, valid):
    """Row i (clamped to the grid: at a wall the neighbour is the point itself, so the
    edge gradient q is 0 there) of a [x, problem] array at one level."""
    return tl.load(ptr + tl.minimum(tl.maximum(i, 0), NX - 1) * B, mask=valid, other=0.0)

@triton.jit
def hjb_row(u_l, u_c, u_r, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, inv_w_ptr, i, nu, inv_h,
            inv_dt, NX, B, valid):
    """Jacobian bands (lower, diag, upper) and residual R of HJB row i."""
    row = tl.minimum(i, NX - 1)
    ihw = tl.load(inv_hw_ptr + row)
    x = tl.load(x_ptr + row)
    m = node_density(m_lvl, i, NX, B, valid)
    ql = (u_c - u_l) * inv_h
    qr = (u_r - u_c) * inv_h
    h_l, d_l = H_and_p(tl.maximum(ql, 0.0), x, m, prm)
    h_r, d_r = H_and_p(tl.minimum(qr, 0.0), x, m, prm)
    lo = tl.where(i > 0, -nu * ihw - d_l * inv_h, 0.0)
    up = tl.where(i < NX - 1, -nu * ihw + d_r * inv_h, 0.0)
    res = ((u_c - tl.load(nxt + row * B, mask=valid, other=0.0)) * inv_dt
           - nu * tl.load(inv_w_ptr + row) * (qr - ql) + (h_l + h_r - H_zero(x, m, prm))
           - tl.load(f_lvl + row * B, mask=valid, other=0.0))
    return lo, inv_dt - lo - up, up, res

@triton.jit
def fp_row(u_l, u_c, u_r, mu_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, i, nu, inv_h, inv_dt, NX, B,
           valid):
    """Bands of row i of J(u)ᵀ (lower_t = upper_{i−1}, upper_t = lower_{i+1}) and μ_i/Δt."""
    row = tl.minimum(i, NX - 1)
    left = tl.maximum(row - 1, 0)
    right = tl.minimum(row + 1, NX - 1)
    ihw_l = tl.load(inv_hw_ptr + left)
    ihw_c = tl.load(inv_hw_ptr + row)
    ihw_r = tl.load(inv_hw_ptr + right)
    x_l = tl.load(x_ptr + left)
    x_c = tl.load(x_ptr + row)
    x_r = tl.load(x_ptr + right)
    m_l = node_density(m_lvl, i - 1, NX, B, valid)
    m_c = node_density(m_lvl, i, NX, B, valid)
    m_r = node_density(m_lvl, i + 1, NX, B, valid)
    ql = (u_c - u_l) * inv_h
    qr = (u_r - u_c) * inv_h
    lo = tl.where(i > 0, -nu * ihw_c - H_p(tl.maximum(ql, 0.0), x_c, m_c, prm) * inv_h, 0.0)
    up = tl.where(i < NX - 1, -nu * ihw_c + H_p(tl.minimum(qr, 0.0), x_c, m_c, prm) * inv_h,
                  0.0)
    lo_t = tl.where(i > 0, -nu * ihw_l + H_p(tl.minimum(ql, 0.0), x_l, m_l, prm) * inv_h, 0.0)
    up_t = tl.where(i < NX - 1,
                    -nu * ihw_r - H_p(tl.maximum(qr, 0.0), x_r, m_r, prm) * inv_h, 0.0)
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
def newton_done(step, before, bound):
    """Whether Newton's method at a level has its root within ``bound`` (tol (1 + max|u|)):
    the last update max|du| = ``step`` is, or the error it leaves by its contraction from the
    update ``before`` (0: none yet), step² / (before − step), is within bound / 64 (rounding,
    for tol = 64 ε; the compiled loops' rule, :mod:`.model_loops`). NaN is never done."""
    return (step <= bound) | ((before > step) & (64.0 * step * step <= bound * (before - step)))


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
def hjb_forward(src, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, inv_w_ptr, cp_b, dp_b, nu,
                inv_h, inv_dt, zero, NX, B, valid):
    """The forward elimination of one Newton iteration of HJB at a level (the iterate at
    ``src``, level n + 1 at ``nxt``): the Thomas factors of every row into cp, dp."""
    cp = zero
    dp = zero
    for i0 in range(0, NX, 4):
        u0 = load_row(src, i0 - 1, NX, B, valid)
        u1 = load_row(src, i0, NX, B, valid)
        u2 = load_row(src, i0 + 1, NX, B, valid)
        u3 = load_row(src, i0 + 2, NX, B, valid)
        u4 = load_row(src, i0 + 3, NX, B, valid)
        u5 = load_row(src, i0 + 4, NX, B, valid)
        lo0, dg0, up0, rs0 = hjb_row(u0, u1, u2, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr,
                                     inv_w_ptr, i0, nu, inv_h, inv_dt, NX, B, valid)
        lo1, dg1, up1, rs1 = hjb_row(u1, u2, u3, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr,
                                     inv_w_ptr, i0 + 1, nu, inv_h, inv_dt, NX, B, valid)
        lo2, dg2, up2, rs2 = hjb_row(u2, u3, u4, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr,
                                     inv_w_ptr, i0 + 2, nu, inv_h, inv_dt, NX, B, valid)
        lo3, dg3, up3, rs3 = hjb_row(u3, u4, u5, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr,
                                     inv_w_ptr, i0 + 3, nu, inv_h, inv_dt, NX, B, valid)
        cp, dp = eliminate(cp, dp, lo0, dg0, up0, rs0, cp_b, dp_b, i0, NX, B, valid)
        cp, dp = eliminate(cp, dp, lo1, dg1, up1, rs1, cp_b, dp_b, i0 + 1, NX, B, valid)
        cp, dp = eliminate(cp, dp, lo2, dg2, up2, rs2, cp_b, dp_b, i0 + 2, NX, B, valid)
        cp, dp = eliminate(cp, dp, lo3, dg3, up3, rs3, cp_b, dp_b, i0 + 3, NX, B, valid)

@triton.jit
def hjb_backward(src, cp_b, dp_b, active, u_lvl, zero, NX, B, valid):
    """The back substitution from the last row down, four rows per group, and the Newton
    update written to the level at ``u_lvl``; returns the largest |du| and |u|."""
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
        du, step, size = hjb_update(du, d0, c0, v0, active, u_lvl, i, B, valid, step, size)
        du, step, size = hjb_update(du, d1, c1, v1, active, u_lvl, i - 1, B, valid, step,
                                    size)
        du, step, size = hjb_update(du, d2, c2, v2, active, u_lvl, i - 2, B, valid, step,
                                    size)
        du, step, size = hjb_update(du, d3, c3, v3, active, u_lvl, i - 3, B, valid, step,
                                    size)
    return step, size

@triton.jit
def hjb_sweep_kernel(U_ptr, F_ptr, G_ptr, nu_ptr, inv_hw_ptr, inv_w_ptr, params_ptr,
                     cp_ptr, dp_ptr, status_ptr, x_ptr, m_ptr, prm_ptr, B, NX, NT, max_newton,
                     USE_GUESS: tl.constexpr, BLOCK: tl.constexpr):
    """Backward sweep (the density m_ptr laid out as F: rows m^1..m^nt, read where H
    depends on m)."""
    b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    prm = model_params(prm_ptr)
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
    m_lvl = m_ptr + (NT - 1) * row + b
    for k in range(NT):
        n = NT - 1 - k
        nxt = u_lvl + row  # level n + 1 (known)
        # Newton starts from level n + 1 (the first iteration reads it there) or from the
        # guess shifted by the change found at level n + 1 (written to level n first); every
        # iteration writes level n
        if USE_GUESS:
            for i in range(NX):
                start = (load_row(g_lvl, i, NX, B, valid) + load_row(nxt, i, NX, B, valid)
                         - load_row(g_lvl + row, i, NX, B, valid))
                tl.store(u_lvl + i * B, start, mask=valid)
            src = u_lvl
        else:
            src = nxt
        active = valid
        before = zero   # the last max|du| (0: none yet)
        it = 0
        while (it < max_newton) & (tl.max(active.to(tl.int32), axis=0) > 0):
            hjb_forward(src, nxt, f_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, inv_w_ptr, cp_b, dp_b,
                        nu, inv_h, inv_dt, zero, NX, B, valid)
            step, size = hjb_backward(src, cp_b, dp_b, active, u_lvl, zero, NX, B, valid)
            iterations += active.to(tl.int32)
            active = active & ~newton_done(step, before, tol * (1.0 + size))  # NaN iterates
            before = step
            src = u_lvl
            it += 1
        bad = tl.where(active & (bad < 0), n, bad)
        u_lvl -= row
        f_lvl -= row
        g_lvl -= row
        m_lvl -= row
    tl.store(status_ptr + b, bad, mask=valid)
    tl.store(status_ptr + B + b, iterations, mask=valid)

@triton.jit
def fp_sweep_kernel(U_ptr, mu_ptr, nu_ptr, inv_hw_ptr, params_ptr, cp_ptr, dp_ptr, x_ptr,
                    m_ptr, prm_ptr, B, NX, NT, BLOCK: tl.constexpr):
    """Forward sweep (the density m_ptr [level, x, problem], row n seen by step n)."""
    b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    prm = model_params(prm_ptr)
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
    m_lvl = m_ptr + b
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
            lo0, dg0, up0, rs0 = fp_row(u0, u1, u2, mu_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, i0,
                                        nu, inv_h, inv_dt, NX, B, valid)
            lo1, dg1, up1, rs1 = fp_row(u1, u2, u3, mu_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, i0 + 1,
                                        nu, inv_h, inv_dt, NX, B, valid)
            lo2, dg2, up2, rs2 = fp_row(u2, u3, u4, mu_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, i0 + 2,
                                        nu, inv_h, inv_dt, NX, B, valid)
            lo3, dg3, up3, rs3 = fp_row(u3, u4, u5, mu_lvl, m_lvl, x_ptr, prm, inv_hw_ptr, i0 + 3,
                                        nu, inv_h, inv_dt, NX, B, valid)
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
        m_lvl += row


# -- the tangent linear sweeps (:mod:`.triton_tangent`) ------------------------------------
# Bands are laid out [system, 4, x] (lower, diag, upper, transport weight c) and factors
# [system, 8, x] (inv, cp of the LU and inv', ap of the UL elimination of J(u^n), then the
# same four of J(u^n)ᵀ), system s = b·nt + n (problem b, level n). A program's directions are
# its lanes: δu is kept in a history [level, x, direction] per problem, the Thomas scratch in
# [x, lane] per program.

@triton.jit(do_not_specialize=["S", "NX"])
def thomas_factor_kernel(band_ptr, fac_ptr, S, NX, BLOCK: tl.constexpr):
    """Both eliminations of J(u^n) and J(u^n)ᵀ for every system s, one per lane. LU (top to
    bottom): inv_i = 1/(b_i − a_i cp_{i−1}), cp_i = c_i inv_i; UL (bottom to top):
    inv'_i = 1/(b_i − c_i ap_{i+1}), ap_i = a_i inv'_i. J(u)ᵀ has the lower band upper_{i−1}
    and the upper band lower_{i+1}."""
    s = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = s < S
    zi = s * 0
    bs = band_ptr + s.to(tl.int64) * 4 * NX
    fs = fac_ptr + s.to(tl.int64) * 8 * NX
    cp = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    cp_t = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    for i in range(NX):
        a = tl.load(bs + i, mask=valid, other=0.0)
        d = tl.load(bs + NX + i, mask=valid, other=1.0)
        c = tl.load(bs + 2 * NX + i, mask=valid, other=0.0)
        a_t = tl.load(bs + 2 * NX + i - 1, mask=valid & (zi + i >= 1), other=0.0)
        c_t = tl.load(bs + i + 1, mask=valid & (zi + i + 1 < NX), other=0.0)
        inv = 1.0 / (d - a * cp)
        cp = c * inv
        inv_t = 1.0 / (d - a_t * cp_t)
        cp_t = c_t * inv_t
        tl.store(fs + i, inv, mask=valid)
        tl.store(fs + NX + i, cp, mask=valid)
        tl.store(fs + 4 * NX + i, inv_t, mask=valid)
        tl.store(fs + 5 * NX + i, cp_t, mask=valid)
    ap = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    ap_t = tl.zeros([BLOCK], tl.float32).to(band_ptr.dtype.element_ty)
    for k in range(NX):
        i = NX - 1 - k
        a = tl.load(bs + i, mask=valid, other=0.0)
        d = tl.load(bs + NX + i, mask=valid, other=1.0)
        c = tl.load(bs + 2 * NX + i, mask=valid, other=0.0)
        a_t = tl.load(bs + 2 * NX + i - 1, mask=valid & (zi + i >= 1), other=0.0)
        c_t = tl.load(bs + i + 1, mask=valid & (zi + i + 1 < NX), other=0.0)
        inv = 1.0 / (d - c * ap)
        ap = a * inv
        inv_t = 1.0 / (d - c_t * ap_t)
        ap_t = a_t * inv_t
        tl.store(fs + 2 * NX + i, inv, mask=valid)
        tl.store(fs + 3 * NX + i, ap, mask=valid)
        tl.store(fs + 6 * NX + i, inv_t, mask=valid)
        tl.store(fs + 7 * NX + i, ap_t, mask=valid)

@triton.jit
def row_index(r, NX, DOWN: tl.constexpr):
    if DOWN:
        return r
    else:
        return NX - 1 - r

@triton.jit
def backward_loads(scr, fac_b, fac_e, band_e, chi_ptr, r, NX, zl, j, n, back, elim,
                   BD: tl.constexpr, DOWN: tl.constexpr):
    """Row r of a backward pass: the elimination value of level n + 1 and its back
    substitution factor, the band, inverse pivot and source [j = n] χ_i of level n (the
    factors are uniform loads of a clamped row; rows past the grid are never stored)."""
    i = row_index(r, NX, DOWN)
    inside = (zl + i >= 0) & (zl + i < NX)
    ic = tl.minimum(tl.maximum(i, 0), NX - 1)
    y_old = tl.load(scr + ic * BD, mask=inside & back, other=0.0)
    if DOWN:   # level n + 1 was eliminated bottom to top (UL), level n goes top to bottom
        f = tl.load(fac_b + 3 * NX + ic)
        band = tl.load(band_e + ic)
        inv = tl.load(fac_e + ic)
    else:
        f = tl.load(fac_b + NX + ic)
        band = tl.load(band_e + 2 * NX + ic)
        inv = tl.load(fac_e + 2 * NX + ic)
    chi = tl.where(j == n, tl.load(chi_ptr + ic), 0.0)
    return ic, inside, y_old, f, band, inv, chi

@triton.jit
def backward_step(hist_b, scr, i, inside, y_old, f, band, inv, chi, x, y, inv_dt, back, elim,
                  HS, BD: tl.constexpr):
    """Back substitution of level n + 1 (δu^{n+1}_i, into the history) and elimination of
    level n with the right-hand side δu^{n+1}_i/Δt − [j = n] χ_i."""
    x = y_old - f * x
    tl.store(hist_b + i * HS, x, mask=inside & back)
    y = (x * inv_dt - chi - band * y) * inv
    tl.store(scr + i * BD, y, mask=inside & elim)
    return x, y

@triton.jit
def backward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, s0, n, k, NX, NT, HS, zl, j,
                  inv_dt, BD: tl.constexpr, DOWN: tl.constexpr):
    """One pass over the rows: back substitution of level n + 1 (pass k ≥ 1) fused with the
    elimination of level n (n ≥ 0), in the direction of both."""
    back = (zl + k) >= 1
    elim = (zl + n) >= 0
    fac_b = fac_ptr + (s0 + tl.minimum(n + 1, NT - 1)).to(tl.int64) * 8 * NX
    fac_e = fac_ptr + (s0 + tl.maximum(n, 0)).to(tl.int64) * 8 * NX
    band_e = band_ptr + (s0 + tl.maximum(n, 0)).to(tl.int64) * 4 * NX
    hist_b = hist + (n + 1) * NX * HS
    x = tl.zeros([BD], tl.float32).to(hist.dtype.element_ty)
    y = tl.zeros([BD], tl.float32).to(hist.dtype.element_ty)
    for r0 in range(0, NX, 4):
        i0, o0, y0, f0, b0, v0, c0 = backward_loads(scr, fac_b, fac_e, band_e, chi_ptr, r0,
                                                    NX, zl, j, n, back, elim, BD, DOWN)
        i1, o1, y1, f1, b1, v1, c1 = backward_loads(scr, fac_b, fac_e, band_e, chi_ptr,
                                                    r0 + 1, NX, zl, j, n, back, elim, BD,
                                                    DOWN)
        i2, o2, y2, f2, b2, v2, c2 = backward_loads(scr, fac_b, fac_e, band_e, chi_ptr,
                                                    r0 + 2, NX, zl, j, n, back, elim, BD,
                                                    DOWN)
        i3, o3, y3, f3, b3, v3, c3 = backward_loads(scr, fac_b, fac_e, band_e, chi_ptr,
                                                    r0 + 3, NX, zl, j, n, back, elim, BD,
                                                    DOWN)
        x, y = backward_step(hist_b, scr, i0, o0, y0, f0, b0, v0, c0, x, y, inv_dt, back,
                             elim, HS, BD)
        x, y = backward_step(hist_b, scr, i1, o1, y1, f1, b1, v1, c1, x, y, inv_dt, back,
                             elim, HS, BD)
        x, y = backward_step(hist_b, scr, i2, o2, y2, f2, b2, v2, c2, x, y, inv_dt, back,
                             elim, HS, BD)
        x, y = backward_step(hist_b, scr, i3, o3, y3, f3, b3, v3, c3, x, y, inv_dt, back,
                             elim, HS, BD)

@triton.jit
def forward_loads(scr, hist_e, fac_b, fac_e, band_e, chi_ptr, r, NX, HS, zl, back, elim,
                  take, BD: tl.constexpr, DOWN: tl.constexpr):
    """Row r of a forward pass: the elimination value of level k − 1 and its back
    substitution factor of J(u^{k−1})ᵀ; the band and inverse pivot of J(u^k)ᵀ, the transport
    weights c_{i−1}, c_i and δu^k at rows i − 1, i, i + 1; χ_i (0 past the grid)."""
    i = row_index(r, NX, DOWN)
    inside = (zl + i >= 0) & (zl + i < NX)
    ic = tl.minimum(tl.maximum(i, 0), NX - 1)
    y_old = tl.load(scr + ic * BD, mask=inside & back, other=0.0)
    left = inside & (zl + i >= 1)
    right = inside & (zl + i + 1 < NX)
    if DOWN:   # level k − 1 was eliminated bottom to top (UL), level k goes top to bottom
        f = tl.load(fac_b + 7 * NX + ic)
        band = tl.load(band_e + 2 * NX + tl.maximum(ic - 1, 0))
        inv = tl.load(fac_e + 4 * NX + ic)
    else:
        f = tl.load(fac_b + 5 * NX + ic)
        band = tl.load(band_e + tl.minimum(ic + 1, NX - 1))
        inv = tl.load(fac_e + 6 * NX + ic)
    c_l = tl.where(left, tl.load(band_e + 3 * NX + tl.maximum(ic - 1, 0)), 0.0)
    c_r = tl.load(band_e + 3 * NX + ic)   # 0 on the last row: there is no edge
    d_l = tl.load(hist_e + (ic - 1) * HS, mask=left & take, other=0.0)
    d_c = tl.load(hist_e + ic * HS, mask=inside & take, other=0.0)
    d_r = tl.load(hist_e + (ic + 1) * HS, mask=right & take, other=0.0)
    chi = tl.where(inside, tl.load(chi_ptr + ic), 0.0)
    return (ic, inside, y_old, f, band, inv, c_l, c_r, d_l, d_c, d_r, chi)

@triton.jit
def forward_step(scr, row, x, y, z, inv_dt, elim, BD: tl.constexpr):
    """Back substitution of level k − 1 (δμ^k_i, added to χ·δμ^k) and elimination of level k
    with the right-hand side δμ^k_i/Δt − (K_k δu^k)_i."""
    i, inside, y_old, f, band, inv, c_l, c_r, d_l, d_c, d_r, chi = row
    x = y_old - f * x
    z += chi * x
    rhs = x * inv_dt - c_l * (d_c - d_l) + c_r * (d_r - d_c)
    y = (rhs - band * y) * inv
    tl.store(scr + i * BD, y, mask=inside & elim)
    return x, y, z

@triton.jit
def forward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, D_b, s0, k, jmax, NX, NT, HS, zl,
                 jv, inv_dt, BD: tl.constexpr, DOWN: tl.constexpr):
    """One pass over the rows: back substitution of level k − 1 (pass k ≥ 1, giving
    D[k − 1, j] = χ·δμ^k) fused with the elimination of level k (k < nt)."""
    back = (zl + k) >= 1
    elim = (zl + k) < NT
    take = elim & ((zl + k) <= jmax)   # δu^k vanishes in the block for k > jmax
    fac_b = fac_ptr + (s0 + tl.maximum(k - 1, 0)).to(tl.int64) * 8 * NX
    fac_e = fac_ptr + (s0 + tl.minimum(k, NT - 1)).to(tl.int64) * 8 * NX
    band_e = band_ptr + (s0 + tl.minimum(k, NT - 1)).to(tl.int64) * 4 * NX
    hist_e = hist + k * NX * HS
    x = tl.zeros([BD], tl.float32).to(hist.dtype.element_ty)
    y = tl.zeros([BD], tl.float32).to(hist.dtype.element_ty)
    z = tl.zeros([BD], tl.float32).to(hist.dtype.element_ty)
    for r0 in range(0, NX, 4):
        w0 = forward_loads(scr, hist_e, fac_b, fac_e, band_e, chi_ptr, r0, NX, HS, zl, back,
                           elim, take, BD, DOWN)
        w1 = forward_loads(scr, hist_e, fac_b, fac_e, band_e, chi_ptr, r0 + 1, NX, HS, zl,
                           back, elim, take, BD, DOWN)
        w2 = forward_loads(scr, hist_e, fac_b, fac_e, band_e, chi_ptr, r0 + 2, NX, HS, zl,
                           back, elim, take, BD, DOWN)
        w3 = forward_loads(scr, hist_e, fac_b, fac_e, band_e, chi_ptr, r0 + 3, NX, HS, zl,
                           back, elim, take, BD, DOWN)
        x, y, z = forward_step(scr, w0, x, y, z, inv_dt, elim, BD)
        x, y, z = forward_step(scr, w1, x, y, z, inv_dt, elim, BD)
        x, y, z = forward_step(scr, w2, x, y, z, inv_dt, elim, BD)
        x, y, z = forward_step(scr, w3, x, y, z, inv_dt, elim, BD)
    tl.store(D_b + (k - 1) * NT, z, mask=jv & back)

@triton.jit(do_not_specialize=["NX", "NT", "NBLK", "WORK"])
def tangent_sweep_kernel(band_ptr, fac_ptr, chi_ptr, hist_ptr, scratch_ptr, D_ptr, params_ptr,
                         NX, NT, HS, NBLK, WORK, BD: tl.constexpr):
    """D[b, n, j] = χ·δμ^{n+1}_j for the work items w = (problem b, direction block) of this
    program (w = pid, pid + programs, ...): the backward sweep J_n δu^n = δu^{n+1}/Δt − [j = n] χ
    (levels jmax..0 of the block, δu into the history), then the forward sweep
    J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n (levels 0..nt−1). Each pass over the rows fuses the back
    substitution of one level with the elimination of the next, so the eliminations
    alternate between top-down (LU) and bottom-up (UL) and δu, δμ never go through memory
    twice; the Thomas scratch of a program stays in the cache."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    dt = tl.load(params_ptr)
    inv_dt = 1.0 / dt
    lanes = tl.arange(0, BD)
    scr = scratch_ptr + pid.to(tl.int64) * NX * BD + lanes
    zl = tl.zeros([BD], tl.int32)
    for w in range(pid, WORK, programs):
        b = w // NBLK
        j = (w % NBLK) * BD + lanes
        jv = j < NT
        jmax = tl.minimum((w % NBLK) * BD + BD - 1, NT - 1)
        hist = hist_ptr + b.to(tl.int64) * NT * NX * HS + j
        s0 = b * NT
        for k in range(0, jmax + 2):
            n = jmax - k
            if k % 2 == 0:
                backward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, s0, n, k, NX, NT, HS, zl,
                              j, inv_dt, BD, True)
            else:
                backward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, s0, n, k, NX, NT, HS, zl,
                              j, inv_dt, BD, False)
        D_b = D_ptr + b.to(tl.int64) * NT * NT + j
        for k in range(0, NT + 1):
            if k % 2 == 0:
                forward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, D_b, s0, k, jmax, NX, NT,
                             HS, zl, jv, inv_dt, BD, True)
            else:
                forward_pass(hist, scr, fac_ptr, band_ptr, chi_ptr, D_b, s0, k, jmax, NX, NT,
                             HS, zl, jv, inv_dt, BD, False)
