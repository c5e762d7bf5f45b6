"""Progress sinks: `progress.reporting` gets the ticks, `progress.expecting` the announcements,
each only inside its block (also when the block raises)."""

import pytest

from ctx_staircase import progress


def test_ticks_and_expectations_reach_only_their_own_sinks_inside_the_block():
    ticks, expected = [], []
    progress.tick(5)  # nobody listens: dropped
    with progress.reporting(ticks.append), progress.expecting(expected.append):
        progress.tick()
        progress.tick(3)
        progress.expect(40)
    progress.tick(7)
    progress.expect(9)
    assert ticks == [1, 3] and expected == [40]


def test_nested_sinks_all_receive_and_leave_even_when_the_block_raises():
    outer, inner = [], []
    with progress.reporting(outer.append):
        with pytest.raises(RuntimeError), progress.reporting(inner.append):
            progress.tick(2)
            raise RuntimeError
        progress.tick(4)
    progress.tick(8)
    assert outer == [2, 4] and inner == [2]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_log_writes_each_tenth_each_stage_and_a_heartbeat():
    lines, clock = [], _Clock()
    log = progress.PlainLog("training", lines.append, clock=clock, every=30.0)
    log.expect(1000)
    for _ in range(100):  # 10 steps at a time, 0.1 s each
        clock.now += 0.1
        log.advance(10)
    assert len(lines) == 10  # one per tenth, none in between
    assert lines[0] == "training: 100/1000 (10%), 0m01s elapsed, ETA 0m09s"
    assert "\x1b" not in "".join(lines)
    log.describe("measuring")
    assert lines[-1].startswith("measuring: 1000/1000 (100%)")
    clock.now += 29.0
    log.beat()
    assert len(lines) == 11  # under 30 s since the last line: quiet
    clock.now += 1.0
    log.beat()
    assert len(lines) == 12 and lines[-1].startswith("measuring:")
    log.finish()
    assert lines[-1].endswith("done")


def test_plain_log_receives_the_ticks_of_its_block():
    lines = []
    with progress.plain_log("work", lines.append) as log:
        progress.expect(4)
        for _ in range(4):
            progress.tick()
    assert log.done == 4 and log.total == 4
    assert lines[0].startswith("work: 1/4 (25%)")
    assert lines[-1].startswith("work: 4/4 (100%)") and lines[-1].endswith("done")


def test_redirected_train_logs_plain_progress_lines(tmp_path):
    import re
    import subprocess
    import sys

    argv = [
        sys.executable, "-m", "ctx_staircase", "train", "add", "--param", "N=8", "--d", "8",
        "--steps", "3000", "--probe-snapshots", "0", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stderr
    lines = re.findall(r"^training lanes.*: (\d+)/(\d+) \(\d+%\), .* elapsed, ", done.stderr, re.M)
    assert len(lines) >= 3, done.stderr
    assert {total for _, total in lines} == {"3000"}


def test_plain_log_writes_nothing_for_a_block_that_fails_at_once():
    lines = []
    with pytest.raises(ValueError), progress.plain_log("work", lines.append):
        raise ValueError("a refused input")
    assert lines == []


def test_plain_log_clock_reads_hours_minutes_and_seconds():
    """Elapsed time and the ETA past an hour: ``1h02m05s``, minutes below 60."""
    lines, clock = [], _Clock()
    log = progress.PlainLog("long", lines.append, clock=clock, every=1e9, fraction=0.5)
    log.expect(4)
    clock.now += 3725.0  # 1 h 2 min 5 s
    log.advance(2)  # half done: the ETA is the elapsed time again
    assert lines[-1] == "long: 2/4 (50%), 1h02m05s elapsed, ETA 1h02m05s"
    clock.now += 7322.0
    log.finish()
    assert lines[-1] == "long: 2/4 (50%), 3h04m07s elapsed, done"
