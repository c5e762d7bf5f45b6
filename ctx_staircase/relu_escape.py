"""The ReLU first escape as a law: the scale-free gated flow and its feedback clock
(theory/relu.md §8).

FFN ``f(X) = W_U relu(W_E^T c)`` (``W_E, W_U [V, d]``), init ``eps Z``, ``eps = d^{-gamma}``.

- **The unit flow** (eq. R7): with the softmax at uniform (eq. R2) the gated field does not see
  the scale, so every gamma lane follows one path ``eps y~(tau)`` from ``Z``, computed once in
  pieces on which the gated system is linear (solved by its Taylor series; each gate counts
  with the fraction of the piece it is open, eq. R10): `unit_flow`, `UnitFlow.at`.
- **The clock** (eq. R8): the softmax's cubic feedback slows lane ``eps`` along the path,
  ``dtau/dt = 1 - eps^2 pi(tau)``, ``pi`` a scalar of the unit flow (`clock`, `lane_clock`).
- **The escape** (eq. R9): lane ``eps`` escapes at ``t_esc = int_0^{tau*} dsigma / (1 - eps^2
  pi(sigma))`` with ``eps^2 S(tau*) = threshold``, ``S`` the escape statistic (C7).

`escape_law_lanes` is the registered theory (a law: the data and the seed's draw ``Z`` alone),
with each lane's weights on the run's grid; `escape_law_times` gives the escape times alone.
Everything is NumPy: nothing is compiled.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse

from ctx_staircase import closed_form, theory
from ctx_staircase.dataset import TokenDataset, merged_bags
from ctx_staircase.internal import check_int, check_real

__all__ = [
    "Clock",
    "GateData",
    "LaneStatistic",
    "UnitFlow",
    "clock",
    "escape_law_bytes",
    "escape_law_lanes",
    "escape_law_times",
    "gate_data",
    "lane_clock",
    "lane_statistic",
    "statistic_and_feedback",
    "unit_flow",
]

#: The length of a piece of the unit flow, in units of ``1 / s_1`` (``s_1`` the top singular
#: value of the drive, the fastest rate of the flow): on a piece the gates count with the fraction
#: of it each is open (eq. R10). Measured in theory/relu.md §8.
_PIECE = 0.5
#: The clock samples ``S`` and ``pi`` this many times per piece (eq. R9).
_NODES_PER_PIECE = 1
#: The Taylor series of a piece stops where its remainder bound falls below this, relative.
_TAYLOR_TOLERANCE = 1e-13
#: ... and the series' extrapolation that predicts the next piece's end (which only places the
#: gates' crossings within that piece) below this.
_PREDICTION_TOLERANCE = 1e-8
#: A piece whose Taylor series needs more terms than this is refused.
_MAX_ORDER = 200


class GateData(NamedTuple):
    """The data of the gated law in sparse form, ``n`` distinct samples of ``L`` tokens: samples
    with the same token counts and label are merged, their weights summed (the gated flow, the
    statistic and the feedback see a sample only through its counts, label and weight).

    Attributes:
        tokens: ``[n, L]`` each token as an index into ``token_ids``, sorted within a sample.
        labels: ``[n]`` each label as an index into ``label_ids``.
        weights: ``p_n [n]``, summing to one.
        vocab_size: ``V``, the ids the softmax ranges over.
        token_ids: ``[V_t]`` the ids that occur as tokens (the rows of ``W_E`` that move).
        label_ids: ``[V_y]`` the ids that occur as labels.
        counts: ``[n, V_t]`` sparse token counts ``c_n``.
        pairs: ``[V_y V_t, n]`` sparse, ``p_n c_nw`` at row ``(y_n, w)``: ``pairs @ G`` is the
            gated count table ``H_j[y, w] = sum_n G_nj p_n 1[y_n = y] c_nw`` of every coordinate.
        label_weights: ``[V_y, n]`` sparse, ``p_n`` at row ``y_n``.
    """

    tokens: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    vocab_size: int
    token_ids: np.ndarray
    label_ids: np.ndarray
    counts: scipy.sparse.csr_matrix
    pairs: scipy.sparse.csr_matrix
    label_weights: scipy.sparse.csr_matrix


def gate_data(ds: TokenDataset, vocab_size: int | None = None) -> GateData:
    """`GateData` of ``ds`` over ``vocab_size`` ids (default: the data's vocabulary)."""
    V = ds.vocab_size if vocab_size is None else int(vocab_size)
    if V < ds.vocab_size:
        raise ValueError(f"vocab_size must be >= the data's vocabulary ({ds.vocab_size}); got {V}")
    tokens, labels = np.asarray(ds.tokens), np.asarray(ds.labels)
    L = tokens.shape[1]
    token_ids, token_index = np.unique(tokens, return_inverse=True)
    label_ids, label_index = np.unique(labels, return_inverse=True)
    token_index, label_index, p = merged_bags(
        token_index.reshape(tokens.shape), label_index, ds.weights
    )
    p = p / p.sum()
    n = len(p)
    Vt, Vy = len(token_ids), len(label_ids)
    rows = np.repeat(np.arange(n), L)
    counts = scipy.sparse.csr_matrix((np.ones(n * L), (rows, token_index.ravel())), shape=(n, Vt))
    pair_rows = (label_index[:, None] * Vt + token_index).ravel()
    pairs = scipy.sparse.csr_matrix((np.repeat(p, L), (pair_rows, rows)), shape=(Vy * Vt, n))
    label_weights = scipy.sparse.csr_matrix((p, (label_index, np.arange(n))), shape=(Vy, n))
    return GateData(
        token_index, label_index, p, V, token_ids, label_ids, counts, pairs, label_weights
    )


def _hidden(data: GateData, rows: np.ndarray) -> np.ndarray:
    """The hidden units ``h_nj = c_n . a_j``, ``[n, d]``, of the token rows ``[V_t, d]``."""
    return data.counts @ rows


def _drive(data: GateData, gates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gated count tables ``H [d, V_y, V_t]`` of gate weights ``gates [n, d]`` in [0, 1],
    and their transposes ``[d, V_t, V_y]``."""
    table = data.pairs @ gates  # [V_y V_t, d]
    Vy, Vt = len(data.label_ids), len(data.token_ids)
    H = np.ascontiguousarray(table.T).reshape(-1, Vy, Vt)
    return H, np.ascontiguousarray(H.transpose(0, 2, 1))


def _series(data: GateData, drive, W_E, W_U, reach: float, predict: float = 0.0):
    """The Taylor vectors ``A^k y / k!`` of ``y = (W_E, W_U)``, ``[V, d]`` each, under the gated
    generator ``A`` of ``drive`` (eq. R3), up to the order at which ``reach^k |A^k y / k!|``
    falls below `_TAYLOR_TOLERANCE` times ``|y|`` (max norms) and ``predict^k |A^k y / k!|``
    below `_PREDICTION_TOLERANCE` times it, as rows of ``W_E`` and ``W_U``:
    ``[K+1, V, d]`` each.

    ``A (a_j, b_j) = (M_j^T b_j, M_j a_j)`` with ``M_j = (I - 11^T / V) E_y H_j``: ``M_j a_j``
    is ``H_j a_j`` on the label ids less its sum over ``V``, and ``M_j^T b_j`` is ``H_j^T`` of
    ``b_j``'s label entries less the mean of ``b_j``. So from the first term on, ``b`` is kept as
    its label entries ``beta [d, V_y]`` and a shift ``c [d]`` of every entry, which ``M^T``
    does not see.
    """
    H, H_T = drive
    V = data.vocab_size
    a = W_E[data.token_ids].T  # [d, V_t], coordinate-major for the drives
    terms_a, betas, shifts = [a], [], []
    centred = (W_U[data.label_ids] - W_U.mean(axis=0)).T
    size = max(np.abs(W_E).max(), np.abs(W_U).max())
    k, last = 0, size
    while (
        k < 4
        or max(reach**k * last / _TAYLOR_TOLERANCE, predict**k * last / _PREDICTION_TOLERANCE)
        > size
    ):
        if k == _MAX_ORDER:
            raise ValueError(f"a piece's Taylor series did not converge in {k} terms")
        k += 1
        Ha = np.matmul(H, terms_a[-1][..., None])[..., 0] / k  # [d, V_y]
        terms_a.append(np.matmul(H_T, centred[..., None])[..., 0] / k)
        betas.append(Ha)
        shifts.append(-Ha.sum(axis=1) / V)
        centred = Ha + shifts[-1][:, None]
        last = max(np.abs(terms_a[-1]).max(), np.abs(Ha).max() * 2)
    rows_a = np.zeros((k + 1, *W_E.shape))
    rows_a[0] = W_E
    rows_a[1:, data.token_ids] = np.stack(terms_a[1:]).transpose(0, 2, 1)
    rows_b = np.repeat(np.stack(shifts)[:, None, :], V, axis=1)  # [K, V, d]
    rows_b[:, data.label_ids] += np.stack(betas).transpose(0, 2, 1)
    return rows_a, np.concatenate([W_U[None], rows_b])


def _powers(tau: np.ndarray, K: int) -> np.ndarray:
    """``tau^k`` for ``k = 0..K``: ``[m, K+1]``."""
    return np.asarray(tau, np.float64)[:, None] ** np.arange(K + 1)


def _fractions(h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
    """The fraction of a piece each gate is open when ``h`` runs linearly from ``h0`` to ``h1``."""
    open0 = h0 > 0
    fractions = open0.astype(np.float64)
    flips = np.nonzero(open0 != (h1 > 0))
    start, end = h0[flips], h1[flips]
    # open at the start: open until h crosses 0, h0 / (h0 - h1); closed: open after it
    fractions[flips] = np.where(start > 0, start, -end) / (start - end)
    return fractions


class UnitFlow(NamedTuple):
    """The uniform gated flow from the unit draw ``Z`` (eq. R7), as exact pieces.

    Piece ``i`` covers ``[starts[i], starts[i+1]]``; on it the state is
    ``sum_k (t - starts[i])^k terms[i][k]``.

    Attributes:
        data: the `GateData`.
        starts: ``[P+1]`` the piece boundaries, from 0.
        terms_a: ``P`` arrays ``[K_i+1, V, d]`` of ``W_E`` (the rows of ids that are not tokens
            never move: their terms past the first are 0).
        terms_b: ``P`` arrays ``[K_i+1, V, d]`` of ``W_U``.
        S, pi: ``[P+1]`` the escape statistic and the feedback rate at the piece boundaries
            (`statistic_and_feedback`).
    """

    data: GateData
    starts: np.ndarray
    terms_a: tuple
    terms_b: tuple
    S: np.ndarray
    pi: np.ndarray

    @property
    def end(self) -> float:
        return float(self.starts[-1])

    def at(self, tau, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """``scale`` times ``(W_E, W_U)``, each ``[m, V, d]``, at times ``tau [m]`` (clamped to
        ``[0, end]``)."""
        times = np.clip(np.asarray(tau, np.float64), 0.0, self.end)
        tau, repeats = np.unique(times, return_inverse=True)  # a held lane repeats its end
        piece = np.searchsorted(self.starts, tau, side="right") - 1
        piece = np.clip(piece, 0, len(self.terms_a) - 1)
        shape = self.terms_a[0].shape[1:]
        W_E, W_U = np.empty((len(tau), np.prod(shape))), np.empty((len(tau), np.prod(shape)))
        bounds = np.searchsorted(piece, np.arange(len(self.terms_a) + 1))  # tau is sorted
        for i in np.unique(piece):
            lo, hi = bounds[i], bounds[i + 1]
            powers = scale * _powers(tau[lo:hi] - self.starts[i], len(self.terms_a[i]) - 1)
            np.matmul(powers, self.terms_a[i].reshape(len(powers[0]), -1), out=W_E[lo:hi])
            np.matmul(powers, self.terms_b[i].reshape(len(powers[0]), -1), out=W_U[lo:hi])
        W_E, W_U = W_E.reshape(-1, *shape), W_U.reshape(-1, *shape)
        if np.array_equal(tau, times):
            return W_E, W_U
        return W_E[repeats], W_U[repeats]


def unit_flow(
    data: GateData, W_E, W_U, end: float, piece: float, stop: float | None = None
) -> UnitFlow:
    """The uniform gated flow (eq. R2) from ``(W_E, W_U) [V, d]`` on ``[0, end]``, in pieces of
    ``piece`` time units (eq. R10), with the escape statistic ``S`` and the feedback rate ``pi`` at
    every piece boundary; with ``stop``, it ends after the first piece at whose end ``S`` reaches
    ``stop``.

    On each piece the gates count with the fraction of the piece each is open, read from the
    hidden units at its start and at its end as the previous piece's generator predicts it (the
    first piece: the gates at ``t = 0``). The piece is the exact solution of that linear system,
    ``exp(tau A) y``, by its Taylor series, kept long enough that its extrapolation to twice the
    piece also predicts the next piece's end.
    """
    check_real(end, "end", low=0)
    check_real(piece, "piece", low=0, low_open=True)
    check_real(stop, "stop", low=0, low_open=True, none_ok=True)
    W_E, W_U = np.asarray(W_E, np.float64), np.asarray(W_U, np.float64)
    starts, terms_a, terms_b = [0.0], [], []
    S, pi = statistic_and_feedback(data, W_E[None, data.token_ids], W_U[None])
    statistic, rate = [S[0]], [pi[0]]
    h = _hidden(data, W_E[data.token_ids])
    first = min(piece, end)
    series = _series(data, _drive(data, (h > 0).astype(np.float64)), W_E, W_U, first)[0]
    powers = _powers(np.asarray([first]), len(series) - 1)[0]
    predicted = np.tensordot(powers, series[:, data.token_ids], axes=1)
    t = 0.0
    while t < end or not terms_a:
        tau = min(piece, end - t)
        drive = _drive(data, _fractions(h, _hidden(data, predicted)))
        series_a, series_b = _series(data, drive, W_E, W_U, tau, predict=2 * tau)
        terms_a.append(series_a)
        terms_b.append(series_b)
        powers = _powers(np.asarray([tau, 2 * tau]), len(series_a) - 1)
        W_E, W_U = np.tensordot(powers[0], series_a, axes=1), np.tensordot(powers[0], series_b, 1)
        predicted = np.tensordot(powers[1], series_a[:, data.token_ids], axes=1)
        t += tau
        starts.append(t)
        h = _hidden(data, W_E[data.token_ids])
        S, pi = statistic_and_feedback(data, W_E[None, data.token_ids], W_U[None])
        statistic.append(S[0])
        rate.append(pi[0])
        if stop is not None and S[0] >= stop:
            break
    return UnitFlow(
        data,
        np.asarray(starts),
        tuple(terms_a),
        tuple(terms_b),
        np.asarray(statistic),
        np.asarray(rate),
    )


def _statistic(h: np.ndarray, W_U: np.ndarray) -> float:
    """The escape statistic (C7) of hidden units ``h [n, d]`` and ``W_U [V, d]``."""
    return float(np.abs(np.maximum(h, 0.0) @ (W_U - W_U.mean(axis=0)).T).max())


def statistic_and_feedback(data: GateData, a: np.ndarray, b: np.ndarray):
    """At unit-flow states, token rows of ``W_E`` ``a [m, V_t, d]`` and ``W_U`` ``b [m, V, d]``:
    the escape statistic ``S = max_n max_nu |f_nu - mean f|`` (C7) and the feedback rate
    ``pi = -<y', F(y)> / |y'|^2`` (eq. R8), each ``[m]``.

    ``y'`` is the uniform gated field at the state's own gates; ``F`` the linear softmax feedback
    (eq. R5), ``r_n = -p_n (f_n - mean f_n) / V`` put into (R1).
    """
    V, p = data.vocab_size, data.weights
    S, pi = np.empty(len(a)), np.empty(len(a))
    for i in range(len(a)):
        z = np.maximum(_hidden(data, a[i]), 0.0)  # [n, d]
        gates = z > 0
        centred_b = b[i] - b[i].mean(axis=0)  # [V, d]
        logits = z @ centred_b.T  # [n, V], centred
        S[i] = np.abs(logits).max()
        # the uniform field y' = (v_a [V_t, d], v_b [V, d]), eq. R2
        v_b = np.repeat(-(p @ z)[None] / V, V, axis=0)
        v_b[data.label_ids] += data.label_weights @ z
        u = gates * (centred_b[data.label_ids[data.labels]] * p[:, None])  # [n, d]
        v_a = data.counts.T @ u
        # <y', F> with F_b = r^T z, F_a = C^T (g * (r W_U)), r = -p (centred logits) / V (R5):
        # <y', F> = -sum_n p_n [z_n . (l_n v_b) + w_n . (l_n W_U)] / V, l_n the centred logits
        w = gates * _hidden(data, v_a)  # the hidden units of v_a, gated
        weighted = logits * p[:, None]
        overlap = float((z * (weighted @ v_b)).sum() + (w * (weighted @ b[i])).sum())
        speed = float((v_a * v_a).sum() + (v_b * v_b).sum())
        pi[i] = overlap / (V * speed)
    return S, pi


class Clock(NamedTuple):
    """The unit flow's escape statistic and feedback rate at nodes ``tau [Q]``: ``S [Q]`` and
    ``pi [Q]`` (eq. R9); `lane_clock` turns them into each lane's time."""

    tau: np.ndarray
    S: np.ndarray
    pi: np.ndarray

    def statistic(self, tau) -> np.ndarray:
        """``S`` at ``tau``, log-linear between the nodes (S > 0)."""
        return np.exp(np.interp(tau, self.tau, np.log(self.S)))

    def rate(self, tau) -> np.ndarray:
        """``pi`` at ``tau``: ``pi / S`` linear and ``S`` log-linear between the nodes."""
        return np.interp(tau, self.tau, self.pi / self.S) * self.statistic(tau)


def clock(flow: UnitFlow, per_piece: int = _NODES_PER_PIECE) -> Clock:
    """`Clock` of ``flow`` at ``per_piece`` evenly spaced nodes per piece (the piece boundaries,
    where the flow has them already, and ``per_piece - 1`` more inside each piece)."""
    check_int(per_piece, "per_piece", low=1)
    starts = flow.starts
    fractions = np.arange(per_piece) / per_piece
    tau = np.append((starts[:-1, None] + np.diff(starts)[:, None] * fractions).ravel(), starts[-1])
    S, pi = np.empty(len(tau)), np.empty(len(tau))
    boundary = np.arange(0, len(tau), per_piece)
    S[boundary], pi[boundary] = flow.S, flow.pi
    inside = np.setdiff1d(np.arange(len(tau)), boundary)
    if inside.size:
        W_E, W_U = flow.at(tau[inside])
        S[inside], pi[inside] = statistic_and_feedback(flow.data, W_E[:, flow.data.token_ids], W_U)
    return Clock(tau, S, pi)


def lane_clock(nodes: Clock, eps: float, ts, substeps: int = 16) -> np.ndarray:
    """Lane ``eps``'s unit-flow time ``tau(t)`` at ``ts [T]``:
    ``t(tau) = int_0^tau dsigma / (1 - eps^2 pi(sigma))`` (eq. R9), by the trapezoid rule on
    ``substeps`` points per node interval, inverted by interpolation.

    Where ``eps^2 pi`` reaches 1 the feedback stops the lane, and ``tau`` stays there; past the
    last node ``tau`` is held at it.
    """
    check_int(substeps, "substeps", low=1)
    fine = np.linspace(0.0, nodes.tau[-1], (len(nodes.tau) - 1) * substeps + 1)
    speed = 1.0 - eps**2 * nodes.rate(fine)
    stalled = np.flatnonzero(speed <= 0.0)
    last = int(stalled[0]) if stalled.size else len(fine)
    slowness = 1.0 / speed[:last]
    steps = np.diff(fine[:last]) * (slowness[1:] + slowness[:-1]) / 2
    elapsed = np.concatenate([[0.0], np.cumsum(steps)])
    return np.interp(np.asarray(ts, np.float64), elapsed, fine[:last])


class LaneStatistic(NamedTuple):
    """One lane's unit-flow time and escape statistic on a time grid (eq. R9).

    Attributes:
        tau: ``[T]`` the lane's unit-flow time at each grid time (`lane_clock`).
        statistic: ``[T]`` the lane's escape statistic ``eps^2 S(tau)`` (C7): exact at the two
            grid times around its crossing of the threshold and at the clock's nodes,
            log-linear between nodes elsewhere.
        crossed: the index of the first grid time at or over the threshold, or -1.
        status: `theory.SolverStatus`: escaped (with ``tau`` and the largest ``eps^2 pi``), or
            why not.
    """

    tau: np.ndarray
    statistic: np.ndarray
    crossed: int
    status: theory.SolverStatus


def lane_statistic(flow: UnitFlow, nodes: Clock, eps: float, ts, threshold: float) -> LaneStatistic:
    """Lane ``eps``'s `LaneStatistic` on the grid ``ts [T]``: its clock, its statistic and its
    crossing of ``threshold``, without its weights."""
    ts = np.asarray(ts, np.float64)
    tau = lane_clock(nodes, eps, ts)
    target = threshold / eps**2
    scale = nodes.statistic(tau)  # the unit statistic between nodes, exact where it decides
    exact: dict[int, float] = {}

    def exact_at(i: int) -> float:
        if i not in exact:
            W_E, W_U = flow.at(tau[i : i + 1])
            exact[i] = _statistic(_hidden(flow.data, W_E[0, flow.data.token_ids]), W_U[0])
            scale[i] = exact[i]
        return exact[i]

    above = np.flatnonzero(scale >= target)
    i = int(above[0]) if above.size else len(ts)
    if above.size:  # the first snapshot at or over the threshold, by the exact statistic
        while i < len(ts) and exact_at(i) < target:
            i += 1
        while i > 0 and exact_at(i - 1) >= target:
            i -= 1
    crossed = i < len(ts)
    reached = tau[i] if crossed else tau[-1]
    slowing = eps**2 * float(nodes.rate(np.linspace(0.0, reached, 64)).max())
    if crossed:
        status = theory.SolverStatus(
            True, f"escape at tau = {reached:.2f}, eps^2 pi <= {slowing:.2f}"
        )
    else:
        why = "stopped by the feedback" if slowing >= 1.0 else "no escape within the unit flow"
        status = theory.SolverStatus(False, f"{why} (largest eps^2 pi {slowing:.3f})")
    return LaneStatistic(tau, eps**2 * scale, i if crossed else -1, status)


def _law(problem: theory.Problem) -> tuple[UnitFlow, list[LaneStatistic]]:
    """The unit flow of ``problem``, run until its latest lane escapes, and every lane's
    `LaneStatistic` on the run's grid."""
    ts = np.asarray(problem.ts, np.float64)
    W_E, W_U = problem.unit["W_E"], problem.unit["W_U"]
    data = gate_data(problem.ds, W_E.shape[0])
    eps = problem.d ** -np.asarray(problem.setting.gammas, np.float64)
    stop = problem.threshold / float(eps.min()) ** 2
    flow = unit_flow(data, W_E, W_U, float(ts[-1]), _PIECE / problem.top, stop=stop)
    nodes = clock(flow, _NODES_PER_PIECE)
    return flow, [lane_statistic(flow, nodes, float(e), ts, problem.threshold) for e in eps]


def escape_law_times(problem: theory.Problem) -> np.ndarray:
    """Every lane's escape time ``[G]`` by the ReLU escape law (eq. R9), NaN where a lane does not
    escape within the grid: the crossing of its statistic as the comparison reads it from
    `escape_law_lanes` (`closed_form.crossing_time`, log-linear between grid times), with no
    weights evaluated."""
    ts = np.asarray(problem.ts, np.float64)
    _, lanes = _law(problem)
    threshold = problem.threshold
    return np.asarray([closed_form.crossing_time(ts, lane.statistic, threshold) for lane in lanes])


def escape_law_lanes(problem: theory.Problem) -> theory.TheoryLanes:
    """The ReLU escape law (eq. R9) of every lane of ``problem``: one unit flow from the seed's
    draw ``Z``, run until the latest lane escapes, one clock along it, and per lane a quadrature.

    Each lane's weights are ``eps y~(tau(t))`` on the run's grid, with its `LaneStatistic`; past
    the unit flow's end the lane holds the state it escaped with.
    """
    ts = np.asarray(problem.ts, np.float64)
    flow, lanes = _law(problem)
    eps = problem.d ** -np.asarray(problem.setting.gammas, np.float64)
    trajectories = []
    for e, lane in zip(eps, lanes, strict=True):
        W_E, W_U = flow.at(lane.tau, float(e))
        trajectories.append(theory.WeightTrajectory(ts, W_E, W_U, lane.statistic))
    return theory.TheoryLanes(tuple(trajectories), tuple(lane.status for lane in lanes))


def escape_law_bytes(size: theory.Size) -> int:
    """Peak bytes of `escape_law_lanes`: its trajectories, the unit flow's Taylor pieces (32
    pieces of 24 terms of ``(W_E, W_U)``: at gamma = 1.4 and d = 128 the latest escape comes
    after about 10 pieces of ``0.5 / s_1``) and the statistic's ``[n, V]`` and ``[n, d]``
    temporaries."""
    pieces = 32 * 24 * 2 * size.V * size.d
    return size.trajectory_bytes + 8 * (pieces + 4 * size.n * (size.V + size.d))
