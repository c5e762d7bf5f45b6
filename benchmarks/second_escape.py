"""Benchmark: predicting the second escape (theory/second_escape.md) against training to it.

Setup: task ``mod`` N = 40 with the wide vocabulary (V = 82), ReLU FFN d = 128, full-batch GD at
lr 1 (t = epoch), float64, seed 0, gamma in {1.0, 1.2}. Per lane:

- training: the compiled GD run (`train.make_run`) from the init to the measured t_1, and from
  the state at t_0 = t_c + 100 to t_1 (what L1 replaces);
- L2: `second_escape.predict_second_escape` from the initial weights, the escape time only
  (``band_modes=None``): the plateau flow (eq. S5, RK4 step 1) onto the plateau, the split-unit
  flow (eq. S6, RK4 step 10) off it;
- L1: the split-unit flow from the training state at t_0.

Each path is timed twice: the first call includes compilation, the second (steady) reuses the
compiled programs. Also timed: one call of the split-unit field (eq. S6, O(n V s)) and of the
plateau field (eq. S5) against one exact loss gradient (a GD step's [n, V] logits over all d
units). Ratios are training / prediction. No speed is asserted.

Usage: python benchmarks/second_escape.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import results, second_escape, sweep, train
from ctx_staircase.experiments.regime import PRIMARY

D, GAMMAS, HORIZON = 128, (1.0, 1.2), 3000


def timed(fn, repeats: int = 2) -> tuple[list[float], object]:
    """Wall seconds of ``repeats`` calls of ``fn`` (the first includes compilation), the value."""
    seconds, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = jax.block_until_ready(fn())
        seconds.append(time.perf_counter() - start)
    return seconds, value


def per_call_seconds(fn, args, calls: int = 100) -> float:
    """Mean wall seconds of one compiled call of ``fn(*args)`` (after a compiling call)."""
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / calls


def gd(graphdef, state, data, steps: int):
    """``steps`` GD steps at lr 1 from ``state``, compiled once per ``steps``."""
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=steps, snapshots=(steps,))
    run = jax.jit(train.make_run(graphdef, config))
    return lambda: run(state, jnp.asarray(1.0), jax.random.key(0), data).W_E


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    ds = PRIMARY.make("mod", N=40)
    problem = second_escape.plateau_problem(ds)
    data = train.TrainData.from_dataset(ds)
    rows = []
    for gamma in GAMMAS:
        config = train.TrainConfig(
            optimizer="gd", lr=1.0, steps=HORIZON, snapshots=tuple(range(0, HORIZON + 1, 10))
        )
        lane = sweep.train_sweep(
            "ffn", ds, config, gammas=[gamma], seeds=[0], d=D, dtype=jnp.float64
        ).lane(0)
        steps = np.asarray(lane.steps, np.float64)
        truth = second_escape.measured_second_escape(steps, np.asarray(lane.W_E), problem)
        t1 = int(np.ceil(truth.t1))
        i0 = int(np.argmin(np.abs(steps - (truth.t_collapse + second_escape.START_AFTER))))
        t0 = int(steps[i0])

        graphdef, state = train.init_state("ffn", ds, gamma=gamma, seed=0, d=D, dtype=jnp.float64)
        train_full, _ = timed(gd(graphdef, state, data, t1))
        _, state0 = train.init_state("ffn", ds, gamma=gamma, seed=0, d=D, dtype=jnp.float64)
        state0["W_E"][...] = jnp.asarray(lane.W_E[i0])
        state0["W_U"][...] = jnp.asarray(lane.W_U[i0])
        train_rest, _ = timed(gd(graphdef, state0, data, t1 - t0))

        def predict(W_E, W_U, start):
            return lambda: (
                second_escape.predict_second_escape(
                    W_E, W_U, problem, t0=start, horizon=HORIZON, band_modes=None
                ).t1
            )

        l2_seconds, l2 = timed(predict(lane.W_E[0], lane.W_U[0], 0.0))
        l1_seconds, l1 = timed(predict(lane.W_E[i0], lane.W_U[i0], float(t0)))
        rows.append(
            {
                "gamma": gamma,
                "t0": t0,
                "t1_measured": truth.t1,
                "t1_L1": float(l1),
                "t1_L2": float(l2),
                "train_to_t1_s": train_full,
                "train_t0_to_t1_s": train_rest,
                "L2_s": l2_seconds,
                "L1_s": l1_seconds,
                "ratio_L2_steady": train_full[1] / l2_seconds[1],
                "ratio_L1_steady_vs_t0_to_t1": train_rest[1] / l1_seconds[1],
                "ratio_L1_steady_vs_train_to_t1": train_full[1] / l1_seconds[1],
            }
        )

    y = {"W_E": jnp.asarray(lane.W_E[i0]), "W_U": jnp.asarray(lane.W_U[i0])}
    layout = second_escape.split_layout(lane.W_E[i0], problem)
    arrays = second_escape.split_arrays(layout, problem, ds.vocab_size)
    state = jax.tree.map(
        jnp.asarray, second_escape.split_state(lane.W_E[i0], lane.W_U[i0], layout, problem)
    )
    calls = {
        "split field": (
            jax.jit(lambda s: second_escape.split_field(0.0, s, arrays, problem.activation)),
            (state,),
        ),
        "plateau field": (jax.jit(lambda y: second_escape.plateau_field(0.0, y, problem)), (y,)),
        "exact gradient": (
            jax.jit(lambda E, U: jax.grad(second_escape.loss, argnums=(0, 1))(E, U, problem)),
            (y["W_E"], y["W_U"]),
        ),
    }
    per_call = {name: per_call_seconds(fn, args) for name, (fn, args) in calls.items()}
    print("setup: mod N=40, V=82, ReLU FFN d=128, GD lr 1, float64, seed 0")
    header = (
        "γ",
        "t0",
        "t1 train",
        "t1 L1",
        "t1 L2",
        "train 0→t1 s",
        "train t0→t1 s",
        "L2 s",
        "L1 s",
        "×L2",
        "×L1 (t0→t1)",
        "×L1 (0→t1)",
    )
    print(" | ".join(header))
    for r in rows:
        print(
            f"{r['gamma']:g} | {r['t0']} | {r['t1_measured']:.0f} | {r['t1_L1']:.0f} | "
            f"{r['t1_L2']:.0f} | {r['train_to_t1_s'][1]:.2f} (first {r['train_to_t1_s'][0]:.2f})"
            f" | {r['train_t0_to_t1_s'][1]:.2f} | {r['L2_s'][1]:.2f} (first {r['L2_s'][0]:.2f}) | "
            f"{r['L1_s'][1]:.2f} (first {r['L1_s'][0]:.2f}) | {r['ratio_L2_steady']:.1f} | "
            f"{r['ratio_L1_steady_vs_t0_to_t1']:.1f} | {r['ratio_L1_steady_vs_train_to_t1']:.1f}"
        )
    print(
        f"one call, ms (split units s = {layout.split.size} of {D} at t0 of the last lane): "
        + ", ".join(f"{name} {seconds * 1e3:.2f}" for name, seconds in per_call.items())
    )
    environment = results.environment()
    print(f"versions: {environment.get('packages', environment)}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {"rows": rows, "per_call_s": per_call, "environment": environment},
                handle,
                indent=1,
                default=str,
            )


if __name__ == "__main__":
    main()
