"""The end of the collapse plateau: the second escape predicted against training.

Beyond the paper (theory/second_escape.md). On ``mod`` the number embeddings collapse onto one
direction and stay there for hundreds of epochs; the second step of the staircase is the escape
from that plateau, carried by the hidden units whose ReLU gates split the samples. The
split-unit flow (eq. S6) predicts it at two levels: **L1** from the training state at
``t_0 = t_c + 100`` (a replay, kept as a diagnostic; ablation L1-S5: the plateau flow alone) and
**L2** from the initial weights through the plateau flow (eq. S5) (a law).

Runs an FFN, ReLU, d = 128, full-batch GD at lr 1, float64, ``V = 2 V_min``, 3000 epochs, gamma
in {1.0, 1.1, 1.2, 1.4}, seeds 0–4, on ``mod`` N = 40, Task 4 (``n_x = 20``, ``n_a = 10``) and
``modulus`` N = 40, M = 4; held out (`HELD_OUT`): ``mod`` N = 32, Task 4 ``n_x = 16, n_a = 12``,
``modulus`` N = 32, M = 5, seeds 0–2. ``tiny`` (`TINY`): ``mod`` N = 20, d = 32, gamma = 1,
seeds 0 and 1, 300 epochs.

Measures ``t_1``, the first time after the collapse that rho_0 < 0.9 (`second_escape.LEVEL`).
Claims (kind "beyond", each with its null, `common.scored`): L1's ratio, L2's remaining plateau
and gamma-slope, the escaping Fourier k, the log-amplitude ledger, no second escape under
sigma = z + z²/2. Writes the figure ``escape``. Scores, criteria and nulls:
theory/experiments.md, second_plateau.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ctx_staircase import plateau_study, plots
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import scored
from ctx_staircase.experiments.regime import PRIMARY

#: (name, task, parameters, geometry group)
TASKS = (
    ("mod N=40", "mod", {"N": 40}, "numbers"),
    ("Task 4", "task4", {}, "anchors"),
    ("modulus N=40 M=4", "modulus", {"N": 40, "M": 4}, "numbers"),
)
#: Held-out configurations, fixed (and committed) before the law was ever compared on them: sizes
#: and a modulus never used while the law was developed; gamma as above, seeds 0-2.
HELD_OUT = (
    ("mod N=32", "mod", {"N": 32}, "numbers"),
    ("Task 4 n_x=16 n_a=12", "task4", {"n_x": 16, "n_a": 12}, "anchors"),
    ("modulus N=32 M=5", "modulus", {"N": 32, "M": 5}, "numbers"),
)
HELD_OUT_SEEDS = (0, 1, 2)
GAMMAS = (1.0, 1.1, 1.2, 1.4)
SEEDS = (0, 1, 2, 3, 4)
EPOCHS, D = 3000, 128
L1_TOLERANCE, L2_TOLERANCE, SLOPE_TOLERANCE, LEDGER_TOLERANCE, SHARE = 0.20, 0.10, 0.10, 0.10, 0.90
SMOOTH = "poly:1,0.5"
SIZES = dict(
    tasks=TASKS,
    gammas=GAMMAS,
    seeds=SEEDS,
    epochs=EPOCHS,
    d=D,
    held_out=HELD_OUT,
    held_out_seeds=HELD_OUT_SEEDS,
)
#: The smoke run: the first task's geometry on a smaller ``mod``, whose plateau still outlasts
#: t_c + 100 at d = 32; two seeds, the fewest the k claim's next-seed null needs.
TINY = dict(
    tasks=(("mod N=20", "mod", {"N": 20}, "numbers"),),
    gammas=(1.0,),
    seeds=(0, 1),
    epochs=300,
    d=32,
    held_out=(),
    held_out_seeds=(),
)


def run(full: bool = False, tiny: bool = False) -> Outcome:
    sizes = TINY if tiny else SIZES
    tasks, seeds, epochs, d = sizes["tasks"], sizes["seeds"], sizes["epochs"], sizes["d"]
    cells, cost = {}, {}
    runs = [(task, seeds, True) for task in tasks]
    runs += [(task, sizes["held_out_seeds"], False) for task in sizes["held_out"]]
    for (name, task, params, geometry), lane_seeds, ablation in runs:
        ds = PRIMARY.make(task, **params)
        study = plateau_study.compare_second_escape(
            ds,
            gammas=sizes["gammas"],
            seeds=lane_seeds,
            d=d,
            epochs=epochs,
            geometry=geometry,
            ablation=ablation,
        )
        cells[name], cost[name] = study.summary(), study.cost_summary()
    name, task, params, _ = tasks[0]
    ds = PRIMARY.make(task, **params)
    smooth = plateau_study.compare_second_escape(
        ds, gammas=[1.0], seeds=seeds[:2], d=d, activation=SMOOTH, epochs=epochs
    ).summary()
    config = run_config(full=full, tiny=tiny)
    numbers = {**cells, "smooth": smooth}
    figures = {"escape": _figure(cells, d)}
    return Outcome(claims(numbers, config), figures, numbers, config, cost)


def run_config(*, full: bool = False, tiny: bool = False) -> dict:
    """The configuration `run` records (``full`` changes nothing)."""
    sizes = TINY if tiny else SIZES
    config = dict(
        tasks=[dict(name=n, task=t, params=p, geometry=g) for n, t, p, g in sizes["tasks"]],
        held_out=[dict(name=n, task=t, params=p, geometry=g) for n, t, p, g in sizes["held_out"]],
        gammas=list(sizes["gammas"]),
        seeds=list(sizes["seeds"]),
        held_out_seeds=list(sizes["held_out_seeds"]),
        epochs=sizes["epochs"],
        d=sizes["d"],
        activation="relu",
        smooth_control=SMOOTH,
        **PRIMARY.describe(optimizer="gd", lr=1.0),
        level="rho_0 < 0.9 after rho_0 >= 0.99",
    )
    if tiny:
        config["reduction"] = "tiny: mod N=20 only, d=32, gamma 1, seeds 0 and 1, 300 epochs"
    return config


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The claims from the run's ``numbers`` (as saved: each task's `plateau_study` summary, the
    held-out ones included, and ``"smooth"``, the smooth activation's on the first task) and its
    ``config``."""
    cells = {name: summary for name, summary in numbers.items() if name != "smooth"}
    seeds, epochs, first = config["seeds"], config["epochs"], config["tasks"][0]["name"]
    held_out = [task["name"] for task in config.get("held_out", [])]
    regime = f"full-batch GD lr 1, V = 2 V_min, FFN d = {config['d']}, float64, {epochs} epochs"
    return [
        _timing_claim(cells, regime),
        _remaining_claim(cells, held_out, regime),
        _slope_claim(cells, held_out, regime),
        _k_claim(cells, regime),
        _ledger_claim(cells, held_out, regime),
        _smooth_claim(numbers["smooth"], cells[first], first, seeds[:2], epochs, regime),
    ]


class Cell(NamedTuple):
    """One lane of one level of one task, as `plateau_study` saved it, with training's collapse
    ``t_collapse`` beside it."""

    task: str
    gamma: float
    seed: int
    t0: float
    t_collapse: float
    t1_predicted: float
    t1_measured: float
    k_predicted: int
    k_measured: int
    ratio: float


def _rows(cells: dict, level: str) -> list[Cell]:
    """Every `Cell` of ``level`` over the tasks."""
    rows = []
    keys = ("gamma", "seed", "t0", "t1_predicted", "t1_measured", "k_predicted", "k_measured")
    for name, summary in cells.items():
        collapse = summary["t_collapse_measured"]
        for i, lane_level in enumerate(summary["level"]):
            if lane_level == level:
                values = {key: summary[key][i] for key in (*keys, "ratio")}
                rows.append(Cell(task=name, t_collapse=collapse[i % len(collapse)], **values))
    return rows


def _within(ratios, tolerance: float) -> float:
    """The share of cells with ``|ratio − 1| <= tolerance`` (a missing escape counts as a miss)."""
    ratios = np.asarray(ratios, dtype=np.float64)
    return float(np.mean(np.abs(ratios - 1) <= tolerance))


def _column(rows: list[Cell], field: str) -> np.ndarray:
    return np.array([getattr(r, field) for r in rows], dtype=np.float64)


def _per_task(rows: list[Cell], values) -> np.ndarray:
    """``values`` (one per row) replaced by their task's mean over the rows that have one."""
    values, tasks = np.asarray(values, np.float64), np.array([r.task for r in rows])
    mean = {t: np.nanmean(values[tasks == t]) for t in set(tasks)}
    return np.array([mean[t] for t in tasks])


def _constant_plateau(rows: list[Cell]) -> np.ndarray:
    """L1's null ratios: every cell of a task predicted at the task's mean measured length."""
    lengths = _column(rows, "t1_measured") - _column(rows, "t0")
    return _per_task(rows, lengths) / lengths


def _remaining(rows: list[Cell]) -> np.ndarray:
    """The remaining plateau's ratio ``(t^_1 − t_c) / (t_1 − t_c)``, ``t_c`` training's."""
    collapse = _column(rows, "t_collapse")
    return (_column(rows, "t1_predicted") - collapse) / (_column(rows, "t1_measured") - collapse)


def _mean_remaining(rows: list[Cell]) -> np.ndarray:
    """L2's null ratios: every cell of a task predicted at the task's mean remaining plateau."""
    remaining = _column(rows, "t1_measured") - _column(rows, "t_collapse")
    return _per_task(rows, remaining) / remaining


def _proportional(rows: list[Cell]) -> np.ndarray:
    """The slope claim's null ``t^_1``: ``t_c + gamma * mean_task((t_1 − t_c) / gamma)``."""
    collapse, gamma = _column(rows, "t_collapse"), _column(rows, "gamma")
    return collapse + gamma * _per_task(rows, (_column(rows, "t1_measured") - collapse) / gamma)


def _slopes(rows: list[Cell], predicted) -> dict[str, tuple[float, float]]:
    """Per task, the least-squares slope of ``t_1`` against gamma: (``predicted``'s, training's),
    over the cells where both escaped."""
    slopes = {}
    predicted, measured = np.asarray(predicted, np.float64), _column(rows, "t1_measured")
    gamma, tasks = _column(rows, "gamma"), np.array([r.task for r in rows])
    for task in dict.fromkeys(tasks):
        cells = (tasks == task) & np.isfinite(predicted) & np.isfinite(measured)
        if len(set(gamma[cells])) < 2:
            slopes[task] = (np.nan, np.nan)
            continue
        slopes[task] = tuple(
            float(np.polyfit(gamma[cells], times[cells], 1)[0]) for times in (predicted, measured)
        )
    return slopes


def _slope_errors(slopes: dict) -> np.ndarray:
    return np.array([mine / truth - 1 for mine, truth in slopes.values()], dtype=np.float64)


def _by_task(rows: list[Cell], ratios, tolerance: float, held_out=()) -> str:
    parts = []
    ratios, tasks = np.asarray(ratios, np.float64), np.array([r.task for r in rows])
    for task in dict.fromkeys(tasks):
        mine = ratios[tasks == task]
        mark = " (held out)" if task in held_out else ""
        parts.append(
            f"{task}{mark}: {_within(mine, tolerance):.0%} of {mine.size} within, ratios "
            f"{np.nanmin(mine):.2f}–{np.nanmax(mine):.2f}"
        )
    return "; ".join(parts)


def _timing_claim(cells: dict, regime: str) -> Claim:
    rows = _rows(cells, "L1")
    ratios = _column(rows, "ratio")
    null = _constant_plateau(rows)
    verdict = scored(lambda r: _within(r, L1_TOLERANCE) >= SHARE, ratios, null)
    alone = [r.ratio for r in _rows(cells, plateau_study.PLATEAU_LEVEL)]
    return Claim(
        "second escape",
        "the split-unit flow from the training state at t_c + 100 (L1, a replay) predicts when "
        "rho_0 leaves the plateau",
        f"{_within(ratios, L1_TOLERANCE):.0%} of {len(rows)} cells within {L1_TOLERANCE:.0%} "
        f"({_by_task(rows, ratios, L1_TOLERANCE)}; the plateau flow alone (feedback dropped): "
        f"{_within(alone, L1_TOLERANCE):.0%} of {len(alone)})",
        f"|(t^_1 − t_0)/(t_1 − t_0) − 1| ≤ {L1_TOLERANCE} in ≥ {SHARE:.0%} of the cells",
        kind="beyond",
        regime=regime,
        null=f"constant plateau (each task's mean measured length): "
        f"{_within(null, L1_TOLERANCE):.0%} within",
        **verdict,
    )


def _remaining_claim(cells: dict, held_out, regime: str) -> Claim:
    rows = _rows(cells, "L2")
    ratios, null = _remaining(rows), _mean_remaining(rows)
    verdict = scored(lambda r: _within(r, L2_TOLERANCE) >= SHARE, ratios, null)
    return Claim(
        "second escape",
        "the split-unit flow from the initial weights (L2, a law) predicts the plateau that "
        "remains after the collapse",
        f"{_within(ratios, L2_TOLERANCE):.0%} of {len(rows)} cells within {L2_TOLERANCE:.0%} "
        f"({_by_task(rows, ratios, L2_TOLERANCE, held_out)})",
        f"|(t^_1 − t_c)/(t_1 − t_c) − 1| ≤ {L2_TOLERANCE} (t_c training's collapse) in ≥ "
        f"{SHARE:.0%} of the cells",
        kind="beyond",
        regime=regime,
        null=f"each task's mean remaining plateau: {_within(null, L2_TOLERANCE):.0%} within",
        **verdict,
    )


def _slope_claim(cells: dict, held_out, regime: str) -> Claim:
    rows = _rows(cells, "L2")
    mine = _slopes(rows, _column(rows, "t1_predicted"))
    null = _slopes(rows, _proportional(rows))

    def holds(slopes) -> bool | None:  # a task without two gammas' escapes is not tested
        errors = _slope_errors(slopes)
        errors = errors[np.isfinite(errors)]
        return bool(np.all(np.abs(errors) <= SLOPE_TOLERANCE)) if errors.size else None

    verdict = scored(holds, mine, null)

    def text(slopes) -> str:
        return "; ".join(
            f"{task}{' (held out)' if task in held_out else ''}: "
            + (
                f"{a:.0f} against {b:.0f} ({a / b - 1:+.0%})"
                if np.isfinite(a / b)
                else "not tested"
            )
            for task, (a, b) in slopes.items()
        )

    return Claim(
        "second escape",
        "L2 predicts how the escape moves with the initialization scale (the gamma-slope of t_1)",
        f"slope of t_1 in epochs per unit gamma, predicted against trained: {text(mine)}"
        if verdict["passed"] is not None
        else "not tested: a slope needs escapes at two gammas or more in a task",
        f"|slope^/slope − 1| ≤ {SLOPE_TOLERANCE} on every task that escaped at two gammas",
        kind="beyond",
        regime=regime,
        failure="false",  # a law against escapes every scored run reached
        null=f"the proportional plateau (t_1 − t_c ∝ gamma): {text(null)}",
        **verdict,
    )


def _k_claim(cells: dict, regime: str) -> Claim:
    rows = _rows(cells, "L1")
    predicted = np.array([r.k_predicted for r in rows])
    measured = np.array([r.k_measured for r in rows])
    # the next seed's prediction in the same (task, gamma): cells are in seed order per gamma
    other = np.concatenate([np.roll(predicted[block], -1) for block in _seed_blocks(rows)])
    share = float(np.mean(predicted == measured))
    verdict = scored(lambda k: float(np.mean(k == measured)) >= SHARE, predicted, other)
    return Claim(
        "second escape",
        "the split-unit flow (L1) predicts which Fourier k escapes first",
        f"predicted k = trained k in {share:.0%} of {len(rows)} cells",
        f"the same k in ≥ {SHARE:.0%} of the cells",
        kind="beyond",
        regime=regime,
        null=f"the next seed's predicted k: {float(np.mean(other == measured)):.0%} the same",
        **verdict,
    )


class LedgerCell(NamedTuple):
    """One lane's training ledger halfway along its plateau (`plateau_study.PlateauLedger`):
    the log-gain and the integrals of the realized rate and of the frozen-gate band (NaN: no
    plateau past t_0)."""

    task: str
    gain: float
    realized: float
    band: float


def _ledger_rows(cells: dict) -> list[LedgerCell]:
    """Every lane's `LedgerCell` over the tasks, as `plateau_study` saved them."""
    rows = []
    for name, summary in cells.items():
        book = summary["ledger"]
        halves = zip(book["gain_half"], book["realized_half"], book["band_half"], strict=True)
        rows += [LedgerCell(name, *map(float, half)) for half in halves]
    return rows


def _ledger_claim(cells: dict, held_out, regime: str) -> Claim:
    rows = [r for r in _ledger_rows(cells) if np.isfinite(r.gain)]  # no plateau: not tested
    tasks = np.array([r.task for r in rows])
    mine = np.array([r.realized / r.gain for r in rows])
    null = np.array([r.band / r.gain for r in rows])

    def holds(ratios) -> bool | None:
        return _within(ratios, LEDGER_TOLERANCE) >= SHARE if ratios.size else None

    def text(ratios) -> str:
        parts = []
        for task in dict.fromkeys(tasks):
            mark = " (held out)" if task in held_out else ""
            r = ratios[tasks == task]
            parts.append(
                f"{task}{mark}: {_within(r, LEDGER_TOLERANCE):.0%} of {r.size}, "
                f"{np.min(r):.2f}–{np.max(r):.2f}"
            )
        return "; ".join(parts)

    verdict = scored(holds, mine, null)
    return Claim(
        "second escape",
        "the collapsed saddle's gated drives, re-read as the gates realign, account for "
        "training's log-gain over the first half of the plateau (the log-amplitude ledger)",
        f"realized-rate integral / log-gain within {LEDGER_TOLERANCE:.0%} in "
        f"{_within(mine, LEDGER_TOLERANCE):.0%} of {mine.size} lanes ({text(mine)})"
        if mine.size
        else "not tested: no lane had a plateau past t_0",
        f"|realized / gain − 1| ≤ {LEDGER_TOLERANCE} from t_0 halfway to t_1 in ≥ {SHARE:.0%} "
        "of the lanes that escaped",
        kind="beyond",
        regime=regime,
        failure="false",  # an account of lanes that escaped
        null=f"the frozen-gate band's top rate: {text(null)}" if null.size else "not tested",
        **verdict,
    )


def _seed_blocks(rows: list[Cell]) -> list[np.ndarray]:
    """The row indices of each (task, gamma), in row order."""
    keys = [(r.task, r.gamma) for r in rows]
    return [np.flatnonzero([k == key for k in keys]) for key in dict.fromkeys(keys)]


def _escapes(summary: dict, seeds, gamma: float = 1.0) -> dict:
    """``predicted`` (L1 and L2) and ``measured`` t_1 of the cells at ``gamma`` and ``seeds``."""
    cells = [
        i
        for i, (g, s, level) in enumerate(
            zip(summary["gamma"], summary["seed"], summary["level"], strict=True)
        )
        if g == gamma and s in seeds and level in ("L1", "L2")
    ]
    level1 = [i for i in cells if summary["level"][i] == "L1"]
    return {
        "predicted": [summary["t1_predicted"][i] for i in cells],
        "measured": [summary["t1_measured"][i] for i in level1],
        "rate": [summary["rate_predicted"][i] for i in level1],
    }


def _no_escape(escapes: dict) -> bool:
    return bool(np.all(np.isnan(np.asarray(escapes["predicted"] + escapes["measured"], float))))


def _smooth_claim(smooth: dict, relu: dict, task: str, seeds, epochs: int, regime: str) -> Claim:
    mine, null = _escapes(smooth, seeds), _escapes(relu, seeds)
    verdict = scored(_no_escape, mine, null)
    return Claim(
        "second escape",
        "σ = z + z²/2 has no second escape (the band is ReLU's gates)",
        f"{task}, γ = 1, seeds {', '.join(map(str, seeds))}: predicted t_1 (L1, L2) "
        f"{_times(mine['predicted'])}; "
        f"training {_times(mine['measured'])} (collapse at "
        f"{_times(smooth['t_collapse_measured'])}); band at t_0 {_rates(mine['rate'])}",
        f"no rho_0 < 0.9 after the collapse within {epochs} epochs, predicted and trained",
        kind="beyond",
        regime=regime,
        null=f"ReLU, same cells: predicted {_times(null['predicted'])}; training "
        f"{_times(null['measured'])}; band at t_0 {_rates(null['rate'])}",
        **verdict,
    )


def _times(values) -> str:
    return ", ".join("none" if np.isnan(v) else f"{v:.0f}" for v in np.asarray(values, float))


def _rates(values) -> str:
    return ", ".join(f"{v:.4f}" for v in np.asarray(values, float))


def _figure(cells: dict, d: int):
    fig, axes = plots.figure(
        1,
        2,
        panel=(4.6, 4.2),
        suptitle=f"The second escape: split-unit flow against GD (ReLU FFN d={d}, GD lr 1)",
    )
    panels = (
        ("L1", "t0", L1_TOLERANCE, "$t_0$ = $t_c$ + 100"),
        ("L2", "t_collapse", L2_TOLERANCE, "$t_0$ = $t_c$, training's collapse"),
    )
    for ax, (level, origin, tolerance, start) in zip(axes, panels, strict=True):
        rows = _rows(cells, level)
        for colour, task in enumerate(dict.fromkeys(r.task for r in rows)):
            mine = [r for r in rows if r.task == task]
            ax.plot(
                [r.t1_measured - getattr(r, origin) for r in mine],
                [r.t1_predicted - getattr(r, origin) for r in mine],
                "o",
                color=f"C{colour}",
                ms=4,
                label=task,
            )
        lengths = [r.t1_measured - getattr(r, origin) for r in rows]
        line = np.array([np.nanmin(lengths) * 0.8, np.nanmax(lengths) * 1.2])
        ax.plot(line, line, color="k", lw=1, label="theory = training")
        ax.fill_between(
            line,
            (1 - tolerance) * line,
            (1 + tolerance) * line,
            color="0.85",
            label=f"±{tolerance:.0%}",
        )
        plots.axis_labels(
            ax,
            f"trained $t_1 - t_0$ (epochs), {start}",
            "predicted $t_1 - t_0$ (epochs)",
            f"{level} ({'replay' if level == 'L1' else 'law'})",
        )
        plots.legend(ax)
    return fig
