"""The training loop shared by `train` and `lm`: snapshot segments, divergence freeze, recording.

A run is one ``lax.scan`` over the segments between snapshot steps, each segment a
``lax.fori_loop`` of optimizer steps, with the state recorded at the end of every segment; nothing
runs per step in Python. The caller supplies the step (``update(i, carry) -> carry``, ending in
`guarded_step`) and what a snapshot records (``record(state) -> pytree``).

Divergence: `guarded_step` keeps a lane's last finite state when a step's loss or new parameters
are non-finite, and records that step in ``Carry.diverged`` (-1 while finite); every later step is
discarded the same way, so the lane stays frozen while the other lanes of a sweep go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import internal, progress

__all__ = [
    "Carry",
    "Result",
    "guarded_step",
    "initial_carry",
    "run",
    "segments",
]


class Carry(NamedTuple):
    """What the loop carries from step to step.

    Attributes:
        state: the model parameters (a pytree, e.g. an ``nnx.State``).
        opt_state: the optimizer's state (a pytree).
        diverged: int32 scalar, the step whose update went non-finite, or -1 while finite.
    """

    state: Any
    opt_state: Any
    diverged: jax.Array


class Result(NamedTuple):
    """A finished `run`.

    Attributes:
        carry: the `Carry` after the last step (the frozen state if the run diverged).
        recorded: the pytree ``record`` returns, each leaf with a leading snapshot axis ``[S]``.
    """

    carry: Carry
    recorded: Any


def initial_carry(state: Any, opt_state: Any) -> Carry:
    """The `Carry` before step 0: ``state``, ``opt_state`` and ``diverged = -1`` (int32)."""
    return Carry(state, opt_state, jnp.asarray(-1, dtype=jnp.int32))


def guarded_step(i: jax.Array, carry: Carry, loss: jax.Array, new_state, new_opt_state) -> Carry:
    """Accept step ``i``'s update only while the run is finite.

    The update is kept when no earlier step diverged and both ``loss`` and every leaf of
    ``new_state`` are finite; otherwise the carry keeps its state and optimizer state, and
    ``diverged`` becomes ``i`` (the first time) and stays there.
    """
    finite = jnp.isfinite(loss) & internal.all_finite(new_state)
    diverged = jnp.where(
        (carry.diverged < 0) & ~finite, i.astype(carry.diverged.dtype), carry.diverged
    )
    keep = diverged < 0
    return Carry(
        internal.select(keep, new_state, carry.state),
        internal.select(keep, new_opt_state, carry.opt_state),
        diverged,
    )


def segments(snapshots: Sequence[int], *, record_initial: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``(starts, lengths)`` of the segments of a run recorded at ``snapshots`` (sorted steps).

    With ``record_initial`` the state before step 0 is recorded outside the segments, so
    ``snapshots[0]`` must be 0 and there is one segment per later snapshot:
    ``[snapshots[k-1], snapshots[k])`` for k >= 1. Without it there is one segment per snapshot,
    ``[snapshots[k-1], snapshots[k])`` with ``snapshots[-1] := 0`` (a snapshot at step 0 is an
    empty first segment). Both are int64 NumPy arrays of one length.
    """
    steps = np.asarray(snapshots, dtype=np.int64)
    if steps.ndim != 1 or steps.size == 0 or np.any(np.diff(steps) <= 0) or steps[0] < 0:
        raise ValueError(f"snapshots must be increasing steps >= 0; got {list(snapshots)}")
    if record_initial:
        if steps[0] != 0:
            raise ValueError(
                f"snapshots must start at 0 with record_initial; got {list(snapshots)}"
            )
        return steps[:-1], np.diff(steps)
    starts = np.concatenate([[0], steps[:-1]])
    return starts, steps - starts


def run(
    update: Callable[[jax.Array, Carry], Carry],
    carry: Carry,
    record: Callable[[Any], Any],
    snapshots: Sequence[int],
    *,
    record_initial: bool,
    step_dtype: Any = jnp.int32,
) -> Result:
    """Run ``update`` from step 0 to ``snapshots[-1]``, recording ``record(state)`` at each
    snapshot step (jit-, vmap- and grad-safe; ``snapshots`` are static).

    Args:
        update: one optimizer step ``update(i, carry) -> carry`` (ending in `guarded_step`).
        carry: the `Carry` before step 0 (`initial_carry`).
        record: what one snapshot keeps, ``record(state) -> pytree`` of arrays.
        snapshots: sorted distinct steps; the state after ``snapshots[k]`` steps is recorded.
        record_initial: record the step-0 state outside the scan (see `segments`); the two
            ways give the same values and ``snapshots`` must then start at 0.
        step_dtype: the integer dtype of the step counter ``i`` handed to ``update``.

    Returns:
        `Result`: the last carry and the recorded pytree, leaves ``[len(snapshots), ...]``.
    """
    starts, lengths = segments(snapshots, record_initial=record_initial)

    def segment(carry, bounds):
        start, length = bounds
        carry = jax.lax.fori_loop(start, start + length, update, carry)
        progress.device_tick(length, carry.diverged)
        return carry, record(carry.state)

    bounds = (jnp.asarray(starts, dtype=step_dtype), jnp.asarray(lengths, dtype=step_dtype))
    first = record(carry.state) if record_initial else None
    carry, recorded = jax.lax.scan(segment, carry, bounds)
    if record_initial:
        recorded = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, recorded)
    return Result(carry, recorded)
