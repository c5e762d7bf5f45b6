"""Benchmark: a context-order sweep padded into one compiled program against the loop over L.

`sweep.train_sweep` given several datasets (``modsum`` at L = 2, 3, 4) pads them to one shape
and runs every (L, gamma, seed) lane with one compiled program; the loop runs one sweep per L,
each compiling its own. Both run in one process, each twice: the first call compiles (every
shape is new to the process), the second reuses the compiled programs (steady). A padded lane
computes on the largest dataset's samples (zero-weight padding), so the padding saves
compilations and costs arithmetic: which wins depends on the sizes. Settings:

- ``small``: N = 4 (16, 64, 256 samples), ReLU FFN d = 16, GD lr 1, 200 steps, gamma 0.8 and
  1.2, seeds 0 and 1 (the acceptance configuration of tests/test_sweep.py);
- ``fig5``: fig5_activation_order's cells of one K: N = 8 (64, 512, 4096 samples), sigma = z^2,
  FFN d = 128, GD lr 1, 1000 steps, gamma 1, seed 0, snapshots every 10 steps;
- ``fig5 quick``: the same at its regime-study sizes, L = 2, 3 (64 and 512 samples).
- ``theory``: the FFN signature flows (`flows.context_signature_flows`): ``modsum`` N = 8 at
  L = 2, 3, 4, sigma = z + z^2 / 2, d = 32, gamma 0.8 and 1.2, every order 0..L-1 (9 order
  lanes x 2 gammas), uniform prediction, 41 snapshots on t in [0, 40], against the loop over L
  of `flows.signature_flow_lanes` (each L its own program of its orders).

Usage: python benchmarks/context_sweep.py [--only small fig5 theory] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import jax
import numpy as np
from _machine import other_busy_processes

from ctx_staircase import flows, results, sweep, tasks, theory, train

SETTINGS = {
    "small": dict(
        N=4, d=16, steps=200, snapshots=(0, 50, 200), gammas=(0.8, 1.2), seeds=(0, 1),
        activation="relu",
    ),
    "fig5": dict(
        N=8, d=128, steps=1000, snapshots=tuple(range(0, 1001, 10)), gammas=(1.0,), seeds=(0,),
        activation="z^2",
    ),
    "fig5 quick": dict(
        N=8, d=128, steps=1000, snapshots=tuple(range(0, 1001, 10)), gammas=(1.0,), seeds=(0,),
        activation="z^2", Ls=(2, 3),
    ),
    "theory": dict(N=8, d=32, gammas=(0.8, 1.2), coefficients=(1.0, 0.5), theory=True),
}  # fmt: skip
LS = (2, 3, 4)


def measure(setting: dict) -> dict:
    """Seconds of the padded sweep and of the loop over L, first and second call of each."""
    if setting.get("theory"):
        return measure_theory(setting)
    datasets = [tasks.make("modsum", N=setting["N"], L=L) for L in setting.get("Ls", LS)]
    config = train.TrainConfig(
        optimizer="gd", lr=1.0, steps=setting["steps"], snapshots=setting["snapshots"]
    )
    keywords = dict(
        gammas=setting["gammas"], seeds=setting["seeds"], d=setting["d"],
        activation=setting["activation"],
    )  # fmt: skip

    def padded():
        return sweep.train_sweep("ffn", datasets, config, **keywords)

    def loop():
        return [sweep.train_sweep("ffn", ds, config, **keywords) for ds in datasets]

    return {"samples": [ds.n for ds in datasets], "seconds": timed(padded, loop)}


def timed(padded, loop) -> dict[str, list[float]]:
    """Wall seconds of two calls each of ``padded()`` and ``loop()``, interleaved (the first
    call of each compiles)."""
    seconds: dict[str, list[float]] = {"padded": [], "loop": []}
    for _ in range(2):
        for name, run in (("padded", padded), ("loop", loop)):
            start = time.perf_counter()
            jax.block_until_ready(jax.tree.leaves(run()))
            seconds[name].append(time.perf_counter() - start)
    return seconds


def measure_theory(setting: dict) -> dict:
    """Seconds of `flows.context_signature_flows` over L = 2, 3, 4 and of the loop over L of
    `flows.signature_flow_lanes`, first and second call of each (float64)."""
    jax.config.update("jax_enable_x64", True)
    datasets = [tasks.make("modsum", N=setting["N"], L=L) for L in setting.get("Ls", LS)]
    d, gammas = setting["d"], np.asarray(setting["gammas"])
    rng = np.random.default_rng(0)
    V = datasets[0].vocab_size
    unit = {"W_E": rng.normal(size=(V, d)), "W_U": rng.normal(size=(V, d))}
    y0 = {k: np.stack([v * d**-g for g in gammas]) for k, v in unit.items()}
    ts = np.linspace(0.0, 40.0, 41)

    def problem(orders, ds=None):
        setting_ = theory.Setting(
            None, gammas, orders, "uniform", "poly", tuple(setting["coefficients"])
        )
        return theory.Problem(
            setting_, ds, d, unit, y0, None, 1.0, 0.5, ts, functools.partial(sweep.sweep_map), {}
        )

    top = max(ds.L for ds in datasets) - 1

    def padded():
        return flows.context_signature_flows(problem(tuple(range(top + 1))), datasets)

    def loop():
        out = []
        for ds in datasets:
            alone = problem(tuple(range(ds.L)), ds)
            out.append([flows.signature_flow_lanes(alone, m) for m in range(ds.L)])
        return out

    return {"samples": [ds.n for ds in datasets], "seconds": timed(padded, loop)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args()
    busy = other_busy_processes()
    print(f"other busy processes: {busy or 'none'}")
    report = {"environment": results.environment(), "busy": busy, "settings": {}}
    for name in args.only:
        measured = measure(SETTINGS[name])
        report["settings"][name] = measured
        s = measured["seconds"]
        print(
            f"{name} (samples {measured['samples']}): padded first {s['padded'][0]:.2f} s, "
            f"steady {s['padded'][1]:.2f} s; loop first {s['loop'][0]:.2f} s, steady "
            f"{s['loop'][1]:.2f} s; loop / padded: first {s['loop'][0] / s['padded'][0]:.2f}, "
            f"steady {s['loop'][1] / s['padded'][1]:.2f}"
        )
    if args.json:
        results.write_json(Path(args.json), report)


if __name__ == "__main__":
    main()
