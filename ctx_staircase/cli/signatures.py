"""``ctx-staircase signatures TASK``: the signature geometry of a task up to an order
(theory/signatures.md): heatmaps and PCA of every order's cosine matrix, and their summary."""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import TASK, Command, flag, integer, out_flag

__all__ = [
    "COMMAND",
]


def _handler(args: argparse.Namespace) -> int:
    """Check the order and the memory, compute the geometry, save it and print its table."""
    from ctx_staircase import budget, geometry, plots, results

    out = common.out_dir(args, common.DEFAULT_RUN_ROOT / f"signatures_{args.task}")
    ds = common.make_task(args)
    order = args.order
    if order > ds.L - 1:
        raise ValueError(
            f"--order must lie in [0, L-1] = [0, {ds.L - 1}] for {args.task}; got {order}"
        )
    request = dict(what=f"signatures of {args.task} up to order {order}",
                   knob="lower --order or the task size (--param)")  # fmt: skip
    budget.check_signature_shapes(ds, order, args.group, **request)  # each order's own cap
    budget.check(budget.signature_bytes(ds, order, args.group), limit=common.limit(args), **request)
    start = time.perf_counter()
    geom = geometry.signature_geometry(ds, order, group=args.group, progress=True)
    figure = plots.signature_geometry_figure(geom, args.task)
    seconds = time.perf_counter() - start
    summary = {
        "task": args.task,
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
    results.write_npz(out / "arrays.npz", alphas=geom.alphas, **geom.similarity)
    plots.save_figure(figure, out / "signature_geometry.png")
    results.write_json(out / "metrics.json", summary)  # last: its presence marks a finished run
    common.stdout().print(_table(args.task, ds, geom))
    common.stderr().print(
        f"wrote {out}/ (arrays.npz, signature_geometry.png, metrics.json) in {seconds:.1f} s"
    )
    return 0


def _table(task: str, ds, geom) -> Table:
    """One row per signature matrix: off-diagonal statistics, PCA, alignment with order 0."""
    table = Table(title=f"{task} {ds.params}: signature geometry of '{geom.group}'")
    for column in ("matrix", "off-diag mean", "min", "max", "PCA var (1,2)", "vs order 0"):
        table.add_column(column)
    for name, row in geom.summary.items():
        pca = ", ".join(f"{v:.2f}" for v in row["pca_explained_variance"])
        align = row["alignment_with_order0"]
        table.add_row(
            name,
            common.fmt(row["offdiag_mean"]),
            common.fmt(row["offdiag_min"]),
            common.fmt(row["offdiag_max"]),
            pca,
            f"{align['value']:.3f} ({align['method']})",
        )
    return table


COMMAND = Command(
    "signatures",
    "signature geometry of a task",
    (
        *TASK,
        flag("--order", type=integer(0, 64), default=1, help="highest signature order m (<= L-1)"),
        flag("--group", default=None, help="token group for alpha (default: numbers)"),
        out_flag("runs/signatures_TASK"),
        common.FORCE,
    ),
    _handler,
    sweeps=False,
)
