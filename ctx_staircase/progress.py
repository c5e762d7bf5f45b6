"""Progress of long computations, reported from inside compiled programs.

A caller announces the work it starts with `expect` (steps x lanes); a compiled training scan
calls `device_tick` once per snapshot segment and lane with the segment's steps. Both reach
whatever sinks `expecting` and `reporting` have installed on the host (the CLI's progress bars),
and nothing when none is installed. The callback only reads integers of the carry, so the
numbers computed are the same with or without it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import jax

_sinks: list[Callable[[int], None]] = []
_expectations: list[Callable[[int], None]] = []
_lock = threading.Lock()


@contextlib.contextmanager
def _registered(
    registry: list[Callable[[int], None]], sink: Callable[[int], None]
) -> Iterator[None]:
    """Hold ``sink`` in ``registry`` inside the block (thread-safe)."""
    with _lock:
        registry.append(sink)
    try:
        yield
    finally:
        with _lock:
            registry.remove(sink)


def reporting(sink: Callable[[int], None]) -> contextlib.AbstractContextManager[None]:
    """Send every tick (a count of finished work items) to ``sink`` inside the block."""
    return _registered(_sinks, sink)


def expecting(sink: Callable[[int], None]) -> contextlib.AbstractContextManager[None]:
    """Send every announcement of upcoming work (`expect`) to ``sink`` inside the block."""
    return _registered(_expectations, sink)


def expect(count: int) -> None:
    """Announce ``count`` more work items (steps) before starting them, so bars know a total."""
    with _lock:
        sinks = list(_expectations)
    for sink in sinks:
        sink(count)


def tick(count: int = 1) -> None:
    """Report ``count`` finished work items to the installed sinks (host side)."""
    with _lock:
        sinks = list(_sinks)
    for sink in sinks:
        sink(count)


def device_tick(count: jax.Array, lane_value: jax.Array) -> None:
    """`tick` ``count`` (an integer array, e.g. the steps of a finished segment) from traced
    code; ``lane_value`` is any per-lane integer array, so a vmapped program ticks once per lane
    rather than once per batch."""
    jax.debug.callback(lambda n, _: tick(int(n)), count, lane_value)
