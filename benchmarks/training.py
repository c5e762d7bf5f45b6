"""Benchmark: the vmapped training sweep against sequential runs, PyTorch and the matmul peak.

Setup (the reference task): `add`, N=40 (n=1600 sequences, L=2, V=81), `FFN` d=128 with ReLU,
full-batch GD (lr 0.5), 2000 steps, float32, 64 lanes = 16 gammas in [0.5, 1.5] x 4 seeds,
5 snapshots (steps 0, 500, ..., 2000) without recorded weights, so recording is not the cost.

Measured in one run:

(a) `sweep.train_sweep` over all 64 lanes (its first call, so it includes tracing and
    compilation; see (d)), with its default lane layout on this platform (on CPU: lane by lane,
    one call of a one-lane program per lane, one concurrent call per core; ``--lanes-per-batch``
    and ``--concurrent-calls`` override it; the layout used is recorded), against the same runs
    one after another with ``jax.jit(train.make_run(...))`` compiled once (its compile, the
    first call, is reported separately and excluded from the loop time). The loop times
    ``--loop-lanes`` lanes (default 8, spread over the grid) and extrapolates linearly to 64;
    the output says so.
(b) The sweep against plain PyTorch (CPU, threads = core count): the same model
    f = W_U relu(sum_i W_E[x_i]), the same weighted cross-entropy, the same initial weights
    (copied from the JAX lanes), manual GD ``p -= lr * p.grad``, one lane after another, timed on
    the same lane subset and extrapolated. Extra rows: a hand-batched torch version (all 64 lanes
    in one set of batched tensors, timed over ``--batched-steps`` steps and extrapolated to the
    full step count) and, with ``--torch-compile``, the loop with a ``torch.compile``d step.
    Skipped with a message where torch is not installed (``pip install torch``, CPU wheel).
(c) Achieved FLOP/s of the sweep as a fraction of this machine's dense float32 matmul rate
    (best of 5 jitted 2048x2048 ``jnp.matmul``, 2*2048^3 FLOP each). FLOPs are counted
    analytically, per GD step and lane:
        F_step = 6 n d V  (logits h@W_U^T forward, and dW_U, dh backward: 2 n d V each)
               + 2 n L d  (gather-sum of embeddings forward, scatter-add into W_E backward)
               + 4 V d    (the update of W_E and W_U)
    plus one forward (2 n d V + n L d) per snapshot; softmax, cross-entropy and ReLU elementwise
    work (~10 n V) is left out. XLA's cost analysis of one vmapped GD step (written as
    `train.make_run` writes it: weighted loss, value_and_grad, update, finiteness select;
    lowered and compiled for 64 lanes) times the step count is reported next to it (it leaves
    out the 5 snapshot forwards, ~0.01%); XLA counts a loop body once, so the whole compiled
    sweep cannot be analysed directly.
    Roofline: the jitted single run's FLOP rate (analytic count / loop time) as a fraction of the
    matmul rate, and the largest ratios (a) and (b) could reach on this machine: the time of a
    sweep running exactly at the matmul rate is T_peak = analytic FLOPs / rate, so the bound for
    (a) is loop time / T_peak (= matmul rate / loop FLOP rate) and for (b) torch-loop time /
    T_peak. The same numbers are also given against the rate of the step's own matmul shapes
    ([n, d] x [d, V], [n, V] x [V, d], [V, n] x [n, d], one lane, timed in a jitted loop): what
    these skinny matmuls reach in one stream of work, which concurrent calls can exceed (so it
    is a reference, not a bound).
    Machine load: besides the load average and ps's busy processes at start and end, the CPU
    time other processes used during the whole script (/proc/stat busy time minus this
    process's, Linux only), as a number of cores.
(d) Compile time as a share of the sweep's first call: JAX's own timings of tracing, lowering
    and XLA compilation during that call (its ``jax.monitoring`` duration events), cross-checked
    by a cold/warm pair of the same sweep at ``--short-steps`` steps (same program, compile time
    does not depend on the step count). ``--warm`` also times a second full call (another ~3-5
    min on 2 cores) and uses it as the steady-state sweep time.

No speed is asserted. Usage: python benchmarks/training.py [--loop-lanes 8] [--warm]
[--lanes-per-batch K] [--concurrent-calls C] [--no-torch] [--torch-compile] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _machine import (  # benchmarks/ is sys.path[0] when run as a script
    compile_log,
    matmul_peak,
    other_busy_processes,
)
from flax import nnx

from ctx_staircase import results, sweep, tasks, train
from ctx_staircase.dataset import TokenDataset

TASK, N, D, STEPS, LR = "add", 40, 128, 2000, 0.5
GAMMAS = tuple(np.linspace(0.5, 1.5, 16).tolist())
SEEDS = (0, 1, 2, 3)
N_SNAPSHOTS = 5
GOALS = {"a": 5.0, "b": 10.0, "c": 0.25}


# --------------------------------------------------------------------------------------------
# helpers


def config(steps: int) -> train.TrainConfig:
    snapshots = tuple(int(s) for s in np.linspace(0, steps, N_SNAPSHOTS).round())
    return train.TrainConfig(
        optimizer="gd", lr=LR, steps=steps, snapshots=snapshots, record_weights=False
    )


def run_sweep(ds, cfg, lanes_per_batch=None, concurrent_calls=None):
    return sweep.train_sweep(
        "ffn",
        ds,
        cfg,
        gammas=GAMMAS,
        seeds=SEEDS,
        layout=sweep.Layout(lanes_per_batch=lanes_per_batch, concurrent_calls=concurrent_calls),
        d=D,
        activation="relu",
    )


def lane_states(ds, lanes):
    """Initial state and run key of each (gamma, seed) lane, exactly as the sweep makes them."""
    out = []
    for gamma, seed in lanes:
        key = jax.random.key(seed)
        _, state = train.init_state(
            "ffn", ds, gamma=jnp.float32(gamma), seed=key, d=D, activation="relu"
        )
        out.append((state, jax.random.fold_in(key, 1)))
    return out


def weights_of(graphdef, state) -> tuple[np.ndarray, np.ndarray]:
    module = nnx.merge(graphdef, state)
    return np.asarray(module.W_E[...]), np.asarray(module.W_U[...])


def step_matmul_rate(n: int, V: int, d: int, steps: int = 200, repeats: int = 5) -> dict:
    """FLOP/s of one lane-step's three matmul shapes (logits forward, dh and dW_U backward), run
    back to back ``steps`` times in one jitted loop (best of ``repeats``)."""
    keys = jax.random.split(jax.random.key(2), 3)
    h = jax.random.normal(keys[0], (n, d), jnp.float32)
    g = jax.random.normal(keys[1], (n, V), jnp.float32)
    w = jax.random.normal(keys[2], (V, d), jnp.float32)

    def body(_, carry):
        h, g, w = carry
        logits, dh, dw = h @ w.T, g @ w, g.T @ h
        return h + 1e-9 * dh, g + 1e-9 * logits, w + 1e-9 * dw

    loop = jax.jit(lambda *xs: jax.lax.fori_loop(0, steps, body, xs))
    jax.block_until_ready(loop(h, g, w))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(loop(h, g, w))
        times.append(time.perf_counter() - start)
    flops = 6.0 * n * d * V * steps
    return {
        "shapes": [[n, d, V], [n, V, d], [V, n, d]],
        "steps": steps,
        "best_s": min(times),
        "flops_per_s": flops / min(times),
    }


def cpu_counters() -> tuple[int, int, int] | None:
    """(all CPUs' busy ticks, all ticks, this process's ticks incl. waited-for children), or None
    where /proc is missing."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    idle = ticks[3] + ticks[4]  # idle + iowait
    own = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return sum(ticks) - idle, sum(ticks), own


def other_cores_used(start, end) -> float | None:
    """Average number of cores other processes kept busy between two `cpu_counters`."""
    if start is None or end is None or end[1] == start[1]:
        return None
    busy, total, own = (b - a for a, b in zip(start, end, strict=True))
    return max(0.0, (busy - own) / total) * (os.cpu_count() or 1)


def analytic_flops(n: int, L: int, V: int, d: int) -> dict:
    step = 6 * n * d * V + 2 * n * L * d + 4 * V * d
    record = 2 * n * d * V + n * L * d
    return {"step_per_lane": step, "record_per_lane": record}


def xla_step_flops(ds, graphdef, states) -> float | None:
    """XLA's flop count of one vmapped GD step (train.make_run's step, optimizer 'gd')."""
    tokens, labels = jnp.asarray(ds.tokens), jnp.asarray(ds.labels)
    probabilities = jnp.asarray(ds.probabilities, jnp.float32)

    def weighted_loss(state):
        logits = nnx.merge(graphdef, state)(tokens)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.sum(probabilities * nll)

    def step(state, lr):
        loss, grads = jax.value_and_grad(weighted_loss)(state)
        new = jax.tree.map(lambda p, g: p - lr * g, state, grads)
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(new)])
        )
        return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, state)

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    lrs = jnp.full(len(states), LR, jnp.float32)
    analysis = jax.jit(jax.vmap(step)).lower(stacked, lrs).compile().cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    return float(analysis["flops"])


# --------------------------------------------------------------------------------------------
# PyTorch baselines


def torch_setup(ds):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    data = {
        "tokens": torch.as_tensor(np.array(ds.tokens), dtype=torch.long),
        "labels": torch.as_tensor(np.array(ds.labels), dtype=torch.long),
        "weights": torch.as_tensor(np.array(ds.probabilities), dtype=torch.float32),
    }
    return torch, data


def torch_step(W_E, W_U, tokens, labels, weights, lr: float):
    """One full-batch GD step of one lane: weighted cross-entropy, backward, p -= lr * p.grad."""
    import torch

    h = W_E[tokens].sum(1)  # [n, d]
    logits = torch.relu(h) @ W_U.T  # [n, V]
    nll = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    loss = (weights * nll).sum()
    loss.backward()
    with torch.no_grad():
        W_E -= lr * W_E.grad
        W_U -= lr * W_U.grad
    W_E.grad = None
    W_U.grad = None
    return loss


def torch_run(torch, data, W_E, W_U, steps: int, lr: float, snapshots, step=torch_step):
    """One lane: plain PyTorch, manual GD. Returns the weighted loss at each snapshot (the loss
    of the parameters after that many steps, as the JAX run records it)."""
    tokens, labels, weights = data["tokens"], data["labels"], data["weights"]
    W_E = torch.from_numpy(np.array(W_E)).requires_grad_()
    W_U = torch.from_numpy(np.array(W_U)).requires_grad_()

    def loss_now():
        with torch.no_grad():
            logits = torch.relu(W_E[tokens].sum(1)) @ W_U.T
            nll = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
            return float((weights * nll).sum())

    losses, wanted = [], set(snapshots)
    for i in range(steps):
        if i in wanted:
            losses.append(loss_now())
        step(W_E, W_U, tokens, labels, weights, lr)
    if steps in wanted:
        losses.append(loss_now())
    return np.asarray(losses)


def torch_batched(torch, data, W_E, W_U, steps: int, lr: float):
    """All lanes at once in batched tensors W_E, W_U [B, V, d] (a hand-vmapped torch)."""
    tokens, labels, weights = data["tokens"], data["labels"], data["weights"]
    W_E = torch.from_numpy(np.array(W_E)).requires_grad_()
    W_U = torch.from_numpy(np.array(W_U)).requires_grad_()
    lanes, V = W_E.shape[0], W_E.shape[1]
    repeated = labels.repeat(lanes)
    for _ in range(steps):
        h = W_E[:, tokens].sum(2)  # [B, n, d]
        logits = torch.bmm(torch.relu(h), W_U.transpose(1, 2))  # [B, n, V]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, V), repeated, reduction="none"
        ).view(lanes, -1)
        (weights * nll).sum().backward()  # lanes are independent: their gradients separate
        with torch.no_grad():
            W_E -= lr * W_E.grad
            W_U -= lr * W_U.grad
        W_E.grad = None
        W_U.grad = None
    with torch.no_grad():
        h = W_E[:, tokens].sum(2)
        logits = torch.bmm(torch.relu(h), W_U.transpose(1, 2))
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, V), repeated, reduction="none"
        ).view(lanes, -1)
        return (weights * nll).sum(1).numpy()


# --------------------------------------------------------------------------------------------


class Bench(NamedTuple):
    """What every part of the benchmark reads: the flags, the data set, the training setup and
    the lanes: ``grid`` the (gamma, seed) lanes in the sweep's gamma-major order, ``subset`` the
    lanes the sequential loops time, whose times ``scale`` extrapolates to all lanes (as
    ``loop_note`` says)."""

    args: argparse.Namespace
    ds: TokenDataset
    cfg: train.TrainConfig
    grid: list[tuple[float, int]]
    subset: np.ndarray
    scale: float
    loop_note: str

    @classmethod
    def make(cls, args: argparse.Namespace) -> Bench:
        grid = [(g, s) for g in GAMMAS for s in SEEDS]
        total = len(grid)
        subset = np.unique(np.linspace(0, total - 1, min(args.loop_lanes, total)).round())
        subset = subset.astype(int)
        scale = total / subset.size
        loop_note = (
            f"{subset.size} of {total} lanes timed, x{scale:g} (linear extrapolation)"
            if subset.size < total
            else f"all {total} lanes timed"
        )
        ds = tasks.make(TASK, N=N)
        return cls(args, ds, config(args.steps), grid, subset, scale, loop_note)

    @property
    def total_lanes(self) -> int:
        return len(self.grid)

    def extrapolated(self, seconds: float, **more) -> dict:
        """A loop's record: its ``seconds`` over the subset, scaled to all lanes, and ``more``."""
        return {"seconds_subset": seconds, "seconds_all_lanes": seconds * self.scale, **more}

    def sweep(self, cfg: train.TrainConfig) -> sweep.SweepResult:
        return run_sweep(self.ds, cfg, self.args.lanes_per_batch, self.args.concurrent_calls)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument(
        "--loop-lanes", type=int, default=8, help="lanes timed in the sequential loops (<= 64)"
    )
    parser.add_argument("--short-steps", type=int, default=20, help="cold/warm compile check")
    parser.add_argument("--batched-steps", type=int, default=200, help="batched torch steps")
    parser.add_argument("--warm", action="store_true", help="also time a second full sweep call")
    parser.add_argument(
        "--lanes-per-batch",
        type=int,
        default=None,
        help="lanes vmapped together in the sweep (default: sweep.default_lanes_per_batch)",
    )
    parser.add_argument(
        "--concurrent-calls",
        type=int,
        default=None,
        help="concurrent calls of the sweep (default: sweep.default_concurrent_calls)",
    )
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--torch-compile", action="store_true", help="extra torch.compile row")
    parser.add_argument("--json", help="also write the JSON record here")
    return parser.parse_args()


def sweep_layout(args: argparse.Namespace, total_lanes: int) -> dict:
    """The lane layout the sweep will use (its defaults or the flags; `sweep.plan`), printed:
    concurrent calls and lanes vmapped together."""
    platform, n_devices = jax.devices()[0].platform, len(jax.devices())
    layout = sweep.Layout(None, args.lanes_per_batch, args.concurrent_calls)
    planned = sweep.plan(layout, total_lanes, platform, n_devices)
    chosen = args.lanes_per_batch is not None or args.concurrent_calls is not None
    chosen = "set on the command line" if chosen else "sweep defaults"
    if planned.lane_by_lane:  # CPU: one lane per call
        print(
            f"sweep layout: lane by lane, {planned.calls} concurrent call(s) of one lane "
            f"on one device ({chosen})",
            flush=True,
        )
    else:
        print(
            f"sweep layout: {planned.calls} concurrent call(s) of {planned.per_call} "
            f"lanes per device, vmapped {planned.lanes_per_batch} at a time ({chosen})",
            flush=True,
        )
    return {"lanes_per_batch": planned.lanes_per_batch, "concurrent_calls": planned.calls}


def machine_at_start() -> dict:
    """Other busy processes, the load average and the CPU counters before the work, printed."""
    others = other_busy_processes()
    load_start = os.getloadavg()
    counters = cpu_counters()
    print(f"load average at start {load_start}", flush=True)
    if others:
        print(f"note: other busy processes at start: {others}", flush=True)
    return {"others": others, "load": load_start, "counters": counters}


def matmul_rates(n: int, V: int) -> tuple[dict, dict]:
    """(c) The machine's dense matmul rate and the rate of a lane-step's matmul shapes, printed
    (measured again after the JAX runs by `matmul_rates_again`)."""
    peak = matmul_peak()
    print(
        f"matmul 2048^2 float32: best {peak['best_s'] * 1e3:.1f} ms, "
        f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s",
        flush=True,
    )
    shaped = step_matmul_rate(n, V, D)
    print(f"one lane-step's matmul shapes: {shaped['flops_per_s'] / 1e9:.1f} GFLOP/s", flush=True)
    return peak, shaped


def matmul_rates_again(n: int, V: int, peak_start: dict, shaped_start: dict) -> dict:
    """(c) Both rates again, in case the machine was busier at the start; the faster of the two
    measurements is used. Returns ``{"peak": {start, end, used}, "shaped": {...}}``."""
    peak_end = matmul_peak()
    peak = max(peak_start, peak_end, key=lambda row: row["flops_per_s"])
    shaped_end = step_matmul_rate(n, V, D)
    shaped = max(shaped_start, shaped_end, key=lambda row: row["flops_per_s"])
    print(
        f"matmul 2048^2 float32 again: {peak_end['flops_per_s'] / 1e9:.1f} GFLOP/s; using "
        f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s; step matmul shapes again "
        f"{shaped_end['flops_per_s'] / 1e9:.1f}, using {shaped['flops_per_s'] / 1e9:.1f} GFLOP/s",
        flush=True,
    )
    return {
        "peak": {"start": peak_start, "end": peak_end, "used": peak},
        "shaped": {"start": shaped_start, "end": shaped_end, "used": shaped},
    }


def time_short_sweeps(bench: Bench) -> tuple[float, float]:
    """(d) The compile-time cross-check: a cold and a warm call of the sweep at a few steps."""
    short = config(bench.args.short_steps)
    start = time.perf_counter()
    bench.sweep(short)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    bench.sweep(short)
    warm = time.perf_counter() - start
    print(
        f"short sweep ({bench.args.short_steps} steps): cold {cold:.2f} s, warm {warm:.2f} s",
        flush=True,
    )
    return cold, warm


def time_sweep(bench: Bench) -> dict:
    """(a) The sweep's first call (compile included, JAX's compile records summed) and, with
    ``--warm``, a second call; ``run_s`` is the steady-state time used in every ratio."""
    with compile_log() as compile_records:
        start = time.perf_counter()
        result = bench.sweep(bench.cfg)
        first = time.perf_counter() - start
    compile_s = sum(seconds for _, seconds in compile_records)
    status = dict(collections.Counter(str(s) for s in result.status))
    print(
        f"sweep first call: {first:.1f} s (JAX compile records {compile_s:.2f} s); status {status}",
        flush=True,
    )
    second = None
    if bench.args.warm:
        start = time.perf_counter()
        bench.sweep(bench.cfg)
        second = time.perf_counter() - start
        print(f"sweep second call: {second:.1f} s", flush=True)
    return {
        "result": result,
        "first_call_s": first,
        "second_call_s": second,
        "compile_s_jax_records": compile_s,
        "run_s": second if second is not None else first - compile_s,
        "status": status,
    }


def time_jit_loop(bench: Bench, graphdef, lanes, sweep_loss: np.ndarray) -> dict:
    """(a) The subset's lanes one after another, ``jax.jit(train.make_run(...))`` compiled once
    (its first call timed apart), extrapolated to all lanes; checked against the sweep's loss
    ``[subset, S]``."""
    single = jax.jit(train.make_run(graphdef, bench.cfg))
    data = train.TrainData.from_dataset(bench.ds)
    lr = jnp.asarray(LR, jnp.float32)
    with compile_log() as single_records:
        start = time.perf_counter()
        jax.block_until_ready(single(lanes[0][0], lr, lanes[0][1], data))
        first = time.perf_counter() - start
    compile_s = sum(seconds for _, seconds in single_records)
    start = time.perf_counter()
    losses = []
    for state, key in lanes:
        trajectory = jax.block_until_ready(single(state, lr, key, data))
        losses.append(np.asarray(trajectory.loss))
    subset_s = time.perf_counter() - start
    check = loss_gap(losses, sweep_loss)
    detail = f" ({bench.loop_note}); first call {first:.2f} s (compile records {compile_s:.2f} s)"
    print(loop_line("jitted single-run loop", bench, subset_s, detail, check), flush=True)
    return bench.extrapolated(
        subset_s,
        first_call_s=first,
        compile_s_jax_records=compile_s,
        max_abs_loss_diff_vs_sweep=check,
    )


def loss_gap(losses, sweep_loss: np.ndarray) -> float:
    """The largest ``|loss - sweep loss|`` over the loop's lanes and snapshots (NaN-blind)."""
    return float(np.nanmax(np.abs(np.stack(losses) - sweep_loss)))


def loop_line(name: str, bench: Bench, subset_s: float, detail: str, check: float) -> str:
    """The printed row of a loop over the subset's lanes, extrapolated to all of them."""
    return (
        f"{name}: {subset_s:.1f} s for {bench.subset.size} lanes -> "
        f"{subset_s * bench.scale:.1f} s for {bench.total_lanes}{detail}; max |loss - sweep| "
        f"{check:.2e}"
    )


def flop_rows(bench: Bench, graphdef, all_states, sweep_run: float, peak: dict) -> dict:
    """(c) The sweep's FLOPs, analytic and by XLA's cost analysis of one vmapped step, and its
    achieved rate against the matmul ``peak``."""
    ds = bench.ds
    counts = analytic_flops(ds.n, ds.L, ds.vocab_size, D)
    analytic_total = bench.total_lanes * (
        bench.args.steps * counts["step_per_lane"]
        + len(bench.cfg.snapshots) * counts["record_per_lane"]
    )
    xla_step = xla_step_flops(ds, graphdef, all_states)
    totals = {"analytic": analytic_total}
    if xla_step is not None:
        totals["xla_cost_analysis"] = xla_step * bench.args.steps
    rows = {
        name: {
            "flops_total": total,
            "flops_per_s": total / sweep_run,
            "fraction_of_matmul_peak": total / sweep_run / peak["flops_per_s"],
        }
        for name, total in totals.items()
    }
    return {"per_lane": counts, "xla_step_all_lanes": xla_step, **rows}


# --------------------------------------------------------------------------------------------
# (b) PyTorch


def torch_part(bench: Bench, initial, every, sweep_loss: np.ndarray) -> dict:
    """(b) The PyTorch rows, or why they were skipped: the loop over the subset's ``initial``
    weights, all lanes' weights ``every`` batched, and with ``--torch-compile`` a compiled loop."""
    if bench.args.no_torch:
        print("torch: skipped (--no-torch)", flush=True)
        return {"available": False, "skipped": "--no-torch"}
    try:
        torch, data = torch_setup(bench.ds)
    except ImportError:
        skipped = "torch is not installed (pip install torch, CPU wheel)"
        print(f"torch: part (b) skipped: {skipped}", flush=True)
        return {"available": False, "skipped": skipped}
    info = {
        "available": True,
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "loop": torch_loop(bench, torch, data, initial, sweep_loss),
        "batched": torch_batched_row(bench, torch, data, every),
    }
    if bench.args.torch_compile:
        info["compiled_loop"] = torch_compiled_loop(bench, torch, data, initial)
    return info


def torch_loop(bench: Bench, torch, data, initial, sweep_loss: np.ndarray) -> dict:
    """The subset's lanes one after another in plain PyTorch (after a short warm-up)."""
    steps = bench.args.steps
    torch_run(torch, data, *initial[0], 5, LR, ())  # warm-up (allocator, kernels)
    start = time.perf_counter()
    losses = [torch_run(torch, data, *w, steps, LR, bench.cfg.snapshots) for w in initial]
    subset_s = time.perf_counter() - start
    finite = np.isfinite(np.stack(losses)[:, -1])
    check = loss_gap(losses, sweep_loss)
    print(loop_line("torch loop", bench, subset_s, "", check), flush=True)
    return bench.extrapolated(
        subset_s,
        lanes_timed=int(bench.subset.size),
        max_abs_loss_diff_vs_sweep=check,
        all_finite=bool(finite.all()),
    )


def torch_batched_row(bench: Bench, torch, data, every) -> dict:
    """Extra: all lanes in batched torch tensors, timed over fewer steps and extrapolated."""
    steps = bench.args.steps
    W_E = np.stack([w[0] for w in every])
    W_U = np.stack([w[1] for w in every])
    batched_steps = min(bench.args.batched_steps, steps)
    torch_batched(torch, data, W_E, W_U, 2, LR)  # warm-up
    start = time.perf_counter()
    torch_batched(torch, data, W_E, W_U, batched_steps, LR)
    batched_s = time.perf_counter() - start
    print(
        f"torch batched ({bench.total_lanes} lanes, {batched_steps} steps): "
        f"{batched_s:.1f} s -> {batched_s * steps / batched_steps:.1f} s for "
        f"{steps} steps",
        flush=True,
    )
    return {
        "steps_timed": batched_steps,
        "seconds_timed": batched_s,
        "seconds_full": batched_s * steps / batched_steps,
    }


def torch_compiled_loop(bench: Bench, torch, data, initial) -> dict:
    """Extra: the torch loop with a ``torch.compile``d step (its first call timed apart)."""
    compiled_step = torch.compile(torch_step)
    start = time.perf_counter()
    torch_run(torch, data, *initial[0], 3, LR, (), step=compiled_step)
    compile_first = time.perf_counter() - start
    start = time.perf_counter()
    for w in initial:
        torch_run(torch, data, *w, bench.args.steps, LR, (), step=compiled_step)
    compiled_s = time.perf_counter() - start
    print(
        f"torch.compile loop: {compiled_s:.1f} s for {bench.subset.size} lanes -> "
        f"{compiled_s * bench.scale:.1f} s; first call {compile_first:.1f} s",
        flush=True,
    )
    return bench.extrapolated(compiled_s, first_call_s=compile_first)


# --------------------------------------------------------------------------------------------
# summary


def summary_rows(bench: Bench, sweep_t: dict, short: tuple, jax_loop: dict, torch_info: dict):
    """The table's rows ``(measurement, seconds, note)``."""
    rows = [
        ("sweep, first call (compile incl.)", sweep_t["first_call_s"], "measured, 64 lanes"),
        (
            "sweep, compile (JAX records)",
            sweep_t["compile_s_jax_records"],
            "trace + lower + XLA compile",
        ),
        (
            "sweep, compile (short cold - warm)",
            short[0] - short[1],
            f"{bench.args.short_steps}-step sweep, cross-check",
        ),
        (
            "sweep, run",
            sweep_t["run_s"],
            "second call" if sweep_t["second_call_s"] is not None else "first call - compile",
        ),
        (
            "jitted single run: compile",
            jax_loop["compile_s_jax_records"],
            "first call, excluded from loop",
        ),
        ("jitted single-run loop", jax_loop["seconds_all_lanes"], bench.loop_note),
    ]
    if torch_info.get("available"):
        loop_note = bench.loop_note
        rows.append(("torch loop (manual GD)", torch_info["loop"]["seconds_all_lanes"], loop_note))
        b = torch_info["batched"]
        factor = bench.args.steps / b["steps_timed"]
        rows.append(
            (
                "torch batched (extra)",
                b["seconds_full"],
                f"{bench.total_lanes} lanes, {b['steps_timed']} steps timed, x{factor:g}",
            )
        )
        if "compiled_loop" in torch_info:
            rows.append(
                (
                    "torch.compile loop (extra)",
                    torch_info["compiled_loop"]["seconds_all_lanes"],
                    loop_note,
                )
            )
    return rows


def roofline(analytic_total: float, rates: dict, loop_all: float, sweep_run: float, torch_all):
    """What (a) and (b) would be if the sweep ran exactly at each measured matmul rate."""
    out = {"flop_count": "analytic", "flops_total": analytic_total}
    for name, rate in (
        ("matmul_2048", rates["peak"]["used"]),
        ("step_matmul_shapes", rates["shaped"]["used"]),
    ):
        seconds_at_rate = analytic_total / rate["flops_per_s"]
        out[name] = {
            "flops_per_s": rate["flops_per_s"],
            "sweep_seconds_at_rate": seconds_at_rate,
            "jit_loop_fraction_of_rate": analytic_total / loop_all / rate["flops_per_s"],
            "sweep_fraction_of_rate": analytic_total / sweep_run / rate["flops_per_s"],
            "max_a": loop_all / seconds_at_rate,
            "max_b": None if torch_all is None else torch_all / seconds_at_rate,
        }
    return out


def print_table(rows, lane_steps: int) -> None:
    print(f"\n{'measurement':38s} {'seconds':>9s} {'ms/lane-step':>13s}  note")
    for name, seconds, note in rows:
        per = (
            None if name.endswith("compile") or "compile (" in name else seconds / lane_steps * 1e3
        )
        per_text = f"{per:13.3f}" if per is not None else f"{'':13s}"
        print(f"{name:38s} {seconds:9.2f} {per_text}  {note}")


def print_flops(flops: dict, total_lanes: int, peak: dict) -> None:
    xla_step = flops["xla_step_all_lanes"]
    print(
        f"\nFLOPs per step per lane: analytic {flops['per_lane']['step_per_lane'] / 1e6:.2f} M"
        + (f", XLA {xla_step / total_lanes / 1e6:.2f} M" if xla_step else "")
    )
    for name in ("analytic", "xla_cost_analysis"):
        if name not in flops:
            continue
        row = flops[name]
        print(
            f"  {name:18s}: {row['flops_total'] / 1e12:.2f} TFLOP, "
            f"{row['flops_per_s'] / 1e9:.1f} GFLOP/s = "
            f"{100 * row['fraction_of_matmul_peak']:.1f}% of matmul peak "
            f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s"
        )


def print_goals(goals: dict, torch_info: dict, rooflines: dict) -> None:
    speedup_a, speedup_b = goals["a_speedup_vs_jit_loop"], goals["b_speedup_vs_torch_loop"]
    fraction = goals["c_fraction_of_matmul_peak"]
    print("\ngoals:")
    print(
        f"  (a) sweep vs jitted loop: {speedup_a:.2f}x (goal >= {GOALS['a']:g}x: "
        f"{'met' if speedup_a >= GOALS['a'] else 'not met'})"
    )
    if speedup_b is not None:
        print(
            f"  (b) sweep vs torch loop:  {speedup_b:.2f}x (goal >= {GOALS['b']:g}x: "
            f"{'met' if speedup_b >= GOALS['b'] else 'not met'})"
        )
    else:
        print(f"  (b) skipped: {torch_info.get('skipped')}")
    print(
        f"  (c) FLOP fraction: {100 * fraction:.1f}% (goal >= {100 * GOALS['c']:g}%: "
        f"{'met' if fraction >= GOALS['c'] else 'not met'})"
    )
    print(f"  (d) compile share of the sweep's first call: {100 * goals['d_compile_share']:.2f}%")
    print(
        "roofline (analytic FLOPs; a sweep running exactly at the rate; the step-shape rate is "
        "one stream, a reference, not a bound):"
    )
    for name in ("matmul_2048", "step_matmul_shapes"):
        row = rooflines[name]
        max_b = "n/a" if row["max_b"] is None else f"{row['max_b']:.2f}x"
        print(
            f"  {name:18s} {row['flops_per_s'] / 1e9:6.1f} GFLOP/s: sweep >= "
            f"{row['sweep_seconds_at_rate']:.1f} s; jitted single run at "
            f"{100 * row['jit_loop_fraction_of_rate']:.1f}%, sweep at "
            f"{100 * row['sweep_fraction_of_rate']:.1f}%; max (a) {row['max_a']:.2f}x "
            f"(goal {GOALS['a']:g}x), max (b) {max_b} (goal {GOALS['b']:g}x)"
        )


def machine_at_end(start: dict) -> dict:
    """The load, other busy processes and the cores other processes used since ``start``
    (`machine_at_start`), printed."""
    load_end = os.getloadavg()
    others_end = other_busy_processes()
    other_cores = other_cores_used(start["counters"], cpu_counters())
    print(f"  load average at end {load_end}; other busy processes at end: {others_end}")
    if other_cores is not None:
        print(
            f"  other processes used {other_cores:.2f} of {os.cpu_count()} cores on average "
            "during the script"
        )
    return {"others": others_end, "load": load_end, "other_cores": other_cores}


def setup_record(bench: Bench, layout: dict, machine: tuple[dict, dict]) -> dict:
    """The JSON record's ``setup``: the task, model, lanes, layout and the machine's state."""
    start, end = machine
    ds = bench.ds
    return {
        "task": TASK,
        "N": N,
        "n": ds.n,
        "L": ds.L,
        "V": ds.vocab_size,
        "d": D,
        "activation": "relu",
        "optimizer": "gd",
        "lr": LR,
        "steps": bench.args.steps,
        "gammas": [round(g, 4) for g in GAMMAS],
        "seeds": list(SEEDS),
        "lanes": bench.total_lanes,
        "lanes_per_batch": layout["lanes_per_batch"],
        "concurrent_calls": layout["concurrent_calls"],
        "devices": [str(device) for device in jax.devices()],
        "snapshots": list(bench.cfg.snapshots),
        "loop_lanes": bench.subset.tolist(),
        "cpu_count": os.cpu_count(),
        "other_busy_processes_start": start["others"],
        "other_busy_processes_end": end["others"],
        "load_average_start": start["load"],
        "load_average_end": end["load"],
        "other_processes_cores_used_during_run": end["other_cores"],
    }


# --------------------------------------------------------------------------------------------


def goals_of(sweep_t: dict, loop_all: float, flops: dict, torch_all: float | None) -> dict:
    """The four goals' measured values: (a) and (b) speed-ups, (c) FLOP fraction (XLA's count
    where there is one), (d) compile share of the first call."""
    sweep_run = sweep_t["run_s"]
    return {
        "a_speedup_vs_jit_loop": loop_all / sweep_run,
        "b_speedup_vs_torch_loop": None if torch_all is None else torch_all / sweep_run,
        "c_fraction_of_matmul_peak": flops.get("xla_cost_analysis", flops["analytic"])[
            "fraction_of_matmul_peak"
        ],
        "d_compile_share": sweep_t["compile_s_jax_records"] / sweep_t["first_call_s"],
    }


def sweep_record(sweep_t: dict, short: tuple[float, float], final_loss: np.ndarray) -> dict:
    return {
        "first_call_s": sweep_t["first_call_s"],
        "second_call_s": sweep_t["second_call_s"],
        "compile_s_jax_records": sweep_t["compile_s_jax_records"],
        "run_s": sweep_t["run_s"],
        "short_cold_s": short[0],
        "short_warm_s": short[1],
        "status": sweep_t["status"],
        "final_loss_min": float(final_loss.min()),
        "final_loss_max": float(final_loss.max()),
    }


# --------------------------------------------------------------------------------------------


def main() -> None:
    bench = Bench.make(parse_args())
    args, ds, cfg = bench.args, bench.ds, bench.cfg
    print(
        f"task {TASK} N={N} (n={ds.n}, L={ds.L}, V={ds.vocab_size}), FFN d={D} relu, gd lr={LR}, "
        f"{args.steps} steps, {bench.total_lanes} lanes, snapshots {list(cfg.snapshots)}, "
        f"{os.cpu_count()} CPU cores, devices {jax.devices()}",
        flush=True,
    )
    layout = sweep_layout(args, bench.total_lanes)
    machine_start = machine_at_start()
    peak_start, shaped_start = matmul_rates(ds.n, ds.vocab_size)
    short = time_short_sweeps(bench)
    sweep_t = time_sweep(bench)
    trajectory = sweep_t.pop("result").trajectory
    sweep_loss = trajectory.loss[bench.subset]
    graphdef, _ = train.init_state("ffn", ds, gamma=1.0, seed=0, d=D, activation="relu")
    lanes = lane_states(ds, [bench.grid[i] for i in bench.subset])  # init outside the timing
    jax_loop = time_jit_loop(bench, graphdef, lanes, sweep_loss)
    rates = matmul_rates_again(ds.n, ds.vocab_size, peak_start, shaped_start)
    all_states = [state for state, _ in lane_states(ds, bench.grid)]
    flops = flop_rows(bench, graphdef, all_states, sweep_t["run_s"], rates["peak"]["used"])
    torch_info = torch_part(
        bench,
        [weights_of(graphdef, state) for state, _ in lanes],
        [weights_of(graphdef, state) for state in all_states],
        sweep_loss,
    )

    loop_all = jax_loop["seconds_all_lanes"]
    torch_all = torch_info["loop"]["seconds_all_lanes"] if torch_info.get("available") else None
    goals = goals_of(sweep_t, loop_all, flops, torch_all)
    analytic = flops["analytic"]["flops_total"]
    rooflines = roofline(analytic, rates, loop_all, sweep_t["run_s"], torch_all)
    rows = summary_rows(bench, sweep_t, short, jax_loop, torch_info)
    print_table(rows, bench.total_lanes * args.steps)
    print_flops(flops, bench.total_lanes, rates["peak"]["used"])
    print_goals(goals, torch_info, rooflines)
    final_loss = trajectory.loss[:, -1]
    print(
        f"  sweep status {sweep_t['status']}; final loss {final_loss.min():.4f} .. "
        f"{final_loss.max():.4f}; loop check max |loss diff| "
        f"{jax_loop['max_abs_loss_diff_vs_sweep']:.1e}"
    )
    machine_end = machine_at_end(machine_start)

    environment = results.environment()
    if torch_info.get("available"):
        environment["packages"]["torch"] = torch_info["version"]
    record = {
        "setup": setup_record(bench, layout, (machine_start, machine_end)),
        "matmul_peak": rates["peak"],
        "step_matmul_rate": rates["shaped"],
        "roofline": rooflines,
        "sweep": sweep_record(sweep_t, short, final_loss),
        "jax_loop": jax_loop,
        "torch": torch_info,
        "flops": flops,
        "goals": goals,
        "environment": environment,
    }
    print(json.dumps(record, indent=1, default=float))
    if args.json:
        results.write_json(args.json, record)


if __name__ == "__main__":
    main()
