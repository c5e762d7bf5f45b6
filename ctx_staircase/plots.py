"""Figures (DESIGN.md "Figures"): heatmaps of similarity matrices and PCA scatter plots.

Functions return Matplotlib figures; `results.save_figure` writes them. The Agg backend is used so
that figures render on headless machines.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from ctx_staircase.geometry import SignatureGeometry


def heatmap(ax, S: np.ndarray, ticks: np.ndarray, title: str) -> None:
    """A similarity matrix on [-1, 1] with token ids on both axes."""
    image = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    step = max(1, len(ticks) // 8)
    positions = np.arange(0, len(ticks), step)
    ax.set_xticks(positions, [str(t) for t in ticks[positions]], fontsize=7)
    ax.set_yticks(positions, [str(t) for t in ticks[positions]], fontsize=7)
    ax.set_xlabel("token b")
    ax.set_ylabel("token a")
    ax.set_title(title, fontsize=9)
    return image


def pca_scatter(ax, scores: np.ndarray, labels: np.ndarray, explained, title: str) -> None:
    """Tokens in the plane of the first two principal components, coloured by token id."""
    ax.plot(scores[:, 0], scores[:, 1], color="0.8", lw=0.6, zorder=1)
    ax.scatter(scores[:, 0], scores[:, 1], c=labels, cmap="viridis", s=18, zorder=2)
    if len(labels) <= 60:
        for (x, y), t in zip(scores[:, :2], labels, strict=True):
            ax.annotate(str(t), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% var.)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% var.)" if len(explained) > 1 else "PC2")
    ax.set_title(title, fontsize=9)


def signature_geometry_figure(geometry: SignatureGeometry, task: str):
    """Heatmaps (top) and PCA (bottom) of every signature geometry in ``geometry``."""
    names = list(geometry.similarity)
    fig, axes = plt.subplots(
        2, len(names), figsize=(3.3 * len(names), 6.6), squeeze=False, layout="constrained"
    )
    for column, name in enumerate(names):
        label = _title(name)
        image = heatmap(axes[0, column], geometry.similarity[name], geometry.alphas, label)
        pca = geometry.pca[name]
        pca_scatter(
            axes[1, column],
            np.asarray(pca.scores),
            geometry.alphas,
            np.asarray(pca.explained_variance_ratio),
            f"PCA of {label}",
        )
    fig.colorbar(image, ax=axes[0, :].tolist(), shrink=0.8, label="cosine similarity")
    fig.suptitle(f"{task}: signature geometry of the '{geometry.group}' tokens")
    return fig


def _title(name: str) -> str:
    if "_k" in name:
        order, k = name.split("_k")
        return f"$S^{{sig,({order[-1]})}}_{{k={k}}}$"
    return f"$S^{{sig,({name[-1]})}}$"


def _lane_styles(gamma: np.ndarray, seed: np.ndarray, lr: np.ndarray):
    """One colour per gamma, one line style per seed; labels name the lane."""
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, max(len(np.unique(gamma)), 1)))
    colour_of = {g: colours[i] for i, g in enumerate(np.unique(gamma))}
    styles = ("-", "--", ":", "-.")
    style_of = {s: styles[i % len(styles)] for i, s in enumerate(np.unique(seed))}
    for g, s, r in zip(gamma, seed, lr, strict=True):
        yield dict(color=colour_of[g], ls=style_of[s], label=f"γ={g:g} seed={s} lr={r:g}")


def training_figure(sweep_result, curves, time_label: str):
    """Loss, accuracy, rho_0(t) and the held-out probe correlation of every lane of a sweep."""
    traj = sweep_result.trajectory
    x = np.maximum(np.asarray(traj.steps[0]), 1)
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8), layout="constrained")
    styles = list(_lane_styles(sweep_result.gamma, sweep_result.seed, sweep_result.lr))
    for lane, style in enumerate(styles):
        axes[0].plot(x, traj.loss[lane], **style)
        axes[1].plot(x, traj.accuracy[lane], **style)
        axes[2].plot(x, curves.rho0[lane], **style)
        if curves.probe_steps.size:
            axes[3].plot(
                np.maximum(curves.probe_steps, 1),
                curves.probe_corr[lane],
                marker="o",
                ms=3,
                **style,
            )
    titles = (
        "loss (cross-entropy, nats)",
        "training accuracy",
        f"$\\rho_0$: $S^{{emb}}$ vs $S^{{sig,(0)}}$ ({curves.rho0_method})",
        "first-order probe, held-out corr.",
    )
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log")
        ax.set_xlabel(time_label)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, loc="best")
    return fig


def embedding_geometry_figure(W_E, steps, curves, snapshot_indices, title: str):
    """Embedding cosine heatmaps and PCA at chosen snapshots, next to ``S^{sig,(0)}``."""
    from ctx_staircase import metrics

    alphas = curves.alphas
    columns = len(snapshot_indices) + 1
    fig, axes = plt.subplots(
        2, columns, figsize=(3.3 * columns, 6.6), squeeze=False, layout="constrained"
    )
    S_emb = np.asarray(metrics.cosine_matrix(np.asarray(W_E)[:, alphas]))
    for column, s in enumerate(snapshot_indices):
        image = heatmap(axes[0, column], S_emb[s], alphas, f"$S^{{emb}}$ at step {steps[s]}")
        embedding_pca = metrics.pca(np.asarray(W_E)[s, alphas], k=2)
        pca_scatter(
            axes[1, column],
            np.asarray(embedding_pca.scores),
            alphas,
            np.asarray(embedding_pca.explained_variance_ratio),
            f"PCA of $w^E$ at step {steps[s]}",
        )
    heatmap(axes[0, -1], curves.S_sig0, alphas, "$S^{sig,(0)}$ (signature)")
    axes[1, -1].axis("off")
    fig.colorbar(image, ax=axes[0, :].tolist(), shrink=0.8, label="cosine similarity")
    fig.suptitle(title)
    return fig


def theory_overlay_figure(experiment: dict, title: str):
    """Theory dashed over training solid: logit scale, rho_0 and rho_1 against t = lr * step."""
    ts = experiment["ts"]
    runs = experiment["runs"]
    colours = plt.cm.viridis(np.linspace(0.0, 0.9, len(runs)))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    dashes = {"closed_form": "--", "signature_flow": ":", "uniform_attention_flow": "--"}
    for colour, run in zip(colours, runs, strict=True):
        first = next(iter(run["comparisons"].values()))
        axes[0].plot(
            ts,
            first["logit_scale"]["simulation"],
            color=colour,
            lw=1.8,
            label=f"γ={run['gamma']:g} training",
        )
        for m in (0, 1):
            axes[1 + m].plot(ts, first["rho"]["simulation"][m], color=colour, lw=1.8)
        for name, comparison in run["comparisons"].items():
            style = next(v for k, v in dashes.items() if name.startswith(k))
            axes[0].plot(ts, comparison["logit_scale"]["theory"], color=colour, ls=style, lw=1.2)
            for m in (0, 1):
                axes[1 + m].plot(ts, comparison["rho"]["theory"][m], color=colour, ls=style, lw=1.2)
    axes[0].axhline(experiment["threshold"], color="k", lw=0.8, ls="-.", label="escape threshold")
    axes[0].set_yscale("log")
    axes[0].set_ylim(top=1e3)  # past escape the truncated theories blow up; not their regime
    axes[0].set_title("largest centred logit (nats)", fontsize=9)
    axes[1].set_title("$\\rho_0$: alignment with $S^{sig,(0)}$", fontsize=9)
    axes[2].set_title("$\\rho_1$: best first-order frequency alignment", fontsize=9)
    names = ", ".join(
        f"{k} ({v})"
        for k, v in dashes.items()
        if any(n.startswith(k) for n in runs[0]["comparisons"])
    )
    for ax in axes:
        ax.set_xlabel("t = lr · step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"{title}\ntraining solid; theory: {names}", fontsize=10)
    return fig


def escape_time_figure(experiment: dict, title: str):
    """Escape time against gamma: theory lines, measured points (SPEC §8 item 14).

    FFN: linear axes with the analytic slope ``ln d / (C_1 s_1)`` (eq. C8). Attention-only:
    log time, with the plateau law ``T_Z d^{2 gamma} - c`` and its power ``T_Z d^{2 gamma}``,
    whose slope in ``ln t`` is ``2 ln d`` (theory/attention.md A5b).
    """
    escape = experiment["escape"]
    slopes = experiment["escape_slope"]
    gammas = np.asarray(escape["gamma"])
    attention = experiment.get("model") == "attention"
    fig, ax = plt.subplots(figsize=(5.2, 4), layout="constrained")
    ax.plot(gammas, escape["simulation"], "o", color="k", label="training (measured)")
    for name, values in escape.items():
        if name in ("gamma", "simulation"):
            continue
        unit = "d ln t/dγ" if attention else "slope"
        ax.plot(gammas, values, "--", label=f"{name} ({unit} {slopes[name]:.2f})")
    fine = np.linspace(gammas.min(), gammas.max(), 100)
    if attention:
        law = experiment["law"]
        d = float(np.exp(slopes["analytic"] / 2))
        ax.plot(
            fine,
            law["blowup_time_T_Z"] * d ** (2 * fine),
            ":",
            color="0.4",
            label=f"T_Z d^(2γ), slope 2 ln d = {slopes['analytic']:.2f}",
        )
        ax.set_yscale("log")
    else:
        analytic = slopes["analytic"]
        anchor = np.nanmean(np.asarray(escape["simulation"]) - analytic * gammas)
        ax.plot(
            fine,
            anchor + analytic * fine,
            ":",
            color="0.4",
            label=f"ln d / (C_1 s_1) slope {analytic:.1f} (offset fitted)",
        )
    ax.set_xlabel("γ (initial std d^{-γ})")
    ax.set_ylabel("escape time t = lr · step" + (" (log)" if attention else ""))
    measured = f"{'d ln t/dγ' if attention else 'slope'} {slopes['simulation']:.2f}"
    ax.set_title(f"{title}\nmeasured {measured}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig
