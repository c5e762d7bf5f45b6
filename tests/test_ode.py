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
    assert rel_err(sol.ys, exact) <= 1e-10  # measured 6e-12 to 1.3e-11


@pytest.mark.parametrize(
    "solve,order,substeps", [(ode.rk4, 4, (8, 16, 32)), (ode.heun, 2, (16, 32, 64))]
)
def test_fixed_step_solvers_converge_at_their_order(solve, order, substeps):
    """On the logistic field, halving the step divides the error by ``2^order``."""
    ts = jnp.array([0.0, 2.0, 4.0])
    y0 = jnp.asarray(0.1)
    errors = [
        float(
            jnp.max(jnp.abs(solve(logistic_field, y0, ts, substeps=n).ys - logistic_exact(ts, y0)))
        )
        for n in substeps
    ]
    for coarse, fine in itertools.pairwise(errors):
        assert abs(coarse / fine / 2**order - 1) < 0.15


def test_heun_is_the_explicit_trapezoid():
    """On ``y' = -y`` one Heun step multiplies by ``1 - h + h^2/2`` exactly."""
    sol = ode.heun(lambda t, y, args: -y, jnp.asarray(1.0), jnp.array([0.0, 1.0]), substeps=4)
    assert float(sol.ys[-1]) == pytest.approx((1 - 0.25 + 0.25**2 / 2) ** 4, rel=1e-14)
    assert int(sol.num_steps) == 4


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
@pytest.mark.parametrize("solve", [ode.rk4, ode.heun], ids=["rk4", "heun"])
def test_fixed_step_bad_input_names_parameter(kwargs, name, solve):
    call = {"ts": jnp.linspace(0.0, 1.0, 3), **kwargs}
    with pytest.raises(ValueError, match=name):
        solve(logistic_field, jnp.asarray(0.1), **call)


# --------------------------------------------------------------------------------------------
# failed solves keep the values they reached

BLOW_UP_TS = jnp.array([0.0, 0.25, 0.5, 0.75, 1.5, 2.0])


def square_field(t, y, args):
    return y * y


def nan_after_field(t, y, t_nan):
    """dy/dt = -y until ``t_nan``, NaN from there on (a field that breaks at a known time)."""
    return jax.tree.map(lambda leaf: jnp.where(t > t_nan, jnp.full_like(leaf, jnp.nan), -leaf), y)


def assert_kept_then_inf(ys, exact, reached: int):
    """The first ``reached`` values match ``exact``, the others are ``+inf``."""
    np.testing.assert_allclose(ys[:reached], exact[:reached], rtol=1e-6)
    assert bool(jnp.all(jnp.isposinf(ys[reached:])))


def test_blow_up_keeps_the_values_before_it():
    """dy/dt = y^2, y(0) = 1: y = 1 / (1 - t), infinite at t = 1, between the saves 0.75 and 1.5."""
    sol = ode.integrate(square_field, 1.0, BLOW_UP_TS, max_steps=2048)
    assert not bool(sol.ok) and int(sol.result) == 1  # the steps shrink towards t = 1
    assert_kept_then_inf(sol.ys, 1 / (1 - BLOW_UP_TS), reached=4)
    assert float(sol.ys[0]) == 1.0


def test_a_nan_field_keeps_the_values_before_it_and_y0():
    sol = ode.integrate(nan_after_field, 1.0, BLOW_UP_TS, jnp.asarray(0.6), max_steps=2048)
    assert not bool(sol.ok) and ode.result_message(sol.result) == "max_steps reached"
    assert_kept_then_inf(sol.ys, jnp.exp(-BLOW_UP_TS), reached=3)
    # NaN from the start: not one step succeeds, and still y(ts[0]) = y0 (repeated times too)
    ts = jnp.array([0.5, 0.5, 1.0, 2.0])
    y0 = {"a": jnp.array([1.0, -2.0]), "b": jnp.asarray(3.0)}
    broken = ode.integrate(nan_after_field, y0, ts, jnp.asarray(-1.0), max_steps=64)
    assert not bool(broken.ok) and int(broken.result) == 1 and int(broken.num_steps) == 64
    for name in ("a", "b"):
        np.testing.assert_array_equal(broken.ys[name][:2], jnp.stack([y0[name]] * 2))
        assert bool(jnp.all(jnp.isposinf(broken.ys[name][2:])))


def test_exhausted_step_budget_keeps_the_early_values():
    ts = jnp.linspace(0.0, 20.0, 41)
    sol = ode.integrate(logistic_field, 0.01, ts, max_steps=6)
    assert not bool(sol.ok) and int(sol.result) == 1 and int(sol.num_steps) == 6
    reached = int(jnp.sum(jnp.isfinite(sol.ys)))
    assert 2 <= reached < 41
    assert_kept_then_inf(sol.ys, logistic_exact(ts, 0.01), reached)


def test_a_failing_lane_keeps_its_early_values_and_leaves_the_other_lane_intact():
    rates = jnp.array([0.2, 1.0])

    def solve(y0, rate):
        return ode.integrate(rate_square_field, y0, BLOW_UP_TS, rate, max_steps=2048)

    lanes = jax.jit(jax.vmap(solve))(jnp.ones(2), rates)
    np.testing.assert_array_equal(lanes.ok, [True, False])
    np.testing.assert_array_equal(lanes.result, [0, 1])
    healthy = solve(1.0, rates[0])
    np.testing.assert_allclose(lanes.ys[0], healthy.ys, rtol=1e-12)
    np.testing.assert_allclose(lanes.ys[0], 1 / (1 - 0.2 * BLOW_UP_TS), rtol=1e-6)
    assert_kept_then_inf(lanes.ys[1], 1 / (1 - BLOW_UP_TS), reached=4)


@pytest.mark.parametrize("solver", list(ode.SOLVERS))
def test_happy_path_equals_diffrax_bitwise(solver):
    """Keeping the reached values changes nothing on a successful solve."""
    import diffrax

    A, y0, ts, _ = linear_system()
    ts = jnp.concatenate([ts[:1], ts])  # a repeated first time as well
    sol = ode.integrate(linear_field, y0, ts, A, solver=solver)
    term, controller = diffrax.ODETerm(linear_field), diffrax.PIDController(rtol=1e-8, atol=1e-10)
    # diffeqsolve(terms, solver, t0, t1, dt0, y0, args), with the settings ode.integrate uses
    reference = diffrax.diffeqsolve(
        term, ode.SOLVERS[solver](), ts[0], ts[-1], None, y0, A,
        saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller, max_steps=100_000,
    )  # fmt: skip
    assert bool(sol.ok)
    np.testing.assert_array_equal(sol.ys, reference.ys)
    np.testing.assert_array_equal(sol.ys[:2], jnp.stack([y0, y0]))


# --------------------------------------------------------------------------------------------
# time-dependent fields: the solvers must evaluate the field at the right times


def cos_growth_field(t, y, args):
    """dy/dt = cos(t) y: y(t) = y(t0) exp(sin t - sin t0)."""
    return jnp.cos(t) * y


def clock_field(t, y, args):
    """dy/dt = t: y(t) = y(t0) + (t^2 - t0^2) / 2, exact for RK4 (a polynomial of degree 2)."""
    return jnp.broadcast_to(t, y.shape).astype(y.dtype)


TIME_TS = jnp.asarray([0.5, 0.9, 1.7, 2.0, 3.5])  # a start away from 0, uneven intervals


def test_rk4_time_dependent_fields_match_exact_solutions():
    y0 = jnp.asarray([1.0, -2.0])
    exact = y0 * jnp.exp(jnp.sin(TIME_TS) - jnp.sin(TIME_TS[0]))[:, None]
    sol = ode.rk4(cos_growth_field, y0, TIME_TS, substeps=100)
    assert bool(sol.ok)
    assert rel_err(sol.ys, exact) <= 3e-10  # measured 9e-11
    # fourth order in h: a field evaluated at the wrong stage time drops it to order 1 or 2
    errors = [
        float(jnp.max(jnp.abs(ode.rk4(cos_growth_field, y0, TIME_TS, substeps=n).ys - exact)))
        for n in (4, 8, 16)
    ]
    for coarse, fine in itertools.pairwise(errors):
        assert 12 < coarse / fine < 20
    # dy/dt = t: RK4's Simpson weights integrate a quadratic in t exactly, one step suffices
    clock = ode.rk4(clock_field, jnp.asarray(0.25), TIME_TS, substeps=1)
    np.testing.assert_allclose(clock.ys, 0.25 + (TIME_TS**2 - TIME_TS[0] ** 2) / 2, rtol=1e-15)


def test_heun_time_dependent_fields_match_exact_solutions():
    """Heun's second stage is at ``t + h``: the trapezoid integrates ``dy/dt = t`` exactly in one
    step, and a time-dependent field converges at second order."""
    clock = ode.heun(clock_field, jnp.asarray(0.25), TIME_TS, substeps=1)
    np.testing.assert_allclose(clock.ys, 0.25 + (TIME_TS**2 - TIME_TS[0] ** 2) / 2, rtol=1e-15)
    y0 = jnp.asarray([1.0, -2.0])
    exact = y0 * jnp.exp(jnp.sin(TIME_TS) - jnp.sin(TIME_TS[0]))[:, None]
    errors = [
        float(jnp.max(jnp.abs(ode.heun(cos_growth_field, y0, TIME_TS, substeps=n).ys - exact)))
        for n in (8, 16, 32)
    ]
    for coarse, fine in itertools.pairwise(errors):
        assert 3.5 < coarse / fine < 4.5


@pytest.mark.parametrize("solver", list(ode.SOLVERS))
def test_integrate_time_dependent_fields_match_exact_solutions(solver):
    y0 = jnp.asarray([1.0, -2.0])
    exact = y0 * jnp.exp(jnp.sin(TIME_TS) - jnp.sin(TIME_TS[0]))[:, None]
    sol = ode.integrate(cos_growth_field, y0, TIME_TS, solver=solver, rtol=1e-11, atol=1e-13)
    assert bool(sol.ok)
    assert rel_err(sol.ys, exact) <= 1e-10  # measured 6e-12 to 1.3e-11
    clock = ode.integrate(clock_field, jnp.asarray(0.25), TIME_TS, solver=solver)
    np.testing.assert_allclose(clock.ys, 0.25 + (TIME_TS**2 - TIME_TS[0] ** 2) / 2, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# events: a stop condition and a blow-up bound end the solve where they hold


def _square(t, y, args):
    return {"x": y["x"] ** 2}  # from x(0) = 1: x = 1 / (1 - t), a blow-up at t = 1


def _decay(t, y, args):
    return {"x": -y["x"]}


@pytest.mark.parametrize("dtype", [np.float64])
def test_blow_up_ends_the_solve_at_the_bound_and_holds_its_state(dtype):
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 3.0, 7, dtype=dtype)
        sol = ode.integrate(_square, {"x": jnp.ones(1, dtype)}, ts, blow_up=1e3)
        unbounded = ode.integrate(_square, {"x": jnp.ones(1, dtype)}, ts, max_steps=2000)
    x = np.asarray(sol.ys["x"][:, 0])
    assert bool(sol.ok) and int(sol.result) == ode.BLOW_UP
    assert 1 - 1e-3 < float(sol.t_end) < 1.0  # x reaches 1e3 at t = 0.999
    assert sol.describe() == f"blow-up at t = {float(sol.t_end):.6g}"
    before = np.asarray(ts) <= float(sol.t_end)
    assert before.sum() == 2  # t = 0 and 0.5
    np.testing.assert_array_equal(x[before], np.asarray(unbounded.ys["x"][:, 0])[before])
    assert np.all(x[~before] == x[-1]) and x[-1] >= 1e3  # held after the event
    assert not bool(unbounded.ok)  # without the bound the budget is burnt
    assert int(sol.num_steps) < int(unbounded.num_steps) / 10


def test_stop_condition_ends_the_solve_and_keeps_the_values_before_it():
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 3.0, 13)
        y0 = {"x": jnp.ones(2)}
        full = ode.integrate(_decay, y0, ts)
        sol = ode.integrate(_decay, y0, ts, stop=lambda t, y, args: y["x"][0] < 0.5)
    end = float(sol.t_end)
    assert bool(sol.ok) and int(sol.result) == ode.STOPPED
    assert np.log(2) <= end < np.log(2) + 0.5  # at the end of the step where x fell below 1/2
    before = np.asarray(ts) <= end
    np.testing.assert_array_equal(np.asarray(sol.ys["x"])[before], np.asarray(full.ys["x"])[before])
    assert np.all(np.asarray(sol.ys["x"])[~before] == np.asarray(sol.ys["x"])[-1])
    assert float(full.t_end) == 3.0 and full.describe() == "ok"


def test_events_are_per_lane_under_vmap():
    with jax.enable_x64(True):
        ts = jnp.linspace(0.0, 3.0, 7)
        sol = jax.vmap(lambda x0: ode.integrate(_square, {"x": x0[None]}, ts, blow_up=1e3))(
            jnp.asarray([0.1, 1.0])
        )
    assert [int(r) for r in sol.result] == [0, ode.BLOW_UP]
    assert float(sol.t_end[0]) == 3.0 and float(sol.t_end[1]) < 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_blow_up_bound_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError, match="blow_up"):
        ode.integrate(_decay, {"x": jnp.ones(1)}, jnp.linspace(0.0, 1.0, 3), blow_up=bad)
