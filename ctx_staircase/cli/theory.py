"""``ctx-staircase theory TASK``: the theories of a model (`theories.selected`) against the
same model trained by full-batch GD, lane by lane (`comparison.theory_vs_training`); or, with
``--second-escape``, the end of the collapse plateau (theory/second_escape.md). Either way it
writes and prints each prediction's role (law or replay) and its cost next to training's."""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import (
    TASK,
    Choices,
    Command,
    deprecated,
    flag,
    integer,
    out_flag,
    real,
)
from ctx_staircase.internal import INT32_MAX, SEED_MAX

__all__ = [
    "COMMAND",
]

#: The ``theory`` flags passed through to `comparison.theory_vs_training` under their own names.
_THEORY_SETTINGS = (
    "model", "gammas", "max_orders", "d", "activation", "lr", "steps", "snapshot_every",
    "threshold", "prediction", "theories",
)  # fmt: skip


def _handler(args: argparse.Namespace) -> int:
    """Check the settings and the memory, run the comparison, save it and print its table."""
    from ctx_staircase import comparison, plots, results

    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / f"theory_{args.task}_{args.model}")
    ds = common.make_task(args)
    if args.second_escape:
        return _second_escape(args, ds, out)
    if len(args.seeds) > 1:
        raise ValueError(
            f"--seeds: theory against training runs one seed; got {args.seeds} (several seeds are "
            "the grid of --second-escape)"
        )
    args.activation = args.activation or "poly:1,0.5"
    settings = {key: getattr(args, key) for key in _THEORY_SETTINGS}
    settings["memory_limit"] = common.limit(args)
    comparison.check_theory_inputs(ds, **settings)  # includes the memory estimate
    start = time.perf_counter()
    with common.bar("GD steps, then ODE lanes (the first call compiles)"):
        experiment = comparison.theory_vs_training(
            ds, seed=args.seeds[0], out=out / "training", **settings
        )
    errors = common.stderr()
    for note in experiment.notes:
        errors.print(f"note: {note}")
    title = f"{args.task} {ds.params}, {args.model}, d={args.d}"
    if experiment.model.model.activation:
        title += f", σ={args.activation}"
    seconds = time.perf_counter() - start
    plots.save_figure(plots.theory_overlay_figure(experiment, title), out / "theory_overlay.png")
    plots.save_figure(plots.escape_time_figure(experiment, title), out / "escape_time.png")
    summary = comparison.experiment_summary(experiment) | dict(
        task=args.task,
        params=ds.params,
        lr=args.lr,
        seconds=seconds,
        cost=experiment.cost.as_json(),
        environment=results.environment(),
    )
    results.write_json(out / "metrics.json", summary)  # last: its presence marks a finished run
    _print(experiment, title)
    errors.print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


def _print(experiment, title: str) -> None:
    """One row per gamma and theory; then the solver failures, the model's escape law and the
    escape-time slopes."""
    from ctx_staircase import comparison

    table = Table(title=title)
    columns = ("γ", "theory", "role", "solver", "W_E err (pre-esc.)", "t_esc theory")
    for column in (*columns, "t_esc train", "ratio", "ρ0 onset th/tr"):
        table.add_column(column)
    for run in experiment.runs:
        for name, c in run.comparisons.items():
            solver = run.solver[name].result if name in run.solver else "closed form"
            table.add_row(
                f"{run.gamma:g}",
                name,
                experiment.roles[name].value,
                solver,
                f"{c.weight_rel_error_max:.3f}",
                f"{c.escape_time.theory:.1f}",
                f"{c.escape_time.simulation:.1f}",
                f"{c.escape_ratio:.3f}",
                f"{c.onset_time.theory[0]:.1f}/{c.onset_time.simulation[0]:.1f}",
            )
    console = common.stdout()
    console.print(table)
    console.print(_cost_line(experiment.cost))
    for line in comparison.solver_failures(experiment):
        console.print(f"solver failure: {line}")
    if experiment.law is not None:
        console.print(experiment.law.describe())
    slopes = ", ".join(f"{k} {v:.2f}" for k, v in experiment.escape_slope.as_json().items())
    words, analytic = experiment.model.slope_words
    console.print(f"{words}: {slopes} (analytic: {analytic})")


def _cost_line(cost) -> str:
    """What training and each theory cost, in wall seconds with compilation (`comparison.Cost`),
    and each theory's share of training's."""
    training = "not measured (resumed)" if cost.simulation is None else f"{cost.simulation:.2f} s"
    parts = []
    for name, seconds in cost.theories.items():
        ratio = cost.ratio(name)
        parts.append(f"{name} {seconds:.2f} s" + ("" if ratio is None else f" ({ratio:.3g}x)"))
    return f"cost (wall, compile included): training {training}; " + ", ".join(parts)


def _second_escape(args: argparse.Namespace, ds, out) -> int:
    """The second escape of the FFN at levels L1 and L2 against GD training (lr 1)."""
    from ctx_staircase import plateau_study, results, theories

    if theories.model(args.model) is not theories.FFN:
        raise ValueError(f"--second-escape needs --model ffn; got {args.model!r}")
    start = time.perf_counter()
    activation = args.activation or "relu"
    with common.bar("GD lanes, then the plateau and split-unit flows per lane (compiles first)"):
        comparison = plateau_study.compare_second_escape(
            ds,
            gammas=args.gammas or [1.0],
            seeds=args.seeds,
            d=args.d,
            activation=activation,
            epochs=args.steps or 3000,
            geometry=args.geometry,
        )
    summary = comparison.summary()
    record = {
        "task": args.task,
        "params": ds.params,
        "activation": activation,
        "geometry": args.geometry,
        "d": args.d,
        "second_escape": summary,
        "seconds": time.perf_counter() - start,
        "environment": results.environment(),
    }
    results.write_json(out / "metrics.json", record)
    table = _second_escape_table(
        summary, f"{args.task} {ds.params}, ffn d={args.d}, σ={activation}"
    )
    common.stdout().print(table)
    common.stdout().print(_ledger_table(summary))
    cost = summary["cost"]
    levels = [
        f"{level} ({summary['roles'][level]}) {seconds:.2f} s ({seconds / cost['simulation']:.3g}x)"
        for level, seconds in cost.items()
        if level != "simulation"
    ]
    common.stdout().print(
        f"cost (wall, compile included; a replay's counts training up to its start): training "
        f"{cost['simulation']:.2f} s; " + ", ".join(levels)
    )
    common.stderr().print(
        f"wrote {out}/ in {time.perf_counter() - start:.1f} s (nan: no second escape "
        f"within {args.steps or 3000} epochs)"
    )
    return 0


def _second_escape_table(summary: dict, setting: str) -> Table:
    """One row per lane and level: the predicted and trained ``t_1``, their ratio from ``t_0``,
    the remaining plateau after training's collapse, the escaping k and the band's rate."""
    table = Table(title=f"second escape: {setting}")
    columns = ("γ", "seed", "level", "t0", "t1 theory", "t1 train", "ratio", "after t_c", "k th/tr")
    for column in (*columns, "rate"):
        table.add_column(column)
    collapse = summary["t_collapse_measured"]
    for i, level in enumerate(summary["level"]):
        t_c = collapse[i % len(collapse)]  # training's collapse: L2 is scored on what remains
        remaining = (summary["t1_predicted"][i] - t_c) / (summary["t1_measured"][i] - t_c)
        table.add_row(
            f"{summary['gamma'][i]:g}",
            str(summary["seed"][i]),
            level,
            f"{summary['t0'][i]:.0f}",
            f"{summary['t1_predicted'][i]:.1f}",
            f"{summary['t1_measured'][i]:.1f}",
            f"{summary['ratio'][i]:.3f}",
            f"{remaining:.3f}",
            f"{summary['k_predicted'][i]}/{summary['k_measured'][i]}",
            f"{summary['rate_predicted'][i]:.4f}",
        )
    return table


def _ledger_table(summary: dict) -> Table:
    """Training's log-amplitude ledger per lane (theory/second_escape.md §8): the deviation's
    log-gain from t0 beside the integrals of its realized rate and of the frozen-gate band."""
    book = summary["ledger"]
    table = Table(
        title="ledger of training from t0 = t_c + 100 (nats): log-gain | realized-rate integral "
        "| frozen-gate band integral"
    )
    for column in ("γ", "seed", "t0", "halfway", "gain", "realized", "band", "t1", "gain",
                   "realized", "band"):  # fmt: skip
        table.add_column(column)
    lanes = len(book["t0"])  # the rows of the first level, one per lane
    for lane, (gamma, seed) in enumerate(
        zip(summary["gamma"][:lanes], summary["seed"][:lanes], strict=True)
    ):
        table.add_row(
            f"{gamma:g}",
            str(seed),
            f"{book['t0'][lane]:.0f}",
            *(
                f"{book[key + suffix][lane]:.{0 if key == 't' else 2}f}"
                for suffix in ("_half", "")
                for key in ("t", "gain", "realized", "band")
            ),
        )
    return table


COMMAND = Command(
    "theory",
    "theory (closed forms, signature flows, attention plateau law) vs GD training",
    (
        *TASK,
        flag("--model", default="ffn", choices=Choices("theories", "model_names"),
             metavar="NAME", help="model: %(choices)s"),
        flag("--gamma", dest="gammas", type=real(), nargs="+", default=None,
             help="init scales d^-gamma (default: ffn 0.6 0.8 1.0 1.2 1.4; attention 0.6 .. 0.8)"),
        flag("--max-order", dest="max_orders", type=integer(0, 64), nargs="+", default=[0, 1],
             help="context orders m_max of the FFN signature flow"),
        flag("--activation", default=None,
             help="hidden activation of the FFN (default: poly:1,0.5; relu with --second-escape)"),
        flag("--prediction", default="linear", choices=Choices("flows", "PREDICTION_TERMS"),
             metavar="TERM",
             help="softmax term of the FFN signature flow: %(choices)s (linear: with the "
                  "feedback)"),
        flag("--theories", nargs="+", default=None, metavar="NAME",
             help="solve only these theories (e.g. signature_flow_m1 closed_form; default: every "
                  "one that applies to the model, activation and orders)"),
        flag("--d", type=integer(1, INT32_MAX), default=128, help="width"),
        flag("--lr", type=real(0, strict=True), default=0.2,
             help="learning rate of GD (t = lr * step; default 0.2, not the primary regime's 1: "
                  "the theories predict the gradient flow, and at 0.2 GD's escape is within a few "
                  "percent of the flow's)"),
        flag("--steps", type=integer(1, INT32_MAX), default=None,
             help="training steps of GD (default: 1.25x the latest predicted escape)"),
        flag("--snapshot-every", type=integer(1, INT32_MAX), default=None,
             help="steps between snapshots (default: 10, geometric past 400 snapshots)"),
        flag("--threshold", type=real(0, strict=True), default=0.5,
             help="escape: largest centred logit (nats)"),
        flag("--seeds", type=integer(0, SEED_MAX), nargs="+", default=[0],
             help="seeds: one, or with --second-escape its grid's (default: 0)"),
        deprecated("--seed", "--seeds", "seeds", type=lambda v: [integer(0, SEED_MAX)(v)]),
        flag("--second-escape", action="store_true",
             help="predict the second escape (the end of the collapse plateau, "
                  "theory/second_escape.md) at levels L1 (from the training state at t_c + 100) "
                  "and L2 (from the init) against GD training at lr 1 for --steps epochs "
                  "(default 3000); FFN only"),
        flag("--geometry", default="numbers",
             help="--second-escape: the token group rho_0 is read on (Task 4: anchors)"),
        out_flag("runs/theory_TASK_MODEL"),
        common.FORCE,
    ),
    _handler,
    description=(
        "Integrate the theory and train the same models (full-batch GD, float64, t = lr * "
        "step), then compare them lane by lane. FFN: closed form (C3), closed form with the "
        "softmax feedback, signature flows (and with relu the gated flow, theory/relu.md). "
        "Attention-only: the uniform-attention flow (A3) and the plateau law "
        "t* = T_Z d^(2 gamma) - c (A5b). Documented gamma ranges: ffn [0.5, 2], attention "
        "[0.55, 1]. Each theory is a law (from the data and the initial weights) or a replay "
        "(from a training state); metrics.json holds each one's role and its cost, wall seconds "
        "with compilation, next to training's."
    ),
)  # fmt: skip
