"""Fused, batched HJB and FP sweeps in Triton (CUDA): the whole time loop in one launch.

The same scheme as :mod:`.numba_kernels` and :mod:`.operators`: implicit Euler, Godunov
Hamiltonian ½[(D⁻u)₊² + (D⁺u)₋²], Neumann walls; at each HJB time step Newton's method with
the exact tridiagonal Jacobian, stopping per problem when the last update is at most
``tol (1 + max|u|)``, and FP as the exact adjoint J(u^n)ᵀ μ^{n+1} = μ^n / Δt in cell masses.

Problems are independent and each is a sequential chain of small tridiagonal (Thomas) solves,
so the batch is the parallel axis of the ``"thread"`` layout: one program owns a block of
``BLOCK`` problems and runs the whole sweep for them, each thread one problem, its Thomas
coefficients in a small [x, problem] scratch that stays in cache. The ``"program"`` layout
(:mod:`.triton_coop`) gives a problem a whole program whose lanes span x and solves each
tridiagonal system by parallel cyclic reduction in registers: the serial chain of a level
is then log₂ nx steps instead of 2 nx. The thread layout works on arrays [level, x,
problem] (problem fastest: transposed on the way in and out), the program layout on the
caller's [problem, level, x]. A problem whose Newton iteration
did not converge at some time step is flagged (the first such step in sweep order), never
silently accepted; the caller turns the flag into the CPU path's error.

Scalars (h, Δt, the Newton tolerance) travel in a small tensor of the working dtype: Triton
would pass Python floats as float32. Each kernel is compiled at its first launch in a process
(for the dtype it meets), or loaded from Triton's cache; :func:`launch` says so in the
progress output when the cache does not hold it yet.
"""

from __future__ import annotations

import os
from typing import Any

from ...core.compiling import announce_compilation

# problems per program (one warp; one problem per thread, lanes past BLOCK idle), per dtype:
# measured on an H100 at 201 x 201 for 1 and 1024 problems (benchmarks/fdm_batch.py)
BLOCK = {"float32": 32, "float64": 16}
NUM_WARPS = 1
# the "program" layout: lanes (x points, padded to a power of two) per warp; measured on an
# H200 at 201 x 201 (benchmarks/kernel_picard.py, arrays then [level, x, problem]): 8 warps
# (32 lanes each) beat 4 and 2 for 1, 1024 and 4096 problems in both dtypes (HJB, 1024
# float32: 3.7 against 5.4 and 10.0 ms)
LANES_PER_WARP = 32
LAYOUTS = ("auto", "thread", "program")
#: the layout of :func:`hjb_sweep` and :func:`fp_sweep` when the call names none; "auto":
#: the program layout, except for the HJB sweeps of batches of at least
#: :data:`THREAD_FROM` problems of that dtype. Measured on an H100 at 201 x 201, HJB + FP:
#: 1 problem 1.0 against 21.3 ms in float32 (3.1 against 45.4 ms in float64), 1024
#: problems 3.5 against 26.0 ms (17.0 against 51.7 ms), 4096 problems 13.3 against 30.0 ms
#: in float32; the float64 HJB sweep of 4096 problems took 55.4 ms in the program layout
#: and 50.9 ms in the thread layout (the crossover, interpolated: about 3500 problems).
LAYOUT = "auto"
THREAD_FROM = {"float64": 3072}

_KERNELS: dict[str, Any] = {}
_PARAMS: dict[tuple, Any] = {}
_LAUNCHED: set[str] = set()


def _kernels() -> dict[str, Any]:
    """The jitted kernels (imported on first use, so importing this module needs no Triton;
    under ``TRITON_INTERPRET=1`` at that import they run on CPU tensors)."""
    if not _KERNELS:
        from . import triton_coop, triton_kernels, triton_tangent_coop

        _KERNELS.update(hjb=triton_kernels.hjb_sweep_kernel, fp=triton_kernels.fp_sweep_kernel,
                        hjb_program=triton_coop.hjb_coop_kernel,
                        fp_program=triton_coop.fp_coop_kernel,
                        factor=triton_kernels.thomas_factor_kernel,
                        tangent=triton_kernels.tangent_sweep_kernel,
                        tangent_program=triton_tangent_coop.tangent_coop_kernel,
                        tangent_planes=triton_tangent_coop.planes_kernel)
    return _KERNELS


def launch(key: str, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
    """Launch the kernel ``key`` of :func:`_kernels`; its first launch in a process on a
    device announces a compilation when Triton's cache holds no build of it."""
    kernel = _kernels()[key]
    if key not in _LAUNCHED:
        _LAUNCHED.add(key)
        if os.environ.get("TRITON_INTERPRET") != "1":
            announce_compilation([kernel.fn.__name__])
    kernel[grid](*args, **kwargs)


def _batch_last(a: Any) -> Any:
    """(B, levels, nx) → contiguous (levels, nx, B)."""
    return a.permute(1, 2, 0).contiguous()


def _block(like: Any) -> int:
    return BLOCK[str(like.dtype).removeprefix("torch.")]


def _grid(B: int, block: int) -> tuple[int]:
    return ((B + block - 1) // block,)


def chosen_layout(sweep: str, B: int, like: Any, layout: str | None = None) -> str:
    """The layout (``"thread"`` or ``"program"``) of a ``sweep`` ("hjb" or "fp") of ``B``
    problems in the dtype of ``like``: ``layout``, else :data:`LAYOUT`, "auto" resolved by
    :data:`THREAD_FROM`."""
    layout = LAYOUT if layout is None else layout
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {LAYOUTS}")
    if layout != "auto":
        return layout
    dtype = str(like.dtype).removeprefix("torch.")
    return "thread" if sweep == "hjb" and B >= THREAD_FROM.get(dtype, B + 1) else "program"


def _program(B: int, nx: int, layout: str) -> dict[str, Any] | None:
    """None for the ``"thread"`` layout; for ``"program"`` the grid (a program per problem)
    and the launch parameters of :mod:`.triton_coop` (x padded to 2^LOG_X, a warp per
    ``LANES_PER_WARP`` lanes, 1 to 8 warps)."""
    if layout == "thread":
        return None
    log_x = max(nx - 1, 1).bit_length()
    warps = min(8, max(1, (1 << log_x) // LANES_PER_WARP))
    return {"grid": (B,), "LOG_X": log_x, "num_warps": warps}


def _params(values: tuple[float, ...], like: Any) -> Any:
    """The scalars as a tensor of ``like``'s dtype and device (cached: a copy from the host
    would wait for the device)."""
    key = (values, like.dtype, like.device)
    if key not in _PARAMS:
        import torch

        _PARAMS[key] = torch.tensor(values, dtype=like.dtype, device=like.device)
    return _PARAMS[key]


def hjb_sweep(U_T: Any, F: Any, guess: Any | None, nu: Any, h: float, dt: float,
              inv_hw: Any, inv_w: Any, tol: float, max_newton: int,
              layout: str | None = None) -> tuple[Any, Any]:
    """Backward HJB sweep for a batch: U (B, nt+1, nx) with U[:, nt] = U_T (B, nx), running
    costs F (B, nt, nx), optional Newton seeds ``guess`` (B, nt+1, nx), ν per problem (B,).
    ``layout``: ``"auto"``, ``"thread"`` or ``"program"`` (:data:`LAYOUT` when None, see
    :func:`chosen_layout`).

    Returns U and a status tensor (2, B) of int32 left on the device: row 0 the first time
    index (in sweep order, i.e. the largest n) whose Newton iteration did not converge in
    ``max_newton`` iterations, −1 when all did; row 1 the Newton iterations per problem.
    """
    import torch

    B, nt, nx = F.shape
    program = _program(B, nx, chosen_layout("hjb", B, F, layout))
    status = torch.empty((2, B), dtype=torch.int32, device=F.device)
    params = _params((h, dt, tol), F)
    if program is not None:   # arrays as they are, [problem, level, x]
        U = torch.empty((B, nt + 1, nx), dtype=F.dtype, device=F.device)
        U[:, nt] = U_T
        G = U if guess is None else guess.contiguous()
        launch("hjb_program", program.pop("grid"),
            U, F.contiguous(), G, nu, inv_hw, inv_w, params, status, B, nx, nt, max_newton,
            USE_GUESS=guess is not None, **program)
        return U, status
    U = torch.empty((nt + 1, nx, B), dtype=F.dtype, device=F.device)
    U[nt] = U_T.transpose(0, 1)
    G = U if guess is None else _batch_last(guess)
    scratch = torch.empty((2, nx, B), dtype=F.dtype, device=F.device)
    block = _block(F)
    launch("hjb", _grid(B, block),
        U, _batch_last(F), G, nu, inv_hw, inv_w, params, scratch[0], scratch[1], status, B,
        nx, nt, max_newton, USE_GUESS=guess is not None, BLOCK=block, num_warps=NUM_WARPS)
    return U.permute(2, 0, 1).contiguous(), status


def fp_sweep(U: Any, mu0: Any, nu: Any, h: float, dt: float, inv_hw: Any,
             layout: str | None = None) -> Any:
    """Forward FP sweep for a batch: cell masses μ (B, nt+1, nx) from μ0 (B, nx), transported
    by U (B, nt+1, nx): J(U[n])ᵀ μ^{n+1} = μ^n / Δt. ``layout`` as in :func:`hjb_sweep`."""
    import torch

    B, levels, nx = U.shape
    program = _program(B, nx, chosen_layout("fp", B, U, layout))
    params = _params((h, dt), U)
    if program is not None:   # arrays as they are, [problem, level, x]
        mu = torch.empty((B, levels, nx), dtype=U.dtype, device=U.device)
        mu[:, 0] = mu0
        launch("fp_program", program.pop("grid"),
            U.contiguous(), mu, nu, inv_hw, params, nx, levels - 1, **program)
        return mu
    mu = torch.empty((levels, nx, B), dtype=U.dtype, device=U.device)
    mu[0] = mu0.transpose(0, 1)
    scratch = torch.empty((2, nx, B), dtype=U.dtype, device=U.device)
    block = _block(U)
    launch("fp", _grid(B, block),
        _batch_last(U), mu, nu, inv_hw, params, scratch[0], scratch[1],
        B, nx, levels - 1, BLOCK=block, num_warps=NUM_WARPS)
    return mu.permute(2, 0, 1).contiguous()
