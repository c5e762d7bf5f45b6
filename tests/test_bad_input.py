"""A table-driven suite of bad inputs (validate, then work): every CLI subcommand and the public
Python API.

CLI (``ctx_staircase.cli.main`` in-process, and a few real ``python -m ctx_staircase``
processes): every bad input exits 2 with exactly one line on stderr, no traceback, within 10 s,
and nothing is created or modified in the working folder, ``--out`` included.

Python: every bad input raises ``ValueError`` or ``TypeError`` (or the exception the function
documents) whose message names the offending parameter.

The tables are plain lists; add a row to add a case. In CLI rows the placeholders ``{file}``
(an existing regular file), ``{outdir}`` (an existing output folder holding a file), ``{empty}``,
``{blank}``, ``{latin1}``, ``{nul}``, ``{textdir}``, ``{missing}``, ``{short}`` and ``{good}``
(text files, see `workspace`) are replaced by paths in the test's own folder; every in-process
row without ``--out`` gets ``--out <folder>/out`` appended (``list`` takes none).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ctx_staircase import cli
from ctx_staircase.cli.parser import parser as cli_parser

# A path even root cannot create: /proc is a virtual file system.
UNCREATABLE = "/proc/ctx_staircase_test/out"
MEMORY_ENV = "CTX_STAIRCASE_MAX_MEMORY"
#: What `budget.available_bytes` reports during the in-process cases, so that the default limit
#: (80 % of it) and hence the memory refusals do not depend on the machine running the suite.
AVAILABLE_BYTES = 20 * 10**9


def case(case_id: str, argv: str | list[str], needle: str, *, env=None, marks=()):
    """One CLI row: ``argv`` (a str is split on spaces), the parameter stderr must name (see
    `names`), and environment variables to set (``env``)."""
    argv = argv.split() if isinstance(argv, str) else list(argv)
    return pytest.param(argv, needle, dict(env or {}), id=case_id, marks=marks)


# --------------------------------------------------------------------------------------------
# CLI rows, in-process

CLI_CASES = [
    # --- the command itself
    case("no-command", [], "COMMAND"),
    case("unknown-command", "nosuch", "nosuch"),
    case("unknown-top-level-option", "--nosuch list", "--nosuch"),
    # --- list
    case("list-extra-argument", "list extra", "extra"),
    case("list-unknown-option", "list --bogus", "--bogus"),
    case("list-max-memory-abc", "list --max-memory abc", "--max-memory"),
    # --- memory: the up-front estimate and the limit
    case("train-modsum-N70-L4-81GB", "train modsum --param N=70 --param L=4", "--max-memory"),
    case("theory-add-N2000-264GB", "theory add --param N=2000", "memory"),
    case("lm-d65536-68GB", "lm --d 65536", "--max-memory"),
    case("train-max-memory-1MB", "train add --max-memory 1MB", "--max-memory"),
    case("signatures-max-memory-1kB", "signatures add --max-memory 1kB", "--max-memory"),
    case("lm-max-memory-1MB", "lm --tiny --max-memory 1MB", "--max-memory"),
    case("theory-max-memory-1MB", "theory add --param N=8 --max-memory 1MB", "--max-memory"),
    case("train-max-memory-abc", "train add --max-memory abc", "--max-memory"),
    case("train-probe-group-of-4", "train add --param N=4", "--probe-snapshots"),
    case("train-max-memory-negative-as-option", "train add --max-memory -5GB", "--max-memory"),
    case("train-max-memory-negative", "train add --max-memory=-5GB", "--max-memory"),
    case("train-max-memory-zero", "train add --max-memory 0", "--max-memory"),
    case("train-max-memory-nan", "train add --max-memory nan", "--max-memory"),
    case("train-max-memory-inf", "train add --max-memory inf", "--max-memory"),
    case("train-max-memory-unknown-unit", "train add --max-memory 5XB", "--max-memory"),
    case("train-max-memory-below-one-byte", "train add --max-memory 0.5", "--max-memory"),
    case("signatures-max-memory-abc", "signatures add --max-memory abc", "--max-memory"),
    case("theory-max-memory-zero", "theory add --max-memory 0GB", "--max-memory"),
    case("lm-max-memory-abc", "lm --tiny --max-memory abc", "--max-memory"),
    case("run-max-memory-abc", "run --max-memory abc", "--max-memory"),
    case("run-tiny-max-memory-1kB", "run --tiny --max-memory 1kB", "--max-memory"),
    case("train-env-memory-abc", "train add", MEMORY_ENV, env={MEMORY_ENV: "abc"}),
    case("lm-env-memory-negative", "lm --tiny", MEMORY_ENV, env={MEMORY_ENV: "-1GB"}),
    # --- train: integers and reals
    case("train-steps-1e12", "train add --steps 1e12", "--steps"),
    case("train-steps-0", "train add --steps 0", "--steps"),
    case("train-steps-negative", "train add --steps -3", "--steps"),
    case("train-steps-2pow31", "train add --steps 2147483648", "--steps"),
    case("train-steps-float", "train add --steps 1.5", "--steps"),
    case("train-steps-word", "train add --steps many", "--steps"),
    case("train-seed-2pow32", "train add --seeds 4294967296", "--seeds"),
    case("train-seed-negative", "train add --seeds -1", "--seeds"),
    case("train-seed-second-bad", "train add --seeds 0 4294967296", "--seeds"),
    case("train-gamma-nan", "train add --gamma nan", "--gamma"),
    case("train-gamma-inf", "train add --gamma inf", "--gamma"),
    case("train-gamma-minus-inf", "train add --gamma=-inf", "--gamma"),
    case("train-gamma-word", "train add --gamma big", "--gamma"),
    case("train-gamma-negative", "train add --gamma=-1", "gamma = -1 gives 128^1 = 128"),
    case("train-gamma-zero", "train add --gamma 0.8 0", "gamma = 0 gives 128^0 = 1"),
    case("train-lr-0", "train add --lr 0", "--lr"),
    case("train-lr-negative", "train add --lr -1", "--lr"),
    case("train-lr-nan", "train add --lr nan", "--lr"),
    case("train-lr-second-inf", "train add --lr 0.1 inf", "--lr"),
    case("train-d-0", "train add --d 0", "--d"),
    case("train-chunk-0", "train add --chunk 0", "--chunk"),
    case("train-probe-snapshots-negative", "train add --probe-snapshots -1", "--probe-snapshots"),
    case("train-snapshot-steps-negative", "train add --snapshot-steps -1", "--snapshot-steps"),
    case(
        "train-snapshot-steps-beyond-steps",
        "train add --steps 100 --snapshot-steps 0 500",
        "snapshots",
    ),
    case("train-batch-size-0", "train add --batch-size 0", "--batch-size"),
    case("train-vocab-size-0", "train add --vocab-size 0", "--vocab-size"),
    case("train-vocab-size-too-small", "train add --vocab-size 5", "vocab_size"),
    # --- train: names
    case("train-sgd-without-batch-size", "train add --optimizer sgd", "batch_size"),
    case("train-unknown-model", "train add --model mlp", "--model"),
    case("train-unknown-optimizer", "train add --optimizer lbfgs", "--optimizer"),
    case("train-unknown-activation", "train add --activation swish", "activation"),
    case("train-activation-empty-poly", "train add --activation poly:", "activation"),
    case("train-activation-nan-poly", "train add --activation poly:1,nan", "activation"),
    case("train-activation-z0", "train add --activation z^0", "activation"),
    case("train-activation-huge-monomial", "train add --activation z^1000000000", "activation"),
    case(
        "train-activation-for-attention",
        "train add --model attention --activation relu",
        "--activation",
    ),
    case("train-prediction-not-an-option", "train add --prediction linear", "--prediction"),
    case("train-missing-task", "train", "task"),
    case("train-unknown-task", "train nosuch", "name"),
    case("train-unknown-option", "train add --bogus 3", "--bogus"),
    # --- tasks through --param (train, signatures and theory share them)
    case("param-unknown", "train add --param bogus=3", "bogus"),
    case("param-N-nan", "train add --param N=nan", "N"),
    case("param-N-0", "train add --param N=0", "N"),
    case("param-N-negative", "train add --param N=-1", "N"),
    case("param-N-float", "train add --param N=1.5", "N"),
    case("param-N-bool", "train add --param N=True", "N"),
    case("param-N-string", "train add --param N='abc'", "N"),
    case("param-N-word", "train add --param N=abc", "N"),
    case("param-N-list", "train add --param N=[1,2]", "N"),
    case("param-N-expression", "train add --param N=10**100", "N"),
    case("param-N-inf", "train add --param N=1e400", "N"),
    case("param-N-too-many-samples", "train add --param N=100000", "N"),
    case("param-no-equals", "train add --param N", "--param"),
    case("param-no-key", "train add --param =3", "--param"),
    case("param-bad-key", "train add --param 1N=3", "--param"),
    case("param-empty", ["train", "add", "--param", ""], "--param"),
    case("param-vocab-size-too-small", "train add --param vocab_size=3", "vocab_size"),
    case("param-vocab-size-word", "train add --param vocab_size=big", "vocab_size"),
    case("sub-N-1", "signatures sub --param N=1", "N"),
    case("mul-N-too-many-samples", "signatures mul --param N=100000", "N"),
    case("mod-convention", "train mod --param convention=other", "convention"),
    case("mod-N-1", "theory mod --param N=1", "N"),
    case("modsum-L-0", "signatures modsum --param L=0", "L"),
    case("modsum-N-1", "signatures modsum --param N=1 --param L=2", "N"),
    case("modsum-too-many-samples", "train modsum --param N=100 --param L=5", "N"),
    case("modulus-M-1", "train modulus --param M=1", "M"),
    case("modulus-M-float", "train modulus --param M=2.5", "M"),
    case("label-law-unknown-law", "signatures label_law --param law=cauchy", "law"),
    case("label-law-anchor-in-range", "signatures label_law --param anchor=10", "anchor"),
    case("label-law-x-max-0", "signatures label_law --param x_max=0", "x_max"),
    case("label-law-sigma-0", "signatures label_law --param law='normal' --param sigma=0", "sigma"),
    case("label-law-lam-negative", "signatures label_law --param lam=-1", "lam"),
    case("label-law-rate-nan", "signatures label_law --param rate=nan", "rate"),
    case("label-law-mu-inf", "signatures label_law --param mu=1e999", "mu"),
    case("label-law-labels", "signatures label_law --param labels=mean", "labels"),
    case("label-law-seed-negative", "signatures label_law --param seed=-1", "seed"),
    case("anchor-parity-L-0", "train anchor_parity --param L=0", "L"),
    case("anchor-parity-n-0", "train anchor_parity --param n=0", "n"),
    case(
        "anchor-parity-anchor-range-reversed",
        "train anchor_parity --param anchor_low=30",
        "anchor_high",
    ),
    case("anchor-parity-overlap", "train anchor_parity --param noise_low=15", "noise_low"),
    case("anchor-parity-seed-float", "train anchor_parity --param seed=1.5", "seed"),
    case("task4-n-x-1", "signatures task4 --param n_x=1", "n_x"),
    case("task4-n-a-0", "signatures task4 --param n_a=0", "n_a"),
    case("minmax-N-1", "signatures minmax --param N=1", "N"),
    case("rb-anchor-L-1", "train rb_anchor --param L=1", "L"),
    case("rb-anchor-q-0", "train rb_anchor --param q=0", "q"),
    case("rb-anchor-q-above-L", "train rb_anchor --param L=4 --param q=4", "q"),
    case("rb-anchor-n-too-small", "train rb_anchor --param n=10", "n"),
    case("rb-anchor-key-low", "train rb_anchor --param key_low=5", "key_low"),
    case(
        "rb-anchor-memory-labels", "train rb_anchor --param memory_labels=random", "memory_labels"
    ),
    case("rb-anchor-heldout-entry", "train rb_anchor --param heldout=((1,2),)", "heldout"),
    case("rb-anchor-heldout-word", "train rb_anchor --param heldout=abc", "heldout"),
    # --- signatures
    case("signatures-order-above-L-1", "signatures add --order 2", "--order"),
    case("signatures-order-negative", "signatures add --order -1", "--order"),
    case("signatures-order-65", "signatures add --order 65", "--order"),
    case(
        "signatures-modsum-order-above-L-1",
        "signatures modsum --param N=4 --param L=2 --order 2",
        "--order",
    ),
    case("signatures-unknown-group", "signatures add --group anchors", "group"),
    case("signatures-empty-group", ["signatures", "add", "--group", ""], "group"),
    case("signatures-unknown-task", "signatures nosuch", "name"),
    case("signatures-missing-task", "signatures", "task"),
    # --- theory
    case("theory-ffn-gamma-below", "theory add --gamma 0.4", "gamma"),
    case("theory-ffn-gamma-above", "theory add --gamma 0.8 2.1", "gamma"),
    case("theory-second-escape-group", "theory mod --second-escape --geometry bogus", "geometry"),
    case("theory-second-escape-attention", "theory mod --second-escape --model attention", "ffn"),
    case("theory-attention-gamma-below", "theory add --model attention --gamma 0.5", "gamma"),
    case("theory-attention-gamma-above", "theory add --model attention --gamma 1.1", "gamma"),
    case("theory-gamma-nan", "theory add --gamma nan", "--gamma"),
    case("theory-max-order-above-L-1", "theory add --max-order 0 2", "max_orders"),
    case("theory-max-order-negative", "theory add --max-order -1", "--max-order"),
    case("theory-theories-unknown", "theory add --theories closed_form nope", "theories"),
    case("theory-theories-not-ffn-poly", "theory add --theories relu_gated_flow", "theories"),
    case("theory-threshold-0", "theory add --threshold 0", "--threshold"),
    case("theory-threshold-negative", "theory add --threshold -1", "--threshold"),
    case("theory-snapshot-every-0", "theory add --snapshot-every 0", "--snapshot-every"),
    case("theory-steps-0", "theory add --steps 0", "--steps"),
    case("theory-steps-2pow31", "theory add --steps 2147483648", "--steps"),
    case("theory-d-0", "theory add --d 0", "--d"),
    case("theory-lr-0", "theory add --lr 0", "--lr"),
    case("theory-lr-inf", "theory add --lr inf", "--lr"),
    case("theory-seed-negative", "theory add --seeds -1", "--seeds"),
    case("theory-seed-2pow32", "theory add --seeds 4294967296", "--seeds"),
    case("theory-seeds-without-grid", "theory add --seeds 0 1", "one seed"),
    case("theory-unknown-model", "theory add --model transformer", "--model"),
    case("theory-unknown-prediction", "theory add --prediction quadratic", "--prediction"),
    case("theory-unknown-activation", "theory add --activation swish", "activation"),
    case("theory-activation-z0", "theory add --activation z^0", "activation"),
    case("theory-unknown-task", "theory nosuch", "name"),
    case("theory-param-N-0", "theory add --param N=0", "N"),
    # --- lm
    case("lm-text-missing", "lm --tiny --text {missing}", "missing.txt"),
    case("lm-text-empty", "lm --tiny --text {empty}", "empty.txt"),
    case("lm-text-whitespace", "lm --tiny --text {blank}", "blank.txt"),
    case("lm-text-not-utf8", "lm --tiny --text {latin1}", "latin1.txt"),
    case("lm-text-nul-byte", "lm --tiny --text {nul}", "nul.txt"),
    case("lm-text-directory", "lm --tiny --text {textdir}", "textdir"),
    case("lm-context-1", "lm --tiny --context 1", "--context"),
    case("lm-heads-not-dividing-d", "lm --tiny --d 30 --heads 4", "n_heads"),
    case("lm-heads-odd-head-dim", "lm --tiny --d 12 --heads 4", "n_heads"),
    case("lm-heads-0", "lm --tiny --heads 0", "--heads"),
    case("lm-layers-0", "lm --tiny --layers 0", "--layers"),
    case("lm-words-1", "lm --tiny --words 1", "--words"),
    case("lm-words-above-words", "lm --tiny --text {good} --words 500", "vocab_size"),
    case("lm-builtin-words-above-words", "lm --tiny --words 100000", "vocab_size"),
    case("lm-snapshot-every-0", "lm --tiny --snapshot-every 0", "--snapshot-every"),
    case(
        "lm-corpus-shorter-than-context", "lm --tiny --text {short} --context 64", "context_length"
    ),
    case("lm-steps-0", "lm --tiny --steps 0", "--steps"),
    case("lm-steps-2pow31", "lm --steps 2147483648", "--steps"),
    case("lm-d-0", "lm --tiny --d 0", "--d"),
    case("lm-lr-0", "lm --tiny --lr 0", "--lr"),
    case("lm-lr-nan", "lm --tiny --lr nan", "--lr"),
    case("lm-gamma-inf", "lm --tiny --gamma 1 inf", "--gamma"),
    case("lm-gamma-negative", "lm --tiny --gamma=-0.5", "gamma = -0.5 gives"),
    case("lm-seed-negative", "lm --tiny --seeds -1", "--seeds"),
    case("lm-seed-2pow32", "lm --tiny --seeds 4294967296", "--seeds"),
    case("lm-two-seeds", "lm --tiny --seeds 0 1", "--seeds"),
    case("lm-batch-size-0", "lm --tiny --batch-size 0", "--batch-size"),
    case("lm-positional-argument", "lm corpus.txt", "corpus.txt"),
    # --- run
    case("run-unknown-name", "run nosuch", "nosuch"),
    case("run-empty-name", ["run", ""], "experiment"),
    case("run-list-with-name", "run --list nosuch", "--list"),
    case("run-tiny-and-quick", "run fig2_geometry --tiny --quick", "--tiny"),
    case("run-tiny-and-full", "run --tiny --full", "--tiny"),
    case("run-lm-text-without-text", "run lm_text", "--text"),
    case("run-text-on-non-text-experiment", "run fig2_geometry --text {good}", "--text"),
    case("run-lm-text-not-utf8", "run lm_text --text {latin1}", "latin1.txt"),
    case("run-lm-text-missing", "run lm_text --text {missing}", "missing.txt"),
    case("run-lm-text-empty", "run lm_text --text {empty}", "empty.txt"),
    case("run-two-names", "run staircase fig2_geometry", "fig2_geometry"),
    case("run-unknown-option", "run --bogus", "--bogus"),
    # --- --out
    case("train-out-existing-file", "train add --out {file}", "--out"),
    case("train-out-under-file", "train add --out {file}/sub", "--out"),
    case("train-out-uncreatable", f"train add --out {UNCREATABLE}", "--out"),
    case("signatures-out-existing-file", "signatures add --out {file}", "--out"),
    case("signatures-out-under-file", "signatures add --out {file}/sub/deeper", "--out"),
    case("theory-out-under-file", "theory add --out {file}/sub", "--out"),
    case("theory-out-uncreatable", f"theory add --out {UNCREATABLE}", "--out"),
    case("lm-out-existing-file", "lm --tiny --out {file}", "--out"),
    case("lm-out-uncreatable", f"lm --tiny --out {UNCREATABLE}", "--out"),
    case("run-out-existing-file", "run --tiny --out {file}", "--out"),
    case("run-out-uncreatable", f"run --tiny --out {UNCREATABLE}", "--out"),
    case("train-out-empty", ["train", "add", "--steps", "1", "--d", "2", "--out", ""], "--out"),
    # --- an existing output folder is left exactly as it was
    case("existing-out-train-steps-0", "train add --steps 0 --out {outdir}", "--steps"),
    case("existing-out-train-N-0", "train add --param N=0 --out {outdir}", "N"),
    case("existing-out-train-lr-0", "train add --lr 0 --out {outdir}", "--lr"),
    # theory and signatures cannot resume: a finished run there is refused before the flags
    case("existing-out-theory-gamma", "theory add --gamma 0.4 --out {outdir}", "--force"),
    case("existing-out-signatures-order", "signatures add --order 2 --out {outdir}", "--force"),
    case("existing-out-theory-force", "theory add --gamma 0.4 --force --out {outdir}", "gamma"),
    case("existing-out-lm-text", "lm --tiny --text {latin1} --out {outdir}", "latin1.txt"),
    case("existing-out-run-tiny-full", "run --tiny --full --out {outdir}", "--tiny"),
]


# --------------------------------------------------------------------------------------------
# the working folder: input files, an existing output folder, and a snapshot of everything

GOOD_TEXT = (
    " ".join(
        f"the {a} {b} sat on the {c} ."
        for a in ("cat", "dog", "cow")
        for b in ("big", "small")
        for c in ("mat", "rug", "bed", "box")
    )
    * 40
)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A fresh folder (also the working directory) holding every input file the rows name."""
    root = tmp_path / "work"
    root.mkdir()
    files = {
        "file": b"a regular file, not a folder\n",
        "empty": b"",
        "blank": b"  \n\t\n   \n",
        "latin1": "un café crème, s'il vous plaît\n".encode("latin-1"),
        "nul": b"some text\x00more text\n",
        "short": b"a few words only , not enough for a context .\n",
        "good": GOOD_TEXT.encode(),
    }
    paths = {}
    for name, data in files.items():
        path = root / ("afile" if name == "file" else f"{name}.txt")
        path.write_bytes(data)
        paths[name] = path
    (root / "textdir").mkdir()
    paths["textdir"] = root / "textdir"
    paths["missing"] = root / "missing.txt"
    outdir = root / "outdir"
    outdir.mkdir()
    (outdir / "metrics.json").write_text('{"kept": true}\n')
    (outdir / "lanes").mkdir()
    (outdir / "lanes" / "lane_000.npz").write_bytes(b"not really an npz")
    paths["outdir"] = outdir
    old = 1_000_000_000  # files dated 2001, so a rewrite in the same second still shows
    for path in (root / "afile", outdir / "metrics.json", outdir / "lanes" / "lane_000.npz"):
        os.utime(path, (old, old))
    monkeypatch.chdir(root)
    return SimpleNamespace(root=root, out=root / "out", paths=paths)


def _fill(argv: list[str], paths: dict[str, Path]) -> list[str]:
    filled = []
    for arg in argv:
        for name, path in paths.items():
            arg = arg.replace("{" + name + "}", str(path))
        filled.append(arg)
    return filled


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, and for files size, mtime and contents.

    Folder mtimes are left out: `paths.check_output_dir` creates and removes a probe file in the
    nearest existing folder to test that it is writable, which touches that folder's mtime."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_dir():
            state[rel] = ("dir",)
        else:
            stat = path.stat()
            state[rel] = ("file", stat.st_size, stat.st_mtime_ns, path.read_bytes())
    return state


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """Import what the commands import lazily."""
    from ctx_staircase import comparison, experiments, lm, sweep, text  # noqa: F401

    cli_parser()


@pytest.fixture
def pinned_memory(monkeypatch):
    """The default memory limit as on a 20 GB machine, whatever machine runs the suite."""
    from ctx_staircase import budget

    monkeypatch.delenv(MEMORY_ENV, raising=False)
    monkeypatch.setattr(budget, "available_bytes", lambda: AVAILABLE_BYTES, raising=False)


def names(message: str, needle: str) -> bool:
    """Whether ``message`` names ``needle`` as a whole word: ``N`` is not found in ``NaN``,
    ``--d`` not in ``--dtype``, ``snapshot`` not in ``snapshots``."""
    return re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", message) is not None


def _check_one_line(err: str, needle: str) -> None:
    assert "Traceback" not in err, err
    assert err.strip(), "nothing on stderr"
    assert err.strip().count("\n") == 0, f"more than one line on stderr:\n{err}"
    assert names(err, needle), f"{needle!r} not named in stderr: {err!r}"


@pytest.mark.parametrize("argv,needle,env", CLI_CASES)
def test_cli_bad_input(
    argv, needle, env, workspace, pinned_memory, capsys, monkeypatch, compilations
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    argv = _fill(argv, workspace.paths)
    if argv and argv[0] != "list" and "--out" not in argv:
        argv = [*argv, "--out", str(workspace.out)]
    before = _snapshot(workspace.root)
    compilations.clear()
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, f"exit code {code}; stderr: {err[-3000:]!r}"
    _check_one_line(err, needle)
    assert not workspace.out.exists(), f"--out was created: {sorted(workspace.out.rglob('*'))}"
    assert _snapshot(workspace.root) == before, "files were created or modified"
    # refused before any work: no XLA program was compiled (how long that takes is measured in
    # benchmarks/validation.py, never asserted)
    assert not compilations, f"{len(compilations)} XLA programs compiled before the refusal"


# --------------------------------------------------------------------------------------------
# CLI rows, as real processes (`python -m ctx_staircase`: the `cli.entry` thread and sys.exit)

SUBPROCESS_CASES = [
    case("proc-train-steps-1e12", "train add --steps 1e12", "--steps"),
    case("proc-train-modsum-81GB", "train modsum --param N=70 --param L=4", "--max-memory"),
    case("proc-lm-text-not-utf8", "lm --tiny --text {latin1}", "latin1.txt"),
    case("proc-run-unknown-name", "run nosuch", "nosuch"),
    case("proc-signatures-order-above-L-1", "signatures add --order 2", "--order"),
    case("proc-theory-out-under-file", "theory add --out {file}/sub", "--out"),
]


@pytest.mark.parametrize("argv,needle,env", SUBPROCESS_CASES)
def test_cli_bad_input_subprocess(argv, needle, env, workspace):
    argv = _fill(argv, workspace.paths)
    if "--out" not in argv:
        argv = [*argv, "--out", str(workspace.out)]
    before = _snapshot(workspace.root)
    environment = {**os.environ, MEMORY_ENV: os.environ.get(MEMORY_ENV, "16GB"), **env}
    done = subprocess.run(
        [sys.executable, "-m", "ctx_staircase", *argv],
        cwd=workspace.root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, f"exit code {done.returncode}; stderr: {done.stderr[-3000:]!r}"
    _check_one_line(done.stderr, needle)
    assert not workspace.out.exists()
    assert _snapshot(workspace.root) == before


# --------------------------------------------------------------------------------------------
# Python entry points


class Lazy:
    """An argument built when the case runs (datasets, arrays), not at collection."""

    def __init__(self, make):
        self.make = make

    def __call__(self):
        return self.make()


def _ds():
    from ctx_staircase import tasks

    return tasks.make("add", N=4)


def _sigs():
    from ctx_staircase import signatures

    return signatures.signature_set(_ds(), 1)


def _flow_sigs():
    from ctx_staircase import flows

    return flows.flow_signatures(_sigs())


def _weights(V=None, d=3):
    V = _ds().vocab_size if V is None else V
    return np.linspace(-1, 1, V * d).reshape(V, d)


DS, SIGS, FLOW_SIGS = Lazy(_ds), Lazy(_sigs), Lazy(_flow_sigs)
W = Lazy(_weights)
ERRORS = (ValueError, TypeError)


def pycase(case_id: str, fn_path: str, kwargs: dict, needle: str, exc=ERRORS):
    """One Python row: ``module.function`` (resolved when the case runs), its keyword arguments,
    the exception(s) allowed and the text the message must contain."""
    return pytest.param(fn_path, kwargs, exc, needle, id=case_id)


def pycases(prefix: str, fn_path: str, ok: dict, rows: list[tuple], exc=ERRORS):
    """Rows that each change the passing keyword arguments ``ok`` by ``overrides``: one
    `pycase` per ``(suffix, overrides, needle)``, with the id ``prefix-suffix``."""
    return [pycase(f"{prefix}-{sfx}", fn_path, ok | bad, needle, exc) for sfx, bad, needle in rows]


TRAIN_OK = dict(optimizer="adam", lr=1e-3, steps=100)
THEORY_OK = dict(
    model="ffn", gammas=[0.8], max_orders=[0, 1], d=16, activation="poly:1,0.5", lr=0.2,
    steps=None, snapshot_every=None, threshold=0.5, prediction="linear",
)  # fmt: skip
LMCONFIG_OK = dict(d=32, n_heads=2, steps=40, snapshot_every=10)


def _vf(t, y, args):
    return -y


PYTHON_CASES = [
    # --- tasks
    *pycases(
        "tasks.make",
        "tasks.make",
        dict(),
        [
            ("unknown", dict(name="nosuch"), "name"),
            ("name-none", dict(name=None), "name"),
            ("unknown-param", dict(name="add", bogus=3), "bogus"),
            ("N-0", dict(name="add", N=0), "N"),
            ("N-1", dict(name="add", N=1), "N"),
            ("N-float", dict(name="add", N=1.5), "N"),
            ("N-nan", dict(name="add", N=math.nan), "N"),
            ("N-bool", dict(name="add", N=True), "N"),
            ("N-str", dict(name="add", N="abc"), "N"),
            ("N-huge", dict(name="mul", N=10**6), "N"),
            ("vocab-size-small", dict(name="add", vocab_size=3), "vocab_size"),
            ("vocab-size-negative", dict(name="add", vocab_size=-1), "vocab_size"),
            ("mod-convention", dict(name="mod", convention="x"), "convention"),
            ("modsum-too-big", dict(name="modsum", N=100, L=5), "N"),
            ("modulus-M-0", dict(name="modulus", M=0), "M"),
            ("label-law-law", dict(name="label_law", law="x"), "law"),
            ("label-law-anchor", dict(name="label_law", anchor=10), "anchor"),
            ("anchor-parity-overlap", dict(name="anchor_parity", noise_low=15), "noise_low"),
            ("rb-anchor-q-0", dict(name="rb_anchor", q=0), "q"),
            ("rb-anchor-heldout-str", dict(name="rb_anchor", heldout="ab"), "heldout"),
            ("task4-n-x", dict(name="task4", n_x=1), "n_x"),
        ],
    ),
    pycase("tasks.describe-unknown", "tasks.describe", dict(name="nosuch"), "name"),
    pycase("tasks.random_dataset-n-0", "tasks.random_dataset", dict(n=0, L=2, vocab_size=3), "n"),
    pycase(
        "tasks.random_dataset-seed-negative",
        "tasks.random_dataset",
        dict(n=2, L=2, vocab_size=3, seed=-1),
        "seed",
    ),
    pycase(
        "tasks.label_law_distribution-law", "tasks.label_law_distribution", dict(law="x"), "law"
    ),
    pycase(
        "tasks.label_law_distribution-sigma-0",
        "tasks.label_law_distribution",
        dict(law="normal", sigma=0.0),
        "sigma",
    ),
    # --- dataset
    *pycases(
        "TokenDataset",
        "dataset.TokenDataset",
        dict(),
        [
            (
                "labels-shape",
                dict(tokens=np.zeros((3, 2), int), labels=np.zeros(2, int), vocab_size=2),
                "labels",
            ),
            (
                "vocab-size-0",
                dict(tokens=np.zeros((3, 2), int), labels=np.zeros(3, int), vocab_size=0),
                "vocab_size",
            ),
            (
                "tokens-out-of-vocab",
                dict(tokens=np.full((3, 2), 5), labels=np.zeros(3, int), vocab_size=3),
                "tokens",
            ),
            (
                "weights-negative",
                dict(
                    tokens=np.zeros((2, 2), int),
                    labels=np.zeros(2, int),
                    vocab_size=1,
                    weights=[1.0, -1.0],
                ),
                "weights",
            ),
            (
                "tokens-float",
                dict(tokens=np.zeros((2, 2)) + 0.5, labels=np.zeros(2, int), vocab_size=1),
                "tokens",
            ),
        ],
    ),
    # --- signatures
    *pycases(
        "signature_set",
        "signatures.signature_set",
        dict(),
        [
            ("order-above-L-1", dict(ds=DS, max_order=2), "max_order"),
            ("order-negative", dict(ds=DS, max_order=-1), "max_order"),
            ("order-float", dict(ds=DS, max_order=1.0), "max_order"),
            ("alphas-out-of-vocab", dict(ds=DS, max_order=0, alphas=[999]), "alphas"),
            ("labels-empty", dict(ds=DS, max_order=0, labels=[]), "labels"),
            ("context-repeated", dict(ds=DS, max_order=1, context=[1, 1]), "context"),
            ("ds-not-dataset", dict(ds="add", max_order=0), "ds"),
        ],
    ),
    pycase("label_signature-order-5", "signatures.label_signature", dict(ds=DS, order=5), "order"),
    pycase(
        "cooccurrence_signature-order-negative",
        "signatures.cooccurrence_signature",
        dict(ds=DS, order=-1),
        "order",
    ),
    pycase(
        "next_token_signature-ids-beyond-vocab",
        "signatures.next_token_signature",
        dict(windows=np.array([[0, 5]]), vocab_size=3),
        "windows",
    ),
    pycase("fourier_basis-p-0", "signatures.fourier_basis", dict(p=0, ks=[1]), "p"),
    pycase("fourier_basis-ks-float", "signatures.fourier_basis", dict(p=4, ks=[0.5]), "ks"),
    pycase(
        "attention_factor-shape",
        "signatures.attention_factor",
        dict(ds=DS, attention=np.zeros((3, 3))),
        "attention",
    ),
    # --- geometry
    pycase(
        "geometry.group_tokens-unknown", "geometry.group_tokens", dict(ds=DS, group="x"), "group"
    ),
    # --- train
    *pycases(
        "TrainConfig",
        "train.TrainConfig",
        dict(),
        [
            ("optimizer", dict(optimizer="lbfgs"), "optimizer"),
            ("schedule", dict(schedule="cyclic"), "schedule"),
            ("steps-0", dict(steps=0), "steps"),
            ("steps-float", dict(steps=1.5), "steps"),
            ("steps-bool", dict(steps=True), "steps"),
            ("steps-2pow31", dict(steps=2**31), "steps"),
            ("lr-0", dict(lr=0.0), "lr"),
            ("lr-negative", dict(lr=-1.0), "lr"),
            ("lr-nan", dict(lr=math.nan), "lr"),
            ("lr-str", dict(lr="fast"), "lr"),
            ("batch-size-0", dict(batch_size=0), "batch_size"),
            ("sgd-without-batch", dict(optimizer="sgd"), "batch_size"),
            ("snapshots-negative", dict(snapshots=(-1, 5)), "snapshots"),
            ("snapshots-beyond-steps", dict(steps=100, snapshots=(0, 500)), "snapshots"),
            ("snapshots-empty", dict(snapshots=()), "snapshots"),
            ("snapshots-word", dict(snapshots=("end",)), "snapshots"),
            ("snapshots-fraction", dict(snapshots=(0, 2.5)), "snapshots"),
            ("weight-decay-negative", dict(weight_decay=-1.0), "weight_decay"),
            ("weight-decay-str", dict(weight_decay="none"), "weight_decay"),
            ("min-lr-ratio-nan", dict(min_lr_ratio=math.nan), "min_lr_ratio"),
            ("warmup-steps-negative", dict(warmup_steps=-1), "warmup_steps"),
        ],
    ),
    pycase(
        "train.init_state-vocab-size-small",
        "train.init_state",
        dict(model="ffn", ds=DS, gamma=1.0, seed=0, d=4, vocab_size=3),
        "vocab_size",
    ),
    pycase(
        "train.init_state-unknown-model",
        "train.init_state",
        dict(model="mlp", ds=DS, gamma=1.0, seed=0, d=4),
        "model",
    ),
    # --- sweep
    *pycases(
        "sweep.grid",
        "sweep.grid",
        dict(),
        [
            ("gammas-empty", dict(gammas=[], seeds=[0], lrs=[0.1]), "gamma"),
            ("gammas-nan", dict(gammas=[math.nan], seeds=[0], lrs=[0.1]), "gamma"),
            ("gammas-str", dict(gammas="big", seeds=[0], lrs=[0.1]), "gamma"),
            ("seeds-negative", dict(gammas=[1.0], seeds=[-1], lrs=[0.1]), "seeds"),
            ("seeds-float", dict(gammas=[1.0], seeds=[0.5], lrs=[0.1]), "seeds"),
            ("seeds-2pow32", dict(gammas=[1.0], seeds=[2**32], lrs=[0.1]), "seeds"),
            ("lrs-0", dict(gammas=[1.0], seeds=[0], lrs=[0.0]), "lr"),
            ("lrs-inf", dict(gammas=[1.0], seeds=[0], lrs=[math.inf]), "lr"),
        ],
    ),
    *pycases(
        "sweep.train_sweep",
        "sweep.train_sweep",
        dict(ds=DS, config=Lazy(lambda: _train_config()), gammas=[1.0]),
        [
            ("chunk-0", dict(model="ffn", chunk=0), "chunk"),
            ("chunk-float", dict(model="ffn", chunk=2.5), "chunk"),
            ("unknown-model", dict(model="mlp"), "model"),
            (
                "lanes-per-batch-0",
                dict(model="ffn", layout=Lazy(lambda: _layout(lanes_per_batch=0))),
                "lanes_per_batch",
            ),
        ],
    ),
    # --- ode
    *pycases(
        "ode.integrate",
        "ode.integrate",
        dict(vector_field=_vf, y0=1.0, ts=[0.0, 1.0]),
        [
            ("solver", dict(solver="euler"), "solver"),
            ("ts-length-1", dict(ts=[0.0]), "ts"),
            ("ts-decreasing", dict(ts=[1.0, 0.0]), "ts"),
            ("ts-2d", dict(ts=[[0.0, 1.0]]), "ts"),
            ("ts-nan", dict(ts=[0.0, math.nan]), "ts"),
            ("rtol-0", dict(rtol=0.0), "rtol"),
            ("rtol-negative", dict(rtol=-1e-6), "rtol"),
            ("atol-nan", dict(atol=math.nan), "atol"),
            ("max-steps-0", dict(max_steps=0), "max_steps"),
            ("max-steps-float", dict(max_steps=10.5), "max_steps"),
            ("dt0-0", dict(dt0=0.0), "dt0"),
        ],
    ),
    *pycases(
        "ode.rk4",
        "ode.rk4",
        dict(vector_field=_vf, y0=1.0, ts=[0.0, 1.0]),
        [
            ("ts-length-1", dict(ts=[0.0]), "ts"),
            ("ts-decreasing", dict(ts=[2.0, 1.0]), "ts"),
            ("substeps-0", dict(substeps=0), "substeps"),
        ],
    ),
    pycase("ode.result_message-code", "ode.result_message", dict(code=99), "code"),
    # --- closed_form
    *pycases(
        "linear_solution",
        "closed_form.linear_solution",
        dict(M=np.eye(3), W_E0=np.ones((3, 2)), W_U0=np.ones((3, 2)), rate=1.0),
        [
            ("M-not-square", dict(M=np.ones((3, 4)), W_E0=np.ones((4, 2))), "M"),
            ("W_E0-shape", dict(W_E0=np.ones((4, 2))), "W_E0"),
            ("W_U0-width", dict(W_U0=np.ones((3, 5))), "W_U0"),
            ("rate-nan", dict(rate=math.nan), "rate"),
        ],
    ),
    *pycases(
        "feedback_solution",
        "closed_form.feedback_solution",
        dict(
            M=np.eye(3),
            Gamma=np.eye(3),
            W_E0=np.ones((3, 2)),
            W_U0=np.ones((3, 2)),
            rate=1.0,
            vocab_size=3,
        ),
        [
            ("vocab-size-0", dict(vocab_size=0), "vocab_size"),
            ("Gamma-shape", dict(Gamma=np.eye(2)), "Gamma"),
        ],
    ),
    pycase(
        "expected_gram-d-0",
        "closed_form.expected_gram",
        dict(M=np.eye(3), t=1.0, d=0, sigma_E=1.0, sigma_U=1.0, rate=1.0),
        "d",
    ),
    pycase(
        "mode_covariance-sigma-nan",
        "closed_form.mode_covariance",
        dict(M=np.eye(3), t=1.0, sigma_E=math.nan, sigma_U=1.0, rate=1.0),
        "sigma_E",
    ),
    pycase(
        "crossing_time-shapes",
        "closed_form.crossing_time",
        dict(ts=[0.0, 1.0, 2.0], values=[1.0, 2.0], threshold=1.5),
        "values",
    ),
    pycase(
        "crossing_time-threshold-0",
        "closed_form.crossing_time",
        dict(ts=[0.0, 1.0], values=[1.0, 2.0], threshold=0.0),
        "threshold",
    ),
    *pycases(
        "escape_time_estimate",
        "closed_form.escape_time_estimate",
        dict(top_singular=1.0, gamma=1.0, d=16, rate=1.0),
        [
            ("d-0", dict(d=0), "d"),
            ("rate-0", dict(rate=0.0), "rate"),
            ("top-singular-0", dict(top_singular=0.0), "top_singular"),
        ],
    ),
    *pycases(
        "attention_plateau_time",
        "closed_form.attention_plateau_time",
        dict(top_singular=1.0, u0=0.1),
        [
            ("depth-2", dict(depth=2), "depth"),
            ("depth-float", dict(depth=3.5), "depth"),
            ("u0-negative", dict(u0=-0.1), "u0"),
            ("top-singular-0", dict(top_singular=0.0), "top_singular"),
        ],
    ),
    # --- flows
    pycase(
        "ffn_signature_field-prediction",
        "flows.ffn_signature_field",
        dict(W_E=W, W_U=W, sigs=FLOW_SIGS, coefficients=(1.0,), L=2, prediction="cubic"),
        "prediction",
    ),
    pycase(
        "ffn_signature_field-linear-needs-order-L-1",
        "flows.ffn_signature_field",
        dict(W_E=W, W_U=W, sigs=FLOW_SIGS, coefficients=(1.0,), L=3, prediction="linear"),
        "prediction",
    ),
    *pycases(
        "ffn_signature_flow",
        "flows.ffn_signature_flow",
        dict(sigs=SIGS),
        [
            ("prediction", dict(coefficients=(1.0,), prediction="cubic"), "prediction"),
            ("coefficients-empty", dict(coefficients=()), "coefficients"),
            ("coefficients-nan", dict(coefficients=(1.0, math.nan)), "coefficients"),
        ],
    ),
    pycase(
        "order_contributions-L-missing",
        "flows.order_contributions",
        dict(W_E=W, W_U=W, sigs=FLOW_SIGS, coeffs=(1.0,)),
        "L",
    ),
    pycase(
        "drive_matrix-vocab-size-small",
        "flows.drive_matrix",
        dict(sigs=SIGS, vocab_size=2),
        "vocab_size",
    ),
    pycase(
        "flow_signatures-not-a-signature-set", "flows.flow_signatures", dict(sigs="add"), "sigs"
    ),
    # --- attention dynamics
    pycase(
        "attention_tables-prediction",
        "attention_dynamics.attention_tables",
        dict(ds=DS, prediction="cubic"),
        "prediction",
    ),
    pycase(
        "attention_flow-prediction",
        "attention_dynamics.attention_flow",
        dict(tables=None, prediction="cubic"),
        "prediction",
    ),
    # --- comparison
    *pycases(
        "check_theory_inputs",
        "comparison.check_theory_inputs",
        dict(ds=DS, **THEORY_OK),
        [
            ("model", dict(model="transformer"), "model"),
            ("ffn-gamma-below", dict(gammas=[0.4]), "gamma"),
            ("attention-gamma-below", dict(model="attention", gammas=[0.5]), "gamma"),
            ("gamma-empty", dict(gammas=[]), "gamma"),
            ("max-orders-above", dict(max_orders=[2]), "max_orders"),
            ("max-orders-empty", dict(max_orders=[]), "max_orders"),
            ("max-orders-word", dict(max_orders=["one"]), "max_orders"),
            ("d-0", dict(d=0), "d"),
            ("steps-0", dict(steps=0), "steps"),
            ("snapshot-every-0", dict(snapshot_every=0), "snapshot_every"),
            ("lr-0", dict(lr=0.0), "lr"),
            ("threshold-nan", dict(threshold=math.nan), "threshold"),
            ("prediction", dict(prediction="cubic"), "prediction"),
            ("activation", dict(activation="swish"), "activation"),
        ],
    ),
    # --- lm
    *pycases(
        "LMConfig",
        "lm.LMConfig",
        dict(),
        [
            ("d-0", dict(d=0), "d"),
            ("heads-not-dividing", dict(d=30, n_heads=4), "n_heads"),
            ("context-0", dict(context_length=0), "context_length"),
            ("steps-0", dict(steps=0), "steps"),
            ("steps-2pow31", dict(steps=2**31, snapshot_every=50), "steps"),
            ("batch-size-bool", dict(batch_size=True), "batch_size"),
            ("lr-0", dict(lr=0.0), "lr"),
            ("lr-nan", dict(lr=math.nan), "lr"),
            ("snapshot-every-0", dict(snapshot_every=0), "snapshot_every"),
            ("snapshot-every-above-steps", dict(steps=10, snapshot_every=20), "snapshot_every"),
            ("tracked-3", dict(tracked=3), "tracked"),
            ("probe-vocabulary-1", dict(probe_vocabulary=1), "probe_vocabulary"),
            ("warmup-fraction-1", dict(warmup_fraction=1.0), "warmup_fraction"),
            ("min-lr-ratio-2", dict(min_lr_ratio=2.0), "min_lr_ratio"),
            ("weight-decay-negative", dict(weight_decay=-0.1), "weight_decay"),
        ],
    ),
    # --- text
    pycase(
        "load_text-missing",
        "text.load_text",
        dict(path=Lazy(lambda: _text("missing.txt"))),
        "path",
        exc=FileNotFoundError,
    ),
    *pycases(
        "load_text",
        "text.load_text",
        dict(),
        [
            ("directory", dict(path=Lazy(lambda: _text("dir/"))), "path"),
            ("empty", dict(path=Lazy(lambda: _text("empty.txt", b""))), "path"),
            ("whitespace", dict(path=Lazy(lambda: _text("blank.txt", b" \n\t\n"))), "path"),
            (
                "not-utf8",
                dict(path=Lazy(lambda: _text("latin1.txt", "café".encode("latin-1")))),
                "path",
            ),
            ("nul-byte", dict(path=Lazy(lambda: _text("nul.txt", b"ab\x00cd"))), "path"),
            ("none", dict(path=None), "path"),
        ],
    ),
    *pycases(
        "prepare_corpus",
        "text.prepare_corpus",
        dict(),
        [
            ("vocab-size-0", dict(text="a b c d e f g h i j", vocab_size=0), "vocab_size"),
            ("vocab-size-float", dict(text="a b c d e f g h i j", vocab_size=2.5), "vocab_size"),
            ("vocab-size-too-many", dict(text="a b c d e f g h i j", vocab_size=100), "vocab_size"),
            (
                "validation-fraction-1",
                dict(text="a b c d e f g h i j", validation_fraction=1.0),
                "validation_fraction",
            ),
            ("text-bytes", dict(text=b"a b c"), "text"),
            ("text-blank", dict(text="  \n"), "text"),
        ],
    ),
    *pycases(
        "windows",
        "text.windows",
        dict(),
        [
            ("context-0", dict(stream=np.arange(10), context_length=0), "context_length"),
            ("stream-2d", dict(stream=np.zeros((2, 5), int), context_length=2), "stream"),
            ("stream-too-short", dict(stream=np.arange(3), context_length=8), "context_length"),
        ],
    ),
    pycase(
        "batches-batch-size-0",
        "text.batches",
        dict(stream=np.arange(10), context_length=2, batch_size=0),
        "batch_size",
    ),
    pycase(
        "build_vocabulary-size-0", "text.build_vocabulary", dict(words=["a", "b"], size=0), "size"
    ),
    pycase(
        "builtin_corpus-n-sentences-0", "text.builtin_corpus", dict(n_sentences=0), "n_sentences"
    ),
    pycase("tokenize-not-str", "text.tokenize", dict(text=5), "text"),
    # --- activations
    *pycases(
        "activations.get",
        "activations.get",
        dict(),
        [
            ("unknown", dict(spec="swish"), "activation"),
            ("empty-poly", dict(spec="poly:"), "activation"),
            ("poly-word", dict(spec="poly:1,a"), "activation"),
            ("poly-inf", dict(spec="poly:1,inf"), "activation"),
            ("z0", dict(spec="z^0"), "activation"),
            ("huge-monomial", dict(spec="z^1000000000"), "activation"),
            ("int", dict(spec=5), "activation"),
            ("poly-tuple-str", dict(spec=("poly", "abc")), "activation"),
        ],
    ),
    # --- models
    *pycases(
        "models.create",
        "models.create",
        dict(vocab_size=4),
        [
            ("unknown", dict(name="mlp"), "model"),
            (
                "seq-len-missing",
                dict(name="attention", d=4, gamma=1.0, rngs=Lazy(lambda: _rngs())),
                "seq_len",
            ),
            ("d-0", dict(name="ffn", d=0, gamma=1.0, rngs=Lazy(lambda: _rngs())), "d"),
            (
                "gamma-nan",
                dict(name="ffn", d=4, gamma=math.nan, rngs=Lazy(lambda: _rngs())),
                "gamma",
            ),
            (
                "dtype-int",
                dict(name="ffn", d=4, gamma=1.0, dtype="int32", rngs=Lazy(lambda: _rngs())),
                "dtype",
            ),
            (
                "activation",
                dict(name="ffn", d=4, gamma=1.0, activation="swish", rngs=Lazy(lambda: _rngs())),
                "activation",
            ),
        ],
    ),
    # --- metrics
    pycase("cosine_matrix-1d", "metrics.cosine_matrix", dict(X=np.ones(4)), "X"),
    pycase("upper_triangle-not-square", "metrics.upper_triangle", dict(S=np.ones((3, 4))), "S"),
    *pycases(
        "alignment",
        "metrics.alignment",
        dict(),
        [
            ("shapes", dict(S_a=np.eye(3), S_b=np.eye(4)), "S_b"),
            ("method", dict(S_a=np.eye(3), S_b=np.eye(3), method="kendall"), "method"),
            ("nan", dict(S_a=np.full((3, 3), np.nan), S_b=np.eye(3)), "S_a"),
        ],
    ),
    pycase("pearson-shapes", "metrics.pearson", dict(a=np.ones(3), b=np.ones(4)), "b"),
    pycase("spearman-shapes", "metrics.spearman", dict(a=np.ones(3), b=np.ones(4)), "b"),
    pycase("one_minus_mse-shapes", "metrics.one_minus_mse", dict(a=np.ones(3), b=np.ones(4)), "b"),
    pycase("pca-k-0", "metrics.pca", dict(X=np.ones((4, 3)), k=0), "k"),
    pycase("pca-1d", "metrics.pca", dict(X=np.ones(4)), "X"),
    pycase(
        "distribution_match-shapes",
        "metrics.distribution_match",
        dict(p=np.ones(3) / 3, q=np.ones(4) / 4),
        "q",
    ),
    pycase(
        "frequency_alignment-phi1-ndim",
        "metrics.frequency_alignment",
        dict(phi1=np.ones((3, 4)), S_emb=np.eye(3), ks=[1]),
        "phi1",
    ),
    pycase(
        "probe_fit-folds-1",
        "metrics.probe_fit",
        dict(phi=np.ones((4, 3, 5)), S_emb=np.eye(4), folds=1),
        "folds",
    ),
    pycase(
        "procrustes_similarity-shapes",
        "metrics.procrustes_similarity",
        dict(a=np.ones((3, 2)), b=np.ones((4, 2))),
        "b",
    ),
    # --- semantics
    pycase(
        "semantics.number_order-too-few",
        "semantics.number_order",
        dict(vectors=np.ones((2, 3))),
        "vectors",
    ),
    pycase(
        "semantics.category_purity-one-group",
        "semantics.category_purity",
        dict(groups={"a": np.ones((3, 2))}),
        "groups",
    ),
    # --- geometry
    pycase(
        "geometry.alignment_curves-W_E-ndim",
        "geometry.alignment_curves",
        dict(W_E=np.ones((3, 4)), steps=np.arange(3), ds=DS),
        "W_E",
    ),
    pycase(
        "geometry.alignment_curves-probe-snapshots-negative",
        "geometry.alignment_curves",
        dict(
            W_E=Lazy(lambda: _weights()[None, None]), steps=np.arange(1), ds=DS, probe_snapshots=-1
        ),
        "probe_snapshots",
    ),
    # --- paths and units
    *pycases(
        "check_output_dir",
        "paths.check_output_dir",
        dict(),
        [
            ("existing-file", dict(path=Lazy(lambda: _text("afile", b"x"))), "--out"),
            ("under-file", dict(path=Lazy(lambda: _text("afile", b"x") / "sub")), "--out"),
            ("uncreatable", dict(path=UNCREATABLE), "--out"),
            ("empty", dict(path=""), "--out"),
            ("none", dict(path=None), "--out"),
            (
                "parameter-name",
                dict(path=Lazy(lambda: _text("afile", b"x")), parameter="root"),
                "root",
            ),
        ],
    ),
    pycase(
        "UnitStore-finished-other-spec",
        "units.UnitStore.open",
        dict(self=Lazy(lambda: _finished_store_with_other_spec())),
        "--out",
    ),
    # --- budget
    *pycases(
        "budget.parse_size",
        "budget.parse_size",
        dict(),
        [
            ("abc", dict(text="abc"), "--max-memory"),
            ("negative", dict(text="-5GB"), "--max-memory"),
            ("zero", dict(text="0"), "--max-memory"),
            ("nan", dict(text="nan"), "--max-memory"),
            ("bool", dict(text=True), "--max-memory"),
        ],
        exc=ValueError,
    ),
]

_CASE_ROOT: list[Path] = []


def _text(name: str, data: bytes | None = None) -> Path:
    """A file (or, for a name ending in ``/``, a folder) in the case's temporary folder."""
    path = _CASE_ROOT[-1] / name.rstrip("/")
    if name.endswith("/"):
        path.mkdir(exist_ok=True)
    elif data is not None:
        path.write_bytes(data)
    return path


def _rngs():
    from flax import nnx

    return nnx.Rngs(0)


def _layout(**fields):
    from ctx_staircase import sweep

    return sweep.Layout(**fields)


def _train_config():
    from ctx_staircase import train

    return train.TrainConfig(steps=5)


def _finished_store_with_other_spec():
    from ctx_staircase import units

    root = _CASE_ROOT[-1] / "store"
    first = units.UnitStore(root, {"kind": "first"}, parameter="--out")
    first.open()
    first.save("unit_0", x=np.zeros(2))
    first.finish(status="ok")
    return units.UnitStore(root, {"kind": "second"}, parameter="--out")


def _resolve(dotted: str):
    import importlib

    module, _, attribute = dotted.partition(".")
    target = importlib.import_module(f"ctx_staircase.{module}")
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("fn_path,kwargs,exc,needle", PYTHON_CASES)
def test_python_bad_input(fn_path, kwargs, exc, needle, tmp_path):
    _CASE_ROOT.append(tmp_path)
    try:
        fn = _resolve(fn_path)
        resolved = {k: v() if isinstance(v, Lazy) else v for k, v in kwargs.items()}
        with pytest.raises(exc) as info:
            fn(**resolved)
    finally:
        _CASE_ROOT.pop()
    assert names(str(info.value), needle), f"{needle!r} not named in the message: {info.value!s}"


# --------------------------------------------------------------------------------------------
# the suite itself


def test_the_suite_is_large_enough():
    assert len(CLI_CASES) + len(SUBPROCESS_CASES) + len(PYTHON_CASES) >= 120
    commands = {c.values[0][0] for c in CLI_CASES if c.values[0]}
    assert {"run", "list", "signatures", "train", "theory", "lm"} <= commands
    ids = [c.id for c in (*CLI_CASES, *SUBPROCESS_CASES, *PYTHON_CASES)]
    assert len(ids) == len(set(ids)), "case ids must be unique"
