"""Tests of the ReLU escape law (theory/relu.md §8): the piecewise unit flow against an
event-driven exact integration of the gated ODE, its scale-freeness, the feedback rate against the
field of `relu.gated_field`, the lane clock against a direct integration, and the law against GD
training with the C_1 = 1/2 null."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import gated_operator, random_weights, tiny_dataset

from ctx_staircase import comparison, relu, relu_escape, tasks, theories, theory, train


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def event_driven_flow(problem: relu.GatedProblem, W_E0, W_U0, ts, check: float):
    """The uniform gated flow (R2) integrated exactly: the matrix exponential of the whole
    ``2 V d`` system between gate flips, each flip located by bisection to 1e-13 (flips are
    looked for every ``check`` time units). Returns ``W_E [T, V, d]`` and the flip count."""
    V, d = W_E0.shape
    counts = np.asarray(problem.counts)

    def gates_of(y):
        return counts @ y[: V * d].reshape(V, d) > 0

    y, t, flips, out = np.concatenate([W_E0.ravel(), W_U0.ravel()]), 0.0, 0, []
    gates = gates_of(y)
    A = gated_operator(problem, gates)
    for target in ts:
        while t < target:
            step = min(check, target - t)
            ahead = scipy.linalg.expm(A * step) @ y
            if np.array_equal(gates_of(ahead), gates):
                y, t = ahead, t + step
                continue
            low, high = 0.0, step  # the first flip lies in (low, high]
            while high - low > 1e-13:
                middle = (low + high) / 2
                moved = scipy.linalg.expm(A * middle) @ y
                low, high = (
                    (middle, high) if np.array_equal(gates_of(moved), gates) else (low, middle)
                )
            y, t = scipy.linalg.expm(A * high) @ y, t + high
            gates, flips = gates_of(y), flips + 1
            A = gated_operator(problem, gates)
        out.append(y[: V * d].reshape(V, d))
    return np.stack(out), flips


def flip_problem():
    """The tiny problem of `tests/test_relu.py` (V = 8, d = 3), weights drawn so that gates flip
    during the flow, and the flow's top rate."""
    ds = tiny_dataset()
    W_E0, W_U0 = random_weights(8, 3, seed=6, scale=0.3)
    top = relu.coordinate_rates(relu.gated_problem(ds), W_E0).open
    return ds, W_E0, W_U0, top


def test_unit_flow_converges_to_the_event_driven_flow_at_second_order():
    ds, W_E0, W_U0, top = flip_problem()
    ts = np.linspace(0.0, 6.0 / top, 13)
    exact, flips = event_driven_flow(relu.gated_problem(ds), W_E0, W_U0, ts, 0.05 / top)
    assert flips >= 3  # the problem exercises flips
    data = relu_escape.gate_data(ds)
    errors = []
    for piece in (0.5 / top, 0.25 / top, 0.125 / top):
        flow = relu_escape.unit_flow(data, W_E0, W_U0, float(ts[-1]), piece)
        W_E = flow.at(ts)[0]
        errors.append(np.linalg.norm(W_E - exact) / np.linalg.norm(exact))
    assert errors[-1] < 2e-3
    # halving the piece divides the error by about 4 (order 2): gates read only at a piece's
    # start (order 1) would divide it by about 2
    assert errors[0] / errors[1] > 3 and errors[1] / errors[2] > 3


def test_unit_flow_is_exact_while_no_gate_flips():
    ds, W_E0, W_U0, top = flip_problem()
    problem = relu.gated_problem(ds)
    ts = np.linspace(0.0, 0.5 / top, 6)  # before the first flip (at 0.9 / s_1)
    flow = relu_escape.unit_flow(relu_escape.gate_data(ds), W_E0, W_U0, float(ts[-1]), 0.2 / top)
    W_E, W_U = flow.at(ts)
    frozen_E, frozen_U = relu.frozen_gate_solution(problem, W_E0, W_U0)(ts)
    np.testing.assert_allclose(W_E, frozen_E, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(W_U, frozen_U, rtol=1e-10, atol=1e-13)
    # any order of times, repeats included
    times = ts[[3, 0, 3, 5]]
    np.testing.assert_allclose(flow.at(times)[0], W_E[[3, 0, 3, 5]], rtol=1e-14, atol=1e-16)


def test_the_uniform_flow_is_scale_free_and_the_feedback_rate_is_the_field_projection():
    ds = tasks.make("sub", N=6)
    data = relu_escape.gate_data(ds, vocab_size=9)  # one id that is never a label
    problem = relu.gated_problem(ds, vocab_size=9)
    W_E, W_U = random_weights(9, 7, seed=3)
    # the flow from lambda y is lambda times the flow from y, gates and all
    flow = relu_escape.unit_flow(data, W_E, W_U, 30.0, 10.0)
    scaled = relu_escape.unit_flow(data, 1e-3 * W_E, 1e-3 * W_U, 30.0, 10.0)
    ts = np.asarray([0.0, 7.0, 30.0])
    np.testing.assert_allclose(scaled.at(ts)[0], 1e-3 * flow.at(ts)[0], rtol=1e-12, atol=1e-16)
    # S and pi against the escape statistic and the JAX field of `relu` (independent code)
    W_E1, W_U1 = flow.at(ts[1:2])
    S, pi = relu_escape.statistic_and_feedback(data, W_E1[:, data.token_ids], W_U1)
    stat = relu.logit_scale(jnp.asarray(W_E1[0]), jnp.asarray(W_U1[0]), ds.tokens)
    uniform = relu.gated_field(problem, jnp.asarray(W_E1[0]), jnp.asarray(W_U1[0]), "uniform")
    linear = relu.gated_field(problem, jnp.asarray(W_E1[0]), jnp.asarray(W_U1[0]), "linear")
    velocity = np.concatenate([np.ravel(v) for v in uniform])
    feedback = np.concatenate([np.ravel(f - v) for f, v in zip(linear, uniform, strict=True)])
    assert S[0] == pytest.approx(float(stat), rel=1e-12)
    assert pi[0] == pytest.approx(-velocity @ feedback / (velocity @ velocity), rel=1e-10)
    assert pi[0] > 0  # the feedback slows the flow


def test_lane_clock_integrates_the_slowed_time():
    nodes = relu_escape.Clock(
        np.linspace(0.0, 40.0, 9), np.exp(np.linspace(0.0, 4.0, 9)), 0.02 * np.linspace(1, 3, 9)
    )
    ts = np.linspace(0.0, 40.0, 81)
    # no feedback: the lane's time is the unit flow's
    still = nodes._replace(pi=np.zeros(9))
    np.testing.assert_allclose(relu_escape.lane_clock(still, 0.3, ts), ts, atol=1e-12)
    # against dtau/dt = 1 - eps^2 pi(tau), integrated directly (RK4, fine steps)
    eps = 0.4
    tau, direct = 0.0, [0.0]
    h = ts[1] / 200
    for _ in range(len(ts) - 1):
        for _ in range(200):
            k1 = 1 - eps**2 * nodes.rate(tau)
            k2 = 1 - eps**2 * nodes.rate(tau + h * k1 / 2)
            k3 = 1 - eps**2 * nodes.rate(tau + h * k2 / 2)
            k4 = 1 - eps**2 * nodes.rate(tau + h * k3)
            tau += h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        direct.append(tau)
    clocked = relu_escape.lane_clock(nodes, eps, ts, substeps=64)
    np.testing.assert_allclose(clocked, direct, rtol=2e-5)
    assert clocked[-1] < ts[-1]  # slowed


def test_lane_clock_stops_where_the_feedback_cancels_the_flow():
    nodes = relu_escape.Clock(np.linspace(0.0, 10.0, 11), np.ones(11), np.linspace(0.0, 2.0, 11))
    tau = relu_escape.lane_clock(nodes, 1.0, np.linspace(0.0, 100.0, 11))
    assert tau[-1] <= 5.0 + 1e-9 and np.all(np.diff(tau) >= 0)  # eps^2 pi reaches 1 at tau = 5


def test_unit_flow_refuses_bad_settings():
    ds, W_E0, W_U0, _ = flip_problem()
    data = relu_escape.gate_data(ds)
    for name, keywords in [
        ("piece", dict(piece=0.0)),
        ("piece", dict(piece=float("nan"))),
        ("end", dict(end=-1.0)),
        ("stop", dict(stop=float("inf"))),
    ]:
        with pytest.raises(ValueError, match=name):
            relu_escape.unit_flow(data, W_E0, W_U0, **({"end": 5.0, "piece": 1.0} | keywords))
    with pytest.raises(ValueError, match="vocab_size"):
        relu_escape.gate_data(ds, vocab_size=4)


def law_problem(ds, experiment, gammas, seed: int = 0, d: int = 128) -> theory.Problem:
    """The `theory.Problem` the escape law was solved on in ``experiment`` (what it reads of it:
    the grid, the seed's unit draw, the gammas, the width, the drive's top rate, the threshold)."""
    state = train.init_state(
        "ffn", ds, gamma=0.0, seed=seed, d=d, activation="relu", dtype=jnp.float64
    )[1]
    unit = {k: np.asarray(state[k][...], np.float64) for k in ("W_E", "W_U")}
    setting = types.SimpleNamespace(gammas=np.asarray(gammas, np.float64))
    top, threshold = experiment.top_singular_value, experiment.threshold
    return theory.Problem(setting, ds, d, unit, None, None, top, threshold, experiment.ts, None, {})


def test_the_law_escapes_with_training_and_the_half_slope_law_does_not():
    # in the law's measured regime (d = 128, N >= 20; theory/relu.md §8), at its criterion
    ds = tasks.make("sub", N=20)
    experiment = comparison.theory_vs_training(
        ds,
        gammas=[0.8, 1.4],
        max_orders=(0,),
        d=128,
        activation="relu",
        theories=("relu_escape_law", "closed_form_feedback"),
    )
    for run in experiment.runs:
        law = run.comparisons["relu_escape_law"]
        assert abs(law.escape_ratio - 1) <= 0.02
        assert law.weight_rel_error_max <= 0.05
        assert run.solver["relu_escape_law"].ok
        assert abs(run.comparisons["closed_form_feedback"].escape_ratio - 1) > 0.02  # C_1 = 1/2
    # the escape times alone, with no weights evaluated, are the ones the comparison read
    times = relu_escape.escape_law_times(law_problem(ds, experiment, gammas=[0.8, 1.4]))
    read = [run.comparisons["relu_escape_law"].escape_time.theory for run in experiment.runs]
    np.testing.assert_array_equal(times, read)
    # every theory has its cost and role, and the law is one
    assert set(experiment.cost.theories) == set(experiment.runs[0].comparisons)
    assert all(seconds > 0 for seconds in experiment.cost.theories.values())
    assert experiment.roles["relu_escape_law"] is theories.RELU_ESCAPE_LAW.role
