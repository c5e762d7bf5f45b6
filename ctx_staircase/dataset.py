"""The token dataset every other module consumes (the paper §3.1).

A sample is a sequence ``X = (x_1, ..., x_L)`` of token ids and a target ``y``; inputs and labels
share one vocabulary ``{0, ..., V-1}`` (the paper §3.1 has ``y`` in the token vocabulary; its size
``V`` is a choice the paper leaves open, theory/regimes.md R2). Sample weights make the population
expectation ``E_D`` explicit: ``E_D[H] = sum_n w_n H(X_n, y_n) / sum_n w_n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctx_staircase.internal import check_ids, check_int

__all__ = [
    "TokenDataset",
    "merged_bags",
]


@dataclass(frozen=True, eq=False)
class TokenDataset:
    """A finite token-prediction dataset.

    Attributes:
        tokens: int32 ``[n, L]`` input sequences.
        labels: int32 ``[n]`` targets, in the same vocabulary as the tokens.
        vocab_size: ``V``; every token and label id lies in ``[0, V)``.
        groups: named token subsets (``"numbers"``, ``"anchors"``, ``"noise"``, ...), each a sorted
            int32 array of token ids.
        weights: float64 ``[n]`` non-negative sample weights (uniform unless the task says
            otherwise); a weight of 0 keeps a sample out of the training distribution.
        sample_groups: named sample subsets (for example held-out test pairs), int64 index arrays.
        name: the task name, and ``params`` the parameters it was made with.
    """

    tokens: np.ndarray
    labels: np.ndarray
    vocab_size: int
    groups: dict[str, np.ndarray] = field(default_factory=dict)
    weights: np.ndarray | None = None
    sample_groups: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        vocab_size = check_int(self.vocab_size, "vocab_size")
        tokens = check_ids(self.tokens, "tokens", vocab_size)
        labels = check_ids(self.labels, "labels", vocab_size)
        if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(
                f"tokens must be a non-empty int array of shape [n, L]; got shape {tokens.shape}"
            )
        if labels.shape != (tokens.shape[0],):
            raise ValueError(
                f"labels must have shape [n] = [{tokens.shape[0]}] to match tokens; "
                f"got shape {labels.shape}"
            )
        n = tokens.shape[0]
        if self.weights is None:
            weights = np.full(n, 1.0 / n)
        else:
            weights = np.asarray(self.weights, dtype=np.float64)
            if weights.shape != (n,):
                raise ValueError(f"weights must have shape [n] = [{n}]; got {weights.shape}")
            if not np.all(np.isfinite(weights)) or np.any(weights < 0):
                raise ValueError("weights must be finite and non-negative")
            if weights.sum() <= 0:
                raise ValueError("weights must have a positive sum")
        groups = {}
        for key, ids in self.groups.items():
            ids = np.unique(check_ids(ids, f"groups[{key!r}]", vocab_size))
            groups[key] = ids.astype(np.int32)
        sample_groups = {}
        for key, idx in self.sample_groups.items():
            idx = check_ids(idx, f"sample_groups[{key!r}]", n, "n").astype(np.int64)
            sample_groups[key] = idx
        for arr in (tokens, labels, weights):
            arr.setflags(write=False)
        object.__setattr__(self, "tokens", tokens.astype(np.int32, copy=False))
        object.__setattr__(self, "labels", labels.astype(np.int32, copy=False))
        object.__setattr__(self, "vocab_size", vocab_size)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "sample_groups", sample_groups)

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(self.tokens.shape[0])

    @property
    def L(self) -> int:
        """Sequence length."""
        return int(self.tokens.shape[1])

    @property
    def probabilities(self) -> np.ndarray:
        """float64 ``[n]`` sample weights normalized to sum to 1."""
        return self.weights / self.weights.sum()

    def subset(self, index: np.ndarray) -> TokenDataset:
        """The samples at ``index``, same vocabulary and groups."""
        index = np.asarray(index)
        return TokenDataset(
            tokens=self.tokens[index],
            labels=self.labels[index],
            vocab_size=self.vocab_size,
            groups=self.groups,
            weights=self.weights[index],
            name=self.name,
            params=self.params,
        )

    def __repr__(self) -> str:
        groups = ", ".join(f"{k}:{v.size}" for k, v in self.groups.items())
        return (
            f"TokenDataset(name={self.name!r}, n={self.n}, L={self.L}, V={self.vocab_size}, "
            f"groups={{{groups}}})"
        )


def merged_bags(tokens, labels, weights) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of a bag-of-tokens model (one that sees a sample only through its token
    counts, like the FFN's ``h = sum_i w^E_{x_i}``), one per distinct (counts, label) with the
    summed weight: ``(tokens [m, L]`` sorted within a sample, ``labels [m]``, ``weights [m])``,
    in lexicographic order of (sorted tokens, label). Any loss of such a model that is a
    weighted sum over samples is the same on them.
    """
    tokens, labels = np.asarray(tokens), np.asarray(labels)
    L = tokens.shape[1]
    keys = np.column_stack([np.sort(tokens, axis=1), labels])
    keys, index = np.unique(keys, axis=0, return_inverse=True)
    summed = np.bincount(index.ravel(), weights=np.asarray(weights, np.float64))
    return keys[:, :L], keys[:, L], summed
