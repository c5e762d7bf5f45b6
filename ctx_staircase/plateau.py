"""The plateau law of a homogeneous flow from one unit-scale solve (theory/attention.md A5b).

A vector field homogeneous of degree ``k`` (``F(eps y) = eps^k F(y)``) started at ``eps Z`` has
the solution ``y(t) = eps y~(eps^(k-1) t)``, with ``y~`` the solution started at the unit-scale
draw ``Z``. If the escape statistic is homogeneous of degree ``q`` (``Lambda(eps y) = eps^q
Lambda(y)``), the escape at threshold ``kappa`` is

    t_esc(eps) = eps^-(k-1) tau(kappa / eps^q),      tau(x) = first tau with Lambda~(tau) >= x,

so one solve from ``Z`` gives the escape time of every initial scale. Where ``y~`` blows up at
``T_Z`` with ``Lambda~ ~ A (T_Z - tau)^-2`` (the depth-4 uniform-attention network, k = 3, q = 4)
this is the plateau law ``t_esc = T_Z eps^-2 - sqrt(A / kappa)``: with ``eps = d^-gamma``,
``t* = T_Z d^(2 gamma)`` and ``log t*`` has slope ``2 ln d`` in gamma.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import ode

__all__ = [
    "UnitScaleEscape",
    "unit_scale_escape",
]

#: Saved points of the unit-scale solve (in growth time s, see `unit_scale_escape`).
_GRID = 600
#: Growth time solved for: the weights grow by about e^_GROWTH at most.
_GROWTH = 40.0
#: The solve freezes once a weight reaches this magnitude (deep in the blow-up).
_CAP = 1e6


class UnitScaleEscape(NamedTuple):
    """One unit-scale solve, turned into the escape time of every initial scale.

    Attributes:
        taus: ``[T]`` unit-scale times, increasing, up to where the weights reached `_CAP`.
        scale: ``[T]`` the escape statistic ``Lambda~(tau)`` there (non-decreasing).
        blowup_time: ``T_Z``, fitted from ``Lambda~^(-1/2)`` linear in ``tau`` near the blow-up
            (inf if the flow did not blow up).
        amplitude: ``A`` of ``Lambda~ ~ A (T_Z - tau)^-2``.
        degree: ``k``, the field's degree of homogeneity (time scales as ``eps^-(k-1)``).
        logit_degree: ``q``, the statistic's degree.
        ok: whether the solve succeeded (`ode.Solution.ok`).
        result: its `ode._RESULT_MESSAGES` code.
    """

    taus: np.ndarray
    scale: np.ndarray
    blowup_time: float
    amplitude: float
    degree: int
    logit_degree: int
    ok: bool
    result: int

    def escape_time(self, eps, threshold: float) -> np.ndarray:
        """``t_esc(eps)`` of the flow started at ``eps Z`` (module docstring), shape of ``eps``.

        Interpolated log-linearly in ``Lambda~`` between the solve's points where the level
        ``threshold / eps^q`` was reached; 0 where the start is already past it; NaN past the
        solve (only if the flow did not blow up).
        """
        eps = np.asarray(eps, dtype=np.float64)
        level = np.log(threshold / eps**self.logit_degree)
        tau = np.interp(level, np.log(self.scale), self.taus, left=0.0, right=np.nan)
        return tau / eps ** (self.degree - 1)

    def law(self, eps, threshold: float) -> np.ndarray:
        """The plateau law ``T_Z eps^-(k-1) - sqrt(A / threshold)`` (k = 3, q = 4, eq. A5b)."""
        eps = np.asarray(eps, dtype=np.float64)
        return self.blowup_time / eps ** (self.degree - 1) - np.sqrt(self.amplitude / threshold)


def unit_scale_escape(
    vector_field: Callable,
    unit: Any,
    statistic: Callable[[Any], jax.Array],
    *,
    degree: int,
    logit_degree: int,
) -> UnitScaleEscape:
    """Solve the flow from the unit-scale draw ``unit`` through its blow-up (module docstring).

    Args:
        vector_field: ``(t, y, args) -> dy``, autonomous and homogeneous of degree ``degree``.
        unit: the pytree ``Z`` (the initial weights at ``eps = 1``).
        statistic: ``y -> Lambda(y)`` for a batch of states (leading time axis), homogeneous of
            degree ``logit_degree``.

    A finite-time blow-up cannot be saved on a grid in ``tau`` fixed in advance, so the solve
    runs in the growth time ``s``, ``dtau/ds = 1 / (g_0 + g(y))`` with ``g = |F(y)| / |y|`` the
    current growth rate: ``ln |y|`` grows at most at rate 1 in ``s``, the blow-up sits at
    ``s = inf``, and equal steps in ``s`` resolve the plateau and the blow-up alike.
    """
    g0 = _rate(vector_field(0.0, unit, None), unit)
    field = _growth_time(vector_field, g0)
    state = {"y": unit, "tau": jnp.zeros((), jnp.result_type(*jax.tree.leaves(unit)))}
    solution = ode.integrate(
        field, state, np.linspace(0.0, _GROWTH, _GRID), rtol=1e-10, atol=1e-13, max_steps=100_000
    )
    running = np.asarray(_largest(solution.ys["y"])) < _CAP
    taus = np.asarray(solution.ys["tau"], dtype=np.float64)[running]
    scale = np.maximum.accumulate(np.asarray(statistic(solution.ys["y"]), np.float64)[running])
    blowup, amplitude = _fit_blowup(taus, scale) if not running.all() else (np.inf, np.nan)
    return UnitScaleEscape(
        taus=taus,
        scale=scale,
        blowup_time=blowup,
        amplitude=amplitude,
        degree=int(degree),
        logit_degree=int(logit_degree),
        ok=bool(solution.ok),
        result=int(solution.result),
    )


def _fit_blowup(taus: np.ndarray, scale: np.ndarray) -> tuple[float, float]:
    """``(T_Z, A)`` of ``Lambda^(-1/2) = (T_Z - tau) / sqrt(A)`` over the last decades of growth."""
    root = scale**-0.5
    near = scale >= scale[-1] / 1e4  # the last four decades of Lambda: deep in the blow-up
    slope, intercept = np.polyfit(taus[near], root[near], 1)
    return float(-intercept / slope), float(slope**-2)


def _norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(tree)))


def _rate(dy, y) -> jax.Array:
    return _norm(dy) / _norm(y)


def _largest(ys) -> jax.Array:
    """The largest weight magnitude at every saved time, ``[T]``."""
    leaves = jax.tree.leaves(ys)
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x.reshape(x.shape[0], -1)), -1) for x in leaves]), 0)


def _growth_time(vector_field: Callable, g0) -> Callable:
    """The flow in growth time ``s`` (see `unit_scale_escape`), frozen once a weight hits _CAP."""

    def field(s, state, args):
        y = state["y"]
        dy = vector_field(s, y, args)
        speed = 1.0 / (g0 + _rate(dy, y))
        running = jnp.all(jnp.asarray([jnp.max(jnp.abs(v)) < _CAP for v in jax.tree.leaves(y)]))
        speed = jnp.where(running, speed, 0.0)
        return {"y": jax.tree.map(lambda v: speed * v, dy), "tau": speed}

    return field
