"""[RB] reasoning vs memory anchors: the init scale decides which is learned first.

[RB] = Yao, Zhang, Xu, arXiv 2502.04375: its anchor-function composite task (Fig. 3 there) and
its embedding flow of a one-layer transformer (Props. 2–3 there); claim §8.15.

A sequence holds a key ``z_p`` in Z = {21..120} followed by q = 2 anchors; reasoning anchors
(11..20) give ``y = z_p + a_1 + a_2``, memory anchors (1..10) a fixed random label per
``(z_p, a_1, a_2)``; the held-out reasoning pairs (11, 13), (13, 11) form ``rsn_test``. Runs
`models.OneLayerTransformer` (d = 128, d_ff = 512) on L = 3, n = 20000, AdamW lr 1e-3 with
minibatches of 200 for 3000 steps, at gamma in {0.3, 0.5, 0.8}, plus a gamma = 0.8 run with
``memory_labels="local"`` (F_mem,2). ``full``: n = 200000, 30000 steps (a GPU); ``tiny``:
n = 400, 60 steps. Not in the regime study.

Measures the loss on the three subsets (``traj.sample_loss``) and the anchor groups' cosines.
Claims ([R] definitions, margin `MARGIN` nats): which subset falls faster at t_e = 25% of
training, "about equally" at gamma = 0.3, rsn_test barely improves, the anchor geometry at
gamma = 0.8, F_mem,2 learned faster; null: the untrained initialization (at t_e and the end).
Writes figures ``losses`` and ``anchors``. The substitutions and reductions against [RB] (state
them with any result), the [R] measures and claim kinds: theory/experiments.md, rb_anchor_tasks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from ctx_staircase import geometry, metrics, plots, sweep, tasks, train
from ctx_staircase.experiments import Kind
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec, config_regime

EQUAL_TOLERANCE = 0.10
MARGIN = 0.05  # nats: "lower" means lower by more than this [R]
RSN_DECAY = -0.7
MEM_SIMILAR = 0.3
SUBSETS = ("rsn_train", "rsn_test", "mem")
#: The fixed setting every claim is measured in (not part of the regime study).
REGIME = "one-layer transformer, AdamW lr 1e-3 (wd 0.01), batch 200, minimal V"
#: The γ of the geometry, falls-faster and memory-label claims, and that of "about equally".
SMALL_INIT, LARGE_INIT = 0.8, 0.3
CPU_N, FULL_N = 20000, 200000


@dataclasses.dataclass(frozen=True)
class Config:
    """What a run of this experiment is: [RB]'s task (L, q, n, its keys and held-out pairs), the
    one-layer transformer (d, d_ff) at each gamma, AdamW's settings, the steps and evenly spaced
    snapshots, t_e as a share of training, the seed, the memory-label control, what this size
    leaves out of [RB]'s, the claims' margin, the fixed regime and the null."""

    task: str = "rb_anchor"
    L: int = 3
    q: int = 2
    n: int = CPU_N
    key_range: tuple[int, int] = (21, 120)
    heldout: tuple[tuple[int, int], ...] = ((11, 13), (13, 11))
    model: str = "transformer"
    d: int = 128
    d_ff: int = 512
    gammas: tuple[float, ...] = (LARGE_INIT, 0.5, SMALL_INIT)
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch_size: int = 200
    steps: int = 3000
    snapshots: int = 21
    early_fraction: float = 0.25
    seed: int = 0
    memory_labels_control: str = "local"
    reduction: str | None = None
    margin: float = MARGIN
    regime: str = REGIME
    null: str = "the untrained initialization (step-0 snapshot of the same runs)"

    @property
    def snapshot_steps(self) -> tuple[int, ...]:
        """The steps of the `snapshots` evenly spaced snapshots."""
        return tuple(int(s) for s in np.linspace(0, self.steps, self.snapshots))

    @property
    def early_index(self) -> int:
        """The snapshot of the early checkpoint t_e (`early_fraction` of training)."""
        steps = np.asarray(self.snapshot_steps)
        return int(np.argmin(np.abs(steps - self.early_fraction * self.steps)))


def _reduction(n: int, snapshots: str = "") -> str:
    return (
        f"n={n} (paper {FULL_N}), 30 epochs of batch 200 (paper 1000 epochs of batch 100)"
        + snapshots
    )


#: The ``tiny`` smoke run: 2 rows per anchor tuple, the default's 30 epochs in 60 steps.
CONFIGS = {
    Size.TINY: Config(
        n=400, steps=60, snapshots=11, reduction=_reduction(400, ", 11 snapshots (tiny)")
    ),
    Size.CPU: Config(reduction=_reduction(CPU_N)),
    Size.FULL: Config(n=FULL_N, steps=30000),
}


# --------------------------------------------------------------------------------------------
# the record: per γ the loss and accuracy per data subset and the anchor geometry


class Losses(NamedTuple):
    """A loss per data subset (`SUBSETS`) at one checkpoint."""

    rsn_train: float
    rsn_test: float
    mem: float


class Curves(NamedTuple):
    """A curve per data subset (`SUBSETS`) over the snapshots."""

    rsn_train: tuple[float, ...]
    rsn_test: tuple[float, ...]
    mem: tuple[float, ...]

    def at(self, index: int) -> Losses:
        """Each subset's value at snapshot ``index``."""
        return Losses(self.rsn_train[index], self.rsn_test[index], self.mem[index])


#: A field a run keeps for its figures, not for its record.
UNSAVED = dict(default=None, compare=False, metadata={"saved": False})


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The anchor groups' embedding cosines: the reasoning anchors' Spearman against
    ``|s_i - s_j|`` and mean cosine per distance, the memory anchors' mean, spread and Spearman,
    the reasoning anchors' mean; and, unsaved, both cosine matrices (the figure's)."""

    rsn_spearman_cos_vs_distance: float
    rsn_cos_by_distance: tuple[float, ...]
    mem_cos_mean: float
    mem_cos_std: float
    mem_spearman_cos_vs_distance: float
    rsn_cos_mean: float
    S_rsn: np.ndarray | None = dataclasses.field(**UNSAVED)
    S_mem: np.ndarray | None = dataclasses.field(**UNSAVED)


@dataclasses.dataclass(frozen=True)
class Lane:
    """One γ: its run status, the loss and accuracy per data subset, the losses at t_e and at
    the end, the anchor geometry at the end and at init."""

    status: str
    loss: Curves
    accuracy: Curves
    loss_early: Losses
    loss_final: Losses
    anchor_geometry_final: Geometry
    anchor_geometry_init: Geometry


class MemoryCurves(NamedTuple):
    """The memory subset's loss and accuracy over the snapshots, at γ = 0.8."""

    mem_loss: tuple[float, ...]
    mem_accuracy: tuple[float, ...]


class Anchors(NamedTuple):
    """The reasoning and memory anchor tokens (the figure's ticks)."""

    rsn: np.ndarray
    mem: np.ndarray


@dataclasses.dataclass(frozen=True)
class Record:
    """What a run measured: the snapshots' epochs, t_e's, ln|Z|, a `Lane` per γ (keyed as
    ``f"{gamma:g}"``), the memory curves of F_mem,1 and F_mem,2 (in that order); unsaved, the
    anchor tokens."""

    epochs: tuple[float, ...]
    early_epoch: float
    chance_ln_Z: float
    by_gamma: dict[str, Lane]
    memory_labels: dict[str, MemoryCurves]
    anchors: Anchors | None = dataclasses.field(**UNSAVED)

    def lane(self, gamma: float) -> Lane:
        """The lane of ``gamma``."""
        return self.by_gamma[f"{gamma:g}"]

    def label_variants(self) -> tuple[MemoryCurves, MemoryCurves]:
        """The memory curves of uniform (F_mem,1) and local (F_mem,2) labels."""
        uniform, local = self.memory_labels.values()
        return uniform, local


# --------------------------------------------------------------------------------------------
# measuring


def _train(config: Config, gammas, memory_labels: str = "uniform"):
    """The task (``memory_labels``: [RB]'s F_mem,1 or F_mem,2) and its sweep over ``gammas``."""
    ds = tasks.make(config.task, L=config.L, q=config.q, n=config.n, memory_labels=memory_labels)
    train_config = train.TrainConfig(
        optimizer=config.optimizer,
        lr=config.lr,
        weight_decay=config.weight_decay,
        steps=config.steps,
        batch_size=config.batch_size,
        snapshots=config.snapshot_steps,
    )
    result = sweep.train_sweep(
        config.model,
        ds,
        train_config,
        gammas=gammas,
        seeds=(config.seed,),
        d=config.d,
        d_ff=config.d_ff,
    )
    return ds, result


def _anchor_geometry(W_E: np.ndarray, anchors: Anchors) -> Geometry:
    rsn, mem = anchors
    S_rsn = geometry.embedding_similarity(W_E, rsn)
    S_mem = geometry.embedding_similarity(W_E, mem)
    upper = np.triu_indices(rsn.size, k=1)
    distance = np.abs(rsn[:, None] - rsn[None, :])[upper]
    mem_upper = S_mem[np.triu_indices(mem.size, k=1)]
    mem_distance = np.abs(mem[:, None] - mem[None, :])[np.triu_indices(mem.size, k=1)]
    return Geometry(
        rsn_spearman_cos_vs_distance=float(
            metrics.spearman(S_rsn[upper], distance.astype(np.float64))
        ),
        rsn_cos_by_distance=tuple(
            float(S_rsn[upper][distance == k].mean()) for k in range(1, rsn.size)
        ),
        mem_cos_mean=float(mem_upper.mean()),
        mem_cos_std=float(mem_upper.std()),
        mem_spearman_cos_vs_distance=float(
            metrics.spearman(mem_upper, mem_distance.astype(np.float64))
        ),
        rsn_cos_mean=float(S_rsn[upper].mean()),
        S_rsn=S_rsn,
        S_mem=S_mem,
    )


def _curves(per_subset) -> Curves:
    """A trajectory's per-subset curves, rounded as saved."""
    return Curves(*(tuple(np.asarray(per_subset[g]).round(4).tolist()) for g in SUBSETS))


def _lane(traj, status: str, anchors: Anchors, i_early: int) -> Lane:
    """One γ lane: the loss and accuracy per data subset, their early and final losses, and
    the anchor geometry at the end and at init."""
    loss = _curves(traj.sample_loss)
    return Lane(
        status=status,
        loss=loss,
        accuracy=_curves(traj.sample_accuracy),
        loss_early=loss.at(i_early),
        loss_final=loss.at(-1),
        anchor_geometry_final=_anchor_geometry(np.asarray(traj.W_E[-1]), anchors),
        anchor_geometry_init=_anchor_geometry(np.asarray(traj.W_E[0]), anchors),
    )


def _memory_curves(traj) -> MemoryCurves:
    return MemoryCurves(
        tuple(np.asarray(traj.sample_loss["mem"]).round(4).tolist()),
        tuple(np.asarray(traj.sample_accuracy["mem"]).round(4).tolist()),
    )


def measure(config: Config, regime=None) -> Record:
    """Train the γ sweep and the F_mem,2 control at γ = 0.8, and measure the module docstring's
    numbers (``regime`` is unused: this experiment has its own fixed setting)."""
    ds, result = _train(config, config.gammas)
    _, local_result = _train(config, (SMALL_INIT,), memory_labels=config.memory_labels_control)
    anchors = Anchors(ds.groups["anchors_rsn"], ds.groups["anchors_mem"])
    i_early = config.early_index
    epochs = np.asarray(config.snapshot_steps) / (ds.n / config.batch_size)
    low, high = config.key_range
    return Record(
        epochs=tuple(epochs.round(3).tolist()),
        early_epoch=float(epochs[i_early]),
        chance_ln_Z=math.log(high - low + 1),
        by_gamma={
            f"{gamma:g}": _lane(result.lane(lane), str(result.status[lane]), anchors, i_early)
            for lane, gamma in enumerate(result.gamma)
        },
        memory_labels={
            "uniform (F_mem,1)": _memory_curves(result.lane(list(result.gamma).index(SMALL_INIT))),
            "local (F_mem,2)": _memory_curves(local_result.lane(0)),
        },
        anchors=anchors,
    )


# --------------------------------------------------------------------------------------------
# claims: each scored at the early checkpoint (or the end) and on the untrained init


def _faster(fast: float, slow: float) -> bool:
    """``fast`` is lower than ``slow`` by more than ``MARGIN``."""
    return bool(fast < slow - MARGIN)


def _at_init(record: Record, gamma: float) -> Losses:
    """The init losses of ``gamma``'s lane: the null of every loss claim."""
    return record.lane(gamma).loss.at(0)


def _per_gamma_early(record: Record, config: Config) -> str:
    return "per γ at t_e — " + "; ".join(
        f"γ={g}: rsn_train {v.loss_early.rsn_train:.3f}, rsn_test "
        f"{v.loss_early.rsn_test:.3f}, mem {v.loss_early.mem:.3f}; final rsn_test "
        f"{v.loss_final.rsn_test:.3f}"
        for g, v in record.by_gamma.items()
    )


def _falls_faster_measured(record: Record, config: Config) -> str:
    e8 = record.lane(SMALL_INIT).loss_early
    return (
        f"loss at epoch {record.early_epoch:.1f}: rsn_train {e8.rsn_train:.3f}, rsn_test "
        f"{e8.rsn_test:.3f}, mem {e8.mem:.3f}"
    )


def _init_losses(record: Record, config: Config) -> str:
    i8 = _at_init(record, SMALL_INIT)
    return f"init: rsn_train {i8.rsn_train:.4f}, rsn_test {i8.rsn_test:.4f}, mem {i8.mem:.4f}"


FALLS_FASTER = ClaimSpec(
    item="§8.15",
    claim="γ=0.8: losses on D_rsn,train and D_rsn,test fall faster than on D_mem",
    statistic=lambda r, c: r.lane(SMALL_INIT).loss_early,
    measured=_falls_faster_measured,
    criterion=Criterion(
        f"rsn_train and rsn_test each below mem by > {MARGIN} nats at t_e = 25% of training "
        "[R: 'faster' read as lower early, by a margin far above the subsets' differences at "
        "init]",
        lambda at: _faster(at.rsn_train, at.mem) and _faster(at.rsn_test, at.mem),
    ),
    null=lambda r, c: _at_init(r, SMALL_INIT),
    null_text=_init_losses,
    kind=Kind.PAPER,
    note=_per_gamma_early,
)


class Equally(NamedTuple):
    """What "about equally" reads at one checkpoint: the losses there and the final rsn_test
    loss, against the init losses and ln|Z|."""

    at: Losses
    test: float
    init: Losses
    chance: float


def _equal_gap(at: Losses) -> float:
    return abs(at.rsn_train - at.mem) / at.mem


def _equally(measured: Equally) -> bool:
    """Both losses fell from init, by about as much, and rsn_test stayed at ln|Z|."""
    at, init = measured.at, measured.init
    fell = _faster(at.rsn_train, init.rsn_train) and _faster(at.mem, init.mem)
    return fell and _equal_gap(at) <= EQUAL_TOLERANCE and measured.test >= measured.chance


def _equally_measured(record: Record, config: Config) -> str:
    large, i3 = record.lane(LARGE_INIT), _at_init(record, LARGE_INIT)
    e3 = large.loss_early
    return (
        f"loss at epoch {record.early_epoch:.1f}: rsn_train {e3.rsn_train:.3f}, mem "
        f"{e3.mem:.3f} (gap {100 * _equal_gap(e3):.1f}%; at init {i3.rsn_train:.1f} and "
        f"{i3.mem:.1f}); final rsn_test {large.loss_final.rsn_test:.3f} vs ln|Z| = "
        f"{record.chance_ln_Z:.3f}"
    )


def _equally_note(record: Record, config: Config) -> str:
    final, i3 = record.lane(LARGE_INIT).loss_final, _at_init(record, LARGE_INIT)
    return (
        f"later in training rsn_train pulls ahead at γ=0.3 too (final rsn_train "
        f"{final.rsn_train:.3f}, mem {final.mem:.3f}), but without generalizing to rsn_test. "
        "Without the 'both fell' condition the init would pass (gap "
        f"{100 * _equal_gap(i3):.1f}%, rsn_test {i3.rsn_test:.1f} ≥ ln|Z|)"
    )


EQUALLY = ClaimSpec(
    item="§8.15",
    claim="γ=0.3: rsn_train and mem fall about equally; rsn_test barely improves",
    statistic=lambda r, c: Equally(
        r.lane(LARGE_INIT).loss_early,
        r.lane(LARGE_INIT).loss_final.rsn_test,
        _at_init(r, LARGE_INIT),
        r.chance_ln_Z,
    ),
    measured=_equally_measured,
    criterion=Criterion(
        f"both fell (by > {MARGIN} nats), gap ≤ {100 * EQUAL_TOLERANCE:.0f}% of L_mem(t_e), "
        "and final rsn_test loss ≥ ln|Z| [R: 'about equally' read as within "
        f"{100 * EQUAL_TOLERANCE:.0f}%; ln|Z| is the loss of a uniform guess over Z]",
        _equally,
    ),
    null=lambda r, c: Equally(
        _at_init(r, LARGE_INIT),
        _at_init(r, LARGE_INIT).rsn_test,
        _at_init(r, LARGE_INIT),
        r.chance_ln_Z,
    ),
    null_text=lambda r, c: (
        f"init: gap {100 * _equal_gap(_at_init(r, LARGE_INIT)):.1f}%, nothing fell, rsn_test "
        f"{_at_init(r, LARGE_INIT).rsn_test:.1f}"
    ),
    kind=Kind.PROJECT,
    note=_equally_note,
)


def _final_geometry(record: Record, config: Config) -> Geometry:
    return record.lane(SMALL_INIT).anchor_geometry_final


def _init_geometry(record: Record, config: Config) -> Geometry:
    return record.lane(SMALL_INIT).anchor_geometry_init


def _geometry_note(record: Record, config: Config) -> str:
    return "end of training; all γ — " + "; ".join(
        f"γ={g}: Spearman {v.anchor_geometry_final.rsn_spearman_cos_vs_distance:.3f}, "
        f"mem mean cos {v.anchor_geometry_final.mem_cos_mean:.3f}"
        for g, v in record.by_gamma.items()
    )


RSN_DECAYS = ClaimSpec(
    item="§8.15",
    claim="γ=0.8: reasoning-anchor cosine decays with |s_i − s_j|",
    statistic=_final_geometry,
    measured=lambda r, c: (
        f"Spearman(cos, |i−j|) = {_final_geometry(r, c).rsn_spearman_cos_vs_distance:.3f}; "
        "mean cos by distance 1..9: "
        + ", ".join(f"{x:.2f}" for x in _final_geometry(r, c).rsn_cos_by_distance)
    ),
    criterion=Criterion(
        f"Spearman ≤ {RSN_DECAY} [R: 'decays' read as a strong rank correlation, by the "
        "conventional 0.7]",
        lambda g: g.rsn_spearman_cos_vs_distance <= RSN_DECAY,
    ),
    null=_init_geometry,
    null_text=lambda r, c: (
        f"init: Spearman {_init_geometry(r, c).rsn_spearman_cos_vs_distance:.3f}"
    ),
    kind=Kind.PROJECT,
    note=_geometry_note,
)


def _mem_similar_measured(record: Record, config: Config) -> str:
    geo = _final_geometry(record, config)
    return (
        f"mean pairwise cosine {geo.mem_cos_mean:.3f} (std {geo.mem_cos_std:.3f}); "
        f"Spearman with |i−j| {geo.mem_spearman_cos_vs_distance:.3f}"
    )


MEM_SIMILAR_CLAIM = ClaimSpec(
    item="§8.15",
    claim="γ=0.8: memory-anchor embeddings stay mutually similar",
    statistic=_final_geometry,
    measured=_mem_similar_measured,
    criterion=Criterion(
        f"mean cosine ≥ {MEM_SIMILAR} [R: 'mutually similar' read as over 3 times the spread "
        "of random cosines about 0, d^-1/2 = 0.09]",
        lambda g: g.mem_cos_mean >= MEM_SIMILAR,
    ),
    null=_init_geometry,
    null_text=lambda r, c: f"init: mean cosine {_init_geometry(r, c).mem_cos_mean:.3f}",
    kind=Kind.PROJECT,
)


def _label_pairs(record: Record, at: tuple[int, ...]) -> tuple[tuple[float, float], ...]:
    """The (local, uniform) memory losses at the snapshots ``at``."""
    uniform, local = record.label_variants()
    return tuple((local.mem_loss[i], uniform.mem_loss[i]) for i in at)


def _local_faster_measured(record: Record, config: Config) -> str:
    (early_local, early_uniform), (local, uniform) = _label_pairs(record, (config.early_index, -1))
    return (
        f"γ=0.8 memory loss at epoch {record.early_epoch:.1f}: local {early_local:.3f} vs "
        f"uniform {early_uniform:.3f}; final: local {local:.3f} vs uniform {uniform:.3f}"
    )


def _init_labels(record: Record, config: Config) -> str:
    ((local, uniform),) = _label_pairs(record, (0,))
    return f"init: local {local:.4f} vs uniform {uniform:.4f}"


LOCAL_FASTER = ClaimSpec(
    item="§8.15 (optional)",
    claim="F_mem,2 (local labels) is learned faster than F_mem,1 (uniform labels)",
    statistic=lambda r, c: _label_pairs(r, (c.early_index, -1)),
    measured=_local_faster_measured,
    criterion=Criterion(
        f"local below uniform by > {MARGIN} nats at t_e and at the end",
        lambda pairs: all(_faster(local, uniform) for local, uniform in pairs),
    ),
    # the null replaces both checkpoints, t_e and the end, by the init
    # (theory/experiments.md, rb_anchor_tasks)
    null=lambda r, c: _label_pairs(r, (0, 0)),
    null_text=_init_labels,
    kind=Kind.PAPER,
    note="part of the gap is the label range: local labels spread over 2Σa+1 ≤ 77 values "
    "around z_p (ln 77 = 4.34 nats for a uniform guess there), uniform ones over 100",
)


CLAIMS = (FALLS_FASTER, EQUALLY, RSN_DECAYS, MEM_SIMILAR_CLAIM, LOCAL_FASTER)


# --------------------------------------------------------------------------------------------
# figures


def loss_figure(record: Record, config: Config):
    """Loss per data subset against epoch for each γ, and the two memory-label variants: each
    lane's ``loss`` [T] on ``record.epochs`` [T]."""
    by = record.by_gamma
    epochs = np.asarray(record.epochs)
    fig, axes = plots.figure(
        1,
        len(by) + 1,
        panel=(5.0, 4.0),
        suptitle=f"[RB] anchor task (L={config.L}, q=2, n={config.n}), d=128; {REGIME}",
    )
    colours = dict(zip(SUBSETS, ("C0", "C2", "C3"), strict=True))
    for ax, (gamma, entry) in zip(axes, by.items(), strict=False):
        for subset, curve in zip(SUBSETS, entry.loss, strict=True):
            ax.plot(epochs, curve, colours[subset], label=subset.replace("_", " "))
        plots.reference(ax, y=record.chance_ln_Z, label="$\\ln |Z|$")
        plots.reference(ax, x=record.early_epoch, ls="-")
        ax.set_ylim(0, 7)
        clipped = " (starts near 100, clipped)" if max(entry.loss.mem) > 7 else ""
        plots.axis_labels(
            ax,
            plots.EPOCH,
            "mean cross-entropy (nats)",
            f"$\\gamma$ = {gamma}: loss per data subset{clipped}",
        )
        plots.legend(ax)
    ax = axes[-1]
    for (name, curves), colour in zip(record.memory_labels.items(), ("C3", "C1"), strict=True):
        ax.plot(epochs, curves.mem_loss, colour, label=f"mem loss, {name}")
    plots.reference(ax, x=record.early_epoch, ls="-")
    ax.set_ylim(0, 7)
    plots.axis_labels(
        ax,
        plots.EPOCH,
        "mean cross-entropy (nats)",
        "$\\gamma$ = 0.8: memory labels $F_{mem,1}$ vs $F_{mem,2}$",
    )
    plots.legend(ax)
    return fig


def _anchor_figure(geometries: dict[str, Geometry], anchors: Anchors):
    """Each γ's anchor cosine matrices at the end of training, the reasoning anchors' cosine
    by distance and the memory anchors' mean cosine."""
    gammas = list(geometries)
    fig, axes = plots.figure(
        2,
        len(gammas) + 1,
        panel=(4.0, 3.75),
        suptitle=f"Anchor embedding geometry at the end of training ({REGIME})",
    )
    rsn, mem = anchors
    for column, (gamma, g) in enumerate(geometries.items()):
        title = f"$\\gamma$={gamma}: "
        image = plots.heatmap(axes[0, column], g.S_rsn, rsn, title + "reasoning anchors")
        plots.heatmap(axes[1, column], g.S_mem, mem, title + "memory anchors")
    plots.colorbar(fig, image, axes[:, : len(gammas)], shrink=0.6)
    ax = axes[0, -1]
    for gamma, g in geometries.items():
        ax.plot(
            np.arange(1, rsn.size),
            g.rsn_cos_by_distance,
            "o-",
            color=plots.gamma_colour(gamma),
            label=f"$\\gamma$={gamma}",
        )
    plots.axis_labels(ax, "$|s_i - s_j|$", "mean cosine", "reasoning anchors: cosine vs distance")
    plots.legend(ax)
    ax = axes[1, -1]
    ax.bar(
        np.arange(len(gammas)),
        [g.mem_cos_mean for g in geometries.values()],
        tick_label=[f"$\\gamma$={g}" for g in gammas],
        color="C3",
    )
    ax.grid(False, axis="x")
    plots.axis_labels(ax, y="mean pairwise cosine", title="memory anchors: mutual similarity")
    return fig


def figures(config: Config, record: Record) -> dict:
    """The losses (`loss_figure`) and the anchor geometry at the end of training."""
    geometries = {g: lane.anchor_geometry_final for g, lane in record.by_gamma.items()}
    return {
        "losses": loss_figure(record, config),
        "anchors": _anchor_figure(geometries, record.anchors),
    }


regime_text = config_regime
SPEC = Spec.declared(globals())
