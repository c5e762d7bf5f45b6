"""Exact probability signatures of a token dataset (the paper §3.2, §5.2, §6).

Every signature is a conditional joint distribution, computed exactly by counting. The order-m
signatures condition on an occurrence of a token alpha at a uniformly drawn position I and average
over ordered m-tuples of *distinct* other positions (the paper §3.2). Counting enumerates the
``(L)_{m+1}`` ordered tuples of distinct positions ``(i, j_1, ..., j_m)`` and scatter-adds each
sample's weight at ``(x_i, y, x_{j_1}, ..., x_{j_m})`` (theory/signatures.md eq. S1), so
coincident positions are excluded by construction and the cost is ``O(n (L)_{m+1})`` instead of
the ``O(n V^{m+2})`` of inclusion–exclusion over the count matrix.

Index subsets (``alphas=``, ``labels=``, ``context=``) restrict the output axes to the given token
ids, in the given order; a subset result is a slice of the full result, and memory is
``O(|alphas| |labels| |context|^m)``. Rows of tokens that never occur are zero, never NaN.

All arrays here are NumPy float64, whatever JAX's x64 flag: signatures are exact data statistics,
shared by the theory (which converts them to JAX arrays) and by the metrics. A contraction that
cancels (the Fourier projection) returns exact zeros where its result is below ``ROUNDING_RTOL``
times the largest magnitude its terms could give (theory/signatures.md §4, zero up to rounding).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_ids, check_int, check_type

__all__ = [
    "CHUNK_INDICES",
    "MAX_OUTPUT_BYTES",
    "ROUNDING_RTOL",
    "Progress",
    "SignatureSet",
    "attention_factor",
    "attention_path_signature",
    "cooccurrence_signature",
    "fourier_basis",
    "fourier_projection",
    "label_signature",
    "next_token_signature",
    "occurrence",
    "positional_signature",
    "prefix_signature",
    "previous_token_signature",
    "signature_set",
]

#: Scatter-index budget per chunk: chunks keep the temporary index arrays near 64 MB.
CHUNK_INDICES = 4_000_000
#: Largest dense output allowed before asking the caller for index subsets.
MAX_OUTPUT_BYTES = 4 * 2**30
#: A computed value at most this fraction of its scale is rounding, hence an exact zero. A P-term
#: float64 dot product errs by at most ``gamma_P = P u / (1 - P u)`` (``u = 2^-53``) times the
#: sum of its terms' magnitudes (Higham, *Accuracy and Stability*, §3.1), ``<= 1.2e-13`` for the
#: ``P <= 1000`` context and token axes here, with one more ``u`` for the rounded cosines; a
#: genuine value of a signature of n samples is at least ~``1/n`` of that scale (far above 1e-12
#: for any n here). ``metrics`` uses the same threshold for rows of cosine matrices.
ROUNDING_RTOL = 1e-12

Progress = Callable[[int, int], None] | bool | None


class SignatureSet(NamedTuple):
    """Every signature up to ``max_order``, on one set of index subsets (the paper §3.2).

    Attributes:
        r: float64 ``[V]`` occurrence probabilities r_alpha over the whole vocabulary.
        label: tuple of the label signatures phi^{y;m}, ``m = 0..max_order``, each of shape
            ``[A, Vnu, P, ..., P]`` (m context axes).
        cooccurrence: tuple of the co-occurrence signatures phi^m, each ``[A, P, ..., P]``
            (``phi^0`` is all ones on occurring tokens).
        alphas, labels, context: int32 token ids along the alpha, nu and context axes.
        L: sequence length; ``max_order``: the highest order present.
    """

    r: np.ndarray
    label: tuple[np.ndarray, ...]
    cooccurrence: tuple[np.ndarray, ...]
    alphas: np.ndarray
    labels: np.ndarray
    context: np.ndarray
    L: int
    max_order: int


# --------------------------------------------------------------------------------------------
# Occurrence-conditioned signatures (the paper §3.2)


def occurrence(ds: TokenDataset) -> np.ndarray:
    """Occurrence probability ``r_alpha = E[N_alpha(X)] / L`` (the paper §3.2), float64 ``[V]``.

    Tokens that never occur (in samples of positive weight) have ``r_alpha = 0``.
    """
    check_type(ds, "ds", TokenDataset, "a TokenDataset (tasks.make)")
    counts = np.zeros(ds.vocab_size)
    for rows in _chunks(ds.n, ds.L):
        weight = ds.probabilities[rows]
        for i in range(ds.L):
            counts += np.bincount(ds.tokens[rows, i], weights=weight, minlength=ds.vocab_size)
    return counts / ds.L


def label_signature(
    ds: TokenDataset,
    order: int = 0,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
    progress: Progress = None,
) -> np.ndarray:
    """Order-m label signature ``phi^{y;m}_alpha(nu, beta_1..beta_m)`` (the paper §3.2).

    ``P(y = nu, x_{J_1} = beta_1, ..., x_{J_m} = beta_m | x_I = alpha)`` with I uniform over
    positions and ``(J_1..J_m)`` uniform over ordered tuples of distinct other positions.

    Args:
        ds: the dataset.
        order: m, in ``[0, L-1]``.
        alphas, labels, context: token-id subsets for the alpha, nu and beta axes (default: the
            whole vocabulary, in order).
        progress: ``True`` for a progress bar over chunks, or a callback ``(done, total)``.

    Returns:
        float64 ``[A, Vnu, P, ..., P]`` with m context axes; each occurring alpha's full
        (unrestricted) tensor sums to 1.
    """
    return _occurrence_signature(ds, order, alphas, labels, context, progress, with_label=True)


def cooccurrence_signature(
    ds: TokenDataset,
    order: int = 1,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
    progress: Progress = None,
) -> np.ndarray:
    """Order-m co-occurrence signature ``phi^m_alpha(beta_1..beta_m)`` (the paper §3.2).

    ``P(x_{J_1} = beta_1, ..., x_{J_m} = beta_m | x_I = alpha)``; float64 ``[A, P, ..., P]``.
    """
    return _occurrence_signature(ds, order, alphas, None, context, progress, with_label=False)


def signature_set(
    ds: TokenDataset,
    max_order: int,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
    progress: Progress = None,
) -> SignatureSet:
    """All label and co-occurrence signatures of orders ``0..max_order`` (the paper §3.2)."""
    check_type(ds, "ds", TokenDataset, "a TokenDataset (tasks.make)")
    _check_order(ds, max_order, "max_order")
    alpha_ids = _subset(alphas, ds.vocab_size, "alphas")
    label_ids = _subset(labels, ds.vocab_size, "labels")
    context_ids = _subset(context, ds.vocab_size, "context")
    kwargs = dict(alphas=alpha_ids, context=context_ids, progress=progress)
    return SignatureSet(
        r=occurrence(ds),
        label=tuple(
            label_signature(ds, m, labels=label_ids, **kwargs) for m in range(max_order + 1)
        ),
        cooccurrence=tuple(cooccurrence_signature(ds, m, **kwargs) for m in range(max_order + 1)),
        alphas=alpha_ids,
        labels=label_ids,
        context=context_ids,
        L=ds.L,
        max_order=max_order,
    )


def _occurrence_signature(ds, order, alphas, labels, context, progress, *, with_label):
    check_type(ds, "ds", TokenDataset, "a TokenDataset (tasks.make)")
    _check_order(ds, order, "order")
    V = ds.vocab_size
    alpha_ids = _subset(alphas, V, "alphas")
    context_ids = _subset(context, V, "context")
    alpha_map = _position_map(alpha_ids, V)
    axes = [alpha_map]
    if with_label:
        axes.append(_position_map(_subset(labels, V, "labels"), V))
    axes += [_position_map(context_ids, V)] * order
    shape = _output_shape(axes)
    # Each count is scaled by 1 / ((L-1)_m E[N_alpha]) as it is added (theory/signatures.md S1), so
    # the dense output needs no normalization pass; absent alphas have scale 0.
    norm = ds.L * occurrence(ds)[alpha_ids] * math.perm(ds.L - 1, order)
    scale = _safe_divide(np.ones_like(norm), norm)
    joint = np.zeros(math.prod(shape))
    tuples = list(itertools.permutations(range(ds.L), order + 1))
    chunks = list(_chunks(ds.n, len(tuples)))
    report = _progress_callback(progress, len(chunks), f"order-{order} signature")
    for done, rows in enumerate(chunks, 1):
        tokens, labels_ = ds.tokens[rows], ds.labels[rows]
        weight = ds.probabilities[rows]
        for positions in tuples:
            alpha = alpha_map[tokens[:, positions[0]]]
            keep = np.flatnonzero(alpha >= 0)  # select rows first: cheap alpha blocks
            index = [alpha[keep]]
            if with_label:
                index.append(axes[1][labels_[keep]])
            index += [axes[-1][tokens[keep, j]] for j in positions[1:]]
            _scatter(joint, index, shape, weight[keep] * scale[index[0]])
        report(done)
    return joint.reshape(shape)


# --------------------------------------------------------------------------------------------
# Position-specific and attention-weighted signatures (the paper §5.2, App. B.5)


def positional_signature(
    ds: TokenDataset,
    positions: Sequence[int] = (),
    *,
    query: int | None = None,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Position-specific label signature (the paper §5.2, App. B.5).

    With ``query=None`` it is occurrence-conditioned,
    ``phi^{y;x_{s_1},..}_alpha(nu, beta_1, ..) = P(y = nu, x_{s_1} = beta_1, .. | x_I = alpha)``
    (I uniform over all positions, so I may coincide with some s_r); with ``query=s_0`` it is
    ``phi^{y;x_{s_1},..}_{alpha, x_{s_0}} = P(y = nu, x_{s_1} = beta_1, .. | x_{s_0} = alpha)``.
    Positions are 0-based; negative values count from the end (``-1`` is the query position L).

    Returns:
        float64 ``[A, Vnu, P, ..., P]`` with ``len(positions)`` context axes.
    """
    joint, norm = _positional_joint(ds, positions, query, alphas, labels, context, None, ())
    return _safe_divide(joint, norm)


def attention_factor(
    ds: TokenDataset,
    attention: np.ndarray,
    positions: Sequence[int] = (),
    *,
    weighted: Sequence[int | str] = ("I",),
    query: int | None = None,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Attention-weight factor psi (the paper §5.2, eq. 18).

    The conditional expectation of a product of last-row attention weights given
    ``y = nu``, the tokens at ``positions``, and alpha (at an occurrence position I, or at the
    fixed position ``query``). ``weighted`` lists whose attention weights enter the product:
    ``"I"`` for the occurrence position and integers for fixed positions. The five factors of
    eq. (18) are::

        psi^y_alpha                  attention_factor(ds, a)
        psi^{y,x_L}_alpha            attention_factor(ds, a, (-1,))
        psi^{y,x_L,x_s}_alpha        attention_factor(ds, a, (-1, s), weighted=("I", s))
        psi^{y,x_s}_{alpha,x_L}      attention_factor(ds, a, (s,), weighted=(s,), query=-1)
        psi^{y,x_s,x_u}_{alpha,x_L}  attention_factor(ds, a, (s, u), weighted=(s, u), query=-1)

    Args:
        attention: float ``[n, L]`` last-row attention weights ``a_s`` of each sample.

    Returns:
        float64 ``[A, Vnu, P, ..., P]``; entries whose conditioning event has probability 0 are 0.
    """
    check_type(ds, "ds", TokenDataset, "a TokenDataset (tasks.make)")
    attention = np.asarray(attention, dtype=np.float64)
    if attention.shape != ds.tokens.shape:
        raise ValueError(
            f"attention must have shape [n, L] = {list(ds.tokens.shape)}; got {attention.shape}"
        )
    if not np.all(np.isfinite(attention)):
        raise ValueError("attention must be finite")
    weighted = tuple(weighted)
    for w in weighted:
        if w == "I" and query is not None:
            raise ValueError('weighted may name "I" only for occurrence conditioning (query=None)')
    subsets = (alphas, labels, context)
    weighted_sum, _ = _positional_joint(ds, positions, query, *subsets, attention, weighted)
    count, _ = _positional_joint(ds, positions, query, *subsets, None, ())
    return _safe_divide(weighted_sum, count)


def _positional_joint(ds, positions, query, alphas, labels, context, attention, weighted):
    """Weighted joint counts ``sum_n p_n sum_{i in Q} value * 1{x_i=alpha, y=nu, x_s=beta}``.

    Q is every position (occurrence conditioning) or ``{query}``; ``value`` is the product of the
    attention weights named in ``weighted``. Returns the joint ``[A, Vnu, P..]`` and the
    normaliser ``[A]`` (the expected number of conditioning positions holding alpha).
    """
    check_type(ds, "ds", TokenDataset, "a TokenDataset (tasks.make)")
    V, L = ds.vocab_size, ds.L
    positions = tuple(_position(s, L, "positions") for s in positions)
    anchor_positions = range(L) if query is None else (_position(query, L, "query"),)
    alpha_ids = _subset(alphas, V, "alphas")
    axes = [
        _position_map(alpha_ids, V),
        _position_map(_subset(labels, V, "labels"), V),
    ] + [_position_map(_subset(context, V, "context"), V)] * len(positions)
    shape = _output_shape(axes)
    joint = np.zeros(math.prod(shape))
    norm = np.zeros(V)
    for rows in _chunks(ds.n, len(anchor_positions)):
        tokens, weight = ds.tokens[rows], ds.probabilities[rows]
        fixed_value = np.ones(len(weight))
        for w in weighted:
            if w != "I":
                fixed_value = fixed_value * attention[rows, _position(w, L, "weighted")]
        tail = [axes[1][ds.labels[rows]]] + [axes[2][tokens[:, s]] for s in positions]
        for i in anchor_positions:
            value = fixed_value * attention[rows, i] if "I" in weighted else fixed_value
            _scatter(joint, [axes[0][tokens[:, i]], *tail], shape, weight * value)
            np.add.at(norm, tokens[:, i], weight)
    return joint.reshape(shape), norm[alpha_ids]


# --------------------------------------------------------------------------------------------
# Language-model signatures (the paper §6)


def next_token_signature(
    windows: np.ndarray,
    vocab_size: int,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Next-token signature ``phi^{y;nt}_alpha(nu) = P(x_{s+1} = nu | x_s = alpha)`` (paper §6).

    Args:
        windows: int ``[n, T]`` token windows (or a 1-D stream, one window); every position
            ``s < T-1`` predicts ``s+1``.
        vocab_size: V.

    Returns:
        ``(phi [A, Vnu], r [V])`` with ``r^{nt}_alpha = P(x_s = alpha)`` over predicting positions.
    """
    windows = _check_windows(windows, vocab_size, min_length=2)
    current, following = windows[:, :-1].ravel(), windows[:, 1:].ravel()
    r = np.bincount(current, minlength=vocab_size) / current.size
    phi = _conditional(current, following, vocab_size, alphas, labels, ("alphas", "labels"))
    return phi, r


def previous_token_signature(
    windows: np.ndarray,
    vocab_size: int,
    *,
    labels: Sequence[int] | np.ndarray | None = None,
    alphas: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Previous-token signature ``phi^{pre}_nu(alpha) = P(x_s = alpha | x_{s+1} = nu)``.

    The trace-back statistic that drives the unembedding w^U_nu (the notation of Yao–Xu,
    "Probability Signature", arXiv 2509.20124); float64 ``[Vnu, A]`` with rows indexed by the target
    token nu.
    """
    windows = _check_windows(windows, vocab_size, min_length=2)
    current, following = windows[:, :-1].ravel(), windows[:, 1:].ravel()
    return _conditional(following, current, vocab_size, labels, alphas, ("labels", "alphas"))


def _conditional(given, outcome, vocab_size, given_ids, outcome_ids, names) -> np.ndarray:
    """``P(outcome = o | given = g)`` from paired token arrays, ``[G, O]``."""
    given_ids = _subset(given_ids, vocab_size, names[0])
    outcome_ids = _subset(outcome_ids, vocab_size, names[1])
    shape = (given_ids.size, outcome_ids.size)
    joint = np.zeros(math.prod(shape))
    index = [
        _position_map(given_ids, vocab_size)[given],
        _position_map(outcome_ids, vocab_size)[outcome],
    ]
    _scatter(joint, index, shape, np.ones(given.size))
    given_count = np.bincount(given, minlength=vocab_size)[given_ids].astype(np.float64)
    return _safe_divide(joint.reshape(shape), given_count)


def prefix_signature(
    windows: np.ndarray,
    vocab_size: int,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
    context: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """LM first-order signature (the paper §6, eq. 20).

    ``phi^{y;1}_alpha(nu, beta) = P(x_{s+1} = nu, beta in X_{<s} | x_s = alpha)``, where
    ``beta in X_{<s}`` means beta appears anywhere before position s in the same window (position
    and multiplicity ignored). Not normalized over beta.

    Returns:
        float64 ``[A, Vnu, P]``.
    """
    windows = _check_windows(windows, vocab_size, min_length=2)
    alpha_ids = _subset(alphas, vocab_size, "alphas")
    label_ids = _subset(labels, vocab_size, "labels")
    context_ids = _subset(context, vocab_size, "context")
    n, T = windows.shape
    # first[n, beta]: first position of context token beta in window n (T if absent).
    context_map = _position_map(context_ids, vocab_size)
    first = np.full((n, context_ids.size), T, dtype=np.int64)
    for s in range(T - 1, -1, -1):
        slot = context_map[windows[:, s]]
        hit = slot >= 0
        first[np.nonzero(hit)[0], slot[hit]] = s
    alpha_map, label_map = (
        _position_map(alpha_ids, vocab_size),
        _position_map(label_ids, vocab_size),
    )
    joint = np.zeros((alpha_ids.size * label_ids.size, context_ids.size))
    alpha_count = np.zeros(alpha_ids.size)
    for s in range(T - 1):
        a, v = alpha_map[windows[:, s]], label_map[windows[:, s + 1]]
        np.add.at(alpha_count, a[a >= 0], 1.0)
        keep = (a >= 0) & (v >= 0)
        np.add.at(joint, a[keep] * label_ids.size + v[keep], (first[keep] < s).astype(np.float64))
    joint = joint.reshape(alpha_ids.size, label_ids.size, context_ids.size)
    return _safe_divide(joint, alpha_count)


def attention_path_signature(
    windows: np.ndarray,
    attention: np.ndarray,
    vocab_size: int,
    *,
    alphas: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Attention-path signature of one layer at one time (the paper §6, eq. 22).

    ``phi^{y;attn}_alpha(nu) = E[Abar_{s,I_s} 1{x_{s+1} = nu} | x_{I_s} = alpha]`` with the
    predicting position s uniform over ``0..T-2`` of every window and ``I_s`` uniform over the
    causal prefix ``0..s`` (0-based; the paper's ``[s]``).

    Args:
        windows: int ``[n, T]`` token windows (or a 1-D stream).
        attention: ``[n, T, T]`` attention averaged over heads, row s = query, column j = key
            (``models.GPT.attention_maps(...)[layer].mean(axis=1)``).
        vocab_size: V.

    Returns:
        float64 ``[A, Vnu]``; 0 where alpha never occurs in a prefix.
    """
    windows = _check_windows(windows, vocab_size, min_length=2)
    n, T = windows.shape
    attention = np.asarray(attention, dtype=np.float64)
    if attention.shape != (n, T, T) or not np.all(np.isfinite(attention)):
        raise ValueError(
            f"attention must be finite with shape [n, T, T] = [{n}, {T}, {T}]; "
            f"got {attention.shape}"
        )
    alpha_ids = _subset(alphas, vocab_size, "alphas")
    label_ids = _subset(labels, vocab_size, "labels")
    alpha_map = _position_map(alpha_ids, vocab_size)
    label_map = _position_map(label_ids, vocab_size)
    s, j = np.nonzero(np.tril(np.ones((T - 1, T), dtype=bool)))  # key j <= query s < T-1
    prefix = 1.0 / (s + 1)  # I_s uniform over the prefix 0..s
    a = alpha_map[windows[:, j]]  # [n, pairs]
    v = label_map[windows[:, s + 1]]
    weight = np.broadcast_to(prefix, a.shape)
    shape = (alpha_ids.size, label_ids.size)
    joint = np.zeros(math.prod(shape))
    _scatter(joint, [a.ravel(), v.ravel()], shape, (weight * attention[:, s, j]).ravel())
    norm = np.zeros(alpha_ids.size)
    present = a >= 0
    np.add.at(norm, a[present], weight[present])
    return _safe_divide(joint.reshape(shape), norm)


# --------------------------------------------------------------------------------------------
# Fourier form of marginalization (the paper §4.5, App. A.1.6)


def fourier_basis(p: int, ks: Sequence[int] | np.ndarray) -> np.ndarray:
    """Cosine vectors ``c^cos_k = (cos(2 pi k j / p))_{j=0..p-1}`` (the paper §4.5), ``[K, p]``.

    ``k j`` is reduced mod p in integers first, so the phases (and ``k = p/2`` parity) are exact.
    """
    check_int(p, "p")
    ks = np.atleast_1d(np.asarray(ks))
    if ks.ndim != 1 or not np.issubdtype(ks.dtype, np.integer):
        raise TypeError(f"ks must be an integer scalar or 1-D array; got {ks.dtype} {ks.shape}")
    phase = np.outer(ks.astype(np.int64), np.arange(p)) % p
    return np.cos(2 * np.pi * phase / p)


def fourier_projection(phi: np.ndarray, ks: Sequence[int] | np.ndarray) -> np.ndarray:
    """``h_{alpha,k} = phi_alpha c^cos_k``: contract the last (context) axis (the paper §4.5).

    Args:
        phi: ``[..., P]`` signature whose last axis is a context axis of size p = P.
        ks: frequencies.

    Returns:
        float64 ``[K, ...]``; ``k = 0`` is the marginal over that context axis, one order lower.
        Entries that are zero up to rounding (``|h| <= tol * sum_p |phi_p c_p|`` with ``tol`` =
        ``ROUNDING_RTOL``, or ``2 (p + 1) u`` for a longer axis) are exactly 0.
    """
    phi = np.asarray(phi, dtype=np.float64)
    basis = fourier_basis(phi.shape[-1], ks)
    h = np.tensordot(phi, basis, axes=([-1], [1]))
    scale = np.tensordot(np.abs(phi), np.abs(basis), axes=([-1], [1]))
    tolerance = max(ROUNDING_RTOL, 2 * (phi.shape[-1] + 1) * np.finfo(np.float64).epsneg)
    h[np.abs(h) <= tolerance * scale] = 0.0
    return np.moveaxis(h, -1, 0)


# --------------------------------------------------------------------------------------------
# Helpers


def _check_order(ds: TokenDataset, order: int, name: str) -> None:
    check_int(order, name, 0, ds.L - 1, why=f"; the dataset's sequences have L = {ds.L} positions")


def _subset(ids, vocab_size: int, name: str) -> np.ndarray:
    if ids is None:
        return np.arange(vocab_size, dtype=np.int32)
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D list of token ids; got shape {arr.shape}")
    check_ids(arr, name, vocab_size)
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must not repeat token ids")
    return arr.astype(np.int32)


def _position_map(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Lookup table token id -> index along an output axis, -1 for ids outside the subset."""
    lookup = np.full(vocab_size, -1, dtype=np.int64)
    lookup[ids] = np.arange(ids.size)
    return lookup


def _output_shape(axes: list[np.ndarray]) -> tuple[int, ...]:
    shape = tuple(int((lookup >= 0).sum()) for lookup in axes)
    size = 8 * math.prod(shape)
    if size > MAX_OUTPUT_BYTES:
        raise ValueError(
            f"the signature would be a dense float64 array of shape {shape} "
            f"({size / 2**30:.1f} GiB > {MAX_OUTPUT_BYTES / 2**30:.0f} GiB); restrict it with "
            "alphas=, labels= and context= (token-id subsets)"
        )
    return shape


def _position(s, L: int, name: str) -> int:
    """A position ``s`` in ``[-L, L)`` as its index in ``[0, L)``."""
    return check_int(s, name, -L, L - 1, why=f"; a position among L = {L}") % L


def _scatter(joint: np.ndarray, index: list[np.ndarray], shape: tuple[int, ...], weight) -> None:
    """Add ``weight`` at the multi-index ``index`` of the flattened ``joint``; -1 drops a row."""
    keep = np.logical_and.reduce([i >= 0 for i in index])
    flat = np.ravel_multi_index(tuple(i[keep] for i in index), shape)
    if joint.size <= 4 * flat.size:
        joint += np.bincount(flat, weights=weight[keep], minlength=joint.size)
    else:  # a large, sparse output: scatter in place instead of a full-size temporary
        np.add.at(joint, flat, weight[keep])


def _safe_divide(joint: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """``joint / norm`` along the leading axis, 0 where ``norm == 0``."""
    norm = np.asarray(norm, dtype=np.float64)
    norm = norm.reshape(norm.shape + (1,) * (joint.ndim - norm.ndim))
    return np.divide(joint, norm, out=np.zeros_like(joint), where=norm > 0)


def _chunks(n: int, per_row: int) -> Iterator[slice]:
    step = max(1, CHUNK_INDICES // max(1, per_row))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def _check_windows(windows, vocab_size: int, min_length: int) -> np.ndarray:
    arr = np.asarray(windows)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] < min_length or arr.shape[0] == 0:
        raise ValueError(
            f"windows must be a token stream [T] or windows [n, T] with T >= {min_length}; "
            f"got shape {np.shape(windows)}"
        )
    return check_ids(arr, "windows", vocab_size).astype(np.int64)


def _progress_callback(progress: Progress, total: int, description: str):
    if callable(progress):
        return lambda done: progress(done, total)
    if not progress or total <= 1:
        return lambda done: None
    from rich.progress import Progress as RichProgress

    bar = RichProgress(transient=True)
    task = bar.add_task(description, total=total)
    bar.start()

    def report(done: int) -> None:
        bar.update(task, completed=done)
        if done >= total:
            bar.stop()

    return report
