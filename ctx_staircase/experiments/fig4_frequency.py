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

import math

import numpy as np

from ctx_staircase import metrics, plots, signatures
from ctx_staircase.experiments import Claim, Outcome
from ctx_staircase.experiments import staircase_claims as scoring
from ctx_staircase.experiments.common import (
    EndState,
    curvature_text,
    end_of_run,
    failure_class,
    plateau_failure,
    scored,
    size,
    train_in_regime,
)
from ctx_staircase.experiments.regime import PRIMARY, Regime
from ctx_staircase.experiments.regime import parse as parse_regime

KS = np.arange(21)
EARLY = scoring.EARLY
LATE_ADD_MIN = 0.5  # [R] "high" rho at k=20 for add
K_SEARCH_MIN = 11  # App. D: k* = argmax over k > 10
RING_RHO_MIN, RING_MIN = 0.5, 0.8  # [R]
OWN_MATCH_MIN = 0.8  # [R]
ADAM_LR = 1e-3
TINY_EPOCHS = 200


REDUCTION = {  # what each size of run leaves out of the paper's
    "tiny": f"tiny: 2 seeds, d = 16, {TINY_EPOCHS} epochs (seed study at {TINY_EPOCHS})",
    "quick": "quick: 3 seeds instead of 10, no GELU diagnostic",
    "paper": "none",
}

# ------------------------------------------------------------------------------------------------


def frequency_peaks(rho_vs_k) -> dict:
    """What one seed's spectrum ``rho_(1),k`` over k = 0..K-1 (``[K]``) says: ``k_star``, the
    best frequency from `K_SEARCH_MIN` on, its ``rho_k_star``, ``rho_k20`` at k = 20, and
    ``argmax_all_k``, the best over every k (k = 0 included)."""
    rho_vs_k = np.asarray(rho_vs_k)
    k_star = K_SEARCH_MIN + int(np.argmax(rho_vs_k[K_SEARCH_MIN:]))
    return {
        "k_star": k_star,
        "rho_k_star": float(rho_vs_k[k_star]),
        "rho_k20": float(rho_vs_k[20]),
        "argmax_all_k": int(np.argmax(rho_vs_k)),
    }


def _seed_rows(W, rho, h_pca, alphas, N, seed_ids) -> list[dict]:
    """Per seed at one snapshot: k*, ring fractions and PCA matches (``W`` ``[G, A, d]``,
    ``rho`` ``[G, K]``)."""
    peaks = [frequency_peaks(r) for r in rho]
    k_star = np.array([p["k_star"] for p in peaks])
    rows = []
    for g in range(W.shape[0]):
        scores = np.asarray(metrics.pca(W[g], k=2).scores)
        rows.append(
            {
                "seed": int(seed_ids[g]),
                **peaks[g],
                "ring_fraction": metrics.ring_order_fraction(scores, alphas, int(k_star[g]), N),
                "ring_fraction_argmax_all_k": metrics.ring_order_fraction(
                    scores, alphas, int(np.argmax(rho[g])), N
                ),
                "pca_match": {  # keyed by str(k), as in the JSON
                    str(k): metrics.procrustes_similarity(scores, np.asarray(h_pca[int(k)].scores))
                    for k in set(k_star.tolist())
                },
                "rho_vs_k": rho[g].tolist(),
                "scores": scores,
            }
        )
    return rows


def _analyse(ds, result, config, regime: Regime) -> dict:
    alphas = ds.groups["numbers"]
    N = config["N"]
    labels = np.unique(ds.labels)
    phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
    constant = metrics.constant_frequencies(phi1, KS)
    traj = result.trajectory
    epochs = regime.epochs_of(traj.steps[0])
    W = np.asarray(traj.W_E)[:, :, alphas]  # [G, S, A, d]
    S_emb = np.asarray(metrics.cosine_matrix(W))
    rho = np.asarray(metrics.frequency_alignment(phi1, S_emb, KS))  # [G, S, K]
    h = signatures.fourier_projection(phi1, KS)  # [K, A, V_nu]
    i_init = int(np.flatnonzero(epochs == 0)[0])
    i_early = int(np.flatnonzero(epochs == EARLY)[0])
    i_late = int(np.flatnonzero(epochs == config["seed_epoch"])[0])
    k_stars = {
        int(k)
        for i in (i_init, i_late)
        for k in K_SEARCH_MIN + np.argmax(rho[:, i, K_SEARCH_MIN:], axis=1)
    }
    h_pca = {k: metrics.pca(h[k], k=2) for k in k_stars | {0, 20}}
    seeds = _seed_rows(W[:, i_late], rho[:, i_late], h_pca, alphas, N, result.seed)
    init = _seed_rows(W[:, i_init], rho[:, i_init], h_pca, alphas, N, result.seed)
    even = np.flatnonzero((epochs % 100 == 0) & (epochs <= epochs[i_late]))
    for g, row in enumerate(seeds):
        row.update(
            status=str(result.status[g]),
            accuracy=float(traj.accuracy[g, i_late]),
            # on the evenly spaced snapshots (every 100 epochs), as `failure_class` reads it
            accuracy_curve=np.asarray(traj.accuracy[g, even]).round(4).tolist(),
            early_argmax_k=int(np.argmax(rho[g, i_early])),
            early_max_rho=float(rho[g, i_early].max()),
            early_rho=rho[g, i_early].tolist(),
        )
        init[g].update(early_argmax_k=int(np.argmax(rho[g, i_init])))
    return {
        "alphas": alphas,
        "epochs": epochs,
        "rho": rho,
        "constant": constant,
        "W_seed0": {EARLY: W[0, i_early], config["seed_epoch"]: W[0, i_late]},
        "h": h,
        "h_pca": h_pca,
        "seeds": seeds,
        "init": init,
    }


def run_config(
    *, full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> dict:
    """The configuration `run` records for these options (``full``, ``regime``, ``quick`` and
    ``tiny``, as `run` takes them)."""
    epochs = TINY_EPOCHS if tiny else 1200 if full else 1000
    seeds = list(range(2 if tiny else 3 if quick else 10))
    snapshots = (
        range(0, epochs + 1, 50) if tiny else {0, 10, 25, 50, 75, *range(100, epochs + 1, 100)}
    )
    return dict(
        tasks=["add", "mod"],
        N=40,
        p=40,
        ks=KS.tolist(),
        model="ffn",
        d=16 if tiny else 128,
        activation="relu",
        diagnostic_activation="gelu",
        gamma=1.0,
        seeds=seeds,
        adam_lr=ADAM_LR,
        epochs=epochs,
        snapshots=sorted(snapshots),
        early_epoch=EARLY,
        seed_epoch=TINY_EPOCHS if tiny else 1000,
        k_search="k > 10",
        k0_scale="k = 0 on mod is scored 1 - MSE (S^{sig,(1)}_0 constant); other entries Pearson",
        null="the untrained initialization (epoch-0 snapshot of the same runs)",
        gd_horizon="the paper's epochs, not lengthened (the GD mod plateau ends by ~800)",
        reduction=REDUCTION[size(tiny, quick)],
        dtype="float32",
        **regime.describe(),
    )


def run(
    full: bool = False, regime: Regime = PRIMARY, quick: bool = False, tiny: bool = False
) -> Outcome:
    config = run_config(full=full, regime=regime, quick=quick, tiny=tiny)
    runs = [
        ("add", config["activation"], config["seeds"]),
        ("mod", config["activation"], config["seeds"]),
    ]
    if tiny or not quick:
        runs.append(("mod", config["diagnostic_activation"], config["seeds"]))
    data = {}
    for task, activation, seeds in runs:
        ds = regime.make(task, N=config["N"])
        result = train_in_regime(ds, regime, config, seeds, activation)
        data[(task, activation)] = _analyse(ds, result, config, regime)
        if activation == config["diagnostic_activation"] and regime.optimizer == "gd":
            end = _end(ds, config, regime, seeds[0], activation)
            data[(task, activation)]["end"] = end._asdict()

    def public(rows):
        return [{k: v for k, v in r.items() if k != "scores"} for r in rows]

    numbers = {
        f"{task}/{act}": {
            "epochs": d["epochs"].tolist(),
            "constant_ks": KS[d["constant"]].tolist(),
            "rho_seed0": d["rho"][0].tolist(),  # [S, K]
            "seeds": public(d["seeds"]),
            "init": public(d["init"]),
            **({"end": d["end"]} if "end" in d else {}),
        }
        for (task, act), d in data.items()
    }
    figures = {}
    if regime.primary and (tiny or not quick):
        figures = {
            "heatmaps": _heatmap_figure(data, config, regime),
            "pca": _pca_figure(data, config, regime),
            "seeds": _seed_curves_figure(data, config, regime),
            "seed_pca": _seed_pca_figure(data, config, regime),
        }
    return Outcome(claims(numbers, config), figures, numbers, config)


def _end(ds, config: dict, regime: Regime, seed: int, activation: str) -> EndState:
    """`common.end_of_run` of one seed's run (GD): where its FAILs about the end are classed
    when it has settled."""
    train_config = regime.train_config(
        ds, epochs=config["epochs"], snapshots=config["snapshots"], adam_lr=config["adam_lr"]
    )
    init = dict(gamma=config["gamma"], seed=seed, d=config["d"], activation=activation)
    return end_of_run(config["model"], ds, train_config, regime, **init)


# ------------------------------------------------------------------------------------------------
# claims


def _early_claim(d: dict, task: str, tag: str, item: str, kind: str, regime: Regime) -> Claim:
    """§8.6 on seed 0 (`staircase_claims.low_frequency_claim`, shared with the flagship)."""
    return scoring.low_frequency_claim(
        d["seeds"][0]["early_rho"],
        d["init"][0]["rho_vs_k"],
        np.isin(KS, d["constant_ks"]),
        task,
        regime.name,
        epoch=EARLY,
        tag=tag,
        item=item,
        kind=kind,
        seeds_argmax=[s["early_argmax_k"] for s in d["seeds"]],
    )


def _ring(seeds: list[dict], N: int) -> tuple[list[dict], bool]:
    """The seeds eligible for the ring test, and whether it passes on them (theory/experiments.md,
    fig4_frequency)."""
    eligible = [
        s for s in seeds if math.gcd(s["k_star"], N) == 1 and s["rho_k_star"] >= RING_RHO_MIN
    ]
    return eligible, bool(eligible) and all(s["ring_fraction"] >= RING_MIN for s in eligible)


def _own_match(seeds: list[dict]) -> list[tuple]:
    """``(seed, own, best other, own > best other)`` for every testable seed."""
    distinct = sorted({s["k_star"] for s in seeds})
    testable = []
    for s in seeds:
        others = [k for k in distinct if k != s["k_star"]]
        if others and s["rho_k_star"] >= RING_RHO_MIN:
            own = s["pca_match"][str(s["k_star"])]
            best_other = max(s["pca_match"][str(k)] for k in others)
            testable.append((s["seed"], own, best_other, own > best_other))
    return testable


def _own_match_share(seeds: list[dict]) -> bool | None:
    """The own-k* criterion: at least `OWN_MATCH_MIN` of the testable seeds match their own k*
    best; ``None`` (not testable) when no seed is."""
    testable = _own_match(seeds)
    if not testable:
        return None
    return float(np.mean([t[3] for t in testable])) >= OWN_MATCH_MIN


def _k_star_claims(d: dict, tag: str, item: str, config: dict, kind: str, regime: Regime):
    """App. D's three claims on one mod run ``d`` (``tag``: the diagnostic's, or empty)."""
    return [
        _seed_dependence_claim(d, tag, item, config["seed_epoch"], kind, regime),
        _ring_claim(d, tag, item, config["N"], config["seed_epoch"], regime),
        _own_match_claim(d, tag, regime),
    ]


def _seed_dependence_claim(d: dict, tag: str, item: str, epoch: int, kind: str, regime: Regime):
    seeds, init = d["seeds"], d["init"]
    distinct = sorted({s["k_star"] for s in seeds})
    init_distinct = sorted({s["k_star"] for s in init})
    why = ""
    if len(distinct) < 2:
        why = (
            f". All seeds share k* = {distinct[0]}; argmax over all k at epoch {epoch}: "
            + ", ".join(
                f"s{s['seed']} {scoring.k_text(s['argmax_all_k'], np.isin(KS, d['constant_ks']))}"
                for s in seeds
            )
            + f"; accuracy at epoch {epoch}: "
            + ", ".join(f"{s['accuracy']:.2f}" for s in seeds)
        )
    return Claim(
        item,
        f"mod{tag}: k* depends on the seed",
        "k* = "
        + ", ".join(f"{s['k_star']} ({s['rho_k_star']:.2f})" for s in seeds)
        + f"; {len(distinct)} distinct",
        f"≥ 2 distinct k* = argmax_{{k>10}} rho over {len(seeds)} seeds at epoch {epoch} [R: "
        "'depends on the seed' read as not every seed having the same k*]",
        note="a random geometry has a random argmax, so seed dependence alone says nothing: the "
        f"init null gives {len(init_distinct)} distinct k*; the own-k* match below carries App. D"
        + why,
        kind=kind,
        regime=regime.name,
        null="init: k* = " + ", ".join(str(s["k_star"]) for s in init),
        **scored(lambda rows: len({s["k_star"] for s in rows}) >= 2, seeds, init),
    )


def _ring_claim(d: dict, tag: str, item: str, N: int, epoch: int, regime: Regime) -> Claim:
    seeds, init = d["seeds"], d["init"]
    eligible, ring = _ring(seeds, N)
    init_eligible, _ = _ring(init, N)
    fractions = ", ".join(
        f"seed {s['seed']}: k*={s['k_star']}, step {pow(s['k_star'], -1, N)}, "
        f"{s['ring_fraction']:.2f}"
        for s in eligible
    )
    rings_any_k = [
        f"s{s['seed']} k={s['argmax_all_k']}: {s['ring_fraction_argmax_all_k']:.2f}"
        for s in seeds
        if math.gcd(s["argmax_all_k"], N) == 1 and s not in eligible
    ]
    if rings_any_k:
        fractions = (fractions + "; " if fractions else "") + (
            "info, other seeds at their argmax over all k (coprime only): " + ", ".join(rings_any_k)
        )
    return Claim(
        item,
        f"mod{tag}: the PCA ring follows steps of k*^-1 mod N",
        fractions or "no eligible seed (none has gcd(k*, N) = 1 with rho_k* ≥ 0.5)",
        f"ring fraction ≥ {RING_MIN} for every seed with gcd(k*,N)=1 and rho_k* ≥ "
        f"{RING_RHO_MIN}, at least one such seed [R: 'follows' read as {RING_MIN:.0%} of adjacent "
        f"pairs (chance 2/(N−1)); rho_k* ≥ {RING_RHO_MIN} is §8.6's 'high']",
        note=("" if eligible else _no_ring_note(seeds, N, epoch))
        + (" " + curvature_text(EndState(**d["end"])) if not ring and "end" in d else ""),
        kind="project",
        regime=regime.name,
        failure=_settled_failure(d),
        null="init: "
        + (
            ", ".join(f"s{s['seed']} {s['ring_fraction']:.2f}" for s in init_eligible)
            if init_eligible
            else "no eligible seed (max rho_k* " + f"{max(s['rho_k_star'] for s in init):.2f})"
        ),
        **scored(lambda rows: _ring(rows, N)[1], seeds, init),
    )


def _settled_failure(d: dict) -> str:
    """A late FAIL's class: budget while seed 0 is still learning (`common.failure_class`);
    settled, by the curvature where it ends (`common.plateau_failure`, GD), else unclassified."""
    learning = failure_class(d["seeds"][0].get("accuracy_curve", []))
    if learning == "unclassified" and "end" in d:
        return plateau_failure(EndState(**d["end"]))
    return learning


def _no_ring_note(seeds: list[dict], N: int, epoch: int) -> str:
    """Why no seed is eligible for the ring test: their k* and accuracies."""
    twenty = sum(s["k_star"] == 20 for s in seeds)
    coprime = [s for s in seeds if math.gcd(s["k_star"], N) == 1]
    return (
        f"no eligible seed: k* = 20 (not a unit mod {N}: a parity split, not a ring) in "
        f"{twenty}/{len(seeds)} seeds; coprime k* "
        + (
            ", ".join(f"s{s['seed']} {s['k_star']} (rho {s['rho_k_star']:.2f})" for s in coprime)
            if coprime
            else "none"
        )
        + f"; train accuracy at epoch {epoch}: "
        + ", ".join(f"{s['accuracy']:.2f}" for s in seeds)
    )


def _own_match_claim(d: dict, tag: str, regime: Regime) -> Claim:
    seeds, init = d["seeds"], d["init"]
    testable, init_testable = _own_match(seeds), _own_match(init)
    weak = [s["seed"] for s in seeds if s["rho_k_star"] < RING_RHO_MIN]
    distinct = sorted({s["k_star"] for s in seeds})
    note = "not testable"
    if testable:
        measured = (
            f"{sum(t[3] for t in testable)}/{len(testable)} seeds; Procrustes similarity "
            "own vs best other: "
            + ", ".join(f"s{t[0]} {t[1]:.3f}/{t[2]:.3f}" for t in testable)
            + (f"; weak-k* seeds not tested: {weak}" if weak else "")
        )
        tested_k = sorted({s["k_star"] for s in seeds if s["seed"] in [t[0] for t in testable]})
        note = (
            f"every testable seed has k* = {tested_k[0]}: the test shows that their geometry "
            f"matches k = {tested_k[0]} rather than the weak rival k* of the other seeds"
            if len(tested_k) == 1
            else ""
        )
    elif len(distinct) == 1:
        measured = f"all seeds share k* = {distinct[0]}"
    else:
        measured = f"no seed with rho_k* ≥ {RING_RHO_MIN} has a rival k*"
    return Claim(
        "App. D" + (" diag." if tag else ""),
        f"mod{tag}: each seed's PCA matches its own k* component best",
        measured,
        f"own k* beats every other seed's k* for ≥ {OWN_MATCH_MIN:.0%} of the seeds with "
        f"rho_k* ≥ {RING_RHO_MIN} [R: 'each seed' relaxed to 4 in 5; rho_k* as for the ring]",
        note=note,
        kind="project",
        regime=regime.name,
        null=f"init: {sum(t[3] for t in init_testable)}/{len(init_testable)} seeds"
        if init_testable
        else "init: no testable seed (max rho_k* "
        + f"{max(s['rho_k_star'] for s in init):.2f} < {RING_RHO_MIN})",
        **scored(_own_match_share, seeds, init),
    )


def _late_add_claim(add: dict, late: int, regime: Regime) -> Claim:
    seeds, init = add["seeds"], add["init"]
    rho20 = seeds[0]["rho_k20"]
    note = ""
    if rho20 < LATE_ADD_MIN:
        note = (
            f"k = 0 still dominates at epoch {late} (rho_0 {seeds[0]['rho_vs_k'][0]:.2f}, rho_1 "
            f"{seeds[0]['rho_vs_k'][1]:.2f}); train accuracy at {late} "
            + ", ".join(f"{s['accuracy']:.2f}" for s in seeds)
            + " (seeds)"
        )
    return Claim(
        "§8.6",
        "add: a high rho at k = 20 = p/2 late (odd/even split)",
        f"rho_(1),20({late}) = {rho20:.3f} (seed 0); seeds median "
        f"{np.median([s['rho_k20'] for s in seeds]):.3f}, "
        f"max {max(s['rho_k20'] for s in seeds):.3f}"
        f"; argmax_k at {late}: {sorted({s['argmax_all_k'] for s in seeds})}",
        f"rho_(1),20 ≥ {LATE_ADD_MIN} at epoch {late} [R: 'high' read as the upper half of "
        "[0, 1], as for mul in §8.3]",
        note=note,
        kind="paper",
        regime=regime.name,
        null=f"init: rho_(1),20 = {init[0]['rho_k20']:.3f} (seed 0)",
        failure=failure_class(seeds[0].get("accuracy_curve", [])),
        **scored(lambda rho: rho >= LATE_ADD_MIN, rho20, init[0]["rho_k20"]),
    )


def claims(numbers: dict, config: dict) -> list[Claim]:
    """The §8.6 and App. D claims from the run's ``numbers`` (as saved in its JSON, keyed
    ``"task/activation"``), each with its null scored by the same criterion."""
    regime = parse_regime(config["regime"])
    relu, gelu = config["activation"], config["diagnostic_activation"]
    add, mod = numbers[f"add/{relu}"], numbers[f"mod/{relu}"]
    claims = [
        _early_claim(add, "add", "", "§8.6", "paper", regime),
        _early_claim(mod, "mod", "", "§8.6", "paper", regime),
        _late_add_claim(add, config["seed_epoch"], regime),
        *_k_star_claims(mod, "", "§8.6", config, "paper", regime),
    ]
    if f"mod/{gelu}" in numbers:
        tag, item = " (diagnostic: GELU)", "§8.6 diag."
        diagnostic = numbers[f"mod/{gelu}"]
        claims.append(_early_claim(diagnostic, "mod", tag, item, "project", regime))
        claims += _k_star_claims(diagnostic, tag, item, config, "project", regime)
    return claims


# ------------------------------------------------------------------------------------------------
# figures


def _panels(config: dict, primary: str = "") -> list[tuple[tuple[str, str], str]]:
    """The three runs a figure shows side by side, ``((task, activation), title)``: add and mod
    with the primary activation (titles ending in ``primary``), mod with the diagnostic one."""
    return [
        (("add", config["activation"]), f"add, ReLU{primary}"),
        (("mod", config["activation"]), f"mod, ReLU{primary}"),
        (("mod", config["diagnostic_activation"]), "mod, GELU (diagnostic)"),
    ]


def _heatmap_figure(data: dict, config: dict, regime: Regime):
    panels = _panels(config, " (primary)")
    fig, axes = plots.figure(
        1,
        3,
        panel=(5.0, 4.2),
        suptitle=(
            f"Fig. 4A,B: frequency-resolved alignment (N = p = {config['N']}); {regime.label}; "
            "k=0 of mod is 1−MSE ($S^{sig,(1)}_0$ constant)"
        ),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        d = data[key]
        image = ax.imshow(
            d["rho"][0].T,
            origin="lower",
            aspect="auto",
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            interpolation="nearest",
        )
        ax.grid(False)
        ticks = np.arange(len(d["epochs"]))
        ax.set_xticks(ticks[::2], [str(s) for s in d["epochs"][::2]], rotation=45)
        ax.set_yticks(KS[::2], [scoring.k_text(int(k), d["constant"]) for k in KS[::2]])
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


def _pca_figure(data: dict, config: dict, regime: Regime):
    rows = [
        (("add", config["activation"]), "add ReLU", 20),
        (("mod", config["activation"]), "mod ReLU", None),
        (("mod", config["diagnostic_activation"]), "mod GELU (diag.)", None),
    ]
    fig, axes = plots.figure(
        3,
        4,
        panel=(4.0, 3.4),
        suptitle=(
            "Fig. 4C,D: embeddings (seed 0) vs signature components; k=20 for add, the run's own "
            "$k^* = \\mathrm{argmax}_{k>10}$ for mod (grey: token order for add, the ring "
            f"$a \\to a+k^{{-1}}$ mod N for mod when gcd(k, N) = 1); {regime.label}"
        ),
    )
    late_epoch = config["seed_epoch"]
    N = config["N"]
    for row, (key, name, k_late) in enumerate(rows):
        d = data[key]
        alphas = d["alphas"]
        task = key[0]
        k_late = d["seeds"][0]["k_star"] if k_late is None else k_late
        # add: lines in token order; mod: along the predicted k* ring when it exists
        path = np.arange(N) if task == "add" else _ring_order(k_late, N)
        for col, epoch in enumerate((EARLY, late_epoch)):
            _pca_panel(
                axes[row, col],
                metrics.pca(d["W_seed0"][epoch], k=2),
                alphas,
                f"{name}: PCA of $w^E$, epoch {epoch}",
                path=path,
            )
        for col, k in ((2, 0), (3, k_late)):
            h = d["h"][k]
            degenerate = bool(np.ptp(h, axis=0).max() <= 1e-9 * np.abs(h).max())
            rho = d["seeds"][0]["rho_vs_k"][k]
            _pca_panel(
                axes[row, col],
                d["h_pca"][k],
                alphas,
                f"{name}: PCA of $h_{{\\alpha,{k}}}$ ($\\rho$"
                f"{'=1−MSE' if d['constant'][k] else ''}={rho:.2f} at {late_epoch})",
                path=np.arange(N) if (task == "add" and k == 0) else _ring_order(k, N),
                degenerate=degenerate,
            )
    return fig


def _seed_curves_figure(data: dict, config: dict, regime: Regime):
    panels = _panels(config)
    fig, axes = plots.figure(
        1,
        3,
        panel=(5.0, 4.0),
        sharey=True,
        suptitle=(
            "App. D: correlation vs k per seed; $k^*$ searched over k > 10 (right of the dotted "
            "line); " + regime.label
        ),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        d = data[key]
        for i, s in enumerate(d["seeds"]):
            colour = f"C{i % 10}"
            ax.plot(
                KS, s["rho_vs_k"], color=colour, lw=1, label=f"seed {s['seed']}: k*={s['k_star']}"
            )
            ax.plot(s["k_star"], s["rho_k_star"], "o", color=colour, ms=5)
            if d["constant"][0]:
                ax.plot(0, s["rho_vs_k"][0], "s", mfc="none", color=colour, ms=6)
        plots.reference(ax, x=10.5)
        plots.integer_axis(ax, "x")
        plots.axis_labels(
            ax,
            "frequency $k$" + (" ($k$=0 squares: 1−MSE)" if d["constant"][0] else ""),
            "$\\rho_{(1),k}$ (corr.)",
            f"{title}: epoch {config['seed_epoch']}, {len(d['seeds'])} seeds (dots: $k^*$)",
        )
        plots.legend(ax, ncol=2)
    return fig


def _seed_pca_figure(data: dict, config: dict, regime: Regime):
    keys = [
        (("mod", config["activation"]), "ReLU"),
        (("mod", config["diagnostic_activation"]), "GELU"),
    ]
    n = len(config["seeds"])
    N = config["N"]
    fig, axes = plots.grid(
        4,
        n,
        panel=(2.6, 2.3),
        suptitle=(
            f"App. D, mod: PCA of each seed's embeddings (epoch {config['seed_epoch']}) above its "
            "own $k^*$ component;\ngrey lines: predicted ring $a \\to a + k^{*-1}$ mod N (when "
            "gcd($k^*$, N) = 1); colour = token; " + regime.label
        ),
    )
    for block, (key, name) in enumerate(keys):
        d = data[key]
        alphas = d["alphas"]
        for g, s in enumerate(d["seeds"]):
            k = s["k_star"]
            sets = (
                (s["scores"], f"{name} s{s['seed']}: $w^E$"),
                (
                    np.asarray(d["h_pca"][k].scores),
                    f"$h_{{\\alpha,{k}}}$ $\\rho$={s['rho_k_star']:.2f}",
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
