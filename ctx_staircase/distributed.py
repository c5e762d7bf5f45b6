"""Several processes, one sweep: JAX's own distributed runtime (``jax.distributed``).

Every process runs the same program. `sweep.sweep_map` gives each process a contiguous block of
the lanes, runs it on the process's own devices and gathers every block to every process
(`gather_lanes`), so the code above it, and its result, are the same as in one process. On CPU
a lane is one call of the same compiled one-lane program whichever process runs it, so the
arrays are bitwise those of one process (tests/test_distributed.py compares them).

Files: only the writer (process 0) writes (`is_writer`, checked by `results.atomic_write_bytes`
and `units.UnitStore`), and what a resumed run finds on disk is read by the writer and sent to
every process (`broadcast_bytes`), so every process skips the same finished units even when
the others cannot see the writer's folder.

Without `initialize` (or a ``jax.distributed.initialize`` of the caller's own) everything here
is the one-process identity, and nothing imports or starts JAX's runtime before it is needed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "Cluster",
    "active",
    "block",
    "broadcast_bytes",
    "broadcast_flag",
    "gather_lanes",
    "initialize",
    "is_writer",
    "process_count",
    "process_index",
    "shutdown",
]

#: The collectives of CPU processes (XLA:CPU has none of its own across processes).
_CPU_COLLECTIVES = "gloo"


class Cluster(NamedTuple):
    """How this process joins the others (the arguments of ``jax.distributed.initialize``).

    Attributes:
        coordinator: ``HOST:PORT`` of process 0's coordination service, or None (auto).
        num_processes, process_id: the number of processes and this one's index, or None (auto).
        auto: let ``jax.distributed.initialize`` detect its cluster (SLURM, Open MPI, TPU pods)
            from the environment.
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    auto: bool = False

    @property
    def requested(self) -> bool:
        return self.auto or self.coordinator is not None or self.num_processes is not None

    def check(self) -> Cluster:
        """Itself, validated: names the bad flag and what is allowed."""
        if not self.requested:
            if self.process_id is not None:
                raise ValueError("--process-id needs --coordinator and --num-processes")
            return self
        if self.auto:
            return self
        missing = [
            flag
            for flag, value in (
                ("--coordinator", self.coordinator),
                ("--num-processes", self.num_processes),
                ("--process-id", self.process_id),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} missing: a process joins a cluster with --coordinator "
                "HOST:PORT --num-processes N --process-id I (or --cluster-auto)"
            )
        host, sep, port = self.coordinator.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"--coordinator must be HOST:PORT with a port in [1, 65535]; "
                f"got {self.coordinator!r}"
            )
        if self.num_processes < 1:
            raise ValueError(f"--num-processes must be >= 1; got {self.num_processes}")
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(
                f"--process-id must lie in [0, {self.num_processes - 1}] "
                f"(--num-processes {self.num_processes}); got {self.process_id}"
            )
        return self


def initialize(cluster: Cluster) -> None:
    """Join the cluster (``jax.distributed.initialize``); a no-op when none is requested.

    Call it before any JAX computation. CPU processes exchange arrays through gloo.
    """
    cluster = cluster.check()
    if not cluster.requested:
        return
    import jax

    jax.config.update("jax_cpu_collectives_implementation", _CPU_COLLECTIVES)
    if cluster.auto:
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(
            coordinator_address=cluster.coordinator,
            num_processes=cluster.num_processes,
            process_id=cluster.process_id,
        )


def shutdown() -> None:
    """Leave the cluster once every process has reached this point
    (``jax.distributed.shutdown``: process 0's coordination service must outlive the others);
    a no-op in one process."""
    import sys

    if "jax" not in sys.modules:
        return
    import jax

    if jax.distributed.is_initialized():
        jax.distributed.shutdown()


def active() -> bool:
    """Whether this process is one of several (``jax.distributed`` initialized, > 1 process)."""
    import sys

    if "jax" not in sys.modules:  # nothing can have initialized it
        return False
    import jax

    return jax.distributed.is_initialized() and jax.process_count() > 1


def process_index() -> int:
    """This process's index (0 in a one-process run)."""
    if not active():
        return 0
    import jax

    return jax.process_index()


def process_count() -> int:
    """The number of processes (1 in a one-process run)."""
    if not active():
        return 1
    import jax

    return jax.process_count()


def is_writer() -> bool:
    """Whether this process writes files: process 0, or the only process."""
    return process_index() == 0


def block(lanes: int, index: int | None = None, count: int | None = None) -> range:
    """The lanes process ``index`` of ``count`` runs: the ``index``-th contiguous block of
    ``ceil(lanes / count)`` (the last blocks may be short or empty)."""
    index = process_index() if index is None else index
    count = process_count() if count is None else count
    size = math.ceil(lanes / count)
    return range(min(index * size, lanes), min((index + 1) * size, lanes))


def gather_lanes(local, lanes: int):
    """Every process's block of lanes, in lane order, on every process.

    Args:
        local: a pytree of arrays whose leading axis holds this process's `block` of the
            ``lanes`` lanes (padded, by the caller, to ``ceil(lanes / process_count())``).
        lanes: the number of lanes of the whole sweep.
    Returns:
        the same pytree with ``[lanes, ...]`` NumPy arrays (the padding dropped).
    """
    import jax
    from jax.experimental import multihost_utils

    def gather(x):
        x = np.asarray(x)
        if x.size == 0:  # gloo has nothing to send; the shape is known
            return np.zeros((process_count() * x.shape[0], *x.shape[1:]), x.dtype)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(lambda x: gather(x)[:lanes], local)


def broadcast_bytes(data: bytes | None) -> bytes | None:
    """The writer's ``data`` (None: nothing) on every process; the identity in one process.

    Other processes pass anything (it is ignored): what a resumed run finds on disk is what the
    writer finds, so every process takes the same branch."""
    if not active():
        return data
    from jax.experimental import multihost_utils

    mine = data if is_writer() else None
    size = -1 if mine is None else len(mine)
    size = int(multihost_utils.broadcast_one_to_all(np.asarray(size, np.int64)))
    if size < 0:
        return None
    buffer = np.frombuffer(mine, np.uint8) if mine is not None else np.zeros(size, np.uint8)
    if size == 0:
        return b""
    return np.asarray(multihost_utils.broadcast_one_to_all(buffer)).tobytes()


def broadcast_flag(flag: bool) -> bool:
    """The writer's ``flag`` on every process (one-process: ``flag``)."""
    if not active():
        return flag
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.asarray(bool(flag))))
