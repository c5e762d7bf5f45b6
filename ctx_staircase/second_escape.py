"""The second step of the staircase: the collapse plateau, its unstable band and the second escape
(theory/second_escape.md).

FFN ``f(X) = W_U sigma(h)``, ``h = W_E^T c`` (``c [V]`` the token counts), rows as vectors
(``W_E, W_U [V, d]``), loss the exact softmax cross-entropy (eq. S1).

- **The plateau** (eq. S2): on a task with ``mod``'s cyclic symmetry, the states with every tied
  row of ``W_E`` equal and the label and other rows of ``W_U`` each equal are an invariant
  manifold; on it ``rho_0 = 1``. `reduced_flow` integrates the flow there.
- **The band** (eq. S3): the most negative Hessian eigenvalues off the manifold (`band`, by
  Lanczos on `hessian_vector_product`), each labelled by its Fourier frequency; a set of gated
  units whose rates drift as the gates realign.
- **The escape** (eq. S4): the plateau flow (eq. S5, `plateau_field`: the softmax held at the
  plateau's prediction) carries the weights onto the plateau; the split-unit flow (eq. S6,
  `split_field`: the units whose gates split the samples move with the exact gradient, the
  others stay on the manifold) carries them off. ``t_1`` is when ``rho_0`` falls below `LEVEL`
  after the collapse, predicted from a training state on the plateau (L1, a replay) or from
  the initial weights (L2, the law): `predict_second_escape`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import activations, curvature, ode
from ctx_staircase.dataset import TokenDataset, merged_bags
from ctx_staircase.internal import check_real

__all__ = [
    "APPROACH_STEP",
    "COLLAPSED",
    "LEVEL",
    "PLATEAU_STEP",
    "SAVE_EVERY",
    "SPLIT_STEP",
    "START_AFTER",
    "Band",
    "PlateauProblem",
    "SecondEscape",
    "SplitArrays",
    "SplitLayout",
    "band",
    "crossings",
    "fourier_label",
    "hessian_vector_product",
    "loss",
    "measured_second_escape",
    "plateau_field",
    "plateau_problem",
    "predict_collapse",
    "predict_second_escape",
    "reduced_flow",
    "rho0",
    "split_arrays",
    "split_field",
    "split_layout",
    "split_loss",
    "split_state",
    "split_weights",
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
    """The data of the plateau theory, ``n`` samples of ``L`` tokens over ``V`` ids (distinct
    bags of tokens with their labels, `plateau_problem`).

    Attributes:
        tokens: ``[n, L]`` input ids.
        labels: ``y_n [n]`` label ids.
        weights: ``p_n [n]`` sample probabilities (sum 1).
        geometry_ids: ``[A]`` the ids whose rows of ``W_E`` the geometry (rho_0, Fourier k) is read
            on: the numbers of ``mod``, the anchors of Task 4.
        tied: the groups of ``W_E`` rows that are equal on the plateau manifold (every input
            group: ``(numbers,)`` for ``mod``, ``(anchors, numbers)`` for Task 4).
        label_ids: ``[K]`` the ids that occur as labels.
        other_ids: ``[V - K]`` the ids that never occur as labels.
        activation: the hidden activation (an `activations` name).
    """

    tokens: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    geometry_ids: np.ndarray
    tied: tuple[np.ndarray, ...]
    label_ids: np.ndarray
    other_ids: np.ndarray
    activation: str


def plateau_problem(
    ds: TokenDataset, activation: str = "relu", geometry: str = "numbers"
) -> PlateauProblem:
    """The `PlateauProblem` of a data set: the geometry read on ``ds.groups[geometry]``, every
    group of ``ds.groups`` but ``"labels"`` tied on the plateau. The FFN sees a sample only
    through its token counts, so samples with the same counts and label are one sample of their
    summed weight (`dataset.merged_bags`: about half of ``mod``'s, whose ``a + b`` and ``b + a``
    are one bag): the loss and every flow of the plateau theory are the same on them."""
    activations.get(activation)
    if geometry not in ds.groups:
        raise ValueError(
            f"geometry must be one of the data set's groups {sorted(ds.groups)}; got {geometry!r}"
        )
    label_ids = np.unique(ds.labels)
    tied = tuple(np.asarray(ids) for name, ids in ds.groups.items() if name != "labels")
    tokens, labels, weights = merged_bags(ds.tokens, ds.labels, ds.probabilities)
    return PlateauProblem(
        tokens=tokens,
        labels=labels,
        weights=weights,
        geometry_ids=np.asarray(ds.groups[geometry]),
        tied=tied,
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
    """``P(theta)``: each tied group of ``W_E`` rows replaced by its mean, the label rows of
    ``W_U`` by theirs, the other rows of ``W_U`` by theirs; untied rows of ``W_E`` kept.
    float64 NumPy arrays."""
    with jax.enable_x64(True):
        W_E, W_U = (jnp.asarray(W, jnp.float64) for W in (W_E, W_U))
        return tuple(np.asarray(W) for W in _symmetrize(W_E, W_U, problem))


def rho0(W_E, ids) -> np.ndarray:
    """``rho_0 = 1 - MSE`` of the cosines of the rows ``ids`` against the all-ones geometry, for
    ``W_E [..., V, d]``; shape ``[...]`` (the collapsed geometry scores 1). Float64."""
    with jax.enable_x64(True):
        return np.asarray(_collapse_score(jnp.asarray(W_E, jnp.float64)[..., np.asarray(ids), :]))


def _collapse_score(rows: jax.Array) -> jax.Array:
    """`rho0` of ``rows [..., n, d]`` (jit-safe): ``1 - mean_{i<j} (cos(r_i, r_j) - 1)^2``."""
    rows = rows / jnp.linalg.norm(rows, axis=-1, keepdims=True)
    S = rows @ jnp.swapaxes(rows, -1, -2)
    upper = np.triu_indices(rows.shape[-2], 1)
    return 1.0 - jnp.mean((S[..., upper[0], upper[1]] - 1.0) ** 2, axis=-1)


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
    """The ``modes`` most negative eigenpairs of the Hessian at ``(W_E, W_U)`` by
    `curvature.lanczos`, ``iterations`` Hessian-vector products (eq. S3)."""
    W_E, W_U = jnp.asarray(W_E, jnp.float64), jnp.asarray(W_U, jnp.float64)
    shape, size = W_E.shape, W_E.size
    data = (jnp.asarray(problem.tokens), jnp.asarray(problem.labels), jnp.asarray(problem.weights))

    def product(q):
        return np.asarray(_flat_hvp(W_E, W_U, jnp.asarray(q), *data, activation=problem.activation))

    spectrum = curvature.lanczos(product, 2 * size, modes=modes, iterations=iterations, seed=seed)
    ritz = spectrum.vectors.reshape(-1, 2, *shape)
    v_E, v_U = ritz[:, 0], ritz[:, 1]
    k, share = fourier_label(v_E[:, problem.geometry_ids])
    e_share = np.sum(v_E**2, axis=(1, 2))
    return Band(-spectrum.least, (v_E, v_U), k, share, e_share)


@functools.partial(jax.jit, static_argnames=("activation",))
def _flat_hvp(W_E, W_U, q, tokens, labels, weights, *, activation: str):
    """``H q`` for a flat ``q = (v_E, v_U)``; one compiled program per shape and activation."""
    empty = np.zeros(0, np.int64)
    problem = PlateauProblem(tokens, labels, weights, empty, (), empty, empty, activation)
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
    for ids in problem.tied:
        ids = jnp.asarray(ids)
        W_E = W_E.at[ids].set(W_E[ids].mean(axis=0))
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

    The state is ``tied`` (``[G, d]``, the common row of each tied group of ``W_E``), ``w_lab``
    (every label row of ``W_U``) and ``w_out`` (every other row), each row ``[d]``; untied rows of
    ``W_E`` stay as given (no sample reads them). Each vector moves with the mean of the full
    gradient over its rows: on a task with ``mod``'s cyclic symmetry this is the full flow
    started on the manifold (the manifold is invariant), elsewhere the flow projected onto it.

    Returns:
        ``ode.Solution`` of ``{"tied", "w_lab", "w_out"}`` at ``ts`` (leaves ``[T, G, d]`` and
        ``[T, d]``).
    """
    E_sym, U_sym = symmetric_part(W_E, W_U, problem)
    base_E = jnp.asarray(E_sym)
    groups = [jnp.asarray(ids) for ids in problem.tied]
    labels, others = jnp.asarray(problem.label_ids), jnp.asarray(problem.other_ids)
    has_others = problem.other_ids.size > 0

    def weights_of(y):
        W_E = base_E
        for g, ids in enumerate(groups):
            W_E = W_E.at[ids].set(y["tied"][g])
        W_U = jnp.zeros_like(base_E).at[labels].set(y["w_lab"])
        return W_E, W_U.at[others].set(y["w_out"]) if has_others else W_U

    def field(t, y, args):
        dE, dU = jax.grad(loss, argnums=(0, 1))(*weights_of(y), problem)
        return {
            "tied": -jnp.stack([dE[ids].mean(axis=0) for ids in groups]),
            "w_lab": -dU[labels].mean(axis=0),
            "w_out": -dU[others].mean(axis=0) if has_others else jnp.zeros_like(y["w_out"]),
        }

    y0 = {
        "tied": jnp.asarray(np.stack([E_sym[ids[0]] for ids in problem.tied])),
        "w_lab": jnp.asarray(U_sym[problem.label_ids[0]]),
        "w_out": jnp.asarray(U_sym[problem.other_ids[0]] if has_others else 0 * E_sym[0]),
    }
    return ode.integrate(field, y0, jnp.asarray(ts, jnp.float64))


# ------------------------------------------------------------------------------------------------
# the split-unit flow (eq. S6): the units whose gates split the samples move, the rest stay on the
# plateau


class SplitLayout(NamedTuple):
    """Which hidden units move in the split-unit flow, and the tied row groups of the others.

    Attributes:
        split: ``[s]`` the units on whose pre-activations over the data ``sigma`` is not affine
            (ReLU: the gates split the samples); they move with the exact gradient.
        held: ``[d - s]`` the other units, held on the plateau manifold: every row of a group of
            ``groups`` equal, every label row of ``W_U`` equal, every other row equal.
        groups: the ``W_E`` row groups of the held units, ``G`` arrays of ids: the tied groups
            of the problem, and each input id in none of them on its own.
        counts: ``[n, G]`` how many tokens of each group a sample holds.
    """

    split: np.ndarray
    held: np.ndarray
    groups: tuple[np.ndarray, ...]
    counts: np.ndarray


def split_layout(W_E, problem: PlateauProblem) -> SplitLayout:
    """The `SplitLayout` of ``W_E [V, d]``: unit ``j`` is split where ``sigma`` is not affine on
    the range of its pre-activations ``h_nj`` over the samples (`activations.affine_on`)."""
    h = np.asarray(_hidden(jnp.asarray(W_E, jnp.float64), problem))
    affine = activations.affine_on(activations.get(problem.activation), h.min(0), h.max(0))
    tied = [np.asarray(ids) for ids in problem.tied]
    inputs = np.unique(problem.tokens)
    alone = np.setdiff1d(inputs, np.concatenate(tied) if tied else np.zeros(0, int))
    groups = tuple(tied + [np.array([i]) for i in alone])
    counts = np.stack([np.isin(problem.tokens, ids).sum(1) for ids in groups], axis=1)
    return SplitLayout(np.flatnonzero(~affine), np.flatnonzero(affine), groups, counts)


def split_state(W_E, W_U, layout: SplitLayout, problem: PlateauProblem) -> dict:
    """The split-unit flow's state at ``(W_E, W_U)``: ``A, B [V, s]`` (the split columns of
    ``W_E, W_U``), and for the held columns ``u [G, d - s]`` (each group's mean row), ``w_lab``
    and ``w_out [d - s]`` (the mean label and other row of ``W_U``): the projection onto the
    plateau manifold of the held units."""
    W_E, W_U = np.asarray(W_E, np.float64), np.asarray(W_U, np.float64)
    held = layout.held
    others = problem.other_ids if problem.other_ids.size else problem.label_ids  # unused then
    return {
        "A": W_E[:, layout.split],
        "B": W_U[:, layout.split],
        "u": np.stack([W_E[ids][:, held].mean(0) for ids in layout.groups]),
        "w_lab": W_U[problem.label_ids][:, held].mean(0),
        "w_out": W_U[others][:, held].mean(0),
    }


def split_weights(state, layout: SplitLayout, problem: PlateauProblem, W_E):
    """``W_E [..., V, d]`` of split-unit states (leaves with the same leading axes): the split
    columns from ``A``, the held columns of each group's rows from ``u``; rows in no group keep
    those of ``W_E [V, d]`` (no sample reads them)."""
    A, u = np.asarray(state["A"]), np.asarray(state["u"])
    out = np.broadcast_to(np.asarray(W_E, np.float64), (*A.shape[:-2], *np.shape(W_E))).copy()
    out[..., layout.split] = A
    for g, ids in enumerate(layout.groups):
        out[..., ids[:, None], layout.held] = u[..., g, None, :]
    return out


class SplitArrays(NamedTuple):
    """The data of the split-unit field (`split_arrays`), passed into a compiled program as an
    argument, never closed over."""

    tokens: jax.Array  # [n, L]
    labels: jax.Array  # [n]
    weights: jax.Array  # [n]
    counts: jax.Array  # [n, G]
    sizes: jax.Array  # [G] rows per group
    is_label: jax.Array  # [V] 1 on the label ids, 0 on the others
    label_count: jax.Array  # [] K
    other_count: jax.Array  # [] V - K (1 where there are none: then w_out never enters)


def split_arrays(layout: SplitLayout, problem: PlateauProblem, V: int) -> SplitArrays:
    """The `SplitArrays` of a layout on a problem over ``V`` ids."""
    is_label = np.zeros(V)
    is_label[problem.label_ids] = 1.0
    return SplitArrays(
        jnp.asarray(problem.tokens),
        jnp.asarray(problem.labels),
        jnp.asarray(problem.weights, jnp.float64),
        jnp.asarray(layout.counts, jnp.float64),
        jnp.asarray([ids.size for ids in layout.groups], jnp.float64),
        jnp.asarray(is_label),
        jnp.asarray(float(problem.label_ids.size)),
        jnp.asarray(float(max(problem.other_ids.size, 1))),
    )


def split_loss(state, arrays: SplitArrays, activation) -> jax.Array:
    """The loss (eq. S1) of a split-unit state: ``z_n = B sigma(A^T c_n) + W_U^held
    sigma(u^T C_n)``, where ``C_n [G]`` counts the sample's tokens per group, so the held units'
    hidden state is shared by every sample of one group composition and their logits take two
    values (label ids, other ids): ``O(n V s)``, not the ``O(n V d)`` of the whole model."""
    sigma = activations.get(activation)
    hidden = activations.apply(sigma, state["A"][arrays.tokens].sum(axis=1))  # [n, s]
    held = activations.apply(sigma, arrays.counts @ state["u"])  # [n, d - s]
    z_label, z_other = held @ state["w_lab"], held @ state["w_out"]  # [n]
    logits = hidden @ state["B"].T + (
        arrays.is_label * z_label[:, None] + (1 - arrays.is_label) * z_other[:, None]
    )
    picked = jnp.take_along_axis(logits, arrays.labels[:, None], axis=1)[:, 0]
    return jnp.sum(arrays.weights * (jax.nn.logsumexp(logits, axis=1) - picked))


def split_field(t, state, arrays: SplitArrays, activation) -> dict:
    """The split-unit flow (eq. S6): the gradient flow with the held units projected onto the
    plateau manifold. ``A, B`` move with the exact gradient (the whole model's softmax, so the
    deviations' feedback on the prediction is kept); a tied row moves with the mean gradient of
    its rows: ``du_g/dt = -(1/|g|) dL/du_g``, ``dw_lab/dt = -(1/K) dL/dw_lab``, ``dw_out/dt =
    -(1/(V - K)) dL/dw_out``."""
    grads = jax.grad(split_loss)(state, arrays, activation)
    return {
        "A": -grads["A"],
        "B": -grads["B"],
        "u": -grads["u"] / arrays.sizes[:, None],
        "w_lab": -grads["w_lab"] / arrays.label_count,
        "w_out": -grads["w_out"] / arrays.other_count,
    }


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
        rate: the band's top growth rate (`band`) where the split-unit flow took over (at
            ``t0`` for a prediction from a trained state; NaN for the plateau law from the init).
        split: the number of units the split-unit flow moved (-1: it did not run).
    """

    level: float
    t0: float
    t_collapse: float
    t1: float
    ts: np.ndarray
    rho0: np.ndarray
    k: int
    rate: float
    split: int = -1


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


#: The steps: the plateau flow's (eq. S5) field jumps where a gate flips, so RK4 converges at
#: first order and needs step 1 to carry a path to the escape (theory/second_escape.md §6); L2's
#: approach onto the plateau (to t_c + 100) is as good at step 5 (`APPROACH_STEP`, §6); the
#: split-unit flow (eq. S6) runs Heun's method at step 10, within 3.3% of RK4 at step 5 on every
#: one of 60 measured lanes (§5). Saves every SAVE_EVERY, _CHUNK saves per compiled call of the
#: plateau flow (5: L2's approach runs past t_c + 100 by less than one chunk).
PLATEAU_STEP, APPROACH_STEP, SPLIT_STEP, SAVE_EVERY, _CHUNK = 1.0, 5.0, 10.0, 10.0, 5
#: The laws `predict_second_escape` knows: the split-unit flow (eq. S6, the package's law) and the
#: plateau flow alone (eq. S5, which drops the deviations' feedback on the prediction).
_LAWS = ("split", "plateau")


def _times(t_start):
    return t_start + SAVE_EVERY * jnp.arange(_CHUNK + 1, dtype=t_start.dtype)


@functools.partial(jax.jit, static_argnames=("activation", "step"))
def _plateau_chunk(y, t_start, arrays: PlateauProblem, *, activation: str, step: float):
    """The plateau flow over ``_CHUNK`` saves from ``t_start`` by RK4 at ``step``: states
    ``[_CHUNK + 1, V, d]`` and rho_0 at the saves after the first ``[_CHUNK]``; one compiled
    program per shape, activation and step, reused along the path and across lanes."""
    problem = arrays._replace(activation=activation)
    states = ode.rk4(plateau_field, y, _times(t_start), problem, max_step=step).ys
    return states, _collapse_score(states["W_E"][1:, arrays.geometry_ids])


class _Path(NamedTuple):
    """A predicted path so far: the save times, rho_0 there, and the last chunk's states (leaves
    ``[C, ...]``, the first the previous chunk's end) with their ``W_E [C, V, d]``."""

    ts: list
    rho: list
    states: object
    W_E: np.ndarray


def _follow(path: _Path, y, advance, horizon: float, done) -> _Path:
    """Run ``advance(y, t) -> (states, rho)`` chunk by chunk from the path's end state ``y``
    until ``done(path)`` or the horizon."""
    while path.ts[-1] < horizon and not done(path):
        states, rho = advance(y, jnp.float64(path.ts[-1]))
        ts = path.ts + [path.ts[-1] + SAVE_EVERY * (i + 1) for i in range(_CHUNK)]
        path = _Path(ts, path.rho + np.asarray(rho).tolist(), states, states["W_E"])
        y = jax.tree.map(lambda leaf: leaf[-1], states)
    return path


def predict_collapse(W_E, W_U, problem: PlateauProblem, *, horizon: float) -> float:
    """The collapse time ``t_c`` (the first save at which rho_0 reaches `COLLAPSED`) that the
    plateau flow (eq. S5) predicts from the initial weights ``(W_E, W_U) [V, d]``, or NaN when
    rho_0 has not reached it by ``horizon``. RK4 at `APPROACH_STEP`, saves every `SAVE_EVERY`:
    L2's own approach onto the plateau (theory/second_escape.md §6), stopped at the collapse."""
    check_real(horizon, "horizon", low=0.0, low_open=True)
    ids = problem.geometry_ids
    arrays = problem._replace(activation=None)

    def plateau(y, t):
        return _plateau_chunk(y, t, arrays, activation=problem.activation, step=APPROACH_STEP)

    def done(path):
        return bool(np.isfinite(crossings(path.ts, path.rho)[0]))

    with jax.enable_x64(True):
        y = {"W_E": jnp.asarray(W_E, jnp.float64), "W_U": jnp.asarray(W_U, jnp.float64)}
        start = jax.tree.map(lambda leaf: leaf[None], y)
        path = _Path([0.0], [float(rho0(W_E, ids))], start, np.asarray(start["W_E"]))
        path = _follow(path, y, plateau, horizon, done)
    return crossings(path.ts, path.rho)[0]


def predict_second_escape(
    W_E,
    W_U,
    problem: PlateauProblem,
    *,
    t0: float = 0.0,
    horizon: float,
    band_modes: int | None = 4,
    law: str = "split",
) -> SecondEscape:
    """Predict the second escape from ``(W_E, W_U)`` at ``t0`` (eq. S4).

    The plateau flow (eq. S5) carries the path onto the plateau and the split-unit flow (eq. S6)
    off it, from ``t_s = t_c + START_AFTER`` with the units split there. Level L1 starts from a
    training state on the plateau (``t0 = t_s``: the split-unit flow from the start); level L2
    from the initial weights (``t0 = 0``: the plateau flow also predicts the collapse).
    ``law="plateau"`` keeps the plateau flow to the end, the law that drops the deviations'
    feedback on the prediction. The flows run ``_CHUNK`` saves at a time and stop at the escape
    (or at ``horizon``). ``band_modes=None`` skips the band (`SecondEscape.rate` NaN).
    """
    check_real(horizon, "horizon", low=float(t0), low_open=True)
    if law not in _LAWS:
        raise ValueError(f"law must be one of {_LAWS}; got {law!r}")
    ids = problem.geometry_ids
    y = {"W_E": jnp.asarray(W_E, jnp.float64), "W_U": jnp.asarray(W_U, jnp.float64)}
    start = jax.tree.map(lambda leaf: leaf[None], y)
    path = _Path([float(t0)], [float(rho0(W_E, ids))], start, np.asarray(start["W_E"]))
    arrays = problem._replace(activation=None)

    step = PLATEAU_STEP if law == "plateau" else APPROACH_STEP

    def plateau(y, t):
        return _plateau_chunk(y, t, arrays, activation=problem.activation, step=step)

    def switch_time(path) -> float:  # where the split-unit flow takes over (NaN: not known)
        t_c = crossings(path.ts, path.rho)[0]
        if law == "plateau":
            return np.nan
        return float(t0) if t0 > 0 else t_c + START_AFTER

    def done(path):  # escaped before the switch, or reached it
        t1, t_switch = crossings(path.ts, path.rho)[1], switch_time(path)
        return t1 < t_switch or path.ts[-1] >= t_switch or (law == "plateau" and t1 > 0)

    path = _follow(path, y, plateau, horizon, done)
    t_switch, split = switch_time(path), -1
    at = y if t0 > 0 else None  # the state the band is read at
    if path.ts[-1] >= t_switch and not crossings(path.ts, path.rho)[1] < t_switch:
        back = round((path.ts[-1] - t_switch) / SAVE_EVERY)  # the saves past t_s
        at = jax.tree.map(lambda leaf: leaf[-1 - back], path.states)
        path = _Path(path.ts[: len(path.ts) - back], path.rho[: len(path.rho) - back], *path[2:])
        path, split = _split_path(path, at, problem, horizon)
    rate = np.nan
    if band_modes is not None and at is not None:
        rate = float(band(at["W_E"], at["W_U"], problem, modes=band_modes).rates[0])
    return _prediction(path, problem, t0)._replace(rate=rate, split=split)


def _split_path(path: _Path, at: dict, problem: PlateauProblem, horizon: float):
    """Continue ``path`` by the split-unit flow (eq. S6) from the full state ``at`` (``W_E``,
    ``W_U``) at its end, with the units split there, until the escape or the horizon; returns
    the path and the number of split units."""
    W_E = np.asarray(at["W_E"])
    layout = split_layout(W_E, problem)
    arrays = split_arrays(layout, problem, W_E.shape[0])
    y = jax.tree.map(jnp.asarray, split_state(W_E, at["W_U"], layout, problem))
    group = np.zeros(W_E.shape[0], int)
    for g, ids in enumerate(layout.groups):
        group[ids] = g
    ids = problem.geometry_ids
    saves = int(np.ceil((horizon - path.ts[-1]) / SAVE_EVERY))
    rho, done, last = _split_run(
        y,
        jnp.float64(path.ts[-1]),
        arrays,
        jnp.asarray(ids),
        jnp.asarray(group[ids]),
        jnp.asarray(saves),
        activation=problem.activation,
        capacity=int(np.ceil(horizon / SAVE_EVERY)),
    )
    done = int(done)
    ts = path.ts + [path.ts[-1] + SAVE_EVERY * (i + 1) for i in range(done)]
    states = jax.tree.map(np.asarray, last)  # the last two saves (or the start and the last)
    path = _Path(ts, path.rho + list(np.asarray(rho[:done])), states, None)
    return path._replace(W_E=split_weights(states, layout, problem, W_E)), layout.split.size


@functools.partial(jax.jit, static_argnames=("activation", "capacity"))
def _split_run(y, t_start, arrays: SplitArrays, ids, group, saves, *, activation, capacity):
    """The split-unit flow from ``t_start``, ``SAVE_EVERY`` at a time, until rho_0 of the rows
    ``ids`` (their held columns from ``u[group]``) falls below `LEVEL` or ``saves`` saves are
    made: ``rho [capacity]`` (saves made first), the saves made, and the states at the last two
    (leaves ``[2, ...]``). One compiled program per number of split units and horizon."""

    def field(t, state, arrays):
        return split_field(t, state, arrays, activation)

    def rho_of(state):  # rho_0 is blind to the order of the columns
        return _collapse_score(jnp.concatenate([state["A"][ids], state["u"][group]], axis=1))

    def running(carry):
        i, _, _, rho = carry
        return (i < saves) & ((i == 0) | (rho[jnp.maximum(i - 1, 0)] >= LEVEL))

    def save(carry):
        i, _, y, rho = carry
        t = t_start + SAVE_EVERY * i.astype(t_start.dtype)
        ts = jnp.stack([t, t + SAVE_EVERY])
        following = jax.tree.map(
            lambda leaf: leaf[-1], ode.heun(field, y, ts, arrays, max_step=SPLIT_STEP).ys
        )
        return i + 1, y, following, rho.at[i].set(rho_of(following))

    rho = jnp.full(capacity, jnp.nan, t_start.dtype)
    i, previous, y, rho = jax.lax.while_loop(running, save, (jnp.asarray(0), y, y, rho))
    return rho, i, jax.tree.map(lambda a, b: jnp.stack([a, b]), previous, y)


def _prediction(path: _Path, problem: PlateauProblem, t0: float) -> SecondEscape:
    """The `SecondEscape` of a predicted path: its crossings and the escaping Fourier k at
    ``t1`` (or at the horizon)."""
    ts, rho = np.asarray(path.ts), np.asarray(path.rho)
    t_c, t1 = crossings(ts, rho)
    if np.isnan(t_c):
        return SecondEscape(LEVEL, float(t0), t_c, t1, ts, rho, -1, np.nan)
    chunk_ts = ts[len(ts) - len(path.W_E) :]
    rows = np.asarray(
        path.W_E[int(np.argmin(np.abs(chunk_ts - (t1 if np.isfinite(t1) else ts[-1]))))]
    )
    rows = rows[problem.geometry_ids]
    k = int(fourier_label((rows - rows.mean(axis=0))[None])[0][0])
    return SecondEscape(LEVEL, float(t0), t_c, t1, ts, rho, k, np.nan)


def measured_second_escape(steps, W_E, problem: PlateauProblem, W_U=None) -> SecondEscape:
    """The second escape of a trained lane: ``steps [S]`` (gradient-flow times) and its
    snapshots ``W_E [S, V, d]`` (``W_U`` too, for the band at ``t_c + START_AFTER``)."""
    ts = np.asarray(steps, np.float64)
    rho = rho0(W_E, problem.geometry_ids)
    t_c, t1 = crossings(ts, rho)
    k, rate = -1, np.nan
    if np.isfinite(t_c):
        at = int(np.argmin(np.abs(ts - (t1 if np.isfinite(t1) else ts[-1]))))
        rows = np.asarray(W_E[at], np.float64)[problem.geometry_ids]
        k = int(fourier_label((rows - rows.mean(axis=0))[None])[0][0])
        if W_U is not None:
            start = int(np.argmin(np.abs(ts - (t_c + START_AFTER))))
            rate = float(band(W_E[start], W_U[start], problem).rates[0])
    return SecondEscape(LEVEL, 0.0, t_c, t1, ts, rho, k, rate)
