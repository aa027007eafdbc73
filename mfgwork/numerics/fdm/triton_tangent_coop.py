"""Cooperative tangent linear sweeps (layout "program" of :mod:`.triton_tangent`): a template,
joined with the model's generated functions and :mod:`.triton_kernels` into one module per model
structure (see there).

A program owns one problem and a block of DIRS directions; its tile is [DIRS, NCH]: the x
points of a level are cut into NCH = 2^LOG_C chunks of P consecutive rows, a lane (axis 1) per
chunk, and a chunk's P rows are P tensors of the tile (a tuple, in registers). Both time loops
run inside the kernel, and every level's tridiagonal solve A x = f (all DIRS right-hand sides at
once) goes in three stages:

1. in each chunk (rows 0..P−1, serial in registers), rows 1..P−2 are written in terms of the
   chunk's ends, x_p = d_p − a_p x_0 − c_p x_{P−1}, and the end rows couple only ends:
   α x_{−1} + x_0 + β x_{P−1} = δ (x_{−1} the previous chunk's last row) and
   γ x_0 + x_{P−1} + ε x_P = ζ (x_P the next chunk's first row);
2. eliminating the first rows leaves one tridiagonal system over the chunks in their last
   rows y_k (A_k y_{k−1} + M_k y_k + C_k y_{k+1} = R_k), solved by parallel cyclic reduction
   (PCR) across the lanes: rows scaled to a unit diagonal, the step of stride s eliminates
   y_{k∓s} with rows k ∓ s, r = 1/(1 − a_k c_{k−s} − c_k a_{k+s}), a_k ← −a_k a_{k−s} r,
   c_k ← −c_k c_{k+s} r, d_k ← (d_k − a_k d_{k−s} − c_k d_{k+s}) r, s = 1, 2, …, NCH/2;
3. x_0 = δ − α y_{k−1} − β y_k, then the interior rows.

Neighbour chunks are read by ``tl.gather`` along axis 1, which Triton lowers to one warp
shuffle per element when the axis spans at most one warp (NCH ≤ 32). Everything that depends
on the matrix alone (pivots, the multipliers of the three stages, PCR's a and c) is computed
on [1, NCH] tensors once per level and broadcast over the directions; only the right-hand
sides are [DIRS, NCH]. Rows past the grid are diagonal with a zero right-hand side, the first
row's lower and the last row's upper band are 0, so no chunk couples to the padding.

Every update of a right-hand side takes the pivot's reciprocal off its dependency chain,
d_p = f_p r_p − (lo_p r_p) d_{p−1} (one fused multiply-add on the chain of a row; so for the
end rows and each PCR step): measured on an H100 at 201², 256 members, float64, the kernel
went 14.5 → 14.1 ms.

The backward sweep runs J_n δu^n = δu^{n+1}/Δt − [j = n] χ for n = jmax, …, 0 (jmax the
block's last direction: δu^n vanishes for n > j), δu^n going to a history [level, direction,
p, chunk] of the problem (each store one row of lanes); the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n reads it back for n ≤ jmax (K_n δu needs δu at i ± 1:
the chunk's own rows, and the neighbour chunks' end rows by gather) and stores
D[n, j] = χ·δμ^{n+1}. δμ and δu^{n+1} stay in registers from level to level. The planes come from
:func:`planes_kernel` (one launch before, reading u^n and μ^{n+1} once).
"""

# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import triton
import triton.language as tl


@triton.jit
def shifted(x, lane, shift, NCH: tl.constexpr):
    """x at chunk lane + shift along axis 1 (clamped to the chunks)."""
    at = tl.minimum(tl.maximum(lane + shift, 0), NCH - 1)
    return tl.gather(x, tl.broadcast_to(at, x.shape), 1)


@triton.jit
def solve(lo, dg, up, f, lane, P: tl.constexpr, LOG_C: tl.constexpr):
    """x (P tensors [DIRS, NCH]) with lo_i x_{i−1} + dg_i x_i + up_i x_{i+1} = f_i, the bands
    P tensors [1, NCH] (rows p of each chunk), by the three stages of the module docstring."""
    NCH: tl.constexpr = 1 << LOG_C
    # 1. downwards: rows p ≥ 1 as a_p x_0 + x_p + c_p x_{p+1} = d_p (row 0 keeps x_{−1})
    r = 1.0 / dg[0]
    a = (lo[0] * r,)
    c = (up[0] * r,)
    d = (f[0] * r,)
    r = 1.0 / dg[1]
    a = a + (lo[1] * r,)
    c = c + (up[1] * r,)
    d = d + (f[1] * r,)
    for p in tl.static_range(2, P):
        r = 1.0 / (dg[p] - lo[p] * c[p - 1])
        a = a + (-lo[p] * a[p - 1] * r,)
        c = c + (up[p] * r,)
        d = d + (f[p] * r - (lo[p] * r) * d[p - 1],)
    # upwards: rows P−2..1 as x_p = d_p − a_p x_0 − c_p x_{P−1} (built from the bottom)
    ai = (a[P - 2],)
    ci = (c[P - 2],)
    di = (d[P - 2],)
    for q in tl.static_range(P - 3):
        ai = (a[P - 3 - q] - c[P - 3 - q] * ai[0],) + ai
        di = (d[P - 3 - q] - c[P - 3 - q] * di[0],) + di
        ci = (-c[P - 3 - q] * ci[0],) + ci
    # the end rows: α y_{k−1} + x_0 + β y_k = δ and γ x_0 + y_k + ε x_P = ζ (y = x_{P−1})
    r = 1.0 / (1.0 - c[0] * ai[0])
    alpha = a[0] * r
    beta = -c[0] * ci[0] * r
    delta = d[0] * r - (c[0] * r) * di[0]
    gamma = a[P - 1]
    eps = c[P - 1]
    # 2. the first rows eliminated: A y_{k−1} + M y_k + C y_{k+1} = R, scaled by 1/M, by PCR
    alpha_r = shifted(alpha, lane, 1, NCH)
    r = 1.0 / (1.0 - gamma * beta - eps * alpha_r)
    ak = -gamma * alpha * r
    ck = -eps * shifted(beta, lane, 1, NCH) * r
    y = d[P - 1] * r - (gamma * r) * delta - (eps * r) * shifted(delta, lane, 1, NCH)
    for k in tl.static_range(LOG_C):
        a_l = shifted(ak, lane, -(1 << k), NCH)
        a_r = shifted(ak, lane, 1 << k, NCH)
        c_l = shifted(ck, lane, -(1 << k), NCH)
        c_r = shifted(ck, lane, 1 << k, NCH)
        r = 1.0 / (1.0 - ak * c_l - ck * a_r)
        y = y * r - (ak * r) * shifted(y, lane, -(1 << k), NCH) \
            - (ck * r) * shifted(y, lane, 1 << k, NCH)
        ak = -ak * a_l * r
        ck = -ck * c_r * r
    # 3. the first rows, then the interior
    x0 = delta - alpha * shifted(y, lane, -1, NCH) - beta * y
    x = (x0,)
    for p in tl.static_range(P - 2):
        x = x + (di[p] - ai[p] * x0 - ci[p] * y,)
    return x + (y,)

@triton.jit
def store_rows(ptr, x, P: tl.constexpr, NCH: tl.constexpr):
    """The P rows of x at ptr + p·NCH (ptr [DIRS, NCH]: a history row of each direction)."""
    for p in tl.static_range(P):
        tl.store(ptr + p * NCH, x[p])

@triton.jit
def load_rows(ptr, P: tl.constexpr, NCH: tl.constexpr):
    """The P rows of each chunk of a chunk-major vector at ptr (+ lanes), a tuple."""
    out = ()
    for p in tl.static_range(P):
        out = out + (tl.load(ptr + p * NCH),)
    return out

@triton.jit
def lane_totals(z, lane, LOG_D: tl.constexpr, LOG_C: tl.constexpr):
    """The sums over the lanes of the 2^LOG_D ≤ 2^LOG_C rows of z, lane l holding that of row
    l >> (LOG_C − LOG_D): each exchange halves the rows a lane holds (it keeps one half and
    sends the other to the lane s apart, s = 2^LOG_C/2, /4, …), then a butterfly over the
    remaining lanes: 2^LOG_D − 1 + LOG_C − LOG_D shuffles instead of LOG_C 2^LOG_D."""
    NCH: tl.constexpr = 1 << LOG_C
    for t in tl.static_range(LOG_D):
        top, bottom = tl.split(tl.permute(
            tl.reshape(z, [2, (1 << LOG_D) >> (t + 1), NCH]), (1, 2, 0)))
        upper = (lane & (NCH >> (t + 1))) != 0
        z = tl.where(upper, bottom, top) + tl.gather(
            tl.where(upper, top, bottom),
            tl.broadcast_to(lane ^ (NCH >> (t + 1)), top.shape), 1)
    for t in tl.static_range(LOG_D, LOG_C):
        z += tl.gather(z, lane ^ (NCH >> (t + 1)), 1)
    return z

@triton.jit
def forward_level(plane, u_at, m, chi, lane, inv_dt, TRANSPORT: tl.constexpr,
                  P: tl.constexpr, LOG_C: tl.constexpr):
    """δμ^{n+1} from J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n (δu^n at u_at when TRANSPORT, else
    0) and z_n = χ·δμ^{n+1} per direction; (K δu)_i = c_{i−1}(δu_i − δu_{i−1})
    − c_i(δu_{i+1} − δu_i)."""
    NCH: tl.constexpr = 1 << LOG_C
    NXP: tl.constexpr = P * NCH
    lo = load_rows(plane + 3 * NXP, P, NCH)
    dg = load_rows(plane + NXP, P, NCH)
    up = load_rows(plane + 4 * NXP, P, NCH)
    f = ()
    if TRANSPORT:
        w_l = load_rows(plane + 5 * NXP, P, NCH)
        w_r = load_rows(plane + 6 * NXP, P, NCH)
        u = load_rows(u_at, P, NCH)
        u_l = shifted(u[P - 1], lane, -1, NCH)   # the previous chunk's last row
        u_next = shifted(u[0], lane, 1, NCH)     # the next chunk's first row
        for p in tl.static_range(P):
            if p < P - 1:
                u_r = u[p + 1]
            else:
                u_r = u_next
            f = f + (m[p] * inv_dt - w_l[p] * (u[p] - u_l) + w_r[p] * (u_r - u[p]),)
            u_l = u[p]
    else:
        for p in tl.static_range(P):
            f = f + (m[p] * inv_dt,)
    m = solve(lo, dg, up, f, lane, P, LOG_C)
    z = chi[0] * m[0]
    for p in tl.static_range(1, P):
        z += chi[p] * m[p]
    return m, z

@triton.jit
def store_totals(row, z, lane, first, NT, LOG_D: tl.constexpr, LOG_C: tl.constexpr):
    """row[first + d] = Σ over the lanes of z[d] (d < 2^LOG_D, first + d < nt)."""
    if LOG_D <= LOG_C:
        d = lane >> (LOG_C - LOG_D)
        tl.store(row + first + d, lane_totals(z, lane, LOG_D, LOG_C),
                 mask=((lane & ((1 << (LOG_C - LOG_D)) - 1)) == 0) & (first + d < NT))
    else:
        d = first + tl.arange(0, 1 << LOG_D)
        tl.store(row + d, tl.sum(z, axis=1), mask=d < NT)

@triton.jit(do_not_specialize=["NT", "HS", "NBLK"])
def tangent_coop_kernel(plane_ptr, chi_ptr, hist_ptr, D_ptr, params_ptr, NT, HS, NBLK,
                        LOG_D: tl.constexpr, P: tl.constexpr, LOG_C: tl.constexpr):
    """D[b, n, j] = χ·δμ^{n+1}_j for the problem b and the direction block of this program
    (planes [b·nt + n, 7, p, chunk]: lower, diag, upper of J(u^n), lower, upper of J(u^n)ᵀ,
    c_{i−1}/h², c_i/h², from :func:`planes_kernel`; χ [p, chunk]; history of problem b at
    b·HS: block k's levels 0..DIRS·(k+1)−1 [n, direction, p, chunk], block after block)."""
    NCH: tl.constexpr = 1 << LOG_C
    NXP: tl.constexpr = P * NCH
    DIRS: tl.constexpr = 1 << LOG_D
    pid = tl.program_id(0)
    b = pid // NBLK
    block = NBLK - 1 - pid % NBLK   # the longest backward sweeps first
    dt = tl.load(params_ptr)
    inv_dt = 1.0 / dt
    lane = tl.arange(0, NCH)[None, :]
    j = block * DIRS + tl.arange(0, DIRS)[:, None]
    jmax = tl.minimum(block * DIRS + DIRS - 1, NT - 1)
    chi = load_rows(chi_ptr + lane, P, NCH)
    planes = plane_ptr + (b * NT).to(tl.int64) * 7 * NXP + lane
    level = DIRS * NXP
    hist = hist_ptr + b.to(tl.int64) * HS + (block * (block + 1) // 2 * DIRS).to(tl.int64) \
        * level + (j - block * DIRS) * NXP + lane
    zero = tl.zeros([DIRS, NCH], tl.float32).to(hist_ptr.dtype.element_ty)
    zeros = (zero,) * P
    x = zeros
    for k in range(0, jmax + 1):
        n = jmax - k
        plane = planes + n * 7 * NXP
        lo = load_rows(plane, P, NCH)
        dg = load_rows(plane + NXP, P, NCH)
        up = load_rows(plane + 2 * NXP, P, NCH)
        source = tl.where(j == n, 1.0, 0.0)
        f = ()
        for p in tl.static_range(P):
            f = f + (x[p] * inv_dt - source * chi[p],)
        x = solve(lo, dg, up, f, lane, P, LOG_C)
        store_rows(hist + n * level, x, P, NCH)
    m = zeros
    D_b = D_ptr + (b * NT).to(tl.int64) * NT
    for n in range(0, jmax + 1):
        m, z = forward_level(planes + n * 7 * NXP, hist + n * level, m, chi, lane, inv_dt,
                             True, P, LOG_C)
        store_totals(D_b + n * NT, z, lane, block * DIRS, NT, LOG_D, LOG_C)
    for n in range(jmax + 1, NT):
        m, z = forward_level(planes + n * 7 * NXP, hist, m, chi, lane, inv_dt, False, P,
                             LOG_C)
        store_totals(D_b + n * NT, z, lane, block * DIRS, NT, LOG_D, LOG_C)


@triton.jit
def edge_weight(q, mu_up, mu_down, x_up, x_down, m_up, m_down, delta, prm):
    """c_e of the edge with gradient q: μ_{e+1} ∂pp H(x_{e+1}, p̃) if q > 0, μ_e ∂pp H(x_e, p̃)
    if q < 0, else 0, p̃ = sign(q) max(|q|, δ) (the curvature capped near p = 0; δ = 0 where
    it is bounded)."""
    p = tl.where(q < 0, tl.minimum(q, -delta), tl.maximum(q, delta))
    return tl.where(q > 0, mu_up * H_pp(p, x_up, m_up, prm),
                    tl.where(q < 0, mu_down * H_pp(p, x_down, m_down, prm), 0.0))

@triton.jit
def node_row(ptr, i, mask):
    """A row's values at nodes i (0 where masked; nothing loaded where H does not depend on
    m and ``ptr`` is the density)."""
    if DEPENDS_ON_M:
        v = tl.load(ptr + i, mask=mask, other=0.0)
    else:
        v = 0.0
    return v

@triton.jit(do_not_specialize=["NT", "NX"])
def planes_kernel(U_ptr, mu_ptr, nu_ptr, inv_hw_ptr, params_ptr, planes_ptr, x_ptr, m_ptr,
                  prm_ptr, NT, NX, P: tl.constexpr, LOG_C: tl.constexpr, BLOCK: tl.constexpr):
    """The 7 planes of :func:`tangent_coop_kernel` for level n of problem b (program b·nt + n)
    from u = U[b, n] and μ = mu[b, n + 1] (``params`` h, Δt, δ; the density m[b, n] that H
    sees, where it depends on m): with q_i = (u_{i+1} − u_i)/h on the edges and the diffusion
    −ν/(h w_i), J(u^n) has lower_i = −ν/(h w_i) − ∂pH((q_{i−1})_+)/h, upper_i = −ν/(h w_i) +
    ∂pH((q_i)_−)/h (no band across a wall), diag_i = 1/Δt − lower_i − upper_i; the planes are
    lower, diag, upper, upper_{i−1}, lower_{i+1} (the bands of J(u^n)ᵀ), c_{i−1} and c_i of
    :func:`edge_weight` over h² (the ``c / h²`` of :func:`.operators.tangent_weights`), rows
    chunk-major (row k·P + p at p·2^LOG_C + k) and rows past NX diagonal with 0 elsewhere."""
    NCH: tl.constexpr = 1 << LOG_C
    NXP: tl.constexpr = P * NCH
    s = tl.program_id(0)
    b = s // NT
    i = tl.arange(0, BLOCK)
    prm = model_params(prm_ptr)
    h = tl.load(params_ptr)
    dt = tl.load(params_ptr + 1)
    delta = tl.load(params_ptr + 2)
    nu = tl.load(nu_ptr + b)
    u = U_ptr + (s + b).to(tl.int64) * NX            # U[b, n]: row b·(nt + 1) + n
    mu = mu_ptr + (s + b + 1).to(tl.int64) * NX      # mu[b, n + 1]
    dens = m_ptr + s.to(tl.int64) * NX               # m[b, n]: row b·nt + n
    inside = i < NX
    left = (i >= 1) & inside      # edge i − 1 exists
    right = i < NX - 1            # edge i exists
    u_i = tl.load(u + i, mask=inside, other=0.0)
    q_l = tl.where(left, (u_i - tl.load(u + i - 1, mask=left, other=0.0)) / h, 0.0)
    q_r = tl.where(right, (tl.load(u + i + 1, mask=right, other=0.0) - u_i) / h, 0.0)
    x_i = tl.load(x_ptr + i, mask=inside, other=0.0)
    x_l = tl.load(x_ptr + i - 1, mask=left, other=0.0)
    x_r = tl.load(x_ptr + i + 1, mask=right, other=0.0)
    d_i = node_row(dens, i, inside)
    d_l = node_row(dens, i - 1, left)
    d_r = node_row(dens, i + 1, right)
    diffusion = -nu * tl.load(inv_hw_ptr + i, mask=inside, other=0.0)
    lower = tl.where(left, diffusion, 0.0) - H_p(tl.maximum(q_l, 0.0), x_i, d_i, prm) / h
    upper = tl.where(right, diffusion, 0.0) + H_p(tl.minimum(q_r, 0.0), x_i, d_i, prm) / h
    upper_l = (-nu * tl.load(inv_hw_ptr + i - 1, mask=left, other=0.0)
               + H_p(tl.minimum(q_l, 0.0), x_l, d_l, prm) / h)
    lower_r = (-nu * tl.load(inv_hw_ptr + i + 1, mask=right, other=0.0)
               - H_p(tl.maximum(q_r, 0.0), x_r, d_r, prm) / h)
    m_i = tl.load(mu + i, mask=inside, other=0.0)
    m_l = tl.load(mu + i - 1, mask=left, other=0.0)
    m_r = tl.load(mu + i + 1, mask=right, other=0.0)
    hh = h * h
    c_l = edge_weight(q_l, m_i, m_l, x_i, x_l, d_i, d_l, delta, prm) / hh
    c_r = edge_weight(q_r, m_r, m_i, x_r, x_i, d_r, d_i, delta, prm) / hh
    out = planes_ptr + s.to(tl.int64) * 7 * NXP + (i % P) * NCH + i // P
    rows = i < NXP
    tl.store(out, tl.where(left, lower, 0.0), mask=rows)
    tl.store(out + NXP, tl.where(inside, 1.0 / dt - lower - upper, 1.0), mask=rows)
    tl.store(out + 2 * NXP, tl.where(right, upper, 0.0), mask=rows)
    tl.store(out + 3 * NXP, tl.where(left, upper_l, 0.0), mask=rows)
    tl.store(out + 4 * NXP, tl.where(right, lower_r, 0.0), mask=rows)
    tl.store(out + 5 * NXP, tl.where(left, c_l, 0.0), mask=rows)
    tl.store(out + 6 * NXP, tl.where(right, c_r, 0.0), mask=rows)
