"""Closed-form early dynamics (SPEC.md §6.3 [R]; derivations in theory/closed_form.md).

Keeping the k = 1 term of sigma (rate C_1) and the uniform part of the softmax, the FFN flow is
linear (theory/closed_form.md eq. C1), in the row convention ``W_E, W_U [V, d]``:

    dW_E/dt = C_1 M^T W_U,      dW_U/dt = C_1 M W_E,
    M = sum_alpha L r_alpha (phi^{y;0}_alpha - 1/V) e_alpha^T      [V, V]

With the SVD ``M = U diag(s) V^T`` it is solved exactly by cosh/sinh per mode (eq. C3); every
function here returns a pure function of t (or evaluates one), in the style of neural-tangents'
predictors.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import metrics
from ctx_staircase.flows import drive_matrix

__all__ = [
    "LinearSolution",
    "attention_plateau_time",
    "crossing_time",
    "drive_matrix",
    "escape_time_estimate",
    "expected_gram",
    "linear_solution",
    "logit_scale",
    "mode_covariance",
    "predicted_rho0",
]


class LinearSolution(NamedTuple):
    """The exact solution of the linear phase (eq. C3): call it with ``t`` (scalar or ``[T]``).

    Attributes:
        left, singular, right_t: the SVD ``M = left diag(singular) right_t``.
        a0, b0: ``right_t W_E(0)`` and ``left^T W_U(0)``, the initial mode amplitudes ``[V, d]``.
        rate: C_1.
    """

    left: jax.Array
    singular: jax.Array
    right_t: jax.Array
    a0: jax.Array
    b0: jax.Array
    rate: float

    def __call__(self, t) -> tuple[jax.Array, jax.Array]:
        """``(W_E(t), W_U(t))``, each ``[..., V, d]`` for ``t`` of shape ``[...]``."""
        x = self.rate * jnp.asarray(t)[..., None] * self.singular  # [..., V]
        cosh, sinh = jnp.cosh(x)[..., None], jnp.sinh(x)[..., None]
        W_E = jnp.einsum("kv,...kd->...vd", self.right_t, cosh * self.a0 + sinh * self.b0)
        W_U = jnp.einsum("vk,...kd->...vd", self.left, cosh * self.b0 + sinh * self.a0)
        return W_E, W_U


def linear_solution(M, W_E0, W_U0, rate: float) -> LinearSolution:
    """Solve ``dW_E/dt = C_1 M^T W_U``, ``dW_U/dt = C_1 M W_E`` from ``(W_E0, W_U0)`` (eq. C3).

    With ``a_i = W_E^T v_i`` and ``b_i = W_U^T u_i`` each mode obeys ``a_i' = C_1 s_i b_i``,
    ``b_i' = C_1 s_i a_i``; zero singular values leave their modes (the kernel of M) frozen.
    """
    M, W_E0, W_U0 = (jnp.asarray(x) for x in (M, W_E0, W_U0))
    left, singular, right_t = jnp.linalg.svd(M)
    return LinearSolution(left, singular, right_t, right_t @ W_E0, left.T @ W_U0, float(rate))


def expected_gram(M, t, *, d: int, sigma_E: float, sigma_U: float, rate: float) -> jax.Array:
    """``E[W_E W_E^T](t) = d s_E^2 I + d (s_E^2 + s_U^2) V sinh^2(C_1 t S) V^T`` (eq. C4).

    The expectation over an i.i.d. Gaussian init with standard deviations ``sigma_E, sigma_U``;
    ``[..., V, V]`` for ``t`` of shape ``[...]``.
    """
    _, singular, right_t = jnp.linalg.svd(jnp.asarray(M))
    sinh2 = jnp.sinh(rate * jnp.asarray(t)[..., None] * singular) ** 2
    growth = jnp.einsum("kv,...k,kw->...vw", right_t, sinh2, right_t)
    eye = jnp.eye(right_t.shape[0], dtype=growth.dtype)
    return d * sigma_E**2 * eye + d * (sigma_E**2 + sigma_U**2) * growth


def mode_covariance(M, t, *, sigma_E: float, sigma_U: float, rate: float) -> jax.Array:
    """Covariance ``Sigma(t)`` of one coordinate of the embeddings, ``[..., V, V]`` (eq. C5).

    Each of the d coordinates of ``W_E(t) = A W_E(0) + B W_U(0)`` is an independent Gaussian
    vector with covariance ``Sigma = s_E^2 A A^T + s_U^2 B B^T``; ``W_E W_E^T`` is
    Wishart(d, Sigma).
    """
    _, singular, right_t = jnp.linalg.svd(jnp.asarray(M))
    x = rate * jnp.asarray(t)[..., None] * singular
    cosh2, sinh2 = jnp.cosh(x) ** 2, jnp.sinh(x) ** 2
    # A = V cosh V^T and B = V sinh U^T, so A A^T = V cosh^2 V^T and B B^T = V sinh^2 V^T
    return jnp.einsum(
        "kv,...k,kw->...vw", right_t, sigma_E**2 * cosh2 + sigma_U**2 * sinh2, right_t
    )


def predicted_rho0(
    M, t, S_sig, alphas, *, d: int, sigma_E: float, sigma_U: float, rate: float
) -> jax.Array:
    """Expected Pearson ``rho_0(t)`` of ``S^{emb}`` with ``S_sig`` over ``alphas`` (eq. C6).

    ``S^{emb}_{ab} = C_ab / sqrt(C_aa C_bb) + noise`` with ``C = Sigma(t)`` and, for a Wishart Gram,
    noise variance ``(1 + corr_ab^2) / d``; the expected correlation with ``S_sig`` is the
    correlation of the mean part shrunk by ``sqrt(var_mean / (var_mean + mean noise var))``.
    ``[T]`` for ``t`` of shape ``[T]``.
    """
    cov = mode_covariance(M, t, sigma_E=sigma_E, sigma_U=sigma_U, rate=rate)
    cov = cov[..., alphas[:, None], alphas[None, :]]
    diag = jnp.sqrt(jnp.diagonal(cov, axis1=-2, axis2=-1))
    corr = cov / (diag[..., :, None] * diag[..., None, :])
    mean = metrics.upper_triangle(corr)
    noise = jnp.mean((1 + mean**2) / d, axis=-1)
    signal = jnp.var(mean, axis=-1)
    shrink = jnp.sqrt(signal / (signal + noise))
    return metrics.pearson(mean, metrics.upper_triangle(jnp.asarray(S_sig))) * shrink


@functools.partial(jax.jit, static_argnames="coefficients")
def logit_scale(W_E, W_U, tokens, coefficients: tuple[float, ...]) -> jax.Array:
    """The escape statistic: the largest centred logit ``max_n max_nu |f_nu - mean_nu f|``.

    ``f(X) = W_U sigma(sum_i w_{x_i})`` with ``sigma = sum_k C_k z^k``; ``W_E, W_U`` may carry
    leading time axes ``[..., V, d]`` -> ``[...]``. The same function serves the closed form and
    the trained snapshots, so predicted and measured escape share one definition (eq. C7).
    """
    h = jnp.sum(jnp.take(W_E, jnp.asarray(tokens), axis=-2), axis=-2)  # [..., n, d]
    hidden = sum(C * h**k for k, C in enumerate(coefficients, start=1))
    logits = jnp.einsum("...nd,...vd->...nv", hidden, W_U)
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
    return jnp.max(jnp.abs(centred), axis=(-2, -1))


def crossing_time(ts, values, threshold: float) -> float:
    """First ``t`` with ``values >= threshold``, log-linearly interpolated; NaN if never (C7)."""
    ts, values = np.asarray(ts, dtype=np.float64), np.asarray(values, dtype=np.float64)
    above = np.flatnonzero(values >= threshold)
    if above.size == 0:
        return float("nan")
    i = int(above[0])
    if i == 0:
        return float(ts[0])
    lo, hi = np.log(values[i - 1]), np.log(values[i])
    fraction = (np.log(threshold) - lo) / (hi - lo) if hi > lo else 1.0
    return float(ts[i - 1] + fraction * (ts[i] - ts[i - 1]))


def escape_time_estimate(top_singular: float, *, gamma, d: int, rate: float) -> np.ndarray:
    """The analytic escape time ``((2 gamma - 1) ln d + ln 2) / (2 C_1 s_1)`` (eq. C8).

    Up to O(1) constants; its slope in gamma, ``ln d / (C_1 s_1)``, is the testable part.
    """
    gamma = np.asarray(gamma, dtype=np.float64)
    return ((2 * gamma - 1) * np.log(d) + np.log(2)) / (2 * rate * top_singular)


def attention_plateau_time(top_singular: float, u0: float, depth: int = 4) -> float:
    """Blow-up time of ``du/dt = N s u^{2(N-1)/N}`` from ``u(0) = u0`` (eq. A5, depth N).

    Integrating, ``u(t)^{-(N-2)/N} = u0^{-(N-2)/N} - (N-2) s t``, so the blow-up time is
    ``t* = u0^{-(N-2)/N} / ((N-2) s)``, a power law in the initial scale: with ``u0 ~ eps^N``
    the plateau lasts ``~ eps^{-(N-2)}`` (theory/attention.md eq. A5).
    """
    if depth < 3:
        raise ValueError(f"depth must be >= 3 for a finite-time blow-up; got {depth}")
    return float(u0 ** (-(depth - 2) / depth) / ((depth - 2) * top_singular))
