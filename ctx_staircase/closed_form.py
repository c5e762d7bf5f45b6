"""Closed-form early dynamics (a reconstruction [R]; derivations in theory/closed_form.md).

Keeping the k = 1 term of sigma (rate C_1) and the uniform part of the softmax, the FFN flow is
linear (theory/closed_form.md eq. C1), in the row convention ``W_E, W_U [V, d]``:

    dW_E/dt = C_1 M^T W_U,      dW_U/dt = C_1 M W_E,
    M = sum_alpha L r_alpha (phi^{y;0}_alpha - 1/V) e_alpha^T      [V, V]

With the SVD ``M = U diag(s) V^T`` it is solved exactly by cosh/sinh per mode (eq. C3). Keeping
the linear part of the softmax as well adds a feedback ``-(C_1^2/V) ...`` with the count second
moment ``Gamma = E[c c^T]``; projected on the diagonal of the modes it is a constant-coefficient
Riccati equation per mode, solved in closed form at the same cost (`feedback_solution`,
theory/escape_feedback.md eq. E1-E9). Every function here returns a pure function of t (or
evaluates one), in the style of neural-tangents' predictors.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import metrics
from ctx_staircase.flows import drive_matrix
from ctx_staircase.internal import check_int, check_scalar
from ctx_staircase.theory import Problem, TheoryLanes, WeightTrajectory

__all__ = [
    "FeedbackSolution",
    "LinearSolution",
    "attention_plateau",
    "attention_plateau_time",
    "count_second_moment",
    "crossing_time",
    "escape_time_estimate",
    "expected_gram",
    "feedback_lanes",
    "feedback_solution",
    "linear_lanes",
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
    M = _square("M", M)
    W_E0 = _weights("W_E0", W_E0, M.shape[0])
    W_U0 = _weights("W_U0", W_U0, M.shape[0], W_E0.shape[1])
    check_scalar(rate, "rate")
    left, singular, right_t = jnp.linalg.svd(M)
    return LinearSolution(left, singular, right_t, right_t @ W_E0, left.T @ W_U0, float(rate))


def count_second_moment(ds) -> np.ndarray:
    """``Gamma = E[c c^T] = sum_n p_n c_n c_n^T``, float64 ``[V, V]`` (escape_feedback.md E2).

    ``c_n`` ``[V]`` counts the tokens of sequence n (``sum_v c_nv = L``); ``p_n`` are
    ``ds.probabilities``. Not centred: the feedback of the linear softmax carries the raw moment.
    """
    n, V = ds.tokens.shape[0], ds.vocab_size
    counts = np.zeros((n, V))
    np.add.at(counts, (np.repeat(np.arange(n), ds.L), ds.tokens.ravel()), 1.0)
    return (ds.probabilities[:, None] * counts).T @ counts


class FeedbackSolution(NamedTuple):
    """The linear phase with the diagonal softmax feedback (theory/escape_feedback.md eq. E8).

    Call it with ``t`` (scalar or ``[...]``) for ``(W_E(t), W_U(t))``, like `LinearSolution`.

    Attributes:
        linear: the `LinearSolution` without the feedback: the SVD of M, the initial mode
            amplitudes and C_1.
        feedback: ``kappa_i = C_1^2 v_i^T Gamma v_i / V`` ``[V]`` (0 on the kernel of M).
    """

    linear: LinearSolution
    feedback: jax.Array

    @property
    def ceiling(self) -> jax.Array:
        """``P*_i = C_1 s_i / kappa_i = V s_i / (C_1 v_i^T Gamma v_i)`` ``[V]``, inf where no
        feedback: the logistic ceiling of the mode overlap ``a_i . b_i`` (eq. E9)."""
        linear, kappa = self.linear, self.feedback
        safe = jnp.where(kappa > 0, kappa, 1.0)
        return jnp.where(kappa > 0, linear.rate * linear.singular / safe, jnp.inf)

    def log_growth(self, t) -> jax.Array:
        """``2 Lambda_i(t) = ln Y_i(t)`` ``[..., V]``: ``a_i + b_i`` grows by ``e^Lambda`` (E7)."""
        linear = self.linear
        g0 = jnp.sum((linear.a0 + linear.b0) ** 2, axis=-1)
        h0 = jnp.sum((linear.a0 - linear.b0) ** 2, axis=-1)
        t = jnp.asarray(t, dtype=linear.singular.dtype)[..., None]
        return _riccati_log_solution(t, 2 * linear.rate * linear.singular, self.feedback, g0, h0)

    def __call__(self, t) -> tuple[jax.Array, jax.Array]:
        """``(W_E(t), W_U(t))``, each ``[..., V, d]`` for ``t`` of shape ``[...]`` (eq. E8)."""
        root = jnp.exp(0.5 * self.log_growth(t))[..., None]  # sqrt(Y) = e^Lambda
        linear = self.linear
        plus, minus = (linear.a0 + linear.b0) * root, (linear.a0 - linear.b0) / root
        W_E = jnp.einsum("kv,...kd->...vd", linear.right_t, 0.5 * (plus + minus))
        W_U = jnp.einsum("vk,...kd->...vd", linear.left, 0.5 * (plus - minus))
        return W_E, W_U


def _riccati_log_solution(t, beta, kappa, g0, h0) -> jax.Array:
    """``ln Y(t)`` for ``Y' = -alpha Y^2 + beta Y + delta``, ``Y(0) = 1`` (eq. E7).

    ``alpha = kappa g0 / 2``, ``delta = kappa h0 / 2``, all >= 0. With the roots
    ``Y_pm = (beta pm D) / (2 alpha)``, ``D = sqrt(beta^2 + 4 alpha delta)``, the solution is
    ``Y = (q + A F) / (q + B F)``, ``q = e^{-Dt}``, ``F = (1 - q) / D``, ``A = alpha Y_+ + delta``,
    ``B = alpha (1 - Y_-)``: every term is >= 0 and F <= t, so in log space it neither cancels
    nor overflows, saturates at ``Y_+`` for large t, and is ``e^{beta t}`` at ``kappa = 0``.
    """
    alpha, delta = 0.5 * kappa * g0, 0.5 * kappa * h0
    D = jnp.sqrt(beta**2 + 4 * alpha * delta)
    positive = D > 0
    F = jnp.where(positive, -jnp.expm1(-D * t) / jnp.where(positive, D, 1.0), t)
    root_sum = beta + D  # 0 only for a frozen mode (beta = delta = 0)
    A = 0.5 * root_sum + delta
    B = alpha * (1 + 2 * delta / jnp.where(root_sum > 0, root_sum, 1.0))
    return jnp.logaddexp(-D * t, jnp.log(A * F)) - jnp.logaddexp(-D * t, jnp.log(B * F))


def feedback_solution(M, Gamma, W_E0, W_U0, rate: float, vocab_size: int) -> FeedbackSolution:
    """Solve the linear phase with the softmax linearised at uniform, mode by mode (eq. E4-E8).

    Per mode of ``M = U diag(s) V^T``, ``a_i = W_E^T v_i``, ``b_i = W_U^T u_i`` obey
    ``a' = C_1 s b - kappa (a.b) b``, ``b' = C_1 s a - kappa (a.b) a`` with
    ``kappa_i = C_1^2 v_i^T Gamma v_i / V``: the diagonal part of the feedback
    ``-(C_1^2/V) H W_U W_E^T Gamma W_E`` (and its transpose for W_E). ``kappa = 0`` gives
    `linear_solution` exactly.

    Args:
        M: `drive_matrix` ``[V, V]``.
        Gamma: `count_second_moment` ``[V, V]``.
        W_E0, W_U0: ``[V, d]`` initial weights; components in the kernel of M stay frozen.
        rate: C_1.
        vocab_size: V, the softmax width.
    """
    M = _square("M", M)
    Gamma = _square("Gamma", Gamma)
    if Gamma.shape != M.shape:
        raise ValueError(f"Gamma must have the shape of M, {M.shape}; got shape {Gamma.shape}")
    W_E0 = _weights("W_E0", W_E0, M.shape[0])
    W_U0 = _weights("W_U0", W_U0, M.shape[0], W_E0.shape[1])
    linear = linear_solution(M, W_E0, W_U0, rate)
    check_int(vocab_size, "vocab_size")
    singular, right_t = linear.singular, linear.right_t
    gamma_ii = jnp.einsum("kv,vw,kw->k", right_t, Gamma, right_t)
    # The kernel of M pairs left and right singular vectors arbitrarily, so a diagonal feedback
    # there is meaningless; it is frozen, as in (C3) (exactly so where Gamma v = 0).
    driven = singular > singular[0] * M.shape[0] * jnp.finfo(singular.dtype).eps
    kappa = jnp.where(driven, rate**2 * gamma_ii / vocab_size, 0.0)
    return FeedbackSolution(linear, kappa)


def expected_gram(M, t, *, d: int, sigma_E: float, sigma_U: float, rate: float) -> jax.Array:
    """``E[W_E W_E^T](t) = d s_E^2 I + d (s_E^2 + s_U^2) V sinh^2(C_1 t S) V^T`` (eq. C4).

    The expectation over an i.i.d. Gaussian init with standard deviations ``sigma_E, sigma_U``;
    ``[..., V, V]`` for ``t`` of shape ``[...]``.
    """
    check_int(d, "d")
    _check_init_scales(sigma_E, sigma_U, rate)
    _, singular, right_t = jnp.linalg.svd(_square("M", M))
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
    _check_init_scales(sigma_E, sigma_U, rate)
    _, singular, right_t = jnp.linalg.svd(_square("M", M))
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

    ``S^{emb}_{ab} = C_ab / sqrt(C_aa C_bb) + noise`` with ``C = Sigma(t)``. The cosine of two
    rows of a Wishart(d, C) factor is a sample correlation coefficient, with noise variance
    ``(1 - corr_ab^2)^2 / d``; ``(1 + corr_ab^2) / d`` is the variance of the raw Gram entry
    ``G_ab / (d sqrt(C_aa C_bb))``, not of the cosine (theory/closed_form.md §3). The expected
    correlation with ``S_sig`` is the correlation of the mean part shrunk by
    ``sqrt(var_mean / (var_mean + mean noise var))``. ``[T]`` for ``t`` of shape ``[T]``.
    """
    check_int(d, "d")
    cov = mode_covariance(M, t, sigma_E=sigma_E, sigma_U=sigma_U, rate=rate)
    cov = cov[..., alphas[:, None], alphas[None, :]]
    diag = jnp.sqrt(jnp.diagonal(cov, axis1=-2, axis2=-1))
    corr = cov / (diag[..., :, None] * diag[..., None, :])
    mean = metrics.upper_triangle(corr)
    noise = jnp.mean((1 - mean**2) ** 2 / d, axis=-1)
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
    if ts.ndim != 1 or values.shape != ts.shape:
        raise ValueError(
            f"ts and values must be 1-D of the same length; got shapes {ts.shape} (ts) and "
            f"{values.shape} (values)"
        )
    check_scalar(threshold, "threshold", low=0, low_open=True)
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

    Its slope in gamma, ``ln d / (C_1 s_1)``, is the limit of the closed form's local slope
    ``dt_esc/dgamma`` as gamma grows; its intercept is off additively by an O(1) constant
    (about 15 time units on add N = 20 against the closed form, theory/closed_form.md §4).
    """
    check_scalar(top_singular, "top_singular", low=0, low_open=True)
    check_int(d, "d")
    check_scalar(rate, "rate", nonzero=True)
    gamma = np.asarray(gamma, dtype=np.float64)
    if not np.all(np.isfinite(gamma)):
        raise ValueError(f"gamma must be finite; got {gamma.tolist()}")
    return ((2 * gamma - 1) * np.log(d) + np.log(2)) / (2 * rate * top_singular)


def attention_plateau_time(top_singular: float, u0: float, depth: int = 4) -> float:
    """Blow-up time of ``du/dt = N s u^{2(N-1)/N}`` from ``u(0) = u0`` (eq. A5, depth N).

    Integrating, ``u(t)^{-(N-2)/N} = u0^{-(N-2)/N} - (N-2) s t``, so the blow-up time is
    ``t* = u0^{-(N-2)/N} / ((N-2) s)``, a power law in the initial scale: with ``u0 ~ eps^N``
    the plateau lasts ``~ eps^{-(N-2)}`` (theory/attention.md eq. A5).

    ``top_singular`` is the mode rate ``s``: the top singular value of the depth-N network's
    cross-correlation. For the attention-only model at uniform attention that is ``M / L``
    (``Q = M W_E / L``, `flows.attention_uniform_field`), so pass ``s_1(M) / L``, not ``s_1(M)``::

        M = flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
        s = np.linalg.svd(M, compute_uv=False)[0] / ds.L
        t_star = attention_plateau_time(s, (d**-gamma * np.sqrt(d)) ** 4)
    """
    check_int(depth, "depth", 3)  # depth 2 is linear: no finite-time blow-up
    check_scalar(top_singular, "top_singular", low=0, low_open=True)
    check_scalar(u0, "u0", low=0, low_open=True)
    return float(u0 ** (-(depth - 2) / depth) / ((depth - 2) * top_singular))


def attention_plateau(ds, gamma: float, d: int) -> float:
    """Eq. A5's order-0 plateau of the attention-only model on ``ds`` under gradient flow:
    `attention_plateau_time` at ``s = s_1(M) / L`` and ``u0 = (d^-gamma sqrt(d))^4`` (each of
    its four layers starts at amplitude ``d^-gamma sqrt(d)``), so ``t* ∝ d^{2 gamma - 1}``."""
    from ctx_staircase import signatures

    M = drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
    top = np.linalg.svd(np.asarray(M), compute_uv=False)[0] / ds.L
    return attention_plateau_time(top, (d**-gamma * np.sqrt(d)) ** 4)


def linear_lanes(problem: Problem) -> TheoryLanes:
    """The closed form (C3) of every lane of ``problem``, at rate ``C_1``, on its time grid."""
    rate = problem.setting.coefficients[0]
    return _lanes(problem, lambda W_E0, W_U0: linear_solution(problem.M, W_E0, W_U0, rate))


def feedback_lanes(problem: Problem) -> TheoryLanes:
    """The closed form with the softmax feedback (theory/escape_feedback.md) of every lane of
    ``problem``, at rate ``C_1``, on its time grid."""
    rate, V = problem.setting.coefficients[0], problem.ds.vocab_size
    Gamma = count_second_moment(problem.ds)
    return _lanes(
        problem, lambda W_E0, W_U0: feedback_solution(problem.M, Gamma, W_E0, W_U0, rate, V)
    )


def _lanes(problem: Problem, solution) -> TheoryLanes:
    """``solution(W_E0, W_U0)`` (a function of t) of every lane, on ``problem.ts``."""
    trajectories = []
    for W_E0, W_U0 in zip(problem.y0["W_E"], problem.y0["W_U"], strict=True):
        W_E, W_U = solution(W_E0, W_U0)(problem.ts)
        trajectories.append(WeightTrajectory(problem.ts, np.asarray(W_E), np.asarray(W_U)))
    return TheoryLanes(tuple(trajectories))


# --------------------------------------------------------------------------------------------
# validation: shapes always (they are static under jit and vmap), values when concrete


def _square(name: str, M) -> jax.Array:
    M = jnp.asarray(M)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] == 0:
        raise ValueError(f"{name} must be a square matrix [V, V]; got shape {M.shape}")
    return M


def _weights(name: str, W, V: int, d: int | None = None) -> jax.Array:
    W = jnp.asarray(W)
    if W.ndim != 2 or W.shape[0] != V or (d is not None and W.shape[1] != d):
        want = f"[{V}, {'d' if d is None else d}]"
        raise ValueError(f"{name} must have shape {want} to match M; got shape {W.shape}")
    return W


def _check_init_scales(sigma_E, sigma_U, rate) -> None:
    check_scalar(sigma_E, "sigma_E", low=0)
    check_scalar(sigma_U, "sigma_U", low=0)
    check_scalar(rate, "rate")
