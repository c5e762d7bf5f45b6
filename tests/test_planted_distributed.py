"""The collectives of `distributed` across two real processes (on 127.0.0.1), where one process
is not the identity: uneven lane blocks, an empty leaf, and what only the writer's value
decides."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

#: One process: joins the cluster, gathers 3 lanes (process 0 holds lanes 0-1, process 1 lane 2
#: and a padding lane), broadcasts the writer's bytes and flag, and writes what it got.
WORKER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ctx_staircase import distributed

    port, index, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    distributed.initialize(distributed.Cluster(f"127.0.0.1:{port}", 2, index))
    block = list(distributed.block(3))
    local = np.asarray(block + [block[-1]] * (2 - len(block)), np.float64)  # padded to 2
    gathered = distributed.gather_lanes(
        {"lane": 10.0 * local, "empty": np.zeros((2, 0, 3))}, 3
    )
    writer = distributed.is_writer()
    result = {
        "index": distributed.process_index(),
        "count": distributed.process_count(),
        "block": block,
        "lane": gathered["lane"].tolist(),
        "empty": list(gathered["empty"].shape),
        "bytes": distributed.broadcast_bytes(b"abc" if writer else None).decode(),
        "none": distributed.broadcast_bytes(None if writer else b"abc") is None,
        "blank": distributed.broadcast_bytes(b"" if writer else None),
        "flag_true": distributed.broadcast_flag(writer),
        "flag_false": distributed.broadcast_flag(not writer),
    }
    result["blank"] = None if result["blank"] is None else result["blank"].decode()
    with open(out, "w") as f:
        json.dump(result, f)
    distributed.shutdown()
    """
)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_processes_gather_uneven_blocks_and_take_the_writers_broadcasts(tmp_path):
    """Two processes, 3 lanes: both get lanes 0, 1, 2 (the padding dropped) and the empty leaf
    as [3, 0, 3]; both get the writer's bytes (also None and b"") and the writer's flag."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i), str(tmp_path / f"out{i}.json")],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for i, proc in enumerate(procs):
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"process {i}: {stderr[-3000:]}"
    results = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert [r["block"] for r in results] == [[0, 1], [2]]
    for i, got in enumerate(results):
        assert got["index"] == i and got["count"] == 2
        assert got["lane"] == [0.0, 10.0, 20.0]
        assert got["empty"] == [3, 0, 3]
        assert got["bytes"] == "abc" and got["none"] is True and got["blank"] == ""
        assert got["flag_true"] is True and got["flag_false"] is False
