"""Progress counts beyond their easiest case (`progress`): ticks from several vmapped lanes,
several announcements, advances that jump over several tenths, and several sinks at once."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ctx_staircase import progress


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_device_tick_in_a_vmapped_program_ticks_each_lane_its_count():
    """A jitted vmap over 3 lanes whose lanes each call `device_tick(5, lane)` ticks 5 three
    times: 15 work items."""

    def lane(value):
        progress.device_tick(jnp.asarray(5, jnp.int32), value)
        return value + 1

    ticks = []
    with progress.reporting(ticks.append):
        out = jax.block_until_ready(jax.jit(jax.vmap(lane))(jnp.arange(3, dtype=jnp.int32)))
    assert out.tolist() == [1, 2, 3]
    assert ticks == [5, 5, 5]


def test_plain_log_totals_every_announcement():
    """Two announcements, 600 then 400 items, make a total of 1000 in the log's lines."""
    lines, clock = [], _Clock()
    log = progress.PlainLog("work", lines.append, clock=clock)
    log.expect(600)
    log.expect(400)
    assert log.total == 1000
    clock.now += 1.0
    log.advance(100)
    assert lines == ["work: 100/1000 (10%), 0m01s elapsed, ETA 0m09s"]


def test_plain_log_after_a_jump_over_several_tenths_waits_for_the_next_tenth():
    """An advance from 0 to 50% writes one line; the advances after it write none until 60%."""
    lines, clock = [], _Clock()
    log = progress.PlainLog("work", lines.append, clock=clock, every=1e9)
    log.expect(1000)
    log.advance(500)
    assert len(lines) == 1 and lines[0].startswith("work: 500/1000 (50%)")
    for _ in range(9):  # 510 .. 590: inside the tenth already reported
        log.advance(10)
    assert len(lines) == 1
    log.advance(10)  # 600: the next tenth
    assert len(lines) == 2 and lines[1].startswith("work: 600/1000 (60%)")


def test_every_installed_sink_receives_every_tick_and_announcement():
    """Two reporting and two expecting sinks each receive every tick and every announcement."""
    a, b, c, d = [], [], [], []
    with progress.reporting(a.append), progress.reporting(b.append):
        with progress.expecting(c.append), progress.expecting(d.append):
            progress.expect(7)
            progress.tick(2)
            progress.tick(3)
    assert a == b == [2, 3] and c == d == [7]


def test_plain_log_advance_writes_a_line_once_every_seconds_have_passed_within_a_tenth():
    """Advances inside one tenth write nothing for 29 s, then a line at 30 s since the last."""
    lines, clock = [], _Clock()
    log = progress.PlainLog("work", lines.append, clock=clock, every=30.0)
    log.expect(1000)
    log.advance(100)  # the first tenth: a line at t = 0
    for _ in range(29):
        clock.now += 1.0
        log.advance(1)
    assert len(lines) == 1
    clock.now += 1.0
    log.advance(1)
    assert len(lines) == 2 and lines[1].startswith("work: 130/1000 (13%), 0m30s elapsed")
