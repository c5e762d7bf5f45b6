"""What every subcommand of the command line shares: the parser's types and help, the flag
tables, the output folder, the memory limit, the progress bar and the task from ``--param``.

Nothing here imports JAX: the parser is built, and ``--help`` and ``--version`` answer, without
it; the library is imported by the handlers, when a command runs.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = [
    "DEFAULT_RUN_ROOT",
    "FORCE",
    "MEANINGS",
    "TASK",
    "TASK_PARAMS",
    "Choices",
    "Command",
    "Flag",
    "Help",
    "Parser",
    "Values",
    "add_command",
    "bar",
    "check_gammas",
    "deprecated",
    "flag",
    "fmt",
    "integer",
    "limit",
    "make_task",
    "make_tasks",
    "out_dir",
    "out_flag",
    "parse_params",
    "real",
    "stderr",
    "stdout",
]

DEFAULT_RUN_ROOT = Path("runs")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE`` and exit 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


class Help(argparse.RawDescriptionHelpFormatter):
    """Appends ``(default: X)`` to every option whose help does not already say its default
    (switches, off by default, excepted); keeps descriptions as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or "default" in text
            or action.default is False
            or action.default == argparse.SUPPRESS
        ):
            return text
        shown = action.default
        if isinstance(shown, list):
            shown = " ".join(str(v) for v in shown) or "none"
        return f"{text} (default: {str(shown).replace('%', '%%')})"


class Choices:
    """The allowed values of a flag, ``ctx_staircase.MODULE.NAME`` (called if a function), read
    when argparse first checks or prints them, so building the parser imports no JAX."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def _values(self) -> tuple:
        import importlib

        values = getattr(importlib.import_module(f"ctx_staircase.{self.module}"), self.name)
        return tuple(values() if callable(values) else values)

    def __contains__(self, value) -> bool:
        return value in self._values()

    def __iter__(self):
        return iter(self._values())


def integer(low: int, high: int):
    """argparse type: an integer in ``[low, high]`` (refusing floats such as ``1e12``)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer in [{low}, {high}]; got {text!r}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}]; got {text!r}")
        return value

    return parse


def _folder(text: str) -> Path:
    """argparse type: a non-empty folder path (``Path("")`` would silently mean ``.``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a folder path; got {text!r}")
    return Path(text)


def real(low: float | None = None, *, strict: bool = False):
    """argparse type: a finite float, ``> low`` (``strict``) or ``>= low`` when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        bound = "" if low is None else f" {'>' if strict else '>='} {low:g}"
        if not np.isfinite(value) or (
            low is not None and (value <= low if strict else value < low)
        ):
            raise argparse.ArgumentTypeError(f"must be a finite number{bound}; got {text!r}")
        return value

    return parse


class Flag(NamedTuple):
    """One row of a flag table: ``add_argument(*names, **options)``."""

    names: tuple[str, ...]
    options: dict


def flag(*names: str, **options) -> Flag:
    """A `Flag` row: the names (``"--steps"``, or a positional ``"task"``) and the keywords of
    ``argparse.ArgumentParser.add_argument``."""
    return Flag(names, options)


class _Deprecated(argparse.Action):
    """An old spelling kept for one release: stores into the new flag's ``dest`` and prints
    one line on stderr naming the new spelling."""

    def __init__(self, option_strings, dest, *, new: str, **options):
        self.new = new
        super().__init__(option_strings, dest, **options)

    def __call__(self, parser, namespace, values, option_string=None):
        print(
            f"{parser.prog}: {option_string} is deprecated and will be removed in the next "
            f"release; use {self.new}",
            file=sys.stderr,
            flush=True,
        )
        setattr(namespace, self.dest, values)


def deprecated(old: str, new: str, dest: str, **options) -> Flag:
    """``old``, hidden from ``--help``, meaning ``new`` (whose ``dest`` it fills) for one
    release, with a deprecation line when used."""
    return flag(old, action=_Deprecated, new=new, dest=dest, help=argparse.SUPPRESS, **options)


#: The meaning of every flag that more than one command takes: its help begins with it, so no
#: flag name means two things (tests/test_cli.py walks the parsers).
MEANINGS = {
    "--activation": "hidden activation",
    "--batch-size": "samples per step",
    "--context": "tokens per window",
    "--d": "width",
    "--force": "replace a finished run",
    "--gamma": "init scales d^-gamma",
    "--lr": "learning rate",
    "--out": "output folder",
    "--seeds": "seeds",
    "--snapshot-every": "steps between snapshots",
    "--steps": "training steps",
    "--text": "a UTF-8 text file",
    "--tiny": "a smoke run",
}

#: ``--param KEY=VALUE``, the task parameters of every command that builds a task.
TASK_PARAMS = flag(
    "--param",
    action="append",
    nargs="+",
    default=[],
    metavar="KEY=VALUE",
    help="task parameter, repeatable (e.g. --param N=40; see `ctx-staircase list`); in train, "
    "one parameter may take several values, one dataset each, trained as lanes of one sweep "
    "(e.g. --param L=2 3 4)",
)
#: The task argument and its parameters.
TASK = (flag("task", help="task name (see `ctx-staircase list`)"), TASK_PARAMS)


def out_flag(default: str, more: str = "") -> Flag:
    """``--out``: the output folder, ``runs/<default>`` unless given."""
    return flag(
        "--out", type=_folder, default=None, help=f"output folder{more} (default: {default})"
    )


class Command(NamedTuple):
    """One subcommand: its ``name``, one-line ``help``, its flag table, its
    ``handler(args) -> exit code``, ``description``, whether it ``computes`` (takes
    ``--max-memory``) and ``sweeps`` (runs lanes over a cluster: takes the cluster flags), and
    ``extend(parser)``, adding what a flat table cannot (a group of exclusive flags)."""

    name: str
    help: str
    flags: tuple[Flag, ...]
    handler: Any
    description: str | None = None
    computes: bool = True
    sweeps: bool = True
    extend: Any = None


def add_command(commands, command: Command, memory, cluster) -> argparse.ArgumentParser:
    """Add ``command`` to the subparsers ``commands`` with its flag table and the shared
    parsers it takes: ``memory`` (``--max-memory``) and ``cluster`` (the cluster flags)."""
    shared = [memory, cluster] if command.sweeps else [memory]
    sub = commands.add_parser(
        command.name,
        help=command.help,
        description=command.description,
        parents=shared if command.computes else [],
        formatter_class=Help,
    )
    if command.extend is not None:
        command.extend(sub)
    for row in command.flags:
        sub.add_argument(*row.names, **row.options)
    sub.set_defaults(handler=command.handler)
    return sub


# --------------------------------------------------------------------------------------------
# shared steps of every command


def limit(args: argparse.Namespace):
    """The memory limit (`budget.Limit`: bytes and where they come from)."""
    from ctx_staircase import budget

    return budget.memory_limit(args.max_memory)


def out_dir(args: argparse.Namespace, default: Path) -> Path:
    """``--out`` or ``default``, checked writable (`paths.check_output_dir`); for a command
    with ``--force`` (one that would rewrite a finished run; an unfinished one still resumes),
    refused when it holds a finished run (its ``metrics.json``) and ``--force`` is not given."""
    from ctx_staircase import paths

    out = paths.check_output_dir(args.out if args.out is not None else default)
    if hasattr(args, "force") and not args.force and (out / "metrics.json").is_file():
        raise ValueError(
            f"--out {str(out)!r} holds a finished run (metrics.json); choose another --out, or "
            "pass --force to replace it"
        )
    return out


def check_gammas(gammas, d: int) -> None:
    """``--gamma``: every value > 0, else ``ValueError`` with the initial std ``d^-gamma`` it
    would give at width ``d`` (the library takes any finite gamma: a large-init control)."""
    for g in gammas:
        if g <= 0:
            raise ValueError(
                f"--gamma must be > 0: the initial weights' std is d^-gamma, and gamma = {g:g} "
                f"gives {d}^{0.0 - g:g} = {float(d) ** -g:.4g}, no small initialization (the "
                "paper's regime is gamma > 1/2)"
            )


#: ``--force`` of the commands whose rerun would rewrite a finished run (`out_dir`).
FORCE = flag("--force", action="store_true", help="replace a finished run in --out")


def stdout() -> Console:
    return Console(width=160)


def stderr() -> Console:
    return Console(stderr=True)


@contextlib.contextmanager
def bar(description: str):
    """A progress bar on stderr fed by `progress.tick` (steps); ``expect(n)`` raises its total.

    Yields ``(expect, describe)``: ``expect(n)`` announces ``n`` more steps of work,
    ``describe(text)`` relabels the bar.

    When stderr is not a terminal (a batch job's log file) the bar is plain lines instead
    (`progress.plain_log`: no escape codes, each tenth of the work and at least every 30 s).
    """
    from ctx_staircase import progress

    if not sys.stderr.isatty():
        with progress.plain_log(description) as log:
            yield log.expect, log.describe
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=stderr(),
        transient=True,
    )
    task = bar.add_task(description, total=None)
    totals = {"total": 0}

    def expect(count: int) -> None:
        totals["total"] += int(count)
        bar.update(task, total=totals["total"])

    def describe(text: str) -> None:
        bar.update(task, description=text)

    with bar, progress.reporting(lambda n: bar.advance(task, n)), progress.expecting(expect):
        yield expect, describe


class Values(tuple):
    """The several values of one ``--param KEY=V1 V2 ...`` (a tuple literal stays one value)."""


def _literal(raw: str) -> Any:
    """A Python literal where ``raw`` reads as one, else the string."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def parse_params(items) -> dict[str, Any]:
    """``--param KEY=VALUE [VALUE ...]`` items as a dict, each value a Python literal where it
    reads as one (else the string); a key given several values maps to their `Values`.

    ``items``: the strings of one ``--param`` each, or the groups ``[[KEY=V1, V2, ...], ...]``
    of ``nargs="+"``; within a group an item without ``KEY=`` is another value of the key
    before it.
    """
    params: dict[str, Any] = {}
    for group in items:
        key = None
        for item in [group] if isinstance(group, str) else group:
            name, sep, raw = item.partition("=")
            if sep and name.isidentifier():
                key, params[name] = name, _literal(raw)
            elif key is not None:
                before = params[key]
                params[key] = Values((*(before if isinstance(before, Values) else (before,)),
                                      _literal(item)))  # fmt: skip
            else:
                raise ValueError(f"--param must look like KEY=VALUE; got {item!r}")
    return params


def make_tasks(args: argparse.Namespace) -> list:
    """The datasets of ``args.task`` with its ``--param``s: one, or one per value of the one
    parameter given several (a context-order axis, ``--param L=2 3 4``), each checked against
    the memory limit before it is built."""
    from ctx_staircase import budget, tasks

    params = parse_params(args.param)
    several = [key for key, value in params.items() if isinstance(value, Values)]
    if len(several) > 1:
        raise ValueError(
            f"--param may give several values to one parameter only; got {', '.join(several)}"
        )
    if several and len(set(map(repr, params[several[0]]))) < len(params[several[0]]):
        raise ValueError(
            f"--param {several[0]} must give distinct values; got {list(params[several[0]])}"
        )
    settings = (
        [params] if not several else [params | {several[0]: value} for value in params[several[0]]]
    )
    for setting in settings:
        budget.check(
            budget.dataset_bytes(args.task, setting),
            what=f"task {args.task} {setting}",
            knob="lower the task size (--param)",
            limit=limit(args),
        )
    return [tasks.make(args.task, **setting) for setting in settings]


def make_task(args: argparse.Namespace):
    """The one task of ``args.task`` with its ``--param``s (`make_tasks`); several values of a
    parameter are refused here: only ``train`` sweeps them."""
    datasets = make_tasks(args)
    if len(datasets) > 1:
        key = next(k for k, v in parse_params(args.param).items() if isinstance(v, Values))
        raise ValueError(
            f"--param {key} takes one value in {args.command}; several values (lanes of one "
            "sweep) are for train"
        )
    return datasets[0]


def fmt(value) -> str:
    """A table cell: ``value`` to 3 decimals, ``-`` for None."""
    return "-" if value is None else f"{value:.3f}"
