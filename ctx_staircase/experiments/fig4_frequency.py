"""Fig. 4 and App. D: frequency-resolved first-order alignment (paper §4.5).

Reproduces Fig. 4A–D and App. D: ``rho_{(1),k}(t)`` (paper §4.5, App. A.1.6), the alignment of
the number tokens' ``S^emb`` with the cosines of ``h_{alpha,k} = phi^{y;1}_alpha c^cos_k``,
k = 0..20 (``metrics.frequency_alignment``), is small-k early and seed-dependent late.

Runs Task 2 ``add`` and ``mod`` (N = p = 40) on a ReLU FFN (paper §4.1), d = 128, gamma = 1.0,
float32, 1000 epochs (``full``: 1200), 10 seeds in one vmapped sweep (seed 0 the primary run),
in a `regime.Regime` (primary: full-batch GD at lr 1, ``V = 2 V_min``); plus a GELU re-run of
mod. ``quick``: 3 seeds, no GELU run; ``tiny``: 2 seeds at d = 16 for 200 epochs.

Measures the (epoch, k) spectra, the PCA of ``w^E`` and of ``h_{alpha,k}``, and per seed
``k* = argmax_{k > 10} rho_{(1),k}`` at epoch 1000. Claims ([R] thresholds): the early argmax
``<= 2``, add's ``rho_{(1),20} >= 0.5`` late, k* depends on the seed, the ring order of the
eligible seeds (theory/signatures.md eq. S6), the Procrustes own-k* match, the GELU diagnostic;
null: the untrained initialization. Writes figures ``heatmaps``, ``pca``, ``seeds`` and
``seed_pca``.

The k = 0 entry for mod, the ring and own-k* tests, the kinds and nulls: theory/experiments.md,
fig4_frequency.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from ctx_staircase import metrics, plots, signatures, sweep
from ctx_staircase.experiments import Kind
from ctx_staircase.experiments import staircase_claims as scoring
from ctx_staircase.experiments.common import (
    EndState,
    curvature_text,
    end_of_run,
    failure_class,
    plateau_failure,
)
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec, config_regime
from ctx_staircase.experiments.regime import PRIMARY, Regime
from ctx_staircase.records import IF_SET

KS = np.arange(21)
EARLY = scoring.EARLY
LATE_ADD_MIN = 0.5  # [R] "high" rho at k=20 for add
K_SEARCH_MIN = 11  # App. D: k* = argmax over k > 10
RING_RHO_MIN, RING_MIN = 0.5, 0.8  # [R]
OWN_MATCH_MIN = 0.8  # [R]
TINY_EPOCHS = 200
QUICK_REDUCTION = "quick: 3 seeds instead of 10, no GELU diagnostic"


@dataclasses.dataclass(frozen=True)
class Config:
    """What a run of this experiment is: the tasks, the FFN (d, activations, gamma), the seeds,
    optimizer and snapshots of its size, the epochs the claims read, what its texts fix, and the
    regime's name and label (`settle`)."""

    tasks: tuple[str, ...] = ("add", "mod")
    N: int = 40
    p: int = 40
    ks: tuple[int, ...] = tuple(KS.tolist())
    model: str = "ffn"
    d: int = 128
    activation: str = "relu"
    diagnostic_activation: str = "gelu"
    gamma: float = 1.0
    seeds: tuple[int, ...] = tuple(range(10))
    adam_lr: float = 1e-3
    epochs: int = 1000
    snapshots: tuple[int, ...] = (0, 10, 25, 50, 75, *range(100, 1001, 100))
    early_epoch: int = EARLY
    seed_epoch: int = 1000
    k_search: str = "k > 10"
    k0_scale: str = "k = 0 on mod is scored 1 - MSE (S^{sig,(1)}_0 constant); other entries Pearson"
    null: str = "the untrained initialization (epoch-0 snapshot of the same runs)"
    gd_horizon: str = "the paper's epochs, not lengthened (the GD mod plateau ends by ~800)"
    reduction: str = "none"  # what this size of run leaves out of the paper's
    dtype: str = "float32"
    regime: str = PRIMARY.name
    regime_label: str = PRIMARY.label

    @property
    def diagnostic(self) -> bool:
        """Whether this size runs the GELU diagnostic (every size but quick, whose reduction
        says it leaves it out)."""
        return self.reduction != QUICK_REDUCTION


CONFIGS = {
    Size.TINY: Config(
        d=16,
        seeds=(0, 1),
        epochs=TINY_EPOCHS,
        snapshots=tuple(range(0, TINY_EPOCHS + 1, 50)),
        seed_epoch=TINY_EPOCHS,
        reduction=f"tiny: 2 seeds, d = 16, {TINY_EPOCHS} epochs (seed study at {TINY_EPOCHS})",
    ),
    Size.QUICK: Config(seeds=(0, 1, 2), reduction=QUICK_REDUCTION),
    Size.CPU: Config(),
    Size.FULL: Config(epochs=1200, snapshots=(0, 10, 25, 50, 75, *range(100, 1201, 100))),
}


def settle(config: Config, regime: Regime | None) -> Config:
    """``config`` in ``regime`` (the primary one when None): its name and label."""
    regime = regime or PRIMARY
    return dataclasses.replace(config, regime=regime.name, regime_label=regime.label)


regime_text = config_regime

# ------------------------------------------------------------------------------------------------


class Peaks(NamedTuple):
    """What one seed's spectrum ``rho_(1),k`` says: ``k_star``, the best frequency from
    `K_SEARCH_MIN` on, its ``rho_k_star``, ``rho_k20`` at k = 20, and ``argmax_all_k``, the best
    over every k (k = 0 included)."""

    k_star: int
    rho_k_star: float
    rho_k20: float
    argmax_all_k: int


def frequency_peaks(rho_vs_k) -> Peaks:
    """The `Peaks` of one seed's spectrum ``rho_(1),k`` over k = 0..K-1 (``[K]``)."""
    rho_vs_k = np.asarray(rho_vs_k)
    k_star = K_SEARCH_MIN + int(np.argmax(rho_vs_k[K_SEARCH_MIN:]))
    return Peaks(k_star, float(rho_vs_k[k_star]), float(rho_vs_k[20]), int(np.argmax(rho_vs_k)))


@dataclasses.dataclass(frozen=True)
class Row:
    """One seed at one snapshot: its `Peaks`, the ring fractions of its embedding PCA along k*
    and along its overall argmax, the Procrustes similarity of that PCA to each seed's k*
    component (keyed ``str(k)``), and its spectrum."""

    seed: int
    k_star: int
    rho_k_star: float
    rho_k20: float
    argmax_all_k: int
    ring_fraction: float
    ring_fraction_argmax_all_k: float
    pca_match: dict[str, float]
    rho_vs_k: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Init(Row):
    """A seed at initialization (the null), with its overall argmax there."""

    early_argmax_k: int


@dataclasses.dataclass(frozen=True)
class Seed(Row):
    """A trained seed at the seed epoch: its run status and accuracy there, the accuracy on the
    snapshots every 100 epochs (as `common.failure_class` reads it), and its spectrum at
    `EARLY` (argmax, maximum, values)."""

    status: str
    accuracy: float
    accuracy_curve: tuple[float, ...]
    early_argmax_k: int
    early_max_rho: float
    early_rho: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Run:
    """One task and activation: the snapshot epochs, the k scored 1 - MSE, seed 0's spectra
    ``[S, K]``, the trained seeds and the same seeds at init, and, for the GELU diagnostic under
    GD, the `EndState` of seed 0."""

    epochs: np.ndarray
    constant_ks: tuple[int, ...]
    rho_seed0: np.ndarray
    seeds: tuple[Seed, ...]
    init: tuple[Init, ...]
    end: EndState | None = dataclasses.field(default=None, metadata={"saved": IF_SET})

    @property
    def constant(self) -> np.ndarray:
        """``[K]``: the entries scored 1 - MSE."""
        return np.isin(KS, self.constant_ks)


class Panels(NamedTuple):
    """What the figures draw of one run: the numbers' ids, the snapshot epochs, seed 0's spectra
    ``[S, K]``, the constant entries ``[K]``, seed 0's embeddings at `EARLY` and the seed epoch,
    the components ``h_{alpha,k}`` ``[K, A, V]`` and their PCAs, each seed's embedding PCA."""

    alphas: np.ndarray
    epochs: np.ndarray
    rho0: np.ndarray
    constant: np.ndarray
    W_seed0: dict
    h: np.ndarray
    h_pca: dict
    scores: list


@dataclasses.dataclass(frozen=True)
class Record:
    """The runs: add and mod with the primary activation and, where the size runs it, the GELU
    diagnostic on mod; unsaved, what the figures draw of each."""

    add: Run = dataclasses.field(metadata={"key": "add/relu"})
    mod: Run = dataclasses.field(metadata={"key": "mod/relu"})
    diagnostic: Run | None = dataclasses.field(
        default=None, metadata={"key": "mod/gelu", "saved": IF_SET}
    )
    panels: tuple[Panels, ...] = dataclasses.field(
        default=(), compare=False, metadata={"saved": False}
    )


def _rows(W, rho, h_pca, alphas, N, seed_ids) -> list[tuple[dict, np.ndarray]]:
    """Per seed at one snapshot: the `Row` fields and the embedding PCA scores (``W``
    ``[G, A, d]``, ``rho`` ``[G, K]``)."""
    peaks = [frequency_peaks(r) for r in rho]
    k_stars = {p.k_star for p in peaks}
    rows = []
    for g in range(W.shape[0]):
        scores = np.asarray(metrics.pca(W[g], k=2).scores)
        fields = dict(
            seed=int(seed_ids[g]),
            **peaks[g]._asdict(),
            ring_fraction=metrics.ring_order_fraction(scores, alphas, peaks[g].k_star, N),
            ring_fraction_argmax_all_k=metrics.ring_order_fraction(
                scores, alphas, int(np.argmax(rho[g])), N
            ),
            pca_match={
                str(k): metrics.procrustes_similarity(scores, np.asarray(h_pca[int(k)].scores))
                for k in k_stars
            },
            rho_vs_k=tuple(rho[g].tolist()),
        )
        rows.append((fields, scores))
    return rows


def _train(ds, config: Config, regime: Regime, activation: str) -> sweep.SweepResult:
    train_config = regime.train_config(
        ds, epochs=config.epochs, snapshots=list(config.snapshots), adam_lr=config.adam_lr
    )
    return sweep.train_sweep(
        config.model,
        ds,
        train_config,
        gammas=[config.gamma],
        seeds=list(config.seeds),
        d=config.d,
        activation=activation,
    )


def _end(ds, config: Config, regime: Regime, activation: str) -> EndState:
    """`common.end_of_run` of seed 0's run (GD): where its FAILs about the end are classed
    when it has settled."""
    train_config = regime.train_config(
        ds, epochs=config.epochs, snapshots=list(config.snapshots), adam_lr=config.adam_lr
    )
    init = dict(gamma=config.gamma, seed=config.seeds[0], d=config.d, activation=activation)
    return end_of_run(config.model, ds, train_config, regime, **init)


def _spectra(ds, alphas, W):
    """The entries scored 1 - MSE ``[K]``, the spectra ``rho_(1),k`` ``[G, S, K]`` of the
    embeddings ``W`` ``[G, S, A, d]``, and the components ``h_{alpha,k}`` ``[K, A, V]``."""
    phi1 = signatures.label_signature(
        ds, 1, alphas=alphas, labels=np.unique(ds.labels), context=alphas
    )
    S_emb = np.asarray(metrics.cosine_matrix(W))
    rho = np.asarray(metrics.frequency_alignment(phi1, S_emb, KS))
    return metrics.constant_frequencies(phi1, KS), rho, signatures.fourier_projection(phi1, KS)


def _measure_run(task: str, activation: str, config: Config, regime: Regime):
    """One task trained with ``activation`` (a lane per seed) and measured: its `Run` and
    `Panels`."""
    ds = regime.make(task, N=config.N)
    result = _train(ds, config, regime, activation)
    alphas, N = ds.groups["numbers"], config.N
    traj = result.trajectory
    epochs = regime.epochs_of(traj.steps[0])
    W = np.asarray(traj.W_E)[:, :, alphas]  # [G, S, A, d]
    constant, rho, h = _spectra(ds, alphas, W)
    i_init = int(np.flatnonzero(epochs == 0)[0])
    i_early = int(np.flatnonzero(epochs == EARLY)[0])
    i_late = int(np.flatnonzero(epochs == config.seed_epoch)[0])
    k_stars = {
        int(k)
        for i in (i_init, i_late)
        for k in K_SEARCH_MIN + np.argmax(rho[:, i, K_SEARCH_MIN:], axis=1)
    }
    h_pca = {k: metrics.pca(h[k], k=2) for k in k_stars | {0, 20}}
    late = _rows(W[:, i_late], rho[:, i_late], h_pca, alphas, N, result.seed)
    at_init = _rows(W[:, i_init], rho[:, i_init], h_pca, alphas, N, result.seed)
    even = np.flatnonzero((epochs % 100 == 0) & (epochs <= epochs[i_late]))
    seeds = tuple(
        Seed(
            **fields,
            status=str(result.status[g]),
            accuracy=float(traj.accuracy[g, i_late]),
            accuracy_curve=tuple(np.asarray(traj.accuracy[g, even]).round(4).tolist()),
            early_argmax_k=int(np.argmax(rho[g, i_early])),
            early_max_rho=float(rho[g, i_early].max()),
            early_rho=tuple(rho[g, i_early].tolist()),
        )
        for g, (fields, _) in enumerate(late)
    )
    init = tuple(
        Init(**fields, early_argmax_k=int(np.argmax(rho[g, i_init])))
        for g, (fields, _) in enumerate(at_init)
    )
    diagnosed = activation == config.diagnostic_activation and regime.optimizer == "gd"
    run = Run(
        epochs=epochs,
        constant_ks=tuple(KS[constant].tolist()),
        rho_seed0=rho[0],
        seeds=seeds,
        init=init,
        end=_end(ds, config, regime, activation) if diagnosed else None,
    )
    panels = Panels(
        alphas,
        epochs,
        rho[0],
        constant,
        {EARLY: W[0, i_early], config.seed_epoch: W[0, i_late]},
        h,
        h_pca,
        [scores for _, scores in late],
    )
    return run, panels


def measure(config: Config, regime: Regime | None) -> Record:
    """Train add and mod with the primary activation and, where the size runs it, mod with the
    diagnostic one, and measure the module docstring's numbers."""
    regime = regime or PRIMARY
    runs = [("add", config.activation), ("mod", config.activation)]
    if config.diagnostic:
        runs.append(("mod", config.diagnostic_activation))
    measured = [_measure_run(task, activation, config, regime) for task, activation in runs]
    return Record(
        *(run for run, _ in measured),
        panels=tuple(panels for _, panels in measured),
    )


def figures(config: Config, record: Record) -> dict:
    """``heatmaps``, ``pca``, ``seeds`` and ``seed_pca`` (the primary regime, with the
    diagnostic run only)."""
    if config.regime != PRIMARY.name or record.diagnostic is None:
        return {}
    shown = list(zip((record.add, record.mod, record.diagnostic), record.panels, strict=True))
    return {
        "heatmaps": _heatmap_figure(shown, config),
        "pca": _pca_figure(shown, config),
        "seeds": _seed_curves_figure(shown, config),
        "seed_pca": _seed_pca_figure(shown[1:], config),
    }


# ------------------------------------------------------------------------------------------------
# claims: each a function of the record and its config


def _early_argmax(run: Run) -> int:
    return int(np.argmax(run.seeds[0].early_rho))


def _early_note(run: Run, task: str) -> str:
    """§8.6's note on seed 0 (`staircase_claims.low_frequency_note`)."""
    return scoring.low_frequency_note(run.seeds[0].early_rho, run.constant, task, EARLY)


def _early_claim(which, task: str, tag: str, item: str, kind: Kind) -> ClaimSpec:
    """§8.6 on seed 0 of the run ``which(record)``: the early argmax is a low frequency."""

    def measured(r: Record, c: Config) -> str:
        run = which(r)
        k = _early_argmax(run)
        value = scoring.k_value_text(k, float(run.seeds[0].early_rho[k]), run.constant)
        argmaxes = [s.early_argmax_k for s in run.seeds]
        return f"epoch {EARLY}: argmax_k = {value}, seed 0; all seeds {argmaxes}"

    def null_text(r: Record, c: Config) -> str:
        run = which(r)
        k = int(np.argmax(run.init[0].rho_vs_k))
        return f"init: argmax_k = {scoring.k_text(k, run.constant)} (seed 0)"

    return ClaimSpec(
        item=item,
        claim=f"{task}{tag}: low frequencies dominate early",
        statistic=lambda r, c: _early_argmax(which(r)),
        measured=measured,
        criterion=Criterion(
            scoring.low_frequency_criterion(EARLY), lambda k: k <= scoring.EARLY_K_MAX
        ),
        null=lambda r, c: int(np.argmax(which(r).init[0].rho_vs_k)),
        null_text=null_text,
        kind=kind,
        note=lambda r, c: _early_note(which(r), task),
    )


def _ring(rows, N: int) -> tuple[list, bool]:
    """The rows eligible for the ring test, and whether it passes on them (theory/experiments.md,
    fig4_frequency)."""
    eligible = [s for s in rows if math.gcd(s.k_star, N) == 1 and s.rho_k_star >= RING_RHO_MIN]
    return eligible, bool(eligible) and all(s.ring_fraction >= RING_MIN for s in eligible)


def _own_match(rows) -> list[tuple]:
    """``(seed, own, best other, own > best other)`` for every testable row."""
    distinct = sorted({s.k_star for s in rows})
    testable = []
    for s in rows:
        others = [k for k in distinct if k != s.k_star]
        if others and s.rho_k_star >= RING_RHO_MIN:
            own = s.pca_match[str(s.k_star)]
            best_other = max(s.pca_match[str(k)] for k in others)
            testable.append((s.seed, own, best_other, own > best_other))
    return testable


def _own_match_share(rows) -> bool | None:
    """The own-k* criterion: at least `OWN_MATCH_MIN` of the testable rows match their own k*
    best; ``None`` (not testable) when no row is."""
    testable = _own_match(rows)
    if not testable:
        return None
    return float(np.mean([t[3] for t in testable])) >= OWN_MATCH_MIN


def _accuracies(seeds) -> str:
    return ", ".join(f"{s.accuracy:.2f}" for s in seeds)


def _seed_dependence_claim(which, tag: str, item: str, kind: Kind) -> ClaimSpec:
    def note(r: Record, c: Config) -> str:
        run, epoch = which(r), c.seed_epoch
        distinct = sorted({s.k_star for s in run.seeds})
        text = (
            "a random geometry has a random argmax, so seed dependence alone says nothing: the "
            f"init null gives {len({s.k_star for s in run.init})} distinct k*; the own-k* match "
            "below carries App. D"
        )
        if len(distinct) < 2:
            text += (
                f". All seeds share k* = {distinct[0]}; argmax over all k at epoch {epoch}: "
                + ", ".join(
                    f"s{s.seed} {scoring.k_text(s.argmax_all_k, run.constant)}" for s in run.seeds
                )
                + f"; accuracy at epoch {epoch}: "
                + _accuracies(run.seeds)
            )
        return text

    def measured(r: Record, c: Config) -> str:
        seeds = which(r).seeds
        return (
            "k* = "
            + ", ".join(f"{s.k_star} ({s.rho_k_star:.2f})" for s in seeds)
            + f"; {len({s.k_star for s in seeds})} distinct"
        )

    return ClaimSpec(
        item=item,
        claim=f"mod{tag}: k* depends on the seed",
        statistic=lambda r, c: which(r).seeds,
        measured=measured,
        criterion=Criterion(
            lambda r, c: (
                f"≥ 2 distinct k* = argmax_{{k>10}} rho over {len(which(r).seeds)} "
                f"seeds at epoch {c.seed_epoch} [R: 'depends on the seed' read as not every seed "
                "having the same k*]"
            ),
            lambda rows: len({s.k_star for s in rows}) >= 2,
        ),
        null=lambda r, c: which(r).init,
        null_text=lambda r, c: "init: k* = " + ", ".join(str(s.k_star) for s in which(r).init),
        kind=kind,
        note=note,
    )


def _ring_measured(run: Run, N: int) -> str:
    eligible, _ = _ring(run.seeds, N)
    fractions = ", ".join(
        f"seed {s.seed}: k*={s.k_star}, step {pow(s.k_star, -1, N)}, {s.ring_fraction:.2f}"
        for s in eligible
    )
    rings_any_k = [
        f"s{s.seed} k={s.argmax_all_k}: {s.ring_fraction_argmax_all_k:.2f}"
        for s in run.seeds
        if math.gcd(s.argmax_all_k, N) == 1 and s not in eligible
    ]
    if rings_any_k:
        fractions = (fractions + "; " if fractions else "") + (
            "info, other seeds at their argmax over all k (coprime only): " + ", ".join(rings_any_k)
        )
    return fractions or "no eligible seed (none has gcd(k*, N) = 1 with rho_k* ≥ 0.5)"


def _ring_note(run: Run, N: int, epoch: int) -> str:
    eligible, ring = _ring(run.seeds, N)
    curvature = " " + curvature_text(run.end) if not ring and run.end is not None else ""
    return ("" if eligible else _no_ring_note(run.seeds, N, epoch)) + curvature


def _ring_null_text(run: Run, N: int) -> str:
    init_eligible, _ = _ring(run.init, N)
    if init_eligible:
        return "init: " + ", ".join(f"s{s.seed} {s.ring_fraction:.2f}" for s in init_eligible)
    return f"init: no eligible seed (max rho_k* {max(s.rho_k_star for s in run.init):.2f})"


def _ring_claim(which, tag: str, item: str) -> ClaimSpec:
    return ClaimSpec(
        item=item,
        claim=f"mod{tag}: the PCA ring follows steps of k*^-1 mod N",
        statistic=lambda r, c: (which(r).seeds, c.N),
        measured=lambda r, c: _ring_measured(which(r), c.N),
        criterion=Criterion(
            f"ring fraction ≥ {RING_MIN} for every seed with gcd(k*,N)=1 and rho_k* ≥ "
            f"{RING_RHO_MIN}, at least one such seed [R: 'follows' read as {RING_MIN:.0%} of "
            f"adjacent pairs (chance 2/(N−1)); rho_k* ≥ {RING_RHO_MIN} is §8.6's 'high']",
            lambda rows_N: _ring(*rows_N)[1],
        ),
        null=lambda r, c: (which(r).init, c.N),
        null_text=lambda r, c: _ring_null_text(which(r), c.N),
        kind=Kind.PROJECT,
        note=lambda r, c: _ring_note(which(r), c.N, c.seed_epoch),
        failure=lambda r, c: _settled_failure(which(r)),
    )


def _settled_failure(run: Run) -> str:
    """A late FAIL's class: budget while seed 0 is still learning (`common.failure_class`);
    settled, by the curvature where it ends (`common.plateau_failure`, GD), else unclassified."""
    learning = failure_class(run.seeds[0].accuracy_curve)
    if learning == "unclassified" and run.end is not None:
        return plateau_failure(run.end)
    return learning


def _no_ring_note(seeds, N: int, epoch: int) -> str:
    """Why no seed is eligible for the ring test: their k* and accuracies."""
    twenty = sum(s.k_star == 20 for s in seeds)
    coprime = [s for s in seeds if math.gcd(s.k_star, N) == 1]
    return (
        f"no eligible seed: k* = 20 (not a unit mod {N}: a parity split, not a ring) in "
        f"{twenty}/{len(seeds)} seeds; coprime k* "
        + (
            ", ".join(f"s{s.seed} {s.k_star} (rho {s.rho_k_star:.2f})" for s in coprime)
            if coprime
            else "none"
        )
        + f"; train accuracy at epoch {epoch}: "
        + _accuracies(seeds)
    )


def _own_match_measured(run: Run) -> str:
    seeds, testable = run.seeds, _own_match(run.seeds)
    if testable:
        weak = [s.seed for s in seeds if s.rho_k_star < RING_RHO_MIN]
        return (
            f"{sum(t[3] for t in testable)}/{len(testable)} seeds; Procrustes similarity "
            "own vs best other: "
            + ", ".join(f"s{t[0]} {t[1]:.3f}/{t[2]:.3f}" for t in testable)
            + (f"; weak-k* seeds not tested: {weak}" if weak else "")
        )
    distinct = sorted({s.k_star for s in seeds})
    if len(distinct) == 1:
        return f"all seeds share k* = {distinct[0]}"
    return f"no seed with rho_k* ≥ {RING_RHO_MIN} has a rival k*"


def _own_match_note(run: Run) -> str:
    testable = _own_match(run.seeds)
    if not testable:
        return "not testable"
    tested = [t[0] for t in testable]
    tested_k = sorted({s.k_star for s in run.seeds if s.seed in tested})
    if len(tested_k) != 1:
        return ""
    return (
        f"every testable seed has k* = {tested_k[0]}: the test shows that their geometry "
        f"matches k = {tested_k[0]} rather than the weak rival k* of the other seeds"
    )


def _own_match_null_text(run: Run) -> str:
    init_testable = _own_match(run.init)
    if init_testable:
        return f"init: {sum(t[3] for t in init_testable)}/{len(init_testable)} seeds"
    return (
        "init: no testable seed (max rho_k* "
        + f"{max(s.rho_k_star for s in run.init):.2f} < {RING_RHO_MIN})"
    )


def _own_match_claim(which, tag: str) -> ClaimSpec:
    return ClaimSpec(
        item="App. D" + (" diag." if tag else ""),
        claim=f"mod{tag}: each seed's PCA matches its own k* component best",
        statistic=lambda r, c: which(r).seeds,
        measured=lambda r, c: _own_match_measured(which(r)),
        criterion=Criterion(
            f"own k* beats every other seed's k* for ≥ {OWN_MATCH_MIN:.0%} of the seeds with "
            f"rho_k* ≥ {RING_RHO_MIN} [R: 'each seed' relaxed to 4 in 5; rho_k* as for the ring]",
            _own_match_share,
        ),
        null=lambda r, c: which(r).init,
        null_text=lambda r, c: _own_match_null_text(which(r)),
        kind=Kind.PROJECT,
        note=lambda r, c: _own_match_note(which(r)),
    )


def _k_star_claims(which, tag: str, item: str, kind: Kind) -> tuple[ClaimSpec, ...]:
    """App. D's three claims on one mod run ``which(record)`` (``tag``: the diagnostic's, or
    empty)."""
    return (
        _seed_dependence_claim(which, tag, item, kind),
        _ring_claim(which, tag, item),
        _own_match_claim(which, tag),
    )


def _late_add_measured(r: Record, c: Config) -> str:
    seeds, late = r.add.seeds, c.seed_epoch
    rho20 = [s.rho_k20 for s in seeds]
    return (
        f"rho_(1),20({late}) = {seeds[0].rho_k20:.3f} (seed 0); seeds median "
        f"{np.median(rho20):.3f}, max {max(rho20):.3f}"
        f"; argmax_k at {late}: {sorted({s.argmax_all_k for s in seeds})}"
    )


def _late_add_note(r: Record, c: Config) -> str:
    seeds, late = r.add.seeds, c.seed_epoch
    if seeds[0].rho_k20 >= LATE_ADD_MIN:
        return ""
    return (
        f"k = 0 still dominates at epoch {late} (rho_0 {seeds[0].rho_vs_k[0]:.2f}, rho_1 "
        f"{seeds[0].rho_vs_k[1]:.2f}); train accuracy at {late} " + _accuracies(seeds) + " (seeds)"
    )


def _add(r: Record) -> Run:
    return r.add


def _mod(r: Record) -> Run:
    return r.mod


def _diagnostic(r: Record) -> Run:
    return r.diagnostic


DIAGNOSTIC_TAG, DIAGNOSTIC_ITEM = " (diagnostic: GELU)", "§8.6 diag."


def _claims(config: Config) -> tuple[ClaimSpec, ...]:
    """The §8.6 and App. D claims, each with its null scored by the same criterion; the GELU
    diagnostic's where the size runs it."""
    claims = (
        _early_claim(_add, "add", "", "§8.6", Kind.PAPER),
        _early_claim(_mod, "mod", "", "§8.6", Kind.PAPER),
        ClaimSpec(
            item="§8.6",
            claim="add: a high rho at k = 20 = p/2 late (odd/even split)",
            statistic=lambda r, c: r.add.seeds[0].rho_k20,
            measured=_late_add_measured,
            criterion=Criterion(
                lambda r, c: (
                    f"rho_(1),20 ≥ {LATE_ADD_MIN} at epoch {c.seed_epoch} [R: 'high' "
                    "read as the upper half of [0, 1], as for mul in §8.3]"
                ),
                lambda rho: rho >= LATE_ADD_MIN,
            ),
            null=lambda r, c: r.add.init[0].rho_k20,
            null_text=lambda r, c: f"init: rho_(1),20 = {r.add.init[0].rho_k20:.3f} (seed 0)",
            note=_late_add_note,
            failure=lambda r, c: failure_class(r.add.seeds[0].accuracy_curve),
        ),
        *_k_star_claims(_mod, "", "§8.6", Kind.PAPER),
    )
    if not config.diagnostic:
        return claims
    return (
        *claims,
        _early_claim(_diagnostic, "mod", DIAGNOSTIC_TAG, DIAGNOSTIC_ITEM, Kind.PROJECT),
        *_k_star_claims(_diagnostic, DIAGNOSTIC_TAG, DIAGNOSTIC_ITEM, Kind.PROJECT),
    )


CLAIMS = _claims

SPEC = Spec.declared(globals())


# ------------------------------------------------------------------------------------------------
# figures


def _titles(primary: str = "") -> tuple[str, ...]:
    """The titles of the three runs a figure shows side by side: add and mod with the primary
    activation (ending in ``primary``), mod with the diagnostic one."""
    return (f"add, ReLU{primary}", f"mod, ReLU{primary}", "mod, GELU (diagnostic)")


def _heatmap_figure(shown: list, config: Config):
    fig, axes = plots.figure(
        1,
        3,
        panel=(5.0, 4.2),
        suptitle=(
            f"Fig. 4A,B: frequency-resolved alignment (N = p = {config.N}); {config.regime_label}; "
            "k=0 of mod is 1−MSE ($S^{sig,(1)}_0$ constant)"
        ),
    )
    for ax, (_, d), title in zip(axes, shown, _titles(" (primary)"), strict=True):
        image = ax.imshow(
            d.rho0.T,
            origin="lower",
            aspect="auto",
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            interpolation="nearest",
        )
        ax.grid(False)
        ticks = np.arange(len(d.epochs))
        ax.set_xticks(ticks[::2], [str(s) for s in d.epochs[::2]], rotation=45)
        ax.set_yticks(KS[::2], [scoring.k_text(int(k), d.constant) for k in KS[::2]])
        plots.axis_labels(
            ax,
            "epoch (snapshot)",
            "frequency $k$",
            f"$\\rho_{{(1),k}}(t)$: {title}, seed 0",
        )
    plots.colorbar(fig, image, axes, label="Pearson (1−MSE where marked)", shrink=0.85)
    return fig


def _ring_order(k: int, N: int) -> np.ndarray | None:
    """Token indices in the predicted ring order a -> a + k^{-1} mod N (None if no inverse)."""
    if math.gcd(int(k), N) != 1:
        return None
    order = (np.arange(N) * pow(int(k), -1, N)) % N
    return np.append(order, order[0])


def _pca_panel(ax, pca, alphas, title, *, path=None, degenerate=False):
    """Tokens in the PC1-PC2 plane, coloured and labelled by id; grey line along ``path``."""
    ax.set_title(title)
    if degenerate:
        ax.text(
            0.5,
            0.5,
            "all vectors identical\n(zero variance)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        plots.axis_labels(ax, "PC1", "PC2")
        return
    plots.pca_scatter(
        ax,
        np.asarray(pca.scores),
        np.asarray(alphas),
        np.asarray(pca.explained_variance_ratio),
        title,
        path=[] if path is None else path,
    )


def _pca_figure(shown: list, config: Config):
    rows = (("add", "add ReLU", 20), ("mod", "mod ReLU", None), ("mod", "mod GELU (diag.)", None))
    fig, axes = plots.figure(
        3,
        4,
        panel=(4.0, 3.4),
        suptitle=(
            "Fig. 4C,D: embeddings (seed 0) vs signature components; k=20 for add, the run's own "
            "$k^* = \\mathrm{argmax}_{k>10}$ for mod (grey: token order for add, the ring "
            f"$a \\to a+k^{{-1}}$ mod N for mod when gcd(k, N) = 1); {config.regime_label}"
        ),
    )
    late_epoch, N = config.seed_epoch, config.N
    for row, ((run, d), (task, name, k_late)) in enumerate(zip(shown, rows, strict=True)):
        alphas = d.alphas
        k_late = run.seeds[0].k_star if k_late is None else k_late
        # add: lines in token order; mod: along the predicted k* ring when it exists
        path = np.arange(N) if task == "add" else _ring_order(k_late, N)
        for col, epoch in enumerate((EARLY, late_epoch)):
            _pca_panel(
                axes[row, col],
                metrics.pca(d.W_seed0[epoch], k=2),
                alphas,
                f"{name}: PCA of $w^E$, epoch {epoch}",
                path=path,
            )
        for col, k in ((2, 0), (3, k_late)):
            h = d.h[k]
            degenerate = bool(np.ptp(h, axis=0).max() <= 1e-9 * np.abs(h).max())
            rho = run.seeds[0].rho_vs_k[k]
            _pca_panel(
                axes[row, col],
                d.h_pca[k],
                alphas,
                f"{name}: PCA of $h_{{\\alpha,{k}}}$ ($\\rho$"
                f"{'=1−MSE' if d.constant[k] else ''}={rho:.2f} at {late_epoch})",
                path=np.arange(N) if (task == "add" and k == 0) else _ring_order(k, N),
                degenerate=degenerate,
            )
    return fig


def _seed_curves_figure(shown: list, config: Config):
    fig, axes = plots.figure(
        1,
        3,
        panel=(5.0, 4.0),
        sharey=True,
        suptitle=(
            "App. D: correlation vs k per seed; $k^*$ searched over k > 10 (right of the dotted "
            "line); " + config.regime_label
        ),
    )
    for ax, (run, d), title in zip(axes, shown, _titles(), strict=True):
        for i, s in enumerate(run.seeds):
            colour = f"C{i % 10}"
            ax.plot(KS, s.rho_vs_k, color=colour, lw=1, label=f"seed {s.seed}: k*={s.k_star}")
            ax.plot(s.k_star, s.rho_k_star, "o", color=colour, ms=5)
            if d.constant[0]:
                ax.plot(0, s.rho_vs_k[0], "s", mfc="none", color=colour, ms=6)
        plots.reference(ax, x=10.5)
        plots.integer_axis(ax, "x")
        plots.axis_labels(
            ax,
            "frequency $k$" + (" ($k$=0 squares: 1−MSE)" if d.constant[0] else ""),
            "$\\rho_{(1),k}$ (corr.)",
            f"{title}: epoch {config.seed_epoch}, {len(run.seeds)} seeds (dots: $k^*$)",
        )
        plots.legend(ax, ncol=2)
    return fig


def _seed_pca_figure(shown: list, config: Config):
    n, N = len(config.seeds), config.N
    fig, axes = plots.grid(
        4,
        n,
        panel=(2.6, 2.3),
        suptitle=(
            f"App. D, mod: PCA of each seed's embeddings (epoch {config.seed_epoch}) above its "
            "own $k^*$ component;\ngrey lines: predicted ring $a \\to a + k^{*-1}$ mod N (when "
            "gcd($k^*$, N) = 1); colour = token; " + config.regime_label
        ),
    )
    for block, ((run, d), name) in enumerate(zip(shown, ("ReLU", "GELU"), strict=True)):
        alphas = d.alphas
        for g, s in enumerate(run.seeds):
            k = s.k_star
            sets = (
                (d.scores[g], f"{name} s{s.seed}: $w^E$"),
                (
                    np.asarray(d.h_pca[k].scores),
                    f"$h_{{\\alpha,{k}}}$ $\\rho$={s.rho_k_star:.2f}",
                ),
            )
            for r, (scores, title) in enumerate(sets):
                ax = axes[2 * block + r, g]
                ring = _ring_order(k, N)
                if ring is not None:  # the predicted ring a -> a + k^{-1}
                    ax.plot(scores[ring, 0], scores[ring, 1], color="0.75", lw=0.6, zorder=1)
                ax.scatter(scores[:, 0], scores[:, 1], c=alphas, cmap="viridis", s=8, zorder=2)
                ax.set_xticks([])
                ax.set_yticks([])
                plots.axis_labels(ax, "PC1", "PC2", title)
    return fig
