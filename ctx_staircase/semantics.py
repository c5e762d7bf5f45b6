"""Semantic structure of a set of token vectors (paper Fig. 11; thresholds in theory/lm.md §5).

Each function takes the vectors of one word group, rows in the group's natural order, and
measures one known structure:

- `number_order`: do the numbers lie in order along the first principal component?
- `cycle_neighbours`: do weekdays (months) form a cycle in the top-2 PCA plane?
- `category_purity`: do the words of each category sit next to each other?

They apply equally to signature rows (``phi^{y;nt}_alpha``) and to learned embeddings (rows of
``W_E``), so the same numbers say how much of the data's structure the model kept.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ctx_staircase import metrics

__all__ = [
    "category_purity",
    "cycle_neighbours",
    "number_order",
]


def _rows(vectors, minimum: int, name: str) -> np.ndarray:
    X = np.asarray(vectors, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < minimum or not np.all(np.isfinite(X)):
        raise ValueError(
            f"{name}: expected finite vectors [n, d] with n >= {minimum}; got shape {X.shape}"
        )
    return X


def number_order(vectors) -> float:
    """``|Spearman|`` between PC1 of ``vectors`` ``[n, d]`` (rows in numeric order) and 1..n.

    The sign of a principal component is arbitrary, hence the absolute value; 1 means PC1
    orders the numbers perfectly.
    """
    X = _rows(vectors, 3, "vectors")
    pc1 = np.asarray(metrics.pca(X, 1).scores[:, 0])
    return abs(float(metrics.spearman(pc1, np.arange(1.0, X.shape[0] + 1))))


def cycle_neighbours(vectors) -> int:
    """How many of the ``n`` points (rows in cyclic order) have a cycle neighbour (i ± 1 mod n)
    as their nearest neighbour in the top-2 PCA plane; ``n`` means a perfect cycle."""
    X = _rows(vectors, 3, "vectors")
    scores = np.asarray(metrics.pca(X, 2).scores)
    n = len(scores)
    distance = np.linalg.norm(scores[:, None] - scores[None], axis=-1)
    np.fill_diagonal(distance, np.inf)
    nearest = distance.argmin(axis=1)
    return int(sum((nearest[i] - i) % n in (1, n - 1) for i in range(n)))


def category_purity(groups: Mapping[str, np.ndarray]) -> float:
    """Fraction of words whose nearest other word (by cosine) is in their own category.

    ``groups`` maps a category name to its vectors ``[n_c, d]`` (>= 2 categories, >= 2 words
    each). Chance level is about ``(n_c - 1) / (n - 1)`` for equal category sizes.
    """
    if len(groups) < 2:
        raise ValueError(f"groups: needs >= 2 categories; got {sorted(groups)}")
    blocks = [_rows(v, 2, f"groups[{k!r}]") for k, v in groups.items()]
    if len({b.shape[1] for b in blocks}) != 1:
        raise ValueError("groups: every category's vectors must have the same dimension")
    X = np.concatenate(blocks)
    label = np.repeat(np.arange(len(blocks)), [len(b) for b in blocks])
    S = np.array(metrics.cosine_matrix(X))
    np.fill_diagonal(S, -np.inf)
    return float(np.mean(label[S.argmax(axis=1)] == label))
