"""The step of the staircase and its flow limit (ctx_staircase/steps.py, theory/steps.md)."""

import numpy as np
import pytest

from ctx_staircase import steps
from ctx_staircase.steps import Existence, StepTime


def _curve(ts, *, dip=None):
    """rho_0 rising to 1 by t = 10, flat, then falling linearly from t = 100 to 0.5 at t = 200;
    ``dip = (start, end)`` adds a transient fall to 0.7 that recovers."""
    rho = np.where(ts < 10, ts / 10, 1.0)
    rho = np.where(ts > 100, 1.0 - 0.5 * np.minimum(ts - 100, 100) / 100, rho)
    if dip is not None:
        rho = np.where((ts > dip[0]) & (ts < dip[1]), 0.7, rho)
    return rho


def test_the_step_is_where_rho0_falls_drop_below_its_running_maximum_for_good():
    """rho_0 = 1 − 0.5 (t − 100) / 100 crosses 0.9 at t = 120 exactly (linear between saves 7
    apart); it was ready (>= 0.9) at the first save with t >= 9."""
    ts = np.arange(0.0, 301.0, 7.0)
    found = steps.step_time(ts, _curve(ts))
    assert found.t_ready == 14.0
    assert found.t_step == pytest.approx(120.0, abs=1e-9)


def test_a_dip_that_recovers_is_not_the_step():
    """A fall to 0.7 between t = 40 and 60 that comes back to 1 does not count: the step is
    still the fall that lasts, at t = 120."""
    ts = np.arange(0.0, 301.0, 5.0)
    found = steps.step_time(ts, _curve(ts, dip=(40, 60)))
    assert found.t_step == pytest.approx(120.0, abs=1e-9)


def test_the_level_follows_the_running_maximum():
    """A curve that peaks at 0.95 steps when it falls below 0.85, not 0.9: a plateau at 0.95
    falling as 0.95 − (t − 100) / 100 crosses 0.85 at t = 110."""
    ts = np.arange(0.0, 301.0, 2.0)
    rho = np.where(ts > 100, 0.95 - (ts - 100) / 100, np.minimum(ts / 10, 0.95))
    assert steps.step_time(ts, rho).t_step == pytest.approx(110.0, abs=1e-9)


def test_a_run_that_never_reaches_the_order0_geometry_has_neither_time():
    ts = np.arange(0.0, 100.0)
    assert np.isnan(steps.step_time(ts, np.full(ts.shape, 0.5))).all()
    ready = steps.step_time(ts, np.ones(ts.shape))
    assert ready.t_ready == 0.0 and np.isnan(ready.t_step)


@pytest.mark.parametrize(
    "coarse, fine, expected",
    [
        ((10.0, 100.0), (10.0, 104.0), Existence.EXISTS),
        ((10.0, 100.0), (10.0, 106.0), Existence.STEP_SIZE),
        ((10.0, 100.0), (10.0, np.nan), Existence.STEP_SIZE),
        ((10.0, np.nan), (10.0, 100.0), Existence.STEP_SIZE),
        ((10.0, np.nan), (10.0, np.nan), Existence.ABSENT),
        ((np.nan, np.nan), (10.0, 100.0), Existence.NOT_TESTED),
    ],
)
def test_a_step_exists_where_lr_and_a_quarter_of_it_agree_within_five_percent(
    coarse, fine, expected
):
    assert steps.existence(StepTime(*coarse), StepTime(*fine)) is expected


@pytest.mark.parametrize(
    "ts, rho, message",
    [
        (np.arange(3.0), np.ones(2), "one length"),
        (np.array([0.0, 2.0, 1.0]), np.ones(3), "strictly increasing"),
    ],
)
def test_bad_curves_are_refused(ts, rho, message):
    with pytest.raises(ValueError, match=message):
        steps.step_time(ts, rho)


def test_bad_levels_are_refused():
    ts = np.arange(3.0)
    with pytest.raises(ValueError, match="drop"):
        steps.step_time(ts, np.ones(3), drop=0.0)
    with pytest.raises(ValueError, match="ready"):
        steps.step_time(ts, np.ones(3), ready=float("nan"))
    with pytest.raises(ValueError, match="agree"):
        steps.existence(StepTime(0.0, 1.0), StepTime(0.0, 1.0), agree=-1.0)
