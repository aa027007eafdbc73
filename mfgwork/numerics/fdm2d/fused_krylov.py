"""BiCGStab of the 2-D scheme in fixed device buffers, by the fused kernels of
:mod:`.triton_krylov` (torch tensors on CUDA; on CPU under Triton's interpreter in tests).

The recurrence and the stopping rule of :func:`.krylov.bicgstab`, with the state held
between calls. Two ways to run it:

- **one launch per solve** (:func:`.triton_krylov.solve_kernel`): the problems whose start
  is above their tolerance share the launch's programs (one per SM; :func:`one_launch_layout`
  gives each problem's share when all iterate) and iterate to the tolerance, tested after
  every iteration, leaving the iterations and the residual in a small status buffer; the
  tolerance is read on the device, so a recorded step can hold the solve
  (:mod:`.fused_steps`). Preconditioned by the two-term Neumann series (:data:`NEUMANN`).
  The default where a program has at most :data:`MAX_TILES_PER_PROGRAM` tiles (single
  problems, batches of up to about a hundred rooms of 101²), in float64;
- **chunks** (``persistent=False``, the default for large batches and float32): ``steps``
  iterations (an even number) of three launches each, preconditioned by the inverse
  diagonal as :func:`.krylov.bicgstab` is, go back and forth between two sets of state
  buffers, so a chunk ends where it started, and leave the worst relative residual
  ‖r‖₂/‖b‖₂ of the batch in a one-value buffer read after each chunk.

On CUDA the first launch of each kind is recorded as a CUDA graph (checked bitwise against
the same call run eagerly); every later one is a replay.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.cuda_graphs import capture
from ...core.errors import SolverError, warn

#: Nodes per program of the fused launches.
BLOCK = 512
#: Whether solvers may run each solve in one launch (else in chunks of three launches an
#: iteration; benchmarks compare the two).
ONE_LAUNCH = True
#: The most tiles per program for which one launch per solve is the default: with more,
#: each program walks many tiles between barriers (64 rooms of 101² on an H100, two
#: programs of five 1024-node tiles each: 61 µs an iteration against 67 µs for the chunks,
#: and the batch's equilibrium, warm, 19.3 s against 30.9 s, with Newton on the device and every
#: problem stopping at its own iteration).
MAX_TILES_PER_PROGRAM = 5
#: The tile sizes (nodes) the one-launch solve chooses from (:func:`one_launch_layout`).
SOLVE_BLOCKS = (256, 512, 1024)
#: Polls of a barrier of :func:`.triton_krylov.solve_kernel` before it gives up (seconds of
#: waiting: only programs that do not run at once wait that long).
BARRIER_POLLS = 1 << 24
#: The most problems whose launch the problems left iterating share
#: (:func:`.triton_krylov.solve_kernel`: each program reads every problem's start).
SPREAD_BATCH = 1024
#: Whether the one-launch solve is preconditioned by the first two terms of the Neumann
#: series of J⁻¹, J = D + Ō (Ō the off-diagonal part): M⁻¹ = D⁻¹ − D⁻¹ Ō D⁻¹, so that
#: J M⁻¹ = I − Ō D⁻¹ Ō D⁻¹ (:meth:`.stencil.Stencil.neumann`), instead of the inverse
#: diagonal. An iteration makes five phases (two more barriers) and about 42 passes over
#: the batch instead of 30, and takes about half the iterations: the room's systems at
#: 101², rtol 1e-3 and 1e-6, 16 and 32 iterations with the inverse diagonal, 7 and 15 with
#: the series; with congestion 4, 33 and 45 against 15 and 23
#: (``benchmarks/preconditioner.py``). On an H200, one call: 64 rooms 6.1 s against 7.4 s,
#: the 101² room 0.51 s against 0.64 s (half the Krylov iterations).
NEUMANN = True


def one_launch_layout(batch: int, nodes: int, device: Any) -> tuple[int, int]:
    """(nodes per tile, programs per problem) of the one-launch solve: the smallest tile of
    :data:`SOLVE_BLOCKS` whose tiles, one program each, leave every program of the batch its
    own SM (so all run at once and meet at their barriers), else the largest tile and as many
    programs as fit; one program under Triton's interpreter (it runs programs one after the
    other) and off CUDA. Measured on an H100 (GPU time per iteration, 101² nodes): 256-node
    tiles and 40 programs 4.5 µs, 512 and 20 7.0 µs, 1024 and 10 10.8 µs; 64 rooms: 1024-node
    tiles, two programs of eight warps each, 61 µs, the fastest of ten layouts
    (``benchmarks/krylov_layout.py``), moving 140 MB an iteration through DRAM (two thirds of
    the H100's bandwidth)."""
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1" or torch.device(device).type != "cuda":
        return SOLVE_BLOCKS[-1], 1
    room = max(1, torch.cuda.get_device_properties(device).multi_processor_count // batch)
    for block in SOLVE_BLOCKS:
        tiles = -(-nodes // block)
        if tiles <= room:
            return block, tiles
    return SOLVE_BLOCKS[-1], room


def _spread(batch: int, programs: int, block: int, nodes: int, device: Any
            ) -> tuple[int, int, bool]:
    """(programs of a one-launch solve, the most a problem takes, whether the problems left
    iterating share them) for ``programs`` per problem of :func:`one_launch_layout`: on CUDA
    one per SM, a problem taking up to its tiles, where the batch's layout leaves SMs free;
    otherwise (every SM busy, or Triton's interpreter, which runs programs one after the
    other, or off CUDA) the layout itself, shared only by batches of at most
    :data:`SPREAD_BATCH` problems."""
    import torch

    fixed = (batch * programs, programs, batch <= SPREAD_BATCH)
    if os.environ.get("TRITON_INTERPRET") == "1" or torch.device(device).type != "cuda":
        return fixed
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    if batch * programs >= sms or batch > SPREAD_BATCH:
        return batch * programs, programs, False
    return sms, -(-nodes // block), True


def _power_of_two(n: int) -> int:
    """The smallest power of two ≥ max(n, 2) (a Triton vector's length)."""
    return max(2, 1 << (n - 1).bit_length())


class FusedBiCGStab:
    """BiCGStab for J (``transpose``: Jᵀ) of the stencil on arrays of ``shape`` (..., ny, nx)
    like ``like`` (dtype and device): in one launch per solve (``persistent``; default
    :data:`ONE_LAUNCH`), or in chunks of ``steps`` iterations between two convergence
    tests. ``layout``: (nodes per tile, programs per problem, warps per program) of the
    one-launch solve, instead of :func:`one_launch_layout`'s (benchmarks compare them).
    ``dtype``: the iterations' precision, if not ``like``'s (float32 for float64 problems:
    the mixed precision of :mod:`.fused_steps`, whose float64 Newton updates and refinement
    rounds make up the accuracy; J, b and x0 are rounded to it in :meth:`start`)."""

    def __init__(self, shape: tuple[int, ...], like: Any, transpose: bool, steps: int,
                 graphs: bool, persistent: bool | None = None,
                 layout: tuple[int, int, int] | None = None, dtype: Any = None) -> None:
        import torch

        if steps < 2 or steps % 2:
            raise ValueError(f"steps={steps} is not an even number ≥ 2")
        self.shape, self.transpose, self.steps = tuple(shape), transpose, steps
        ny, nx = self.shape[-2:]
        self.B = math.prod(self.shape[:-2])
        self.tiles = -(-ny * nx // BLOCK)
        self.launch = {"BLOCK": BLOCK, "PB": max(2, 1 << (self.tiles - 1).bit_length())}

        #: the iterations' precision and the problems' (they differ: mixed precision)
        self.dtype, self.problem_dtype = (like.dtype if dtype is None else dtype), like.dtype
        self.mixed = self.dtype != self.problem_dtype

        def zeros(*size: int, dtype: Any = self.dtype) -> Any:
            return torch.zeros(size, dtype=dtype, device=like.device)

        self.coefs = zeros(6, *self.shape)   # diag, W, E, S, N and 1/diag
        self.r_hat, self.t = zeros(*self.shape), zeros(*self.shape)
        self.b_norm, self.worst = zeros(self.B), zeros(1)
        self.p, self.v = zeros(2, *self.shape), zeros(2, *self.shape)
        #: the one-launch solve with the Neumann preconditioner: w = D⁻¹ Ō D⁻¹ p, and z
        #: (x = x₀ + M⁻¹ z)
        self.w, self.z = zeros(*self.shape), zeros(*self.shape)
        self.sets = [{"x": zeros(*self.shape), "r": zeros(*self.shape), "p": self.p[i],
                      "v": self.v[i], "scalars": zeros(self.B, 3),
                      "rr": zeros(self.B, self.tiles)} for i in range(2)]
        self.rv, self.ts, self.tt, self.r2 = (zeros(self.B, self.tiles) for _ in range(4))
        if layout is None:
            block, self.programs = one_launch_layout(self.B, ny * nx, like.device)
            warps = 8 if block > 512 else 4
            #: the launch's programs and the most a problem takes (its tiles): where the
            #: programs of a batch run at once, every SM takes one, and the problems left
            #: iterating share them (:func:`.triton_krylov.solve_kernel`)
            self.grid, self.most, spread = _spread(self.B, self.programs, block, ny * nx,
                                                   like.device)
        else:
            block, self.programs, warps = layout
            self.grid, self.most = self.B * self.programs, self.programs
            spread = self.B <= SPREAD_BATCH
        if persistent is None:
            # float32 keeps the chunks: stopped at the first iterate below its tolerance,
            # the float32 recurrence left the room's fixed point a floor five times higher
            # (41² room on an H100: residual 2.7e-4 against 5.1e-5 with chunks)
            tiles = -(-ny * nx // block)
            persistent = ONE_LAUNCH and like.dtype == torch.float64 and (
                tiles <= MAX_TILES_PER_PROGRAM * self.programs
                or os.environ.get("TRITON_INTERPRET") == "1")
        self.persistent = persistent
        self.one_launch = {"BLOCK": block, "LIMIT": BARRIER_POLLS, "NEUMANN": NEUMANN,
                           "PB": _power_of_two(self.most), "SPREAD": spread,
                           "PBATCH": _power_of_two(self.B) if spread else 2,
                           "num_warps": warps}
        self.ctl, self.status = zeros(2), zeros(self.B, 3)
        #: ‖r‖₂² per problem at the start (:meth:`start`, or the kernels that start the
        #: solver in its buffers)
        self.initial = zeros(self.B)
        self.ctl_host = torch.zeros(2, dtype=self.dtype, pin_memory=self.ctl.is_cuda)
        #: per problem, its FP tolerance over the tightest (``ctl``[0]): the FP starts scale
        #: ‖b‖₂ by it (:meth:`set_tolerances`)
        self.loosen = torch.ones(self.B, dtype=self.dtype, device=like.device)
        self._loosen_host = np.ones(self.B)
        self.part = zeros(self.B, 5, self.most)
        self.sync = zeros(self.B, dtype=torch.int32)
        self.graphs = graphs
        self.recorded: dict[tuple, Any] = {}

    @property
    def x(self) -> Any:
        """The current iterate (a buffer: the next :meth:`start` overwrites it)."""
        return self.sets[0]["x"]

    def start(self, coefficients: tuple[Any, ...] | None, b: Any, x0: Any | None,
              apply: Callable[[Any], Any]) -> None:
        """Load J's (diag, W, E, S, N) (None: they and 1/diag are in ``coefs`` already) and
        b, and start from x0 (0 when None; ``apply`` is J x, or Jᵀ x, for the first
        residual)."""
        import torch

        if coefficients is not None:
            for buffer, a in zip(self.coefs[:5], coefficients, strict=True):
                buffer.copy_(a)
            torch.reciprocal(self.coefs[0], out=self.coefs[5])
        s = self.sets[0]
        if x0 is None:
            s["x"].zero_()
            s["r"].copy_(b)
        else:
            s["x"].copy_(x0)
            s["r"].copy_(b - apply(s["x"]))
        self.r_hat.copy_(s["r"])
        s["p"].zero_()
        s["v"].zero_()
        s["scalars"].fill_(1.0)
        s["rr"].zero_()
        s["rr"][:, 0] = (self.r_hat * s["r"]).sum(-1).sum(-1).reshape(self.B)
        self.initial.copy_(s["rr"][:, 0])
        self.b_norm.copy_((b * b).sum(-1).sum(-1).reshape(self.B).sqrt())

    def _chunk(self) -> None:
        """``steps`` iterations from the first set of buffers back to it, then the worst
        relative residual."""
        import torch

        from . import triton_krylov as tk

        grid = (self.B, self.tiles)
        diag, W, E, S, N, inv = self.coefs
        ny, nx = self.shape[-2:]
        for i in range(self.steps):
            a, z = self.sets[i % 2], self.sets[(i + 1) % 2]
            tk.direction_kernel[grid](a["r"], a["p"], a["v"], inv, diag, W, E, S, N,
                                      self.r_hat, a["rr"], self.tiles, a["scalars"], z["p"],
                                      z["v"], self.rv, z["scalars"], ny, nx,
                                      TRANSPOSE=self.transpose, **self.launch)
            tk.step_kernel[grid](a["r"], z["v"], inv, diag, W, E, S, N, self.rv, z["scalars"],
                                 self.t, self.ts, self.tt, ny, nx, TRANSPOSE=self.transpose,
                                 **self.launch)
            tk.update_kernel[grid](a["x"], a["r"], z["v"], z["p"], self.t, inv, self.r_hat,
                                   self.ts, self.tt, z["scalars"], z["x"], z["r"], z["rr"],
                                   self.r2, ny, nx, **self.launch)
        norm = self.r2.sum(-1).sqrt()
        self.worst.copy_((norm / torch.where(self.b_norm == 0.0, 1.0, self.b_norm)).max())

    def set_control(self, rtol: float, max_iter: int) -> None:
        """The tolerance and the iteration cap of the next one-launch solves."""
        self.ctl_host[0], self.ctl_host[1] = rtol, max_iter
        self.ctl.copy_(self.ctl_host, non_blocking=True)

    def set_tolerances(self, rtol: float | np.ndarray, max_iter: int) -> None:
        """The FP solves' tolerances, one or per problem (host (B,)): the control at the
        tightest, each problem's own in ``loosen`` (its tolerance over the tightest), by
        which the FP starts scale the problem's ‖b‖₂; the solve of a problem then stops at
        ‖r‖₂ ≤ rtol_b ‖b‖₂, and its status's residual is over l·‖b‖₂."""
        import torch

        rtols = np.broadcast_to(np.asarray(rtol, dtype=np.float64), (self.B,))
        tight = float(rtols.min())
        self.set_control(tight, max_iter)
        factors = rtols / tight if tight > 0.0 else np.ones(self.B)
        if not np.array_equal(factors, self._loosen_host):
            self._loosen_host = factors.copy()
            host = torch.tensor(factors, dtype=self.dtype)
            self.loosen.copy_(host.pin_memory() if self.loosen.is_cuda else host,
                              non_blocking=True)

    def launch_solve(self) -> Any:
        """The solve from the state of :meth:`start` to the tolerance and cap in ``ctl``, in
        one launch (iterations, relative residual and the barriers' flag in ``status``);
        returns Triton's compiled kernel (its registers, for benchmarks)."""
        from . import triton_krylov as tk

        diag, W, E, S, N, inv = self.coefs
        s = self.sets[0]
        self.sync.zero_()
        return tk.solve_kernel[(self.grid,)](
            s["x"], s["r"], self.p, self.v, self.t, self.w, self.z, self.r_hat, inv, diag,
            W, E, S, N, self.b_norm, self.initial, self.ctl, self.part, self.sync, self.status,
            self.B, self.most, *self.shape[-2:], TRANSPOSE=self.transpose, **self.one_launch)

    def run_chunk(self) -> None:
        """One chunk: eagerly, or by a replay of its CUDA graph (recorded at the first call
        with ``graphs``)."""
        self._run(("chunk",), self._chunk, [self.worst])

    def _run(self, key: tuple, fn: Callable[[], None], outputs: list[Any]) -> None:
        """``fn()`` (it changes the state buffers and ``outputs``): a replay of its
        recording, else eagerly (recorded first when ``graphs``)."""
        graph = self.recorded.get(key)
        if graph is not None:
            graph.replay()
        elif not self.graphs:
            fn()
        else:
            self._record(key, fn, outputs)

    def _record(self, key: tuple, fn: Callable[[], None], outputs: list[Any]) -> None:
        """Run ``fn`` eagerly from a copy of the state, record it, replay it from that state
        and keep the recording only if it gives the same buffers bitwise."""
        import torch

        kept = [{k: v.clone() for k, v in s.items()} for s in self.sets]
        fn()   # eagerly (this also compiles the kernels before the recording)
        state = outputs + [v for s in self.sets for v in s.values()]
        eager = [a.clone() for a in state]
        try:
            graph = torch.cuda.CUDAGraph()
            capture(graph, lambda coefs: fn(), self.coefs)
        except Exception as exc:  # the eager calls are always correct; fall back to them
            self._give_up(f"{type(exc).__name__}: {exc}")
            self._restore(kept)
            fn()
            return
        self._restore(kept)
        graph.replay()
        if all(bool((a == b).all()) for a, b in zip(state, eager, strict=True)):
            self.recorded[key] = graph
            return
        self._give_up("its result differs from the eager call")
        for buffer, value in zip(state, eager, strict=True):   # go on from the eager call
            buffer.copy_(value)

    def _restore(self, kept: list[dict[str, Any]]) -> None:
        for s, k in zip(self.sets, kept, strict=True):
            for name, value in k.items():
                s[name].copy_(value)

    def _give_up(self, reason: str) -> None:
        self.graphs = False
        warn(f"CUDA graph of the fused BiCGStab iterations disabled ({reason}); "
             "running eagerly", RuntimeWarning)

    def solve(self, coefficients: tuple[Any, ...], b: Any, x0: Any | None,
              apply: Callable[[Any], Any], *, rtol: float, max_iter: int,
              fail: float) -> tuple[Any, int]:
        """x (a new array) with ‖b − J x‖₂ ≤ ``rtol`` ‖b‖₂ for every problem, and the
        iterations done (the most of any problem); past ``max_iter`` the iterate is accepted
        if its true relative residual is ≤ ``fail``, else :class:`SolverError` (as
        :func:`.krylov.bicgstab`)."""
        self.start(coefficients, b, x0, apply)
        return self.finish(b, x0, apply, rtol=rtol, max_iter=max_iter, fail=fail)

    def finish(self, b: Any, x0: Any | None, apply: Callable[[Any], Any], *, rtol: float,
               max_iter: int, fail: float) -> tuple[Any, int]:
        """:meth:`solve` after its :meth:`start` from ``x0`` (made elsewhere, e.g. inside a
        recorded step that assembled J and b)."""
        if self.persistent:
            self.set_control(rtol, max_iter)
            self._run(("solve",), self.launch_solve, [self.status])
            status = self.status.cpu()
            iterations, residual = (float(a) for a in status[:, :2].max(0).values)
            if float(status[:, 2].min()) < 1.0:
                self.persistent = False
                warn(f"the {self.programs} programs per problem of the one-launch "
                     "BiCGStab did not run at once; solving in chunks from now on",
                     RuntimeWarning)
                self.start(tuple(self.coefs[:5]), b, x0, apply)
                return self.finish(b, x0, apply, rtol=rtol, max_iter=max_iter, fail=fail)
            if residual <= rtol:
                return self.x.clone(), int(iterations)
            k = int(iterations)
        else:
            k = 0
            while k < max_iter:
                self.run_chunk()
                k += self.steps
                if float(self.worst.item()) <= rtol:
                    return self.x.clone(), k
        x = self.x.clone()
        r = b - apply(x)
        norm = (r * r).sum(-1).sum(-1).sqrt().reshape(self.B)
        worst = float((norm / self.b_norm.where(self.b_norm != 0.0, 1.0)).max())
        if worst <= fail:
            return x, k
        raise SolverError(f"BiCGStab did not converge in {max_iter} iterations (relative "
                          f"residual {worst:.3g} > {fail:.3g})")
