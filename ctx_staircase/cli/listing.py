"""``ctx-staircase list``: every task with its parameters and their defaults."""

from __future__ import annotations

import argparse

from rich.table import Table

from ctx_staircase.cli import common
from ctx_staircase.cli.common import Command

__all__ = [
    "COMMAND",
]


def _handler(args: argparse.Namespace) -> int:
    """The table of `tasks.names`, their parameters and summaries, on stdout."""
    from ctx_staircase import tasks

    table = Table(title="tasks", show_lines=False)
    table.add_column("task")
    table.add_column("parameters (defaults)")
    table.add_column("description")
    for name in tasks.names():
        params = ", ".join(f"{k}={v!r}" for k, v in tasks.describe(name).items())
        table.add_row(name, params, tasks.summary(name))
    common.stdout().print(table)
    return 0


COMMAND = Command("list", "list every task with its parameters", (), _handler, computes=False)
