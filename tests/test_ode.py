"""Tests of ``ode.integrate`` (diffrax) and ``ode.rk4`` (fixed-step oracle) against closed forms
and each other, under jit, vmap, pytree states and bad input."""

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import ode


def linear_field(t, y, A):
    return A @ y


TRACES = []  # one entry each time logistic_field is traced (a Python side effect)


def logistic_field(t, y, args):
    TRACES.append(None)
    return y * (1 - y)


def logistic_exact(t, y0):
    return y0 / (y0 + (1 - y0) * jnp.exp(-t))


def rate_square_field(t, y, rate):
    return rate * y * y


def factorization_field(t, y, target):
    """Gradient flow of 1/2 ||target - W_E W_U^T||^2: a coupled nonlinear matrix system."""
    residual = target - y["W_E"] @ y["W_U"].T
    return {"W_E": residual @ y["W_U"], "W_U": residual.T @ y["W_E"]}


def linear_system():
    A = jnp.array([[-0.5, 1.0, 0.0], [-1.0, -0.5, 0.3], [0.2, 0.0, -1.0]])
    y0 = jnp.array([1.0, -0.5, 2.0])
    ts = jnp.linspace(0.0, 3.0, 7)
    exact = jax.vmap(lambda t: jax.scipy.linalg.expm(A * t) @ y0)(ts)
    return A, y0, ts, exact


def rel_err(a, b):
    return float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))


# Global error tracks the local tolerances loosely: at the defaults (rtol 1e-8, atol 1e-10) tsit5
# and dopri5 land within 1e-8 of expm, dopri8 (few, large steps) near 6e-8; at rtol 1e-10,
# atol 1e-12 all three are within 1e-8.
@pytest.mark.parametrize(
    ("solver", "tolerances"),
    [("tsit5", {}), ("dopri5", {}), ("dopri8", {"rtol": 1e-10, "atol": 1e-12})],
)
def test_integrate_linear_system_matches_expm(solver, tolerances):
    A, y0, ts, exact = linear_system()
    sol = ode.integrate(linear_field, y0, ts, A, solver=solver, **tolerances)
    assert bool(sol.ok)
    assert sol.ys.shape == (7, 3) and sol.ys.dtype == jnp.float64
    assert sol.num_steps.dtype == jnp.int32 and int(sol.num_steps) > 0
    np.testing.assert_array_equal(sol.ts, ts)
    assert rel_err(sol.ys, exact) <= 1e-8


def test_rk4_linear_system_and_step_count():
    A, y0, ts, exact = linear_system()
    sol = ode.rk4(linear_field, y0, ts, A, substeps=200)
    assert bool(sol.ok) and int(sol.num_steps) == 200 * 6
    assert rel_err(sol.ys, exact) <= 1e-9


def test_rk4_converges_at_fourth_order():
    ts = jnp.array([0.0, 2.0, 4.0])
    y0 = jnp.asarray(0.1)
    errors = [
        float(
            jnp.max(
                jnp.abs(ode.rk4(logistic_field, y0, ts, substeps=n).ys - logistic_exact(ts, y0))
            )
        )
        for n in (8, 16, 32)
    ]
    for coarse, fine in itertools.pairwise(errors):
        assert abs(coarse / fine / 16 - 1) < 0.15


def test_integrate_agrees_with_rk4_on_nonlinear_pytree():
    keys = jax.random.split(jax.random.key(0), 3)
    V, d = 5, 3
    target = jax.random.normal(keys[0], (V, V))
    y0 = {
        "W_E": 0.1 * jax.random.normal(keys[1], (V, d)),
        "W_U": 0.1 * jax.random.normal(keys[2], (V, d)),
    }
    ts = jnp.linspace(0.0, 4.0, 9)
    adaptive = ode.integrate(factorization_field, y0, ts, target)
    oracle = ode.rk4(factorization_field, y0, ts, target, substeps=400)
    assert bool(adaptive.ok) and bool(oracle.ok)
    for name in ("W_E", "W_U"):
        assert adaptive.ys[name].shape == (9, V, d)
        assert rel_err(adaptive.ys[name], oracle.ys[name]) <= 1e-7
        # the flow actually moved: the small initialization grew several-fold
        assert float(jnp.max(jnp.abs(adaptive.ys[name][-1]))) > 5 * float(
            jnp.max(jnp.abs(y0[name]))
        )


def test_vmap_over_rate_jit_and_per_lane_ok():
    """dy/dt = rate y^2, y(0) = 1: y = 1 / (1 - rate t); the rate-1 lane blows up at t = 1 < 2."""
    ts = jnp.linspace(0.0, 2.0, 5)
    rates = jnp.array([0.2, 1.0, 0.3])

    def solve(rate, ts, rtol):  # ts and rtol traced under jit: value checks are skipped
        return ode.integrate(
            rate_square_field, jnp.asarray(1.0), ts, rate, rtol=rtol, max_steps=2048
        )

    batched = jax.jit(jax.vmap(solve, in_axes=(0, None, None)))(rates, ts, 1e-8)
    assert batched.ys.shape == (3, 5) and batched.ok.shape == batched.num_steps.shape == (3,)
    np.testing.assert_array_equal(batched.ok, [True, False, True])
    assert int(batched.num_steps[1]) == 2048
    # the per-lane code says why: the blow-up lane ran out of steps, the others finished
    np.testing.assert_array_equal(batched.result, [0, 1, 0])
    assert ode.result_message(batched.result[1]) == "max_steps reached"
    assert not bool(jnp.all(jnp.isfinite(batched.ys[1])))
    for i in (0, 2):  # the healthy lanes equal their own solves, untouched by the failing lane
        single = ode.integrate(rate_square_field, 1.0, ts, rates[i], max_steps=2048)
        assert bool(single.ok) and int(batched.num_steps[i]) == int(single.num_steps) < 2048
        np.testing.assert_allclose(batched.ys[i], single.ys, rtol=1e-12)
        np.testing.assert_allclose(batched.ys[i], 1 / (1 - rates[i] * ts), rtol=1e-6)
    # unbatched failure is reported, not raised; rk4 flags the non-finite blow-up too
    assert not bool(ode.integrate(rate_square_field, 1.0, ts, rates[1], max_steps=2048).ok)
    lanes = jax.vmap(lambda rate: ode.rk4(rate_square_field, jnp.asarray(1.0), ts, rate))(rates)
    np.testing.assert_array_equal(lanes.ok, [True, False, True])
    np.testing.assert_allclose(lanes.ys[0], 1 / (1 - rates[0] * ts), rtol=1e-6)


class Particle(NamedTuple):
    position: jax.Array
    velocity: jax.Array


def oscillator_field(t, state, args):
    return Particle(position=state.velocity, velocity=-state.position)


@pytest.mark.parametrize("solve", [ode.integrate, ode.rk4], ids=["integrate", "rk4"])
def test_namedtuple_state(solve):
    ts = jnp.linspace(0.0, jnp.pi, 5)
    sol = solve(oscillator_field, Particle(jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0])), ts)
    assert isinstance(sol.ys, Particle) and sol.ys.position.shape == (5, 2)
    expected = jnp.stack([jnp.cos(ts), jnp.sin(ts)], axis=1)
    np.testing.assert_allclose(sol.ys.position, expected, atol=1e-6)


def test_python_scalars_and_float32_state_under_strict_promotion():
    sol = ode.integrate(logistic_field, 0.1, [0, 1, 2])  # Python ints and floats
    assert sol.ts.dtype == jnp.float64 and sol.ys.dtype == jnp.float64
    np.testing.assert_allclose(sol.ys, logistic_exact(sol.ts, 0.1), rtol=1e-8)
    y32 = jnp.array([0.1, 0.2], dtype=jnp.float32)
    ts32 = jnp.linspace(0.0, 1.0, 3, dtype=jnp.float32)
    for solve, options in ((ode.integrate, {"rtol": 1e-5, "atol": 1e-7}), (ode.rk4, {})):
        out = solve(logistic_field, y32, ts32, **options)
        assert out.ys.dtype == jnp.float32 and bool(out.ok)
        np.testing.assert_allclose(out.ys, logistic_exact(ts32[:, None], y32), rtol=1e-5)
    # float32 state with float64 times: promoted to float64, as diffrax does
    assert ode.rk4(logistic_field, y32, jnp.linspace(0.0, 1.0, 3)).ys.dtype == jnp.float64


def test_repeated_calls_compile_once():
    ts = jnp.linspace(0.0, 1.0, 3)
    ode.integrate(logistic_field, 0.1, ts)
    ode.rk4(logistic_field, 0.1, ts, substeps=8)
    traced = len(TRACES)
    assert traced > 0  # here or in an earlier test with the same shapes
    ode.integrate(logistic_field, 0.3, ts + 1.0, rtol=1e-6, atol=1e-9)  # new values, same shapes
    ode.rk4(logistic_field, jnp.asarray(0.5), 2 * ts, substeps=8)
    assert len(TRACES) == traced


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"solver": "euler"}, "solver"),
        ({"ts": jnp.array([0.0])}, "ts"),
        ({"ts": jnp.zeros((2, 2))}, "ts"),
        ({"ts": jnp.array([0.0, 2.0, 1.0])}, "ts"),
        ({"ts": jnp.array([0.0, jnp.nan])}, "ts"),
        ({"rtol": 0.0}, "rtol"),
        ({"rtol": -1e-6}, "rtol"),
        ({"atol": float("inf")}, "atol"),
        ({"atol": "small"}, "atol"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 10.5}, "max_steps"),
        ({"dt0": -0.1}, "dt0"),
    ],
)
def test_integrate_bad_input_names_parameter(kwargs, name):
    call = {"ts": jnp.linspace(0.0, 1.0, 3), **kwargs}
    with pytest.raises(ValueError, match=name):
        ode.integrate(logistic_field, jnp.asarray(0.1), **call)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"substeps": 0}, "substeps"),
        ({"substeps": True}, "substeps"),
        ({"ts": jnp.array([1.0, 0.0])}, "ts"),
    ],
)
def test_rk4_bad_input_names_parameter(kwargs, name):
    call = {"ts": jnp.linspace(0.0, 1.0, 3), **kwargs}
    with pytest.raises(ValueError, match=name):
        ode.rk4(logistic_field, jnp.asarray(0.1), **call)
