"""The escape each model's theory predicts before training, which sizes a run's horizon.

- FFN: the first time the closed form (C3) reaches the escape threshold (C7), per lane
  (`closed_form_escape`), searched on a growing time grid.
- Attention-only: the plateau law ``t* = T_Z d^{2 gamma} - c`` (theory/attention.md A5b) from one
  unit-scale solve of the uniform-attention flow (`plateau_law`); `PlateauLaw` holds its numbers.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import closed_form, flows, plateau, signatures
from ctx_staircase.theory import Prediction, Problem, Size, Style

__all__ = [
    "ESCAPE_CHUNK",
    "PlateauLaw",
    "closed_form_escape",
    "closed_form_escape_bytes",
    "plateau_law",
]

#: Time points of the closed form's escape search, evaluated this many at a time (the logits of
#: every sample at every point of the grid at once would take GBs on the flagship's add N=40).
_ESCAPE_GRID = 2000
ESCAPE_CHUNK = 100


def closed_form_escape(problem: Problem) -> Prediction:
    """The closed form's (C3) escape time per lane of ``problem``: the horizon the run must
    cover (no law against gamma: the escape-time slope is the analytic ``ln d / (C_1 s_1)``)."""
    ds, M, coefficients = problem.ds, problem.M, problem.setting.coefficients
    times = []
    for W_E0, W_U0 in zip(problem.y0["W_E"], problem.y0["W_U"], strict=True):
        solution = closed_form.linear_solution(M, W_E0, W_U0, coefficients[0])
        scale0 = float(closed_form.logit_scale(W_E0, W_U0, ds.tokens, coefficients))
        # the top mode multiplies the logits by about e^{2 C_1 s_1 t}; transients add a few
        # multiples of 1 / (C_1 s_1), so start at 3x the pure-exponential time and extend
        rate = 2 * coefficients[0] * problem.top
        end = 3 * (max(np.log(problem.threshold / max(scale0, 1e-300)), 0.0) + 2.0) / rate
        escape = float("nan")
        for _ in range(4):
            grid = np.linspace(0.0, end, _ESCAPE_GRID)
            scale = _grid_scale(solution, jnp.asarray(grid), jnp.asarray(ds.tokens), coefficients)
            escape = closed_form.crossing_time(grid, np.asarray(scale), problem.threshold)
            if np.isfinite(escape):
                break
            end *= 4
        times.append(escape)
    return Prediction(np.asarray(times))


@functools.partial(jax.jit, static_argnames="coefficients")
def _grid_scale(solution, grid, tokens, coefficients) -> jax.Array:
    """`closed_form.logit_scale` of ``solution`` at every time of ``grid`` ``[T]`` -> ``[T]``,
    `ESCAPE_CHUNK` times at a time (the hidden states of the whole grid would take GBs); one
    compiled program per shape, for every lane and every widening of the grid."""

    def chunk(part):
        return closed_form.logit_scale(*solution(part), tokens, coefficients)

    return jax.lax.map(chunk, grid.reshape(-1, ESCAPE_CHUNK)).reshape(-1)


def closed_form_escape_bytes(size: Size) -> int:
    """Peak bytes of `closed_form_escape`: per `ESCAPE_CHUNK` time points, the gathered hidden
    states ``[chunk, n, (L + 1) d]`` (fitted to XLA) and the weights ``[chunk, V, d]``."""
    weights = 2 * size.V * size.d
    return 8 * ESCAPE_CHUNK * (2 * weights + size.n * (size.L + 1) * size.d)


class PlateauLaw(NamedTuple):
    """The attention plateau law (theory/attention.md A5b) from one unit-scale solve, ``[G]``
    per gamma where a list.

    Attributes:
        unit_scale_escape: escape times of the unit-scale solve at each ``eps = d^{-gamma}``.
        blowup_time_T_Z: ``T_Z``, the blow-up time of the unit-scale solve.
        amplitude_A: ``A`` of the law.
        offset_c: ``c = sqrt(A / threshold)``.
        plateau_law: ``T_Z d^{2 gamma} - c`` per gamma.
        single_mode_a5: A5 for one balanced mode (rate ``s_1 / L``): the order of magnitude.
        solver_ok: whether the unit-scale solve succeeded.
        solver_result: the solver's result code.
    """

    unit_scale_escape: list[float]
    blowup_time_T_Z: float
    amplitude_A: float
    offset_c: float
    plateau_law: list[float]
    single_mode_a5: list[float]
    solver_ok: object
    solver_result: object

    #: The law's name among a run's escape times, and how it is drawn.
    NAME = "plateau_law"
    STYLE = Style("closed_form", r"closed form: plateau law $T_Z d^{2\gamma} - c$")

    @property
    def name(self) -> str:
        """`NAME`: the law answers as a theory does (its name and style)."""
        return self.NAME

    @property
    def style(self) -> Style:
        """`STYLE`."""
        return self.STYLE

    @property
    def escape(self) -> list[float]:
        """The escape time the law predicts per gamma, ``T_Z d^{2 gamma} - c``."""
        return self.plateau_law

    def describe(self) -> str:
        """One line: the law's constants and its predicted escape times."""
        return (
            f"plateau law t* = T_Z d^(2γ) - c (A5b): T_Z = {self.blowup_time_T_Z:.4g}, "
            f"c = {self.offset_c:.3g}; predicted " + ", ".join(f"{t:.1f}" for t in self.escape)
        )


def plateau_law(problem: Problem) -> Prediction:
    """The ``[G]`` unit-scale escape times (the horizon) and the `PlateauLaw` of ``problem``,
    from one unit-scale uniform-attention solve (`plateau.unit_scale_escape`)."""
    ds, d, threshold = problem.ds, problem.d, problem.threshold
    field = flows.attention_uniform_flow(signatures.signature_set(ds, 0), ds.vocab_size)
    tokens = jnp.asarray(ds.tokens)
    unit = {k: jnp.asarray(v) for k, v in problem.unit.items()}
    solved = plateau.unit_scale_escape(
        field,
        unit,
        lambda ys: flows.uniform_attention_logit_scale(ys, tokens),
        degree=3,
        logit_degree=4,
    )
    eps = d ** -np.asarray(problem.setting.gammas, dtype=np.float64)
    escape = solved.escape_time(eps, threshold)
    top = problem.top
    return Prediction(
        escape,
        PlateauLaw(
            unit_scale_escape=escape.tolist(),
            blowup_time_T_Z=solved.blowup_time,
            amplitude_A=solved.amplitude,
            offset_c=float(np.sqrt(solved.amplitude / threshold)),
            plateau_law=solved.law(eps, threshold).tolist(),
            # A5 for one balanced mode, rate s_1 / L, u0 = (eps sqrt d)^4: the order of magnitude
            single_mode_a5=[
                closed_form.attention_plateau_time(top / ds.L, (e * np.sqrt(d)) ** 4) for e in eps
            ],
            solver_ok=solved.ok,
            solver_result=solved.result,
        ),
    )
