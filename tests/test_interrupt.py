"""Interruption and resume: Ctrl-C and kill -9 at random points, then the same command again.

Each test runs a real ``python -m ctx_staircase`` process, interrupts it at a random moment
(SIGINT: one line, exit 130; SIGKILL: no chance to clean up), reruns the same command to the end
and compares the result files bitwise with an uninterrupted run. The random moments come from a
seeded generator, printed on failure, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ctx_staircase import cli, interrupt, units

TRAIN = [
    "train", "add", "--param", "N=6", "--steps", "300", "--d", "16", "--gamma", "0.8", "1.0",
    "--seeds", "0", "1", "--optimizer", "adam", "--lr", "0.01", "--probe-snapshots", "0",
]  # fmt: skip
LM = ["lm", "--tiny", "--gamma", "1.0", "0.75", "0.5", "--steps", "60"]


def _command(argv: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "ctx_staircase", *argv, "--out", str(out)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the CLI's own default layout, as a user gets it
    return env


def _run(argv: list[str], out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        _command(argv, out), capture_output=True, text=True, timeout=300, env=_env()
    )


def _interrupt(argv: list[str], out: Path, sig: int, delay: float) -> subprocess.CompletedProcess:
    process = subprocess.Popen(
        _command(argv, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    time.sleep(delay)
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _reference_and_stopped(
    argv: list[str], tmp_path: Path, name: str, sig: int, low: float, high: float
) -> tuple[Path, Path, subprocess.CompletedProcess, str]:
    """An uninterrupted run of ``argv`` under ``tmp_path/reference``, and one under
    ``tmp_path/name`` stopped by ``sig`` after a delay drawn (seeded by ``name``) from
    ``[low, high]`` s; the last element says when, for failure messages."""
    reference = tmp_path / "reference"
    done = _run(argv, reference)
    assert done.returncode == 0, done.stderr
    out = tmp_path / name
    delay = random.Random(name).uniform(low, high)
    return reference, out, _interrupt(argv, out, sig, delay), f"{sig!r} after {delay:.2f} s"


def _resume(argv: list[str], out: Path) -> None:
    """Rerun ``argv`` into the interrupted ``out``; it must finish."""
    resumed = _run(argv, out)
    assert resumed.returncode == 0, resumed.stderr


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _assert_bitwise(a: Path, b: Path) -> None:
    left, right = _arrays(a), _arrays(b)
    assert left.keys() == right.keys()
    for key in left:
        assert left[key].dtype == right[key].dtype, key
        floating = np.issubdtype(left[key].dtype, np.inexact)
        assert np.array_equal(left[key], right[key], equal_nan=floating), key


@pytest.fixture(scope="module")
def reference_train(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "train"
    done = _run(TRAIN, out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # three real CLI processes, over 20 s
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"]
)
def test_train_resumes_bitwise_after_interruption(tmp_path, reference_train, sig):
    rng = random.Random(f"train-{int(sig)}")
    out = tmp_path / "train"
    for attempt in range(2):
        delay = rng.uniform(2.0, 9.0)
        stopped = _interrupt(TRAIN, out, sig, delay)
        context = f"attempt {attempt}, {sig!r} after {delay:.2f} s"
        if stopped.returncode == 0:
            break  # finished before the signal: resuming then is a no-op
        if sig in (signal.SIGINT, signal.SIGTERM):
            assert stopped.returncode == 128 + int(sig), (context, stopped.stderr)
            lines = stopped.stderr.strip().splitlines()
            assert lines[-1].endswith(interrupt.MESSAGE), (context, stopped.stderr)
            assert "Traceback" not in stopped.stderr, context
        else:
            assert stopped.returncode == -signal.SIGKILL, context
        assert not (out / "metrics.json").exists(), context  # the summary is written last
    _resume(TRAIN, out)
    for name in ("sweep/arrays.npz", "alignment.npz"):
        _assert_bitwise(reference_train / name, out / name)


@pytest.mark.slow  # a real CLI process, over 20 s
def test_lm_resumes_bitwise_after_kill(tmp_path):
    reference, out, stopped, context = _reference_and_stopped(
        LM, tmp_path, "lm", signal.SIGKILL, 4.0, 12.0
    )
    if stopped.returncode != 0:
        assert not (out / "metrics.json").exists(), context
    _resume(LM, out)
    _assert_bitwise(reference / "arrays.npz", out / "arrays.npz")


def test_interrupt_in_process_is_one_line_exit_130(monkeypatch, capsys, tmp_path):
    """A Ctrl-C while the library trains (here: as the sweep starts) is one line, exit 130."""
    from ctx_staircase import sweep

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "train_sweep", interrupted)
    out = tmp_path / "out"
    assert cli.main([*TRAIN, "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == f"ctx-staircase train: {interrupt.MESSAGE}"


def _store(root: Path, spec: dict) -> units.UnitStore:
    return units.UnitStore(root, spec)


def test_unit_store_detects_a_truncated_unit_and_recomputes(tmp_path, capsys):
    store = _store(tmp_path, {"work": 1})
    store.save("lane_000", x=np.arange(1000.0))
    store.save("lane_001", x=np.arange(3.0))
    path = store.path("lane_000")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a kill in the middle of a non-atomic copy
    store.path("lane_001").write_bytes(b"not a zip at all")
    again = _store(tmp_path, {"work": 1})
    assert again.load("lane_000", ["x"]) is None
    assert again.load("lane_001", ["x"]) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("corrupt or partial unit file" in line for line in err)
    assert not path.exists()
    again.save("lane_000", x=np.arange(1000.0))
    assert np.array_equal(again.load("lane_000", ["x"])["x"], np.arange(1000.0))


def test_unit_store_missing_arrays_is_corrupt(tmp_path):
    store = _store(tmp_path, {"work": 1})
    store.save("lane_000", x=np.zeros(3))
    assert store.load("lane_000", ["x", "y"]) is None


def test_crashed_run_never_blocks_its_folder(tmp_path, capsys):
    crashed = _store(tmp_path, {"settings": "old"})
    crashed.save("lane_000", x=np.zeros(2))  # then the process died: no finish()
    new = _store(tmp_path, {"settings": "new"}).open()
    assert "discarding an unfinished run" in capsys.readouterr().err
    assert new.load("lane_000") is None
    assert json.loads((tmp_path / units.SPEC_FILE).read_text())["settings"] == "new"


def test_finished_run_of_other_settings_is_refused_not_overwritten(tmp_path):
    finished = _store(tmp_path, {"settings": "old"})
    finished.save("lane_000", x=np.ones(2))
    finished.finish()
    with pytest.raises(
        ValueError, match=r'finished run of other settings \(settings: "old" -> "new"\)'
    ):
        _store(tmp_path, {"settings": "new"}).open()
    assert np.array_equal(_store(tmp_path, {"settings": "old"}).load("lane_000")["x"], np.ones(2))


def test_unit_files_are_zip_archives(tmp_path):
    store = _store(tmp_path, {"work": 1})
    store.save("lane_000", x=np.zeros(2))
    assert zipfile.is_zipfile(store.path("lane_000"))


def _record_numbers(path: Path) -> dict:
    from ctx_staircase import results

    record = results.read_json(path)
    return {key: record[key] for key in ("claims", "numbers", "config")}


@pytest.mark.slow
def test_flagship_run_resumes_after_kill_with_the_same_numbers(tmp_path):
    """`run --tiny` killed at a random moment, then rerun: every claim and number as in an
    uninterrupted run (the figures aside, whose bytes carry no numbers of their own)."""
    argv = ["run", "--tiny"]
    reference, out, stopped, context = _reference_and_stopped(
        argv, tmp_path, "run", signal.SIGKILL, 5.0, 20.0
    )
    if stopped.returncode != 0:
        assert not (out / "results" / "staircase.json").exists(), context
    _resume(argv, out)
    assert not (out / "units").exists() or not any((out / "units").iterdir())
    name = "results/staircase.json"
    assert _record_numbers(out / name) == _record_numbers(reference / name)


@pytest.mark.slow
def test_theory_resumes_bitwise_after_sigint(tmp_path):
    argv = ["theory", "add", "--param", "N=6", "--d", "16", "--gamma", "0.8", "1.0", "1.2"]
    reference, out, stopped, context = _reference_and_stopped(
        argv, tmp_path, "theory", signal.SIGINT, 4.0, 12.0
    )
    if stopped.returncode != 0:
        assert stopped.returncode == 130, context
        assert stopped.stderr.strip().endswith(interrupt.MESSAGE), context
    _resume(argv, out)
    _assert_bitwise(reference / "training" / "arrays.npz", out / "training" / "arrays.npz")
    left, right = (
        {k: v for k, v in json.loads((root / "metrics.json").read_text()).items()
         if k not in ("seconds", "cost", "environment")}
        for root in (reference, out)
    )  # fmt: skip
    assert left == right


def test_a_refused_resume_names_the_settings_that_differ(tmp_path):
    """Nested keys dotted, values as JSON, at most four named and the rest counted."""
    finished = _store(tmp_path, {"config": {"lr": 0.1, "steps": 10}, "a": 1, "b": 2, "c": 3})
    finished.finish()
    wanted = {"config": {"lr": 0.2, "steps": 10}, "a": 5, "b": 6, "c": 7, "d": 8}
    with pytest.raises(ValueError) as refused:
        _store(tmp_path, wanted).open()
    message = str(refused.value)
    assert "a: 1 -> 5; b: 2 -> 6; c: 3 -> 7; config.lr: 0.1 -> 0.2; and 1 more" in message
    assert "steps" not in message
