"""The library part of the language-model study: train GPT lanes on a corpus, measure their
signature alignment, summarise and draw it (used by ``ctx-staircase lm`` and by the `lm_text` and
`lm_builtin` experiments, which add the claims).

- `train_and_measure`: `lm.train_lm` at several initial scales in one compiled program, the
  signatures of the tracked tokens (`lm.lm_signatures`) and the curves (`lm.lm_metrics`;
  definitions: theory/lm.md);
- `summarize` and `curve_lists`: the per-lane numbers of the rise-peak-settle shape and the
  probe, and the curves as JSON lists;
- `structure`, `group_structure`: the three semantic measures of `semantics` on the built-in
  corpus's word groups (of its vocabulary, or of any tokenizer's);
- `curves_figure`, `semantic_figure`: the figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctx_staircase import lm, metrics, plots, semantics, text

__all__ = [
    "CATEGORIES",
    "GAMMAS",
    "curve_lists",
    "curves_figure",
    "group_structure",
    "semantic_figure",
    "structure",
    "summarize",
    "train_and_measure",
]

#: The initial scales d^-gamma of the two lanes: small (gamma = 1) and standard (gamma = 0.5).
GAMMAS = (1.0, 0.5)
#: The built-in corpus's category groups scored by `semantics.category_purity`.
CATEGORIES = ("colors", "animals", "family")


def train_and_measure(
    corpus: text.Corpus,
    config: lm.LMConfig,
    *,
    gammas=GAMMAS,
    seed: int = 0,
    probe_steps: int = metrics.PROBE_STEPS,
    out: str | Path | None = None,
) -> tuple[lm.LMTrajectory, lm.LMSignatures, lm.LMCurves]:
    """Train the gamma lanes (saved in ``out`` to resume, see `lm.train_lm`), count the
    signatures of their tracked tokens, measure the curves."""
    trajectory = lm.train_lm(corpus, config, gammas=gammas, seed=seed, out=out)
    signature = lm.lm_signatures(
        corpus.train,
        corpus.vocab_size,
        trajectory.tracked,
        context_length=config.context_length,
        probe_vocabulary=config.probe_vocabulary,
    )
    curves = lm.lm_metrics(trajectory, signature, seed=seed, probe_steps=probe_steps)
    return trajectory, signature, curves


def summarize(trajectory: lm.LMTrajectory, curves: lm.LMCurves) -> dict:
    """Per-lane numbers of the rise-peak-settle shape and the probe, keyed by gamma."""
    steps = trajectory.steps
    summary = {}
    for g, gamma in enumerate(trajectory.gammas):
        rho = curves.rho_next[g]
        peak = int(np.argmax(rho))
        ratio = curves.probe_mse[g, 1:] / np.maximum(curves.probe_baseline_mse[g, 1:], 1e-12)
        summary[f"{gamma:g}"] = dict(
            rho_next_start=float(rho[0]),
            rho_next_peak=float(rho[peak]),
            rho_next_peak_step=int(steps[peak]),
            rho_next_final=float(rho[-1]),
            rho_next_min_after_peak=float(rho[peak:].min()),
            rho_previous_peak=float(curves.rho_previous[g].max()),
            rho_previous_final=float(curves.rho_previous[g, -1]),
            rho_attention_early_max=[
                float(curves.rho_attention[g, : max(2, len(steps) // 4), layer].max())
                for layer in range(curves.rho_attention.shape[-1])
            ],
            rho_attention_final=[float(v) for v in curves.rho_attention[g, -1]],
            probe_mse_ratio_median=float(np.median(ratio)),
            probe_mse_ratio_max=float(ratio.max()),
            probe_mse_ratio_init=float(
                curves.probe_mse[g, 0] / max(float(curves.probe_baseline_mse[g, 0]), 1e-12)
            ),
            probe_constant_ratio_median=float(
                np.median(
                    curves.probe_mse[g, 1:] / np.maximum(curves.probe_constant_mse[g, 1:], 1e-12)
                )
            ),
            probe_corr_at_peak=float(curves.probe_corr[g, peak]),
            probe_corr_median=float(np.median(curves.probe_corr[g, 1:])),
            probe_slope_median=float(np.median(curves.probe_slope[g, 1:])),
            loss_final=float(curves.loss[g, -1]),
            validation_loss_final=float(curves.validation_loss[g, -1]),
            diverged_step=int(trajectory.diverged_step[g]),
        )
    return summary


def curve_lists(trajectory: lm.LMTrajectory, curves: lm.LMCurves) -> dict:
    """The curves as JSON lists (5 decimals), with the steps and gammas."""
    out = {"steps": trajectory.steps.tolist(), "gammas": trajectory.gammas.tolist()}
    for name in curves._fields:
        out[name] = np.round(np.asarray(getattr(curves, name), dtype=float), 5).tolist()
    return out


def curves_figure(trajectory: lm.LMTrajectory, curves: lm.LMCurves, title: str):
    """rho_next, rho_pre, rho^l_attn, the probe's MSE ratio and the losses against step; one
    colour per γ (`plots.gamma_colour`), a marker for each series sharing a panel."""
    steps = trajectory.steps
    fig, axes = plots.figure(1, 5, panel=(4.2, 3.8), suptitle=title)
    markers = ("o", "s", "^", "v", "D", "x")
    for g, gamma in enumerate(trajectory.gammas):
        label = f"$\\gamma$={gamma:g}"
        style = {"color": plots.gamma_colour(gamma), "ms": 3, "markevery": 0.1}
        axes[0].plot(steps, curves.rho_next[g], label=label, **style)
        axes[1].plot(steps, curves.rho_previous[g], label=label, **style)
        for layer in range(curves.rho_attention.shape[-1]):
            axes[2].plot(
                steps,
                curves.rho_attention[g, :, layer],
                marker=markers[layer % len(markers)],
                label=f"{label}, layer {layer}",
                **style,
            )
        ratio = curves.probe_mse[g] / np.maximum(curves.probe_baseline_mse[g], 1e-12)
        axes[3].plot(steps, ratio, marker="o", label=f"{label} / best constant", **style)
        ratio = curves.probe_mse[g] / np.maximum(curves.probe_constant_mse[g], 1e-12)
        axes[3].plot(steps, ratio, marker="s", label=f"{label} / training mean", **style)
        axes[4].plot(steps, curves.loss[g], label=f"{label} train", **style)
        axes[4].plot(
            steps, curves.validation_loss[g], marker="x", label=f"{label} validation", **style
        )
    panels = (
        (r"$\rho_{next}$ (corr.)", r"$\rho_{next}$: $W_E$ vs next-token signature"),
        (r"$\rho_{pre}$ (corr.)", r"$\rho_{pre}$: $W_U$ vs previous-token signature"),
        (r"$\rho^l_{attn}$ (corr.)", r"$\rho^l_{attn}$ per layer (eq. 22)"),
        ("MSE ratio", "prefix probe + readout: held-out MSE ratio"),
        (plots.LOSS, "loss"),
    )
    for ax, (y, name) in zip(axes, panels, strict=True):
        plots.epoch_axis(ax, max(1, int(steps[1])), plots.STEP)  # the early peak is visible
        plots.axis_labels(ax, y=y, title=name)
        plots.legend(ax)
    plots.reference(axes[3], y=1.0, ls="-")
    return fig


def structure(vectors: np.ndarray, vocabulary: text.Vocabulary) -> dict:
    """The three semantic measures of `semantics` on rows ``vectors[token id]``."""
    return group_structure(
        {g: vectors[text.word_group_ids(vocabulary, g)] for g in text.BUILTIN_GROUPS}
    )


def group_structure(rows: dict[str, np.ndarray]) -> dict:
    """The semantic measures of `semantics` whose word groups are among ``rows`` (group name
    of `text.BUILTIN_GROUPS` -> its words' vectors ``[n, d]``, in the group's order)."""
    measures = {}
    if "numbers" in rows:
        measures["number_order"] = semantics.number_order(rows["numbers"])
    for name, group in (("weekday_cycle", "weekdays"), ("month_cycle", "months")):
        if group in rows:
            measures[name] = semantics.cycle_neighbours(rows[group])
    if all(c in rows for c in CATEGORIES):
        measures["category_purity"] = semantics.category_purity({c: rows[c] for c in CATEGORIES})
    return measures


def semantic_figure(phi_next: np.ndarray, W_E: np.ndarray, vocabulary: text.Vocabulary):
    """PCA of the next-token signatures (top row) and of the learned embeddings (bottom row)
    for numbers (joined in order), weekdays and months (joined as cycles), and the three
    categories together (coloured by category)."""
    panels = ("numbers", "weekdays", "months", "categories")
    fig, axes = plots.figure(
        2,
        len(panels),
        panel=(4.0, 3.75),
        suptitle=(
            r"Built-in corpus: PCA of next-token signatures and of the final $W_E$ ($\gamma$ = 1)"
        ),
    )
    for row, (vectors, kind) in enumerate(((phi_next, "signature"), (W_E, "embedding"))):
        for ax, panel in zip(axes[row], panels, strict=True):
            groups = CATEGORIES if panel == "categories" else (panel,)
            ids = np.concatenate([text.word_group_ids(vocabulary, g) for g in groups])
            result = metrics.pca(np.asarray(vectors[ids], dtype=np.float64), 2)
            x, y = np.asarray(result.scores).T
            if panel == "categories":
                sizes = [len(text.BUILTIN_GROUPS[g]) for g in groups]
                ax.scatter(
                    x,
                    y,
                    c=np.repeat(np.arange(len(groups)), sizes),
                    cmap="tab10",
                    s=18,
                    vmin=0,
                    vmax=9,
                )
            else:
                closed = panel != "numbers"
                ax.plot(
                    np.r_[x, x[:1]] if closed else x,
                    np.r_[y, y[:1]] if closed else y,
                    color="0.75",
                    lw=0.8,
                )
                ax.scatter(x, y, c=np.arange(len(ids)), cmap="viridis", s=18)
            for xi, yi, word in zip(x, y, vocabulary.decode(ids), strict=True):
                ax.annotate(word, (xi, yi), xytext=(2, 2), textcoords="offset points")
            explained = np.asarray(result.explained_variance_ratio)
            plots.axis_labels(
                ax,
                f"PC1 ({100 * explained[0]:.0f}% var.)",
                f"PC2 ({100 * explained[1]:.0f}% var.)",
                f"{kind}: {panel}",
            )
    return fig
