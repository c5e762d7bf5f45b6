"""Helpers shared by the experiments: the paper's FFN settings, one configured training sweep,
one criterion scored on a run and its null, and an `Outcome` joined from an experiment's parts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ctx_staircase import curvature, sweep, train
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.experiments import Claim, Outcome


def paper_ffn(adam_lr: float) -> dict:
    """The config entries of the paper's one-layer ReLU FFN (d = 128, gamma = 1) under Adam at
    ``adam_lr``: ``model``, ``d``, ``activation``, ``adam_lr``, ``gamma`` (what
    `train_configured` reads)."""
    return dict(model="ffn", d=128, activation="relu", adam_lr=adam_lr, gamma=1.0)


def size(tiny: bool, quick: bool) -> str:
    """The size of a run, as experiments key what it leaves out of the paper's: ``"tiny"``
    (which wins over ``quick``), ``"quick"`` or ``"paper"``."""
    return "tiny" if tiny else "quick" if quick else "paper"


def recorded_config(
    fields: dict,
    nulls: dict[str, str],
    reductions: dict[str, str],
    regime,
    *,
    tiny: bool,
    quick: bool,
) -> dict:
    """The configuration an experiment records, in this key order: its own ``fields``; how each
    of its null controls is built (``nulls``, keyed as the record names them); ``reduction``,
    what this size of run leaves out of the paper's (``reductions[size(tiny, quick)]``); then
    the training regime's description (`regime.Regime.describe`)."""
    return fields | nulls | {"reduction": reductions[size(tiny, quick)]} | regime.describe()


def train_configured(
    ds: TokenDataset | Sequence[TokenDataset],
    train_config: train.TrainConfig,
    config: dict,
    seeds: Sequence[int],
    activation: str | None = None,
) -> sweep.SweepResult:
    """`sweep.train_sweep` of ``config["model"]`` at the single ``config["gamma"]``, width
    ``config["d"]`` and ``config["activation"]`` (or ``activation``), one lane per seed (and per
    dataset, given several)."""
    return sweep.train_sweep(
        config["model"],
        ds,
        train_config,
        gammas=[config["gamma"]],
        seeds=seeds,
        d=config["d"],
        activation=config["activation"] if activation is None else activation,
    )


def train_gammas(
    model: str, ds: TokenDataset, train_config: train.TrainConfig, gammas, config: dict, *keys
) -> sweep.SweepResult:
    """`sweep.train_sweep` of ``model`` with one lane per initialization scale in ``gammas``, all
    at seed ``config["seed"]``, and the model keywords named by ``keys`` read from ``config``
    (e.g. ``"d", "d_k"``)."""
    model_kwargs = {key: config[key] for key in keys}
    return sweep.train_sweep(
        model, ds, train_config, gammas=gammas, seeds=(config["seed"],), **model_kwargs
    )


@dataclasses.dataclass(frozen=True)
class Draws:
    """A null control given as equally likely draws, e.g. every other relabelling of a
    permutation null: it meets the criterion when at least a share ``level`` of its draws do
    (a one-sided test at that level).

    Attributes:
        draws: the null measurements, each of the run's kind.
        level: the share of passing draws at which the null passes, in (0, 1].
    """

    draws: Sequence[Any]
    level: float

    def share(self, criterion: Callable[[Any], Any]) -> float:
        """The share of the draws that meet ``criterion`` (0 when there are none)."""
        return float(np.mean([bool(criterion(d)) for d in self.draws])) if len(self.draws) else 0.0


@dataclasses.dataclass(frozen=True)
class NoNull:
    """A claim with no null control its criterion could score, and ``why`` (e.g. a robustness
    check compares two trainings: neither is a null of the other). Stated as the claim's null
    text ``"none natural: why"``, with no null verdict."""

    why: str


def reported(measured: Any) -> None:
    """The criterion of a descriptive claim: the measurement is reported, no verdict."""
    return None


def train_in_regime(
    ds: TokenDataset | Sequence[TokenDataset],
    regime,
    config: dict,
    seeds: Sequence[int],
    activation: str | None = None,
    *,
    epochs: int | None = None,
    snapshots: Sequence[int] | None = None,
) -> sweep.SweepResult:
    """`train_configured` under ``regime``'s optimizer (`regime.Regime.train_config`) at
    ``config["adam_lr"]``, for ``epochs`` with ``snapshots`` (default: ``config["epochs"]``,
    ``config["snapshots"]``). Several datasets need a regime without minibatches (whose size
    is the dataset's)."""
    train_config = regime.train_config(
        ds,
        epochs=config["epochs"] if epochs is None else epochs,
        snapshots=config["snapshots"] if snapshots is None else snapshots,
        adam_lr=config["adam_lr"],
    )
    return train_configured(ds, train_config, config, seeds, activation)


#: A run still learning when it stops: its last snapshot's accuracy exceeds the one at this
#: fraction of the horizon by more than `STILL_LEARNING` (a run that has settled moves less).
LAST_QUARTER = 0.75
STILL_LEARNING = 0.01


def failure_class(accuracy) -> str:
    """The class of a FAIL measured at a run's end (`experiments.FAILURES`): ``"budget"`` when
    the run was still learning at its cap (its training accuracy ``[S]``, on evenly spaced
    snapshots, rose by more than `STILL_LEARNING` over the last quarter of the horizon), else
    ``"unclassified"``: a run that has settled may sit on a plateau that ends later, so calling
    the claim false needs the effect's predicted time, which this does not know."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    accuracy = accuracy[np.isfinite(accuracy)]
    if accuracy.size < 2:
        return "unclassified"
    quarter = accuracy[int(LAST_QUARTER * (accuracy.size - 1))]
    return "budget" if accuracy[-1] - quarter > STILL_LEARNING else "unclassified"


#: A run's loss has settled from the first snapshot after which it stays within this fraction
#: of its final value (the collapse plateaus' edge-of-stability wobble is about 0.3%).
SETTLED = 0.01
#: A Hessian eigenvalue below ``-UNSTABLE`` times the sharpness is an instability (Lanczos in
#: float64 resolves the extreme eigenvalues far more finely).
UNSTABLE = 1e-6
#: Lanczos iterations for the end state's Hessian (its extreme eigenvalues converge first).
CURVATURE_ITERATIONS = 80


def plateau_start(epochs, loss) -> float:
    """The first of ``epochs`` ``[S]`` after which the ``loss`` ``[S]`` stays within `SETTLED`
    of its final value at every later snapshot (the last epoch when it never settles)."""
    epochs, loss = np.asarray(epochs, np.float64), np.asarray(loss, np.float64)
    outside = np.abs(loss - loss[-1]) > SETTLED * abs(loss[-1])
    last_outside = np.flatnonzero(outside)
    return float(epochs[last_outside[-1] + 1 if last_outside.size else 0])


class EndState(NamedTuple):
    """Where a GD run ends (`end_curvature`); a record's JSON keeps it as ``_asdict()`` and
    `EndState(**saved)` reads it back.

    Attributes:
        loss, gradient_norm: the loss and ``|grad L|`` at the last state.
        least_eigenvalue, sharpness: the Hessian's least and greatest eigenvalues there.
        gd_lr: the run's GD step.
        unstable_rate: ``-least_eigenvalue`` when it exceeds `UNSTABLE` x the sharpness, else 0.
        plateau_start, plateau_epochs: where the loss settled (`plateau_start`) and for how
            long, in flow time.
        efolds_from_rounding: ``ln(1/u)``, ``u`` the unit roundoff of the run's dtype.
    """

    loss: float
    gradient_norm: float
    least_eigenvalue: float
    sharpness: float
    gd_lr: float
    unstable_rate: float
    plateau_start: float
    plateau_epochs: float
    efolds_from_rounding: float


def end_curvature(finished: train.Finished, ds: TokenDataset, epochs, lr: float) -> EndState:
    """Where a GD run ends (theory/regimes.md, "A plateau's end, read
    from its curvature"): the loss, ``|grad L|``, the Hessian's least eigenvalue and its
    sharpness (greatest) at the last state (`curvature.curvature`, float64); the unstable rate
    (``-least`` when it exceeds `UNSTABLE` x the sharpness, else 0); the plateau the loss has
    sat on (`plateau_start` on the run's snapshot ``epochs`` ``[S]``, in flow time); and
    ``efolds_from_rounding = ln(1/u)``, ``u`` the unit roundoff of the run's dtype: the growth
    that carries a deviation seeded by rounding up to the weights' own scale."""
    end = curvature.curvature(
        train.loss_function(finished.graphdef, ds),
        finished.state,
        iterations=CURVATURE_ITERATIONS,
    )
    start = plateau_start(epochs, finished.trajectory.loss)
    eps = float(np.finfo(train.state_dtype(finished.state)).eps)
    return EndState(
        loss=end.loss,
        gradient_norm=end.gradient_norm,
        least_eigenvalue=float(end.least[0]),
        sharpness=end.greatest,
        gd_lr=float(lr),
        unstable_rate=end.unstable_rate(UNSTABLE),
        plateau_start=start,
        plateau_epochs=float(np.asarray(epochs)[-1]) - start,
        efolds_from_rounding=float(-np.log(eps / 2)),
    )


def end_of_run(
    model: str, ds: TokenDataset, train_config: train.TrainConfig, regime, **init: Any
) -> EndState:
    """`end_curvature` of one GD run of ``model`` on ``ds`` in ``regime`` (`train.finish` with
    ``init``: ``gamma``, ``seed`` and the model's keywords): the run again, to its last state,
    and the Hessian there."""
    finished = train.finish(model, ds, train_config, **init)
    epochs = regime.epochs_of(finished.trajectory.steps)
    return end_curvature(finished, ds, epochs, regime.gd_lr)


def plateau_failure(end: EndState) -> str:
    """The class of a FAIL read at the end of a GD run, from its `EndState`:
    ``"budget"`` while the loss has not settled for the last quarter of the horizon (still
    learning), or while it sits on a strict saddle whose instability has not had the time to
    grow a rounding-sized deviation to the weights' scale (``rate x plateau <
    efolds_from_rounding``: the plateau may end later); ``"false"`` when the plateau has
    outlasted that time, or the end is a minimum to second order (no instability): the flow
    leaves it by no linear instability (theory/regimes.md)."""
    horizon = end.plateau_start + end.plateau_epochs
    if end.plateau_epochs < (1 - LAST_QUARTER) * horizon:
        return "budget"
    rate = end.unstable_rate
    outlasted = rate * end.plateau_epochs >= end.efolds_from_rounding
    return "false" if rate == 0 or outlasted else "budget"


def curvature_text(end: EndState) -> str:
    """An `EndState` for a claim's note: the end state, its curvature and what
    `plateau_failure` reads from it."""
    rate, length = end.unstable_rate, end.plateau_epochs
    edge = end.sharpness * end.gd_lr
    text = (
        f"At the end: loss {end.loss:.4f}, |grad L| {end.gradient_norm:.3g}, Hessian least "
        f"eigenvalue {end.least_eigenvalue:.3g}, sharpness {end.sharpness:.3g} "
        f"(x lr = {edge:.2f}"
        + (
            ": GD at or past its stability edge 2 along the sharpest direction"
            if edge >= EDGE_OF_STABILITY
            else ""
        )
        + f"); the loss has sat within {SETTLED:.0%} of its final value since epoch "
        f"{end.plateau_start:g} ({length:g} epochs). "
    )
    needed = end.efolds_from_rounding
    if rate == 0:
        return text + "No negative curvature: a minimum to second order, which no linear "
        "instability leaves."
    return text + (
        f"Its instability (rate {rate:.3g}) grew {rate * length:.1f} e-folds over the plateau, "
        + (
            f"more than the {needed:.1f} that carry a rounding-sized deviation to the weights' "
            "scale: the plateau has outlasted it."
            if rate * length >= needed
            else f"fewer than the {needed:.1f} that carry a rounding-sized deviation to the "
            "weights' scale: the plateau may yet end."
        )
    )


#: ``sharpness x lr`` from which GD is said to sit at the edge of stability (its bound is 2).
EDGE_OF_STABILITY = 1.9


def scored(criterion: Callable[[Any], Any], run: Any, null: Any) -> dict[str, Any]:
    """``passed`` and ``null_passed`` of a `Claim`: the same ``criterion`` applied to the run's
    measurement and to its null control's, so the two can never drift apart.

    ``null`` is the null's measurement (of the run's kind), a `Draws` (scored by the share of its
    draws that meet the criterion) or a `NoNull` (no null verdict; its text goes in ``null``).
    A verdict is ``True``, ``False`` or ``None`` (the criterion does not apply).
    """
    if isinstance(null, NoNull):
        return dict(
            passed=_verdict(criterion(run)), null=f"none natural: {null.why}", null_passed=None
        )
    if isinstance(null, Draws):
        return dict(
            passed=_verdict(criterion(run)), null_passed=null.share(criterion) >= null.level
        )
    return dict(passed=_verdict(criterion(run)), null_passed=_verdict(criterion(null)))


def _verdict(value: Any) -> bool | None:
    return None if value is None else bool(value)


def joined_outcome(
    parts: dict[str, tuple[list[Claim], Any, dict]], config: dict, regime: str
) -> Outcome:
    """One `Outcome` from named parts ``name -> (claims, figure, numbers)``: the claims in part
    order, each tagged with ``regime``; the figures and numbers under the part names."""
    claims = [claim for part_claims, _, _ in parts.values() for claim in part_claims]
    for claim in claims:
        claim.regime = regime
    figures = {name: figure for name, (_, figure, _) in parts.items()}
    numbers = {name: part_numbers for name, (_, _, part_numbers) in parts.items()}
    return Outcome(claims, figures, numbers, config)
