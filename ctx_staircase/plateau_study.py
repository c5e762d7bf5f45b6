"""The second escape predicted against training, lane by lane (theory/second_escape.md §6).

`compare_second_escape` trains the FFN by full-batch GD at lr 1 (``t`` = epoch, float64) on a
grid of ``gamma`` and seeds, reads each lane's collapse ``t_c`` and second escape ``t_1``, and
predicts ``t_1`` (`second_escape.predict_second_escape`: the plateau flow onto the plateau, the
split-unit flow off it) at two levels: **L1** from the training state at ``t_0 = t_c +
START_AFTER``, **L2** from the initial weights; and, as the ablation ``L1-S5``, L1 by the plateau
flow alone, which drops the deviations' feedback. Each lane's training path also gets its
log-amplitude ledger (`ledger.ledger`, theory/second_escape.md §8) from ``t_0`` to ``t_1``.
``ctx-staircase theory TASK --second-escape`` writes its `summary` into metrics.json under
``second_escape``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import ledger as lg
from ctx_staircase import progress, sweep, train
from ctx_staircase import second_escape as se
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.theory import Role, cost_account

__all__ = [
    "LEDGER_SAVES",
    "PLATEAU_LEVEL",
    "PlateauLedger",
    "SecondEscapeComparison",
    "compare_second_escape",
]

#: Snapshot spacing of the training runs (epochs).
_SNAPSHOT_EVERY = 10
#: The level of the ablation: L1's start with the plateau flow alone (eq. S5), which drops the
#: deviations' feedback on the prediction (theory/second_escape.md §6).
PLATEAU_LEVEL = "L1-S5"
#: What each level starts from: L1 (and its ablation) reads the training state at ``t0``; L2
#: starts from the initial weights.
_ROLES = {"L1": Role.REPLAY, "L2": Role.LAW, PLATEAU_LEVEL: Role.REPLAY}
#: The training ledger reads about this many snapshots over a lane's plateau (every one where
#: there are fewer): each read costs a gated drive per unit.
LEDGER_SAVES = 20


class PlateauLedger(NamedTuple):
    """Training's ledger (`ledger.ledger`) over one lane's plateau, from ``t_0 = t_c + 100``:
    its totals halfway to ``t_1`` (where the linear theory is meant to hold) and at ``t_1``; NaN
    where the lane has no plateau past ``t_0``."""

    t0: float
    half: lg.LedgerTotals
    whole: lg.LedgerTotals


class SecondEscapeComparison(NamedTuple):
    """Per lane: ``gamma``, ``seed``, the measured escape and the L1 and L2 predictions."""

    gamma: list[float]
    seed: list[int]
    measured: list[se.SecondEscape]
    level1: list[se.SecondEscape]
    level2: list[se.SecondEscape]
    level1_plateau: list[se.SecondEscape]  # empty unless asked for
    ledgers: list[PlateauLedger]
    seconds: dict[str, float]
    horizon: int

    def summary(self) -> dict:
        """The metrics.json record: lists over lanes, NaN where a path never escaped."""

        def times(paths, key):
            return [float(getattr(p, key)) for p in paths]

        rows = []
        levels = (("L1", self.level1), ("L2", self.level2), (PLATEAU_LEVEL, self.level1_plateau))
        for level, paths in levels[: 3 if self.level1_plateau else 2]:
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
                        "split_units": path.split,
                    }
                )
        numbers = {key: [row[key] for row in rows] for key in rows[0]}
        return {
            "level_rho0": se.LEVEL,
            "collapsed_rho0": se.COLLAPSED,
            "start_after_collapse": se.START_AFTER,
            **numbers,
            "t_collapse_measured": times(self.measured, "t_collapse"),
            "t_collapse_predicted_L2": times(self.level2, "t_collapse"),
            "ledger": {
                "t0": [book.t0 for book in self.ledgers],
                **{
                    f"{total}{suffix}": [
                        getattr(getattr(book, part), total) for book in self.ledgers
                    ]
                    for part, suffix in (("half", "_half"), ("whole", ""))
                    for total in lg.LedgerTotals._fields
                },
            },
            "seconds": self.seconds,
            "roles": {level: _ROLES[level].value for level in dict.fromkeys(numbers["level"])},
            "cost": self.cost(),
        }

    def cost_summary(self) -> dict:
        """An experiment record's account of what each level cost, as `theory.cost_account`
        saves it."""
        cost = self.cost()
        return cost_account(cost.pop("simulation"), cost, _ROLES)

    def cost(self) -> dict[str, float]:
        """Wall seconds, compilation included: ``simulation``, the training of every lane to
        the horizon, and each level's predictions of every lane. A replay's cost counts the
        training up to the state it reads: L1 (and its ablation) adds training's seconds times
        the mean share of the horizon that lies before its start ``t0``."""
        training = self.seconds["training"]
        horizon = self.horizon
        cost = {"simulation": training}
        for level, paths in (("L1", self.level1), ("L2", self.level2),
                             (PLATEAU_LEVEL, self.level1_plateau)):  # fmt: skip
            if level not in self.seconds:
                continue
            cost[level] = self.seconds[level]
            if _ROLES[level] is Role.REPLAY:
                starts = [p.t0 for p in paths if np.isfinite(p.t0)]
                cost[level] += training * (float(np.mean(starts)) / horizon if starts else 0.0)
        return cost


def compare_second_escape(
    ds: TokenDataset,
    *,
    gammas: Sequence[float],
    seeds: Sequence[int] = (0,),
    d: int = 128,
    activation: str = "relu",
    epochs: int = 3000,
    geometry: str = "numbers",
    ablation: bool = False,
) -> SecondEscapeComparison:
    """Train every (gamma, seed) lane and predict its second escape at levels L1 and L2 (and,
    with ``ablation``, L1 by the plateau flow alone), with the geometry read on
    ``ds.groups[geometry]`` (`second_escape.plateau_problem`)."""
    problem = se.plateau_problem(ds, activation, geometry)
    config = train.TrainConfig(
        optimizer="gd", lr=1.0, steps=epochs, snapshots=tuple(range(0, epochs + 1, _SNAPSHOT_EVERY))
    )
    seconds = {"training": 0.0, "L1": 0.0, "L2": 0.0}
    lanes = dict(
        gamma=[], seed=[], measured=[], level1=[], level2=[], level1_plateau=[], ledgers=[]
    )
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
                for key, value in _lane(result, lane, problem, epochs, seconds, ablation).items():
                    lanes[key].append(value)
    return SecondEscapeComparison(**lanes, seconds=seconds, horizon=epochs)


def _lane(result, lane: int, problem, epochs: int, seconds: dict, ablation: bool) -> dict:
    """The measured escape of one trained lane, its L1 and L2 predictions and, with
    ``ablation``, L1 by the plateau flow alone (each timed)."""
    steps = np.asarray(result.trajectory.steps[lane], np.float64)
    W_E, W_U = np.asarray(result.trajectory.W_E[lane]), np.asarray(result.trajectory.W_U[lane])
    truth = se.measured_second_escape(steps, W_E, problem, W_U)
    predictions = {}
    if np.isfinite(truth.t_collapse):
        i = int(np.argmin(np.abs(steps - (truth.t_collapse + se.START_AFTER))))
        starts = {"L1": (i, "split"), "L2": (0, "split")}
        if ablation:
            starts[PLATEAU_LEVEL] = (i, "plateau")
    else:  # no plateau to start L1 from
        starts = {"L2": (0, "split")}
        missing = truth._replace(t1=np.nan, k=-1, rate=np.nan)
        predictions["L1"] = missing
        if ablation:
            predictions[PLATEAU_LEVEL] = missing
    progress.expect(len(starts) * epochs)  # the predictions, in epochs of flow
    for level, (i, law) in starts.items():
        start = time.perf_counter()
        predictions[level] = se.predict_second_escape(
            W_E[i], W_U[i], problem, t0=steps[i], horizon=epochs, law=law
        )
        seconds[level] = seconds.get(level, 0.0) + time.perf_counter() - start
        progress.tick(epochs)
    start = time.perf_counter()
    book = _training_ledger(steps, W_E, W_U, problem, truth)
    seconds["ledger"] = seconds.get("ledger", 0.0) + time.perf_counter() - start
    lane = dict(measured=truth, level1=predictions["L1"], level2=predictions["L2"], ledgers=book)
    return lane | ({"level1_plateau": predictions[PLATEAU_LEVEL]} if ablation else {})


def _training_ledger(steps, W_E, W_U, problem, truth: se.SecondEscape) -> PlateauLedger:
    """The `PlateauLedger` of a trained lane, from ``t_0`` to ``t_1`` at about `LEDGER_SAVES`
    evenly spaced snapshots."""
    t0 = truth.t_collapse + se.START_AFTER
    nan = lg.LedgerTotals(np.nan, np.nan, np.nan, np.nan)
    saves = np.flatnonzero((steps >= t0) & (steps <= truth.t1))
    saves = saves[:: max(1, saves.size // LEDGER_SAVES)]
    if saves.size < 3:  # no escape, or too short a plateau past t_0 to halve
        return PlateauLedger(float(t0), nan, nan)
    book = lg.ledger(steps[saves], W_E[saves], W_U[saves], problem)
    halfway = lg.totals(book, 0.5 * (book.ts[0] + truth.t1))
    return PlateauLedger(float(book.ts[0]), halfway, lg.totals(book, book.ts[-1]))
