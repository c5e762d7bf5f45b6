"""When attention leaves uniform: the attention-only flow with its key and query paths, from
probability tables of the data (theory/attention.md §4-§6, eqs. A6-A12).

The attention-only model (`models.AttentionOnly`, no positions) has logits ``f = R sum_s a_s h_s``
with ``R = W_U W_O W_V [V, d]``, ``a = softmax(z)``, ``z_s = h_s^T B h_L``, ``B = W_K^T W_Q /
sqrt(d)``; to first order in z, ``f = f0 + f1``, ``f0 = R hbar``, ``f1 = R sum_s (z_s - zbar) h_s /
L`` (eq. A6). The flow is the gradient of a truncated log-likelihood J (eq. A7) whose label part
contracts three tables over the K tokens and Y labels that occur, ``C_a = N_a(X) / L`` (eq. A8):
``label_bag [Y, K]``, ``label_bag_query [Y, K, K]``, ``label_bag2_query [Y, K, K, K]``, i.e.
E[1{y=nu} C_a], E[1{y=nu} C_a 1{x_L=g}] and E[1{y=nu} C_a C_b 1{x_L=g}]. The prediction term is
``"uniform"`` (p = 1/V, eq. A7a), ``"linear"`` (Remark 1, eq. A7b) or ``"softmax"`` (exact at
uniform attention, eq. A7c); the last two need the full-order bag distribution (the distinct
(bag, x_L) pairs, ``bags``/``bag_weights``). `attention_field` evaluates eq. A9 with einsums and
gathers over these tables (no per-sample pass, no autodiff); `first_order_psi` is Theorem 3's psi
to first order (eq. A10). `target_attention` is the dataset-mean attention mass on target
positions (exact softmax), `departure_time` when it first leaves its uniform value by
`DEPARTURE_THRESHOLD` (eq. A12). `theory_descent` integrates eq. A9 from a given initialization
(explicit Euler at the training's step, or the flow itself) and measures it with the exact model;
`descent_path` is the shared chunked driver (training uses it too). Shapes: ``W_E, W_U [V, d]``,
``W_Q, W_K, W_V [d_k, d]``, ``W_O [d, d_k]`` (`models.weights`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import ode
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_choice

__all__ = [
    "DEPARTURE_THRESHOLD",
    "PREDICTIONS",
    "ROLES",
    "AttentionTables",
    "Departure",
    "Path",
    "attention_field",
    "attention_flow",
    "attention_tables",
    "departure_time",
    "descent_path",
    "embedding_paths",
    "exact_measure",
    "first_order_psi",
    "target_attention",
    "theory_descent",
    "uniform_mass",
]

PREDICTIONS = ("uniform", "linear", "softmax")
ROLES = ("W_E", "W_U", "W_Q", "W_K", "W_V", "W_O")
#: Largest table (entries) `attention_tables` builds; T2 has Y K^3 entries.
_MAX_TABLE_ENTRIES = 50_000_000
#: Default relative departure threshold of eq. A12, fixed before any comparison with training.
DEPARTURE_THRESHOLD = 0.25


class AttentionTables(NamedTuple):
    """The probability tables of eq. A7 (a pytree of JAX arrays).

    Attributes:
        tokens: int ``[K]`` ids of the tokens that occur (axes a, b, c, g).
        labels: int ``[Y]`` ids of the labels that occur (axis nu).
        label_bag: ``[Y, K]`` T0.
        label_bag_query: ``[Y, K, K]`` T1 (a: any position, g: the query position L).
        label_bag2_query: ``[Y, K, K, K]`` T2.
        bags: ``[A, K]`` token fractions C of the distinct (bag, query) pairs (the query
            position counted in the bag); None for ``prediction="uniform"``.
        bag_queries: int ``[A]`` their query token (token-axis index), or None.
        bag_weights: ``[A]`` their probabilities (sum 1), or None.
    """

    tokens: jax.Array
    labels: jax.Array
    label_bag: jax.Array
    label_bag_query: jax.Array
    label_bag2_query: jax.Array
    bags: jax.Array | None = None
    bag_queries: jax.Array | None = None
    bag_weights: jax.Array | None = None


# --------------------------------------------------------------------------------------------
# Tables (eq. A7-A8)


def attention_tables(
    ds: TokenDataset, *, prediction: str = "uniform", dtype=None
) -> AttentionTables:
    """The tables of eq. A7 for ``ds``, exactly (the bag distribution only when needed).

    A table over bag slots is a sum over position tuples, e.g. ``E[C_a C_b 1{x_L=g}] =
    L^-2 sum_{s,t} P(x_s=a, x_t=b, x_L=g)``, positions allowed to coincide (C counts every
    position, the query's included); each is one weighted ``bincount`` over all tuples.
    """
    check_choice(prediction, "prediction", PREDICTIONS)
    dtype = dtype or jnp.zeros(()).dtype
    p = ds.probabilities
    live = p > 0
    tokens = np.unique(ds.tokens[live])
    labels = np.unique(ds.labels[live])
    K, Y = tokens.size, labels.size
    if Y * K**3 > _MAX_TABLE_ENTRIES:
        raise ValueError(
            f"T2 would hold {Y * K**3:,} entries (K = {K} tokens, Y = {Y} labels); at most "
            f"{_MAX_TABLE_ENTRIES:,} are allowed"
        )
    x = np.searchsorted(tokens, ds.tokens[live])  # [n, L] token-axis indices
    y = np.searchsorted(labels, ds.labels[live])
    p = p[live]
    as_array = functools.partial(jnp.asarray, dtype=dtype)
    bags = queries = weights = None
    if prediction != "uniform":
        rows, weights = _bag_distribution(x, p)
        bags = as_array(_fractions(rows, K))
        queries, weights = jnp.asarray(rows[:, -1]), as_array(weights)
    return AttentionTables(
        tokens=jnp.asarray(tokens),
        labels=jnp.asarray(labels),
        label_bag=as_array(_bag_table(x, y, p, K, Y, bag=1, query=False)),
        label_bag_query=as_array(_bag_table(x, y, p, K, Y, bag=1, query=True)),
        label_bag2_query=as_array(_bag_table(x, y, p, K, Y, bag=2, query=True)),
        bags=bags,
        bag_queries=queries,
        bag_weights=weights,
    )


def _bag_distribution(x: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (sorted first L - 1 tokens, query) rows of ``x [n, L]`` and their total mass."""
    key = np.concatenate([np.sort(x[:, :-1], axis=1), x[:, -1:]], axis=1)
    rows, inverse = np.unique(key, axis=0, return_inverse=True)
    return rows, np.bincount(inverse.ravel(), weights=p, minlength=rows.shape[0])


def _fractions(x: np.ndarray, K: int) -> np.ndarray:
    """Token fractions ``C [n, K]`` of the rows of ``x [n, L]`` (token-axis indices)."""
    n, L = x.shape
    C = np.zeros((n, K))
    np.add.at(C, (np.repeat(np.arange(n), L), x.ravel()), 1 / L)
    return C


def _bag_table(x, y, p, K: int, Y: int, *, bag: int, query: bool) -> np.ndarray:
    """``E[1{y=nu} C_{a_1} .. C_{a_bag} 1{x_L=g}]``, float64 ``[Y, K (bag times), K?]``.

    ``x`` int ``[n, L]`` token-axis indices, ``y`` ``[n]`` label-axis indices, ``p`` ``[n]``
    probabilities.
    """
    n, L = x.shape
    tuples = np.asarray(list(itertools.product(range(L), repeat=bag)))  # [L^bag, bag]
    index = np.broadcast_to(y[:, None], (n, tuples.shape[0])).astype(np.int64)
    shape = [Y]
    for slot in range(bag):
        index = index * K + x[:, tuples[:, slot]]
        shape.append(K)
    if query:
        index = index * K + x[:, -1:]
        shape.append(K)
    weights = np.broadcast_to(p[:, None] / L**bag, index.shape)
    flat = np.bincount(index.ravel(), weights=weights.ravel(), minlength=math.prod(shape))
    return flat.reshape(shape)


# --------------------------------------------------------------------------------------------
# The vector field (eq. A9)


class _Scalars(NamedTuple):
    """The token-level scalars the objective depends on (eq. A7)."""

    W: jax.Array  # [K, d] embeddings of the occurring tokens
    R: jax.Array  # [V, d] readout W_U W_O W_V
    B: jax.Array  # [d, d] W_K^T W_Q / sqrt(d)
    Phi: jax.Array  # [K, V] logit of each token, W R^T
    Phi_c: jax.Array  # [K, V] the same centred over the vocabulary, Phi H
    P: jax.Array  # [Y, K] label-driven logit, (Phi H)[a, nu]
    S: jax.Array  # [K, K] attention logit of key a under query g, w_a^T B w_g


def _scalars(params: dict, tables: AttentionTables) -> _Scalars:
    W = params["W_E"][tables.tokens]
    R = params["W_U"] @ params["W_O"] @ params["W_V"]
    d = params["W_E"].shape[1]
    B = params["W_K"].T @ params["W_Q"] / jnp.sqrt(jnp.asarray(d, W.dtype))
    Phi = W @ R.T
    Phi_c = Phi - jnp.mean(Phi, axis=1, keepdims=True)
    return _Scalars(W, R, B, Phi, Phi_c, Phi_c[:, tables.labels].T, W @ B @ W.T)


def _scalar_gradients(sc: _Scalars, tables: AttentionTables, prediction: str):
    """``dJ/dPhi [K, V]`` and ``dJ/dS [K, K]`` of the objective (eq. A9a-b)."""
    T1, T2 = tables.label_bag_query, tables.label_bag2_query
    G_P = _value_drive(sc, tables)
    G_S = jnp.einsum("vbg,vb->bg", T1, sc.P) - jnp.einsum("vabg,va->bg", T2, sc.P)
    Z = jnp.zeros_like(sc.Phi).at[:, tables.labels].add(G_P.T)
    G_Phi = Z - jnp.mean(Z, axis=1, keepdims=True)  # P = (Phi H)[:, labels]^T
    if prediction != "uniform":
        extra_Phi, extra_S = _prediction_gradients(sc, tables, prediction)
        G_Phi, G_S = G_Phi + extra_Phi, G_S + extra_S
    return G_Phi, G_S


def _value_drive(sc: _Scalars, tables: AttentionTables) -> jax.Array:
    """``G_P = T0 + T1.S - T2.S [Y, K]``: Theorem 3's ``L r phi^{y;0} * psi`` with psi to first
    order (eq. A10); the T2 term is the mean logit zbar."""
    T0, T1, T2 = tables.label_bag, tables.label_bag_query, tables.label_bag2_query
    return T0 + jnp.einsum("vag,ag->va", T1, sc.S) - jnp.einsum("vabg,bg->va", T2, sc.S)


def _prediction_gradients(sc: _Scalars, tables: AttentionTables, prediction: str):
    """The prediction term beyond 1/V over the bag distribution (eq. A9d).

    Per bag: ``u = f0``, ``v = f1`` and ``kappa = p(u) - 1/V``; the term is
    ``-E[Lambda(u) + kappa^T v]`` with ``Lambda = lse(u) - mean(u)`` (``"softmax"``) or
    ``u^T H u / 2V`` (``"linear"``), whose u-gradient is kappa.
    """
    C, g, weight = tables.bags, tables.bag_queries, tables.bag_weights[:, None]
    V = sc.Phi.shape[1]
    u = C @ sc.Phi  # [A, V]
    z = sc.S[:, g].T  # [A, K]: S[a, x_L]
    e = C * (z - jnp.sum(C * z, axis=1, keepdims=True))  # sum_s (a_s - 1/L) 1{x_s = a}
    v = e @ sc.Phi
    if prediction == "softmax":
        p = jax.nn.softmax(u, axis=-1)
        kappa, kappa_v = p - 1 / V, p * v - p * jnp.sum(p * v, axis=-1, keepdims=True)
    else:
        kappa = (u - jnp.mean(u, axis=-1, keepdims=True)) / V
        kappa_v = (v - jnp.mean(v, axis=-1, keepdims=True)) / V  # (dkappa/du) v, symmetric
    dJ_du, dJ_dv = -weight * (kappa + kappa_v), -weight * kappa  # [A, V]
    G_Phi = C.T @ dJ_du + e.T @ dJ_dv
    eta = dJ_dv @ sc.Phi.T  # [A, K]: dJ/de_a
    per_key = C * (eta - jnp.sum(C * eta, axis=1, keepdims=True))  # dJ/dS[a, x_L]
    G_S = jnp.zeros_like(sc.S).at[:, g].add(per_key.T)
    return G_Phi, G_S


@functools.partial(jax.jit, static_argnames=("prediction",))
def attention_field(params: dict, tables: AttentionTables, prediction: str = "uniform") -> dict:
    """The gradient of J (eq. A7) with respect to the six matrices (eq. A9).

    Args:
        params: ``W_E, W_U [V, d]``, ``W_Q, W_K, W_V [d_k, d]``, ``W_O [d, d_k]`` (other keys,
            such as ``P``, are ignored).
        tables: `attention_tables` of the data, built for this ``prediction``.
        prediction: ``"uniform"`` (eq. A7a), ``"linear"`` (A7b) or ``"softmax"`` (A7c).

    Returns:
        ``{role: d role / dt}`` for the six roles, shapes as ``params``; rows of W_E of tokens
        that never occur are zero.
    """
    check_choice(prediction, "prediction", PREDICTIONS)
    sc = _scalars(params, tables)
    G_Phi, G_S = _scalar_gradients(sc, tables, prediction)
    G_R = G_Phi.T @ sc.W  # [V, d]
    G_B = sc.W.T @ G_S @ sc.W  # [d, d]
    d = sc.W.shape[1]
    root_d = jnp.sqrt(jnp.asarray(d, sc.W.dtype))
    W_U, W_O, W_V = params["W_U"], params["W_O"], params["W_V"]
    dW = G_Phi @ sc.R + G_S @ sc.W @ sc.B.T + G_S.T @ sc.W @ sc.B
    return {
        "W_E": jnp.zeros_like(params["W_E"]).at[tables.tokens].set(dW),
        "W_U": G_R @ (W_O @ W_V).T,
        "W_O": W_U.T @ G_R @ W_V.T,
        "W_V": (W_U @ W_O).T @ G_R,
        "W_Q": params["W_K"] @ G_B / root_d,
        "W_K": params["W_Q"] @ G_B.T / root_d,
    }


@functools.partial(jax.jit, static_argnames=("prediction",))
def embedding_paths(params: dict, tables: AttentionTables, prediction: str = "uniform") -> dict:
    """The W_E part of `attention_field` split by role (eq. A9c), each ``[V, d]``.

    ``value``: through h_s in ``sum_s a_s h_s`` (and the prediction term); ``key``: through
    ``W_K h_s``, rows ``G_S W B^T``; ``query``: through ``W_Q h_L``, rows ``G_S^T W B``
    (theory/attention.md eq. A1: the key path carries B, the query path B^T). They sum to
    ``attention_field(...)["W_E"]``.
    """
    check_choice(prediction, "prediction", PREDICTIONS)
    sc = _scalars(params, tables)
    G_Phi, G_S = _scalar_gradients(sc, tables, prediction)
    rows = {
        "value": G_Phi @ sc.R,
        "key": G_S @ sc.W @ sc.B.T,
        "query": G_S.T @ sc.W @ sc.B,
    }
    zeros = jnp.zeros_like(params["W_E"])
    return {name: zeros.at[tables.tokens].set(r) for name, r in rows.items()}


@functools.partial(jax.jit, static_argnames=("L",))
def first_order_psi(params: dict, tables: AttentionTables, L: int) -> jax.Array:
    """Theorem 3's ``psi^y_a(nu) = E[a_I | y = nu, x_I = a]`` to first order in z, ``[K, Y]``.

    ``L r_a phi^{y;0}_a(nu) psi^y_a(nu) = T0 + T1.S - T2.S`` (eq. A10) with
    ``r_a phi^{y;0}_a(nu) = T0``; entries whose conditioning event has probability 0 are 0.
    """
    T0 = tables.label_bag
    G_P = _value_drive(_scalars(params, tables), tables)
    safe = jnp.where(T0 > 0, T0, 1)
    return jnp.where(T0 > 0, G_P / (L * safe), 0).T


def attention_flow(tables: AttentionTables, prediction: str = "uniform") -> Callable:
    """`attention_field` as an ODE vector field ``(t, params, args) -> dparams`` (six roles)."""
    check_choice(prediction, "prediction", PREDICTIONS)
    return functools.partial(_FIELDS[prediction], tables=tables)


def target_attention(params: dict, tokens, probabilities, target) -> jax.Array:
    """Dataset-mean last-row attention mass on the target positions, exact softmax (eq. A12).

    ``sum_n p_n sum_s a_{ns} target_{ns}`` with ``a = softmax(z)``,
    ``z_s = h_s^T W_K^T W_Q h_L / sqrt(d)`` (no positions). ``target`` bool ``[n, L]`` (for a
    token group, ``isin(tokens, group)``: what `train` records in ``attention_group``).
    ``params`` leaves may carry leading axes (a trajectory ``[T, ...]``); the result has them.
    """
    tokens = jnp.asarray(tokens)
    target = jnp.asarray(target, dtype=bool)

    def one(W_E, W_Q, W_K):
        h = W_E[tokens]  # [n, L, d]
        root_d = jnp.sqrt(jnp.asarray(W_E.shape[1], W_E.dtype))
        z = jnp.einsum("nsk,nk->ns", h @ W_K.T, h[:, -1] @ W_Q.T) / root_d
        a = jax.nn.softmax(z, axis=-1)
        return jnp.asarray(probabilities, W_E.dtype) @ jnp.sum(jnp.where(target, a, 0), axis=-1)

    W_E, W_Q, W_K = params["W_E"], params["W_Q"], params["W_K"]
    for _ in range(W_E.ndim - 2):
        one = jax.vmap(one)
    return jax.jit(one)(W_E, W_Q, W_K)


def uniform_mass(probabilities, target) -> float:
    """The target's attention mass under uniform attention, ``E[#target positions] / L``."""
    return float(np.asarray(probabilities) @ np.asarray(target, dtype=float).mean(axis=1))


class Departure(NamedTuple):
    """The first time a curve leaves its baseline by a relative ``threshold`` (eq. A12).

    Attributes:
        time: linear interpolation between the two samples around the first crossing of
            ``|A - A_0| = threshold * A_0``; NaN when the curve never crosses.
        sign: +1 (rises), -1 (falls) or 0 (no crossing).
        index: the first sample past the threshold (-1 when none).
    """

    time: float
    sign: int
    index: int


def departure_time(
    times, values, baseline: float, threshold: float = DEPARTURE_THRESHOLD
) -> Departure:
    """First crossing of ``|values - baseline| >= threshold * baseline`` (eq. A12).

    ``times, values`` float ``[T]``; non-finite values (after a blow-up) end the search.
    """
    times, values = np.asarray(times, float), np.asarray(values, float)
    finite = np.isfinite(values)
    stop = values.size if finite.all() else int(np.argmin(finite))
    excess = np.abs(values[:stop] - baseline) - threshold * baseline
    past = np.flatnonzero(excess >= 0)
    if past.size == 0:
        return Departure(float("nan"), 0, -1)
    i = int(past[0])
    sign = int(np.sign(values[i] - baseline))
    if i == 0:
        return Departure(float(times[0]), sign, 0)
    e0, e1 = excess[i - 1], excess[i]
    time = times[i - 1] + (times[i] - times[i - 1]) * (-e0) / (e1 - e0)
    return Departure(float(time), sign, i)


class Path(NamedTuple):
    """A descent from an initial condition, measured with the exact model at saved states.

    Attributes:
        ts: ``[T]`` save times (flow time ``lr * step``), finer near the departure.
        attention: ``[T]`` target attention (`target_attention`).
        loss: ``[T]`` cross-entropy of the exact model.
        ok: every saved state is finite.
        departure: eq. A12 on ``attention``.
    """

    ts: np.ndarray
    attention: np.ndarray
    loss: np.ndarray
    ok: bool
    departure: Departure


def descent_path(
    advance: Callable,
    measure: Callable,
    y0,
    *,
    lr: float,
    t_max: float,
    save_every: int,
    baseline: float,
    threshold: float = DEPARTURE_THRESHOLD,
    stop_after: float | None = 2.0,
    refine: int = 10,
) -> Path:
    """Run ``advance`` in chunks, measure every chunk, locate the departure (eq. A12).

    Args:
        advance: ``(y, steps) -> y`` after ``steps`` descent steps of size ``lr``.
        measure: ``y -> (target attention, loss)``.
        lr: the step, so a state after k steps is at time ``k * lr``.
        t_max, save_every: horizon, and steps between saved states.
        baseline: the uniform target mass A_0; ``threshold``: delta of eq. A12.
        stop_after: stop once ``|A - A_0| >= stop_after * threshold * A_0`` (the first-order
            flow blows up after the departure); None runs to ``t_max``. A non-finite state also
            ends the path.
        refine: when a chunk crosses the threshold or goes non-finite, it is redone from its
            start with chunks ``refine`` times shorter (down to one step), so the crossing is
            interpolated on a fine grid.
    """
    total = round(t_max / lr)
    ts, attention, loss = [0.0], *([float(v)] for v in measure(y0))
    y, done, chunk, ok = y0, 0, save_every, True
    while done < total:
        steps = min(chunk, total - done)
        y_new = advance(y, steps)
        finite = bool(all(jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(y_new)))
        a, value = (float(v) for v in measure(y_new)) if finite else (math.nan, math.nan)
        crossed = not finite or abs(a - baseline) >= threshold * baseline
        if crossed and chunk > 1 and chunk == save_every:
            chunk = max(1, chunk // refine)
            continue
        y, done = y_new, done + steps
        ts.append(done * lr)
        attention.append(a)
        loss.append(value)
        if not finite:
            ok = False
            break
        if stop_after is not None and abs(a - baseline) >= stop_after * threshold * baseline:
            break
    ts, attention = np.asarray(ts), np.asarray(attention)
    departure = departure_time(ts, attention, baseline, threshold)
    return Path(ts, attention, np.asarray(loss), ok, departure)


def exact_measure(ds: TokenDataset, target) -> Callable:
    """``params -> (target attention, cross-entropy)`` of the exact attention-only model.

    ``params`` holds W_E, W_U, W_Q, W_K, W_V, W_O (`models.weights`, no positions).
    """
    tokens, labels = jnp.asarray(ds.tokens), jnp.asarray(ds.labels)
    probabilities = jnp.asarray(ds.probabilities)
    target = jnp.asarray(target, dtype=bool)

    @jax.jit
    def measure(params):
        attention = target_attention(params, tokens, probabilities, target)
        logits = _exact_logits(params, tokens)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
        return attention, -jnp.sum(probabilities.astype(logits.dtype) * picked[:, 0])

    return measure


def theory_descent(
    params0: dict,
    ds: TokenDataset,
    target,
    *,
    lr: float,
    t_max: float,
    save_every: int,
    tables: AttentionTables | None = None,
    prediction: str = "softmax",
    threshold: float = DEPARTURE_THRESHOLD,
    stop_after: float | None = 2.0,
    integrator: str = "euler",
) -> Path:
    """Eq. A9 from ``params0``, measured with the exact model (eq. A12).

    ``integrator="euler"``: explicit Euler with step ``lr``, i.e. gradient descent on J at
    learning rate ``lr``. Full-batch GD on the cross-entropy at that lr is the same
    discretisation of the exact flow, so the two paths differ only by the truncation of
    eqs. A6-A7. ``"flow"``: the gradient flow itself (adaptive Tsit5, `ode.integrate`), with
    ``lr`` only the time unit of the save grid. ``params0``: the six roles (other keys are
    ignored); ``target`` bool ``[n, L]``.
    """
    check_choice(prediction, "prediction", PREDICTIONS)
    check_choice(integrator, "integrator", ("euler", "flow"))
    tables = tables or attention_tables(ds, prediction=prediction)
    y0 = {k: jnp.asarray(params0[k]) for k in ROLES}
    rate = jnp.asarray(lr, y0["W_E"].dtype)

    def advance(y, steps):
        if integrator == "euler":
            return _euler_chunk(y, tables, prediction, rate, steps)
        ts = jnp.stack([jnp.zeros_like(rate), steps * rate])
        solution = ode.integrate(
            _FIELDS[prediction], y, ts, tables, rtol=1e-7, atol=1e-10, max_steps=5_000
        )
        return jax.tree.map(lambda v: v[-1], solution.ys)

    return descent_path(
        advance,
        exact_measure(ds, target),
        y0,
        lr=lr,
        t_max=t_max,
        save_every=save_every,
        baseline=uniform_mass(ds.probabilities, target),
        threshold=threshold,
        stop_after=stop_after,
    )


def _exact_logits(params: dict, tokens: jax.Array) -> jax.Array:
    """The attention-only model's last-position logits (`models.AttentionOnly`, no positions)."""
    W_E = params["W_E"]
    h = W_E[tokens]
    root_d = jnp.sqrt(jnp.asarray(W_E.shape[1], W_E.dtype))
    z = jnp.einsum("nsk,nk->ns", h @ params["W_K"].T, h[:, -1] @ params["W_Q"].T) / root_d
    pooled = jnp.einsum("ns,nsd->nd", jax.nn.softmax(z, axis=-1), h)
    return pooled @ (params["W_U"] @ params["W_O"] @ params["W_V"]).T


@functools.partial(jax.jit, static_argnames=("prediction", "steps"))
def _euler_chunk(y: dict, tables: AttentionTables, prediction: str, dt, steps: int) -> dict:
    """``steps`` explicit Euler steps of eq. A9 (gradient descent on J at learning rate dt)."""

    def step(i, y):
        field = attention_field(y, tables, prediction)
        return jax.tree.map(lambda w, f: w + dt * f, y, field)

    return jax.lax.fori_loop(0, steps, step, y)


def _uniform_field(t, y, args=None, *, tables=None):
    return attention_field(y, args if tables is None else tables, "uniform")


def _linear_field(t, y, args=None, *, tables=None):
    return attention_field(y, args if tables is None else tables, "linear")


def _softmax_field(t, y, args=None, *, tables=None):
    return attention_field(y, args if tables is None else tables, "softmax")


#: Module-level vector fields ``(t, y, tables)``: `ode.integrate` compiles once per field and
#: shape, with the tables passed as traced ``args``.
_FIELDS = {"uniform": _uniform_field, "linear": _linear_field, "softmax": _softmax_field}
