"""A function of fixed-shape CUDA tensors recorded once as a CUDA graph and replayed.

Sequential solvers launch thousands of small kernels per call (HJB time steps, particle
steps), so on a GPU they cost the host's launch time rather than the GPU's. Recording the
whole call once and replaying it removes that cost. The recording reads its inputs from fixed
buffers; :meth:`GraphedCall.run` copies new inputs in, replays, and returns fresh copies of
the outputs. Callers compare the first replay with an eager call (:func:`record_checked`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


class GraphedCall:
    """``fn(*inputs)`` recorded as a CUDA graph; ``generator``: a torch.Generator it draws from
    (registered, so that a replay after reseeding draws the same numbers as an eager call)."""

    def __init__(self, fn: Callable[..., Any], *inputs: Any, generator: Any = None) -> None:
        import torch

        self.inputs = [a.clone() for a in inputs]
        self.graph = torch.cuda.CUDAGraph()
        if generator is not None:
            self.graph.register_generator_state(generator)
        with torch.cuda.graph(self.graph):
            self.outputs = fn(*self.inputs)

    def run(self, *inputs: Any) -> Any:
        for buffer, a in zip(self.inputs, inputs, strict=True):
            buffer.copy_(a)
        self.graph.replay()
        if isinstance(self.outputs, tuple):
            return tuple(o.clone() for o in self.outputs)
        return self.outputs.clone()


def record_checked(fn: Callable[..., Any], eager: Any, *inputs: Any, what: str,
                   generator: Any = None, reseed: Callable[[], None] | None = None
                   ) -> GraphedCall | None:
    """Record ``fn`` and check a replay against ``eager`` (its eager result on ``inputs``),
    bitwise. Returns the recording, or None with a warning when it differs or fails."""
    try:
        graphed = GraphedCall(fn, *inputs, generator=generator)
        if reseed is not None:
            reseed()
        replay = graphed.run(*inputs)
        pairs = zip(replay, eager, strict=True) if isinstance(eager, tuple) else [(replay, eager)]
        if all(bool((a == b).all()) for a, b in pairs):
            return graphed
        reason = "its result differs from the eager call"
    except Exception as exc:  # the eager path is always correct; fall back to it
        reason = f"{type(exc).__name__}: {exc}"
    warnings.warn(f"CUDA graph of the {what} disabled ({reason}); running eagerly",
                  RuntimeWarning, stacklevel=3)
    return None
