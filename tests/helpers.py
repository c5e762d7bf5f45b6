"""Helpers shared by several test files (importable as ``helpers``: pytest puts tests/ on the
path, as it has no ``__init__.py``)."""

from __future__ import annotations

from ctx_staircase import lm


def small_lm_config(**overrides) -> lm.LMConfig:
    """The tests' small `lm.LMConfig`: a GPT of d = 16, one layer of 2 heads, T = 8, batches of
    4, 12 AdamW steps with snapshots every 4; 12 tracked tokens of count >= 2, a probe vocabulary
    of 12, 6 signature and 4 validation windows. ``overrides`` replace any of its fields."""
    small = dict(
        d=16,
        n_layers=1,
        n_heads=2,
        context_length=8,
        batch_size=4,
        steps=12,
        snapshot_every=4,
        tracked=12,
        min_count=2,
        probe_vocabulary=12,
        signature_windows=6,
        validation_windows=4,
    )
    return lm.LMConfig(**(small | overrides))
