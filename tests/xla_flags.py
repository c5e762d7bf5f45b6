"""The XLA flags the test suite runs under (tests/conftest.py) and how to add one.

Four host devices, so the sharded sweep is tested across devices on a CPU-only machine, and XLA's
classic CPU emitters, which compile faster than its MLIR fusion emitters (the suite is mostly
compiling; benchmarks/README.md). ``CTX_STAIRCASE_TEST_XLA_FLAGS`` is appended: for example
``--xla_cpu_max_isa=SSE4_2`` runs the suite as a host without AVX would (tests/README.md,
"Host-to-host spread").
"""

from __future__ import annotations

import os

BASE = "--xla_force_host_platform_device_count=4 --xla_cpu_use_fusion_emitters=false"
EXTRA = "CTX_STAIRCASE_TEST_XLA_FLAGS"


def flags(environ=os.environ) -> str:
    """``XLA_FLAGS`` for a test process: the caller's own (default `BASE`) with the flags of
    `EXTRA` appended once (a pytest-xdist worker inherits its controller's, already appended)."""
    own = environ.get("XLA_FLAGS", BASE)
    extra = environ.get(EXTRA, "").strip()
    return own if not extra or extra in own else f"{own} {extra}"
