"""Benchmark: exact signatures of `modsum` (N=50, L=4, 6.25M sequences), orders 0-3.

Measures wall time and peak traced memory (tracemalloc sees NumPy's buffers) of each order, and
the speed ratio against a straightforward per-sample NumPy loop on a 20k-sequence subsample.

The dense order-3 tensor over the 50 numbers is 50^5 float64 = 2.5 GB by itself, so order 3 is
computed in alpha blocks (``alphas=``), which keeps the peak under 2 GiB; its time is the sum over
blocks.

Usage: python benchmarks/signatures.py [--block 10] [--subsample 20000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import tracemalloc

import numpy as np

from ctx_staircase import signatures, tasks
from ctx_staircase.results import environment


def measure(fn):
    tracemalloc.start()
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, seconds, peak / 2**20


def loop_label_signature(ds, order, alphas, numbers):
    """The straightforward baseline: per sample, per position tuple, one increment."""
    slot = {int(t): i for i, t in enumerate(numbers)}
    alpha_slot = {int(t): i for i, t in enumerate(alphas)}
    joint = np.zeros((len(alphas), len(numbers)) + (len(numbers),) * order)
    norm = np.zeros(len(alphas))
    p = ds.probabilities
    tuples = list(itertools.permutations(range(ds.L), order + 1))
    for x, y, w in zip(ds.tokens, ds.labels, p, strict=True):
        for i in range(ds.L):
            if x[i] in alpha_slot:
                norm[alpha_slot[x[i]]] += w
        for positions in tuples:
            a = alpha_slot.get(x[positions[0]])
            if a is None:
                continue
            joint[(a, slot[y], *(slot[x[j]] for j in positions[1:]))] += w
    norm = norm * np.prod(range(ds.L - order, ds.L))
    return joint / norm.reshape((-1,) + (1,) * (joint.ndim - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=10, help="alphas per order-3 block")
    parser.add_argument("--subsample", type=int, default=20_000)
    args = parser.parse_args()

    ds, make_s, make_mb = measure(lambda: tasks.make("modsum", N=50, L=4))
    numbers = ds.groups["numbers"]
    rows = [{"stage": "make modsum N=50 L=4", "seconds": make_s, "peak_MiB": make_mb}]
    kw = dict(alphas=numbers, labels=numbers, context=numbers)
    for m in range(3):
        _, s, mb = measure(lambda m=m: signatures.label_signature(ds, m, **kw))
        rows.append({"stage": f"order {m} (all 50 alphas)", "seconds": s, "peak_MiB": mb})
    total, peak = 0.0, 0.0
    for start in range(0, numbers.size, args.block):
        block = numbers[start : start + args.block]
        _, s, mb = measure(
            lambda b=block: signatures.label_signature(
                ds, 3, alphas=b, labels=numbers, context=numbers
            )
        )
        total, peak = total + s, max(peak, mb)
    rows.append(
        {
            "stage": f"order 3 ({numbers.size // args.block} blocks of {args.block})",
            "seconds": total,
            "peak_MiB": peak,
        }
    )

    sub = ds.subset(np.random.default_rng(0).choice(ds.n, args.subsample, replace=False))
    alphas = numbers[: args.block]
    ratios = []
    for m in range(4):
        fast, fast_s, _ = measure(
            lambda m=m: signatures.label_signature(
                sub, m, alphas=alphas, labels=numbers, context=numbers
            )
        )
        slow, slow_s, _ = measure(lambda m=m: loop_label_signature(sub, m, alphas, numbers))
        assert np.allclose(fast, slow, atol=1e-12), "the baseline disagrees"
        ratios.append(
            {"order": m, "vectorized_s": fast_s, "loop_s": slow_s, "speedup": slow_s / fast_s}
        )

    print(f"{'stage':40s} {'seconds':>9s} {'peak MiB':>9s}")
    for row in rows:
        print(f"{row['stage']:40s} {row['seconds']:9.2f} {row['peak_MiB']:9.0f}")
    print(f"\nper-sample loop vs vectorized, {args.subsample} sequences, {alphas.size} alphas:")
    for row in ratios:
        print(
            f"  order {row['order']}: loop {row['loop_s']:.2f} s, vectorized "
            f"{row['vectorized_s']:.4f} s, speedup {row['speedup']:.0f}x"
        )
    print(json.dumps({"rows": rows, "ratios": ratios, "environment": environment()}, indent=1))


if __name__ == "__main__":
    main()
