"""Gradient-flow vector fields built from signatures (paper §4–§5; derivations in theory/ffn.md).

Every vector field has the signature ``(t, y, args) -> dy`` of `ode.integrate`. Theory works on
plain arrays, in the row convention of `models.weights`: ``W_E [V, d]`` (row alpha is w^E_alpha)
and ``W_U [V, d]`` (row nu is w^U_nu).

- `ffn_signature_flow`: the FFN flows of W_E *and* W_U from a `SignatureSet` alone, for
  ``sigma(z) = sum_k C_k z^k``: the label-driven terms of Theorem 1 (theory/ffn.md eq. F4, F7),
  the prediction term under the uniform-softmax truncation with its m = 0 term (Theorem 2,
  eq. F5, F8), and optionally the linear-softmax correction of Remark 1 (eq. F9-F10).
  ``max_order`` masks orders above m_max, so it is a value that can be vmapped.
- `order_contributions`: the per-order terms ``L r_alpha A_{alpha,m} . phi^{y;m}_alpha`` of
  Theorem 1, ``[M+1, V, d]``.
- `attention_uniform_flow`: the attention-only model at uniform attention, a depth-4 linear
  network (theory/attention.md eq. A3).
- `gradient_flow`: ``-grad`` of any loss, i.e. exact training written as an ODE.
- `context_signature_flows`: the FFN flows of several datasets (sequence lengths L) x orders x
  gammas as lanes of one compiled program, L a traced lane value (theory/ffn.md eq. F11).
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import ode, signatures
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_choice, check_int, check_type
from ctx_staircase.signatures import SignatureSet
from ctx_staircase.theory import (
    BLOW_UP,
    Problem,
    Size,
    SolverStatus,
    TheoryLanes,
    WeightTrajectory,
)

__all__ = [
    "PREDICTION_TERMS",
    "ContextFlows",
    "ContextSignatures",
    "FlowSignatures",
    "Prediction",
    "SparseLabel",
    "attention_logits",
    "attention_path_gradients",
    "attention_uniform_field",
    "attention_uniform_flow",
    "attention_value_path",
    "context_signature_field",
    "context_signature_flows",
    "context_signatures",
    "drive_matrix",
    "ffn_signature_field",
    "ffn_signature_flow",
    "flow_signatures",
    "gradient_flow",
    "order_contributions",
    "signature_flow_bytes",
    "signature_flow_lanes",
    "signature_order",
    "uniform_attention_bytes",
    "uniform_attention_lanes",
    "uniform_attention_logit_scale",
]


class Prediction(enum.StrEnum):
    """The softmax term of the FFN signature flow (theory/ffn.md): ``NONE`` drops it,
    ``UNIFORM`` is the uniform prediction of Theorem 2, ``LINEAR`` adds the linear-softmax
    correction of Remark 1 (eq. F9). A string names one at the edge (``Prediction("linear")``)."""

    NONE = "none"
    UNIFORM = "uniform"
    LINEAR = "linear"


#: Every `Prediction`'s name, as the command line spells them.
PREDICTION_TERMS = tuple(term.value for term in Prediction)


class SparseLabel(NamedTuple):
    """The non-zero entries of one label signature ``phi^{y;m}`` ``[A, Vnu, P^m]`` (COO).

    Attributes:
        alpha, label: ``[nnz]`` int positions on the alpha and label axes.
        context: ``[nnz, m]`` int positions on the m context axes.
        value: ``[nnz]`` the entries.
        use: None (the COO form is used), or, in stacked signatures whose datasets disagree
            on the form (`context_signatures`), bool ``[]`` per dataset: this dataset's
            field takes the COO contraction, else the dense one (both are computed).
    """

    alpha: jax.Array
    label: jax.Array
    context: jax.Array
    value: jax.Array
    use: jax.Array | None = None


class FlowSignatures(NamedTuple):
    """The arrays of a `SignatureSet` the flows need, as JAX arrays (a pytree).

    Attributes:
        r: ``[A]`` occurrence probabilities of the alpha tokens.
        label: per order m, ``[A, Vnu, P^m]`` label signatures phi^{y;m}.
        cooccurrence: per order m, ``[A, P^m]`` co-occurrence signatures phi^m.
        alphas, labels, context: int token ids of each axis.
        sparse: per order m, the `SparseLabel` of ``label[m]`` where it is sparse enough to
            contract faster (`_SPARSE_FILL`), else None; the field uses it in place of the dense
            contraction (the same numbers). Empty: dense everywhere.
    """

    r: jax.Array
    label: tuple[jax.Array, ...]
    cooccurrence: tuple[jax.Array, ...]
    alphas: jax.Array
    labels: jax.Array
    context: jax.Array
    sparse: tuple[SparseLabel | None, ...] = ()


#: A label signature of order m >= 1 is contracted in COO form when at most this share of its
#: entries is non-zero (a deterministic task has one label per context: a share of 1 / Vnu).
_SPARSE_FILL = 0.25


def flow_signatures(sigs: SignatureSet, dtype=None, *, sparse: bool = True) -> FlowSignatures:
    """Convert a `SignatureSet` (NumPy float64) to JAX arrays of ``dtype`` (default: x64 or f32).

    With ``sparse``, label signatures of order >= 1 that are mostly zero (`_SPARSE_FILL`) also
    get their COO form, which the field contracts in ``nnz * d`` instead of
    ``A * Vnu * P^m * d`` operations.
    """
    check_type(sigs, "sigs", SignatureSet, "a signatures.SignatureSet")
    dtype = dtype or jnp.zeros(()).dtype
    as_array = functools.partial(jnp.asarray, dtype=dtype)
    return FlowSignatures(
        r=as_array(sigs.r[sigs.alphas]),
        label=tuple(as_array(p) for p in sigs.label),
        cooccurrence=tuple(as_array(p) for p in sigs.cooccurrence),
        alphas=jnp.asarray(sigs.alphas),
        labels=jnp.asarray(sigs.labels),
        context=jnp.asarray(sigs.context),
        sparse=tuple(
            _sparse_label(p, m, dtype) if sparse else None for m, p in enumerate(sigs.label)
        ),
    )


def _sparse_label(phi: np.ndarray, order: int, dtype) -> SparseLabel | None:
    """The COO form of ``phi`` ``[A, Vnu, P^m]`` if m >= 1 and it is sparse enough, else None."""
    phi = np.asarray(phi)
    nonzero = np.nonzero(phi)
    if order == 0 or nonzero[0].size > _SPARSE_FILL * phi.size:
        return None
    return SparseLabel(
        alpha=jnp.asarray(nonzero[0]),
        label=jnp.asarray(nonzero[1]),
        context=jnp.asarray(np.stack(nonzero[2:], axis=-1)),
        value=jnp.asarray(phi[nonzero], dtype=dtype),
    )


# --------------------------------------------------------------------------------------------
# Multinomial bookkeeping of Theorem 1 (theory/ffn.md eq. F3)


@functools.lru_cache(maxsize=256)
def _compositions(total: int, parts: int, first_min: int) -> tuple[tuple[tuple[int, ...], float]]:
    """Terms of ``(a_0 + a_1 + .. + a_m)^total`` with a_0's power ``>= first_min`` and every
    context power ``>= 1``, grouped by the multiset of context powers (phi is symmetric in its
    context axes): ``((n_0, n_1..n_m sorted), multinomial * permutations)``."""
    grouped: Counter = Counter()
    for powers in itertools.product(range(total + 1), repeat=parts + 1):
        n_0, rest = powers[0], powers[1:]
        if sum(powers) != total or n_0 < first_min or any(n < 1 for n in rest):
            continue
        multinomial = math.factorial(total) / math.prod(math.factorial(n) for n in powers)
        grouped[(n_0, *sorted(rest))] += multinomial
    return tuple(grouped.items())


def _contract_context(phi: jax.Array, powers: Sequence[int], context_embeddings: jax.Array):
    """``sum_beta phi[..., beta_1..beta_m] prod_r w_{beta_r}^{n_r}`` -> ``[..., d]``.

    ``phi`` ``[..., P^m]`` with m trailing context axes; the d axis of the embeddings is a batch
    axis of the contraction (elementwise products of d-vectors).
    """
    out = phi[..., None]  # [..., P^m, 1]
    for n in reversed(powers):  # contract the last context axis first
        out = jnp.einsum("...pd,pd->...d", out, context_embeddings**n)
    return out


def _sparse_context(sparse: SparseLabel, powers: Sequence[int], context_embeddings: jax.Array):
    """Each entry's ``value * prod_r w_{beta_r}^{n_r}``, ``[nnz, d]``: `_contract_context` before
    its sum, on the non-zero entries only."""
    out = sparse.value[:, None]
    for r, n in enumerate(powers):
        out = out * context_embeddings[sparse.context[:, r]] ** n
    return out


# --------------------------------------------------------------------------------------------
# The FFN signature flow (theory/ffn.md)


@functools.partial(jax.jit, static_argnames=("coefficients", "L", "prediction"))
def ffn_signature_field(
    W_E: jax.Array,
    W_U: jax.Array,
    sigs: FlowSignatures,
    coefficients: Sequence[float],
    *,
    L: int,
    max_order: jax.Array | int | None = None,
    prediction: str = "uniform",
) -> tuple[jax.Array, jax.Array]:
    """``(dW_E/dt, dW_U/dt)`` of the FFN under gradient flow, from signatures alone.

    Args:
        W_E, W_U: ``[V, d]`` current weights.
        sigs: `FlowSignatures` with orders ``0..M``; alphas and context should cover every token
            that occurs in the inputs, labels every label (rows outside them get no label drive).
        coefficients: ``(C_1, .., C_K)`` of sigma, a tuple (static: compiled per value).
        L: sequence length.
        max_order: m_max; orders above it are masked out (a traced value is fine).
        prediction: ``"none"``, ``"uniform"`` (Theorem 2) or ``"linear"`` (Remark 1; needs the
            full order ``M = L-1``, see theory/ffn.md eq. F9).

    Returns:
        ``dW_E [V, d]`` (theory/ffn.md eq. F6) and ``dW_U [V, d]`` (eq. F8).
    """
    check_choice(prediction, "prediction", PREDICTION_TERMS)
    M = len(sigs.label) - 1
    if prediction == "linear" and M != L - 1:
        raise ValueError(
            f"prediction='linear' needs signatures up to order L-1 = {L - 1}; got max order {M}"
        )
    dW_E, dW_U = _signature_field(
        W_E, W_U, sigs, coefficients, L, _order_gate(M, max_order, W_E.dtype), prediction
    )
    if prediction == "linear":
        extra_E, extra_U = _linear_softmax_correction(W_E, W_U, sigs, coefficients, L)
        dW_E, dW_U = dW_E + extra_E, dW_U + extra_U
    return dW_E, dW_U


def _binomial(n, m: int):
    """``C(n, m)`` for a static order ``m``: `math.comb` of a Python int ``n``, else, for a traced
    ``n``, ``prod_{i<m} (n - i) / m!`` (theory/ffn.md eq. F11): an exact integer in float64 for
    integer ``n`` (numerator and ``m!`` are exact integers below 2^53, their quotient is exact),
    and exactly 0 for ``0 <= n < m`` (the factor ``n - n``)."""
    if isinstance(n, int | np.integer):
        return math.comb(n, m)
    if m == 0:
        return 1
    numerator = n
    for i in range(1, m):
        numerator = numerator * (n - i)
    return numerator / math.factorial(m)


def _signature_field(W_E, W_U, sigs: FlowSignatures, coefficients, L, gate, prediction: str):
    """The uniform-or-none part of `ffn_signature_field` (eq. F6, F8) with ``gate [M+1]``.

    ``L``: a Python int (the binomials are constants and the order loop stops at ``L-1``) or a
    traced float64 scalar (`context_signature_flows`: the binomials are `_binomial` products and
    the loop runs over every order ``0..M`` of ``sigs``; orders ``m > L-1`` get the factors
    ``C(L-1, m) = C(L, m+1) = 0``, theory/ffn.md eq. F11).
    """
    M = len(sigs.label) - 1
    V = W_U.shape[0]
    top = min(L - 1, M) if isinstance(L, int | np.integer) else M
    E_alpha, E_context, U_label = W_E[sigs.alphas], W_E[sigs.context], W_U[sigs.labels]
    b_0 = jnp.mean(W_U, axis=0)  # (1/V) W_U^T 1: the readout of a uniform softmax (Theorem 2)
    dE = jnp.zeros_like(E_alpha)  # [A, d]
    dU_label = jnp.zeros_like(U_label)  # [Vnu, d]
    dU_uniform = jnp.zeros_like(b_0)  # [d], the same for every row nu
    for k, C_k in enumerate(coefficients, start=1):
        if C_k == 0:
            continue
        for m in range(min(k - 1, top) + 1):
            label, cooc = sigs.label[m], sigs.cooccurrence[m]
            # W_E, eq. (F4)-(F6): k C_k binom(L-1, m) sum_comp w_alpha^l * (label - prediction)
            scale = k * C_k * _binomial(L - 1, m) * gate[m]
            sparse = sigs.sparse[m] if m < len(sigs.sparse) else None
            for (power, *powers), weight in _compositions(k - 1, m, 0):
                if sparse is None or sparse.use is not None:
                    per_label = _contract_context(label, powers, E_context)  # [A, Vnu, d|1]
                    term = jnp.sum(per_label * U_label, axis=1)
                if sparse is not None:
                    entries = _sparse_context(sparse, powers, E_context) * U_label[sparse.label]
                    coo = jax.ops.segment_sum(entries, sparse.alpha, E_alpha.shape[0])
                    term = coo if sparse.use is None else jnp.where(sparse.use, coo, term)
                if prediction != "none":
                    term = term - b_0 * _contract_context(cooc, powers, E_context)
                dE = dE + scale * weight * E_alpha**power * term
            # W_U, eq. (F7)-(F8): C_k binom(L, m+1) sum_comp sum_alpha r_alpha w_alpha^{n_0} ...
            scale = C_k * _binomial(L, m + 1) * gate[m]
            for (power, *powers), weight in _compositions(k, m, 1):
                left = sigs.r[:, None] * E_alpha**power  # [A, d]
                if sparse is None or sparse.use is not None:
                    per_label = _contract_context(label, powers, E_context)
                    drive = jnp.sum(per_label * left[:, None], axis=0)
                if sparse is not None:
                    entries = _sparse_context(sparse, powers, E_context) * left[sparse.alpha]
                    coo = jax.ops.segment_sum(entries, sparse.label, U_label.shape[0])
                    drive = coo if sparse.use is None else jnp.where(sparse.use, coo, drive)
                dU_label = dU_label + scale * weight * drive
                if prediction != "none":
                    mass = jnp.sum(left * _contract_context(cooc, powers, E_context), axis=0)
                    dU_uniform = dU_uniform - scale * weight * mass / V
    dW_E = jnp.zeros_like(W_E).at[sigs.alphas].set(L * sigs.r[:, None] * dE)
    dW_U = jnp.broadcast_to(dU_uniform, W_U.shape).at[sigs.labels].add(dU_label)
    return dW_E, dW_U


def ffn_signature_flow(
    sigs: SignatureSet,
    coefficients: Sequence[float],
    *,
    prediction: str = "uniform",
    dtype=None,
    sparse: bool = True,
) -> Callable:
    """The vector field ``(t, y, args) -> dy`` of `ffn_signature_field` for `ode.integrate`.

    ``y`` is ``{"W_E": [V, d], "W_U": [V, d]}``; ``args`` is ``max_order`` (or None for all
    orders), so a vmap over args sweeps the context order in one compiled call. ``sparse``: see
    `flow_signatures`.
    """
    check_choice(prediction, "prediction", PREDICTION_TERMS)
    coefficients = _check_coefficients(coefficients)
    flow_sigs = flow_signatures(sigs, dtype, sparse=sparse)

    def vector_field(t, y, args):
        dW_E, dW_U = ffn_signature_field(
            y["W_E"],
            y["W_U"],
            flow_sigs,
            coefficients,
            L=sigs.L,
            max_order=args,
            prediction=prediction,
        )
        return {"W_E": dW_E, "W_U": dW_U}

    return vector_field


def order_contributions(
    W_E: jax.Array, W_U: jax.Array, sigs: SignatureSet | FlowSignatures, coeffs, *, L=None
) -> jax.Array:
    """Theorem 1 per order: ``L r_alpha A_{alpha,m} . phi^{y;m}_alpha``, ``[M+1, V, d]``.

    The label-driven drive of every embedding split by the context order m of the signature
    it contracts (theory/ffn.md eq. F4). Summed over m it equals the autodiff label-driven
    gradient ``E[(df/dw_alpha)^T e_y]`` exactly for polynomial sigma.
    """
    if isinstance(sigs, SignatureSet):
        L = sigs.L
        sigs = flow_signatures(sigs, W_E.dtype)
    if L is None:
        raise ValueError("L must be given with FlowSignatures")
    return _order_contributions(W_E, W_U, sigs, _check_coefficients(coeffs, "coeffs"), int(L))


@functools.partial(jax.jit, static_argnames=("coeffs", "L"))
def _order_contributions(W_E, W_U, sigs, coeffs, L):
    M = len(sigs.label) - 1
    contributions = []
    for m in range(M + 1):
        mask = jnp.zeros(M + 1, W_E.dtype).at[m].set(1)
        only_m = sigs._replace(
            label=tuple(p * mask[i] for i, p in enumerate(sigs.label)), sparse=()
        )
        dW_E, _ = ffn_signature_field(W_E, W_U, only_m, tuple(coeffs), L=L, prediction="none")
        contributions.append(dW_E)
    return jnp.stack(contributions)


def _order_gate(M: int, max_order, dtype) -> jax.Array:
    """``[M+1]`` 0/1 mask ``m <= max_order`` (all ones when max_order is None)."""
    if max_order is None:
        return jnp.ones(M + 1, dtype)
    return (jnp.arange(M + 1) <= jnp.asarray(max_order)).astype(dtype)


def _polynomial(coefficients, z):
    return sum(C * z**k for k, C in enumerate(coefficients, start=1))


def _polynomial_derivative(coefficients, z):
    return sum(k * C * z ** (k - 1) for k, C in enumerate(coefficients, start=1))


def _linear_softmax_correction(W_E, W_U, sigs, coefficients, L):
    """Remark 1: the prediction term of ``p = 1/V + (1/V) H f`` beyond the uniform part.

    With the full-order co-occurrence signature ``phi^{L-1}`` the hidden vector conditioned on an
    occurrence of alpha takes the value ``h = w_alpha + sum_r w_{beta_r}`` with probability
    ``phi^{L-1}_alpha(beta)``, so (theory/ffn.md eq. F9-F10)

        dW_E[alpha] -= (L r_alpha / V) sum_beta phi (sigma'(h) * W_U^T H f(h))
        dW_U        -= (1 / V) sum_alpha r_alpha sum_beta phi  (H f(h)) sigma(h)^T
    """
    V, d = W_E.shape
    cooc = sigs.cooccurrence[L - 1]  # [A, P^{L-1}]
    E_alpha, E_context = W_E[sigs.alphas], W_E[sigs.context]
    h = E_alpha.reshape((-1,) + (1,) * (L - 1) + (d,))
    for r in range(L - 1):
        shape = [1] * (L - 1)
        shape[r] = -1
        h = h + E_context.reshape((1, *shape, d))
    hidden = _polynomial(coefficients, h)  # [A, P^{L-1}, d]
    logits = hidden @ W_U.T
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)  # H f
    slope = _polynomial_derivative(coefficients, h)
    weight = cooc[..., None]
    axes = tuple(range(1, L))
    extra_E = -(L * sigs.r[:, None] / V) * jnp.sum(weight * slope * (centred @ W_U), axis=axes)
    joint = (sigs.r.reshape((-1,) + (1,) * (L - 1)) * cooc)[..., None]  # [A, P^{L-1}, 1]
    extra_U = -jnp.einsum("...v,...d->vd", joint * centred, hidden) / V
    return jnp.zeros_like(W_E).at[sigs.alphas].add(extra_E), extra_U


# --------------------------------------------------------------------------------------------
# Linear drive, attention-only model at uniform attention, exact gradient flow


def drive_matrix(sigs: SignatureSet, vocab_size: int) -> np.ndarray:
    """``M = sum_alpha L r_alpha (phi^{y;0}_alpha - 1/V 1) e_alpha^T``, float64 ``[V, V]``.

    The k = 1, m = 0 part of the FFN flow with the uniform prediction term
    (theory/closed_form.md eq. C1): ``dW_E/dt = C_1 M^T W_U``, ``dW_U/dt = C_1 M W_E``.
    Column alpha is the centred zero-order signature weighted by ``E[N_alpha]``; absent tokens
    have zero columns and
    ``1^T M = 0``. ``sigs`` may restrict labels to those that occur (other rows get ``-1/V``).
    """
    check_type(sigs, "sigs", SignatureSet, "a signatures.SignatureSet")
    needed = 1 + max(int(np.max(sigs.alphas, initial=0)), int(np.max(sigs.labels, initial=0)))
    why = "; at least 1 + the largest alpha or label id of sigs"
    check_int(vocab_size, "vocab_size", needed, why=why)
    weight = np.zeros(vocab_size)
    weight[sigs.alphas] = sigs.L * sigs.r[sigs.alphas]
    M = np.broadcast_to(-weight / vocab_size, (vocab_size, vocab_size)).copy()
    M[np.ix_(sigs.labels, sigs.alphas)] += (weight[sigs.alphas, None] * sigs.label[0]).T
    return M


def attention_uniform_field(params: dict, M: jax.Array, L: int) -> dict:
    """Attention-only model at uniform attention ``a_s = 1/L`` (theory/attention.md eq. A3).

    ``f = W_U W_O W_V (1/L) sum_s w_{x_s}`` is a depth-4 linear network with cross-correlation
    ``Q = E[(e_y - 1/V) hbar^T] = M W_E / L``; with the uniform-softmax prediction term::

        dW_U = Q (W_O W_V)^T,  dW_O = W_U^T Q W_V^T,  dW_V = (W_U W_O)^T Q,
        dW_E = (1/L) M^T W_U W_O W_V

    Args:
        params: ``W_E [V, d]``, ``W_U [V, d]``, ``W_O [d, d_k]``, ``W_V [d_k, d]``.
        M: `drive_matrix` ``[V, V]``.
    """
    W_E, W_U, W_O, W_V = (params[k] for k in ("W_E", "W_U", "W_O", "W_V"))
    M = jnp.asarray(M, dtype=W_E.dtype)
    Q = M @ W_E / L
    return {
        "W_E": M.T @ W_U @ W_O @ W_V / L,
        "W_U": Q @ (W_O @ W_V).T,
        "W_O": W_U.T @ Q @ W_V.T,
        "W_V": (W_U @ W_O).T @ Q,
    }


def attention_uniform_flow(sigs: SignatureSet, vocab_size: int, dtype=None) -> Callable:
    """`attention_uniform_field` as an ODE vector field ``(t, params, args) -> dparams``."""
    M = jnp.asarray(drive_matrix(sigs, vocab_size), dtype=dtype or jnp.zeros(()).dtype)
    return lambda t, y, args: attention_uniform_field(y, M, sigs.L)


def attention_logits(W_E, W_U, W_Q, W_K, W_V, W_O, tokens, *, value=None, key=None, query=None):
    """Last-position logits of the attention-only model (the paper §5.1, no positions), ``[n, V]``.

    ``value``, ``key`` and ``query`` optionally replace ``W_E`` in one role each, so that a
    gradient with respect to one of them is that path's contribution (theory/attention.md
    eq. A1): the three path gradients sum to the full gradient.
    """
    d = W_E.shape[1]
    h_value, h_key, h_query = (W_E[tokens] if e is None else e[tokens] for e in (value, key, query))
    keys = h_key @ W_K.T  # [n, L, d_k]
    query_vector = h_query[:, -1] @ W_Q.T  # [n, d_k]
    scores = jnp.einsum("nsk,nk->ns", keys, query_vector) / jnp.sqrt(jnp.asarray(d, W_E.dtype))
    attention = jax.nn.softmax(scores, axis=-1)
    pooled = jnp.einsum("ns,nsd->nd", attention, h_value)
    return pooled @ W_V.T @ W_O.T @ W_U.T


def attention_path_gradients(weights: dict, tokens, labels, probabilities) -> dict:
    """Label-driven gradient ``E[(df/dw_alpha)^T e_y]`` split into value, key and query paths.

    A diagnostic at any snapshot (the paper §5.2, Theorem 3): each path's ``[V, d]`` gradient,
    by automatic differentiation through that role of the embedding only.
    """
    tokens, labels = jnp.asarray(tokens), jnp.asarray(labels)
    p = jnp.asarray(probabilities, dtype=weights["W_E"].dtype)
    rest = {k: weights[k] for k in ("W_U", "W_Q", "W_K", "W_V", "W_O")}

    def label_term(E_value, E_key, E_query):
        logits = attention_logits(
            weights["W_E"], **rest, tokens=tokens, value=E_value, key=E_key, query=E_query
        )
        return jnp.sum(p * jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0])

    W_E = weights["W_E"]
    value, key, query = jax.grad(label_term, argnums=(0, 1, 2))(W_E, W_E, W_E)
    return {"value": value, "key": key, "query": query}


def attention_value_path(weights: dict, phi0: jax.Array, psi: jax.Array, r, L: int):
    """Theorem 3 value path ``L r_alpha (W_U W_O W_V)^T (phi^{y;0}_alpha * psi^y_alpha)``, [A, d].

    ``phi0, psi`` ``[A, V]`` (`signatures.label_signature` order 0 and
    `signatures.attention_factor`), ``r`` ``[A]``.
    """
    readout = weights["W_U"] @ weights["W_O"] @ weights["W_V"]  # [V, d]
    return L * jnp.asarray(r)[:, None] * ((jnp.asarray(phi0) * jnp.asarray(psi)) @ readout)


def gradient_flow(loss: Callable) -> Callable:
    """The exact gradient flow ``dy/dt = -grad loss(y)`` of any loss over a pytree of parameters.

    With `train.loss_function` this is full-batch training of any model written as an ODE.
    """
    gradient = jax.grad(loss)
    return lambda t, y, args: jax.tree.map(jnp.negative, gradient(y))


# --------------------------------------------------------------------------------------------
# validation


def _check_coefficients(coefficients, name: str = "coefficients") -> tuple[float, ...]:
    """``(C_1, .., C_K)`` as floats: at least one, all finite."""
    try:
        values = tuple(float(c) for c in coefficients)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a sequence of real numbers (C_1, ..., C_K); got {coefficients!r}"
        ) from None
    if not values or not all(math.isfinite(c) for c in values):
        raise ValueError(
            f"{name} must be one or more finite numbers (C_1, ..., C_K); got {coefficients!r}"
        )
    return values


# --------------------------------------------------------------------------------------------
# The flows as theories of a run (`theory.Problem`): one adaptive ODE lane per gamma


def signature_order(L: int, max_orders: Sequence[int], prediction: str) -> int:
    """The highest signature order `ffn_signature_flow` contracts: ``L - 1`` with
    ``prediction="linear"`` (the linear readout sees every order), else the largest of
    ``max_orders``."""
    return L - 1 if prediction == "linear" else max(max_orders)


def signature_flow_lanes(problem: Problem, m: int) -> TheoryLanes:
    """The FFN signature flow truncated at context order ``m`` (`ffn_signature_flow`, with the
    run's prediction term) of every lane of ``problem``; the flows of every order of the run
    are solved together, in one `Problem.map_lanes`, the first time one is asked for."""
    return problem.once(_signature_flows)[m]


def _signature_flows(problem: Problem) -> dict[int, TheoryLanes]:
    setting, ds = problem.setting, problem.ds
    occurring = np.unique(ds.tokens)
    # Only occurring tokens carry signature mass: restricting the axes to them keeps the flow's
    # contractions small (4-6x faster on add; benchmarks/README.md), same numbers.
    sigs = signatures.signature_set(
        ds,
        signature_order(ds.L, setting.max_orders, setting.prediction),
        alphas=occurring,
        labels=np.unique(ds.labels[ds.weights > 0]),
        context=occurring,
    )
    field = ffn_signature_flow(sigs, setting.coefficients, prediction=setting.prediction)
    orders, gammas = len(setting.max_orders), len(setting.gammas)
    y0 = {k: jnp.repeat(jnp.asarray(v), orders, axis=0) for k, v in problem.y0.items()}
    ys, ok, result, t_end = _ode_lanes(
        problem, field, y0, jnp.tile(jnp.asarray(setting.max_orders), gammas)
    )
    flows = {}
    for j, m in enumerate(setting.max_orders):
        lanes = range(j, gammas * orders, orders)
        flows[m] = TheoryLanes(
            tuple(WeightTrajectory(problem.ts, ys["W_E"][i], ys["W_U"][i]) for i in lanes),
            tuple(SolverStatus(bool(ok[i]), ode.describe(result[i], t_end[i])) for i in lanes),
        )
    return flows


# --------------------------------------------------------------------------------------------
# Context order L as a lane axis: several datasets' signature flows in one compiled program


class ContextSignatures(NamedTuple):
    """The signatures of D datasets of one vocabulary on one index set, stacked (a pytree).

    Attributes:
        L: ``[D]`` float sequence lengths (traced in the field: theory/ffn.md eq. F11).
        sigs: a `FlowSignatures` of orders ``0..M`` whose ``r [D, A]``, ``label[m]
            [D, A, Vnu, P^m]``, ``cooccurrence[m] [D, A, P^m]`` and ``sparse[m]`` (the
            `SparseLabel` leaves ``[D, nnz_m, ...]``, zero-padded to the largest ``nnz_m``) carry
            a leading dataset axis; ``alphas [A]``, ``labels [Vnu]``, ``context [P]`` are shared
            (the union of every dataset's occurring tokens and labels). A dataset's orders above
            its ``L-1`` are zero tables.
    """

    L: jax.Array
    sigs: FlowSignatures

    def select(self, i) -> tuple[jax.Array, FlowSignatures]:
        """Dataset ``i``'s ``(L [], FlowSignatures)`` (``i`` may be traced: a gather)."""
        ids = self.sigs.alphas, self.sigs.labels, self.sigs.context
        tables = self.sigs._replace(alphas=None, labels=None, context=None)
        picked = jax.tree.map(lambda x: x[i], tables)
        return self.L[i], picked._replace(alphas=ids[0], labels=ids[1], context=ids[2])


class _ContextLane(NamedTuple):
    """The per-lane argument of `context_signature_flows`: ``dataset`` (an index into the
    datasets) and ``max_order`` (m), int ``[]`` each (``[lanes]`` before the lane map)."""

    dataset: jax.Array
    max_order: jax.Array


class ContextFlows(NamedTuple):
    """The FFN signature flows of several datasets x orders x gammas (`context_signature_flows`).

    Attributes:
        L: ``[D]`` the sequence length of each dataset, in the order given.
        orders: ``[O]`` the truncation orders m (the setting's ``max_orders``).
        lanes: ``[D][O]`` the `TheoryLanes` (one trajectory per gamma) of dataset i truncated at
            ``orders[j]``; None where ``orders[j] > L_i - 1`` (skipped, not solved).
    """

    L: tuple[int, ...]
    orders: tuple[int, ...]
    lanes: tuple[tuple[TheoryLanes | None, ...], ...]

    def of(self, dataset: int, m: int) -> TheoryLanes:
        """The lanes of dataset index ``dataset`` at order ``m``; ValueError where not solved."""
        check_int(dataset, "dataset", 0, len(self.L) - 1)
        check_choice(m, "m", self.orders)
        found = self.lanes[dataset][self.orders.index(m)]
        if found is None:
            raise ValueError(
                f"m = {m} exceeds L-1 = {self.L[dataset] - 1} of dataset {dataset} (L = "
                f"{self.L[dataset]}): that lane was skipped; orders solved for it: "
                f"{[o for o in self.orders if o <= self.L[dataset] - 1]}"
            )
        return found


def context_signatures(
    datasets: Sequence[TokenDataset], top: int, dtype=None, *, sparse: bool = True
) -> ContextSignatures:
    """Every dataset's signatures of orders ``0..min(top, L-1)`` on one index set (the union of
    the occurring tokens and of the labels of positive weight), zero-padded to order ``top``
    and stacked (`ContextSignatures`). Each dataset keeps the dense or COO form of each order
    that `flow_signatures` gives it alone (`_SPARSE_FILL`; `SparseLabel.use` where the datasets
    differ); COO entries are zero-padded to the largest count (a zero entry adds an exact 0 to
    its segment)."""
    dtype = dtype or jnp.zeros(()).dtype
    alphas = np.unique(np.concatenate([np.unique(ds.tokens) for ds in datasets]))
    labels = np.unique(np.concatenate([ds.labels[ds.weights > 0] for ds in datasets]))
    per_dataset = [
        signatures.signature_set(
            ds, min(top, ds.L - 1), alphas=alphas, labels=labels, context=alphas
        )
        for ds in datasets
    ]
    A, Vnu, P = alphas.size, labels.size, alphas.size

    def padded(tables, m, shape):
        return tables[m] if m < len(tables) else np.zeros(shape)

    label = [[padded(s.label, m, (A, Vnu) + (P,) * m) for s in per_dataset] for m in range(top + 1)]
    cooccurrence = [
        [padded(s.cooccurrence, m, (A,) + (P,) * m) for s in per_dataset] for m in range(top + 1)
    ]
    coo = tuple(
        _stacked_sparse([_sparse_label(p, m, dtype) for p in label[m]], m, label[m])
        if sparse
        else None
        for m in range(top + 1)
    )
    stack = functools.partial(_stack_as, dtype=dtype)
    sigs = FlowSignatures(
        r=stack([s.r[alphas] for s in per_dataset]),
        label=tuple(stack(tables) for tables in label),
        cooccurrence=tuple(stack(tables) for tables in cooccurrence),
        alphas=jnp.asarray(alphas),
        labels=jnp.asarray(labels),
        context=jnp.asarray(alphas),
        sparse=coo,
    )
    return ContextSignatures(stack([ds.L for ds in datasets]), sigs)


def _stack_as(arrays, dtype) -> jax.Array:
    return jnp.asarray(np.stack([np.asarray(a, dtype=np.float64) for a in arrays]), dtype=dtype)


def _stacked_sparse(
    coo: list[SparseLabel | None], order: int, tables: list[np.ndarray]
) -> SparseLabel | None:
    """The datasets' COO forms of one order stacked, each zero-padded to the largest ``nnz``
    (index 0, value 0); None where no dataset's table is sparse. Where only some are, the
    others get the COO form of their dense table too, and ``use`` says which form each
    dataset's separate solve takes (`flow_signatures`), so each lane keeps its own."""
    if all(c is None for c in coo):
        return None
    use = None if all(c is not None for c in coo) else np.array([c is not None for c in coo])
    coo = [_coo(table, order) if c is None else c for c, table in zip(coo, tables, strict=True)]
    nnz = max(c.value.shape[0] for c in coo)

    def pad(x):
        x = np.asarray(x)
        return np.concatenate([x, np.zeros((nnz - x.shape[0], *x.shape[1:]), x.dtype)])

    return SparseLabel(
        alpha=jnp.asarray(np.stack([pad(c.alpha) for c in coo])),
        label=jnp.asarray(np.stack([pad(c.label) for c in coo])),
        context=jnp.asarray(np.stack([pad(c.context).reshape(nnz, order) for c in coo])),
        value=jnp.asarray(np.stack([pad(c.value) for c in coo])),
        use=None if use is None else jnp.asarray(use),
    )


def _coo(phi: np.ndarray, order: int) -> SparseLabel:
    """The COO form of any ``phi`` ``[A, Vnu, P^m]`` (NumPy arrays, stacked later)."""
    nonzero = np.nonzero(phi)
    context = np.stack(nonzero[2:], axis=-1) if order else np.zeros((nonzero[0].size, 0), int)
    return SparseLabel(nonzero[0], nonzero[1], context, phi[nonzero])


@functools.partial(jax.jit, static_argnames=("coefficients", "prediction"))
def context_signature_field(
    W_E: jax.Array,
    W_U: jax.Array,
    sigs: FlowSignatures,
    coefficients: tuple[float, ...],
    L: jax.Array,
    max_order: jax.Array,
    prediction: str = "uniform",
) -> tuple[jax.Array, jax.Array]:
    """`ffn_signature_field` with a traced sequence length ``L []`` (float): ``(dW_E, dW_U)``,
    ``[V, d]`` each (theory/ffn.md eq. F6, F8 with the binomials of eq. F11).

    ``sigs`` holds orders ``0..M`` (M: the largest order of any dataset of the sweep); the
    orders above ``L-1`` get ``C(L-1, m) = C(L, m+1) = 0`` and, for zero tables, contribute an
    exact 0. ``prediction``: ``"none"`` or ``"uniform"`` (``"linear"`` needs a static L).
    """
    check_choice(prediction, "prediction", ("none", "uniform"))
    gate = _order_gate(len(sigs.label) - 1, max_order, W_E.dtype)
    return _signature_field(W_E, W_U, sigs, coefficients, L, gate, prediction)


def context_signature_flows(problem: Problem, datasets: Sequence[TokenDataset]) -> ContextFlows:
    """The FFN signature flows of several datasets (any L, one vocabulary) x the setting's
    orders m x its gammas, as the lanes of one `Problem.map_lanes` (one compiled program).

    Each lane ``(dataset i, order m, gamma g)`` integrates ``ffn_signature_field`` truncated at
    m (theory/ffn.md eq. F6, F8) with the prediction term of ``problem.setting``, from
    ``problem.y0[g]`` on ``problem.ts`` (``problem.ds`` is not read), L a traced lane value
    (eq. F11: binomials as products over the static m, the order loop to the sweep's largest
    order, each lane's tables gathered from the `ContextSignatures` every lane is given).
    Orders ``m > L_i - 1`` are **skipped** (``ContextFlows.lanes`` holds None there). A lane
    equals its dataset's separate solve (`signature_flow_lanes`) within 1e-12 relative before
    the blow-up event, not bitwise (theory/ffn.md §3, after eq. F11).

    Args:
        problem: the run's `Problem` (setting: gammas, max_orders, prediction,
            coefficients; y0 ``[G, V, d]``; ts ``[T]``; map_lanes).
        datasets: ``[D]`` `TokenDataset` of one vocabulary size V.

    Returns:
        `ContextFlows`: per dataset and order, a `WeightTrajectory` and `SolverStatus` per gamma.

    Raises:
        ValueError: no datasets, vocabulary sizes that differ (or differ from y0's V), an order
            outside ``[0, max L - 1]`` (above every dataset's ``L-1``), ``prediction="linear"``
            with several distinct L (it contracts the full order ``L-1``, a shape per L: one L
            per call), or no time grid.
    """
    setting = problem.setting
    datasets, Ls = _check_context_inputs(problem, datasets)
    coefficients = _check_coefficients(setting.coefficients)
    orders = tuple(int(m) for m in setting.max_orders)
    static_L = Ls[0] if len(set(Ls)) == 1 else None
    top = signature_order(max(Ls), orders, setting.prediction)
    tables = context_signatures(datasets, top)
    vector_field = _context_vector_field(coefficients, setting.prediction, static_L)
    pairs = [(i, m) for i, L in enumerate(Ls) for m in orders if m <= L - 1]
    G = len(setting.gammas)
    gamma = np.repeat(np.arange(G), len(pairs))
    dataset = np.tile([i for i, _ in pairs], G)
    order = np.tile([m for _, m in pairs], G)
    y0 = {k: jnp.asarray(np.asarray(v)[gamma]) for k, v in problem.y0.items()}
    lanes = _ContextLane(jnp.asarray(dataset), jnp.asarray(order))
    ys, ok, result, t_end = _ode_lanes(problem, vector_field, y0, lanes, shared=(tables,))
    solved = {}
    for j, (i, m) in enumerate(pairs):
        at = range(j, G * len(pairs), len(pairs))
        solved[i, m] = TheoryLanes(
            tuple(WeightTrajectory(problem.ts, ys["W_E"][k], ys["W_U"][k]) for k in at),
            tuple(SolverStatus(bool(ok[k]), ode.describe(result[k], t_end[k])) for k in at),
        )
    return ContextFlows(
        tuple(Ls), orders, tuple(tuple(solved.get((i, m)) for m in orders) for i in range(len(Ls)))
    )


def _context_vector_field(coefficients, prediction: str, static_L: int | None) -> Callable:
    """The vector field ``(t, y, (lane, stacked)) -> dy`` of one `context_signature_flows` lane:
    its dataset's ``L`` and tables gathered from ``stacked`` (`ContextSignatures`), then
    `ffn_signature_field` at ``static_L`` when every dataset has that one L, else
    `context_signature_field` with the traced L."""

    def vector_field(t, y, args):
        lane, stacked = args
        L, sigs = stacked.select(lane.dataset)
        if static_L is None:
            dW_E, dW_U = context_signature_field(
                y["W_E"], y["W_U"], sigs, coefficients, L, lane.max_order, prediction
            )
        else:
            dW_E, dW_U = ffn_signature_field(
                y["W_E"], y["W_U"], sigs, coefficients,
                L=static_L, max_order=lane.max_order, prediction=prediction,
            )  # fmt: skip
        return {"W_E": dW_E, "W_U": dW_U}

    return vector_field


def _check_context_inputs(problem: Problem, datasets) -> tuple[list, list[int]]:
    """The datasets as a list and their L; ValueError naming the parameter otherwise."""
    check_type(problem, "problem", Problem, "a theory.Problem")
    if isinstance(datasets, TokenDataset) or not isinstance(datasets, Sequence):
        raise ValueError(
            f"datasets must be a sequence of one or more TokenDataset; got {type(datasets)}"
        )
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets must hold one or more TokenDataset of one vocabulary; got []")
    for i, ds in enumerate(datasets):
        check_type(ds, f"datasets[{i}]", TokenDataset, "a TokenDataset (tasks.make)")
    Ls = [int(ds.L) for ds in datasets]
    sizes = [int(ds.vocab_size) for ds in datasets]
    if len(set(sizes)) > 1:
        raise ValueError(
            f"datasets must share one vocab_size (every lane evolves W_E, W_U [V, d]); got "
            f"vocab_size {sizes} for L {Ls}"
        )
    V = np.asarray(problem.y0["W_E"]).shape[-2]
    if V != sizes[0]:
        raise ValueError(
            f"problem.y0 must hold W_E, W_U [G, V, d] with V = vocab_size = {sizes[0]} of the "
            f"datasets; got V = {V}"
        )
    if problem.ts is None:
        raise ValueError("problem.ts must be the time grid [T]; got None")
    setting = problem.setting
    check_choice(setting.prediction, "prediction", PREDICTION_TERMS)
    if setting.prediction == "linear" and len(set(Ls)) > 1:
        raise ValueError(
            f"prediction='linear' needs each dataset's full order L-1 (a shape per L), so it "
            f"cannot share one program across sequence lengths; with datasets of L {Ls} use "
            f"prediction 'none' or 'uniform', or one L per call"
        )
    orders = list(setting.max_orders)
    why = f" (orders in [0, max L - 1] = [0, {max(Ls) - 1}] for L {Ls}; max_orders={orders})"
    if not orders:
        raise ValueError(f"max_orders must hold one or more orders{why}")
    for m in orders:
        check_int(m, "max_orders", 0, max(Ls) - 1, why=why)
    return datasets, Ls


def signature_flow_bytes(size: Size) -> int:
    """Peak bytes of one order's `signature_flow_lanes`: the signature tables up to the order
    the flow uses (``[A, Vnu + 1, P^m]``, A = P), and the ODE lanes (`theory.Size.ode_bytes`)
    with the field's contractions ``[A, Vnu, P^(m-1), d]`` and, with ``prediction="linear"``,
    the hidden states ``[A, P^(L-1), 2 V + 4 d]``."""
    A, P, d = size.P, size.P, size.d
    top = signature_order(size.L, size.max_orders, size.prediction)
    tables = sum(A * (size.Vnu + 1) * P**m for m in range(top + 1))
    field = sum(2 * d * max(A * size.Vnu * P ** max(m - 1, 0), A * P**m) for m in range(top + 1))
    if size.prediction == "linear":
        field += A * P ** (size.L - 1) * (2 * size.V + 4 * d)
    return 8 * tables + size.ode_bytes(2 * size.V * d, field)


def uniform_attention_lanes(problem: Problem) -> TheoryLanes:
    """The uniform-attention flow (theory/attention.md eq. A3) of every lane of ``problem``,
    each with its readout's escape statistic (`uniform_attention_logit_scale`)."""
    ds = problem.ds
    field = attention_uniform_flow(signatures.signature_set(ds, 0), ds.vocab_size)
    y0 = {k: jnp.asarray(v) for k, v in problem.y0.items()}
    lanes = len(problem.setting.gammas)
    ys, ok, result, t_end = _ode_lanes(problem, field, y0, jnp.zeros(lanes, dtype=int))
    tokens = jnp.asarray(ds.tokens)
    trajectories = []
    for i in range(len(ok)):
        weights = {k: jnp.asarray(v[i]) for k, v in ys.items()}
        scale = np.asarray(uniform_attention_logit_scale(weights, tokens))
        trajectories.append(WeightTrajectory(problem.ts, ys["W_E"][i], ys["W_U"][i], scale))
    solver = (SolverStatus(bool(ok[i]), ode.describe(result[i], t_end[i])) for i in range(len(ok)))
    return TheoryLanes(tuple(trajectories), tuple(solver))


def uniform_attention_bytes(size: Size) -> int:
    """Peak bytes of `uniform_attention_lanes`: the order-0 table ``[V, Vnu + 1]`` and the ODE
    lanes of ``W_E, W_U [V, d]``, ``W_O [d, d_k]``, ``W_V [d_k, d]``."""
    state = 2 * size.V * size.d + 2 * size.d * size.d_k
    return 8 * size.V * (size.Vnu + 1) + size.ode_bytes(state, field=4 * state)


@jax.jit
def uniform_attention_logit_scale(weights: dict, tokens: jax.Array) -> jax.Array:
    """The escape statistic (C7) of the uniform-attention model (eq. A3), ``[...]``.

    ``f(X) = W_U W_O W_V (1/L) sum_s w_{x_s}``; ``weights`` holds ``W_E [..., V, d]``, ``W_U``,
    ``W_O [..., d, d_k]`` and ``W_V [..., d_k, d]`` with the same leading axes.
    """
    h = jnp.mean(jnp.take(weights["W_E"], tokens, axis=-2), axis=-2)  # [..., n, d]
    readout = weights["W_U"] @ weights["W_O"] @ weights["W_V"]  # [..., V, d]
    logits = jnp.einsum("...nd,...vd->...nv", h, readout)
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
    return jnp.max(jnp.abs(centred), axis=(-2, -1))


def _ode_lanes(problem: Problem, field: Callable, y0: dict, args, shared: tuple = ()) -> tuple:
    """``(ys, ok, result, t_end)`` of the ODE lanes ``y0`` (leading lane axis) with ``args``
    per lane, each ending at its blow-up (`theory.BLOW_UP`), later times holding that state.

    ``shared``: pytrees given whole to every lane (`sweep.sweep_map`'s ``shared``, e.g. the
    stacked signature tables of `context_signature_flows`); the field then gets
    ``(arg, *shared)`` as its args."""
    grid = jnp.asarray(problem.ts)

    def solve(y, arg, *whole):
        solution = ode.integrate(
            field, y, grid, (arg, *whole) if whole else arg,
            rtol=1e-7, atol=1e-12, max_steps=20_000, blow_up=BLOW_UP,
        )  # fmt: skip
        return solution.ys, solution.ok, solution.result, solution.t_end

    if shared:
        return jax.device_get(problem.map_lanes(solve, y0, args, shared=tuple(shared)))
    return jax.device_get(problem.map_lanes(solve, y0, args))
