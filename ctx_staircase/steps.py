"""A step of the staircase, measured: when the embedding leaves the order-0 geometry, and whether
that time survives the gradient-flow limit (theory/steps.md).

The **step** of a lane is read on its ``rho_0(t)``, the alignment of ``S^emb`` with the order-0
signature geometry (`geometry.alignment_curves`; ``1 − MSE`` where that geometry is constant, as on
the collapse tasks). The lane is *ready* at ``t_ready``, the first time ``rho_0 >= READY`` (the
order-0 step has been taken); its next step is at ``t_step``, the first time after ``t_ready``
from which ``rho_0`` stays more than ``DROP`` below its running maximum to the end of the run
(eq. T1). On the collapse tasks, where the maximum is 1, that is the second escape's level
``rho_0 < 0.9`` (theory/second_escape.md §6).

A step **exists in the flow limit** when GD at ``lr`` and at ``lr / 4`` both take it within the
horizon (in flow time ``t = lr * step``) and their times agree within `AGREE` (eq. T2).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from ctx_staircase.internal import check_real

__all__ = [
    "AGREE",
    "DROP",
    "READY",
    "Existence",
    "StepTime",
    "existence",
    "step_time",
]

#: rho_0 at which the order-0 step counts as taken.
READY = 0.9
#: How far below its running maximum rho_0 must fall, for good, to count as the next step.
DROP = 0.1
#: The largest relative difference of the step times at lr and lr / 4 for a step that exists.
AGREE = 0.05


class StepTime(NamedTuple):
    """One lane's ``t_ready`` and ``t_step`` (flow time; NaN: not reached within the run)."""

    t_ready: float
    t_step: float


class Existence(enum.Enum):
    """Whether a step is a gradient-flow phenomenon (eq. T2)."""

    EXISTS = "exists"  # both step sizes take it, within AGREE of each other
    STEP_SIZE = "step-size effect"  # it moves by more than AGREE, or only the larger lr takes it
    ABSENT = "absent"  # neither step size takes it within the horizon
    NOT_TESTED = "not tested"  # a run never reached the order-0 geometry, or diverged


def step_time(ts, rho0, *, ready: float = READY, drop: float = DROP) -> StepTime:
    """`StepTime` of ``rho0 [S]`` at the times ``ts [S]`` (increasing; eq. T1).

    ``t_step`` is interpolated linearly between the saves around the crossing of
    ``rho_0 = max_{s <= t} rho_0(s) − drop``.
    """
    ts, rho0 = np.asarray(ts, np.float64), np.asarray(rho0, np.float64)
    if ts.ndim != 1 or ts.shape != rho0.shape or ts.size < 2:
        raise ValueError(
            f"ts and rho0 must be 1-D of one length >= 2; got {ts.shape} and {rho0.shape}"
        )
    if not np.all(np.diff(ts) > 0):
        raise ValueError("ts must be strictly increasing")
    check_real(ready, "ready", low=-1.0, high=1.0)
    check_real(drop, "drop", low=0.0, low_open=True)
    reached = np.flatnonzero(rho0 >= ready)
    if not reached.size:
        return StepTime(np.nan, np.nan)
    first = reached[0]
    margin = rho0 - (np.maximum.accumulate(np.nan_to_num(rho0, nan=-np.inf)) - drop)
    below = (margin <= 0) | np.isnan(rho0)
    below[: first + 1] = False
    for_good = np.flip(np.logical_and.accumulate(np.flip(below)))
    if not for_good.any():
        return StepTime(float(ts[first]), np.nan)
    j = int(np.flatnonzero(for_good)[0])
    before, after = margin[j - 1], margin[j]
    if np.isnan(after) or after >= before:
        return StepTime(float(ts[first]), float(ts[j]))
    share = before / (before - after)
    return StepTime(float(ts[first]), float(ts[j - 1] + share * (ts[j] - ts[j - 1])))


def existence(coarse: StepTime, fine: StepTime, *, agree: float = AGREE) -> Existence:
    """The `Existence` of a step from its times at ``lr`` (``coarse``) and ``lr / 4`` (``fine``)
    (eq. T2)."""
    check_real(agree, "agree", low=0.0, low_open=True)
    if np.isnan(coarse.t_ready) or np.isnan(fine.t_ready):
        return Existence.NOT_TESTED
    if np.isnan(fine.t_step):
        return Existence.ABSENT if np.isnan(coarse.t_step) else Existence.STEP_SIZE
    if np.isnan(coarse.t_step):
        return Existence.STEP_SIZE
    close = abs(coarse.t_step / fine.t_step - 1) <= agree
    return Existence.EXISTS if close else Existence.STEP_SIZE
