"""``ctx-staircase train TASK``: a (gamma x seed x lr) sweep of one model on a task, its
alignment with the zero-order signature and the first-order probe over training (paper eq. 7),
figures, and the embeddings exported for ``ctx-staircase measure``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import TASK, Choices, Command, flag, integer, out_flag, real
from ctx_staircase.internal import INT32_MAX, SEED_MAX

__all__ = [
    "COMMAND",
    "WIDE_FACTOR",
]

#: The primary regime's vocabulary: the model's is this many times the data's (theory/regimes.md;
#: `experiments.regime.WIDE_FACTOR`, which a library subcommand does not import).
WIDE_FACTOR = 2


def _handler(args: argparse.Namespace) -> int:
    """Check the settings and the memory, then train, measure, save and print."""
    import jax

    from ctx_staircase import budget, models, sweep, train

    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / f"train_{args.task}_{args.model}")
    datasets = common.make_tasks(args)
    ds = max(datasets, key=lambda d: d.n * d.L)  # the padded shape's size, for the budget
    config = train.TrainConfig(
        optimizer=args.optimizer,
        lr=args.lr[0],
        steps=args.steps,
        batch_size=args.batch_size,
        snapshots=tuple(args.snapshot_steps) if args.snapshot_steps else None,
    )
    model_kwargs: dict = {"d": args.d}
    if args.activation is not None:
        if not models.get(args.model).activation:
            raise ValueError(f"--activation does not apply to --model {args.model} (no activation)")
        model_kwargs["activation"] = args.activation
    if args.float64:
        model_kwargs["dtype"] = "float64"
    model_kwargs["vocab_size"] = (
        args.vocab_size if args.vocab_size is not None else max(map(_wide, datasets))
    )
    for each in datasets:
        _check_probe_group(args, each)
    common.check_gammas(args.gamma, args.d)
    gamma, _, _ = sweep.grid(args.gamma, args.seeds, args.lr)
    lanes = gamma.size * len(datasets)
    budget.check(
        budget.train_bytes(args.model, ds, config, lanes=lanes, **model_kwargs),
        what=f"train {args.model} on {args.task} {ds.params}, d={args.d}, {lanes} lanes",
        knob="lower --param sizes, --d, --steps/--snapshot-steps or the number of lanes",
        limit=common.limit(args),
    )
    with jax.enable_x64(args.float64):
        # checks the kwargs by tracing the model's construction, without compiling it
        jax.eval_shape(
            lambda: train.init_state(args.model, ds, gamma=1.0, seed=0, **dict(model_kwargs))[1]
        )
        return _train_and_report(args, datasets, config, model_kwargs, out)


def _wide(ds) -> int:
    """The primary regime's model vocabulary for ``ds``: `WIDE_FACTOR` times ``V_min`` (one more
    than the largest id the data uses), and at least the data's own vocabulary."""
    minimal = 1 + int(max(np.max(ds.tokens), np.max(ds.labels)))
    return max(WIDE_FACTOR * minimal, ds.vocab_size)


def _check_probe_group(args: argparse.Namespace, ds) -> None:
    """Refuse, before training, a probe its token group is too small for (`metrics.probe_fit`
    needs two token pairs per fold)."""
    from ctx_staircase import geometry, metrics

    group = geometry.default_group(ds)
    tokens, least = geometry.group_tokens(ds, group).size, metrics.probe_min_tokens()
    if args.probe_snapshots and ds.L > 1 and tokens < least:
        raise ValueError(
            f"--probe-snapshots needs a token group of at least {least} tokens (two pairs for "
            f"each of its {metrics.PROBE_FOLDS} folds); {args.task} {ds.params} has {tokens} in "
            f"its group {group!r}: pass --probe-snapshots 0, or a larger task"
        )


class _TrainSummary(NamedTuple):
    """What ``train`` writes to ``metrics.json`` (one record, written once when the run ends).

    Attributes:
        task, params, model: the task name, its parameters and the model name.
        model_kwargs: the model's keyword arguments, as strings.
        config: the `train.TrainConfig` fields.
        grid: the lanes' ``gamma``, ``seed`` and ``lr`` ``[lanes]``.
        status: each lane's status ``[lanes]``.
        final_loss, final_accuracy: ``[lanes]`` at the last snapshot.
        alignment: `geometry.alignment_curves` over the snapshots: ``group``, ``rho0_method``,
            ``steps [S]``, ``rho0 [lanes, S]``, ``probe_steps [P]``, ``probe_heldout_corr`` and
            ``probe_heldout_mse`` ``[lanes, P]``.
        seconds: wall time of training and measuring.
        environment: `results.environment` (versions, devices, source fingerprint).
    """

    task: str
    params: dict
    model: str
    model_kwargs: dict
    config: dict
    grid: dict
    status: Any
    final_loss: Any
    final_accuracy: Any
    alignment: dict
    seconds: float
    environment: dict


def _train_and_report(args, datasets, config, model_kwargs, out: Path) -> int:
    from ctx_staircase import results, sweep

    start = time.perf_counter()
    with common.bar("training lanes (the first call compiles)") as (_, describe):
        result = sweep.train_sweep(
            args.model,
            datasets[0] if len(datasets) == 1 else datasets,
            config,
            gammas=args.gamma,
            seeds=args.seeds,
            lrs=args.lr,
            out=out / "sweep",
            chunk=args.chunk,
            **model_kwargs,
        )
        describe("measuring alignment and fitting probes")
        curves = _alignment(args, datasets, result)
    steps = np.asarray(result.trajectory.steps[0])
    lane_data = _lane_datasets(datasets, result)
    _save(args, datasets, lane_data, result, curves, steps, out)
    grid = {"gamma": result.gamma, "seed": result.seed, "lr": result.lr}
    if result.dataset is not None:
        grid["dataset"] = result.dataset
    summary = _TrainSummary(
        task=args.task,
        params=datasets[0].params if len(datasets) == 1 else [d.params for d in datasets],
        model=args.model,
        model_kwargs={k: str(v) for k, v in model_kwargs.items()},
        config=dict(config.__dict__),
        grid=grid,
        status=[str(s) for s in result.status],
        final_loss=result.trajectory.loss[:, -1],
        final_accuracy=result.trajectory.accuracy[:, -1],
        alignment={
            "group": curves.group,
            "rho0_method": curves.rho0_method,
            "steps": steps,
            "rho0": curves.rho0,
            "probe_steps": curves.probe_steps,
            "probe_heldout_corr": curves.probe_corr,
            "probe_heldout_mse": curves.probe_mse,
        },
        seconds=time.perf_counter() - start,
        environment=results.environment(),
    )
    # written once, last: its presence marks a finished run
    results.write_json(out / "metrics.json", summary._asdict())
    common.stdout().print(_table(args, datasets, lane_data, result, curves, steps))
    common.stderr().print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


def _lane_datasets(datasets, result) -> list:
    """Each lane's dataset."""
    if result.dataset is None:
        return [datasets[0]] * len(result.status)
    return [datasets[i] for i in result.dataset]


def _varied(datasets) -> str | None:
    """The one task parameter whose values tell the datasets apart (None: one dataset)."""
    if len(datasets) == 1:
        return None
    first = datasets[0].params
    return next(k for k in first if any(d.params.get(k) != first[k] for d in datasets))


def _alignment(args, datasets, result):
    """`geometry.alignment_curves` of every lane against its own dataset, in lane order (the
    probe only where every dataset has context, ``L > 1``); ``S_sig0`` is the last dataset's."""
    from ctx_staircase import geometry

    W_E, steps = result.trajectory.W_E, result.trajectory.steps[0]
    probe = args.probe_snapshots if all(d.L > 1 for d in datasets) else 0
    if result.dataset is None:
        return geometry.alignment_curves(W_E, steps, datasets[0], probe_snapshots=probe)
    each = [
        geometry.alignment_curves(W_E[result.dataset == i], steps, ds, probe_snapshots=probe)
        for i, ds in enumerate(datasets)
    ]

    def in_lane_order(field: str) -> np.ndarray:
        combined = np.empty((len(result.status), *getattr(each[0], field).shape[1:]))
        for i, curves in enumerate(each):
            combined[result.dataset == i] = getattr(curves, field)
        return combined

    return each[-1]._replace(
        rho0=in_lane_order("rho0"),
        probe_corr=in_lane_order("probe_corr"),
        probe_mse=in_lane_order("probe_mse"),
    )


def _save(args, datasets, lane_data, result, curves, steps: np.ndarray, out: Path) -> None:
    """The figures, the alignment curves and every lane's embeddings (which `ctx-staircase
    measure --task` reads back)."""
    from ctx_staircase import checkpoints, plots, results

    if args.optimizer == "gd" and np.unique(result.lr).size == 1:
        steps_label = f"step (t = {result.lr[0]:g}·step)"
    else:
        steps_label = "step" if args.optimizer != "gd" else "t = lr·step"
    # the figure shows the smallest initialization, where the staircase is clearest (on the
    # last dataset, whose zero-order signature `_alignment` keeps)
    last = np.arange(len(result.status)) if result.dataset is None else (
        np.flatnonzero(result.dataset == result.dataset.max())
    )  # fmt: skip
    best = int(last[np.argmax(result.gamma[last])])
    varied = _varied(datasets)
    picks = sorted({0, len(steps) // 3, len(steps) - 1})
    rows = None
    if varied is not None:
        rows = [
            (f"{varied}={ds.params[varied]}", np.flatnonzero(result.dataset == i))
            for i, ds in enumerate(datasets)
        ]
    plots.save_figure(
        plots.training_figure(result, curves, steps_label, rows), out / "training.png"
    )
    plots.save_figure(
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
    for lane, ds in enumerate(lane_data):
        folder = f"gamma_{result.gamma[lane]:g}_seed_{result.seed[lane]}_lr_{result.lr[lane]:g}"
        if varied is not None:
            folder = f"{varied}_{ds.params[varied]}_{folder}"
        checkpoints.export_embeddings(
            out / "embeddings" / folder,
            result.trajectory.W_E[lane],
            steps,
            {"task": args.task, "params": repr(ds.params), "model": args.model},
        )


def _table(args, datasets, lane_data, result, curves, steps: np.ndarray) -> Table:
    """One row per lane: its dataset's varied parameter (if several), its grid point, status,
    final loss and accuracy, and alignment."""
    varied = _varied(datasets)
    params = datasets[0].params if varied is None else {
        k: v for k, v in datasets[0].params.items() if k != varied
    }  # fmt: skip
    table = Table(title=f"{args.task} ({params}), {args.model}, {args.optimizer}")
    columns = ("γ", "seed", "lr", "status", "final loss", "final acc", "max ρ0 (step)")
    for column in ((varied,) if varied else ()) + (*columns, "final ρ0", "final probe"):
        table.add_column(column)
    for lane, status in enumerate(result.status):
        rho0 = curves.rho0[lane]
        peak = int(np.nanargmax(rho0)) if np.isfinite(rho0).any() else 0
        probe = f"{curves.probe_corr[lane, -1]:.3f}" if curves.probe_steps.size else "-"
        table.add_row(
            *((str(lane_data[lane].params[varied]),) if varied else ()),
            f"{result.gamma[lane]:g}",
            str(result.seed[lane]),
            f"{result.lr[lane]:g}",
            str(status),
            f"{result.trajectory.loss[lane, -1]:.4f}",
            f"{result.trajectory.accuracy[lane, -1]:.3f}",
            f"{rho0[peak]:.3f} ({steps[peak]})",
            f"{rho0[-1]:.3f}",
            probe,
        )
    return table


COMMAND = Command(
    "train",
    "train a (gamma x seed x lr) sweep and measure alignment",
    (
        *TASK,
        flag("--model", default="ffn", choices=Choices("models", "task_names"), metavar="NAME",
             help="model: %(choices)s"),
        flag("--gamma", type=real(), nargs="+", default=[0.8], help="init scales d^-gamma"),
        flag("--seeds", type=integer(0, SEED_MAX), nargs="+", default=[0], help="seeds"),
        flag("--optimizer", default="gd", choices=Choices("train", "OPTIMIZERS"),
             metavar="NAME",
             help="optimizer: %(choices)s (default gd at --lr 1, the primary regime of `run` and "
                  "of the theory: full-batch Adam erases a small initialization within tens of "
                  "steps; the paper's own setting is --optimizer adam --lr 1e-3)"),
        flag("--lr", type=real(0, strict=True), nargs="+", default=[1.0],
             help="learning rate(s) (default 1, the primary regime's: t = lr * step is then "
                  "the epoch count)"),
        flag("--steps", type=integer(1, INT32_MAX), default=1000,
             help="training steps of the optimizer"),
        flag("--batch-size", type=integer(1, INT32_MAX), default=None,
             help="samples per step: the minibatch (sgd; default: full batch)"),
        flag("--snapshot-steps", type=integer(0, INT32_MAX), nargs="+", default=None,
             help="steps to record (default: log- plus linearly spaced)"),
        flag("--d", type=integer(1, INT32_MAX), default=128, help="width of the embedding"),
        flag("--vocab-size", type=integer(1, INT32_MAX), default=None,
             help="model vocabulary (default: twice V_min, one more than the data's largest id: "
                  "the primary regime's wide vocabulary, whose ids that are never labels give "
                  "the softmax its common drive)"),
        flag("--activation", default=None,
             help="hidden activation of the models that take one: relu, gelu, poly:c1,c2,..., z^K "
                  "(default: the model's, relu)"),
        flag("--float64", action="store_true", help="train in float64"),
        flag("--probe-snapshots", type=integer(0, 10_000), default=8,
             help="snapshots at which to fit the first-order probe (0: none)"),
        flag("--chunk", type=integer(1, 1_000_000), default=None,
             help="lanes per compiled call, saved when it finishes (default: all)"),
        out_flag("runs/train_TASK_MODEL", "; resumes if present"),
    ),
    _handler,
)  # fmt: skip
