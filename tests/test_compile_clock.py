"""Triton's builds are timed apart: the compile clock sums the builds its compilation
listener reports (not the loads of cached builds), chained to a listener already set; device
phases (stamps) and host phases (``book_phase``) leave the builds out and book them as
``compile``, so that the parts still add up to the total."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from mfgwork.core import compile_clock as clock
from mfgwork.core.backend import Backend


@pytest.fixture
def fake_triton(monkeypatch):
    """A Triton module whose compilation knobs hold a listener already (recording calls)."""
    calls = []
    knobs = SimpleNamespace(compilation=SimpleNamespace(
        listener=lambda **kwargs: calls.append(kwargs["cache_hit"])))
    monkeypatch.setitem(sys.modules, "triton", SimpleNamespace(knobs=knobs))
    monkeypatch.setattr(clock, "_STATE", {"seconds": 0.0, "watching": False})
    return knobs.compilation, calls


def _report(compilation, microseconds: int, cache_hit: bool) -> None:
    compilation.listener(src=None, metadata={}, metadata_group={}, cache_hit=cache_hit,
                         times=SimpleNamespace(total=microseconds))


def test_the_clock_sums_builds_not_cache_loads_and_keeps_the_listener_before(fake_triton):
    compilation, calls = fake_triton
    assert clock.compile_clock() == 0.0          # (the first reading sets the listener)
    _report(compilation, 2_500_000, cache_hit=False)
    _report(compilation, 9_000_000, cache_hit=True)
    _report(compilation, 500_000, cache_hit=False)
    assert clock.compile_clock() == pytest.approx(3.0)
    assert calls == [False, True, False]


def test_without_triton_or_its_listener_the_clock_stays_at_zero(monkeypatch):
    monkeypatch.setattr(clock, "_STATE", {"seconds": 0.0, "watching": False})
    monkeypatch.setitem(sys.modules, "triton", SimpleNamespace(knobs=SimpleNamespace()))
    assert clock.compile_clock() == 0.0 and clock._STATE["watching"]


class _Event:
    """A device timing event at host time ``t`` (seconds)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: _Event) -> float:
        return (other.t - self.t) * 1e3   # milliseconds, as torch's events


def test_device_phases_leave_out_the_builds_between_their_stamps():
    assert Backend.seconds((_Event(0.0), 1.0), (_Event(5.0), 4.0)) == pytest.approx(2.0)
    assert Backend.seconds((_Event(0.0), 0.0), (_Event(1.0), 0.0)) == pytest.approx(1.0)
    assert Backend.seconds((_Event(0.0), 0.0), (_Event(1.0), 3.0)) == 0.0   # (overlapped)
    assert Backend.seconds(1.0, 1.5) == pytest.approx(0.5)                  # the CPU's clock


def test_a_host_phase_books_its_builds_as_compile_and_the_parts_add_up(fake_triton,
                                                                        monkeypatch):
    compilation, _ = fake_triton
    now = iter([10.0])
    monkeypatch.setattr(clock.time, "perf_counter", lambda: next(now))
    built = clock.compile_clock()
    _report(compilation, 3_000_000, cache_hit=False)
    timings = {"compile": 0.5, "setup": 1.0, "total": 1.5}
    clock.book_phase(timings, "certify", 4.0, built)   # 6 s since, of which 3 s building
    assert timings["certify"] == pytest.approx(3.0)
    assert timings["compile"] == pytest.approx(3.5)
    assert timings["total"] == pytest.approx(sum(v for k, v in timings.items()
                                                 if k != "total"))
