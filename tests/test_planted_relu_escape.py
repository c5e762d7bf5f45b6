"""Properties of the ReLU escape law (`relu_escape`) that its other tests reach only in their
easiest case: the sample weights normalized, several states at once, several clock nodes per
piece of unequal pieces, and the lane clock's own quadrature."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_weights, tiny_dataset

from ctx_staircase import relu, relu_escape
from ctx_staircase.dataset import TokenDataset


def _flow(end_over_top: float = 1.3, piece_over_top: float = 0.5):
    """The unit flow of the tiny problem (V = 8, d = 3) whose gates flip, over ``end`` in pieces
    of ``piece`` (in units of 1 / s_1): 1.3 / 0.5 gives pieces 0.5, 0.5 and a short 0.3."""
    ds = tiny_dataset()
    W_E0, W_U0 = random_weights(8, 3, seed=6, scale=0.3)
    top = relu.coordinate_rates(relu.gated_problem(ds), W_E0).open
    data = relu_escape.gate_data(ds)
    flow = relu_escape.unit_flow(data, W_E0, W_U0, end_over_top / top, piece_over_top / top)
    return ds, data, flow


def test_gate_data_weights_sum_to_one_whatever_the_dataset_weights_sum_to():
    """`gate_data` of a dataset whose weights are scaled by 7 equals that of the dataset itself."""
    ds = tiny_dataset()
    scaled = TokenDataset(ds.tokens, ds.labels, vocab_size=ds.vocab_size, weights=7.0 * ds.weights)
    reference, data = relu_escape.gate_data(ds), relu_escape.gate_data(scaled)
    assert data.weights.sum() == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(data.weights, reference.weights, rtol=1e-14)
    np.testing.assert_allclose(data.pairs.toarray(), reference.pairs.toarray(), rtol=1e-14)
    np.testing.assert_allclose(
        data.label_weights.toarray(), reference.label_weights.toarray(), rtol=1e-14
    )


def test_statistic_and_feedback_of_several_states_are_each_states_own():
    """`statistic_and_feedback` of m = 3 stacked states equals its m = 1 value per state, and S is
    `relu.logit_scale` of each state."""
    ds, data, flow = _flow()
    W_E, W_U = flow.at(np.asarray([0.0, 0.6, 1.0]) * flow.end)
    S, pi = relu_escape.statistic_and_feedback(data, W_E[:, data.token_ids], W_U)
    assert len(np.unique(S)) == 3 and len(np.unique(pi)) == 3  # three different states
    for i in range(3):
        S_i, pi_i = relu_escape.statistic_and_feedback(
            data, W_E[i : i + 1, data.token_ids], W_U[i : i + 1]
        )
        assert S[i] == S_i[0] and pi[i] == pi_i[0]
        expected = relu.logit_scale(jnp.asarray(W_E[i]), jnp.asarray(W_U[i]), ds.tokens)
        assert S[i] == pytest.approx(float(expected), rel=1e-12)


def test_clock_nodes_split_every_piece_evenly_and_hold_the_exact_statistic():
    """`clock` with 3 nodes per piece over pieces of unequal length: the piece boundaries and two
    evenly spaced nodes inside each, with S at every node the statistic of the flow there."""
    ds, _, flow = _flow()
    starts = flow.starts
    lengths = np.diff(starts)
    assert len(lengths) == 3 and lengths[-1] < 0.7 * lengths[0]  # the last piece is short
    nodes = relu_escape.clock(flow, 3)
    assert nodes.tau.shape == (3 * len(lengths) + 1,)
    np.testing.assert_array_equal(nodes.tau[::3], starts)
    np.testing.assert_array_equal(nodes.S[::3], flow.S)
    np.testing.assert_array_equal(nodes.pi[::3], flow.pi)
    for i, length in enumerate(lengths):
        np.testing.assert_allclose(np.diff(nodes.tau[3 * i : 3 * i + 4]), length / 3, rtol=1e-12)
    W_E, W_U = flow.at(nodes.tau)
    for j in range(len(nodes.tau)):
        expected = relu.logit_scale(jnp.asarray(W_E[j]), jnp.asarray(W_U[j]), ds.tokens)
        assert nodes.S[j] == pytest.approx(float(expected), rel=1e-10)


def test_lane_clock_with_one_substep_is_the_trapezoid_rule_on_the_nodes():
    """With ``substeps=1`` the lane clock maps the nodes' trapezoid-rule times t_k back to the
    nodes tau_k exactly; with more substeps the quadrature is finer, and the map moves."""
    tau = np.linspace(0.0, 40.0, 9)
    nodes = relu_escape.Clock(tau, np.exp(np.linspace(0.0, 4.0, 9)), np.linspace(0.5, 5.0, 9))
    eps = 0.4  # eps^2 pi reaches 0.8: the slowness 1 / (1 - eps^2 pi) is far from linear
    slowness = 1.0 / (1.0 - eps**2 * nodes.pi)
    elapsed = np.concatenate([[0.0], np.cumsum(np.diff(tau) * (slowness[1:] + slowness[:-1]) / 2)])
    np.testing.assert_allclose(
        relu_escape.lane_clock(nodes, eps, elapsed, substeps=1), tau, rtol=1e-12, atol=1e-12
    )
    finer = relu_escape.lane_clock(nodes, eps, elapsed, substeps=16)
    assert np.max(np.abs(finer - tau)) > 1e-2


def test_gate_data_merges_the_samples_of_equal_token_counts_and_label():
    """Samples [0, 1] -> 2 and [1, 0] -> 2 are one sample of their summed weight; [0, 1] -> 3
    and [1, 1] -> 2 stay apart."""
    ds = TokenDataset(
        np.array([[0, 1], [1, 0], [0, 1], [1, 1]]),
        np.array([2, 2, 3, 2]),
        vocab_size=4,
        weights=np.array([1.0, 2.0, 3.0, 4.0]),
    )
    data = relu_escape.gate_data(ds)
    np.testing.assert_array_equal(data.tokens, [[0, 1], [0, 1], [1, 1]])
    np.testing.assert_array_equal(data.label_ids[data.labels], [2, 3, 2])
    np.testing.assert_allclose(data.weights, [0.3, 0.3, 0.4], rtol=1e-14)
    np.testing.assert_array_equal(data.counts.toarray(), [[1, 1], [1, 1], [0, 2]])
