"""Test configuration: float64 for every numerical check, strict dtype promotion, and the shared
corpus path for the tests that need real text."""

import os
from pathlib import Path

# Four host devices, so the sharded sweep is tested across devices on a CPU-only machine; this
# must be set before JAX initializes its backend.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax
import pytest

from ctx_staircase import paths

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def shakespeare_path() -> Path:
    """Path of the real corpus in ../shared/data; the test skips, saying why, where it is absent."""
    path = paths.shared_corpus()
    if not path.is_file():
        pytest.skip(f"real-text corpus not found at {path} (../shared/data is absent here)")
    return path
