"""Sweep records and counts beyond their easiest case (`sweep`): the grid columns of a finished
sweep's ``arrays.npz`` read back, the work announced and reported over several chunks and lanes in
both layouts, and the spec of a sweep over several datasets."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import progress, sweep, tasks, train, units

SMALL = train.TrainConfig(optimizer="gd", lr=0.5, steps=6, snapshots=(0, 3, 6))
F64 = dict(d=8, dtype=jnp.float64, activation="poly:1,0.5")


def test_a_finished_sweeps_arrays_hold_each_lanes_gamma_seed_and_lr(tmp_path):
    """``arrays.npz`` of a 2 x 2 x 2 sweep holds the grid's gamma, seed and lr of each lane, as
    the returned result does, gamma-major."""
    run = sweep.train_sweep(
        "ffn",
        tasks.make("add", N=4),
        SMALL,
        gammas=[0.5, 1.0],
        seeds=[0, 3],
        lrs=[0.5, 0.25],
        out=tmp_path,
        **F64,
    )
    with np.load(tmp_path / "arrays.npz") as saved:
        assert saved["gamma"].tolist() == [0.5] * 4 + [1.0] * 4
        assert saved["seed"].tolist() == [0, 0, 3, 3] * 2
        assert saved["lr"].tolist() == [0.5, 0.25] * 4
        for name in ("gamma", "seed", "lr"):
            np.testing.assert_array_equal(saved[name], getattr(run, name))
        assert "dataset" not in saved.files


def test_resumable_map_announces_the_steps_of_every_unsaved_lane_and_reports_each_chunk(tmp_path):
    """Over 6 lanes, one saved and chunks of 2: the work announced is the 5 unsaved lanes times
    their steps, and progress is reported at the start and after each of the 3 chunks."""
    store = sweep.LaneStore(units.UnitStore(tmp_path, {"what": "affine"}, done="done.json"))
    store.save(4, {"y": np.array(-4.0)})
    announced, seen = [], []
    with progress.expecting(announced.append):
        records = sweep.resumable_map(
            lambda x, a: {"y": a * x},
            jnp.arange(6.0),
            store=store,
            shared=(3.0,),
            chunk=2,
            steps_per_lane=7,
            progress=lambda done, total: seen.append((done, total)),
        )
    assert [float(r["y"]) for r in records] == [0.0, 3.0, 6.0, 9.0, -4.0, 15.0]
    assert announced == [5 * 7]
    assert seen == [(1, 6), (3, 6), (5, 6), (6, 6)]


@pytest.mark.parametrize(
    "layout",
    [
        dict(),  # lane by lane, one thread per core
        dict(concurrent_calls=1),  # lane by lane, one after another
        dict(lanes_per_batch=2, concurrent_calls=1, devices=jax.devices()[:1]),  # one call
        dict(lanes_per_batch=2, concurrent_calls=3, devices=jax.devices()[:1]),  # three calls
    ],
    ids=["lane-by-lane", "lane-by-lane-one-thread", "vmapped-one-call", "vmapped-three-calls"],
)
def test_counted_lanes_are_announced_and_reported_once_each(layout):
    """`sweep_map` with ``count_lanes`` over 3 lanes announces 3 and reports 3 in all, whatever
    the layout."""
    announced, ticks = [], []
    with progress.expecting(announced.append), progress.reporting(ticks.append):
        out = sweep.sweep_map(
            lambda x: 2.0 * x, jnp.arange(3.0), count_lanes=True, layout=sweep.Layout(**layout)
        )
    assert out.tolist() == [0.0, 2.0, 4.0]
    assert announced == [3]
    assert sum(ticks) == 3


def test_a_finished_context_sweep_refuses_other_data_in_any_of_its_datasets(tmp_path):
    """A finished sweep over two datasets is another sweep's folder once the second dataset's
    labels change (its spec holds every dataset's digest), and refused."""
    datasets = [tasks.make("modsum", N=4, L=L) for L in (2, 3)]
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=2, snapshots=(0, 2))
    grid = dict(gammas=[1.0], d=8)
    sweep.train_sweep("ffn", datasets, config, out=tmp_path, **grid)
    relabelled = dataclasses.replace(datasets[1], labels=np.roll(datasets[1].labels, 1))
    with pytest.raises(ValueError, match="finished run of other settings"):
        sweep.train_sweep("ffn", [datasets[0], relabelled], config, out=tmp_path, **grid)
