"""Where is a step of the staircase a gradient-flow phenomenon? (theory/steps.md)

Beyond the paper. Every built-in task with two or more input tokens: ``add``, ``sub`` and ``mul``
(N = 20), ``mod`` (N = 40), ``modulus`` (N = 40, M = 4) and Task 4 (the anchors' geometry), under
ReLU and sigma = z + z²/2, in the primary regime (full-batch GD, V = 2 V_min; FFN d = 128,
float64), gamma in {1.0, 1.4}, seed 0, to flow time 3000.

Each lane is trained at lr 1 and lr 1/4 (flow time ``t = lr * step``) and its step read on
rho_0(t) (`steps.step_time`); a step *exists in the flow limit* when both step sizes take it and
agree within 5% (`steps.existence`). On the collapsed order-0 geometry under ReLU (``mod``,
``modulus``, Task 4) the split-unit flow from the initial weights (theory/second_escape.md,
level L2) predicts the step, scored against lr 1/4's within 20%; elsewhere the row says why
there is no law. Null of every row: the constant step. Writes the figure ``steps``; the law's
cost is saved beside the lr-1 training (`Outcome.cost`).

``tiny`` (a smoke run): ``mod`` N = 20 only, d = 32, gamma 1, to flow time 300.

The step rule and why the collapsed geometry has a law: theory/experiments.md, staircase_steps.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import geometry, metrics, plots, steps, sweep, train
from ctx_staircase import second_escape as se
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import NoNull, scored
from ctx_staircase.experiments.regime import GD_LR, PRIMARY
from ctx_staircase.theory import Role, cost_account

#: (name, task, parameters, token group the geometry is read on)
TASKS = (
    ("add N=20", "add", {"N": 20}, "numbers"),
    ("sub N=20", "sub", {"N": 20}, "numbers"),
    ("mul N=20", "mul", {"N": 20}, "numbers"),
    ("mod N=40", "mod", {"N": 40}, "numbers"),
    ("modulus N=40 M=4", "modulus", {"N": 40, "M": 4}, "numbers"),
    ("Task 4", "task4", {}, "anchors"),
)
ACTIVATIONS = ("relu", "poly:1,0.5")
GAMMAS = (1.0, 1.4)
SEED, D, HORIZON, SAVE_EVERY = 0, 128, 3000.0, 10.0
#: The finer step: lr / FINER.
FINER = 4
#: |predicted / measured − 1| a law must meet where the step exists.
LAW_TOLERANCE = 0.20
SIZES = dict(tasks=TASKS, activations=ACTIVATIONS, gammas=GAMMAS, d=D, horizon=HORIZON)
TINY = dict(
    tasks=(("mod N=20", "mod", {"N": 20}, "numbers"),),
    activations=ACTIVATIONS,
    gammas=(1.0,),
    d=32,
    horizon=300.0,
)
#: The law of a departure from the collapsed order-0 geometry, under ReLU.
LAW = "split-unit flow from the init (L2)"


class StepRow(NamedTuple):
    """One task, activation and gamma. Pairs are ``[lr, lr / FINER]``; times in flow time, NaN
    where not reached; ``predicted`` the law's step time (NaN: no law); ``null`` the constant
    step; ``why`` the reason there is no law ("" where there is one)."""

    task: str
    activation: str
    gamma: float
    geometry: str  # "collapsed" (constant order-0 geometry) or "structured"
    t_ready: list[float]
    t_step: list[float]
    rho0_end: list[float]
    rho0_late: list[float]  # the lowest rho_0 over the second half of each run
    diverged_step: list[int]
    existence: steps.Existence
    law: str
    predicted: float
    why: str
    null: float = np.nan

    def saved(self) -> dict:
        """The row as the record stores it."""
        return self._asdict() | {"existence": self.existence.value}

    @classmethod
    def read(cls, saved: dict) -> StepRow:
        """The row of a saved record (JSON null read as NaN)."""
        nan = {k: np.nan for k in ("predicted", "null") if saved.get(k) is None}
        pairs = {k: [np.nan if v is None else v for v in saved[k]] for k in ("t_ready", "t_step")}
        return cls(**saved | nan | pairs | {"existence": steps.Existence(saved["existence"])})


def run(full: bool = False, tiny: bool = False) -> Outcome:
    sizes = TINY if tiny else SIZES
    config = run_config(full=full, tiny=tiny)
    rows, curves, seconds = [], {}, {"training": 0.0, LAW: 0.0}
    with jax.enable_x64(True):
        for name, task, params, group in sizes["tasks"]:
            ds = PRIMARY.make(task, **params)
            for activation in sizes["activations"]:
                found, curve = _cell(ds, name, group, activation, sizes, seconds)
                rows += found
                curves[f"{name} | {activation}"] = curve
    numbers = {"rows": [row.saved() for row in _with_null(rows)], "curves": curves}
    training = seconds["training"] or None  # no law row: no training to set a cost beside
    cost = {"law rows": cost_account(training, {LAW: seconds[LAW]}, {LAW: Role.LAW})}
    return Outcome(claims(numbers, config), {"steps": _figure(curves)}, numbers, config, cost)


def run_config(*, full: bool = False, tiny: bool = False) -> dict:
    """The configuration `run` records (``full`` changes nothing)."""
    sizes = TINY if tiny else SIZES
    config = dict(
        tasks=[dict(name=n, task=t, params=p, group=g) for n, t, p, g in sizes["tasks"]],
        activations=list(sizes["activations"]),
        gammas=list(sizes["gammas"]),
        seed=SEED,
        d=sizes["d"],
        horizon=sizes["horizon"],
        lrs=[GD_LR, GD_LR / FINER],
        save_every=SAVE_EVERY,
        ready=steps.READY,
        drop=steps.DROP,
        agree=steps.AGREE,
        law_tolerance=LAW_TOLERANCE,
        **PRIMARY.describe(optimizer="gd", lr=GD_LR),
    )
    if tiny:
        config["reduction"] = "tiny: mod N=20 only, d=32, gamma 1, to flow time 300"
    return config


def _train(ds, activation: str, sizes: dict, lr: float):
    """GD at ``lr`` to the horizon (flow time), saved every `SAVE_EVERY`: the sweep's result and
    the save times."""
    count, every = round(sizes["horizon"] / lr), round(SAVE_EVERY / lr)
    config = train.TrainConfig(
        optimizer="gd", lr=lr, steps=count, snapshots=tuple(range(0, count + 1, every))
    )
    result = sweep.train_sweep(
        "ffn",
        ds,
        config,
        gammas=list(sizes["gammas"]),
        seeds=[SEED],
        d=sizes["d"],
        activation=activation,
        dtype=jnp.float64,
    )
    return result, lr * np.asarray(result.trajectory.steps[0], np.float64)


def _cell(ds, name: str, group: str, activation: str, sizes: dict, seconds: dict):
    """The rows (one per gamma) and rho_0 curves of one task and activation."""
    runs, training = {}, {}
    for lr in (GD_LR, GD_LR / FINER):
        start = time.perf_counter()
        result, ts = _train(ds, activation, sizes, lr)
        training[lr] = time.perf_counter() - start
        W_E = np.asarray(result.trajectory.W_E)
        rho = geometry.alignment_curves(W_E, np.arange(len(ts)), ds, group=group, probe_snapshots=0)
        runs[lr] = (result, ts, rho)
    coarse = runs[GD_LR]
    collapsed = bool(metrics.is_constant(metrics.upper_triangle(coarse[2].S_sig0)))
    law = activation == "relu" and collapsed
    problem = se.plateau_problem(ds, activation, group) if law else None
    if law:  # the law's cost is set beside the lr-1 training of the lanes it predicts
        seconds["training"] += training[GD_LR]
    rows = []
    for lane, gamma in enumerate(coarse[0].gamma):
        times = {lr: steps.step_time(ts, rho.rho0[lane]) for lr, (_, ts, rho) in runs.items()}
        diverged = [int(result.trajectory.diverged_step[lane]) for result, _, _ in runs.values()]
        verdict = steps.existence(times[GD_LR], times[GD_LR / FINER])
        if max(diverged) >= 0:  # a diverged run tests nothing
            verdict = steps.Existence.NOT_TESTED
        predicted = np.nan
        if law:
            start = time.perf_counter()
            W_E0 = np.asarray(coarse[0].trajectory.W_E[lane, 0])
            W_U0 = np.asarray(coarse[0].trajectory.W_U[lane, 0])
            path = se.predict_second_escape(
                W_E0, W_U0, problem, horizon=sizes["horizon"], band_modes=None
            )
            predicted = steps.step_time(path.ts, path.rho0).t_step
            seconds[LAW] += time.perf_counter() - start
        rows.append(
            StepRow(
                task=name,
                activation=activation,
                gamma=float(gamma),
                geometry="collapsed" if collapsed else "structured",
                t_ready=[times[GD_LR].t_ready, times[GD_LR / FINER].t_ready],
                t_step=[times[GD_LR].t_step, times[GD_LR / FINER].t_step],
                rho0_end=[float(rho.rho0[lane][-1]) for _, _, rho in runs.values()],
                rho0_late=[_late_low(ts, rho.rho0[lane]) for _, ts, rho in runs.values()],
                diverged_step=diverged,
                existence=verdict,
                law=LAW if law else "",
                predicted=predicted,
                why=_why(verdict, law, collapsed, activation),
            )
        )
    curve = {
        "t": [ts.tolist() for _, ts, _ in runs.values()],
        "rho0": [rho.rho0[0].tolist() for _, _, rho in runs.values()],
        "lrs": list(runs),
        "gamma": float(coarse[0].gamma[0]),
    }
    return rows, curve


def _late_low(ts, rho0) -> float:
    """The lowest rho_0 over the second half of the run."""
    return float(np.nanmin(rho0[ts >= 0.5 * ts[-1]]))


def _why(verdict: steps.Existence, law: bool, collapsed: bool, activation: str) -> str:
    """Why a row has no law's prediction ("" where it has one)."""
    if law:
        return ""
    if verdict is steps.Existence.NOT_TESTED:
        return "not tested: a run diverged or never reached the order-0 geometry"
    if verdict is not steps.Existence.EXISTS:
        return "no step in the flow limit to predict"
    if collapsed:
        return (
            f"{activation} is affine on no interval, so every unit is split and the split-unit "
            "flow is the whole gradient flow: a re-integration, not a law"
        )
    return (
        "the order-0 geometry is not collapsed: no invariant collapsed manifold, so no split-unit "
        "saddle whose band a law could read, and no reduced flow here describes this departure "
        "(on add it comes after the escape, in the saturated softmax: theory/order1_onset.md)"
    )


def _with_null(rows: list[StepRow]) -> list[StepRow]:
    """Every row with its null: the constant step, the mean lr-1/4 step time of the rows where
    the step exists."""
    exists = [r.t_step[1] for r in rows if r.existence is steps.Existence.EXISTS]
    constant = float(np.mean(exists)) if exists else np.nan
    return [row._replace(null=constant) for row in rows]


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The claims from the run's ``numbers`` (as saved) and its ``config``."""
    rows = [StepRow.read(row) for row in numbers["rows"]]
    regime = (
        f"full-batch GD at lr {config['lrs'][0]:g} and {config['lrs'][1]:g}, V = 2 V_min, FFN d = "
        f"{config['d']}, float64, to flow time {config['horizon']:g}"
    )
    return [_verdict_claim(rows, config, regime), _law_claim(rows, config, regime)]


def _table(rows: list[StepRow]) -> str:
    return "; ".join(
        f"{r.task} {r.activation} γ={r.gamma:g}: {r.existence.value} "
        f"(t {_time(r.t_step[0])} / {_time(r.t_step[1])})"
        for r in rows
    )


def _time(value: float) -> str:
    return "none" if np.isnan(value) else f"{value:.0f}"


def _verdict_claim(rows: list[StepRow], config: dict, regime: str) -> Claim:
    def tested(rows) -> bool:
        return all(r.existence is not steps.Existence.NOT_TESTED for r in rows)

    return Claim(
        "staircase steps",
        "every task with L >= 2 gets a flow-limit verdict on its step, under ReLU and z + z²/2",
        _table(rows),
        f"rho_0 reaches {config['ready']} and a step time at lr and lr/4 (agreeing within "
        f"{config['agree']:.0%}, or not) in every row",
        kind="beyond",
        regime=regime,
        **scored(tested, rows, NoNull("a verdict is a measurement of training, not a prediction")),
    )


def _law_claim(rows: list[StepRow], config: dict, regime: str) -> Claim:
    tolerance = config["law_tolerance"]
    mine = [r for r in rows if r.law and r.existence is steps.Existence.EXISTS]
    measured = np.array([r.t_step[1] for r in mine], np.float64)
    predicted = np.array([r.predicted for r in mine], np.float64)
    null = np.array([r.null for r in mine], np.float64)

    def within(times) -> bool | None:
        if not measured.size:
            return None
        return bool(np.all(np.abs(times / measured - 1) <= tolerance))

    text = "; ".join(
        f"{r.task} γ={r.gamma:g}: {p:.0f} against {m:.0f} ({p / m - 1:+.0%})"
        for r, p, m in zip(mine, predicted, measured, strict=True)
    )
    return Claim(
        "staircase steps",
        "where a step exists and the order-0 geometry is a collapsed ReLU saddle, the split-unit "
        "flow from the init predicts it",
        text or "not tested: no such row",
        f"|t^_step / t_step(lr/4) − 1| ≤ {tolerance} in every such row",
        kind="beyond",
        regime=regime,
        null="the constant step (mean over the rows whose step exists): "
        + "; ".join(f"{n / m - 1:+.0%}" for n, m in zip(null, measured, strict=True)),
        **scored(within, predicted, null),
    )


def _figure(curves: dict):
    cells = list(curves)
    columns = 4
    rows = -(-len(cells) // columns)
    fig, axes = plots.figure(
        rows,
        columns,
        panel=(3.6, 3.0),
        squeeze=False,
        suptitle="rho_0(t) at lr 1 (solid) and lr 1/4 (dashed): the step in the flow limit",
    )
    for ax, cell in zip(axes.flat, cells, strict=False):
        curve = curves[cell]
        for t, rho, lr in zip(curve["t"], curve["rho0"], curve["lrs"], strict=True):
            coarse = lr == GD_LR
            ax.plot(
                t, rho, "-" if coarse else "--", color="C0" if coarse else "C1", label=f"lr {lr:g}"
            )
        ax.axhline(steps.READY, color="0.7", lw=0.8)
        plots.axis_labels(ax, "flow time t", "rho_0", f"{cell}, γ={curve['gamma']:g}")
        plots.legend(ax)
    for ax in list(axes.flat)[len(cells) :]:
        ax.set_visible(False)
    return fig
