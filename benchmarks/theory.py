"""Benchmark: rho_0(t) of 64 models from theory (closed form, signature-flow ODE) against training.

Part 1 (the reference setup): task `add`, N = 20 (n = 400, L = 2, V = 41), FFN d = 128 with
sigma = "poly:1,0.5", full-batch GD lr 0.2 for 1000 steps, snapshots every 10 steps (101 times,
t = lr * step), float64, seed 0, 64 values of gamma in [0.6, 1.4]. Each path ends in the 64
curves rho_0(t), the Pearson alignment of S^emb = cos(W_E[numbers]) with S^{sig,(0)} (the
Pearson branch of `metrics.alignment`, jitted; checked equal to `metrics.alignment`):

- training: `sweep.train_sweep` (one vmapped compiled call over the 64 lanes), then rho_0 of the
  recorded W_E snapshots (the jitted rho_0, compiled beforehand);
- closed form: `flows.drive_matrix` from the order-0 signatures, the 64 initial states made by
  `train.init_state` inside the jit (the same draws as the training lanes; checked), then
  `closed_form.linear_solution` evaluated at the 101 times on the 20 number rows (its right
  singular vectors restricted to them) and rho_0, all in one jit(vmap) over gamma. A second
  closed-form row forms the Gram matrix W_E W_E^T(t) in the modes of the same LinearSolution
  (the d-contractions once per lane, not once per time); a third times
  `closed_form.predicted_rho0`, the expected rho_0 that needs no initial weights;
- signature-flow ODE: `flows.ffn_signature_flow` (max_order 1) and `ode.integrate` (Tsit5, rtol
  1e-7, atol 1e-12, as `comparison.theory_vs_training`), then rho_0, in one compiled call over
  the 64 initial states. The truncated flow blows up in finite time after escape, so the field is
  solved with `ode.integrate`'s blow-up event (bound 1.0): a lane stops once an embedding coordinate
  reaches 1, far past escape; every lane's ok flag and step count are reported. Variants
  (``--ode``): the signatures on all V tokens (``signatures.signature_set(ds, 1)``) or on the
  tokens that occur (alphas = context = the 20 numbers, labels = the 39 that occur: the same flow
  in exact arithmetic), lanes batched by ``jax.vmap`` or run one after another by
  ``jax.lax.map``.

Timing: the jitted pieces are compiled ahead of time (``jit(f).lower(...).compile()``: tracing,
lowering and XLA compilation) and then called (fastest of 3 for the sub-second ones). Steady =
every piece of the path (NumPy signatures and drive matrix, the compiled call); first = steady +
compile, what the first call of the path costs. Training is two measured calls of the sweep
(first, steady); its compile time is the sum of the jax.monitoring compile-duration events
(trace, MLIR lowering, XLA compile) during the first call (as in benchmarks/training.py).
Every steady path also reports its process CPU seconds (all threads), which depend less on
other processes' load. Ratios: training time / theory time (steady, first, CPU). A sanity
check prints the largest |rho_0 - training rho_0| before escape (t <= the training lane's
escape time: `closed_form.logit_scale` crossing 0.5, as in `comparison`).

Part 2 (cost against n): the signature flow sees the data only through its signatures, so its
cost does not depend on n. Task `mod`, N = 40 (n = 1600), and the same task tiled ``--tile``
times (default 100: ``np.tile`` of tokens and labels, n = 160000; the same signatures, checked):
the signature computation (once per dataset; grows with n), the ODE solve (all-V signatures,
jit(vmap), ``--part2-lanes`` lanes, to t = lr * steps) and full-batch GD training of the same
lanes for ``--part2-steps`` steps (grows with n), each compiled and steady.

No speed is asserted. Usage: python benchmarks/theory.py [--lanes 64]
[--ode full/vmap,occurring/map] [--part2-steps 50] [--part2-lanes 1] [--tile 100]
[--skip-part2] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _machine import compile_log, other_busy_processes  # noqa: E402  (benchmarks/ is sys.path[0])

from ctx_staircase import (  # noqa: E402
    closed_form,
    flows,
    metrics,
    ode,
    results,
    signatures,
    sweep,
    tasks,
    train,
)
from ctx_staircase.dataset import TokenDataset  # noqa: E402
from ctx_staircase.theory import frozen_past  # noqa: E402

D, ACTIVATION, COEFFICIENTS, LR, SEED = 128, "poly:1,0.5", (1.0, 0.5), 0.2, 0
STEPS, EVERY, GAMMA_RANGE = 1000, 10, (0.6, 1.4)
RTOL, ATOL, CAP, THRESHOLD = 1e-7, 1e-12, 1.0, 0.5
GOAL_CLOSED_FORM = 100.0  # x faster than training, first call (compile included)
GOAL_ODE = 10.0  # x faster than training, steady
ODE_VARIANTS = (
    "full/vmap",
    "full/map",
    "occurring/vmap",
    "occurring/map",
    "occurring/sweep",
    "occurring-dense/sweep",
)


# --------------------------------------------------------------------------------------------
# helpers


class Seconds(float):
    """Wall-clock seconds that also carry ``cpu``: the process's CPU seconds (all threads).

    On a shared machine the wall time grows with the other processes' load; the CPU time much
    less (it still grows with cache and memory-bandwidth contention).
    """

    cpu: float

    def __new__(cls, wall: float, cpu: float) -> Seconds:
        seconds = super().__new__(cls, wall)
        seconds.cpu = cpu
        return seconds


def timed(fn, *args, **kwargs):
    """``(fn(...), Seconds)``, waiting for every JAX result."""
    start, start_cpu = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, Seconds(time.perf_counter() - start, time.process_time() - start_cpu)


def timed_training(ds, config, gammas):
    """One `sweep.train_sweep` call: ``(result, Seconds, compile seconds from JAX's log)``."""
    with compile_log() as records:
        result, seconds = timed(
            sweep.train_sweep, "ffn", ds, config, gammas=gammas, seeds=[SEED], **model_kwargs()
        )
    return result, seconds, float(sum(seconds for _, seconds in records))


def cpu_total(pieces: dict) -> float:
    return float(sum(getattr(v, "cpu", v) for v in pieces.values()))


def compiled_and_runs(jitted, *args, runs: int = 1):
    """AOT ``lower(*args).compile()`` (tracing + lowering + XLA compile), then ``runs`` calls.

    Returns ``(output, compile_s, run_s)`` with ``run_s`` the fastest call: a jitted function's
    first call costs ``compile_s + run_s``, every later call ``run_s``.
    """
    compiled, compile_s = timed(lambda: jitted.lower(*args).compile())
    times = []
    for _ in range(runs):
        out, seconds = timed(compiled, *args)
        times.append(seconds)
    return out, compile_s, min(times, key=float)


def model_kwargs() -> dict:
    return dict(d=D, activation=ACTIVATION, dtype="float64")


def train_config(steps: int) -> train.TrainConfig:
    return train.TrainConfig(
        optimizer="gd", lr=LR, steps=steps, snapshots=tuple(range(0, steps + 1, EVERY))
    )


def sig_zero_geometry(ds: TokenDataset) -> tuple[np.ndarray, np.ndarray]:
    """The numbers and ``S^{sig,(0)}`` over them (the rho_0 reference)."""
    numbers = ds.groups["numbers"]
    labels = np.unique(ds.labels[ds.weights > 0])
    phi0 = signatures.label_signature(ds, 0, alphas=numbers, labels=labels)
    return numbers, np.asarray(metrics.cosine_matrix(phi0))


def rho0_target(S_sig0) -> jax.Array:
    return metrics.upper_triangle(jnp.asarray(S_sig0))


def rho0_function(S_sig0):
    """``W [..., T, A, d]`` (the number rows of W_E) -> rho_0 ``[..., T]``, jittable.

    The Pearson branch of `metrics.alignment` (S^{sig,(0)} of `add` is not constant): the
    correlation of the strict upper triangles of ``cos(W)`` and ``S_sig0``.
    """
    target = rho0_target(S_sig0)

    def rho0(W):
        return metrics.pearson(metrics.upper_triangle(metrics.cosine_matrix(W)), target)

    return rho0


def initial_weights_fn(ds: TokenDataset):
    """``gamma -> (W_E0, W_U0)`` exactly as a sweep lane draws them (seed 0)."""

    def initial(gamma):
        _, state = train.init_state(
            "ffn", ds, gamma=gamma, seed=jax.random.key(SEED), **model_kwargs()
        )
        return {"W_E": state["W_E"][...], "W_U": state["W_U"][...]}

    return initial


def ode_solver(field, ts, batching: str, rho0=None, rows=None):
    """jit of the per-lane solve mapped over the lanes: ``jax.vmap`` or ``jax.lax.map``.

    With ``rho0`` each lane returns ``(rho_0 [T] of W_E[:, rows], ok, num_steps)`` instead of
    the `ode.Solution`.
    """

    def one(y):
        solution = ode.integrate(field, y, ts, jnp.asarray(1), rtol=RTOL, atol=ATOL, blow_up=CAP)
        if rho0 is None:
            return solution
        return rho0(solution.ys["W_E"][:, rows]), solution.ok, solution.num_steps

    if batching == "vmap":
        return jax.jit(jax.vmap(one))
    if batching == "sweep":  # the recipe of `comparison`: lanes in concurrent calls, one per core
        return lambda ys: sweep.sweep_map(one, ys)
    return jax.jit(lambda ys: jax.lax.map(one, ys))


def lane_stats(ok, num_steps) -> dict:
    steps, ok = np.asarray(num_steps), np.asarray(ok)
    return {
        "ok": int(ok.sum()),
        "lanes": int(ok.size),
        "steps_min": int(steps.min()),
        "steps_median": float(np.median(steps)),
        "steps_max": int(steps.max()),
    }


# --------------------------------------------------------------------------------------------
# part 1: 64 rho_0 curves three ways


class Part1(NamedTuple):
    """Part 1's reference setup: task `add` N = 20, the gammas, the snapshot times ``ts``
    ``[T]`` (``t = lr * step``; ``ts_np`` in NumPy), the number rows and ``S^{sig,(0)}`` over
    them, and ``rho0`` (`rho0_function`: ``W [..., T, A, d] -> [..., T]``)."""

    ds: TokenDataset
    gammas: np.ndarray
    config: train.TrainConfig
    ts_np: np.ndarray
    ts: jax.Array
    numbers: np.ndarray
    S_sig0: np.ndarray
    rho0: Callable

    @classmethod
    def make(cls, lanes: int) -> Part1:
        ds = tasks.make("add", N=20)
        config = train_config(STEPS)
        ts_np = LR * np.asarray(config.snapshots, dtype=np.float64)
        numbers, S_sig0 = sig_zero_geometry(ds)
        gammas = np.linspace(*GAMMA_RANGE, lanes)
        rho0 = rho0_function(S_sig0)
        return cls(ds, gammas, config, ts_np, jnp.asarray(ts_np), numbers, S_sig0, rho0)


def part1(lanes: int, ode_variants: tuple[str, ...]) -> dict:
    p = Part1.make(lanes)
    print(
        f"part 1: task add N=20 ({p.ds}), FFN d={D} {ACTIVATION}, gd lr={LR}, {STEPS} steps, "
        f"{p.ts_np.size} snapshots, {lanes} gammas in {GAMMA_RANGE}, float64",
        flush=True,
    )
    training, trajectory, rho_train = training_path(p)
    sigs0, sig0_s = timed(signatures.signature_set, p.ds, 0)
    M, drive_s = timed(flows.drive_matrix, sigs0, p.ds.vocab_size)
    drive = {"signatures_order0": sig0_s, "drive_matrix": drive_s}
    theories = compiled_closed_forms(p, jnp.asarray(M), drive)
    eager, scaled_init = eager_closed_forms(p, jnp.asarray(M), drive, trajectory)
    ode, same_init = ode_paths(p, ode_variants, trajectory)
    theories += eager + ode
    curves = {row["path"]: curve for row, curve in theories}
    escape, agreement = agreement_before_escape(p, trajectory, curves, rho_train)
    peak = float(np.max(rho_train))
    print(f"  training rho_0: max over lanes and t = {peak:.3f}", flush=True)
    rows = [training["row"], *(row for row, _ in theories)]
    for row in rows[1:]:
        row["ratio_first"] = rows[0]["first_s"] / row["first_s"]
        row["ratio_steady"] = rows[0]["steady_s"] / row["steady_s"]
        row["ratio_steady_cpu"] = rows[0]["steady_cpu_s"] / row["steady_cpu_s"]
    return {
        "setup": {
            "task": "add",
            "N": 20,
            "n": p.ds.n,
            "V": p.ds.vocab_size,
            "d": D,
            "activation": ACTIVATION,
            "lr": LR,
            "steps": STEPS,
            "snapshots": int(p.ts_np.size),
            "lanes": lanes,
            "gammas": [float(p.gammas[0]), float(p.gammas[-1])],
            "ode": {"solver": "tsit5", "rtol": RTOL, "atol": ATOL, "max_order": 1, "cap": CAP},
        },
        "rows": rows,
        "same_init_max_abs": same_init,
        "scaled_unit_draw_vs_init_max_abs": scaled_init,
        "rho0_jit_vs_alignment_max_abs": training["rho0_check"],
        "escape_time_range": [float(np.nanmin(escape)), float(np.nanmax(escape))],
        "lanes_escaped": int(np.isfinite(escape).sum()),
        "training_rho0_max": peak,
        "agreement": agreement,
    }


def training_path(p: Part1) -> tuple[dict, train.Trajectory, np.ndarray]:
    """Two measured calls of the training sweep (the first compiles), rho_0 of their snapshots
    by the jitted Pearson (compiled beforehand, outside the timed calls), checked against
    `metrics.alignment`. Returns ``({"row", "rho0_check"}, trajectory, rho_0 [G, T])``."""
    rho0_jit = jax.jit(p.rho0)
    warm = np.random.default_rng(0).normal(size=(p.gammas.size, p.ts_np.size, p.numbers.size, D))
    jax.block_until_ready(rho0_jit(warm))

    def training_rho0(W_E):
        return np.asarray(rho0_jit(W_E[:, :, p.numbers]))

    calls, compile_records = [], []
    for call in ("first", "second"):
        result, train_s, compiled_s = timed_training(p.ds, p.config, p.gammas)
        rho_train, rho_s = timed(training_rho0, result.trajectory.W_E)
        calls.append({"train_sweep": train_s, "rho0": rho_s})
        compile_records.append(compiled_s)
        print(
            f"  training, {call} call: {_fmt(calls[-1])} (JAX compile records {compiled_s:.2f} s)",
            flush=True,
        )
    trajectory = result.trajectory
    S_emb = metrics.cosine_matrix(trajectory.W_E[:, :, p.numbers])
    reference = metrics.alignment(S_emb, p.S_sig0)
    rho0_check = float(np.max(np.abs(np.asarray(reference.value) - rho_train)))
    print(
        f"  rho_0 (jitted Pearson) vs metrics.alignment ({reference.method}): "
        f"max |diff| = {rho0_check:.1e}",
        flush=True,
    )
    row = {
        "path": f"training ({p.gammas.size} lanes, train_sweep)",
        "compile_s": compile_records[0],
        "steady_s": sum(calls[1].values()),
        "steady_cpu_s": cpu_total(calls[1]),
        "first_s": sum(calls[0].values()),
        "pieces_first": calls[0],
        "pieces_steady": calls[1],
        "compile_records_second_call_s": compile_records[1],
        "note": "first and steady: two measured calls; compile: jax.monitoring compile events",
    }
    return {"row": row, "rho0_check": rho0_check}, trajectory, rho_train


# --- the closed forms: rho_0 curves ``[G, T]`` of the drive matrix ``M`` and the gammas --------


def closed_form_rho0(p: Part1, M, gammas):
    """linear_solution evaluated on the number rows (right_t restricted), then rho_0."""
    initial = initial_weights_fn(p.ds)

    def lane(gamma):
        y0 = initial(gamma)
        solution = closed_form.linear_solution(M, y0["W_E"], y0["W_U"], COEFFICIENTS[0])
        W_E, _ = solution._replace(right_t=solution.right_t[:, p.numbers])(p.ts)  # [T, A, d]
        return p.rho0(W_E)

    return jax.vmap(lane)(gammas)


def closed_form_gram_rho0(p: Part1, M, gammas):
    """The Gram matrix of W_E(t) in the modes of the same LinearSolution, then rho_0.

    ``W_E(t) = R^T (cosh a0 + sinh b0)`` with ``R = right_t[:, numbers]``, so
    ``W_E W_E^T = R^T (c c^T * a0a0^T + c s^T * a0b0^T + s c^T * b0a0^T + s s^T * b0b0^T) R``
    with every d-contraction done once per lane instead of once per time.
    """
    initial = initial_weights_fn(p.ds)

    def lane(gamma):
        y0 = initial(gamma)
        sol = closed_form.linear_solution(M, y0["W_E"], y0["W_U"], COEFFICIENTS[0])
        R = sol.right_t[:, p.numbers]
        aa, ab, bb = sol.a0 @ sol.a0.T, sol.a0 @ sol.b0.T, sol.b0 @ sol.b0.T
        x = sol.rate * p.ts[:, None] * sol.singular
        c, s = jnp.cosh(x), jnp.sinh(x)
        modes = (
            c[:, :, None] * c[:, None, :] * aa
            + c[:, :, None] * s[:, None, :] * ab
            + s[:, :, None] * c[:, None, :] * ab.T
            + s[:, :, None] * s[:, None, :] * bb
        )
        gram = jnp.einsum("ka,tkl,lb->tab", R, modes, R)
        norm = jnp.sqrt(jnp.diagonal(gram, axis1=-2, axis2=-1))
        cosine = gram / (norm[..., :, None] * norm[..., None, :])
        return metrics.pearson(metrics.upper_triangle(cosine), rho0_target(p.S_sig0))

    return jax.vmap(lane)(gammas)


def predicted(p: Part1, M, gammas):
    """`closed_form.predicted_rho0`, the expected rho_0, which needs no initial weights."""

    def lane(gamma):
        sigma = jnp.asarray(float(D)) ** (-gamma)
        return closed_form.predicted_rho0(
            M, p.ts, p.S_sig0, p.numbers, d=D, sigma_E=sigma, sigma_U=sigma, rate=COEFFICIENTS[0]
        )

    return jax.vmap(lane)(gammas)


def unit_draw(ds: TokenDataset) -> tuple[np.ndarray, np.ndarray]:
    """The standard-normal draw Z of seed 0 (``init_state`` at gamma = 0): a lane's initial
    weights are ``d^-gamma Z`` (the same draw at every gamma; checked in `eager_closed_forms`)."""
    _, state = train.init_state("ffn", ds, gamma=0.0, seed=SEED, **model_kwargs())
    return np.asarray(state["W_E"][...]), np.asarray(state["W_U"][...])


def numpy_closed_form_rho0(p: Part1, M, gammas, Z):
    """(C3) in NumPy, nothing to compile, from the initial weights: the SVD of M, then per
    lane ``W_E(t)[numbers] = R^T (cosh a0 + sinh b0)`` and rho_0 (Pearson of cosines)."""
    Z_E, Z_U = Z
    left, singular, right_t = np.linalg.svd(np.asarray(M))
    R = right_t[:, p.numbers]  # [K, A]
    x = COEFFICIENTS[0] * p.ts_np[:, None] * singular  # [T, K]
    cosh, sinh = np.cosh(x), np.sinh(x)
    a0, b0 = right_t @ Z_E, left.T @ Z_U  # [K, d], unit scale
    target = np.asarray(rho0_target(p.S_sig0))
    target = (target - target.mean()) / target.std()
    upper = np.triu_indices(p.numbers.size, k=1)
    curves = []
    for gamma in np.asarray(gammas):  # per lane, as a sweep over arbitrary inits would be
        scale = float(D) ** -gamma
        W = np.einsum("ka,tk,kd->tad", R, cosh, scale * a0, optimize=True)
        W += np.einsum("ka,tk,kd->tad", R, sinh, scale * b0, optimize=True)
        W /= np.linalg.norm(W, axis=-1, keepdims=True)
        cosine = (W @ W.transpose(0, 2, 1))[:, upper[0], upper[1]]  # [T, pairs]
        cosine = (cosine - cosine.mean(-1, keepdims=True)) / cosine.std(-1, keepdims=True)
        curves.append(cosine @ target / target.size)
    return np.stack(curves)


def feedback_rho0(p: Part1, M, gammas, Z):
    """The closed form with the softmax feedback (`closed_form.feedback_solution`), eager
    JAX per lane (no jit: its first call compiles only the primitives), then rho_0."""
    Gamma = closed_form.count_second_moment(p.ds)
    Z_E, Z_U = (jnp.asarray(z) for z in Z)
    curves = []
    for gamma in np.asarray(gammas):
        scale = float(D) ** -gamma
        solution = closed_form.feedback_solution(
            M, Gamma, scale * Z_E, scale * Z_U, COEFFICIENTS[0], p.ds.vocab_size
        )
        W_E, _ = solution(p.ts)
        curves.append(p.rho0(W_E[:, p.numbers]))
    return jnp.stack(curves)


def compiled_closed_forms(p: Part1, M, drive: dict) -> list[tuple[dict, np.ndarray]]:
    """The jitted closed-form paths, each compiled ahead of time and called (fastest of 3);
    ``drive``: the timed pieces before them (order-0 signatures, drive matrix). Returns
    ``(row, rho_0 curves)`` per path."""
    paths = (
        ("closed form (linear_solution -> W_E -> rho_0, jit(vmap))", closed_form_rho0),
        ("closed form (Gram in the modes of linear_solution)", closed_form_gram_rho0),
        ("expected rho_0 (predicted_rho0, no weights)", predicted),
    )
    out = []
    for name, fn in paths:
        jitted = jax.jit(functools.partial(fn, p))
        curve, compile_s, run_s = compiled_and_runs(jitted, M, jnp.asarray(p.gammas), runs=3)
        pieces = {**drive, "jit_call": run_s}
        row = {
            "path": name,
            "compile_s": compile_s,
            "steady_s": sum(pieces.values()),
            "steady_cpu_s": cpu_total(pieces),
            "first_s": compile_s + sum(pieces.values()),
            "pieces_steady": pieces,
        }
        print(f"  {name}: compile {compile_s:.3f} s; {_fmt(pieces)}", flush=True)
        out.append((row, np.asarray(curve)))
    return out


def eager_closed_forms(p: Part1, M, drive: dict, trajectory) -> tuple[list, float]:
    """The closed forms computed eagerly from the initial weights ``d^-gamma Z`` (nothing
    compiled ahead: the first call is the cold call, the later ones steady). The initial weights
    are an input of every theory (training draws the same ones inside its compiled lanes): their
    draw is timed on its own and added to the "first" column. Returns the ``(row, curves)``
    pairs and the largest gap between ``d^-gamma Z`` and the training's snapshot 0."""
    Z, draw_s = timed(unit_draw, p.ds)
    scaled = np.asarray(float(D)) ** -p.gammas[:, None, None] * Z[0]
    scaled_init = float(np.max(np.abs(scaled - trajectory.W_E[:, 0])))
    print(f"  d^-gamma Z vs training snapshot 0: max |diff| = {scaled_init:.1e}", flush=True)
    paths = (
        (
            "closed form in NumPy, from the initial weights (nothing compiled)",
            numpy_closed_form_rho0,
        ),
        ("closed form with softmax feedback, eager JAX per lane", feedback_rho0),
    )
    out = []
    for name, fn in paths:
        curve, first_s = timed(fn, p, M, p.gammas, Z)
        steady_s = min((timed(fn, p, M, p.gammas, Z)[1] for _ in range(2)), key=float)
        pieces = {**drive, "call": steady_s}
        row = {
            "path": name,
            "compile_s": float(first_s - steady_s + draw_s),
            "steady_s": sum(pieces.values()),
            "steady_cpu_s": cpu_total(pieces),
            "first_s": sum(drive.values()) + first_s + draw_s,
            "pieces_steady": pieces,
            "initial_draw_s": float(draw_s),
            "note": "compile_s: first call minus steady call, plus the eager draw of Z",
        }
        print(f"  {name}: draw of Z {draw_s:.3f} s, first call {first_s:.3f} s; {_fmt(pieces)}")
        out.append((row, np.asarray(curve)))
    return out, scaled_init


def ode_paths(p: Part1, variants: tuple[str, ...], trajectory) -> tuple[list, float]:
    """The signature-flow ODE paths (``--ode`` variants), after the jitted initial states
    (checked against the training's snapshot 0). Returns the ``(row, curves)`` pairs and that
    check's largest gap."""
    gammas = jnp.asarray(p.gammas)
    initial = jax.jit(jax.vmap(initial_weights_fn(p.ds)))
    y0, init_compile, init_run = compiled_and_runs(initial, gammas, runs=3)
    same_init = float(
        max(
            np.max(np.abs(np.asarray(y0["W_E"]) - trajectory.W_E[:, 0])),
            np.max(np.abs(np.asarray(y0["W_U"]) - trajectory.W_U[:, 0])),
        )
    )
    print(f"  initial states vs training snapshot 0: max |diff| = {same_init:.1e}", flush=True)
    occurring = dict(alphas=p.numbers, context=p.numbers, labels=np.unique(p.ds.labels))
    out = []
    for variant in variants:
        tokens, batching = variant.split("/")
        subsets = occurring if tokens.startswith("occurring") else {}
        sigs1, sig1_s = timed(signatures.signature_set, p.ds, 1, **subsets)
        sparse = not tokens.endswith("-dense")  # the library's default: sparse where it pays
        flow = flows.ffn_signature_flow(sigs1, COEFFICIENTS, sparse=sparse)
        solver = ode_solver(flow, p.ts, batching, rho0=p.rho0, rows=p.numbers)
        if batching == "sweep":
            (curve, ok, num_steps), first_s = timed(solver, y0)
            (curve, ok, num_steps), run_s = timed(solver, y0)
            compile_s = float(first_s - run_s)
        else:
            (curve, ok, num_steps), compile_s, run_s = compiled_and_runs(solver, y0)
        pieces = {"signatures_order1": sig1_s, "initial_weights": init_run, "jit_call": run_s}
        stats = lane_stats(ok, num_steps)
        axes = "all V tokens" if tokens == "full" else "occurring tokens"
        axes += ", sparse φ^{y;1}" if sparse else ", dense φ^{y;1}"
        name = f"signature-flow ODE ({axes}, jit({batching}))"
        row = {
            "path": name,
            "compile_s": compile_s + init_compile,
            "steady_s": sum(pieces.values()),
            "steady_cpu_s": cpu_total(pieces),
            "first_s": compile_s + init_compile + sum(pieces.values()),
            "pieces_steady": pieces,
            "solver": stats,
        }
        print(f"  {name}: compile {compile_s:.2f} s; {_fmt(pieces)}", flush=True)
        print(f"    solver: {stats}", flush=True)
        out.append((row, np.asarray(curve)))
    return out, same_init


def agreement_before_escape(p: Part1, trajectory, curves: dict, rho_train) -> tuple:
    """The sanity check: each theory's largest gap to the training rho_0 before the training
    lane's escape (`closed_form.logit_scale` crossing `THRESHOLD`), over the first half of the
    plateau and over all t. Returns ``(escape times [G], {path: gaps})``."""
    ts_np = p.ts_np
    scale = closed_form.logit_scale(
        jnp.asarray(trajectory.W_E), jnp.asarray(trajectory.W_U), p.ds.tokens, COEFFICIENTS
    )
    escape = np.array([closed_form.crossing_time(ts_np, s, THRESHOLD) for s in np.asarray(scale)])
    end = np.where(np.isfinite(escape), escape, ts_np[-1])[:, None]
    before, early = ts_np[None, :] <= end, ts_np[None, :] <= 0.5 * end
    agreement = {}
    for name, curve in curves.items():
        gap = np.abs(curve - rho_train)
        agreement[name] = {
            "max_abs_before_escape": float(np.max(gap[before])),
            "max_abs_first_half_of_plateau": float(np.max(gap[early])),
            "max_abs_all_t": float(np.max(gap)),
        }
    print(
        f"  escape (training, logit scale >= {THRESHOLD}): t in "
        f"[{np.nanmin(escape):.1f}, {np.nanmax(escape):.1f}], "
        f"{int(np.isfinite(escape).sum())}/{p.gammas.size} lanes escape by t = {ts_np[-1]:g}",
        flush=True,
    )
    for name, gaps in agreement.items():
        print(f"  |rho_0 {name} - training|: {_fmt(gaps, digits=4, unit='')}", flush=True)
    return escape, agreement


# --------------------------------------------------------------------------------------------
# part 2: cost against n


def tiled(ds: TokenDataset, times: int) -> TokenDataset:
    """``ds`` repeated ``times`` times: n grows, every signature stays the same."""
    return TokenDataset(
        tokens=np.tile(ds.tokens, (times, 1)),
        labels=np.tile(ds.labels, times),
        vocab_size=ds.vocab_size,
        groups=ds.groups,
        name=f"{ds.name}_x{times}",
        params={**ds.params, "tile": times},
    )


def part2(steps: int, lanes: int, tile: int) -> dict:
    base = tasks.make("mod", N=40)
    datasets = [base, tiled(base, tile)]
    gammas = np.linspace(*GAMMA_RANGE, lanes) if lanes > 1 else np.asarray([1.0])
    config = train_config(steps)
    ts = jnp.asarray(LR * np.asarray(config.snapshots, dtype=np.float64))
    print(
        f"part 2: task mod N=40 (n={base.n}) and tiled x{tile} (n={datasets[1].n}); "
        f"{lanes} lane(s), gamma {gammas.tolist()}, {steps} GD steps = ODE to t = {LR * steps:g}",
        flush=True,
    )
    rows, sigs_seen = [], []
    for ds in datasets:
        sigs1, sig_s = timed(signatures.signature_set, ds, 1)
        sigs_seen.append(sigs1)
        field = frozen_past(flows.ffn_signature_flow(sigs1, COEFFICIENTS), cap=CAP)
        y0 = jax.jit(jax.vmap(initial_weights_fn(ds)))(jnp.asarray(gammas))
        solution, ode_compile, ode_run = compiled_and_runs(
            ode_solver(field, ts, "vmap"), y0, runs=3
        )
        train_s, train_compile = [], []
        for _ in range(2):
            _, seconds, compiled_s = timed_training(ds, config, gammas)
            train_s.append(seconds)
            train_compile.append(compiled_s)
        row = {
            "n": ds.n,
            "signatures_s": sig_s,
            "ode_compile_s": ode_compile,
            "ode_steady_s": ode_run,
            "ode_steady_cpu_s": ode_run.cpu,
            "ode_solver": lane_stats(solution.ok, solution.num_steps),
            "train_first_s": train_s[0],
            "train_compile_s": train_compile[0],
            "train_steady_s": train_s[1],
            "train_steady_cpu_s": train_s[1].cpu,
        }
        rows.append(row)
        print(f"  n={ds.n}: {_fmt({k: v for k, v in row.items() if k.endswith('_s')})}")
        print(f"    ODE solver: {row['ode_solver']}", flush=True)
    difference = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(
            (*sigs_seen[0].label, *sigs_seen[0].cooccurrence, sigs_seen[0].r),
            (*sigs_seen[1].label, *sigs_seen[1].cooccurrence, sigs_seen[1].r),
            strict=True,
        )
    )
    print(f"  signatures of the two datasets: max |diff| = {difference:.1e}", flush=True)
    small, large = rows
    growth = {
        key: large[key] / small[key]
        for key in (
            "signatures_s",
            "ode_steady_s",
            "ode_steady_cpu_s",
            "train_steady_s",
            "train_steady_cpu_s",
            "train_first_s",
        )
    }
    print(f"  growth n x{large['n'] // small['n']}: {_fmt(growth, digits=2, unit='x')}")
    return {
        "setup": {
            "task": "mod",
            "N": 40,
            "tile": tile,
            "lanes": lanes,
            "gammas": gammas.tolist(),
            "steps": steps,
            "t_end": LR * steps,
        },
        "rows": rows,
        "signature_max_abs_diff": difference,
        "growth": growth,
    }


# --------------------------------------------------------------------------------------------


def _fmt(numbers: dict, digits: int = 3, unit: str = " s") -> str:
    return ", ".join(f"{k} {v:.{digits}f}{unit}" for k, v in numbers.items())


def print_table(one: dict, two: dict) -> None:
    head = ("compile s", "steady s", "first s", "cpu s", "x steady", "x first", "x cpu")
    print(f"\n{'path':56s} " + " ".join(f"{h:>9s}" for h in head))
    for row in one["rows"]:
        ratios = [
            f"{row[k]:.1f}" if k in row else ""
            for k in ("ratio_steady", "ratio_first", "ratio_steady_cpu")
        ]
        print(
            f"{row['path']:56s} {row['compile_s']:9.3f} {row['steady_s']:9.3f} "
            f"{row['first_s']:9.3f} {row['steady_cpu_s']:9.3f} "
            + " ".join(f"{r:>9s}" for r in ratios)
        )
    print("(cpu s: process CPU seconds of the steady path; x: training / this row)")
    if not two["rows"]:
        return
    head = ("signatures s", "ODE compile s", "ODE steady s", "ODE cpu s", "train compile s")
    head += ("train first s", "train steady s", "train cpu s")
    print(f"\n{'n':>8s} " + " ".join(f"{h:>14s}" for h in head))
    keys = ("signatures_s", "ode_compile_s", "ode_steady_s", "ode_steady_cpu_s")
    keys += ("train_compile_s", "train_first_s", "train_steady_s", "train_steady_cpu_s")
    for row in two["rows"]:
        print(f"{row['n']:8d} " + " ".join(f"{row[k]:14.3f}" for k in keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=64, help="gammas in part 1")
    parser.add_argument(
        "--ode",
        default="occurring/map,occurring-dense/sweep,occurring/sweep",
        help=f"ODE rows of part 1, comma-separated, of {','.join(ODE_VARIANTS)}",
    )
    parser.add_argument("--part2-steps", type=int, default=50)
    parser.add_argument("--part2-lanes", type=int, default=1)
    parser.add_argument("--tile", type=int, default=100)
    parser.add_argument("--skip-part2", action="store_true")
    parser.add_argument("--json", help="also write the JSON record here")
    args = parser.parse_args()
    variants = tuple(args.ode.split(","))
    if not set(variants) <= set(ODE_VARIANTS):
        parser.error(f"--ode must list variants of {ODE_VARIANTS}; got {args.ode!r}")

    start = time.perf_counter()
    load_start, busy_start = os.getloadavg(), other_busy_processes()
    print(f"{os.cpu_count()} CPU cores, devices {jax.devices()}, load average {load_start}")
    if busy_start:
        print(f"note: other busy processes at start: {busy_start}", flush=True)
    one = part1(args.lanes, variants)
    two = (
        part2(args.part2_steps, args.part2_lanes, args.tile)
        if not args.skip_part2
        else {"rows": []}
    )
    load_end, busy_end = os.getloadavg(), other_busy_processes()
    print_table(one, two)
    goals = {}
    for row in one["rows"][1:]:
        ode_row = row["path"].startswith("signature-flow ODE")
        goal, ratio = (GOAL_ODE, row["ratio_steady"]) if ode_row else (GOAL_CLOSED_FORM, None)
        if not ode_row:
            ratio = row["ratio_first"]  # the closed-form goal counts compile
        goals[row["path"]] = {"goal": goal, "ratio": ratio, "met": bool(ratio >= goal)}
        print(
            f"goal {goal:.0f}x ({'steady' if ode_row else 'first call, compile included'}): "
            f"{'met' if ratio >= goal else 'NOT met'} at {ratio:.1f}x  {row['path']}"
        )
    met = any(g["met"] for path, g in goals.items() if path.startswith("closed form"))
    print(f"load average at end {load_end}; total {time.perf_counter() - start:.0f} s")
    if busy_end:
        print(f"note: other busy processes at end: {busy_end}")
    record = {
        "part1": one,
        "part2": two,
        "goal_closed_form_met": met,
        "goals": goals,
        "load_average": {"start": load_start, "end": load_end},
        "other_busy_processes": {"start": busy_start, "end": busy_end},
        "total_s": time.perf_counter() - start,
        "environment": results.environment(),
    }
    text = json.dumps(record, indent=1, default=float)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
