"""Similarity geometry and its alignment with probability signatures (the paper §4.2, App. A).

The embedding geometry ``S^emb`` and the signature geometries ``S^{sig,(m)}`` are uncentered cosine
matrices (the paper's eqs. 4-5); an alignment score correlates their strict upper triangles (eq. 6).
First-order (and higher) signature geometry is measured through a fitted linear probe on the
context axes (eq. 7, App A.1.5) or through fixed Fourier probes (App A.1.6): theory/metrics.md.

The numerical core (``cosine_matrix``, ``upper_triangle``, ``pearson``, ``spearman``,
``one_minus_mse``, ``signatures.fourier_basis``, ``frequency_alignment``, ``probe_similarity``,
``distribution_match``, ``pca``) is pure ``jax.numpy``, jitted, vmap-safe, on numpy or jax arrays
of any real dtype (cast to their widest float dtype, so float32 embeddings meet float64 signatures
under strict promotion); ``alignment`` and ``probe_fit`` are eager, validate and may inspect values.

**Tolerance.** ``tol = 1e-12`` in float64 (``16 * eps`` of the dtype where larger, e.g. float32).
Cosines are clipped to ``[-1, 1]`` (rounding can give ``1 + eps``); a row with norm at most ``tol``
times the largest row norm of its matrix is an exact zero row, with cosine 0 to every row. A vector
is constant when ``max - min <= tol * max(1, |max|)``: a correlation with it is exactly 0, with a
zero gradient, in the jittable primitives, while ``alignment`` switches to ``1 - MSE`` and says so
in its ``method`` field. No function here returns a silent NaN (theory/metrics.md, "Constant
geometry"); signature geometry is float64 (theory/metrics.md, "Signature geometry in float64").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ctx_staircase import signatures

__all__ = [
    "ALIGNMENT_METHODS",
    "PCA",
    "PROBE_FOLDS",
    "PROBE_LR",
    "PROBE_STEPS",
    "Alignment",
    "DistributionMatch",
    "ProbeResult",
    "adam_descent",
    "alignment",
    "check_finite",
    "constant_frequencies",
    "cosine_matrix",
    "distribution_match",
    "first_best",
    "fit_probe",
    "frequency_alignment",
    "is_constant",
    "one_minus_mse",
    "pca",
    "pearson",
    "probe_fit",
    "probe_init_std",
    "probe_min_tokens",
    "probe_restarts",
    "probe_similarity",
    "procrustes_similarity",
    "ring_order_fraction",
    "signature_cosine_matrix",
    "spearman",
    "tied_ranks",
    "token_split",
    "upper_triangle",
]

ALIGNMENT_METHODS = ("pearson", "spearman", "1-mse")


# --------------------------------------------------------------------------------------------
# dtype helpers (tests run with strict dtype promotion: every cast is explicit)


def _float_dtype(*arrays: jax.Array) -> np.dtype:
    """The widest floating dtype among ``arrays``; the default float if none is floating."""
    floats = [a.dtype for a in arrays if jnp.issubdtype(a.dtype, jnp.floating)]
    if not floats:
        return jax.dtypes.canonicalize_dtype(np.float64)
    return max(floats, key=lambda dtype: jnp.finfo(dtype).bits)


def _as_float(*arrays) -> tuple[jax.Array, ...]:
    """``arrays`` as jax arrays of one common floating dtype."""
    arrays = tuple(jnp.asarray(a) for a in arrays)
    dtype = _float_dtype(*arrays)
    return tuple(a.astype(dtype) for a in arrays)


def _constant_tolerance(dtype) -> float:
    return max(signatures.ROUNDING_RTOL, 16 * float(jnp.finfo(dtype).eps))


# --------------------------------------------------------------------------------------------
# similarity matrices


@jax.jit
def cosine_matrix(X) -> jax.Array:
    """Uncentered cosine similarities of the rows of ``X`` (the paper's eqs. 4-5).

    Args:
        X: ``[..., n, d]``; leading axes are batch axes.

    Returns:
        ``[..., n, n]`` in ``[-1, 1]`` with ``S_ab = <x_a, x_b> / (|x_a| |x_b|)``, in the dtype of
        ``X``. A zero row (an absent token), or one zero up to rounding (norm at most ``tol``
        times the largest row norm of its matrix, module docstring), has cosine 0 with every row,
        itself included; the diagonal is exactly 1 for nonzero rows. The gradient is finite
        everywhere, zero rows included. For signatures use `signature_cosine_matrix` (float64).
    """
    (X,) = _as_float(X)
    if X.ndim < 2:
        raise ValueError(f"X must have shape [..., n, d]; got shape {X.shape}")
    squared_norm = jnp.sum(X * X, axis=-1, keepdims=True)
    largest = jax.lax.stop_gradient(jnp.max(squared_norm, axis=-2, keepdims=True))
    present = squared_norm > _constant_tolerance(X.dtype) ** 2 * largest
    # Zero rows are divided by 1 and then zeroed, which keeps the gradient of the norm finite.
    inverse = jax.lax.rsqrt(jnp.where(present, squared_norm, jnp.ones_like(squared_norm)))
    unit = jnp.where(present, X * inverse, jnp.zeros_like(X))
    S = jnp.clip(unit @ jnp.swapaxes(unit, -1, -2), -1, 1)
    n = X.shape[-2]
    diagonal = present[..., 0].astype(S.dtype)  # [..., n]: 1 for nonzero rows, 0 for zero rows
    return jnp.where(jnp.eye(n, dtype=bool), diagonal[..., None, :], S)


def signature_cosine_matrix(X) -> np.ndarray:
    """`cosine_matrix` of exact statistics, computed in float64 whatever JAX's x64 flag.

    Args:
        X: ``[..., n, d]`` (e.g. signature rows ``phi_alpha`` flattened, or Fourier projections
            ``h_{alpha,k}``), NumPy or JAX, any real dtype.

    Returns:
        NumPy float64 ``[..., n, n]`` in ``[-1, 1]``; rows zero up to rounding (norm at most
        ``signatures.ROUNDING_RTOL`` times the largest row norm of their matrix) have cosine 0
        with every row, the diagonal is 1 for the other rows.
    """
    X = np.asarray(X, dtype=np.float64)
    with jax.enable_x64(True):
        return np.asarray(cosine_matrix(X), dtype=np.float64)


@jax.jit
def upper_triangle(S) -> jax.Array:
    """Strict upper triangle ``{S_ab}_{a<b}`` of ``S`` ``[..., n, n]`` -> ``[..., n(n-1)/2]``.

    Row-major order (``np.triu_indices(n, k=1)``), the ``vec_△`` of the paper's eqs. 6-7.
    """
    S = jnp.asarray(S)
    if S.ndim < 2 or S.shape[-1] != S.shape[-2]:
        raise ValueError(f"S must have shape [..., n, n]; got shape {S.shape}")
    rows, cols = np.triu_indices(S.shape[-1], k=1)
    return S[..., rows, cols]


# --------------------------------------------------------------------------------------------
# jittable comparison primitives, along the last axis with broadcasting


@jax.jit
def is_constant(x, weights=None) -> jax.Array:
    """Whether the entries of ``x`` ``[..., m]`` with positive weight are constant -> ``[...]``.

    Constant means ``max - min <= tol * max(1, |max|)`` (module docstring); an empty selection
    counts as constant.
    """
    (x,) = _as_float(x)
    if weights is None:
        high, low = jnp.max(x, axis=-1), jnp.min(x, axis=-1)
    else:
        present = jnp.asarray(weights) > 0
        high = jnp.max(jnp.where(present, x, -jnp.inf), axis=-1)
        low = jnp.min(jnp.where(present, x, jnp.inf), axis=-1)
    scale = jnp.maximum(1.0, jnp.abs(high))
    return high - low <= _constant_tolerance(x.dtype) * scale


def _weighted_mean(x: jax.Array, weights: jax.Array) -> jax.Array:
    total = jnp.sum(weights, axis=-1)
    return jnp.sum(weights * x, axis=-1) / jnp.where(total > 0, total, jnp.ones_like(total))


@jax.jit
def pearson(a, b, weights=None) -> jax.Array:
    """Weighted Pearson correlation along the last axis (the paper's eq. 6).

    Args:
        a, b: ``[..., m]``, broadcast against each other.
        weights: optional non-negative ``[..., m]`` (e.g. a 0/1 mask selecting a fold of pairs);
            uniform when ``None``.

    Returns:
        ``[...]`` in ``[-1, 1]``. Where ``a`` or ``b`` is constant on the weighted entries the
        correlation is undefined and 0 is returned (with zero gradient), never NaN.
    """
    a, b, weights = _weighted_pair(a, b, weights)
    centered_a = a - _weighted_mean(a, weights)[..., None]
    centered_b = b - _weighted_mean(b, weights)[..., None]
    covariance = _weighted_mean(centered_a * centered_b, weights)
    variance_a = _weighted_mean(centered_a * centered_a, weights)
    variance_b = _weighted_mean(centered_b * centered_b, weights)
    undefined = is_constant(a, weights) | is_constant(b, weights)
    one = jnp.ones_like(covariance)
    scale = jnp.sqrt(jnp.where(undefined, one, variance_a)) * jnp.sqrt(
        jnp.where(undefined, one, variance_b)
    )
    scale = jnp.where(scale > 0, scale, one)
    return jnp.where(undefined, jnp.zeros_like(covariance), jnp.clip(covariance / scale, -1, 1))


def _weighted_pair(a, b, weights) -> list[jax.Array]:
    """``a``, ``b`` and ``weights`` (uniform ones when ``None``) as floats, broadcast together."""
    if weights is None:
        a, b = _as_float(a, b)
        weights = jnp.ones((), a.dtype)
    else:
        a, b, weights = _as_float(a, b, weights)
    return _broadcast(a=a, b=b, weights=weights)


def _broadcast(**arrays: jax.Array) -> list[jax.Array]:
    """``jnp.broadcast_arrays`` whose error names the arguments and their shapes."""
    try:
        return jnp.broadcast_arrays(*arrays.values())
    except ValueError:
        shapes = ", ".join(f"{name} {tuple(jnp.shape(x))}" for name, x in arrays.items())
        raise ValueError(
            f"{' and '.join(arrays)} must broadcast against each other; got shapes {shapes}"
        ) from None


@jax.jit
def spearman(a, b) -> jax.Array:
    """Spearman rank correlation along the last axis: Pearson of average ranks (ties averaged).

    ``a``, ``b``: ``[..., m]`` -> ``[...]``; 0 where either is constant (see ``pearson``), NaN
    where either holds a NaN. Values that differ by rounding only are one tie (`tied_ranks`).
    """
    a, b = _as_float(a, b)
    a, b = _broadcast(a=a, b=b)
    rho = pearson(tied_ranks(a), tied_ranks(b))
    missing = jnp.any(jnp.isnan(a), axis=-1) | jnp.any(jnp.isnan(b), axis=-1)
    return jnp.where(missing, jnp.full_like(rho, jnp.nan), rho)


@jax.jit
def tied_ranks(x) -> jax.Array:
    """0-based average ranks along the last axis, ties up to rounding: ``[..., m] -> [..., m]``.

    Sorted neighbours at most ``tol * max(1, max |x|)`` apart belong to one tie (``tol`` of the
    dtype, as for a constant vector in the module docstring), and every member of a tie gets the
    mean of the tie's positions. The ties that matter are those of exact statistics: a signature
    cosine matrix has large groups of mathematically equal entries, which rounding splits into
    near-equal values in an order set by the host's vector width (theory/metrics.md, Rounding).
    """
    (x,) = _as_float(x)
    m = x.shape[-1]
    order = jnp.argsort(x, axis=-1)
    ascending = jnp.take_along_axis(x, order, axis=-1)
    scale = jnp.maximum(1, jnp.max(jnp.abs(x), axis=-1, keepdims=True))
    apart = jnp.diff(ascending, axis=-1) > _constant_tolerance(x.dtype) * scale  # [..., m-1]
    edge = jnp.ones((*x.shape[:-1], 1), bool)
    starts = jnp.concatenate([edge, apart], axis=-1)
    ends = jnp.concatenate([apart, edge], axis=-1)
    position = jnp.broadcast_to(jnp.arange(m), x.shape)
    first = jax.lax.cummax(jnp.where(starts, position, 0), axis=x.ndim - 1)
    last = jax.lax.cummin(jnp.where(ends, position, m - 1), axis=x.ndim - 1, reverse=True)
    mean_position = ((first + last) / 2).astype(x.dtype)
    return jnp.take_along_axis(mean_position, jnp.argsort(order, axis=-1), axis=-1)


@jax.jit
def one_minus_mse(a, b, weights=None) -> jax.Array:
    """``1 - mean((a - b)^2)`` along the last axis (the paper's constant-``S^sig`` score).

    ``a``, ``b``, optional ``weights``: ``[..., m]`` -> ``[...]``.
    """
    a, b, weights = _weighted_pair(a, b, weights)
    return 1 - _weighted_mean((a - b) ** 2, weights)


_SCORES = {"pearson": pearson, "spearman": spearman, "1-mse": one_minus_mse}


# --------------------------------------------------------------------------------------------
# alignment of two similarity matrices


class Alignment(NamedTuple):
    """An alignment score and the method that produced it.

    ``value`` is ``[...]`` (the broadcast batch shape); ``method`` is the method actually used,
    which is ``"1-mse"`` when a correlation was asked for but a matrix was constant.
    """

    value: jax.Array
    method: str


def check_finite(**arrays) -> None:
    """Raise a ``ValueError`` naming the first of ``arrays`` (name=array) with a NaN or inf."""
    for name, value in arrays.items():
        if not bool(jnp.all(jnp.isfinite(value))):
            raise ValueError(f"{name} has non-finite entries (NaN or inf)")


def _check_similarity(S: jax.Array, name: str) -> None:
    if S.ndim < 2 or S.shape[-1] != S.shape[-2] or S.shape[-1] < 2:
        raise ValueError(f"{name} must have shape [..., n, n] with n >= 2; got shape {S.shape}")
    if not bool(jnp.all(jnp.isfinite(S))):
        raise ValueError(f"{name} has non-finite entries (NaN or inf); a diverged run?")


def alignment(S_a, S_b, method: str = "pearson") -> Alignment:
    """Alignment of two similarity matrices over their strict upper triangles (the paper's eq. 6).

    Args:
        S_a: ``[..., n, n]``, e.g. a trajectory ``[T, n, n]`` of ``S^emb``.
        S_b: ``[..., n, n]``, broadcast against ``S_a``'s batch axes (e.g. one ``S^sig``).
        method: ``"pearson"`` (the paper's ``rho``), ``"spearman"`` (Fig. 2D) or ``"1-mse"``.

    Returns:
        ``Alignment(value [...], method)``. If ``S_a`` or ``S_b`` has a constant upper triangle in
        any batch entry, a correlation is undefined and the whole batch is scored with
        ``1 - MSE`` instead (one scale for a whole trajectory), reported as ``method="1-mse"``
        (the paper §4.2: ``S^{sig,(0)}`` of ``F_mod`` is constant).

    Raises:
        ValueError: for an unknown ``method``, non-square, mismatched or non-finite matrices.
    """
    if method not in ALIGNMENT_METHODS:
        raise ValueError(f"method must be one of {ALIGNMENT_METHODS}; got {method!r}")
    S_a, S_b = _as_float(S_a, S_b)
    _check_similarity(S_a, "S_a")
    _check_similarity(S_b, "S_b")
    if S_a.shape[-2:] != S_b.shape[-2:]:
        raise ValueError(
            f"S_a and S_b must be similarity matrices of the same size; got S_a {S_a.shape} "
            f"and S_b {S_b.shape}"
        )
    try:
        np.broadcast_shapes(S_a.shape[:-2], S_b.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the batch axes of S_a {S_a.shape} and S_b {S_b.shape} do not broadcast"
        ) from None
    triangle_a, triangle_b = upper_triangle(S_a), upper_triangle(S_b)
    if method != "1-mse" and bool(
        jnp.any(is_constant(triangle_a)) | jnp.any(is_constant(triangle_b))
    ):
        method = "1-mse"
    return Alignment(_SCORES[method](triangle_a, triangle_b), method)


# --------------------------------------------------------------------------------------------
# Fourier probes


def frequency_alignment(phi1, S_emb, ks) -> jax.Array:
    """Frequency-resolved first-order alignment ``rho_{(1),k}`` (the paper §4.5, App. A.1.6).

    ``h_{alpha,k} = phi^{y;1}_alpha c^cos_k`` contracts the context axis (``p`` = its size);
    ``S^{sig,(1)}_k`` is the cosine matrix of the ``h_{alpha,k}`` over ``alpha``, correlated
    (Pearson, strict upper triangles) with ``S_emb``.

    Args:
        phi1: the first-order label signature ``[A, V_nu, P]``.
        S_emb: ``[..., A, A]`` (leading axes, e.g. training time, are batch axes).
        ks: integer frequencies ``[K]``.

    Returns:
        ``[..., K]`` in the dtype of ``S_emb``; the signature side (``h``, ``S^{sig,(1)}_k``) is
        computed in float64. Where ``S^{sig,(1)}_k`` is constant (``k = 0`` for ``F_mod``, where it
        equals the constant ``S^{sig,(0)}``) a correlation is undefined and the value is
        ``1 - MSE`` instead, as for ``rho_0`` (`alignment`, the paper's Fig. 3C): a collapsed
        embedding geometry then scores near 1 at ``k = 0``. That entry is on another scale than
        the Pearson entries; `constant_frequencies` says which entries they are, and tables and
        plots mark them.
    """
    phi1 = np.asarray(phi1)
    (S_emb,) = _as_float(S_emb)
    if phi1.ndim != 3:
        raise ValueError(f"phi1 must have shape [A, V_nu, P]; got shape {phi1.shape}")
    A = phi1.shape[0]
    if S_emb.ndim < 2 or S_emb.shape[-2:] != (A, A):
        raise ValueError(f"S_emb must have shape [..., {A}, {A}] to match phi1; got {S_emb.shape}")
    triangle_sig, constant = _fourier_cosines(phi1, ks)
    return _frequency_alignment(*_as_float(triangle_sig, S_emb), constant)


def _fourier_cosines(phi1, ks) -> tuple[np.ndarray, np.ndarray]:
    """Float64 upper triangles of ``S^{sig,(1)}_k`` ``[K, A(A-1)/2]`` and whether each is
    constant, bool ``[K]``; ``h`` is `signatures.fourier_projection`, exact zeros included."""
    S = signature_cosine_matrix(signatures.fourier_projection(phi1, ks))  # [K, A, A]
    triangle = S[(..., *np.triu_indices(S.shape[-1], k=1))]
    with jax.enable_x64(True):
        constant = np.asarray(is_constant(triangle))
    return triangle, constant


@jax.jit
def _frequency_alignment(triangle_sig, S_emb, constant) -> jax.Array:
    triangle_emb = upper_triangle(S_emb)[..., None, :]
    correlation = pearson(triangle_emb, triangle_sig)
    return jnp.where(constant, one_minus_mse(triangle_emb, triangle_sig), correlation)


def constant_frequencies(phi1, ks) -> np.ndarray:
    """Which ``k`` of `frequency_alignment` are scored ``1 - MSE``: bool ``[K]``, true where
    ``S^{sig,(1)}_k`` is constant (``phi1`` ``[A, V_nu, P]``; computed in float64)."""
    phi1 = np.asarray(phi1)
    if phi1.ndim != 3:
        raise ValueError(f"phi1 must have shape [A, V_nu, P]; got shape {phi1.shape}")
    return _fourier_cosines(phi1, ks)[1]


# --------------------------------------------------------------------------------------------
# fitted first-order (and higher) probe


class ProbeResult(NamedTuple):
    """Cross-validated fit of the signature probe (the paper's eq. 7, App. A.1.5).

    Attributes:
        heldout_corr: mean over folds of the held-out Pearson correlation (scalar).
        heldout_mse: mean over folds of the held-out MSE between ``S^sig(v)`` and ``S_emb``.
        fold_corr, fold_mse: the per-fold values, ``[folds]``.
        v: ``(v_1, ..., v_m)``, the probe vectors refit on all pairs, ``v_r`` of shape ``[P_r]``.
        S_sig: ``[A, A]``, the cosine matrix of ``h_alpha`` at the refit ``v``.
        fit_corr: the in-sample Pearson correlation of the refit (all pairs).
    """

    heldout_corr: jax.Array
    heldout_mse: jax.Array
    fold_corr: jax.Array
    fold_mse: jax.Array
    v: tuple[jax.Array, ...]
    S_sig: jax.Array
    fit_corr: jax.Array


@jax.jit
def probe_similarity(phi, v: Sequence[jax.Array]) -> jax.Array:
    """``S^sig(v)``: cosines of ``h_alpha = phi_alpha x_2 v_1 ... x_{m+1} v_m`` (the paper's eq. 7).

    ``phi`` ``[A, V_nu, P_1, ..., P_m]`` and ``v_r`` ``[P_r]`` -> ``[A, A]``.
    """
    h = phi
    for v_r in reversed(tuple(v)):  # contract the last context axis first
        h = h @ v_r
    return cosine_matrix(h)


_PROBE_OBJECTIVES = ("pearson", "mse")
PROBE_STEPS = 300
"""Adam steps of a probe fit (paper App. A.1.5), the default of `probe_fit` and
`lm.prefix_probe`."""
PROBE_LR = 0.01
"""Adam learning rate of a probe fit (paper App. A.1.5), the default of `probe_fit` and
`lm.prefix_probe`."""
PROBE_FOLDS = 5
"""Folds of `probe_fit`'s held-out score; it needs two token pairs per fold."""


def probe_min_tokens(folds: int = PROBE_FOLDS) -> int:
    """The fewest tokens ``A`` whose ``A (A - 1) / 2`` pairs give each of `probe_fit`'s
    ``folds`` folds two pairs."""
    return next(A for A in range(2, 2 * folds + 2) if A * (A - 1) // 2 >= 2 * folds)


def adam_descent(loss, v, learning_rate, steps: int):
    """``v`` after ``steps`` Adam steps (optax, rate ``learning_rate``) down ``loss(v)``, run as one
    ``jax.lax.scan``; ``v`` is any pytree of arrays and keeps its structure and dtypes.

    The probe fits' optimizer (paper App. A.1.5: Adam, `PROBE_STEPS`, `PROBE_LR`): `fit_probe` and
    `lm.prefix_probe`. Traceable; vmap it over initial ``v`` for restarts.
    """
    optimizer = optax.adam(learning_rate)

    def step(carry, _):
        v, state = carry
        grads = jax.grad(loss)(v)
        # optax's Adam bias correction raises a python float to an int32 step count, which
        # strict dtype promotion rejects; the parameters keep their dtype either way.
        with jax.numpy_dtype_promotion("standard"):
            updates, state = optimizer.update(grads, state, v)
        return (optax.apply_updates(v, updates), state), None

    with jax.numpy_dtype_promotion("standard"):
        state = optimizer.init(v)
    (v, _), _ = jax.lax.scan(step, (v, state), length=steps)
    return v


@functools.partial(jax.jit, static_argnames=("steps", "restarts", "objective_name"))
def fit_probe(
    phi,
    triangle_emb,
    train_weights,
    eval_weights,
    key,
    init_std,
    learning_rate,
    *,
    steps,
    restarts,
    objective_name="pearson",
):
    """The compiled core of `probe_fit`: one probe per row of ``train_weights``, scored under the
    matching row of ``eval_weights``. Compiled once per shape (``jax.jit``'s cache).

    Args:
        phi: ``[A, V_nu, P_1, ..., P_m]`` the signature (the paper's eq. 7).
        triangle_emb: ``[M]`` the strict upper triangle of ``S_emb`` (`upper_triangle`).
        train_weights, eval_weights: ``[F, M]`` 0/1 masks of the pairs each fit trains on and is
            scored on.
        key: the PRNG key of the ``restarts`` initializations ``v_r ~ init_std[r] N(0, 1)``.
        init_std: ``[m]`` one std per probe vector.
        learning_rate, steps: Adam's.
        restarts: initializations per fit, vmapped; the best by training objective is kept
            (the first of those tied with it up to rounding, `first_best`).
        objective_name: ``"pearson"`` (maximized) or ``"mse"`` (minimized).

    Returns:
        ``(v, corr, mse)``: the fitted vectors (a tuple, ``[F, P_r]`` each) and ``[F]`` the
        Pearson correlation and MSE of ``vec_△ S^sig(v)`` with ``triangle_emb`` under
        ``eval_weights``.
    """
    keys = jax.random.split(key, phi.ndim - 2)
    v_init = tuple(
        init_std[r] * jax.random.normal(keys[r], (restarts, size), phi.dtype)
        for r, size in enumerate(phi.shape[2:])
    )

    def pair_similarities(v):
        return upper_triangle(probe_similarity(phi, v))

    def objective(v, weights):  # maximized
        if objective_name == "mse":
            return -_weighted_mean((pair_similarities(v) - triangle_emb) ** 2, weights)
        return pearson(pair_similarities(v), triangle_emb, weights)

    def fit(v, weights):
        return adam_descent(lambda v: -objective(v, weights), v, learning_rate, steps)

    def best_fit(weights):
        v = jax.vmap(fit, in_axes=(0, None))(v_init, weights)
        best = first_best(jax.vmap(objective, in_axes=(0, None))(v, weights))
        return tuple(v_r[best] for v_r in v)

    v = jax.vmap(best_fit)(train_weights)
    triangle_sig = jax.vmap(pair_similarities)(v)
    corr = pearson(triangle_sig, triangle_emb, eval_weights)
    mse = _weighted_mean((triangle_sig - triangle_emb) ** 2, eval_weights)
    return v, corr, mse


@functools.lru_cache(maxsize=64)
def _fold_masks(n_pairs: int, folds: int, seed: int) -> np.ndarray:
    """0/1 ``[folds, n_pairs]``: pairs randomly permuted with ``seed``, dealt into ``folds``."""
    permutation = np.asarray(jax.random.permutation(jax.random.key(seed), n_pairs))
    fold_of_pair = np.empty(n_pairs, dtype=np.int64)
    fold_of_pair[permutation] = np.arange(n_pairs) % folds
    return fold_of_pair[None, :] == np.arange(folds)[:, None]


@jax.jit
def first_best(objective) -> jax.Array:
    """The index of the first of ``objective [R]``'s entries that tie its maximum up to rounding
    (within ``tol * max(1, |max|)``, ``tol`` of the dtype as for a constant vector in the module
    docstring): the restart `fit_probe` keeps.

    A Pearson-fitted probe can have a flat direction: every ``v`` whose ``S^sig(v)`` is an affine
    map of another's has the same correlation, so several restarts end on one objective value up
    to rounding while their MSEs differ (theory/metrics.md, Rounding).
    """
    best = jnp.max(objective)
    tied = objective >= best - _constant_tolerance(objective.dtype) * jnp.maximum(1, jnp.abs(best))
    return jnp.argmax(tied)


def probe_fit(
    phi,
    S_emb,
    *,
    folds: int = PROBE_FOLDS,
    steps: int = PROBE_STEPS,
    lr: float = PROBE_LR,
    seed: int = 0,
    init_std: float | Sequence[float] | None = None,
    restarts: int | None = None,
    heldout_tokens=None,
    objective: str = "pearson",
) -> ProbeResult:
    """Fit the signature probe ``v`` to an embedding geometry, cross-validated over pairs.

    The paper's eq. 7 and App. A.1.5 (``m = 1``; ``m >= 2`` is the [R] probe of App C):
    ``h_alpha(v) = phi_alpha x_2 v_1 ... x_{m+1} v_m``, ``S^sig(v)`` its cosine matrix, and
    ``v = argmax Pearson(vec_△ S^sig(v), vec_△ S_emb)`` over the training pairs, by Adam; all
    ``(folds + 1) * restarts`` fits in one compiled call (`fit_probe`). The folds, the restarts
    and the fit that is kept: theory/metrics.md, "The first-order probe".

    Args:
        phi: a label signature of order ``m >= 1``, ``[A, V_nu, P_1, ..., P_m]``; pass present
            tokens only (a zero row has ``S^sig = 0`` with every token and dilutes the fit).
        S_emb: ``[A, A]`` embedding cosine matrix (one snapshot; loop or vmap over a trajectory).
        folds: number of cross-validation folds (>= 2; each must hold >= 2 pairs).
        steps, lr: Adam steps and learning rate (App. A.1.5: 300 and 0.01).
        seed: seeds the pair permutation and the initialization.
        init_std: std of the initial ``v_r`` entries, one float for all ``r`` or one per ``r``
            (default `probe_init_std`).
        restarts: initializations per fit (>= 1; default `probe_restarts`); 1: the paper's.
        heldout_tokens: a token split instead of pair folds (the LM protocol of paper §6.1), a
            bool mask ``[A]`` or held-out indices (>= 2 tokens on each side; ``folds`` ignored).
        objective: ``"pearson"`` (maximize the correlation) or ``"mse"`` (minimize the MSE, the
            LM protocol of paper §6.1); restarts are ranked by it on the training pairs.

    Returns:
        ``ProbeResult``; on constant ``S_emb`` pairs the correlation is 0 (module docstring).
    """
    phi, S_emb = _as_float(phi, S_emb)
    _check_probe(phi, S_emb, folds, steps, lr, objective)
    order = phi.ndim - 2
    restarts, stds = _probe_starts(phi, order, restarts, init_std)
    training, heldout = _probe_pair_masks(phi.shape[0], folds, seed, heldout_tokens)
    v, corr, mse = fit_probe(
        phi,
        upper_triangle(S_emb),
        jnp.asarray(training, dtype=phi.dtype),
        jnp.asarray(heldout, dtype=phi.dtype),
        jax.random.key(seed),
        jnp.asarray(np.broadcast_to(stds, (order,)), dtype=phi.dtype),
        jnp.asarray(lr, dtype=phi.dtype),
        steps=int(steps),
        restarts=int(restarts),
        objective_name=objective,
    )
    return _probe_result(phi, v, corr, mse)


def _probe_starts(phi, order: int, restarts, init_std) -> tuple[int, np.ndarray]:
    """`probe_fit`'s restarts (default `probe_restarts`; ValueError unless an int >= 1) and
    the std of the initial ``v_r`` entries (default `probe_init_std`; checked by `_init_stds`)."""
    restarts = probe_restarts(order) if restarts is None else restarts
    if isinstance(restarts, bool) or not isinstance(restarts, int | np.integer) or restarts < 1:
        raise ValueError(f"restarts must be an int >= 1; got {restarts!r}")
    stds = _init_stds(probe_init_std(phi.shape[2:]) if init_std is None else init_std, order)
    return restarts, stds


def _probe_result(phi, v, corr, mse) -> ProbeResult:
    """The `ProbeResult` of `fit_probe`'s fits: the held-out folds, then the last fit, on
    every pair."""
    v_all = tuple(v_r[-1] for v_r in v)  # the last fit: every pair
    return ProbeResult(
        heldout_corr=jnp.mean(corr[:-1]),
        heldout_mse=jnp.mean(mse[:-1]),
        fold_corr=corr[:-1],
        fold_mse=mse[:-1],
        v=v_all,
        S_sig=probe_similarity(phi, v_all),
        fit_corr=corr[-1],
    )


def probe_restarts(order: int) -> int:
    """`probe_fit`'s default initializations per fit: 4 at order ``m = 1``, 8 at ``m >= 2``.

    [R]: the objective is not concave and has poor local optima, so one start (the paper's
    protocol) can badly underestimate the alignment. On planted problems (``phi``
    ``[16, 12, 10]``, Adam 300 steps) one start stalled below 0.99 held-out in 3 of 20 cases
    (worst 0.24), 4 starts in none; at order 2 (multilinear in ``v_1, v_2``) one start failed in
    4 of 6 cases, 8 in none.
    """
    return 4 if order == 1 else 8


def probe_init_std(context_sizes: Sequence[int]) -> list[float]:
    """`probe_fit`'s default std of the initial ``v_r`` entries: ``P_r^{-1/2}`` for the context
    sizes ``(P_1, ..., P_m)``, so ``|v_r| ~ 1``.

    [GAP]: App. A.1.5 gives ``v_i ~ N(0, |X|^{-0.5})``, not saying variance or std. The objective
    is invariant to rescaling each ``v_r`` (the cosines of ``h`` are scale-invariant in every
    ``v_r``), so the scale only sets Adam's *relative* step size (its steps are ~``lr`` in
    absolute size).
    """
    return [size**-0.5 for size in context_sizes]


def _check_probe(phi, S_emb, folds, steps, lr, objective) -> None:
    """`probe_fit`'s checks of its signature, geometry, folds and Adam settings."""
    if phi.ndim < 3:
        raise ValueError(
            f"phi must have shape [A, V_nu, P, ..., P] (order m >= 1); got {phi.shape}"
        )
    A = phi.shape[0]
    if S_emb.shape != (A, A):
        raise ValueError(f"S_emb must have shape [{A}, {A}] to match phi; got {S_emb.shape}")
    check_finite(phi=phi, S_emb=S_emb)
    if isinstance(folds, bool) or not isinstance(folds, int | np.integer) or folds < 2:
        raise ValueError(f"folds must be an int >= 2; got {folds!r}")
    if A < probe_min_tokens(folds):
        raise ValueError(
            f"folds={folds} needs at least {2 * folds} token pairs; phi has A={A} tokens, "
            f"{A * (A - 1) // 2} pairs"
        )
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 0:
        raise ValueError(f"steps must be an int >= 0; got {steps!r}")
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive finite number; got {lr!r}")
    if objective not in _PROBE_OBJECTIVES:
        raise ValueError(f"objective must be one of {_PROBE_OBJECTIVES}; got {objective!r}")


def _init_stds(init_std, order: int) -> np.ndarray:
    """``init_std`` checked: one positive float, or ``order`` of them (one per context axis)."""
    stds = np.asarray(init_std, dtype=np.float64)
    if stds.shape not in ((), (order,)) or not np.all(np.isfinite(stds) & (stds > 0)):
        raise ValueError(
            f"init_std must be one positive float or {order} of them (one per context axis); "
            f"got {init_std!r}"
        )
    return stds


def _probe_pair_masks(A: int, folds: int, seed: int, heldout_tokens):
    """`probe_fit`'s 0/1 pair masks ``[F + 1, A(A-1)/2]`` (fitted on, scored on): one row per
    fold (`_fold_masks`) or the token split (`token_split`), then a last fit on every pair."""
    n_pairs = A * (A - 1) // 2
    if heldout_tokens is None:
        heldout = _fold_masks(n_pairs, int(folds), int(seed))
        training = ~heldout
    else:
        training, heldout = token_split(heldout_tokens, A)
    everything = np.ones((1, n_pairs), dtype=bool)
    return np.concatenate([training, everything]), np.concatenate([heldout, everything])


def token_split(heldout_tokens, A: int) -> tuple[np.ndarray, np.ndarray]:
    """Pair masks ``[1, A(A-1)/2]`` (training pairs, held-out pairs) of a held-out token set.

    ``heldout_tokens`` is a bool mask ``[A]`` or indices in ``[0, A)``; a pair is a training pair
    when both its tokens are kept, held out when both are held out (mixed pairs are in neither).
    Raises ``ValueError`` unless each side has at least 2 tokens.
    """
    given = np.asarray(heldout_tokens)
    if given.dtype == bool:
        if given.shape != (A,):
            raise ValueError(
                f"heldout_tokens: a bool mask must have shape [{A}]; got {given.shape}"
            )
        mask = given
    elif (given.ndim == 1 and np.issubdtype(given.dtype, np.integer)) or given.size == 0:
        if given.size and (given.min() < 0 or given.max() >= A):
            raise ValueError(f"heldout_tokens: indices must lie in [0, {A}); got {given.tolist()}")
        mask = np.zeros(A, dtype=bool)
        mask[given.astype(np.int64)] = True
    else:
        raise ValueError(
            f"heldout_tokens must be a bool mask [{A}] or a 1-D array of token indices; "
            f"got {given.dtype} {given.shape}"
        )
    if mask.sum() < 2 or (~mask).sum() < 2:
        raise ValueError(
            f"heldout_tokens: needs >= 2 held-out and >= 2 training tokens; got "
            f"{int(mask.sum())} held out of {A}"
        )
    rows, cols = np.triu_indices(A, k=1)
    return (~mask[rows] & ~mask[cols])[None], (mask[rows] & mask[cols])[None]


# --------------------------------------------------------------------------------------------
# predicted vs prescribed label distributions (Task 1)


class DistributionMatch(NamedTuple):
    """Agreement of distributions ``p`` and ``q``, each ``[...]`` (one value per row)."""

    pearson: jax.Array
    kl: jax.Array
    jsd: jax.Array


@jax.jit
def distribution_match(p, q) -> DistributionMatch:
    """Pearson ``r``, ``D_KL(p || q)`` and JSD of probability rows (the paper's Task 1, Fig. 2A).

    Args:
        p: ``[..., V]`` the prescribed law ``p_a`` (rows are not renormalized).
        q: ``[..., V]`` the prediction ``softmax(W^U w^E_a)``.

    Returns:
        ``DistributionMatch`` of ``[...]`` arrays, in nats. KL uses ``0 log 0 = 0`` and is
        ``+inf`` where ``q = 0 < p``; the JSD uses the mixture ``m = (p + q) / 2``, so it is
        finite, symmetric and in ``[0, ln 2]``. The Pearson ``r`` of a constant row (the uniform
        law) is undefined and reported as 0 (see ``pearson``); use KL or JSD there.
    """
    p, q = _as_float(p, q)
    p, q = _broadcast(p=p, q=q)
    rel_entr = jax.scipy.special.rel_entr

    def kl(a, b):
        return jnp.sum(rel_entr(a, b), axis=-1)

    mixture = (p + q) / 2
    jsd = jnp.maximum((kl(p, mixture) + kl(q, mixture)) / 2, 0)
    return DistributionMatch(pearson=pearson(p, q), kl=kl(p, q), jsd=jsd)


# --------------------------------------------------------------------------------------------
# principal components, for embedding figures


class PCA(NamedTuple):
    """Principal components: ``scores [n, k]``, ``components [k, d]``, and
    ``explained_variance_ratio [k]`` (fractions of the total variance)."""

    scores: jax.Array
    components: jax.Array
    explained_variance_ratio: jax.Array


@functools.partial(jax.jit, static_argnames="k")
def pca(X, k: int = 2) -> PCA:
    """PCA of the rows of ``X`` ``[n, d]``: centered, by SVD, with a deterministic sign.

    Each component is signed so that its largest-``|loading|`` entry is positive.
    ``scores = (X - mean) @ components.T``. A zero-variance ``X`` gives ratios 0, not NaN.
    """
    (X,) = _as_float(X)
    if X.ndim != 2:
        raise ValueError(f"X must have shape [n, d]; got shape {X.shape}")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= min(X.shape):
        raise ValueError(f"k must be an int in [1, min(n, d)] = [1, {min(X.shape)}]; got {k!r}")
    centered = X - jnp.mean(X, axis=0)
    _, singular_values, right = jnp.linalg.svd(centered, full_matrices=False)
    components = right[:k]
    largest = jnp.take_along_axis(
        components, jnp.argmax(jnp.abs(components), axis=1)[:, None], axis=1
    )
    components = jnp.where(largest < 0, -components, components)
    variance = singular_values**2
    total = jnp.sum(variance)
    ratio = jnp.where(total > 0, variance[:k] / jnp.where(total > 0, total, 1.0), 0.0)
    return PCA(centered @ components.T, components, ratio)


# --------------------------------------------------------------------------------------------
# comparing 2-D layouts (PCA planes)


def procrustes_similarity(a, b) -> float:
    """``1 - disparity`` of two point sets ``[n, k]`` after the best translation, scaling,
    rotation and reflection (orthogonal Procrustes); 1 means the same shape, NaN if either set is
    a single point."""
    a, b = (np.asarray(x, dtype=np.float64) for x in (a, b))
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(
            f"a and b must be point sets of one shape [n, k]; got {a.shape}, {b.shape}"
        )
    a, b = a - a.mean(axis=0), b - b.mean(axis=0)
    norm_a, norm_b = np.linalg.norm(a), np.linalg.norm(b)
    if norm_a == 0 or norm_b == 0:
        return float("nan")
    singular = np.linalg.svd((a / norm_a).T @ (b / norm_b), compute_uv=False)
    return float(np.sum(singular) ** 2)


def ring_order_fraction(scores, tokens, k: int, N: int) -> float:
    """Share of angularly adjacent tokens in a PC1-PC2 plane whose values differ by ``±k^{-1}``
    mod N: the ring order a -> a + k^{-1} of the frequency-k component (theory/signatures.md
    (S6)); NaN when k has no inverse mod N."""
    if math.gcd(int(k), int(N)) != 1:
        return float("nan")
    step = pow(int(k), -1, int(N))
    scores, tokens = np.asarray(scores), np.asarray(tokens)
    order = tokens[np.argsort(np.arctan2(scores[:, 1], scores[:, 0]))]
    difference = (np.roll(order, -1) - order) % N
    return float(np.mean((difference == step) | (difference == N - step)))
