"""Fig. 2B–F: early embedding geometry follows the zero-order signature (SPEC §8 item 3).

Task 2 (SPEC §4.1) ``add``, ``sub``, ``mul`` with ``N = 20`` (all 400 pairs). At epoch 100 the
embedding cosine matrix of the number tokens ``S^emb`` (SPEC eq. 4) is compared with the
zero-order signature geometry ``S^{sig,(0)}`` (eq. 5) by Pearson (``rho_0``, eq. 6) and Spearman
over the off-diagonal pairs (``metrics.alignment``); PCA of the embeddings and of the signature
vectors ``phi^{y;0}_a`` (``metrics.pca``).

Conventions ([GAP] choices, also in ``config``):

- Model: ReLU FFN (SPEC §5.1), ``d = 128``, init std ``d^{-gamma}``, ``gamma = 1.0``, float32;
  full-batch Adam, lr 1e-3; epochs = full-batch steps. Seeds 0, 1, 2 in one vmapped sweep;
  seed 0 is the primary run (figures, criteria), the others are reported.
- ``S^{sig,(0)}`` uses the label axis restricted to the labels that occur (``ds.groups["labels"]``).
- Thresholds [R]: ``rho_0 >= 0.9`` for add and sub (SPEC §8.3); for mul SPEC says "positive and
  high" and we use ``rho_0 >= 0.5``.
- "PCA ordered" [R]: for add, ``|Spearman(PC1 score, a)| >= 0.9``. For sub, ``phi_a`` and
  ``phi_{N+1-a}`` are identical (``|a - z|`` has the same law for ``z`` uniform), so the signature
  geometry is folded (the "X" of the heatmap) and the order is that of the distance from the centre:
  ``|Spearman(PC1 score, |a - (N+1)/2|)| >= 0.9``.
- mul's "odd-part clusters" are described, not thresholded: we report the mean ``S^emb`` of pairs
  with the same odd part (``a / 2^{v_2(a)}``) against the other pairs.
- Diagnostic [R]: the same runs with a GELU activation (analytic at 0, so the small-init order
  hierarchy of SPEC §6.2 applies; ReLU is positively homogeneous, its gate ``1{w_a + w_b > 0}`` is
  scale-free, so context enters the embedding gradient at any init scale).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ctx_staircase import metrics, plots, signatures, sweep, tasks, train
from ctx_staircase.experiments import Claim, Outcome

NAME = "fig2_geometry"
TITLE = "Early embedding geometry vs the zero-order signature: add, sub, mul, N=20 (Fig. 2B-F)"

TASKS = ("add", "sub", "mul")
RHO_MIN = {"add": 0.9, "sub": 0.9, "mul": 0.5}  # SPEC §8.3; mul threshold is our [R]
ORDER_MIN = 0.9  # [R] |Spearman(PC1, order variable)|


def _order_variable(task: str, alphas: np.ndarray, N: int) -> np.ndarray | None:
    """The quantity the PCA should be ordered by ([R]; see the module docstring)."""
    if task == "add":
        return alphas.astype(np.float64)
    if task == "sub":
        return np.abs(alphas - (N + 1) / 2)
    return None


def _odd_part(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    while np.any(a % 2 == 0):
        a = np.where(a % 2 == 0, a // 2, a)
    return a


def _offdiag(S: np.ndarray) -> np.ndarray:
    return S[np.triu_indices(S.shape[0], k=1)]


def run(full: bool = False) -> Outcome:
    cfg = dict(
        tasks=list(TASKS),
        N=20,
        model="ffn",
        d=128,
        activation="relu",
        gamma=1.0,
        seeds=[0, 1, 2, 3, 4] if full else [0, 1, 2],
        optimizer="adam",
        lr=1e-3,
        epoch=100,
        steps=300,
        snapshots=[0, 25, 50, 75, 100, 150, 200, 300],
        dtype="float32",
        rho_thresholds=RHO_MIN,
        order_threshold=ORDER_MIN,
        diagnostic_activation="gelu",
    )
    N = cfg["N"]
    numbers: dict = {}
    panels: dict = {}
    for task in TASKS:
        ds = tasks.make(task, N=N)
        alphas = ds.groups["numbers"]
        phi0 = signatures.label_signature(ds, 0, alphas=alphas, labels=ds.groups["labels"])
        S_sig = np.asarray(metrics.cosine_matrix(phi0))
        sig_pca = metrics.pca(phi0, k=2)
        entry: dict = {}
        for activation in (cfg["activation"], cfg["diagnostic_activation"]):
            seeds = cfg["seeds"] if activation == cfg["activation"] else [0]
            config = train.TrainConfig(
                optimizer=cfg["optimizer"],
                lr=cfg["lr"],
                steps=cfg["steps"],
                snapshots=tuple(cfg["snapshots"]),
            )
            result = sweep.train_sweep(
                "ffn",
                ds,
                config,
                gammas=[cfg["gamma"]],
                seeds=seeds,
                d=cfg["d"],
                activation=activation,
            )
            traj = result.trajectory
            steps = np.asarray(traj.steps[0])
            at = int(np.flatnonzero(steps == cfg["epoch"])[0])
            W = np.asarray(traj.W_E)[:, :, alphas]  # [G, S, A, d]
            S_emb = np.asarray(metrics.cosine_matrix(W))  # [G, S, A, A]
            rho_t = np.asarray(metrics.alignment(S_emb, S_sig).value)  # [G, S]
            spearman = np.asarray(metrics.alignment(S_emb[:, at], S_sig, "spearman").value)
            runs = []
            for lane, seed in enumerate(result.seed):
                emb_pca = metrics.pca(W[lane, at], k=2)
                run_entry = {
                    "seed": int(seed),
                    "status": result.status[lane],
                    "rho0_pearson": float(rho_t[lane, at]),
                    "rho0_spearman": float(spearman[lane]),
                    "rho0_over_steps": dict(zip(steps.tolist(), rho_t[lane].tolist(), strict=True)),
                    "accuracy": float(traj.accuracy[lane, at]),
                    "pca_explained": np.asarray(emb_pca.explained_variance_ratio).tolist(),
                }
                order = _order_variable(task, alphas, N)
                if order is not None:
                    run_entry["pc1_order_spearman"] = float(
                        metrics.spearman(
                            np.asarray(emb_pca.scores)[:, 0], np.asarray(order, dtype=np.float64)
                        )
                    )
                if task == "mul":
                    odd = _odd_part(alphas)
                    same = _offdiag(odd[:, None] == odd[None, :])
                    upper = _offdiag(S_emb[lane, at])
                    run_entry["mean_S_emb_same_odd_part"] = float(upper[same].mean())
                    run_entry["mean_S_emb_other_pairs"] = float(upper[~same].mean())
                runs.append(run_entry)
                if lane == 0 and activation == cfg["activation"]:
                    panels[task] = (S_emb[0, at], S_sig, emb_pca, sig_pca, alphas, run_entry)
            entry[activation] = runs
        order = _order_variable(task, alphas, N)
        entry["signature"] = {
            "pca_explained": np.asarray(sig_pca.explained_variance_ratio).tolist(),
            "pc1_order_spearman": (
                float(
                    metrics.spearman(
                        np.asarray(sig_pca.scores)[:, 0], np.asarray(order, dtype=np.float64)
                    )
                )
                if order is not None
                else None
            ),
        }
        numbers[task] = entry

    claims = _claims(numbers, cfg)
    figures = {task: _figure(task, *panels[task], cfg) for task in TASKS}
    return Outcome(claims, figures, numbers, cfg)


def _claims(numbers: dict, cfg: dict) -> list[Claim]:
    relu, gelu = cfg["activation"], cfg["diagnostic_activation"]
    claims = []
    for task in TASKS:
        runs = numbers[task][relu]
        main = runs[0]
        others = ", ".join(f"{r['rho0_pearson']:.3f}" for r in runs[1:])
        peak = max(main["rho0_over_steps"].values())
        ok = main["rho0_pearson"] >= RHO_MIN[task]
        note = ""
        if not ok:
            g = numbers[task][gelu][0]
            note = (
                f"peak over epochs 25-300 is {peak:.3f}. With GELU instead of ReLU the same run "
                f"gives rho_0 {g['rho0_pearson']:.3f} at epoch 100 and peak "
                f"{max(g['rho0_over_steps'].values()):.3f}: ReLU's gate 1{{w_a+w_b>0}} is "
                "scale-free, so first-order (context) terms enter the gradient at any init "
                "scale and the zero-order dominance of SPEC §6.2 (derived for analytic σ) fails"
            )
        claims.append(
            Claim(
                "§8.3",
                f"{task}: S^emb aligns with S^sig,(0) at epoch 100",
                f"Pearson {main['rho0_pearson']:.3f}, Spearman {main['rho0_spearman']:.3f} "
                f"(seed 0; other seeds Pearson {others})",
                f"Pearson ≥ {RHO_MIN[task]}"
                + (" [R: 'positive and high']" if task == "mul" else ""),
                ok,
                note,
            )
        )
    for task in ("add", "sub"):
        main = numbers[task][relu][0]
        sig = numbers[task]["signature"]["pc1_order_spearman"]
        variable = "a" if task == "add" else "|a-(N+1)/2|"
        others = ", ".join(f"{abs(r['pc1_order_spearman']):.3f}" for r in numbers[task][relu][1:])
        claims.append(
            Claim(
                "§8.3",
                f"{task}: the PCA of the embeddings is ordered",
                f"|Spearman(PC1, {variable})| = {abs(main['pc1_order_spearman']):.3f} (seed 0; "
                f"others {others}); signature PCA {abs(sig):.3f}",
                f"|Spearman(PC1, {variable})| ≥ {ORDER_MIN} [R]",
                abs(main["pc1_order_spearman"]) >= ORDER_MIN,
            )
        )
    mul = numbers["mul"][relu][0]
    claims.append(
        Claim(
            "Fig. 2 (descriptive)",
            "mul: embeddings cluster by odd part",
            f"mean S^emb same odd part {mul['mean_S_emb_same_odd_part']:.3f} vs other pairs "
            f"{mul['mean_S_emb_other_pairs']:.3f}",
            "reported, no threshold",
            None,
        )
    )
    return claims


def _heatmap(fig, ax, S: np.ndarray, ticks: np.ndarray, title: str) -> None:
    """A similarity matrix on its own off-diagonal range (the signature cosines of sub and mul
    live in a narrow band that a fixed [-1, 1] scale hides), with its own colour bar."""
    plots.heatmap(ax, S, ticks, title)
    image = ax.images[0]
    image.set_cmap("viridis")
    image.set_clim(float(_offdiag(S).min()), 1.0)
    fig.colorbar(image, ax=ax, shrink=0.8)


def _figure(task, S_emb, S_sig, emb_pca, sig_pca, alphas, entry, cfg):
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.9), layout="constrained")
    _heatmap(fig, axes[0], S_emb, alphas, f"$S^{{emb}}$ at epoch {cfg['epoch']}")
    _heatmap(fig, axes[1], S_sig, alphas, "$S^{sig,(0)}$")
    plots.pca_scatter(
        axes[2],
        np.asarray(emb_pca.scores),
        alphas,
        np.asarray(emb_pca.explained_variance_ratio),
        "PCA of $w^E_a$",
    )
    plots.pca_scatter(
        axes[3],
        np.asarray(sig_pca.scores),
        alphas,
        np.asarray(sig_pca.explained_variance_ratio),
        "PCA of $\\varphi^{y;0}_a$",
    )
    fig.suptitle(
        f"{task}, N={cfg['N']}, ReLU FFN, Adam lr {cfg['lr']:g}, γ={cfg['gamma']:g}, seed 0: "
        f"Pearson ρ₀={entry['rho0_pearson']:.3f}, Spearman={entry['rho0_spearman']:.3f}",
        fontsize=10,
    )
    return fig
