"""The figure convention of `plots` (styles, colours, role legend, fonts) and `save_figure`
(PNG at >= 150 dpi and a PDF beside it, atomically), and the library's figures on small input."""

from __future__ import annotations

import ast
import io
from pathlib import Path
from types import SimpleNamespace

import matplotlib.colors as mcolors
import numpy as np
import pytest
from PIL import Image

from ctx_staircase import comparison, plots, results, theory

EXPERIMENTS = Path(plots.__file__).parent / "experiments"


def _line_style(ls):
    """The dash pattern Matplotlib draws for ``ls`` (so '--' and (0, (3.7, 1.6)) compare)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], ls=ls, lw=1.0)._unscaled_dash_pattern


# --------------------------------------------------------------------------------------------
# the convention


def test_line_styles_are_the_convention_and_distinct():
    assert plots.LINE_STYLE["training"] == "-"
    assert plots.LINE_STYLE["closed_form"] == "--"
    assert plots.LINE_STYLE["ode"] == ":"
    patterns = [_line_style(ls) for ls in plots.LINE_STYLE.values()]
    assert len({str(p) for p in patterns}) == len(patterns)


def _registered() -> list:
    """Every registered theory, the per-order families at orders 0 to 3: read from the
    registry, so a new theory is checked too."""
    from ctx_staircase import theories

    registered = []
    for entry in theories.REGISTRY:
        is_family = isinstance(entry, theory.PerOrder)
        registered += [entry.theory(m) for m in range(4)] if is_family else [entry]
    return registered


def _registered_styles() -> dict:
    """The style of every registered theory and of the escape laws, by name."""
    from ctx_staircase import escape

    styles = {theory.name: theory.style for theory in _registered()}
    return styles | {escape.PlateauLaw.NAME: escape.PlateauLaw.STYLE}


@pytest.mark.parametrize("name, style", _registered_styles().items())
def test_theories_take_their_roles_style_and_words(name, style):
    line = plots.theory_line(style)
    assert style.label.startswith(plots.ROLE_LABEL[style.role]), name
    dashes = _line_style(line["ls"])[1]
    if style.role == "ode":  # dotted: short on-segments
        assert dashes is not None and dashes[0] <= 1.0, name
    else:  # dashed: long on-segments
        assert dashes is not None and dashes[0] >= 3.0, name
    assert _line_style(line["ls"]) != _line_style(plots.LINE_STYLE["training"])


def test_a_theory_without_its_own_dashes_uses_its_roles_line_style():
    from ctx_staircase.theory import Style

    for role in ("closed_form", "ode"):
        assert plots.theory_line(Style(role, "x"))["ls"] == plots.LINE_STYLE[role]


def test_the_theories_of_one_model_are_told_apart():
    """No two registered theories of one model (nor its escape law) share a line or a label:
    each is recognisable in the legend of a run."""
    from ctx_staircase import escape, theories

    for model in theories.MODELS:
        styles = [theory.style for theory in _registered() if theory.model is model]
        if model.predict is escape.plateau_law:
            styles.append(escape.PlateauLaw.STYLE)
        lines = {(str(_line_style(plots.theory_line(s)["ls"])), s.width) for s in styles}
        assert len(lines) == len(styles), model.name
        assert len({s.label for s in styles}) == len(styles), model.name


def test_gamma_colour_depends_on_gamma_only_and_orders_them():
    assert plots.gamma_colour(0.8) == plots.gamma_colour(np.float64(0.8))
    gammas = [0.2, 0.5, 0.8, 1.0, 1.5]
    colours = [mcolors.to_hex(plots.gamma_colour(g)) for g in gammas]
    assert len(set(colours)) == len(gammas)
    # the same γ has the same colour whatever the other γ of the figure
    assert mcolors.to_hex(plots.gamma_colour(1.0)) == colours[3]
    # monotone along viridis: blue-purple for small γ, yellow-green for large
    low, high = (mcolors.to_rgb(plots.gamma_colour(g)) for g in (0.0, 2.0))
    assert low[2] > low[1] and high[1] > high[2]


def test_order_colour_is_the_cycle_colour_of_the_order():
    assert [plots.order_colour(m) for m in range(3)] == ["C0", "C1", "C2"]
    assert len({mcolors.to_hex(plots.order_colour(m)) for m in range(4)}) == 4
    with pytest.raises(ValueError):
        plots.order_colour(-1)


def test_role_legend_explains_line_styles_in_words():
    fig, ax = plots.figure()
    ax.plot([0, 1], [0, 1], color=plots.gamma_colour(0.5), label=r"$\gamma = 0.5$")
    from ctx_staircase import theories

    flow = theories.signature_flow(2)
    legend = plots.role_legend(ax, extra=plots.theory_handles([flow.style]))
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == [
        r"$\gamma = 0.5$",
        "training",
        "closed form",
        "ODE",
        "ODE: signature flow to order 2",
    ]
    lines = legend.get_lines()
    for line, role in zip(lines[1:4], ("training", "closed_form", "ode"), strict=True):
        assert _line_style(line.get_linestyle()) == _line_style(plots.LINE_STYLE[role])
    plots.plt.close(fig)


def test_reference_line_and_legend_helpers():
    fig, ax = plots.figure()
    assert plots.legend(ax) is None  # nothing labelled, no empty legend box
    plots.reference(ax, y=0.5, x=2.0, label="threshold")
    assert ax.get_lines()[0].get_label() == "threshold"
    assert len(ax.get_lines()) == 2
    assert plots.legend(ax) is not None
    plots.plt.close(fig)


@pytest.mark.parametrize("rows, columns", [(1, 1), (1, 3), (3, 1), (2, 2)])
def test_grid_axes_are_rows_by_columns_whatever_the_sizes(rows, columns):
    """`plots.grid` indexes panels ``axes[row, column]`` even for one row or column, sized
    ``panel`` per panel (``figure`` squeezes them as `plt.subplots` does)."""
    fig, axes = plots.grid(rows, columns, panel=(2.0, 1.5))
    assert axes.shape == (rows, columns)
    assert tuple(fig.get_size_inches()) == (2.0 * columns, 1.5 * rows)
    _, squeezed = plots.figure(rows, columns)
    assert np.shape(squeezed) == tuple(n for n in (rows, columns) if n > 1)


def test_epoch_axis_is_symlog_from_zero():
    fig, ax = plots.figure()
    ax.plot([0, 10, 100], [0, 1, 2])
    plots.epoch_axis(ax, linthresh=10)
    assert ax.get_xscale() == "symlog" and ax.get_xlim()[0] == 0
    assert ax.get_xlabel() == plots.EPOCH
    plots.plt.close(fig)


# --------------------------------------------------------------------------------------------
# fonts


def test_a_produced_figure_has_no_font_under_the_minimum():
    fig, axes = plots.figure(1, 2, suptitle="title")
    axes[0].plot([1, 2], [3, 4], label="a")
    axes[0].annotate("note", (1, 3))
    plots.axis_labels(axes[0], plots.FLOW_TIME, plots.LOSS, "panel")
    plots.role_legend(axes[0])
    plots.heatmap(axes[1], np.eye(3), np.arange(3), "$S$")
    assert plots.small_texts(fig) == []
    assert plots.MIN_FONT >= 8
    plots.plt.close(fig)


def test_small_texts_sees_a_small_font_and_raise_small_fonts_fixes_it():
    fig, ax = plots.figure()
    ax.set_title("tiny", fontsize=5)
    ax.legend(handles=plots.role_handles(), fontsize=6)
    found = dict(plots.small_texts(fig))
    assert found["tiny"] == 5 and found["training"] == 6
    plots.raise_small_fonts(fig)
    assert plots.small_texts(fig) == []
    plots.plt.close(fig)


# --------------------------------------------------------------------------------------------
# save_figure


def _png_dpi(data: bytes) -> float:
    with Image.open(io.BytesIO(data)) as image:
        return float(image.info["dpi"][0])


def test_save_figure_writes_png_at_150_dpi_or_more_and_a_pdf(tmp_path):
    fig, ax = plots.figure(panel=(2.0, 1.5))
    ax.plot([0, 1], [1, 0])
    ax.set_title("small", fontsize=4)
    png, pdf = plots.save_figure(fig, tmp_path / "sub" / "f.png")
    assert png == tmp_path / "sub" / "f.png" and pdf == tmp_path / "sub" / "f.pdf"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert _png_dpi(data) >= 150
    with Image.open(png) as image:
        width, height = image.size
    assert width >= 1.5 * 150 and height >= 1.0 * 150  # rendered at the dpi, not upscaled
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert not plots.plt.fignum_exists(fig.number)  # closed
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["f.pdf", "f.png"]


def test_save_figure_raises_small_fonts_before_rendering(tmp_path):
    fig, ax = plots.figure()
    ax.set_title("small", fontsize=4)
    plots.save_figure(fig, tmp_path / "f.png")
    assert ax.title.get_fontsize() >= plots.MIN_FONT


def test_save_figure_leaves_no_file_when_rendering_fails(tmp_path, monkeypatch):
    fig, ax = plots.figure()
    ax.plot([0, 1], [1, 0])
    real = type(fig).savefig

    def fail_on_pdf(self, fname, **kw):
        if kw.get("format") == "pdf":
            raise RuntimeError("disk full")
        return real(self, fname, **kw)

    monkeypatch.setattr(type(fig), "savefig", fail_on_pdf)
    with pytest.raises(RuntimeError, match="disk full"):
        plots.save_figure(fig, tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []  # not the PNG alone, no temp file


def test_save_figure_leaves_the_old_file_whole_when_writing_fails(tmp_path, monkeypatch):
    (tmp_path / "f.png").write_bytes(b"old")
    fig, _ = plots.figure()

    def fail(path, data):
        raise OSError("no space")

    monkeypatch.setattr(results, "atomic_write_bytes", fail)
    with pytest.raises(OSError):
        plots.save_figure(fig, tmp_path / "f.png")
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]
    assert (tmp_path / "f.png").read_bytes() == b"old"


def test_save_figure_wants_a_png_path(tmp_path):
    fig, _ = plots.figure()
    with pytest.raises(ValueError, match=r"\.png"):
        plots.save_figure(fig, tmp_path / "f.jpg")
    plots.plt.close(fig)


# --------------------------------------------------------------------------------------------
# the library's figures on small synthetic input


def _theory_experiment(model: str = "ffn") -> comparison.TheoryVsTraining:
    from ctx_staircase import escape, theories
    from ctx_staircase.comparison import Comparison, RunComparison, TheorySimulation

    ts = np.linspace(0.0, 5.0, 30)
    if model == "ffn":
        solved = [theories.CLOSED_FORM, theories.CLOSED_FORM_FEEDBACK, theories.signature_flow(1)]
    else:
        solved = [theories.UNIFORM_ATTENTION_FLOW]
    names = [theory.name for theory in solved]
    runs = []
    for gamma in (0.5, 1.0):
        rho = np.stack([np.tanh(ts), 0.5 * np.tanh(ts)])
        nan = TheorySimulation(np.nan, np.nan)
        compared = Comparison(
            *[np.nan] * 5, nan, np.nan, [], [], nan,
            rho=TheorySimulation(0.9 * rho, rho),
            logit_scale=TheorySimulation(np.exp(ts) * 1e-2, np.exp(ts / gamma) * 1e-2),
        )  # fmt: skip
        runs.append(RunComparison(gamma, "ok", None, {}, {}, dict.fromkeys(names, compared)))
    times = {n: [1.1, 2.2] for n in names}
    styles = {theory.name: theory.style for theory in solved}
    law = escape.PlateauLaw([], 0.3, np.nan, np.nan, [1.0, 2.1], [], True, 0)
    if model == "attention":
        times[law.name] = law.escape
        styles[law.name] = law.style
    else:
        law = None  # the FFN's escape law is its analytic slope alone
    escape_times = comparison.EscapeTimes([0.5, 1.0], [1.0, 2.0], times)
    slopes = comparison.EscapeSlopes(2.2, dict.fromkeys(times, 2.2), 2.2)
    return comparison.TheoryVsTraining(
        theories.model(model), ts, 0.5, (1.0,), 1.0, "linear", None, [], law, runs,
        escape_times, slopes, styles, dict.fromkeys(styles, theory.Role.LAW), None,
    )  # fmt: skip


def _texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text().strip()]


def _curves(ax) -> list:
    """The curves of a panel: its lines of more than two points (not the reference lines)."""
    return [line for line in ax.get_lines() if len(line.get_xdata()) > 2]


def _assert_convention(fig) -> None:
    """Fonts >= MIN_FONT, a y-label on every panel with data, at most `plots.MAX_CURVES` curves
    on a panel, balanced mathtext, no raw TeX."""
    assert plots.small_texts(fig) == []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>" or not ax.axison or not ax.get_visible():
            continue
        assert ax.get_ylabel(), f"panel {ax.get_title()!r} has no y-label"
        assert len(_curves(ax)) <= plots.MAX_CURVES, f"panel {ax.get_title()!r} is crowded"
    for text in _texts(fig):
        assert text.count("$") % 2 == 0, text
        outside = text.split("$")[::2]
        assert not any("\\" in part or "^{" in part or "_{" in part for part in outside), text


@pytest.mark.parametrize("model", ["ffn", "attention"])
def test_theory_overlay_figure_draws_each_theory_in_its_style(model, tmp_path):
    experiment = _theory_experiment(model)
    fig = plots.theory_overlay_figure(experiment, "overlay")
    _assert_convention(fig)
    styles = [experiment.styles[name] for name in experiment.runs[0].comparisons]
    legend_texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "training" in legend_texts
    assert all(style.label in legend_texts for style in styles)
    assert r"$\gamma = 0.5$" in legend_texts
    # one row per γ: every theory curve of a row carries its theory's dash pattern and the
    # row's γ colour, and no panel holds more than MAX_CURVES curves
    styles = {str(_line_style(plots.theory_line(s)["ls"])) for s in styles}
    for row, gamma in enumerate((0.5, 1.0)):
        lines = fig.axes[3 * row + 1].get_lines()
        drawn = {str(line._unscaled_dash_pattern) for line in lines}
        assert styles | {str(_line_style("-"))} == drawn
        colours = {mcolors.to_hex(line.get_color()) for line in lines}
        assert colours == {mcolors.to_hex(plots.gamma_colour(gamma))}
    for ax in fig.axes:
        assert 0 < len(_curves(ax)) <= plots.MAX_CURVES, ax.get_title()
    png, pdf = plots.save_figure(fig, tmp_path / "overlay.png")
    assert png.is_file() and pdf.is_file()


@pytest.mark.parametrize("model", ["ffn", "attention"])
def test_escape_time_figure_follows_the_convention(model):
    fig = plots.escape_time_figure(_theory_experiment(model), "escape")
    _assert_convention(fig)
    texts = " ".join(_texts(fig))
    assert "training (measured)" in texts
    assert ("closed form" if model == "ffn" else "ODE") in texts
    if model == "attention":  # the power T_Z d^(2 gamma), T_Z read off the plateau law
        line = next(li for li in fig.axes[0].get_lines() if "slope $2" in li.get_label())
        fine, d = line.get_xdata(), np.exp(2.2 / 2)
        np.testing.assert_allclose(line.get_ydata(), 0.3 * d ** (2 * fine), rtol=1e-12)
    plots.plt.close(fig)


def test_theory_overlay_figure_draws_training_solid_and_each_theory_styled():
    """Solid lines: training's curves (`TheorySimulation.simulation`); styled: the theory's."""
    experiment = _theory_experiment("attention")
    fig = plots.theory_overlay_figure(experiment, "overlay")
    for row, run in enumerate(experiment.runs):  # one row per γ
        pair = next(iter(run.comparisons.values()))
        for column, (want_s, want_t) in enumerate(
            ((pair.logit_scale.simulation, pair.logit_scale.theory),
             (pair.rho.simulation[0], pair.rho.theory[0]))
        ):  # fmt: skip
            ax = fig.axes[3 * row + column]
            solid = [
                li for li in ax.get_lines() if li.get_linestyle() == "-" and li.get_xdata().size > 2
            ]
            styled = [li for li in ax.get_lines() if li.get_linestyle() not in ("-", "None")]
            np.testing.assert_array_equal(solid[0].get_ydata(), want_s)
            np.testing.assert_array_equal(styled[0].get_ydata(), want_t)
    plots.plt.close(fig)


def test_heatmap_and_pca_panels_follow_the_convention():
    fig, axes = plots.figure(1, 2)
    image = plots.heatmap(axes[0], np.eye(4), np.arange(4), "$S^{emb}$")
    rng = np.random.default_rng(0)
    plots.pca_scatter(axes[1], rng.normal(size=(4, 2)), np.arange(4), [0.6, 0.3], "PCA")
    plots.colorbar(fig, image, axes[0])
    _assert_convention(fig)
    assert axes[1].get_ylabel() == "PC2 (30% var.)"
    plots.plt.close(fig)


# --------------------------------------------------------------------------------------------
# the experiments draw through plots


def _experiment_sources():
    return sorted(p for p in EXPERIMENTS.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", _experiment_sources(), ids=lambda p: p.stem)
def test_experiments_draw_through_plots(path):
    """No experiment opens a figure, sets a font under the minimum, or saves a figure itself."""
    tree = ast.parse(path.read_text())
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("subplots", "savefig", "tight_layout"):
                problems.append(f"line {node.lineno}: .{node.func.attr}()")
            for kw in node.keywords:
                size = kw.value
                if kw.arg == "fontsize" and isinstance(size, ast.Constant):
                    if isinstance(size.value, int | float) and size.value < plots.MIN_FONT:
                        problems.append(f"line {node.lineno}: fontsize={size.value}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------------
# the experiments' figure functions on tiny synthetic input


def _experiment_figures():
    """``(name, thunk)`` pairs: each thunk draws one experiment figure from synthetic input."""
    from ctx_staircase.experiments import (
        appc_task4_orders,
        attention_departure,
        fig2a_label_laws,
        fig5_activation_order,
        fig8_role,
        fig9_modulus,
        minmax,
        rb_anchor_tasks,
        regime_study,
    )
    from ctx_staircase.experiments import regime as regimes

    rng = np.random.default_rng(0)
    primary = regimes.PRIMARY
    steps = np.array([0, 1, 5, 10, 50, 100, 500, 1000])
    T = steps.size

    def curve(seeds=None):
        shape = (T,) if seeds is None else (seeds, T)
        return np.clip(np.cumsum(rng.uniform(0, 0.2, size=shape), axis=-1), 0, 1)

    def cosines(n):
        x = rng.normal(size=(n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x @ x.T

    appc_curves = appc_task4_orders.Curves(*(curve(2) for _ in appc_task4_orders.Curves._fields))
    N = 20
    cells = {
        (L, K): SimpleNamespace(max_accuracy=0.5, top_share=0.7, curve=curve(), S=cosines(N))
        for L in (2, 3)
        for K in (2, 3)
    }
    fig5_config = fig5_activation_order.Config(
        Ls=(2, 3), Ks=(2, 3), N=N, d=16, regime_label=primary.label
    )
    arms = {
        arm: {"loss_curve": 3 - curve(), "accuracy_curve": curve()} for arm in "i ii iii".split()
    }
    fixed = {"trained": arms, "null": {"i": arms["i"]}, "shuffled": arms}
    fig8_config = {"gamma_ffn": 1.0, "target_accuracy": 0.9, "early_epoch": 50}
    times = {
        task: {
            str(g): {"gamma": g, "trained": 10.0 * g, "theory": 12.0 * g, "t_max": 100.0}
            for g in (0.5, 1.0)
        }
        for task in ("selector", "anchor")
    }
    rb_record = SimpleNamespace(
        by_gamma={
            g: SimpleNamespace(
                loss=rb_anchor_tasks.Curves(*(5 - 4 * curve() for _ in rb_anchor_tasks.SUBSETS))
            )
            for g in ("0.5", "0.8")
        },
        epochs=steps,
        chance_ln_Z=np.log(100),
        early_epoch=10,
        memory_labels={
            "uniform": SimpleNamespace(mem_loss=5 - curve()),
            "local": SimpleNamespace(mem_loss=4 - curve()),
        },
    )
    p = rng.dirichlet(np.ones(12))
    stats = fig2a_label_laws.Match(pearson=0.9, kl=0.01, jsd=0.02)
    laws = {
        law: SimpleNamespace(
            curve=fig2a_label_laws.Curve(p, p, np.full(12, 1 / 12)),
            runs=[SimpleNamespace(ffn=stats, init=SimpleNamespace(ffn=stats))],
        )
        for law in ("zipf", "uniform")
    }
    verdicts = ["pass", "FAIL", "vacuous", "—"]
    rows = [
        {
            "experiment": "fig3_staircase",
            "claim": f"claim {i}",
            "cells": {
                r.name: {"verdict": verdicts[(i + j) % 4]} for j, r in enumerate(regimes.ALL)
            },
        }
        for i in range(5)
    ]
    Ms = np.array([2, 3, 4, 5])
    phi0 = rng.dirichlet(np.ones(N + 1), size=N + 3)
    inputs = np.arange(N + 3)
    return [
        (
            "appc_task4_orders.orders_figure",
            lambda: appc_task4_orders.orders_figure(
                steps,
                appc_curves,
                curve(2),
                curve(2),
                appc_task4_orders.Config(d=16, regime_label=primary.label),
            ),
        ),
        ("attention_departure.times_figure", lambda: attention_departure.times_figure(times)),
        (
            "fig2a_label_laws.laws_figure",
            lambda: fig2a_label_laws.laws_figure(laws, fig2a_label_laws.Config()),
        ),
        (
            "fig5_activation_order.grid_figure",
            lambda: fig5_activation_order.grid_figure(cells, steps, fig5_config),
        ),
        (
            "fig5_activation_order.cosine_figure",
            lambda: fig5_activation_order.cosine_figure(cells, fig5_config),
        ),
        (
            "fig8_role.fixed_figure",
            lambda: fig8_role.fixed_figure(fixed, steps, fig8_config, primary),
        ),
        (
            "fig9_modulus.epochs_figure",
            lambda: fig9_modulus.epochs_figure(
                Ms,
                np.array([100.0, 2000, 300, 5000]),
                np.array([False, True, False, False]),
                np.array([True, False, True, True]),
                np.array([0.95, 0.2, 0.9, 0.92]),
                fig9_modulus.Config(d=16, max_epochs=5000, regime_label=primary.label),
            ),
        ),
        (
            "fig9_modulus.heatmap_figure",
            lambda: fig9_modulus.heatmap_figure(
                steps,
                {int(M): curve() for M in Ms[:3]},
                {int(M): (np.ones((N, N)) if M == 4 else cosines(N)) for M in Ms[:3]},
                {int(M): cosines(N) for M in Ms[:3]},
                fig9_modulus.Config(N=N, regime_label=primary.label),
            ),
        ),
        (
            "minmax.superposition_figure",
            lambda: minmax.superposition_figure(phi0, cosines(inputs.size), inputs, N),
        ),
        (
            "minmax.training_figure",
            lambda: minmax.training_figure(
                steps,
                curve(),
                curve(),
                curve(),
                curve(),
                curve(),
                curve(),
                {"N": N, "d": 16, "gamma": 1.0},
                primary,
            ),
        ),
        (
            "rb_anchor_tasks.loss_figure",
            lambda: rb_anchor_tasks.loss_figure(rb_record, rb_anchor_tasks.Config(L=8, n=100)),
        ),
        ("regime_study.verdict_figure", lambda: regime_study.verdict_figure(rows)),
    ]


def test_every_experiment_figure_renders_to_the_convention(tmp_path):
    """Each figure function draws from synthetic input, to fonts >= 8 pt, a y-label on every
    panel, mathtext only; the first is saved as PNG + PDF (saving is tested above)."""
    for i, (name, draw) in enumerate(_experiment_figures()):
        fig = draw()
        try:
            _assert_convention(fig)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from err
        if i == 0:
            png, pdf = plots.save_figure(fig, tmp_path / f"{name}.png")
            assert png.stat().st_size > 1000 and pdf.stat().st_size > 1000, name
        else:
            plots.plt.close(fig)


def test_gamma_colour_is_turbo_at_its_place_in_the_range():
    """gamma at the bottom of `GAMMA_RANGE` is turbo(0), at the top turbo(1) (both ends dark,
    readable on white), halfway turbo(0.5); outside, clipped."""
    from matplotlib import pyplot as plt

    low, high = plots.GAMMA_RANGE
    turbo = plt.get_cmap("turbo")
    assert plots.gamma_colour(low) == turbo(0.0)
    assert plots.gamma_colour(high) == turbo(1.0)
    assert plots.gamma_colour((low + high) / 2) == turbo(0.5)
    assert plots.gamma_colour(high + 5) == plots.gamma_colour(high)
    assert plots.gamma_colour(low - 5) == plots.gamma_colour(low)


def _lab(rgba) -> np.ndarray:
    """CIE L*a*b* (D65) of sRGB colours ``[..., 3 or 4]``."""
    rgb = np.asarray(rgba, np.float64)[..., :3]
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    to_xyz = np.array(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    )
    xyz = linear @ to_xyz.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack(
        [116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1
    )


def test_neighbouring_gammas_have_clearly_distinct_colours():
    """Any two γ 0.1 apart in [0.2, 1.6] (every grid the figures draw) differ by at least
    `plots.GAMMA_MIN_DELTA_E` in CIE76 ΔE, and γ 1.0 and 1.2 (once two teals) by twice that;
    a γ keeps its colour."""
    gammas = np.round(np.arange(0.2, 1.61, 0.1), 2)
    lab = _lab([plots.gamma_colour(g) for g in gammas])
    distances = np.linalg.norm(np.diff(lab, axis=0), axis=1)
    assert distances.min() >= plots.GAMMA_MIN_DELTA_E, dict(
        zip(gammas[1:], distances.round(1), strict=True)
    )
    one, one_two = _lab([plots.gamma_colour(1.0), plots.gamma_colour(1.2)])
    assert np.linalg.norm(one - one_two) >= 2 * plots.GAMMA_MIN_DELTA_E
    assert plots.gamma_colour(0.8) == plots.gamma_colour(0.8)


def test_an_integer_axis_ticks_only_integers():
    """A frequency axis over k = 1..20 in a figure's panel width (where Matplotlib alone puts
    2.5, 7.5, ...) ticks at integers only."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 3))
    ax.plot(np.arange(1, 21), np.zeros(20))
    fig.canvas.draw()
    before = ax.get_xticks()
    plots.integer_axis(ax, "x")
    fig.canvas.draw()
    after = ax.get_xticks()
    assert np.all(after == np.round(after)) and len(after) >= 3
    assert not np.all(before == np.round(before))  # the default: half-integers here
    plt.close(fig)


def test_a_theory_overlay_of_five_gammas_and_three_theories_keeps_each_panel_readable():
    """Five γ and three FFN theories (once 20 curves a panel): one row per γ, each panel
    training and the three theories, at most `plots.MAX_CURVES` curves."""
    experiment = _theory_experiment("ffn")
    run = experiment.runs[0]
    gammas = (0.6, 0.8, 1.0, 1.2, 1.4)
    experiment = experiment._replace(runs=[run._replace(gamma=g) for g in gammas])
    fig = plots.theory_overlay_figure(experiment, "five")
    assert len(fig.axes) == 3 * len(gammas)
    for ax in fig.axes:
        curves = [li for li in ax.get_lines() if len(li.get_xdata()) > 2]
        assert len(curves) == 1 + len(run.comparisons) <= plots.MAX_CURVES, ax.get_title()
    plots.plt.close(fig)


def test_regime_verdict_figure_labels_each_claim_whole():
    """A claim's label in the regime grid wraps onto lines of at most
    `regime_study.LABEL_WIDTH` characters; joined back, it is the whole claim."""
    from ctx_staircase.experiments import regime as regimes
    from ctx_staircase.experiments import regime_study

    claim = "Fourier: the low-frequency components of S^emb lead at epoch 150, as in Fig. 4 (d)"
    rows = [
        {
            "experiment": "fig4_frequency",
            "claim": claim,
            "cells": {r.name: {"verdict": "pass"} for r in regimes.ALL},
        }
    ]
    fig = regime_study.verdict_figure(rows)
    (label,) = [tick.get_text() for tick in fig.axes[0].get_yticklabels()]
    plots.plt.close(fig)
    lines = label.split("\n")
    assert len(lines) > 1 and max(map(len, lines)) <= regime_study.LABEL_WIDTH
    assert " ".join(lines) == f"fig4_frequency: {claim}"
