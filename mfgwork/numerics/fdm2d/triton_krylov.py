"""BiCGStab iterations of :mod:`.krylov` as fused Triton kernels (CUDA; the interpreter on
CPU tensors in the tests).

The same recurrence, preconditioner (the inverse diagonal, on the right) and zero-division
rule as :func:`.krylov.iterate`, for the 5-point stencil J (``transpose``: Jᵀ) of
:class:`.stencil.Coefficients` on arrays (B, ny, nx). The preconditioned vectors are never
stored: a stencil application recomputes them at the neighbours (a few loads from cache
instead of one more pass over memory). An iteration has three phases over tiles of
``BLOCK`` nodes:

1. ρ' = (r̂, r), β = (ρ'/ρ)(α/ω), p ← r + β (p − ω v), v ← J D⁻¹ p, partial sums of (r̂, v);
2. α = ρ'/(r̂, v), s = r − α v, t = J D⁻¹ s, partial sums of (t, s) and (t, t);
3. ω = (t, s)/(t, t), x ← x + α D⁻¹ p + ω D⁻¹ s, r ← s − ω t, partial sums of (r̂, r) and
   (r, r).

With the Neumann preconditioner M⁻¹ = D⁻¹ − D⁻¹ Ō D⁻¹ (Ō the off-diagonal part of J,
:data:`.fused_krylov.NEUMANN`), J M⁻¹ a = a − Ō w with w = D⁻¹ Ō D⁻¹ a: each product is
two phases (w from a's values at the neighbours, recomputed there; then a − Ō w from w at
the neighbours), and x = x₀ + M⁻¹ z where phase 3 updates z ← z + α p + ω s (no D⁻¹), M⁻¹ z
formed once after the last iteration.

Inner products are sums of partial sums (one value per program, summed in a fixed order):
the results do not depend on scheduling, so a CUDA graph replays them bitwise. Two drivers:

- three launches an iteration (:func:`direction_kernel`, :func:`step_kernel`,
  :func:`update_kernel`), one program per tile; the next launch sums the partial sums;
- the whole solve in one launch (:func:`solve_kernel`, the chunks' inverse diagonal or the
  Neumann series): the problems whose start is above their tolerance share the launch's
  programs, P each, which share the problem's tiles and meet at a barrier in global memory
  after each phase (an arrival counter per problem, release/acquire atomics; vectors other
  programs write are read past L1). Every program sums the same partial sums in the same
  order, so all take the same convergence decision, tested after every iteration. The
  barrier needs a launch's programs to run at once (at most one per SM, or the batch's
  layout, :mod:`.fused_krylov`); a wait longer than ``LIMIT`` polls ends the solve with its
  ``ok`` flag down instead of hanging.
"""

from ...core.triton_setup import tl, triton


@triton.jit
def _total(ptr, n, PB: tl.constexpr, CACHE: tl.constexpr):
    """The sum of the n ≤ PB partial sums at ptr."""
    k = tl.arange(0, PB)
    return tl.sum(tl.load(ptr + k, mask=k < n, other=0.0, cache_modifier=CACHE), axis=0)


@triton.jit
def _div(a, b):
    """a / b, and a where b is exactly 0 (as :func:`.krylov._div`)."""
    return a / tl.where(b == 0.0, 1.0, b)


@triton.jit
def _ld(ptr, mask, CACHE: tl.constexpr):
    return tl.load(ptr, mask=mask, other=0.0, cache_modifier=CACHE)


@triton.jit
def tile_nodes(tile, NY, NX, BLOCK: tl.constexpr):
    """The node indices of a tile and the masks of the node and of its W, E, S, N
    neighbours."""
    k = tile * BLOCK + tl.arange(0, BLOCK)
    i = k % NX
    j = k // NX
    inside = k < NY * NX
    return (k, inside, inside & (i >= 1), inside & (i < NX - 1), inside & (j >= 1),
            inside & (j < NY - 1))


@triton.jit
def apply_stencil(at_c, at_w, at_e, at_s, at_n, diag, W, E, S, N, k, inside, mw, me, ms, mn, NX,
           TRANSPOSE: tl.constexpr):
    """(J v)_k (Jᵀ v with TRANSPOSE) from v at k and at its W, E, S, N neighbours, in the
    order of :meth:`.stencil.Stencil.apply` (``apply_transpose``)."""
    return _off(tl.load(diag + k, mask=inside, other=1.0) * at_c, at_w, at_e, at_s, at_n, W,
                E, S, N, k, mw, me, ms, mn, NX, TRANSPOSE)


@triton.jit
def _off(out, at_w, at_e, at_s, at_n, W, E, S, N, k, mw, me, ms, mn, NX,
         TRANSPOSE: tl.constexpr):
    """``out`` plus the off-diagonal part of (J v)_k (of (Jᵀ v)_k with TRANSPOSE) from v at
    the W, E, S, N neighbours of the nodes k."""
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
def _preconditioned_p(r, p, v, inv, k, mask, beta, omega, CACHE: tl.constexpr):
    """D⁻¹ (r + β (p − ω v)) at the nodes k."""
    return tl.load(inv + k, mask=mask, other=0.0) * (
        _ld(r + k, mask, CACHE) + beta * (_ld(p + k, mask, CACHE)
                                          - omega * _ld(v + k, mask, CACHE)))


@triton.jit
def _preconditioned_s(r, v, inv, k, mask, alpha, CACHE: tl.constexpr):
    """D⁻¹ (r − α v) at the nodes k."""
    return tl.load(inv + k, mask=mask, other=0.0) * (
        _ld(r + k, mask, CACHE) - alpha * _ld(v + k, mask, CACHE))


@triton.jit
def _direction_tile(r, p, v, inv, diag, W, E, S, N, r_hat, p_out, v_out, tile, NY, NX, beta,
                    omega, TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr,
                    CACHE: tl.constexpr):
    """Phase 1 on one tile: p and v = J D⁻¹ p written; returns the tile's sum of r̂ v."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    p_k = _ld(r + k, inside, CACHE) + beta * (_ld(p + k, inside, CACHE)
                                              - omega * _ld(v + k, inside, CACHE))
    v_k = apply_stencil(tl.load(inv + k, mask=inside, other=0.0) * p_k,
                 _preconditioned_p(r, p, v, inv, k - 1, mw, beta, omega, CACHE),
                 _preconditioned_p(r, p, v, inv, k + 1, me, beta, omega, CACHE),
                 _preconditioned_p(r, p, v, inv, k - NX, ms, beta, omega, CACHE),
                 _preconditioned_p(r, p, v, inv, k + NX, mn, beta, omega, CACHE),
                 diag, W, E, S, N, k, inside, mw, me, ms, mn, NX, TRANSPOSE)
    tl.store(p_out + k, p_k, mask=inside)
    tl.store(v_out + k, v_k, mask=inside)
    return tl.sum(tl.load(r_hat + k, mask=inside, other=0.0) * v_k, axis=0)


@triton.jit
def _step_tile(r, v, inv, diag, W, E, S, N, t_out, tile, NY, NX, alpha,
               TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """Phase 2 on one tile: t = J D⁻¹ s written; returns the tile's sums of t s and t t."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    s_k = _ld(r + k, inside, CACHE) - alpha * _ld(v + k, inside, CACHE)
    t_k = apply_stencil(tl.load(inv + k, mask=inside, other=0.0) * s_k,
                 _preconditioned_s(r, v, inv, k - 1, mw, alpha, CACHE),
                 _preconditioned_s(r, v, inv, k + 1, me, alpha, CACHE),
                 _preconditioned_s(r, v, inv, k - NX, ms, alpha, CACHE),
                 _preconditioned_s(r, v, inv, k + NX, mn, alpha, CACHE),
                 diag, W, E, S, N, k, inside, mw, me, ms, mn, NX, TRANSPOSE)
    tl.store(t_out + k, t_k, mask=inside)
    return tl.sum(t_k * s_k, axis=0), tl.sum(t_k * t_k, axis=0)


@triton.jit
def _update_tile(x, r, v, p, t, inv, r_hat, x_out, r_out, tile, NY, NX, alpha, omega,
                 BLOCK: tl.constexpr, CACHE: tl.constexpr, JACOBI: tl.constexpr = True):
    """Phase 3 on one tile: x ← x + α D⁻¹ p + ω D⁻¹ s (without JACOBI: the Neumann solve's
    z ← z + α p + ω s, x = x₀ + M⁻¹ z) and r ← s − ω t written; returns the tile's sums of
    r̂ r and r r."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    if JACOBI:
        inv_k = tl.load(inv + k, mask=inside, other=0.0)
    else:
        inv_k = 1.0
    s_k = _ld(r + k, inside, CACHE) - alpha * _ld(v + k, inside, CACHE)
    x_k = (_ld(x + k, inside, CACHE) + alpha * (inv_k * _ld(p + k, inside, CACHE))
           + omega * (inv_k * s_k))
    r_k = s_k - omega * _ld(t + k, inside, CACHE)
    tl.store(x_out + k, x_k, mask=inside)
    tl.store(r_out + k, r_k, mask=inside)
    return tl.sum(tl.load(r_hat + k, mask=inside, other=0.0) * r_k, axis=0), tl.sum(
        r_k * r_k, axis=0)


# -- the one-launch solve's Neumann preconditioner ---------------------------------------

@triton.jit
def _inv_off(inv, y_w, y_e, y_s, y_n, W, E, S, N, k, inside, mw, me, ms, mn, NX,
             TRANSPOSE: tl.constexpr):
    """(D⁻¹ Ō y)_k, Ō the off-diagonal part of J (Jᵀ with TRANSPOSE), from y at the W, E,
    S, N neighbours of the nodes k."""
    return tl.load(inv + k, mask=inside, other=0.0) * _off(
        tl.zeros_like(y_w), y_w, y_e, y_s, y_n, W, E, S, N, k, mw, me, ms, mn, NX, TRANSPOSE)


@triton.jit
def _minus_off(at_k, w, W, E, S, N, k, mw, me, ms, mn, NX, TRANSPOSE: tl.constexpr,
               CACHE: tl.constexpr):
    """at_k − (Ō w)_k: with w = D⁻¹ Ō D⁻¹ a and at_k = a_k, (J M⁻¹ a)_k."""
    return at_k - _off(tl.zeros_like(at_k), _ld(w + k - 1, mw, CACHE), _ld(w + k + 1, me, CACHE),
                       _ld(w + k - NX, ms, CACHE), _ld(w + k + NX, mn, CACHE), W, E, S, N, k,
                       mw, me, ms, mn, NX, TRANSPOSE)


@triton.jit
def _neumann_direction_tile(r, p, v, inv, W, E, S, N, p_out, w_out, tile, NY, NX, beta,
                            omega, TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr,
                            CACHE: tl.constexpr):
    """Phase 1a on one tile: p ← r + β (p − ω v) and w = D⁻¹ Ō D⁻¹ p written."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    p_k = _ld(r + k, inside, CACHE) + beta * (_ld(p + k, inside, CACHE)
                                              - omega * _ld(v + k, inside, CACHE))
    w_k = _inv_off(inv, _preconditioned_p(r, p, v, inv, k - 1, mw, beta, omega, CACHE),
                   _preconditioned_p(r, p, v, inv, k + 1, me, beta, omega, CACHE),
                   _preconditioned_p(r, p, v, inv, k - NX, ms, beta, omega, CACHE),
                   _preconditioned_p(r, p, v, inv, k + NX, mn, beta, omega, CACHE),
                   W, E, S, N, k, inside, mw, me, ms, mn, NX, TRANSPOSE)
    tl.store(p_out + k, p_k, mask=inside)
    tl.store(w_out + k, w_k, mask=inside)


@triton.jit
def _neumann_v_tile(p, w, W, E, S, N, r_hat, v_out, tile, NY, NX, TRANSPOSE: tl.constexpr,
                    BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """Phase 1b on one tile: v = J M⁻¹ p = p − Ō w written; returns the tile's sum of r̂ v."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    v_k = _minus_off(_ld(p + k, inside, CACHE), w, W, E, S, N, k, mw, me, ms, mn, NX,
                     TRANSPOSE, CACHE)
    tl.store(v_out + k, v_k, mask=inside)
    return tl.sum(tl.load(r_hat + k, mask=inside, other=0.0) * v_k, axis=0)


@triton.jit
def _neumann_s_tile(r, v, inv, W, E, S, N, w_out, tile, NY, NX, alpha,
                    TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """Phase 2a on one tile: w = D⁻¹ Ō D⁻¹ s written, s = r − α v."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    w_k = _inv_off(inv, _preconditioned_s(r, v, inv, k - 1, mw, alpha, CACHE),
                   _preconditioned_s(r, v, inv, k + 1, me, alpha, CACHE),
                   _preconditioned_s(r, v, inv, k - NX, ms, alpha, CACHE),
                   _preconditioned_s(r, v, inv, k + NX, mn, alpha, CACHE),
                   W, E, S, N, k, inside, mw, me, ms, mn, NX, TRANSPOSE)
    tl.store(w_out + k, w_k, mask=inside)


@triton.jit
def _neumann_t_tile(r, v, w, W, E, S, N, t_out, tile, NY, NX, alpha, TRANSPOSE: tl.constexpr,
                    BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """Phase 2b on one tile: t = J M⁻¹ s = s − Ō w written; returns the tile's sums of t s
    and t t."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    s_k = _ld(r + k, inside, CACHE) - alpha * _ld(v + k, inside, CACHE)
    t_k = _minus_off(s_k, w, W, E, S, N, k, mw, me, ms, mn, NX, TRANSPOSE, CACHE)
    tl.store(t_out + k, t_k, mask=inside)
    return tl.sum(t_k * s_k, axis=0), tl.sum(t_k * t_k, axis=0)


@triton.jit
def _neumann_finish_tile(x, z, inv, W, E, S, N, tile, NY, NX, TRANSPOSE: tl.constexpr,
                         BLOCK: tl.constexpr, CACHE: tl.constexpr):
    """x ← x + M⁻¹ z = x + D⁻¹ (z − Ō D⁻¹ z) on one tile."""
    k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
    y = _inv_off(inv, tl.load(inv + k - 1, mask=mw, other=0.0) * _ld(z + k - 1, mw, CACHE),
                 tl.load(inv + k + 1, mask=me, other=0.0) * _ld(z + k + 1, me, CACHE),
                 tl.load(inv + k - NX, mask=ms, other=0.0) * _ld(z + k - NX, ms, CACHE),
                 tl.load(inv + k + NX, mask=mn, other=0.0) * _ld(z + k + NX, mn, CACHE),
                 W, E, S, N, k, inside, mw, me, ms, mn, NX, TRANSPOSE)
    x_k = _ld(x + k, inside, CACHE) + tl.load(inv + k, mask=inside, other=0.0) * _ld(
        z + k, inside, CACHE) - y
    tl.store(x + k, x_k, mask=inside)


# -- three launches an iteration ----------------------------------------------------------

@triton.jit
def _program(NY, NX):
    """This program's problem b and tile, the tiles per problem and b's offset: grid (B,
    tiles)."""
    b = tl.program_id(0)
    return b, tl.program_id(1), tl.num_programs(1), b.to(tl.int64) * NY * NX


@triton.jit(do_not_specialize=["NY", "NX", "NRR"])
def direction_kernel(r, p, v, inv, diag, W, E, S, N, r_hat, rr, NRR, scalars, p_out, v_out,
                     rv, new_scalars, NY, NX, TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr,
                     PB: tl.constexpr):
    """Launch 1: ``scalars`` (B, 3) hold ρ, α, ω of the last iteration, ``rr`` (B, NRR) the
    partial sums of (r̂, r); ρ' goes to ``new_scalars``[b, 0]."""
    b, tile, tiles, base = _program(NY, NX)
    rho_new = _total(rr + b * NRR, NRR, PB, "")
    rho = tl.load(scalars + 3 * b)
    alpha = tl.load(scalars + 3 * b + 1)
    omega = tl.load(scalars + 3 * b + 2)
    beta = _div(rho_new, rho) * _div(alpha, omega)
    part = _direction_tile(r + base, p + base, v + base, inv + base, diag + base, W + base,
                           E + base, S + base, N + base, r_hat + base, p_out + base,
                           v_out + base, tile, NY, NX, beta, omega, TRANSPOSE, BLOCK, "")
    tl.store(rv + b * tiles + tile, part)
    if tile == 0:
        tl.store(new_scalars + 3 * b, rho_new)


@triton.jit(do_not_specialize=["NY", "NX"])
def step_kernel(r, v, inv, diag, W, E, S, N, rv, new_scalars, t_out, ts, tt, NY, NX,
                TRANSPOSE: tl.constexpr, BLOCK: tl.constexpr, PB: tl.constexpr):
    """Launch 2: α to ``new_scalars``[b, 1], t = J D⁻¹ s, partial sums of (t, s), (t, t)."""
    b, tile, tiles, base = _program(NY, NX)
    alpha = _div(tl.load(new_scalars + 3 * b), _total(rv + b * tiles, tiles, PB, ""))
    a, c = _step_tile(r + base, v + base, inv + base, diag + base, W + base, E + base,
                      S + base, N + base, t_out + base, tile, NY, NX, alpha, TRANSPOSE,
                      BLOCK, "")
    tl.store(ts + b * tiles + tile, a)
    tl.store(tt + b * tiles + tile, c)
    if tile == 0:
        tl.store(new_scalars + 3 * b + 1, alpha)


@triton.jit(do_not_specialize=["NY", "NX"])
def update_kernel(x, r, v, p, t, inv, r_hat, ts, tt, new_scalars, x_out, r_out, rr, r2, NY,
                  NX, BLOCK: tl.constexpr, PB: tl.constexpr):
    """Launch 3: ω to ``new_scalars``[b, 2], x and r updated, partial sums of (r̂, r) and of
    (r, r) (the convergence test)."""
    b, tile, tiles, base = _program(NY, NX)
    alpha = tl.load(new_scalars + 3 * b + 1)
    omega = _div(_total(ts + b * tiles, tiles, PB, ""), _total(tt + b * tiles, tiles, PB, ""))
    a, c = _update_tile(x + base, r + base, v + base, p + base, t + base, inv + base,
                        r_hat + base, x_out + base, r_out + base, tile, NY, NX, alpha, omega,
                        BLOCK, "")
    tl.store(rr + b * tiles + tile, a)
    tl.store(r2 + b * tiles + tile, c)
    if tile == 0:
        tl.store(new_scalars + 3 * b + 2, omega)


# -- the whole solve in one launch --------------------------------------------------------

@triton.jit
def _sync(counter, target, LIMIT: tl.constexpr):
    """Arrive at ``counter`` and wait until it reaches ``target``: the barrier of one
    problem's programs. False if the wait passed ``LIMIT`` polls."""
    tl.debug_barrier()   # the whole program's stores before the release
    tl.atomic_add(counter, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    polls = 0
    while (seen < target) & (polls < LIMIT):
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
        polls += 1
    tl.debug_barrier()
    return seen >= target


@triton.jit(do_not_specialize=["NY", "NX", "B", "MOST"])
def solve_kernel(x, r, p, v, t, w, z, r_hat, inv, diag, W, E, S, N, b_norm, initial, ctl,
                 part, sync, status, B, MOST, NY, NX, TRANSPOSE: tl.constexpr,
                 NEUMANN: tl.constexpr, SPREAD: tl.constexpr, BLOCK: tl.constexpr,
                 PB: tl.constexpr, PBATCH: tl.constexpr, LIMIT: tl.constexpr):
    """BiCGStab from (x, r = b − J x, r̂ = r, p = v = 0 in the first of the two (2, B, NY,
    NX) buffers p and v) until ‖r‖₂ ≤ rtol ‖b‖₂ (‖b‖₂ = ``b_norm``[b]) or a number of
    iterations (``ctl`` = (rtol, that number), on the device so that a recording of the
    launch serves every tolerance), for the B problems; grid (G,). With SPREAD,
    ``initial`` (B,) (‖r‖₂² at the start, from the start's own sums) decides: the n problems
    it leaves above their tolerance share the G programs, ⌊G/n⌋ each (at most ``MOST``, the
    tiles of a problem), so that a few problems left iterating run on the whole device, and
    the others take no iteration; without, problem b has the programs b·MOST..(b+1)·MOST−1.
    ``part`` (B, 5, MOST): partial sums of (r̂, v), (t, s), (t, t), (r̂, r), (r, r);
    ``sync`` (B,) int32 counters at 0; ``status`` (B, 3): iterations, ‖r‖₂/‖b‖₂ and whether
    every barrier was met."""
    g = tl.program_id(0)
    rtol = tl.load(ctl)
    max_iter = tl.load(ctl + 1).to(tl.int32)
    if not SPREAD:
        b = g // MOST
        _solve(x, r, p, v, t, w, z, r_hat, inv, diag, W, E, S, N, b_norm, part, sync, status,
               b, g - b * MOST, MOST, B, MOST, rtol, max_iter, NY, NX, TRANSPOSE, NEUMANN,
               BLOCK, PB, LIMIT)
    else:
        bi = tl.arange(0, PBATCH)
        valid = bi < B
        b_all = tl.load(b_norm + bi, mask=valid, other=1.0)
        scale_all = tl.where(b_all == 0.0, 1.0, b_all)
        start_all = tl.sqrt(tl.load(initial + bi, mask=valid, other=0.0))
        live = valid & (start_all > rtol * scale_all) & (max_iter > 0)
        n = tl.sum(live.to(tl.int32), axis=0)
        if g == 0:   # the problems that take no iteration
            quiet = valid & ~live
            tl.store(status + 3 * bi, tl.zeros_like(start_all), mask=quiet)
            tl.store(status + 3 * bi + 1, start_all / scale_all, mask=quiet)
            tl.store(status + 3 * bi + 2, tl.zeros_like(start_all) + 1.0, mask=quiet)
        P = tl.minimum(MOST, tl.num_programs(0) // tl.maximum(n, 1))
        slot = g // P
        if slot < n:
            rank = tl.cumsum(live.to(tl.int32), axis=0) - 1
            b = tl.sum(tl.where(live & (rank == slot), bi, 0), axis=0)
            _solve(x, r, p, v, t, w, z, r_hat, inv, diag, W, E, S, N, b_norm, part, sync,
                   status, b, g - slot * P, P, B, MOST, rtol, max_iter, NY, NX, TRANSPOSE,
                   NEUMANN, BLOCK, PB, LIMIT)


@triton.jit
def _solve(x, r, p, v, t, w, z, r_hat, inv, diag, W, E, S, N, b_norm, part, sync, status, b,
           q, P, B, MOST, rtol, max_iter, NY, NX, TRANSPOSE: tl.constexpr,
           NEUMANN: tl.constexpr, BLOCK: tl.constexpr, PB: tl.constexpr,
           LIMIT: tl.constexpr):
    """Problem b's solve by its program q of P (:func:`solve_kernel`)."""
    base = b.to(tl.int64) * NY * NX
    second = B.to(tl.int64) * NY * NX   # offset of the second p, v
    tiles = tl.cdiv(NY * NX, BLOCK)
    x, r, t, r_hat, inv = x + base, r + base, t + base, r_hat + base, inv + base
    w, z = w + base, z + base
    diag, W, E, S, N, p, v = (diag + base, W + base, E + base, S + base, N + base, p + base,
                              v + base)
    part = part + b * 5 * MOST
    counter = sync + b
    bn = tl.load(b_norm + b)
    scale = tl.where(bn == 0.0, 1.0, bn)
    zero = bn * 0.0
    rr, r2 = _first_sums(r, r_hat, z, q, P, tiles, NY, NX, zero, NEUMANN, BLOCK)
    tl.store(part + 3 * P + q, rr)
    tl.store(part + 4 * P + q, r2)
    arrivals = P
    ok = _sync(counter, arrivals, LIMIT)
    rho_new = _total(part + 3 * P, P, PB, ".cg")
    norm = tl.sqrt(_total(part + 4 * P, P, PB, ".cg"))
    rho = zero + 1.0
    alpha = zero + 1.0
    omega = zero + 1.0
    it = 0
    while (it < max_iter) & (norm > rtol * scale) & ok:
        beta = _div(rho_new, rho) * _div(alpha, omega)
        src = (it % 2) * second
        dst = second - src
        rv, arrivals, ok = _direction_pass(r, p + src, v + src, p + dst, v + dst, w, inv, diag,
                                           W, E, S, N, r_hat, q, P, tiles, NY, NX, beta, omega,
                                           counter, arrivals, ok, zero, TRANSPOSE, NEUMANN,
                                           BLOCK, LIMIT)
        tl.store(part + q, rv)
        arrivals += P
        ok = ok & _sync(counter, arrivals, LIMIT)
        alpha = _div(rho_new, _total(part, P, PB, ".cg"))
        ts, tt, arrivals, ok = _step_pass(r, v + dst, w, t, inv, diag, W, E, S, N, q, P, tiles,
                                          NY, NX, alpha, counter, arrivals, ok, zero, TRANSPOSE,
                                          NEUMANN, BLOCK, LIMIT)
        tl.store(part + P + q, ts)
        tl.store(part + 2 * P + q, tt)
        arrivals += P
        ok = ok & _sync(counter, arrivals, LIMIT)
        omega = _div(_total(part + P, P, PB, ".cg"), _total(part + 2 * P, P, PB, ".cg"))
        rr, r2 = _update_pass(x, z, r, v + dst, p + dst, t, inv, r_hat, q, P, tiles, NY, NX,
                              alpha, omega, zero, NEUMANN, BLOCK)
        tl.store(part + 3 * P + q, rr)
        tl.store(part + 4 * P + q, r2)
        arrivals += P
        ok = ok & _sync(counter, arrivals, LIMIT)
        rho = rho_new
        rho_new = _total(part + 3 * P, P, PB, ".cg")
        norm = tl.sqrt(_total(part + 4 * P, P, PB, ".cg"))
        it += 1
    if NEUMANN:   # x from z after the last barrier: z at the neighbours is final
        if it > 0:
            for tile in tl.range(q, tiles, P):
                _neumann_finish_tile(x, z, inv, W, E, S, N, tile, NY, NX, TRANSPOSE, BLOCK,
                                     ".cg")
    if q == 0:
        tl.store(status + 3 * b, it.to(status.dtype.element_ty))
        tl.store(status + 3 * b + 1, norm / scale)
        tl.store(status + 3 * b + 2, ok.to(status.dtype.element_ty))


@triton.jit
def _first_sums(r, r_hat, z, q, P, tiles, NY, NX, zero, NEUMANN: tl.constexpr,
                BLOCK: tl.constexpr):
    """Program q's parts of r̂·r and r·r (and z = 0 with the Neumann preconditioner);
    ``zero``: 0 in the solve's dtype."""
    rr = zero
    r2 = zero
    for tile in tl.range(q, tiles, P):
        k, inside, mw, me, ms, mn = tile_nodes(tile, NY, NX, BLOCK)
        r_k = _ld(r + k, inside, ".cg")
        rr += tl.sum(tl.load(r_hat + k, mask=inside, other=0.0) * r_k, axis=0)
        r2 += tl.sum(r_k * r_k, axis=0)
        if NEUMANN:
            tl.store(z + k, tl.zeros_like(r_k), mask=inside)
    return rr, r2


@triton.jit
def _direction_pass(r, p, v, p_out, v_out, w, inv, diag, W, E, S, N, r_hat, q, P, tiles, NY,
                    NX, beta, omega, counter, arrivals, ok, zero, TRANSPOSE: tl.constexpr,
                    NEUMANN: tl.constexpr, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    """BiCGStab's new direction p and v = A p over program q's tiles, and its part of r̂·v
    (the Neumann preconditioner meets at one barrier more); returns (r̂·v, arrivals, ok)."""
    rv = zero
    if NEUMANN:
        for tile in tl.range(q, tiles, P):
            _neumann_direction_tile(r, p, v, inv, W, E, S, N, p_out, w, tile, NY, NX, beta,
                                    omega, TRANSPOSE, BLOCK, ".cg")
        arrivals += P
        ok = ok & _sync(counter, arrivals, LIMIT)
        for tile in tl.range(q, tiles, P):
            rv += _neumann_v_tile(p_out, w, W, E, S, N, r_hat, v_out, tile, NY, NX,
                                  TRANSPOSE, BLOCK, ".cg")
    else:
        for tile in tl.range(q, tiles, P):
            rv += _direction_tile(r, p, v, inv, diag, W, E, S, N, r_hat, p_out, v_out, tile,
                                  NY, NX, beta, omega, TRANSPOSE, BLOCK, ".cg")
    return rv, arrivals, ok


@triton.jit
def _step_pass(r, v, w, t, inv, diag, W, E, S, N, q, P, tiles, NY, NX, alpha, counter,
               arrivals, ok, zero, TRANSPOSE: tl.constexpr, NEUMANN: tl.constexpr,
               BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    """s = r − α v and t = A s over program q's tiles, and its parts of t·s and t·t; returns
    (t·s, t·t, arrivals, ok)."""
    ts = zero
    tt = zero
    if NEUMANN:
        for tile in tl.range(q, tiles, P):
            _neumann_s_tile(r, v, inv, W, E, S, N, w, tile, NY, NX, alpha, TRANSPOSE, BLOCK,
                            ".cg")
        arrivals += P
        ok = ok & _sync(counter, arrivals, LIMIT)
        for tile in tl.range(q, tiles, P):
            a, c = _neumann_t_tile(r, v, w, W, E, S, N, t, tile, NY, NX, alpha, TRANSPOSE,
                                   BLOCK, ".cg")
            ts += a
            tt += c
    else:
        for tile in tl.range(q, tiles, P):
            a, c = _step_tile(r, v, inv, diag, W, E, S, N, t, tile, NY, NX, alpha, TRANSPOSE,
                              BLOCK, ".cg")
            ts += a
            tt += c
    return ts, tt, arrivals, ok


@triton.jit
def _update_pass(x, z, r, v, p, t, inv, r_hat, q, P, tiles, NY, NX, alpha, omega, zero,
                 NEUMANN: tl.constexpr, BLOCK: tl.constexpr):
    """x (z with the Neumann preconditioner) and r updated over program q's tiles, and its
    parts of r̂·r and r·r."""
    rr = zero
    r2 = zero
    for tile in tl.range(q, tiles, P):
        if NEUMANN:
            a, c = _update_tile(z, r, v, p, t, inv, r_hat, z, r, tile, NY, NX, alpha, omega,
                                BLOCK, ".cg", False)
        else:
            a, c = _update_tile(x, r, v, p, t, inv, r_hat, x, r, tile, NY, NX, alpha, omega,
                                BLOCK, ".cg")
        rr += a
        r2 += c
    return rr, r2
