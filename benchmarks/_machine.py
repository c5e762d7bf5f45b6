"""What the benchmarks share: what else is running (wall times on a shared machine are noisy),
the machine's dense matmul rate, and JAX's own compile-time records."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from contextlib import contextmanager

import jax
import jax.numpy as jnp

#: The loggers whose "Finished <stage> in <t> sec" debug records time tracing, lowering and
#: XLA compilation.
JAX_LOGGERS = (
    "jax._src.dispatch",
    "jax._src.interpreters.pxla",
    "jax._src.compiler",
    "jax._src.pjit",
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
    """Collect JAX's "Finished <stage> in <t> sec" debug records as ``(stage, seconds)`` pairs:
    the compile share of a call that compiles implicitly."""
    records: list[tuple[str, float]] = []
    pattern = re.compile(r"^Finished (.*) in ([0-9.eE+-]+) sec")

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = pattern.match(record.getMessage())
            if match:
                records.append((match.group(1), float(match.group(2))))

    handler, saved = Handler(logging.DEBUG), []
    for name in JAX_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
