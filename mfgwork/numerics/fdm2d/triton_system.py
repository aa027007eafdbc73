"""Template of the 2-D HJB step's system as a Triton kernel, written once for every isotropic
model: :func:`.triton_assembly.model_system` joins the model's generated ``@triton.jit``
functions in s = |p|² (:func:`.isotropic.radial_structure` printed by
:func:`mfgwork.problems.symbolic.triton_source`: ``model_params``, ``H_and_p`` giving (G, D),
``H_zero``, ``DEPENDS_ON_M``) with this source into one module per model structure, written
into the model cache folder and imported from there. Not imported as it stands (it needs the
model's functions).

:func:`system_kernel` is :func:`.assembly_kernels.compiled_system`'s assembly (the stencil's
Ĥ = G(s), s = Σ_axes (q_b)_+² + (q_f)_−², ∂Ĥ/∂q_b = D (q_b)_+, ∂Ĥ/∂q_f = D (q_f)_−) on
arrays (B, ny, nx), tiles of ``BLOCK`` nodes (the rest of its contract in
:mod:`.triton_assembly`'s docstring).
"""
# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import triton
import triton.language as tl

from mfgwork.numerics.fdm2d.triton_krylov import tile_nodes


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


@triton.jit
def _bit(flags, n: tl.constexpr, like):
    """Bit n of ``flags`` as 0.0 or 1.0 in the dtype of ``like``."""
    return ((flags >> n) & 1).to(like.dtype)


@triton.jit
def _model(ax, ay, bx, by, dens, mask, prm_ptr):
    """(Ĥ, D) at the nodes from a = (q_b)_+, b = (q_f)_− per axis: G(s) and D(s),
    s = Σ (a² + b²), by the model's functions (G(0) and D = 0 where s = 0: the functions are
    not evaluated there); the density at ``dens`` loaded only where H depends on m."""
    prm = model_params(prm_ptr)
    if DEPENDS_ON_M:
        m = tl.load(dens, mask=mask, other=0.0)
    else:
        m = 0.0
    s = (ax * ax + ay * ay) + (bx * bx + by * by)
    live = s > 0.0
    value, slope = H_and_p(tl.where(live, s, 1.0), 0.0, m, prm)
    return tl.where(live, value, H_zero(0.0, m, prm)), tl.where(live, slope, 0.0)


@triton.jit(do_not_specialize=["NY", "NX"])
def system_kernel(u, x, u_out, u_next, F, dens, prm_ptr, flags, inv_wx, inv_wy, inv_hwx,
                  inv_hwy, nu, coefs, low, r, r_hat, p, v, part, consts, skipped, NY, NX,
                  SUBTRACT: tl.constexpr, START: tl.constexpr, JACOBIAN: tl.constexpr,
                  LOW: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (B, tiles): the assembly of :mod:`.triton_assembly`'s docstring. ``dens`` (B, NY,
    NX): the density the step sees (read only where H depends on m), ``prm_ptr``: the model's
    fields. The geometry is ``flags`` (B, NY, NX) int16, bits
    (:data:`.triton_assembly.FLAG_BITS`): the node's W, E, S, N edges open, its W, E, S, N
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
    k, whole, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
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
    value, slope = _model(ax, ay, bx, by, dens + base + k, inside, prm_ptr)
    lap = (gxf - gxb) * tl.load(inv_wx + i, mask=inside, other=0.0) + (gyf - gyb) * tl.load(
        inv_wy + j, mask=inside, other=0.0)
    k = base + k
    act = _bit(f, 8, c)
    nu_b = tl.load(nu + b)
    # the diffusion parts −ν/(h w) on open edges, as the stencil's dW, dE, dS, dN
    dx = -nu_b * tl.load(inv_hwx + i, mask=inside, other=0.0)
    dy = -nu_b * tl.load(inv_hwy + j, mask=inside, other=0.0)
    w = dx * _bit(f, 0, c) - slope * ax * inv_hx
    e = dx * _bit(f, 1, c) + slope * bx * inv_hx
    s = dy * _bit(f, 2, c) - slope * ay * inv_hy
    n = dy * _bit(f, 3, c) + slope * by * inv_hy
    diag = act * (inv_dt - (w + e + s + n)) + (1.0 - act)
    plane = tl.num_programs(0).to(tl.int64) * size
    w, e, s, n = w * _bit(f, 4, c), e * _bit(f, 5, c), s * _bit(f, 6, c), n * _bit(f, 7, c)
    _store_coefficients(coefs, plane, k, inside, diag, w, e, s, n)
    if LOW:
        _store_coefficients(low, plane, k, inside, diag, w, e, s, n)
    if not JACOBIAN:
        _store_residual(r, r_hat, p, v, u_out, part + b * 3 * tiles + tile, tiles, u_next, F,
                        k, inside, whole, flag, c, lap, value, act, nu_b, inv_dt)


@triton.jit
def _store_residual(r, r_hat, p, v, u_out, part, tiles, u_next, F, k, inside, whole, flag, c,
                    lap, value, act, nu_b, inv_dt):
    """R of the step at the nodes k (0 where inactive) into r and r̂, the solver's start
    p = v = 0 and u_out = c; the tile's max|R|, max|u| and Σ R² into ``part`` (where
    ``flag``)."""
    R = ((c - tl.load(u_next + k, mask=inside, other=0.0)) * inv_dt
         - nu_b * lap + value - tl.load(F + k, mask=inside, other=0.0)) * act
    tl.store(r + k, R, mask=inside)
    tl.store(r_hat + k, R, mask=inside)
    tl.store(p + k, tl.zeros_like(R), mask=inside)
    tl.store(v + k, tl.zeros_like(R), mask=inside)
    tl.store(u_out + k, c, mask=whole)
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
