"""Fig. 3: the staircase in one run, add and mod with N = 40 (paper Fig. 3, §4.2–§4.5).

Reproduces Fig. 3A–C and claims §8.3, §8.5: ``rho_0`` peaks early and declines (add), the
first-order probe beats zero order after the early phase, and the mod embeddings make no
progress and collapse to one direction early.

Runs Task 2 ``add`` and ``mod`` (N = 40, all 1600 pairs) on a ReLU FFN (paper §4.1), d = 128,
gamma = 1.0, seed 0, float32, 1200 epochs (``full`` changes nothing), in a `regime.Regime`
(primary: full-batch GD at lr 1, ``V = 2 V_min``). ``quick``: 7 probe snapshots, no figures;
``tiny``: N = 8, d = 16, 120 epochs.

Measures over training the loss and accuracy, ``rho_0(t)`` (``metrics.alignment``; ``1 - MSE``
for mod, whose ``S^{sig,(0)}`` is constant), the off-diagonal MSE, the held-out first-order probe
(``metrics.probe_fit``) at 12 snapshots, and the geometry at epochs 100 and 1100. The claims and
their [R] thresholds are `staircase_claims`' (the flagship scores them with the same functions);
nulls: the init for checkpoint geometries and the probe comparisons, the label-shuffled data for
the trajectory statistics. Writes figures ``curves`` and ``geometry``.

The conventions, thresholds, nulls and why quick keeps N = 40: theory/experiments.md,
fig3_staircase.
"""

from __future__ import annotations

import numpy as np

from ctx_staircase import geometry, metrics, plots, second_escape, signatures
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments import regime as regime_mod
from ctx_staircase.experiments import staircase_claims as scoring
from ctx_staircase.experiments.common import paper_ffn, recorded_config, train_in_regime
from ctx_staircase.experiments.regime import PRIMARY, Regime

NULLS = {  # how each null control is built
    "null_checkpoint": "the untrained initialization (epoch 0 of the same run)",
    "null_trajectory": "the same training on the label-shuffled data set (seed 0)",
}

TASKS = ("add", "mod")
EPOCHS = 1200
SNAPSHOTS = (0, 10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200)
PROBE_EPOCHS = (10, 25, 50, 100, 200, 300, 400, 600, 800, 1000, 1100, 1200)
QUICK_PROBE_EPOCHS = (25, 100, 300, 600, 1000, 1100, 1200)
EARLY, LATE = scoring.EARLY, 1100
ADAM_LR = 1e-3
TINY = dict(  # a smoke run: a tenth of the horizon, the checkpoints scaled with it
    N=8,
    d=16,
    epochs=120,
    snapshots=(0, 10, 25, 50, 75, 100, 110, 120),
    probe_epochs=(25, 50, 100, 120),
    early=10,
    late=110,
)

REDUCTION = {  # what each size of run leaves out of the paper's
    "tiny": "tiny: N = 8, d = 16, 120 epochs, 4 probe snapshots",
    "quick": "quick: 7 probe snapshots instead of 12, no figures",
    "paper": "none (the paper's sizes: N = 40, 1200 epochs)",
}


def signatures_of(ds) -> dict:
    """The true data set's zero-order geometry and first-order signature (also used to score the
    label-shuffled null run): ``alphas`` (the number ids, ``[A]``), ``S_sig0`` ``[A, A]`` and
    ``phi1`` ``[A, V_nu, V_ctx]`` (the paper §3.2 at m = 1)."""
    alphas = ds.groups["numbers"]
    labels = ds.groups["labels"]
    S_sig0 = metrics.cosine_matrix(signatures.label_signature(ds, 0, alphas=alphas, labels=labels))
    phi1 = signatures.label_signature(
        ds, 1, alphas=alphas, labels=labels, context=np.unique(ds.tokens)
    )
    return {"alphas": alphas, "S_sig0": np.asarray(S_sig0), "phi1": phi1}


def measure(sig: dict, trajectory, regime: Regime, cfg: dict) -> dict:
    """rho_0(t), MSE to S^{sig,(0)}, probe curves (and the probe at init) and the early/late
    geometry of one run.

    ``sig`` is `signatures_of` the true data; ``trajectory`` one lane of a training sweep
    (``steps`` ``[S]``, ``W_E`` ``[S, V, d]``, ``loss`` and ``accuracy`` ``[S]``) whose epochs
    include 0, ``EARLY``, ``LATE`` and ``cfg["probe_epochs"]``; the probe is fitted with
    ``cfg["probe_seed"]`` at those epochs and at epoch 0 (``init_probe``: corr, MSE).
    """
    alphas, S_sig0 = sig["alphas"], sig["S_sig0"]
    epochs = regime.epochs_of(trajectory.steps)
    W = np.asarray(trajectory.W_E)[:, alphas]  # [S, A, d]
    S_emb = geometry.embedding_similarity(trajectory.W_E, alphas)  # [S, A, A]
    rho0 = metrics.alignment(S_emb, S_sig0)
    offdiag = geometry.offdiagonal_statistics(S_emb, S_sig0)
    index = {int(t): i for i, t in enumerate(epochs)}
    probe_at = [index[t] for t in cfg["probe_epochs"]]
    probe = geometry.probe_curve(sig["phi1"], S_emb, [*probe_at, 0], seed=cfg["probe_seed"])
    checkpoints = {
        t: {"S": S_emb[index[t]], "pca": metrics.pca(W[index[t]], k=2)}
        for t in (cfg.get("early", EARLY), cfg.get("late", LATE))
    }
    return {
        "alphas": alphas,
        "steps": epochs,
        "loss": np.asarray(trajectory.loss),
        "accuracy": np.asarray(trajectory.accuracy),
        "rho0": np.asarray(rho0.value),
        "rho0_method": str(rho0.method),
        "mse0": offdiag.mse,
        "probe_steps": np.asarray(cfg["probe_epochs"]),
        "probe_corr": probe.corr[:-1],
        "probe_mse": probe.mse[:-1],
        "init_probe": (float(probe.corr[-1]), float(probe.mse[-1])),
        "mean_offdiag_S_emb": offdiag.mean,
        "geometry": checkpoints,
    }


def run_config(
    *, full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> dict:
    """The configuration `run` records for these options."""
    sizes = (
        TINY
        if tiny
        else dict(
            N=40,
            d=128,
            epochs=EPOCHS,
            snapshots=SNAPSHOTS,
            probe_epochs=QUICK_PROBE_EPOCHS if quick else PROBE_EPOCHS,
            early=EARLY,
            late=LATE,
        )
    )
    config = dict(
        tasks=list(TASKS),
        N=sizes["N"],
        **paper_ffn(ADAM_LR) | {"d": sizes["d"]},
        seed=0,
        epochs=sizes["epochs"],
        snapshots=list(sizes["snapshots"]),
        probe_epochs=list(sizes["probe_epochs"]),
        probe="metrics.probe_fit: Adam lr 0.01, 300 steps, 5 folds over pairs, 4 restarts",
        probe_seed=0,
        early=sizes["early"],
        late=sizes["late"],
        early_phase_ends_at_accuracy=scoring.ACC_PHASE,
        collapse_threshold=scoring.COLLAPSE,
        probe_gap_closed=scoring.GAP_CLOSED,
        dtype="float32",
    )
    return recorded_config(config, NULLS, REDUCTION, regime, tiny=tiny, quick=quick)


def run(
    full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> Outcome:
    cfg = run_config(full=full, regime=regime, quick=quick, tiny=tiny)
    data: dict = {}
    for task in TASKS:
        ds = regime.make(task, N=cfg["N"])
        sig = signatures_of(ds)
        for tag, dataset in (("trained", ds), ("shuffled", regime_mod.shuffled_labels(ds, 0))):
            result = train_in_regime(dataset, regime, cfg, [cfg["seed"]])
            data[(task, tag)] = measure(sig, result.lane(0), regime, cfg)
            data[(task, tag)]["status"] = str(result.status[0])
            if task == "mod" and tag == "trained":
                predicted = predicted_collapse(ds, result.lane(0), regime, cfg["epochs"])
                data[(task, tag)]["collapse_predicted"] = predicted
        data[(task, "trained")]["vocab_size"] = int(ds.vocab_size)

    numbers = {f"{task}/{tag}": _summary(d) for (task, tag), d in data.items()}
    scored_claims = claims(data, cfg, regime)
    figures = (
        {}
        if quick and not tiny
        else {
            "curves": _curves_figure(data, cfg, regime),
            "geometry": _geometry_figure(data, cfg, regime),
        }
    )
    return Outcome(scored_claims, figures, numbers, cfg)


def predicted_collapse(ds, trajectory, regime: Regime, horizon: float) -> float | None:
    """The mod collapse ``t_c`` the plateau flow predicts from the run's initial weights
    (`second_escape.predict_collapse`, a law: the data and the init), in epochs; ``None``
    outside GD, whose gradient flow it is."""
    if regime.optimizer != "gd":
        return None
    problem = second_escape.plateau_problem(ds)
    W_E, W_U = np.asarray(trajectory.W_E[0]), np.asarray(trajectory.W_U[0])
    t_c = float(second_escape.predict_collapse(W_E, W_U, problem, horizon=horizon))
    return t_c if np.isfinite(t_c) else None


def _summary(d: dict) -> dict:
    return {
        "status": d["status"],
        "collapse_predicted": d.get("collapse_predicted"),
        "vocab_size": d.get("vocab_size"),
        "epochs": d["steps"].tolist(),
        "loss": d["loss"].tolist(),
        "accuracy": d["accuracy"].tolist(),
        "rho0": d["rho0"].tolist(),
        "rho0_method": d["rho0_method"],
        "mse_S_emb_vs_S_sig0": d["mse0"].tolist(),
        "mean_offdiag_S_emb": d["mean_offdiag_S_emb"].tolist(),
        "probe_epochs": d["probe_steps"].tolist(),
        "probe_heldout_corr": d["probe_corr"].tolist(),
        "probe_heldout_mse": d["probe_mse"].tolist(),
        "init_probe_heldout_corr": d["init_probe"][0],
        "init_probe_heldout_mse": d["init_probe"][1],
        "t_peak_rho0": int(d["steps"][np.argmax(d["rho0"])]),
        "t_peak_probe": int(d["probe_steps"][np.argmax(d["probe_corr"])]),
    }


def measured_from_summary(summary: dict) -> dict:
    """One run's measurement as `_summary` saved it, read back under `measure`'s names (arrays
    over the saved epochs): what the claims read."""
    return {
        "steps": np.asarray(summary["epochs"]),
        "loss": np.asarray(summary["loss"]),
        "accuracy": np.asarray(summary["accuracy"]),
        "rho0": np.asarray(summary["rho0"]),
        "rho0_method": summary["rho0_method"],
        "mse0": np.asarray(summary["mse_S_emb_vs_S_sig0"]),
        "mean_offdiag_S_emb": np.asarray(summary["mean_offdiag_S_emb"]),
        "probe_steps": np.asarray(summary["probe_epochs"]),
        "probe_corr": np.asarray(summary["probe_heldout_corr"]),
        "probe_mse": np.asarray(summary["probe_heldout_mse"]),
        "init_probe": (summary["init_probe_heldout_corr"], summary["init_probe_heldout_mse"]),
        "collapse_predicted": summary.get("collapse_predicted"),
    }


def saved_claims(numbers: dict, cfg: dict) -> list[Claim]:
    """The claims of a saved run, scored again from its ``numbers`` (`measured_from_summary`
    of each ``"task/tag"``) and ``cfg``."""
    data = {tuple(key.split("/")): measured_from_summary(s) for key, s in numbers.items()}
    return claims(data, cfg, regime_mod.parse(cfg["regime"]))


def claims(data: dict, cfg: dict, regime: Regime) -> list[Claim]:
    """The staircase claims (`staircase_claims`, one criterion each, shared with the flagship)."""
    N, name = cfg["N"], regime.name
    add, add_null = data[("add", "trained")], data[("add", "shuffled")]
    mod, mod_null = data[("mod", "trained")], data[("mod", "shuffled")]
    return [
        scoring.rho0_peak_claim(add, add_null, N, name),
        scoring.probe_claim(add, "add", name),
        scoring.peak_order_claim(add, add_null, "add", name),
        scoring.probe_claim(mod, "mod", name),
        scoring.peak_order_claim(mod, mod_null, "mod", name),
        scoring.collapse_claim(mod, N, name),
    ]


def _curves_figure(data: dict, cfg: dict, regime: Regime):
    title = (
        f"Fig. 3 (N={cfg['N']}, ReLU FFN d={cfg['d']}, $\\gamma$={cfg['gamma']:g}, seed 0; "
        f"{regime.label}): dotted vertical line: the run reaches {scoring.ACC_PHASE:.0%} accuracy "
        "(end of its early phase [R])"
    )
    fig, axes = plots.figure(len(TASKS), 4, panel=(4.0, 3.4), suptitle=title)
    train, null = plots.LINE_STYLE["training"], plots.LINE_STYLE["null"]
    for row, task in enumerate(TASKS):
        d, shuffled = data[(task, "trained")], data[(task, "shuffled")]
        x = d["steps"]
        method = "1−MSE" if d["rho0_method"] == "1-mse" else d["rho0_method"]
        axes[row, 0].plot(x, d["loss"], color="k", ls=train, label="trained")
        axes[row, 0].plot(x, shuffled["loss"], color="k", ls=null, label="null: labels shuffled")
        axes[row, 1].plot(x, d["accuracy"], color="k", ls=train, label="trained")
        axes[row, 1].plot(
            x, shuffled["accuracy"], color="k", ls=null, label="null: labels shuffled"
        )
        axes[row, 1].plot(
            x, d["mean_offdiag_S_emb"], color="C2", label="mean off-diagonal $S^{emb}$"
        )
        order0, order1 = plots.order_colour(0), plots.order_colour(1)
        axes[row, 2].plot(x, d["rho0"], color=order0, label=f"$\\rho_0$ ({method})")
        axes[row, 2].plot(
            x,
            shuffled["rho0"],
            color=order0,
            ls=null,
            label=f"$\\rho_0$ ({method}), labels shuffled",
        )
        probe = dict(color=order1, marker="o", ms=3)
        probe_corr = "probe $\\tilde S^{sig,(1)}$ held-out corr"
        axes[row, 2].plot(d["probe_steps"], d["probe_corr"], **probe, label=probe_corr)
        axes[row, 3].plot(x, d["mse0"], color=order0, label="MSE to $S^{sig,(0)}$")
        axes[row, 3].plot(d["probe_steps"], d["probe_mse"], **probe, label="probe held-out MSE")
        axes[row, 3].set_yscale("log")
        panels = (
            ("loss", plots.LOSS),
            ("training accuracy, mean $S^{emb}$", "accuracy, cosine"),
            ("alignment", plots.ALIGNMENT),
            ("MSE of off-diagonal similarities", "MSE (cosine$^2$)"),
        )
        phase_end = scoring.end_of_early_phase(d)
        for ax, (title, y) in zip(axes[row], panels, strict=True):
            plots.axis_labels(ax, plots.EPOCH, y, f"{task}: {title}")
            plots.reference(ax, x=phase_end)
            plots.legend(ax)
    return fig


def _geometry_figure(data: dict, cfg: dict, regime: Regime):
    early, late = cfg["early"], cfg["late"]
    title = (
        f"Fig. 3B: early ({early}) and late ({late}) geometry, ReLU FFN, N={cfg['N']}; "
        f"{regime.label}"
    )
    fig, axes = plots.figure(len(TASKS), 4, panel=(3.75, 3.6), suptitle=title)
    for row, task in enumerate(TASKS):
        d = data[(task, "trained")]
        alphas = d["alphas"]
        for j, t in enumerate((early, late)):
            g = d["geometry"][t]
            image = plots.heatmap(
                axes[row, 2 * j], g["S"], alphas, f"{task}: $S^{{emb}}$ epoch {t}"
            )
            plots.pca_scatter(
                axes[row, 2 * j + 1],
                np.asarray(g["pca"].scores),
                alphas,
                np.asarray(g["pca"].explained_variance_ratio),
                f"{task}: PCA of $w^E$, epoch {t}",
            )
    plots.colorbar(fig, image, axes, shrink=0.5, location="right")
    return fig
