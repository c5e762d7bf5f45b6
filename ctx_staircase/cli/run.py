"""``ctx-staircase run [NAME]``: the flagship staircase run, or one reproduction experiment of
`experiments.REGISTRY`, with its claims printed as a table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import Command, flag, out_flag

__all__ = [
    "COMMAND",
    "print_record",
]


def _handler(args: argparse.Namespace) -> int:
    """List the experiments, or run one (checked, estimated, then executed) and print it."""
    from ctx_staircase import experiments
    from ctx_staircase.experiments import Verdict

    if args.list:
        if args.name is not None:
            raise ValueError(f"--list takes no experiment name; got {args.name!r}")
        for experiment in experiments.REGISTRY:
            print(f"{experiment.name:24s} {experiment.title}")
        print(
            "\nevery experiment takes --tiny: a smoke run of every stage at small sizes "
            "(about 5-20 s each on 2 CPU cores; its verdicts are smoke checks)"
        )
        return 0
    name = experiments.FLAGSHIP if args.name is None else args.name
    # an unknown name or an option that does not apply fails here, before anything is written
    experiment = experiments.check_options(
        name,
        full=args.full,
        tiny=args.tiny,
        regime=args.regime,
        quick=args.quick,
        corpus=args.text,
    )
    options = _options(args, experiment)
    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / name)
    memory = common.limit(args)  # a bad --max-memory is refused here
    estimate = experiment.memory_bytes(full=args.full, tiny=args.tiny)
    if estimate is not None:
        from ctx_staircase import budget

        budget.check(
            estimate,
            what=f"run {name}{' --full' if args.full else ''}",
            knob="drop --full, use --tiny",
            limit=memory,
        )
    with common.bar(f"{name}: steps trained (the first call of each shape compiles)"):
        record = experiments.execute(name, full=args.full, root=out, tiny=args.tiny, **options)
    print_record(record)
    common.stderr().print(f"wrote {out}/ (results/{name}.json, figures/)")
    failed = [c["item"] for c in record["claims"] if experiments.verdict(c) is Verdict.FAIL]
    if args.strict and failed:
        common.stderr().print(f"--strict: {len(failed)} claim(s) failed: {', '.join(failed)}")
        return 1
    return 0


def _options(args: argparse.Namespace, experiment) -> dict[str, Any]:
    """The experiment's options from the flags, each checked before any work."""
    options: dict[str, Any] = {}
    if args.regime is not None or args.quick:
        from ctx_staircase.experiments import regime

        regime.parse(args.regime)  # an unknown regime is refused before any work
        options.update(regime=args.regime, quick=args.quick)
    if "corpus" in experiment.inputs:
        from ctx_staircase import text

        text.load_text(args.text)  # unreadable, empty or not UTF-8: refused before any work
        options["text_path"] = args.text
    return options


def print_record(record: dict) -> None:
    """An experiment's record (`experiments.execute`) as a table of its claims, on stdout."""
    from ctx_staircase.experiments import shown

    title = f"{record['name']}: {record['title']} ({record['seconds']:.0f} s)"
    if record.get("tiny"):
        title += "\n--tiny: smoke-run sizes; these verdicts are smoke checks, not the claims"
    table = Table(title=title)
    for column in ("item", "claim", "measured", "criterion", "null", "result"):
        table.add_column(column)
    for claim in record["claims"]:
        table.add_row(
            claim["item"],
            claim["claim"],
            claim["measured"],
            claim["criterion"],
            claim.get("null", ""),
            shown(claim),
        )
    common.stdout().print(table)


COMMAND = Command(
    "run",
    "the main job (the staircase on add and mod with the theory), or one experiment",
    (
        flag("name", nargs="?", default=None,
             help="an experiment (see --list); default: the flagship staircase run"),
        flag("--regime", default=None,
             help="training regime, e.g. gd-wide (the primary) or adam-minimal (experiments "
                  "with regimes; default: the primary)"),
        flag("--quick", action="store_true", help="the regime study's reduced sizes (no figures)"),
        flag("--list", action="store_true", help="list the experiments and exit"),
        flag("--full", action="store_true", help="the paper's sizes (for a GPU)"),
        flag("--tiny", action="store_true",
             help="a smoke run of every stage at small sizes (about 5-20 s on 2 cores)"),
        flag("--text", type=Path, default=None,
             help="a UTF-8 text file: the one lm_text needs (no default; sims/lm_text.py "
                  "passes one)"),
        flag("--strict", action="store_true", help="exit 1 when a claim fails"),
        out_flag("runs/NAME"),
    ),
    _handler,
    description="Run the flagship staircase experiment, or one named reproduction "
    "experiment, and print its claims. An interrupted run resumes when rerun.",
)  # fmt: skip
