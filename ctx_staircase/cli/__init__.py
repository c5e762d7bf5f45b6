"""Command line: ``ctx-staircase {run,list,signatures,train,lm,measure,theory}`` (or ``python -m
ctx_staircase``); the one command line of the project (every ``sims/NAME.py`` calls `main`).

Thin by design: parse, validate, estimate the memory, call the library, print, save. One module
per subcommand (`run`, `listing`, `signatures`, `train`, `lm`, `measure`, `theory`), each a flag
table and a handler; `common` holds what they share and `parser` assembles them.

- ``run NAME`` resolves the experiment through `experiments.REGISTRY`, which imports its module
  only when it runs; the library subcommands (``signatures``, ``train``, ``theory``, ``lm``,
  ``measure``) import the library only, never `ctx_staircase.experiments`.
- Result tables go to stdout; progress bars (with ETA) and notes go to stderr.
- A bad input (an unknown name, a value out of range, an unusable ``--out``, a request over the
  memory limit) is one line on stderr and exit code 2, before any work, with nothing written.
- Ctrl-C prints one line and exits 130. Rerunning the same command resumes: finished lanes,
  gammas and experiments are kept (`units`), and the summary file is written last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading

from ctx_staircase import interrupt
from ctx_staircase.cli.parser import parser
from ctx_staircase.interrupt import MESSAGE as INTERRUPTED

__all__ = [
    "SMOKE_XLA_FLAGS",
    "compile_for_smoke_runs",
    "entry",
    "main",
]


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


#: XLA's flags for a smoke run: compiling is most of a ``--tiny`` run's time, while its
#: arithmetic is too small to feel slower code. The backend's optimization passes are most of
#: compiling (escape_feedback 26 s -> 18 s on 2 cores), and XLA's MLIR fusion emitters cost more
#: to compile than its classic elemental emitters (order1_onset 22 s -> 17 s). Either changes
#: only rounding, which can flip a near-tie such as a probe's best restart (benchmarks/README.md).
SMOKE_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


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
