"""ReLU's gated linear phase: early W_E and W_U dynamics from the initial weights (theory/relu.md).

FFN ``f(X) = W_U relu(h)``, ``h = W_E^T c`` (``c [V]`` the token counts of the sequence; row
convention, ``W_E, W_U [V, d]``). ReLU is exactly ``relu(h) = g * h`` with the gate
``g = 1[h > 0]``, so with the softmax linearised at uniform the gradient flow splits into ``d``
coordinate systems that do not talk to each other except through the softmax feedback:

- coordinate ``j`` of ``W_E`` and ``W_U``, ``(a_j, b_j) [V] x [V]``, obeys ``da_j/dt = M_j^T b_j``,
  ``db_j/dt = M_j a_j`` with the **gated drive** ``M_j = sum_n p_n g_nj (e_{y_n} - 1/V) c_n^T``
  (eq. R3): the drive matrix of the C_1 = 1 linear theory restricted to the samples whose
  pre-activation ``h_nj`` is positive;
- the gates follow the weights, ``g_nj = 1[c_n . a_j > 0]``: they flip during the plateau.

So a coordinate whose gates open grows at the *full* rate (the top singular value of its gated
drive, up to ``s_1(M)``), one whose gates close freezes, and no single averaged rate (the mean
slope ``C_1 = 1/2``) describes both: that is why the ``C_1 = 1/2`` theories escape about twice too
late. `gated_flow` integrates this law as an ODE (``prediction="linear"`` keeps the linear
softmax feedback of Remark 1, ``"uniform"`` drops it); `frozen_gate_solution` solves it in closed
form with the gates frozen at their initial values (eq. R4), exact until the first gate flips;
`coordinate_rates` gives each coordinate's initial and fully-open growth rates (eq. R6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import ode, theory
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_choice

__all__ = [
    "PREDICTIONS",
    "RELU_STEP",
    "CoordinateRates",
    "GatedProblem",
    "coordinate_rates",
    "frozen_gate_lanes",
    "frozen_gate_solution",
    "gated_drive",
    "gated_field",
    "gated_flow",
    "gated_flow_bytes",
    "gated_flow_lanes",
    "gated_problem",
    "logit_scale",
]

#: The softmax terms the gated law keeps: its uniform part only, or with its linear feedback.
PREDICTIONS = ("uniform", "linear")


class GatedProblem(NamedTuple):
    """The data of the gated law, ``n`` samples, ``V`` vocabulary ids.

    Attributes:
        counts: ``c_n [n, V]``, token counts of each sample (``sum_v c_nv = L``).
        drive: ``p_n (e_{y_n} - 1/V) [n, V]``: the label residual at uniform prediction, weighted
            by each sample's probability ``p_n`` (``sum_n p_n = 1``).
        weights: ``p_n [n]``.
    """

    counts: jax.Array
    drive: jax.Array
    weights: jax.Array

    @property
    def vocab_size(self) -> int:
        return int(self.counts.shape[-1])


def gated_problem(ds: TokenDataset, vocab_size: int | None = None, dtype=None) -> GatedProblem:
    """`GatedProblem` of ``ds`` over ``vocab_size`` ids (default: the data's vocabulary; a wider
    model vocabulary adds ids that are never labels, and the softmax ranges over them too)."""
    V = ds.vocab_size if vocab_size is None else int(vocab_size)
    if V < ds.vocab_size:
        raise ValueError(f"vocab_size must be >= the data's vocabulary ({ds.vocab_size}); got {V}")
    dtype = dtype or jnp.result_type(float)
    p = np.asarray(ds.weights, dtype=np.float64)
    p = p / p.sum()
    counts = np.zeros((ds.n, V))
    np.add.at(counts, (np.repeat(np.arange(ds.n), ds.L), np.asarray(ds.tokens).ravel()), 1.0)
    residual = -np.full((ds.n, V), 1.0 / V)
    residual[np.arange(ds.n), np.asarray(ds.labels)] += 1.0
    return GatedProblem(
        jnp.asarray(counts, dtype), jnp.asarray(p[:, None] * residual, dtype), jnp.asarray(p, dtype)
    )


def gated_drive(problem: GatedProblem, gates) -> jax.Array:
    """The gated drive matrices ``M_j = sum_n p_n g_nj (e_{y_n} - 1/V) c_n^T`` (eq. R3).

    ``gates [n, d]`` (bool or 0/1) -> float64 ``[d, V, V]`` (NumPy: an analysis, not the
    field). All gates open gives ``d`` copies of the C_1 = 1 drive matrix `flows.drive_matrix`
    (eq. C1).
    """
    g = np.asarray(gates, np.float64)
    drive, counts = np.asarray(problem.drive, np.float64), np.asarray(problem.counts, np.float64)
    return np.einsum("nj,nv,nw->jvw", g, drive, counts)


def gated_field(problem: GatedProblem, W_E, W_U, prediction: str = "linear"):
    """The gated flow ``(dW_E, dW_U)``, each ``[V, d]`` (eq. R2, with R5 for ``"linear"``).

    ``h_n = W_E^T c_n``, ``g_n = 1[h_n > 0]``; with the residual ``r_n = p_n (e_{y_n} - 1/V)``
    (``"uniform"``) or ``r_n = p_n (e_{y_n} - 1/V - H f_n / V)``, ``f_n = W_U (g_n * h_n)``,
    ``H = I - 11^T/V`` (``"linear"``):

        dW_U/dt = sum_n r_n (g_n * h_n)^T,      dW_E/dt = sum_n c_n (g_n * (W_U^T r_n))^T.

    This is the exact ReLU gradient flow with the softmax replaced by its expansion at uniform.
    """
    h = problem.counts @ W_E  # [n, d]
    gate = (h > 0).astype(h.dtype)
    hidden = gate * h
    residual = problem.drive
    if prediction == "linear":
        logits = hidden @ W_U.T  # [n, V]
        centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
        residual = residual - problem.weights[:, None] * centred / problem.vocab_size
    return problem.counts.T @ ((residual @ W_U) * gate), residual.T @ hidden


def gated_flow(problem: GatedProblem, prediction: str = "linear") -> Callable:
    """The vector field ``(t, y, args) -> dy`` of `gated_field` for `ode.integrate`, with
    ``y = {"W_E": [V, d], "W_U": [V, d]}`` (``args`` unused)."""
    check_choice(prediction, "prediction", PREDICTIONS)

    def vector_field(t, y, args):
        dW_E, dW_U = gated_field(problem, y["W_E"], y["W_U"], prediction)
        return {"W_E": dW_E, "W_U": dW_U}

    return vector_field


def logit_scale(W_E, W_U, tokens) -> jax.Array:
    """The escape statistic (C7) of the ReLU FFN: ``max_n max_nu |f_nu - mean_nu f|`` with
    ``f = W_U relu(sum_i w_{x_i})``; ``W_E, W_U [..., V, d]`` -> ``[...]``."""
    h = jnp.sum(jnp.take(W_E, jnp.asarray(tokens), axis=-2), axis=-2)  # [..., n, d]
    logits = jnp.einsum("...nd,...vd->...nv", jax.nn.relu(h), W_U)
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
    return jnp.max(jnp.abs(centred), axis=(-2, -1))


def frozen_gate_solution(problem: GatedProblem, W_E0, W_U0) -> Callable:
    """The gated law with the uniform softmax and the gates frozen at ``t = 0`` (eq. R4).

    Per coordinate ``j``, thin SVD ``M_j = U_j diag(s_j) V_j^T`` of the initial gated drive; then

        a_j(t) = a_j0 + V_j[(cosh(s_j t) - 1) V_j^T a_j0 + sinh(s_j t) U_j^T b_j0],
        b_j(t) = b_j0 + U_j[(cosh(s_j t) - 1) U_j^T b_j0 + sinh(s_j t) V_j^T a_j0],

    the exact solution of `gated_flow` (``"uniform"``) until the first gate flips. Returns
    ``solution(ts [T]) -> (W_E [T, V, d], W_U [T, V, d])``.
    """
    W_E0, W_U0 = np.asarray(W_E0, np.float64), np.asarray(W_U0, np.float64)
    gates = np.asarray(problem.counts) @ W_E0 > 0
    M = gated_drive(problem, gates)
    U, s, Vt = np.linalg.svd(M)  # [d, V, V], [d, V], [d, V, V]
    a0 = np.einsum("jkv,vj->jk", Vt, W_E0)  # V_j^T a_j0, [d, V]
    b0 = np.einsum("jvk,vj->jk", U, W_U0)  # U_j^T b_j0

    def solution(ts):
        st = np.asarray(ts, np.float64)[:, None, None] * s  # [T, d, V]
        grow, cross = np.cosh(st) - 1.0, np.sinh(st)
        dA = np.einsum("jkv,tjk->tvj", Vt, grow * a0 + cross * b0)
        dB = np.einsum("jvk,tjk->tvj", U, grow * b0 + cross * a0)
        return W_E0 + dA, W_U0 + dB

    return solution


class CoordinateRates(NamedTuple):
    """Per coordinate ``j``, the growth rates of the gated law (eq. R6), ``[d]`` each.

    Attributes:
        initial: ``s_1(M_j(0))``, the top singular value of the drive under the initial gates.
        open: ``s_1(M)``, the rate with every gate of the coordinate open (the C_1 = 1 rate).
        open_fraction: the fraction of samples (by weight) whose gate is open at ``t = 0``.
    """

    initial: np.ndarray
    open: float
    open_fraction: np.ndarray


def coordinate_rates(problem: GatedProblem, W_E0) -> CoordinateRates:
    """`CoordinateRates` of the initial embedding ``W_E0 [V, d]`` (eq. R6)."""
    gates = np.asarray(problem.counts, np.float64) @ np.asarray(W_E0, np.float64) > 0  # [n, d]
    M = gated_drive(problem, gates)
    full = gated_drive(problem, np.ones((gates.shape[0], 1)))[0]
    return CoordinateRates(
        initial=np.linalg.svd(M, compute_uv=False)[:, 0],
        open=float(np.linalg.svd(full, compute_uv=False)[0]),
        open_fraction=np.asarray(problem.weights, np.float64) @ gates,
    )


# --------------------------------------------------------------------------------------------
# The gated law as theories of a run (`theory.Problem`), with the ReLU escape statistic

#: The RK4 step (``t`` units) of the gated flow. Its field jumps where a gate flips, which
#: stalls an adaptive solver (it shrinks its step at every jump); a fixed step is first order
#: there, yet 0.05 and 0.0125 give the same escape to 1e-5 relative (theory/relu.md §4).
RELU_STEP = 0.05
#: RK4 holds its four stages and the state, in copies of ``(W_E, W_U)``.
_RK4_COPIES = 5


def gated_flow_lanes(problem: theory.Problem) -> theory.TheoryLanes:
    """The gated flow with the linear softmax feedback (eq. R5) of every lane of ``problem``,
    by fixed-step RK4 (`RELU_STEP`; the field stops past `theory.BLOW_UP`)."""
    gated = gated_problem(problem.ds, dtype=jnp.float64)
    field = theory.frozen_past(gated_flow(gated, "linear"), cap=theory.BLOW_UP)  # RK4 has no events
    grid, tokens = jnp.asarray(problem.ts), jnp.asarray(problem.ds.tokens)

    def solve(y):
        solution = ode.rk4(field, y, grid, max_step=RELU_STEP)
        scale = logit_scale(solution.ys["W_E"], solution.ys["W_U"], tokens)
        return solution.ys, scale, solution.ok

    y0 = {k: jnp.asarray(v) for k, v in problem.y0.items()}
    ys, scales, ok = jax.device_get(problem.map_lanes(solve, y0))
    flow = (
        theory.WeightTrajectory(problem.ts, ys["W_E"][i], ys["W_U"][i], scales[i])
        for i in range(len(ok))
    )
    return theory.TheoryLanes(
        tuple(flow), tuple(theory.SolverStatus(bool(good), "fixed-step RK4") for good in ok)
    )


def gated_flow_bytes(size: theory.Size) -> int:
    """Peak bytes of `gated_flow_lanes`: its trajectories, and per lane in flight RK4's copies
    of the weights and the gated hidden states ``[n, d]``."""
    working = _RK4_COPIES * 2 * size.V * size.d + size.n * size.d
    return size.trajectory_bytes + 8 * min(size.G, size.in_flight) * working


def frozen_gate_lanes(problem: theory.Problem) -> theory.TheoryLanes:
    """The frozen-gate closed form (eq. R4) of every lane of ``problem``, with the ReLU escape
    statistic (`logit_scale`)."""
    gated = gated_problem(problem.ds, dtype=jnp.float64)
    tokens = jnp.asarray(problem.ds.tokens)
    trajectories = []
    for W_E0, W_U0 in zip(problem.y0["W_E"], problem.y0["W_U"], strict=True):
        W_E, W_U = frozen_gate_solution(gated, W_E0, W_U0)(problem.ts)
        scale = np.asarray(logit_scale(W_E, W_U, tokens))
        trajectories.append(theory.WeightTrajectory(problem.ts, W_E, W_U, scale))
    return theory.TheoryLanes(tuple(trajectories))
