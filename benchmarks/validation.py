"""Benchmark: what "validate, then work" costs, against the work it guards.

(a) For the default request of every CLI command (``train add``, ``theory add``,
    ``signatures add``, ``lm``, ``run`` and ``run --tiny``) the memory estimate of
    `ctx_staircase.budget` plus `budget.check` (and the integer checks where the command has
    them), timed as the median of ``--repeats`` calls after one warm-up call, in microseconds.
    The inputs the estimators take (the dataset, the config, the corpus) are built once
    beforehand: the command builds them anyway. The estimate and the limit are printed too (a
    request over this machine's limit is timed as refused, and its line printed).
(b) ``--calibrate``: each estimator against XLA's own buffer assignment
    (``jax.jit(f).lower(...).compile().memory_analysis()``: arguments + outputs + temporaries)
    for a few small configurations of one training lane and one GPT lane (a few seconds of
    compiling).
(c) ``--default-run``: one default ``ctx-staircase train add`` run (into a temporary folder,
    first call, so it includes compiling), and the ratio of (a)'s ``train add`` validation to
    it. ``--default-run-seconds S`` uses a time measured elsewhere instead of running it.

(d) The CLI's whole validation phase per command: `cli.main` on the default request with
    ``--max-memory 1B``, refused at the memory check after every other check has run.

(e) Answers of a fresh process, as a user meets them: the wall time of
    ``python -m ctx_staircase --version``, ``--help``, ``train --help``, and of four bad inputs
    (an unknown task, a negative ``--steps``, an unknown ``--optimizer``, a bad
    ``--coordinator``), each the median of ``--process-repeats`` runs (interpreter start and
    imports included: the cost a test's wall-clock assertion used to measure, and that the
    default suite no longer asserts), and whether JAX was imported (``-X importtime``).

Usage: python benchmarks/validation.py [--repeats 200] [--calibrate] [--process-repeats 5]
[--default-run | --default-run-seconds S]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def default_requests() -> dict[str, tuple[Callable[[], int], str]]:
    """``{command: (validate, description)}``; ``validate()`` estimates, checks, returns bytes."""
    from ctx_staircase import budget, lm, tasks, text, train
    from ctx_staircase.experiments import staircase
    from ctx_staircase.internal import INT32_MAX, SEED_MAX, check_int

    add = tasks.make("add")
    config = train.TrainConfig()
    corpus = text.prepare_corpus(text.builtin_corpus(), vocab_size=None)
    lm_config = lm.LMConfig(steps=1000, snapshot_every=20)
    limit = None  # read per call, as a command does: --max-memory, the environment, meminfo

    def train_add() -> int:
        check_int(config.steps, "--steps", 1, INT32_MAX)
        check_int(0, "--seeds", 0, SEED_MAX)
        estimate = budget.train_bytes("ffn", add, config, lanes=1, d=128)
        return budget.check(estimate, what="train add", knob="lower --d", limit=limit)

    def theory_add() -> int:
        estimate = budget.theory_bytes(add, model="ffn", d=128, max_orders=(0, 1))
        return budget.check(estimate, what="theory add", knob="lower --d", limit=limit)

    def signatures_add() -> int:
        estimate = budget.signature_bytes(add, 1)
        return budget.check(estimate, what="signatures add", knob="lower --order", limit=limit)

    def lm_default() -> int:
        check_int(lm_config.steps, "--steps", 1, INT32_MAX)
        check_int(0, "--seed", 0, SEED_MAX)
        estimate = budget.lm_bytes(lm_config, corpus.vocab_size, 2, tokens=corpus.train.size)
        return budget.check(estimate, what="lm", knob="lower --d", limit=limit)

    def run(tiny: bool) -> Callable[[], int]:
        def validate() -> int:
            estimate = staircase.memory_bytes(tiny=tiny)
            return budget.check(estimate, what="run", knob="use --tiny", limit=limit)

        return validate

    return {
        "train add": (train_add, "ffn, n=400, V=41, d=128, Adam, 1000 steps, 1 lane"),
        "theory add": (theory_add, "ffn, 5 gammas, orders 0 and 1, linear prediction"),
        "signatures add": (signatures_add, "order 1, group numbers"),
        "lm": (lm_default, f"built-in corpus, V={corpus.vocab_size}, d=128, 2 lanes"),
        "run": (run(False), "flagship: add and mod N=40, theory on add (builds 3 datasets)"),
        "run --tiny": (run(True), "flagship, N=8 (builds 3 datasets)"),
    }


def time_validation(repeats: int) -> dict[str, dict]:
    from ctx_staircase import budget

    def outcome(validate) -> tuple[int | None, str]:
        try:
            return validate(), "accepted"
        except ValueError as refusal:  # the limit here may be below what the default needs
            return None, str(refusal)

    rows = {}
    for command, (validate, description) in default_requests().items():
        estimate, verdict = outcome(validate)  # warm-up: imports and caches
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            outcome(validate)
            times.append(time.perf_counter() - start)
        rows[command] = {
            "description": description,
            "estimate": "refused" if estimate is None else budget.format_bytes(estimate),
            "verdict": verdict,
            "median_us": 1e6 * statistics.median(times),
            "max_us": 1e6 * max(times),
        }
    return rows


def calibration() -> list[tuple[str, int, int]]:
    """``(configuration, estimate, XLA bytes)`` for training and GPT lanes."""
    import jax
    import jax.numpy as jnp

    from ctx_staircase import budget, lm, tasks, text, train

    short = dict(steps=10, snapshots=(0, 10))  # few snapshots: the step's memory dominates
    rows = []
    for label, model, task, params, settings, d in (
        ("ffn add N=20 d=128, 100 steps", "ffn", "add", dict(N=20), dict(steps=100), 128),
        ("ffn modsum N=12 L=4 d=32", "ffn", "modsum", dict(N=12, L=4), short, 32),
        ("ffn add N=120 V=1500 d=64", "ffn", "add", dict(N=120, vocab_size=1500), short, 64),
        ("ffn add N=5 V=20000 d=256", "ffn", "add", dict(N=5, vocab_size=20000), short, 256),
        ("attention modsum N=8 L=4 d=64", "attention", "modsum", dict(N=8, L=4), short, 64),
        ("transformer add N=100 d=64", "transformer", "add", dict(N=100), short, 64),
    ):
        ds = tasks.make(task, **params)
        config = train.TrainConfig(**settings)
        graphdef, state = train.init_state(model, ds, gamma=1.0, seed=0, d=d)
        run = train.make_run(graphdef, config)
        lr = jnp.asarray(config.lr, dtype=train.state_dtype(state))
        data = train.TrainData.from_dataset(ds)
        measured = budget.xla_bytes(
            jax.jit(run).lower(state, lr, jax.random.key(0), data).compile()
        )
        rows.append((f"train {label}", budget.train_lane_bytes(model, ds, config, d=d), measured))
    corpus = text.prepare_corpus(text.builtin_corpus(n_sentences=3000), vocab_size=None)
    for shape in (
        dict(d=32, n_layers=1, n_heads=2, context_length=16, batch_size=8, tracked=24),
        dict(d=128, n_layers=2, n_heads=4, context_length=64, batch_size=32),
    ):
        config = lm.LMConfig(**shape, steps=40, snapshot_every=10, min_count=5)
        V, T = corpus.vocab_size, config.context_length
        tracked = lm.eligible_tokens(
            corpus.train, corpus.vocabulary, count=config.tracked, min_count=5
        )
        lane = lm.lane_function(config, V, lm.tracked_rows(tracked, V))
        states = jax.eval_shape(functools.partial(lm.initial_states, config, V, np.ones(1), 0))
        state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), states)
        args = (state, *lm.lane_data(corpus, config, tracked, 0))
        measured = budget.xla_bytes(jax.jit(lane).lower(*args).compile())
        label = f"lm d={config.d} layers={config.n_layers} T={T} B={config.batch_size} V={V}"
        rows.append((label, budget.lm_lane_bytes(config, V, tokens=corpus.train.size), measured))
    return rows


#: Whole validation phases of the CLI: each request is refused by the memory check with
#: ``--max-memory 1B``, so `cli.main` runs every check a real run makes (parsing, the output
#: folder, the task's size, building the task, the config, the estimate) and then stops.
CLI_REQUESTS = {
    "train add": ["train", "add"],
    "theory add": ["theory", "add"],
    "signatures add": ["signatures", "add"],
    "lm": ["lm"],
    "run": ["run"],
}


def time_cli_validation(repeats: int) -> dict[str, float]:
    """Median seconds of `cli.main` refusing each `CLI_REQUESTS` entry at its memory check."""
    import contextlib
    import io

    from ctx_staircase import cli

    medians = {}
    with tempfile.TemporaryDirectory() as folder:
        for command, argv in CLI_REQUESTS.items():
            full = [*argv, "--out", str(Path(folder) / "never"), "--max-memory", "1B"]
            times = []
            for _ in range(repeats + 1):  # the first call imports: not timed
                start = time.perf_counter()
                with contextlib.redirect_stderr(io.StringIO()) as err:
                    code = cli.main(full)
                times.append(time.perf_counter() - start)
                assert code == 2 and "needs about" in err.getvalue(), err.getvalue()
            medians[command] = statistics.median(times[1:])
    return medians


def default_run_seconds() -> float:
    """Wall time of one default ``ctx-staircase train add`` (first call: compiles)."""
    from ctx_staircase import cli

    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        code = cli.main(["train", "add", "--out", str(Path(folder) / "run")])
        seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"ctx-staircase train add exited with {code}")
    return seconds


#: (e): ``(label, argv, exit code)`` answered by a fresh ``python -m ctx_staircase``.
ANSWERS = (
    ("--version", ["--version"], 0),
    ("--help", ["--help"], 0),
    ("train --help", ["train", "--help"], 0),
    ("unknown task", ["train", "nosuchtask"], 2),
    ("--steps -1", ["train", "add", "--steps", "-1"], 2),
    ("--optimizer foo", ["train", "add", "--optimizer", "foo"], 2),
    ("bad --coordinator", ["train", "add", "--coordinator", "host", "--num-processes", "2"], 2),
)


def time_answers(repeats: int) -> list[dict]:
    """(e): median wall seconds of each `ANSWERS` run in a fresh process, its exit code, and
    whether it imported JAX."""
    import subprocess

    rows = []
    for label, argv, code in ANSWERS:
        command = [sys.executable, "-m", "ctx_staircase", *argv]
        walls = []
        with tempfile.TemporaryDirectory() as cwd:
            for _ in range(repeats):
                start = time.perf_counter()
                done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
                walls.append(time.perf_counter() - start)
            traced = subprocess.run(
                [sys.executable, "-X", "importtime", *command[1:]],
                cwd=cwd,
                capture_output=True,
                text=True,
            )
        imported = any(line.rstrip().endswith("| jax") for line in traced.stderr.splitlines())
        rows.append(
            dict(
                label=label,
                median_s=statistics.median(walls),
                max_s=max(walls),
                exit_code=done.returncode,
                expected_code=code,
                imports_jax=imported,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per command")
    parser.add_argument("--calibrate", action="store_true", help="estimates against XLA")
    parser.add_argument("--process-repeats", type=int, default=5, help="runs per answer (e)")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--default-run", action="store_true", help="time `train add` (minutes)")
    runs.add_argument(
        "--default-run-seconds", type=float, default=None, help="a measured `train add` time"
    )
    args = parser.parse_args()

    import jax

    from ctx_staircase import budget

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"machine: {platform.machine()}, {cores} cores, available "
        f"{budget.format_bytes(budget.available_bytes())}, load {os.getloadavg()[0]:.2f}; "
        f"Python {sys.version.split()[0]}, jax {jax.__version__}, numpy {np.__version__}"
    )
    print(f"limit: {budget.format_bytes(budget.limit_bytes())} ({budget.memory_limit().source})")
    rows = time_validation(args.repeats)
    print(f"\n(a) validation of each default request, median of {args.repeats} calls")
    print(f"{'command':16s} {'estimate':>10s} {'median µs':>10s} {'max µs':>10s}  request")
    for command, row in rows.items():
        print(
            f"{command:16s} {row['estimate']:>10s} {row['median_us']:10.1f} {row['max_us']:10.1f}"
            f"  {row['description']}"
        )
    for row in rows.values():
        if row["verdict"] != "accepted":
            print(f"  refused here: {row['verdict']}")
    if args.calibrate:
        print("\n(b) estimate against XLA's memory_analysis (arguments + outputs + temporaries)")
        print(f"{'configuration':52s} {'estimate':>10s} {'XLA':>10s} {'ratio':>6s}")
        for label, estimate, measured in calibration():
            print(
                f"{label:52s} {budget.format_bytes(estimate):>10s} "
                f"{budget.format_bytes(measured):>10s} {estimate / measured:6.2f}"
            )
    seconds = args.default_run_seconds
    if args.default_run:
        seconds = default_run_seconds()
    phases = time_cli_validation(max(3, args.repeats // 20))
    print("\n(d) the CLI's whole validation phase (refused at the memory check), median ms")
    for command, value in phases.items():
        print(f"{command:16s} {value * 1e3:10.2f}")
    print(f"\n(e) a fresh process's answer, median of {args.process_repeats} runs")
    print(f"{'answer':20s} {'median s':>9s} {'max s':>7s} {'exit':>5s}  imports JAX")
    for row in time_answers(args.process_repeats):
        flag = (
            ""
            if row["exit_code"] == row["expected_code"]
            else f" (expected {row['expected_code']})"
        )
        print(
            f"{row['label']:20s} {row['median_s']:9.2f} {row['max_s']:7.2f} "
            f"{row['exit_code']:5d}{flag}  {'yes' if row['imports_jax'] else 'no'}"
        )
    if seconds is not None:
        validation = rows["train add"]["median_us"] * 1e-6
        print(
            f"\n(c) `train add` validation {validation * 1e6:.1f} µs against the default run "
            f"{seconds:.1f} s: ratio {validation / seconds:.2e}; the whole validation phase "
            f"{phases['train add'] * 1e3:.1f} ms: ratio {phases['train add'] / seconds:.2e}"
        )


if __name__ == "__main__":
    main()
