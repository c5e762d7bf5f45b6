"""Command line: ``ctx-staircase {run,list,signatures,train,theory,lm}``.

Thin by design: parse, validate, call the library, print, save. A bad input becomes one line on
stderr and exit code 2, with no traceback and no output files.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

DEFAULT_RUN_OUT = Path("runs/staircase")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"ctx-staircase {args.command}: error: {err}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctx-staircase",
        description="Which statistics of the data does a token embedding learn, and when?",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="the main job: the staircase on add and mod with the theory; or a sims/ run"
    )
    run.add_argument(
        "name",
        nargs="?",
        default=None,
        help="a sims/ experiment (see --list); default: the flagship staircase run",
    )
    run.add_argument("--list", action="store_true", help="list the experiments and exit")
    run.add_argument("--full", action="store_true", help="the paper's sizes (for a GPU)")
    run.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (flagship)")
    run.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/staircase or runs/NAME)"
    )
    run.set_defaults(handler=_run)

    listing = commands.add_parser("list", help="list every task with its parameters")
    listing.set_defaults(handler=_list)

    sig = commands.add_parser("signatures", help="signature geometry of a task")
    sig.add_argument("task", help="task name (see `ctx-staircase list`)")
    sig.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task parameter, repeatable (e.g. --param N=40)",
    )
    sig.add_argument("--order", type=int, default=1, help="highest signature order (default 1)")
    sig.add_argument("--group", default=None, help="token group for alpha (default: numbers)")
    sig.add_argument("--out", type=Path, default=None, help="output folder")
    sig.set_defaults(handler=_signatures)

    tr = commands.add_parser(
        "train", help="train a (gamma x seed x lr) sweep and measure alignment"
    )
    tr.add_argument("task", help="task name (see `ctx-staircase list`)")
    tr.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task parameter, repeatable",
    )
    tr.add_argument("--model", default="ffn", help="ffn | attention | transformer")
    tr.add_argument("--gamma", type=float, nargs="+", default=[0.8], help="init scales d^-gamma")
    tr.add_argument("--seeds", type=int, nargs="+", default=[0])
    tr.add_argument("--optimizer", default="adam", help="gd | sgd | adam | adamw")
    tr.add_argument("--lr", type=float, nargs="+", default=[1e-3], help="learning rate(s)")
    tr.add_argument("--steps", type=int, default=1000)
    tr.add_argument("--batch-size", type=int, default=None, help="minibatch size (sgd)")
    tr.add_argument(
        "--snapshot-steps",
        type=int,
        nargs="+",
        default=None,
        help="steps to record (default: log- plus linearly spaced)",
    )
    tr.add_argument("--d", type=int, default=128, help="embedding width")
    tr.add_argument(
        "--vocab-size", type=int, default=None, help="model vocabulary (default: data's)"
    )
    tr.add_argument("--activation", default=None, help="FFN activation (relu, gelu, poly:..., z^K)")
    tr.add_argument("--float64", action="store_true", help="train in float64")
    tr.add_argument(
        "--probe-snapshots",
        type=int,
        default=8,
        help="snapshots at which to fit the first-order probe (0: none)",
    )
    tr.add_argument("--chunk", type=int, default=None, help="lanes per compiled call")
    tr.add_argument("--out", type=Path, default=None, help="output folder (resumes if present)")
    tr.set_defaults(handler=_train)

    lm = commands.add_parser(
        "lm", help="train a small GPT on text and measure its signature alignment over time"
    )
    lm.add_argument(
        "--text", type=Path, default=None, help="a UTF-8 text file (default: the built-in corpus)"
    )
    lm.add_argument("--steps", type=int, default=1000, help="AdamW steps (default 1000)")
    lm.add_argument(
        "--gamma", type=float, nargs="+", default=[1.0, 0.5], help="init scales (one lane each)"
    )
    lm.add_argument("--seed", type=int, default=0)
    lm.add_argument("--d", type=int, default=128, help="model width")
    lm.add_argument("--layers", type=int, default=2)
    lm.add_argument("--heads", type=int, default=4)
    lm.add_argument("--context", type=int, default=64, help="tokens per window")
    lm.add_argument("--batch-size", type=int, default=32, help="windows per step")
    lm.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    lm.add_argument("--snapshot-every", type=int, default=20, help="steps between snapshots")
    lm.add_argument(
        "--vocab-size", type=int, default=None, help="words kept (default: 2000, or all if fewer)"
    )
    lm.add_argument("--tiny", action="store_true", help="a seconds-long smoke run")
    lm.add_argument("--out", type=Path, default=None, help="output folder (default runs/lm)")
    lm.set_defaults(handler=_lm)

    th = commands.add_parser(
        "theory",
        help="theory (closed forms, signature flows, attention plateau law) vs GD training",
        description=(
            "Integrate the theory and train the same models (full-batch GD, float64, t = lr * "
            "step), then compare them lane by lane. FFN: closed form (C3), closed form with the "
            "softmax feedback, signature flows. Attention-only: the uniform-attention flow (A3) "
            "and the plateau law t* = T_Z d^(2 gamma) - c (A5b). Documented gamma ranges: "
            "ffn [0.5, 2], attention [0.55, 1]."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    th.add_argument("task", help="task name (see `ctx-staircase list`)")
    th.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    th.add_argument("--model", default="ffn", help="ffn | attention")
    th.add_argument(
        "--gamma",
        type=float,
        nargs="+",
        default=None,
        help="init scales d^-gamma (default: ffn 0.6 0.8 1.0 1.2 1.4; attention 0.6 .. 0.8)",
    )
    th.add_argument(
        "--max-order",
        type=int,
        nargs="+",
        default=[0, 1],
        help="context orders m_max of the FFN signature flow",
    )
    th.add_argument("--activation", default="poly:1,0.5", help="FFN activation")
    th.add_argument(
        "--prediction",
        default="linear",
        help="softmax term of the FFN signature flow: none | uniform | linear (with feedback)",
    )
    th.add_argument("--d", type=int, default=128, help="width")
    th.add_argument("--lr", type=float, default=0.2, help="GD learning rate (t = lr * step)")
    th.add_argument(
        "--steps",
        type=int,
        default=None,
        help="GD steps (default: 1.25x the latest predicted escape)",
    )
    th.add_argument(
        "--snapshot-every",
        type=int,
        default=None,
        help="steps between snapshots (default: 10, geometric past 400 snapshots)",
    )
    th.add_argument(
        "--threshold", type=float, default=0.5, help="escape: largest centred logit (nats)"
    )
    th.add_argument("--seed", type=int, default=0)
    th.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/theory_TASK_MODEL)"
    )
    th.set_defaults(handler=_theory)
    return parser


def _list(args: argparse.Namespace) -> int:
    from ctx_staircase import tasks

    table = Table(title="tasks", show_lines=False)
    table.add_column("task")
    table.add_column("parameters (defaults)")
    table.add_column("description")
    for name in tasks.names():
        params = ", ".join(f"{k}={v!r}" for k, v in tasks.describe(name).items())
        table.add_row(name, params, tasks.summary(name))
    Console(width=160).print(table)
    return 0


def _signatures(args: argparse.Namespace) -> int:
    out = args.out or Path("runs") / f"signatures_{args.task}"
    _signature_report(args.task, _parse_params(args.param), args.order, args.group, out)
    return 0


def _train(args: argparse.Namespace) -> int:
    import jax

    from ctx_staircase import analysis, plots, results, sweep, tasks, train

    if args.float64:
        jax.config.update("jax_enable_x64", True)
    if args.model not in ("ffn", "attention", "transformer"):
        raise ValueError(f"--model must be one of ffn, attention, transformer; got {args.model!r}")
    if args.probe_snapshots < 0:
        raise ValueError(f"--probe-snapshots must be >= 0; got {args.probe_snapshots}")
    ds = tasks.make(args.task, **_parse_params(args.param))
    config = train.TrainConfig(
        optimizer=args.optimizer,
        lr=args.lr[0],
        steps=args.steps,
        batch_size=args.batch_size,
        snapshots=tuple(args.snapshot_steps) if args.snapshot_steps else None,
    )
    model_kwargs: dict = {"d": args.d}
    if args.activation is not None:
        if args.model == "attention":
            raise ValueError("--activation applies to the ffn and transformer models only")
        model_kwargs["activation"] = args.activation
    if args.float64:
        model_kwargs["dtype"] = "float64"
    if args.vocab_size is not None:
        model_kwargs["vocab_size"] = args.vocab_size
    # validate the grid and build one model before anything is written
    sweep.grid(args.gamma, args.seeds, args.lr)
    train.init_state(args.model, ds, gamma=1.0, seed=0, **model_kwargs)
    out = args.out or Path("runs") / f"train_{args.task}_{args.model}"
    console = Console(stderr=True)
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("training lanes (first call compiles)", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        result = sweep.train_sweep(
            args.model,
            ds,
            config,
            gammas=args.gamma,
            seeds=args.seeds,
            lrs=args.lr,
            out=out,
            chunk=args.chunk,
            progress=report,
            **model_kwargs,
        )
        progress.update(task, description="measuring alignment and fitting probes")
        curves = analysis.alignment_curves(
            result.trajectory.W_E,
            result.trajectory.steps[0],
            ds,
            probe_snapshots=args.probe_snapshots if ds.L > 1 else 0,
        )
    time_label = "t = lr·step" if args.optimizer == "gd" else "step (full-batch epoch)"
    steps = np.asarray(result.trajectory.steps[0])
    if args.optimizer == "gd" and np.unique(result.lr).size == 1:
        steps_label = f"step (t = {result.lr[0]:g}·step)"
    else:
        steps_label = "step" if args.optimizer != "gd" else time_label
    # the figure shows the smallest initialization, where the staircase is clearest
    best = int(np.argmax(result.gamma))
    picks = sorted({0, len(steps) // 3, len(steps) - 1})
    results.save_figure(plots.training_figure(result, curves, steps_label), out / "training.png")
    results.save_figure(
        plots.embedding_geometry_figure(
            result.trajectory.W_E[best],
            steps,
            curves,
            picks,
            f"{args.task}, {args.model}, γ={result.gamma[best]:g}, seed={result.seed[best]}",
        ),
        out / "geometry.png",
    )
    results.write_npz(out / "alignment.npz", **curves._asdict())
    summary = json.loads((out / "metrics.json").read_text())
    summary["alignment"] = {
        "group": curves.group,
        "rho0_method": curves.rho0_method,
        "steps": steps,
        "rho0": curves.rho0,
        "probe_steps": curves.probe_steps,
        "probe_heldout_corr": curves.probe_corr,
        "probe_heldout_mse": curves.probe_mse,
    }
    results.write_json(out / "metrics.json", summary)

    table = Table(title=f"{args.task} ({ds.params}), {args.model}, {args.optimizer}")
    for column in (
        "γ",
        "seed",
        "lr",
        "status",
        "final loss",
        "final acc",
        "max ρ0 (step)",
        "final ρ0",
        "final probe",
    ):
        table.add_column(column)
    for lane, status in enumerate(result.status):
        peak = int(np.nanargmax(curves.rho0[lane]))
        probe = f"{curves.probe_corr[lane, -1]:.3f}" if curves.probe_steps.size else "-"
        table.add_row(
            f"{result.gamma[lane]:g}",
            str(result.seed[lane]),
            f"{result.lr[lane]:g}",
            status,
            f"{result.trajectory.loss[lane, -1]:.4f}",
            f"{result.trajectory.accuracy[lane, -1]:.3f}",
            f"{curves.rho0[lane, peak]:.3f} ({steps[peak]})",
            f"{curves.rho0[lane, -1]:.3f}",
            probe,
        )
    console.print(table)
    console.print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


def _theory(args: argparse.Namespace) -> int:
    from ctx_staircase import comparison, plots, results, tasks

    ds = tasks.make(args.task, **_parse_params(args.param))
    settings = dict(
        model=args.model,
        gammas=args.gamma,
        max_orders=args.max_order,
        d=args.d,
        activation=args.activation,
        lr=args.lr,
        steps=args.steps,
        snapshot_every=args.snapshot_every,
        threshold=args.threshold,
        prediction=args.prediction,
    )
    comparison.check_theory_inputs(ds, **settings)  # bad input: one line, exit 2, no work done
    out = args.out or Path("runs") / f"theory_{args.task}_{args.model}"
    console = Console(stderr=True)
    start = time.perf_counter()
    with console.status("training, integrating the theory, comparing (first call compiles)"):
        experiment = comparison.theory_vs_training(ds, seed=args.seed, **settings)
    for note in experiment["notes"]:
        console.print(f"note: {note}")
    title = f"{args.task} {ds.params}, {args.model}, d={args.d}"
    if args.model == "ffn":
        title += f", σ={args.activation}"
    summary = comparison.experiment_summary(experiment)
    summary.update(
        task=args.task,
        params=ds.params,
        lr=args.lr,
        seconds=time.perf_counter() - start,
        environment=results.environment(),
    )
    overlay = plots.theory_overlay_figure(experiment, title)
    escape = plots.escape_time_figure(experiment, title)
    results.save_figure(overlay, out / "theory_overlay.png")
    results.save_figure(escape, out / "escape_time.png")
    results.write_json(out / "metrics.json", summary)

    table = Table(title=title)
    columns = ("γ", "theory", "solver", "W_E err (pre-esc.)", "t_esc theory", "t_esc train")
    for column in (*columns, "ratio", "ρ0 onset th/tr"):
        table.add_column(column)
    for run in summary["runs"]:
        for name, c in run["comparisons"].items():
            onset = c["onset_time"]
            solver = run["solver"].get(name, {"ok": True, "result": "closed form"})
            table.add_row(
                f"{run['gamma']:g}",
                name,
                solver["result"],
                f"{c['weight_rel_error_max']:.3f}",
                f"{c['escape_time']['theory']:.1f}",
                f"{c['escape_time']['simulation']:.1f}",
                f"{c['escape_ratio']:.3f}",
                f"{onset['theory'][0]:.1f}/{onset['simulation'][0]:.1f}",
            )
    console.print(table)
    for line in comparison.solver_failures(experiment):
        console.print(f"solver failure: {line}")
    slopes = ", ".join(f"{k} {v:.2f}" for k, v in summary["escape_slope"].items())
    if args.model == "ffn":
        console.print(f"escape-time slope dt/dγ: {slopes} (analytic: ln d / (C_1 s_1), eq. C8)")
    else:
        law = summary["law"]
        console.print(
            f"plateau law t* = T_Z d^(2γ) - c (A5b): T_Z = {law['blowup_time_T_Z']:.4g}, "
            f"c = {law['offset_c']:.3g}; predicted "
            + ", ".join(f"{t:.1f}" for t in summary["escape"]["plateau_law"])
        )
        console.print(f"log-escape slope d ln t/dγ: {slopes} (analytic: 2 ln d)")
    console.print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


def _run(args: argparse.Namespace) -> int:
    from ctx_staircase import experiments
    from ctx_staircase.experiments.cli import print_record

    if args.list:
        for name in (experiments.FLAGSHIP, *experiments.names(), *experiments.TEXT_EXPERIMENTS):
            print(f"{name:24s} {experiments.load(name).TITLE}")
        return 0
    name = args.name or experiments.FLAGSHIP
    experiments.load(name)  # an unknown name fails here, before anything is written
    if args.tiny and name not in (experiments.FLAGSHIP, "lm_builtin", "lm_text"):
        raise ValueError(
            f"--tiny applies to the flagship, lm_builtin and lm_text only; got name {name!r}"
        )
    if args.tiny and args.full:
        raise ValueError("--tiny and --full exclude each other")
    out = args.out or DEFAULT_RUN_OUT.parent / name
    record = experiments.execute(name, full=args.full, root=out, tiny=args.tiny)
    print_record(record)
    Console(stderr=True).print(f"wrote {out}/ (results/{name}.json, figures/)")
    return 0


def _lm(args: argparse.Namespace) -> int:
    import dataclasses

    from ctx_staircase import lm, results, signatures, text
    from ctx_staircase.experiments import lm_builtin, lm_text

    if args.tiny:
        config = lm_text.lm_config(tiny=True)
    else:
        config = lm.LMConfig(
            d=args.d,
            n_layers=args.layers,
            n_heads=args.heads,
            context_length=args.context,
            batch_size=args.batch_size,
            steps=args.steps,
            lr=args.lr,
            snapshot_every=min(args.snapshot_every, args.steps),
        )
    builtin = args.text is None
    source = text.builtin_corpus() if builtin else text.load_text(args.text)
    vocab_size = args.vocab_size
    if vocab_size is None and not builtin:  # the default 2000 words, or every word if fewer
        many = len(set(text.tokenize(source))) > text.DEFAULT_VOCAB_SIZE
        vocab_size = text.DEFAULT_VOCAB_SIZE if many else None
    corpus = text.prepare_corpus(source, vocab_size=vocab_size)
    out = args.out or Path("runs") / "lm"
    console = Console(stderr=True)
    start = time.perf_counter()
    with console.status(f"training {len(args.gamma)} GPT lanes, {config.steps} steps"):
        trajectory, _, curves = lm_text.train_and_measure(
            corpus,
            config,
            gammas=args.gamma,
            seed=args.seed,
            probe_steps=50 if args.tiny else 300,
        )
    summary = lm_text.summarize(trajectory, curves)
    figures = {
        "curves": lm_text.figure(trajectory, curves, f"{'built-in' if builtin else args.text.name}")
    }
    record: dict[str, Any] = {
        "text": "builtin" if builtin else str(args.text),
        "tokens_train": int(corpus.train.size),
        "vocab_size": corpus.vocab_size,
        "gammas": list(args.gamma),
        "seed": args.seed,
        "config": dataclasses.asdict(config),
        "summary": summary,
        "curves": lm_text.curve_lists(trajectory, curves),
    }
    if builtin:
        record["embedding_structure"] = {
            f"{g:g}": lm_builtin.structure(trajectory.final_W_E[i], corpus.vocabulary)
            for i, g in enumerate(trajectory.gammas)
        }
        figures["semantics"] = lm_builtin.semantic_figure(
            signatures.next_token_signature(corpus.train, corpus.vocab_size)[0],
            trajectory.final_W_E[0],
            corpus.vocabulary,
        )
    record["seconds"] = time.perf_counter() - start
    record["environment"] = results.environment()
    results.write_npz(
        out / "arrays.npz",
        **{f"trajectory_{k}": v for k, v in trajectory._asdict().items()},
        **{f"curves_{k}": v for k, v in curves._asdict().items()},
    )
    for name, fig in figures.items():
        results.save_figure(fig, out / f"{name}.png")
    results.write_json(out / "metrics.json", record)

    table = Table(title=f"LM signature alignment ({record['text']}, {config.steps} steps)")
    for column in (
        "gamma",
        "rho_next 0 → peak (step) → final",
        "rho_pre final",
        "rho_attn final",
        "probe MSE/var",
        "val loss",
    ):
        table.add_column(column)
    for gamma, row in summary.items():
        table.add_row(
            gamma,
            f"{row['rho_next_start']:.2f} → {row['rho_next_peak']:.2f} "
            f"({row['rho_next_peak_step']}) → {row['rho_next_final']:.2f}",
            f"{row['rho_previous_final']:.2f}",
            ", ".join(f"{v:.2f}" for v in row["rho_attention_final"]),
            f"{row['probe_mse_ratio_median']:.2f}",
            f"{row['validation_loss_final']:.3f}",
        )
    console.print(table)
    console.print(
        f"wrote {out}/ (metrics.json, arrays.npz, {', '.join(f + '.png' for f in figures)}) in "
        f"{record['seconds']:.1f} s"
    )
    return 0


def _signature_report(task: str, params: dict, order: int, group: str | None, out: Path) -> None:
    from ctx_staircase import geometry, plots, results, tasks

    console = Console(stderr=True)
    start = time.perf_counter()
    ds = tasks.make(task, **params)
    if order < 0 or order > ds.L - 1:
        raise ValueError(f"--order must lie in [0, L-1] = [0, {ds.L - 1}] for {task}; got {order}")
    geom = geometry.signature_geometry(ds, order, group=group, progress=True)
    figure = plots.signature_geometry_figure(geom, task)
    seconds = time.perf_counter() - start
    summary = {
        "task": task,
        "params": ds.params,
        "n": ds.n,
        "L": ds.L,
        "vocab_size": ds.vocab_size,
        "group": geom.group,
        "alphas": geom.alphas,
        "max_order": order,
        "geometry": geom.summary,
        "seconds": seconds,
        "status": "ok",
        "environment": results.environment(),
    }
    # Everything is computed before the first write: a failure leaves no partial output.
    results.write_npz(out / "arrays.npz", alphas=geom.alphas, **geom.similarity)
    results.save_figure(figure, out / "signature_geometry.png")
    results.write_json(out / "metrics.json", summary)

    table = Table(title=f"{task} {ds.params}: signature geometry of '{geom.group}'")
    for column in ("matrix", "off-diag mean", "min", "max", "PCA var (1,2)", "vs order 0"):
        table.add_column(column)
    for name, row in geom.summary.items():
        pca = ", ".join(f"{v:.2f}" for v in row["pca_explained_variance"])
        align = row["alignment_with_order0"]
        table.add_row(
            name,
            _fmt(row["offdiag_mean"]),
            _fmt(row["offdiag_min"]),
            _fmt(row["offdiag_max"]),
            pca,
            f"{align['value']:.3f} ({align['method']})",
        )
    console.print(table)
    console.print(
        f"wrote {out}/ (arrays.npz, signature_geometry.png, metrics.json) in {seconds:.1f} s"
    )


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--param must look like KEY=VALUE; got {item!r}")
        try:
            params[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            params[key] = raw
    return params


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
