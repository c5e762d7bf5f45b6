"""The log-amplitude ledger of the second escape (theory/second_escape.md §8).

On the collapse plateau the deviation of hidden unit ``j`` from the plateau state,
``delta_j = (a_j, b_j) = (W_E[:, j], W_U[:, j]) - P(theta)[:, j]`` (``P`` =
`second_escape.symmetric_part`), is driven by its gated drive (theory/second_escape.md §3)

    ``M_j = sum_n p_n sigma'(h_nj) r_n c_n^T  [V, V]``,  ``r_n = q_n - e_{y_n}``,

``q_n`` the prediction of the plateau state ``P(theta)``, ``c_n`` the token counts and ``h_nj``
the pre-activation of the current weights (the gates follow the deviation). To first order in the
deviation, ``da_j/dt = -M_j^T b_j`` and ``db_j/dt = -M_j a_j``, so

    ``d log|delta_j| / dt = lambda_j = -2 b_j^T M_j a_j / |delta_j|^2 <= s_1(M_j)``,

the realized rate, with equality when ``delta_j`` lies on the top singular pair of ``M_j``
(``a = v_1``, ``b = -u_1``). The ledger reads both at each saved state, the gates re-read there,
and sets the log-gain of the whole deviation, ``log|delta(t)| - log|delta(t_0)|``, beside the
integral of its realized rate (``sum_j |delta_j|^2 lambda_j / |delta|^2``; equal to the gain
while the linear theory holds) and of the band's top rate ``max_j s_1(M_j)`` (what a band with
frozen gates would give).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import activations
from ctx_staircase.second_escape import PlateauProblem, symmetric_part

__all__ = [
    "Ledger",
    "LedgerTotals",
    "gated_drives",
    "ledger",
    "totals",
    "unit_rates",
]


@functools.partial(jax.jit, static_argnames=("activation",))
def _drives(W_E, E_sym, U_sym, tokens, labels, weights, *, activation: str):
    sigma = activations.get(activation)
    hidden_sym = activations.apply(sigma, E_sym[tokens].sum(axis=1))  # [n, d]
    q = jax.nn.softmax(hidden_sym @ U_sym.T, axis=1)  # [n, V]
    residual = weights[:, None] * (q - jax.nn.one_hot(labels, U_sym.shape[0], dtype=q.dtype))
    gates = activations.derivative(sigma, W_E[tokens].sum(axis=1))  # [n, d]
    gated = gates[:, :, None] * residual[:, None, :]  # [n, d, V]
    by_input = sum(  # [V_in, d, V_out]: sum over the samples holding each input id
        jax.ops.segment_sum(gated, tokens[:, i], num_segments=W_E.shape[0])
        for i in range(tokens.shape[1])
    )
    return jnp.transpose(by_input, (1, 2, 0))  # [d, V_out, V_in]


def gated_drives(W_E, W_U, problem: PlateauProblem) -> np.ndarray:
    """``M_j = sum_n p_n sigma'(h_nj) (q_n - e_{y_n}) c_n^T`` for every unit: ``[d, V, V]`` (rows
    the output ids, columns the input ids), ``q_n`` the prediction of the plateau state
    ``P(theta)`` of ``(W_E, W_U) [V, d]``, the gates ``sigma'(h_nj)`` those of ``W_E`` itself.
    Float64."""
    E_sym, U_sym = symmetric_part(W_E, W_U, problem)
    with jax.enable_x64(True):
        return np.asarray(
            _drives(
                jnp.asarray(W_E, jnp.float64),
                jnp.asarray(E_sym),
                jnp.asarray(U_sym),
                jnp.asarray(problem.tokens),
                jnp.asarray(problem.labels),
                jnp.asarray(problem.weights, jnp.float64),
                activation=problem.activation,
            )
        )


def unit_rates(W_E, W_U, problem: PlateauProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(s_1, lambda, |delta|)``, each ``[d]``: the top singular value of every unit's gated drive
    (`gated_drives`), the realized rate ``-2 b_j^T M_j a_j / |delta_j|^2`` of the unit's deviation
    ``delta_j = (a_j, b_j)`` from ``P(theta)`` (0 where the deviation is 0), and ``|delta_j|``."""
    E_sym, U_sym = symmetric_part(W_E, W_U, problem)
    drives = gated_drives(W_E, W_U, problem)
    a = (np.asarray(W_E, np.float64) - E_sym).T  # [d, V]
    b = (np.asarray(W_U, np.float64) - U_sym).T
    size = np.sum(a**2, axis=1) + np.sum(b**2, axis=1)
    quotient = -2.0 * np.einsum("dv,dvw,dw->d", b, drives, a)
    realized = np.divide(quotient, size, out=np.zeros_like(size), where=size > 0)
    return np.linalg.svd(drives, compute_uv=False)[:, 0], realized, np.sqrt(size)


class Ledger(NamedTuple):
    """The log-amplitude ledger of a path of states.

    Attributes:
        ts: ``[T]`` the states' times.
        bound: ``[T, d]`` ``s_1(M_j)``, each unit's top gated-drive rate (frozen gates).
        rate: ``[T, d]`` ``lambda_j``, each unit's realized rate.
        size: ``[T, d]`` ``|delta_j|``, each unit's deviation from the plateau state.
        gain: ``[T]`` ``log|delta(t)| - log|delta(ts[0])|``, what the path did.
        rate_integral: ``[T]`` the integral from ``ts[0]`` of the realized rate of the whole
            deviation, ``sum_j |delta_j|^2 lambda_j / |delta|^2`` (trapezoid over the saves).
        bound_integral: ``[T]`` the integral of the band's top rate ``max_j s_1(M_j)``.
    """

    ts: np.ndarray
    bound: np.ndarray
    rate: np.ndarray
    size: np.ndarray
    gain: np.ndarray
    rate_integral: np.ndarray
    bound_integral: np.ndarray


def _integral(ts, values) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(0.5 * (values[1:] + values[:-1]) * np.diff(ts))])


def ledger(ts, W_E, W_U, problem: PlateauProblem) -> Ledger:
    """The `Ledger` of the states ``W_E, W_U [T, V, d]`` at the increasing times ``ts [T]``."""
    ts = np.asarray(ts, np.float64)
    W_E, W_U = np.asarray(W_E), np.asarray(W_U)
    if ts.ndim != 1 or ts.size < 2 or np.any(np.diff(ts) <= 0):
        raise ValueError(f"ts must be at least two increasing times; got {ts!r}")
    if W_E.shape != W_U.shape or W_E.ndim != 3 or W_E.shape[0] != ts.size:
        raise ValueError(
            f"W_E and W_U must both be [T, V, d] with T = len(ts) = {ts.size}; "
            f"got {W_E.shape} and {W_U.shape}"
        )
    reads = [unit_rates(E, U, problem) for E, U in zip(W_E, W_U, strict=True)]
    bound, rate, size = (np.stack(values) for values in zip(*reads, strict=True))
    total = np.sum(size**2, axis=1)
    if np.any(total == 0):
        raise ValueError("every state must deviate from the plateau state P(theta)")
    whole = np.sum(size**2 * rate, axis=1) / total
    gain = 0.5 * (np.log(total) - np.log(total[0]))
    return Ledger(
        ts, bound, rate, size, gain, _integral(ts, whole), _integral(ts, bound.max(axis=1))
    )


class LedgerTotals(NamedTuple):
    """A `Ledger`'s totals from its first save to the save ``t``: the log-gain of the deviation,
    and the integrals of its realized rate and of the band's top rate."""

    t: float
    gain: float
    realized: float
    band: float


def totals(book: Ledger, t: float) -> LedgerTotals:
    """The `LedgerTotals` of ``book`` at its save nearest ``t``."""
    i = int(np.argmin(np.abs(book.ts - t)))
    return LedgerTotals(
        float(book.ts[i]),
        float(book.gain[i]),
        float(book.rate_integral[i]),
        float(book.bound_integral[i]),
    )
