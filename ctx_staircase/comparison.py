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

from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ctx_staircase import budget, closed_form, geometry, signatures
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_choice, check_int, check_real


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


#: The gamma each model's theory is documented for: below it the initial logits are near the
#: escape threshold (no plateau to predict); above it the attention plateau, ~d^(2 gamma),
#: outgrows any CPU horizon (d = 128: t* ~ 3900 at gamma = 1). The default gammas, the caps on
#: steps and snapshots and the escape grid are in `budget` (`budget.THEORY_DEFAULT_GAMMAS`, ...),
#: which sizes the run before it starts.
GAMMA_RANGE = {"ffn": (0.5, 2.0), "attention": (0.55, 1.0)}
#: The automatic horizon covers the latest predicted escape with this margin.
HORIZON_MARGIN = 1.25


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


class RunComparison(NamedTuple):
    """One gamma lane of `theory_vs_training`.

    Attributes:
        gamma: the init scale exponent (weights ``d^{-gamma} Z``).
        status: training's status of the lane (`sweep.train_sweep`).
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
    solver_ok: Any
    solver_result: Any


class TheoryVsTraining(NamedTuple):
    """Everything `theory_vs_training` measured; `experiment_summary` gives its JSON numbers.

    Attributes:
        model: ``"ffn"`` or ``"attention"``.
        ts: ``[T]`` the shared time grid ``t = lr * step``.
        threshold: the escape threshold (nats).
        coefficients: the activation's Taylor coefficients ``C_1, C_2, ...``.
        top_singular_value: ``s_1``, the top singular value of the drive `flows_drive`.
        prediction: the softmax term of the FFN signature flow.
        horizon: the `Horizon` of training.
        notes: remarks on the horizon (predicted escapes it misses).
        law: attention: the `PlateauLaw`; FFN: None.
        runs: ``[G]`` `RunComparison`, one per gamma.
        escape: ``"gamma"``, ``"simulation"``, each theory name (and attention:
            ``"plateau_law"``) -> ``[G]`` escape times.
        escape_slope: ``"simulation"``, each theory name and ``"analytic"`` -> the slope of
            escape time against gamma (FFN: ``dt/dgamma``; attention: ``d ln t / dgamma``).
    """

    model: str
    ts: np.ndarray
    threshold: float
    coefficients: tuple[float, ...]
    top_singular_value: float
    prediction: str
    horizon: Horizon
    notes: list[str]
    law: PlateauLaw | None
    runs: list[RunComparison]
    escape: dict[str, list[float]]
    escape_slope: dict[str, float]


class TheoryInputs(NamedTuple):
    """The checked settings of `theory_vs_training` (see `check_theory_inputs`)."""

    model: str
    gammas: np.ndarray
    max_orders: tuple[int, ...]
    prediction: str
    coefficients: tuple[float, ...]
    estimated_bytes: int
    gated: bool = False


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
    memory_limit=None,
) -> TheoryInputs:
    """Validate every setting before any work; ValueError naming the parameter otherwise.

    Checks: the model; every gamma finite and inside `GAMMA_RANGE` of the model; orders in
    ``[0, L-1]``; d, steps, snapshot_every positive integers; lr and threshold finite and
    positive; the prediction term; and the memory the run needs (trajectories of every lane and
    theory, the signatures up to the order the flows use: `budget.theory_bytes`) against
    ``memory_limit`` (a `budget.memory_limit` override; default: 80% of available memory).
    """
    from ctx_staircase import activations, flows

    if model not in GAMMA_RANGE:
        raise ValueError(f"model must be one of {tuple(GAMMA_RANGE)}; got {model!r}")
    if gammas is None:
        gammas = budget.THEORY_DEFAULT_GAMMAS[model]
    gammas = np.asarray(gammas, dtype=np.float64)
    low, high = GAMMA_RANGE[model]
    if gammas.ndim != 1 or gammas.size == 0 or not np.all(np.isfinite(gammas)):
        raise ValueError(f"gamma must be one or more finite numbers; got {gammas.tolist()}")
    if np.any((gammas < low) | (gammas > high)):
        raise ValueError(
            f"gamma must lie in [{low}, {high}] for model {model!r} (the documented range of its "
            f"theory); got {gammas.tolist()}"
        )
    check_int(d, "d")
    check_int(steps, "steps", none_ok=True)
    check_int(snapshot_every, "snapshot_every", none_ok=True)
    check_real(lr, "lr", low=0, low_open=True)
    check_real(threshold, "threshold", low=0, low_open=True)
    check_choice(prediction, "prediction", flows.PREDICTION_TERMS)
    max_orders = tuple(max_orders) if np.iterable(max_orders) else (max_orders,)
    if not max_orders:
        raise ValueError(f"max_orders must hold at least one order in [0, L-1] = [0, {ds.L - 1}]")
    orders = f" (orders in [0, L-1]; max_orders={list(max_orders)})"
    for m in max_orders:
        check_int(m, "max_orders", 0, ds.L - 1, why=orders)
    max_orders = tuple(int(m) for m in max_orders)
    if model == "attention":
        max_orders = (0,)
    coefficients = tuple(activations.effective_coefficients(activations.get(activation)))
    # ReLU is the one activation with an exact gated law (theory/relu.md); the attention theory
    # has no activation
    gated = model == "ffn" and activations.get(activation).name == "relu"
    needed = budget.check(
        budget.theory_bytes(
            ds, model=model, d=d, gammas=gammas, max_orders=max_orders, steps=steps,
            snapshot_every=snapshot_every, prediction=prediction, gated=gated,
        ),
        what=f"the theory run ({model}, {gammas.size} gamma, d={d}, n={ds.n})",
        knob="lower N, d, steps or the number of gamma",
        limit=memory_limit,
    )  # fmt: skip
    return TheoryInputs(model, gammas, max_orders, prediction, coefficients, needed, gated)


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
    out: str | Path | None = None,
    memory_limit=None,
) -> TheoryVsTraining:
    """Integrate the theory and train the same models, then `compare` them lane by lane.

    Every gamma uses the same seed, so the same standard-normal draw ``Z`` scaled by
    ``d^{-gamma}``. Training is full-batch GD at ``lr`` on ``t = lr * step``, in float64. Theories:

    - FFN: the closed form (eq. C3), the closed form with the softmax feedback
      (theory/escape_feedback.md) and the signature-flow ODE for every ``max_order``
      (`flows.ffn_signature_flow` with ``prediction``; ``"linear"``, the default, keeps the
      softmax's linear feedback, Remark 1).
    - attention-only: the uniform-attention flow (eq. A3) per lane, and the plateau law (A5b),
      ``t* = T_Z d^{2 gamma} - c`` from one unit-scale solve (`plateau.unit_scale_escape`).
      Escape is measured with the attention logits on both sides.

    ``gammas=None`` takes `budget.THEORY_DEFAULT_GAMMAS` of the model; ``steps=None`` a horizon
    covering every predicted escape (`horizon`), ``snapshot_every=None`` every 10 steps up to
    `budget.THEORY_MAX_SNAPSHOTS` snapshots, geometric beyond (`snapshot_steps`). A given horizon
    that misses some predicted escapes is noted in ``notes``; one that misses all of them is an
    error. Everything runs in float64 under a scoped ``jax.enable_x64``, whatever the caller's
    global flag. The ODE lanes
    (gamma x max_order) run through `sweep.sweep_map`. With ``out``, each trained gamma lane is
    saved there as it finishes and a rerun trains only the missing ones (`sweep.train_sweep`).
    ``memory_limit`` overrides the memory limit of `check_theory_inputs`.

    Returns:
        A `TheoryVsTraining`: ``ts``, ``runs`` (per gamma a `RunComparison`: the trajectories
        and one `Comparison` per theory, with each ODE lane's `SolverStatus`), ``escape``
        (measured and predicted escape times against gamma), ``escape_slope`` (FFN:
        ``dt/dgamma`` with the analytic ``ln d / (C_1 s_1)``; attention: ``d ln t / dgamma``
        with the analytic ``2 ln d``), ``law`` (attention: the `PlateauLaw`), ``horizon`` and
        ``notes``.
    """
    import jax

    inputs = check_theory_inputs(
        ds,
        model=model,
        gammas=gammas,
        max_orders=max_orders,
        d=d,
        activation=activation,
        lr=lr,
        steps=steps,
        snapshot_every=snapshot_every,
        threshold=threshold,
        prediction=prediction,
        memory_limit=memory_limit,
    )
    with jax.enable_x64(True):
        return _theory_vs_training(
            ds, inputs, seed=seed, d=d, activation=activation, lr=lr, steps=steps,
            snapshot_every=snapshot_every, threshold=threshold, out=out,
        )  # fmt: skip


def _theory_vs_training(
    ds, inputs: TheoryInputs, *, seed, d, activation, lr, steps, snapshot_every, threshold, out
) -> TheoryVsTraining:
    from ctx_staircase import sweep, train

    model, gammas, coefficients = inputs.model, inputs.gammas, inputs.coefficients
    model_kwargs = dict(d=d, dtype="float64")
    if model == "ffn":
        model_kwargs["activation"] = activation
    else:
        model_kwargs["positional"] = False  # the theory has no positional embeddings
    unit = _initial_weights(model, ds, 0.0, seed, model_kwargs)  # Z: the draw at scale 1
    y0 = {k: np.stack([v * d ** -float(g) for g in gammas]) for k, v in unit.items()}
    M = flows_drive(ds)
    top = float(np.linalg.svd(M, compute_uv=False)[0])
    if model == "ffn":
        predicted, law = _ffn_predicted_escape(M, y0, ds, coefficients, threshold, top), None
    else:
        predicted, law = _attention_law(ds, unit, gammas, d, threshold, top)
    horizon_steps, notes = horizon(predicted, gammas, lr, steps)
    if model == "ffn" and (note := validation_note(activation, gammas)) is not None:
        notes.append(note)
    snapshots = snapshot_steps(horizon_steps, snapshot_every)
    ts = lr * np.asarray(snapshots, dtype=np.float64)

    config = train.TrainConfig(optimizer="gd", lr=lr, steps=horizon_steps, snapshots=snapshots)
    trained = sweep.train_sweep(
        model, ds, config, gammas=gammas, seeds=[seed], out=out, **model_kwargs
    )
    theories = _ode_theories(ds, inputs, y0, ts)
    if model == "ffn":
        theories.update(_closed_form_theories(ds, M, y0, ts, coefficients))
        if inputs.gated:
            theories.update(_relu_theories(ds, y0, ts))
    runs = []
    for i, gamma in enumerate(gammas):
        # escape in training is read off the model's own logits (ReLU, attention: not a formula)
        sim = WeightTrajectory(
            ts,
            trained.trajectory.W_E[i],
            trained.trajectory.W_U[i],
            trained.trajectory.logit_scale[i],
        )
        lane = {name: theory.trajectories[i] for name, theory in theories.items()}
        solver = {
            name: theory.solver[i] for name, theory in theories.items() if theory.solver is not None
        }
        comparisons = {
            name: compare(theory, sim, ds, coefficients=coefficients, threshold=threshold)
            for name, theory in lane.items()
        }
        runs.append(RunComparison(float(gamma), trained.status[i], sim, lane, solver, comparisons))
    escape = {"gamma": gammas.tolist(), "simulation": [], **{name: [] for name in theories}}
    for run in runs:
        first = next(iter(run.comparisons.values()))
        escape["simulation"].append(first.escape_time.simulation)
        for name, compared in run.comparisons.items():
            escape[name].append(compared.escape_time.theory)
    if model == "ffn":
        slopes = {name: slope(gammas, values) for name, values in escape.items() if name != "gamma"}
        slopes["analytic"] = float(np.log(d) / (coefficients[0] * top))
    else:
        escape["plateau_law"] = list(law.plateau_law)
        slopes = {
            name: slope(gammas, np.log(np.asarray(values, dtype=np.float64)))
            for name, values in escape.items()
            if name != "gamma"
        }
        slopes["analytic"] = float(2 * np.log(d))
    return TheoryVsTraining(
        model=model,
        ts=ts,
        threshold=threshold,
        coefficients=coefficients,
        top_singular_value=top,
        prediction=inputs.prediction,
        horizon=Horizon(horizon_steps, float(ts[-1]), predicted.tolist()),
        notes=notes,
        law=law,
        runs=runs,
        escape=escape,
        escape_slope=slopes,
    )


def flows_drive(ds: TokenDataset) -> np.ndarray:
    """`flows.drive_matrix` of ``ds`` (eq. C1), float64 ``[V, V]``."""
    from ctx_staircase import flows

    return flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)


def _initial_weights(model, ds, gamma, seed, model_kwargs) -> dict[str, np.ndarray]:
    from ctx_staircase import train

    state = train.init_state(model, ds, gamma=gamma, seed=seed, **model_kwargs)[1]
    keys = ("W_E", "W_U") if model == "ffn" else ("W_E", "W_U", "W_O", "W_V")
    return {k: np.asarray(state[k][...], dtype=np.float64) for k in keys}


def _ffn_predicted_escape(M, y0, ds, coefficients, threshold, top) -> np.ndarray:
    """The closed form's (C3) escape time per lane: the horizon the run must cover."""
    times = []
    for W_E0, W_U0 in zip(y0["W_E"], y0["W_U"], strict=True):
        solution = closed_form.linear_solution(M, W_E0, W_U0, coefficients[0])
        scale0 = float(closed_form.logit_scale(W_E0, W_U0, ds.tokens, coefficients))
        # the top mode multiplies the logits by about e^{2 C_1 s_1 t}; transients add a few
        # multiples of 1 / (C_1 s_1), so start at 3x the pure-exponential time and extend
        rate = 2 * coefficients[0] * top
        end = 3 * (max(np.log(threshold / max(scale0, 1e-300)), 0.0) + 2.0) / rate
        escape = float("nan")
        for _ in range(4):
            grid = np.linspace(0.0, end, budget.THEORY_ESCAPE_GRID)
            scale = np.concatenate(
                [
                    closed_form.logit_scale(*solution(part), ds.tokens, coefficients)
                    for part in np.split(grid, len(grid) // budget.THEORY_ESCAPE_CHUNK)
                ]
            )  # in chunks: the hidden states of the whole grid would take GBs
            escape = closed_form.crossing_time(grid, scale, threshold)
            if np.isfinite(escape):
                break
            end *= 4
        times.append(escape)
    return np.asarray(times)


def _attention_law(ds, unit, gammas, d, threshold, top) -> tuple[np.ndarray, PlateauLaw]:
    """The ``[G]`` unit-scale escape times and the plateau law (theory/attention.md A5b) from
    one unit-scale uniform-attention solve."""
    from ctx_staircase import flows, plateau

    field = flows.attention_uniform_flow(signatures.signature_set(ds, 0), ds.vocab_size)
    tokens = jnp.asarray(ds.tokens)
    unit = {k: jnp.asarray(v) for k, v in unit.items()}
    solved = plateau.unit_scale_escape(
        field, unit, lambda ys: uniform_attention_logit_scale(ys, tokens), degree=3, logit_degree=4
    )
    eps = d ** -np.asarray(gammas, dtype=np.float64)
    escape = solved.escape_time(eps, threshold)
    return escape, PlateauLaw(
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
    )


@jax.jit
def uniform_attention_logit_scale(weights: dict, tokens: jax.Array) -> jax.Array:
    """The escape statistic (C7) of the uniform-attention model (eq. A3), ``[...]``.

    ``f(X) = W_U W_O W_V (1/L) sum_s w_{x_s}``; ``weights`` holds ``W_E [..., V, d]``, ``W_U``,
    ``W_O [..., d, d_k]`` and ``W_V [..., d_k, d]`` with the same leading axes.
    """
    h = jnp.mean(jnp.take(weights["W_E"], tokens, axis=-2), axis=-2)  # [..., n, d]
    readout = weights["W_U"] @ weights["W_O"] @ weights["W_V"]  # [..., V, d]
    logits = jnp.einsum("...nd,...vd->...nv", h, readout)
    centred = logits - jnp.mean(logits, axis=-1, keepdims=True)
    return jnp.max(jnp.abs(centred), axis=(-2, -1))


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
        raise ValueError(
            f"steps={steps}: the horizon t={lr * steps:g} ends before every predicted escape "
            f"(earliest t={np.nanmin(predicted):.4g}); too short to compare anything"
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


#: The truncated flows have no softmax saturation, so with C_2 != 0 they blow up in finite time
#: after escape; the theory is compared before escape only, so an ODE lane ends once a weight
#: reaches this size (far past escape), as a blow-up (`ode.integrate`'s event): no steps are spent
#: chasing it (benchmarks/README.md, "Theory": 87 -> 35 steps per lane, the same values before).
BLOW_UP = 1.0


def _ode_theories(ds, inputs: TheoryInputs, y0: dict, ts: np.ndarray) -> dict[str, TheoryLanes]:
    """The ODE theories of every lane (gamma x max_order), solved through `sweep.sweep_map`;
    each lane ends at its blow-up (`BLOW_UP`), the later times holding that state."""
    from ctx_staircase import flows, ode, sweep

    occurring = np.unique(ds.tokens)
    if inputs.model == "ffn":
        # Only occurring tokens carry signature mass: restricting the axes to them keeps the
        # flow's contractions small (4-6x faster on add; benchmarks/README.md), same numbers.
        sigs = signatures.signature_set(
            ds,
            budget.theory_signature_order(ds, "ffn", inputs.max_orders, inputs.prediction),
            alphas=occurring,
            labels=np.unique(ds.labels[ds.weights > 0]),
            context=occurring,
        )
        field = flows.ffn_signature_flow(sigs, inputs.coefficients, prediction=inputs.prediction)
        names = [f"signature_flow_m{m}" for m in inputs.max_orders]
    else:
        field = flows.attention_uniform_flow(signatures.signature_set(ds, 0), ds.vocab_size)
        names = ["uniform_attention_flow"]
    orders = len(inputs.max_orders)
    lanes_y0 = {k: jnp.repeat(jnp.asarray(v), orders, axis=0) for k, v in y0.items()}
    lanes_order = jnp.tile(jnp.asarray(inputs.max_orders), len(inputs.gammas))
    grid = jnp.asarray(ts)

    def solve(y, order):
        solution = ode.integrate(
            field, y, grid, order, rtol=1e-7, atol=1e-12, max_steps=20_000, blow_up=BLOW_UP
        )
        return solution.ys, solution.ok, solution.result, solution.t_end

    ys, ok, result, t_end = jax.device_get(
        sweep.sweep_map(solve, lanes_y0, lanes_order, count_lanes=True)
    )
    theories = {}
    for j, name in enumerate(names):
        lanes = range(j, len(inputs.gammas) * orders, orders)
        trajectories = []
        for lane in lanes:
            scale = None
            if inputs.model == "attention":
                weights = {k: jnp.asarray(v[lane]) for k, v in ys.items()}
                scale = np.asarray(uniform_attention_logit_scale(weights, jnp.asarray(ds.tokens)))
            trajectories.append(WeightTrajectory(ts, ys["W_E"][lane], ys["W_U"][lane], scale))
        solver = tuple(
            SolverStatus(bool(ok[lane]), ode.describe(result[lane], t_end[lane])) for lane in lanes
        )
        theories[name] = TheoryLanes(tuple(trajectories), solver)
    return theories


def _closed_form_theories(ds, M, y0: dict, ts: np.ndarray, coefficients) -> dict[str, TheoryLanes]:
    """The closed form (C3) and the closed form with the softmax feedback, per lane."""
    Gamma = closed_form.count_second_moment(ds)
    out = {"closed_form": [], "closed_form_feedback": []}
    for W_E0, W_U0 in zip(y0["W_E"], y0["W_U"], strict=True):
        linear = closed_form.linear_solution(M, W_E0, W_U0, coefficients[0])
        damped = closed_form.feedback_solution(M, Gamma, W_E0, W_U0, coefficients[0], ds.vocab_size)
        for name, solution in (("closed_form", linear), ("closed_form_feedback", damped)):
            W_E, W_U = solution(ts)
            out[name].append(WeightTrajectory(ts, np.asarray(W_E), np.asarray(W_U)))
    return {name: TheoryLanes(tuple(lanes)) for name, lanes in out.items()}


#: The FFN escape laws measured within 5% of GD training (lr 0.2, d = 128) on the paper's add,
#: sub and mod: activation spec -> (the theory, the gamma range it was measured over).
#: z + z^2/2: theory/escape_feedback.md §5 (it misses on weighted_mod and max3); ReLU:
#: theory/relu.md §6.
VALIDATED_LAWS = {
    "poly:1,0.5": ("closed_form_feedback", (0.6, 1.4)),
    "relu": ("relu_gated_flow", (0.8, 1.4)),
}


def validation_note(activation, gammas) -> str | None:
    """One line when the FFN ``activation`` has no escape law validated against training over
    ``gammas`` (`VALIDATED_LAWS`); None when it has one."""
    from ctx_staircase import activations

    activation = activations.get(activation)
    gammas = np.asarray(gammas, dtype=np.float64)
    for spec, (theory, (low, high)) in VALIDATED_LAWS.items():
        if activations.get(spec) == activation:
            outside = gammas[(gammas < low) | (gammas > high)]
            if outside.size == 0:
                return None
            return (
                f"{theory} is validated for this activation over gamma in [{low:g}, {high:g}] "
                f"only; gamma {', '.join(f'{g:g}' for g in outside)} lie outside"
            )
    known = "; ".join(
        f"{s}: {t}, gamma in [{a:g}, {b:g}]" for s, (t, (a, b)) in VALIDATED_LAWS.items()
    )
    return (
        f"no escape law is validated against training for activation {activation.name}"
        f"{'' if activation.coefficients is None else ' ' + str(activation.coefficients)}: "
        f"the numbers below are unchecked (validated: {known})"
    )


#: The RK4 step (``t`` units) of the ReLU gated flow. Its field jumps where a gate flips, which
#: stalls an adaptive solver (it shrinks its step at every jump); a fixed step is first order
#: there, yet 0.05 and 0.0125 give the same escape to 1e-5 relative (theory/relu.md §4).
RELU_STEP = 0.05


def _relu_theories(ds, y0: dict, ts: np.ndarray) -> dict[str, TheoryLanes]:
    """The ReLU gated flow with the linear softmax feedback (theory/relu.md eq. R5), by RK4
    through `sweep.sweep_map`, and the frozen-gate closed form (eq. R4), per lane; each with
    the ReLU escape statistic (`relu.logit_scale`) as its readout."""
    from ctx_staircase import ode, relu, sweep

    problem = relu.gated_problem(ds, dtype=jnp.float64)
    field = frozen_past(relu.gated_flow(problem, "linear"), cap=BLOW_UP)  # RK4 has no events
    grid, tokens = jnp.asarray(ts), jnp.asarray(ds.tokens)

    def solve(y):
        solution = ode.rk4(field, y, grid, max_step=RELU_STEP)
        scale = relu.logit_scale(solution.ys["W_E"], solution.ys["W_U"], tokens)
        return solution.ys, scale, solution.ok

    lanes_y0 = {k: jnp.asarray(v) for k, v in y0.items()}
    ys, scales, ok = jax.device_get(sweep.sweep_map(solve, lanes_y0, count_lanes=True))
    flow = tuple(
        WeightTrajectory(ts, ys["W_E"][i], ys["W_U"][i], scales[i]) for i in range(len(ok))
    )
    solver = tuple(SolverStatus(bool(good), "fixed-step RK4") for good in ok)
    frozen = []
    for W_E0, W_U0 in zip(y0["W_E"], y0["W_U"], strict=True):
        W_E, W_U = relu.frozen_gate_solution(problem, W_E0, W_U0)(ts)
        frozen.append(
            WeightTrajectory(ts, W_E, W_U, np.asarray(relu.logit_scale(W_E, W_U, tokens)))
        )
    return {
        "relu_gated_flow": TheoryLanes(flow, solver),
        "closed_form_frozen_gates": TheoryLanes(tuple(frozen)),
    }


def comparison_summary(compared: Comparison) -> dict:
    """The JSON-ready numbers of one `Comparison`: every field but the ``rho`` and
    ``logit_scale`` curves, the `TheorySimulation` pairs as ``{"theory", "simulation"}``."""
    numbers = compared._asdict()
    del numbers["rho"], numbers["logit_scale"]
    numbers["escape_time"] = compared.escape_time._asdict()
    numbers["onset_time"] = compared.onset_time._asdict()
    return numbers


def experiment_summary(experiment: TheoryVsTraining) -> dict:
    """The JSON-ready numbers of `theory_vs_training` (no trajectories)."""
    runs = [
        {
            "gamma": run.gamma,
            "status": run.status,
            "solver": {name: status._asdict() for name, status in run.solver.items()},
            "comparisons": {name: comparison_summary(c) for name, c in run.comparisons.items()},
        }
        for run in experiment.runs
    ]
    return {
        "model": experiment.model,
        "threshold": experiment.threshold,
        "coefficients": experiment.coefficients,
        "top_singular_value": experiment.top_singular_value,
        "prediction": experiment.prediction,
        "horizon": experiment.horizon._asdict(),
        "notes": experiment.notes,
        "law": {} if experiment.law is None else experiment.law._asdict(),
        "escape": experiment.escape,
        "escape_slope": experiment.escape_slope,
        "runs": runs,
    }


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


def frozen_past(field, cap: float):
    """The vector field ``field(t, y, args)`` (``y`` a dict of arrays), zero once some entry of
    ``y`` reaches ``cap`` in absolute value (far past escape): the flow stops there.

    The truncated flows have no softmax saturation, so with ``C_2 != 0`` they blow up in finite
    time after escape; the theory is only compared before escape, and freezing there keeps the
    adaptive solver from chasing the blow-up.
    """

    def guarded(t, y, args):
        dy = field(t, y, args)
        running = jnp.all(jnp.asarray([jnp.max(jnp.abs(v)) < cap for v in y.values()]))
        return {k: jnp.where(running, v, jnp.zeros_like(v)) for k, v in dy.items()}

    return guarded


def slope(gammas, values) -> float:
    """Least-squares slope of ``values`` ``[G]`` against ``gammas`` ``[G]`` over the finite
    values; NaN with fewer than two."""
    values = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.asarray(gammas)[keep], values[keep], 1)[0])
