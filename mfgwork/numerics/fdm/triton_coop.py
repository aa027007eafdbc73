"""Cooperative Triton kernels of :mod:`.triton_sweeps`: a template, joined with the model's
generated functions and :mod:`.triton_kernels` into one module per model structure (see there).

The same sweeps as :mod:`.triton_kernels` (the same Newton stopping rule per problem), but
a program owns one problem and its lanes span the x points, on arrays [problem, level, x]
(the caller's layout: no transposes, and a level's row is one contiguous load): BLOCK_X =
2^LOG_X ≥ nx lanes, those past the grid masked. Tensors stay one-dimensional: Triton then
gathers through shared memory, while a two-dimensional gather is given a warp-local layout
whose shuffles grow with the square of the rows per thread.

The time loop and the Newton loop of each level run inside the kernel; a level's state,
bands and residual stay in registers, neighbours u_{i±1} come by ``tl.gather`` (clamped at
the walls: there the neighbour is the point itself), and each tridiagonal solve
is parallel cyclic reduction (PCR) over x: rows scaled to a unit diagonal,
a_i x_{i−1} + x_i + c_i x_{i+1} = d_i, the step of stride s eliminates x_{i−s} and x_{i+s}
from row i with rows i ∓ s:

    r = 1 / (1 − a_i c_{i−s} − c_i a_{i+s}),   a_i ← −a_i a_{i−s} r,   c_i ← −c_i c_{i+s} r,
    d_i ← (d_i − a_i d_{i−s} − c_i d_{i+s}) r,

s = 1, 2, …, BLOCK_X/2, after which x_i = d_i. Rows past the grid are diagonal with a
zero right-hand side, and a_0 = c_{nx−1} = 0, so clamped neighbour rows enter with a zero
weight and the grid's system never couples to the padding. Per level, global memory sees only
the running cost (HJB) or the level's u (FP), loaded one level ahead, and the stored solution.
The integer sizes are not specialised: one build of a kernel serves every batch size and
grid of its padded width (a new batch size compiles nothing new).
"""

# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import triton
import triton.language as tl


@triton.jit
def tile(NX, BLOCK_X: tl.constexpr):
    """The program's problem p, its row indices i (the offsets of its rows in a level) and
    the mask of the points on the grid."""
    p = tl.program_id(0)
    ix = tl.arange(0, BLOCK_X)
    return p, ix, ix < NX

@triton.jit
def nan_max2(a, b, a2, b2):
    """Both maxima (NaN wins) of a pair: one reduction for the Newton step and size."""
    return (tl.maximum(a, a2, propagate_nan=tl.PropagateNan.ALL),
            tl.maximum(b, b2, propagate_nan=tl.PropagateNan.ALL))

@triton.jit
def at_sides(x, left, right):
    """x[left], x[right] by one gather of the interleaved indices (left_0, right_0, left_1, …):
    one round trip through shared memory for both."""
    n: tl.constexpr = x.shape[0]
    index = tl.reshape(tl.join(left, right), [2 * n])
    return tl.split(tl.reshape(tl.gather(x, index, 0), [n, 2]))

@triton.jit
def rows_at(a, c, d, left, right):
    """a, c, d at rows left and at rows right by one gather from the interleaved
    (a_0, d_0, c_0, d_0, a_1, …): one round trip through shared memory per PCR step, its
    stores and loads four wide."""
    n: tl.constexpr = a.shape[0]
    src = tl.reshape(tl.join(tl.join(a, c), tl.join(d, d)), [4 * n])
    at = tl.join(left, right) * 4
    at = tl.join(at, at + 2)
    at = tl.reshape(tl.join(at, at + 1), [8 * n])
    ac, dd = tl.split(tl.reshape(tl.gather(src, at, 0), [n, 2, 2, 2]))
    a_lr, c_lr = tl.split(ac)
    d_lr, _ = tl.split(dd)
    a_l, a_r = tl.split(a_lr)
    c_l, c_r = tl.split(c_lr)
    d_l, d_r = tl.split(d_lr)
    return a_l, a_r, c_l, c_r, d_l, d_r

@triton.jit
def upwind(u, ix, inv_h, NX):
    """One-sided gradients q_{i−1} = (u_i − u_{i−1})/h, q_i = (u_{i+1} − u_i)/h (0 at the
    walls)."""
    u_l, u_r = at_sides(u, tl.maximum(ix - 1, 0), tl.minimum(ix + 1, NX - 1))
    return (u - u_l) * inv_h, (u_r - u) * inv_h

@triton.jit
def hjb_bands(ql, qr, ix, nu, ihw, inv_h, NX, x, m, prm):
    """The bands lower, upper of row i of the HJB Jacobian J(u) (0 past the walls) and the
    Engquist–Osher Ĥ_i = H((q_{i−1})_+) + H((q_i)_−) − H(0) at (x_i, m_i)."""
    h_l, d_l = H_and_p(tl.maximum(ql, 0.0), x, m, prm)
    h_r, d_r = H_and_p(tl.minimum(qr, 0.0), x, m, prm)
    lo = tl.where((ix > 0) & (ix < NX), -nu * ihw - d_l * inv_h, 0.0)
    up = tl.where(ix < NX - 1, -nu * ihw + d_r * inv_h, 0.0)
    return lo, up, h_l + h_r - H_zero(x, m, prm)

@triton.jit
def level_density(m_ptr, ix, on):
    """The density row that H sees (0 where H does not depend on m: nothing is loaded)."""
    if DEPENDS_ON_M:
        m = tl.load(m_ptr + ix, mask=on, other=0.0)
    else:
        m = 0.0
    return m

@triton.jit
def pcr(lo, diag, up, rhs, ix, LOG_X: tl.constexpr):
    """Solve the tridiagonal systems (lo, diag, up) x = rhs along axis 0 by PCR."""
    r = 1.0 / diag
    a = lo * r
    c = up * r
    d = rhs * r
    for k in tl.static_range(LOG_X):
        a_l, a_r, c_l, c_r, d_l, d_r = rows_at(
            a, c, d, tl.maximum(ix - (1 << k), 0), tl.minimum(ix + (1 << k), (1 << LOG_X) - 1))
        r = 1.0 / (1.0 - a * c_l - c * a_r)
        d = (d - a * d_l - c * d_r) * r
        a = -a * a_l * r
        c = -c * c_r * r
    return d

@triton.jit(do_not_specialize=["B", "NX", "NT", "max_newton"])
def hjb_coop_kernel(U_ptr, F_ptr, G_ptr, nu_ptr, inv_hw_ptr, inv_w_ptr, params_ptr,
                    status_ptr, x_ptr, m_ptr, prm_ptr, B, NX, NT, max_newton,
                    USE_GUESS: tl.constexpr, LOG_X: tl.constexpr):
    """Backward sweep: at level n = nt−1, …, 0 Newton on the residual
    R(u) = (u − u^{n+1})/Δt − ν (D²u) + Ĥ(u) − f^n, J(u) du = R(u), u ← u − du (Ĥ with the
    density row n of m_ptr, laid out as F, where H depends on m),
    from u^{n+1} or from the guess shifted by the change found at level n + 1,
    g^n + (u^{n+1} − g^{n+1}), until u is within tol (1 + max|u|) of the root per problem
    (:func:`newton_done`)."""
    p, ix, on = tile(NX, 1 << LOG_X)
    U_ptr += p.to(tl.int64) * (NT + 1) * NX   # this problem's levels [level, x]
    G_ptr += p.to(tl.int64) * (NT + 1) * NX
    F_ptr += p.to(tl.int64) * NT * NX
    m_ptr += p.to(tl.int64) * NT * NX
    prm = model_params(prm_ptr)
    x = tl.load(x_ptr + tl.minimum(ix, NX - 1))
    h = tl.load(params_ptr)
    dt = tl.load(params_ptr + 1)
    tol = tl.load(params_ptr + 2)
    inv_h = 1.0 / h
    inv_dt = 1.0 / dt
    nu = tl.load(nu_ptr + p)
    ihw = tl.load(inv_hw_ptr + ix, mask=on, other=0.0)
    iw = tl.load(inv_w_ptr + ix, mask=on, other=0.0)
    row = NX
    bad = -1
    iterations = 0
    u = tl.load(U_ptr + NT * row + ix, mask=on, other=0.0)
    f = tl.load(F_ptr + (NT - 1) * row + ix, mask=on, other=0.0)
    if USE_GUESS:
        g = tl.load(G_ptr + NT * row + ix, mask=on, other=0.0)
    for k in range(NT):
        n = NT - 1 - k
        f_next = tl.load(F_ptr + tl.maximum(n - 1, 0) * row + ix, mask=on, other=0.0)
        known = u   # level n + 1
        m = level_density(m_ptr + n * row, ix, on)
        if USE_GUESS:   # the guess shifted by the change found at level n + 1
            g_next = g
            g = tl.load(G_ptr + n * row + ix, mask=on, other=0.0)
            u = g + (known - g_next)
        it = 0
        converged = False
        before = tol * 0.0   # the last max|du| (0: none yet)
        while (it < max_newton) & ~converged:
            ql, qr = upwind(u, ix, inv_h, NX)
            lo, up, ham = hjb_bands(ql, qr, ix, nu, ihw, inv_h, NX, x, m, prm)
            res = tl.where(on, (u - known) * inv_dt - nu * iw * (qr - ql) + ham - f, 0.0)
            du = pcr(lo, inv_dt - lo - up, up, res, ix, LOG_X)
            u -= du
            step, size = tl.reduce((tl.abs(du), tl.abs(u)), 0, nan_max2)
            converged = newton_done(step, before, tol * (1.0 + size))  # NaN keeps iterating
            before = step
            it += 1
        iterations += it
        bad = tl.where((bad < 0) & ~converged, n, bad)
        tl.store(U_ptr + n * row + ix, u, mask=on)
        f = f_next
    tl.store(status_ptr + p, bad)
    tl.store(status_ptr + B + p, iterations)

@triton.jit(do_not_specialize=["NX", "NT"])
def fp_coop_kernel(U_ptr, mu_ptr, nu_ptr, inv_hw_ptr, params_ptr, x_ptr, m_ptr, prm_ptr, NX,
                   NT, LOG_X: tl.constexpr):
    """Forward sweep of cell masses: J(u^n)ᵀ μ^{n+1} = μ^n / Δt, n = 0, …, nt−1 (J(u)ᵀ has
    the lower band upper_{i−1} and the upper band lower_{i+1}; the density row n of m_ptr,
    [problem, level, x], where H depends on m)."""
    p, ix, on = tile(NX, 1 << LOG_X)
    U_ptr += p.to(tl.int64) * (NT + 1) * NX   # this problem's levels [level, x]
    mu_ptr += p.to(tl.int64) * (NT + 1) * NX
    m_ptr += p.to(tl.int64) * NT * NX
    prm = model_params(prm_ptr)
    h = tl.load(params_ptr)
    dt = tl.load(params_ptr + 1)
    inv_h = 1.0 / h
    inv_dt = 1.0 / dt
    nu = tl.load(nu_ptr + p)
    ic = tl.minimum(ix, NX - 1)
    ihw = tl.load(inv_hw_ptr + ic)
    ihw_l = tl.load(inv_hw_ptr + tl.maximum(ic - 1, 0))
    ihw_r = tl.load(inv_hw_ptr + tl.minimum(ic + 1, NX - 1))
    x = tl.load(x_ptr + ic)
    x_l = tl.load(x_ptr + tl.maximum(ic - 1, 0))
    x_r = tl.load(x_ptr + tl.minimum(ic + 1, NX - 1))
    row = NX
    mu = tl.load(mu_ptr + ix, mask=on, other=0.0)
    u = tl.load(U_ptr + ix, mask=on, other=0.0)
    for n in range(NT):
        u_next = tl.load(U_ptr + (n + 1) * row + ix, mask=on, other=0.0)
        m = level_density(m_ptr + n * row, ic, on)
        m_l = level_density(m_ptr + n * row, tl.maximum(ic - 1, 0), on)
        m_r = level_density(m_ptr + n * row, tl.minimum(ic + 1, NX - 1), on)
        ql, qr = upwind(u, ix, inv_h, NX)
        lo, up, _ = hjb_bands(ql, qr, ix, nu, ihw, inv_h, NX, x, m, prm)
        lo_t = tl.where((ix > 0) & (ix < NX),
                        -nu * ihw_l + H_p(tl.minimum(ql, 0.0), x_l, m_l, prm) * inv_h, 0.0)
        up_t = tl.where(ix < NX - 1,
                        -nu * ihw_r - H_p(tl.maximum(qr, 0.0), x_r, m_r, prm) * inv_h, 0.0)
        mu = pcr(lo_t, inv_dt - lo - up, up_t, mu * inv_dt, ix, LOG_X)
        tl.store(mu_ptr + (n + 1) * row + ix, mu, mask=on)
        u = u_next
