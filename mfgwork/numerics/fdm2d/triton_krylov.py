"""BiCGStab iterations of :mod:`.krylov` as three fused Triton launches (CUDA; the
interpreter on CPU tensors in the tests).

The same recurrence, preconditioner (the inverse diagonal, on the right) and zero-division
rule as :func:`.krylov.iterate`, for the 5-point stencil J (``transpose``: Jᵀ) of
:class:`.stencil.Coefficients` on arrays (B, ny, nx). A launch covers every problem and tile
of ``BLOCK`` nodes; the inner products are sums of per-tile partial sums (one value per
program, summed in a fixed order by the next launch: the result does not depend on
scheduling, so a CUDA graph replays it bitwise). The preconditioned vectors are never
stored: a stencil application recomputes them at the neighbours (a few loads from cache
instead of one more pass over memory):

1. ρ' = (r̂, r) (the partial sums of the previous launch 3), β = (ρ'/ρ)(α/ω),
   p ← r + β (p − ω v), y = D⁻¹ p, v ← J y, partial sums of (r̂, v);
2. α = ρ'/(r̂, v), s = r − α v, t = J D⁻¹ s, partial sums of (t, s) and (t, t);
3. ω = (t, s)/(t, t), x ← x + α y + ω D⁻¹ s, r ← s − ω t, partial sums of (r̂, r) and
   (r, r).

Per iteration that is three launches instead of about thirty array operations
(:class:`.fused_krylov.FusedBiCGStab` drives them).
"""

import triton
import triton.language as tl


@triton.jit
def _total(ptr, n, PB: tl.constexpr):
    """The sum of the n ≤ PB partial sums at ptr."""
    k = tl.arange(0, PB)
    return tl.sum(tl.load(ptr + k, mask=k < n, other=0.0), axis=0)


@triton.jit
def _div(a, b):
    """a / b, and a where b is exactly 0 (as :func:`.krylov._div`)."""
    return a / tl.where(b == 0.0, 1.0, b)


@triton.jit
def _nodes(NY, NX, BLOCK: tl.constexpr):
    """This program's problem offset, node indices and the masks of the node and of its W,
    E, S, N neighbours."""
    b = tl.program_id(0)
    k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    i = k % NX
    j = k // NX
    inside = k < NY * NX
    return (b.to(tl.int64) * NY * NX, k, inside, inside & (i >= 1), inside & (i < NX - 1),
            inside & (j >= 1), inside & (j < NY - 1))


@triton.jit
def _apply(at_c, at_w, at_e, at_s, at_n, diag, W, E, S, N, k, inside, mw, me, ms, mn, NX,
           TRANSPOSE: tl.constexpr):
    """(J v)_k (Jᵀ v with TRANSPOSE) from v at k and at its W, E, S, N neighbours, in the
    order of :meth:`.stencil.Stencil.apply` (``apply_transpose``)."""
    out = tl.load(diag + k, mask=inside, other=1.0) * at_c
    if TRANSPOSE:
        out += tl.load(W + k + 1, mask=me, other=0.0) * at_e
        out += tl.load(E + k - 1, mask=mw, other=0.0) * at_w
        out += tl.load(S + k + NX, mask=mn, other=0.0) * at_n
        out += tl.load(N + k - NX, mask=ms, other=0.0) * at_s
    else:
        out += tl.load(W + k, mask=mw, other=0.0) * at_w
        out += tl.load(E + k, mask=me, other=0.0) * at_e
        out += tl.load(S + k, mask=ms, other=0.0) * at_s
        out += tl.load(N + k, mask=mn, other=0.0) * at_n
    return out


@triton.jit
def _preconditioned_p(r, p, v, inv, k, mask, beta, omega):
    """D⁻¹ (r + β (p − ω v)) at the nodes k."""
    return tl.load(inv + k, mask=mask, other=0.0) * (
        tl.load(r + k, mask=mask, other=0.0)
        + beta * (tl.load(p + k, mask=mask, other=0.0) - omega * tl.load(v + k, mask=mask,
                                                                          other=0.0)))


@triton.jit
def _preconditioned_s(r, v, inv, k, mask, alpha):
    """D⁻¹ (r − α v) at the nodes k."""
    return tl.load(inv + k, mask=mask, other=0.0) * (
        tl.load(r + k, mask=mask, other=0.0) - alpha * tl.load(v + k, mask=mask, other=0.0))


@triton.jit(do_not_specialize=["NY", "NX", "NRR"])
def direction_kernel(r, p, v, inv, diag, W, E, S, N, r_hat, rr, NRR, scalars, p_out, y_out,
                     v_out, rv, new_scalars, NY, NX, TRANSPOSE: tl.constexpr,
                     BLOCK: tl.constexpr, PB: tl.constexpr):
    """Launch 1 (module docstring): ``scalars`` (B, 3) hold ρ, α, ω of the last iteration,
    ``rr`` (B, NRR) the partial sums of (r̂, r); ρ' goes to ``new_scalars``[b, 0]."""
    base, k, inside, mw, me, ms, mn = _nodes(NY, NX, BLOCK)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    rho_new = _total(rr + b * NRR, NRR, PB)
    rho = tl.load(scalars + 3 * b)
    alpha = tl.load(scalars + 3 * b + 1)
    omega = tl.load(scalars + 3 * b + 2)
    beta = _div(rho_new, rho) * _div(alpha, omega)
    r, p, v, inv = r + base, p + base, v + base, inv + base
    p_k = tl.load(r + k, mask=inside, other=0.0) + beta * (
        tl.load(p + k, mask=inside, other=0.0) - omega * tl.load(v + k, mask=inside, other=0.0))
    y_k = tl.load(inv + k, mask=inside, other=0.0) * p_k
    v_k = _apply(y_k, _preconditioned_p(r, p, v, inv, k - 1, mw, beta, omega),
                 _preconditioned_p(r, p, v, inv, k + 1, me, beta, omega),
                 _preconditioned_p(r, p, v, inv, k - NX, ms, beta, omega),
                 _preconditioned_p(r, p, v, inv, k + NX, mn, beta, omega),
                 diag + base, W + base, E + base, S + base, N + base, k, inside, mw, me, ms,
                 mn, NX, TRANSPOSE)
    tl.store(p_out + base + k, p_k, mask=inside)
    tl.store(y_out + base + k, y_k, mask=inside)
    tl.store(v_out + base + k, v_k, mask=inside)
    tl.store(rv + b * tl.num_programs(1) + tile,
             tl.sum(tl.load(r_hat + base + k, mask=inside, other=0.0) * v_k, axis=0))
    if tile == 0:
        tl.store(new_scalars + 3 * b, rho_new)


@triton.jit(do_not_specialize=["NY", "NX"])
def step_kernel(r, v, inv, diag, W, E, S, N, rv, new_scalars, t_out, ts, tt, NY, NX,
                TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr, PB: tl.constexpr):
    """Launch 2: α to ``new_scalars``[b, 1], t = J D⁻¹ s, partial sums of (t, s), (t, t)."""
    base, k, inside, mw, me, ms, mn = _nodes(NY, NX, BLOCK)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    tiles = tl.num_programs(1)
    alpha = _div(tl.load(new_scalars + 3 * b), _total(rv + b * tiles, tiles, PB))
    r, v, inv = r + base, v + base, inv + base
    s_k = tl.load(r + k, mask=inside, other=0.0) - alpha * tl.load(v + k, mask=inside,
                                                                   other=0.0)
    z_k = tl.load(inv + k, mask=inside, other=0.0) * s_k
    t_k = _apply(z_k, _preconditioned_s(r, v, inv, k - 1, mw, alpha),
                 _preconditioned_s(r, v, inv, k + 1, me, alpha),
                 _preconditioned_s(r, v, inv, k - NX, ms, alpha),
                 _preconditioned_s(r, v, inv, k + NX, mn, alpha),
                 diag + base, W + base, E + base, S + base, N + base, k, inside, mw, me, ms,
                 mn, NX, TRANSPOSE)
    tl.store(t_out + base + k, t_k, mask=inside)
    tl.store(ts + b * tiles + tile, tl.sum(t_k * s_k, axis=0))
    tl.store(tt + b * tiles + tile, tl.sum(t_k * t_k, axis=0))
    if tile == 0:
        tl.store(new_scalars + 3 * b + 1, alpha)


@triton.jit(do_not_specialize=["NY", "NX"])
def update_kernel(x, r, v, y, t, inv, r_hat, ts, tt, new_scalars, x_out, r_out, rr, r2, NY,
                  NX, BLOCK: tl.constexpr, PB: tl.constexpr):
    """Launch 3: ω to ``new_scalars``[b, 2], x and r updated, partial sums of (r̂, r) and of
    (r, r) (the convergence test)."""
    base, k, inside, mw, me, ms, mn = _nodes(NY, NX, BLOCK)
    b = tl.program_id(0)
    tile = tl.program_id(1)
    tiles = tl.num_programs(1)
    alpha = tl.load(new_scalars + 3 * b + 1)
    omega = _div(_total(ts + b * tiles, tiles, PB), _total(tt + b * tiles, tiles, PB))
    k = base + k
    s_k = tl.load(r + k, mask=inside, other=0.0) - alpha * tl.load(v + k, mask=inside,
                                                                   other=0.0)
    z_k = tl.load(inv + k, mask=inside, other=0.0) * s_k
    x_k = tl.load(x + k, mask=inside, other=0.0) + alpha * tl.load(y + k, mask=inside,
                                                                   other=0.0) + omega * z_k
    r_k = s_k - omega * tl.load(t + k, mask=inside, other=0.0)
    tl.store(x_out + k, x_k, mask=inside)
    tl.store(r_out + k, r_k, mask=inside)
    tl.store(rr + b * tiles + tile,
             tl.sum(tl.load(r_hat + k, mask=inside, other=0.0) * r_k, axis=0))
    tl.store(r2 + b * tiles + tile, tl.sum(r_k * r_k, axis=0))
    if tile == 0:
        tl.store(new_scalars + 3 * b + 2, omega)
