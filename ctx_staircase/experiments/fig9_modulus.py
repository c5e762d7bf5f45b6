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

import numpy as np

from ctx_staircase import metrics, plots, signatures
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import (
    Draws,
    paper_ffn,
    recorded_config,
    scored,
    train_configured,
)
from ctx_staircase.experiments.regime import PRIMARY, Regime, shuffled_labels

NULLS = {"null": "M | N indicator permuted over the M values (exact enumeration)"}

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

REDUCTION = {  # what each size of run leaves out of the paper's
    "tiny": f"tiny: M in {{4, 7}}, {TINY_EPOCHS} epochs, 1 seed",
    "quick": "quick: M in {3, 4, 5, 7, 19, 20}, 2000 epochs, 1 seed",
    "paper": "paper sizes (N=20, all pairs); CPU default runs 1 seed and censors at 6000 "
    "epochs (full: 3 seeds, 10000 epochs)",
}


def run_config(
    *, full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> dict:
    """The configuration `run` records for these options (``full``, ``regime``, ``quick`` and
    ``tiny``, as `run` takes them)."""
    quick = quick and not tiny
    config = dict(
        task="modulus",
        N=20,
        Ms=list(TINY_MS) if tiny else list(QUICK_MS) if quick else list(range(2, 21)),
        **paper_ffn(1e-3),
        seeds=[0, 1, 2] if full else [0],
        max_epochs=TINY_EPOCHS if tiny else 10000 if full else 2000 if quick else 6000,
        snapshot_every=10,
        threshold=THRESHOLD,
        slow_epochs=SLOW_EPOCHS,
        min_jump=MIN_JUMP,
        collapse_epoch=COLLAPSE_EPOCH,
        vocabulary="shared by every M: V_min = 21 (1 + max id), the regime's V from it",
    )
    return recorded_config(config, NULLS, REDUCTION, regime, tiny=tiny, quick=quick) | {
        "vocab_size": regime.vocab_size(MINIMAL_VOCAB) or MINIMAL_VOCAB
    }


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


def _modulus_run(M: int, config: dict, regime: Regime) -> tuple[dict, dict]:
    """One modulus: its JSON entry (the module docstring's measures, per seed) and its figure
    panels (accuracy curve of seed 0 ``[S]``, ``S^{sig,(0)}`` and the early ``S^emb``
    ``[N, N]``, the snapshot epochs ``[S]``)."""
    N, max_epochs = config["N"], config["max_epochs"]
    ds = regime.make("modulus", N=N, M=M, minimal=MINIMAL_VOCAB)
    numbers = ds.groups["numbers"]
    constant, low, S0 = _constant_sig0(ds)
    train_config = regime.train_config(
        ds,
        epochs=max_epochs,
        snapshots=range(0, max_epochs + 1, config["snapshot_every"]),
        adam_lr=config["adam_lr"],
    )
    result = train_configured(ds, train_config, config, config["seeds"])
    trajectory = result.trajectory
    epochs = regime.epochs_of(trajectory.steps[0])
    accuracy = np.asarray(trajectory.accuracy)  # [seeds, S]
    hits = [_first_hit(epochs, a, THRESHOLD) for a in accuracy]
    W_E = np.asarray(trajectory.W_E)
    collapse = COLLAPSE_EPOCH // config["snapshot_every"]
    entry = dict(
        divides=N % M == 0,
        epochs_to_95=hits,
        censored=[h is None for h in hits],
        max_accuracy=[float(a.max()) for a in accuracy],
        final_accuracy=[float(a[-1]) for a in accuracy],
        status=[str(s) for s in result.status],
        S_sig0_constant=constant,
        S_sig0_offdiag_min=low,
        S_sig0_constant_shuffled=_constant_sig0(shuffled_labels(ds, seed=0))[0],
        early_offdiag_cos=_mean_cos(W_E[:, collapse], numbers),
        init_offdiag_cos=_mean_cos(W_E[:, 0], numbers),
    )
    panels = dict(
        curve=accuracy[0],
        S0=S0,
        S_early=np.asarray(metrics.cosine_matrix(W_E[0, collapse][numbers])),
        epochs=epochs,
    )
    return entry, panels


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
    def of(cls, per_M: dict, max_epochs: int) -> Speeds:
        """From the JSON entries ``per_M[str(M)]`` (`_modulus_run`)."""
        entries = list(per_M.values())
        return cls(
            Ms=np.asarray([int(M) for M in per_M]),
            epochs=np.asarray(
                [
                    np.median([max_epochs if h is None else h for h in e["epochs_to_95"]])
                    for e in entries
                ],
                dtype=float,
            ),
            censored=np.asarray([np.median(e["censored"]) > 0.5 for e in entries]),
            any_censored=np.asarray([any(e["censored"]) for e in entries]),
            divides=np.asarray([e["divides"] for e in entries]),
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


def _speed_numbers(speeds: Speeds) -> dict:
    """The jump, its bound and its permutation statistics, for the JSON."""
    jump = log_jump(speeds.log_epochs, speeds.divides)
    perm_jumps = np.asarray([log_jump(speeds.log_epochs, p) for p in speeds.relabellings()])
    return dict(
        log_jump=jump,
        log_jump_bound=speeds.bound(),
        log_jump_uncensored=speeds.jump_uncensored(),
        log_jump_permutation_p=float(
            (1 + np.sum(perm_jumps >= jump - 1e-12)) / (1 + perm_jumps.size)
        ),
        log_jump_permutation_q95=float(np.quantile(perm_jumps, 0.95)),
        spearman_M_log_epochs=float(metrics.spearman(speeds.Ms.astype(float), speeds.log_epochs)),
        misclassified=[int(M) for M in speeds.Ms[speeds.slow != speeds.divides]],
    )


def run(
    full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> Outcome:
    config = run_config(full=full, regime=regime, quick=quick, tiny=tiny)
    with ThreadPoolExecutor(max_workers=2) as pool:
        trained = list(pool.map(lambda M: _modulus_run(M, config, regime), config["Ms"]))
    per_M = {str(M): entry for M, (entry, _) in zip(config["Ms"], trained, strict=True)}
    panels = dict(zip(config["Ms"], (p for _, p in trained), strict=True))
    speeds = Speeds.of(per_M, config["max_epochs"])
    numbers = dict(
        Ms=speeds.Ms.tolist(),
        epochs_to_95_median=speeds.epochs.tolist(),
        censored=speeds.censored.tolist(),
        divides=speeds.divides.tolist(),
        **_speed_numbers(speeds),
        early_offdiag_cos=[float(np.mean(e["early_offdiag_cos"])) for e in per_M.values()],
        init_offdiag_cos=[float(np.mean(e["init_offdiag_cos"])) for e in per_M.values()],
        per_M=per_M,
    )
    shown = [M for M in config["Ms"] if M in HEATMAP_MS]
    figures = {
        "epochs": epochs_figure(
            speeds.Ms,
            speeds.epochs,
            speeds.censored,
            speeds.divides,
            np.asarray(numbers["early_offdiag_cos"]),
            config,
        ),
        "curves_heatmaps": heatmap_figure(
            panels[config["Ms"][0]]["epochs"],
            {M: p["curve"] for M, p in panels.items()},
            {M: panels[M]["S0"] for M in shown},
            {M: panels[M]["S_early"] for M in shown},
            config,
        ),
    }
    return Outcome(claims(numbers, config), figures, numbers, config)


# --------------------------------------------------------------------------------------------
# claims


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The four claims of the module docstring from the run's ``numbers`` (as saved in its JSON),
    each with its null scored by the same criterion."""
    speeds = Speeds.of(numbers["per_M"], config["max_epochs"])
    return [
        _signature_claim(numbers["per_M"], speeds),
        _iff_claim(numbers, speeds),
        _jump_claim(numbers, speeds),
        _collapse_claim(numbers, speeds, config["vocab_size"]),
    ]


def _signature_claim(per_M: dict, speeds: Speeds) -> Claim:
    constant = np.asarray([e["S_sig0_constant"] for e in per_M.values()])
    constant_null = np.asarray([e["S_sig0_constant_shuffled"] for e in per_M.values()])
    return Claim(
        "§8.8 (data)",
        "S^{sig,(0)} of the numbers is constant (≡ 1) exactly when M | N",
        "constant for M = " + ", ".join(str(M) for M in speeds.Ms[constant]),
        "constant iff M | 20 (exact signatures)",
        kind="paper",
        null="shuffled labels: constant for M = "
        + (", ".join(str(M) for M in speeds.Ms[constant_null]) or "none"),
        **scored(lambda c: np.all(c == speeds.divides), constant, constant_null),
    )


def _iff_claim(numbers: dict, speeds: Speeds) -> Claim:
    wrong, spearman = numbers["misclassified"], numbers["spearman_M_log_epochs"]
    note = ""
    if wrong:
        note = f"misclassified M: {wrong}. Spearman(M, log epochs) = {spearman:.2f}" + (
            ": the dominant trend is in M itself, not divisibility; see the collapse diagnostic."
            if abs(spearman) >= 0.7
            else "."
        )
    null = Draws(speeds.relabellings(), NULL_LEVEL)
    return Claim(
        "§8.8",
        "epochs to 95% train accuracy are in the thousands iff M | N, hundreds otherwise",
        speeds.text() + " (* = M | 20; > = never reached, censored)",
        f"every M | 20 needs >= {SLOW_EPOCHS} epochs (or is censored), every other M "
        f"< {SLOW_EPOCHS}",
        note=note,
        kind="paper",
        null=f"M | N permuted: {null.share(speeds.slow_iff):.4f} of {len(null.draws)} other "
        "relabellings meet it",
        # every run reached its target: the times are measured, not bounded by the horizon
        failure="unclassified" if speeds.any_censored.any() else "false",
        **scored(speeds.slow_iff, speeds.divides, null),
    )


def _jump_claim(numbers: dict, speeds: Speeds) -> Claim:
    jump, bound = numbers["log_jump"], numbers["log_jump_bound"]
    uncensored = numbers["log_jump_uncensored"]
    note = (
        f"censored (never reached 95%): M = {[int(M) for M in speeds.Ms[speeds.any_censored]]}; "
        "uncensored-only jump "
        + ("undefined (a group has no uncensored run)" if uncensored is None else "")
        + ("" if uncensored is None else f"{uncensored:.2f}")
        + f". Permutation p-value of the jump (relabellings with a jump ≥ the measured one): "
        f"{numbers['log_jump_permutation_p']:.3f}."
    )
    if jump < MIN_JUMP:
        note += " Why it misses: epochs to 95% " + speeds.text() + "."
    elif not bound.startswith(("exact", "a lower")):
        note += " Why it misses: censored M ∤ N runs make the jump an upper bound."
    null = Draws(speeds.relabellings(), NULL_LEVEL)
    return Claim(
        "§8.8",
        "log(epochs) regressed on 1[M | N] has a large positive jump",
        f"jump {jump:.2f} (= x{math.exp(jump):.1f}; censored runs enter at {speeds.max_epochs}: "
        f"{bound}); uncensored only: "
        + ("undefined" if uncensored is None else f"{uncensored:.2f}"),
        f"jump >= log 3 = {MIN_JUMP:.2f}, as an exact value or a lower bound [R: 'large' read "
        "as M | N runs at least 3 times slower, in geometric mean]",
        note=note,
        kind="project",
        # every run reached 95% (none censored): the jump is exact, no budget can move it
        failure="unclassified" if speeds.any_censored.any() else "false",
        null=f"M | N permuted: {null.share(speeds.jumps):.4f} of {len(null.draws)} other "
        f"relabellings meet it (95th percentile of the jump "
        f"{numbers['log_jump_permutation_q95']:.2f})",
        **scored(speeds.jumps, speeds.divides, null),
    )


def _collapse_claim(numbers: dict, speeds: Speeds, vocab_size: int) -> Claim:
    early_cos = np.asarray(numbers["early_offdiag_cos"])
    init_cos = np.asarray(numbers["init_offdiag_cos"])
    wrong = [int(M) for M in speeds.Ms[(early_cos >= COLLAPSE_COS) != speeds.divides]]
    return Claim(
        "mechanism [R]",
        "embeddings collapse to one direction early exactly when S^{sig,(0)} ≡ 1",
        "mean off-diag cos at epoch "
        f"{COLLAPSE_EPOCH}: "
        + ", ".join(f"M={M}: {c:.2f}" for M, c in zip(speeds.Ms, early_cos, strict=True)),
        f"mean off-diagonal cosine >= {COLLAPSE_COS} iff M | 20 [R: 'collapsed to one "
        "direction' read as Fig. 3A/B's collapse]",
        note=(
            f"mismatched M: {wrong}. The early common-mode drive "
            "C_1 W^{U,T}(φ^{y;0} − 1/V) has a part shared by every token whatever M "
            f"(labels 0..M−1 of a {vocab_size}-id softmax), so "
            "collapse is not specific to M | N."
        )
        if wrong
        else "",
        kind="project",
        failure="false",  # read at an early epoch inside every run
        null=f"init: mean off-diag cos {init_cos.min():.2f}..{init_cos.max():.2f}",
        **scored(lambda cos: np.all((cos >= COLLAPSE_COS) == speeds.divides), early_cos, init_cos),
    )


def epochs_figure(Ms, epochs, censored, divides, early_cos, config):
    """Epochs to 95% accuracy and the early collapse per modulus; ``Ms``, ``epochs``,
    ``censored``, ``divides``, ``early_cos`` all [moduli]."""
    fig, axes = plots.figure(
        1,
        2,
        panel=(5.5, 3.8),
        suptitle=(
            f"$y = (x_1 + x_2)$ mod M, N=20; FFN ReLU d={config['d']}, "
            f"$\\gamma$={config['gamma']:g}, {config['regime_label']}"
        ),
    )
    ax = axes[0]
    for mask, colour, label in ((divides, "C3", "M | 20"), (~divides, "C0", "M ∤ 20")):
        done = mask & ~censored
        ax.plot(Ms[done], epochs[done], "o", color=colour, label=label)
        cut = mask & censored
        if cut.any():
            ax.plot(Ms[cut], epochs[cut], "^", color=colour, mfc="none", ms=9)
    ax.plot([], [], "^", color="k", mfc="none", label=f"never (> {config['max_epochs']})")
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
            f"{config['regime_label']}"
        ),
    )
    ticks = np.arange(1, config["N"] + 1)
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
