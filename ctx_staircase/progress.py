"""Progress of long computations, reported from inside compiled programs.

A caller announces the work it starts with `expect` (steps x lanes); a compiled training scan
calls `device_tick` once per snapshot segment and lane with the segment's steps. Both reach
whatever sinks `expecting` and `reporting` have installed on the host (the CLI's progress bars),
and nothing when none is installed. The callback only reads integers of the carry, so the
numbers computed are the same with or without it.

`plain_log` is the sink for a batch job whose stderr is a file: plain lines, no escape codes, at
a steady pace (each tenth of the work, at least every 30 s, and at every stage).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

import jax

__all__ = [
    "PlainLog",
    "device_tick",
    "expect",
    "expecting",
    "plain_log",
    "reporting",
    "tick",
]

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


class PlainLog:
    """Progress as plain lines, for a log file: ``STAGE: DONE/TOTAL (P%), T elapsed, ETA E``.

    A line comes when the work crosses each ``fraction`` of its total, when ``every`` seconds
    have passed since the last line (`beat`, called by `plain_log`'s clock thread, also when no
    work finishes), and at each new stage (`describe`). ``write`` takes one line; ``clock``
    gives seconds (both injectable for tests).
    """

    def __init__(
        self,
        stage: str,
        write: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        every: float = 30.0,
        fraction: float = 0.1,
    ) -> None:
        self.stage, self.write, self.clock = stage, write, clock
        self.every, self.fraction = every, fraction
        self.total = self.done = 0
        self.start = self.last = clock()
        self.mark = fraction  # the next fraction of the total that gets a line
        self.lock = threading.Lock()

    def expect(self, count: int) -> None:
        with self.lock:
            self.total += int(count)

    def advance(self, count: int) -> None:
        with self.lock:
            self.done += int(count)
            crossed = self.total > 0 and self.done >= self.mark * self.total
            while self.total > 0 and self.done >= self.mark * self.total and self.mark <= 1:
                self.mark += self.fraction
            if crossed or self.clock() - self.last >= self.every:
                self._line()

    def describe(self, stage: str) -> None:
        with self.lock:
            self.stage = stage
            self._line()

    def beat(self) -> None:
        with self.lock:
            if self.clock() - self.last >= self.every:
                self._line()

    def finish(self) -> None:
        with self.lock:
            self._line(final=True)

    def _line(self, final: bool = False) -> None:
        now = self.clock()
        self.last = now
        elapsed = now - self.start
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        if final:
            tail = "done"
        elif self.total and 0 < self.done < self.total:
            tail = f"ETA {_clock_text(elapsed * (self.total - self.done) / self.done)}"
        else:
            tail = "ETA unknown"
        self.write(f"{self.stage}: {count}{share}, {_clock_text(elapsed)} elapsed, {tail}")


@contextlib.contextmanager
def plain_log(
    stage: str, write: Callable[[str], None] | None = None, every: float = 30.0
) -> Iterator[PlainLog]:
    """Inside the block, the ticks and announcements feed a `PlainLog` (lines to stderr by
    default) with a clock thread that writes a line every ``every`` seconds without one; a
    last line when the block ends (none when it raises)."""
    log = PlainLog(stage, write or _stderr_line, every=every)
    stop = threading.Event()

    def clock() -> None:
        while not stop.wait(min(every, 1.0)):
            log.beat()

    thread = threading.Thread(target=clock, daemon=True)
    thread.start()
    try:
        with reporting(log.advance), expecting(log.expect):
            yield log
    finally:  # a block that fails (a refused input) leaves its one error line alone
        stop.set()
        thread.join()
    log.finish()


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _clock_text(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"
