"""Entry point shared by the thin scripts in sims/: ``python sims/NAME.py [--full]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ctx_staircase.experiments import execute, verdict


def main(
    name: str, argv: list[str] | None = None, *, root: Path | None = None, text: Path | None = None
) -> dict:
    """Parse ``--full``, ``--root`` (default ``root``) and ``--text FILE`` (when ``text`` gives
    the default file), run the experiment and print its claims. Ctrl-C prints one line and
    exits 130; rerunning resumes the experiment from its saved lanes."""
    parser = argparse.ArgumentParser(description=f"run the {name} experiment")
    if text is not None:
        parser.add_argument("--text", type=Path, default=text, help=f"text file (default {text})")
    parser.add_argument("--full", action="store_true", help="the paper's sizes (for a GPU)")
    parser.add_argument(
        "--regime",
        default=None,
        help="training regime, e.g. gd-wide (the primary), adam-minimal (regime study only)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="the regime study's reduced sizes (no figures)"
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=root,
        required=root is None,
        help=f"folder receiving results/ and figures/ (default {root})",
    )
    args = parser.parse_args(argv)
    options = {"text_path": args.text} if text is not None else {}
    if args.regime is not None or args.quick:
        options.update(regime=args.regime, quick=args.quick)
    try:
        record = execute(name, full=args.full, root=args.root, **options)
    except KeyboardInterrupt:
        print(f"{name}: interrupted; rerun the same command to resume", file=sys.stderr)
        raise SystemExit(130) from None
    print_record(record)
    return record


def _module_main() -> None:
    """``python -m ctx_staircase.experiments.cli NAME [options]`` (the regime study's units)."""
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m ctx_staircase.experiments.cli NAME [--regime R] ...")
    main(sys.argv[1], sys.argv[2:])


def print_record(record: dict) -> None:
    table = Table(title=f"{record['name']}: {record['title']} ({record['seconds']:.0f} s)")
    for column in ("item", "claim", "measured", "criterion", "null", "result"):
        table.add_column(column)
    for claim in record["claims"]:
        table.add_row(
            claim["item"],
            claim["claim"],
            claim["measured"],
            claim["criterion"],
            claim.get("null", ""),
            verdict(claim),
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    _module_main()
