"""The second step of the staircase: the collapse plateau, its unstable band and the second escape
(theory/second_escape.md).

FFN ``f(X) = W_U sigma(h)``, ``h = W_E^T c`` (``c [V]`` the token counts), loss the exact
softmax cross-entropy ``L = sum_n p_n CE(f(X_n), y_n)`` (eq. S1). Rows are vectors: ``W_E, W_U
[V, d]``.

- **The plateau.** On a task with the cyclic symmetry of ``mod`` (shift every number and every
  label by one), the states with all number rows of ``W_E`` equal (``u``), all label rows of
  ``W_U`` equal (``w_lab``) and all other rows of ``W_U`` equal (``w_out``, the ids that are
  never labels) form an invariant manifold of the gradient flow: the fixed set of a symmetry
  group. On it every sample has the same hidden state ``h = L u``, so the model predicts one
  distribution and ``rho_0 = 1`` (a collapsed geometry). `reduced_flow` integrates the flow on
  the manifold, three vectors of ``R^d`` (eq. S2).
- **The band.** Off the manifold, the deviation ``delta = theta - P(theta)`` (``P`` =
  `symmetric_part`) obeys ``d delta/dt = -H delta`` to first order, ``H`` the loss Hessian.
  `band` finds the most negative eigenvalues of ``H`` by Lanczos on Hessian-vector products
  (`hessian_vector_product`) and labels each eigenvector by the Fourier frequency ``k`` that
  carries most of its number-row weight (eq. S3).
- **The escape.** Each band mode grows as ``exp(-lambda t)`` from its seed amplitude, the
  projection of the deviation on it; the predicted ``t_1`` is when ``rho_0`` of the predicted
  embedding falls below `LEVEL` (eq. S4, `predict_second_escape`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import activations, ode
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_int, check_real

__all__ = [
    "LEVEL",
    "Band",
    "PlateauProblem",
    "SecondEscape",
    "band",
    "crossings",
    "fourier_label",
    "hessian_vector_product",
    "loss",
    "measured_second_escape",
    "plateau_field",
    "plateau_problem",
    "predict_second_escape",
    "reduced_flow",
    "rho0",
    "symmetric_part",
]

#: The second escape is when rho_0 (1 - MSE of S^emb against the collapsed all-ones geometry)
#: first falls below this level after the collapse; fixed before any comparison.
LEVEL = 0.9
#: The collapse: the first time rho_0 reaches this.
COLLAPSED = 0.99
#: The prediction starts this long after the collapse (t_0 = t_c + START_AFTER, level L1).
START_AFTER = 100.0


class PlateauProblem(NamedTuple):
    """The data of the plateau theory, ``n`` samples of ``L`` tokens over ``V`` ids.

    Attributes:
        tokens: ``[n, L]`` input ids.
        labels: ``y_n [n]`` label ids.
        weights: ``p_n [n]`` sample probabilities (sum 1).
        numbers: ``[A]`` the number ids (the rows of ``W_E`` the geometry is measured on).
        label_ids: ``[K]`` the ids that occur as labels.
        other_ids: ``[V - K]`` the ids that never occur as labels.
        activation: the hidden activation (an `activations` name).
    """

    tokens: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    numbers: np.ndarray
    label_ids: np.ndarray
    other_ids: np.ndarray
    activation: str

    @property
    def vocab_size(self) -> int:
        return int(self.label_ids.size + self.other_ids.size)


def plateau_problem(ds: TokenDataset, activation: str = "relu") -> PlateauProblem:
    """The `PlateauProblem` of a data set whose ``groups["numbers"]`` are the geometry's ids."""
    activations.get(activation)
    label_ids = np.unique(ds.labels)
    return PlateauProblem(
        tokens=np.asarray(ds.tokens),
        labels=np.asarray(ds.labels),
        weights=np.asarray(ds.probabilities, dtype=np.float64),
        numbers=np.asarray(ds.groups["numbers"]),
        label_ids=label_ids,
        other_ids=np.setdiff1d(np.arange(ds.vocab_size), label_ids),
        activation=activation,
    )


def _hidden(W_E, problem: PlateauProblem) -> jax.Array:
    """``h_n = W_E^T c_n = sum_i w^E_{x_i}``, ``[n, d]``."""
    return W_E[jnp.asarray(problem.tokens)].sum(axis=1)


def loss(W_E, W_U, problem: PlateauProblem) -> jax.Array:
    """``L = sum_n p_n [logsumexp(z_n) - z_{n, y_n}]``, ``z_n = W_U sigma(h_n)`` (eq. S1)."""
    sigma = activations.get(problem.activation)
    logits = activations.apply(sigma, _hidden(W_E, problem)) @ W_U.T  # [n, V]
    picked = jnp.take_along_axis(logits, jnp.asarray(problem.labels)[:, None], axis=1)[:, 0]
    nll = jax.nn.logsumexp(logits, axis=1) - picked
    return jnp.sum(jnp.asarray(problem.weights, W_E.dtype) * nll)


def hessian_vector_product(W_E, W_U, vectors, problem: PlateauProblem):
    """``H v`` at ``(W_E, W_U)`` for ``v = (v_E, v_U)`` (each ``[V, d]``): forward-over-reverse.

    ReLU's Hessian is the frozen-gate one: JAX differentiates ``relu`` as ``1[h > 0]``, so the
    gates of the current pre-activations are held fixed (theory/second_escape.md §3).
    """
    gradient = jax.grad(loss, argnums=(0, 1))
    return jax.jvp(lambda E, U: gradient(E, U, problem), (W_E, W_U), tuple(vectors))[1]


def symmetric_part(W_E, W_U, problem: PlateauProblem):
    """``P(theta)``: number rows of ``W_E`` replaced by their mean, label rows of ``W_U`` by
    theirs, the other rows of ``W_U`` by theirs; rows of ``W_E`` that are not numbers kept."""
    W_E, W_U = np.array(W_E, dtype=np.float64), np.array(W_U, dtype=np.float64)
    W_E[problem.numbers] = W_E[problem.numbers].mean(axis=0)
    for ids in (problem.label_ids, problem.other_ids):
        if ids.size:
            W_U[ids] = W_U[ids].mean(axis=0)
    return W_E, W_U


def rho0(W_E, numbers) -> np.ndarray:
    """``rho_0 = 1 - MSE`` of the number rows' cosines against the all-ones geometry, for
    ``W_E [..., V, d]``; shape ``[...]`` (the collapsed geometry scores 1)."""
    W = np.asarray(W_E, dtype=np.float64)[..., numbers, :]
    W = W / np.linalg.norm(W, axis=-1, keepdims=True)
    S = W @ np.swapaxes(W, -1, -2)
    upper = np.triu_indices(len(numbers), 1)
    return 1.0 - np.mean((S[..., upper[0], upper[1]] - 1.0) ** 2, axis=-1)


class Band(NamedTuple):
    """The most negative curvatures of ``H`` at one state (eq. S3).

    Attributes:
        rates: ``[m]`` growth rates ``-lambda_i`` (descending; positive means unstable).
        modes: ``(v_E, v_U)`` each ``[m, V, d]``: unit eigenvectors (joint norm 1).
        k: ``[m]`` the Fourier frequency of the number rows carrying most of each mode's weight.
        k_share: ``[m]`` that frequency's share of the mode's number-row weight.
        e_share: ``[m]`` the mode's weight on ``W_E`` (the rest is on ``W_U``).
    """

    rates: np.ndarray
    modes: tuple[np.ndarray, np.ndarray]
    k: np.ndarray
    k_share: np.ndarray
    e_share: np.ndarray


def band(W_E, W_U, problem: PlateauProblem, *, modes: int = 4, iterations: int = 60, seed=0):
    """The ``modes`` most negative eigenpairs of the Hessian at ``(W_E, W_U)`` by Lanczos with
    full reorthogonalization, ``iterations`` Hessian-vector products (eq. S3)."""
    check_int(modes, "modes", 1)
    check_int(iterations, "iterations", modes + 1)
    W_E, W_U = jnp.asarray(W_E, jnp.float64), jnp.asarray(W_U, jnp.float64)
    shape, size = W_E.shape, W_E.size
    data = (jnp.asarray(problem.tokens), jnp.asarray(problem.labels), jnp.asarray(problem.weights))

    def product(W_E, W_U, q):
        return _flat_hvp(W_E, W_U, q, *data, activation=problem.activation)

    rng = np.random.default_rng(seed)
    q = rng.standard_normal(2 * size)
    basis = np.zeros((iterations, 2 * size))
    alpha, beta = np.zeros(iterations), np.zeros(iterations)
    q /= np.linalg.norm(q)
    for i in range(iterations):
        basis[i] = q
        w = np.array(product(W_E, W_U, jnp.asarray(q)))
        alpha[i] = q @ w
        w -= basis[: i + 1].T @ (basis[: i + 1] @ w)  # full reorthogonalization, twice
        w -= basis[: i + 1].T @ (basis[: i + 1] @ w)
        beta[i] = np.linalg.norm(w)
        if beta[i] < 1e-14:
            basis, alpha, beta = basis[: i + 1], alpha[: i + 1], beta[: i + 1]
            break
        q = w / beta[i]
    T = np.diag(alpha) + np.diag(beta[:-1], 1) + np.diag(beta[:-1], -1)
    values, vectors = np.linalg.eigh(T)
    ritz = (vectors[:, :modes].T @ basis).reshape(-1, 2, *shape)
    v_E, v_U = ritz[:, 0], ritz[:, 1]
    k, share = fourier_label(v_E[:, problem.numbers])
    e_share = np.sum(v_E**2, axis=(1, 2))
    return Band(-values[:modes], (v_E, v_U), k, share, e_share)


@functools.partial(jax.jit, static_argnames=("activation",))
def _flat_hvp(W_E, W_U, q, tokens, labels, weights, *, activation: str):
    """``H q`` for a flat ``q = (v_E, v_U)``; one compiled program per shape and activation."""
    empty = np.zeros(0, np.int64)
    problem = PlateauProblem(tokens, labels, weights, empty, empty, empty, activation)
    v = (q[: W_E.size].reshape(W_E.shape), q[W_E.size :].reshape(W_U.shape))
    H_E, H_U = hessian_vector_product(W_E, W_U, v, problem)
    return jnp.concatenate([H_E.ravel(), H_U.ravel()])


def fourier_label(number_rows) -> tuple[np.ndarray, np.ndarray]:
    """``(k, share)`` of ``[m, A, d]`` rows: the frequency ``k in 0..A//2`` with the largest power
    of the DFT over the number axis, and its share of the total power."""
    rows = np.asarray(number_rows)
    power = np.sum(np.abs(np.fft.rfft(rows, axis=1)) ** 2, axis=-1)  # [m, A//2 + 1]
    A = rows.shape[1]
    power[:, 1 : (A + 1) // 2] *= 2.0  # k and A - k together
    k = np.argmax(power, axis=1)
    return k, power[np.arange(k.size), k] / power.sum(axis=1)


# ------------------------------------------------------------------------------------------------
# the plateau flow (eq. S5) and the reduced flow on the symmetric manifold (eq. S2)


def _symmetrize(W_E, W_U, problem: PlateauProblem):
    """`symmetric_part` in jnp (traceable)."""
    numbers = jnp.asarray(problem.numbers)
    W_E = W_E.at[numbers].set(W_E[numbers].mean(axis=0))
    for ids in (problem.label_ids, problem.other_ids):
        if ids.size:
            ids = jnp.asarray(ids)
            W_U = W_U.at[ids].set(W_U[ids].mean(axis=0))
    return W_E, W_U


def _plateau_residual_times_U(W_E, W_U, problem: PlateauProblem) -> jax.Array:
    """``r_n^T W_U [n, d]``, with ``r_n = p_n (q_n - e_{y_n})`` the residual of the prediction
    ``q_n`` of the plateau state ``P(theta)``, held fixed (eq. S5). At ``P(theta)`` the logits
    take two values per sample (label ids and the others), so this costs ``O(n d)``."""
    sigma = activations.get(problem.activation)
    E_sym, U_sym = jax.lax.stop_gradient(_symmetrize(W_E, W_U, problem))
    hidden = activations.apply(sigma, _hidden(E_sym, problem))  # [n, d]
    K, others = problem.label_ids.size, problem.other_ids.size
    z_label = hidden @ U_sym[problem.label_ids[0]]
    z_other = hidden @ U_sym[problem.other_ids[0]] if others else jnp.full_like(z_label, -jnp.inf)
    top = jnp.maximum(z_label, z_other)
    norm = K * jnp.exp(z_label - top) + others * jnp.exp(z_other - top)
    q_label, q_other = jnp.exp(z_label - top) / norm, jnp.exp(z_other - top) / norm  # per id
    total_label = W_U[jnp.asarray(problem.label_ids)].sum(axis=0)
    total_other = W_U[jnp.asarray(problem.other_ids)].sum(axis=0) if others else 0.0 * total_label
    expected = q_label[:, None] * total_label + q_other[:, None] * total_other  # q_n^T W_U
    weights = jnp.asarray(problem.weights, W_E.dtype)[:, None]
    return weights * (expected - W_U[jnp.asarray(problem.labels)])


def plateau_field(t, state, problem: PlateauProblem):
    """The plateau flow (eq. S5): gradient flow with the softmax held at the plateau state.

    ``d theta/dt = -grad_theta sum_n sigma(h_n) . (W_U^T r_n)`` with ``r_n`` the residual of the
    prediction of ``P(theta)`` (`symmetric_part`), not differentiated. Under ReLU the gates
    ``1[h_n > 0]`` follow the weights exactly; the deviations from the plateau are driven by the
    plateau's residual, and their own feedback on the prediction is dropped. ``state`` is
    ``{"W_E": [V, d], "W_U": [V, d]}``; costs ``O(n d)`` per call (no ``[n, V]`` logits).
    """
    sigma = activations.get(problem.activation)

    def linear_loss(W_E, W_U):
        rU = _plateau_residual_times_U(W_E, W_U, problem)
        return jnp.sum(activations.apply(sigma, _hidden(W_E, problem)) * rU)

    dE, dU = jax.grad(linear_loss, argnums=(0, 1))(state["W_E"], state["W_U"])
    return {"W_E": -dE, "W_U": -dU}


def reduced_flow(W_E, W_U, problem: PlateauProblem, ts):
    """Gradient flow on the symmetric manifold (eq. S2), from ``P(W_E, W_U)``.

    The state is ``u`` (every number row of ``W_E``), ``w_lab`` (every label row of ``W_U``) and
    ``w_out`` (every other row), each ``[d]``; the other rows of ``W_E`` stay as given (a
    number-only task never moves them). Each vector moves with the mean of the full gradient
    over its rows: on a task with ``mod``'s cyclic symmetry this is the full flow started on the
    manifold (the manifold is invariant), elsewhere the flow projected onto it.

    Returns:
        ``ode.Solution`` of ``{"u", "w_lab", "w_out"}`` at ``ts`` (leaves ``[T, d]``).
    """
    E_sym, U_sym = symmetric_part(W_E, W_U, problem)
    base_E = jnp.asarray(E_sym)
    numbers, labels, others = (
        jnp.asarray(x) for x in (problem.numbers, problem.label_ids, problem.other_ids)
    )

    def weights_of(y):
        W_U = jnp.zeros_like(base_E).at[labels].set(y["w_lab"])
        if problem.other_ids.size:
            W_U = W_U.at[others].set(y["w_out"])
        return base_E.at[numbers].set(y["u"]), W_U

    def field(t, y, args):
        dE, dU = jax.grad(loss, argnums=(0, 1))(*weights_of(y), problem)
        out = -dU[others].mean(axis=0) if problem.other_ids.size else jnp.zeros_like(y["w_out"])
        return {"u": -dE[numbers].mean(axis=0), "w_lab": -dU[labels].mean(axis=0), "w_out": out}

    y0 = {
        "u": jnp.asarray(E_sym[problem.numbers[0]]),
        "w_lab": jnp.asarray(U_sym[problem.label_ids[0]]),
        "w_out": jnp.asarray(
            U_sym[problem.other_ids[0]] if problem.other_ids.size else np.zeros(E_sym.shape[1])
        ),
    }
    return ode.integrate(field, y0, jnp.asarray(ts, jnp.float64))


# ------------------------------------------------------------------------------------------------
# the second escape (eq. S4)


class SecondEscape(NamedTuple):
    """A second escape, predicted or measured, on one lane.

    Attributes:
        level: `LEVEL`, the rho_0 the escape is read at.
        t0: where the prediction started (0: from the initial weights).
        t_collapse: first time rho_0 >= `COLLAPSED` (NaN: no collapse within the horizon).
        t1: first time after the collapse that rho_0 < ``level`` (NaN: none within the horizon).
        ts, rho0: ``[T]`` the path's times and rho_0.
        k: the Fourier frequency carrying most of the number rows' deviation at ``t1`` (or at
            the end of the horizon), -1 if the path never collapsed.
        rate: the band's top growth rate (`band`) at ``t0`` for a prediction from a trained
            state, at ``t_collapse + START_AFTER`` on the predicted path for one from the init.
    """

    level: float
    t0: float
    t_collapse: float
    t1: float
    ts: np.ndarray
    rho0: np.ndarray
    k: int
    rate: float


def crossings(ts, rho, level: float = LEVEL) -> tuple[float, float]:
    """``(t_collapse, t1)`` of a rho_0 path: the first time it reaches `COLLAPSED`, and the first
    time after that it falls below ``level``, interpolated linearly between saved times."""
    ts, rho = np.asarray(ts, np.float64), np.asarray(rho, np.float64)
    up = np.flatnonzero(rho >= COLLAPSED)
    if not up.size:
        return np.nan, np.nan
    c = int(up[0])
    down = np.flatnonzero(rho[c:] < level)
    if not down.size:
        return float(ts[c]), np.nan
    i = c + int(down[0])
    frac = (rho[i - 1] - level) / (rho[i - 1] - rho[i])
    return float(ts[c]), float(ts[i - 1] + frac * (ts[i] - ts[i - 1]))


#: The plateau flow's RK4 step and its save spacing (theory/second_escape.md §5: the escape
#: moves by < 1% from step 5 to step 2).
STEP, SAVE_EVERY = 5.0, 20.0


def predict_second_escape(
    W_E, W_U, problem: PlateauProblem, *, t0: float = 0.0, horizon: float, band_modes: int = 4
) -> SecondEscape:
    """Predict the second escape by the plateau flow (eq. S5) from ``(W_E, W_U)`` at ``t0``.

    Level L1 starts from a training state on the plateau (``t0 = t_c + START_AFTER``); level L2
    from the initial weights (``t0 = 0``), and then the same flow also predicts the collapse.
    """
    check_real(horizon, "horizon", low=float(t0), low_open=True)
    y0 = {"W_E": jnp.asarray(W_E, jnp.float64), "W_U": jnp.asarray(W_U, jnp.float64)}
    ts = np.arange(float(t0), float(horizon) + SAVE_EVERY / 2, SAVE_EVERY)
    solution = ode.rk4(plateau_field, y0, ts, problem, max_step=STEP)
    E_path = np.asarray(solution.ys["W_E"])
    rho = rho0(E_path, problem.numbers)
    t_c, t1 = crossings(ts, rho)
    if np.isnan(t_c):
        return SecondEscape(LEVEL, float(t0), t_c, t1, ts, rho, -1, np.nan)
    at = int(np.argmin(np.abs(ts - (t1 if np.isfinite(t1) else ts[-1]))))
    deviation = E_path[at][problem.numbers] - E_path[at][problem.numbers].mean(axis=0)
    k = int(fourier_label(deviation[None])[0][0])
    start = 0 if t0 > 0 else int(np.argmin(np.abs(ts - (t_c + START_AFTER))))
    W_U_path = solution.ys["W_U"]
    rate = band(E_path[start], W_U_path[start], problem, modes=band_modes).rates[0]
    return SecondEscape(LEVEL, float(t0), t_c, t1, ts, rho, k, float(rate))


def measured_second_escape(steps, W_E, problem: PlateauProblem, W_U=None) -> SecondEscape:
    """The second escape of a trained lane: ``steps [S]`` (gradient-flow times) and its
    snapshots ``W_E [S, V, d]`` (``W_U`` too, for the band at ``t_c + START_AFTER``)."""
    ts = np.asarray(steps, np.float64)
    rho = rho0(W_E, problem.numbers)
    t_c, t1 = crossings(ts, rho)
    k, rate = -1, np.nan
    if np.isfinite(t_c):
        at = int(np.argmin(np.abs(ts - (t1 if np.isfinite(t1) else ts[-1]))))
        rows = np.asarray(W_E[at], np.float64)[problem.numbers]
        k = int(fourier_label((rows - rows.mean(axis=0))[None])[0][0])
        if W_U is not None:
            start = int(np.argmin(np.abs(ts - (t_c + START_AFTER))))
            rate = float(band(W_E[start], W_U[start], problem).rates[0])
    return SecondEscape(LEVEL, 0.0, t_c, t1, ts, rho, k, rate)
