"""Sweeps: a lane equals its run alone, the lane layout changes no bit on CPU, resume recomputes
nothing."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import budget, sweep, tasks, train

F64 = dict(d=16, dtype=jnp.float64, activation="poly:1,0.5")
CONFIG = train.TrainConfig(optimizer="gd", lr=0.5, steps=40, snapshots=(0, 10, 40))


@pytest.fixture(scope="module")
def ds():
    return tasks.make("add", N=8)


def _grid_sweep(ds, **layout):
    """The 2 x 2 x 2 (gamma x seed x lr) grid of the ``reference`` run, one lr diverging, laid
    out as ``layout`` (`sweep.train_sweep`'s devices, lanes_per_batch, concurrent_calls) says."""
    return sweep.train_sweep(
        "ffn", ds, CONFIG, gammas=[0.5, 1.0], seeds=[0, 3], lrs=[0.5, 1e7], **F64, **layout
    )


@pytest.fixture(scope="module")
def reference(ds):
    return _grid_sweep(ds)


def interrupt_after(monkeypatch, saved: int):
    """Make the next sweep die after it saved ``saved`` lanes; returns a function that undoes
    it."""
    original = sweep.LaneStore.save
    calls = {"count": 0}

    def save(self, lane, trajectory):
        if calls["count"] == saved:
            raise KeyboardInterrupt
        calls["count"] += 1
        original(self, lane, trajectory)

    monkeypatch.setattr(sweep.LaneStore, "save", save)
    return lambda: monkeypatch.setattr(sweep.LaneStore, "save", original)


def counting_lanes(monkeypatch):
    """From now on, record the lane count of every `sweep.sweep_map` call; returns the list."""
    computed = []
    original = sweep.sweep_map

    def counting(fn, *lanes, **kwargs):
        computed.append(int(lanes[0].shape[0]))
        return original(fn, *lanes, **kwargs)

    monkeypatch.setattr(sweep, "sweep_map", counting)
    return computed


def test_grid_is_gamma_major(reference):
    assert reference.gamma.tolist() == [0.5] * 4 + [1.0] * 4
    assert reference.seed.tolist() == [0, 0, 3, 3] * 2
    assert reference.lr.tolist() == [0.5, 1e7] * 4


def test_a_lane_equals_the_same_run_alone(ds, reference):
    for lane in (0, 6):
        alone = train.train(
            "ffn",
            ds,
            train.TrainConfig(
                optimizer="gd", lr=reference.lr[lane], steps=40, snapshots=(0, 10, 40)
            ),
            gamma=reference.gamma[lane],
            seed=int(reference.seed[lane]),
            **F64,
        )
        np.testing.assert_allclose(alone.W_E, reference.trajectory.W_E[lane], rtol=0, atol=1e-10)
        np.testing.assert_allclose(alone.loss, reference.trajectory.loss[lane], atol=1e-10)


def test_a_minibatch_lane_draws_the_batches_of_the_same_run_alone(ds):
    """With minibatches the key matters: a lane and `train.train` draw theirs from
    ``fold_in(key(seed), 1)``, a stream of its own, not the initialization's
    ``fold_in(key(seed), 0)``, so the two runs are the same run."""
    config = train.TrainConfig(optimizer="sgd", lr=0.5, steps=12, batch_size=3, snapshots=(12,))
    lane = sweep.train_sweep("ffn", ds, config, gammas=[0.5], seeds=[3], **F64).lane(0)
    alone = train.train("ffn", ds, config, gamma=0.5, seed=3, **F64)
    np.testing.assert_allclose(alone.W_E, lane.W_E, rtol=0, atol=1e-12)


def test_divergent_lanes_do_not_touch_the_others(ds, reference):
    assert [not s.ok for s in reference.status] == [False, True] * 4
    calm = sweep.train_sweep("ffn", ds, CONFIG, gammas=[0.5, 1.0], seeds=[0, 3], **F64)
    # on CPU every lane is its own call of one program: the other lanes change no bit
    np.testing.assert_array_equal(calm.trajectory.W_E, reference.trajectory.W_E[0::2])


def test_sharded_sweep_equals_single_device(ds, reference):
    assert len(jax.devices()) == 4  # tests/conftest.py forces four host devices
    single = _grid_sweep(ds, layout=sweep.Layout(jax.devices()[:1]))
    np.testing.assert_array_equal(single.trajectory.W_E, reference.trajectory.W_E)
    # vmapped, an odd lane count is padded to the device count and the padding dropped
    odd = sweep.sweep_map(lambda x: x**2, jnp.arange(5.0), layout=sweep.Layout(lanes_per_batch=2))
    np.testing.assert_array_equal(odd, jnp.arange(5.0) ** 2)


def test_interrupted_sweep_resumes_and_recomputes_only_the_rest(ds, tmp_path, monkeypatch):
    grid = dict(gammas=[0.5, 0.8, 1.0], seeds=[0, 1], **F64)
    whole = sweep.train_sweep("ffn", ds, CONFIG, **grid)

    restore = interrupt_after(monkeypatch, 2)  # the process dies after two lanes reached disk
    with pytest.raises(KeyboardInterrupt):
        sweep.train_sweep("ffn", ds, CONFIG, out=tmp_path, chunk=2, **grid)
    assert len(list((tmp_path / "units").glob("lane_*.npz"))) == 2
    assert not (tmp_path / "metrics.json").exists()
    restore()

    computed = counting_lanes(monkeypatch)
    resumed = sweep.train_sweep("ffn", ds, CONFIG, out=tmp_path, chunk=2, **grid)
    assert computed == [2, 2]  # the four missing lanes, in two chunks; none of the saved two
    np.testing.assert_array_equal(resumed.trajectory.W_E, whole.trajectory.W_E)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == ["ok"] * 6 and "jax" in metrics["environment"]["packages"]
    saved = np.load(tmp_path / "arrays.npz")
    np.testing.assert_array_equal(saved["W_E"], resumed.trajectory.W_E)

    computed.clear()  # another grid is not other settings: only its new lane is trained
    sweep.train_sweep("ffn", ds, CONFIG, out=tmp_path, gammas=[2.0], chunk=1, **F64)
    assert computed == [1]


@pytest.mark.parametrize(
    "grid,needle",
    [
        (dict(gammas=[0.5, float("nan")]), "gamma"),
        (dict(gammas=[]), "gamma"),
        (dict(gammas=[0.5], lrs=[-1.0]), "lr"),
        (dict(gammas=[0.5], seeds=[-1]), "seeds"),
    ],
)
def test_bad_grid_names_the_parameter(ds, grid, needle):
    with pytest.raises(ValueError, match=needle):
        sweep.train_sweep("ffn", ds, CONFIG, **grid)


@pytest.mark.parametrize(
    "lanes_per_batch,concurrent_calls", [(1, 1), (3, 1), (8, 1), (1, 3), (2, 2)]
)
def test_how_lanes_run_changes_nothing(ds, reference, lanes_per_batch, concurrent_calls):
    # one device, 8 lanes: lane by lane (1) from 1 or 3 threads; vmapped in groups of 3 (2
    # groups and a vmapped rest of 2) or 8 (one vmap); 2 calls of 4 lanes in 2 groups
    run = _grid_sweep(ds, layout=sweep.Layout(jax.devices()[:1], lanes_per_batch, concurrent_calls))
    assert run.status == reference.status
    if lanes_per_batch == 1:  # the default layout on CPU: bitwise
        np.testing.assert_array_equal(run.trajectory.W_E, reference.trajectory.W_E)
    # vmapped: equal up to float64 rounding (a different program, see `sweep.sweep_map`)
    np.testing.assert_allclose(run.trajectory.W_E, reference.trajectory.W_E, rtol=1e-12)
    np.testing.assert_allclose(run.trajectory.loss, reference.trajectory.loss, rtol=1e-12)


def test_concurrent_sharded_groups_compile_once():
    # 23 lanes on 4 devices in 2 concurrent calls: 3 lanes per device and call (one group of 2
    # and a rest of 1), padded to 24; empty per-lane outputs (a trajectory without weights)
    def fn(x):
        return x**2, jnp.zeros((3, 0, 0))

    before = sweep.compile_for.cache_info().misses
    for _ in range(2):
        out = sweep.sweep_map(
            fn, jnp.arange(23.0), layout=sweep.Layout(lanes_per_batch=2, concurrent_calls=2)
        )
        np.testing.assert_array_equal(out[0], jnp.arange(23.0) ** 2)
        assert out[1].shape == (23, 3, 0, 0)
    assert sweep.compile_for.cache_info().misses == before + 1


def test_lane_by_lane_compiles_one_program_for_any_lane_count():
    def fn(x):
        return x**2, jnp.zeros((3, 0, 0))

    before = sweep.compile_for.cache_info().misses
    for n, calls in ((23, None), (7, 1), (1, 4)):
        out = sweep.sweep_map(fn, jnp.arange(float(n)), layout=sweep.Layout(concurrent_calls=calls))
        np.testing.assert_array_equal(out[0], jnp.arange(float(n)) ** 2)
        assert out[1].shape == (n, 3, 0, 0)
    assert sweep.compile_for.cache_info().misses == before + 1
    with pytest.raises(ValueError, match="no lanes"):
        sweep.sweep_map(fn, jnp.arange(0.0))


def test_defaults_per_platform():
    assert sweep.lane_by_lane("cpu") and sweep.lane_by_lane("cpu", 1)
    assert not sweep.lane_by_lane("cpu", 2) and not sweep.lane_by_lane("gpu")
    assert sweep.default_lanes_per_batch("cpu", 64) == sweep.CPU_LANES_PER_BATCH == 1
    assert sweep.default_lanes_per_batch("gpu", 64) == 64
    assert sweep.default_lanes_per_batch("tpu", 5) == 5
    assert sweep.default_concurrent_calls("gpu", 1) == sweep.default_concurrent_calls("tpu") == 1
    assert sweep.default_concurrent_calls("cpu", 1) >= 1
    assert sweep.default_concurrent_calls("cpu", 10**6) == 1


@pytest.mark.parametrize("name", ["lanes_per_batch", "concurrent_calls"])
@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_lane_layout_names_the_parameter(ds, name, bad):
    layout = sweep.Layout(**{name: bad})
    with pytest.raises(TypeError, match=rf"{name} is a field of sweep.Layout"):
        sweep.train_sweep("ffn", ds, CONFIG, gammas=[0.5], **{name: 2})
    with pytest.raises(ValueError, match=name):
        sweep.train_sweep("ffn", ds, CONFIG, gammas=[0.5], layout=layout)
    with pytest.raises(ValueError, match=name):
        sweep.sweep_map(lambda x: x, jnp.arange(4.0), layout=layout)
    with pytest.raises(ValueError, match=name):
        budget.lanes_in_flight(4, layout)


# Layouts of one sweep on CPU (4 host devices, tests/conftest.py): chunks, threads, devices.
LAYOUTS = {
    "default": {},
    "chunk=1": dict(chunk=1),
    "chunk=2": dict(chunk=2),
    "concurrent_calls=1": dict(layout=sweep.Layout(concurrent_calls=1)),
    "concurrent_calls=3": dict(layout=sweep.Layout(concurrent_calls=3)),
    "one device": dict(layout=sweep.Layout(jax.devices()[:1])),
    "other devices": dict(layout=sweep.Layout(jax.devices()[2:], concurrent_calls=2)),
}


def test_lane_layout_changes_no_bit_of_a_trained_sweep():
    # float32 Adam at a large lr, 300 steps: a chaotic run, where one rounding difference in one
    # step grows to a relative difference of order 1 in W_E (the layouts before the lane-by-lane
    # one differed by up to 0.8; measured in benchmarks/README.md "Determinism")
    ds = tasks.make("modsum", N=10, L=3)
    config = train.TrainConfig(optimizer="adam", lr=1e-2, steps=300, snapshots=(0, 100, 300))
    grid = dict(gammas=[0.5, 1.0, 1.5], seeds=[0, 1], d=32, activation="relu")
    runs = {
        name: sweep.train_sweep("ffn", ds, config, **grid, **how) for name, how in LAYOUTS.items()
    }
    reference = jax.tree.leaves(runs["default"].trajectory)
    assert runs["default"].trajectory.W_E.dtype == np.float32
    for name, run in runs.items():
        leaves = jax.tree.leaves(run.trajectory)
        assert len(leaves) == len(reference)
        for a, b in zip(leaves, reference, strict=True):
            assert np.array_equal(a, b), name


def test_lane_layout_changes_no_bit_of_sweep_map():
    # gradient descent on a weighted log-sum-exp, a PRNG key per lane (the layouts before the
    # lane-by-lane one changed its bits); also a lane's position and the lane count: lanes 2..4
    # alone equal the same lanes of the whole sweep
    def fn(w, key):
        p = jax.nn.softmax(jax.random.normal(key, (1000,), jnp.float32))
        z = jax.random.normal(jax.random.fold_in(key, 1), (1000, 8), jnp.float32)

        def loss(w):
            return jnp.sum(p * jax.nn.logsumexp(z * w, axis=1))

        return jax.lax.fori_loop(0, 100, lambda i, w: w - 0.1 * jax.grad(loss)(w), w)

    w = jax.random.normal(jax.random.key(0), (6, 8), jnp.float32)
    keys = jax.random.split(jax.random.key(1), 6)
    whole = sweep.sweep_map(fn, w, keys)
    for name, how in LAYOUTS.items():
        if "chunk" not in name:
            np.testing.assert_array_equal(sweep.sweep_map(fn, w, keys, **how), whole, err_msg=name)
    np.testing.assert_array_equal(sweep.sweep_map(fn, w[2:5], keys[2:5]), whole[2:5])


# --------------------------------------------------------------------------------------------
# device placement: vmapped lanes shard over every device, lane by lane runs on the
# first given device


@pytest.mark.parametrize("layout", ["one call", "two calls", "devices 1 and 2"])
def test_vmapped_lanes_shard_over_every_device(layout):
    """Each lane reports the shard (``axis_index`` of the lane mesh) that computed it, and the
    output lives on exactly the devices asked for. With the default devices (all four host
    devices of tests/conftest.py): 2 lanes per device in one call ([0, 0, 1, 1, ...]) or one
    lane per device in each of two concurrent calls ([0, 1, 2, 3, 0, 1, 2, 3]); given devices
    1 and 2: 4 lanes, two on each."""
    D = len(jax.devices())
    if layout == "devices 1 and 2" and D < 3:
        pytest.skip("needs three devices")
    given = jax.devices()[1:3] if layout == "devices 1 and 2" else None
    chosen = jax.devices() if given is None else given
    calls = 2 if layout == "two calls" else 1
    expected = {
        "one call": np.repeat(np.arange(D), 2),
        "two calls": np.tile(np.arange(D), 2),
        "devices 1 and 2": [0, 0, 1, 1],
    }[layout]
    n = len(expected)

    def fn(x):
        return 2 * x, jax.lax.axis_index(sweep.LANE_AXIS)

    out, shard = sweep.sweep_map(fn, jnp.arange(float(n)), layout=sweep.Layout(given, 2, calls))
    np.testing.assert_array_equal(out, 2 * np.arange(n))
    np.testing.assert_array_equal(shard, expected)
    assert out.devices() == set(chosen)


def test_vmapped_train_sweep_places_lanes_on_all_devices(ds, reference, monkeypatch):
    """train_sweep with vmapped lanes (lanes_per_batch=2): its call's outputs are sharded over
    all four devices, and the lanes equal the lane-by-lane reference up to rounding."""
    placements = []
    original = sweep.sharded_map

    def spying(fn, devices, lanes_per_batch):
        mapped, sharding = original(fn, devices, lanes_per_batch)

        def call(*args):
            out = mapped(*args)
            placements.extend(x.devices() for x in jax.tree.leaves(out))
            return out

        return call, sharding

    monkeypatch.setattr(sweep, "sharded_map", spying)
    run = _grid_sweep(ds, layout=sweep.Layout(lanes_per_batch=2, concurrent_calls=1))
    assert placements and all(p == set(jax.devices()) for p in placements)
    assert run.status == reference.status
    np.testing.assert_allclose(run.trajectory.W_E, reference.trajectory.W_E, rtol=1e-12)


@pytest.mark.parametrize("devices", [None, slice(2, 4)])
def test_lane_by_lane_runs_every_lane_on_the_first_given_device(devices, monkeypatch):
    """The documented CPU placement: every lane (and the stacked output) on ``devices[0]``."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("lane by lane is the CPU layout")
    chosen = jax.devices() if devices is None else jax.devices()[devices]
    lanes = []  # the devices of every one-lane call's output
    original = sweep.compiled_for

    def spying(mapped, example):
        compiled = original(mapped, example)

        def call(*args):
            out = compiled(*args)
            lanes.append(out.devices())
            return out

        return call

    monkeypatch.setattr(sweep, "compiled_for", spying)
    for calls in (1, 3):
        lanes.clear()
        out = sweep.sweep_map(
            lambda x: x**2,
            jnp.arange(6.0),
            layout=sweep.Layout(None if devices is None else chosen, concurrent_calls=calls),
        )
        np.testing.assert_array_equal(out, np.arange(6.0) ** 2)
        assert out.devices() == {chosen[0]}
        assert lanes == [{chosen[0]}] * 6


# --------------------------------------------------------------------------------------------
# resume: a folder of other settings is never reused


SMALL = train.TrainConfig(optimizer="gd", lr=0.5, steps=6, snapshots=(0, 3, 6))
SMALL_GRID = dict(gammas=[0.5, 1.0], seeds=[0], lrs=[0.5])


@pytest.mark.parametrize(
    "change",
    [
        dict(config=dataclasses.replace(SMALL, optimizer="adam", lr=0.05)),
        dict(config=dataclasses.replace(SMALL, schedule="warmup_cosine", warmup_steps=2)),
        dict(kwargs=dict(F64, activation="poly:1,-0.5")),
        dict(data=lambda ds: tasks.make("add", N=8, vocab_size=2 * ds.vocab_size)),
        dict(data=lambda ds: dataclasses.replace(ds, labels=np.roll(ds.labels, 1))),
        dict(data=lambda ds: dataclasses.replace(ds, weights=np.linspace(1.0, 3.0, ds.n))),
    ],
    ids=[
        "optimizer",
        "schedule",
        "model_kwargs",
        "wide_vocabulary",
        "same_name_other_labels",
        "same_name_other_weights",
    ],
)
def test_resume_with_changed_settings_recomputes_or_refuses(ds, tmp_path, monkeypatch, change):
    """units.UnitStore policy: an unfinished sweep of other settings in the folder is restarted
    (no saved lane of the old settings is reused, the result equals a fresh run of the new
    ones), a finished one is refused; the same settings reuse everything. Other data counts as
    other settings, even under the same task name and parameters (the spec holds its digest)."""
    config, kwargs = change.get("config", SMALL), change.get("kwargs", F64)
    new_ds = change.get("data", lambda ds: ds)(ds)
    fresh = sweep.train_sweep("ffn", new_ds, config, **SMALL_GRID, **kwargs)
    old = sweep.train_sweep("ffn", ds, SMALL, **SMALL_GRID, **F64)
    assert fresh.trajectory.W_E.shape != old.trajectory.W_E.shape or not np.array_equal(
        fresh.trajectory.W_E, old.trajectory.W_E
    )  # the change matters

    restore = interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, chunk=1, **SMALL_GRID, **F64)
    restore()
    assert len(list((tmp_path / "units").glob("lane_*.npz"))) == 1

    computed = counting_lanes(monkeypatch)
    resumed = sweep.train_sweep(
        "ffn", new_ds, config, out=tmp_path, chunk=1, **SMALL_GRID, **kwargs
    )
    assert computed == [1, 1]  # both lanes recomputed: the saved lane was of other settings
    got, want = jax.tree.leaves(resumed.trajectory), jax.tree.leaves(fresh.trajectory)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["config"]["optimizer"] == config.optimizer
    assert spec["model_kwargs"]["activation"] == kwargs["activation"]

    computed.clear()  # finished: the same settings reuse every lane
    again = sweep.train_sweep("ffn", new_ds, config, out=tmp_path, **SMALL_GRID, **kwargs)
    assert computed == []
    np.testing.assert_array_equal(again.trajectory.W_E, fresh.trajectory.W_E)
    with pytest.raises(ValueError, match="finished run of other settings"):
        sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    assert computed == []


def test_a_finished_sweep_summarizes_its_last_snapshot(ds, tmp_path):
    """``metrics.json`` of a finished sweep: each lane's status and its loss and accuracy at the
    last snapshot, as the returned trajectory holds them."""
    from ctx_staircase import results

    run = sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    summary = results.read_json(tmp_path / "metrics.json")
    assert summary["status"] == [str(s) for s in run.status]
    np.testing.assert_array_equal(summary["final_loss"], run.trajectory.loss[:, -1])
    np.testing.assert_array_equal(summary["final_accuracy"], run.trajectory.accuracy[:, -1])
    assert not np.array_equal(run.trajectory.loss[:, 0], run.trajectory.loss[:, -1])


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (planted-bug checked, tests/README.md)


@pytest.mark.parametrize("chunk", [None, 1, 2])
def test_resumable_map_loads_saved_lanes_and_runs_the_rest_in_lane_order(tmp_path, chunk):
    from ctx_staircase import units

    store = sweep.LaneStore(units.UnitStore(tmp_path, {"what": "affine"}, done="done.json"))
    # lanes 1 and 3 were saved by an earlier run (with values fn would never give)
    store.save(1, {"y": np.array(-100.0)})
    store.save(3, {"y": np.array(-300.0)})
    seen = []
    records = sweep.resumable_map(
        lambda x, a: {"y": a * x + 1.0},
        jnp.arange(6.0),
        store=store,
        shared=(2.0,),
        chunk=chunk,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert [float(r["y"]) for r in records] == [1.0, -100.0, 5.0, -300.0, 9.0, 11.0]
    assert seen[0] == (2, 6) and seen[-1] == (6, 6)
    # every lane is now saved: a second call loads all six
    again = sweep.resumable_map(
        lambda x, a: {"y": 0 * x}, jnp.arange(6.0), store=store, shared=(2.0,)
    )
    assert [float(r["y"]) for r in again] == [1.0, -100.0, 5.0, -300.0, 9.0, 11.0]


def test_units_cached_store_is_none_outside_caching_and_one_folder_per_spec(tmp_path):
    from ctx_staircase import units

    assert units.cached_store("sweep", {"a": 1}) is None
    with units.caching(tmp_path / "outer") as root:
        assert root == tmp_path / "outer"
        first = units.cached_store("sweep", {"a": 1, "b": 2})
        same = units.cached_store("sweep", {"b": 2, "a": 1})
        other = units.cached_store("sweep", {"a": 2, "b": 2})
        kind = units.cached_store("lm", {"a": 1, "b": 2})
        assert first.root == same.root and first.root.parent == root
        assert len({first.root, other.root, kind.root}) == 3
        with units.caching(tmp_path / "inner"):
            assert units.cached_store("sweep", {"a": 1}).root.parent == tmp_path / "inner"
        assert units.cached_store("sweep", {"a": 1}).root.parent == root
    assert units.cached_store("sweep", {"a": 1}) is None


def test_a_lane_that_overflows_at_its_first_step_is_reported_diverged_at_step_0():
    """A lane whose initial weights already overflow float32 (gamma = -40: ``d^40``) diverges at
    step 0 and says so; its neighbour in the same sweep is "ok"."""
    ds = tasks.make("add", N=4)
    config = train.TrainConfig(optimizer="gd", lr=0.1, steps=3, snapshots=(0, 3))
    result = sweep.train_sweep(
        "ffn", ds, config, gammas=[-40.0, 1.0], seeds=[0], d=8, dtype="float32"
    )
    assert result.trajectory.diverged_step.tolist() == [0, -1]
    assert result.status == (sweep.RunStatus(0), sweep.RunStatus())
    assert [str(s) for s in result.status] == ["diverged at step 0", "ok"]


def test_a_sweep_grown_by_one_gamma_trains_only_that_lane(ds, tmp_path, monkeypatch):
    """A finished sweep grown by a gamma (and then by a seed) trains only the new lanes; the
    lanes it had come back bitwise, and the grown result equals a fresh run of the whole grid."""
    sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, chunk=1, **SMALL_GRID, **F64)
    computed = counting_lanes(monkeypatch)
    grown = dict(SMALL_GRID, gammas=[0.5, 1.0, 1.5])
    result = sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, chunk=1, **grown, **F64)
    assert computed == [1]  # gamma 1.5 only
    more = dict(grown, seeds=[0, 2])
    computed.clear()
    result = sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, chunk=1, **more, **F64)
    assert computed == [1, 1, 1]  # seed 2 at each gamma
    fresh = sweep.train_sweep("ffn", ds, SMALL, chunk=1, **more, **F64)
    for a, b in zip(
        jax.tree.leaves(result.trajectory), jax.tree.leaves(fresh.trajectory), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert "grid" not in json.loads((tmp_path / "spec.json").read_text())
    assert len(record["status"]) == 6


def test_stored_lanes_are_keyed_on_the_numerical_versions_not_the_source(ds, tmp_path, monkeypatch):
    """A finished sweep resumes after an edit of the sources that changes no number (a
    reinstall of the same versions); an upgrade of a numerical package, or a new
    `results._NUMERICS_REVISION`, refuses it, naming what differs."""
    from ctx_staircase import results

    sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    computed = counting_lanes(monkeypatch)
    monkeypatch.setattr(results, "source_fingerprint", lambda: "0123456789abcdef")
    sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    assert computed == []

    key = results.numerics_key()
    upgraded = dict(key, packages=dict(key["packages"], jaxlib="99.0"))
    monkeypatch.setattr(results, "numerics_key", lambda: upgraded)
    with pytest.raises(ValueError, match=r"numerics\.packages\.jaxlib: .* -> \"99\.0\""):
        sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    monkeypatch.setattr(results, "numerics_key", lambda: dict(key, revision=key["revision"] + 1))
    with pytest.raises(ValueError, match=r"numerics\.revision"):
        sweep.train_sweep("ffn", ds, SMALL, out=tmp_path, **SMALL_GRID, **F64)
    assert computed == []


CONTEXT_CONFIG = train.TrainConfig(optimizer="gd", lr=1.0, steps=200, snapshots=(0, 50, 200))
CONTEXT_FIELDS = ("loss", "accuracy", "W_E", "W_U", "logit_scale")


@pytest.fixture(scope="module")
def context_runs():
    """``modsum`` N = 4 at L = 2, 3, 4 (16, 64 and 256 samples), ReLU FFN d = 16, 2 gammas x
    2 seeds, GD lr 1 for 200 steps: the padded sweep and the three separate sweeps, in float32
    and float64."""
    datasets = [tasks.make("modsum", N=4, L=L) for L in (2, 3, 4)]
    runs = {}
    for dtype in ("float32", "float64"):
        grid = dict(gammas=[0.8, 1.2], seeds=[0, 1], d=16, dtype=dtype)
        with jax.enable_x64(dtype == "float64"):
            padded = sweep.train_sweep("ffn", datasets, CONTEXT_CONFIG, **grid)
            alone = [sweep.train_sweep("ffn", ds, CONTEXT_CONFIG, **grid) for ds in datasets]
        runs[dtype] = padded, alone
    return runs


def _context_lanes(padded, alone, index):
    lanes = np.flatnonzero(padded.dataset == index)
    return {
        name: (np.asarray(getattr(padded.trajectory, name))[lanes],
               np.asarray(getattr(alone[index].trajectory, name)))
        for name in CONTEXT_FIELDS
    }  # fmt: skip


def test_a_padded_context_sweep_is_dataset_major_with_every_lane_named(context_runs):
    padded, alone = context_runs["float32"]
    assert padded.dataset.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert padded.gamma.tolist() == [0.8, 0.8, 1.2, 1.2] * 3
    assert padded.seed.tolist() == [0, 1] * 6
    for index, run in enumerate(alone):
        lanes = padded.dataset == index
        np.testing.assert_array_equal(padded.gamma[lanes], run.gamma)
        np.testing.assert_array_equal(padded.seed[lanes], run.seed)
    assert alone[0].dataset is None
    assert padded.trajectory.attention_position.shape[-1] == 4  # L_max; zeros for an FFN


def test_a_padded_context_lane_equals_its_separate_run(context_runs):
    """Measured on this CPU (XLA:CPU, jax 0.10.2): in float64 every lane's weights and accuracy
    are bitwise those of its separate run, and its recorded loss (a sum over the 256 padded
    samples against 16 or 64) within 1e-15; in float32 the L = 3 and L = 4 lanes are bitwise,
    the L = 2 lane (16 samples among 256) within 1e-6 relative after 200 steps. The padding's
    own arithmetic is exact (masked positions and zero-weight samples add exact zeros, and a
    padded contraction or sum alone gives the same bits); XLA compiles the whole step
    differently for the two shapes, and in float32 that rounds the 16-sample lane apart."""
    padded, alone = context_runs["float64"]
    for index in range(3):
        lanes = _context_lanes(padded, alone, index)
        for name in ("accuracy", "W_E", "W_U", "logit_scale"):
            np.testing.assert_array_equal(*lanes[name], err_msg=f"float64 L={index + 2} {name}")
        np.testing.assert_allclose(*lanes["loss"], rtol=1e-15, atol=0)
    padded, alone = context_runs["float32"]
    for index in range(3):
        lanes = _context_lanes(padded, alone, index)
        for name, (got, want) in lanes.items():
            if index > 0:
                np.testing.assert_array_equal(got, want, err_msg=f"float32 L={index + 2} {name}")
            scale = np.abs(want).max()
            assert np.abs(got - want).max() <= 1e-6 * scale, (index + 2, name)


def test_a_context_sweep_refuses_a_model_with_positions_and_mismatched_datasets():
    datasets = [tasks.make("modsum", N=4, L=L) for L in (2, 3)]
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=2)
    with pytest.raises(ValueError, match=r"model 'attention' has weights sized by the sequence"):
        sweep.train_sweep("attention", datasets, config, gammas=[1.0], d=8)
    other = [datasets[0], tasks.make("modsum", N=5, L=3)]
    with pytest.raises(ValueError, match="share the vocabulary"):
        sweep.train_sweep("ffn", other, config, gammas=[1.0], d=8)
    with pytest.raises(ValueError, match="non-empty sequence"):
        sweep.train_sweep("ffn", [], config, gammas=[1.0], d=8)


def test_an_interrupted_context_sweep_resumes_bitwise(tmp_path, monkeypatch):
    """Lanes of a context sweep are saved under their dataset's index, gamma, seed and lr; an
    interrupted one resumes to the uninterrupted result, bitwise."""
    datasets = [tasks.make("modsum", N=4, L=L) for L in (2, 3)]
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=20, snapshots=(0, 20))
    grid = dict(gammas=[0.8, 1.2], d=8)
    whole = sweep.train_sweep("ffn", datasets, config, **grid)
    restore = interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        sweep.train_sweep("ffn", datasets, config, out=tmp_path, chunk=1, **grid)
    restore()
    names = sorted(p.name for p in (tmp_path / "units").glob("*.npz"))
    assert names == [
        "lane_data0_gamma0.8_seed0_lr1.0.npz",
        "lane_data0_gamma1.2_seed0_lr1.0.npz",
        "lane_data1_gamma0.8_seed0_lr1.0.npz",
    ]
    computed = counting_lanes(monkeypatch)
    resumed = sweep.train_sweep("ffn", datasets, config, out=tmp_path, chunk=1, **grid)
    assert computed == [1]
    for a, b in zip(
        jax.tree.leaves(resumed.trajectory), jax.tree.leaves(whole.trajectory), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    arrays = np.load(tmp_path / "arrays.npz")
    assert arrays["dataset"].tolist() == [0, 0, 1, 1]


def test_fig5_cells_from_one_padded_sweep_equal_its_cells_from_one_sweep_per_L():
    """fig5_activation_order with ``context_sweep`` (its regime-study sizes) trains every L of a
    K as lanes of one padded sweep; each cell is its own L's: the L = 3 cell bitwise (it is the
    padded shape), the L = 2 cell within float32 rounding of the other compiled shape, grown by
    100 steps of the z^2 flow (its cosines 1.2e-5 apart, measured; a cell of the wrong L is
    0.1 or more apart)."""
    from ctx_staircase.experiments import fig5_activation_order as fig5
    from ctx_staircase.experiments import regime as regimes
    from ctx_staircase.experiments.declarative import Size

    quick = fig5.SPEC.config(Size.QUICK)
    config = dataclasses.replace(quick, d=16, N=4, snapshot_every=25)
    datasets = {L: regimes.PRIMARY.make("modsum", N=4, L=L) for L in (2, 3)}
    padded = fig5.train_cells(datasets, 2, 100, regimes.PRIMARY, config)
    one_each = dataclasses.replace(config, context_sweep=False)
    alone = fig5.train_cells(datasets, 2, 100, regimes.PRIMARY, one_each)
    for got, want in zip(padded, alone, strict=True):
        assert got.status == want.status and (got.L, got.K) == (want.L, want.K)
        np.testing.assert_allclose(got.curve, want.curve, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.S, want.S, rtol=0, atol=1e-4)
        assert got.top_share == pytest.approx(want.top_share, rel=1e-4)
    np.testing.assert_array_equal(padded[1].S, alone[1].S)


@pytest.mark.parametrize(
    "text, status",
    [("ok", sweep.RunStatus()), ("diverged at step 0", sweep.RunStatus(0)),
     ("diverged at step 466", sweep.RunStatus(466))],
)  # fmt: skip
def test_a_run_status_reads_back_from_its_text(text, status):
    assert sweep.RunStatus.parse(text) == status and str(status) == text
    assert status.ok == (status.diverged_step is None)


@pytest.mark.parametrize("text", ["", "OK", "diverged", "diverged at step -1", "diverged at 5"])
def test_a_status_text_of_neither_form_is_refused(text):
    with pytest.raises(ValueError, match="status must be 'ok' or 'diverged at step K'"):
        sweep.RunStatus.parse(text)
