"""Fig. 8: structure is not sufficient (A–C), and signature embeddings speed learning (D).

The paper's Fig. 8A–C and 8D (claims §8.10 and §8.11). Task ``mod`` (L = 2, N = 40, labels
``(x1 + x2 + 1) mod N``), all 1600 pairs, 1000 epochs.

(A–C) ReLU FFN (paper §4.1) vs attention-only (paper §5.1): final training accuracy, the
    first-order structure of the attention model's embeddings (best Fourier component
    ``rho_{(1),k}``, k = 1..N/2, and the held-out first-order probe, paper eq. 7), and the PCA of
    both models' final number embeddings.
(D) FFN with (i) a fixed first-order-signature embedding ``w_alpha = lambda R phi^{y;1}_alpha v``,
    (ii) a trainable embedding, (iii) a fixed random embedding ``w_alpha = lambda v_alpha``;
    (i) and (iii) train only the scalar lambda and W_U (``models.FixedEmbeddingFFN``, model name
    ``"ffn_fixed"``). Arm (ii) is the FFN run of (A–C) (the same model, data and training).

Conventions (theory/regimes.md): the run takes a `regime.Regime`; the primary regime (the
headline) is full-batch GD at lr 1 (an epoch is one step and one unit of gradient-flow time) with a
wide label vocabulary ``V = 2 V_min = 82``. d = 128 (d_k = 64), seed 0; the Adam regimes use
lr 1e-3. The FFN uses gamma = 1.0; the attention-only model gamma = 0.75, the primary gamma of
``fig6_attention``. The optimizer decides Fig. 8D's order (under full-batch Adam every embedding
coordinate of the trainable arm moves at rate lr from the first step, while the fixed arms move
only W_U and one scalar): the old Adam-vs-GD pair of this module is now the regime study.

Fig. 8D construction ([GAP] choices, documented):

- ``phi^{y;1}_alpha`` is the exact order-1 label signature over labels nu in the whole
  vocabulary and context tokens beta in X = {1..40}: ``[V, |X|]``. ``v ~ N(0, I_|X|)`` and
  ``R ~ N(0, 1)^{d x V}`` are drawn once (NumPy seed 0), so ``E_alpha = R (phi_alpha v)`` for the
  40 number tokens; the other rows (labels only, or unused ids) are 0.
- (iii) ``E_alpha = v_alpha`` with ``v_alpha ~ N(0, I_d)`` for the numbers, 0 otherwise.
- Both fixed matrices are rescaled so that their number rows have mean norm 1, and lambda starts
  at 1: the two fixed arms have the same scale, and only the direction structure differs. W_U is
  gamma-initialized (gamma = 1.0) and identical in all three arms (same seed).
- ``FrozenArray`` wraps E so it passes through ``sweep.train_sweep`` (hashable kwargs) and stays
  out of the trained state.
- Measures: the first epoch with training accuracy >= 95% (snapshots every 10 epochs), and the
  loss at the early epoch 100 (10% of training).

Null controls (theory/regimes.md): the accuracy and speed claims are rerun on a label-shuffled
data set, Fig. 8D's arms with the signature recomputed on the shuffled data (the same
construction); the attention model's "low accuracy despite structure" is scored on its untrained
initialization. The shuffle permutes the labels across the 820 *unordered* pairs, so ``(a, b)``
and ``(b, a)`` keep one shared label, as they have in ``mod``
(`regime.shuffled_labels(..., unordered=True)`). The FFN sees its two tokens through
``w_a + w_b``, so a per-sample shuffle caps its accuracy near 52% (one of the two labels of each
unordered pair), which it reaches under Adam; that cap, not a failure to memorize, would keep
the null from reaching 100%.

``quick`` (the regime study): snapshots every 25 epochs instead of 10; otherwise the paper sizes.
``tiny`` (a smoke run; it wins over ``quick``): 100 epochs, snapshots every 5, the early epoch
at 10 (10% of training); the data as in the paper.

Findings while setting this up (primary regime, seed 0; not rerun here): the paper's 1000 epochs
end inside the FFN's plateau under GD lr 1 (train accuracy 0.027 / 0.054 / 0.122 / 0.204 at
epochs 250 / 500 / 750 / 1000). Run on to 5000 epochs, it reaches 92.6% at epoch 1500 and 99.9%
at 1750, while the same FFN on per-sample shuffled labels saturates at 52.4% (epoch 2500 on,
its ceiling). No theory
here predicts that plateau (eq. A5 is the attention model's, t* ≈ 320 epochs at gamma = 0.75), so
the horizon stays the paper's (theory/regimes.md R1).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ctx_staircase import metrics, models, plots, signatures, sweep
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments.common import failure_class, joined_outcome, scored
from ctx_staircase.experiments.regime import PRIMARY, Regime, shuffled_labels

#: [R] thresholds: the paper says "about 100%", "stays low" and "structured" qualitatively.
FFN_ACCURACY = 0.99
ATTENTION_LOW = 0.5
STRUCTURED = 0.5
ARMS = {
    "i": "fixed λRφ^{y;1}v",
    "ii": "trainable",
    "iii": "fixed random λv",
}
#: The same labels in Matplotlib mathtext, for figures.
ARM_LABELS = {
    "i": r"fixed $\lambda R\varphi^{y;1}_\alpha v$",
    "ii": "trainable",
    "iii": r"fixed random $\lambda v_\alpha$",
}


#: The ``tiny`` smoke run: the paper's data, a tenth of its epochs (the early epoch still at 10%,
#: the snapshots denser so that the quarter epochs of the notes are snapshots).
TINY = dict(epochs=100, snapshot_every=5, early_epoch=10)


def run(
    full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> Outcome:
    config = run_config(full=full, regime=regime, quick=quick, tiny=tiny)
    ds = regime.make("mod", N=config["N"])
    null_ds = shuffled_labels(ds, seed=0, unordered=True)
    runs = _train(ds, null_ds, config, regime)
    parts = {
        "structure": _structure(ds, runs, config, regime),
        "fixed_embeddings": _fixed_embeddings(ds, null_ds, runs, config, regime),
    }
    return joined_outcome(parts, config, regime.name)


def run_config(
    *, full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> dict:
    """The configuration `run` records for these options (``full`` changes nothing)."""
    quick = quick and not tiny
    return dict(
        task="mod",
        N=40,
        L=2,
        epochs=TINY["epochs"] if tiny else 1000,
        snapshot_every=TINY["snapshot_every"] if tiny else 25 if quick else 10,
        d=128,
        d_k=64,
        seed=0,
        gamma_ffn=1.0,
        gamma_attention=0.75,
        adam_lr=1e-3,
        fixed_row_norm=1.0,
        lambda_init=1.0,
        early_epoch=TINY["early_epoch"] if tiny else 100,
        target_accuracy=0.95,
        null="labels shuffled across the unordered pairs (seed 0)",
        note=(
            f"tiny: {TINY['epochs']} epochs (early epoch {TINY['early_epoch']}, snapshots every "
            f"{TINY['snapshot_every']}), all pairs"
            if tiny
            else "paper sizes (1000 epochs, all pairs); full=True changes nothing"
            + ("; quick: snapshots every 25 epochs" if quick else "")
        ),
        **regime.describe(),
    )


def _train(ds, null_ds, config: dict, regime: Regime) -> dict:
    """Every run of the experiment, two at a time (one per CPU core): name -> (trajectory,
    status, data set).

    ``ffn`` is also arm (ii); ``*_null`` are the runs on the label-shuffled data.
    """
    epochs = config["epochs"]
    snapshots = range(0, epochs + 1, config["snapshot_every"])
    train_config = regime.train_config(
        ds, epochs=epochs, snapshots=snapshots, adam_lr=config["adam_lr"]
    )
    ffn = dict(gammas=(config["gamma_ffn"],), seeds=(config["seed"],), d=config["d"])
    specs = {
        "attention": (
            "attention",
            ds,
            dict(
                gammas=(config["gamma_attention"],),
                seeds=(config["seed"],),
                d=config["d"],
                d_k=config["d_k"],
            ),
        )
    }
    for suffix, data in (("", ds), ("_null", null_ds)):
        E_sig, E_rand = signature_embedding(data, config["d"], seed=config["seed"])
        specs["ffn" + suffix] = ("ffn", data, ffn)
        for arm, E in (("i", E_sig), ("iii", E_rand)):
            fixed = models.FrozenArray(E * config["fixed_row_norm"])
            specs[arm + suffix] = (
                "ffn_fixed",
                data,
                dict(embedding=fixed, scale=config["lambda_init"], **ffn),
            )

    def one(spec):
        model, data, kwargs = spec
        result = sweep.train_sweep(model, data, train_config, **kwargs)
        return result.lane(0), result.status[0], data

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(specs, pool.map(one, specs.values()), strict=True))


# --------------------------------------------------------------------------------------------
# (A–C) FFN vs attention-only


def _structure(ds, runs: dict, config: dict, regime: Regime):
    numbers = _structure_measures(ds, runs, config, regime)
    figure = _structure_figure(numbers, ds.groups["numbers"], runs, config, regime)
    for entry in numbers.values():
        entry.pop("_S", None)
        entry.pop("_pca", None)
    return _structure_claims(numbers, config), figure, numbers


def _structure_measures(ds, runs: dict, config: dict, regime: Regime) -> dict:
    """Per run (``ffn``, ``attention``, ``ffn_null``): accuracy and loss, and for the first two
    the embeddings' best first-order frequency ρ_(1),k at init and at the end, the held-out
    first-order probe and the final ``S^emb`` and PCA (``_S``, ``_pca``, for the figure)."""
    numbers_ids = ds.groups["numbers"]
    labels = np.unique(ds.labels)
    ks = np.arange(1, numbers_ids.size // 2 + 1)
    within = signatures.label_signature(
        ds, 1, alphas=numbers_ids, labels=labels, context=numbers_ids
    )
    numbers = {}
    for name in ("ffn", "attention", "ffn_null"):
        traj, status, _ = runs[name]
        epochs = regime.epochs_of(traj.steps)
        entry = {
            "status": status,
            "final_accuracy": float(traj.accuracy[-1]),
            "final_loss": float(traj.loss[-1]),
            "max_accuracy": float(np.max(traj.accuracy)),
            "epochs_to_95": first_epoch(epochs, traj.accuracy, config["target_accuracy"]),
            "accuracy_curve": np.asarray(traj.accuracy).round(4).tolist(),
            "loss_curve": np.asarray(traj.loss).round(4).tolist(),
        }
        if name != "ffn_null":  # the loop leaves W, S and spectrum at the final snapshot
            for when, index in (("init", 0), ("final", -1)):
                W = np.asarray(traj.W_E[index])[numbers_ids]
                S = np.asarray(metrics.cosine_matrix(W))
                spectrum = np.asarray(metrics.frequency_alignment(within, S, ks))
                entry[f"rho1_kstar_{when}"] = float(spectrum.max())
                entry[f"k_star_{when}"] = int(ks[np.argmax(spectrum)])
                entry[f"offdiag_cos_mean_{when}"] = float(metrics.upper_triangle(S).mean())
            entry["rho1_spectrum_final"] = spectrum.round(4).tolist()
            entry["probe_heldout_corr"] = float(
                metrics.probe_fit(within, S, seed=config["seed"]).heldout_corr
            )
            pca = metrics.pca(W, k=2)
            entry["pca_explained"] = np.asarray(pca.explained_variance_ratio).round(4).tolist()
            entry["accuracy_init"] = float(traj.accuracy[0])
            entry["_S"], entry["_pca"] = S, pca
        numbers[name] = entry
    null_ds = runs["ffn_null"][2]
    S0 = metrics.cosine_matrix(
        signatures.label_signature(null_ds, 0, alphas=numbers_ids, labels=np.unique(null_ds.labels))
    )
    upper = np.asarray(metrics.upper_triangle(S0))
    numbers["ffn_null"]["sig0_offdiag_range"] = [float(upper.min()), float(upper.max())]
    return numbers


def _structure_claims(numbers: dict, config: dict) -> list[Claim]:
    """The two §8.10 claims from the (saved) measures of `_structure_measures`."""
    ffn, attention, null = numbers["ffn"], numbers["attention"], numbers["ffn_null"]
    return [
        Claim(
            "§8.10",
            "mod (L=2, N=40): the FFN reaches about 100% training accuracy",
            f"FFN final train accuracy {ffn['final_accuracy']:.4f} (95% at epoch "
            f"{_reach_text(ffn['epochs_to_95'])}), loss {ffn['final_loss']:.4f}",
            f"≥ {FFN_ACCURACY} [about 100%]",
            note=_ffn_note(ffn, null, config),
            kind="paper",
            failure=failure_class(ffn["accuracy_curve"]),
            null=f"shuffled labels: final accuracy {null['final_accuracy']:.4f}",
            **scored(
                lambda accuracy: accuracy >= FFN_ACCURACY,
                ffn["final_accuracy"],
                null["final_accuracy"],
            ),
        ),
        Claim(
            "§8.10",
            "the attention-only model stays low despite structured embeddings",
            f"attention final train accuracy {attention['final_accuracy']:.4f} (max "
            f"{attention['max_accuracy']:.4f}); its embeddings: best ρ_(1),k "
            f"{attention['rho1_kstar_final']:.3f} at k={attention['k_star_final']}, held-out "
            f"first-order probe {attention['probe_heldout_corr']:.3f}",
            f"accuracy ≤ {ATTENTION_LOW} and best ρ_(1),k ≥ {STRUCTURED} [R]",
            note=_attention_note(attention, ffn, config),
            kind="paper",
            null=f"init: accuracy {attention['accuracy_init']:.4f}, best ρ_(1),k "
            f"{attention['rho1_kstar_init']:.3f}",
            **scored(
                lambda measured: measured[0] <= ATTENTION_LOW and measured[1] >= STRUCTURED,
                (attention["final_accuracy"], attention["rho1_kstar_final"]),
                (attention["accuracy_init"], attention["rho1_kstar_init"]),
            ),
        ),
    ]


def _ffn_note(ffn: dict, null: dict, config: dict) -> str:
    note = (
        f"ReLU FFN, γ={config['gamma_ffn']}. Null: the same FFN on shuffled labels reaches "
        f"{null['final_accuracy']:.4f} (max {null['max_accuracy']:.4f}, 95% at "
        f"{_reach_text(null['epochs_to_95'])})."
    )
    if null["final_accuracy"] > ffn["final_accuracy"]:
        note += (
            " The shuffled labels are learned faster than mod: shuffling makes the zero-order "
            "signature token-dependent (S^{sig,(0)} off-diagonals "
            f"{null['sig0_offdiag_range'][0]:.3f}..{null['sig0_offdiag_range'][1]:.3f}"
            "), while mod's is constant (≡ 1), the Fig. 9 mechanism."
        )
    quarters = [config["epochs"] * q // 4 for q in (1, 2, 3)]
    if null["final_accuracy"] >= FFN_ACCURACY:
        note += (
            " Vacuous as stated: the 2-token FFN memorizes the 820 unordered pairs whatever "
            "their labels, so reaching 100% shows capacity, not that mod's structure was learned."
        )
    elif ffn["final_accuracy"] < FFN_ACCURACY:
        note += (
            f" Why it misses: accuracy {ffn['final_accuracy']:.4f} after {config['epochs']} "
            f"epochs (loss {ffn['final_loss']:.4f}; the curve at epochs "
            + "/".join(str(e) for e in quarters)
            + ": "
            + "/".join(f"{ffn['accuracy_curve'][_index(config, e)]:.3f}" for e in quarters)
            + ")."
        )
    return note


def _attention_note(attention: dict, ffn: dict, config: dict) -> str:
    note = (
        f"attention-only γ={config['gamma_attention']} ({attention['status']}); mean off-diagonal "
        f"cosine {attention['offdiag_cos_mean_init']:.3f} → "
        f"{attention['offdiag_cos_mean_final']:.3f}; FFN embeddings for comparison: best "
        f"ρ_(1),k {ffn['rho1_kstar_final']:.3f} at k={ffn['k_star_final']}, probe "
        f"{ffn['probe_heldout_corr']:.3f}."
    )
    if attention["final_accuracy"] <= ATTENTION_LOW and attention["rho1_kstar_final"] < STRUCTURED:
        note += (
            f" Why it misses: the accuracy stays low (loss {attention['final_loss']:.3f} at the "
            "end), but the embeddings carry no first-order structure: best ρ_(1),k "
            f"{attention['rho1_kstar_final']:.3f} (init {attention['rho1_kstar_init']:.3f})."
        )
    return note


def _structure_figure(numbers, ids, runs, config, regime):
    title = (
        f"mod (N=40): FFN $\\gamma$={config['gamma_ffn']} vs attention-only "
        f"$\\gamma$={config['gamma_attention']}, d=128, {regime.label}, {config['epochs']} epochs"
    )
    fig, axes = plots.figure(1, 5, panel=(4.2, 4.2), suptitle=title)
    ax = axes[0]
    for name, colour, role in (
        ("ffn", "C0", "training"),
        ("attention", "C3", "training"),
        ("ffn_null", "C0", "null"),
    ):
        epochs = regime.epochs_of(runs[name][0].steps)
        label = "ffn, shuffled labels (null)" if name == "ffn_null" else name
        style = plots.LINE_STYLE[role]
        ax.plot(epochs, numbers[name]["accuracy_curve"], color=colour, ls=style, label=label)
    plots.reference(ax, y=1 / config["N"], label="chance 1/N")
    plots.axis_labels(ax, plots.EPOCH, plots.ACCURACY, "A: mod N=40, training accuracy")
    plots.legend(ax)
    for column, name in ((1, "ffn"), (2, "attention")):
        pca = numbers[name]["_pca"]
        plots.pca_scatter(
            axes[column],
            np.asarray(pca.scores),
            ids,
            np.asarray(pca.explained_variance_ratio),
            f"{'B' if name == 'ffn' else 'C'}: PCA of final {name} embeddings",
        )
    image = plots.heatmap(axes[3], numbers["ffn"]["_S"], ids, "FFN $S^{emb}$, final")
    plots.heatmap(
        axes[4],
        numbers["attention"]["_S"],
        ids,
        f"attention $S^{{emb}}$, final (best k={numbers['attention']['k_star_final']}, "
        f"$\\rho$={numbers['attention']['rho1_kstar_final']:.2f})",
    )
    plots.colorbar(fig, image, axes[3:])
    return fig


# --------------------------------------------------------------------------------------------
# (D) fixed vs trainable embeddings


def signature_embedding(ds, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The two fixed matrices of Fig. 8D, ``[V, d]`` each, number rows of mean norm 1.

    (i) ``E_alpha = R phi^{y;1}_alpha v`` and (iii) ``E_alpha = v_alpha`` (module docstring).
    """
    ids = ds.groups["numbers"]
    V = ds.vocab_size
    rng = np.random.default_rng(seed)
    phi1 = signatures.label_signature(ds, 1, alphas=ids, labels=np.arange(V), context=ids)
    R = rng.normal(size=(d, V))
    v = rng.normal(size=ids.size)
    signature = np.zeros((V, d))
    signature[ids] = (phi1 @ v) @ R.T
    random = np.zeros((V, d))
    random[ids] = rng.normal(size=(ids.size, d))
    return _unit_mean_norm(signature, ids), _unit_mean_norm(random, ids)


def _unit_mean_norm(E: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return E / np.linalg.norm(E[ids], axis=1).mean()


def _fixed_embeddings(ds, null_ds, runs: dict, config: dict, regime: Regime):
    E_sig, E_rand = signature_embedding(ds, config["d"], seed=config["seed"])
    ids = ds.groups["numbers"]
    numbers = {
        "signature_embedding_cos_offdiag_mean": float(
            metrics.upper_triangle(metrics.cosine_matrix(E_sig[ids])).mean()
        ),
        "random_embedding_cos_offdiag_mean": float(
            metrics.upper_triangle(metrics.cosine_matrix(E_rand[ids])).mean()
        ),
    }
    early = _index(config, config["early_epoch"])
    for data, suffix in (("trained", ""), ("null", "_null")):
        result = {}
        for arm, name in (("i", "i"), ("ii", "ffn"), ("iii", "iii")):
            traj, status, _ = runs[name + suffix]
            entry = {
                "status": status,
                "epochs_to_95": first_epoch(
                    regime.epochs_of(traj.steps), traj.accuracy, config["target_accuracy"]
                ),
                "loss_early": float(traj.loss[early]),
                "accuracy_early": float(traj.accuracy[early]),
                "final_accuracy": float(traj.accuracy[-1]),
                "final_loss": float(traj.loss[-1]),
                "loss_curve": np.asarray(traj.loss).round(5).tolist(),
                "accuracy_curve": np.asarray(traj.accuracy).round(4).tolist(),
            }
            if arm != "ii":  # λ(t) = mean number-row norm / its initial value (1)
                norms = np.asarray(traj.group_norms["numbers"])
                entry["lambda_final"] = float(norms[-1] / config["fixed_row_norm"])
            result[arm] = entry
        numbers[data] = result
    claims = _order_claims(numbers["trained"], numbers["null"], config)
    epochs = regime.epochs_of(runs["ffn"][0].steps)
    return claims, fixed_figure(numbers, epochs, config, regime), numbers


def _reach(res: dict) -> dict:
    """Epochs to 95% per arm, never reached as ∞."""
    return {
        arm: np.inf if res[arm]["epochs_to_95"] is None else res[arm]["epochs_to_95"]
        for arm in ARMS
    }


def _early_loss(res: dict) -> dict:
    return {arm: res[arm]["loss_early"] for arm in ARMS}


def _first(res: dict) -> bool:
    """§8.11: the signature arm (i) reaches 95% before the trainable one (ii)."""
    reach = _reach(res)
    return bool(reach["i"] < reach["ii"])


def _early_order(res: dict) -> bool:
    """[R] 'at least early': loss (i) < (iii) < (ii) at the early epoch."""
    loss = _early_loss(res)
    return bool(loss["i"] < loss["iii"] < loss["ii"])


def _order_claims(result: dict, null: dict, config: dict) -> list[Claim]:
    """The two §8.11 claims on the three arms (``result``) and on the shuffled labels
    (``null``), each arm's ``epochs_to_95`` and ``loss_early``."""
    early = config["early_epoch"]
    lambdas = (
        f"Fixed arms train only λ and W_U from mean row norm 1, λ(0) = 1; λ(end): (i) "
        f"{result['i']['lambda_final']:.2f}, (iii) {result['iii']['lambda_final']:.2f}. Final "
        "accuracy: "
        + ", ".join(f"({arm}) {result[arm]['final_accuracy']:.3f}" for arm in ARMS)
        + "."
    )

    def reach_text(res):
        return ", ".join(f"({arm}) {_reach_text(res[arm]['epochs_to_95'])}" for arm in ARMS)

    def loss_text(res):
        return ", ".join(f"({arm}) {_early_loss(res)[arm]:.4f}" for arm in ("i", "iii", "ii"))

    return [
        Claim(
            "§8.11",
            "fixed signature embedding (i) converges faster than the trainable one (ii)",
            f"epochs to 95%: {reach_text(result)}",
            "epochs to 95%: (i) < (ii) (never reached counts as ∞)",
            note=_first_note(result, null, lambdas),
            kind="paper",
            null=f"shuffled labels: epochs to 95% {reach_text(null)}",
            **scored(_first, result, null),
        ),
        Claim(
            "§8.11",
            "at least early: fixed λRφv (i) < fixed random (iii) < trainable (ii)",
            f"loss at epoch {early}: {loss_text(result)}",
            f"loss at epoch {early} (10% of training): (i) < (iii) < (ii) [R definition of "
            "'at least early']",
            note=_early_note(result, null, lambdas, early),
            kind="project",
            null=f"shuffled labels: loss at epoch {early} {loss_text(null)}",
            **scored(_early_order, result, null),
        ),
    ]


def _first_note(result: dict, null: dict, lambdas: str) -> str:
    reach = _reach(result)
    strict = reach["i"] < reach["iii"] < reach["ii"]
    note = (
        f"strict epochs-to-95% order (i) < (iii) < (ii): {'holds' if strict else 'fails'}. "
        + lambdas
    )
    if not _first(result):
        note += (
            " Why it misses: the trainable arm (ii) reaches 95% at "
            f"{_reach_text(result['ii']['epochs_to_95'])}, the signature arm (i) at "
            f"{_reach_text(result['i']['epochs_to_95'])} (final loss (i) "
            f"{result['i']['final_loss']:.3f}, (ii) {result['ii']['final_loss']:.3f})."
        )
    if _first(null):
        note += (
            " On the shuffled labels the fixed arms are fast too (epochs to 95%: "
            + ", ".join(f"({arm}) {_reach_text(null[arm]['epochs_to_95'])}" for arm in ARMS)
            + "), so the speed-up is not specific to mod's structure: over a complete "
            "enumeration of pairs φ^{y;1} encodes any label table (here the shuffled one), and "
            "the fixed rows start at norm 1 while (ii) starts at d^{-γ}."
        )
    return note


def _early_note(result: dict, null: dict, lambdas: str, early: int) -> str:
    loss, null_loss = _early_loss(result), _early_loss(null)
    note = lambdas
    if null_loss["iii"] < null_loss["ii"]:
        note += (
            f" On shuffled labels (iii) also beats (ii) at epoch {early} ("
            f"{null_loss['iii']:.4f} vs {null_loss['ii']:.4f}): that part of the order comes from "
            "the fixed arms' O(1) scale against the trainable arm's small init, not from the data; "
            "the data-specific part is (i) < (iii)"
            + f" ({null_loss['i']:.4f} vs {null_loss['iii']:.4f} on the null)."
        )
    if not _early_order(result):
        note += (
            f" Why it misses: the loss at epoch {early} orders the arms as "
            + " < ".join(f"({arm})" for arm in sorted(ARMS, key=loss.get))
            + "."
        )
    return note


def claims(numbers: dict, config: dict) -> list[Claim]:
    """Every claim from the run's ``numbers`` (as saved in its JSON), tagged with its regime."""
    claims = _structure_claims(numbers["structure"], config) + _order_claims(
        numbers["fixed_embeddings"]["trained"], numbers["fixed_embeddings"]["null"], config
    )
    for claim in claims:
        claim.regime = config["regime"]
    return claims


def fixed_figure(numbers, epochs, config, regime):
    """Loss and accuracy of the three embedding arms (trained and null) against ``epochs`` [T];
    ``numbers[kind][arm]`` holds ``loss_curve`` and ``accuracy_curve`` [T]."""
    fig, axes = plots.figure(
        1,
        3,
        panel=(5.3, 4.2),
        suptitle=(
            "Fig. 8D, mod N=40: FFN with fixed signature embedding (i), trainable (ii), fixed "
            f"random (iii); d=128, $\\gamma$={config['gamma_ffn']}, fixed rows of mean norm 1, "
            f"$\\lambda(0)$=1; {regime.label}"
        ),
    )
    colours = {"i": "C2", "ii": "C0", "iii": "C1"}
    for arm, label in ARM_LABELS.items():
        entry, null = numbers["trained"][arm], numbers["null"][arm]
        axes[0].plot(epochs, entry["loss_curve"], colours[arm], label=f"({arm}) {label}")
        axes[1].plot(epochs, entry["accuracy_curve"], colours[arm], label=f"({arm}) {label}")
        axes[2].plot(
            epochs,
            null["accuracy_curve"],
            colours[arm],
            ls=plots.LINE_STYLE["null"],
            label=f"({arm}) {label}",
        )
    plots.axis_labels(axes[0], y=plots.LOSS, title="D: training loss")
    plots.axis_labels(axes[1], y=plots.ACCURACY, title="D: training accuracy")
    plots.axis_labels(axes[2], y=plots.ACCURACY, title="null: training accuracy on shuffled labels")
    for ax in axes[1:]:
        plots.reference(ax, y=config["target_accuracy"])
    plots.reference(axes[0], x=config["early_epoch"])
    for ax in axes:
        plots.epoch_axis(ax)
        plots.legend(ax)
    return fig


def _index(config: dict, epoch: int) -> int:
    """Snapshot index of ``epoch``, a multiple of ``snapshot_every``."""
    if epoch % config["snapshot_every"]:
        raise ValueError(f"epoch {epoch} is not a snapshot (every {config['snapshot_every']})")
    return epoch // config["snapshot_every"]


def first_epoch(epochs, accuracy, target: float) -> int | None:
    """The first of ``epochs`` whose ``accuracy`` reaches ``target`` (at or above), or None."""
    hit = np.flatnonzero(np.asarray(accuracy) >= target)
    return int(np.asarray(epochs)[hit[0]]) if hit.size else None


def _reach_text(epoch: int | None) -> str:
    return "not reached" if epoch is None else str(epoch)
