"""The similarity geometry that each signature order induces on a token group (SPEC.md §3).

Order 0 is ``S^{sig,(0)}``, the cosine matrix of the zero-order signatures (SPEC eq. 5). For an
order m >= 1 the signature of alpha is a tensor over (nu, beta_1..beta_m); its geometry here is the
cosine matrix of the flattened tensors. For m = 1 the frequency-resolved matrices
``S^{sig,(1)}_k`` (SPEC §3, App A.1.6) contract the context axis, restricted to the group itself
(the paper's p = N convention), with the cosine vectors c^cos_k.

Everything here is float64 whatever JAX's x64 flag: NumPy signatures, cosines by
`metrics.signature_cosine_matrix`, PCA and alignment under a scoped ``jax.enable_x64``. In float32
the cosines of signature rows that are zero in theory (Fourier components of norm ~1e-17) are
noise, and cosines exceed 1. Such rows are exact zeros (`signatures.fourier_projection`), with
cosine 0 to every row.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from ctx_staircase import metrics, signatures
from ctx_staircase.dataset import TokenDataset

#: Token groups tried, in order, when the caller names none.
DEFAULT_GROUPS = ("numbers", "anchors", "keys")


class SignatureGeometry(NamedTuple):
    """Signature geometry of one token group.

    Attributes:
        group: the group's name; ``alphas`` its token ids ``[A]``.
        similarity: ``{name: [A, A]}`` float64 cosine matrices, in ``[-1, 1]``: ``"order0"``,
            ``"order1"``, ..., and ``"order1_k{k}"`` for the frequency components.
        pca: ``{name: metrics.PCA}`` of the signature vectors behind each matrix (NumPy float64).
        summary: JSON-ready numbers: off-diagonal statistics, constancy, explained variance, and
            the alignment of each matrix with order 0.
    """

    group: str
    alphas: np.ndarray
    similarity: dict[str, np.ndarray]
    pca: dict
    summary: dict


def default_group(ds: TokenDataset) -> str:
    """The first of ``DEFAULT_GROUPS`` the dataset defines, else ``"occurring"``."""
    return next((g for g in DEFAULT_GROUPS if g in ds.groups), "occurring")


def group_tokens(ds: TokenDataset, group: str) -> np.ndarray:
    """Token ids of a named group; ``"occurring"`` is every token present in the inputs."""
    if group == "occurring":
        return np.unique(ds.tokens).astype(np.int32)
    if group not in ds.groups:
        allowed = ", ".join([*ds.groups, "occurring"])
        raise ValueError(f"group must be one of {allowed}; got {group!r}")
    return ds.groups[group]


def signature_geometry(
    ds: TokenDataset,
    max_order: int = 1,
    *,
    group: str | None = None,
    frequencies: tuple[int, ...] | None = None,
    progress=None,
) -> SignatureGeometry:
    """Cosine matrices, PCA and summary of orders ``0..max_order`` over one token group.

    Args:
        ds: the dataset.
        max_order: highest order, in ``[0, L-1]``.
        group: the token group for alpha (default: `default_group`).
        frequencies: the k of ``S^{sig,(1)}_k`` (default: 1 and p/2, p = group size).
        progress: passed to the signature counting.
    """
    group = default_group(ds) if group is None else group
    alphas = group_tokens(ds, group)
    context = np.unique(ds.tokens)
    label_ids = np.unique(ds.labels[ds.weights > 0])
    similarity: dict[str, np.ndarray] = {}
    vectors: dict[str, np.ndarray] = {}
    for m in range(max_order + 1):
        phi = signatures.label_signature(
            ds, m, alphas=alphas, labels=label_ids, context=context, progress=progress
        )
        vectors[f"order{m}"] = phi.reshape(alphas.size, -1)
        if m == 1:
            p = alphas.size
            ks = frequencies if frequencies is not None else tuple(sorted({1, p // 2}))
            within = signatures.label_signature(
                ds, 1, alphas=alphas, labels=label_ids, context=alphas
            )
            for k, h in zip(ks, signatures.fourier_projection(within, ks), strict=True):
                vectors[f"order1_k{k}"] = h
    for name, rows in vectors.items():
        similarity[name] = metrics.signature_cosine_matrix(rows)
    with jax.enable_x64(True):
        pca = {
            name: metrics.PCA(*(np.asarray(a) for a in metrics.pca(rows, k=2)))
            for name, rows in vectors.items()
        }
        summary = {
            name: _summarize(S, similarity["order0"], pca[name]) for name, S in similarity.items()
        }
    return SignatureGeometry(group, alphas, similarity, pca, summary)


def _summarize(S: np.ndarray, S0: np.ndarray, pca) -> dict:
    upper = S[np.triu_indices(S.shape[0], k=1)]
    against_order0 = metrics.alignment(S, S0)
    return {
        "offdiag_mean": float(upper.mean()) if upper.size else None,
        "offdiag_min": float(upper.min()) if upper.size else None,
        "offdiag_max": float(upper.max()) if upper.size else None,
        "constant": bool(upper.size and np.ptp(upper) <= 1e-12 * max(1.0, abs(upper.max()))),
        "pca_explained_variance": [float(v) for v in pca.explained_variance_ratio],
        "alignment_with_order0": {
            "value": float(against_order0.value),
            "method": str(against_order0.method),
        },
    }
