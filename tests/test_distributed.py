"""Sweeps over several processes (`ctx_staircase.distributed`): processes on 127.0.0.1 stand in
for hosts. The arrays must be bitwise those of one process, only process 0 may write, and a
resumed sweep must skip what process 0 saved."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ctx_staircase import distributed

GRID = dict(gammas=[0.8, 1.0, 1.2], seeds=[0, 1])

#: One process of a Python-API sweep: joins the cluster, runs `train_sweep` unchanged, and
#: process 0 saves the arrays (and the lanes it found saved) to argv[4].
WORKER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ctx_staircase import distributed, sweep, tasks, train

    port, count, index, result, out = sys.argv[1:6]
    distributed.initialize(
        distributed.Cluster(f"127.0.0.1:{port}", int(count), int(index))
    )
    seen = []
    run = sweep.train_sweep(
        "ffn", tasks.make("add", N=10), train.TrainConfig(optimizer="gd", lr=0.5, steps=40),
        gammas=[0.8, 1.0, 1.2], seeds=[0, 1], d=16, chunk=4,
        out=None if out == "-" else out, progress=lambda done, total: seen.append(done),
    )
    if distributed.is_writer():
        np.savez(result, W_E=run.trajectory.W_E, loss=run.trajectory.loss, found=seen[0],
                 processes=distributed.process_count())
    """
)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(argv_of, count: int, cwd: Path) -> list[subprocess.CompletedProcess]:
    """Run ``count`` processes (``argv_of(index)``) at once; all must exit 0."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            argv_of(index),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(count)
    ]
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    for index, outcome in enumerate(done):
        assert outcome.returncode == 0, f"process {index}: {outcome.stderr[-3000:]}"
    return done


def _api_sweep(tmp_path: Path, count: int, out: str = "-") -> dict:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    result = tmp_path / f"result_{count}.npz"
    result.unlink(missing_ok=True)
    port = _port()
    _launch(
        lambda i: [sys.executable, str(script), str(port), str(count), str(i), str(result), out],
        count,
        tmp_path,
    )
    with np.load(result) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def one_process():
    from ctx_staircase import sweep, tasks, train

    run = sweep.train_sweep(
        "ffn",
        tasks.make("add", N=10),
        train.TrainConfig(optimizer="gd", lr=0.5, steps=40),
        d=16,
        **GRID,
    )
    return run.trajectory


def test_two_processes_bitwise_equal_to_one(tmp_path, one_process):
    two = _api_sweep(tmp_path, 2)
    assert int(two["processes"]) == 2
    np.testing.assert_array_equal(two["W_E"], one_process.W_E)
    np.testing.assert_array_equal(two["loss"], one_process.loss)


@pytest.mark.slow  # four JAX processes started: about 20 s
def test_two_processes_resume_what_process_zero_saved(tmp_path, one_process):
    store = tmp_path / "sweep"
    first = _api_sweep(tmp_path, 2, str(store))
    assert int(first["found"]) == 0
    lanes = sorted((store / "units").glob("lane_*.npz"))
    assert len(lanes) == 6  # written once, by process 0
    assert not list(store.rglob("*.tmp"))
    (store / "metrics.json").unlink()
    for lane in lanes[1:3]:
        lane.unlink()
    resumed = _api_sweep(tmp_path, 2, str(store))
    assert int(resumed["found"]) == 4
    np.testing.assert_array_equal(resumed["W_E"], one_process.W_E)


def test_one_process_is_the_identity():
    assert not distributed.active()
    assert distributed.process_count() == 1 and distributed.is_writer()
    assert distributed.broadcast_bytes(b"abc") == b"abc"
    assert distributed.broadcast_bytes(None) is None


@pytest.mark.parametrize("lanes,count", [(6, 2), (7, 3), (2, 4), (1, 1)])
def test_blocks_cover_every_lane_once(lanes, count):
    blocks = [distributed.block(lanes, i, count) for i in range(count)]
    assert [lane for b in blocks for lane in b] == list(range(lanes))
    assert max(len(b) for b in blocks) == -(-lanes // count)


@pytest.mark.parametrize(
    "cluster,needle",
    [
        (distributed.Cluster("127.0.0.1", 2, 0), "--coordinator must be HOST:PORT"),
        (distributed.Cluster("127.0.0.1:70000", 2, 0), "--coordinator must be HOST:PORT"),
        (distributed.Cluster("127.0.0.1:0", 2, 0), "--coordinator must be HOST:PORT"),
        (distributed.Cluster("127.0.0.1:1234", 2, 2), "--process-id must lie in [0, 1]"),
        (distributed.Cluster("127.0.0.1:1234", None, 0), "--num-processes missing"),
        (distributed.Cluster(None, None, 1), "--process-id needs --coordinator"),
    ],
)
def test_bad_cluster_names_the_flag(cluster, needle):
    with pytest.raises(ValueError, match=None) as err:
        cluster.check()
    assert needle in str(err.value)


def _cli_train(out: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "ctx_staircase", "train", "add", "--param", "N=10", "--d", "16",
        "--optimizer", "gd", "--lr", "0.5", "--steps", "40", "--gamma", "0.8", "1.0", "1.2",
        "--seeds", "0", "1", "--probe-snapshots", "0", "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("count", [2, 4])
def test_cli_train_over_processes_bitwise_equal(tmp_path, count):
    single = tmp_path / "single"
    _launch(lambda i: _cli_train(single, []), 1, tmp_path)
    port = _port()
    several = tmp_path / f"processes_{count}"
    cluster = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(count)]
    _launch(lambda i: _cli_train(several, [*cluster, "--process-id", str(i)]), count, tmp_path)
    for arrays in ("sweep/arrays.npz", "alignment.npz"):
        with np.load(single / arrays) as one, np.load(several / arrays) as many:
            assert sorted(one.files) == sorted(many.files)
            for name in one.files:
                np.testing.assert_array_equal(many[name], one[name], err_msg=f"{arrays} {name}")
    assert not list(several.rglob("*.tmp"))
