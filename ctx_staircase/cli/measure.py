"""``ctx-staircase measure``: the signature alignment (paper §6.1) of embedding snapshots
trained elsewhere, on a token stream (rho_next and the prefix probe) or on a task (rho_0,
rho_(1),k and the probe), each against its row-permuted null."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import TASK_PARAMS, Command, deprecated, flag, integer, out_flag
from ctx_staircase.internal import INT32_MAX, SEED_MAX

__all__ = [
    "COMMAND",
]


def _handler(args: argparse.Namespace) -> int:
    """Check the flags, load the data and the snapshots, measure, save and print."""
    from ctx_staircase import checkpoints, measure, plots, results, word_vectors

    if args.labels is not None and len(args.labels) != len(args.snapshots):
        raise ValueError(
            f"--labels: give one per snapshot ({len(args.snapshots)}); got {len(args.labels)}"
        )
    if args.task is None and args.param:
        raise ValueError("--param applies with --task, not with --tokens")
    if args.task is not None and args.tokenizer is not None:
        raise ValueError("--tokenizer applies with --tokens, not with --task")
    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / "measure")
    start = time.perf_counter()
    # read lazily (headers, and a word-vector file's words): the rows come when measured
    snapshots = [checkpoints.load_embedding(path, args.key) for path in args.snapshots]
    if args.task is not None:  # a task measures its own token group: no stream settings
        data, source, options = common.make_task(args), f"task {args.task}", {}
    else:
        vocabulary = next((s.vocabulary for s in snapshots if s.vocabulary is not None), None)
        data = checkpoints.load_tokens(
            args.tokens,
            args.tokenizer,
            vocabulary=vocabulary,
            case=word_vectors.Case(args.case),
            punctuation=args.punctuation == "keep",
            oov=args.oov,
        )
        source = str(args.tokens)
        options = dict(context_length=args.context, count=args.tracked, min_count=args.min_count)
    with common.bar(f"measuring {len(args.snapshots)} snapshots"):
        measured = measure.measure_snapshots(
            data, snapshots, steps=args.labels, key=args.key, seed=args.probe_seed, **options
        )
    record = {
        "data": source,
        **measured.to_json(),
        "seconds": time.perf_counter() - start,
        "environment": results.environment(),
    }
    plots.save_figure(plots.measurement_figure(measured, source), out / "alignment.png")
    results.write_npz(
        out / "curves.npz",
        steps=measured.steps,
        tracked=measured.tracked,
        **measured.alignment,
        **{f"null_{k}": v for k, v in measured.null.items()},
        **{f"probe_{k}": v for k, v in measured.probe.items()},
    )
    results.write_json(out / "metrics.json", record)  # last: its presence marks a finished run
    _print(measured, source)
    common.stderr().print(f"wrote {out}/ (metrics.json, curves.npz, alignment.png)")
    return 0


def _print(measured, source: str) -> None:
    """One row per snapshot: its headline alignment, the null's, and the probe."""
    headline = measured.headline
    table = Table(title=f"{headline} of {len(measured.steps)} snapshots ({source})")
    for column in ("step", headline, f"null {headline}", "probe corr", "d", "snapshot"):
        table.add_column(column)
    for i, step in enumerate(measured.steps):
        table.add_row(
            str(step),
            f"{measured.alignment[headline][i]:.3f}",
            f"{measured.null[headline][i]:.3f}",
            common.fmt(float(measured.probe["corr"][i])),
            str(measured.widths[i]),
            f"{measured.sources[i]} [{measured.keys[i]}]",
        )
    common.stdout().print(table)
    if "baseline_mse" in measured.probe:  # a stream's probe: is it better than a constant?
        worse = [
            str(step)
            for step, mse, constant in zip(
                measured.steps, measured.probe["mse"], measured.probe["baseline_mse"], strict=True
            )
            if mse > constant
        ]
        if worse:
            common.stdout().print(
                f"the probe does worse than a constant (held-out MSE above the held-out variance) "
                f"at step {', '.join(worse)}: its correlation there means nothing"
            )
    settings = measured.settings
    if "oov_share" in settings:
        common.stdout().print(
            f"tokenized by the vectors' words: {settings['words']} words, "
            f"{settings['oov_share']:.1%} not in the vocabulary, {settings['oov']} (--oov)"
        )
    if measured.semantic:
        first, last = measured.semantic["first"], measured.semantic["last"]
        shown = ", ".join(f"{k} {first[k]:.2f} → {last[k]:.2f}" for k in last)
        common.stdout().print(
            f"semantic structure of the word groups (first → last snapshot): {shown}"
        )


def _data(parser: argparse.ArgumentParser) -> None:
    """The data measured on: a token stream or a task, one of them."""
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--tokens",
        type=Path,
        default=None,
        help="token ids (.npy/.npz) or a UTF-8 text file (with --tokenizer, or the package's "
        "word tokenizer)",
    )
    data.add_argument("--task", default=None, help="a task instead (see `ctx-staircase list`)")


COMMAND = Command(
    "measure",
    "measure the signature alignment of any model's embedding checkpoints",
    (
        TASK_PARAMS,
        flag("--snapshots", type=Path, nargs="+", required=True,
             help="one embedding snapshot each"),
        flag("--key", default=None, help="the embedding tensor's name (default: found)"),
        flag("--labels", type=integer(0, 2**63 - 1), nargs="+", default=None,
             help="each snapshot's step label (default: from its name, else its position)"),
        deprecated("--steps", "--labels", "labels", type=integer(0, 2**63 - 1), nargs="+"),
        flag("--tokenizer", type=Path, default=None,
             help="an HF tokenizer.json: the model's own, whose ids are the snapshot's rows"),
        flag("--case", default="fallback", choices=("fallback", "exact", "lower"),
             help="word vectors: how a text's word is looked up in their vocabulary (fallback: "
                  "as written, else lowercased)"),
        flag("--punctuation", default="keep", choices=("keep", "drop"),
             help="word vectors: punctuation marks as tokens of their own, or dropped"),
        flag("--oov", default="unknown", choices=("unknown", "drop"),
             help="word vectors: a word not in their vocabulary stays in the stream as one "
                  "unknown id that is never measured (unknown), or is removed (drop)"),
        flag("--context", type=integer(2, INT32_MAX), default=None,
             help="tokens per window, >= 2 (default: the token file's, else 64)"),
        flag("--tracked", type=integer(4, INT32_MAX), default=200, help="tokens to measure"),
        flag("--min-count", type=integer(1, INT32_MAX), default=20,
             help="occurrences a tracked token needs"),
        flag("--probe-seed", type=integer(0, SEED_MAX), default=0,
             help="seed of the probe's split and init and of the null's permutation"),
        deprecated("--seed", "--probe-seed", "probe_seed", type=integer(0, SEED_MAX)),
        out_flag("runs/measure"),
        common.FORCE,
    ),
    _handler,
    description="Measure rho_next and the prefix probe (paper §6.1) of input-embedding "
    "snapshots trained elsewhere, on a token stream; or rho_0, rho_(1),k and the probe on a "
    "task. Snapshots: .npy, .npz, .safetensors, Hugging Face model folders, torch .pt/.bin "
    "(needs torch), and word vectors (word2vec text or binary, GloVe text, fastText .bin), "
    "which carry their own words: a text is tokenized by them. A checkpoint's rows are its "
    "tokenizer's ids, so a text needs --tokenizer (or ids in .npy/.npz).",
    sweeps=False,
    extend=_data,
)  # fmt: skip
