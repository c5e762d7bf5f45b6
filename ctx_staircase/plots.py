"""Figures: the one figure convention of the package, its helpers, and the library's figures.

The convention (ARCHITECTURE.md "Conventions"), used by every figure of `cli` and `experiments`:

- line style says what a curve is (`LINE_STYLE`): training solid, closed form dashed, ODE
  dotted, a null control dash-dot; `role_legend` explains the styles in words on the figure;
- colour says which run: one colour per γ (`gamma_colour`, fixed by the value of γ, so the same
  γ has the same colour in every figure) or per signature order (`order_colour`);
- `figure` opens a constrained-layout figure under `_RC` (every font ≥ `MIN_FONT` pt); axis
  labels are mathtext, and every panel has a y-label (with units where there are any);
- `save_figure` writes a PNG at `_DPI` and a PDF beside it, each atomically.

The Agg backend is used so that figures render on headless machines.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import matplotlib

__all__ = [
    "ACCURACY",
    "ALIGNMENT",
    "EPOCH",
    "FLOW_TIME",
    "GAMMA",
    "GAMMA_MIN_DELTA_E",
    "GAMMA_RANGE",
    "LINE_STYLE",
    "LOSS",
    "MAX_CURVES",
    "MIN_FONT",
    "ROLE_LABEL",
    "STEP",
    "annotate_cells",
    "axis_labels",
    "category_image",
    "colorbar",
    "embedding_geometry_figure",
    "epoch_axis",
    "escape_time_figure",
    "figure",
    "gamma_colour",
    "gamma_handles",
    "grid",
    "heatmap",
    "integer_axis",
    "legend",
    "measurement_figure",
    "order_colour",
    "outline_cell",
    "pca_scatter",
    "raise_small_fonts",
    "reference",
    "role_handles",
    "role_legend",
    "save_figure",
    "signature_geometry_figure",
    "small_texts",
    "theory_handles",
    "theory_line",
    "theory_overlay_figure",
    "training_figure",
]

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.text import Text

from ctx_staircase import results
from ctx_staircase.geometry import SignatureGeometry

#: Smallest font size (pt) of any text in a figure, legends and tick labels included.
MIN_FONT = 8.0

#: Resolution (dots per inch) of every saved PNG.
_DPI = 150  # the floor (ARCHITECTURE.md, Conventions); at 200 the flagship PNG grew to 366 kB

#: Matplotlib settings of every figure (`figure`, and applied when this module is imported).
_RC = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "figure.constrained_layout.use": True,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.dpi": _DPI,
    "pdf.fonttype": 42,  # TrueType in the PDF: its text stays text
}
matplotlib.rcParams.update(_RC)

#: Line style of each role a curve can play.
LINE_STYLE = {"training": "-", "closed_form": "--", "ode": ":", "null": "-."}

#: The words `role_legend` uses for each role.
ROLE_LABEL = {
    "training": "training",
    "closed_form": "closed form",
    "ode": "ODE",
    "null": "null (labels shuffled)",
}

#: The most curves a panel of a comparison figure holds (theory overlays: one γ per row).
MAX_CURVES = 8
#: γ values are coloured on turbo over this range, so a γ keeps its colour across figures.
GAMMA_RANGE = (0.0, 2.0)
#: The least CIE76 colour distance (ΔE) between two γ 0.1 apart in [0.2, 1.6], the range the
#: figures use (tests/test_plots.py measures it; viridis gave 8.7, and γ 1.0 and 1.2 alike).
GAMMA_MIN_DELTA_E = 14.0

#: Axis labels shared by many figures (mathtext).
EPOCH = "epoch"
STEP = r"$t$ (steps)"
FLOW_TIME = r"$t = \eta \cdot$ step"
GAMMA = r"$\gamma$ (initial std $d^{-\gamma}$)"
ACCURACY = "accuracy (fraction)"
LOSS = "loss (nats)"
_COSINE = "cosine similarity"
ALIGNMENT = r"alignment $\rho$ (corr.)"


def gamma_colour(gamma: float):
    """The RGBA colour of ``gamma``: turbo at γ's place in `GAMMA_RANGE` (clipped), so the
    same γ has the same colour in every figure, and neighbours 0.1 apart differ by at least
    `GAMMA_MIN_DELTA_E`."""
    low, high = GAMMA_RANGE
    place = float(np.clip((float(gamma) - low) / (high - low), 0.0, 1.0))
    return plt.get_cmap("turbo")(place)


def order_colour(order: int) -> str:
    """The colour of signature order ``order`` (0, 1, 2, ...): Matplotlib's cycle colour
    ``C{order}``, so order 0 is blue, order 1 orange, order 2 green in every figure."""
    if int(order) < 0:
        raise ValueError(f"order must be >= 0; got {order}")
    return f"C{int(order) % 10}"


def theory_line(style) -> dict:
    """Line keywords of a theory drawn in its `theory.Style`: its own dash pattern, or its
    role's line style (`LINE_STYLE`), at its width."""
    return {
        "ls": LINE_STYLE[style.role] if style.dashes is None else style.dashes,
        "lw": style.width,
    }


def role_handles(roles=("training", "closed_form", "ode")) -> list[Line2D]:
    """Black proxy lines, one per role in ``roles``, labelled in words (`ROLE_LABEL`)."""
    return [Line2D([], [], color="k", ls=LINE_STYLE[r], lw=1.4, label=ROLE_LABEL[r]) for r in roles]


def role_legend(ax, roles=("training", "closed_form", "ode"), *, extra=(), **kwargs):
    """A legend on ``ax`` with the curves' own labelled handles, then one entry per line style
    in ``roles`` explained in words; ``extra`` adds proxy handles (e.g. from `theory_handles`).
    Returns the legend."""
    handles, labels = ax.get_legend_handles_labels()
    proxies = [*role_handles(roles), *extra]
    return ax.legend([*handles, *proxies], [*labels, *(h.get_label() for h in proxies)], **kwargs)


def theory_handles(styles) -> list[Line2D]:
    """Black proxy lines for theories drawn in their ``styles`` (`theory.Style`, `theory_line`),
    labelled with their words (to pass as ``extra=`` of `role_legend`)."""
    return [Line2D([], [], color="k", label=s.label, **theory_line(s)) for s in styles]


def gamma_handles(gammas) -> list[Line2D]:
    """Solid proxy lines in `gamma_colour`, labelled γ = value, one per distinct γ."""
    return [
        Line2D([], [], color=gamma_colour(g), lw=2, label=rf"$\gamma = {g:g}$")
        for g in dict.fromkeys(float(g) for g in gammas)
    ]


def figure(nrows: int = 1, ncols: int = 1, *, panel=(4.0, 3.4), suptitle: str | None = None, **kw):
    """A constrained-layout figure of ``nrows × ncols`` panels, each ``panel`` inches (w, h),
    under `_RC`; ``kw`` goes to `plt.subplots`. Returns ``(fig, axes)``, ``axes`` squeezed as
    `plt.subplots` does (`grid` keeps it 2-D)."""
    kw.setdefault("figsize", (panel[0] * ncols, panel[1] * nrows))
    with plt.rc_context(_RC):
        fig, axes = plt.subplots(nrows, ncols, layout="constrained", **kw)
    if suptitle:
        fig.suptitle(suptitle)
    return fig, axes


def grid(nrows: int, ncols: int, **kw):
    """`figure` whose ``axes`` is always the 2-D array ``[nrows, ncols]``, whatever the sizes
    (panels indexed ``axes[row, column]`` even for one row or column)."""
    return figure(nrows, ncols, squeeze=False, **kw)


def axis_labels(ax, x: str | None = None, y: str | None = None, title: str | None = None) -> None:
    """Set the x-label, y-label and title of ``ax`` (the ones given)."""
    if x is not None:
        ax.set_xlabel(x)
    if y is not None:
        ax.set_ylabel(y)
    if title is not None:
        ax.set_title(title)


def integer_axis(ax, which: str = "x") -> None:
    """Ticks at integers only on ``ax``'s ``which`` axis (a Fourier frequency, a count)."""
    from matplotlib.ticker import MaxNLocator

    getattr(ax, f"{which}axis").set_major_locator(MaxNLocator(integer=True))


def epoch_axis(ax, linthresh: float | None = None, label: str = EPOCH) -> None:
    """Epochs on the x axis: symlog with linear part ``[0, linthresh]`` when ``linthresh`` is
    given (so epoch 0 shows), starting at 0, labelled ``label``."""
    if linthresh is not None:
        ax.set_xscale("symlog", linthresh=linthresh)
        ax.set_xlim(left=0)
    ax.set_xlabel(label)


def reference(ax, y: float | None = None, x: float | None = None, **kw) -> None:
    """A thin grey reference line at ``y`` (horizontal) and/or ``x`` (vertical): thresholds,
    chance, phase ends; ``kw`` overrides the style (``label=`` names it in the legend)."""
    style = {"color": "0.55", "lw": 0.8, "ls": (0, (4, 2, 1, 2)), **kw}
    if y is not None:
        ax.axhline(y, **style)
        style.pop("label", None)
    if x is not None:
        ax.axvline(x, **style)


def outline_cell(ax, row: int, column: int, colour: str = "r") -> None:
    """A box around cell ``(row, column)`` of an image drawn with `imshow` on ``ax``."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, ec=colour, lw=1.5))


def annotate_cells(ax, values: np.ndarray, fmt: str = ".2f", dark_below: float = 0.6) -> None:
    """Write each entry of ``values`` [rows, columns] in its `imshow` cell (white on cells
    below ``dark_below``, black above)."""
    for (i, j), v in np.ndenumerate(np.asarray(values)):
        colour = "w" if v < dark_below else "k"
        ax.text(j, i, format(v, fmt), ha="center", va="center", color=colour)


def category_image(ax, codes: np.ndarray, categories) -> None:
    """``codes`` [rows, columns] of integers 0..len(categories)-1 (NaN: blank) as coloured
    cells; ``categories`` is ``((name, colour), ...)`` in code order; a legend names them
    beside the panel."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    colours = ListedColormap([c for _, c in categories])
    n = len(categories)
    ax.imshow(codes, cmap=colours, vmin=-0.5, vmax=n - 0.5, aspect="auto", interpolation="nearest")
    ax.grid(False)
    handles = [Patch(color=c, label=name) for name, c in reversed(categories)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1))


def legend(ax, **kw):
    """A legend of ``ax``'s labelled curves (`_RC` font), or nothing when none is labelled."""
    if not ax.get_legend_handles_labels()[0]:
        return None
    return ax.legend(**kw)


def colorbar(fig, image, axes, label: str = _COSINE, **kw):
    """A colour bar of ``image`` beside ``axes`` (an array or list of Axes), labelled."""
    axes = np.asarray(axes, dtype=object).ravel().tolist()
    return fig.colorbar(image, ax=axes, shrink=kw.pop("shrink", 0.8), label=label, **kw)


def small_texts(fig, minimum: float = MIN_FONT) -> list[tuple[str, float]]:
    """``(text, size)`` of every visible non-empty text of ``fig`` smaller than ``minimum`` pt
    (titles, labels, tick labels, legends, annotations)."""
    fig.canvas.draw()  # tick labels exist once drawn
    return [
        (t.get_text(), t.get_fontsize())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < minimum
    ]


def raise_small_fonts(fig, minimum: float = MIN_FONT) -> None:
    """Set every text of ``fig`` smaller than ``minimum`` pt to ``minimum`` pt."""
    for t in fig.findobj(Text):
        if t.get_fontsize() < minimum:
            t.set_fontsize(minimum)


def save_figure(fig, path: str | os.PathLike, *, pdf: bool = True) -> tuple[Path, Path | None]:
    """Write ``fig`` as ``path`` (PNG at `_DPI`) and, when ``pdf``, a PDF beside it (``path``
    with ``.pdf``), then close it; returns ``(png, pdf or None)``.

    Both files are rendered in memory before either is written, and each is written
    atomically (`results.atomic_write_bytes`), so a failure leaves no partial file. Fonts
    below `MIN_FONT` pt are raised to it first. A smoke run skips the PDF: embedding its
    fonts costs about as much as drawing the figure.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png; got {str(path)!r}")
    try:
        raise_small_fonts(fig)
        rendered = {}
        for kind in ("png", "pdf") if pdf else ("png",):
            buffer = io.BytesIO()
            fig.savefig(buffer, format=kind, dpi=_DPI, bbox_inches="tight")
            rendered[kind] = buffer.getvalue()
    finally:
        plt.close(fig)
    png = results.atomic_write_bytes(path, rendered["png"])
    if not pdf:
        return png, None
    return png, results.atomic_write_bytes(path.with_suffix(".pdf"), rendered["pdf"])


# --------------------------------------------------------------------------------------------
# Panels


def heatmap(ax, S: np.ndarray, ticks: np.ndarray, title: str, *, vmin: float = -1.0):
    """A similarity matrix ``S`` [n, n] on [vmin, 1] with token ids ``ticks`` [n] on both axes;
    returns the image (for `colorbar`)."""
    image = ax.imshow(S, cmap="RdBu_r", vmin=vmin, vmax=1, interpolation="nearest")
    ticks = np.asarray(ticks)
    step = max(1, len(ticks) // 8)
    positions = np.arange(0, len(ticks), step)
    ax.set_xticks(positions, [str(t) for t in ticks[positions]])
    ax.set_yticks(positions, [str(t) for t in ticks[positions]])
    ax.grid(False)
    axis_labels(ax, "token $b$", "token $a$", title)
    return image


def pca_scatter(
    ax, scores: np.ndarray, labels: np.ndarray, explained, title: str, *, path=slice(None)
) -> None:
    """Tokens in the plane of the first two principal components (``scores`` [n, ≥2]),
    coloured by token id ``labels`` [n]; ``explained`` [≥1] the variance ratios; a grey line
    joins the rows of ``path`` in its order (default: every row in order; ``[]``: none)."""
    ax.plot(scores[path, 0], scores[path, 1], color="0.8", lw=0.6, zorder=1)
    ax.scatter(scores[:, 0], scores[:, 1], c=labels, cmap="viridis", s=18, zorder=2)
    if len(labels) <= 60:
        for (x, y), t in zip(scores[:, :2], labels, strict=True):
            ax.annotate(
                str(t), (x, y), fontsize=MIN_FONT, xytext=(2, 2), textcoords="offset points"
            )
    second = f"PC2 ({100 * explained[1]:.0f}% var.)" if len(explained) > 1 else "PC2"
    axis_labels(ax, f"PC1 ({100 * explained[0]:.0f}% var.)", second, title)


# --------------------------------------------------------------------------------------------
# The library's figures (`cli`)


def signature_geometry_figure(geometry: SignatureGeometry, task: str):
    """Heatmaps (top) and PCA (bottom) of every signature geometry in ``geometry``."""
    names = list(geometry.similarity)
    fig, axes = grid(
        2,
        len(names),
        panel=(3.3, 3.3),
        suptitle=f"{task}: signature geometry of the '{geometry.group}' tokens",
    )
    for column, name in enumerate(names):
        title = _signature_title(name)
        image = heatmap(axes[0, column], geometry.similarity[name], geometry.alphas, title)
        pca = geometry.pca[name]
        pca_scatter(
            axes[1, column],
            np.asarray(pca.scores),
            geometry.alphas,
            np.asarray(pca.explained_variance_ratio),
            f"PCA of {title}",
        )
    colorbar(fig, image, axes[0, :])
    return fig


def _signature_title(name: str) -> str:
    """Mathtext for a signature geometry's key: ``"order1"`` -> $S^{sig,(1)}$, ``"order1_k3"``
    -> $S^{sig,(1)}_{k=3}$."""
    if "_k" in name:
        order, k = name.split("_k")
        return f"$S^{{sig,({order[-1]})}}_{{k={k}}}$"
    return f"$S^{{sig,({name[-1]})}}$"


def _lane_styles(gamma: np.ndarray, seed: np.ndarray, lr: np.ndarray):
    """One colour per γ (`gamma_colour`); seeds after the first get thinner lines with
    markers (line style is reserved for the role: these are all training)."""
    markers = (None, "o", "s", "^", "v", "D")
    marker_of = {s: markers[i % len(markers)] for i, s in enumerate(np.unique(seed))}
    for g, s, r in zip(gamma, seed, lr, strict=True):
        yield dict(
            color=gamma_colour(g),
            ls=LINE_STYLE["training"],
            marker=marker_of[s],
            ms=3,
            markevery=0.1,
            label=rf"$\gamma$={g:g} seed={s} $\eta$={r:g}",
        )


def training_figure(sweep_result, curves, time_label: str, rows=None):
    """Loss, accuracy, ρ₀(t) and the held-out probe correlation of every lane of a sweep.

    ``rows``: ``[(title, lanes), ...]``, one row of panels per group of lanes (a sweep over
    several datasets: one row each); default one row of every lane."""
    traj = sweep_result.trajectory
    x = np.maximum(np.asarray(traj.steps[0]), 1)
    rows = rows or [(None, np.arange(len(sweep_result.status)))]
    fig, grid_axes = grid(len(rows), 4, panel=(4.2, 3.6))
    styles = list(_lane_styles(sweep_result.gamma, sweep_result.seed, sweep_result.lr))
    for (row_title, lanes), axes in zip(rows, grid_axes, strict=True):
        for lane in lanes:
            style = styles[lane]
            axes[0].plot(x, traj.loss[lane], **style)
            axes[1].plot(x, traj.accuracy[lane], **style)
            axes[2].plot(x, curves.rho0[lane], **style)
            if curves.probe_steps.size:
                style = {**style, "marker": "o", "markevery": 1}
                axes[3].plot(np.maximum(curves.probe_steps, 1), curves.probe_corr[lane], **style)
        _training_panels(axes, curves, time_label, row_title)
    return fig


def _training_panels(axes, curves, time_label: str, row_title: str | None) -> None:
    """The labels and scales of one row of `training_figure`."""
    panels = (
        (LOSS, "cross-entropy"),
        (ACCURACY, "training accuracy"),
        (
            rf"$\rho_0$ ({curves.rho0_method})",
            r"$\rho_0$: $S^{emb}$ vs $S^{sig,(0)}$",
        ),
        ("held-out corr.", "first-order probe"),
    )
    for ax, (y, title) in zip(axes, panels, strict=True):
        ax.set_xscale("log")
        axis_labels(ax, time_label, y, title if row_title is None else f"{row_title}: {title}")
    legend(axes[0], loc="best")


def embedding_geometry_figure(W_E, steps, curves, snapshot_indices, title: str):
    """Embedding cosine heatmaps and PCA at chosen snapshots, next to ``S^{sig,(0)}``.

    ``W_E`` [snapshots, vocab, d], ``steps`` [snapshots]; ``curves.alphas`` the tokens shown.
    """
    from ctx_staircase import metrics

    alphas = curves.alphas
    columns = len(snapshot_indices) + 1
    fig, axes = grid(2, columns, panel=(3.3, 3.3), suptitle=title)
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
    colorbar(fig, image, axes[0, :])
    return fig


def theory_overlay_figure(experiment, title: str):
    """Theory over training: logit scale, ρ₀ and ρ₁ against t = η · step, one row per γ (in its
    colour), so a panel holds training and each theory once (at most `MAX_CURVES` curves for up
    to seven theories); each theory in its style (`theory_line`), the styles in the legend.

    ``experiment``: a `comparison.TheoryVsTraining`.
    """
    ts = experiment.ts
    runs = experiment.runs
    fig, axes = grid(len(runs), 3, panel=(4.2, 2.9), suptitle=title)
    for row, run in zip(axes, runs, strict=True):
        colour = gamma_colour(run.gamma)
        first = next(iter(run.comparisons.values()))
        row[0].plot(ts, first.logit_scale.simulation, color=colour, lw=1.8)
        for m in (0, 1):
            row[1 + m].plot(ts, first.rho.simulation[m], color=colour, lw=1.8)
        for name, comparison in run.comparisons.items():
            style = {"color": colour, **theory_line(experiment.styles[name])}
            row[0].plot(ts, comparison.logit_scale.theory, **style)
            for m in (0, 1):
                row[1 + m].plot(ts, comparison.rho.theory[m], **style)
        reference(row[0], y=experiment.threshold, label="escape threshold")
        row[0].set_yscale("log")
        row[0].set_ylim(top=1e3)  # past escape the truncated theories blow up; not their regime
        gamma = rf"$\gamma = {run.gamma:g}$"
        axis_labels(row[0], FLOW_TIME, "largest centred logit (nats)", f"logit scale, {gamma}")
        axis_labels(
            row[1], FLOW_TIME, r"$\rho_0$ (corr.)", rf"alignment with $S^{{sig,(0)}}$, {gamma}"
        )
        axis_labels(row[2], FLOW_TIME, r"$\rho_1$ (corr.)", f"best first-order alignment, {gamma}")
    styles = [experiment.styles[name] for name in runs[0].comparisons]
    extra = [*gamma_handles(r.gamma for r in runs), *theory_handles(styles)]
    role_legend(axes[0, 0], roles=("training",), extra=extra, loc="best")
    return fig


def escape_time_figure(experiment, title: str):
    """Escape time against γ: theory lines, measured points (theory/closed_form.md §4), and the
    model's analytic escape law (`theory.ModelTheory.analytic_curve`).

    FFN: linear axes with the analytic slope ``ln d / (C_1 s_1)`` (eq. C8). Attention-only:
    log time, with the plateau law ``T_Z d^{2 gamma} - c`` and its power ``T_Z d^{2 gamma}``,
    whose slope in ``ln t`` is ``2 ln d`` (theory/attention.md A5b). ``experiment``: a
    `comparison.TheoryVsTraining`.
    """
    escape, slopes, log_time = experiment.escape, experiment.escape_slope, experiment.model.log_time
    gammas = np.asarray(escape.gamma)
    unit = r"$d \ln t / d\gamma$" if log_time else "slope"
    measured = f"measured {unit} {slopes.simulation:.2f}"
    fig, ax = figure(1, 1, panel=(5.4, 4.2), suptitle=f"{title}\n{measured}")
    ax.plot(gammas, escape.simulation, "o", color="k", label="training (measured)")
    for i, (name, times) in enumerate(escape.theories.items()):
        style = experiment.styles[name]
        label = f"{style.label} ({unit} {slopes.theories[name]:.2f})"
        ax.plot(gammas, times, color=f"C{i + 1}", marker="x", label=label, **theory_line(style))
    fine = np.linspace(gammas.min(), gammas.max(), 100)
    law, label = experiment.model.analytic_curve(fine, experiment)
    ax.plot(fine, law, label=label, color="0.4", ls=LINE_STYLE["closed_form"], lw=1.0)
    if log_time:
        ax.set_yscale("log")
    axis_labels(ax, GAMMA, "escape time " + FLOW_TIME + (" (log)" if log_time else ""))
    legend(ax)
    return fig


def measurement_figure(measured, source: str):
    """A `measure.Measurement`: each alignment curve with its row-permuted null (dashed, the
    same colour), and the held-out probe correlation, against the snapshot step."""
    fig, axes = figure(1, 2, panel=(4.6, 3.6), suptitle=f"{measured.reference}: {source}")
    order = np.argsort(measured.steps, kind="stable")  # snapshots may come in any order
    x = np.asarray(measured.steps)[order]
    for i, (name, values) in enumerate(measured.alignment.items()):
        colour = order_colour(0) if i == 0 else f"C{i % 10}"
        label = {"rho_next": r"$\rho_{next}$", "rho0": r"$\rho_0$"}.get(name, name)
        axes[0].plot(x, np.asarray(values)[order], color=colour, marker="o", ms=3, label=label)
        # a marker too: a single snapshot's null is one point, which a line alone never draws
        axes[0].plot(
            x, np.asarray(measured.null[name])[order], color=colour, ls="--", lw=0.9, marker="x",
            ms=4,
        )  # fmt: skip
    reference(axes[0], y=0.0, label="null: rows permuted (dashed, x)")
    axes[1].plot(x, np.asarray(measured.probe["corr"])[order], color=order_colour(1), marker="o")
    axis_labels(axes[0], "step", "alignment", "embedding vs signature")
    axis_labels(axes[1], "step", "held-out corr.", "first-order probe")
    legend(axes[0], loc="best")
    return fig
