"""Figures (DESIGN.md "Figures"): heatmaps of similarity matrices and PCA scatter plots.

Functions return Matplotlib figures; `results.save_figure` writes them. The Agg backend is used so
that figures render on headless machines.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from ctx_staircase.geometry import SignatureGeometry


def heatmap(ax, S: np.ndarray, ticks: np.ndarray, title: str) -> None:
    """A similarity matrix on [-1, 1] with token ids on both axes."""
    image = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    step = max(1, len(ticks) // 8)
    positions = np.arange(0, len(ticks), step)
    ax.set_xticks(positions, [str(t) for t in ticks[positions]], fontsize=7)
    ax.set_yticks(positions, [str(t) for t in ticks[positions]], fontsize=7)
    ax.set_xlabel("token b")
    ax.set_ylabel("token a")
    ax.set_title(title, fontsize=9)
    return image


def pca_scatter(ax, scores: np.ndarray, labels: np.ndarray, explained, title: str) -> None:
    """Tokens in the plane of the first two principal components, coloured by token id."""
    ax.plot(scores[:, 0], scores[:, 1], color="0.8", lw=0.6, zorder=1)
    ax.scatter(scores[:, 0], scores[:, 1], c=labels, cmap="viridis", s=18, zorder=2)
    if len(labels) <= 60:
        for (x, y), t in zip(scores[:, :2], labels, strict=True):
            ax.annotate(str(t), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% var.)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% var.)" if len(explained) > 1 else "PC2")
    ax.set_title(title, fontsize=9)


def signature_geometry_figure(geometry: SignatureGeometry, task: str):
    """Heatmaps (top) and PCA (bottom) of every signature geometry in ``geometry``."""
    names = list(geometry.similarity)
    fig, axes = plt.subplots(
        2, len(names), figsize=(3.3 * len(names), 6.6), squeeze=False, layout="constrained"
    )
    for column, name in enumerate(names):
        label = _title(name)
        image = heatmap(axes[0, column], geometry.similarity[name], geometry.alphas, label)
        pca = geometry.pca[name]
        pca_scatter(
            axes[1, column],
            np.asarray(pca.scores),
            geometry.alphas,
            np.asarray(pca.explained_variance_ratio),
            f"PCA of {label}",
        )
    fig.colorbar(image, ax=axes[0, :].tolist(), shrink=0.8, label="cosine similarity")
    fig.suptitle(f"{task}: signature geometry of the '{geometry.group}' tokens")
    return fig


def _title(name: str) -> str:
    if "_k" in name:
        order, k = name.split("_k")
        return f"$S^{{sig,({order[-1]})}}_{{k={k}}}$"
    return f"$S^{{sig,({name[-1]})}}$"
