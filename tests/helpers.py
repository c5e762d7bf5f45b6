"""Helpers shared by several test files (importable as ``helpers``: pytest puts tests/ on the
path, as it has no ``__init__.py``)."""

from __future__ import annotations

import numpy as np

from ctx_staircase import lm, relu
from ctx_staircase.dataset import TokenDataset


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


def tiny_dataset() -> TokenDataset:
    """L = 2, x in {0..3}^2, y = 4 + (x_1 + 2 x_2 mod 3), unequal sample weights, V = 8 (id 7
    is never a label)."""
    x = np.asarray([(a, b) for a in range(4) for b in range(4)], dtype=np.int32)
    weights = 1.0 + np.arange(len(x)) % 3
    return TokenDataset(
        x, 4 + (x[:, 0] + 2 * x[:, 1]) % 3, vocab_size=8, weights=weights / weights.sum()
    )


def random_weights(V: int, d: int, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return scale * rng.standard_normal((V, d)), scale * rng.standard_normal((V, d))


def gated_operator(problem: relu.GatedProblem, gates: np.ndarray) -> np.ndarray:
    """The [2 V d, 2 V d] matrix of the uniform gated ODE (R3) under fixed ``gates [n, d]``, on
    ``y = (vec W_E, vec W_U)`` (row-major [V, d] each), assembled from the sample sums directly
    rather than from `relu.gated_drive`."""
    counts, drive = np.asarray(problem.counts), np.asarray(problem.drive)
    n, V = counts.shape
    d = gates.shape[1]
    A = np.zeros((2 * V * d, 2 * V * d))
    for j in range(d):
        block = sum(gates[k, j] * np.outer(drive[k], counts[k]) for k in range(n))  # [V, V]
        rows_a = np.arange(V) * d + j
        rows_b = V * d + rows_a
        A[np.ix_(rows_a, rows_b)] = block.T  # da_j = M_j^T b_j
        A[np.ix_(rows_b, rows_a)] = block  # db_j = M_j a_j
    return A
