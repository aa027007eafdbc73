"""BiCGStab of the 2-D scheme in fixed device buffers, by the fused launches of
:mod:`.triton_krylov` (torch tensors on CUDA; on CPU under Triton's interpreter in tests).

The recurrence, the preconditioner and the stopping rule of :func:`.krylov.bicgstab`, with
the state held between calls: a chunk of ``steps`` iterations (an even number) goes back and
forth between two sets of state buffers, so it ends where it started, and leaves the worst
relative residual ‖r‖₂/‖b‖₂ of the batch in a one-value buffer. On CUDA the first chunk of a
solver is recorded as a CUDA graph (checked bitwise against the same chunk run eagerly), and
every later chunk is one replay and one read of that value: the host's work per chunk no
longer grows with the iterations.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from ...core.errors import SolverError

#: Nodes per program of the fused launches.
BLOCK = 512


class FusedBiCGStab:
    """BiCGStab for J (``transpose``: Jᵀ) of the stencil on arrays of ``shape`` (..., ny, nx)
    like ``like`` (dtype and device), ``steps`` iterations between two convergence tests."""

    def __init__(self, shape: tuple[int, ...], like: Any, transpose: bool, steps: int,
                 graphs: bool) -> None:
        import torch

        if steps < 2 or steps % 2:
            raise ValueError(f"steps={steps} is not an even number ≥ 2")
        self.shape, self.transpose, self.steps = tuple(shape), transpose, steps
        ny, nx = self.shape[-2:]
        self.B = math.prod(self.shape[:-2])
        self.tiles = -(-ny * nx // BLOCK)
        self.launch = {"BLOCK": BLOCK, "PB": max(2, 1 << (self.tiles - 1).bit_length())}

        def zeros(*size: int) -> Any:
            return torch.zeros(size, dtype=like.dtype, device=like.device)

        self.coefs = zeros(6, *self.shape)   # diag, W, E, S, N and 1/diag
        self.r_hat, self.y, self.t = (zeros(*self.shape) for _ in range(3))
        self.b_norm, self.worst = zeros(self.B), zeros(1)
        self.sets = [{"x": zeros(*self.shape), "r": zeros(*self.shape),
                      "p": zeros(*self.shape), "v": zeros(*self.shape),
                      "scalars": zeros(self.B, 3), "rr": zeros(self.B, self.tiles)}
                     for _ in range(2)]
        self.rv, self.ts, self.tt, self.r2 = (zeros(self.B, self.tiles) for _ in range(4))
        self.graphs, self.graph = graphs, None

    @property
    def x(self) -> Any:
        """The current iterate (a buffer: the next :meth:`start` overwrites it)."""
        return self.sets[0]["x"]

    def start(self, coefficients: tuple[Any, ...], b: Any, x0: Any | None,
              apply: Callable[[Any], Any]) -> None:
        """Load J's (diag, W, E, S, N) and b, and start from x0 (0 when None; ``apply`` is
        J x, or Jᵀ x, for the first residual)."""
        import torch

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
                                      self.y, z["v"], self.rv, z["scalars"], ny, nx,
                                      TRANSPOSE=self.transpose, **self.launch)
            tk.step_kernel[grid](a["r"], z["v"], inv, diag, W, E, S, N, self.rv, z["scalars"],
                                 self.t, self.ts, self.tt, ny, nx, TRANSPOSE=self.transpose,
                                 **self.launch)
            tk.update_kernel[grid](a["x"], a["r"], z["v"], self.y, self.t, inv, self.r_hat,
                                   self.ts, self.tt, z["scalars"], z["x"], z["r"], z["rr"],
                                   self.r2, ny, nx, **self.launch)
        norm = self.r2.sum(-1).sqrt()
        self.worst.copy_((norm / torch.where(self.b_norm == 0.0, 1.0, self.b_norm)).max())

    def run_chunk(self) -> None:
        """One chunk: eagerly, or by a replay of its CUDA graph (recorded at the first call
        with ``graphs``)."""
        if self.graph is not None:
            self.graph.replay()
            return
        if not self.graphs:
            self._chunk()
            return
        self._record()

    def _record(self) -> None:
        """Run one chunk eagerly from a copy of the state, record the chunk, replay it from
        that state and keep the recording only if it gives the same buffers bitwise."""
        import torch

        kept = [{k: v.clone() for k, v in s.items()} for s in self.sets]
        self._chunk()   # eagerly (this also compiles the kernels before the recording)
        eager = [self.worst.clone()] + [v.clone() for v in self.sets[0].values()]
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._chunk()
        except Exception as exc:  # the eager chunks are always correct; fall back to them
            self._give_up(f"{type(exc).__name__}: {exc}")
            self._restore(kept)
            self._chunk()
            return
        self._restore(kept)
        graph.replay()
        replay = [self.worst] + list(self.sets[0].values())
        if all(bool((a == b).all()) for a, b in zip(replay, eager, strict=True)):
            self.graph = graph
            return
        self._give_up("its result differs from the eager chunk")
        for buffer, value in zip(replay, eager, strict=True):   # go on from the eager chunk
            buffer.copy_(value)

    def _restore(self, kept: list[dict[str, Any]]) -> None:
        for s, k in zip(self.sets, kept, strict=True):
            for name, value in k.items():
                s[name].copy_(value)

    def _give_up(self, reason: str) -> None:
        self.graphs = False
        warnings.warn(f"CUDA graph of the fused BiCGStab iterations disabled ({reason}); "
                      "running eagerly", RuntimeWarning, stacklevel=4)

    def solve(self, coefficients: tuple[Any, ...], b: Any, x0: Any | None,
              apply: Callable[[Any], Any], *, rtol: float, max_iter: int,
              fail: float) -> tuple[Any, int]:
        """x (a new array) with ‖b − J x‖₂ ≤ ``rtol`` ‖b‖₂ for every problem, and the
        iterations done; past ``max_iter`` the iterate is accepted if its true relative
        residual is ≤ ``fail``, else :class:`SolverError` (as :func:`.krylov.bicgstab`)."""
        self.start(coefficients, b, x0, apply)
        return self.finish(b, apply, rtol=rtol, max_iter=max_iter, fail=fail)

    def finish(self, b: Any, apply: Callable[[Any], Any], *, rtol: float, max_iter: int,
               fail: float) -> tuple[Any, int]:
        """:meth:`solve` after its :meth:`start` (made elsewhere, e.g. inside a recorded
        step that assembled J and b)."""
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
