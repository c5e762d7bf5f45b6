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

import math

import numpy as np

from ctx_staircase import geometry, metrics, plots, tasks, train
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import scored, train_gammas

EQUAL_TOLERANCE = 0.10
MARGIN = 0.05  # nats: "lower" means lower by more than this [R]
RSN_DECAY = -0.7
MEM_SIMILAR = 0.3
SUBSETS = ("rsn_train", "rsn_test", "mem")
#: The fixed setting every claim is measured in (not part of the regime study).
REGIME = "one-layer transformer, AdamW lr 1e-3 (wd 0.01), batch 200, minimal V"


#: The ``tiny`` smoke run: 2 rows per anchor tuple, the default's 30 epochs in 60 steps.
TINY = dict(n=400, steps=60, snapshots=11)


def run_config(*, full: bool = False, tiny: bool = False) -> dict:
    """The configuration `run` records for these options."""
    return dict(
        task="rb_anchor",
        L=3,
        q=2,
        n=TINY["n"] if tiny else 200000 if full else 20000,
        key_range=[21, 120],
        heldout=[[11, 13], [13, 11]],
        model="transformer",
        d=128,
        d_ff=512,
        gammas=[0.3, 0.5, 0.8],
        optimizer="adamw",
        lr=1e-3,
        weight_decay=0.01,
        batch_size=200,
        steps=TINY["steps"] if tiny else 30000 if full else 3000,
        snapshots=TINY["snapshots"] if tiny else 21,
        early_fraction=0.25,
        seed=0,
        memory_labels_control="local",
        reduction=None
        if full
        else f"n={TINY['n'] if tiny else 20000} (paper 200000), 30 epochs of batch 200 (paper "
        "1000 epochs of batch 100)" + (f", {TINY['snapshots']} snapshots (tiny)" if tiny else ""),
        margin=MARGIN,
        regime=REGIME,
        null="the untrained initialization (step-0 snapshot of the same runs)",
    )


def _snapshots(config: dict) -> tuple[int, ...]:
    return tuple(int(s) for s in np.linspace(0, config["steps"], config["snapshots"]))


def _early_index(config: dict) -> int:
    """The snapshot of the early checkpoint t_e (`early_fraction` of training)."""
    snapshots = np.asarray(_snapshots(config))
    return int(np.argmin(np.abs(snapshots - config["early_fraction"] * config["steps"])))


def _train(config: dict, gammas, memory_labels: str = "uniform"):
    """The task (``memory_labels``: [RB]'s F_mem,1 or F_mem,2) and its sweep over ``gammas``."""
    ds = tasks.make(
        "rb_anchor", L=config["L"], q=config["q"], n=config["n"], memory_labels=memory_labels
    )
    train_config = train.TrainConfig(
        optimizer=config["optimizer"],
        lr=config["lr"],
        weight_decay=config["weight_decay"],
        steps=config["steps"],
        batch_size=config["batch_size"],
        snapshots=_snapshots(config),
    )
    result = train_gammas("transformer", ds, train_config, gammas, config, "d", "d_ff")
    return ds, result


def run(full: bool = False, tiny: bool = False) -> Outcome:
    config = run_config(full=full, tiny=tiny)
    ds, result = _train(config, config["gammas"])
    _, local_result = _train(config, (0.8,), memory_labels=config["memory_labels_control"])
    i_early = _early_index(config)
    epochs = np.asarray(_snapshots(config)) / (ds.n / config["batch_size"])
    numbers = {
        "epochs": epochs.round(3).tolist(),
        "early_epoch": float(epochs[i_early]),
        "chance_ln_Z": math.log(config["key_range"][1] - config["key_range"][0] + 1),
        "by_gamma": {},
    }
    geometry = {}
    for lane, gamma in enumerate(result.gamma):
        traj = result.lane(lane)
        numbers["by_gamma"][f"{gamma:g}"] = _lane_numbers(
            traj, str(result.status[lane]), ds, i_early
        )
        geometry[f"{gamma:g}"] = _anchor_geometry(np.asarray(traj.W_E[-1]), ds)
    numbers["memory_labels"] = {
        name: {
            "mem_loss": np.asarray(t.sample_loss["mem"]).round(4).tolist(),
            "mem_accuracy": np.asarray(t.sample_accuracy["mem"]).round(4).tolist(),
        }
        for name, t in (
            ("uniform (F_mem,1)", result.lane(list(result.gamma).index(0.8))),
            ("local (F_mem,2)", local_result.lane(0)),
        )
    }
    figures = {
        "losses": loss_figure(numbers, config),
        "anchors": _anchor_figure(geometry, ds),
    }
    return Outcome(claims(numbers, config), figures, numbers, config)


def _lane_numbers(traj, status: str, ds, i_early: int) -> dict:
    """One γ lane: the loss and accuracy per data subset, their early and final losses, and
    the anchor geometry at the end and at init."""
    entry = {
        "status": status,
        "loss": {g: np.asarray(traj.sample_loss[g]).round(4).tolist() for g in SUBSETS},
        "accuracy": {g: np.asarray(traj.sample_accuracy[g]).round(4).tolist() for g in SUBSETS},
    }
    entry["loss_early"] = {g: entry["loss"][g][i_early] for g in SUBSETS}
    entry["loss_final"] = {g: entry["loss"][g][-1] for g in SUBSETS}
    for when, index in (("final", -1), ("init", 0)):
        geometry = _anchor_geometry(np.asarray(traj.W_E[index]), ds)
        entry[f"anchor_geometry_{when}"] = {
            k: v for k, v in geometry.items() if not k.startswith("_")
        }
    return entry


def _anchor_geometry(W_E: np.ndarray, ds) -> dict:
    rsn, mem = ds.groups["anchors_rsn"], ds.groups["anchors_mem"]
    S_rsn = geometry.embedding_similarity(W_E, rsn)
    S_mem = geometry.embedding_similarity(W_E, mem)
    upper = np.triu_indices(rsn.size, k=1)
    distance = np.abs(rsn[:, None] - rsn[None, :])[upper]
    spearman = float(metrics.spearman(S_rsn[upper], distance.astype(np.float64)))
    mem_upper = S_mem[np.triu_indices(mem.size, k=1)]
    mem_distance = np.abs(mem[:, None] - mem[None, :])[np.triu_indices(mem.size, k=1)]
    return {
        "rsn_spearman_cos_vs_distance": spearman,
        "rsn_cos_by_distance": [
            float(S_rsn[upper][distance == k].mean()) for k in range(1, rsn.size)
        ],
        "mem_cos_mean": float(mem_upper.mean()),
        "mem_cos_std": float(mem_upper.std()),
        "mem_spearman_cos_vs_distance": float(
            metrics.spearman(mem_upper, mem_distance.astype(np.float64))
        ),
        "rsn_cos_mean": float(S_rsn[upper].mean()),
        "_S_rsn": S_rsn,
        "_S_mem": S_mem,
    }


def _faster(fast: float, slow: float) -> bool:
    """``fast`` is lower than ``slow`` by more than ``MARGIN``."""
    return bool(fast < slow - MARGIN)


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The §8.15 claims from the run's ``numbers`` (as saved in its JSON), each scored at the
    early checkpoint (or the end) and on the untrained init by the same criterion."""
    i_early = _early_index(config)
    return [
        _falls_faster_claim(numbers),
        _equally_claim(numbers),
        *_geometry_claims(numbers),
        _memory_labels_claim(numbers, i_early),
    ]


def _falls_faster_claim(numbers: dict) -> Claim:
    by = numbers["by_gamma"]
    e8 = by["0.8"]["loss_early"]
    i8 = {g: by["0.8"]["loss"][g][0] for g in SUBSETS}  # init: the null of every loss claim
    others = "; ".join(
        f"γ={g}: rsn_train {v['loss_early']['rsn_train']:.3f}, rsn_test "
        f"{v['loss_early']['rsn_test']:.3f}, mem {v['loss_early']['mem']:.3f}; final rsn_test "
        f"{v['loss_final']['rsn_test']:.3f}"
        for g, v in by.items()
    )
    return Claim(
        "§8.15",
        "γ=0.8: losses on D_rsn,train and D_rsn,test fall faster than on D_mem",
        f"loss at epoch {numbers['early_epoch']:.1f}: rsn_train {e8['rsn_train']:.3f}, rsn_test "
        f"{e8['rsn_test']:.3f}, mem {e8['mem']:.3f}",
        f"rsn_train and rsn_test each below mem by > {MARGIN} nats at t_e = 25% of training "
        "[R: 'faster' read as lower early, by a margin far above the subsets' differences at "
        "init]",
        note=f"per γ at t_e — {others}",
        kind="paper",
        regime=REGIME,
        null=f"init: rsn_train {i8['rsn_train']:.4f}, rsn_test {i8['rsn_test']:.4f}, "
        f"mem {i8['mem']:.4f}",
        **scored(
            lambda at: _faster(at["rsn_train"], at["mem"]) and _faster(at["rsn_test"], at["mem"]),
            e8,
            i8,
        ),
    )


def _equal_gap(at: dict) -> float:
    return abs(at["rsn_train"] - at["mem"]) / at["mem"]


def _equally_claim(numbers: dict) -> Claim:
    large, chance = numbers["by_gamma"]["0.3"], numbers["chance_ln_Z"]
    e3 = large["loss_early"]
    i3 = {g: large["loss"][g][0] for g in SUBSETS}
    test_final = large["loss_final"]["rsn_test"]

    def equally(measured: tuple[dict, float]) -> bool:
        """Both losses fell from init, by about as much, and rsn_test stayed at ln|Z|."""
        at, test = measured
        fell = _faster(at["rsn_train"], i3["rsn_train"]) and _faster(at["mem"], i3["mem"])
        return fell and _equal_gap(at) <= EQUAL_TOLERANCE and test >= chance

    null_gap = _equal_gap(i3)
    return Claim(
        "§8.15",
        "γ=0.3: rsn_train and mem fall about equally; rsn_test barely improves",
        f"loss at epoch {numbers['early_epoch']:.1f}: rsn_train {e3['rsn_train']:.3f}, mem "
        f"{e3['mem']:.3f} (gap {100 * _equal_gap(e3):.1f}%; at init {i3['rsn_train']:.1f} and "
        f"{i3['mem']:.1f}); final rsn_test {test_final:.3f} vs ln|Z| = {chance:.3f}",
        f"both fell (by > {MARGIN} nats), gap ≤ {100 * EQUAL_TOLERANCE:.0f}% of L_mem(t_e), "
        "and final rsn_test loss ≥ ln|Z| [R: 'about equally' read as within "
        f"{100 * EQUAL_TOLERANCE:.0f}%; ln|Z| is the loss of a uniform guess over Z]",
        note=f"later in training rsn_train pulls ahead at γ=0.3 too (final rsn_train "
        f"{large['loss_final']['rsn_train']:.3f}, mem {large['loss_final']['mem']:.3f}), "
        "but without generalizing to rsn_test. Without the 'both fell' condition the init "
        f"would pass (gap {100 * null_gap:.1f}%, rsn_test {i3['rsn_test']:.1f} ≥ ln|Z|)",
        kind="project",
        regime=REGIME,
        null=f"init: gap {100 * null_gap:.1f}%, nothing fell, rsn_test {i3['rsn_test']:.1f}",
        **scored(equally, (e3, test_final), (i3, i3["rsn_test"])),
    )


def _geometry_claims(numbers: dict) -> list[Claim]:
    by = numbers["by_gamma"]
    geo, geo0 = by["0.8"]["anchor_geometry_final"], by["0.8"]["anchor_geometry_init"]
    geometry_all = "; ".join(
        f"γ={g}: Spearman {v['anchor_geometry_final']['rsn_spearman_cos_vs_distance']:.3f}, "
        f"mem mean cos {v['anchor_geometry_final']['mem_cos_mean']:.3f}"
        for g, v in by.items()
    )
    return [
        Claim(
            "§8.15",
            "γ=0.8: reasoning-anchor cosine decays with |s_i − s_j|",
            f"Spearman(cos, |i−j|) = {geo['rsn_spearman_cos_vs_distance']:.3f}; mean cos by "
            "distance 1..9: " + ", ".join(f"{c:.2f}" for c in geo["rsn_cos_by_distance"]),
            f"Spearman ≤ {RSN_DECAY} [R: 'decays' read as a strong rank correlation, by the "
            "conventional 0.7]",
            note=f"end of training; all γ — {geometry_all}",
            kind="project",
            regime=REGIME,
            null=f"init: Spearman {geo0['rsn_spearman_cos_vs_distance']:.3f}",
            **scored(lambda g: g["rsn_spearman_cos_vs_distance"] <= RSN_DECAY, geo, geo0),
        ),
        Claim(
            "§8.15",
            "γ=0.8: memory-anchor embeddings stay mutually similar",
            f"mean pairwise cosine {geo['mem_cos_mean']:.3f} (std {geo['mem_cos_std']:.3f}); "
            f"Spearman with |i−j| {geo['mem_spearman_cos_vs_distance']:.3f}",
            f"mean cosine ≥ {MEM_SIMILAR} [R: 'mutually similar' read as over 3 times the "
            "spread of random cosines about 0, d^-1/2 = 0.09]",
            kind="project",
            regime=REGIME,
            null=f"init: mean cosine {geo0['mem_cos_mean']:.3f}",
            **scored(lambda g: g["mem_cos_mean"] >= MEM_SIMILAR, geo, geo0),
        ),
    ]


def _memory_labels_claim(numbers: dict, i_early: int) -> Claim:
    curves = numbers["memory_labels"]
    uniform, local = curves["uniform (F_mem,1)"]["mem_loss"], curves["local (F_mem,2)"]["mem_loss"]
    return Claim(
        "§8.15 (optional)",
        "F_mem,2 (local labels) is learned faster than F_mem,1 (uniform labels)",
        f"γ=0.8 memory loss at epoch {numbers['early_epoch']:.1f}: local {local[i_early]:.3f} vs "
        f"uniform {uniform[i_early]:.3f}; final: local {local[-1]:.3f} vs uniform "
        f"{uniform[-1]:.3f}",
        f"local below uniform by > {MARGIN} nats at t_e and at the end",
        note="part of the gap is the label range: local labels spread over 2Σa+1 ≤ 77 values "
        "around z_p (ln 77 = 4.34 nats for a uniform guess there), uniform ones over 100",
        kind="paper",
        regime=REGIME,
        null=f"init: local {local[0]:.4f} vs uniform {uniform[0]:.4f}",
        # the null replaces both checkpoints, t_e and the end, by the init
        # (theory/experiments.md, rb_anchor_tasks)
        **scored(
            lambda at: all(_faster(local[i], uniform[i]) for i in at),
            (i_early, -1),
            (0, 0),
        ),
    )


def loss_figure(numbers: dict, config: dict):
    """Loss per data subset against epoch for each γ, and the two memory-label variants;
    ``numbers["by_gamma"][γ]["loss"][subset]`` [T] on ``numbers["epochs"]`` [T]."""
    by = numbers["by_gamma"]
    epochs = np.asarray(numbers["epochs"])
    fig, axes = plots.figure(
        1,
        len(by) + 1,
        panel=(5.0, 4.0),
        suptitle=f"[RB] anchor task (L={config['L']}, q=2, n={config['n']}), d=128; {REGIME}",
    )
    colours = {"rsn_train": "C0", "rsn_test": "C2", "mem": "C3"}
    for ax, (gamma, entry) in zip(axes, by.items(), strict=False):
        for subset in SUBSETS:
            ax.plot(epochs, entry["loss"][subset], colours[subset], label=subset.replace("_", " "))
        plots.reference(ax, y=numbers["chance_ln_Z"], label="$\\ln |Z|$")
        plots.reference(ax, x=numbers["early_epoch"], ls="-")
        ax.set_ylim(0, 7)
        clipped = " (starts near 100, clipped)" if max(entry["loss"]["mem"]) > 7 else ""
        plots.axis_labels(
            ax,
            plots.EPOCH,
            "mean cross-entropy (nats)",
            f"$\\gamma$ = {gamma}: loss per data subset{clipped}",
        )
        plots.legend(ax)
    ax = axes[-1]
    for (name, curves), colour in zip(numbers["memory_labels"].items(), ("C3", "C1"), strict=True):
        ax.plot(epochs, curves["mem_loss"], colour, label=f"mem loss, {name}")
    plots.reference(ax, x=numbers["early_epoch"], ls="-")
    ax.set_ylim(0, 7)
    plots.axis_labels(
        ax,
        plots.EPOCH,
        "mean cross-entropy (nats)",
        "$\\gamma$ = 0.8: memory labels $F_{mem,1}$ vs $F_{mem,2}$",
    )
    plots.legend(ax)
    return fig


def _anchor_figure(geometry: dict, ds):
    gammas = list(geometry)
    fig, axes = plots.figure(
        2,
        len(gammas) + 1,
        panel=(4.0, 3.75),
        suptitle=f"Anchor embedding geometry at the end of training ({REGIME})",
    )
    rsn, mem = ds.groups["anchors_rsn"], ds.groups["anchors_mem"]
    for column, gamma in enumerate(gammas):
        g = geometry[gamma]
        title = f"$\\gamma$={gamma}: "
        image = plots.heatmap(axes[0, column], g["_S_rsn"], rsn, title + "reasoning anchors")
        plots.heatmap(axes[1, column], g["_S_mem"], mem, title + "memory anchors")
    plots.colorbar(fig, image, axes[:, : len(gammas)], shrink=0.6)
    ax = axes[0, -1]
    for gamma in gammas:
        ax.plot(
            np.arange(1, rsn.size),
            geometry[gamma]["rsn_cos_by_distance"],
            "o-",
            color=plots.gamma_colour(gamma),
            label=f"$\\gamma$={gamma}",
        )
    plots.axis_labels(ax, "$|s_i - s_j|$", "mean cosine", "reasoning anchors: cosine vs distance")
    plots.legend(ax)
    ax = axes[1, -1]
    ax.bar(
        np.arange(len(gammas)),
        [geometry[g]["mem_cos_mean"] for g in gammas],
        tick_label=[f"$\\gamma$={g}" for g in gammas],
        color="C3",
    )
    ax.grid(False, axis="x")
    plots.axis_labels(ax, y="mean pairwise cosine", title="memory anchors: mutual similarity")
    return fig
