"""What a theory is to the rest of the package: the records it fills in (theory/closed_form.md §5).

A theory of the early dynamics predicts, for each gamma lane of a run, the weights ``W_E(t)``,
``W_U(t)`` on the run's time grid ``t = lr * step``. Its `Theory` record carries everything the
package asks it: its ``name`` (the key of its numbers in the saved JSON), its plot `Style`, its
``solve`` (a `Problem` in, one `WeightTrajectory` per lane out), its ``nbytes`` (a `Size` in, the
peak bytes of its solve out, checked before any work), the `ModelTheory` it belongs to and the
activation it needs, and the gamma range it is `Validation`-ed over against training. A
`ModelTheory` is what every theory of one model shares: the gamma range and defaults, the weights
it evolves, the escape predicted before training (which sizes the horizon), the escape-time law
against gamma. `theories` registers every record; nothing else names a theory.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import activations
from ctx_staircase.dataset import TokenDataset

__all__ = [
    "BLOW_UP",
    "SOLVER_COPIES",
    "ModelTheory",
    "PerOrder",
    "Prediction",
    "Problem",
    "Role",
    "Setting",
    "Size",
    "SolverStatus",
    "Style",
    "Theory",
    "TheoryCost",
    "TheoryLanes",
    "Validation",
    "WeightTrajectory",
    "cost_account",
    "costs_from_account",
    "frozen_past",
]

#: The truncated flows have no softmax saturation, so with C_2 != 0 they blow up in finite time
#: after escape; the theory is compared before escape only, so an ODE lane ends once a weight
#: reaches this size (far past escape), as a blow-up: no steps are spent chasing it
#: (benchmarks/README.md, "Theory": 87 -> 35 steps per lane, the same values before).
BLOW_UP = 1.0
#: Explicit Runge-Kutta state held by the adaptive solver, in copies of y (Tsit5: 7 stages,
#: the state, its error estimate and the next step's candidates).
SOLVER_COPIES = 12


#: The key under which `Problem.once` adds up the seconds of the computations it handed back.
_REUSED = object()


class WeightTrajectory(NamedTuple):
    """The weights of one theory or training lane over time.

    ``ts [T]`` (``t = lr * step``), ``W_E [T, V, d]``, ``W_U [T, V, d]``.

    ``logit_scale [T]``: the escape statistic (C7) of the model the weights belong to, when it
    is not the FFN's `closed_form.logit_scale` of ``(W_E, W_U)`` (attention: the attention
    logits, measured by the model itself or by the theory's uniform-attention readout).
    """

    ts: np.ndarray
    W_E: np.ndarray
    W_U: np.ndarray
    logit_scale: np.ndarray | None = None


class SolverStatus(NamedTuple):
    """How one ODE lane's solve ended: ``ok`` and the solver's message (`ode.describe`, e.g.
    ``"blow-up at t = 61.2"``)."""

    ok: bool
    result: str


class TheoryLanes(NamedTuple):
    """One theory's trajectories, one per gamma lane.

    Attributes:
        trajectories: ``[G]`` `WeightTrajectory` on the run's time grid.
        solver: ``[G]`` `SolverStatus` of each lane's ODE solve; None for a closed form.
    """

    trajectories: tuple[WeightTrajectory, ...]
    solver: tuple[SolverStatus, ...] | None = None


class Style(NamedTuple):
    """How a theory is drawn (`plots`): its ``role`` (``"closed_form"`` or ``"ode"``, a key of
    `plots.LINE_STYLE`), its ``label`` (its role's words first: "closed form: ...", "ODE: ..."),
    its own ``dashes`` within its role's style (None: the role's line style) and line width."""

    role: str
    label: str
    dashes: Any = None
    width: float = 1.4


class Role(enum.Enum):
    """What a prediction starts from, and so what it can claim.

    ``LAW``: the data and the initial weights only, so it predicts a training it has not seen;
    ``REPLAY``: it reads a state of the training it predicts (a diagnostic, whose cost must count
    the training up to that state). Saved records and the command line spell it ``.value``.
    """

    LAW = "law"
    REPLAY = "replay"


class TheoryCost(NamedTuple):
    """One prediction's cost as a record keeps it (`cost_account`): its ``name`` and `Role`,
    its wall ``seconds`` and the ``training`` seconds it is set against (None: not measured)."""

    name: str
    role: Role
    seconds: float
    training: float | None

    @property
    def ratio(self) -> float | None:
        """``seconds`` over ``training``'s (None where training was not measured)."""
        return None if self.training is None else self.seconds / self.training


def cost_account(training: float | None, seconds: dict[str, float], roles: dict) -> dict:
    """The saved account of what a comparison cost, outside a record's numbers (wall time
    changes from run to run): ``{"simulation": training, "theories": {name: {"role",
    "seconds"}}}``, each name's `Role` from ``roles``. `costs_from_account` reads it back."""
    return {
        "simulation": training,
        "theories": {
            name: {"role": roles[name].value, "seconds": spent} for name, spent in seconds.items()
        },
    }


def costs_from_account(account: dict) -> list[TheoryCost]:
    """The `TheoryCost` of each prediction of a saved `cost_account`, in its order."""
    return [
        TheoryCost(name, Role(entry["role"]), entry["seconds"], account["simulation"])
        for name, entry in account["theories"].items()
    ]


class Validation(NamedTuple):
    """A theory's escape law measured within 5% of GD training: the activation spec and the
    gamma range of the measurement."""

    activation: str
    gammas: tuple[float, float]


class Setting(NamedTuple):
    """The checked settings of a theory run (`comparison.check_theory_inputs`).

    Attributes:
        model: the `ModelTheory` of the trained model.
        gammas: ``[G]`` init scale exponents (weights ``d^{-gamma} Z``).
        max_orders: the context orders ``m_max`` the per-order theories are solved at.
        prediction: the softmax term of the FFN signature flow, a `flows.Prediction`.
        activation: the activation spec as given (the model's, for models that take one).
        coefficients: its effective Taylor coefficients ``C_1, C_2, ...``.
        theories: the names of the theories to solve, or None for every one that applies.
    """

    model: ModelTheory
    gammas: np.ndarray
    max_orders: tuple[int, ...]
    prediction: str
    activation: str
    coefficients: tuple[float, ...]
    theories: tuple[str, ...] | None = None


class Problem(NamedTuple):
    """What a theory's ``solve`` is given: float64 throughout.

    Attributes:
        setting: the run's `Setting`.
        ds: the data.
        d: the width.
        unit: the weights at scale 1 (the seed's standard-normal draw ``Z``), by role.
        y0: the initial weights ``d^{-gamma} Z`` of every lane, by role, ``[G, ...]``.
        M: the drive matrix (eq. C1) ``[V, V]``; ``top``: its top singular value ``s_1``.
        threshold: the escape threshold (C7), nats.
        ts: ``[T]`` the run's time grid (None while the horizon is being sized).
        map_lanes: ``map_lanes(fn, *lanes)``, ``vmap(fn)`` over the leading (lane) axis of its
            arguments, as `sweep.sweep_map` runs it (and counts the lanes to the progress bar).
        shared: results several theories share, computed once (`once`).
    """

    setting: Setting
    ds: TokenDataset
    d: int
    unit: dict[str, np.ndarray]
    y0: dict[str, np.ndarray]
    M: np.ndarray
    top: float
    threshold: float
    ts: np.ndarray | None
    map_lanes: Callable
    shared: dict

    def once(self, compute: Callable[[Problem], Any]) -> Any:
        """``compute(self)``, computed on the first call and kept for this problem, with the
        wall seconds it took; a later call adds them to `reused_seconds`, so each theory that
        shares the computation is charged all of it (`comparison.Cost`)."""
        if compute in self.shared:
            result, seconds = self.shared[compute]
            self.shared[_REUSED] = self.shared.get(_REUSED, 0.0) + seconds
            return result
        start = time.perf_counter()
        result = jax.block_until_ready(compute(self))
        self.shared[compute] = (result, time.perf_counter() - start)
        return result

    def reused_seconds(self) -> float:
        """The seconds of the shared computations `once` handed back since the last call."""
        return self.shared.pop(_REUSED, 0.0)


class Size(NamedTuple):
    """The sizes a theory's memory estimate reads (`budget.theory_stages` fills them in).

    ``G`` gamma lanes, ``T`` snapshots, ``n`` samples of length ``L``, ``V`` vocabulary, width
    ``d``; ``Vnu`` labels and ``P`` context tokens (the signature axes, `budget`); the run's
    ``max_orders`` and ``prediction``; ``in_flight``: lanes of a `Problem.map_lanes` holding their
    working memory at once; ``d_k``: the attention key width.
    """

    G: int
    T: int
    n: int
    L: int
    V: int
    d: int
    Vnu: int
    P: int
    max_orders: tuple[int, ...]
    prediction: str
    in_flight: int
    d_k: int = 64

    @property
    def trajectory_bytes(self) -> int:
        """A theory's output: ``G`` lanes of ``T`` snapshots of ``W_E, W_U [V, d]``, float64."""
        return 8 * self.G * self.T * 2 * self.V * self.d

    def ode_bytes(self, state: int, field: int = 0) -> int:
        """Peak bytes of ``G`` adaptive ODE lanes (`ode.integrate`) of ``state`` elements each:
        the saved trajectories ``[G, T, state]``, and per lane in flight the solver's state
        (`SOLVER_COPIES` copies) and the vector field's temporaries (``field`` elements)."""
        working = min(self.G, self.in_flight) * (SOLVER_COPIES * state + field)
        return 8 * (self.G * self.T * state + working)


@dataclasses.dataclass(frozen=True)
class Theory:
    """One theory compared with training (module docstring).

    Attributes:
        name: its key in the saved numbers, e.g. ``"closed_form_feedback"``.
        style: its `Style` in figures.
        solve: ``solve(problem) -> TheoryLanes``, one trajectory per gamma lane.
        nbytes: ``nbytes(size) -> int``, the peak bytes of ``solve`` (its output included).
        model: the `ModelTheory` it describes.
        activation: the activation spec it needs (e.g. ``"relu"``), or None for any.
        validated: the range its escape law is measured over, or None.
        role: a `Role`; a ``solve`` is given a `Problem` (data and initial weights), so every
            registered theory is a law.
    """

    name: str
    style: Style
    solve: Callable[[Problem], TheoryLanes]
    nbytes: Callable[[Size], int]
    model: ModelTheory
    activation: str | None = None
    validated: Validation | None = None
    role: Role = Role.LAW

    def applies(self, setting: Setting) -> bool:
        """Whether a run of ``setting`` includes this theory."""
        if setting.model is not self.model:
            return False
        return self.activation is None or (
            activations.get(self.activation) == activations.get(setting.activation)
        )

    def instances(self, setting: Setting) -> tuple[Theory, ...]:
        """The theories a run of ``setting`` solves from this record: itself, if it applies."""
        return (self,) if self.applies(setting) else ()


class PerOrder(NamedTuple):
    """A theory solved once per context order ``m`` of the run's ``max_orders``:
    ``theory(m)`` builds the `Theory` of order ``m``."""

    theory: Callable[[int], Theory]

    def instances(self, setting: Setting) -> tuple[Theory, ...]:
        """The `Theory` of every order of ``setting.max_orders`` that applies."""
        built = (self.theory(m) for m in setting.max_orders)
        return tuple(theory for theory in built if theory.applies(setting))


class Prediction(NamedTuple):
    """What a model's theory predicts before training: ``escape [G]``, the escape time per
    lane that sizes the horizon, and ``law``, its escape law against gamma (a record with a
    ``name``, a ``style`` and its ``escape [G]``, as a theory has; attention:
    `escape.PlateauLaw`), or None."""

    escape: np.ndarray
    law: Any = None


@dataclasses.dataclass(frozen=True, eq=False)
class ModelTheory:
    """What every theory of one model shares; one object per model, compared by identity.

    Attributes:
        model: the `models.ModelSpec` trained against the theory.
        gamma_range: the gamma its theory is documented for: below it the initial logits are
            near the escape threshold (no plateau to predict); above it the plateau outgrows
            any CPU horizon.
        default_gammas: the gamma a run takes when none is given.
        roles: the weights the theory evolves (`models.weights` roles).
        model_kwargs: keywords of the trained model the theory assumes (e.g. no positions).
        predict: ``predict(problem) -> Prediction``, before training (``problem.ts`` None).
        log_time: escape slopes are ``d ln t / dgamma`` (a power law in the init scale), else
            ``dt / dgamma``.
        analytic_slope: ``analytic_slope(problem) -> float``, the slope of the escape law.
        analytic_curve: ``analytic_curve(gammas, experiment) -> (times, label)``, the analytic
            escape law drawn on the escape-time figure (mathtext label).
        slope_words: how the command line names the slope and its analytic value.
        signature_order: ``signature_order(L, max_orders, prediction)``, the highest signature
            order its flows contract.
        escape_bytes: ``escape_bytes(size)``, peak bytes of ``predict``, or None where small.
        compare_bytes: ``compare_bytes(size)``, the comparison's temporaries (`budget`).
    """

    model: Any
    gamma_range: tuple[float, float]
    default_gammas: tuple[float, ...]
    roles: tuple[str, ...]
    model_kwargs: dict
    predict: Callable[[Problem], Prediction]
    log_time: bool
    analytic_slope: Callable[[Problem], float]
    analytic_curve: Callable[[np.ndarray, Any], tuple[np.ndarray, str]]
    slope_words: tuple[str, str]
    signature_order: Callable[[int, tuple[int, ...], str], int]
    compare_bytes: Callable[[Size], int]
    escape_bytes: Callable[[Size], int] | None = None

    @property
    def name(self) -> str:
        """The trained model's name (``"ffn"``, ``"attention"``)."""
        return self.model.name

    def trained_kwargs(self, d: int, activation: str) -> dict:
        """The keywords of the trained model: float64 at width ``d``, with ``activation`` when
        the model takes one, and `model_kwargs`."""
        kwargs = dict(d=d, dtype="float64", **self.model_kwargs)
        if self.model.activation:
            kwargs["activation"] = activation
        return kwargs


def frozen_past(field, cap: float):
    """The vector field ``field(t, y, args)`` (``y`` a dict of arrays), zero once some entry of
    ``y`` reaches ``cap`` in absolute value (far past escape): the flow stops there.

    The truncated flows have no softmax saturation, so with ``C_2 != 0`` they blow up in finite
    time after escape; the theory is only compared before escape, and freezing there keeps the
    solver from chasing the blow-up.
    """

    def guarded(t, y, args):
        dy = field(t, y, args)
        running = jnp.all(jnp.asarray([jnp.max(jnp.abs(v)) < cap for v in y.values()]))
        return {k: jnp.where(running, v, jnp.zeros_like(v)) for k, v in dy.items()}

    return guarded
