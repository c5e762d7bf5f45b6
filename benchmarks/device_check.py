"""Device check: the three numbers that say whether an accelerator is used well, in one short
script (about 2 minutes on one GPU, under 5 minutes in all; ``--small`` runs the same checks at
CPU sizes in seconds, to test the script itself).

(1) Training sweep against the jitted loop: `sweep.train_sweep` of ``LANES`` lanes (16 gammas x
    4 seeds, `add` N=40, FFN d=128 ReLU, full-batch GD lr 0.5, ``STEPS`` steps; vmapped over
    the lanes on an accelerator) against the same lanes one after another through
    ``jax.jit(train.make_run(...))``, both timed warm (the second call) so the ratio is the
    layout's, not the compiler's. Ratio = loop time / sweep time.
(2) LM tokens/s against the matmul peak: `lm.train_lm`-sized GPT lanes (d=256, 4 layers,
    context 128, batch 64; 4 gammas vmapped) timed warm; achieved FLOP/s = tokens/s x
    analytic matmul FLOPs per token (benchmarks/lm.py, part 2), over the dense matmul rate of
    a 4096^2 float32 ``jnp.matmul`` (the default precision: TF32 on recent NVIDIA GPUs).
(3) Two devices, when there are two: the same sweep on 2 devices against 1 device (ratio of
    times, and max |dW_E| / max |W_E| between the two layouts: rounding-level, since a different
    lane count per call compiles a different program; see `sweep.sweep_map`).

Expected on one H200 (not yet measured here; recorded in benchmarks/README.md when a device is
lent): (1) >= 10x, since one lane fills a small fraction of the GPU and 64 vmapped lanes fill
far more; (2) 5-30% of the matmul peak, the model being small; (3) skipped with one device.
On 2 CPU cores (``--small``): (1) about 1-2x (lane by lane, one call per core), (2) 10-40%.

Usage: python benchmarks/device_check.py [--small] [--json PATH]
Writes the JSON to PATH (default: $OUT/device_check.json when $OUT is set, else
device_check.json) with the package versions and the devices.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _machine
import lm as lm_benchmark

from ctx_staircase import lm, results, sweep, tasks, text, train

SIZES = {
    False: dict(N=40, d=128, steps=2000, gammas=16, seeds=4, loop_lanes=8, lm_d=256,
                lm_layers=4, lm_context=128, lm_batch=64, lm_steps=100, matmul=4096),
    True: dict(N=10, d=16, steps=100, gammas=2, seeds=2, loop_lanes=2, lm_d=32,
               lm_layers=1, lm_context=16, lm_batch=4, lm_steps=10, matmul=512),
}  # fmt: skip


def _timed(call) -> float:
    start = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - start


def sweep_against_loop(size: dict) -> dict:
    """Check (1)."""
    ds = tasks.make("add", N=size["N"])
    config = train.TrainConfig(optimizer="gd", lr=0.5, steps=size["steps"], record_weights=False)
    gammas = list(np.linspace(0.5, 1.5, size["gammas"]))
    seeds = list(range(size["seeds"]))

    def run_sweep(devices=None):
        return sweep.train_sweep(
            "ffn",
            ds,
            config,
            gammas=gammas,
            seeds=seeds,
            d=size["d"],
            layout=sweep.Layout(devices),
        )

    first = _timed(run_sweep)
    warm = _timed(run_sweep)
    data = train.TrainData.from_dataset(ds)
    lanes = list(range(0, len(gammas) * len(seeds), len(gammas) * len(seeds) // size["loop_lanes"]))
    loop, compiled = [], None
    for index in lanes:
        gamma, seed = gammas[index // len(seeds)], seeds[index % len(seeds)]
        key = jax.random.key(seed)
        graphdef, state = train.init_state("ffn", data, gamma=gamma, seed=key, d=size["d"])
        compiled = compiled or jax.jit(train.make_run(graphdef, config))
        args = (state, config.lr, jax.random.fold_in(key, 1), data)
        if not loop:  # the compile, outside the timing
            jax.block_until_ready(compiled(*args))
        loop.append(_timed(lambda run=compiled, args=args: run(*args)))
    loop_total = statistics.mean(loop) * len(gammas) * len(seeds)
    return {
        "lanes": len(gammas) * len(seeds),
        "steps": config.steps,
        "sweep_first_call_s": first,
        "sweep_warm_s": warm,
        "loop_lane_s": loop,
        "loop_extrapolated_s": loop_total,
        "ratio_loop_over_sweep": loop_total / warm,
    }


def lm_against_peak(size: dict) -> dict:
    """Check (2)."""
    corpus = text.prepare_corpus(text.builtin_corpus(n_sentences=4000, seed=0), vocab_size=None)
    config = lm.LMConfig(
        steps=size["lm_steps"], snapshot_every=size["lm_steps"], d=size["lm_d"],
        n_layers=size["lm_layers"],
        context_length=size["lm_context"], batch_size=size["lm_batch"],
    )  # fmt: skip
    gammas = [0.5, 0.75, 1.0, 1.25]
    timing = lm_benchmark.bench_lanes(config, corpus, gammas, size["lm_steps"], repeats=2)
    per_token = lm_benchmark.analytic_flops(config, corpus.vocab_size)["train_per_token"]
    peak = _machine.matmul_peak(size["matmul"])
    achieved = timing["tokens_per_s_best"] * per_token
    return {
        "config": {k: getattr(config, k) for k in ("d", "n_layers", "context_length")},
        "lanes": len(gammas),
        "tokens_per_s": timing["tokens_per_s_best"],
        "flops_per_token": per_token,
        "achieved_flops_per_s": achieved,
        "matmul_peak_flops_per_s": peak["flops_per_s"],
        "fraction_of_matmul_peak": achieved / peak["flops_per_s"],
    }


def two_devices(size: dict) -> dict | None:
    """Check (3), or None with fewer than two devices."""
    devices = jax.local_devices()
    if len(devices) < 2:
        return None
    ds = tasks.make("add", N=size["N"])
    config = train.TrainConfig(optimizer="gd", lr=0.5, steps=size["steps"])
    grid = dict(gammas=list(np.linspace(0.5, 1.5, size["gammas"])), seeds=[0, 1])

    def run(on):
        return sweep.train_sweep("ffn", ds, config, d=size["d"], layout=sweep.Layout(on), **grid)

    outcome = {}
    for name, on in (("one", devices[:1]), ("two", devices[:2])):
        run(on)  # compile
        start = time.perf_counter()
        outcome[name] = run(on)
        outcome[f"{name}_s"] = time.perf_counter() - start
    one, two = outcome["one"].trajectory.W_E, outcome["two"].trajectory.W_E
    return {
        "devices": [str(d) for d in devices[:2]],
        "one_device_s": outcome["one_s"],
        "two_devices_s": outcome["two_s"],
        "ratio_one_over_two": outcome["one_s"] / outcome["two_s"],
        "W_E_max_rel_difference": float(np.max(np.abs(two - one)) / np.max(np.abs(one))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="CPU sizes, seconds long")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    size = SIZES[args.small]
    start = time.perf_counter()
    report = {"small": args.small, "devices": [str(d) for d in jax.local_devices()]}
    for name, check in (
        ("sweep_vs_loop", sweep_against_loop),
        ("lm_vs_matmul_peak", lm_against_peak),
        ("two_devices", two_devices),
    ):
        t = time.perf_counter()
        report[name] = check(size)
        print(f"{name}: {json.dumps(report[name], default=float)[:300]} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
    report["seconds"] = time.perf_counter() - start
    report["environment"] = results.environment()
    out = args.json or Path(os.environ.get("OUT", ".")) / "device_check.json"
    results.write_json(out, report)
    print(f"wrote {out} ({report['seconds']:.0f} s)")


if __name__ == "__main__":
    jnp.zeros(())  # start the backend before timing anything
    main()
