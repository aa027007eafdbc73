"""Counting the device kernels a piece of torch code launches, with ``torch.profiler``.

On an accelerator every tensor operation that touches data is (at least) one kernel launch,
and for the small arrays of a finite-difference time step the launch, not the arithmetic, is
what costs. :func:`kernel_launches` runs a function under the profiler (on any device; under
:func:`mfgwork.mps_emulation` on the CPU) and counts the leaf ``aten`` operations that touch
data: views and allocations (``slice``, ``view``, ``empty``, …) launch nothing and are left
out; composite operations count through the kernels they call, and an operation whose calls
are all kernel-free (``clamp`` converting its bound, ``bmm`` resolving conjugation) is one
kernel itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

NO_KERNEL = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::slice",
    "aten::select",
    "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::expand", "aten::unsqueeze",
    "aten::squeeze", "aten::reshape", "aten::alias", "aten::t", "aten::transpose",
    "aten::permute", "aten::narrow", "aten::detach", "aten::lift_fresh", "aten::unbind",
    "aten::split", "aten::chunk", "aten::resolve_conj", "aten::resolve_neg",
    "aten::result_type", "aten::to", "aten::_to_copy_noop", "aten::broadcast_tensors",
    "aten::expand_as", "aten::view_as", "aten::contiguous", "aten::_reshape_alias",
    "aten::resize_", "aten::set_", "aten::_has_compatible_shallow_copy_type",
    "aten::unfold", "aten::mT", "aten::movedim", "aten::moveaxis", "aten::flatten",
    "aten::unflatten", "aten::diagonal", "aten::split_with_sizes",
})


def kernel_launches(fn: Callable[..., Any], *args: Any, **kwargs: Any
                    ) -> tuple[Any, Counter[str]]:
    """``fn(*args, **kwargs)`` and a Counter of the kernels it launched, by ``aten`` name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn(*args, **kwargs)
    counts: Counter[str] = Counter()
    for event in prof.events():
        if event.name.startswith("aten::") and event.name not in NO_KERNEL and not any(
                _launches(child) for child in event.cpu_children):
            counts[event.name] += 1   # a kernel (a composite's are counted at its calls)
    return out, counts


def _launches(event: Any) -> bool:
    """Whether ``event`` or an operation it calls launches a kernel."""
    if not event.name.startswith("aten::"):
        return False
    return event.name not in NO_KERNEL or any(_launches(c) for c in event.cpu_children)
