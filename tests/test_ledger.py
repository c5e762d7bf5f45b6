"""The log-amplitude ledger (theory/second_escape.md §8) against the split-unit flow on a tiny
problem, and its parts against independent computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import ledger as lg
from ctx_staircase import ode
from ctx_staircase import second_escape as se
from ctx_staircase.experiments.regime import PRIMARY

D = 6


def plateau_case(N=8, eps=1e-5, seed=0):
    """``mod`` N on its plateau: units 0-2 carried to the fixed point of the reduced flow (eq.
    S2) with ``u = (1/2, 1/2, -1/2)`` at the start (two open units, one closed), units 3-5 zero
    there, then units 3-5 moved off the manifold by ``eps`` standard normals less their
    symmetric part: units whose gates are set by the deviation alone, so the linear theory has
    no scale."""
    ds = PRIMARY.make("mod", N=N)
    problem = se.plateau_problem(ds)
    rng = np.random.default_rng(seed)
    u = np.array([0.5, 0.5, -0.5, 0.0, 0.0, 0.0])
    W_E, W_U = np.tile(u, (ds.vocab_size, 1)), np.zeros((ds.vocab_size, D))
    W_U[problem.label_ids] = 0.3 * rng.standard_normal(D) * (u != 0)
    W_U[problem.other_ids] = 0.3 * rng.standard_normal(D) * (u != 0)
    with jax.enable_x64(True):
        end = jax.tree.map(lambda leaf: np.asarray(leaf[-1]), se.reduced_flow(
            W_E, W_U, problem, [0.0, 3000.0]).ys)  # fmt: skip
    W_E[problem.tied[0]] = end["tied"][0]
    W_U[problem.label_ids], W_U[problem.other_ids] = end["w_lab"], end["w_out"]
    noise = np.zeros((2, ds.vocab_size, D))
    noise[:, :, 3:] = eps * rng.standard_normal((2, ds.vocab_size, 3))
    noise -= np.stack(se.symmetric_part(*noise, problem))  # off the manifold only
    return ds, problem, W_E + noise[0], W_U + noise[1]


def split_path(problem, W_E, W_U, ts):
    """The split-unit flow (eq. S6) from ``(W_E, W_U)`` by RK4 at step 1, the whole model's
    ``(W_E, W_U) [T, V, d]`` at ``ts``."""
    layout = se.split_layout(W_E, problem)
    arrays = se.split_arrays(layout, problem, W_E.shape[0])
    with jax.enable_x64(True):
        y = jax.tree.map(jnp.asarray, se.split_state(W_E, W_U, layout, problem))
        path = ode.rk4(
            lambda t, s, a: se.split_field(t, s, a, problem.activation),
            y, jnp.asarray(ts, jnp.float64), arrays, max_step=1.0,
        )  # fmt: skip
    states = jax.tree.map(np.asarray, path.ys)
    E = se.split_weights(states, layout, problem, W_E)
    U = np.zeros_like(E)
    U[..., layout.split] = states["B"]
    U[..., problem.label_ids[:, None], layout.held] = states["w_lab"][:, None, :]
    U[..., problem.other_ids[:, None], layout.held] = states["w_out"][:, None, :]
    return layout, E, U


@pytest.fixture(scope="module")
def plateau_ledger():
    _, problem, W_E, W_U = plateau_case()
    ts = np.arange(0.0, 401.0, 10.0)
    layout, E, U = split_path(problem, W_E, W_U, ts)
    return problem, layout, E, U, lg.ledger(ts, E, U, problem)


def test_the_ledger_accounts_for_the_split_unit_flow_while_it_is_linear(plateau_ledger):
    """While the deviation is small (here 1e-5 to about 1e-2, t <= 200), its log-gain under
    the split-unit flow is the integral of the realized rate of the gated drive with the
    plateau's residual, re-read as the gates realign: within 0.01 nats plus 1% (the trapezoid
    over saves 10 apart; its first interval, where the rate still turns, is 0.004 off). The
    frozen-gate band's top rate would give more than twice the gain: the gates' realignment is
    what sets the pace."""
    problem, layout, E, _, book = plateau_ledger
    np.testing.assert_array_equal(layout.split, [3, 4, 5])
    linear = book.ts <= 200
    assert np.all(se.rho0(E[linear], problem.geometry_ids) > 1 - 1e-6)  # still collapsed
    assert book.gain[linear][-1] > 5  # the deviation grew more than 150-fold
    np.testing.assert_allclose(book.rate_integral[linear], book.gain[linear], rtol=0.01, atol=0.01)
    assert np.all(book.bound_integral[linear][5:] > 2 * book.gain[linear][5:])
    # past the linear phase the feedback slows the growth below the realized rate
    assert book.gain[-1] < 0.9 * book.rate_integral[-1]


def test_realized_rate_is_the_log_derivative_of_the_linearized_flow():
    """``lambda_j`` against the derivative of ``log|delta_j|`` under the gradient flow of the whole
    model, ``-delta_j . grad_j L / |delta_j|^2`` with the gradient by autodiff of the loss
    (independent of the gated drive), at a state with a deviation of 1e-6 on units 3-5."""
    _, problem, W_E, W_U = plateau_case(eps=1e-6, seed=3)
    with jax.enable_x64(True):
        G_E, G_U = (np.asarray(g) for g in jax.grad(se.loss, argnums=(0, 1))(W_E, W_U, problem))
    E_sym, U_sym = se.symmetric_part(W_E, W_U, problem)
    a, b = (W_E - E_sym)[:, 3:], (W_U - U_sym)[:, 3:]
    size = np.sum(a**2, 0) + np.sum(b**2, 0)
    expected = -(np.sum(a * G_E[:, 3:], 0) + np.sum(b * G_U[:, 3:], 0)) / size
    bound, realized, norms = lg.unit_rates(W_E, W_U, problem)
    np.testing.assert_allclose(norms[3:], np.sqrt(size), rtol=1e-12)
    np.testing.assert_allclose(realized[3:], expected, rtol=1e-3)
    assert np.all(np.abs(realized[3:]) <= bound[3:] * (1 + 1e-9))


def test_gated_drive_top_rate_is_the_band():
    """``s_1(M_j)`` of the split units equals the Lanczos band of the whole Hessian (the
    frozen-gate rates of theory/second_escape.md §3) on the plateau case."""
    _, problem, W_E, W_U = plateau_case(eps=1e-3, seed=1)
    bound, _, _ = lg.unit_rates(W_E, W_U, problem)
    with jax.enable_x64(True):
        rates = se.band(W_E, W_U, problem, modes=3).rates
    np.testing.assert_allclose(np.sort(bound[3:])[::-1], rates, rtol=1e-4)


def test_gated_drive_is_the_sum_over_samples():
    """`gated_drives` against a loop over samples in NumPy, on a state off the plateau with
    non-uniform sample weights."""
    ds, problem, W_E, W_U = plateau_case(eps=0.3, seed=2)
    rng = np.random.default_rng(5)
    weights = rng.random(problem.weights.size)
    problem = problem._replace(weights=weights / weights.sum())
    E_sym, U_sym = se.symmetric_part(W_E, W_U, problem)
    drives = lg.gated_drives(W_E, W_U, problem)
    expected = np.zeros_like(drives)
    for tokens, label, p in zip(problem.tokens, problem.labels, problem.weights, strict=True):
        z = np.maximum(E_sym[tokens].sum(0), 0) @ U_sym.T
        q = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        r = q - np.eye(ds.vocab_size)[label]
        c = np.bincount(tokens, minlength=ds.vocab_size)
        gates = W_E[tokens].sum(0) > 0
        expected += p * gates[:, None, None] * np.outer(r, c)[None]
    np.testing.assert_allclose(drives, expected, rtol=1e-10, atol=1e-15)


def test_ledger_refuses_bad_input(plateau_ledger):
    problem, _, E, U, _ = plateau_ledger
    with pytest.raises(ValueError, match="ts must be"):
        lg.ledger([0.0, 0.0], E[:2], U[:2], problem)
    with pytest.raises(ValueError, match="W_E and W_U"):
        lg.ledger([0.0, 1.0, 2.0], E[:2], U[:2], problem)
    with pytest.raises(ValueError, match="deviate"):  # zero weights: no deviation to follow
        lg.ledger([0.0, 1.0], np.zeros_like(E[:2]), np.zeros_like(U[:2]), problem)
