"""``ctx-staircase lm``: a small GPT trained on a text (paper App. A.4) and its signature
alignment over time (paper §6.1): rho_next, the prefix probe, and on the built-in corpus the
semantic structure of its embeddings."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import Command, deprecated, flag, integer, out_flag, real
from ctx_staircase.internal import INT32_MAX, SEED_MAX

__all__ = [
    "COMMAND",
    "LM_STANDARD",
    "LM_TINY",
    "lm_config",
]

#: The ``lm`` subcommand's sizes under ``--tiny`` (a seconds-long smoke run), flag by flag.
LM_TINY = dict(steps=40, d=32, layers=1, heads=2, context=16, batch_size=8, snapshot_every=10)
#: The ``lm`` subcommand's standard sizes, flag by flag (a flag you set always wins).
LM_STANDARD = dict(
    steps=1000, d=128, layers=2, heads=4, context=64, batch_size=32, snapshot_every=20
)


def lm_config(args: argparse.Namespace):
    """The `lm.LMConfig` of an ``lm`` command line: each size flag you set, else its standard
    size (`LM_STANDARD`), or its smoke-run size (`LM_TINY`) with ``--tiny``."""
    from ctx_staircase import lm

    sizes = LM_TINY if args.tiny else LM_STANDARD
    chosen = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in sizes.items()}
    tiny_extra = (
        dict(tracked=24, min_count=5, probe_vocabulary=24, signature_windows=16,
             validation_windows=8)
        if args.tiny
        else {}
    )  # fmt: skip
    return lm.LMConfig(
        d=chosen["d"],
        n_layers=chosen["layers"],
        n_heads=chosen["heads"],
        context_length=chosen["context"],
        batch_size=chosen["batch_size"],
        steps=chosen["steps"],
        lr=args.lr if args.lr is not None else 3e-3,
        snapshot_every=min(chosen["snapshot_every"], chosen["steps"]),
        **tiny_extra,
    )


def _handler(args: argparse.Namespace) -> int:
    """Prepare the corpus, check the memory, then train, measure, save and print."""
    from ctx_staircase import budget, text

    config = lm_config(args)
    common.check_gammas(args.gamma, config.d)
    if len(args.seeds) != 1:
        raise ValueError(f"--seeds: lm starts every lane from one seed; got {args.seeds}")
    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / "lm")
    builtin = args.text is None
    source = text.builtin_corpus() if builtin else text.load_text(args.text)
    vocab_size = args.vocab_size
    if vocab_size is None and not builtin:  # the default 2000 words, or every word if fewer
        many = len(set(text.tokenize(source))) > text.DEFAULT_VOCAB_SIZE
        vocab_size = text.DEFAULT_VOCAB_SIZE if many else None
    corpus = text.prepare_corpus(source, vocab_size=vocab_size)
    budget.check(
        budget.lm_bytes(config, corpus.vocab_size, lanes=len(args.gamma)),
        what=f"lm d={config.d}, {config.n_layers} layers, context {config.context_length}, "
        f"batch {config.batch_size}, vocabulary {corpus.vocab_size}, {len(args.gamma)} lanes",
        knob="lower --d, --layers, --context, --batch-size, --words or the number of --gamma",
        limit=common.limit(args),
    )
    return _lm_and_report(args, config, corpus, builtin, out)


def _lm_and_report(args, config, corpus, builtin: bool, out: Path) -> int:
    from ctx_staircase import lm_study, metrics, results

    start = time.perf_counter()
    with common.bar(f"training {len(args.gamma)} GPT lanes, {config.steps} steps"):
        trajectory, _, curves = lm_study.train_and_measure(
            corpus,
            config,
            gammas=args.gamma,
            seed=args.seeds[0],
            probe_steps=50 if args.tiny else metrics.PROBE_STEPS,
            out=out / "lanes",
        )
    summary = lm_study.summarize(trajectory, curves)
    record: dict[str, Any] = {
        "text": "builtin" if builtin else str(args.text),
        "tokens_train": int(corpus.train.size),
        "vocab_size": corpus.vocab_size,
        "gammas": list(args.gamma),
        "seed": args.seeds[0],
        "tiny": args.tiny,
        "config": dataclasses.asdict(config),
        "summary": summary,
        "curves": lm_study.curve_lists(trajectory, curves),
    }
    if builtin:
        record["embedding_structure"] = {
            f"{g:g}": lm_study.structure(trajectory.final_W_E[i], corpus.vocabulary)
            for i, g in enumerate(trajectory.gammas)
        }
    figures = _save(args, config, corpus, builtin, trajectory, curves, out)
    record["seconds"] = time.perf_counter() - start
    record["environment"] = results.environment()
    results.write_json(out / "metrics.json", record)  # last: its presence marks a finished run
    common.stdout().print(_table(record, config, summary))
    common.stderr().print(
        f"wrote {out}/ (metrics.json, arrays.npz, {', '.join(f + '.png' for f in figures)}) in "
        f"{record['seconds']:.1f} s"
    )
    return 0


def _save(args, config, corpus, builtin: bool, trajectory, curves, out: Path) -> list[str]:
    """The arrays, the figures (their names returned) and the tokens and embeddings that
    ``ctx-staircase measure --tokens out/embeddings/tokens.npz`` reads back."""
    from ctx_staircase import checkpoints, lm_study, plots, results, signatures

    name = "built-in" if builtin else args.text.name
    figures = {"curves": lm_study.curves_figure(trajectory, curves, name)}
    if builtin:
        figures["semantics"] = lm_study.semantic_figure(
            signatures.next_token_signature(corpus.train, corpus.vocab_size)[0],
            trajectory.final_W_E[0],
            corpus.vocabulary,
        )
    results.write_npz(
        out / "arrays.npz",
        **{f"trajectory_{k}": v for k, v in trajectory._asdict().items()},
        **{f"curves_{k}": v for k, v in curves._asdict().items()},
    )
    for figure_name, fig in figures.items():
        plots.save_figure(fig, out / f"{figure_name}.png")
    checkpoints.export_tokens(
        out / "embeddings" / "tokens.npz", corpus.train, trajectory.tracked, config.context_length
    )
    source = "builtin" if builtin else str(args.text)
    checkpoints.export_lanes(
        out / "embeddings",
        trajectory.W_E,
        trajectory.gammas,
        trajectory.steps,
        {"text": source, "seed": str(args.seeds[0])},
    )
    return list(figures)


def _table(record: dict, config, summary: dict) -> Table:
    """One row per gamma: rho_next over training and the final alignments, probe and loss."""
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
    return table


def _size(name: str, low: int, high: int, words: str):
    """A size flag of the table: unset, it takes `LM_STANDARD` (or `LM_TINY` with ``--tiny``)."""
    key = name[2:].replace("-", "_")
    default = f"(default: {LM_STANDARD[key]}; with --tiny: {LM_TINY[key]})"
    return flag(name, type=integer(low, high), default=None, help=f"{words} {default}")


COMMAND = Command(
    "lm",
    "train a small GPT on text and measure its signature alignment over time",
    (
        flag("--text", type=Path, default=None,
             help="a UTF-8 text file (default: the built-in corpus)"),
        flag("--gamma", type=real(), nargs="+", default=[1.0, 0.5],
             help="init scales d^-gamma (one lane each)"),
        flag("--seeds", type=integer(0, SEED_MAX), nargs="+", default=[0],
             help="seeds: one, the init of every lane (default: 0)"),
        deprecated("--seed", "--seeds", "seeds", type=lambda v: [integer(0, SEED_MAX)(v)]),
        _size("--steps", 1, INT32_MAX, "training steps of AdamW"),
        _size("--d", 1, INT32_MAX, "width of the model"),
        _size("--layers", 1, 4096, "transformer layers"),
        _size("--heads", 1, 4096, "attention heads"),
        _size("--context", 2, INT32_MAX, "tokens per window"),
        _size("--batch-size", 1, INT32_MAX, "samples per step: windows"),
        _size("--snapshot-every", 1, INT32_MAX, "steps between snapshots"),
        flag("--lr", type=real(0, strict=True), default=None,
             help="learning rate at its peak (default: 3e-3)"),
        flag("--words", dest="vocab_size", type=integer(2, INT32_MAX), default=None,
             help="words kept in the vocabulary, <unk> on top (default: 2000, or all if fewer)"),
        deprecated("--vocab-size", "--words", "vocab_size", type=integer(2, INT32_MAX)),
        flag("--tiny", action="store_true",
             help="a smoke run: small sizes for the flags you leave unset "
                  f"(steps {LM_TINY['steps']}, d {LM_TINY['d']}, layers {LM_TINY['layers']})"),
        out_flag("runs/lm"),
    ),
    _handler,
    description="Train a small GPT on a text and measure its signature alignment. "
    "Unset size flags take the standard size, or the smoke-run size with --tiny; a flag "
    "you set is always used.",
)  # fmt: skip
