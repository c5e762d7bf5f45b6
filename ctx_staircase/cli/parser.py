"""The argument parser of every subcommand: the top-level flags, the shared ``--max-memory``
and cluster flags, and one `common.Command` per subcommand module, in the order ``--help``
lists them."""

from __future__ import annotations

import argparse

from ctx_staircase import __version__
from ctx_staircase.cli import listing, lm, measure, run, signatures, theory, train
from ctx_staircase.cli.common import Help, Parser, add_command, integer

__all__ = [
    "parser",
]

#: The subcommands, in the order of ``ctx-staircase --help``.
_COMMANDS = (
    run.COMMAND,
    listing.COMMAND,
    signatures.COMMAND,
    train.COMMAND,
    lm.COMMAND,
    measure.COMMAND,
    theory.COMMAND,
)


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (one-line errors, defaults shown in ``--help``)."""
    top = Parser(
        prog="ctx-staircase",
        description="Which statistics of the data does a token embedding learn, and when?",
        formatter_class=Help,
    )
    top.add_argument("--version", action="version", version=f"ctx-staircase {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    memory, cluster = _memory(), _cluster()
    for command in _COMMANDS:
        add_command(commands, command, memory, cluster)
    return top


def _memory() -> argparse.ArgumentParser:
    memory = Parser(add_help=False)
    memory.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="memory limit for the up-front estimate, e.g. 8GiB or 500MB (default: 80%% of the "
        "available memory, or $CTX_STAIRCASE_MAX_MEMORY)",
    )
    return memory


def _cluster() -> argparse.ArgumentParser:
    cluster = Parser(add_help=False)
    joining = cluster.add_argument_group(
        "several processes or hosts (jax.distributed.initialize; README: On a cluster)"
    )
    joining.add_argument(
        "--coordinator", default=None, metavar="HOST:PORT", help="process 0's address and port"
    )
    joining.add_argument(
        "--num-processes", type=integer(1, 1_000_000), default=None, help="processes in all"
    )
    joining.add_argument(
        "--process-id", type=integer(0, 1_000_000), default=None, help="this process's index"
    )
    joining.add_argument(
        "--cluster-auto",
        action="store_true",
        help="let jax.distributed.initialize detect the cluster (SLURM, Open MPI, TPU pods)",
    )
    return cluster
