"""ODE solvers for gradient flows: adaptive (diffrax) and a fixed-step RK4 oracle.

Both take ``vector_field(t, y, args) -> dy/dt`` (a `VectorField`: how to compile once), ``y`` any
pytree of float arrays, and return a ``Solution`` saved at ``ts`` (float ``[T]``, non-decreasing,
``T >= 2``): ``integrate`` (diffrax ``Tsit5``/``Dopri5``/``Dopri8``, PID step-size control) is the
workhorse, ``rk4`` (classical fixed-step RK4 in ``lax.scan``) the test oracle and fallback. Both are
pure, safe under ``jax.jit`` and ``jax.vmap``, and never raise on a failed solve: a lane that blows
up or runs out of steps reports ``ok = False`` and why (``Solution.result``, per lane under
``vmap``) while the others go on. Inputs are validated eagerly where concrete (under tracing: shape
and static checks only).

**Failed solves keep what they reached** (`Solution.ys`, `Solution.t_end`). ``integrate`` returns
the values at every save time reached before the failure (a non-finite field or an exhausted step
budget), ``ys[0] = y0`` always, and ``+inf`` at the save times never reached: diffrax saves a time
only once an accepted step passes it and never accepts a step with a non-finite error estimate.
``rk4`` has no step control: it carries a blow-up forward (``inf`` or NaN after it).

**Dtypes.** Integer times and states become the default float; each state leaf is carried in the
common float dtype of itself and ``ts`` (diffrax's rule, applied to ``rk4`` too), so a float32 solve
needs float32 ``ts`` (and tolerances above float32 resolution, e.g. ``rtol=1e-5``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ctx_staircase.internal import all_finite, check_choice, check_int, check_real, check_scalar

__all__ = [
    "BLOW_UP",
    "SOLVERS",
    "STOPPED",
    "Solution",
    "VectorField",
    "describe",
    "heun",
    "integrate",
    "result_message",
    "rk4",
]

SOLVERS = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}

#: ``Solution.result`` codes, by index.
_RESULT_MESSAGES = (
    "ok",
    "max_steps reached",
    "solver failure (step size underflow or a singular step)",
    "non-finite value",
    "stopped: the stop condition held",
    "blow-up: |y| reached the blow_up bound",
)

#: `_RESULT_MESSAGES` codes of a solve that ended early at an event, as asked (``ok`` True).
STOPPED, BLOW_UP = 4, 5

#: A vector field ``(t, y, args) -> dy/dt``. The solve is an ``equinox.filter_jit`` function keyed
#: on the vector field, the solver name and the static options, so repeated calls with the same
#: ``vector_field`` object, the same shapes and dtypes compile once; ``rtol``, ``atol``, ``dt0``,
#: ``y0``, ``ts`` and the array leaves of ``args`` are traced. Define ``vector_field`` once (not a
#: fresh lambda per call) and pass numbers in ``args`` as arrays (non-array leaves of ``args`` are
#: static and recompile per value).
VectorField = Callable[[jax.Array, Any, Any], Any]


class Solution(NamedTuple):
    """A trajectory saved at the requested times.

    Attributes:
        ts: float ``[T]``, the save times (as requested).
        ys: pytree like ``y0``, every leaf with a leading ``[T]`` axis; ``ys`` at ``ts[0]`` is
            ``y0``. After a failure (``ok`` False) the values at the times reached before it are
            kept and the times not reached are ``+inf`` (``integrate``; ``rk4``: ``inf`` or NaN).
        ok: bool ``[]``, True when the solve succeeded and every saved value is finite.
        num_steps: int32 ``[]``, the number of steps taken (accepted and rejected for
            ``integrate``; ``substeps * (T - 1)`` for ``rk4``).
        result: int32 ``[]``, why the solve ended: an index into `_RESULT_MESSAGES` (0 = ok;
            diffrax's own result code is mapped onto 1-2; `STOPPED` and `BLOW_UP`: an event of
            `integrate` ended it).
        t_end: float ``[]``, the time the solve reached: ``ts[-1]``, or the time of the step at
            which an event held (``integrate``), or the last time reached before a failure.
    """

    ts: jax.Array
    ys: Any
    ok: jax.Array
    num_steps: jax.Array
    result: jax.Array
    t_end: jax.Array

    def describe(self) -> str:
        """One line (one lane; under ``vmap`` index the lane first): `describe`."""
        return describe(self.result, self.t_end)


def result_message(code) -> str:
    """The text of one ``Solution.result`` code."""
    code = int(code)
    if not 0 <= code < len(_RESULT_MESSAGES):
        raise ValueError(f"code must be in [0, {len(_RESULT_MESSAGES)}); got {code}")
    return _RESULT_MESSAGES[code]


def describe(code, t_end) -> str:
    """How a solve ended, in one line: ``ok``, ``blow-up at t = T``, ``stopped at t = T`` or
    the failure's `_RESULT_MESSAGES` text (``code`` and ``t_end`` of a `Solution`)."""
    code = int(code)
    if code == BLOW_UP:
        return f"blow-up at t = {float(t_end):.6g}"
    if code == STOPPED:
        return f"stopped at t = {float(t_end):.6g}"
    return result_message(code)


def _result_code(solver_ok: jax.Array, max_steps: jax.Array, finite: jax.Array) -> jax.Array:
    failure = jnp.where(max_steps, 1, 2)
    return jnp.where(solver_ok, jnp.where(finite, 0, 3), failure).astype(jnp.int32)


def _concrete(x: Any) -> np.ndarray | None:
    """``x`` as a numpy array, or None where it is a tracer (no value checks possible)."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _float_array(x: Any, time_dtype: Any = None) -> jax.Array:
    """A strongly typed float array: integer/bool inputs become the default float dtype; with
    ``time_dtype``, promoted to the common dtype with time (as diffrax does)."""
    x = jnp.asarray(x)
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)
    if time_dtype is not None:
        # an explicit cast, so float32 states meet float64 times under strict promotion
        with jax.numpy_dtype_promotion("standard"):
            dtype = jnp.promote_types(dtype, time_dtype)
    return jnp.asarray(x, dtype=dtype)


def _check_ts(ts: Any) -> jax.Array:
    ts = _float_array(ts)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"ts must be 1-D with at least 2 times; got shape {ts.shape}")
    values = _concrete(ts)
    if values is not None and not (np.all(np.isfinite(values)) and np.all(np.diff(values) >= 0)):
        raise ValueError(f"ts must be finite and non-decreasing; got {values}")
    return ts


@eqx.filter_jit
def _solve_diffrax(vector_field, y0, ts, args, rtol, atol, dt0, solver, max_steps, stop, bound):
    def blown(t, y, args, **_):
        return jnp.any(
            jnp.asarray([jnp.max(jnp.abs(leaf)) >= bound for leaf in jax.tree.leaves(y)])
        )

    def stopped(t, y, args, **_):
        return stop(t, y, args)

    conditions = ([] if bound is None else [blown]) + ([] if stop is None else [stopped])
    event = None if not conditions else diffrax.Event(tuple(conditions))
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        SOLVERS[solver](),
        t0=ts[0],
        t1=ts[-1],
        dt0=dt0,
        y0=y0,
        args=args,
        saveat=diffrax.SaveAt(ts=ts, t1=True),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        event=event,
        throw=False,
    )
    fired = sol.result == diffrax.RESULTS.event_occurred
    ys, t_end = _reached_values(sol.ts, sol.ys, ts, y0, hold=fired)
    solver_ok = (sol.result == diffrax.RESULTS.successful) | fired
    finite = all_finite(ys)
    code = _result_code(solver_ok, sol.result == diffrax.RESULTS.max_steps_reached, finite)
    if conditions:
        which = jnp.asarray(sol.event_mask[0]) if bound is not None else jnp.asarray(False)
        code = jnp.where(fired & finite, jnp.where(which, BLOW_UP, STOPPED), code)
    code = code.astype(jnp.int32)
    num_steps = jnp.asarray(sol.stats["num_steps"], dtype=jnp.int32)
    return Solution(ts, ys, solver_ok & finite, num_steps, code, t_end)


def _reached_values(saved_ts, saved_ys, ts, y0, hold) -> tuple[Any, jax.Array]:
    """The values at ``ts`` from diffrax's ``SaveAt(ts=ts, t1=True)`` output, and the time the
    solve reached.

    diffrax fills the save slots in order: the times of ``ts`` it reached, then the state at
    the end of the solve, then ``inf``. So a time of ``ts`` up to that end holds its saved value
    (``y0`` at ``ts[0]``: without a successful step diffrax saves nothing, not even ``t0``);
    a later one holds the final state when ``hold`` (an event ended the flow) and ``+inf``
    otherwise (a failure: the solve never got there).
    """
    count = ts.shape[0]
    finite = jnp.isfinite(saved_ts)
    end = jnp.argmax(jnp.where(finite, saved_ts, -jnp.inf))
    t_end = jnp.where(jnp.any(finite), saved_ts[end], ts[0])
    start, reached = ts == ts[0], ts <= t_end

    def fix(saved: jax.Array, initial: jax.Array) -> jax.Array:
        expand = (slice(None),) + (None,) * initial.ndim
        later = jnp.where(hold, saved[end], jnp.full_like(initial, jnp.inf))
        values = jnp.where(reached[expand], saved[:count], later[None])
        return jnp.where(start[expand], initial, values)

    return jax.tree.map(fix, saved_ys, y0), t_end


def integrate(
    vector_field: VectorField,
    y0: Any,
    ts: Any,
    args: Any = None,
    *,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 100_000,
    dt0: float | None = None,
    stop: Callable[[jax.Array, Any, Any], jax.Array] | None = None,
    blow_up: float | None = None,
) -> Solution:
    """Solve ``dy/dt = vector_field(t, y, args)`` from ``y(ts[0]) = y0``, saving at ``ts``.

    Two events end a solve early, at the end of the first step where they hold (diffrax
    ``Event``), so no step is spent after them: ``stop(t, y, args) -> bool []`` (e.g. an
    escape), reported as `STOPPED`, and ``max |y| >= blow_up`` over every leaf, reported as
    `BLOW_UP` ("blow-up at t = ...", `Solution.describe`). Both keep ``ok`` True, and the save
    times after the event hold the state at the event (``t_end``), as a flow that stopped there.

    Args:
        vector_field: ``(t [], y pytree, args) -> dy`` with the structure, shapes and dtypes of y.
        y0: initial state, any pytree of float arrays (see Dtypes in the module docstring).
        ts: float ``[T]``, ``T >= 2``, non-decreasing; integration runs from ``ts[0]`` to
            ``ts[-1]``.
        args: passed through to ``vector_field``; array leaves are traced.
        solver: ``"tsit5"`` (default), ``"dopri5"`` or ``"dopri8"`` (explicit Runge-Kutta).
        rtol, atol: PID step-size control tolerances (positive, finite).
        max_steps: step budget (int >= 1); exhausting it gives ``ok = False``, not an error.
        dt0: initial step size; None lets the controller choose.
        stop: the early-stop condition (traceable; same ``args``), or None.
        blow_up: the bound on ``max |y|`` that ends the solve as a blow-up (positive), or None.

    Returns:
        ``Solution(ts [T], ys (leaves [T, ...]), ok bool [], num_steps int32 [], result int32 [],
        t_end [])``.
    """
    check_choice(solver, "solver", tuple(SOLVERS))
    ts = _check_ts(ts)
    rtol = jnp.asarray(check_scalar(rtol, "rtol", low=0, low_open=True), ts.dtype)
    atol = jnp.asarray(check_scalar(atol, "atol", low=0, low_open=True), ts.dtype)
    max_steps = check_int(max_steps, "max_steps")
    if dt0 is not None:
        dt0 = jnp.asarray(check_scalar(dt0, "dt0", low=0, low_open=True), ts.dtype)
    y0 = jax.tree.map(lambda leaf: _float_array(leaf, ts.dtype), y0)
    if stop is not None and not callable(stop):
        raise TypeError(f"stop must be a function (t, y, args) -> bool or None; got {stop!r}")
    if blow_up is not None:
        blow_up = float(check_real(blow_up, "blow_up", low=0, low_open=True))
    return _solve_diffrax(
        vector_field, y0, ts, args, rtol, atol, dt0, solver, max_steps, stop, blow_up
    )


def _axpy(y, h, k):
    """y + h k, leaf-wise, with h cast to each leaf's dtype (strict promotion)."""
    return jax.tree.map(lambda yi, ki: yi + h.astype(yi.dtype) * ki, y, k)


def _rk4_step(vector_field, y, t, h, args):
    k1 = vector_field(t, y, args)
    k2 = vector_field(t + h / 2, _axpy(y, h / 2, k1), args)
    k3 = vector_field(t + h / 2, _axpy(y, h / 2, k2), args)
    k4 = vector_field(t + h, _axpy(y, h, k3), args)
    slope = jax.tree.map(lambda a, b, c, d: a + 2 * b + 2 * c + d, k1, k2, k3, k4)
    return _axpy(y, h / 6, slope)


def _heun_step(vector_field, y, t, h, args):
    k1 = vector_field(t, y, args)
    k2 = vector_field(t + h, _axpy(y, h, k1), args)
    return _axpy(y, h / 2, jax.tree.map(jnp.add, k1, k2))


@eqx.filter_jit
def _solve_rk4(vector_field, y0, ts, args, substeps, max_step=None):
    return _solve_fixed(_rk4_step, vector_field, y0, ts, args, substeps, max_step)


@eqx.filter_jit
def _solve_heun(vector_field, y0, ts, args, substeps, max_step=None):
    return _solve_fixed(_heun_step, vector_field, y0, ts, args, substeps, max_step)


def _solve_fixed(method, vector_field, y0, ts, args, substeps, max_step):
    """``method(vector_field, y, t, h, args)`` steps over each save interval (``substeps``
    equal steps, or as few as keep them ``<= max_step``)."""

    def step(y, t, h):
        return method(vector_field, y, t, h, args)

    def count(t_start, t_end):
        if max_step is None:
            return jnp.asarray(substeps, jnp.int32)
        return jnp.maximum(jnp.ceil((t_end - t_start) / max_step), 1).astype(jnp.int32)

    def interval(y, bounds):
        t_start, t_end = bounds
        n = count(t_start, t_end)
        h = (t_end - t_start) / n.astype(ts.dtype)
        y = lax.fori_loop(0, n, lambda j, y: step(y, t_start + j.astype(h.dtype) * h, h), y)
        return y, y

    _, ys = lax.scan(interval, y0, (ts[:-1], ts[1:]))
    ys = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), y0, ys)
    num_steps = jnp.sum(jax.vmap(count)(ts[:-1], ts[1:])).astype(jnp.int32)
    finite = all_finite(ys)
    return Solution(ts, ys, finite, num_steps, _result_code(True, False, finite), ts[-1])


def rk4(
    vector_field: VectorField,
    y0: Any,
    ts: Any,
    args: Any = None,
    *,
    substeps: int = 10,
    max_step: float | None = None,
) -> Solution:
    """Classical fixed-step RK4: ``substeps`` equal steps between each pair ``ts[i] -> ts[i+1]``,
    or, with ``max_step``, ``ceil((ts[i+1] - ts[i]) / max_step)`` equal steps (at least one), so
    that an uneven save grid still gets one step size.

    Global error is ``O(h^4)`` with ``h = (ts[i+1] - ts[i]) / substeps`` for a smooth field (a
    field that jumps, like the ReLU gated flow, converges at first order in ``h``). Arguments
    as in ``integrate``; ``substeps`` is an int >= 1, ``max_step`` a finite positive number.

    Returns:
        ``Solution(ts [T], ys (leaves [T, ...]), ok bool [] (all saved values finite),
        num_steps int32 [] (the RK4 steps taken: ``substeps * (T - 1)`` without ``max_step``),
        result int32 [])``.
    """
    return _fixed_steps(_solve_rk4, vector_field, y0, ts, args, substeps, max_step)


def heun(vector_field: VectorField, y0: Any, ts: Any, args: Any = None, **steps) -> Solution:
    """Heun's method (the explicit trapezoid: ``k1 = f(t, y)``, ``k2 = f(t + h, y + h k1)``,
    ``y <- y + h (k1 + k2) / 2``) on the step grid of `rk4`, with the same arguments (``steps``:
    ``substeps`` or ``max_step``) and `Solution`. Second order for a smooth field at half RK4's
    calls per step; on a field that jumps (ReLU gates) both converge at first order, and the
    step is set by measurement."""
    return _fixed_steps(_solve_heun, vector_field, y0, ts, args, **steps)


def _fixed_steps(
    solve, vector_field, y0, ts, args, substeps: int = 10, max_step: float | None = None
) -> Solution:
    """The checks of `rk4` and `heun`, then ``solve``."""
    ts = _check_ts(ts)
    substeps = check_int(substeps, "substeps")
    if max_step is not None:
        max_step = check_real(max_step, "max_step", low=0, low_open=True)
    y0 = jax.tree.map(lambda leaf: _float_array(leaf, ts.dtype), y0)
    return solve(vector_field, y0, ts, args, substeps, max_step)
