"""Vmapped sweeps over (gamma, seed, lr), sharded over every device (DESIGN.md "Sweeps").

Values (gamma, seed, lr) are vmapped in one compiled call; shapes (V, L, d) are a Python loop of
compiled calls. `sweep_map` shards the vmapped lane axis over all devices with ``shard_map`` on a
1-D mesh, padding the lanes to a multiple of the device count, so the same code fills one CPU,
eight GPUs or a TPU slice. On an accelerator all of a device's lanes are vmapped together. On
CPU, where vmapping many lanes costs cache and gains nothing, each call runs its lanes one after
another (``lanes_per_batch``, `default_lanes_per_batch`) and the lanes are split over one
concurrent call per core (``concurrent_calls``, `default_concurrent_calls`).

With ``out=DIR`` a sweep saves each finished lane atomically; rerunning the same sweep into the
same folder computes only the lanes not yet saved.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import results, train
from ctx_staircase.dataset import TokenDataset

LANE_AXIS = "lanes"


class SweepResult(NamedTuple):
    """A finished sweep: the grid and one trajectory per lane.

    Attributes:
        gamma, seed, lr: ``[G]`` grid values of each lane (gamma-major product order).
        trajectory: `train.Trajectory` whose arrays carry a leading ``[G]`` lane axis (NumPy).
        status: per lane, ``"ok"`` or ``"diverged at step k"``.
    """

    gamma: np.ndarray
    seed: np.ndarray
    lr: np.ndarray
    trajectory: train.Trajectory
    status: list[str]

    def lane(self, index: int) -> train.Trajectory:
        """The trajectory of one lane."""
        return jax.tree.map(lambda x: x[index], self.trajectory)


def grid(gammas, seeds, lrs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (gamma, seed, lr) product, gamma-major; validated (names the bad parameter)."""
    gammas = _finite_list(gammas, "gamma")
    lrs = _finite_list(lrs, "lr")
    train.check_lr(lrs)
    seeds = list(seeds)
    if not seeds or any(
        isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 0 for s in seeds
    ):
        raise ValueError(f"seeds must be a non-empty list of ints >= 0; got {seeds}")
    points = list(itertools.product(gammas, seeds, lrs))
    gamma, seed, lr = (np.asarray(column) for column in zip(*points, strict=True))
    return gamma.astype(np.float64), seed.astype(np.int64), lr.astype(np.float64)


def sweep_map(
    fn: Callable,
    *lanes,
    devices: Sequence[jax.Device] | None = None,
    lanes_per_batch: int | None = None,
    concurrent_calls: int | None = None,
):
    """``vmap(fn)`` over the leading axis of every argument, sharded over ``devices``.

    How the lanes run (none of it changes the result beyond floating-point rounding):

    - ``concurrent_calls``: the lanes are split into this many equal slices, each one call of
      the same compiled program, run at the same time from as many threads (one compile; each
      call shards its slice over all ``devices``). On CPU this runs lanes on different cores at
      once. ``None``: `default_concurrent_calls`. Never more calls than a device has lanes.
    - ``lanes_per_batch``: within a call, each device runs its lanes in groups of this many
      vmapped lanes, one group after another inside the compiled program (like
      ``lax.map(fn, ..., batch_size=lanes_per_batch)``); at or above the device's lane count it
      is one plain ``vmap``. ``None``: `default_lanes_per_batch`.

    The lanes are padded (by repeating the last lane) to fill the slices evenly over the devices
    and the padding is dropped from the result. Compiled once per (fn, devices, lanes_per_batch,
    slice shapes).
    """
    devices = tuple(devices or jax.devices())
    sizes = {x.shape[0] for x in jax.tree.leaves(lanes)}
    if len(sizes) != 1:
        raise ValueError(f"every argument must share the leading lane axis; got sizes {sizes}")
    (n,) = sizes
    platform = devices[0].platform
    if concurrent_calls is None:
        concurrent_calls = default_concurrent_calls(platform, len(devices))
    _check_positive(concurrent_calls, "concurrent_calls")
    per_device = math.ceil(n / len(devices))  # lanes per device in all
    per_call = math.ceil(per_device / min(concurrent_calls, per_device))  # ... in one call
    calls = math.ceil(per_device / per_call)
    if lanes_per_batch is None:
        lanes_per_batch = default_lanes_per_batch(platform, per_call)
    _check_positive(lanes_per_batch, "lanes_per_batch")
    size = per_call * len(devices)  # lanes per call
    mapped, sharding = _sharded(fn, devices, min(lanes_per_batch, per_call))
    lanes = jax.tree.map(lambda x: _pad(jnp.asarray(x), size * calls), lanes)
    slices = [
        jax.tree.map(lambda x, i=i: jax.device_put(x[i * size : (i + 1) * size], sharding), lanes)
        for i in range(calls)
    ]
    if calls == 1:
        out = mapped(*slices[0])
    else:
        compiled = _compiled(mapped, slices[0])  # once, before the threads call it
        with concurrent.futures.ThreadPoolExecutor(calls) as pool:
            parts = list(pool.map(lambda part: jax.block_until_ready(compiled(*part)), slices))
        out = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
    return jax.tree.map(lambda x: x[:n], out)


def default_concurrent_calls(platform: str, devices: int = 1) -> int:
    """Concurrent calls of a sweep on ``devices`` devices of ``platform`` (``"cpu"``, ``"gpu"``,
    ``"tpu"``...): on CPU one per available core not already taken by a host device, else 1.

    One lane of a typical run cannot keep several CPU cores busy (its matmuls are small and the
    steps are sequential), and neither can vmapping lanes together, which costs cache instead
    (measured in benchmarks/README.md, "Training": on 2 cores, 2 concurrent calls of one lane at
    a time were 1.4-1.7x faster than the jitted lanes one after another, one call of 64 vmapped
    lanes 0.6x). An accelerator runs one call.
    """
    if platform != "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // devices)


def default_lanes_per_batch(platform: str, lanes: int) -> int:
    """Lanes vmapped together when a ``platform`` device runs ``lanes`` lanes in one call.

    On CPU one lane at a time (see `default_concurrent_calls`; vmapping many lanes moves their
    intermediates out of cache).
    Accelerators, which one lane cannot fill, vmap all of a call's lanes at once.
    """
    return min(CPU_LANES_PER_BATCH, lanes) if platform == "cpu" else lanes


CPU_LANES_PER_BATCH = 1


def _check_positive(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 or None; got {value!r}")


@functools.lru_cache(maxsize=64)
def _sharded(
    fn: Callable, devices: tuple, lanes_per_batch: int
) -> tuple[Callable, jax.sharding.NamedSharding]:
    mesh = jax.make_mesh(
        (len(devices),), (LANE_AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )
    spec = jax.sharding.PartitionSpec(LANE_AXIS)
    mapped = jax.shard_map(
        functools.partial(_grouped, fn, lanes_per_batch),
        mesh=mesh,
        in_specs=spec,
        out_specs=spec,
        check_vma=False,
    )
    return jax.jit(mapped), jax.sharding.NamedSharding(mesh, spec)


def _compiled(mapped, example) -> Callable:
    """``mapped`` compiled ahead of time for arguments shaped like ``example`` (cached)."""
    leaves, treedef = jax.tree.flatten(example)
    signature = tuple((x.shape, x.dtype, x.sharding) for x in leaves)
    return _compile_for(mapped, treedef, signature)


@functools.lru_cache(maxsize=64)
def _compile_for(mapped, treedef, signature) -> Callable:
    specs = [jax.ShapeDtypeStruct(shape, dtype, sharding=s) for shape, dtype, s in signature]
    return mapped.lower(*jax.tree.unflatten(treedef, specs)).compile()


def _grouped(fn: Callable, size: int, *lanes):
    """``vmap(fn)(*lanes)`` computed as a loop over groups of ``size`` vmapped lanes.

    ``lax.map(..., batch_size=size)`` without its output reshape ``(-1, ...)``, which fails on
    empty outputs (a trajectory without recorded weights has ``[S, 0, 0]`` arrays).
    """
    count = jax.tree.leaves(lanes)[0].shape[0]
    if size >= count:
        return jax.vmap(fn)(*lanes)
    if size == 1:  # a plain loop (measured ~10% faster on CPU than a vmap of one lane)
        return jax.lax.map(lambda args: fn(*args), lanes)
    groups, rest = divmod(count, size)
    full = groups * size
    head = jax.tree.map(lambda x: x[:full].reshape(groups, size, *x.shape[1:]), lanes)
    _, out = jax.lax.scan(lambda _, group: (None, jax.vmap(fn)(*group)), None, head)
    out = jax.tree.map(lambda y: y.reshape(full, *y.shape[2:]), out)
    if not rest:
        return out
    tail = jax.vmap(fn)(*jax.tree.map(lambda x: x[full:], lanes))
    return jax.tree.map(lambda y, z: jnp.concatenate([y, z]), out, tail)


def _pad(x: jax.Array, size: int) -> jax.Array:
    if x.shape[0] == size:
        return x
    tail = jnp.repeat(x[-1:], size - x.shape[0], axis=0)
    return jnp.concatenate([x, tail])


def train_sweep(
    model: str,
    ds: TokenDataset,
    config: train.TrainConfig,
    *,
    gammas: Sequence[float],
    seeds: Sequence[int] = (0,),
    lrs: Sequence[float] | None = None,
    out: str | Path | None = None,
    chunk: int | None = None,
    devices: Sequence[jax.Device] | None = None,
    lanes_per_batch: int | None = None,
    concurrent_calls: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    **model_kwargs,
) -> SweepResult:
    """Train every (gamma, seed, lr) lane of the grid in vmapped, sharded, compiled calls.

    Args:
        model: a `models` name; ``model_kwargs`` go to its constructor (d, activation, dtype...).
        ds: the dataset; ``config`` the training setup (its lr is used when ``lrs`` is None).
        gammas, seeds, lrs: the grid axes.
        out: a folder to save lanes into and resume from (see module docstring).
        chunk: lanes per `sweep_map` call, saved when it finishes (default: all remaining lanes
            at once); every chunk is padded to this size so the sweep compiles once.
        devices: devices to shard over (default: all).
        lanes_per_batch, concurrent_calls: how a chunk's lanes run (see `sweep_map`): split into
            ``concurrent_calls`` slices run at the same time from threads, each device running
            its lanes of a slice in vmapped groups of ``lanes_per_batch``. ``None`` (default):
            `default_concurrent_calls` and `default_lanes_per_batch`: one lane at a time and one
            call per core on CPU (where vmapping many lanes is slower than running them in
            turn), one call vmapping all lanes on an accelerator. They change the speed, not the
            result (beyond float rounding).
        progress: callback ``(lanes_done, lanes_total)``.
    """
    gamma, seed, lr = grid(gammas, seeds, [config.lr] if lrs is None else lrs)
    total = gamma.size
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"chunk must be an int >= 1; got {chunk!r}")
    for name, value in (
        ("lanes_per_batch", lanes_per_batch),
        ("concurrent_calls", concurrent_calls),
    ):
        if value is not None:
            _check_positive(value, name)
    frozen_kwargs = tuple(sorted(model_kwargs.items()))
    lane_fn = _lane_function(model, train._DatasetKey(ds), config, frozen_kwargs)
    store = _LaneStore(out, model, ds, config, model_kwargs, (gamma, seed, lr)) if out else None
    done = store.load() if store else {}
    todo = [i for i in range(total) if i not in done]
    size = min(chunk or max(len(todo), 1), max(len(todo), 1))
    dtype = model_kwargs.get("dtype", jnp.float32)
    start = time.perf_counter()
    if progress:
        progress(len(done), total)
    for first in range(0, len(todo), size):
        index = todo[first : first + size]
        padded = np.asarray(index + [index[-1]] * (size - len(index)))
        trajectories = sweep_map(
            lane_fn,
            jnp.asarray(gamma[padded], dtype=dtype),
            jnp.asarray(seed[padded], dtype=jnp.uint32),
            jnp.asarray(lr[padded], dtype=dtype),
            devices=devices,
            lanes_per_batch=lanes_per_batch,
            concurrent_calls=concurrent_calls,
        )
        trajectories = jax.device_get(trajectories)
        for position, lane in enumerate(index):
            done[lane] = jax.tree.map(lambda x, p=position: np.asarray(x[p]), trajectories)
            if store:
                store.save(lane, done[lane])
        if progress:
            progress(len(done), total)
    trajectory = jax.tree.map(lambda *xs: np.stack(xs), *(done[i] for i in range(total)))
    status = [_status(int(d)) for d in trajectory.diverged_step]
    result = SweepResult(gamma, seed, lr, trajectory, status)
    if store:
        store.finish(result, seconds=time.perf_counter() - start)
    return result


@functools.lru_cache(maxsize=32)
def _lane_function(model, dataset_key, config, frozen_kwargs) -> Callable:
    """``lane(gamma, seed, lr) -> Trajectory``: initialize, then train; one lane of a sweep."""
    ds, kwargs = dataset_key.ds, dict(frozen_kwargs)
    graphdef, _ = train.init_state(model, ds, gamma=1.0, seed=0, **kwargs)
    run = train.make_run(graphdef, ds, config)

    def lane(gamma, seed, lr):
        key = jax.random.key(seed)
        _, state = train.init_state(model, ds, gamma=gamma, seed=key, **kwargs)
        return run(state, lr, jax.random.fold_in(key, 1))

    return lane


def _status(diverged_step: int) -> str:
    return "ok" if diverged_step < 0 else f"diverged at step {diverged_step}"


def _finite_list(values, name: str) -> list[float]:
    values = list(np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if not values or not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be a non-empty list of finite numbers; got {values}")
    return values


class _LaneStore:
    """One folder per sweep: ``sweep.json`` (what is being computed), ``lanes/*.npz`` (each lane
    once finished), then ``arrays.npz`` and ``metrics.json`` (the whole sweep)."""

    def __init__(self, out, model, ds, config, model_kwargs, grid_columns) -> None:
        self.root = Path(out)
        self.spec = {
            "model": model,
            "task": ds.name,
            "task_params": ds.params,
            "n": ds.n,
            "config": _jsonable(config.__dict__),
            "model_kwargs": _jsonable(model_kwargs),
            "grid": np.stack(grid_columns, axis=1).tolist(),
        }

    def load(self) -> dict[int, train.Trajectory]:
        spec_path = self.root / "sweep.json"
        if spec_path.exists():
            saved = json.loads(spec_path.read_text())
            if saved != json.loads(json.dumps(self.spec)):
                raise ValueError(
                    f"out={str(self.root)!r} holds a different sweep (its sweep.json differs); "
                    "choose another folder or delete it"
                )
        else:
            results.write_json(spec_path, self.spec)
        done = {}
        for path in sorted((self.root / "lanes").glob("lane_*.npz")):
            with np.load(path) as arrays:
                done[int(path.stem.split("_")[1])] = train.trajectory_from_arrays(dict(arrays))
        return done

    def save(self, lane: int, trajectory: train.Trajectory) -> None:
        results.write_npz(
            self.root / "lanes" / f"lane_{lane:05d}.npz", **train.trajectory_arrays(trajectory)
        )

    def finish(self, result: SweepResult, seconds: float) -> None:
        arrays = train.trajectory_arrays(result.trajectory)
        results.write_npz(
            self.root / "arrays.npz", gamma=result.gamma, seed=result.seed, lr=result.lr, **arrays
        )
        results.write_json(
            self.root / "metrics.json",
            {
                **self.spec,
                "status": result.status,
                "final_loss": result.trajectory.loss[:, -1],
                "final_accuracy": result.trajectory.accuracy[:, -1],
                "seconds_this_session": seconds,
                "environment": results.environment(),
            },
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)  # dtypes, activations: their printed form identifies them
