"""Backends and devices: selection, dtype policy, array namespace, conversions, device info.

A :class:`Backend` is a small immutable record (library, device, dtype) with the array
namespace of that library (through ``array-api-compat``). The solvers are written against
``backend.xp``; arrays cross to NumPy only at the boundaries (results, plots, saving), through
:func:`to_numpy` and :meth:`Backend.asarray`.

PyTorch is imported lazily: ``import mfgwork`` never imports it.

Devices: ``"cpu"``, ``"cuda"`` (or ``"cuda:N"``), ``"mps"``, ``"auto"`` (CUDA, else MPS, else
CPU). Dtype: float64 by default; on MPS, which has no float64, float32 with a one-time warning;
asking for float64 on MPS is an error.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import Any

import numpy as np

from .compile_clock import compile_clock
from .errors import BackendError, ParameterError, warn

BACKENDS = ("numpy", "torch")
DEVICE_KINDS = ("cpu", "cuda", "mps")
DTYPES = ("float32", "float64")

_warned_mps_float32 = False


def torch_installed() -> bool:
    """Whether PyTorch can be imported (checked without importing it)."""
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None


def _torch() -> ModuleType:
    import torch

    return torch


def available_devices(backend: str = "torch") -> list[str]:
    """Devices usable with ``backend`` on this machine, in order of preference for "auto"."""
    if backend == "numpy":
        return ["cpu"]
    if backend != "torch":
        raise BackendError(f"backend={backend!r} is unknown: must be one of {BACKENDS}")
    if not torch_installed():
        return []
    torch = _torch()
    devices = []
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        devices += ["cuda"] + [f"cuda:{i}" for i in range(1, n)]
    if _mps_available():
        devices.append("mps")
    devices.append("cpu")
    return devices


def _mps_available() -> bool:
    torch = _torch()
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available_backends() -> dict[str, list[str]]:
    """Every usable backend with its devices, e.g. ``{"numpy": ["cpu"], "torch": [...]}``."""
    out = {"numpy": ["cpu"]}
    if torch_installed():
        out["torch"] = available_devices("torch")
    return out


def _describe_available() -> str:
    return "; ".join(f"{b}: {', '.join(d)}" for b, d in available_backends().items())


def _normalize_dtype(dtype: object) -> str | None:
    """"float32" or "float64" for a dtype given as NumPy understands it ("float" and
    ``float`` are float64, "single" and "f4" float32, ...) or as a torch dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, bool | int | float | complex | np.number | np.ndarray):
        raise BackendError(f"dtype={dtype!r:.80} is not supported: must be None, 'float32' "
                           "or 'float64' (a name or a NumPy/torch dtype, not a number)")
    text = str(dtype)
    try:
        with warnings.catch_warnings():   # (NumPy's deprecated aliases, e.g. "a")
            warnings.simplefilter("ignore", DeprecationWarning)
            name = np.dtype(text[len("torch."):] if text.startswith("torch.") else dtype).name
    except (TypeError, ValueError, SyntaxError):   # (NumPy parses "," as a record's fields)
        name = None
    if name not in DTYPES:
        raise BackendError(f"dtype={dtype!r} is not supported: must be None, 'float32' or "
                           "'float64' (or a NumPy/torch name of them, e.g. 'float' is float64)")
    return name


def _resolve_device(backend: str, device: str) -> str:
    if not isinstance(device, str):
        raise BackendError(f"device={device!r} is invalid: must be a string such as "
                           f"'cpu', 'cuda', 'mps' or 'auto'")
    kind = device.split(":")[0]
    if device != "auto" and kind not in DEVICE_KINDS:
        raise BackendError(f"device={device!r} is unknown: must be 'auto' or one of "
                           f"{DEVICE_KINDS}. Available here: {_describe_available()}")
    if backend == "numpy":
        if device in ("cpu", "auto"):
            return "cpu"
        raise BackendError(f"device={device!r} is not available for backend='numpy', which runs "
                           f"on the CPU only; use backend='torch' for accelerators. "
                           f"Available here: {_describe_available()}")
    if not torch_installed():
        raise BackendError("backend='torch' is not available: PyTorch is not installed "
                           "(pip install 'mfgwork[torch]'). Available here: "
                           + _describe_available())
    devices = available_devices("torch")
    if device == "auto":
        return devices[0]
    if device == "cuda:0":
        device = "cuda"
    if device not in devices:
        raise BackendError(f"device={device!r} is not available for backend='torch'. "
                           f"Available here: {_describe_available()}")
    return device


@dataclass(frozen=True)
class Backend:
    """An array library on one device with one floating dtype.

    ``emulate_mps=True`` runs torch on the CPU under the rules of the MPS path (float32 only,
    no host synchronisation inside time loops): the way MPS code is tested without Apple
    hardware.
    """

    name: str
    device: str
    dtype: str
    emulate_mps: bool = False
    _xp: Any = field(default=None, repr=False, compare=False)

    @property
    def xp(self) -> Any:
        """The array-API namespace of this backend (``array_api_compat.numpy`` or ``.torch``)."""
        if self._xp is None:
            if self.name == "numpy":
                import array_api_compat.numpy as xp
            else:
                import array_api_compat.torch as xp
            object.__setattr__(self, "_xp", xp)
        return self._xp

    @cached_property
    def kind(self) -> str:
        """"cpu", "cuda" or "mps" (the device without its index)."""
        return self.device.split(":")[0]

    @cached_property
    def is_accelerator(self) -> bool:
        """True on CUDA and MPS, and under MPS emulation: loops avoid host round trips."""
        return self.kind != "cpu" or self.emulate_mps

    @property
    def native_dtype(self) -> Any:
        if self.name == "numpy":
            return np.dtype(self.dtype)
        return getattr(_torch(), self.dtype)

    @property
    def native_device(self) -> Any:
        return None if self.name == "numpy" else _torch().device(self.device)

    @property
    def eps(self) -> float:
        """Machine epsilon of the working dtype."""
        return float(np.finfo(self.dtype).eps)

    def asarray(self, a: Any) -> Any:
        """``a`` (NumPy array, tensor, list or scalar) as an array of this backend."""
        if self.name == "numpy":
            return np.asarray(to_numpy(a), dtype=self.dtype)
        torch = _torch()
        if isinstance(a, torch.Tensor):
            return a.to(device=self.native_device, dtype=self.native_dtype)
        arr = np.ascontiguousarray(np.asarray(a, dtype=self.dtype))
        if not arr.flags.writeable:   # a result's read-only array: a tensor may not alias it
            arr = arr.copy()
        return torch.from_numpy(arr).to(self.native_device)

    def stack(self, arrays: Sequence[Any]) -> Any:
        """``arrays`` (each of one shape) stacked on a new leading axis as one array of this
        backend: stacked where they are and converted once when they share a namespace,
        device and dtype (e.g. the members' views of a float32 device batch), else each
        converted first."""
        if not len(arrays):
            raise ParameterError("arrays=[] is invalid: must hold at least one array")
        first = arrays[0]
        shapes = {tuple(np.shape(a)) for a in arrays}
        if len(shapes) > 1:
            raise ParameterError(f"arrays is invalid: its arrays have the shapes "
                                 f"{sorted(shapes)[:3]}; they must share one shape")
        kind = (type(first), getattr(first, "device", None), first.dtype)
        if all((type(a), getattr(a, "device", None), a.dtype) == kind for a in arrays):
            if isinstance(first, np.ndarray):
                return self.asarray(np.stack(arrays))
            if "torch" in sys.modules and isinstance(first, sys.modules["torch"].Tensor):
                return self.asarray(sys.modules["torch"].stack(list(arrays)))
        return self.xp.stack([self.asarray(a) for a in arrays])

    def zeros(self, shape: int | tuple[int, ...]) -> Any:
        return self.xp.zeros(shape, dtype=self.native_dtype, device=self.native_device)

    def linspace(self, start: float, stop: float, num: int) -> Any:
        """Grid points computed in float64 on the host, then moved: the same on every backend."""
        return self.asarray(np.linspace(start, stop, num))

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op on the CPU)."""
        if self.kind == "cuda":
            _torch().cuda.synchronize(self.native_device)
        elif self.kind == "mps":
            _torch().mps.synchronize()

    def empty_cache(self) -> None:
        """Release cached, unused device memory to the driver (a no-op on the CPU)."""
        if self.kind == "cuda":
            _torch().cuda.empty_cache()
        elif self.kind == "mps":
            _torch().mps.empty_cache()

    def timer(self) -> float:
        """A host clock reading taken after the device has finished its queued work."""
        self.synchronize()
        return time.perf_counter()

    def stamp(self) -> Any:
        """A point in this backend's work queue, taken without waiting: a timing event
        recorded on the current CUDA or MPS stream with the compile clock
        (:func:`.compile_clock.compile_clock`), the host clock on the CPU. :meth:`seconds`
        turns two stamps into the time between them."""
        if self.kind == "cuda":
            torch = _torch()
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.native_device))
            return event, compile_clock()
        if self.kind == "mps":
            event = _torch().mps.event.Event(enable_timing=True)
            event.record()
            return event, compile_clock()
        return time.perf_counter()

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        """Seconds from stamp ``start`` to stamp ``end`` (waits for ``end`` on a device),
        without the kernels Triton built in between (the queue waited for them)."""
        if isinstance(start, float):
            return end - start
        (first, compiled), (last, later) = start, end
        last.synchronize()
        return max(0.0, first.elapsed_time(last) / 1e3 - (later - compiled))


def get_backend(backend: str = "numpy", device: str = "cpu", dtype: object = None) -> Backend:
    """Resolve a backend name, a device and a dtype into a :class:`Backend`.

    Raises :class:`BackendError` listing what is available when the request cannot be met.
    """
    if isinstance(backend, Backend):
        return backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise BackendError(f"backend={backend!r:.80} is unknown: must be one of {BACKENDS}. "
                           f"Available here: {_describe_available()}")
    dt = _normalize_dtype(dtype)
    dev = _resolve_device(backend, device)
    if dev == "mps":
        if dt == "float64":
            raise BackendError("dtype='float64' is not supported on device='mps': the MPS "
                               "backend has no float64; use dtype='float32' or dtype=None")
        if dt is None:
            _warn_mps_float32()
            dt = "float32"
    return Backend(name=backend, device=dev, dtype=dt or "float64")


def mps_emulation() -> Backend:
    """Torch on the CPU following the MPS rules: float32 and no host round trips in loops."""
    if not torch_installed():
        raise BackendError("MPS emulation needs PyTorch, which is not installed")
    return Backend(name="torch", device="cpu", dtype="float32", emulate_mps=True)


def _warn_mps_float32() -> None:
    global _warned_mps_float32
    if not _warned_mps_float32:
        _warned_mps_float32 = True
        warn("MPS has no float64: computing in float32 (pass dtype='float32' to "
             "silence this warning)", UserWarning)


#: CUDA tensors of at least this many bytes come to the host through page-locked memory
#: (:func:`_from_cuda`).
STAGED_FROM = 1 << 24
#: Threads that copy a staged tensor into its NumPy array (at most the host's cores).
HOST_COPY_THREADS = 8


def to_numpy(a: Any, *, transient: bool = False) -> Any:
    """Any backend array (NumPy, torch on any device) as a NumPy array; other objects as given.
    ``transient``: the array is read and dropped soon (written to a store): a large CUDA
    tensor then comes as its page-locked copy itself (:func:`_from_cuda`), whose memory
    torch's caching host allocator takes back once the array is freed."""
    if isinstance(a, np.ndarray):
        return a
    if "torch" in sys.modules and isinstance(a, sys.modules["torch"].Tensor):
        a = a.detach()
        if a.device.type == "cuda" and a.numel() * a.element_size() >= STAGED_FROM:
            return _from_cuda(a, transient)
        return a.to("cpu").numpy()
    if isinstance(a, (list, tuple, float, int, np.generic)):
        return np.asarray(a)
    return a


def _from_cuda(a: Any, transient: bool = False) -> np.ndarray:
    """A large CUDA tensor as a new NumPy array: one copy into page-locked host memory
    (torch's caching host allocator keeps it for the next), then :func:`copy_in_threads`
    unless ``transient`` (the page-locked copy is returned: an H200 host copied 330 MB out of
    it in 25 ms). On an H100 host, 528 MB: 0.51 s by ``.cpu()`` (1.0 GB/s: the driver's copy
    through its own staging buffer into pages touched for the first time, on one thread),
    0.05 s so once the page-locked memory is allocated (its first allocation costs about as
    much as ``.cpu()``)."""
    torch = sys.modules["torch"]
    staged = torch.empty(a.shape, dtype=a.dtype, pin_memory=True)
    staged.copy_(a)
    return staged.numpy() if transient else copy_in_threads(staged.numpy())


def from_host(a: np.ndarray, device: Any) -> Any:
    """The host array ``a`` as a torch tensor on the CUDA ``device`` without waiting for the
    work queued there: copied into page-locked memory (torch's caching host allocator keeps
    it until the copy is done), then asynchronously (a copy from pageable memory first waits
    for the device's queue to drain)."""
    torch = _torch()
    return torch.from_numpy(np.require(a, requirements=["C", "W"])).pin_memory().to(
        device, non_blocking=True)


def copy_in_threads(source: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``source``, made by up to :data:`HOST_COPY_THREADS` threads on
    parts of it (NumPy releases the GIL while it copies; new pages are touched in parallel)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    out = np.empty(source.shape, dtype=source.dtype)
    flat_in, flat_out = np.ascontiguousarray(source).reshape(-1), out.reshape(-1)
    threads = max(1, min(HOST_COPY_THREADS, os.cpu_count() or 1, flat_in.size))
    bounds = np.linspace(0, flat_in.size, threads + 1).astype(np.int64)

    def copy(i: int) -> None:
        np.copyto(flat_out[bounds[i]:bounds[i + 1]], flat_in[bounds[i]:bounds[i + 1]])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(copy, range(threads)))
    return out


def from_numpy(a: Any, backend: Backend | str = "numpy", device: str = "cpu",
               dtype: object = None) -> Any:
    """A NumPy array (or array-like) as an array of the given backend, device and dtype."""
    return get_backend(backend, device, dtype).asarray(a)


def device_info(device: str = "cpu") -> dict[str, Any]:
    """Name, kind, count, availability and memory (bytes; None where not reported).

    Mirrors the PyTorch device APIs: ``memory_allocated``, ``memory_reserved`` and
    ``max_memory_allocated`` for CUDA; ``current_allocated_memory`` and
    ``driver_allocated_memory`` for MPS; for the CPU, the host's total memory.
    """
    kind = device.split(":")[0]
    info: dict[str, Any] = {"device": device, "kind": kind, "available": False, "count": 0,
                            "name": None, "memory_total": None, "memory_allocated": None,
                            "memory_reserved": None, "memory_peak": None}
    if kind == "cpu":
        import os
        import platform

        info.update(available=True, count=1, name=platform.processor() or platform.machine(),
                    cores=os.cpu_count())
        try:
            info["memory_total"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            pass
        return info
    if not torch_installed():
        return info
    torch = _torch()
    if kind == "cuda" and torch.cuda.is_available():
        idx = int(device.split(":")[1]) if ":" in device else 0
        props = torch.cuda.get_device_properties(idx)
        info.update(available=True, count=torch.cuda.device_count(), name=props.name,
                    memory_total=props.total_memory,
                    memory_allocated=torch.cuda.memory_allocated(idx),
                    memory_reserved=torch.cuda.memory_reserved(idx),
                    memory_peak=torch.cuda.max_memory_allocated(idx))
    elif kind == "mps" and _mps_available():
        info.update(available=True, count=1, name="Apple MPS",
                    memory_allocated=torch.mps.current_allocated_memory(),
                    memory_reserved=torch.mps.driver_allocated_memory())
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is not None:
            info["memory_total"] = recommended()
    return info
