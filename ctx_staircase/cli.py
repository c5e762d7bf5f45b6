"""Command line: ``ctx-staircase {run,list,signatures}``.

Thin by design: parse, validate, call the library, print, save. A bad input becomes one line on
stderr and exit code 2, with no traceback and no output files.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

DEFAULT_RUN_OUT = Path("runs/staircase")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, TypeError) as err:
        print(f"ctx-staircase {args.command}: error: {err}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctx-staircase",
        description="Which statistics of the data does a token embedding learn, and when?",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="the main job (default: signature geometry of `add`)")
    run.add_argument("--out", type=Path, default=DEFAULT_RUN_OUT, help="output folder")
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


def _run(args: argparse.Namespace) -> int:
    _signature_report("add", {"N": 20}, 1, None, args.out)
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
