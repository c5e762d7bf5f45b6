"""Benchmark: the memory of reading one embedding out of a large checkpoint (`checkpoints`).

A safetensors file of about ``--gigabytes`` GB holds an input embedding ``[V, d]`` float32 under
the GPT-NeoX name (``gpt_neox.embed_in.weight``, ``--embedding-mb`` MB) among ``--tensors``
other tensors that fill the rest (the layers of a model). Each measurement runs in a fresh
process, which prints its peak resident memory (``VmHWM`` of /proc/self/status: ``ru_maxrss``
would carry the parent's peak across the exec) just before and just after the call, once the
imports are done:

- ``load_embedding``: `checkpoints.load_embedding` of the file, found by name;
- ``measure``: `measure.measure_snapshots` on a random 100k-token stream with that one snapshot
  (the whole ``ctx-staircase measure`` computation, tracked rows, signatures and probe).

The figure of merit is the growth of the peak over the embedding's own size (the goal: below
1.5; reading the whole file would be about ``gigabytes / embedding`` times it). The file is
written once into ``--folder`` (default: a temporary folder) and removed at the end.

Usage: python benchmarks/measure_memory.py [--gigabytes 1.0] [--embedding-mb 200]
[--tensors 24] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, sys
import numpy as np
from ctx_staircase import checkpoints, measure
def peak():  # this process's own high-water mark (a fresh one per exec, unlike ru_maxrss)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
path, what = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
ids = rng.integers(0, 5000, size=100_000)
before = peak()
if what == "load_embedding":
    embedding = checkpoints.load_embedding(path)
    shape = embedding.W_E.shape
else:
    measured = measure.measure_snapshots(ids, [path], count=200, min_count=5, probe_steps=50)
    shape = None
after = peak()
print(json.dumps({"before": before, "after": after, "shape": shape}))
"""


def write_checkpoint(path: Path, gigabytes: float, embedding_mb: float, tensors: int) -> int:
    """Write the file; returns the embedding's size in bytes. Tensors are written one at a
    time from a shared buffer, so writing costs about one tensor of memory, not the file."""
    from safetensors.numpy import save_file

    d = 512
    V = int(embedding_mb * 2**20 / (4 * d))
    rest = max(1, int((gigabytes * 2**30 - V * d * 4) / (4 * tensors)))
    rows = max(1, rest // 1024)
    arrays = {"gpt_neox.embed_in.weight": np.random.default_rng(0).normal(size=(V, d))}
    arrays["gpt_neox.embed_in.weight"] = arrays["gpt_neox.embed_in.weight"].astype(np.float32)
    block = np.ones((rows, 1024), np.float32)
    for i in range(tensors):
        arrays[f"gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight"] = block
    save_file(arrays, str(path))
    return V * d * 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--embedding-mb", type=float, default=200.0)
    parser.add_argument("--tensors", type=int, default=24)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "model.safetensors"
        embedding = write_checkpoint(path, args.gigabytes, args.embedding_mb, args.tensors)
        size = path.stat().st_size
        print(f"file {size / 2**30:.2f} GiB, {args.tensors + 1} tensors; embedding "
              f"{embedding / 2**20:.0f} MiB ({embedding / size:.2f} of the file)")  # fmt: skip
        for what in ("load_embedding", "measure"):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(path), what],
                capture_output=True,
                text=True,
                check=True,
            )
            numbers = json.loads(done.stdout.strip().splitlines()[-1])
            growth = numbers["after"] - numbers["before"]
            print(
                f"{what:15s} peak before {numbers['before'] / 2**20:7.0f} MiB, after "
                f"{numbers['after'] / 2**20:7.0f} MiB: growth {growth / 2**20:6.0f} MiB = "
                f"{growth / embedding:.2f} x the embedding ({growth / size:.2f} x the file)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
