"""Theory against simulation: one set of numbers from two independent trajectories.

A theory trajectory (the closed form, or a signature-flow ODE) and a training trajectory go in on
the same time grid ``t = lr * step``; `compare` returns the numbers of theory/closed_form.md §5:

- the relative Frobenius error of ``W_E(t)`` and of the Gram matrix ``W_E W_E^T`` in the window
  before escape (``t <= window * t_esc``, measured escape; default the first half of the plateau),
  next to the same error of the null predictor "nothing moves", ``W_E(t) = W_E(0)``: a theory
  is informative only where it beats that null;
- the distance (max and mean absolute difference) between the ``rho_m(t)`` curves, m = 0, 1;
- predicted and measured escape times: the first time the largest centred logit (C7) crosses
  ``threshold``, the theory's by its own readout (`closed_form.logit_scale` for the FFN, the
  uniform-attention readout for attention) and training's by the model's own logits
  (`train.Trajectory.logit_scale`); a ratio is NaN where training starts past the threshold;
- predicted and measured onset times of order-m alignment: the first time ``rho_m(t)`` reaches
  half of its maximum over the run (theory/closed_form.md eq. C9).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import budget, closed_form, geometry, signatures
from ctx_staircase import theories as registry
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.escape import PlateauLaw
from ctx_staircase.internal import check_choice, check_int, check_real
from ctx_staircase.theory import (
    ModelTheory,
    Problem,
    Role,
    Setting,
    SolverStatus,
    Style,
    WeightTrajectory,
    cost_account,
)

__all__ = [
    "HORIZON_MARGIN",
    "Comparison",
    "Cost",
    "EscapeSlopes",
    "EscapeTimes",
    "Horizon",
    "RunComparison",
    "TheoryInputs",
    "TheorySimulation",
    "TheoryVsTraining",
    "check_theory_inputs",
    "compare",
    "comparison_summary",
    "cost_summary",
    "escape_ratio",
    "experiment_from_summary",
    "experiment_summary",
    "flows_drive",
    "horizon",
    "onset_time",
    "slope",
    "snapshot_steps",
    "solver_failures",
    "theory_vs_training",
    "validation_note",
]


class TheorySimulation(NamedTuple):
    """One quantity measured on both sides of a comparison: the theory's and training's."""

    theory: Any
    simulation: Any


class Comparison(NamedTuple):
    """Every number of `compare` (theory/closed_form.md §5), ``M`` orders, ``T`` snapshots.

    Attributes:
        escape_threshold: the threshold on the largest centred logit (C7) defining escape.
        window_end: end of the pre-escape window, ``window * t_esc`` (measured escape; the
            last time when training never escapes).
        weight_rel_error_max: max over the window of ``|W_E^th - W_E^sim|_F / |W_E^sim|_F``.
        null_weight_rel_error_max: the same error of the null predictor ``W_E(t) = W_E(0)``.
        gram_rel_error_max: the same error of the Gram matrix ``W_E W_E^T``.
        escape_time: `TheorySimulation` of the first crossings of the threshold (NaN: never).
        escape_ratio: `escape_ratio` of the two escape times.
        rho_distance_max: ``[M]`` max over t of ``|rho_m^th - rho_m^sim|``.
        rho_distance_mean: ``[M]`` mean over t of the same.
        onset_time: `TheorySimulation` of ``[M]`` onset times (eq. C9) per order.
        rho: `TheorySimulation` of the ``[M, T]`` alignment curves ``rho_m(t)``.
        logit_scale: `TheorySimulation` of the ``[T]`` escape statistics (C7).
    """

    escape_threshold: float
    window_end: float
    weight_rel_error_max: float
    null_weight_rel_error_max: float
    gram_rel_error_max: float
    escape_time: TheorySimulation
    escape_ratio: float
    rho_distance_max: list[float]
    rho_distance_mean: list[float]
    onset_time: TheorySimulation
    rho: TheorySimulation
    logit_scale: TheorySimulation


def onset_time(ts, curve) -> float:
    """First time the curve reaches half of its maximum (eq. C9); NaN for a flat curve."""
    curve = np.asarray(curve, dtype=np.float64)
    if not np.any(np.isfinite(curve)) or np.nanmax(curve) <= 0:
        return float("nan")
    return closed_form.crossing_time(ts, np.maximum(curve, 1e-12), 0.5 * np.nanmax(curve))


def compare(
    theory: WeightTrajectory,
    simulation: WeightTrajectory,
    ds: TokenDataset,
    *,
    coefficients,
    threshold: float = 0.5,
    window: float = 0.5,
    group: str | None = None,
) -> Comparison:
    """Every comparison number between a theory and a simulated trajectory (module docstring)."""
    if not np.allclose(theory.ts, simulation.ts):
        raise ValueError("theory and simulation must share the time grid ts")
    ts = np.asarray(simulation.ts, dtype=np.float64)
    escape, scales = {}, {}
    for name, traj in (("theory", theory), ("simulation", simulation)):
        if traj.logit_scale is not None:
            scales[name] = np.asarray(traj.logit_scale, dtype=np.float64)
        else:
            scales[name] = np.asarray(
                closed_form.logit_scale(
                    jnp.asarray(traj.W_E), jnp.asarray(traj.W_U), ds.tokens, tuple(coefficients)
                )
            )
        escape[name] = closed_form.crossing_time(ts, scales[name], threshold)
    end = window * (escape["simulation"] if np.isfinite(escape["simulation"]) else ts[-1])
    before = ts <= end
    W_th, W_sim = np.asarray(theory.W_E), np.asarray(simulation.W_E)
    weight_error = _relative(W_th[before], W_sim[before], axes=(1, 2))
    # the null predictor "nothing moves", W_E(t) = W_E(0), scored on the same window
    frozen_error = _relative(W_sim[:1], W_sim[before], axes=(1, 2))
    gram_th = np.einsum("tvd,twd->tvw", W_th[before], W_th[before])
    gram_sim = np.einsum("tvd,twd->tvw", W_sim[before], W_sim[before])
    gram_error = _relative(gram_th, gram_sim, axes=(1, 2))
    rho_th, rho_sim = (
        geometry.alignment_orders(ds, W_th, group=group),
        geometry.alignment_orders(ds, W_sim, group=group),
    )
    gap = np.abs(rho_th - rho_sim)
    return Comparison(
        escape_threshold=threshold,
        window_end=float(end),
        weight_rel_error_max=float(weight_error.max()),
        null_weight_rel_error_max=float(frozen_error.max()),
        gram_rel_error_max=float(gram_error.max()),
        escape_time=TheorySimulation(escape["theory"], escape["simulation"]),
        escape_ratio=escape_ratio(escape["theory"], escape["simulation"]),
        rho_distance_max=[float(np.nanmax(g)) for g in gap],
        rho_distance_mean=[float(np.nanmean(g)) for g in gap],
        onset_time=TheorySimulation(
            [onset_time(ts, c) for c in rho_th], [onset_time(ts, c) for c in rho_sim]
        ),
        rho=TheorySimulation(rho_th, rho_sim),
        logit_scale=TheorySimulation(scales["theory"], scales["simulation"]),
    )


def escape_ratio(theory: float, simulation: float) -> float:
    """``theory / simulation``; NaN where training escaped at the start (or never).

    A measured escape time of 0 means the initial logits already exceed the threshold: there
    is no plateau to predict, and the ratio is undefined rather than infinite.
    """
    if not (np.isfinite(simulation) and simulation > 0):
        return float("nan")
    return float(theory / simulation)


def _relative(a: np.ndarray, b: np.ndarray, axes) -> np.ndarray:
    return np.linalg.norm(a - b, axis=axes) / np.linalg.norm(b, axis=axes)


#: The automatic horizon covers the latest predicted escape with this margin.
HORIZON_MARGIN = 1.25


class RunComparison(NamedTuple):
    """One gamma lane of `theory_vs_training`.

    Attributes:
        gamma: the init scale exponent (weights ``d^{-gamma} Z``).
        status: training's `sweep.RunStatus` of the lane.
        simulation: the trained `WeightTrajectory` (with its measured logit scale).
        theories: theory name -> its `WeightTrajectory` on the same grid.
        solver: ODE theory name -> its `SolverStatus` (closed forms have none).
        comparisons: theory name -> its `Comparison` against ``simulation``.
    """

    gamma: float
    status: Any
    simulation: WeightTrajectory
    theories: dict[str, WeightTrajectory]
    solver: dict[str, SolverStatus]
    comparisons: dict[str, Comparison]


class Horizon(NamedTuple):
    """The training horizon of `theory_vs_training`: ``steps`` GD steps, ``t = lr * steps``,
    and the ``[G]`` predicted escape times it was sized from."""

    steps: int
    t: float
    predicted: list[float]


class EscapeTimes(NamedTuple):
    """Escape times against gamma, ``[G]`` each: ``gamma``, the measured ``simulation`` and,
    by theory name, each theory's (and the model's escape law, e.g. the plateau law)."""

    gamma: list[float]
    simulation: list[float]
    theories: dict[str, list[float]]

    def of(self, theory) -> list[float]:
        """The escape times of ``theory`` (a `theory.Theory`, or the model's escape law)."""
        return self.theories[theory.name]

    def as_json(self) -> dict:
        """``{"gamma": ..., "simulation": ..., name: ...}``, as saved."""
        return {"gamma": self.gamma, "simulation": self.simulation, **self.theories}


class EscapeSlopes(NamedTuple):
    """Slopes of escape time against gamma (FFN: ``dt/dgamma``; attention: ``d ln t/dgamma``):
    measured, by theory name, and the ``analytic`` one of the model's escape law."""

    simulation: float
    theories: dict[str, float]
    analytic: float

    def of(self, theory) -> float:
        """The slope of ``theory`` (a `theory.Theory`, or the model's escape law)."""
        return self.theories[theory.name]

    def as_json(self) -> dict:
        """``{"simulation": ..., name: ..., "analytic": ...}``, as saved."""
        return {"simulation": self.simulation, **self.theories, "analytic": self.analytic}


class Cost(NamedTuple):
    """What each side of a comparison cost: wall seconds, compilation included, of the GD
    training of every lane (``simulation``; None where its lanes were loaded from a folder, so
    training was not measured) and of each theory's solve of every lane (``theories``, by name;
    the model's escape law as well, where it has one). Saved beside ``seconds``, outside the
    numbers, as it changes from run to run; benchmarks/theory_cost.py measures it at steady
    state."""

    simulation: float | None
    theories: dict[str, float]

    def ratio(self, name: str) -> float | None:
        """Theory ``name``'s cost over training's (None where training was not measured)."""
        if self.simulation is None:
            return None
        return self.theories[name] / self.simulation

    def as_json(self) -> dict:
        """``{"simulation": ..., name: ...}``, as saved."""
        return {"simulation": self.simulation, **self.theories}


class TheoryVsTraining(NamedTuple):
    """Everything `theory_vs_training` measured; `experiment_summary` gives its JSON numbers.

    Attributes:
        model: the `theory.ModelTheory` of the trained model.
        ts: ``[T]`` the shared time grid ``t = lr * step``.
        threshold: the escape threshold (nats).
        coefficients: the activation's Taylor coefficients ``C_1, C_2, ...``.
        top_singular_value: ``s_1``, the top singular value of the drive `flows_drive`.
        prediction: the softmax term of the FFN signature flow.
        horizon: the `Horizon` of training.
        notes: remarks on the horizon (predicted escapes it misses).
        law: the model's escape law (attention: the `PlateauLaw`); None for the FFN.
        runs: ``[G]`` `RunComparison`, one per gamma.
        escape: the `EscapeTimes`.
        escape_slope: the `EscapeSlopes`.
        styles: theory name -> its `theory.Style`, for every theory of ``escape``.
        roles: theory name -> its `theory.Role`, for every theory of ``escape``.
        cost: the `Cost` of training and of each theory (None: read back from a summary).
    """

    model: ModelTheory
    ts: np.ndarray
    threshold: float
    coefficients: tuple[float, ...]
    top_singular_value: float
    prediction: str
    horizon: Horizon
    notes: list[str]
    law: PlateauLaw | None
    runs: list[RunComparison]
    escape: EscapeTimes
    escape_slope: EscapeSlopes
    styles: dict[str, Style]
    roles: dict[str, Role]
    cost: Cost | None

    def comparisons(self, theory) -> list[Comparison]:
        """``theory``'s (a `theory.Theory`) `Comparison` with training, one per gamma lane."""
        return [run.comparisons[theory.name] for run in self.runs]


class TheoryInputs(NamedTuple):
    """The checked settings of `theory_vs_training` (`check_theory_inputs`): the `Setting`
    and the memory estimate of the run (bytes)."""

    setting: Setting
    estimated_bytes: int


def check_theory_inputs(
    ds: TokenDataset,
    *,
    model: str,
    gammas,
    max_orders,
    d: int,
    activation: str,
    lr: float,
    steps: int | None,
    snapshot_every: int | None,
    threshold: float,
    prediction: str,
    theories: Sequence[str] | None = None,
    memory_limit=None,
) -> TheoryInputs:
    """Validate every setting before any work; ValueError naming the parameter otherwise.

    Checks: the model (one of `theories.model_names`); every gamma finite and inside the
    documented range of its theory (`theory.ModelTheory.gamma_range`); orders in ``[0, L-1]``;
    d, steps, snapshot_every positive integers; lr and threshold finite and positive; the
    activation and the prediction term; ``theories`` (None, or names among those that apply
    to the model, activation and orders, `theories.applicable`); and the memory the run
    needs (trajectories of every lane and theory, the signatures up to the order the flows
    use: `budget.theory_bytes`) against ``memory_limit`` (a `budget.memory_limit` override;
    default: 80% of available memory).
    """
    from ctx_staircase import activations, flows

    theory_model = registry.model(model)
    gammas = _check_gammas(gammas, theory_model, model)
    check_int(d, "d")
    check_int(steps, "steps", none_ok=True)
    check_int(snapshot_every, "snapshot_every", none_ok=True)
    check_real(lr, "lr", low=0, low_open=True)
    check_real(threshold, "threshold", low=0, low_open=True)
    prediction = flows.Prediction(check_choice(prediction, "prediction", flows.PREDICTION_TERMS))
    max_orders = _check_orders(max_orders, ds.L)
    coefficients = tuple(activations.effective_coefficients(activations.get(activation)))
    setting = Setting(theory_model, gammas, max_orders, prediction, activation, coefficients)
    setting = setting._replace(theories=_check_theory_names(theories, setting))
    needed = budget.check(
        budget.theory_bytes(
            ds, model=model, d=d, gammas=gammas, max_orders=max_orders, steps=steps,
            snapshot_every=snapshot_every, prediction=prediction, activation=activation,
            theories=setting.theories,
        ),
        what=f"the theory run ({model}, {gammas.size} gamma, d={d}, n={ds.n})",
        knob="lower N, d, steps or the number of gamma",
        limit=memory_limit,
    )  # fmt: skip
    return TheoryInputs(setting, needed)


def _check_gammas(gammas, theory_model, model: str) -> np.ndarray:
    """``gammas`` (None: the model's default gammas) as float64 ``[G]``, every one finite and
    inside the documented range of the model's theory; ValueError naming gamma otherwise."""
    if gammas is None:
        gammas = theory_model.default_gammas
    gammas = np.asarray(gammas, dtype=np.float64)
    low, high = theory_model.gamma_range
    if gammas.ndim != 1 or gammas.size == 0 or not np.all(np.isfinite(gammas)):
        raise ValueError(f"gamma must be one or more finite numbers; got {gammas.tolist()}")
    if np.any((gammas < low) | (gammas > high)):
        raise ValueError(
            f"gamma must lie in [{low}, {high}] for model {model!r} (the documented range of its "
            f"theory); got {gammas.tolist()}"
        )
    return gammas


def _check_orders(max_orders, L: int) -> tuple[int, ...]:
    """``max_orders`` (one order or several) as a non-empty tuple of ints in ``[0, L-1]``;
    ValueError naming max_orders otherwise."""
    max_orders = tuple(max_orders) if np.iterable(max_orders) else (max_orders,)
    if not max_orders:
        raise ValueError(f"max_orders must hold at least one order in [0, L-1] = [0, {L - 1}]")
    orders = f" (orders in [0, L-1]; max_orders={list(max_orders)})"
    for m in max_orders:
        check_int(m, "max_orders", 0, L - 1, why=orders)
    return tuple(int(m) for m in max_orders)


def _check_theory_names(names, setting: Setting) -> tuple[str, ...] | None:
    """``names`` as a tuple of the theories of ``setting`` it picks (None: all of them);
    ValueError naming ``theories`` and the names that apply otherwise."""
    if names is None:
        return None
    if isinstance(names, str):
        names = (names,)
    names = tuple(names)
    allowed = [theory.name for theory in registry.applicable(setting)]
    unknown = [name for name in names if name not in allowed]
    if not names or unknown:
        raise ValueError(
            f"theories must name one or more of the theories that apply to model "
            f"{setting.model.name!r}, activation {setting.activation!r} and max_orders "
            f"{list(setting.max_orders)}: {allowed}; got {list(names)}"
        )
    return names


def theory_vs_training(
    ds: TokenDataset,
    *,
    model: str = "ffn",
    gammas=None,
    max_orders=(0, 1),
    seed: int = 0,
    d: int = 128,
    activation: str = "poly:1,0.5",
    lr: float = 0.2,
    steps: int | None = None,
    snapshot_every: int | None = None,
    threshold: float = 0.5,
    prediction: str = "linear",
    theories: Sequence[str] | None = None,
    out: str | Path | None = None,
    memory_limit=None,
) -> TheoryVsTraining:
    """Integrate the theory and train the same models, then `compare` them lane by lane.

    Every gamma uses the same seed, so the same standard-normal draw ``Z`` scaled by
    ``d^{-gamma}``; training is full-batch GD at ``lr`` on ``t = lr * step``; everything runs in
    float64. The theories are those of `theories.selected` for the model and activation
    (theory/closed_form.md §6 lists them), or only those ``theories`` names (e.g.
    ``["signature_flow_m1"]``). `check_theory_inputs` checks every argument first.

    ``gammas=None`` takes the default gammas of the model's theory; ``steps=None`` a horizon
    covering every predicted escape (`horizon`; a given one that misses some predicted escapes
    is noted in ``notes``, one that misses all of them is an error); ``snapshot_every=None``
    the snapshots of `snapshot_steps`. With ``out``, each trained gamma lane is saved there as
    it finishes and a rerun trains only the missing ones (`sweep.train_sweep`).
    ``memory_limit`` overrides the memory limit of `check_theory_inputs`.

    Returns:
        A `TheoryVsTraining`: ``ts``, ``runs`` (per gamma a `RunComparison`: the trajectories
        and one `Comparison` per theory, with each ODE lane's `SolverStatus`), ``escape``
        (measured and predicted escape times against gamma), ``escape_slope`` (FFN:
        ``dt/dgamma`` with the analytic ``ln d / (C_1 s_1)``; attention: ``d ln t / dgamma``
        with the analytic ``2 ln d``), ``law`` (attention: the `PlateauLaw`), ``horizon``,
        ``notes`` and the theories' ``styles``.
    """
    inputs = check_theory_inputs(
        ds, model=model, gammas=gammas, max_orders=max_orders, d=d, activation=activation, lr=lr,
        steps=steps, snapshot_every=snapshot_every, threshold=threshold, prediction=prediction,
        theories=theories, memory_limit=memory_limit,
    )  # fmt: skip
    with jax.enable_x64(True):
        return _theory_vs_training(
            ds, inputs.setting, seed=seed, d=d, lr=lr, steps=steps,
            snapshot_every=snapshot_every, threshold=threshold, out=out,
        )  # fmt: skip


def _theory_vs_training(
    ds, setting: Setting, *, seed, d, lr, steps, snapshot_every, threshold, out
) -> TheoryVsTraining:
    from ctx_staircase import train

    model = setting.model
    model_kwargs = model.trained_kwargs(d, setting.activation)
    problem = _problem(ds, setting, seed, d, threshold, model_kwargs)
    start = time.perf_counter()
    predicted = model.predict(problem)
    predict_seconds = time.perf_counter() - start
    horizon_steps, notes = horizon(predicted.escape, setting.gammas, lr, steps)
    if model.model.activation and (note := validation_note(setting.activation, setting.gammas)):
        notes.append(note)
    snapshots = snapshot_steps(horizon_steps, snapshot_every)
    ts = lr * np.asarray(snapshots, dtype=np.float64)
    problem = problem._replace(ts=ts)
    config = train.TrainConfig(optimizer="gd", lr=lr, steps=horizon_steps, snapshots=snapshots)
    trained, simulation_seconds = _train_lanes(ds, setting, config, seed, out, model_kwargs)
    solved, seconds = _solve_theories(problem, setting)
    runs = _run_comparisons(ds, setting, ts, trained, solved, threshold)
    escape, slopes = _escape_law(problem, runs, predicted.law)
    styles = {theory.name: theory.style for theory, _ in solved}
    roles = {theory.name: theory.role for theory, _ in solved}
    if predicted.law is not None:
        styles[predicted.law.name] = predicted.law.style
        roles[predicted.law.name] = Role.LAW
        seconds[predicted.law.name] = predict_seconds
    return TheoryVsTraining(
        model=model,
        ts=ts,
        threshold=threshold,
        coefficients=setting.coefficients,
        top_singular_value=problem.top,
        prediction=setting.prediction,
        horizon=Horizon(horizon_steps, float(ts[-1]), predicted.escape.tolist()),
        notes=notes,
        law=predicted.law,
        runs=runs,
        escape=escape,
        escape_slope=slopes,
        styles=styles,
        roles=roles,
        cost=Cost(simulation_seconds, seconds),
    )


def _train_lanes(ds, setting: Setting, config, seed, out, model_kwargs):
    """``(sweep.SweepResult, seconds)``: the gamma lanes trained by `sweep.train_sweep` (with
    ``out``, resumed from and saved there) and the training's wall seconds, None when some lanes
    were loaded rather than trained."""
    from ctx_staircase import sweep

    reports: list[int] = []  # lanes done at each progress report; the first are the loaded

    def report(done: int, total: int) -> None:
        reports.append(done)

    start = time.perf_counter()
    trained = sweep.train_sweep(
        setting.model.name, ds, config, gammas=setting.gammas, seeds=[seed], out=out,
        progress=report, **model_kwargs,
    )  # fmt: skip
    return trained, None if reports and reports[0] else time.perf_counter() - start


def _solve_theories(problem: Problem, setting: Setting) -> tuple[list, dict[str, float]]:
    """Every theory `theories.selected` picks for ``setting``, solved on ``problem``:
    ``[(theory, its lanes)]`` and each theory's wall seconds, the shared computations it
    reused included (`Problem.reused_seconds`)."""
    solved, seconds = [], {}
    problem.reused_seconds()  # start the ledger of shared computations at zero
    for theory in registry.selected(setting):
        start = time.perf_counter()
        solved.append((theory, jax.block_until_ready(theory.solve(problem))))
        seconds[theory.name] = time.perf_counter() - start + problem.reused_seconds()
    return solved, seconds


def _run_comparisons(ds, setting: Setting, ts, trained, solved, threshold) -> list[RunComparison]:
    """One `RunComparison` per gamma lane: the trained trajectory on ``ts`` against each solved
    theory's lane (`compare`), with each ODE lane's solver status."""
    runs = []
    for i, gamma in enumerate(setting.gammas):
        # escape in training is read off the model's own logits (ReLU, attention: not a formula)
        traj = trained.trajectory
        sim = WeightTrajectory(ts, traj.W_E[i], traj.W_U[i], traj.logit_scale[i])
        lane = {theory.name: lanes.trajectories[i] for theory, lanes in solved}
        solver = {t.name: lanes.solver[i] for t, lanes in solved if lanes.solver is not None}
        comparisons = {
            name: compare(theory, sim, ds, coefficients=setting.coefficients, threshold=threshold)
            for name, theory in lane.items()
        }
        runs.append(RunComparison(float(gamma), trained.status[i], sim, lane, solver, comparisons))
    return runs


def _problem(ds, setting: Setting, seed, d, threshold, model_kwargs) -> Problem:
    """The `Problem` of a run, before its time grid is known."""
    from ctx_staircase import sweep, train

    # Z: the seed's draw at scale 1 (gamma = 0)
    state = train.init_state(setting.model.name, ds, gamma=0.0, seed=seed, **model_kwargs)[1]
    unit = {k: np.asarray(state[k][...], dtype=np.float64) for k in setting.model.roles}
    y0 = {k: np.stack([v * d ** -float(g) for g in setting.gammas]) for k, v in unit.items()}
    M = flows_drive(ds)
    top = float(np.linalg.svd(M, compute_uv=False)[0])
    map_lanes = functools.partial(sweep.sweep_map, count_lanes=True)
    return Problem(setting, ds, d, unit, y0, M, top, threshold, None, map_lanes, {})


def _escape_law(problem: Problem, runs: list[RunComparison], law) -> tuple:
    """The `EscapeTimes` and `EscapeSlopes` of a run: each theory's, the model's escape law's
    (if any) and the measured ones."""
    gammas = problem.setting.gammas
    times = {
        name: [run.comparisons[name].escape_time.theory for run in runs]
        for name in runs[0].comparisons
    }
    if law is not None:
        times[law.name] = list(law.escape)
    simulation = [next(iter(run.comparisons.values())).escape_time.simulation for run in runs]
    escape = EscapeTimes(gammas.tolist(), simulation, times)
    model = problem.setting.model

    def slope_of(values) -> float:
        values = np.asarray(values, dtype=np.float64)
        if not model.log_time:
            return slope(gammas, values)
        with np.errstate(divide="ignore"):  # escaped at the start: no log, `slope` skips it
            return slope(gammas, np.log(values))

    slopes = EscapeSlopes(
        slope_of(simulation),
        {name: slope_of(values) for name, values in times.items()},
        model.analytic_slope(problem),
    )
    return escape, slopes


def flows_drive(ds: TokenDataset) -> np.ndarray:
    """`flows.drive_matrix` of ``ds`` (eq. C1), float64 ``[V, V]``."""
    from ctx_staircase import flows

    return flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)


def horizon(predicted: np.ndarray, gammas, lr: float, steps: int | None) -> tuple[int, list[str]]:
    """GD steps of a theory run and the notes on the predicted escapes it cannot reach.

    Args:
        predicted: ``[G]`` predicted escape times (``t = lr * step``; NaN where none).
        gammas: ``[G]`` the lanes' gamma, named in the notes.
        lr: the GD learning rate.
        steps: the caller's horizon, or None for the automatic one: `HORIZON_MARGIN` times the
            latest finite predicted escape, rounded up to a multiple of 10 steps (at least 10).

    Returns:
        ``(steps, notes)``: one note naming the gammas whose predicted escape lies past the
        horizon.

    Raises:
        ValueError: no predicted escape is finite (and ``steps`` is None); the automatic horizon
            exceeds `budget.THEORY_MAX_STEPS`; or every predicted escape lies past the horizon.
    """
    finite = np.isfinite(predicted)
    if steps is None:
        if not finite.any():
            raise ValueError("no predicted escape is finite; give steps explicitly")
        steps = int(np.ceil(HORIZON_MARGIN * np.max(predicted[finite]) / lr / 10.0)) * 10
        if steps > budget.THEORY_MAX_STEPS:
            raise ValueError(
                f"gamma={float(np.asarray(gammas)[np.nanargmax(predicted)]):g}: the predicted "
                f"escape t={np.nanmax(predicted):.4g} needs {steps} GD steps at lr={lr:g}, more "
                f"than {budget.THEORY_MAX_STEPS}; lower gamma or raise lr"
            )
        steps = max(steps, 10)
    missed = [float(g) for g, t in zip(gammas, predicted, strict=True) if not t <= lr * steps]
    notes = []
    if missed and len(missed) == len(predicted):
        earliest = f"earliest t={np.min(predicted[finite]):.4g}" if finite.any() else "none finite"
        raise ValueError(
            f"steps={steps}: the horizon t={lr * steps:g} ends before every predicted escape "
            f"({earliest}); too short to compare anything"
        )
    if missed:
        notes.append(
            f"horizon t={lr * steps:g} ends before the predicted escape of gamma "
            f"{', '.join(f'{g:g}' for g in missed)}: those lanes cannot escape in training"
        )
    return steps, notes


def snapshot_steps(steps: int, every: int | None) -> tuple[int, ...]:
    """The sorted snapshot steps of a theory run of ``steps`` GD steps, from 0 to ``steps``.

    Every ``every`` steps (and the last). With ``every=None``: every 10 steps while that gives at
    most `budget.THEORY_MAX_SNAPSHOTS`, else steps 0..9 and `budget.THEORY_MAX_SNAPSHOTS` - 10
    geometric steps from 10 to ``steps`` (rounded; coinciding ones merge).
    """
    if every is not None or steps // 10 <= budget.THEORY_MAX_SNAPSHOTS:
        return tuple(sorted({*range(0, steps + 1, every or 10), steps}))
    geometric = np.geomspace(10, steps, budget.THEORY_MAX_SNAPSHOTS - 10)
    early = np.arange(0, 10)
    return tuple(sorted({*early.tolist(), *np.round(geometric).astype(int).tolist(), steps}))


def validation_note(activation, gammas) -> str | None:
    """One line when the FFN ``activation`` has no escape law validated against training over
    ``gammas`` (`theory.Theory.validated` of the registered theories); None when it has one."""
    from ctx_staircase import activations

    activation = activations.get(activation)
    gammas = np.asarray(gammas, dtype=np.float64)
    laws = registry.validated()
    for theory in laws:
        low, high = theory.validated.gammas
        if activations.get(theory.validated.activation) == activation:
            outside = gammas[(gammas < low) | (gammas > high)]
            if outside.size == 0:
                return None
            return (
                f"{theory.name} is validated for this activation over gamma in [{low:g}, "
                f"{high:g}] only; gamma {', '.join(f'{g:g}' for g in outside)} lie outside"
            )
    known = "; ".join(
        f"{t.validated.activation}: {t.name}, gamma in [{t.validated.gammas[0]:g}, "
        f"{t.validated.gammas[1]:g}]"
        for t in laws
    )
    return (
        f"no escape law is validated against training for activation {activation.name}"
        f"{'' if activation.coefficients is None else ' ' + str(activation.coefficients)}: "
        f"the numbers below are unchecked (validated: {known})"
    )


def comparison_summary(compared: Comparison) -> dict:
    """The JSON-ready numbers of one `Comparison`: every field but the ``rho`` and
    ``logit_scale`` curves, the `TheorySimulation` pairs as ``{"theory", "simulation"}``."""
    numbers = compared._asdict()
    del numbers["rho"], numbers["logit_scale"]
    numbers["escape_time"] = compared.escape_time._asdict()
    numbers["onset_time"] = compared.onset_time._asdict()
    return numbers


def experiment_summary(experiment: TheoryVsTraining) -> dict:
    """The JSON-ready numbers of `theory_vs_training` (no trajectories): the records as
    dicts, the one place they become dicts."""
    runs = [
        {
            "gamma": run.gamma,
            "status": str(run.status),
            "solver": {name: status._asdict() for name, status in run.solver.items()},
            "comparisons": {name: comparison_summary(c) for name, c in run.comparisons.items()},
        }
        for run in experiment.runs
    ]
    return {
        "model": experiment.model.name,
        "threshold": experiment.threshold,
        "coefficients": experiment.coefficients,
        "top_singular_value": experiment.top_singular_value,
        "prediction": experiment.prediction,
        "horizon": experiment.horizon._asdict(),
        "notes": experiment.notes,
        "law": {} if experiment.law is None else experiment.law._asdict(),
        "escape": experiment.escape.as_json(),
        "escape_slope": experiment.escape_slope.as_json(),
        "runs": runs,
        "roles": {name: role.value for name, role in experiment.roles.items()},
    }


def cost_summary(experiment: TheoryVsTraining) -> dict:
    """An experiment record's account of what a comparison cost (`Cost`, each theory's
    `theory.Role`), as `theory.cost_account` saves it."""
    cost = experiment.cost
    return cost_account(cost.simulation, cost.theories, experiment.roles)


def experiment_from_summary(numbers: dict) -> TheoryVsTraining:
    """The `TheoryVsTraining` that `experiment_summary` wrote ``numbers`` of, read back with
    every number it saved: what claims are scored from, so they can be scored again from a
    result file. What it does not save is None or empty: ``ts``, each run's ``simulation``
    and ``theories``, each comparison's ``rho`` and ``logit_scale`` curves, ``styles`` and
    ``cost`` (saved outside the numbers)."""
    from ctx_staircase.sweep import RunStatus  # sweep loads the training stack

    escape, slopes = dict(numbers["escape"]), dict(numbers["escape_slope"])
    gamma, measured = escape.pop("gamma"), escape.pop("simulation")
    measured_slope, analytic = slopes.pop("simulation"), slopes.pop("analytic")
    coefficients = numbers["coefficients"]
    runs = [
        RunComparison(
            gamma=run["gamma"],
            status=RunStatus.parse(run["status"]),
            simulation=None,
            theories={},
            solver={name: SolverStatus(**status) for name, status in run["solver"].items()},
            comparisons={
                name: Comparison(
                    **compared
                    | {
                        "escape_time": TheorySimulation(**compared["escape_time"]),
                        "onset_time": TheorySimulation(**compared["onset_time"]),
                        "rho": None,
                        "logit_scale": None,
                    }
                )
                for name, compared in run["comparisons"].items()
            },
        )
        for run in numbers["runs"]
    ]
    return TheoryVsTraining(
        model=registry.model(numbers["model"]),
        ts=None,
        threshold=numbers["threshold"],
        coefficients=None if coefficients is None else tuple(coefficients),
        top_singular_value=numbers["top_singular_value"],
        prediction=numbers["prediction"],
        horizon=Horizon(**numbers["horizon"]),
        notes=list(numbers["notes"]),
        law=PlateauLaw(**numbers["law"]) if numbers["law"] else None,
        runs=runs,
        escape=EscapeTimes(gamma, measured, escape),
        escape_slope=EscapeSlopes(measured_slope, slopes, analytic),
        styles={},
        roles={name: Role(role) for name, role in numbers["roles"].items()},
        cost=None,
    )


def solver_failures(experiment: TheoryVsTraining) -> list[str]:
    """One line per ODE lane that did not succeed (empty when every solve is ok)."""
    lines = [
        f"gamma={run.gamma:g} {name}: {status.result}"
        for run in experiment.runs
        for name, status in run.solver.items()
        if not status.ok
    ]
    law = experiment.law
    if law is not None and not law.solver_ok:
        lines.append(f"unit-scale solve of the plateau law: code {law.solver_result}")
    return lines


def slope(gammas, values) -> float:
    """Least-squares slope of ``values`` ``[G]`` against ``gammas`` ``[G]`` over the finite
    values; NaN with fewer than two."""
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.asarray(gammas)[keep], values[keep], 1)[0])
