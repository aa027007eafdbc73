"""The HJB step's system for H = ½|p|² and Newton's control, as Triton kernels (CUDA; the
interpreter on CPU tensors in the tests), for the Newton updates on the device of
:mod:`.fused_steps`, and the FP step's start and mass balance.

:func:`system_kernel` is :func:`.assembly_kernels.quadratic_system` (the closed form of the
stencil's Ĥ = ½ Σ_axes (q_b)_+² + (q_f)_−², ∂Ĥ/∂q_b = (q_b)_+, ∂Ĥ/∂q_f = (q_f)_−) on
arrays (B, ny, nx), tiles of ``BLOCK`` nodes: from u − δ (``SUBTRACT``: the last Newton
update applied on the fly, the result written to ``u_out``) it writes J's coefficients and
1/diag into the solver's buffers, R as the solver's residual and shadow residual (the solve
starts from x = 0), zeroes the solver's first p and v, and leaves per tile max|R|, max|u|
and Σ R² (Newton's measures).

:func:`control_kernel` (one program) reads those partial sums and makes Newton's decisions
of :meth:`.sweeps.Scheme2D.solve_hjb` for each problem of a batch: the stopping test
Δt·max|R| ≤ tol·(1 + max|u|) (tol the problem's own), the relative tolerance of the next
inexact update (:meth:`.sweeps.Scheme2D._newton_rtol`'s rule for the problem alone: the
bound that keeps the update's linear error below the test, and the Eisenstat–Walker
forcing term against the problem's previous ‖R‖₂, within [``RTOL_MIN``, ``ETA_MAX``]), no
iteration for a problem whose test passes, and the solve's iteration cap (0 once every
test passes: the update is skipped); it adds the last solve's status to the report (the
worst test over its tolerance, updates made, Krylov iterations, worst residual over
tolerance, barriers met). The host's rule for a batch (array code) takes each problem's
tolerance and updates all while one fails: for the 64 rooms of ``benchmarks/room.py`` on
an H100 that made 7046 updates (launches) against 5997 per problem, 8.9 s against 8.3 s.

:func:`fp_start_kernel` starts the FP step's solve Jᵀμ = μⁿ/Δt from a guess (J from the
system kernel), and :func:`balance_sums_kernel` and :func:`balance_scale_kernel` scale its
solution so that the step keeps the mass balance (:meth:`.sweeps.Scheme2D._conserved`):
each replaces about a dozen array operations of a few µs each. With mixed precision
(:mod:`.fused_assembly`) the start also adds a refinement round's correction, and
:func:`refine_kernel` sets the next round's tolerance and keeps the step's report.
"""

import triton
import triton.language as tl

from .triton_krylov import _apply, _tile


@triton.jit
def _u(u, x, u_next, k, mask, act, SUBTRACT: tl.constexpr, START: tl.constexpr):
    """u at the nodes k: u − x with SUBTRACT; with START, Newton's start
    (:meth:`.sweeps.Scheme2D.newton_start`) from the guess's levels n (``u``) and n+1
    (``x``): (u + uⁿ⁺¹ − x)·act + uⁿ⁺¹·(1 − act), ``act`` 1 where the node is active; u
    alone otherwise."""
    out = tl.load(u + k, mask=mask, other=0.0)
    if SUBTRACT:
        out -= tl.load(x + k, mask=mask, other=0.0)
    if START:
        above = tl.load(u_next + k, mask=mask, other=0.0)
        out = (out + above - tl.load(x + k, mask=mask, other=0.0)) * act + above * (1.0 - act)
    return out


#: The bits of :func:`system_kernel`'s ``flags``, in order
#: (:func:`.fused_assembly.geometry_flags`).
FLAG_BITS = ("open W", "open E", "open S", "open N", "to W", "to E", "to S", "to N",
             "active")


@triton.jit
def _bit(flags, n: tl.constexpr, like):
    """Bit n of ``flags`` as 0.0 or 1.0 in the dtype of ``like``."""
    return ((flags >> n) & 1).to(like.dtype)


@triton.jit(do_not_specialize=["NY", "NX"])
def system_kernel(u, x, u_out, u_next, F, flags, inv_wx, inv_wy, inv_hwx, inv_hwy, nu, coefs,
                  low, r, r_hat, p, v, part, consts, skipped, NY, NX, SUBTRACT: tl.constexpr,
                  START: tl.constexpr, JACOBIAN: tl.constexpr, LOW: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Grid (B, tiles): the module docstring's assembly. The geometry is ``flags`` (B, NY,
    NX) int16, bits (:data:`FLAG_BITS`): the node's W, E, S, N edges open, its W, E, S, N
    neighbours active (with it), the node active; ``inv_wx``, ``inv_wy``: 1/w of the
    control volumes, ``inv_hwx``, ``inv_hwy``: 1/(h w) (the diffusion's −ν/(h w) on open
    edges), ``nu`` (B,). ``consts``: 1/hx, 1/hy, 1/Δt (in the arrays' dtype: a float
    argument would be float32); ``coefs`` (6, B, NY, NX): diag, W, E, S, N, 1/diag;
    ``part`` (B, 3, tiles): max|R|, max|u|, Σ R² per tile. Where ``skipped``[0] ≠ 0 (the
    Newton update before was skipped: x = 0, the system and its measures stand) only
    u_out = u is written. ``START``: u is Newton's start from the guess's levels n (``u``)
    and n+1 (``x``) and uⁿ⁺¹ (a neighbour's activity from the node's flags: an inactive
    node's neighbours do not enter its row). ``JACOBIAN``: J alone (the FP step's matrix:
    no R, no solver start, no measures, no u_out); ``LOW``: J also into ``low``, rounded to
    its dtype (the float32 solver's copy of mixed precision)."""
    inv_hx = tl.load(consts)
    inv_hy = tl.load(consts + 1)
    inv_dt = tl.load(consts + 2)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    tiles = tl.num_programs(1)
    size = NY * NX
    base = b.to(tl.int64) * size
    k, whole, mw, me, ms, mn = _tile(tile, NY, NX, BLOCK)
    flag = tl.load(skipped) == 0.0
    go = tl.zeros([BLOCK], dtype=tl.int32) + flag.to(tl.int32) > 0
    inside = whole & go
    mw, me, ms, mn = mw & go, me & go, ms & go, mn & go
    i = k % NX
    j = k // NX
    u, x, above = u + base, x + base, u_next + base
    if START:   # (never after a skipped update)
        f = tl.load(flags + base + k, mask=whole, other=0).to(tl.int32)
    else:
        f = tl.load(flags + base + k, mask=inside, other=0).to(tl.int32)
    c = _u(u, x, above, k, whole, ((f >> 8) & 1).to(u.dtype.element_ty), SUBTRACT, START)
    # u at the neighbours (their activity: bits 4-7 of the node's flags)
    gxb = (c - _u(u, x, above, k - 1, mw, _bit(f, 4, c), SUBTRACT, START)) * _bit(f, 0, c)
    gxf = (_u(u, x, above, k + 1, me, _bit(f, 5, c), SUBTRACT, START) - c) * _bit(f, 1, c)
    gyb = (c - _u(u, x, above, k - NX, ms, _bit(f, 6, c), SUBTRACT, START)) * _bit(f, 2, c)
    gyf = (_u(u, x, above, k + NX, mn, _bit(f, 7, c), SUBTRACT, START) - c) * _bit(f, 3, c)
    gxb, gxf, gyb, gyf = gxb * inv_hx, gxf * inv_hx, gyb * inv_hy, gyf * inv_hy
    ax = tl.maximum(gxb, 0.0)
    ay = tl.maximum(gyb, 0.0)
    bx = tl.minimum(gxf, 0.0)
    by = tl.minimum(gyf, 0.0)
    value = 0.5 * ((ax * ax + ay * ay) + (bx * bx + by * by))
    lap = (gxf - gxb) * tl.load(inv_wx + i, mask=inside, other=0.0) + (gyf - gyb) * tl.load(
        inv_wy + j, mask=inside, other=0.0)
    k = base + k
    act = _bit(f, 8, c)
    nu_b = tl.load(nu + b)
    # the diffusion parts −ν/(h w) on open edges, as the stencil's dW, dE, dS, dN
    dx = -nu_b * tl.load(inv_hwx + i, mask=inside, other=0.0)
    dy = -nu_b * tl.load(inv_hwy + j, mask=inside, other=0.0)
    w = dx * _bit(f, 0, c) - ax * inv_hx
    e = dx * _bit(f, 1, c) + bx * inv_hx
    s = dy * _bit(f, 2, c) - ay * inv_hy
    n = dy * _bit(f, 3, c) + by * inv_hy
    diag = act * (inv_dt - (w + e + s + n)) + (1.0 - act)
    plane = tl.num_programs(0).to(tl.int64) * size
    w, e, s, n = w * _bit(f, 4, c), e * _bit(f, 5, c), s * _bit(f, 6, c), n * _bit(f, 7, c)
    _store_coefficients(coefs, plane, k, inside, diag, w, e, s, n)
    if LOW:
        _store_coefficients(low, plane, k, inside, diag, w, e, s, n)
    if not JACOBIAN:
        R = ((c - tl.load(u_next + k, mask=inside, other=0.0)) * inv_dt
             - nu_b * lap + value - tl.load(F + k, mask=inside, other=0.0)) * act
        tl.store(r + k, R, mask=inside)
        tl.store(r_hat + k, R, mask=inside)
        tl.store(p + k, tl.zeros_like(R), mask=inside)
        tl.store(v + k, tl.zeros_like(R), mask=inside)
        tl.store(u_out + k, c, mask=whole)
        part = part + b * 3 * tiles + tile
        tl.store(part, tl.max(tl.where(inside, tl.abs(R), 0.0), axis=0), mask=flag)
        tl.store(part + tiles, tl.max(tl.where(inside, tl.abs(c), 0.0), axis=0), mask=flag)
        tl.store(part + 2 * tiles, tl.sum(R * R, axis=0), mask=flag)


@triton.jit
def _store_coefficients(coefs, plane, k, mask, diag, w, e, s, n):
    """diag, W, E, S, N and 1/diag at the nodes k of the six planes at ``coefs`` (rounded to
    their dtype)."""
    ty = coefs.dtype.element_ty
    tl.store(coefs + k, diag.to(ty), mask=mask)
    tl.store(coefs + plane + k, w.to(ty), mask=mask)
    tl.store(coefs + 2 * plane + k, e.to(ty), mask=mask)
    tl.store(coefs + 3 * plane + k, s.to(ty), mask=mask)
    tl.store(coefs + 4 * plane + k, n.to(ty), mask=mask)
    tl.store(coefs + 5 * plane + k, (1.0 / diag).to(ty), mask=mask)


@triton.jit(do_not_specialize=["B", "T"])
def control_kernel(part, previous, status, ctl, b_norm, initial, report, consts, B, T,
                   FIRST: tl.constexpr, LAST: tl.constexpr, PB: tl.constexpr,
                   PT: tl.constexpr):
    """One program: the module docstring's decisions for B problems with T tiles each.
    ``consts``: the tightest test tolerance, Δt, the iteration cap, the tolerance bounds
    RTOL_MIN and ETA_MAX, the forcing factor γ, then each problem's tolerance tol_b of the
    test. ``report`` (6,): max_b test_b/tol_b (≤ 1: every test passed), updates made, Krylov
    iterations, worst solve residual over its tolerance, barriers met (1/0), and whether
    the last update was skipped; ``initial`` (B,): the solve's ‖r‖₂² at its start, ‖R‖₂².
    Every load comes before the first store (loads after a store wait for another round
    trip: the kernel is one program's latency)."""
    dt = tl.load(consts + 1)
    cap = tl.load(consts + 2)
    rtol_min = tl.load(consts + 3)
    eta_max = tl.load(consts + 4)
    gamma = tl.load(consts + 5)
    bi = tl.arange(0, PB)
    ti = tl.arange(0, PT)
    valid = bi < B
    tol = tl.load(consts + 6 + bi, mask=valid, other=1.0)
    prev = tl.load(previous + bi, mask=valid, other=0.0)
    cell = (bi[:, None] < B) & (ti[None, :] < T)
    at = part + bi[:, None] * 3 * T + ti[None, :]
    r_max = tl.max(tl.load(at, mask=cell, other=0.0), axis=1)
    u_max = tl.max(tl.load(at + T, mask=cell, other=0.0), axis=1)
    norm = tl.sqrt(tl.sum(tl.load(at + 2 * T, mask=cell, other=0.0), axis=1))
    scale = 1.0 + u_max
    test = (dt * r_max / scale) / tol   # per problem, over its tolerance
    size = tl.max(tl.where(valid, test, 0.0), axis=0)
    done = size <= 1.0
    if FIRST:
        made = size * 0.0
        krylov = size * 0.0
        worst = size * 0.0
        met = size * 0.0 + 1.0
    else:
        skipped = tl.load(report + 5) > 0.0
        made = tl.load(report + 1) + tl.where(skipped, 0.0, 1.0)
        krylov = tl.load(report + 2) + tl.max(tl.load(status + 3 * bi, mask=valid, other=0.0),
                                              axis=0)
        residual = tl.max(tl.load(status + 3 * bi + 1, mask=valid, other=0.0), axis=0)
        worst = tl.maximum(tl.load(report + 3),
                           tl.where(skipped, 0.0, residual / tl.load(ctl)))
        met = tl.minimum(tl.load(report + 4),
                         tl.min(tl.load(status + 3 * bi + 2, mask=valid, other=1.0), axis=0))
    tl.store(report, size)
    tl.store(report + 1, made)
    tl.store(report + 2, krylov)
    tl.store(report + 3, worst)
    tl.store(report + 4, met)
    if not LAST:
        passed = (test <= 1.0) | (bi >= B)   # per problem
        live = norm > 0.0
        # 1/max(‖R‖₂, 1e-300) of the host's rule, without the float32 constant: a zero norm
        # gives an infinite bound, as the host's huge one ends at ETA_MAX
        eta = tl.where(live, tol * scale / (4.0 * dt * tl.where(live, norm, 1.0)),
                       float("inf"))
        ratio = tl.where(prev > 0.0, norm / tl.where(prev > 0.0, prev, 1.0),
                         tl.where(live, float("inf"), 0.0))
        # prev = 0: the problem's first update of the level
        ew = tl.where(prev == 0.0, eta_max, gamma * ratio * ratio)
        rtol = tl.minimum(eta_max, tl.maximum(tl.maximum(rtol_min, eta), ew))
        # the solve stops at ‖r‖₂ ≤ ctl[0]·b_norm: each problem's own tolerance in its
        # b_norm, and an infinite one where its test passed (no iteration: x stays 0)
        tl.store(ctl, 1.0 + 0.0 * size)
        tl.store(ctl + 1, tl.where(done, 0.0, cap))
        tl.store(b_norm + bi, tl.where(passed, float("inf"), rtol * norm), mask=valid)
        tl.store(initial + bi, norm * norm, mask=valid)
        tl.store(previous + bi, tl.where(passed, prev, norm), mask=valid)
        tl.store(report + 5, tl.where(done, 1.0, 0.0))


@triton.jit
def _guess(guess, d, d0, k, mask, ADD: tl.constexpr, STEP: tl.constexpr):
    """guess + d at the nodes k with ADD, guess + (d − d0) with STEP, else the guess."""
    out = tl.load(guess + k, mask=mask, other=0.0)
    if ADD:
        out += tl.load(d + k, mask=mask, other=0.0)
    if STEP:
        out += tl.load(d + k, mask=mask, other=0.0) - tl.load(d0 + k, mask=mask, other=0.0)
    return out


@triton.jit(do_not_specialize=["NY", "NX"])
def fp_start_kernel(mass, guess, d, d0, coefs, x, r, r_hat, p, v, part, loosen, consts, NY,
                    NX, ADD: tl.constexpr, STEP: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (B, tiles): the FP step's solve from x = ``guess`` (+ ``d`` with ``ADD``: a
    refinement round's correction; x then another buffer than the guess, which other
    programs read; + (``d`` − ``d0``) with ``STEP``: the previous sweep's step):
    b = μⁿ/Δt (``mass`` μⁿ, 1/Δt = ``consts``[2]), r = r̂ = b − Jᵀ x (in the order of
    :meth:`.stencil.Stencil.apply_transpose`), the first p and v zero; ``part`` (B, 2,
    tiles): l² Σ b² and Σ r² per tile (l the problem's ``loosen``: the solve's ‖b‖₂ is
    l·‖b‖₂, each problem at its own tolerance). ``coefs`` (6, B, NY, NX) as in
    :func:`system_kernel`; d, r and r̂ may be of another precision than the other arrays
    (r and r̂ stored rounded)."""
    inv_dt = tl.load(consts + 2)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    loose = tl.load(loosen + b)
    size = NY * NX
    base = b.to(tl.int64) * size
    plane = tl.num_programs(0).to(tl.int64) * size
    k, inside, mw, me, ms, mn = _tile(tile, NY, NX, BLOCK)
    g, d, d0 = guess + base, d + base, d0 + base
    at = _guess(g, d, d0, k, inside, ADD, STEP)
    c = coefs + base
    jt = _apply(at, _guess(g, d, d0, k - 1, mw, ADD, STEP),
                _guess(g, d, d0, k + 1, me, ADD, STEP), _guess(g, d, d0, k - NX, ms, ADD, STEP),
                _guess(g, d, d0, k + NX, mn, ADD, STEP), c, c + plane, c + 2 * plane,
                c + 3 * plane, c + 4 * plane, k, inside, mw, me, ms, mn, NX, True)
    rhs = tl.load(mass + base + k, mask=inside, other=0.0) * inv_dt
    res = rhs - jt
    k = base + k
    tl.store(x + k, at, mask=inside)
    tl.store(r + k, res, mask=inside)
    tl.store(r_hat + k, res, mask=inside)
    tl.store(p + k, tl.zeros_like(res), mask=inside)
    tl.store(v + k, tl.zeros_like(res), mask=inside)
    part = part + b * 2 * tl.num_programs(1) + tile
    tl.store(part, tl.sum(rhs * rhs, axis=0) * (loose * loose))
    tl.store(part + tl.num_programs(1), tl.sum(res * res, axis=0))


@triton.jit(do_not_specialize=["B", "T"])
def refine_kernel(part, status, ctl, b_norm, initial, report, B, T, RTOL: tl.constexpr,
                  FIRST: tl.constexpr, LAST: tl.constexpr, PB: tl.constexpr,
                  PT: tl.constexpr):
    """One program, after an FP refinement round's start (:func:`fp_start_kernel`; ``part``
    (B, 2, T): l² Σ b², Σ r² per tile): ``report`` (B, 3) counts the round's solve before it
    (``status`` (B, 3); none with FIRST): iterations summed, barriers met; without LAST
    the next solve's ``b_norm`` = max(l·‖b‖₂, ``RTOL``·‖r‖₂/rtol) (rtol = ``ctl``[0], l·‖b‖₂
    from the start's sums: the solve stops at ‖r‖₂ ≤ max(l·rtol·‖b‖₂, RTOL·‖r‖₂)) and its
    ``initial`` ‖r‖₂²; with LAST the report's residual is ‖r‖₂/(l·‖b‖₂) (≤ rtol: the
    problem's own tolerance met)."""
    bi = tl.arange(0, PB)
    ti = tl.arange(0, PT)
    valid = bi < B
    cell = (bi[:, None] < B) & (ti[None, :] < T)
    at = part + bi[:, None] * 2 * T + ti[None, :]
    bn = tl.sqrt(tl.sum(tl.load(at, mask=cell, other=0.0), axis=1))
    rn = tl.sqrt(tl.sum(tl.load(at + T, mask=cell, other=0.0), axis=1))
    if FIRST:
        iterations = bn * 0.0
        met = bn * 0.0 + 1.0
    else:
        iterations = tl.load(report + 3 * bi, mask=valid, other=0.0) + tl.load(
            status + 3 * bi, mask=valid, other=0.0)
        met = tl.minimum(tl.load(report + 3 * bi + 2, mask=valid, other=1.0),
                         tl.load(status + 3 * bi + 2, mask=valid, other=1.0))
    tl.store(report + 3 * bi, iterations, mask=valid)
    tl.store(report + 3 * bi + 2, met, mask=valid)
    if LAST:
        tl.store(report + 3 * bi + 1, rn / tl.where(bn > 0.0, bn, 1.0), mask=valid)
    else:
        rtol = tl.load(ctl)
        floor = tl.where(rtol > 0.0, rn * (RTOL / tl.where(rtol > 0.0, rtol, 1.0)), 0.0)
        tl.store(b_norm + bi, tl.maximum(bn, floor), mask=valid)
        tl.store(initial + bi, rn * rn, mask=valid)


@triton.jit(do_not_specialize=["NY", "NX"])
def balance_sums_kernel(x, mass, coefs, part, consts, NY, NX, BLOCK: tl.constexpr):
    """Grid (B, tiles): per tile (``part`` (B, 2, tiles)) Σ_k x_k (diag + W + E + S + N)_k
    and Σ b, b = μⁿ/Δt: the sums of :meth:`.sweeps.Scheme2D._conserved` for the FP step's
    solution x (:func:`balance_scale_kernel` scales it)."""
    inv_dt = tl.load(consts + 2)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    size = NY * NX
    base = b.to(tl.int64) * size
    plane = tl.num_programs(0).to(tl.int64) * size
    k = tile * BLOCK + tl.arange(0, BLOCK)
    inside = k < size
    c = coefs + base
    rows = (tl.load(c + k, mask=inside, other=0.0)
            + tl.load(c + plane + k, mask=inside, other=0.0)
            + tl.load(c + 2 * plane + k, mask=inside, other=0.0)
            + tl.load(c + 3 * plane + k, mask=inside, other=0.0)
            + tl.load(c + 4 * plane + k, mask=inside, other=0.0))
    part = part + b * 2 * tl.num_programs(1) + tile
    tl.store(part, tl.sum(tl.load(x + base + k, mask=inside, other=0.0) * rows, axis=0))
    tl.store(part + tl.num_programs(1),
             tl.sum(tl.load(mass + base + k, mask=inside, other=0.0) * inv_dt, axis=0))


@triton.jit(do_not_specialize=["NY", "NX"])
def balance_scale_kernel(x, part, out, NY, NX, BLOCK: tl.constexpr, PT: tl.constexpr):
    """Grid (B, tiles): out = x · Σ b / Σ_k x_k (diag + W + E + S + N)_k (1 where the
    denominator vanishes) from the per-tile sums of :func:`balance_sums_kernel`:
    :meth:`.sweeps.Scheme2D._conserved` of the FP step's solution x."""
    b = tl.program_id(0)
    tiles = tl.num_programs(1)
    t = tl.arange(0, PT)
    at = part + b * 2 * tiles + t
    rate = tl.sum(tl.load(at, mask=t < tiles, other=0.0), axis=0)
    total = tl.sum(tl.load(at + tiles, mask=t < tiles, other=0.0), axis=0)
    ratio = tl.where(rate > 0.0, total / tl.where(rate > 0.0, rate, 1.0), 1.0)
    k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = k < NY * NX
    k = b.to(tl.int64) * NY * NX + k
    tl.store(out + k, tl.load(x + k, mask=inside, other=0.0) * ratio, mask=inside)
