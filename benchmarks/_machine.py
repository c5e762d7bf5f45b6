"""What the benchmarks share: what else is running (wall times on a shared machine are noisy),
the machine's dense matmul rate, and JAX's own compile-time events (``jax.monitoring``)."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager

import jax
import jax.numpy as jnp

#: The ``jax.monitoring`` duration events that time tracing, lowering and XLA compilation.
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def other_busy_processes(threshold: float = 20.0) -> list[str]:
    """Other processes above ``threshold``% CPU (ps's lifetime average; empty without ps)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid,pcpu,args", "--no-headers"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    busy = []
    for line in out.splitlines():
        pid, pcpu, command = line.split(None, 2)
        if int(pid) != os.getpid() and float(pcpu) > threshold:
            busy.append(f"{pid} {pcpu}% {command[:70]}")
    return busy


def matmul_peak(size: int = 2048, repeats: int = 5) -> dict:
    """The dense float32 matmul rate: best of ``repeats`` jitted ``size``² ``jnp.matmul``
    (2 size³ FLOP each) after one warm-up call."""
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    jax.block_until_ready(matmul(a, b))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a, b))
        times.append(time.perf_counter() - start)
    flops = 2.0 * size**3
    return {"size": size, "best_s": min(times), "flops_per_s": flops / min(times)}


@contextmanager
def compile_log():
    """Collect JAX's compile-time events (`COMPILE_EVENTS`, from ``jax.monitoring``) as
    ``(event, seconds)`` pairs while the block runs: the compile share of a call that compiles
    implicitly (tracing, lowering to MLIR, XLA compile)."""
    records: list[tuple[str, float]] = []

    def listen(event: str, seconds: float, **_kwargs) -> None:
        if event in COMPILE_EVENTS:
            records.append((event, seconds))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield records
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
