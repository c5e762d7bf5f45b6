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
