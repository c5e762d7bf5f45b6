"""Benchmark: tokens per second of the GPT training step of `ctx_staircase.lm`, against the matmul
peak.

Setup (the CPU size, `lm.LMConfig` defaults): `models.GPT` d = 128, 2 layers, 4 heads
(head_dim 32), SwiGLU hidden h = `models.swiglu_hidden(d)` = 344, untied W_U, RoPE, float32;
context T = 64, batch B = 32 windows of T + 1 tokens; AdamW with warmup-cosine
(`lm.optimizer`); vocabulary V = 2001 (2000 words + ``<unk>``) of tinyshakespeare
(``../shared/data/tinyshakespeare.txt`` beside the repository, ``--text`` to change it) through
``text.prepare_corpus(text.load_text(path))``. Without that file the built-in corpus
(``text.builtin_corpus()``, ``vocab_size=None``, every training word) is used instead and the
output says so (its V differs, so its FLOPs per token do too).

Measured in one run:

(1) The training step alone: `lm.step_function`, the step `lm.train_lm` runs, here without the
    snapshot recording: per step, B uniform random window starts from ``fold_in(key, i)``, the
    gather of the windows from the device-resident training stream, ``value_and_grad`` of the
    mean next-token cross-entropy of ``models.GPT.forward``, the AdamW update, and the
    finiteness check that freezes a diverged lane. The model and optimizer come from
    `lm.gpt` / `lm.optimizer`, the initial weights from `lm.initial_states` (the same
    draws as `lm.train_lm`). One jitted function initializes AdamW and runs ``--steps``
    (default 50) steps in a ``lax.fori_loop``; it is compiled once ahead of time (trace + lower
    and XLA compile reported separately) and the compiled executable is then called
    ``--repeats`` (default 3) times from the same initial state, no warm-up call (every time,
    the best and the median are reported; the process CPU time, all threads, too, since the
    machine is shared). Lanes: 1 (gamma 1.0) and 2 vmapped (gamma 1.0 and 0.5, as
    `lm.train_lm` runs them; the lanes share the batches).
    tokens/s = lanes * steps * B * T / seconds (all lanes' tokens; per lane too).
(2) FLOPs per token, counted analytically (matmuls only, 2 FLOP per multiply-add), forward:
        per layer: 8 d^2       (Q, K, V and O projections, 4 x 2 d^2)
                 + 6 d h       (SwiGLU: gate and up 2 x 2 d h, down 2 d h)
                 + 4 T d       (attention scores q.k and mixing a.v, 2 T d each, over all T keys)
        + 2 d V                (unembedding W_U)
    and forward + backward = 3 x forward (the backward of each matmul is two matmuls of the same
    size). The attention term counts the full T x T score matrix: `models.GPT` computes every
    score and masks the upper triangle, so that is the work done (the useful causal half,
    2 (T+1) d per layer, is reported alongside, but the "analytic" FLOPs use the full count).
    Left out: the embedding gather (and its scatter-add backward), RMSNorm, RoPE, softmax,
    SiLU, cross-entropy (~10 V per token), and AdamW (~15 FLOP per parameter per step,
    ~7 kFLOP per token here): together under 2% of the matmul count at this size.
    For comparison, XLA's own count: ``cost_analysis()['flops']`` of one compiled training
    step (the same step function, one step, no loop; XLA counts a loop body once, so the loop
    itself cannot be analysed), for 1 and for 2 vmapped lanes, divided by the step's tokens.
    XLA counts elementwise operations as well (1 FLOP each), so it comes out a little higher.
(3) Achieved FLOP/s = tokens/s * FLOPs/token (analytic and XLA), and its fraction of this
    machine's dense float32 matmul rate: best of 5 jitted 2048 x 2048 ``jnp.matmul`` (2 * 2048^3
    FLOP each), measured at the start and again at the end, the faster of the two used.
(4) One full `lm.train_lm` call (2 lanes, ``--train-lm-steps`` = 200 steps, snapshot every
    ``--snapshot-every`` = 50, i.e. 5 snapshots at steps 0, 50, ..., 200), its first call:
    compile included, JAX's own compile records for that call (tracing, MLIR lowering, XLA
    compilation; ``jax.monitoring`` duration events) subtracted to get its run time; ``--warm`` also
    times a second call (program cached by `sweep.sweep_map`) and uses that instead (another
    ~1.5 min here). That run time against ``train_lm_steps`` x the median per-step time of the
    2-lane step loop from (1) gives the overhead of snapshot recording (training-window and
    validation loss, tracked rows, value paths, eq. 22 attention-path signatures; 128 + 64
    windows forward per snapshot), plus the host-side work of `train_lm` (eligible tokens,
    window spreading, transfers).

Nothing is asserted. Usage: python benchmarks/lm.py [--steps 50] [--repeats 3]
[--train-lm-steps 200] [--snapshot-every 50] [--warm] [--text PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _machine import (  # benchmarks/ is sys.path[0] when run as a script
    compile_log,
    matmul_peak,
    other_busy_processes,
)
from flax import nnx

from ctx_staircase import lm, loop, models, paths, results, sweep, text

SHAPE = lm.LMConfig()  # the standard GPT: d 128, 2 layers, 4 heads, T 64, B 32
D, N_LAYERS, N_HEADS = SHAPE.d, SHAPE.n_layers, SHAPE.n_heads
CONTEXT, BATCH = SHAPE.context_length, SHAPE.batch_size
GAMMAS = (1.0, 0.5)
SEED = 0
SHAKESPEARE = paths.shared_corpus()


# --------------------------------------------------------------------------------------------
# helpers


def load_corpus(path: Path) -> tuple[text.Corpus, str]:
    if path.is_file():
        corpus = text.prepare_corpus(text.load_text(path))
        return corpus, f"{path.name} (vocab_size={text.DEFAULT_VOCAB_SIZE} + <unk>)"
    corpus = text.prepare_corpus(text.builtin_corpus(), vocab_size=None)
    return corpus, f"text.builtin_corpus() (vocab_size=None; {path} not found)"


def analytic_flops(config: lm.LMConfig, V: int) -> dict:
    """Matmul FLOPs per token (module docstring, part 2)."""
    d, T, h = config.d, config.context_length, models.swiglu_hidden(config.d)
    projections, mlp, attention = 8 * d * d, 6 * d * h, 4 * T * d
    attention_causal = 2 * (T + 1) * d  # mean over positions of 4 (s+1) d, s = 0..T-1
    unembedding = 2 * d * V
    forward = config.n_layers * (projections + mlp + attention) + unembedding
    forward_causal = config.n_layers * (projections + mlp + attention_causal) + unembedding
    return {
        "swiglu_hidden": h,
        "forward_terms_per_token": {
            "qkvo_projections_per_layer": projections,
            "swiglu_per_layer": mlp,
            "attention_full_per_layer": attention,
            "attention_causal_half_per_layer": attention_causal,
            "unembedding": unembedding,
        },
        "forward_per_token": forward,
        "train_per_token": 3 * forward,
        "train_per_token_causal_half": 3 * forward_causal,
    }


def lane_functions(config: lm.LMConfig, V: int, steps: int):
    """`lm.step_function` without the recording of `lm.train_lm`: ``run(state, stream, key)``
    runs AdamW init + ``steps`` steps (fori_loop) and ``one_step(state, opt_state, stream,
    key)`` does one step (for XLA's cost analysis)."""
    graphdef = nnx.split(lm.gpt(config, V, 1.0, jax.random.key(0)))[0]
    optimizer = lm.optimizer(config)
    train_step = lm.step_function(graphdef, optimizer, config)

    def init(state):
        with jax.numpy_dtype_promotion("standard"):
            return optimizer.init(state)

    def run(state, stream, key):
        carry = loop.initial_carry(state, init(state))
        carry = jax.lax.fori_loop(0, steps, lambda i, c: train_step(i, c, stream, key), carry)
        state, _, diverged = carry
        T = config.context_length
        windows = stream[: 8 * (T + 1)].reshape(8, T + 1)  # the first 8 windows of the stream
        loss, _ = lm.cross_entropy(nnx.merge(graphdef, state), windows)
        return state, diverged, loss

    def one_step(state, opt_state, stream, key):
        carry = loop.initial_carry(state, opt_state)
        return train_step(jnp.asarray(0, jnp.int32), carry, stream, key)

    return run, one_step, init


def xla_flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    return float(analysis["flops"])


def time_calls(fn, args, repeats: int) -> dict:
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        cpu, start = time.process_time(), time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return {
        "seconds": walls,
        "best_s": min(walls),
        "median_s": statistics.median(walls),
        "cpu_seconds": cpus,
        "cpu_median_s": statistics.median(cpus),
        "output": out,
    }


def bench_lanes(config, corpus, gammas, steps: int, repeats: int) -> dict:
    """Part (1) and the XLA count of part (2) for ``len(gammas)`` vmapped lanes (1: no vmap)."""
    V = corpus.vocab_size
    run, one_step, init = lane_functions(config, V, steps)
    states = lm.initial_states(config, V, np.asarray(gammas, np.float64), SEED)
    stream = jnp.asarray(corpus.train, dtype=jnp.int32)
    key = jax.random.key(SEED)
    lanes = len(gammas)
    if lanes == 1:
        states = jax.tree.map(lambda x: x[0], states)
    else:
        run = jax.vmap(run, in_axes=(0, None, None))
        one_step = jax.vmap(one_step, in_axes=(0, 0, None, None))
        init = jax.vmap(init)

    start = time.perf_counter()
    lowered = jax.jit(run).lower(states, stream, key)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    timing = time_calls(compiled, (states, stream, key), repeats)
    _, diverged, loss = timing.pop("output")

    opt_states = jax.jit(init)(states)
    step_compiled = jax.jit(one_step).lower(states, opt_states, stream, key).compile()
    xla_step = xla_flops(step_compiled)
    loop_xla = xla_flops(compiled)

    tokens = lanes * steps * config.batch_size * config.context_length
    return {
        "lanes": lanes,
        "gammas": list(gammas),
        "steps_per_call": steps,
        "tokens_per_call": tokens,
        "trace_lower_s": lower_s,
        "compile_s": compile_s,
        **timing,
        **_rates(timing, tokens, lanes, steps),
        "final_loss_first_windows": np.asarray(loss).ravel().tolist(),
        "diverged_step": np.asarray(diverged).ravel().tolist(),
        "xla_flops_one_step": xla_step,
        "xla_flops_per_token": (None if xla_step is None else xla_step / (tokens / steps)),
        "xla_flops_step_loop_as_reported": loop_xla,
    }


def _rates(timing: dict, tokens: int, lanes: int, steps: int) -> dict:
    """Tokens per second (all lanes, and per lane) and seconds per step of ``timing``'s best
    and median call, one call being ``steps`` steps of ``lanes`` lanes over ``tokens`` tokens."""
    return {
        "tokens_per_s_best": tokens / timing["best_s"],
        "tokens_per_s_median": tokens / timing["median_s"],
        "tokens_per_s_per_lane_best": tokens / lanes / timing["best_s"],
        "step_s_best": timing["best_s"] / steps,
        "step_s_median": timing["median_s"] / steps,
    }


def bench_sweep_layout(config, corpus, gammas, steps: int, repeats: int) -> dict:
    """The same step loop for ``gammas`` laid out as `lm.train_lm` lays them out:
    `sweep.sweep_map` with its defaults (on CPU one lane at a time, one concurrent call per
    core), the training stream and the seed shared by the lanes. The first call compiles
    (reported, not timed); then ``repeats`` timed calls."""
    V = corpus.vocab_size
    run, _, _ = lane_functions(config, V, steps)

    def lane(state, stream, seed):
        return run(state, stream, jax.random.key(seed))

    lanes = len(gammas)
    states = lm.initial_states(config, V, np.asarray(gammas, np.float64), SEED)
    shared = (jnp.asarray(corpus.train, dtype=jnp.int32), jnp.asarray(SEED, jnp.uint32))
    start = time.perf_counter()
    jax.block_until_ready(sweep.sweep_map(lane, states, shared=shared))
    first_s = time.perf_counter() - start
    timing = time_calls(lambda s: sweep.sweep_map(lane, s, shared=shared), (states,), repeats)
    timing.pop("output")
    tokens = lanes * steps * config.batch_size * config.context_length
    platform = jax.devices()[0].platform
    return {
        "lanes": lanes,
        "gammas": list(gammas),
        "layout": sweep.plan(sweep.Layout(), lanes, platform, len(jax.devices()))._asdict(),
        "steps_per_call": steps,
        "first_call_s": first_s,
        "trace_lower_s": 0.0,  # not separable here: compile_s is the first call minus the median
        "compile_s": first_s - timing["median_s"],
        "xla_flops_per_token": None,
        **timing,
        **_rates(timing, tokens, lanes, steps),
    }


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="AdamW steps per timed call")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls (best / median)")
    parser.add_argument("--train-lm-steps", type=int, default=200)
    parser.add_argument("--snapshot-every", type=int, default=50)
    parser.add_argument("--warm", action="store_true", help="also time a second train_lm call")
    parser.add_argument("--text", type=Path, default=SHAKESPEARE, help="training text")
    parser.add_argument("--json", help="also write the JSON record here")
    return parser.parse_args()


def step_loop_rows(config: lm.LMConfig, corpus: text.Corpus, args) -> dict:
    """(1) + (2, XLA): the training step alone for 1 lane and 2 vmapped lanes, then 2 lanes in
    `lm.train_lm`'s layout; printed, keyed as the JSON record's ``step_loop``."""
    rows = {}
    for gammas in (GAMMAS[:1], GAMMAS):
        row = bench_lanes(config, corpus, gammas, args.steps, args.repeats)
        rows[f"{len(gammas)}_lane" + ("s" if len(gammas) > 1 else "")] = row
        print(
            f"{row['lanes']} lane(s) {row['gammas']}: trace+lower {row['trace_lower_s']:.2f} s, "
            f"compile {row['compile_s']:.2f} s; {args.steps} steps: best {row['best_s']:.2f} s, "
            f"median {row['median_s']:.2f} s (CPU {row['cpu_median_s']:.2f} s) -> "
            f"{row['tokens_per_s_best']:.0f} tokens/s; loss on the first 8 windows after "
            f"{args.steps} steps "
            f"{row['final_loss_first_windows']}",
            flush=True,
        )
    row = bench_sweep_layout(config, corpus, GAMMAS, args.steps, args.repeats)
    rows["2_lanes_train_lm_layout"] = row
    print(
        f"2 lanes in train_lm's layout {row['layout']}: {args.steps} steps: best "
        f"{row['best_s']:.2f} s, median {row['median_s']:.2f} s (CPU {row['cpu_median_s']:.2f} s)"
        f" -> {row['tokens_per_s_best']:.0f} tokens/s",
        flush=True,
    )
    return rows


def time_train_lm(config: lm.LMConfig, corpus: text.Corpus, args, layout_row: dict) -> dict:
    """(4) One full `lm.train_lm` call: its first call (compile included; JAX's compile records
    subtracted), and with ``--warm`` a second call (program cached by `sweep.sweep_map`),
    against the pure steps of ``layout_row`` (the 2-lane step loop in train_lm's layout)."""
    calls = []
    for _ in range(2 if args.warm else 1):
        with compile_log() as records:
            start = time.perf_counter()
            trajectory = lm.train_lm(corpus, config, gammas=GAMMAS, seed=SEED)
            jax.block_until_ready(trajectory.final_W_E)
            seconds = time.perf_counter() - start
        calls.append((seconds, sum(t for _, t in records)))
        print(
            f"lm.train_lm call: {seconds:.1f} s (JAX compile records {calls[-1][1]:.1f} s)",
            flush=True,
        )
    first, compile_s = calls[0]
    second = calls[1][0] if args.warm else None
    run = second if args.warm else first - compile_s
    pure = args.train_lm_steps * layout_row["step_s_median"]
    return {
        "steps": args.train_lm_steps,
        "snapshot_every": args.snapshot_every,
        "snapshots": list(config.snapshots),
        "lanes": len(GAMMAS),
        "first_call_s": first,
        "compile_s_jax_records": compile_s,
        "second_call_s": second,
        "run_s": run,
        "run_s_from": "second call" if args.warm else "first call - JAX compile records",
        "pure_steps_s_median": pure,
        "pure_steps_s_best": args.train_lm_steps * layout_row["step_s_best"],
        "overhead_s": run - pure,
        "overhead_fraction": run / pure - 1.0,
        "overhead_per_snapshot_s": (run - pure) / len(config.snapshots),
        "final_loss": trajectory.loss[:, -1].tolist(),
        "final_validation_loss": trajectory.validation_loss[:, -1].tolist(),
        "diverged_step": trajectory.diverged_step.tolist(),
    }


def add_achieved(rows: dict, counts: dict, peak: dict) -> None:
    """(2) + (3): each row's achieved FLOP/s (analytic and XLA FLOPs per token, best and median
    call) and its fraction of the matmul ``peak``, as ``row["achieved"]``."""
    for row in rows.values():
        row["achieved"] = {}
        for name, per_token in (
            ("analytic", counts["train_per_token"]),
            ("xla_cost_analysis", row["xla_flops_per_token"]),
        ):
            if per_token is None:
                continue
            for which in ("best", "median"):
                rate = row[f"tokens_per_s_{which}"] * per_token
                row["achieved"][f"{name}_{which}"] = {
                    "flops_per_token": per_token,
                    "flops_per_s": rate,
                    "fraction_of_matmul_peak": rate / peak["flops_per_s"],
                }


def print_rates(rows: dict, counts: dict, peaks: dict) -> None:
    """The FLOPs per token and the table of step-loop rows against the matmul peak."""
    print(
        f"\nFLOPs per token (training, forward x3): analytic {counts['train_per_token'] / 1e6:.3f}"
        f" M (causal half of attention: {counts['train_per_token_causal_half'] / 1e6:.3f} M); "
        + ", ".join(
            f"XLA {row['lanes']} lane(s) {row['xla_flops_per_token'] / 1e6:.3f} M"
            for row in rows.values()
            if row["xla_flops_per_token"] is not None
        )
    )
    header = (
        f"{'row':>24s} {'compile s':>9s} {'best s':>7s} {'median s':>8s} {'tokens/s':>9s} "
        f"{'tok/s/lane':>10s} {'GFLOP/s an.':>11s} {'% peak an.':>10s} {'GFLOP/s XLA':>11s} "
        f"{'% peak XLA':>10s}"
    )
    print(header)
    for name, row in rows.items():
        a = row["achieved"]["analytic_best"]
        x = row["achieved"].get("xla_cost_analysis_best")
        print(
            f"{name:>24s} {row['trace_lower_s'] + row['compile_s']:9.2f} "
            f"{row['best_s']:7.2f} {row['median_s']:8.2f} {row['tokens_per_s_best']:9.0f} "
            f"{row['tokens_per_s_per_lane_best']:10.0f} {a['flops_per_s'] / 1e9:11.2f} "
            f"{100 * a['fraction_of_matmul_peak']:10.1f} "
            + (
                f"{x['flops_per_s'] / 1e9:11.2f} {100 * x['fraction_of_matmul_peak']:10.1f}"
                if x
                else f"{'n/a':>11s} {'n/a':>10s}"
            )
        )
    print(
        f"matmul peak {peaks['used']['flops_per_s'] / 1e9:.1f} GFLOP/s (start "
        f"{peaks['start']['flops_per_s'] / 1e9:.1f}, end {peaks['end']['flops_per_s'] / 1e9:.1f})"
    )


def print_train_lm(recording: dict) -> None:
    print(
        f"train_lm ({recording['steps']} steps, 2 lanes, {len(recording['snapshots'])} snapshots): "
        f"first call {recording['first_call_s']:.1f} s, compile "
        f"{recording['compile_s_jax_records']:.1f} s, run {recording['run_s']:.1f} s "
        f"({recording['run_s_from']}); pure steps "
        f"{recording['pure_steps_s_median']:.1f} s (median; best "
        f"{recording['pure_steps_s_best']:.1f} s) -> recording overhead "
        f"{100 * recording['overhead_fraction']:.1f}% "
        f"({recording['overhead_per_snapshot_s']:.2f} s per snapshot); "
        f"final loss {recording['final_loss']}"
    )


def setup_record(corpus_note: str, corpus: text.Corpus, config: lm.LMConfig, args) -> dict:
    """The JSON record's ``setup`` before the machine's state is added to it."""
    return {
        "corpus": corpus_note,
        "vocab_size": corpus.vocab_size,
        "train_tokens": int(corpus.train.size),
        "d": D,
        "n_layers": N_LAYERS,
        "n_heads": N_HEADS,
        "swiglu_hidden": models.swiglu_hidden(D),
        "context_length": CONTEXT,
        "batch_size": BATCH,
        "gammas": list(GAMMAS),
        "seed": SEED,
        "config": dataclasses.asdict(config),
        "steps_per_call": args.steps,
        "repeats": args.repeats,
        "devices": [str(device) for device in jax.devices()],
        "cpu_count": os.cpu_count(),
    }


def main() -> None:
    args = parse_args()
    script_start = time.perf_counter()
    corpus, corpus_note = load_corpus(args.text)
    config = dataclasses.replace(
        SHAPE, steps=args.train_lm_steps, snapshot_every=args.snapshot_every
    )
    print(
        f"corpus {corpus_note}: V={corpus.vocab_size}, {corpus.train.size} training tokens; "
        f"GPT d={D}, {N_LAYERS} layers, {N_HEADS} heads, hidden {models.swiglu_hidden(D)}, "
        f"T={CONTEXT}, B={BATCH}; {os.cpu_count()} CPU cores, devices {jax.devices()}",
        flush=True,
    )
    others = other_busy_processes()
    load_start = os.getloadavg()
    print(f"load average at start {load_start}", flush=True)
    if others:
        print(f"note: other busy processes at start: {others}", flush=True)
    peak_start = matmul_peak()
    print(f"matmul 2048^2 float32: {peak_start['flops_per_s'] / 1e9:.1f} GFLOP/s", flush=True)

    lane_rows = step_loop_rows(config, corpus, args)
    recording = time_train_lm(config, corpus, args, lane_rows["2_lanes_train_lm_layout"])
    peak_end = matmul_peak()
    peak = max(peak_start, peak_end, key=lambda r: r["flops_per_s"])
    peaks = {"start": peak_start, "end": peak_end, "used": peak}
    print(
        f"matmul 2048^2 float32 again: {peak_end['flops_per_s'] / 1e9:.1f} GFLOP/s; using "
        f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s",
        flush=True,
    )
    counts = analytic_flops(config, corpus.vocab_size)
    add_achieved(lane_rows, counts, peak)
    print_rates(lane_rows, counts, peaks)
    print_train_lm(recording)
    load_end = os.getloadavg()
    others_end = other_busy_processes()
    total_s = time.perf_counter() - script_start
    print(f"load average at end {load_end}; other busy processes at end: {others_end}")
    print(f"whole script {total_s:.0f} s")

    record = {
        "setup": {
            **setup_record(corpus_note, corpus, config, args),
            "other_busy_processes_start": others,
            "other_busy_processes_end": others_end,
            "load_average_start": load_start,
            "load_average_end": load_end,
            "script_s": total_s,
        },
        "matmul_peak": peaks,
        "flops": counts,
        "step_loop": lane_rows,
        "train_lm": recording,
        "environment": results.environment(),
    }
    print(json.dumps(record, indent=1, default=float))
    if args.json:
        results.write_json(args.json, record)


if __name__ == "__main__":
    main()
