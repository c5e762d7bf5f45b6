"""Benchmark: what each theory of ``ctx-staircase theory`` costs next to the training it predicts.

The command writes ``cost`` into metrics.json: wall seconds of training and of each theory's solve,
compilation included (`comparison.Cost`), once. This measures the same parts at steady state:
each setting runs `comparison.theory_vs_training` ``--repeats`` times in one process; the first
call compiles, the later ones reuse every compiled program, and the steady time of a part is the
least of theirs. Settings (full-batch GD at lr 0.2, float64, d = 128, seed 0, every theory that
applies):

- ``add`` N = 20, sigma(z) = z + z^2/2, gamma 0.6 .. 1.4 (sims/theory_vs_training's run): the
  closed form (C3), the closed form with the softmax feedback and the signature flows m = 0, 1;
- ``add`` N = 28, ReLU, gamma 0.9 and 1.3: also the ReLU gated flow (R5), the frozen-gate
  closed form (R4) and the ReLU escape law (R9); once with the command's own horizon (sized by
  the C_1 = 1/2 law, which is twice late for ReLU), once with training stopped at 1.25 times the
  latest measured escape (1060 steps), the horizon the law itself would set;
- ``mod`` N = 40 in V = 82 and Task 4 (n_x = 40), ReLU, gamma 0.8 .. 1.4 (cells of the law's
  acceptance grid, sims/relu_escape): the law, (R4) and the C_1 = 1/2 law;
- every configuration of that grid at seed 0, gamma 0.8 .. 1.4 (``grid ...``): the law alone,
  against training stopped at 1.25 times the law's latest escape, the horizon the law itself sets
  (the command's own horizon is sized by the C_1 = 1/2 law, twice late for ReLU); and on the same
  problem, the law's escape times alone (`relu_escape.escape_law_times`, no weights evaluated,
  checked equal to the law's) and the time to write arrays the size of its trajectories once.

Ratios are a theory's seconds over training's; a law is cheaper than the training it predicts
where the ratio is below 1. No speed is asserted.

Usage: python benchmarks/theory_cost.py [--repeats 3] [--only NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import jax
import numpy as np
from _machine import other_busy_processes

from ctx_staircase import comparison, results, tasks, theories
from ctx_staircase import relu_escape as law
from ctx_staircase.experiments import relu_escape

#: The theories of the ReLU escape law's acceptance grid (sims/relu_escape).
_GRID = ("relu_escape_law", "closed_form_frozen_gates", "closed_form_feedback")
#: name -> (task, parameters, keywords of `comparison.theory_vs_training`)
SETTINGS = {
    "add N=20 poly": (
        "add",
        {"N": 20},
        dict(gammas=(0.6, 0.8, 1.0, 1.2, 1.4), max_orders=(0, 1), activation="poly:1,0.5"),
    ),
    "add N=28 relu": (
        "add",
        {"N": 28},
        dict(gammas=(0.9, 1.3), max_orders=(1,), activation="relu"),
    ),
    "add N=28 relu, horizon 1.25 escape": (
        "add",
        {"N": 28},
        dict(
            gammas=(0.9, 1.3),
            max_orders=(1,),
            activation="relu",
            steps=1060,
            theories=("relu_escape_law", "closed_form_frozen_gates"),
        ),
    ),
    "mod N=40 V=82 relu": (
        "mod",
        {"N": 40, "vocab_size": 82},
        dict(gammas=(0.8, 1.0, 1.2, 1.4), max_orders=(0,), activation="relu", theories=_GRID),
    ),
    "task4 n_x=40 relu": (
        "task4",
        {"n_x": 40, "n_a": 10},
        dict(gammas=(0.8, 1.0, 1.2, 1.4), max_orders=(0,), activation="relu", theories=_GRID),
    ),
}
_LAW = ("relu_escape_law",)
#: The acceptance grid's configurations (sims/relu_escape), seed 0, the law alone, training
#: stopped at 1.25 times the law's own latest escape (`LAW_HORIZON`).
GRID = {
    f"grid {task} {' '.join(f'{k}={v}' for k, v in params.items())}": (
        task,
        params,
        dict(gammas=relu_escape.GAMMAS, max_orders=(0,), activation="relu", theories=_LAW),
    )
    for task, params in relu_escape.CONFIGURATIONS
}
#: Training on the grid stops at this multiple of the law's latest predicted escape.
LAW_HORIZON = 1.25
LR = 0.2


def law_horizon(ds, keywords: dict) -> int:
    """Steps to `LAW_HORIZON` times the latest escape the law predicts (one call at the
    command's own horizon, not timed)."""
    first = comparison.theory_vs_training(ds, d=128, lr=LR, **keywords)
    return math.ceil(LAW_HORIZON * max(first.escape.theories["relu_escape_law"]) / LR)


class EscapeTimesAlone:
    """Installed as the escape law's solve for a grid setting: it times the law as registered
    (its own seconds replace the comparison's, which would include the two below) and, on the
    same problem, `relu_escape.escape_law_times` (the escape times with no weights evaluated)
    and writing arrays the size of the law's trajectories once (the floor of any method that
    outputs them)."""

    def __init__(self):
        self.solve = theories.RELU_ESCAPE_LAW.solve
        self.seconds = {
            "relu_escape_law": [],
            "escape times alone": [],
            "writing the trajectories' size": [],
        }
        self.times = []

    def __call__(self, problem):
        start = time.perf_counter()
        lanes = self.solve(problem)
        self.seconds["relu_escape_law"].append(time.perf_counter() - start)
        start = time.perf_counter()
        self.times.append(law.escape_law_times(problem))
        middle = time.perf_counter()
        for trajectory in lanes.trajectories:
            np.full_like(trajectory.W_E, 1.0), np.full_like(trajectory.W_U, 1.0)
        self.seconds["escape times alone"].append(middle - start)
        self.seconds["writing the trajectories' size"].append(time.perf_counter() - middle)
        return lanes


def measure(task: str, params: dict, keywords: dict, repeats: int) -> dict:
    """Each part's seconds per call, ``{"simulation": [...], name: [...]}``, over ``repeats``
    calls of `comparison.theory_vs_training` (the first compiles), and the roles. A grid
    setting trains to the law's own horizon (`law_horizon`)."""
    ds = tasks.make(task, **params)
    if "steps" not in keywords and keywords.get("theories") == _LAW:
        keywords = keywords | {"steps": law_horizon(ds, keywords)}
    alone = EscapeTimesAlone() if keywords.get("theories") == _LAW else None
    if alone:  # the registry's record is frozen: swap its solve for this run only
        object.__setattr__(theories.RELU_ESCAPE_LAW, "solve", alone)
    try:
        calls = [
            comparison.theory_vs_training(ds, d=128, lr=LR, **keywords) for _ in range(repeats)
        ]
    finally:
        if alone:
            object.__setattr__(theories.RELU_ESCAPE_LAW, "solve", alone.solve)
    parts = calls[0].cost.as_json()
    seconds = {part: [c.cost.as_json()[part] for c in calls] for part in parts}
    roles = {k: v.value for k, v in calls[0].roles.items()}
    if alone:
        law_times = calls[0].escape.theories["relu_escape_law"]
        if not np.array_equal(alone.times[0], law_times, equal_nan=True):
            raise SystemExit(f"{task}: the escape times alone differ from the law's: {law_times}")
        seconds |= alone.seconds  # the law's own solve, then the two parts it does not include
        roles |= {part: "law" for part in alone.seconds}
    return {
        "seconds": seconds,
        "roles": roles,
        "steps": round(calls[0].ts[-1] / LR),
        "escape_ratios": [
            law / sim
            for law, sim in zip(
                calls[0].escape.theories.get("relu_escape_law", []),
                calls[0].escape.simulation,
                strict=False,
            )
        ],
    }


def table(name: str, measured: dict) -> list[str]:
    """Rows: each part's first and steady seconds and, for a theory, its ratios to training."""
    seconds = measured["seconds"]
    training = seconds["simulation"]
    rows = [
        f"{name}: {measured['steps']} steps, training first {training[0]:.2f} s,"
        f" steady {min(training[1:]):.2f} s"
    ]
    if measured["escape_ratios"]:
        ratios = ", ".join(f"{r:.3f}" for r in measured["escape_ratios"])
        rows.append(f"  escape law / training: {ratios}")
    for part, spent in seconds.items():
        if part == "simulation":
            continue
        first, steady = spent[0] / training[0], min(spent[1:]) / min(training[1:])
        rows.append(
            f"  {part:28s} {measured['roles'][part]:6s} first {spent[0]:7.3f} s ({first:.3g}x)"
            f"  steady {min(spent[1:]):7.3f} s ({steady:.3g}x)"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="calls per setting (>= 2)")
    names = list(SETTINGS) + list(GRID)
    parser.add_argument("--only", nargs="+", choices=names, default=names)
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error(f"--repeats must be at least 2 (one compiling call); got {args.repeats}")
    busy = other_busy_processes()
    print(f"other busy processes: {busy or 'none'}")
    report = {"environment": results.environment(), "busy": busy, "settings": {}}
    with jax.enable_x64(True):
        for name in args.only:
            task, params, keywords = (SETTINGS | GRID)[name]
            measured = measure(task, params, keywords, args.repeats)
            report["settings"][name] = measured
            print("\n".join(table(name, measured)))
    if args.json:
        results.write_json(Path(args.json), report)


if __name__ == "__main__":
    main()
