"""Tests of the ReLU gated law (theory/relu.md): the field against autodiff, the frozen-gate
closed form and the RK4 gated flow against an event-driven exact integration, and the law against
GD training with the C_1 = 1/2 null."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers import gated_operator, random_weights, tiny_dataset

from ctx_staircase import comparison, ode, relu, tasks


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def surrogate_loss(problem: relu.GatedProblem, prediction: str):
    """The loss whose gradient flow is the gated law: cross-entropy with log-sum-exp expanded at
    f = 0 to first (``"uniform"``) or second (``"linear"``) order, through the real ReLU."""

    def loss(W_E, W_U):
        logits = jax.nn.relu(problem.counts @ W_E) @ W_U.T  # [n, V]
        V = problem.vocab_size
        lse = jnp.mean(logits, axis=-1)
        if prediction == "linear":
            centred = logits - lse[:, None]
            lse = lse + jnp.sum(centred**2, axis=-1) / (2 * V)
        target = problem.drive / problem.weights[:, None] + 1.0 / V  # e_y
        return jnp.sum(problem.weights * (lse - jnp.sum(target * logits, axis=-1)))

    return loss


@pytest.mark.parametrize("prediction", relu.PREDICTIONS)
def test_gated_field_is_the_relu_gradient_of_the_expanded_loss(prediction):
    problem = relu.gated_problem(tiny_dataset())
    W_E, W_U = random_weights(8, 5, seed=1, scale=0.7)
    dW_E, dW_U = relu.gated_field(problem, jnp.asarray(W_E), jnp.asarray(W_U), prediction)
    gE, gU = jax.grad(surrogate_loss(problem, prediction), argnums=(0, 1))(W_E, W_U)
    np.testing.assert_allclose(dW_E, -gE, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dW_U, -gU, rtol=1e-12, atol=1e-14)


def test_open_gates_give_the_linear_drive_and_rates():
    ds = tiny_dataset()
    problem = relu.gated_problem(ds)
    M = comparison.flows_drive(ds)
    np.testing.assert_allclose(relu.gated_drive(problem, np.ones((ds.n, 3)))[1], M, atol=1e-15)
    W_E, _ = random_weights(8, 16, seed=2)
    rates = relu.coordinate_rates(problem, W_E)
    assert rates.open == pytest.approx(np.linalg.svd(M, compute_uv=False)[0], rel=1e-12)
    gates = np.asarray(problem.counts) @ W_E > 0
    np.testing.assert_allclose(rates.open_fraction, np.asarray(problem.weights) @ gates)
    # a coordinate with every gate closed is frozen; flipping its sign opens them all
    closed = rates.open_fraction == 0
    assert closed.any() and np.all(rates.initial[closed] == 0)
    flipped = relu.coordinate_rates(problem, np.where(closed, -W_E, W_E))
    assert np.allclose(flipped.initial[closed], rates.open, rtol=1e-12)


def test_frozen_gates_solve_the_frozen_system_and_the_flow_follows_the_flips():
    problem = relu.gated_problem(tiny_dataset())
    W_E0, W_U0 = random_weights(8, 3, seed=6, scale=0.3)  # seed 6: first flip at t = 0.9 / s_1
    V, d = W_E0.shape
    top = relu.coordinate_rates(problem, W_E0).open
    ts = np.linspace(0.0, 6.0 / top, 241)
    # (R4) is the frozen-gate system exactly: the matrix exponential of the whole 2Vd system
    A = gated_operator(problem, np.asarray(problem.counts) @ W_E0 > 0)
    y0 = np.concatenate([W_E0.ravel(), W_U0.ravel()])
    exact = np.stack([scipy.linalg.expm(A * t) @ y0 for t in ts])
    W_E_frozen, W_U_frozen = relu.frozen_gate_solution(problem, W_E0, W_U0)(ts)
    np.testing.assert_allclose(
        W_E_frozen.reshape(len(ts), -1), exact[:, : V * d], rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(
        W_U_frozen.reshape(len(ts), -1), exact[:, V * d :], rtol=1e-9, atol=1e-12
    )

    # the RK4 gated flow: converged in its step, equal to (R4) until the first gate flips,
    # then apart from it
    field = relu.gated_flow(problem, "uniform")
    start = {"W_E": jnp.asarray(W_E0), "W_U": jnp.asarray(W_U0)}
    fine = np.asarray(ode.rk4(field, start, jnp.asarray(ts), max_step=0.0025 / top).ys["W_E"])
    coarse = np.asarray(ode.rk4(field, start, jnp.asarray(ts), max_step=0.01 / top).ys["W_E"])
    scale = np.linalg.norm(fine[-1])
    assert np.linalg.norm(coarse[-1] - fine[-1]) / scale < 1e-2
    gates = [np.asarray(problem.counts) @ W > 0 for W in fine]
    first_flip = next(i for i, g in enumerate(gates) if not np.array_equal(g, gates[0]))
    assert 1 < first_flip < len(ts) - 2  # the problem exercises flips
    before = slice(0, first_flip)
    np.testing.assert_allclose(fine[before], W_E_frozen[before], rtol=1e-6, atol=1e-9)
    assert np.linalg.norm(W_E_frozen[-1] - fine[-1]) / scale > 0.1


def test_rk4_max_step_splits_each_interval():
    ts = jnp.asarray([0.0, 0.1, 0.15, 1.0])
    A = jnp.asarray([[0.0, 1.0], [-1.0, 0.0]])
    solved = ode.rk4(lambda t, y, a: a @ y, jnp.asarray([1.0, 0.0]), ts, A, max_step=0.01)
    assert int(solved.num_steps) == 10 + 5 + 85
    exact = np.stack([np.cos(ts), -np.sin(ts)], axis=1)
    np.testing.assert_allclose(solved.ys, exact, atol=1e-10)
    with pytest.raises(ValueError, match="max_step"):
        ode.rk4(lambda t, y, a: y, jnp.asarray([1.0]), ts, max_step=float("nan"))


def test_gated_flow_escapes_with_training_and_the_half_slope_law_does_not():
    ds = tasks.make("sub", N=10)
    experiment = comparison.theory_vs_training(
        ds, gammas=[1.0], max_orders=(0,), d=48, activation="relu"
    )
    (run,) = experiment.runs
    gated = run.comparisons["relu_gated_flow"]
    assert abs(gated.escape_ratio - 1) <= 0.05
    assert gated.weight_rel_error_max <= 0.05 < run.comparisons["closed_form"].weight_rel_error_max
    for null in ("closed_form", "closed_form_feedback", "signature_flow_m0"):
        assert abs(run.comparisons[null].escape_ratio - 1) > 0.05
    assert run.solver["relu_gated_flow"].ok


def test_validation_note_names_the_unvalidated_settings():
    assert comparison.validation_note("relu", [0.8, 1.4]) is None
    assert comparison.validation_note("poly:1,0.5", [0.6, 1.0]) is None
    outside = comparison.validation_note("relu", [0.6, 1.0])
    assert "relu_gated_flow" in outside and "0.6" in outside and "1," not in outside
    unknown = comparison.validation_note("gelu", [1.0])
    assert unknown.startswith("no escape law is validated") and "\n" not in unknown


@pytest.mark.slow  # trains and solves every ReLU theory through the CLI: over 20 s
def test_cli_theory_reports_the_gated_law_and_the_unvalidated_gamma(tmp_path, capsys):
    import json

    from ctx_staircase import cli

    out = tmp_path / "relu"
    argv = ["theory", "sub", "--param", "N=6", "--activation", "relu", "--gamma", "0.6", "1.0"]
    assert cli.main([*argv, "--max-order", "0", "--d", "16", "--out", str(out)]) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert {"relu_gated_flow", "closed_form_frozen_gates"} <= set(summary["escape"])
    (note,) = [n for n in summary["notes"] if "relu_gated_flow" in n]
    assert "0.6" in note
    captured = capsys.readouterr()
    assert "relu_gated_flow" in captured.out and "note: relu_gated_flow" in captured.err
