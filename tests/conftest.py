"""Test configuration: float64 for every numerical check, strict dtype promotion, and the shared
corpus path for the tests that need real text."""

import os
from pathlib import Path

import xla_flags

# set before JAX initializes its backend (tests/xla_flags.py says which and why)
os.environ["XLA_FLAGS"] = xla_flags.flags()

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


_COMPILED: list[str] = []


def _on_duration(name: str, seconds: float, **_) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILED.append(name)


# JAX listeners cannot be removed: one per process, feeding the `compilations` fixture.
jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.fixture
def compilations() -> list[str]:
    """The XLA programs compiled from the moment the fixture is made (cleared again by
    ``compilations.clear()``): "refused before any work" and "cheap" without a clock."""
    _COMPILED.clear()
    return _COMPILED
