"""THE measurement of embedding geometry against signature geometry (the paper §4.2): how aligned
``S^{emb}`` is with each signature order, and when.

- `signature_geometry`: the geometry each signature order induces on a token group;
- `embedding_similarity`: ``S^{emb}`` of a trajectory's token group (the paper's eq. 4);
- `alignment_orders`: ``rho_0(t)`` and ``rho_1(t)`` of one embedding trajectory (the numbers
  `comparison.compare` sets theory against training with);
- `alignment_curves`: ``rho_0(t)`` per lane and the first-order probe (paper eq. 7) at a few
  snapshots (the numbers of the training experiments);
- `offdiagonal_statistics` and `probe_curve`: the pieces those share with the experiments (the
  off-diagonal MSE to ``S^{sig,(0)}``, the mean off-diagonal cosine, the probe over snapshots).

Order 0 is ``S^{sig,(0)}``, the cosine matrix of the zero-order signatures (paper eq. 5). For an
order m >= 1 the signature of alpha is a tensor over (nu, beta_1..beta_m); its geometry here is the
cosine matrix of the flattened tensors. For m = 1 the frequency-resolved matrices
``S^{sig,(1)}_k`` (paper §4.5, App. A.1.6) contract the context axis, restricted to the group itself
(the paper's p = N convention), with the cosine vectors c^cos_k.

Primitives (correlations, upper triangles, the probe fit itself) live in `metrics`. Everything
here is float64 whatever JAX's x64 flag (theory/metrics.md, "Signature geometry in float64").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from ctx_staircase import metrics, signatures
from ctx_staircase.dataset import TokenDataset

__all__ = [
    "AlignmentCurves",
    "OffDiagonal",
    "ProbeCurve",
    "SignatureGeometry",
    "alignment_curves",
    "alignment_orders",
    "default_group",
    "embedding_similarity",
    "group_tokens",
    "offdiagonal_statistics",
    "probe_curve",
    "signature_geometry",
]

#: Token groups tried, in order, when the caller names none.
_DEFAULT_GROUPS = ("numbers", "anchors", "keys")


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
    """The first of ``_DEFAULT_GROUPS`` the dataset defines, else ``"occurring"``."""
    return next((g for g in _DEFAULT_GROUPS if g in ds.groups), "occurring")


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
    upper = np.asarray(metrics.upper_triangle(S))  # float64: the caller scopes x64
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


# --------------------------------------------------------------------------------------------
# embedding trajectories against the signature geometry


class AlignmentCurves(NamedTuple):
    """Alignment over training time, per lane.

    Attributes:
        group: the token group; ``alphas`` its ids ``[A]``.
        steps: ``[S]`` snapshot steps.
        rho0: ``[G, S]`` alignment with ``S^{sig,(0)}``; ``rho0_method`` how it was measured.
        probe_steps: ``[P]`` the snapshots the probe was fitted at.
        probe_corr, probe_mse: ``[G, P]`` held-out (5-fold over pairs) probe correlation and MSE.
        S_sig0: ``[A, A]`` the zero-order signature geometry.
    """

    group: str
    alphas: np.ndarray
    steps: np.ndarray
    rho0: np.ndarray
    rho0_method: str
    probe_steps: np.ndarray
    probe_corr: np.ndarray
    probe_mse: np.ndarray
    S_sig0: np.ndarray


class OffDiagonal(NamedTuple):
    """Off-diagonal statistics of ``S^{emb}`` ``[..., A, A]`` (the paper §4.2).

    Attributes:
        mse: ``[...]`` mean squared difference from ``S^{sig,(0)}`` over the pairs ``a < b``
            (``1 - metrics.one_minus_mse``; the score where ``S^{sig,(0)}`` is constant).
        mean: ``[...]`` mean off-diagonal cosine (near 1: a collapsed geometry).
    """

    mse: np.ndarray
    mean: np.ndarray


class ProbeCurve(NamedTuple):
    """The first-order probe (paper eq. 7) at chosen snapshots: ``corr``, ``mse`` ``[..., P]``,
    the held-out (5-fold over pairs) correlation and MSE of `metrics.probe_fit`."""

    corr: np.ndarray
    mse: np.ndarray


def embedding_similarity(W_E: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``S^{emb}`` over the tokens ``alphas``: ``[..., V, d]`` -> ``[..., A, A]`` (paper eq. 4)."""
    return np.asarray(metrics.cosine_matrix(np.asarray(W_E)[..., alphas, :]))


def offdiagonal_statistics(S_emb, S_sig0) -> OffDiagonal:
    """`OffDiagonal` of ``S_emb`` ``[..., A, A]`` against ``S_sig0`` ``[A, A]``.

    The pairs are `metrics.upper_triangle`'s, taken with NumPy so that the inputs keep their
    dtype (a float64 ``S_emb`` would become float32 as a JAX array without x64); the mean is
    NumPy's over them (pairwise summation).
    """
    S_emb, S_sig0 = np.asarray(S_emb), np.asarray(S_sig0)
    rows, cols = np.triu_indices(S_sig0.shape[-1], k=1)
    emb, sig = S_emb[..., rows, cols], S_sig0[..., rows, cols]
    return OffDiagonal(1.0 - np.asarray(metrics.one_minus_mse(emb, sig)), emb.mean(axis=-1))


def probe_curve(phi1, S_emb, snapshots: Sequence[int], *, seed: int = 0) -> ProbeCurve:
    """`metrics.probe_fit` of ``phi1`` ``[A, V_nu, V_ctx]`` to ``S_emb[..., s, :, :]`` for each
    ``s`` of ``snapshots``: ``S_emb`` ``[..., S, A, A]`` -> `ProbeCurve` ``[..., P]``.

    One fit per leading index and snapshot, each with the same ``seed`` (fold split and
    initialization).
    """
    S_emb = np.asarray(S_emb)
    lanes = S_emb.shape[:-3]
    corr = np.zeros((*lanes, len(snapshots)))
    mse = np.zeros_like(corr)
    for lane in np.ndindex(lanes):
        for j, s in enumerate(snapshots):
            fit = metrics.probe_fit(phi1, S_emb[(*lane, s)], seed=seed)
            corr[(*lane, j)], mse[(*lane, j)] = float(fit.heldout_corr), float(fit.heldout_mse)
    return ProbeCurve(corr, mse)


def alignment_curves(
    W_E: np.ndarray,
    steps: np.ndarray,
    ds: TokenDataset,
    *,
    group: str | None = None,
    probe_snapshots: int = 8,
    seed: int = 0,
) -> AlignmentCurves:
    """rho_0(t) at every snapshot and the first-order probe at ``probe_snapshots`` of them.

    ``W_E`` may come from anywhere, not only from `sweep.train_sweep`: embeddings trained
    elsewhere on the task's token ids (`measure.measure_snapshots` reads them from checkpoint
    files and adds the frequency components and a null).

    Args:
        W_E: ``[G, S, V, d]`` embedding snapshots of ``G`` lanes.
        steps: ``[S]`` snapshot steps.
        ds: the training data (its signatures are the reference).
        group: token group (default `default_group`).
        probe_snapshots: how many snapshots, evenly spread, get the probe (0 skips it).
        seed: the probe's fold split and initialization.
    """
    if isinstance(probe_snapshots, bool) or not isinstance(probe_snapshots, int | np.integer):
        raise TypeError(f"probe_snapshots must be an int >= 0; got {probe_snapshots!r}")
    if probe_snapshots < 0:
        raise ValueError(f"probe_snapshots must be an int >= 0; got {probe_snapshots}")
    W_E = np.asarray(W_E)
    if W_E.ndim != 4 or W_E.shape[2] < 1 or W_E.shape[3] < 1:
        raise ValueError(
            f"W_E must be [lanes, snapshots, V, d] with weights recorded; got {W_E.shape}"
        )
    group = group or default_group(ds)
    alphas = group_tokens(ds, group)
    labels = np.unique(ds.labels[ds.weights > 0])
    context = np.unique(ds.tokens)
    S_sig0 = np.asarray(
        metrics.cosine_matrix(signatures.label_signature(ds, 0, alphas=alphas, labels=labels))
    )
    S_emb = embedding_similarity(W_E, alphas)  # [G, S, A, A]
    rho0 = metrics.alignment(S_emb, S_sig0)
    count = min(probe_snapshots, len(steps))
    chosen = np.unique(np.round(np.linspace(0, len(steps) - 1, count)).astype(int)) if count else []
    probe = ProbeCurve(np.zeros((W_E.shape[0], 0)), np.zeros((W_E.shape[0], 0)))
    if len(chosen):
        phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=context)
        probe = probe_curve(phi1, S_emb, chosen, seed=seed)
    return AlignmentCurves(
        group=group,
        alphas=alphas,
        steps=np.asarray(steps),
        rho0=np.asarray(rho0.value),
        rho0_method=str(rho0.method),
        probe_steps=np.asarray(steps)[chosen] if len(chosen) else np.zeros(0, int),
        probe_corr=probe.corr,
        probe_mse=probe.mse,
        S_sig0=S_sig0,
    )


def alignment_orders(ds: TokenDataset, W_E, *, group: str | None = None) -> np.ndarray:
    """``rho_0(t)`` and ``rho_1(t)`` of an embedding trajectory ``W_E`` ``[T, V, d]``: ``[2, T]``.

    ``rho_0`` is the Pearson alignment with ``S^{sig,(0)}`` (1-MSE where that is constant);
    ``rho_1`` is the best frequency-resolved first-order alignment ``max_{k>=1} rho_{(1),k}``
    (paper §4.5, with the context restricted to the group, p = group size); NaN where ``L < 2``.
    """
    alphas = group_tokens(ds, group or default_group(ds))
    labels = np.unique(ds.labels[ds.weights > 0])
    S_emb = embedding_similarity(W_E, alphas)
    phi0 = signatures.label_signature(ds, 0, alphas=alphas, labels=labels)
    rho0 = np.asarray(metrics.alignment(S_emb, np.asarray(metrics.cosine_matrix(phi0))).value)
    if ds.L < 2:
        return np.stack([rho0, np.full_like(rho0, np.nan)])
    phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
    ks = np.arange(1, alphas.size // 2 + 1)
    rho1 = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks)).max(axis=-1)
    return np.stack([rho0, rho1])
