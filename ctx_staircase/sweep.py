"""Sweeps over (gamma, seed, lr): vmapped and sharded on accelerators, lane by lane on CPU
(ARCHITECTURE.md, Data flow).

Values (gamma, seed, lr) are lanes of one compiled program; shapes (V, L, d) are a Python loop
of compiled programs. The dataset is an argument of that program (a `train.TrainData` shared by
the lanes), so one compiled program serves every dataset of the same shapes.

On an accelerator `sweep_map` vmaps the lanes and shards the lane axis
over all devices with ``shard_map`` on a 1-D mesh, padding the lanes to a multiple of the device
count, so the same code fills eight GPUs or a TPU slice. On CPU, where vmapping lanes costs
cache and gains nothing, every lane is one call of the same compiled one-lane program, called
from one thread per core (``concurrent_calls``, `default_concurrent_calls`): the result is then
bitwise the same whatever the chunking, thread count, device count or a lane's position
(``lanes_per_batch > 1`` opts into vmapped lanes on CPU, whose rounding depends on the layout).

With ``out=DIR`` a sweep saves each finished lane atomically; rerunning the same sweep into the
same folder computes only the lanes not yet saved.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import itertools
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import distributed, models, results, train, units
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import SEED_MAX, check_int
from ctx_staircase.progress import expect as expect_work
from ctx_staircase.progress import tick as tick_work

__all__ = [
    "CPU_LANES_PER_BATCH",
    "LANE_AXIS",
    "LaneStore",
    "Layout",
    "Plan",
    "RunStatus",
    "SweepResult",
    "compile_for",
    "compiled_for",
    "default_concurrent_calls",
    "default_lanes_per_batch",
    "grid",
    "lane_by_lane",
    "plan",
    "resumable_map",
    "sharded_map",
    "sweep_map",
    "train_sweep",
]

LANE_AXIS = "lanes"


class RunStatus(NamedTuple):
    """How a lane ended: ``diverged_step``, the first step whose loss was not finite, or None
    for a lane that ended finite. Its text (``str``) is ``"ok"`` or ``"diverged at step k"``,
    the form records keep (`parse` reads it back)."""

    diverged_step: int | None = None

    @property
    def ok(self) -> bool:
        return self.diverged_step is None

    def __str__(self) -> str:
        return "ok" if self.ok else f"diverged at step {self.diverged_step}"

    @classmethod
    def parse(cls, text: str) -> RunStatus:
        """The `RunStatus` of its text; ``ValueError`` naming both forms otherwise."""
        if text == "ok":
            return cls()
        prefix = "diverged at step "
        step = text[len(prefix) :] if isinstance(text, str) and text.startswith(prefix) else ""
        if not step.isdigit():
            raise ValueError(f"status must be 'ok' or 'diverged at step K'; got {text!r}")
        return cls(int(step))


class SweepResult(NamedTuple):
    """A finished sweep: the grid and one trajectory per lane.

    Attributes:
        gamma, seed, lr: ``[G]`` grid values of each lane (gamma-major product order; with
            several datasets, dataset-major).
        trajectory: `train.Trajectory` whose arrays carry a leading ``[G]`` lane axis (NumPy).
            With several datasets, ``attention_position`` is ``[G, S, L_max]`` (zeros past a
            lane's own ``L``).
        status: ``[G]`` each lane's `RunStatus`.
        dataset: ``[G]`` each lane's index into the datasets of a sweep over several (None:
            one dataset).
    """

    gamma: np.ndarray
    seed: np.ndarray
    lr: np.ndarray
    trajectory: train.Trajectory
    status: tuple[RunStatus, ...]
    dataset: np.ndarray | None = None

    def lane(self, index: int) -> train.Trajectory:
        """The trajectory of one lane."""
        return jax.tree.map(lambda x: x[index], self.trajectory)


def grid(gammas, seeds, lrs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (gamma, seed, lr) product, gamma-major; validated (names the bad parameter)."""
    gammas = _finite_list(gammas, "gamma")
    lrs = _finite_list(lrs, "lr")
    train.check_lr(lrs)
    seeds = list(seeds)
    if not seeds:
        raise ValueError(f"seeds must be a non-empty list of ints in [0, {SEED_MAX}]; got []")
    for s in seeds:
        check_int(s, "seeds", 0, SEED_MAX, why=f" (seeds={seeds})")
    points = list(itertools.product(gammas, seeds, lrs))
    gamma, seed, lr = (np.asarray(column) for column in zip(*points, strict=True))
    return gamma.astype(np.float64), seed.astype(np.int64), lr.astype(np.float64)


class Layout(NamedTuple):
    """How `sweep_map` runs its lanes; a field left None takes the platform's default.

    Attributes:
        devices: the devices the lanes run on (default: every device of this process).
        lanes_per_batch: lanes vmapped together in one call (an int >= 1; default
            `default_lanes_per_batch`: one on CPU, which runs lane by lane, every lane of the
            call on an accelerator).
        concurrent_calls: calls run at once (an int >= 1; default `default_concurrent_calls`).
    """

    devices: tuple | None = None
    lanes_per_batch: int | None = None
    concurrent_calls: int | None = None

    def checked(self) -> Layout:
        """The layout with ``devices`` a tuple, once each count is an int >= 1 or None
        (else ``ValueError`` naming it)."""
        check_int(self.lanes_per_batch, "lanes_per_batch", none_ok=True, why=_DEFAULT_NOTE)
        check_int(self.concurrent_calls, "concurrent_calls", none_ok=True, why=_DEFAULT_NOTE)
        return self._replace(devices=None if self.devices is None else tuple(self.devices))


class Plan(NamedTuple):
    """A `Layout` resolved for ``lanes`` lanes on a platform (`plan`).

    Attributes:
        lane_by_lane: each lane one call of a one-lane program (CPU), else vmapped calls.
        devices: how many devices the calls are sharded over (lane by lane: 1).
        calls: calls run at once (lane by lane: threads, at most one per lane).
        per_call: lanes of one call on each device (lane by lane: 1).
        lanes_per_batch: lanes vmapped together within a call, at most ``per_call``.
    """

    lane_by_lane: bool
    devices: int
    calls: int
    per_call: int
    lanes_per_batch: int

    @property
    def in_flight(self) -> int:
        """Lanes resident at once: one per call lane by lane, else a vmapped group per call and
        device."""
        return self.devices * self.calls * self.lanes_per_batch


def plan(layout: Layout, lanes: int, platform: str, devices: int) -> Plan:
    """The `Plan` of ``layout`` for ``lanes`` lanes on ``devices`` devices of ``platform``
    (``"cpu"``, ``"gpu"``, ``"tpu"``, ...), as `sweep_map` runs it."""
    if lane_by_lane(platform, layout.lanes_per_batch):
        threads = layout.concurrent_calls or default_concurrent_calls(platform)
        return Plan(True, 1, min(threads, lanes), 1, 1)
    concurrent = layout.concurrent_calls or default_concurrent_calls(platform, devices)
    per_device = math.ceil(lanes / devices)  # lanes per device in all
    per_call = math.ceil(per_device / min(concurrent, per_device))  # ... in one call
    calls = math.ceil(per_device / per_call)
    batch = layout.lanes_per_batch or default_lanes_per_batch(platform, per_call)
    return Plan(False, devices, calls, per_call, min(batch, per_call))


def sweep_map(
    fn: Callable,
    *lanes,
    layout: Layout | None = None,
    count_lanes: bool = False,
    shared: tuple = (),
):
    """``vmap(fn)(*lanes, *shared)`` over the leading lane axis ``[n]`` of every argument of
    ``lanes``: lane by lane on CPU, vmapped and sharded over the `Layout`'s devices on an
    accelerator (``layout`` None: every default).

    ``shared``: further arguments (pytrees of arrays, e.g. a `train.TrainData`) passed whole to
    every lane after the lane arguments, ``fn(*lane_args, *shared)`` (``vmap`` with
    ``in_axes=None``): one copy, replicated over the devices, and arguments of the compiled
    program rather than constants in it. ``count_lanes``: announce the lanes to the progress
    bars (`progress.expect`) and report each finished lane or call to them (`progress.tick`).

    Two layouts (`plan`; benchmarks/README.md, "Determinism: lane layouts", has each in full
    and what it was measured to give):

    - lane by lane (CPU, the default there): every lane is one call of one compiled one-lane
      program ``jit(fn)``, from ``concurrent_calls`` threads; bitwise the same for every lane
      count, thread count, device or position;
    - vmapped (an accelerator; on CPU by ``lanes_per_batch > 1``): ``concurrent_calls`` equal
      slices of the lanes, each one call of one program sharded over all devices, vmapping
      groups of ``lanes_per_batch``. Another lane count, slicing or grouping compiles another
      program, whose rounding may differ.

    Several processes (``jax.distributed`` initialized, e.g. by the CLI's ``--coordinator``):
    each runs a block of the lanes, gathered to every process (`distributed.gather_lanes`), so
    the caller runs unchanged; on CPU the result is bitwise that of one process.
    """
    layout = (layout or Layout()).checked()
    devices = layout.devices or tuple(jax.devices())
    sizes = {x.shape[0] for x in jax.tree.leaves(lanes)}
    if len(sizes) != 1:
        raise ValueError(f"every argument must share the leading lane axis; got sizes {sizes}")
    (n,) = sizes
    if n == 0:
        raise ValueError("sweep_map needs at least one lane; got no lanes (leading axes of 0)")
    if distributed.active():
        return _across_processes(fn, lanes, shared, n, devices, layout, count_lanes)
    return _here(fn, lanes, shared, n, devices, layout, count_lanes)


def _here(fn, lanes, shared, n, devices, layout: Layout, count_lanes):
    """`sweep_map` on ``devices``, all of them this process's."""
    planned = plan(layout, n, devices[0].platform, len(devices))
    if count_lanes:
        expect_work(n)
    if planned.lane_by_lane:
        return _lane_by_lane(fn, lanes, shared, n, devices[0], planned.calls, count_lanes)
    size = planned.per_call * len(devices)  # lanes per call
    mapped, sharding = sharded_map(fn, devices, planned.lanes_per_batch)
    lanes = jax.tree.map(lambda x: _pad(jnp.asarray(x), size * planned.calls), lanes)
    replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    shared = jax.device_put(tuple(shared), replicated)
    slices = [
        (
            jax.tree.map(
                lambda x, i=i: jax.device_put(x[i * size : (i + 1) * size], sharding), lanes
            ),
            shared,
        )
        for i in range(planned.calls)
    ]
    if planned.calls == 1:
        out = jax.block_until_ready(mapped(*slices[0]))
    else:
        compiled = compiled_for(mapped, slices[0])  # once, before the threads call it
        with concurrent.futures.ThreadPoolExecutor(planned.calls) as pool:
            parts = list(pool.map(lambda part: jax.block_until_ready(compiled(*part)), slices))
        out = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
    if count_lanes:
        tick_work(n)
    return jax.tree.map(lambda x: x[:n], out)


def _across_processes(fn, lanes, shared, n, devices, layout: Layout, count_lanes):
    """`sweep_map` in a run of several processes (`distributed`): this process runs its
    contiguous block of the lanes (`distributed.block`, padded by repeating its last lane so
    every process runs as many) on its own devices, then every block is gathered to every
    process. A lane runs the program it runs in one process, so on CPU the result is bitwise
    that of one process."""
    mine = tuple(d for d in devices if d.process_index == jax.process_index())
    if not mine:
        raise ValueError(f"devices holds none of process {jax.process_index()}'s devices")
    block = list(distributed.block(n)) or [n - 1]
    size = math.ceil(n / distributed.process_count())
    index = np.asarray(block + [block[-1]] * (size - len(block)))
    local = jax.tree.map(lambda x: np.asarray(x)[index], lanes)
    out = jax.device_get(_here(fn, local, shared, size, mine, layout, count_lanes))
    return jax.tree.map(jnp.asarray, distributed.gather_lanes(out, n))


def lane_by_lane(platform: str, lanes_per_batch: int | None = None) -> bool:
    """Whether `sweep_map` runs lanes one per call of a one-lane program (CPU, unless
    ``lanes_per_batch > 1`` asks for vmapped lanes) rather than vmapped (accelerators)."""
    return platform == "cpu" and (lanes_per_batch is None or lanes_per_batch == 1)


def _lane_by_lane(
    fn: Callable, lanes, shared, n: int, device: jax.Device, threads: int, count: bool
):
    """``vmap(fn)(*lanes, *shared)`` (``shared`` unmapped) as ``n`` calls of one compiled
    one-lane program on ``device``, from ``threads`` threads; the outputs stacked on ``device``;
    ``count``: `progress.tick` per finished lane."""
    leaves, treedef = jax.tree.flatten(lanes)
    rows = [list(x) for x in leaves]  # a few device ops per argument (not one per lane)
    shared = jax.device_put(tuple(shared), device)
    per_lane = [
        (*jax.device_put(jax.tree.unflatten(treedef, [row[i] for row in rows]), device), *shared)
        for i in range(n)
    ]
    compiled = compiled_for(_jitted(fn), per_lane[0])  # once, before the threads call it

    def call(args):
        out = jax.block_until_ready(compiled(*args))
        if count:
            tick_work(1)
        return out

    if threads == 1 or n == 1:
        outs = [call(args) for args in per_lane]
    else:
        with concurrent.futures.ThreadPoolExecutor(min(threads, n)) as pool:
            outs = list(pool.map(call, per_lane))
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


@functools.lru_cache(maxsize=64)
def _jitted(fn: Callable) -> Callable:
    return jax.jit(fn)


def default_concurrent_calls(platform: str, devices: int = 1) -> int:
    """Concurrent calls of a sweep on ``devices`` devices of ``platform`` (``"cpu"``, ``"gpu"``,
    ``"tpu"``...): on CPU one per available core not already taken by a host device, else 1.
    Lane by lane (`sweep_map` on CPU) every call runs on one device: ``devices=1``, one call
    per core.

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


_DEFAULT_NOTE = " (None: the platform default)"


@functools.lru_cache(maxsize=64)
def sharded_map(
    fn: Callable, devices: tuple, lanes_per_batch: int
) -> tuple[Callable, jax.sharding.NamedSharding]:
    """The vmapped layout of `sweep_map` as one jitted program ``mapped(lanes, shared)``
    (cached): ``fn(*lane, *shared)`` vmapped over the leading axis of every array of the tuple
    ``lanes``, in groups of ``lanes_per_batch`` lanes, sharded over ``devices`` (a 1-D mesh on
    `LANE_AXIS`), the tuple ``shared`` replicated. Returns the program and the sharding of its
    lane arguments and outputs."""
    mesh = jax.make_mesh(
        (len(devices),), (LANE_AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )
    spec = jax.sharding.PartitionSpec(LANE_AXIS)

    def grouped(lanes, shared):
        return _grouped(lambda *lane: fn(*lane, *shared), lanes_per_batch, *lanes)

    mapped = jax.shard_map(
        grouped,
        mesh=mesh,
        in_specs=(spec, jax.sharding.PartitionSpec()),
        out_specs=spec,
        check_vma=False,
    )
    return jax.jit(mapped), jax.sharding.NamedSharding(mesh, spec)


def compiled_for(mapped: Callable, example) -> Callable:
    """``mapped`` (a jitted function) compiled ahead of time for arguments shaped, typed and
    placed like ``example`` (a tuple of arguments); cached per signature in `compile_for`."""
    leaves, treedef = jax.tree.flatten(example)
    signature = tuple((x.shape, x.dtype, jax.typeof(x).weak_type, x.sharding) for x in leaves)
    return compile_for(mapped, treedef, signature)


@functools.lru_cache(maxsize=64)
def compile_for(mapped: Callable, treedef, signature) -> Callable:
    """``mapped.lower(...).compile()`` for the arguments of ``treedef`` whose leaves have the
    ``(shape, dtype, weak_type, sharding)`` of ``signature`` (cached: one compile each)."""
    specs = [
        jax.ShapeDtypeStruct(shape, dtype, sharding=s, weak_type=weak)
        for shape, dtype, weak, s in signature
    ]
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
    ds: TokenDataset | Sequence[TokenDataset],
    config: train.TrainConfig,
    *,
    gammas: Sequence[float],
    seeds: Sequence[int] = (0,),
    lrs: Sequence[float] | None = None,
    out: str | Path | None = None,
    chunk: int | None = None,
    layout: Layout | None = None,
    progress: Callable[[int, int], None] | None = None,
    **model_kwargs,
) -> SweepResult:
    """Train every (gamma, seed, lr) lane of the grid in vmapped, sharded, compiled calls.

    Args:
        model: a `models` name; ``model_kwargs`` go to its constructor (d, activation, dtype...).
        ds: the dataset, or several (a context-order axis: one task at several sequence lengths
            ``L``), padded to one shape (`train.TrainData.padded`) so that every (dataset,
            gamma, seed, lr) lane runs one compiled program; datasets of different ``L`` need a
            model without positions (`models.ModelSpec.sequence` False). On CPU a lane equals
            its dataset's own run bitwise where the arithmetic is the same (tests/test_sweep.py).
        config: the training setup (its lr is used when ``lrs`` is None).
        gammas, seeds, lrs: the grid axes.
        out: a folder to save lanes into and resume from (module docstring, `units.UnitStore`:
            a crashed sweep of other settings there is replaced, a finished one refused);
            without it, lanes are saved under the active `units.caching` folder, if any.
        chunk, progress, layout: as in `resumable_map` and `sweep_map`. By default, on CPU, lane
            by lane: ``chunk``, the `Layout`'s devices and concurrent calls and a lane's
            position change the speed and never a bit of the result.

    Under several processes (`distributed`) every process calls it with the same arguments
    and returns the whole result; only process 0 writes the lanes.
    """
    datasets = _datasets(model, ds)
    lane_grid = _lane_grid(datasets, gammas, seeds, [config.lr] if lrs is None else lrs)
    check_int(chunk, "chunk", none_ok=True)
    misplaced = sorted(set(Layout._fields) & set(model_kwargs))
    if misplaced:
        raise TypeError(f"{misplaced[0]} is a field of sweep.Layout: pass layout=Layout(...)")
    layout = (layout or Layout()).checked()
    store = _sweep_store(model, ds, datasets, config, model_kwargs, out, lane_grid)
    start = time.perf_counter()
    fn, shared, lane_args = _sweep_program(model, config, model_kwargs, ds, datasets, lane_grid)
    lanes = resumable_map(
        fn,
        *lane_args,
        store=store,
        shared=shared,
        chunk=chunk,
        steps_per_lane=config.steps,
        progress=progress,
        layout=layout,
    )
    result = _sweep_result(lanes, lane_grid)
    if store:
        _save_sweep(store, result, seconds=time.perf_counter() - start)
    return result


class _LaneGrid(NamedTuple):
    """The lanes of a `train_sweep`: each lane's grid values ``[G]`` and, for a sweep over
    several datasets, its dataset index ``[G]`` (else None)."""

    gamma: np.ndarray
    seed: np.ndarray
    lr: np.ndarray
    dataset: np.ndarray | None


def _lane_grid(datasets, gammas, seeds, lrs) -> _LaneGrid:
    """The `grid` of (gamma, seed, lr), repeated dataset-major for every dataset of
    ``datasets`` (None: one dataset)."""
    gamma, seed, lr = grid(gammas, seeds, lrs)
    dataset = None
    if datasets is not None:  # dataset-major: every (gamma, seed, lr) lane of each dataset
        dataset = np.repeat(np.arange(len(datasets)), gamma.size)
        gamma, seed, lr = (np.tile(x, len(datasets)) for x in (gamma, seed, lr))
    return _LaneGrid(gamma, seed, lr, dataset)


def _sweep_store(model, ds, datasets, config, model_kwargs, out, lane_grid: _LaneGrid):
    """The `LaneStore` of a `train_sweep` (None: nothing is saved), each lane's unit named by
    its gamma, seed and lr (and, with several datasets, its dataset's index)."""
    keys = [_value_key(*lane) for lane in zip(*lane_grid[:3], strict=True)]  # gamma, seed, lr
    if lane_grid.dataset is not None:
        keys = [
            f"lane_data{i}_{key.removeprefix('lane_')}"
            for i, key in zip(lane_grid.dataset, keys, strict=True)
        ]
    return LaneStore.create(
        "sweep",
        out,
        _sweep_spec(model, ds if datasets is None else datasets, config, model_kwargs),
        done="metrics.json",
        to_arrays=train.trajectory_arrays,
        from_arrays=train.trajectory_from_arrays,
        required=("steps", "loss", "W_E"),
        keys=keys,
    )


def _sweep_program(model, config, model_kwargs, ds, datasets, lane_grid: _LaneGrid):
    """``(fn, shared, lane_args)`` of a `train_sweep`: the one-lane training function, the
    data every lane shares (one `train.TrainData`, padded over several datasets) and the lane
    arguments (gamma and lr in the model's dtype, seed uint32, the dataset index int32)."""
    dtype = model_kwargs.get("dtype", jnp.float32)
    frozen = tuple(sorted(model_kwargs.items()))
    lane_args = (
        jnp.asarray(lane_grid.gamma, dtype=dtype),
        jnp.asarray(lane_grid.seed, dtype=jnp.uint32),
        jnp.asarray(lane_grid.lr, dtype=dtype),
    )
    if datasets is None:
        fn, shared = _lane_function(model, config, frozen), (train.TrainData.from_dataset(ds),)
    else:
        fn = _padded_lane_function(model, config, frozen)
        shared = (train.TrainData.padded(datasets),)
        lane_args = (*lane_args, jnp.asarray(lane_grid.dataset, dtype=jnp.int32))
    return fn, shared, lane_args


def _sweep_result(records: list, lane_grid: _LaneGrid) -> SweepResult:
    """The `SweepResult` of a sweep's per-lane trajectories ``records`` (stacked on ``[G]``)."""
    trajectory = jax.tree.map(lambda *xs: np.stack(xs), *records)
    status = tuple(RunStatus(int(d) if d >= 0 else None) for d in trajectory.diverged_step)
    return SweepResult(*lane_grid[:3], trajectory, status, lane_grid.dataset)


def resumable_map(
    fn: Callable,
    *lanes,
    store: LaneStore | None = None,
    shared: tuple = (),
    chunk: int | None = None,
    steps_per_lane: int = 0,
    progress: Callable[[int, int], None] | None = None,
    layout: Layout | None = None,
) -> list:
    """`sweep_map` ``(fn, *lanes, shared=shared)`` that resumes: the lanes ``store`` holds are
    loaded, the others run ``chunk`` lanes per `sweep_map` call, each lane saved into ``store``
    as soon as its call returns (used by `train_sweep` and `lm.train_lm`).

    Args:
        fn: one lane's run, ``fn(*lane, *shared) -> record`` (a pytree of arrays).
        lanes: pytrees of arrays with a leading ``[G]`` lane axis (`sweep_map`'s lane
            arguments); ``shared``: passed whole to every lane (one copy, not one per lane).
        store: where lanes are saved and found (None: nothing is saved).
        chunk: lanes per `sweep_map` call (default: all those not saved); in the vmapped layout
            the last call is padded to ``chunk`` lanes so every call runs one compiled program.
        steps_per_lane: the work of one lane announced to the progress bars (`progress.expect`;
            this process's lanes only); ``progress``: callback ``(lanes_done, lanes_total)``.
        layout: how the lanes run, as in `sweep_map`.

    Returns:
        The ``G`` records, NumPy, in lane order. A lane runs the same compiled program whatever
        else runs (on CPU), so a resumed result equals an uninterrupted one bitwise.

    Under several processes (`distributed`) every process calls it alike and gets every lane;
    only process 0 writes, and every process skips what process 0 found saved (`LaneStore`).
    """
    total = jax.tree.leaves(lanes)[0].shape[0]
    done = store.load(total) if store else {}
    todo = [i for i in range(total) if i not in done]
    size = min(chunk or max(len(todo), 1), max(len(todo), 1))
    mine = sum(len(distributed.block(len(todo[i : i + size]))) for i in range(0, len(todo), size))
    expect_work(mine * steps_per_lane)
    # lane by lane, every lane is its own call: padding a chunk would only compute lanes twice
    layout = (layout or Layout()).checked()
    pad = not lane_by_lane((layout.devices or jax.devices())[0].platform, layout.lanes_per_batch)
    if progress:
        progress(len(done), total)
    for first in range(0, len(todo), size):
        index = todo[first : first + size]
        padded = np.asarray(index + [index[-1]] * (size - len(index)) * pad)
        records = sweep_map(
            fn,
            *jax.tree.map(lambda x, p=padded: x[p], lanes),
            layout=layout,
            shared=shared,
        )
        _keep_lanes(jax.device_get(records), index, done, store)
        if progress:
            progress(len(done), total)
    return [done[i] for i in range(total)]


def _keep_lanes(records, index: list[int], done: dict, store: LaneStore | None) -> None:
    """Put the lanes ``index`` of one `sweep_map` call's ``records`` (NumPy, a leading lane
    axis, padding past ``len(index)``) into ``done``, each saved into ``store`` at once."""
    for position, lane in enumerate(index):
        done[lane] = jax.tree.map(lambda x, p=position: np.asarray(x[p]), records)
        if store:
            store.save(lane, done[lane])


@functools.lru_cache(maxsize=32)
def _lane_function(model, config, frozen_kwargs) -> Callable:
    """``lane(gamma, seed, lr, data) -> Trajectory``: initialize, then train; one lane of a
    sweep. ``data`` (a `train.TrainData`) is an argument, so `sweep_map`'s compiled programs
    are keyed by the data's shapes and reused for every dataset of those shapes."""
    kwargs = dict(frozen_kwargs)

    def lane(gamma, seed, lr, data):
        key = jax.random.key(seed)
        graphdef, state = train.init_state(model, data, gamma=gamma, seed=key, **kwargs)
        return train.make_run(graphdef, config)(state, lr, train.minibatch_key(key), data)

    return lane


@functools.lru_cache(maxsize=32)
def _padded_lane_function(model, config, frozen_kwargs) -> Callable:
    """``lane(gamma, seed, lr, index, data) -> Trajectory``: `_lane_function`'s lane on dataset
    ``index`` of the stacked, padded datasets ``data`` (`train.TrainData.padded`)."""
    lane = _lane_function(model, config, frozen_kwargs)

    def padded_lane(gamma, seed, lr, index, data):
        return lane(gamma, seed, lr, jax.tree.map(lambda x: x[index], data))

    return padded_lane


def _datasets(model: str, ds) -> list[TokenDataset] | None:
    """The datasets of a sweep over several (None for one ``TokenDataset``), checked: a model
    with positions cannot take datasets of different sequence lengths."""
    if isinstance(ds, TokenDataset):
        return None
    datasets = list(ds)
    if not datasets or not all(isinstance(d, TokenDataset) for d in datasets):
        raise ValueError(
            f"ds must be a TokenDataset or a non-empty sequence of them; got {type(ds).__name__}"
        )
    lengths = sorted({d.L for d in datasets})
    if len(lengths) > 1 and models.get(model).sequence:
        raise ValueError(
            f"model {model!r} has weights sized by the sequence length, so it cannot train "
            f"datasets of lengths {lengths} as lanes of one sweep; use a model without "
            f"positions ({', '.join(m.name for m in models.REGISTRY if not m.sequence)}) or one "
            "sweep per length"
        )
    return datasets


def _finite_list(values, name: str) -> list[float]:
    try:
        values = list(np.atleast_1d(np.asarray(values, dtype=np.float64)))
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a non-empty list of finite numbers; got {values!r}"
        ) from None
    if not values or not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be a non-empty list of finite numbers; got {values}")
    return values


def _digest(ds) -> str:
    """SHA-256 of the dataset's tokens, labels, weights and vocabulary size."""
    digest = hashlib.sha256(str(ds.vocab_size).encode())
    for array in (ds.tokens, ds.labels, ds.weights):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class LaneStore:
    """The on-disk record of a run of lanes that resumes (`resumable_map`; public for tests that
    interrupt it).

    One folder per run (a `units.UnitStore`): ``spec.json`` (what is being computed),
    ``units/lane_*.npz`` (each lane once finished), then the run's summary, written last, whose
    presence marks the run finished (``done``: `train_sweep`'s ``metrics.json`` after its
    ``arrays.npz``, `lm.train_lm`'s ``finished.json``). Under several processes (`distributed`)
    process 0 alone reads and writes, and sends what it found to the others.

    A lane is a record (a pytree of arrays: a `train.Trajectory`, a dict) that ``to_arrays``
    turns into named arrays and ``from_arrays`` back; ``required``: the names every saved lane
    holds (a lane missing one is recomputed). ``keys`` names each lane's unit by what sets its
    numbers (a sweep's gamma, seed and lr), so a grid grown around it finds it; without, lanes
    are named by position."""

    def __init__(
        self,
        store: units.UnitStore,
        *,
        to_arrays: Callable[[Any], dict] = dict,
        from_arrays: Callable[[dict], Any] = dict,
        required: Sequence[str] = (),
        keys: Sequence[str] | None = None,
    ) -> None:
        self.store = store
        self.to_arrays = to_arrays
        self.from_arrays = from_arrays
        self.required = tuple(required)
        self.keys = None if keys is None else tuple(keys)

    @classmethod
    def create(cls, kind: str, out, spec: dict, *, done: str, **record) -> LaneStore | None:
        """The store of ``spec`` in the folder ``out``; without one, under the active
        `units.caching` folder (a folder per ``kind`` and spec); outside one, None (nothing
        saved). ``record``: `LaneStore`'s ``to_arrays``, ``from_arrays``, ``required``."""
        if out is not None:
            store = units.UnitStore(out, spec, done=done)
        else:
            store = units.cached_store(kind, spec, done=done)
        return cls(store, **record) if store is not None else None

    @property
    def root(self) -> Path:
        return self.store.root

    @property
    def spec(self) -> dict:
        return self.store.spec

    def key(self, lane: int) -> str:
        """The unit name of lane ``lane``."""
        return self.keys[lane] if self.keys is not None else _lane_key(lane)

    def load(self, total: int) -> dict[int, Any]:
        """The saved lanes among ``0..total-1``, by lane."""
        done = {}
        for lane in range(total):
            arrays = self.store.load(self.key(lane), self.required)
            if arrays is not None:
                done[lane] = self.from_arrays(arrays)
        return done

    def save(self, lane: int, record) -> None:
        self.store.save(self.key(lane), **self.to_arrays(record))

    def finish(self, **summary: Any) -> None:
        """Mark the run finished: ``done`` holds the spec and ``summary`` (`units.UnitStore`)."""
        self.store.finish(**summary)


def _lane_key(lane: int) -> str:
    return f"lane_{lane:05d}"


def _value_key(gamma: float, seed: int, lr: float) -> str:
    """A sweep lane's unit name from the values that set its numbers (``repr`` keeps every
    float exact)."""
    return f"lane_gamma{float(gamma)!r}_seed{int(seed)}_lr{float(lr)!r}"


def _sweep_spec(model, ds, config, model_kwargs) -> dict:
    """What every lane of a `train_sweep` shares, as its `LaneStore` records it: the grid is
    not in it (each lane's unit is named by its gamma, seed and lr), so a sweep grown by more
    gammas, seeds or lrs reuses the lanes it has."""
    if not isinstance(ds, TokenDataset):  # several: each lane's unit names its dataset's index
        return {
            "model": model,
            "task": [d.name for d in ds],
            "task_params": [d.params for d in ds],
            "n": [d.n for d in ds],
            "data": [_digest(d) for d in ds],
            "config": _jsonable(config.__dict__),
            "model_kwargs": _jsonable(model_kwargs),
        }
    return {
        "model": model,
        "task": ds.name,
        "task_params": ds.params,
        "n": ds.n,
        "data": _digest(ds),  # the data itself: a name and parameters may hide a change
        "config": _jsonable(config.__dict__),
        "model_kwargs": _jsonable(model_kwargs),
    }


def _save_sweep(store: LaneStore, result: SweepResult, seconds: float) -> None:
    """A finished sweep's ``arrays.npz``, then ``metrics.json`` (its spec and summary), which
    marks it finished."""
    arrays = train.trajectory_arrays(result.trajectory)
    grid = dict(gamma=result.gamma, seed=result.seed, lr=result.lr)
    if result.dataset is not None:
        grid["dataset"] = result.dataset
    results.write_npz(store.root / "arrays.npz", **grid, **arrays)
    results.write_json(
        store.root / "metrics.json",
        {
            **store.spec,
            "status": [str(status) for status in result.status],
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
