"""Alignment of simulated embedding trajectories with the signature geometry (SPEC.md §3).

Given a sweep, measure per lane and snapshot:
- ``rho_0(t)``: the alignment of ``S^{emb,(t)}`` with ``S^{sig,(0)}`` (SPEC eq. 6; 1-MSE where the
  signature geometry is constant, as `metrics.alignment` reports);
- the held-out correlation and MSE of the first-order probe (SPEC eq. 7) on a subset of snapshots.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ctx_staircase import geometry, metrics, signatures
from ctx_staircase.dataset import TokenDataset


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


def embedding_similarity(W_E: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``S^{emb}`` over the tokens ``alphas``: ``[..., V, d]`` -> ``[..., A, A]`` (SPEC eq. 4)."""
    return np.asarray(metrics.cosine_matrix(np.asarray(W_E)[..., alphas, :]))


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

    Args:
        W_E: ``[G, S, V, d]`` embedding snapshots of ``G`` lanes.
        steps: ``[S]`` snapshot steps.
        ds: the training data (its signatures are the reference).
        group: token group (default `geometry.default_group`).
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
    group = group or geometry.default_group(ds)
    alphas = geometry.group_tokens(ds, group)
    labels = np.unique(ds.labels[ds.weights > 0])
    context = np.unique(ds.tokens)
    S_sig0 = np.asarray(
        metrics.cosine_matrix(signatures.label_signature(ds, 0, alphas=alphas, labels=labels))
    )
    S_emb = embedding_similarity(W_E, alphas)  # [G, S, A, A]
    rho0 = metrics.alignment(S_emb, S_sig0)
    count = min(probe_snapshots, len(steps))
    chosen = np.unique(np.round(np.linspace(0, len(steps) - 1, count)).astype(int)) if count else []
    corr = np.zeros((W_E.shape[0], len(chosen)))
    mse = np.zeros_like(corr)
    if len(chosen):
        phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=context)
        for lane in range(W_E.shape[0]):
            for j, s in enumerate(chosen):
                fit = metrics.probe_fit(phi1, S_emb[lane, s], seed=seed)
                corr[lane, j], mse[lane, j] = float(fit.heldout_corr), float(fit.heldout_mse)
    return AlignmentCurves(
        group=group,
        alphas=alphas,
        steps=np.asarray(steps),
        rho0=np.asarray(rho0.value),
        rho0_method=str(rho0.method),
        probe_steps=np.asarray(steps)[chosen] if len(chosen) else np.zeros(0, int),
        probe_corr=corr,
        probe_mse=mse,
        S_sig0=S_sig0,
    )
