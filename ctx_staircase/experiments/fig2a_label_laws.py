"""Fig. 2A: the anchor embedding of Task 1 encodes its prescribed label law (paper Fig. 2A).

Reproduces claim §8.4 on Task 1 (paper App. A): inputs ``(a, x1, x2)``, anchor a = 100,
``x_i in {0..50}``, all 2601 pairs, one label per input drawn once from ``p_a`` for the laws
uniform, normal(25, 1), Poisson(10) and exponential(rate 5).

Runs a ReLU FFN (paper §4.1), d = 128, gamma = 1.0, seed 0 (``full``: seeds 0, 1, 2), float32,
200 epochs, in a `regime.Regime` (primary: full-batch GD at lr 1, ``V = 2 V_min = 202``).
``quick``: laws uniform and normal only; ``tiny``: those at d = 32, the 200 epochs kept.

Measures, after 200 epochs, the model's prediction for the anchor alone,
``p̂_a = softmax(W^U σ(w^E_a))`` over X, against ``p_a`` (``metrics.distribution_match``:
Pearson r, KL, JSD); the paper's literal ``softmax(W^U w^E_a)`` is reported too. Claims: per
law, Pearson >= 0.9 and JSD <= 0.05 ([R], kind "paper"), and for the uniform law the readout's
Pearson with the empirical ``phi^{y;0}_a`` (kind "project"); null: the untrained
initialization, which makes the uniform law's JSD claim vacuous. Writes the figure ``panels``.

The readout [GAP], the uniform law's criteria and the sizes: theory/experiments.md,
fig2a_label_laws.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ctx_staircase import metrics, plots, records, signatures, tasks
from ctx_staircase.experiments import Kind
from ctx_staircase.experiments.common import train_in_regime
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec, config_regime
from ctx_staircase.experiments.regime import PRIMARY, Regime

UNIFORM = "uniform"  # constant p_a: its Pearson is undefined, and the init already matches it
LAWS = (UNIFORM, "normal", "poisson", "exponential")
QUICK_LAWS = (UNIFORM, "normal")  # the vacuous suspect and one informative law
PEARSON_MIN = 0.9  # claim §8.4 [R]
JSD_MAX = 0.05  # claim §8.4 [R]
EPOCHS = 200
TINY_D = 32


@dataclasses.dataclass(frozen=True)
class Config:
    """What a run of this experiment is: Task 1's laws, anchor and labels, the paper's FFN
    (d = 128, ReLU, gamma = 1) and its seeds and epochs, the readout and null, what the size
    leaves out of the paper's, and the regime's name and label (`settle`)."""

    task: str = "label_law"
    laws: tuple[str, ...] = LAWS
    anchor: int = 100
    x_max: int = 50
    labels: str = "sampled"
    label_seed: int = 0
    model: str = "ffn"
    d: int = 128
    activation: str = "relu"
    adam_lr: float = 1e-3
    gamma: float = 1.0
    seeds: tuple[int, ...] = (0,)
    epochs: int = EPOCHS
    dtype: str = "float32"
    readout: str = "softmax over X of W_U relu(w_a) (anchor alone through the FFN)"
    null: str = "the untrained initialization (epoch 0), same readout and criterion"
    reduction: str = "none"  # what this size of run leaves out of the paper's
    regime: str = PRIMARY.name
    regime_label: str = PRIMARY.label


CONFIGS = {
    Size.TINY: Config(
        laws=QUICK_LAWS, d=TINY_D, reduction=f"tiny: laws uniform and normal only, d = {TINY_D}"
    ),
    Size.QUICK: Config(laws=QUICK_LAWS, reduction="quick: laws uniform and normal only"),
    Size.CPU: Config(),
    Size.FULL: Config(seeds=(0, 1, 2)),
}


def settle(config: Config, regime: Regime | None) -> Config:
    """``config`` in ``regime`` (the primary one when None): its name and label."""
    regime = regime or PRIMARY
    return dataclasses.replace(config, regime=regime.name, regime_label=regime.label)


# --------------------------------------------------------------------------------------------
# the readouts and what is measured of them


class Readouts(NamedTuple):
    """The anchor's predicted law over X, each ``[K]``: through the FFN, literal (no ReLU), and
    through the FFN at temperature 1/L."""

    ffn: np.ndarray
    literal: np.ndarray
    ffn_times_L: np.ndarray


class Match(NamedTuple):
    """How well a predicted law matches a target one (`metrics.distribution_match`)."""

    pearson: float
    kl: float
    jsd: float


class Targets(NamedTuple):
    """What one law's readouts are compared with: the prescribed ``p_a`` and the empirical
    ``phi^{y;0}_a`` of the sampled labels (both ``[K]``, over the numbers ``X [K]``), the anchor
    token, and the sequence length ``L``."""

    p: np.ndarray
    phi0: np.ndarray
    anchor: int
    X: np.ndarray
    L: int


class Curve(NamedTuple):
    """What the figure draws of one law: ``p_a`` and the seed-0 readout through the FFN, trained
    and at init, each ``[K]``."""

    p: np.ndarray
    trained: np.ndarray
    init: np.ndarray


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The readouts of one snapshot of one seed against ``p_a`` (the FFN readout also against
    the empirical ``phi^{y;0}_a``), and the embedding norms of the anchor and of the numbers
    (mean)."""

    ffn: Match
    ffn_vs_empirical_signature: Match
    literal: Match
    ffn_times_L: Match
    anchor_norm: float
    number_norm_mean: float


@dataclasses.dataclass(frozen=True)
class Lane:
    """How one seed's training ended: its seed, final loss and run status."""

    seed: int
    final_loss: float
    status: str


@dataclasses.dataclass(frozen=True)
class Run(Snapshot, Lane):
    """One seed: how it ended (`Lane`), its trained `Snapshot` (epoch `EPOCHS`) and its
    untrained one (epoch 0, the null)."""

    init: Snapshot


@dataclasses.dataclass(frozen=True)
class LawRun:
    """One label law: the data set's vocabulary size, how far the empirical ``phi^{y;0}_a`` is
    from ``p_a``, every seed's `Run`, and, unsaved, what the figure draws."""

    vocab_size: int
    empirical_signature_vs_p: Match
    runs: tuple[Run, ...]
    curve: Curve | None = dataclasses.field(default=None, compare=False, metadata={"saved": False})


@dataclasses.dataclass(frozen=True)
class Record:
    """What a run measured: each law of the config's `LawRun`, in its order."""

    laws: dict[str, LawRun]


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def _match(p, q) -> Match:
    m = metrics.distribution_match(p, q)
    return Match(float(m.pearson), float(m.kl), float(m.jsd))


def readouts(W_E: np.ndarray, W_U: np.ndarray, anchor: int, X: np.ndarray, L: int) -> Readouts:
    """The anchor's predicted law over X (``W_E [V, d]``, ``W_U [V, d]``, ``X [K]`` -> ``[K]``
    each): through the FFN ``softmax(W_U[X] relu(w_a))``, literal ``softmax(W_U[X] w_a)``, and
    through the FFN at temperature 1/L, ``softmax(L W_U[X] relu(w_a))``."""
    w = np.asarray(W_E[anchor], dtype=np.float64)
    U = np.asarray(W_U[X], dtype=np.float64)
    ffn_logits = U @ np.maximum(w, 0.0)
    return Readouts(_softmax(ffn_logits), _softmax(U @ w), _softmax(L * ffn_logits))


def _snapshot(
    kind: type[Snapshot], traj, lane: int, index: int, targets: Targets, **fields
) -> tuple[Snapshot, np.ndarray]:
    """``(kind(...), FFN readout [K])`` of snapshot ``index`` of ``lane``: a `Snapshot`, or a
    `Run` given its other ``fields``."""
    W_E, W_U = np.asarray(traj.W_E[lane, index]), np.asarray(traj.W_U[lane, index])
    p, phi0, anchor, X, L = targets
    q = readouts(W_E, W_U, anchor, X, L)
    norms = np.linalg.norm(np.asarray(W_E, dtype=np.float64), axis=1)
    measured = kind(
        ffn=_match(p, q.ffn),
        ffn_vs_empirical_signature=_match(phi0, q.ffn),
        literal=_match(p, q.literal),
        ffn_times_L=_match(p, q.ffn_times_L),
        anchor_norm=float(norms[anchor]),
        number_norm_mean=float(norms[X].mean()),
        **fields,
    )
    return measured, q.ffn


def _law_run(law: str, config: Config, regime: Regime) -> LawRun:
    """One law's data set, trained (every seed one lane) and read out at init and at the end."""
    ds = regime.make(
        config.task,
        law=law,
        labels=config.labels,
        anchor=config.anchor,
        x_max=config.x_max,
        seed=config.label_seed,
    )
    X = ds.groups["numbers"]
    anchor = int(ds.groups["anchors"][0])
    p = tasks.label_law_distribution(law, config.x_max)
    phi0 = signatures.label_signature(ds, 0, alphas=[anchor], labels=X)[0]
    targets = Targets(p, phi0, anchor, X, ds.L)
    result = train_in_regime(
        ds,
        regime,
        records.encode(config),  # what the trainer reads: model, d, activation, gamma, adam_lr
        list(config.seeds),
        epochs=config.epochs,
        snapshots=(0, config.epochs),
    )
    traj = result.trajectory
    runs, curves = [], []
    for lane in range(len(result.seed)):
        init, q0 = _snapshot(Snapshot, traj, lane, 0, targets)
        run, q = _snapshot(
            Run,
            traj,
            lane,
            -1,
            targets,
            seed=int(result.seed[lane]),
            final_loss=float(traj.loss[lane, -1]),
            status=str(result.status[lane]),
            init=init,
        )
        runs.append(run)
        curves.append(Curve(p, q, q0))
    return LawRun(int(ds.vocab_size), _match(p, phi0), tuple(runs), curves[0])


def measure(config: Config, regime: Regime | None) -> Record:
    """Train every law of ``config`` and measure the module docstring's numbers."""
    regime = regime or PRIMARY
    return Record({law: _law_run(law, config, regime) for law in config.laws})


def figures(config: Config, record: Record) -> dict:
    """``panels``: each law's prescribed and learned law (`laws_figure`)."""
    return {"panels": laws_figure(record.laws, config)}


# --------------------------------------------------------------------------------------------
# claims: each a function of the record and its config


def _passes(law: str, match: Match) -> bool:
    """Claim §8.4's criterion (the Pearson half is undefined for the constant uniform law)."""
    r_ok = law == UNIFORM or match.pearson >= PEARSON_MIN
    return bool(r_ok and match.jsd <= JSD_MAX)


def _all_pass(law: str, matches) -> bool:
    """§8.4 on every seed."""
    return all(_passes(law, match) for match in matches)


def _runs(record: Record, law: str) -> tuple[Run, ...]:
    return record.laws[law].runs


def _inits(runs: tuple[Run, ...]) -> list[Snapshot]:
    return [s.init for s in runs]


def _jsd(snapshots) -> float:
    """The worst seed's JSD of the FFN readout against ``p_a``."""
    return max(s.ffn.jsd for s in snapshots)


def _empirical_r(snapshots) -> float:
    """The worst seed's Pearson of the FFN readout with the empirical ``phi^{y;0}_a``."""
    return min(s.ffn_vs_empirical_signature.pearson for s in snapshots)


def _init_empirical_r(runs: tuple[Run, ...]) -> float:
    """The best seed's Pearson of the init's FFN readout with the empirical ``phi^{y;0}_a``."""
    return max(s.ffn_vs_empirical_signature.pearson for s in _inits(runs))


def _uniform_measured(runs: tuple[Run, ...]) -> str:
    return (
        f"r n/a (p_a constant; r vs empirical φ^(y;0)_a = {_empirical_r(runs):.3f}), JSD "
        f"{_jsd(runs):.4f}; literal W_U w_a: JSD {runs[0].literal.jsd:.4f}"
    )


def _uniform_null(runs: tuple[Run, ...]) -> str:
    init_r_emp = runs[0].init.ffn_vs_empirical_signature.pearson
    return f"init: JSD {_jsd(_inits(runs)):.4f} (r vs empirical φ^(y;0)_a {init_r_emp:.3f})"


def _shaped_measured(runs: tuple[Run, ...]) -> str:
    r, kl, literal = min(s.ffn.pearson for s in runs), max(s.ffn.kl for s in runs), runs[0].literal
    return (
        f"r {r:.3f}, KL {kl:.3f}, JSD {_jsd(runs):.4f}; "
        f"literal W_U w_a: r {literal.pearson:.3f}, JSD {literal.jsd:.4f}"
    )


def _shaped_null(runs: tuple[Run, ...]) -> str:
    init_r = min(s.init.ffn.pearson for s in runs)
    return f"init: r {init_r:.3f}, JSD {_jsd(_inits(runs)):.4f}"


def _law_note(law: str, runs: tuple[Run, ...]) -> str:
    """Why the uniform law's pass is vacuous (its null passes), and what a failing law shows."""
    notes = []
    if law == UNIFORM and _all_pass(law, [s.ffn for s in _inits(runs)]):
        init_r_emp = runs[0].init.ffn_vs_empirical_signature.pearson
        notes.append(
            "vacuous: the small-init logits are ~0, so the softmax over X is uniform before any "
            "training and the JSD criterion cannot tell a learned uniform law from an untrained "
            f"model. What training adds shows only against the sampled labels: the readout's r "
            f"with the empirical φ^(y;0)_a is {_empirical_r(runs):.3f} trained vs "
            f"{init_r_emp:.3f} at init"
        )
    if not _all_pass(law, [s.ffn for s in runs]):
        s = runs[0]
        tempered = s.ffn_times_L
        notes.append(
            f"at temperature 1/L (L = 3) the same readout has r {tempered.pearson:.3f}, JSD "
            f"{tempered.jsd:.4f}; embedding norms: anchor {s.anchor_norm:.3f}, numbers "
            f"(mean) {s.number_norm_mean:.3f}; final loss {s.final_loss:.3f}. The anchor "
            "alone carries only part of the learned logit when the 51 number tokens (whose "
            "zero-order signatures are also ≈ p_a) grow as fast as it does"
        )
    return "; ".join(notes)


def _law_claim(law: str) -> ClaimSpec:
    """§8.4 for one law: the FFN readout matches ``p_a`` on every seed; null: the init."""
    if law == UNIFORM:
        measured, null_text = _uniform_measured, _uniform_null
        criterion = f"JSD ≤ {JSD_MAX} (Pearson ≥ {PEARSON_MIN} undefined for a constant p_a)"
    else:
        measured, null_text = _shaped_measured, _shaped_null
        criterion = f"Pearson ≥ {PEARSON_MIN} and JSD ≤ {JSD_MAX}"
    return ClaimSpec(
        item="§8.4",
        claim=f"{law}: softmax(W_U σ(w_a)) ≈ p_a at epoch {EPOCHS}",
        statistic=lambda r, c: [s.ffn for s in _runs(r, law)],
        measured=lambda r, c: measured(_runs(r, law)),
        criterion=Criterion(criterion, lambda matches: _all_pass(law, matches)),
        null=lambda r, c: [s.ffn for s in _inits(_runs(r, law))],
        null_text=lambda r, c: null_text(_runs(r, law)),
        note=lambda r, c: _law_note(law, _runs(r, law)),
    )


UNIFORM_EMPIRICAL = ClaimSpec(  # the non-vacuous half of the uniform law
    item="§8.4 [R]",
    claim=f"uniform: softmax(W_U σ(w_a)) follows the sampled labels' φ^(y;0)_a at epoch {EPOCHS}",
    statistic=lambda r, c: _empirical_r(_runs(r, UNIFORM)),
    measured=lambda r, c: (
        f"Pearson(φ^(y;0)_a, p̂_a) = {_empirical_r(_runs(r, UNIFORM)):.3f} (φ^(y;0)_a: 2601 "
        "labels drawn from the uniform p_a)"
    ),
    criterion=Criterion(
        f"Pearson ≥ {PEARSON_MIN} [R: §8.4's Pearson half, against the empirical signature]",
        lambda pearson: pearson >= PEARSON_MIN,
    ),
    null=lambda r, c: _init_empirical_r(_runs(r, UNIFORM)),
    null_text=lambda r, c: f"init: Pearson {_init_empirical_r(_runs(r, UNIFORM)):.3f}",
    kind=Kind.PROJECT,
    note="the §8.4 uniform claim is vacuous (uniform at init); this one is not: the trained "
    "readout tracks the sampling fluctuations of the labels the anchor was trained on",
)


def claim_table(config: Config) -> tuple[ClaimSpec, ...]:
    """§8.4 for each law of ``config``, in its order, then the uniform law's empirical claim."""
    return (*(_law_claim(law) for law in config.laws), UNIFORM_EMPIRICAL)


CLAIMS = claim_table
regime_text = config_regime
SPEC = Spec.declared(globals())


def laws_figure(laws: dict[str, LawRun], config: Config):
    """Prescribed $p_a$ against the learned readout $\\hat p_a$ (trained and at init), one panel
    per label law of the width-``config.d`` model; each law's ``curve`` holds ``p``,
    ``trained``, ``init`` [labels] and its first run the matches the titles give."""
    fig, axes = plots.grid(
        2,
        2,
        panel=(4.6, 3.3),
        suptitle=(
            f"Task 1, epoch {EPOCHS}: $p_a$ vs "
            "$\\hat p_a=\\mathrm{softmax}(W^U\\sigma(w^E_a))$ "
            f"(ReLU FFN d={config.d}, $\\gamma$=1; {config.regime_label})"
        ),
    )
    for ax in axes.ravel()[len(laws) :]:
        ax.set_visible(False)
    for ax, (law, law_run) in zip(axes.ravel(), laws.items(), strict=False):
        p, q, q0 = law_run.curve
        y = np.arange(p.size)
        support = np.flatnonzero((p > 2e-3) | (q > 2e-3))
        lo, hi = max(support.min() - 2, 0), min(support.max() + 2, p.size - 1)
        ax.bar(y, p, color="0.75", width=0.9, label="$p_a$ (prescribed)")
        ax.plot(y, q, "o-", ms=3, lw=1, color="C0", label=f"$\\hat p_a$, epoch {EPOCHS}")
        ax.plot(
            y,
            q0,
            ls=plots.LINE_STYLE["null"],
            lw=1,
            color="C3",
            label="$\\hat p_a$ at init (null)",
        )
        ax.set_xlim(lo - 0.5, hi + 0.5)
        s = law_run.runs[0]
        r = "n/a" if law == UNIFORM else f"{s.ffn.pearson:.2f}"
        r0 = "n/a" if law == UNIFORM else f"{s.init.ffn.pearson:.2f}"
        plots.axis_labels(
            ax,
            "label $y \\in X$",
            "probability",
            f"{law}: r={r} KL={s.ffn.kl:.3f} JSD={s.ffn.jsd:.3f}\n"
            f"init: r={r0} JSD={s.init.ffn.jsd:.3f}",
        )
    plots.legend(axes[0, 0])
    return fig
