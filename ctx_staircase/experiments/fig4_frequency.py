"""Fig. 4 and App. D: frequency-resolved first-order alignment (SPEC §8 item 6).

Task 2 (SPEC §4.1) ``add`` and ``mod`` with ``N = p = 40``. For every snapshot,
``rho_{(1),k}(t)`` (SPEC §3, App A.1.6) correlates ``S^emb`` of the number tokens with the cosine
matrix of ``h_{alpha,k} = phi^{y;1}_alpha c^cos_k``, ``k = 0..20``
(``metrics.frequency_alignment``, ``phi^{y;1}`` from ``signatures.label_signature(ds, 1,
alphas=numbers, labels=occurring labels, context=numbers)``). Figures: the (epoch, k) heatmaps
(Fig. 4A,B); PCA of ``w^E`` at epochs 100 and 1000 next to PCA of ``h_{alpha,k}`` at ``k = 0``
and at the late frequency (``k = 20`` for add, the run's own ``k*`` for mod; Fig. 4C,D); and the
App. D seed study: 10 seeds in one vmapped sweep, ``rho`` against ``k`` at epoch 1000 and
``k* = argmax_{k > 10} rho_{(1),k}``.

Conventions ([GAP] choices, also in ``config``):

- Model: ReLU FFN (SPEC §5.1), ``d = 128``, init std ``d^{-gamma}``, ``gamma = 1.0``, float32;
  full-batch Adam, lr 1e-3; 1000 epochs (1200 with ``full``), snapshots every 100 plus 10, 25,
  50, 75. Seed 0 is the primary run for the heatmaps and the PCA figure.
- ``rho_{(1),0}`` for mod is reported as 0: ``S^{sig,(1)}_0 = S^{sig,(0)}`` is constant there.
- Thresholds [R]: early (epoch 100) ``argmax_k rho_{(1),k} <= 2`` ("small"); late add
  ``rho_{(1),20}(1000) >= 0.5`` ("high"); seed-dependent ``k*`` means at least 2 distinct ``k*``
  over the 10 seeds.
- Ring order (SPEC §2.6) [R]: a seed is eligible when ``gcd(k*, N) = 1`` and ``rho_{k*} >= 0.5``
  (its ``k*`` component dominates). Its tokens are ordered by angle in the (PC1, PC2) plane of
  ``w^E`` at epoch 1000; the ring fraction is the share of cyclically adjacent pairs whose ids
  differ by ``±k*^{-1} mod N``. Pass: every eligible seed has fraction ``>= 0.8``, and there is
  at least one.
- Own-``k*`` match (App. D) [R]: the 2-D PCA of ``w^E`` (epoch 1000) is compared with the 2-D PCA
  of ``h_{alpha,k}`` by Procrustes (`metrics.procrustes_similarity`: rotation, reflection and scale
  allowed; similarity ``1 - disparity``). A seed passes when its own ``k*`` matches better than
  every distinct ``k*`` of the other seeds; pass when ≥ 80% of the testable seeds do. A seed
  is testable when its ``k*`` component dominates (``rho_{k*} >= 0.5``, as for the ring) and some
  other seed has a different ``k*``; seeds with a weak ``k*`` (their late geometry follows a
  ``k <= 10`` component or none, and every match is at noise level ~1e-3) are listed, not
  tested. Not testable at all when all seeds share one ``k*``.
- Diagnostic [R]: mod with GELU (10 seeds) and add with GELU (seed 0). GELU is analytic at 0, so
  the small-init order hierarchy of SPEC §6.2 applies; ReLU's gate ``1{w_a + w_b > 0}`` is
  scale-free and feeds context into the embedding gradient at any init scale.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from ctx_staircase import metrics, signatures, sweep, tasks, train
from ctx_staircase.experiments import Claim, Outcome

NAME = "fig4_frequency"
TITLE = "Frequency-resolved first-order alignment and the seed study, N=40 (Fig. 4, App. D)"

KS = np.arange(21)
EARLY = 100
EARLY_K_MAX = 2  # [R] "small"
LATE_ADD_MIN = 0.5  # [R] "high" rho at k=20 for add
K_SEARCH_MIN = 11  # App. D: k* = argmax over k > 10
RING_RHO_MIN, RING_MIN = 0.5, 0.8  # [R]
OWN_MATCH_MIN = 0.8  # [R]


# ------------------------------------------------------------------------------------------------


def _analyse(ds, result, cfg) -> dict:
    alphas = ds.groups["numbers"]
    N = cfg["N"]
    labels = np.unique(ds.labels)
    phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
    traj = result.trajectory
    steps = np.asarray(traj.steps[0])
    W = np.asarray(traj.W_E)[:, :, alphas]  # [G, S, A, d]
    S_emb = np.asarray(metrics.cosine_matrix(W))
    rho = np.asarray(metrics.frequency_alignment(phi1, S_emb, KS))  # [G, S, K]
    h = signatures.fourier_projection(phi1, KS)  # [K, A, V_nu]
    i_early = int(np.flatnonzero(steps == EARLY)[0])
    i_late = int(np.flatnonzero(steps == cfg["seed_epoch"])[0])
    late = rho[:, i_late]  # [G, K]
    k_star = K_SEARCH_MIN + np.argmax(late[:, K_SEARCH_MIN:], axis=1)
    emb_pca = [metrics.pca(W[g, i_late], k=2) for g in range(W.shape[0])]
    h_pca = {int(k): metrics.pca(h[k], k=2) for k in set(k_star.tolist()) | {0, 20}}
    seeds = []
    for g in range(W.shape[0]):
        scores = np.asarray(emb_pca[g].scores)
        match = {
            int(k): metrics.procrustes_similarity(scores, np.asarray(h_pca[int(k)].scores))
            for k in set(k_star)
        }
        seeds.append(
            {
                "seed": int(result.seed[g]),
                "status": result.status[g],
                "accuracy": float(traj.accuracy[g, i_late]),
                "k_star": int(k_star[g]),
                "rho_k_star": float(late[g, k_star[g]]),
                "rho_k20": float(late[g, 20]),
                "argmax_all_k": int(np.argmax(late[g])),
                "early_argmax_k": int(np.argmax(rho[g, i_early])),
                "early_max_rho": float(rho[g, i_early].max()),
                "ring_fraction": metrics.ring_order_fraction(scores, alphas, int(k_star[g]), N),
                "ring_fraction_argmax_all_k": metrics.ring_order_fraction(
                    scores, alphas, int(np.argmax(late[g])), N
                ),
                "pca_match": match,
                "rho_vs_k": late[g].tolist(),
            }
        )
    return {
        "alphas": alphas,
        "steps": steps,
        "rho": rho,
        "W_seed0": {EARLY: W[0, i_early], cfg["seed_epoch"]: W[0, i_late]},
        "h": h,
        "emb_pca": emb_pca,
        "h_pca": h_pca,
        "seeds": seeds,
    }


def run(full: bool = False) -> Outcome:
    steps = 1200 if full else 1000
    snapshots = sorted({0, 10, 25, 50, 75, *range(100, steps + 1, 100)})
    cfg = dict(
        tasks=["add", "mod"],
        N=40,
        p=40,
        ks=KS.tolist(),
        model="ffn",
        d=128,
        activation="relu",
        diagnostic_activation="gelu",
        gamma=1.0,
        seeds=list(range(10)),
        optimizer="adam",
        lr=1e-3,
        steps=steps,
        snapshots=snapshots,
        early_epoch=EARLY,
        seed_epoch=1000,
        k_search="k > 10",
        dtype="float32",
    )
    config = train.TrainConfig(
        optimizer=cfg["optimizer"], lr=cfg["lr"], steps=steps, snapshots=tuple(snapshots)
    )
    runs = [
        ("add", cfg["activation"], cfg["seeds"]),
        ("mod", cfg["activation"], cfg["seeds"]),
        ("mod", cfg["diagnostic_activation"], cfg["seeds"]),
        ("add", cfg["diagnostic_activation"], [0]),
    ]
    data = {}
    for task, activation, seeds in runs:
        ds = tasks.make(task, N=cfg["N"])
        result = sweep.train_sweep(
            "ffn",
            ds,
            config,
            gammas=[cfg["gamma"]],
            seeds=seeds,
            d=cfg["d"],
            activation=activation,
        )
        data[(task, activation)] = _analyse(ds, result, cfg)

    numbers = {
        f"{task}/{act}": {
            "steps": d["steps"].tolist(),
            "rho_seed0": d["rho"][0].tolist(),  # [S, K]
            "seeds": d["seeds"],
        }
        for (task, act), d in data.items()
    }
    claims = _claims(data, cfg)
    figures = {
        "heatmaps": _heatmap_figure(data, cfg),
        "pca": _pca_figure(data, cfg),
        "seeds": _seed_curves_figure(data, cfg),
        "seed_pca": _seed_pca_figure(data, cfg),
    }
    return Outcome(claims, figures, numbers, cfg)


# ------------------------------------------------------------------------------------------------
# claims


def _early_claim(d: dict, task: str, tag: str, item: str) -> Claim:
    s0 = d["seeds"][0]
    others = [s["early_argmax_k"] for s in d["seeds"]]
    ok = s0["early_argmax_k"] <= EARLY_K_MAX
    note = ""
    if task == "mod":
        note = "k=0 is constant for mod (reported 0); "
        if not ok:
            note += (
                f"the early maximum is k={s0['early_argmax_k']} at rho {s0['early_max_rho']:.2f}"
            )
    return Claim(
        item,
        f"{task}{tag}: low frequencies dominate early",
        f"epoch {EARLY}: argmax_k = {s0['early_argmax_k']} (rho {s0['early_max_rho']:.3f}), "
        f"seed 0; all seeds {others}",
        f"argmax_k rho_(1),k ≤ {EARLY_K_MAX} at epoch {EARLY} [R 'small']",
        ok,
        note,
    )


def _k_star_claims(d: dict, tag: str, item: str, N: int) -> list[Claim]:
    seeds = d["seeds"]
    k_stars = [s["k_star"] for s in seeds]
    distinct = sorted(set(k_stars))
    claims = [
        Claim(
            item,
            f"mod{tag}: k* depends on the seed",
            "k* = "
            + ", ".join(f"{s['k_star']} ({s['rho_k_star']:.2f})" for s in seeds)
            + f"; {len(distinct)} distinct",
            "≥ 2 distinct k* = argmax_{k>10} rho over 10 seeds at epoch 1000 [R]",
            len(distinct) >= 2,
        )
    ]
    eligible = [
        s for s in seeds if math.gcd(s["k_star"], N) == 1 and s["rho_k_star"] >= RING_RHO_MIN
    ]
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
    claims.append(
        Claim(
            item,
            f"mod{tag}: the PCA ring follows steps of k*^-1 mod N",
            fractions or "no eligible seed (none has gcd(k*, N) = 1 with rho_k* ≥ 0.5)",
            f"ring fraction ≥ {RING_MIN} for every seed with gcd(k*,N)=1 and rho_k* ≥ "
            f"{RING_RHO_MIN}, at least one such seed [R]",
            bool(eligible) and all(s["ring_fraction"] >= RING_MIN for s in eligible),
            "" if eligible else "k* = 20 (not a unit mod 40) gives a parity split, not a ring",
        )
    )
    testable = []
    weak = [s["seed"] for s in seeds if s["rho_k_star"] < RING_RHO_MIN]
    for s in seeds:
        others = [k for k in distinct if k != s["k_star"]]
        if others and s["rho_k_star"] >= RING_RHO_MIN:
            own = s["pca_match"][s["k_star"]]
            best_other = max(s["pca_match"][k] for k in others)
            testable.append((s["seed"], own, best_other, own > best_other))
    if testable:
        share = float(np.mean([t[3] for t in testable]))
        claims.append(
            Claim(
                "App. D" + (" diag." if tag else ""),
                f"mod{tag}: each seed's PCA matches its own k* component best",
                f"{sum(t[3] for t in testable)}/{len(testable)} seeds; Procrustes similarity "
                "own vs best other: "
                + ", ".join(f"s{t[0]} {t[1]:.3f}/{t[2]:.3f}" for t in testable)
                + (f"; weak-k* seeds not tested: {weak}" if weak else ""),
                f"own k* beats every other seed's k* for ≥ {OWN_MATCH_MIN:.0%} of the seeds with "
                f"rho_k* ≥ {RING_RHO_MIN} [R]",
                share >= OWN_MATCH_MIN,
            )
        )
    else:
        claims.append(
            Claim(
                "App. D" + (" diag." if tag else ""),
                f"mod{tag}: each seed's PCA matches its own k* component best",
                f"all seeds share k* = {distinct[0]}"
                if len(distinct) == 1
                else f"no seed with rho_k* ≥ {RING_RHO_MIN} has a rival k*",
                f"own k* beats every other seed's k* for ≥ {OWN_MATCH_MIN:.0%} of seeds [R]",
                None,
                "not testable",
            )
        )
    return claims


def _claims(data: dict, cfg: dict) -> list[Claim]:
    relu, gelu = cfg["activation"], cfg["diagnostic_activation"]
    N = cfg["N"]
    claims = [
        _early_claim(data[("add", relu)], "add", "", "§8.6"),
        _early_claim(data[("mod", relu)], "mod", "", "§8.6"),
    ]
    add = data[("add", relu)]["seeds"]
    g_add = data[("add", gelu)]["seeds"][0]
    rho20 = add[0]["rho_k20"]
    claims.append(
        Claim(
            "§8.6",
            "add: a high rho at k = 20 = p/2 late (odd/even split)",
            f"rho_(1),20(1000) = {rho20:.3f} (seed 0); seeds median "
            f"{np.median([s['rho_k20'] for s in add]):.3f}, "
            f"max {max(s['rho_k20'] for s in add):.3f}"
            f"; argmax_k at 1000: {sorted({s['argmax_all_k'] for s in add})}",
            f"rho_(1),20 ≥ {LATE_ADD_MIN} at epoch 1000 [R 'high']",
            rho20 >= LATE_ADD_MIN,
            ""
            if rho20 >= LATE_ADD_MIN
            else (
                f"k = 0 still dominates at epoch 1000 (rho_0 {add[0]['rho_vs_k'][0]:.2f}); GELU "
                f"gives rho_20 = {g_add['rho_k20']:.3f}; not activation-specific. (Exploration: "
                "rho_20 only creeps to ~0.09 by epoch 3000 with Adam, and stays < 0 under GD lr 1)"
            ),
        )
    )
    claims += _k_star_claims(data[("mod", relu)], "", "§8.6", N)
    claims.append(_early_claim(data[("mod", gelu)], "mod", " (diagnostic: GELU)", "§8.6 diag."))
    claims += _k_star_claims(data[("mod", gelu)], " (diagnostic: GELU)", "§8.6 diag.", N)
    return claims


# ------------------------------------------------------------------------------------------------
# figures


def _heatmap_figure(data: dict, cfg: dict):
    panels = [
        (("add", cfg["activation"]), "add, ReLU (primary)"),
        (("mod", cfg["activation"]), "mod, ReLU (primary)"),
        (("mod", cfg["diagnostic_activation"]), "mod, GELU (diagnostic)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
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
        ticks = np.arange(len(d["steps"]))
        ax.set_xticks(ticks[::2], [str(s) for s in d["steps"][::2]], fontsize=7, rotation=45)
        ax.set_yticks(KS[::2], [str(k) for k in KS[::2]], fontsize=7)
        ax.set_xlabel("epoch (snapshot)")
        ax.set_ylabel("frequency k")
        ax.set_title(f"$\\rho_{{(1),k}}(t)$: {title}, seed 0", fontsize=9)
    fig.colorbar(image, ax=axes.tolist(), shrink=0.85, label="Pearson")
    fig.suptitle(f"Fig. 4A,B: frequency-resolved alignment (N = p = {cfg['N']})", fontsize=10)
    return fig


def _ring_order(k: int, N: int) -> np.ndarray | None:
    """Token indices in the predicted ring order a -> a + k^{-1} mod N (None if no inverse)."""
    if math.gcd(int(k), N) != 1:
        return None
    order = (np.arange(N) * pow(int(k), -1, N)) % N
    return np.append(order, order[0])


def _pca_panel(ax, pca, alphas, title, *, path=None, degenerate=False):
    """Tokens in the PC1-PC2 plane, coloured and labelled by id; grey line along ``path``."""
    ax.set_title(title, fontsize=9)
    if degenerate:
        ax.text(
            0.5,
            0.5,
            "all vectors identical\n(zero variance)",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=9,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    scores = np.asarray(pca.scores)
    explained = np.asarray(pca.explained_variance_ratio)
    if path is not None:
        ax.plot(scores[path, 0], scores[path, 1], color="0.8", lw=0.6, zorder=1)
    ax.scatter(scores[:, 0], scores[:, 1], c=alphas, cmap="viridis", s=16, zorder=2)
    for (x, y), t in zip(scores[:, :2], alphas, strict=True):
        ax.annotate(str(t), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% var.)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% var.)")


def _pca_figure(data: dict, cfg: dict):
    rows = [
        (("add", cfg["activation"]), "add ReLU", 20),
        (("mod", cfg["activation"]), "mod ReLU", None),
        (("mod", cfg["diagnostic_activation"]), "mod GELU (diag.)", None),
    ]
    fig, axes = plt.subplots(3, 4, figsize=(14, 9.8), layout="constrained")
    late_epoch = cfg["seed_epoch"]
    N = cfg["N"]
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
                f"{name}: PCA of $h_{{\\alpha,{k}}}$ (ρ={rho:.2f} at {late_epoch})",
                path=np.arange(N) if (task == "add" and k == 0) else _ring_order(k, N),
                degenerate=degenerate,
            )
    fig.suptitle(
        "Fig. 4C,D: embeddings (seed 0) vs signature components; k=20 for add, the run's own "
        "k* = argmax_{k>10} for mod (grey: token order for add, the ring a → a+k⁻¹ mod N for "
        "mod when gcd(k, N) = 1)",
        fontsize=10,
    )
    return fig


def _seed_curves_figure(data: dict, cfg: dict):
    panels = [
        (("add", cfg["activation"]), "add, ReLU"),
        (("mod", cfg["activation"]), "mod, ReLU"),
        (("mod", cfg["diagnostic_activation"]), "mod, GELU (diagnostic)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained", sharey=True)
    colours = plt.cm.tab10(np.arange(10))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for s, colour in zip(data[key]["seeds"], colours, strict=False):
            ax.plot(
                KS,
                s["rho_vs_k"],
                "-",
                color=colour,
                lw=1,
                label=f"seed {s['seed']}: k*={s['k_star']}",
            )
            ax.plot(s["k_star"], s["rho_k_star"], "o", color=colour, ms=5)
        ax.axvline(10.5, color="0.5", lw=0.7, ls=":")
        ax.set_xlabel("frequency k")
        ax.set_title(f"{title}: epoch {cfg['seed_epoch']}, 10 seeds (dots: k*)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    axes[0].set_ylabel("$\\rho_{(1),k}$")
    fig.suptitle(
        "App. D: correlation vs k per seed; k* searched over k > 10 (right of the dotted line)",
        fontsize=10,
    )
    return fig


def _seed_pca_figure(data: dict, cfg: dict):
    keys = [(("mod", cfg["activation"]), "ReLU"), (("mod", cfg["diagnostic_activation"]), "GELU")]
    n = len(cfg["seeds"])
    N = cfg["N"]
    fig, axes = plt.subplots(4, n, figsize=(2.0 * n, 8.4), layout="constrained")
    for block, (key, name) in enumerate(keys):
        d = data[key]
        alphas = d["alphas"]
        for g, s in enumerate(d["seeds"]):
            k = s["k_star"]
            sets = (
                (np.asarray(d["emb_pca"][g].scores), f"{name} s{s['seed']}: $w^E$"),
                (np.asarray(d["h_pca"][k].scores), f"$h_{{\\alpha,{k}}}$ ρ={s['rho_k_star']:.2f}"),
            )
            for r, (scores, title) in enumerate(sets):
                ax = axes[2 * block + r, g]
                ring = _ring_order(k, N)
                if ring is not None:  # the predicted ring a -> a + k^{-1}
                    ax.plot(scores[ring, 0], scores[ring, 1], color="0.75", lw=0.6, zorder=1)
                ax.scatter(scores[:, 0], scores[:, 1], c=alphas, cmap="viridis", s=8, zorder=2)
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_title(title, fontsize=7)
    fig.suptitle(
        "App. D, mod: PCA of each seed's embeddings (epoch 1000) above its own k* component; "
        "grey lines: predicted ring a → a + k*⁻¹ mod N (when gcd(k*, N) = 1); colour = token",
        fontsize=9,
    )
    return fig
