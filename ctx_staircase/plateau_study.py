"""The second escape predicted against training, lane by lane (theory/second_escape.md §6).

`compare_second_escape` trains the FFN by full-batch GD at lr 1 (``t`` = epoch, float64) on a
grid of ``gamma`` and seeds, reads each lane's collapse ``t_c`` and second escape ``t_1``, and
predicts ``t_1`` by the plateau flow at two levels: **L1** from the training state at
``t_0 = t_c + START_AFTER``, **L2** from the initial weights. ``ctx-staircase theory TASK
--second-escape`` writes its `summary` into metrics.json under ``second_escape``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import progress, sweep, train
from ctx_staircase import second_escape as se
from ctx_staircase.dataset import TokenDataset

#: Snapshot spacing of the training runs (epochs).
SNAPSHOT_EVERY = 10


class SecondEscapeComparison(NamedTuple):
    """Per lane: ``gamma``, ``seed``, the measured escape and the L1 and L2 predictions."""

    gamma: list[float]
    seed: list[int]
    measured: list[se.SecondEscape]
    level1: list[se.SecondEscape]
    level2: list[se.SecondEscape]
    seconds: dict[str, float]

    def summary(self) -> dict:
        """The metrics.json record: lists over lanes, NaN where a path never escaped."""

        def times(paths, key):
            return [float(getattr(p, key)) for p in paths]

        rows = []
        for level, paths in (("L1", self.level1), ("L2", self.level2)):
            for lane, (path, truth) in enumerate(zip(paths, self.measured, strict=True)):
                length = truth.t1 - path.t0
                rows.append(
                    {
                        "gamma": self.gamma[lane],
                        "seed": self.seed[lane],
                        "level": level,
                        "t0": path.t0,
                        "t1_predicted": path.t1,
                        "t1_measured": truth.t1,
                        "ratio": (path.t1 - path.t0) / length if length > 0 else float("nan"),
                        "k_predicted": path.k,
                        "k_measured": truth.k,
                        "rate_predicted": path.rate,
                        "rate_measured": truth.rate,
                    }
                )
        return {
            "level_rho0": se.LEVEL,
            "collapsed_rho0": se.COLLAPSED,
            "start_after_collapse": se.START_AFTER,
            **{key: [row[key] for row in rows] for key in rows[0]},
            "t_collapse_measured": times(self.measured, "t_collapse"),
            "t_collapse_predicted_L2": times(self.level2, "t_collapse"),
            "seconds": self.seconds,
        }


def compare_second_escape(
    ds: TokenDataset,
    *,
    gammas: Sequence[float],
    seeds: Sequence[int] = (0,),
    d: int = 128,
    activation: str = "relu",
    epochs: int = 3000,
    geometry: str = "numbers",
) -> SecondEscapeComparison:
    """Train every (gamma, seed) lane and predict its second escape at levels L1 and L2, with
    the geometry read on ``ds.groups[geometry]`` (`second_escape.plateau_problem`)."""
    problem = se.plateau_problem(ds, activation, geometry)
    config = train.TrainConfig(
        optimizer="gd", lr=1.0, steps=epochs, snapshots=tuple(range(0, epochs + 1, SNAPSHOT_EVERY))
    )
    seconds = dict(training=0.0, L1=0.0, L2=0.0)
    lanes = dict(gamma=[], seed=[], measured=[], level1=[], level2=[])
    with jax.enable_x64(True):
        for gamma in gammas:  # one gamma at a time: the snapshots of a whole grid are large
            start = time.perf_counter()
            result = sweep.train_sweep(
                "ffn",
                ds,
                config,
                gammas=[gamma],
                seeds=seeds,
                d=d,
                activation=activation,
                dtype=jnp.float64,
            )
            seconds["training"] += time.perf_counter() - start
            for lane in range(len(result.gamma)):
                lanes["gamma"].append(float(result.gamma[lane]))
                lanes["seed"].append(int(result.seed[lane]))
                for key, value in _lane(result, lane, problem, epochs, seconds).items():
                    lanes[key].append(value)
    return SecondEscapeComparison(**lanes, seconds=seconds)


def _lane(result, lane: int, problem, epochs: int, seconds: dict) -> dict:
    """The measured escape of one trained lane and its L1 and L2 predictions (timed)."""
    steps = np.asarray(result.trajectory.steps[lane], np.float64)
    W_E, W_U = np.asarray(result.trajectory.W_E[lane]), np.asarray(result.trajectory.W_U[lane])
    truth = se.measured_second_escape(steps, W_E, problem, W_U)
    progress.expect(2 * epochs)  # the two predictions, in epochs of the plateau flow
    start = time.perf_counter()
    if np.isfinite(truth.t_collapse):
        i = int(np.argmin(np.abs(steps - (truth.t_collapse + se.START_AFTER))))
        level1 = se.predict_second_escape(W_E[i], W_U[i], problem, t0=steps[i], horizon=epochs)
    else:  # no plateau to start from
        level1 = truth._replace(t1=np.nan, k=-1, rate=np.nan)
    seconds["L1"] += time.perf_counter() - start
    progress.tick(epochs)
    start = time.perf_counter()
    level2 = se.predict_second_escape(W_E[0], W_U[0], problem, horizon=epochs)
    seconds["L2"] += time.perf_counter() - start
    progress.tick(epochs)
    return dict(measured=truth, level1=level1, level2=level2)
