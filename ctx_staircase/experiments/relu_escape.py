"""The ReLU first escape as a law, on the paper's tasks: the unit flow and its feedback clock.

Beyond the paper (theory/relu.md §8). The law (eq. R9) starts from the data and the seed's draw
``Z`` alone: one uniform gated flow from ``Z``, in exact pieces, serves every init scale, and the
softmax feedback slows each lane's clock along it. It is scored against GD training on ``add``
N in {20, 30, 40}, ``sub`` and ``mod`` N in {20, 40} (``V = 2 V_min``) and Task 4 (``n_x`` in
{20, 40}, ``n_a`` = 10), gamma in {0.8, 1.0, 1.2, 1.4}, seeds 0, 1 and 2.

Setup: FFN with ReLU, d = 128, full-batch GD at lr 0.2 (the flow's Euler step), float64; escape =
largest centred logit reaching 0.5 nats, each side's own logits (C7). ``tiny``: ``sub`` N = 20,
seed 0, gamma in {0.8, 1.4} (a smoke run in the law's regime).

Criteria: the escape within 2% of training in every cell (null: the mean-slope law
``C_1 = 1/2``), and the largest relative ``W_E`` error over the first half of the plateau at
most 5% (null: ``W_E(t) = W_E(0)``). Writes the figure ``ratios``; the cost of each prediction
is saved with the record (`Outcome.cost`).

The nulls, and the frozen-gate closed form reported beside them: theory/experiments.md,
relu_escape.
"""

from __future__ import annotations

import numpy as np

from ctx_staircase import comparison, plots, tasks, theories
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import scored

#: |escape ratio - 1| the law must meet in every cell.
ESCAPE_RATIO = 0.02
#: The largest relative W_E error before escape (t <= t_esc / 2).
WEIGHT_ERROR = 0.05
GAMMAS = (0.8, 1.0, 1.2, 1.4)
SEEDS = (0, 1, 2)
#: (task, parameters) of every configuration; ``mod`` in twice its minimal vocabulary.
CONFIGURATIONS = (
    ("add", {"N": 20}),
    ("add", {"N": 30}),
    ("add", {"N": 40}),
    ("sub", {"N": 20}),
    ("sub", {"N": 40}),
    ("mod", {"N": 20, "vocab_size": 42}),
    ("mod", {"N": 40, "vocab_size": 82}),
    ("task4", {"n_x": 20, "n_a": 10}),
    ("task4", {"n_x": 40, "n_a": 10}),
)
TINY = dict(configurations=(("sub", {"N": 20}),), seeds=(0,), gammas=(0.8, 1.4))
LAW, FROZEN, HALF = (
    theories.RELU_ESCAPE_LAW,
    theories.CLOSED_FORM_FROZEN_GATES,
    theories.CLOSED_FORM_FEEDBACK,
)


def cell_name(task: str, params: dict, seed: int) -> str:
    """The key of a configuration and seed in the numbers, e.g. ``"mod N=20 vocab_size=42 s1"``."""
    return " ".join([task, *(f"{k}={v}" for k, v in params.items()), f"s{seed}"])


def run(full: bool = False, tiny: bool = False) -> Outcome:
    sizes = TINY if tiny else dict(configurations=CONFIGURATIONS, seeds=SEEDS, gammas=GAMMAS)
    config = dict(
        configurations=[[task, params] for task, params in sizes["configurations"]],
        seeds=list(sizes["seeds"]),
        gammas=list(sizes["gammas"]),
        d=128,
        lr=0.2,
        activation="relu",
        threshold=0.5,
    )
    if tiny:
        config["reduction"] = "tiny: sub N=20, seed 0, gammas 0.8 and 1.4"
    regime = f"full-batch GD lr {config['lr']:g} (gradient flow's Euler step), float64"
    numbers, cost, experiments_ = {}, {}, {}
    for task, params in sizes["configurations"]:
        ds = tasks.make(task, **params)
        for seed in sizes["seeds"]:
            experiment = comparison.theory_vs_training(
                ds,
                gammas=config["gammas"],
                max_orders=(0,),
                seed=seed,
                d=config["d"],
                lr=config["lr"],
                activation=config["activation"],
                threshold=config["threshold"],
                theories=(LAW.name, FROZEN.name, HALF.name),
            )
            name = cell_name(task, params, seed)
            numbers[name] = comparison.experiment_summary(experiment)
            cost[name] = comparison.cost_summary(experiment)
            experiments_[name] = experiment
    figures = {"ratios": _ratio_figure(experiments_, config)}
    config["regime"] = regime
    return Outcome(_claims(experiments_, regime), figures, numbers, config, cost)


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The claims of a saved run, scored again from its ``numbers`` (`comparison
    .experiment_from_summary`) and ``config``."""
    return _claims(
        {name: comparison.experiment_from_summary(cell) for name, cell in numbers.items()},
        config["regime"],
    )


def _collect(experiments_: dict, theory, field: str) -> np.ndarray:
    """``field`` of ``theory``'s comparisons over every cell and gamma, flattened."""
    return np.asarray(
        [getattr(c, field) for e in experiments_.values() for c in e.comparisons(theory)]
    )


def within(bound: float):
    """The criterion ``|ratio - 1| <= bound`` in every cell (NaN, no escape, fails)."""
    return lambda ratios: bool(np.all(np.abs(np.asarray(ratios) - 1) <= bound))


def at_most(bound: float):
    """The criterion ``error <= bound`` in every cell."""
    return lambda errors: bool(np.all(np.asarray(errors) <= bound))


def _worst(experiment: comparison.TheoryVsTraining) -> float:
    """The law's largest ``|escape ratio - 1|`` over one cell's gammas."""
    return max(abs(c.escape_ratio - 1) for c in experiment.comparisons(LAW))


def _span(values) -> str:
    values = np.asarray(values)
    return f"{np.nanmin(values):.4f} .. {np.nanmax(values):.4f} over {values.size} lanes"


def _claims(experiments_: dict, regime: str) -> list[Claim]:
    law, frozen, half = (_collect(experiments_, t, "escape_ratio") for t in (LAW, FROZEN, HALF))
    errors = _collect(experiments_, LAW, "weight_rel_error_max")
    static = _collect(experiments_, LAW, "null_weight_rel_error_max")
    worst = max(experiments_, key=lambda name: _worst(experiments_[name]))
    solved = all(
        run.solver[LAW.name].ok for experiment in experiments_.values() for run in experiment.runs
    )
    inside = float(np.mean(np.abs(law - 1) <= ESCAPE_RATIO))
    return [
        Claim(
            "escape law / ReLU",
            "the ReLU escape law (unit flow, feedback clock) predicts the first escape from the "
            "data and the initial weights",
            f"escape ratios {_span(law)}; {100 * inside:.0f}% of cells within "
            f"{100 * ESCAPE_RATIO:g}%; worst configuration {worst}; every lane escaped: {solved}",
            f"|ratio - 1| <= {ESCAPE_RATIO} in every lane (task x size x seed x gamma)",
            note=f"the frozen-gate closed form (R4): ratios {_span(frozen)}",
            kind="beyond",
            regime=regime,
            null="the C_1 = 1/2 law (the feedback closed form at the mean slope): ratios "
            + _span(half),
            **scored(within(ESCAPE_RATIO), law, half),
        ),
        Claim(
            "escape law / ReLU",
            "the law's W_E(t) matches training over the first half of the plateau",
            f"max rel. error {_span(errors)}",
            f"<= {WEIGHT_ERROR} in every lane",
            kind="beyond",
            regime=regime,
            null=f"W_E(t) = W_E(0): max rel. error {_span(static)}",
            **scored(at_most(WEIGHT_ERROR), errors, static),
        ),
    ]


def _ratio_figure(experiments_: dict, config: dict):
    """Escape ratio (theory / training) of the law, the frozen-gate closed form and the C_1 = 1/2
    law, per configuration and seed, against gamma."""
    figure, axis = plots.figure(panel=(7.5, 4.2))
    drawn = (
        (LAW, "o", LAW.style.label),
        (FROZEN, "s", FROZEN.style.label),
        (HALF, "^", "the C₁ = 1/2 law (closed form with softmax feedback)"),
    )
    for index, (theory, marker, label) in enumerate(drawn):
        for number, experiment in enumerate(experiments_.values()):
            ratios = [c.escape_ratio for c in experiment.comparisons(theory)]
            axis.plot(
                np.asarray(experiment.escape.gamma) + 0.02 * (index - 1),
                ratios,
                marker=marker,
                linestyle="none",
                alpha=0.6,
                color=f"C{index}",
                label=None if number else label,
            )
    axis.axhspan(1 - ESCAPE_RATIO, 1 + ESCAPE_RATIO, color="0.85", zorder=0)
    axis.set_yscale("log")
    cells, lanes = len(experiments_), len(experiments_) * len(config["gammas"])
    setup = f"ReLU FFN d={config['d']}, GD lr {config['lr']:g}"
    title = f"{setup}: {cells} cells, {lanes} lanes; grey: within 2%"
    plots.axis_labels(axis, "γ (init scale d^-γ)", "escape time, theory / training", title)
    axis.legend()
    return figure
