"""Command line: ``ctx-staircase {run,list,signatures,train,theory,lm}`` (or ``python -m
ctx_staircase``); the one command line of the project (every ``sims/NAME.py`` calls `main`).

Thin by design: parse, validate, estimate the memory, call the library, print, save.

- ``run NAME`` resolves the experiment through `experiments.REGISTRY`, which imports its module
  only when it runs; the library subcommands (``signatures``, ``train``, ``theory``, ``lm``)
  import the library only, never `ctx_staircase.experiments`.

- Result tables go to stdout; progress bars (with ETA) and notes go to stderr.
- A bad input (an unknown name, a value out of range, an unusable ``--out``, a request over the
  memory limit) is one line on stderr and exit code 2, before any work, with nothing written.
- Ctrl-C prints one line and exits 130. Rerunning the same command resumes: finished lanes,
  gammas and experiments are kept (`units`), and the summary file is written last.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import sys
import threading
import time
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
from rich.table import Table

from ctx_staircase import __version__, interrupt
from ctx_staircase.internal import INT32_MAX, SEED_MAX
from ctx_staircase.interrupt import MESSAGE as INTERRUPTED

DEFAULT_RUN_ROOT = Path("runs")


def main(argv: list[str] | None = None) -> int:
    """Run the command line in this thread; returns the exit code (0, 1, 2 or 130)."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed
        return int(done.code or 0)
    if getattr(args, "tiny", False):
        compile_for_smoke_runs()
    try:
        with _cluster(args):
            return args.handler(args)
    except KeyboardInterrupt:
        print(f"ctx-staircase {args.command}: {INTERRUPTED}", file=sys.stderr, flush=True)
        return 130
    except (ValueError, TypeError, FileNotFoundError, OverflowError) as err:
        message = " ".join(str(err).split())
        print(f"ctx-staircase {args.command}: error: {message}", file=sys.stderr, flush=True)
        return 2


#: XLA's flag for a smoke run: compiling is most of a ``--tiny`` run's time, and the backend's
#: optimization passes are most of compiling (e.g. escape_feedback 26 s -> 18 s on 2 cores),
#: while its arithmetic is too small to feel slower code.
SMOKE_XLA_FLAGS = "--xla_backend_optimization_level=0"


def compile_for_smoke_runs() -> None:
    """Add `SMOKE_XLA_FLAGS` before the user's own ``XLA_FLAGS`` (a flag the user sets wins),
    if JAX is not yet imported in this process (it reads them once, on start)."""
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = f"{SMOKE_XLA_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()


@contextlib.contextmanager
def _cluster(args: argparse.Namespace):
    """Inside the block this process is one of the cluster its flags name
    (``jax.distributed.initialize`` before any JAX computation); it leaves with the others."""
    from ctx_staircase import distributed

    cluster = distributed.Cluster(
        getattr(args, "coordinator", None),
        getattr(args, "num_processes", None),
        getattr(args, "process_id", None),
        getattr(args, "cluster_auto", False),
    )
    distributed.initialize(cluster)
    try:
        yield
    finally:
        distributed.shutdown()


def entry() -> None:
    """The ``ctx-staircase`` script: `main` in a worker thread, so that Ctrl-C is seen at once.

    A compiled computation does not return to Python until it finishes, so a main thread
    running one would notice Ctrl-C only then. Here the main thread only waits, and the SIGINT
    handler prints one line and ends the process (exit 130). Every result file is written
    atomically and every finished unit is already saved, so nothing is lost or half-written.
    """
    interrupt.install()
    outcome: dict[str, int] = {}
    worker = threading.Thread(target=lambda: outcome.update(code=main()), daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit, not sys.exit: interpreter shutdown resets the SIGINT handler, so a Ctrl-C in
    # that window would kill the process without its line (every file is written by now)
    os._exit(outcome.get("code", 1))  # no code: the worker died of an unexpected error


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE`` and exit 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


class _Choices:
    """The allowed values of a flag, read from ``ctx_staircase.MODULE.NAME`` when argparse
    first checks or prints them, so building the parser imports no JAX (``--version`` and
    ``--help`` answer at once)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def _values(self) -> tuple:
        import importlib

        return tuple(getattr(importlib.import_module(f"ctx_staircase.{self.module}"), self.name))

    def __contains__(self, value) -> bool:
        return value in self._values()

    def __iter__(self):
        return iter(self._values())


class _Help(argparse.RawDescriptionHelpFormatter):
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


def _integer(low: int, high: int):
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


def _real(low: float | None = None, *, strict: bool = False):
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


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (one-line errors, defaults shown in ``--help``)."""
    parser = _Parser(
        prog="ctx-staircase",
        description="Which statistics of the data does a token embedding learn, and when?",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"ctx-staircase {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    memory = _Parser(add_help=False)
    memory.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="memory limit for the up-front estimate, e.g. 8GiB or 500MB (default: 80%% of the "
        "available memory, or $CTX_STAIRCASE_MAX_MEMORY)",
    )

    cluster = _Parser(add_help=False)
    joining = cluster.add_argument_group(
        "several processes or hosts (jax.distributed.initialize; README: On a cluster)"
    )
    joining.add_argument(
        "--coordinator", default=None, metavar="HOST:PORT", help="process 0's address and port"
    )
    joining.add_argument(
        "--num-processes", type=_integer(1, 1_000_000), default=None, help="processes in all"
    )
    joining.add_argument(
        "--process-id", type=_integer(0, 1_000_000), default=None, help="this process's index"
    )
    joining.add_argument(
        "--cluster-auto",
        action="store_true",
        help="let jax.distributed.initialize detect the cluster (SLURM, Open MPI, TPU pods)",
    )

    def command(
        name: str, help: str, computes: bool = True, sweeps: bool = True, **kwargs
    ) -> argparse.ArgumentParser:
        parents = [memory, cluster] if computes and sweeps else [memory] if computes else []
        return commands.add_parser(
            name, help=help, parents=parents, formatter_class=_Help, **kwargs
        )

    run = command(
        "run",
        "the main job (the staircase on add and mod with the theory), or one experiment",
        description="Run the flagship staircase experiment, or one named reproduction "
        "experiment, and print its claims. An interrupted run resumes when rerun.",
    )
    run.add_argument(
        "name",
        nargs="?",
        default=None,
        help="an experiment (see --list); default: the flagship staircase run",
    )
    run.add_argument(
        "--regime",
        default=None,
        help="training regime, e.g. gd-wide (the primary) or adam-minimal (experiments with "
        "regimes; default: the primary)",
    )
    run.add_argument(
        "--quick", action="store_true", help="the regime study's reduced sizes (no figures)"
    )
    run.add_argument("--list", action="store_true", help="list the experiments and exit")
    run.add_argument("--full", action="store_true", help="the paper's sizes (for a GPU)")
    run.add_argument(
        "--tiny", action="store_true", help="a smoke run (at most about 20 s; every experiment)"
    )
    run.add_argument(
        "--text",
        type=Path,
        default=None,
        help="the UTF-8 text file lm_text needs (no default; sims/lm_text.py passes one)",
    )
    run.add_argument("--strict", action="store_true", help="exit 1 when a claim fails")
    run.add_argument("--out", type=_folder, default=None, help="output folder (default: runs/NAME)")
    run.set_defaults(handler=_run)

    listing = command("list", "list every task with its parameters", computes=False)
    listing.set_defaults(handler=_list)

    sig = command("signatures", "signature geometry of a task", sweeps=False)
    sig.add_argument("task", help="task name (see `ctx-staircase list`)")
    _task_params(sig)
    sig.add_argument(
        "--order", type=_integer(0, 64), default=1, help="highest signature order m (<= L-1)"
    )
    sig.add_argument("--group", default=None, help="token group for alpha (default: numbers)")
    sig.add_argument(
        "--out", type=_folder, default=None, help="output folder (default: runs/signatures_TASK)"
    )
    sig.set_defaults(handler=_signatures)

    tr = command("train", "train a (gamma x seed x lr) sweep and measure alignment")
    tr.add_argument("task", help="task name (see `ctx-staircase list`)")
    _task_params(tr)
    tr.add_argument(
        "--model", default="ffn", choices=("ffn", "attention", "transformer"), help="model"
    )
    tr.add_argument("--gamma", type=_real(), nargs="+", default=[0.8], help="init scales d^-gamma")
    tr.add_argument("--seeds", type=_integer(0, SEED_MAX), nargs="+", default=[0], help="seeds")
    tr.add_argument(
        "--optimizer",
        default="adam",
        choices=_Choices("train", "OPTIMIZERS"),
        metavar="NAME",
        help="optimizer: %(choices)s",
    )
    tr.add_argument(
        "--lr", type=_real(0, strict=True), nargs="+", default=[1e-3], help="learning rate(s)"
    )
    tr.add_argument("--steps", type=_integer(1, INT32_MAX), default=1000, help="optimizer steps")
    tr.add_argument(
        "--batch-size",
        type=_integer(1, INT32_MAX),
        default=None,
        help="minibatch size (sgd; default: full batch)",
    )
    tr.add_argument(
        "--snapshot-steps",
        type=_integer(0, INT32_MAX),
        nargs="+",
        default=None,
        help="steps to record (default: log- plus linearly spaced)",
    )
    tr.add_argument("--d", type=_integer(1, INT32_MAX), default=128, help="embedding width")
    tr.add_argument(
        "--vocab-size",
        type=_integer(1, INT32_MAX),
        default=None,
        help="model vocabulary (default: the data's)",
    )
    tr.add_argument(
        "--activation",
        default=None,
        help="FFN activation: relu, gelu, poly:c1,c2,..., z^K (default: the model's, relu)",
    )
    tr.add_argument("--float64", action="store_true", help="train in float64")
    tr.add_argument(
        "--probe-snapshots",
        type=_integer(0, 10_000),
        default=8,
        help="snapshots at which to fit the first-order probe (0: none)",
    )
    tr.add_argument(
        "--chunk",
        type=_integer(1, 1_000_000),
        default=None,
        help="lanes per compiled call, saved when it finishes (default: all)",
    )
    tr.add_argument(
        "--out",
        type=_folder,
        default=None,
        help="output folder; resumes if present (default: runs/train_TASK_MODEL)",
    )
    tr.set_defaults(handler=_train)

    lm = command(
        "lm",
        "train a small GPT on text and measure its signature alignment over time",
        description="Train a small GPT on a text and measure its signature alignment. "
        "Unset size flags take the standard size, or the smoke-run size with --tiny; a flag "
        "you set is always used.",
    )
    lm.add_argument(
        "--text", type=Path, default=None, help="a UTF-8 text file (default: the built-in corpus)"
    )
    lm.add_argument(
        "--gamma", type=_real(), nargs="+", default=[1.0, 0.5], help="init scales (one lane each)"
    )
    lm.add_argument("--seed", type=_integer(0, SEED_MAX), default=0, help="seed")
    for flag, low, high, text in (
        ("--steps", 1, INT32_MAX, "AdamW steps"),
        ("--d", 1, INT32_MAX, "model width"),
        ("--layers", 1, 4096, "transformer layers"),
        ("--heads", 1, 4096, "attention heads"),
        ("--context", 2, INT32_MAX, "tokens per window"),
        ("--batch-size", 1, INT32_MAX, "windows per step"),
        ("--snapshot-every", 1, INT32_MAX, "steps per snapshot"),
    ):
        key = flag[2:].replace("-", "_")
        lm.add_argument(flag, type=_integer(low, high), default=None, help=_lm_help(text, key))
    lm.add_argument(
        "--lr", type=_real(0, strict=True), default=None, help="peak learning rate (default: 3e-3)"
    )
    lm.add_argument(
        "--vocab-size",
        type=_integer(2, INT32_MAX),
        default=None,
        help="words kept (default: 2000, or all if fewer)",
    )
    lm.add_argument(
        "--tiny",
        action="store_true",
        help="smoke-run sizes for the flags you leave unset "
        f"(steps {LM_TINY['steps']}, d {LM_TINY['d']}, layers {LM_TINY['layers']})",
    )
    lm.add_argument("--out", type=_folder, default=None, help="output folder (default: runs/lm)")
    lm.set_defaults(handler=_lm)

    me = command(
        "measure",
        "measure the signature alignment of any model's embedding checkpoints",
        sweeps=False,
        description="Measure rho_next and the prefix probe (paper §6.1) of input-embedding "
        "snapshots trained elsewhere, on a token stream; or rho_0, rho_(1),k and the probe on a "
        "task. Snapshots: .npy, .npz, .safetensors, Hugging Face model folders, torch .pt/.bin "
        "(needs torch).",
    )
    data = me.add_mutually_exclusive_group(required=True)
    data.add_argument(
        "--tokens",
        type=Path,
        default=None,
        help="token ids (.npy/.npz) or a UTF-8 text file (with --tokenizer, or the package's "
        "word tokenizer)",
    )
    data.add_argument("--task", default=None, help="a task instead (see `ctx-staircase list`)")
    _task_params(me)
    me.add_argument(
        "--snapshots", type=Path, nargs="+", required=True, help="one embedding snapshot each"
    )
    me.add_argument("--key", default=None, help="the embedding tensor's name (default: found)")
    me.add_argument(
        "--steps",
        type=_integer(0, 2**63 - 1),
        nargs="+",
        default=None,
        help="each snapshot's step (default: from its name, else its position)",
    )
    me.add_argument("--tokenizer", type=Path, default=None, help="an HF tokenizer.json")
    me.add_argument(
        "--context",
        type=_integer(1, INT32_MAX),
        default=None,
        help="tokens per window (default: the token file's, else 64)",
    )
    me.add_argument("--tracked", type=_integer(4, INT32_MAX), default=200, help="tokens to measure")
    me.add_argument(
        "--min-count",
        type=_integer(1, INT32_MAX),
        default=20,
        help="occurrences a tracked token needs",
    )
    me.add_argument("--seed", type=_integer(0, SEED_MAX), default=0, help="probe and null seed")
    me.add_argument(
        "--out", type=_folder, default=None, help="output folder (default: runs/measure)"
    )
    me.set_defaults(handler=_measure)

    th = command(
        "theory",
        "theory (closed forms, signature flows, attention plateau law) vs GD training",
        description=(
            "Integrate the theory and train the same models (full-batch GD, float64, t = lr * "
            "step), then compare them lane by lane. FFN: closed form (C3), closed form with the "
            "softmax feedback, signature flows. Attention-only: the uniform-attention flow (A3) "
            "and the plateau law t* = T_Z d^(2 gamma) - c (A5b). Documented gamma ranges: "
            "ffn [0.5, 2], attention [0.55, 1]."
        ),
    )
    th.add_argument("task", help="task name (see `ctx-staircase list`)")
    _task_params(th)
    th.add_argument("--model", default="ffn", choices=("ffn", "attention"), help="model")
    th.add_argument(
        "--gamma",
        dest="gammas",
        type=_real(),
        nargs="+",
        default=None,
        help="init scales d^-gamma (default: ffn 0.6 0.8 1.0 1.2 1.4; attention 0.6 .. 0.8)",
    )
    th.add_argument(
        "--max-order",
        dest="max_orders",
        type=_integer(0, 64),
        nargs="+",
        default=[0, 1],
        help="context orders m_max of the FFN signature flow",
    )
    th.add_argument(
        "--activation",
        default=None,
        help="FFN activation (default: poly:1,0.5; relu with --second-escape)",
    )
    th.add_argument(
        "--prediction",
        default="linear",
        choices=_Choices("flows", "PREDICTION_TERMS"),
        metavar="TERM",
        help="softmax term of the FFN signature flow: %(choices)s (linear: with the feedback)",
    )
    th.add_argument("--d", type=_integer(1, INT32_MAX), default=128, help="width")
    th.add_argument(
        "--lr", type=_real(0, strict=True), default=0.2, help="GD learning rate (t = lr * step)"
    )
    th.add_argument(
        "--steps",
        type=_integer(1, INT32_MAX),
        default=None,
        help="GD steps (default: 1.25x the latest predicted escape)",
    )
    th.add_argument(
        "--snapshot-every",
        type=_integer(1, INT32_MAX),
        default=None,
        help="steps between snapshots (default: 10, geometric past 400 snapshots)",
    )
    th.add_argument(
        "--threshold",
        type=_real(0, strict=True),
        default=0.5,
        help="escape: largest centred logit (nats)",
    )
    th.add_argument("--seed", type=_integer(0, SEED_MAX), default=0, help="seed")
    th.add_argument(
        "--seeds",
        type=_integer(0, SEED_MAX),
        nargs="+",
        default=None,
        help="--second-escape: the seeds of the grid (default: --seed)",
    )
    th.add_argument(
        "--second-escape",
        action="store_true",
        help="predict the second escape (the end of the collapse plateau, theory/second_escape.md)"
        " at levels L1 (from the training state at t_c + 100) and L2 (from the init) against GD "
        "training at lr 1 for --steps epochs (default 3000); FFN only",
    )
    th.add_argument(
        "--geometry",
        default="numbers",
        help="--second-escape: the token group rho_0 is read on (Task 4: anchors)",
    )
    th.add_argument(
        "--out", type=_folder, default=None, help="output folder (default: runs/theory_TASK_MODEL)"
    )
    th.set_defaults(handler=_theory)
    return parser


def _lm_help(text: str, key: str) -> str:
    return f"{text} (default: {LM_STANDARD[key]}; with --tiny: {LM_TINY[key]})"


def _task_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task parameter, repeatable (e.g. --param N=40; see `ctx-staircase list`)",
    )


#: The ``lm`` subcommand's sizes under ``--tiny`` (a seconds-long smoke run), flag by flag.
LM_TINY = dict(steps=40, d=32, layers=1, heads=2, context=16, batch_size=8, snapshot_every=10)
#: The ``lm`` subcommand's standard sizes, flag by flag (a flag you set always wins).
LM_STANDARD = dict(
    steps=1000, d=128, layers=2, heads=4, context=64, batch_size=32, snapshot_every=20
)


# --------------------------------------------------------------------------------------------
# shared steps of every command


def _limit(args: argparse.Namespace):
    """The memory limit (`budget.Limit`: bytes and where they come from)."""
    from ctx_staircase import budget

    return budget.memory_limit(args.max_memory)


def _out(args: argparse.Namespace, default: Path) -> Path:
    from ctx_staircase import paths

    return paths.check_output_dir(args.out if args.out is not None else default)


def _stdout() -> Console:
    return Console(width=160)


def _stderr() -> Console:
    return Console(stderr=True)


@contextlib.contextmanager
def _bar(description: str):
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
        console=_stderr(),
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


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--param must look like KEY=VALUE; got {item!r}")
        try:
            params[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            params[key] = raw
    return params


def _make_task(args: argparse.Namespace):
    from ctx_staircase import budget, tasks

    params = _parse_params(args.param)
    budget.check(
        budget.dataset_bytes(args.task, params),
        what=f"task {args.task} {params}",
        knob="lower the task size (--param)",
        limit=_limit(args),
    )
    return tasks.make(args.task, **params)


# --------------------------------------------------------------------------------------------
# commands


def _list(args: argparse.Namespace) -> int:
    from ctx_staircase import tasks

    table = Table(title="tasks", show_lines=False)
    table.add_column("task")
    table.add_column("parameters (defaults)")
    table.add_column("description")
    for name in tasks.names():
        params = ", ".join(f"{k}={v!r}" for k, v in tasks.describe(name).items())
        table.add_row(name, params, tasks.summary(name))
    _stdout().print(table)
    return 0


def _signatures(args: argparse.Namespace) -> int:
    from ctx_staircase import budget, geometry, plots, results

    out = _out(args, DEFAULT_RUN_ROOT / f"signatures_{args.task}")
    ds = _make_task(args)
    order = args.order
    if order > ds.L - 1:
        raise ValueError(
            f"--order must lie in [0, L-1] = [0, {ds.L - 1}] for {args.task}; got {order}"
        )
    request = dict(what=f"signatures of {args.task} up to order {order}",
                   knob="lower --order or the task size (--param)")  # fmt: skip
    budget.check_signature_shapes(ds, order, args.group, **request)  # each order's own cap
    budget.check(budget.signature_bytes(ds, order, args.group), limit=_limit(args), **request)
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

    table = Table(title=f"{args.task} {ds.params}: signature geometry of '{geom.group}'")
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
    _stdout().print(table)
    _stderr().print(
        f"wrote {out}/ (arrays.npz, signature_geometry.png, metrics.json) in {seconds:.1f} s"
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    import jax

    from ctx_staircase import budget, sweep, train

    out = _out(args, DEFAULT_RUN_ROOT / f"train_{args.task}_{args.model}")
    ds = _make_task(args)
    config = train.TrainConfig(
        optimizer=args.optimizer,
        lr=args.lr[0],
        steps=args.steps,
        batch_size=args.batch_size,
        snapshots=tuple(args.snapshot_steps) if args.snapshot_steps else None,
    )
    model_kwargs: dict = {"d": args.d}
    if args.activation is not None:
        if args.model == "attention":
            raise ValueError("--activation applies to the ffn and transformer models only")
        model_kwargs["activation"] = args.activation
    if args.float64:
        model_kwargs["dtype"] = "float64"
    if args.vocab_size is not None:
        model_kwargs["vocab_size"] = args.vocab_size
    gamma, _, _ = sweep.grid(args.gamma, args.seeds, args.lr)
    budget.check(
        budget.train_bytes(
            args.model,
            ds,
            config,
            d=args.d,
            vocab_size=args.vocab_size,
            lanes=gamma.size,
            dtype="float64" if args.float64 else "float32",
        ),
        what=f"train {args.model} on {args.task} {ds.params}, d={args.d}, {gamma.size} lanes",
        knob="lower --param sizes, --d, --steps/--snapshot-steps or the number of lanes",
        limit=_limit(args),
    )
    with jax.enable_x64(args.float64):
        # checks the kwargs by tracing the model's construction, without compiling it
        jax.eval_shape(
            lambda: train.init_state(args.model, ds, gamma=1.0, seed=0, **dict(model_kwargs))[1]
        )
        return _train_and_report(args, ds, config, model_kwargs, out)


class TrainSummary(NamedTuple):
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


def _lane_folder(result, lane: int) -> str:
    """The export folder of one lane of a sweep, e.g. ``gamma_0.8_seed_0_lr_1``."""
    return f"gamma_{result.gamma[lane]:g}_seed_{result.seed[lane]}_lr_{result.lr[lane]:g}"


def _train_and_report(args, ds, config, model_kwargs, out: Path) -> int:
    from ctx_staircase import checkpoints, geometry, plots, results, sweep

    start = time.perf_counter()
    with _bar("training lanes (the first call compiles)") as (_, describe):
        result = sweep.train_sweep(
            args.model,
            ds,
            config,
            gammas=args.gamma,
            seeds=args.seeds,
            lrs=args.lr,
            out=out / "sweep",
            chunk=args.chunk,
            **model_kwargs,
        )
        describe("measuring alignment and fitting probes")
        curves = geometry.alignment_curves(
            result.trajectory.W_E,
            result.trajectory.steps[0],
            ds,
            probe_snapshots=args.probe_snapshots if ds.L > 1 else 0,
        )
    steps = np.asarray(result.trajectory.steps[0])
    if args.optimizer == "gd" and np.unique(result.lr).size == 1:
        steps_label = f"step (t = {result.lr[0]:g}·step)"
    else:
        steps_label = "step" if args.optimizer != "gd" else "t = lr·step"
    # the figure shows the smallest initialization, where the staircase is clearest
    best = int(np.argmax(result.gamma))
    picks = sorted({0, len(steps) // 3, len(steps) - 1})
    plots.save_figure(plots.training_figure(result, curves, steps_label), out / "training.png")
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
    for lane in range(len(result.status)):  # `ctx-staircase measure --task` reads these back
        checkpoints.export_embeddings(
            out / "embeddings" / _lane_folder(result, lane),
            result.trajectory.W_E[lane],
            steps,
            {"task": args.task, "params": repr(ds.params), "model": args.model},
        )
    summary = TrainSummary(
        task=args.task,
        params=ds.params,
        model=args.model,
        model_kwargs={k: str(v) for k, v in model_kwargs.items()},
        config=dict(config.__dict__),
        grid={"gamma": result.gamma, "seed": result.seed, "lr": result.lr},
        status=result.status,
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

    table = Table(title=f"{args.task} ({ds.params}), {args.model}, {args.optimizer}")
    columns = ("γ", "seed", "lr", "status", "final loss", "final acc", "max ρ0 (step)")
    for column in (*columns, "final ρ0", "final probe"):
        table.add_column(column)
    for lane, status in enumerate(result.status):
        rho0 = curves.rho0[lane]
        peak = int(np.nanargmax(rho0)) if np.isfinite(rho0).any() else 0
        probe = f"{curves.probe_corr[lane, -1]:.3f}" if curves.probe_steps.size else "-"
        table.add_row(
            f"{result.gamma[lane]:g}",
            str(result.seed[lane]),
            f"{result.lr[lane]:g}",
            status,
            f"{result.trajectory.loss[lane, -1]:.4f}",
            f"{result.trajectory.accuracy[lane, -1]:.3f}",
            f"{rho0[peak]:.3f} ({steps[peak]})",
            f"{rho0[-1]:.3f}",
            probe,
        )
    _stdout().print(table)
    _stderr().print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


#: The ``theory`` flags passed through to `comparison.theory_vs_training` under their own names.
THEORY_SETTINGS = (
    "model", "gammas", "max_orders", "d", "activation", "lr", "steps", "snapshot_every",
    "threshold", "prediction",
)  # fmt: skip


def _theory(args: argparse.Namespace) -> int:
    from ctx_staircase import comparison, plots, results

    out = _out(args, DEFAULT_RUN_ROOT / f"theory_{args.task}_{args.model}")
    ds = _make_task(args)
    if args.second_escape:
        return _second_escape(args, ds, out)
    args.activation = args.activation or "poly:1,0.5"
    settings = {key: getattr(args, key) for key in THEORY_SETTINGS}
    settings["memory_limit"] = _limit(args)
    comparison.check_theory_inputs(ds, **settings)  # includes the memory estimate
    start = time.perf_counter()
    with _bar("GD steps, then ODE lanes (the first call compiles)"):
        experiment = comparison.theory_vs_training(
            ds, seed=args.seed, out=out / "training", **settings
        )
    errors = _stderr()
    for note in experiment.notes:
        errors.print(f"note: {note}")
    title = f"{args.task} {ds.params}, {args.model}, d={args.d}"
    if args.model == "ffn":
        title += f", σ={args.activation}"
    summary = comparison.experiment_summary(experiment)
    summary.update(
        task=args.task,
        params=ds.params,
        lr=args.lr,
        seconds=time.perf_counter() - start,
        environment=results.environment(),
    )
    plots.save_figure(plots.theory_overlay_figure(experiment, title), out / "theory_overlay.png")
    plots.save_figure(plots.escape_time_figure(experiment, title), out / "escape_time.png")
    results.write_json(out / "metrics.json", summary)  # last: its presence marks a finished run

    table = Table(title=title)
    columns = ("γ", "theory", "solver", "W_E err (pre-esc.)", "t_esc theory", "t_esc train")
    for column in (*columns, "ratio", "ρ0 onset th/tr"):
        table.add_column(column)
    for run in summary["runs"]:
        for name, c in run["comparisons"].items():
            onset = c["onset_time"]
            solver = run["solver"].get(name, {"ok": True, "result": "closed form"})
            table.add_row(
                f"{run['gamma']:g}",
                name,
                solver["result"],
                f"{c['weight_rel_error_max']:.3f}",
                f"{c['escape_time']['theory']:.1f}",
                f"{c['escape_time']['simulation']:.1f}",
                f"{c['escape_ratio']:.3f}",
                f"{onset['theory'][0]:.1f}/{onset['simulation'][0]:.1f}",
            )
    console = _stdout()
    console.print(table)
    for line in comparison.solver_failures(experiment):
        console.print(f"solver failure: {line}")
    slopes = ", ".join(f"{k} {v:.2f}" for k, v in summary["escape_slope"].items())
    if args.model == "ffn":
        console.print(f"escape-time slope dt/dγ: {slopes} (analytic: ln d / (C_1 s_1), eq. C8)")
    else:
        law = summary["law"]
        console.print(
            f"plateau law t* = T_Z d^(2γ) - c (A5b): T_Z = {law['blowup_time_T_Z']:.4g}, "
            f"c = {law['offset_c']:.3g}; predicted "
            + ", ".join(f"{t:.1f}" for t in summary["escape"]["plateau_law"])
        )
        console.print(f"log-escape slope d ln t/dγ: {slopes} (analytic: 2 ln d)")
    errors.print(f"wrote {out}/ in {time.perf_counter() - start:.1f} s")
    return 0


def _second_escape(args: argparse.Namespace, ds, out) -> int:
    from ctx_staircase import plateau_study, results

    if args.model != "ffn":
        raise ValueError(f"--second-escape needs --model ffn; got {args.model!r}")
    start = time.perf_counter()
    activation = args.activation or "relu"
    with _bar("GD lanes, then the plateau flow per lane (the first call compiles)"):
        comparison = plateau_study.compare_second_escape(
            ds,
            gammas=args.gammas or [1.0],
            seeds=args.seeds or [args.seed],
            d=args.d,
            activation=activation,
            epochs=args.steps or 3000,
            geometry=args.geometry,
        )
    summary = comparison.summary()
    record = {
        "task": args.task,
        "params": ds.params,
        "activation": activation,
        "geometry": args.geometry,
        "d": args.d,
        "second_escape": summary,
        "seconds": time.perf_counter() - start,
        "environment": results.environment(),
    }
    results.write_json(out / "metrics.json", record)
    table = Table(title=f"second escape: {args.task} {ds.params}, ffn d={args.d}, σ={activation}")
    for column in ("γ", "seed", "level", "t0", "t1 theory", "t1 train", "ratio", "k th/tr", "rate"):
        table.add_column(column)
    for i, level in enumerate(summary["level"]):
        table.add_row(
            f"{summary['gamma'][i]:g}",
            str(summary["seed"][i]),
            level,
            f"{summary['t0'][i]:.0f}",
            f"{summary['t1_predicted'][i]:.1f}",
            f"{summary['t1_measured'][i]:.1f}",
            f"{summary['ratio'][i]:.3f}",
            f"{summary['k_predicted'][i]}/{summary['k_measured'][i]}",
            f"{summary['rate_predicted'][i]:.4f}",
        )
    _stdout().print(table)
    _stderr().print(
        f"wrote {out}/ in {time.perf_counter() - start:.1f} s (nan: no second escape "
        f"within {args.steps or 3000} epochs)"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from ctx_staircase import experiments

    if args.list:
        if args.name is not None:
            raise ValueError(f"--list takes no experiment name; got {args.name!r}")
        for experiment in experiments.REGISTRY:
            print(f"{experiment.name:24s} {experiment.title}")
        print("\nevery experiment takes --tiny: a smoke run of at most about 20 s")
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
    options: dict[str, Any] = {}
    if args.regime is not None or args.quick:
        from ctx_staircase.experiments import regime

        regime.parse(args.regime)  # an unknown regime is refused before any work
        options.update(regime=args.regime, quick=args.quick)
    if "corpus" in experiment.inputs:
        from ctx_staircase import text

        text.load_text(args.text)  # unreadable, empty or not UTF-8: refused before any work
        options["text_path"] = args.text
    out = _out(args, DEFAULT_RUN_ROOT / name)
    limit = _limit(args)  # a bad --max-memory is refused here
    estimate = experiment.memory_bytes(full=args.full, tiny=args.tiny)
    if estimate is not None:
        from ctx_staircase import budget

        budget.check(
            estimate,
            what=f"run {name}{' --full' if args.full else ''}",
            knob="drop --full, use --tiny",
            limit=limit,
        )
    with _bar(f"{name}: steps trained (the first call of each shape compiles)"):
        record = experiments.execute(name, full=args.full, root=out, tiny=args.tiny, **options)
    print_record(record)
    _stderr().print(f"wrote {out}/ (results/{name}.json, figures/)")
    failed = [c["item"] for c in record["claims"] if c["passed"] is False]
    if args.strict and failed:
        _stderr().print(f"--strict: {len(failed)} claim(s) failed: {', '.join(failed)}")
        return 1
    return 0


def print_record(record: dict) -> None:
    """An experiment's record (`experiments.execute`) as a table of its claims, on stdout."""
    from ctx_staircase.experiments import verdict

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
            verdict(claim),
        )
    _stdout().print(table)


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


def _lm(args: argparse.Namespace) -> int:
    from ctx_staircase import budget, text

    config = lm_config(args)
    out = _out(args, DEFAULT_RUN_ROOT / "lm")
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
        knob="lower --d, --layers, --context, --batch-size, --vocab-size or the number of --gamma",
        limit=_limit(args),
    )
    return _lm_and_report(args, config, corpus, builtin, out)


def _lm_and_report(args, config, corpus, builtin: bool, out: Path) -> int:
    import dataclasses

    from ctx_staircase import checkpoints, lm_study, metrics, plots, results, signatures

    start = time.perf_counter()
    with _bar(f"training {len(args.gamma)} GPT lanes, {config.steps} steps"):
        trajectory, _, curves = lm_study.train_and_measure(
            corpus,
            config,
            gammas=args.gamma,
            seed=args.seed,
            probe_steps=50 if args.tiny else metrics.PROBE_STEPS,
            out=out / "lanes",
        )
    summary = lm_study.summarize(trajectory, curves)
    figures = {
        "curves": lm_study.curves_figure(
            trajectory, curves, f"{'built-in' if builtin else args.text.name}"
        )
    }
    record: dict[str, Any] = {
        "text": "builtin" if builtin else str(args.text),
        "tokens_train": int(corpus.train.size),
        "vocab_size": corpus.vocab_size,
        "gammas": list(args.gamma),
        "seed": args.seed,
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
        figures["semantics"] = lm_study.semantic_figure(
            signatures.next_token_signature(corpus.train, corpus.vocab_size)[0],
            trajectory.final_W_E[0],
            corpus.vocabulary,
        )
    record["seconds"] = time.perf_counter() - start
    record["environment"] = results.environment()
    results.write_npz(
        out / "arrays.npz",
        **{f"trajectory_{k}": v for k, v in trajectory._asdict().items()},
        **{f"curves_{k}": v for k, v in curves._asdict().items()},
    )
    for name, fig in figures.items():
        plots.save_figure(fig, out / f"{name}.png")
    # `ctx-staircase measure --tokens out/embeddings/tokens.npz` reads these back
    checkpoints.export_tokens(
        out / "embeddings" / "tokens.npz", corpus.train, trajectory.tracked, config.context_length
    )
    for i, gamma in enumerate(trajectory.gammas):
        checkpoints.export_embeddings(
            out / "embeddings" / f"gamma_{gamma:g}",
            trajectory.W_E[i],
            trajectory.steps,
            {"text": record["text"], "gamma": f"{gamma:g}", "seed": str(args.seed)},
        )
    results.write_json(out / "metrics.json", record)  # last: its presence marks a finished run

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
    _stdout().print(table)
    _stderr().print(
        f"wrote {out}/ (metrics.json, arrays.npz, {', '.join(f + '.png' for f in figures)}) in "
        f"{record['seconds']:.1f} s"
    )
    return 0


def _measure(args: argparse.Namespace) -> int:
    from ctx_staircase import checkpoints, measure, plots, results

    if args.steps is not None and len(args.steps) != len(args.snapshots):
        raise ValueError(
            f"--steps: give one step per snapshot ({len(args.snapshots)}); got {len(args.steps)}"
        )
    if args.task is None and args.param:
        raise ValueError("--param applies with --task, not with --tokens")
    if args.task is not None and args.tokenizer is not None:
        raise ValueError("--tokenizer applies with --tokens, not with --task")
    out = _out(args, DEFAULT_RUN_ROOT / "measure")
    start = time.perf_counter()
    if args.task is not None:  # a task measures its own token group: no stream settings
        data, source, options = _make_task(args), f"task {args.task}", {}
    else:
        data, source = checkpoints.load_tokens(args.tokens, args.tokenizer), str(args.tokens)
        options = dict(context_length=args.context, count=args.tracked, min_count=args.min_count)
    with _bar(f"measuring {len(args.snapshots)} snapshots"):
        measured = measure.measure_snapshots(
            data, args.snapshots, steps=args.steps, key=args.key, seed=args.seed, **options
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
    headline = measured.headline
    table = Table(title=f"{headline} of {len(measured.steps)} snapshots ({source})")
    for column in ("step", headline, f"null {headline}", "probe corr", "snapshot"):
        table.add_column(column)
    for i, step in enumerate(measured.steps):
        table.add_row(
            str(step),
            f"{measured.alignment[headline][i]:.3f}",
            f"{measured.null[headline][i]:.3f}",
            _fmt(float(measured.probe["corr"][i])),
            f"{measured.sources[i]} [{measured.keys[i]}]",
        )
    _stdout().print(table)
    if measured.semantic:
        first, last = measured.semantic["first"], measured.semantic["last"]
        shown = ", ".join(f"{k} {first[k]:.2f} → {last[k]:.2f}" for k in last)
        _stdout().print(f"semantic structure of the word groups (first → last snapshot): {shown}")
    _stderr().print(f"wrote {out}/ (metrics.json, curves.npz, alignment.png)")
    return 0


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    entry()
