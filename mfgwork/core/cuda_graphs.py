"""A function of fixed-shape CUDA tensors recorded once as a CUDA graph and replayed.

Sequential solvers launch thousands of small kernels per call (HJB time steps, particle
steps), so on a GPU they cost the host's launch time rather than the GPU's. Recording the
whole call once and replaying it removes that cost. The recording reads its inputs from fixed
buffers; :meth:`GraphedCall.run` copies new inputs in, replays, and returns fresh copies of
the outputs. Callers compare the first replay with an eager call (:func:`record_checked`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import warn


def capture(graph: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` recorded into the ``torch.cuda.CUDAGraph`` ``graph`` on a side stream;
    returns its result. As ``torch.cuda.graph`` does, but without emptying the caching
    allocator first: a solve's large arrays would then be allocated again, each by a
    synchronising ``cudaMalloc`` (on an H200, 64 rooms of 101² × 100: about 0.2 s of a 5.8 s
    solve, whose recordings are made anew). Tensors among ``args`` must be on CUDA: a graph
    records no work on other devices, and its replays would return a stale result."""
    import torch

    elsewhere = [str(a.device) for a in args if isinstance(a, torch.Tensor) and not a.is_cuda]
    if elsewhere:
        raise RuntimeError(f"a CUDA graph records work on CUDA tensors only, not on "
                           f"{elsewhere[0]}")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            out = fn(*args)
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return out


class GraphedCall:
    """``fn(*inputs)`` recorded as a CUDA graph.

    ``generator``: a torch.Generator that ``fn`` draws from. It is registered with the graph,
    and each replay first reseeds it with ``seed``, so every replay draws the numbers an eager
    call right after ``generator.manual_seed(seed)`` draws.
    """

    def __init__(self, fn: Callable[..., Any], *inputs: Any, generator: Any = None,
                 seed: int | None = None) -> None:
        import torch

        self.inputs = [a.clone() for a in inputs]
        self.generator, self.seed = generator, seed
        self.graph = torch.cuda.CUDAGraph()
        if generator is not None:
            self.graph.register_generator_state(generator)
        self.outputs = capture(self.graph, fn, *self.inputs)

    def run(self, *inputs: Any) -> Any:
        for buffer, a in zip(self.inputs, inputs, strict=True):
            buffer.copy_(a)
        if self.generator is not None and self.seed is not None:
            self.generator.manual_seed(self.seed)
        self.graph.replay()
        if isinstance(self.outputs, tuple):
            return tuple(o.clone() for o in self.outputs)
        return self.outputs.clone()


def record_checked(fn: Callable[..., Any], eager: Any, *inputs: Any, what: str,
                   generator: Any = None, seed: int | None = None) -> GraphedCall | None:
    """Record ``fn`` and check a replay against ``eager`` (its eager result on ``inputs``,
    drawn right after ``generator.manual_seed(seed)`` if it draws random numbers), bitwise.
    Returns the recording, or None with a warning when it differs or fails."""
    try:
        graphed = GraphedCall(fn, *inputs, generator=generator, seed=seed)
        replay = graphed.run(*inputs)
        pairs = zip(replay, eager, strict=True) if isinstance(eager, tuple) else [(replay, eager)]
        if all(bool((a == b).all()) for a, b in pairs):
            return graphed
        reason = "its result differs from the eager call"
    except Exception as exc:  # the eager path is always correct; fall back to it
        reason = f"{type(exc).__name__}: {exc}"
    warn(f"CUDA graph of the {what} disabled ({reason}); running eagerly",
         RuntimeWarning)
    return None
