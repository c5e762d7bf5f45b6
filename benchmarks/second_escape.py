"""Benchmark: predicting the second escape (theory/second_escape.md) against training to it.

Setup: ``mod`` N = 40 at gamma 1.0 and 1.2, Task 4 and ``modulus`` N = 40 M = 4 at gamma 1.0 (the
tasks of sims/second_plateau), the wide vocabulary (V = 2 V_min), ReLU FFN d = 128, full-batch
GD at lr 1 (t = epoch), float64, seed 0. Per lane:

- training: the compiled GD run (`train.make_run`) from the init to the measured t_1, and from
  the state at t_0 = t_c + 100 to t_1 (what L1 replaces);
- L2: `second_escape.predict_second_escape` from the initial weights, the escape time only
  (``band_modes=None``): the plateau flow (eq. S5, RK4 at `second_escape.APPROACH_STEP`) onto
  the plateau, the split-unit flow (eq. S6, Heun at `second_escape.SPLIT_STEP`) off it;
- L1: the split-unit flow from the training state at t_0.

Each path is timed four times: the first call includes compilation, the steady time is the least
of the other three (the compiled programs reused). Also timed: one call of the split-unit field
(eq. S6, O(n V s)) and of the
plateau field (eq. S5) against one exact loss gradient (a GD step's [n, V] logits over all d
units). Ratios are training / prediction. No speed is asserted.

Usage: python benchmarks/second_escape.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import results, second_escape, sweep, train
from ctx_staircase.experiments.regime import PRIMARY

D, HORIZON = 128, 3000
#: (name, task, parameters, geometry group, gamma): the flagship's task at two scales and the
#: other two tasks of sims/second_plateau.
CELLS = (
    ("mod N=40", "mod", {"N": 40}, "numbers", 1.0),
    ("mod N=40", "mod", {"N": 40}, "numbers", 1.2),
    ("Task 4", "task4", {}, "anchors", 1.0),
    ("modulus N=40 M=4", "modulus", {"N": 40, "M": 4}, "numbers", 1.0),
)


def timed(fn, repeats: int = 4) -> tuple[list[float], object]:
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


class Lane(NamedTuple):
    """One trained lane: its snapshots, the measured escape, ``t0 = t_c + 100`` (snapshot
    ``i0``) and the measured ``t1`` rounded up to a step."""

    W_E: np.ndarray
    W_U: np.ndarray
    truth: second_escape.SecondEscape
    i0: int
    t0: int
    t1: int


def trained_lane(ds, problem, gamma: float) -> Lane:
    config = train.TrainConfig(
        optimizer="gd", lr=1.0, steps=HORIZON, snapshots=tuple(range(0, HORIZON + 1, 10))
    )
    lane = sweep.train_sweep(
        "ffn", ds, config, gammas=[gamma], seeds=[0], d=D, dtype=jnp.float64
    ).lane(0)
    steps = np.asarray(lane.steps, np.float64)
    truth = second_escape.measured_second_escape(steps, np.asarray(lane.W_E), problem)
    i0 = int(np.argmin(np.abs(steps - (truth.t_collapse + second_escape.START_AFTER))))
    W_E, W_U = np.asarray(lane.W_E), np.asarray(lane.W_U)
    return Lane(W_E, W_U, truth, i0, int(steps[i0]), int(np.ceil(truth.t1)))


def timed_row(name: str, ds, problem, gamma: float, lane: Lane) -> dict:
    """Training to t1 (from the init and from t0) against L1 and L2, each timed four times: the
    first call compiles, the steady time is the least of the other three."""
    data = train.TrainData.from_dataset(ds)
    graphdef, state = train.init_state("ffn", ds, gamma=gamma, seed=0, d=D, dtype=jnp.float64)
    train_full, _ = timed(gd(graphdef, state, data, lane.t1))
    _, state0 = train.init_state("ffn", ds, gamma=gamma, seed=0, d=D, dtype=jnp.float64)
    state0["W_E"][...] = jnp.asarray(lane.W_E[lane.i0])
    state0["W_U"][...] = jnp.asarray(lane.W_U[lane.i0])
    train_rest, _ = timed(gd(graphdef, state0, data, lane.t1 - lane.t0))

    def predict(i, start):
        return lambda: (
            second_escape.predict_second_escape(
                lane.W_E[i], lane.W_U[i], problem, t0=start, horizon=HORIZON, band_modes=None
            ).t1
        )

    l2_seconds, l2 = timed(predict(0, 0.0))
    l1_seconds, l1 = timed(predict(lane.i0, float(lane.t0)))
    return {
        "task": name,
        "gamma": gamma,
        "t0": lane.t0,
        "t1_measured": lane.truth.t1,
        "t1_L1": float(l1),
        "t1_L2": float(l2),
        "split_units": int(second_escape.split_layout(lane.W_E[lane.i0], problem).split.size),
        "train_to_t1_s": train_full,
        "train_t0_to_t1_s": train_rest,
        "L2_s": l2_seconds,
        "L1_s": l1_seconds,
        "ratio_L2_steady": min(train_full[1:]) / min(l2_seconds[1:]),
        "ratio_L1_steady_vs_t0_to_t1": min(train_rest[1:]) / min(l1_seconds[1:]),
        "ratio_L1_steady_vs_train_to_t1": min(train_full[1:]) / min(l1_seconds[1:]),
    }


def per_call_costs(ds, problem, lane: Lane) -> tuple[dict, int]:
    """Mean seconds of one call of the split-unit field, the plateau field and the exact loss
    gradient at a lane's t0 state; and the number of split units there."""
    W_E, W_U = lane.W_E[lane.i0], lane.W_U[lane.i0]
    y = {"W_E": jnp.asarray(W_E), "W_U": jnp.asarray(W_U)}
    layout = second_escape.split_layout(W_E, problem)
    arrays = second_escape.split_arrays(layout, problem, ds.vocab_size)
    state = jax.tree.map(jnp.asarray, second_escape.split_state(W_E, W_U, layout, problem))
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
    return {name: per_call_seconds(fn, args) for name, (fn, args) in calls.items()}, int(
        layout.split.size
    )


HEADER = (
    "task",
    "γ",
    "t0",
    "t1 train",
    "t1 L1",
    "t1 L2",
    "split units",
    "train 0→t1 s",
    "train t0→t1 s",
    "L2 s",
    "L1 s",
    "×L2",
    "×L1 (t0→t1)",
    "×L1 (0→t1)",
)


def print_rows(rows: list[dict]) -> None:
    print(" | ".join(HEADER))
    for r in rows:
        print(
            f"{r['task']} | {r['gamma']:g} | {r['t0']} | {r['t1_measured']:.0f} | "
            f"{r['t1_L1']:.0f} | {r['t1_L2']:.0f} | {r['split_units']} | "
            f"{min(r['train_to_t1_s'][1:]):.2f} (first {r['train_to_t1_s'][0]:.2f}) | "
            f"{min(r['train_t0_to_t1_s'][1:]):.2f} | "
            f"{min(r['L2_s'][1:]):.2f} (first {r['L2_s'][0]:.2f}) | "
            f"{min(r['L1_s'][1:]):.2f} (first {r['L1_s'][0]:.2f}) | {r['ratio_L2_steady']:.1f} | "
            f"{r['ratio_L1_steady_vs_t0_to_t1']:.1f} | {r['ratio_L1_steady_vs_train_to_t1']:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    rows, per_call = [], None
    for name, task, params, geometry, gamma in CELLS:
        ds = PRIMARY.make(task, **params)
        problem = second_escape.plateau_problem(ds, geometry=geometry)
        lane = trained_lane(ds, problem, gamma)
        rows.append(timed_row(name, ds, problem, gamma, lane))
        if per_call is None:  # the first cell: mod N=40 at gamma 1
            per_call, split = per_call_costs(ds, problem, lane)
    print("setup: ReLU FFN d=128, GD lr 1, float64, seed 0, V = 2 V_min")
    print_rows(rows)
    print(
        f"one call, ms (mod N=40, gamma 1, s = {split} split units of {D} at t0): "
        + ", ".join(f"{name} {seconds * 1e3:.2f}" for name, seconds in per_call.items())
    )
    environment = results.environment()
    print(f"versions: {environment.get('packages', environment)}")
    if args.json:
        with open(args.json, "w") as handle:
            record = {"rows": rows, "per_call_s": per_call, "environment": environment}
            json.dump(record, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
