"""Fig. 3: the staircase in one run, add and mod with N = 40 (SPEC §8 items 3 and 5).

Task 2 (SPEC §4.1) ``add`` (``y = x1 + x2``) and ``mod`` (``y = (x1 + x2 + 1) mod N``), ``N = 40``,
all 1600 pairs, 1200 epochs. Measured over training:

- loss and accuracy (Fig. 3A);
- ``rho_0(t)``: ``S^emb`` of the number tokens vs ``S^{sig,(0)}`` (``metrics.alignment``; Pearson
  for add; for mod ``S^{sig,(0)}`` is constant, so it is ``1 - MSE`` and labelled as such);
- the MSE between ``S^emb`` and ``S^{sig,(0)}`` over the off-diagonal pairs;
- the optimized first-order probe ``S~^{sig,(1)}`` (``metrics.probe_fit``: Adam lr 0.01, 300
  steps, 5-fold over pairs, held-out correlation and MSE) at 12 snapshots (Fig. 3C);
- early (epoch 100) and late (epoch 1100) geometry: heatmap and PCA (Fig. 3B).

Regime (theory/regimes.md, issue 10): the experiment takes a `regime.Regime`. The primary regime
is full-batch GD at lr 1, so the paper's epochs are gradient-flow times (epoch 100 is t = 100),
with a wide label vocabulary ``V = 2 V_min`` (add: 162, mod: 82), which switches on the common
order-0 drive that collapses the mod embeddings early (SPEC §6.3). The regime study also runs
full-batch and minibatch Adam (lr 1e-3) and ``V = V_min``. The horizon stays the paper's 1200
epochs in every regime.

Conventions ([GAP] choices, also in ``config``):

- Model: ReLU FFN (SPEC §5.1), ``d = 128``, init std ``d^{-gamma}``, ``gamma = 1.0``, seed 0,
  float32. ``full`` changes nothing: the default already has the paper's sizes.
- The probe's ``phi^{y;1}`` uses the number tokens for alpha, the occurring labels for nu and the
  input tokens for the context axis (as ``geometry.alignment_curves``); its restarts are the
  library default (4).
- Kinds: the rho_0 peak-and-decline (§8.3), both probe comparisons (§8.5) and the mod collapse
  (Fig. 3A/B) are the paper's claims ("paper"), judged by the [R] readings below where SPEC
  states them only qualitatively; ``t^peak_0 <= t^peak_1`` is SPEC's own [R] summary statistic,
  not a claim of the paper ("project").
- Thresholds ([R]: SPEC states these claims qualitatively): ``rho_0(t)`` "peaks near
  1 early and declines later" (add) means ``max_t rho_0 >= 0.9``, reached by epoch 400, and
  ``rho_0(1200) <= max - 0.05``. "After the early phase" means every probe snapshot from the
  first snapshot at which training accuracy reaches 50% (the last snapshot if it never does).
  For add, the probe's held-out Pearson must exceed ``rho_0`` there. For mod, ``rho_0`` is a
  ``1 - MSE`` score (the Pearson with a constant matrix is undefined), so the like-for-like test
  is the probe's held-out MSE below ``MSE(S^emb, S^{sig,(0)})`` there, with a positive probe
  correlation. ``t^peak_0 <= t^peak_1``: the epoch of the largest ``rho_0`` is no later than
  that of the largest probe correlation. Fig. 3A/3B for mod ("no progress early", "collapsed to
  one direction early"): accuracy at epoch 100 ≤ 2/N and mean off-diagonal ``S^emb`` at epoch
  100 ≥ 0.9.
- Nulls: a geometry at a checkpoint (the mod collapse) and the probe-versus-zero-order
  comparisons are scored on the untrained initialization (epoch 0 of the same run; the probe is
  fitted there too). The trajectory statistics (add's ``rho_0`` peak and decline, ``t^peak``)
  are scored on the same training on the label-shuffled data set (`regime.shuffled_labels`,
  seed 0), against the true data set's signatures.
- The former GELU diagnostic is dropped: it tested whether ReLU's scale-free gate kept the mod
  embeddings from collapsing, and the regime axis answers that (under GD with the wide vocabulary
  the ReLU run collapses).

``quick=True`` (regime study): 7 probe snapshots instead of 12 and no figures; N = 40, the 1200
epochs and the checkpoints are kept. (N = 20 would save less than half of the time, which
compilation dominates, and it changes the verdicts: at N = 20 the mod embeddings are collapsed at
epoch 100 and add's rho_0 declines by epoch 1200, at N = 40 neither.)
"""

from __future__ import annotations

import numpy as np

from ctx_staircase import geometry, metrics, plots, signatures
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments import regime as regime_mod
from ctx_staircase.experiments.common import train_configured
from ctx_staircase.experiments.regime import PRIMARY, Regime

TASKS = ("add", "mod")
EPOCHS = 1200
SNAPSHOTS = (0, 10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200)
PROBE_EPOCHS = (10, 25, 50, 100, 200, 300, 400, 600, 800, 1000, 1100, 1200)
QUICK_PROBE_EPOCHS = (25, 100, 300, 600, 1000, 1100, 1200)
EARLY, LATE = 100, 1100
ACC_PHASE = 0.5  # [R] the early phase ends when training accuracy first reaches this
PEAK_MIN, PEAK_BY, DECLINE = 0.9, 400, 0.05  # [R] thresholds for "peaks near 1 early, declines"
COLLAPSE = 0.9  # [R] mean off-diagonal S^emb of a collapsed geometry
ADAM_LR = 1e-3


def signatures_of(ds) -> dict:
    """The true data set's zero-order geometry and first-order signature (also used to score the
    label-shuffled null run): ``alphas`` (the number ids, ``[A]``), ``S_sig0`` ``[A, A]`` and
    ``phi1`` ``[A, V_nu, V_ctx]`` (SPEC eq. 8 at m = 1)."""
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
        t: {"S": S_emb[index[t]], "pca": metrics.pca(W[index[t]], k=2)} for t in (EARLY, LATE)
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


def run(full: bool = False, regime: Regime = PRIMARY, quick: bool = False) -> Outcome:
    cfg = dict(
        tasks=list(TASKS),
        N=40,
        model="ffn",
        d=128,
        activation="relu",
        gamma=1.0,
        seed=0,
        epochs=EPOCHS,
        adam_lr=ADAM_LR,
        snapshots=list(SNAPSHOTS),
        probe_epochs=list(QUICK_PROBE_EPOCHS if quick else PROBE_EPOCHS),
        probe="metrics.probe_fit: Adam lr 0.01, 300 steps, 5 folds over pairs, 4 restarts",
        probe_seed=0,
        early=EARLY,
        late=LATE,
        early_phase_ends_at_accuracy=ACC_PHASE,
        collapse_threshold=COLLAPSE,
        dtype="float32",
        null_checkpoint="the untrained initialization (epoch 0 of the same run)",
        null_trajectory="the same training on the label-shuffled data set (seed 0)",
        reduction="quick: 7 probe snapshots instead of 12, no figures"
        if quick
        else "none (the paper's sizes: N = 40, 1200 epochs)",
        **regime.describe(),
    )
    data: dict = {}
    for task in TASKS:
        ds = regime.make(task, N=cfg["N"])
        sig = signatures_of(ds)
        for tag, dataset in (("trained", ds), ("shuffled", regime_mod.shuffled_labels(ds, 0))):
            result = train_configured(
                dataset,
                regime.train_config(ds, epochs=EPOCHS, snapshots=SNAPSHOTS, adam_lr=ADAM_LR),
                cfg,
                [cfg["seed"]],
            )
            data[(task, tag)] = measure(sig, result.lane(0), regime, cfg)
            data[(task, tag)]["status"] = result.status[0]
        data[(task, "trained")]["vocab_size"] = int(ds.vocab_size)

    numbers = {f"{task}/{tag}": _summary(d) for (task, tag), d in data.items()}
    claims = _claims(data, cfg, regime)
    figures = (
        {}
        if quick
        else {
            "curves": _curves_figure(data, cfg, regime),
            "geometry": _geometry_figure(data, cfg, regime),
        }
    )
    return Outcome(claims, figures, numbers, cfg)


def _summary(d: dict) -> dict:
    return {
        "status": d["status"],
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


def _at(d: dict, key: str, step: int) -> float:
    return float(d[key][int(np.flatnonzero(d["steps"] == step)[0])])


def _curve(d: dict, key: str, steps) -> str:
    return ", ".join(f"{_at(d, key, int(t)):.3f}@{t}" for t in steps)


def _series(values, steps, digits: int = 3) -> str:
    return ", ".join(f"{v:.{digits}f}@{t}" for v, t in zip(values, steps, strict=True))


def _end_of_early_phase(d: dict) -> int:
    """First snapshot epoch with training accuracy ≥ ACC_PHASE (the last epoch if never)."""
    reached = np.flatnonzero(d["accuracy"] >= ACC_PHASE)
    return int(d["steps"][reached[0]] if reached.size else d["steps"][-1])


def _peaks(d: dict) -> tuple[int, int]:
    """``t^peak_0`` (largest rho_0) and ``t^peak_1`` (largest probe correlation)."""
    return int(d["steps"][np.argmax(d["rho0"])]), int(d["probe_steps"][np.argmax(d["probe_corr"])])


def _probe_claim(d: dict, task: str, regime: Regime) -> Claim:
    """§8.5: the first-order probe beats zero order after the early phase (null: at init)."""
    after = _end_of_early_phase(d)
    late = d["probe_steps"] >= after
    late_steps = d["probe_steps"][late]
    rho0_late = np.array([_at(d, "rho0", int(t)) for t in late_steps])
    mse0_late = np.array([_at(d, "mse0", int(t)) for t in late_steps])
    corr_late, mse_late = d["probe_corr"][late], d["probe_mse"][late]
    init_corr, init_mse = d["init_probe"]
    init_rho0, init_mse0 = float(d["rho0"][0]), float(d["mse0"][0])
    phase = f"early phase (accuracy ≥ {ACC_PHASE:.0%}) [R]"
    if task == "add":
        margin = corr_late - rho0_late
        ok = bool(np.all(margin > 0))
        null_ok = init_corr - init_rho0 > 0
        return Claim(
            "§8.5",
            "add: first-order probe beats rho_0 after the early phase",
            f"min over epochs ≥ {after} of probe corr − rho_0 = {margin.min():+.3f} "
            f"(probe {corr_late.min():.3f}..{corr_late.max():.3f}, rho_0 "
            f"{rho0_late.min():.3f}..{rho0_late.max():.3f}); probe MSE "
            f"{mse_late.max():.4f} vs S^sig,(0) MSE ≥ {mse0_late.min():.4f}",
            f"held-out probe Pearson > rho_0 (Pearson) at every probe epoch after the {phase}",
            ok,
            ""
            if ok
            else "probe corr by epoch: "
            + _series(d["probe_corr"], d["probe_steps"])
            + "; rho_0: "
            + _curve(d, "rho0", d["probe_steps"]),
            kind="paper",
            regime=regime.name,
            null=f"init: probe corr {init_corr:.3f} − rho_0 {init_rho0:.3f} = "
            f"{init_corr - init_rho0:+.3f}",
            null_passed=bool(null_ok),
        )
    ok = bool(np.all(mse_late < mse0_late) and np.all(corr_late > 0))
    null_ok = bool(init_mse < init_mse0 and init_corr > 0)
    notes = []
    if null_ok:
        notes.append(
            f"vacuous: at init (mean S^emb {d['mean_offdiag_S_emb'][0]:+.3f}, nothing collapsed) "
            f"the constant S^sig,(0) = 1 is far from every pair (MSE {init_mse0:.3f}) while the "
            f"probe fits the small random cosines with MSE {init_mse:.4f} and corr "
            f"{init_corr:+.3f}; the criterion then holds without any first-order structure. "
            f"The trained run's probe corr ({corr_late.min():.3f} at epochs ≥ {after}) is far "
            "above its init value, but 'corr > 0 and MSE below the constant's' does not "
            "separate the two"
        )
    if not ok:
        notes.append(
            "probe corr by epoch: "
            + _series(d["probe_corr"], d["probe_steps"])
            + "; probe MSE: "
            + _series(d["probe_mse"], d["probe_steps"], 4)
            + "; MSE to S^sig,(0): "
            + _curve(d, "mse0", d["probe_steps"])
        )
    return Claim(
        "§8.5",
        "mod: first-order probe beats zero-order geometry after the early phase",
        f"epochs ≥ {after}: probe held-out MSE ≤ {mse_late.max():.4f} vs "
        f"MSE(S^emb, S^sig,(0)) ≥ {mse0_late.min():.4f}; "
        f"probe corr {corr_late.min():.3f}..{corr_late.max():.3f} "
        f"vs rho_0 = 1−MSE {rho0_late.min():.3f}..{rho0_late.max():.3f}",
        f"probe MSE < MSE to S^sig,(0) and probe corr > 0 at every probe epoch after the {phase} "
        "(S^sig,(0) constant: Pearson undefined)",
        ok,
        "; ".join(notes),
        kind="paper",
        regime=regime.name,
        null=f"init: probe MSE {init_mse:.4f} vs MSE to S^sig,(0) {init_mse0:.3f}, probe corr "
        f"{init_corr:+.3f}",
        null_passed=null_ok,
    )


def _peak_claim(d: dict, null: dict, task: str, regime: Regime) -> Claim:
    t0, t1 = _peaks(d)
    n0, n1 = _peaks(null)
    return Claim(
        "§8.5 [R]",
        f"{task}: t^peak_0 ≤ t^peak_1",
        f"t^peak_0 = {t0} (rho_0 {d['rho0_method']}), t^peak_1 = {t1} (probe corr)",
        "t^peak_0 ≤ t^peak_1",
        t0 <= t1,
        _peak_note(d, task, t0 <= t1, n0 <= n1),
        kind="project",
        regime=regime.name,
        null=f"shuffled labels: t^peak_0 = {n0}, t^peak_1 = {n1}",
        null_passed=n0 <= n1,
    )


def _peak_note(d: dict, task: str, ok: bool, null_ok: bool) -> str:
    notes = ["rho_0 is 1−MSE, near-flat; its argmax is weakly defined"] if task == "mod" else []
    if ok and null_ok:
        notes.append(
            "vacuous: the label-shuffled run, which has no input–label relation to learn, orders "
            "its peaks the same way, so the ordering alone does not show a zero-order-then-"
            "first-order staircase"
        )
    if not ok:
        late = d["steps"] >= PEAK_BY
        late_probe = d["probe_steps"] >= PEAK_BY
        notes.append(
            f"from epoch {PEAK_BY} on rho_0 varies by {np.ptp(d['rho0'][late]):.3f} (max − min) "
            f"and the probe corr by {np.ptp(d['probe_corr'][late_probe]):.3f}"
        )
        rho0 = [_at(d, "rho0", int(t)) for t in d["probe_steps"]]
        notes.append(
            "at the probe epochs "
            + ", ".join(str(int(t)) for t in d["probe_steps"])
            + ": rho_0 "
            + ", ".join(f"{v:.3f}" for v in rho0)
            + "; probe corr "
            + ", ".join(f"{v:.3f}" for v in d["probe_corr"])
        )
    return "; ".join(notes)


def _rho0_peak(d: dict) -> tuple[float, int, float, bool]:
    i = int(np.argmax(d["rho0"]))
    peak, t_peak, final = float(d["rho0"][i]), int(d["steps"][i]), float(d["rho0"][-1])
    return peak, t_peak, final, peak >= PEAK_MIN and t_peak <= PEAK_BY and final <= peak - DECLINE


def _collapse(d: dict, N: int) -> tuple[float, float, bool]:
    acc, mean_S = _at(d, "accuracy", EARLY), _at(d, "mean_offdiag_S_emb", EARLY)
    return acc, mean_S, acc <= 2 / N and mean_S >= COLLAPSE


def _claims(data: dict, cfg: dict, regime: Regime) -> list[Claim]:
    N = cfg["N"]
    add, add_null = data[("add", "trained")], data[("add", "shuffled")]
    mod, mod_null = data[("mod", "trained")], data[("mod", "shuffled")]
    peak, t_peak, final, ok = _rho0_peak(add)
    n_peak, n_t, n_final, n_ok = _rho0_peak(add_null)
    claims = [
        Claim(
            "§8.3",
            f"add: rho_0(t) peaks near 1 early and declines later (N={N})",
            f"peak {peak:.3f} at epoch {t_peak}; rho_0({EPOCHS}) = {final:.3f} "
            f"(drop {peak - final:.3f})",
            f"peak ≥ {PEAK_MIN} by epoch {PEAK_BY} and rho_0({EPOCHS}) ≤ peak − {DECLINE} [R]",
            ok,
            ""
            if ok
            else "rho_0 by epoch: "
            + _curve(add, "rho0", add["steps"])
            + f"; accuracy at epoch {EPOCHS} {float(add['accuracy'][-1]):.3f}, loss "
            f"{float(add['loss'][-1]):.3f}: the run is still learning the task at the end of "
            "the paper's horizon, and rho_0 has not left its plateau",
            kind="paper",
            regime=regime.name,
            null=f"shuffled labels: peak {n_peak:.3f} at epoch {n_t}, rho_0({EPOCHS}) "
            f"{n_final:.3f}",
            null_passed=n_ok,
        ),
        _probe_claim(add, "add", regime),
        _peak_claim(add, add_null, "add", regime),
        _probe_claim(mod, "mod", regime),
        _peak_claim(mod, mod_null, "mod", regime),
    ]
    acc, mean_S, ok = _collapse(mod, N)
    init_acc, init_S = float(mod["accuracy"][0]), float(mod["mean_offdiag_S_emb"][0])
    null_ok = init_acc <= 2 / N and init_S >= COLLAPSE
    note = ""
    if not ok:
        shown = (25, 50, 75, 100, 150, 200, 300, 400, 600, 800, 1000, 1200)
        note = (
            "mean off-diagonal S^emb by epoch: "
            + _curve(mod, "mean_offdiag_S_emb", shown)
            + "; accuracy: "
            + _curve(mod, "accuracy", shown)
            + f" (V = {mod['vocab_size']}). The collapse comes, but after epoch {EARLY}; the "
            "label-shuffled run collapses the same way (mean S^emb "
            + _curve(mod_null, "mean_offdiag_S_emb", (EARLY, 150, 200))
            + "), as the label-independent order-0 drive of SPEC §6.3 predicts"
        )
    claims.append(
        Claim(
            "Fig. 3A/B [R]",
            "mod: no progress and one collapsed direction early",
            f"epoch {EARLY}: accuracy {acc:.3f}, mean off-diagonal S^emb {mean_S:.3f}",
            f"accuracy ≤ 2/N = {2 / N:.3f} and mean S^emb ≥ {COLLAPSE}",
            ok,
            note,
            kind="paper",
            regime=regime.name,
            null=f"init: accuracy {init_acc:.3f}, mean S^emb {init_S:.3f}",
            null_passed=null_ok,
        )
    )
    return claims


def _curves_figure(data: dict, cfg: dict, regime: Regime):
    title = (
        f"Fig. 3 (N={cfg['N']}, ReLU FFN d={cfg['d']}, $\\gamma$={cfg['gamma']:g}, seed 0; "
        f"{regime.label}): dotted vertical line: the run reaches {ACC_PHASE:.0%} accuracy "
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
        phase_end = _end_of_early_phase(d)
        for ax, (title, y) in zip(axes[row], panels, strict=True):
            plots.axis_labels(ax, plots.EPOCH, y, f"{task}: {title}")
            plots.reference(ax, x=phase_end)
            plots.legend(ax)
    return fig


def _geometry_figure(data: dict, cfg: dict, regime: Regime):
    title = (
        f"Fig. 3B: early ({EARLY}) and late ({LATE}) geometry, ReLU FFN, N={cfg['N']}; "
        f"{regime.label}"
    )
    fig, axes = plots.figure(len(TASKS), 4, panel=(3.75, 3.6), suptitle=title)
    for row, task in enumerate(TASKS):
        d = data[(task, "trained")]
        alphas = d["alphas"]
        for j, t in enumerate((EARLY, LATE)):
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
