"""The shared training loop (`loop`): segments, recording after each segment, the divergence
freeze, and its two users (`train.make_run` with the data as an argument, `lm.lane_function`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import dataset, loop, sweep, tasks, train


def counter_update(i, carry):
    """state += 1 and a step log: the state after k steps is k, whatever the segments."""
    new = {"x": carry.state["x"] + 1.0, "last": i.astype(jnp.float64)}
    return loop.guarded_step(i, carry, jnp.asarray(0.0), new, carry.opt_state + 1)


def start(x=0.0):
    return loop.initial_carry({"x": jnp.asarray(x), "last": jnp.asarray(-1.0)}, jnp.asarray(0))


def test_segments_exact():
    starts, lengths = loop.segments((0, 3, 10), record_initial=True)
    np.testing.assert_array_equal(starts, [0, 3])
    np.testing.assert_array_equal(lengths, [3, 7])
    starts, lengths = loop.segments((0, 3, 10), record_initial=False)
    np.testing.assert_array_equal(starts, [0, 0, 3])
    np.testing.assert_array_equal(lengths, [0, 3, 7])
    starts, lengths = loop.segments((2, 5), record_initial=False)
    np.testing.assert_array_equal(starts, [0, 2])
    np.testing.assert_array_equal(lengths, [2, 3])
    with pytest.raises(ValueError, match="start at 0"):
        loop.segments((2, 5), record_initial=True)
    for bad in ((3, 3), (5, 2), (), (-1, 2)):
        with pytest.raises(ValueError, match="snapshots"):
            loop.segments(bad, record_initial=False)


def test_initial_carry():
    carry = start(2.0)
    assert int(carry.diverged) == -1 and carry.diverged.dtype == jnp.int32
    assert float(carry.state["x"]) == 2.0 and int(carry.opt_state) == 0


@pytest.mark.parametrize("record_initial", [True, False])
def test_run_records_after_each_segment(record_initial):
    snapshots = (0, 1, 4, 9)
    result = jax.jit(
        lambda c: loop.run(counter_update, c, lambda s: s, snapshots, record_initial=record_initial)
    )(start())
    np.testing.assert_array_equal(result.recorded["x"], snapshots)
    # the last step of each segment is the snapshot step minus one (-1: none taken yet)
    np.testing.assert_array_equal(result.recorded["last"], [-1, 0, 3, 8])
    assert float(result.carry.state["x"]) == 9 and int(result.carry.opt_state) == 9
    assert int(result.carry.diverged) == -1


def test_run_without_a_step_zero_snapshot_and_step_dtype():
    seen = []

    def update(i, carry):
        seen.append(i.dtype)
        return counter_update(i, carry)

    result = loop.run(update, start(), lambda s: s["x"], (2, 5), record_initial=False)
    np.testing.assert_array_equal(result.recorded, [2, 5])
    assert seen == [jnp.int32]
    loop.run(update, start(), lambda s: s["x"], (2,), record_initial=False, step_dtype=jnp.int64)
    assert seen[-1] == jnp.int64


def python_freeze(x0, factor, steps):
    """Reference: x <- x * factor in float32 until it overflows; the last finite x and the
    overflowing step."""
    x, diverged, history = np.float32(x0), -1, []
    for i in range(steps):
        with np.errstate(over="ignore"):
            new = np.float32(x * np.float32(factor))
        if diverged < 0 and not np.isfinite(new):
            diverged = i
        if diverged < 0:
            x = new
        history.append(x)
    return x, diverged, history


def scaling_update(factor):
    def update(i, carry):
        new = carry.state * jnp.float32(factor)
        return loop.guarded_step(i, carry, new, new, carry.opt_state + 1)

    return update


@pytest.mark.parametrize("record_initial", [True, False])
def test_divergence_freezes_at_the_last_finite_state(record_initial):
    snapshots = (0, 10, 20, 40)
    carry = loop.initial_carry(jnp.float32(3.0), jnp.asarray(0))
    result = loop.run(
        scaling_update(1e3), carry, lambda s: s, snapshots, record_initial=record_initial
    )
    x, diverged, history = python_freeze(3.0, 1e3, 40)
    assert diverged == 12  # 3e36 * 1e3 overflows float32 at step index 12
    assert int(result.carry.diverged) == diverged
    assert float(result.carry.state) == x
    # the optimizer state froze with the parameters: 12 accepted steps
    assert int(result.carry.opt_state) == diverged
    expected = [np.float32(3.0)] + [history[s - 1] for s in snapshots[1:]]
    np.testing.assert_array_equal(result.recorded, expected)


def test_guarded_step_first_divergence_sticks():
    carry = loop.initial_carry(jnp.asarray([1.0, 2.0]), jnp.asarray(5))
    good = loop.guarded_step(jnp.asarray(0), carry, jnp.asarray(1.0), carry.state + 1, 6)
    np.testing.assert_array_equal(good.state, [2.0, 3.0])
    assert int(good.opt_state) == 6 and int(good.diverged) == -1
    # a non-finite parameter (the loss finite) freezes the carry at step 3
    nan_state = jnp.asarray([jnp.nan, 0.0])
    frozen = loop.guarded_step(jnp.asarray(3), good, jnp.asarray(1.0), nan_state, 7)
    np.testing.assert_array_equal(frozen.state, good.state)
    assert int(frozen.opt_state) == 6 and int(frozen.diverged) == 3
    # a non-finite loss alone freezes too
    inf_loss = loop.guarded_step(jnp.asarray(4), good, jnp.asarray(jnp.inf), good.state * 2, 7)
    np.testing.assert_array_equal(inf_loss.state, good.state)
    assert int(inf_loss.diverged) == 4
    # once diverged, a later finite step is refused and the first step kept
    later = loop.guarded_step(jnp.asarray(9), frozen, jnp.asarray(1.0), good.state * 2, 8)
    np.testing.assert_array_equal(later.state, good.state)
    assert int(later.opt_state) == 6 and int(later.diverged) == 3


def test_vmapped_lanes_freeze_independently():
    factors = jnp.asarray([1e3, 1.5], jnp.float32)

    def lane(factor):
        def update(i, carry):
            new = carry.state * factor
            return loop.guarded_step(i, carry, new, new, carry.opt_state)

        carry = loop.initial_carry(jnp.float32(3.0), jnp.asarray(0))
        return loop.run(update, carry, lambda s: s, (0, 20, 40), record_initial=True)

    result = jax.jit(jax.vmap(lane))(factors)
    np.testing.assert_array_equal(result.carry.diverged, [12, -1])
    _, _, history = python_freeze(3.0, 1.5, 40)
    np.testing.assert_array_equal(result.recorded[1], [3.0, history[19], history[39]])


# --------------------------------------------------------------------------------------------
# train: the data is an argument, one compiled run per data shape


def reweighted(ds, seed):
    weights = np.random.default_rng(seed).uniform(0.2, 3.0, ds.n)
    return dataset.TokenDataset(
        tokens=ds.tokens,
        labels=np.roll(ds.labels, seed),
        vocab_size=ds.vocab_size,
        groups=ds.groups,
        weights=weights,
    )


def compile_events(fn):
    events = []

    def listen(event, seconds, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        out = jax.block_until_ready(fn())
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return out, len(events)


def test_one_compiled_run_serves_every_dataset_of_a_shape():
    base = tasks.make("add", N=5)
    first, second = reweighted(base, 1), reweighted(base, 2)
    config = train.TrainConfig(optimizer="sgd", lr=0.3, steps=12, batch_size=4, snapshots=(0, 12))
    graphdef, state = train.init_state("ffn", base, gamma=0.5, seed=0, d=8)
    assert train.make_run(graphdef, config) is train.make_run(graphdef, config)
    run = jax.jit(train.make_run(graphdef, config))
    # the minibatch stream of `train.train` and of a sweep lane: fold_in(key(seed), 1)
    lr, key = jnp.asarray(0.3, jnp.float32), jax.random.fold_in(jax.random.key(0), 1)
    data = [train.TrainData.from_dataset(ds) for ds in (first, second)]
    out_first, compiles = compile_events(lambda: run(state, lr, key, data[0]))
    assert compiles >= 1
    out_second, compiles = compile_events(lambda: run(state, lr, key, data[1]))
    assert compiles == 0  # the data is an argument, not a constant of the program
    assert not np.array_equal(out_first.loss, out_second.loss)
    # the same numbers as the one-shot entry point on the second dataset
    alone = train.train("ffn", second, config, gamma=0.5, seed=0, d=8)
    for field in ("loss", "accuracy", "W_E", "W_U", "diverged_step"):
        np.testing.assert_array_equal(getattr(out_second, field), getattr(alone, field))


def test_sweep_reuses_its_program_across_datasets_of_a_shape():
    base = tasks.make("add", N=5)
    config = train.TrainConfig(optimizer="gd", lr=0.3, steps=6, snapshots=(0, 6))
    kwargs = dict(gammas=[0.5, 1.0], seeds=[0], d=8)
    first = sweep.train_sweep("ffn", reweighted(base, 1), config, **kwargs)
    before = sweep.compile_for.cache_info().misses
    second = sweep.train_sweep("ffn", reweighted(base, 2), config, **kwargs)
    assert sweep.compile_for.cache_info().misses == before
    assert not np.array_equal(first.trajectory.loss, second.trajectory.loss)
    alone = train.train("ffn", reweighted(base, 2), config, gamma=1.0, seed=0, d=8)
    np.testing.assert_array_equal(second.trajectory.loss[1], alone.loss)


@pytest.mark.parametrize("lanes_per_batch", [None, 2])
def test_sweep_map_shared_arguments(lanes_per_batch):
    def fn(x, table, offset):
        return x * table["a"] + offset

    xs = jnp.arange(5.0)
    table, offset = {"a": jnp.asarray([1.0, 2.0, 3.0])}, jnp.asarray(0.5)
    layout = sweep.Layout(lanes_per_batch=lanes_per_batch)
    out = sweep.sweep_map(fn, xs, shared=(table, offset), layout=layout)
    np.testing.assert_array_equal(out, xs[:, None] * table["a"] + offset)
