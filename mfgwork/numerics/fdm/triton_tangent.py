"""The tangent linear sweeps of the HJB–FP scheme as fused Triton kernels (CUDA), batched.

The same derivative as :mod:`.tangent` and :mod:`.tangent_torch`, for every model the fused
sweeps carry (:func:`.triton_sweeps.model_kernels`; ∂p H and the capped ∂pp H of
:func:`.operators.tangent_weights`, H at the frozen density where it depends on m): for
running costs F^n = −y_n χ and the observed path z_n = χ·μ^{n+1}, D[b, n, j] = ∂z_n/∂y_j of
problem b, from the backward sweep J_n δu^n = δu^{n+1}/Δt − [j = n] χ and the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n (K_n = Dᵀ diag(c) D / h², c the upwind cell masses).

Two launches per batch. The first (:func:`.triton_kernels.thomas_factor_kernel`) factors
every J(u^n) and J(u^n)ᵀ once, both ways (top-down LU and bottom-up UL elimination), one
system (problem, level) per thread. The second (:func:`.triton_kernels.tangent_sweep_kernel`)
runs both sweeps with the time loop inside: a work item is one problem and a block of
``directions`` directions (one per thread), so every factorisation serves all nt directions
(the programs of a problem share its factors through the cache) and each access to δu or δμ
is one coalesced row of directions. Each pass over the rows fuses the back substitution of
one level with the elimination of the next (alternately LU and UL, so that both run in the
same direction): the solution of a level never goes to memory except δu into the history
that the forward sweep reads, and each row of the Thomas scratch of a program (nx ×
directions values) is written and read once per pass. ``PROGRAMS_PER_SM`` programs per
multiprocessor run, each looping over its work items; band and factor values are uniform
loads shared by a program's lanes. Direction j vanishes in δu^n for n > j: a block starts
its backward sweep at its last direction's level. Memory per problem: :func:`workspace_items`.

That is the ``"thread"`` layout, whose chain is the serial Thomas substitution of one work
item (2 nx dependent rows a level). The ``"program"`` layout
(:mod:`.triton_tangent_coop`: one launch writes each level's bands chunk-major, one
runs the sweeps, no factors) gives a program one problem and a block
of directions, its lanes the chunks of x: each level is solved by a serial elimination inside
the chunks (P rows) and parallel cyclic reduction across them (log₂ of the chunks), the matrix
part once per level for all directions of the block. :data:`LAYOUT` is the default of both
:func:`tangent_jacobian_triton` and :func:`workspace_items`.
"""

from __future__ import annotations

import weakref
from typing import Any

from ...problems.hamiltonians import Hamiltonian
from .operators import QUADRATIC, curvature_floor, jacobian_bands, tangent_weights
from .triton_sweeps import launch, model_arrays, model_kernels, scalars_tensor

FACTOR_BLOCK = 128   # systems per program of the factor kernel (four warps)
DIRECTIONS = 32      # directions per program of the sweep kernel (one warp)
PROGRAMS_PER_SM = 16  # sweep programs per multiprocessor (measured on an H100: 8 is slower,
                      # more no faster)
LAYOUTS = ("thread", "program")
#: the layout when a call names none: measured on an H100, 1024 problems at 201² with all
#: 201 directions (benchmarks/kernel_tangent.py), the program layout took 77 ms in float64
#: and 36 ms in float32 against 222 ms and 109 ms for the thread layout (same errors); with
#: its planes in one launch and the packed history, 50 ms and 23 ms
LAYOUT = "program"
# the "program" layout: directions per program (their right-hand sides share each level's
# matrix work) and chunks of x per level (at most one warp's lanes: a neighbour is a shuffle);
# measured as above, 4 directions per program (one warp) beat 8 (107 / 38 ms) and 16 (122 /
# 46 ms)
PROGRAM_DIRECTIONS = 4
MAX_CHUNKS = 32


def _layout(layout: str | None) -> str:
    layout = LAYOUT if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    return layout


def _padded(nt: int, directions: int) -> int:
    """The directions of a problem rounded up to whole blocks (the history's row length: no
    lane of a block needs a mask, and rows stay aligned for vector loads)."""
    return -(-nt // directions) * directions


def chunking(nx: int) -> tuple[int, int]:
    """(P, LOG_C) of the ``"program"`` layout: the nx points of a level cut into 2^LOG_C ≤
    ``MAX_CHUNKS`` chunks of P ≥ 3 rows (P·2^LOG_C ≥ nx; rows past nx are padding)."""
    log_c = 0
    while 3 << (log_c + 1) <= nx and 2 << log_c <= MAX_CHUNKS:
        log_c += 1
    return max(3, -(-nx // (1 << log_c))), log_c


def workspace_items(nx: int, nt: int, directions: int | None = None,
                    layout: str | None = None) -> int:
    """Array elements the kernels hold per problem (history, D, bands and the factors of the
    ``"thread"`` layout or the chunk-major planes of the ``"program"`` layout)."""
    if _layout(layout) == "thread":
        return nt * nx * _padded(nt, directions or DIRECTIONS) + nt * nt + 12 * nt * nx
    P, log_c = chunking(nx)
    rows = P << log_c
    return history_items(nt, rows, directions or PROGRAM_DIRECTIONS) + nt * nt + 7 * nt * rows


def _programs(device: Any) -> int:
    import torch

    if device.type == "cuda":
        return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def tangent_bands(U: Any, mu: Any, nu: Any, h: float, dt: float, inv_hw: Any,
                  hamiltonian: Hamiltonian = QUADRATIC, x: Any = None, m: Any = None) -> Any:
    """The bands (B·nt, 4, nx: lower, diag, upper, transport weights c/h²) of every J(u^n)
    (H at the nodes ``x`` and, where it depends on m, the frozen densities ``m`` (nt, nx))."""
    import torch

    B, levels, nx = U.shape
    lower, diag, upper, terms = jacobian_bands(U[:, :-1], nu[:, None, None], h, dt, inv_hw,
                                               torch, hamiltonian, x, m)
    c = torch.nn.functional.pad(tangent_weights(terms, mu[:, 1:], x, m, h, hamiltonian,
                                                torch), (0, 1))
    return torch.stack([lower, diag, upper, c], dim=2).reshape(B * (levels - 1), 4, nx)


def factorisations(U: Any, mu: Any, nu: Any, h: float, dt: float, inv_hw: Any,
                   hamiltonian: Hamiltonian = QUADRATIC, x: Any = None, m: Any = None
                   ) -> tuple[Any, Any]:
    """The bands of :func:`tangent_bands` and their Thomas factors (B·nt, 8, nx) from the
    factor kernel (the first launch)."""
    import torch

    bands = tangent_bands(U, mu, nu, h, dt, inv_hw, hamiltonian, x, m)
    S, _, nx = bands.shape
    factors = torch.empty((S, 8, nx), dtype=U.dtype, device=U.device)
    launch("factor", ((S + FACTOR_BLOCK - 1) // FACTOR_BLOCK,),
           bands, factors, S, nx, BLOCK=FACTOR_BLOCK, num_warps=4)
    return bands, factors


def sweeps(bands: Any, factors: Any, chi: Any, dt: float, B: int, directions: int = DIRECTIONS,
           programs: int | None = None, warps: int | None = None) -> Any:
    """D (B, nt, nt) from :func:`factorisations` of B problems (the second launch)."""
    import torch

    nx = bands.shape[-1]
    nt = bands.shape[0] // B
    blocks = (nt + directions - 1) // directions
    work = B * blocks
    grid = min(work, programs or _programs(bands.device))
    history = torch.empty((B, nt, nx, _padded(nt, directions)), dtype=bands.dtype,
                          device=bands.device)
    scratch = torch.empty((grid, nx, directions), dtype=bands.dtype, device=bands.device)
    D = torch.empty((B, nt, nt), dtype=bands.dtype, device=bands.device)
    launch("tangent", (grid,),
           bands, factors, chi.contiguous(), history, scratch, D, scalars_tensor((dt,), bands), nx,
           nt, history.shape[-1], blocks, work, BD=directions,
           num_warps=warps or max(1, directions // 32))
    return D


def chunk_planes(U: Any, mu: Any, nu: Any, h: float, dt: float, inv_hw: Any, P: int,
                 log_c: int, hamiltonian: Hamiltonian = QUADRATIC, x: Any = None,
                 m: Any = None) -> Any:
    """The planes (B·nt, 7, P·2^log_c) that the ``"program"`` kernel reads per level, from
    U (B, nt+1, nx), the cell masses mu (B, nt+1, nx), ν (B,) and 1/(h w) (nx,): lower,
    diag, upper of J(u^n), lower (upper_{i−1}) and upper (lower_{i+1}) of J(u^n)ᵀ, c_{i−1}
    and c_i (the bands of :func:`tangent_bands`, 0 outside the grid), rows past nx diagonal
    with 0 elsewhere, and every row vector stored chunk-major (row k·P + p at p·2^log_c + k),
    so that the loads of a chunk row are contiguous across the lanes; one launch
    (:func:`.triton_tangent_coop.planes_kernel`) that reads U and mu once. ``hamiltonian``
    at the nodes ``x`` and the frozen densities ``m`` (nt, nx) where it depends on m."""
    import torch

    B, levels, nx = U.shape
    rows = P << log_c
    model = _model(hamiltonian)
    prm, x, m = model_arrays(model, U, x, m, (B, levels - 1))
    planes = torch.empty((B * (levels - 1), 7, rows), dtype=U.dtype, device=U.device)
    launch("tangent_planes", (B * (levels - 1),), U.contiguous(), mu.contiguous(),
           nu.contiguous(), inv_hw.contiguous(),
           scalars_tensor((h, dt, curvature_floor(hamiltonian, h)), U), planes, x,
           U if m is None else m, prm, levels - 1, nx, P=P, LOG_C=log_c,
           BLOCK=1 << (rows - 1).bit_length(), num_warps=4, model=model)
    return planes


def _model(hamiltonian: Hamiltonian) -> Any:
    """The fused kernels of ``hamiltonian`` (refused by name where Triton cannot print it)."""
    model = model_kernels(hamiltonian)
    if model is None:
        raise ValueError(f"hamiltonian={hamiltonian!r} has no fused Triton kernels (its value "
                         "cannot be traced or printed as Triton code): use the torch tangent "
                         "sweeps (tangent_torch)")
    return model


def chunk_rows(v: Any, P: int, log_c: int) -> Any:
    """The vector v (nx,) padded with zeros to P·2^log_c rows, chunk-major (kept while v
    lives: the χ of a batch's every Jacobian is one tensor)."""
    key = id(v)   # (tensors compare by value: no weak-keyed dict; the entry dies with v)
    entry = _CHUNKED.get(key)
    if entry is None or entry[0]() is not v:
        entry = _CHUNKED[key] = (weakref.ref(v, lambda _, k=key: _CHUNKED.pop(k, None)), {})
    kept = entry[1]
    if (P, log_c) not in kept:
        kept[P, log_c] = _chunked(v, P, log_c)
    return kept[P, log_c]


#: :func:`chunk_rows` of each live vector (by id), per (P, log_c)
_CHUNKED: dict[int, tuple[Any, dict[tuple[int, int], Any]]] = {}


def _chunked(v: Any, P: int, log_c: int) -> Any:
    import torch

    rows = P << log_c
    order = torch.arange(rows, device=v.device).view(1 << log_c, P).T.reshape(-1)
    return torch.nn.functional.pad(v, (0, rows - v.shape[-1]))[order].contiguous()


def history_items(nt: int, rows: int, directions: int) -> int:
    """Elements of one problem's δu history in the ``"program"`` layout: block k of the
    directions keeps levels 0..directions·(k+1)−1 only (direction j vanishes above level j),
    block after block."""
    blocks = -(-nt // directions)
    return directions * blocks * (blocks + 1) // 2 * directions * rows


def program_kernel(planes: Any, chi: Any, dt: float, B: int, P: int, log_c: int,
                   directions: int = PROGRAM_DIRECTIONS, warps: int | None = None) -> Any:
    """D (B, nt, nt) from :func:`chunk_planes` of B problems and χ by :func:`chunk_rows` (the
    ``"program"`` layout's sweep launch): a program per problem and block of ``directions``
    (a power of 2) directions, of ``warps`` warps (default: one per 8 directions)."""
    if directions < 1 or directions & (directions - 1):
        raise ValueError(f"directions={directions} is not a power of 2")
    import torch

    nt = planes.shape[0] // B
    blocks = (nt + directions - 1) // directions
    per_problem = history_items(nt, P << log_c, directions)
    history = torch.empty((B, per_problem), dtype=planes.dtype, device=planes.device)
    D = torch.empty((B, nt, nt), dtype=planes.dtype, device=planes.device)
    launch("tangent_program", (B * blocks,),
           planes, chi, history, D, scalars_tensor((dt,), planes), nt, per_problem, blocks,
           LOG_D=directions.bit_length() - 1, P=P, LOG_C=log_c,
           num_warps=warps or max(1, directions // 8))
    return D


def program_sweeps(U: Any, mu: Any, chi: Any, nu: Any, h: float, dt: float, inv_hw: Any,
                   directions: int = PROGRAM_DIRECTIONS, warps: int | None = None,
                   hamiltonian: Hamiltonian = QUADRATIC, x: Any = None, m: Any = None) -> Any:
    """D (B, nt, nt) by the ``"program"`` layout (the arguments of
    :func:`tangent_jacobian_triton`): :func:`chunk_planes`, then :func:`program_kernel`."""
    P, log_c = chunking(U.shape[-1])
    return program_kernel(chunk_planes(U, mu, nu, h, dt, inv_hw, P, log_c, hamiltonian, x, m),
                          chunk_rows(chi, P, log_c), dt, U.shape[0], P, log_c, directions,
                          warps)


def tangent_jacobian_triton(U: Any, mu: Any, chi: Any, nu: Any, h: float, dt: float,
                            inv_hw: Any, directions: int | None = None,
                            programs: int | None = None, warps: int | None = None,
                            layout: str | None = None, hamiltonian: Hamiltonian = QUADRATIC,
                            x: Any = None, m: Any = None) -> Any:
    """D (B, nt, nt) from U (B, nt+1, nx), the cell masses mu (B, nt+1, nx), χ (nx,), ν (B,)
    and 1/(h w) (nx,), all tensors of one dtype and device (the arguments of
    :func:`.tangent_torch.tangent_jacobian_torch`, ``hamiltonian`` with the nodes ``x`` and
    the frozen densities ``m`` (nt, nx) where it depends on m). ``layout`` ``"thread"`` or
    ``"program"`` (:data:`LAYOUT` when None); ``directions`` per program (a power of 2; default
    ``DIRECTIONS``, ``PROGRAM_DIRECTIONS``), programs of ``warps`` warps (default: one thread
    per direction; one warp per 8 directions); in the ``"thread"`` layout at most
    ``programs`` programs (default: ``PROGRAMS_PER_SM`` per multiprocessor)."""
    if _layout(layout) == "program":
        return program_sweeps(U, mu, chi, nu, h, dt, inv_hw, directions or PROGRAM_DIRECTIONS,
                              warps, hamiltonian, x, m)
    bands, factors = factorisations(U, mu, nu, h, dt, inv_hw, hamiltonian, x, m)
    return sweeps(bands, factors, chi, dt, U.shape[0], directions or DIRECTIONS, programs,
                  warps)
