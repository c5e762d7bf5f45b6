"""Fig. 9: zero-order informativeness sets when learning starts (paper §7.1, Fig. 9).

Reproduces the paper's claim that exactly the ``modulus`` runs with ``M | N`` (whose zero-order
signature is the same for every token, ``S^{sig,(0)} ≡ 1``) need thousands of epochs to reach
95% training accuracy while the others need a few hundred.

Runs ``modulus`` (all ``(x1, x2) in {1..20}^2``, ``y = (x1 + x2) mod M``) for every M in 2..20
[GAP] on a ReLU FFN (paper §4.1), d = 128, gamma = 1.0, seed 0, in a `regime.Regime` (primary:
full-batch GD at lr 1, one ``V = 2 V_min = 42`` for every M; Adam at lr 1e-3), one compiled run
for the whole M loop, at most 6000 epochs, snapshots every 10. ``full``: seeds 0, 1, 2 and
10000 epochs; ``quick``: M in {3, 4, 5, 7, 19, 20}, 2000 epochs; ``tiny``: M in {4, 7}, 300.

Measures the first snapshot with training accuracy >= 95% (runs that never reach it are censored
at the budget) and the mean off-diagonal embedding cosine at epoch 50. The four claims: the
signature identity, M | N slow ("thousands", >= 1000 epochs) iff, the log-jump ``>= log 3`` [R],
the early collapse; nulls: the M | N indicator permuted over the M values (exactly enumerated),
the shuffled labels, the init. Writes figures ``epochs`` and ``curves_heatmaps``.

Censoring, the permutation null and what was found with the old convention:
theory/experiments.md, fig9_modulus.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from ctx_staircase import metrics, plots, signatures, sweep
from ctx_staircase.experiments import Kind
from ctx_staircase.experiments.common import Draws
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec
from ctx_staircase.experiments.regime import PRIMARY, Regime, shuffled_labels

THRESHOLD = 0.95
SYMLOG = 10  # linear below epoch 10 on the log-time axes (epoch 0 shown)
SLOW_EPOCHS = 1000  # "thousands"
MIN_JUMP = math.log(3.0)  # [R]
COLLAPSE_EPOCH = 50
COLLAPSE_COS = 0.9  # [R] "collapsed to one direction"
NULL_LEVEL = 0.05  # a permutation null passes when >= 5% of relabellings meet the criterion
HEATMAP_MS = (4, 7, 19, 20)
QUICK_MS = (3, 4, 5, 7, 19, 20)
TINY_MS = (4, 7)  # one divisor of 20 and one not: the smallest null with a relabelling
TINY_EPOCHS = 300
MINIMAL_VOCAB = 1 + 20  # every M shares V_min = 21 (tokens 1..N)


@dataclasses.dataclass(frozen=True)
class Config:
    """What a run of this experiment is: the paper's FFN (d = 128, ReLU, gamma = 1), the moduli,
    seeds and epoch budget of its size, the thresholds of its claims, and the regime's name,
    label and vocabulary (`settle`)."""

    task: str = "modulus"
    N: int = 20
    Ms: tuple[int, ...] = tuple(range(2, 21))
    model: str = "ffn"
    d: int = 128
    activation: str = "relu"
    adam_lr: float = 1e-3
    gamma: float = 1.0
    seeds: tuple[int, ...] = (0,)
    max_epochs: int = 6000
    snapshot_every: int = 10
    threshold: float = THRESHOLD
    slow_epochs: int = SLOW_EPOCHS
    min_jump: float = MIN_JUMP
    collapse_epoch: int = COLLAPSE_EPOCH
    vocabulary: str = "shared by every M: V_min = 21 (1 + max id), the regime's V from it"
    null: str = "M | N indicator permuted over the M values (exact enumeration)"
    reduction: str = (  # what this size of run leaves out of the paper's
        "paper sizes (N=20, all pairs); CPU default runs 1 seed and censors at 6000 "
        "epochs (full: 3 seeds, 10000 epochs)"
    )
    regime: str = PRIMARY.name
    regime_label: str = PRIMARY.label
    vocab_size: int = MINIMAL_VOCAB


CONFIGS = {
    Size.TINY: Config(
        Ms=TINY_MS,
        max_epochs=TINY_EPOCHS,
        reduction=f"tiny: M in {{4, 7}}, {TINY_EPOCHS} epochs, 1 seed",
    ),
    Size.QUICK: Config(
        Ms=QUICK_MS,
        max_epochs=2000,
        reduction="quick: M in {3, 4, 5, 7, 19, 20}, 2000 epochs, 1 seed",
    ),
    Size.CPU: Config(),
    Size.FULL: Config(seeds=(0, 1, 2), max_epochs=10000),
}


def settle(config: Config, regime: Regime | None) -> Config:
    """``config`` in ``regime`` (the primary one when None): its name, label and the vocabulary
    it gives the moduli's shared ``V_min``."""
    regime = regime or PRIMARY
    vocab_size = regime.vocab_size(MINIMAL_VOCAB) or MINIMAL_VOCAB
    return dataclasses.replace(
        config, regime=regime.name, regime_label=regime.label, vocab_size=vocab_size
    )


def _first_hit(epochs: np.ndarray, accuracy: np.ndarray, threshold: float) -> int | None:
    hit = np.flatnonzero(accuracy >= threshold)
    return int(epochs[hit[0]]) if hit.size else None


def _constant_sig0(ds) -> tuple[bool, float, np.ndarray]:
    numbers, labels = ds.groups["numbers"], np.unique(ds.labels)
    S0 = np.asarray(
        metrics.cosine_matrix(signatures.label_signature(ds, 0, alphas=numbers, labels=labels))
    )
    upper = metrics.upper_triangle(S0)
    return bool(np.ptp(upper) <= 1e-12), float(upper.min()), S0


def _mean_cos(W_E, numbers) -> list[float]:
    S = np.asarray(metrics.cosine_matrix(np.asarray(W_E)[:, numbers]))  # [seeds, N, N]
    return [float(metrics.upper_triangle(s).mean()) for s in S]


def log_jump(log_epochs: np.ndarray, divides: np.ndarray) -> float:
    """Mean log(epochs) of the M | N runs minus that of the others (the regression jump)."""
    return float(log_epochs[divides].mean() - log_epochs[~divides].mean())


def relabellings(n: int, k: int) -> np.ndarray:
    """Every indicator of ``k`` of ``n`` items, ``[C(n, k), n]`` bool (the permutation null)."""
    out = np.zeros((math.comb(n, k), n), dtype=bool)
    for row, chosen in enumerate(itertools.combinations(range(n), k)):
        out[row, list(chosen)] = True
    return out


# --------------------------------------------------------------------------------------------
# training: one run per modulus


@dataclasses.dataclass(frozen=True)
class ModulusRun:
    """One modulus, per seed where a tuple: whether ``M | N``, the first epoch at >= 95% train
    accuracy (None: censored at the budget), the accuracies, the run status, the zero-order
    signature's constancy (and its least off-diagonal cosine, and the constancy under shuffled
    labels), and the mean off-diagonal number-embedding cosine at `COLLAPSE_EPOCH` and at init."""

    divides: bool
    epochs_to_95: tuple[int | None, ...]
    censored: tuple[bool, ...]
    max_accuracy: tuple[float, ...]
    final_accuracy: tuple[float, ...]
    status: tuple[str, ...]
    S_sig0_constant: bool
    S_sig0_offdiag_min: float
    S_sig0_constant_shuffled: bool
    early_offdiag_cos: tuple[float, ...]
    init_offdiag_cos: tuple[float, ...]


class Panels(NamedTuple):
    """What the figures draw of one modulus: the seed-0 accuracy ``[S]`` at ``epochs [S]``,
    ``S^{sig,(0)}`` and the early ``S^emb`` of the numbers ``[N, N]``."""

    curve: np.ndarray
    S0: np.ndarray
    S_early: np.ndarray
    epochs: np.ndarray


def _modulus_run(M: int, config: Config, regime: Regime) -> tuple[ModulusRun, Panels]:
    """One modulus trained (every seed one lane of one compiled run) and measured."""
    ds = regime.make("modulus", N=config.N, M=M, minimal=MINIMAL_VOCAB)
    numbers = ds.groups["numbers"]
    constant, low, S0 = _constant_sig0(ds)
    train_config = regime.train_config(
        ds,
        epochs=config.max_epochs,
        snapshots=range(0, config.max_epochs + 1, config.snapshot_every),
        adam_lr=config.adam_lr,
    )
    result = sweep.train_sweep(
        config.model,
        ds,
        train_config,
        gammas=[config.gamma],
        seeds=config.seeds,
        d=config.d,
        activation=config.activation,
    )
    trajectory = result.trajectory
    epochs = regime.epochs_of(trajectory.steps[0])
    accuracy = np.asarray(trajectory.accuracy)  # [seeds, S]
    hits = tuple(_first_hit(epochs, a, THRESHOLD) for a in accuracy)
    W_E = np.asarray(trajectory.W_E)
    collapse = COLLAPSE_EPOCH // config.snapshot_every
    measured = ModulusRun(
        divides=config.N % M == 0,
        epochs_to_95=hits,
        censored=tuple(h is None for h in hits),
        max_accuracy=tuple(float(a.max()) for a in accuracy),
        final_accuracy=tuple(float(a[-1]) for a in accuracy),
        status=tuple(str(s) for s in result.status),
        S_sig0_constant=constant,
        S_sig0_offdiag_min=low,
        S_sig0_constant_shuffled=_constant_sig0(shuffled_labels(ds, seed=0))[0],
        early_offdiag_cos=tuple(_mean_cos(W_E[:, collapse], numbers)),
        init_offdiag_cos=tuple(_mean_cos(W_E[:, 0], numbers)),
    )
    S_early = np.asarray(metrics.cosine_matrix(W_E[0, collapse][numbers]))
    return measured, Panels(accuracy[0], S0, S_early, epochs)


# --------------------------------------------------------------------------------------------
# learning speed and its permutation null


@dataclasses.dataclass(frozen=True)
class Speeds:
    """Learning speed per modulus, all ``[moduli]`` in the order of ``Ms``: the seed median of
    the epochs to 95% (censored runs at ``max_epochs``, a lower bound), whether that median is
    censored, whether any seed is, and ``1[M | N]``."""

    Ms: np.ndarray
    epochs: np.ndarray
    censored: np.ndarray
    any_censored: np.ndarray
    divides: np.ndarray
    max_epochs: int

    @classmethod
    def of(cls, per_M: dict[str, ModulusRun], max_epochs: int) -> Speeds:
        """From each modulus's `ModulusRun`, keyed ``str(M)``."""
        runs = list(per_M.values())
        return cls(
            Ms=np.asarray([int(M) for M in per_M]),
            epochs=np.asarray(
                [np.median([max_epochs if h is None else h for h in r.epochs_to_95]) for r in runs],
                dtype=float,
            ),
            censored=np.asarray([np.median(r.censored) > 0.5 for r in runs]),
            any_censored=np.asarray([any(r.censored) for r in runs]),
            divides=np.asarray([r.divides for r in runs]),
            max_epochs=max_epochs,
        )

    @property
    def log_epochs(self) -> np.ndarray:
        return np.log(np.maximum(self.epochs, 1.0))

    @property
    def slow(self) -> np.ndarray:
        """ "Thousands" of epochs (censored runs count as thousands)."""
        return self.epochs >= SLOW_EPOCHS

    def slow_iff(self, indicator: np.ndarray) -> bool:
        """The §8.8 criterion for a divisor indicator ``[moduli]``: slow exactly where it is set."""
        return bool(np.all(self.slow == indicator))

    def jumps(self, indicator: np.ndarray) -> bool:
        """The [R] criterion for a divisor indicator ``[moduli]``: a log-jump >= log 3 that is
        exact or a lower bound (no censored run outside the indicated moduli)."""
        bound_ok = not (self.any_censored & ~indicator).any()
        return bool(log_jump(self.log_epochs, indicator) >= MIN_JUMP and bound_ok)

    def bound(self) -> str:
        """What the censored runs make of the measured jump."""
        censored, divides = self.any_censored, self.divides
        if not censored.any():
            return "exact (no censored run)"
        if not (censored & ~divides).any():
            return "a lower bound (censored runs only among M | N)"
        if not (censored & divides).any():
            return "an upper bound (censored runs only among M ∤ N)"
        return "no bound (censored runs in both groups)"

    def jump_uncensored(self) -> float | None:
        """The jump over the runs no seed of which is censored (None when a group has none)."""
        done = ~self.any_censored
        if (done & self.divides).any() and (done & ~self.divides).any():
            return log_jump(self.log_epochs[done], self.divides[done])
        return None

    def relabellings(self) -> np.ndarray:
        """Every other indicator with as many divisors, ``[R, moduli]`` (the permutation null)."""
        perms = relabellings(self.Ms.size, int(self.divides.sum()))
        return perms[~np.all(perms == self.divides[None, :], axis=1)]

    def text(self) -> str:
        """``M=4*: 210; M=7: >6000; ...`` (``*``: M | N; ``>``: censored)."""
        return "; ".join(
            f"M={M}{'*' if d else ''}: {'>' if c else ''}{int(e)}"
            for M, e, c, d in zip(self.Ms, self.epochs, self.censored, self.divides, strict=True)
        )


@dataclasses.dataclass(frozen=True)
class Record:
    """What a run measured, in ``Ms`` order (`Speeds`): each modulus's seed-median epochs to 95%
    (censored ones at the budget), censoring and divisibility; the log-jump of the epochs on
    ``1[M | N]``, what the censored runs make of it (`Speeds.bound`), the jump over the
    uncensored runs, its permutation p-value and 95th percentile; Spearman's rank correlation of
    M and log epochs; the moduli the slow/fast split misclassifies; the seed-mean off-diagonal
    cosines at `COLLAPSE_EPOCH` and at init; every modulus's `ModulusRun`; and, unsaved, what
    the figures draw."""

    Ms: tuple[int, ...]
    epochs_to_95_median: tuple[float, ...]
    censored: tuple[bool, ...]
    divides: tuple[bool, ...]
    log_jump: float
    log_jump_bound: str
    log_jump_uncensored: float | None
    log_jump_permutation_p: float
    log_jump_permutation_q95: float
    spearman_M_log_epochs: float
    misclassified: tuple[int, ...]
    early_offdiag_cos: tuple[float, ...]
    init_offdiag_cos: tuple[float, ...]
    per_M: dict[str, ModulusRun]
    panels: dict | None = dataclasses.field(default=None, compare=False, metadata={"saved": False})


def measure(config: Config, regime: Regime | None) -> Record:
    """Train every modulus of ``config`` (two at a time) and measure the module docstring's
    numbers."""
    regime = regime or PRIMARY
    with ThreadPoolExecutor(max_workers=2) as pool:
        trained = list(pool.map(lambda M: _modulus_run(M, config, regime), config.Ms))
    per_M = {str(M): run for M, (run, _) in zip(config.Ms, trained, strict=True)}
    speeds = Speeds.of(per_M, config.max_epochs)
    jump = log_jump(speeds.log_epochs, speeds.divides)
    perm_jumps = np.asarray([log_jump(speeds.log_epochs, p) for p in speeds.relabellings()])
    return Record(
        Ms=tuple(speeds.Ms.tolist()),
        epochs_to_95_median=tuple(speeds.epochs.tolist()),
        censored=tuple(speeds.censored.tolist()),
        divides=tuple(speeds.divides.tolist()),
        log_jump=jump,
        log_jump_bound=speeds.bound(),
        log_jump_uncensored=speeds.jump_uncensored(),
        log_jump_permutation_p=float(
            (1 + np.sum(perm_jumps >= jump - 1e-12)) / (1 + perm_jumps.size)
        ),
        log_jump_permutation_q95=float(np.quantile(perm_jumps, 0.95)),
        spearman_M_log_epochs=float(metrics.spearman(speeds.Ms.astype(float), speeds.log_epochs)),
        misclassified=tuple(int(M) for M in speeds.Ms[speeds.slow != speeds.divides]),
        early_offdiag_cos=tuple(float(np.mean(r.early_offdiag_cos)) for r in per_M.values()),
        init_offdiag_cos=tuple(float(np.mean(r.init_offdiag_cos)) for r in per_M.values()),
        per_M=per_M,
        panels=dict(zip(config.Ms, (panels for _, panels in trained), strict=True)),
    )


def figures(config: Config, record: Record) -> dict:
    """``epochs``: learning speed and early collapse per modulus; ``curves_heatmaps``: the
    signature and early embedding geometry of `HEATMAP_MS`, and the accuracy curves."""
    speeds, panels = _speeds(record, config), record.panels
    shown = [M for M in config.Ms if M in HEATMAP_MS]
    return {
        "epochs": epochs_figure(
            speeds.Ms,
            speeds.epochs,
            speeds.censored,
            speeds.divides,
            np.asarray(record.early_offdiag_cos),
            config,
        ),
        "curves_heatmaps": heatmap_figure(
            panels[config.Ms[0]].epochs,
            {M: p.curve for M, p in panels.items()},
            {M: panels[M].S0 for M in shown},
            {M: panels[M].S_early for M in shown},
            config,
        ),
    }


# --------------------------------------------------------------------------------------------
# claims: each a function of the record and its config


def _speeds(record: Record, config: Config) -> Speeds:
    return Speeds.of(record.per_M, config.max_epochs)


def _constant(record: Record, shuffled: bool) -> np.ndarray:
    """Whether each modulus's zero-order signature is constant (under shuffled labels)."""
    runs = record.per_M.values()
    return np.asarray([r.S_sig0_constant_shuffled if shuffled else r.S_sig0_constant for r in runs])


def _moduli(Ms: np.ndarray, where: np.ndarray) -> str:
    return ", ".join(str(M) for M in Ms[where])


def _signature_measured(record: Record, config: Config) -> str:
    return "constant for M = " + _moduli(_speeds(record, config).Ms, _constant(record, False))


def _signature_null(record: Record, config: Config) -> str:
    Ms = _speeds(record, config).Ms
    return "shuffled labels: constant for M = " + (_moduli(Ms, _constant(record, True)) or "none")


def _iff_note(record: Record, config: Config) -> str:
    wrong, spearman = list(record.misclassified), record.spearman_M_log_epochs
    if not wrong:
        return ""
    return f"misclassified M: {wrong}. Spearman(M, log epochs) = {spearman:.2f}" + (
        ": the dominant trend is in M itself, not divisibility; see the collapse diagnostic."
        if abs(spearman) >= 0.7
        else "."
    )


def _measured_class(record: Record, config: Config) -> str:
    """Every run reached its target: the times are measured, not bounded by the horizon, so a
    FAIL is false in this regime."""
    return "unclassified" if _speeds(record, config).any_censored.any() else "false"


def _jump_measured(record: Record, config: Config) -> str:
    uncensored = record.log_jump_uncensored
    return (
        f"jump {record.log_jump:.2f} (= x{math.exp(record.log_jump):.1f}; censored runs enter at "
        f"{config.max_epochs}: {record.log_jump_bound}); uncensored only: "
        + ("undefined" if uncensored is None else f"{uncensored:.2f}")
    )


def _jump_note(record: Record, config: Config) -> str:
    speeds, uncensored = _speeds(record, config), record.log_jump_uncensored
    note = (
        f"censored (never reached 95%): M = {[int(M) for M in speeds.Ms[speeds.any_censored]]}; "
        "uncensored-only jump "
        + ("undefined (a group has no uncensored run)" if uncensored is None else "")
        + ("" if uncensored is None else f"{uncensored:.2f}")
        + f". Permutation p-value of the jump (relabellings with a jump ≥ the measured one): "
        f"{record.log_jump_permutation_p:.3f}."
    )
    if record.log_jump < MIN_JUMP:
        note += " Why it misses: epochs to 95% " + speeds.text() + "."
    elif not record.log_jump_bound.startswith(("exact", "a lower")):
        note += " Why it misses: censored M ∤ N runs make the jump an upper bound."
    return note


def _collapse_measured(record: Record, config: Config) -> str:
    return f"mean off-diag cos at epoch {COLLAPSE_EPOCH}: " + ", ".join(
        f"M={M}: {c:.2f}" for M, c in zip(record.Ms, record.early_offdiag_cos, strict=True)
    )


def _collapse_note(record: Record, config: Config) -> str:
    speeds, early = _speeds(record, config), np.asarray(record.early_offdiag_cos)
    wrong = [int(M) for M in speeds.Ms[(early >= COLLAPSE_COS) != speeds.divides]]
    if not wrong:
        return ""
    return (
        f"mismatched M: {wrong}. The early common-mode drive "
        "C_1 W^{U,T}(φ^{y;0} − 1/V) has a part shared by every token whatever M "
        f"(labels 0..M−1 of a {config.vocab_size}-id softmax), so "
        "collapse is not specific to M | N."
    )


def _init_cos(record: Record, config: Config) -> str:
    init = np.asarray(record.init_offdiag_cos)
    return f"init: mean off-diag cos {init.min():.2f}..{init.max():.2f}"


def _relabelled(record: Record, config: Config) -> Draws:
    """The permutation null of a speed criterion: every other assignment of as many divisors to
    the moduli, each with the run's `Speeds`."""
    speeds = _speeds(record, config)
    return Draws([(speeds, p) for p in speeds.relabellings()], NULL_LEVEL)


def _divisors(record: Record, config: Config) -> tuple[Speeds, np.ndarray]:
    """A speed criterion's statistic: the run's `Speeds` and its own divisor indicator."""
    speeds = _speeds(record, config)
    return speeds, speeds.divides


def _relabelled_share(rule, record: Record, config: Config) -> str:
    null = _relabelled(record, config)
    share = null.share(rule)
    return f"M | N permuted: {share:.4f} of {len(null.draws)} other relabellings meet it"


def _matches_divisors(value) -> bool:
    """Whether an indicator over the moduli is set exactly where ``M | N``."""
    indicator, divides = value
    return bool(np.all(np.asarray(indicator) == divides))


def _slow_iff(value) -> bool:
    speeds, indicator = value
    return speeds.slow_iff(indicator)


def _jumps(value) -> bool:
    speeds, indicator = value
    return speeds.jumps(indicator)


CLAIMS = (
    ClaimSpec(
        item="§8.8 (data)",
        claim="S^{sig,(0)} of the numbers is constant (≡ 1) exactly when M | N",
        statistic=lambda r, c: (_constant(r, False), _speeds(r, c).divides),
        measured=_signature_measured,
        criterion=Criterion("constant iff M | 20 (exact signatures)", _matches_divisors),
        null=lambda r, c: (_constant(r, True), _speeds(r, c).divides),
        null_text=_signature_null,
    ),
    ClaimSpec(
        item="§8.8",
        claim="epochs to 95% train accuracy are in the thousands iff M | N, hundreds otherwise",
        statistic=_divisors,
        measured=lambda r, c: _speeds(r, c).text() + " (* = M | 20; > = never reached, censored)",
        criterion=Criterion(
            f"every M | 20 needs >= {SLOW_EPOCHS} epochs (or is censored), every other M "
            f"< {SLOW_EPOCHS}",
            _slow_iff,
        ),
        null=_relabelled,
        null_text=lambda r, c: _relabelled_share(_slow_iff, r, c),
        note=_iff_note,
        failure=_measured_class,
    ),
    ClaimSpec(
        item="§8.8",
        claim="log(epochs) regressed on 1[M | N] has a large positive jump",
        statistic=_divisors,
        measured=_jump_measured,
        criterion=Criterion(
            f"jump >= log 3 = {MIN_JUMP:.2f}, as an exact value or a lower bound [R: 'large' "
            "read as M | N runs at least 3 times slower, in geometric mean]",
            _jumps,
        ),
        null=_relabelled,
        null_text=lambda r, c: (
            _relabelled_share(_jumps, r, c)
            + f" (95th percentile of the jump {r.log_jump_permutation_q95:.2f})"
        ),
        kind=Kind.PROJECT,
        note=_jump_note,
        failure=_measured_class,
    ),
    ClaimSpec(
        item="mechanism [R]",
        claim="embeddings collapse to one direction early exactly when S^{sig,(0)} ≡ 1",
        statistic=lambda r, c: (np.asarray(r.early_offdiag_cos) >= COLLAPSE_COS, r.divides),
        measured=_collapse_measured,
        criterion=Criterion(
            f"mean off-diagonal cosine >= {COLLAPSE_COS} iff M | 20 [R: 'collapsed to one "
            "direction' read as Fig. 3A/B's collapse]",
            _matches_divisors,
        ),
        null=lambda r, c: (np.asarray(r.init_offdiag_cos) >= COLLAPSE_COS, r.divides),
        null_text=_init_cos,
        kind=Kind.PROJECT,
        note=_collapse_note,
        failure="false",  # read at an early epoch inside every run
    ),
)

SPEC = Spec.declared(globals())


def epochs_figure(Ms, epochs, censored, divides, early_cos, config):
    """Epochs to 95% accuracy and the early collapse per modulus; ``Ms``, ``epochs``,
    ``censored``, ``divides``, ``early_cos`` all [moduli]."""
    fig, axes = plots.figure(
        1,
        2,
        panel=(5.5, 3.8),
        suptitle=(
            f"$y = (x_1 + x_2)$ mod M, N=20; FFN ReLU d={config.d}, "
            f"$\\gamma$={config.gamma:g}, {config.regime_label}"
        ),
    )
    ax = axes[0]
    for mask, colour, label in ((divides, "C3", "M | 20"), (~divides, "C0", "M ∤ 20")):
        done = mask & ~censored
        ax.plot(Ms[done], epochs[done], "o", color=colour, label=label)
        cut = mask & censored
        if cut.any():
            ax.plot(Ms[cut], epochs[cut], "^", color=colour, mfc="none", ms=9)
    ax.plot([], [], "^", color="k", mfc="none", label=f"never (> {config.max_epochs})")
    plots.reference(ax, y=SLOW_EPOCHS, label=f"{SLOW_EPOCHS} epochs")
    ax.set_yscale("log")
    ax.set_xticks(Ms)
    plots.axis_labels(
        ax, "modulus $M$", "epochs to 95% train accuracy", "learning speed (seed median)"
    )
    plots.legend(ax)
    ax = axes[1]
    ax.bar(Ms, early_cos, color=np.where(divides, "C3", "C0"))
    plots.reference(ax, y=COLLAPSE_COS)
    ax.set_xticks(Ms)
    plots.axis_labels(
        ax,
        "modulus $M$",
        f"mean off-diagonal cosine, epoch {COLLAPSE_EPOCH}",
        "early collapse of the number embeddings (red: M | 20)",
    )
    return fig


def heatmap_figure(steps, curves, S_sig0, S_emb_early, config):
    """$S^{sig,(0)}$ (top) and the early $S^{emb}$ (bottom) per modulus, and accuracy curves;
    ``S_sig0[M]``, ``S_emb_early[M]`` [N, N], ``curves[M]`` [T] on ``steps`` [T]."""
    Ms = sorted(S_sig0)
    fig, axes = plots.grid(
        2,
        len(Ms) + 1,
        panel=(3.0, 2.9),
        suptitle=(
            "zero-order signature geometry (top) and early embedding geometry (bottom); "
            f"{config.regime_label}"
        ),
    )
    ticks = np.arange(1, config.N + 1)
    cosine_image = None
    for column, M in enumerate(Ms):
        S0 = S_sig0[M]
        upper = S0[np.triu_indices(len(S0), k=1)]
        ax = axes[0, column]
        low = float(upper.min())
        constant = np.ptp(upper) <= 1e-12
        title = f"$S^{{sig,(0)}}$, M={M}: " + ("≡ 1" if constant else f"[{low:.3f}, 1]")
        image = plots.heatmap(ax, S0, ticks, title)
        image.set_cmap("viridis")
        image.set_clim(0.9 if constant else low, 1.0)
        ax.set_xticks([0, 9, 19], ["1", "10", "20"])
        ax.set_yticks([0, 9, 19], ["1", "10", "20"])
        plots.colorbar(fig, image, ax, shrink=0.7)
        cosine_image = plots.heatmap(
            axes[1, column], S_emb_early[M], ticks, f"$S^{{emb}}$ at epoch {COLLAPSE_EPOCH}, M={M}"
        )
    ax = axes[0, -1]
    for i, M in enumerate(Ms):
        ax.plot(steps, curves[M], color=f"C{i % 10}", label=f"M={M}")
    plots.reference(ax, y=THRESHOLD)
    plots.epoch_axis(ax, SYMLOG)
    plots.axis_labels(ax, y=plots.ACCURACY, title="train accuracy (seed 0)")
    plots.legend(ax)
    axes[1, -1].axis("off")
    if cosine_image is not None:
        plots.colorbar(fig, cosine_image, axes[1, -1], fraction=0.5, shrink=1.0)
    return fig
