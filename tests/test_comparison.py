"""Theory against training: escape statistics, the plateau law, input checks, float64 scoping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import (
    budget,
    cli,
    closed_form,
    comparison,
    flows,
    models,
    plateau,
    tasks,
    theories,
    theory,
    train,
)
from ctx_staircase.escape import PlateauLaw
from ctx_staircase.flows import uniform_attention_logit_scale
from ctx_staircase.theory import SolverStatus, WeightTrajectory


def test_unit_scale_escape_is_exact_on_a_scalar_blowup():
    """dy/dt = y^3 from eps: Lambda = y^4 reaches kappa at t = 1/(2 eps^2) - 1/(2 sqrt(kappa)).

    The flow is homogeneous of degree 3 and the statistic of degree 4, so one unit-scale solve
    gives every scale; the law's T_Z = 1/2 and A = 1/4 are exact here.
    """
    solved = plateau.unit_scale_escape(
        lambda t, y, args: {"y": y["y"] ** 3},
        {"y": jnp.asarray(1.0, jnp.float64) if jax.config.jax_enable_x64 else jnp.asarray(1.0)},
        lambda ys: ys["y"] ** 4,
        degree=3,
        logit_degree=4,
    )
    assert solved.ok
    assert solved.blowup_time == pytest.approx(0.5, rel=1e-4)
    assert solved.amplitude == pytest.approx(0.25, rel=1e-3)
    eps, kappa = np.array([0.3, 0.1, 0.03]), 0.5
    exact = 1 / (2 * eps**2) - 1 / (2 * np.sqrt(kappa))
    np.testing.assert_allclose(solved.escape_time(eps, kappa), exact, rtol=1e-4)
    np.testing.assert_allclose(solved.law(eps, kappa), exact, rtol=1e-3)
    # a start already past the threshold escapes at once
    assert solved.escape_time(2.0, kappa) == 0.0


def test_a_flow_that_never_blows_up_has_no_law():
    solved = plateau.unit_scale_escape(
        lambda t, y, args: {"y": -(y["y"] ** 3)},
        {"y": jnp.asarray(1.0)},
        lambda ys: ys["y"] ** 4,
        degree=3,
        logit_degree=4,
    )
    assert np.isinf(solved.blowup_time)
    assert np.isnan(solved.escape_time(0.1, 0.5))


def test_escape_ratio_is_undefined_when_training_starts_escaped():
    assert np.isnan(comparison.escape_ratio(3.0, 0.0))
    assert np.isnan(comparison.escape_ratio(3.0, float("nan")))
    assert comparison.escape_ratio(3.0, 4.0) == pytest.approx(0.75)


def test_training_records_the_logit_scale_of_the_model_itself():
    """Attention escape is measured with the attention logits, not the FFN formula."""
    ds = tasks.make("add", N=5)
    config = train.TrainConfig(optimizer="gd", lr=0.5, steps=4, snapshots=(0, 4))
    trajectory = train.train("attention", ds, config, gamma=0.3, d=16, positional=False)
    graphdef, state = train.init_state("attention", ds, gamma=0.3, seed=0, d=16, positional=False)
    logits = nnx_merge_logits(graphdef, state, ds.tokens)
    expected = np.max(np.abs(logits - logits.mean(-1, keepdims=True)))
    np.testing.assert_allclose(trajectory.logit_scale[0], expected, rtol=1e-5)
    # the FFN statistic of the same W_E, W_U is a different number: it ignores W_O, W_V
    ffn = closed_form.logit_scale(trajectory.W_E[0], trajectory.W_U[0], ds.tokens, (1.0,))
    assert abs(float(ffn) - expected) > 0.5 * expected


def nnx_merge_logits(graphdef, state, tokens) -> np.ndarray:
    from flax import nnx

    module = nnx.merge(graphdef, state)
    assert isinstance(module, models.AttentionOnly)
    return np.asarray(module(jnp.asarray(tokens)))


def test_uniform_attention_logit_scale_matches_the_model_at_zero_query_key():
    """With W_Q = W_K = 0 the attention is exactly uniform, so the model is the A3 readout."""
    ds = tasks.make("add", N=5)
    graphdef, state = train.init_state("attention", ds, gamma=0.3, seed=1, d=16, positional=False)
    state["W_Q"] = jax.tree.map(jnp.zeros_like, state["W_Q"])
    logits = nnx_merge_logits(graphdef, state, ds.tokens)
    weights = {k: state[k][...] for k in ("W_E", "W_U", "W_O", "W_V")}
    got = uniform_attention_logit_scale(weights, jnp.asarray(ds.tokens))
    expected = np.max(np.abs(logits - logits.mean(-1, keepdims=True)))
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(model="attention", gammas=[0.5]), "gamma must lie in [0.55, 1.0]"),
        (dict(model="ffn", gammas=[2.5]), "gamma must lie in [0.5, 2.0]"),
        (dict(gammas=[float("nan")]), "gamma must be one or more finite"),
        (dict(model="mlp"), "model must be one of"),
        (dict(steps=0), "steps must be an int >= 1"),
        (dict(lr=float("inf")), "lr must be a finite real number > 0"),
        (dict(threshold=-1.0), "threshold must be a finite real number > 0"),
        (dict(max_orders=[3]), "max_orders must be an int in [0, 1]; got 3"),
        (dict(prediction="full"), "prediction must be one of"),
    ],
)
def test_theory_inputs_are_checked_before_any_work(settings, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        comparison.check_theory_inputs(tasks.make("add", N=5), **(THEORY_SETTINGS | settings))


#: The defaults of `comparison.theory_vs_training`, at a small width.
THEORY_SETTINGS = dict(
    model="ffn",
    gammas=None,
    max_orders=(0, 1),
    d=16,
    activation="poly:1,0.5",
    lr=0.2,
    steps=None,
    snapshot_every=None,
    threshold=0.5,
    prediction="linear",
)


def test_too_large_a_task_is_refused_for_memory(monkeypatch):
    monkeypatch.setenv("CTX_STAIRCASE_MAX_MEMORY", "1MiB")
    with pytest.raises(ValueError, match=r"needs about .* over the 1\.05 MB limit"):
        comparison.check_theory_inputs(tasks.make("add", N=20), **(THEORY_SETTINGS | {"d": 128}))


def test_a_horizon_before_every_escape_is_refused():
    with pytest.raises(ValueError, match="too short to compare anything"):
        comparison.horizon(np.array([50.0, 80.0]), [0.6, 0.8], 0.2, 10)
    steps, notes = comparison.horizon(np.array([50.0, 800.0]), [0.6, 0.8], 0.2, 1000)
    assert steps == 1000 and len(notes) == 1 and "0.8" in notes[0]
    steps, notes = comparison.horizon(np.array([50.0, 80.0]), [0.6, 0.8], 0.2, None)
    assert steps == 500 and not notes  # 1.25 x 80 / 0.2
    with pytest.raises(ValueError, match="more than"):
        comparison.horizon(np.array([1e6]), [0.9], 0.2, None)


def test_a_lane_with_no_predicted_escape_is_noted_as_one_that_cannot_escape():
    """A NaN predicted escape (no escape in the theory) lies past every horizon: it is named in
    the note, and a horizon whose every lane has none is refused."""
    steps, notes = comparison.horizon(np.array([10.0, np.nan]), [0.6, 0.8], 1.0, None)
    assert steps == 20 and len(notes) == 1  # 1.25 x 10 rounded up to whole tens
    assert "gamma 0.8:" in notes[0] and "0.6" not in notes[0]
    with pytest.raises(ValueError, match=r"\(none finite\); too short to compare anything"):
        comparison.horizon(np.array([np.nan, np.nan]), [0.6, 0.8], 0.2, 100)


@pytest.mark.parametrize(
    "argv",
    [
        ["theory", "add", "--model", "attention", "--gamma", "0.5"],
        ["theory", "add", "--gamma", "0.6", "--steps", "1"],
        ["theory", "add", "--lr", "nan"],
        ["theory", "add", "--param", "N=0"],
    ],
)
def test_bad_theory_input_exits_2_with_one_line_and_writes_nothing(argv, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctx-staircase theory: error:")
    assert not out.exists()


@pytest.mark.slow  # about 17 s
def test_theory_runs_in_float64_whatever_the_global_flag():
    """A scoped jax.enable_x64: no silent float32 truncation of the theory or the training."""
    ds = tasks.make("add", N=4)
    with jax.enable_x64(False):  # a caller in JAX's default float32 mode
        out = comparison.theory_vs_training(
            ds, model="attention", gammas=(0.6, 0.65), d=16, lr=0.5, steps=None
        )
        assert not jax.config.jax_enable_x64  # the caller's flag is restored
    run = out.runs[0]
    assert run.simulation.W_E.dtype == np.float64
    assert run.theories["uniform_attention_flow"].W_E.dtype == np.float64
    # both sides escape inside the automatic horizon, with the attention logits
    for run in out.runs:
        c = run.comparisons["uniform_attention_flow"]
        assert np.isfinite(c.escape_time.simulation) and np.isfinite(c.escape_ratio)
        status = run.solver["uniform_attention_flow"]
        assert status.ok
        if status.result != "ok":  # it ends at the blow-up bound, after the escape it predicts
            assert status.result.startswith("blow-up at t = ")
            assert float(status.result.split("= ")[1]) > c.escape_time.theory
    # the time grid is t = lr * step on steps 0, 10, .., horizon, and its first snapshot is the
    # initial state: the seed-0 draw at d^-gamma
    steps = out.horizon.steps
    np.testing.assert_array_equal(out.ts, 0.5 * np.arange(0, steps + 1, 10))
    for run in out.runs:
        _, state = train.init_state(
            "attention", ds, gamma=run.gamma, seed=0, d=16, positional=False, dtype="float64"
        )
        np.testing.assert_allclose(run.simulation.W_E[0], state["W_E"][...], rtol=1e-12)
    # attention slopes are d ln t / d gamma: through two points, the slope of the line
    gammas = np.asarray(out.escape.gamma)
    measured = {"simulation": (out.escape.simulation, out.escape_slope.simulation)}
    theories_ = {n: (t, out.escape_slope.theories[n]) for n, t in out.escape.theories.items()}
    assert set(theories_) == {"uniform_attention_flow", "plateau_law"}
    for name, (times, slope) in (measured | theories_).items():
        log_t = np.log(np.asarray(times))
        by_hand = (log_t[1] - log_t[0]) / (gammas[1] - gammas[0])
        assert slope == pytest.approx(by_hand, rel=1e-9), name


def test_snapshot_grid_starts_at_step_0_and_ends_at_the_horizon():
    """Every 10 steps (or ``every``) from step 0, the horizon included; geometric past
    `budget.THEORY_MAX_SNAPSHOTS`, still from step 0 (the initial state is the first snapshot)."""
    assert comparison.snapshot_steps(50, None) == (0, 10, 20, 30, 40, 50)
    assert comparison.snapshot_steps(45, 20) == (0, 20, 40, 45)
    assert comparison.snapshot_steps(3, 1) == (0, 1, 2, 3)
    steps = 10 * (budget.THEORY_MAX_SNAPSHOTS + 1)
    geometric = comparison.snapshot_steps(steps, None)
    assert geometric[:11] == tuple(range(11)) and geometric[-1] == steps
    assert len(geometric) <= budget.THEORY_MAX_SNAPSHOTS
    assert np.all(np.diff(geometric) > 0)
    assert comparison.slope([0.5, 1.0, 2.0], [1.0, 2.0, 4.0]) == pytest.approx(2.0)
    assert comparison.slope([0.5, 1.0, 2.0], [1.0, np.nan, 4.0]) == pytest.approx(2.0)
    assert np.isnan(comparison.slope([0.5, 1.0], [1.0, np.inf]))


def test_theory_cli_prints_the_attention_law(tmp_path, capsys):
    """`theory --model attention` reports the plateau law and log-slopes, not the FFN's C8."""
    out = tmp_path / "attention"
    argv = ["theory", "add", "--param", "N=4", "--model", "attention", "--d", "16"]
    assert cli.main([*argv, "--gamma", "0.6", "0.7", "--lr", "0.5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out  # results go to stdout
    assert "plateau law t* = T_Z d^(2γ) - c" in printed and "2 ln d" in printed
    assert "ln d / (C_1 s_1)" not in printed
    import json

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "attention"
    assert metrics["escape_slope"]["analytic"] == pytest.approx(2 * np.log(16))
    assert all(np.isfinite(t) for t in metrics["escape"]["simulation"])
    assert (out / "escape_time.png").is_file()
    # the reported constants are the law's own: t* = T_Z d^(2 gamma) - c, c = sqrt(A / kappa)
    law = metrics["law"]
    assert law["offset_c"] == pytest.approx(np.sqrt(law["amplitude_A"] / metrics["threshold"]))
    predicted = [law["blowup_time_T_Z"] * 16 ** (2 * g) - law["offset_c"] for g in (0.6, 0.7)]
    np.testing.assert_allclose(law["plateau_law"], predicted, rtol=1e-12)
    # A5 for one balanced mode: rate s_1 / L (L = 2), u0 = (d^-gamma sqrt d)^4
    s_1 = metrics["top_singular_value"]
    a5 = [closed_form.attention_plateau_time(s_1 / 2, (16**-g * 4) ** 4) for g in (0.6, 0.7)]
    np.testing.assert_allclose(law["single_mode_a5"], a5, rtol=1e-12)


@pytest.mark.slow
def test_attention_theory_against_training_add():
    """The attention theory's acceptance criteria: uniform-attention flow W_E within 5% before
    escape; escape times of the flow and of the plateau law T_Z d^(2 gamma) - c within 10% for 5
    gamma, attention logits on both sides (add N=20, d=128, GD lr 0.2;
    sims/results/attention_theory.json)."""
    out = comparison.theory_vs_training(tasks.make("add", N=20), model="attention")
    assert len(out.runs) == 5
    for run in out.runs:
        flow = run.comparisons["uniform_attention_flow"]
        assert run.solver["uniform_attention_flow"].ok
        assert flow.weight_rel_error_max <= 0.05
        assert abs(flow.escape_ratio - 1) <= 0.10, run.gamma
    law = np.asarray(out.escape.of(out.law)) / np.asarray(out.escape.simulation)
    assert np.all(np.abs(law - 1) <= 0.10), law
    slopes = out.escape_slope
    assert slopes.analytic == pytest.approx(slopes.simulation, rel=0.05)


def test_onset_is_the_first_crossing_of_half_the_peak():
    """`comparison.onset_time` (eq. C9): the first time a curve reaches half of its maximum,
    interpolated in log value, also when the curve falls back later (to 0.3 here, whose half
    would be reached at once); NaN for a curve that never rises above 0."""
    onset = comparison.onset_time([0.0, 1.0, 2.0, 3.0], [0.2, 1.0, 0.4, 0.3])
    assert onset == pytest.approx(np.log(0.5 / 0.2) / np.log(1.0 / 0.2), rel=1e-12)
    assert np.isnan(comparison.onset_time([0.0, 1.0], [0.0, 0.0]))


def test_weight_errors_are_relative_to_training():
    """A theory twice the trained weights is off by ||2W - W|| / ||W|| = 1 at every time: the
    errors are relative to training (the measured run), not to the theory (which gives 1/2)."""
    ds = tasks.make("add", N=4)
    rng = np.random.default_rng(1)
    W0, D, U = (1e-3 * rng.standard_normal((ds.vocab_size, 8)) for _ in range(3))
    ts = np.linspace(0.0, 10.0, 11)
    W_E = W0 + ts[:, None, None] * D
    sim = WeightTrajectory(ts, W_E, np.broadcast_to(U, W_E.shape))
    twice = WeightTrajectory(ts, 2 * W_E, 2 * sim.W_U)
    out = comparison.compare(twice, sim, ds, coefficients=(1.0,))
    assert out.weight_rel_error_max == pytest.approx(1.0, rel=1e-12)


def test_a5_mode_rate_is_s1_over_L_on_the_uniform_attention_flow():
    """A balanced rank-1 init on M's top mode stays balanced under (A3), and its end-to-end
    amplitude u = a^4 follows du/dt = 4 (s_1 / L) u^(3/2): u(t) = (u0^-1/2 - 2 s_1 t / L)^-2.

    With the rate s_1 (the old A5) the blow-up would come L = 2 times sooner."""
    from ctx_staircase import flows, ode, signatures

    ds = tasks.make("add", N=6)
    M = flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
    left, singular, right_t = np.linalg.svd(M)
    s1, d, a = singular[0], 4, 0.3
    e = np.eye(d)[0]
    y0 = {
        "W_E": a * np.outer(right_t[0], e),
        "W_U": a * np.outer(left[:, 0], e),
        "W_O": a * np.outer(e, e),
        "W_V": a * np.outer(e, e),
    }
    u0 = a**4
    t_star = closed_form.attention_plateau_time(s1 / ds.L, u0)
    assert t_star == pytest.approx(ds.L / (2 * s1 * np.sqrt(u0)))
    ts = jnp.asarray([0.0, 0.5 * t_star, 0.9 * t_star])
    field = flows.attention_uniform_flow(signatures.signature_set(ds, 0), ds.vocab_size)
    solution = ode.integrate(field, y0, ts, rtol=1e-10, atol=1e-14)
    assert bool(solution.ok)
    W = solution.ys
    u = np.einsum("v,tvd,tde,tef,twf,w->t", left[:, 0], W["W_U"], W["W_O"], W["W_V"], W["W_E"],
                  right_t[0])  # fmt: skip
    expected = (u0**-0.5 - 2 * s1 * np.asarray(ts) / ds.L) ** -2.0
    np.testing.assert_allclose(u, expected, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# a theory is an object: one registered here flows through comparison, budget and plots


def _toy_lanes(problem: theory.Problem) -> theory.TheoryLanes:
    """A toy theory: nothing moves but the embedding, which doubles over the run's horizon,
    ``W_E(t) = W_E(0) (1 + t / t_end)``."""
    ts = problem.ts
    growth = (1 + ts / ts[-1])[:, None, None]
    return theory.TheoryLanes(
        tuple(
            theory.WeightTrajectory(
                ts, growth * W_E0, np.broadcast_to(W_U0, growth.shape[:1] + W_U0.shape)
            )
            for W_E0, W_U0 in zip(problem.y0["W_E"], problem.y0["W_U"], strict=True)
        )
    )


def _toy(model, sizes: list | None = None) -> theory.Theory:
    """The toy theory of ``model``; its memory estimate, 50 trajectories' worth, records each
    `theory.Size` it is asked about in ``sizes``."""

    def nbytes(size: theory.Size) -> int:
        (sizes if sizes is not None else []).append(size)
        return 50 * size.trajectory_bytes

    return theory.Theory(
        "toy_doubling",
        theory.Style("closed_form", "closed form: toy doubling", (0, (9, 1)), 2.0),
        solve=_toy_lanes,
        nbytes=nbytes,
        model=model,
    )


def test_a_theory_registered_here_flows_through_comparison_budget_and_plots(monkeypatch):
    """A new theory is its record and one `theories.register`: the run solves and compares
    it, saves its numbers under its name, sizes its memory and draws it in its own style; no
    other module names it."""
    from ctx_staircase import plots

    monkeypatch.setattr(theories, "REGISTRY", list(theories.REGISTRY))
    ds = tasks.make("add", N=4)
    settings = dict(model="attention", gammas=(0.6, 0.65), d=16, lr=0.5)
    before, sizes = budget.theory_stages(ds, **settings), []
    toy = theories.register(_toy(theories.ATTENTION, sizes))
    with pytest.raises(ValueError, match="toy_doubling"):
        theories.register(toy)  # one name, one theory
    after = budget.theory_stages(ds, **settings)
    held = sizes[-1].trajectory_bytes  # the toy's trajectories, held until the comparison
    assert sizes[-1].G == 2 and after["compare"] == before["compare"] + held
    # the solves one after another, each over the trajectories of those before it (the toy,
    # 50 trajectories' worth, second); then the comparison holds every trajectory: training's,
    # the flow's and the toy's, with its temporaries
    temporaries = theories.ATTENTION.compare_bytes(sizes[-1])
    assert after["compare"] - after["theories"] == (2 * held + temporaries) - (held + 50 * held)
    out = comparison.theory_vs_training(ds, **settings)
    for run in out.runs:
        compared = run.comparisons[toy.name]
        np.testing.assert_allclose(run.theories[toy.name].W_E[-1], 2 * run.simulation.W_E[0])
        assert 0 < compared.weight_rel_error_max < np.inf and toy.name not in run.solver
    assert list(out.escape.theories)[-2:] == [toy.name, out.law.name]  # registry order
    summary = comparison.experiment_summary(out)
    assert toy.name in summary["runs"][0]["comparisons"] and toy.name in summary["escape"]
    fig = plots.theory_overlay_figure(out, "toy")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert toy.style.label in labels
    drawn = {
        (line.get_linewidth(), str(line._unscaled_dash_pattern)) for line in fig.axes[1].get_lines()
    }
    assert (2.0, str((0, (9, 1)))) in {(w, p) for w, p in drawn}
    plots.plt.close(fig)
    plots.plt.close(plots.escape_time_figure(out, "toy"))


def test_a_theory_of_another_model_or_activation_is_not_solved(monkeypatch):
    monkeypatch.setattr(theories, "REGISTRY", list(theories.REGISTRY))
    theories.register(_toy(theories.FFN))
    inputs = comparison.check_theory_inputs(
        tasks.make("add", N=4), **(THEORY_SETTINGS | {"model": "attention"})
    )
    assert [t.name for t in theories.selected(inputs.setting)] == ["uniform_attention_flow"]
    relu = comparison.check_theory_inputs(
        tasks.make("add", N=4), **(THEORY_SETTINGS | {"activation": "relu"})
    )
    names = [t.name for t in theories.selected(relu.setting)]
    assert names[-4:] == [
        "relu_gated_flow",
        "closed_form_frozen_gates",
        "relu_escape_law",
        "toy_doubling",
    ]
    poly = comparison.check_theory_inputs(tasks.make("add", N=4), **THEORY_SETTINGS)
    names = [t.name for t in theories.selected(poly.setting)]
    assert "relu_gated_flow" not in names and names[-1] == "toy_doubling"
    # one signature flow per max order of the run, first: their numbers come first
    orders = THEORY_SETTINGS["max_orders"]
    assert names[: len(orders)] == [theories.signature_flow(m).name for m in orders]


# --------------------------------------------------------------------------------------------
# the records, and the JSON they become


def _synthetic_experiment(law=None) -> comparison.TheoryVsTraining:
    """Two gamma lanes, a closed form and an ODE theory "flow" whose gamma=0.8 solve failed;
    every number distinct, so a field read from the wrong place shows."""
    TS = comparison.TheorySimulation
    runs = []
    for i, gamma in enumerate((0.6, 0.8)):
        compared = {
            name: comparison.Comparison(
                escape_threshold=0.5,
                window_end=1.5 + i,
                weight_rel_error_max=0.0625 + i + j,
                null_weight_rel_error_max=0.25 + i + j,
                gram_rel_error_max=0.125 + i + j,
                escape_time=TS(3.0 + i + j, 4.0 + i),
                escape_ratio=(3.0 + i + j) / (4.0 + i),
                rho_distance_max=[0.125 + j, 0.2],
                rho_distance_mean=[0.0625 + j, 0.06],
                onset_time=TS([1.0 + j, 2.0], [1.5, 2.5 + i]),
                rho=TS(np.zeros((2, 3)), np.ones((2, 3))),
                logit_scale=TS(np.zeros(3), np.ones(3)),
            )
            for j, name in enumerate(("closed_form", "flow"))
        }
        solver = {"flow": SolverStatus(i == 0, "ok" if i == 0 else "stiff")}
        runs.append(comparison.RunComparison(gamma, "ok", None, {}, solver, compared))
    return comparison.TheoryVsTraining(
        model=theories.FFN,
        ts=np.arange(3.0),
        threshold=0.5,
        coefficients=(1.0, 0.5),
        top_singular_value=2.0,
        prediction="linear",
        horizon=comparison.Horizon(60, 12.0, [3.5, 4.5]),
        notes=["a note"],
        law=law,
        runs=runs,
        escape=comparison.EscapeTimes([0.6, 0.8], [4.0, 5.0], {"closed_form": [3.0, 4.0]}),
        escape_slope=comparison.EscapeSlopes(5.0, {"closed_form": 5.5}, 4.9),
        styles={},
        roles={"closed_form": theory.Role.LAW, "flow": theory.Role.REPLAY},
        cost=comparison.Cost(8.0, {"closed_form": 0.5, "flow": 2.0}),
    )


def test_solver_failures_name_the_failed_lanes():
    experiment = _synthetic_experiment()
    assert comparison.solver_failures(experiment) == ["gamma=0.8 flow: stiff"]
    law = PlateauLaw([1.0], 0.3, 0.2, 0.6, [2.0], [2.5], False, 7)
    assert comparison.solver_failures(experiment._replace(law=law)) == [
        "gamma=0.8 flow: stiff",
        "unit-scale solve of the plateau law: code 7",
    ]
    ok = law._replace(solver_ok=True)
    assert comparison.solver_failures(experiment._replace(law=ok)) == ["gamma=0.8 flow: stiff"]


def test_experiment_summary_is_the_json_of_the_records_in_the_saved_order():
    """The saved metrics.json layout: top-level keys in this order, the model by name, a
    `Comparison` without its curves, `TheorySimulation` pairs as {"theory", "simulation"},
    `SolverStatus` as a dict, the escape times and slopes flat: gamma, simulation, each theory
    by name (then, for slopes, the analytic one)."""
    import json

    law = PlateauLaw([1.0], 0.3, 0.2, 0.6, [2.0], [2.5], True, 0)
    summary = comparison.experiment_summary(_synthetic_experiment(law))
    assert list(summary) == [
        "model", "threshold", "coefficients", "top_singular_value", "prediction", "horizon",
        "notes", "law", "escape", "escape_slope", "runs", "roles",
    ]  # fmt: skip
    assert summary["model"] == "ffn"
    assert summary["roles"] == {"closed_form": "law", "flow": "replay"}  # cost: not a number
    assert comparison.experiment_from_summary(summary).roles == {
        "closed_form": theory.Role.LAW, "flow": theory.Role.REPLAY
    }  # fmt: skip
    cost = _synthetic_experiment(law).cost
    assert cost.as_json() == {"simulation": 8.0, "closed_form": 0.5, "flow": 2.0}
    assert cost.ratio("flow") == 0.25 and comparison.Cost(None, {"a": 1.0}).ratio("a") is None
    assert summary["horizon"] == {"steps": 60, "t": 12.0, "predicted": [3.5, 4.5]}
    assert list(summary["law"]) == [
        "unit_scale_escape", "blowup_time_T_Z", "amplitude_A", "offset_c", "plateau_law",
        "single_mode_a5", "solver_ok", "solver_result",
    ]  # fmt: skip
    assert summary["law"]["blowup_time_T_Z"] == 0.3 and summary["law"]["offset_c"] == 0.6
    assert comparison.experiment_summary(_synthetic_experiment())["law"] == {}
    assert summary["escape"] == {
        "gamma": [0.6, 0.8], "simulation": [4.0, 5.0], "closed_form": [3.0, 4.0]
    }  # fmt: skip
    assert list(summary["escape"]) == ["gamma", "simulation", "closed_form"]
    assert summary["escape_slope"] == {"simulation": 5.0, "closed_form": 5.5, "analytic": 4.9}
    assert list(summary["escape_slope"]) == ["simulation", "closed_form", "analytic"]
    run = summary["runs"][1]
    assert list(run) == ["gamma", "status", "solver", "comparisons"]
    assert run["gamma"] == 0.8 and run["solver"] == {"flow": {"ok": False, "result": "stiff"}}
    assert run["comparisons"]["flow"] == {
        "escape_threshold": 0.5,
        "window_end": 2.5,
        "weight_rel_error_max": 2.0625,
        "null_weight_rel_error_max": 2.25,
        "gram_rel_error_max": 2.125,
        "escape_time": {"theory": 5.0, "simulation": 5.0},
        "escape_ratio": 1.0,
        "rho_distance_max": [1.125, 0.2],
        "rho_distance_mean": [1.0625, 0.06],
        "onset_time": {"theory": [2.0, 2.0], "simulation": [1.5, 3.5]},
    }
    first = summary["runs"][0]["comparisons"]["closed_form"]
    assert list(first) == list(run["comparisons"]["flow"])
    assert first["escape_time"] == {"theory": 3.0, "simulation": 4.0}
    assert first["onset_time"] == {"theory": [1.0, 2.0], "simulation": [1.5, 2.5]}
    json.dumps(summary)  # JSON-ready: no arrays left


def test_records_are_read_by_theory():
    """A run's numbers are asked of the theory record: its comparison per lane, its escape
    times and slope (and the model's escape law by the same question)."""
    law = PlateauLaw([1.0], 0.3, 0.2, 0.6, [2.0, 3.0], [2.5], True, 0)
    experiment = _synthetic_experiment(law)
    closed = experiment.comparisons(theories.CLOSED_FORM)
    assert [c.escape_time.theory for c in closed] == [3.0, 4.0]
    assert experiment.escape.of(theories.CLOSED_FORM) == [3.0, 4.0]
    assert experiment.escape_slope.of(theories.CLOSED_FORM) == 5.5
    escape = experiment.escape._replace(theories={law.name: law.escape})
    assert escape.of(law) == [2.0, 3.0]


def test_each_signature_flow_lane_is_its_own_order_and_gamma():
    """The flows of every order are solved in one sweep of gamma x order lanes; each theory's
    lane is the flow at its own order from its own gamma's start (an independent solve, over
    the window before escape: past it a lane stops at its blow-up)."""
    from ctx_staircase import flows, ode, signatures

    ds = tasks.make("add", N=4)
    out = comparison.theory_vs_training(ds, gammas=(0.8, 1.2), max_orders=(0, 1), d=8, lr=0.5)
    sigs = signatures.signature_set(ds, ds.L - 1)
    field = flows.ffn_signature_flow(sigs, out.coefficients, prediction="linear")
    with jax.enable_x64(True):
        for run in out.runs:
            start = {"W_E": run.simulation.W_E[0], "W_U": run.simulation.W_U[0]}
            for m in (0, 1):
                name = theories.signature_flow(m).name
                alone = ode.integrate(
                    field, start, jnp.asarray(out.ts), m, rtol=1e-7, atol=1e-12, max_steps=20_000
                )
                before = out.ts <= run.comparisons[name].window_end
                np.testing.assert_allclose(
                    run.theories[name].W_E[before],
                    np.asarray(alone.ys["W_E"])[before],
                    rtol=1e-5,
                    atol=1e-9,
                )


def test_a_run_with_no_theory_is_sized_by_its_training(monkeypatch):
    """With no theory registered for a run, the theories stage holds training's trajectories
    alone, and the comparison stage adds only its temporaries."""
    monkeypatch.setattr(theories, "REGISTRY", [])
    stages = budget.theory_stages(tasks.make("add", N=4), d=16)
    assert 0 < stages["theories"] < stages["compare"]


def test_a_run_solves_only_the_theories_it_names():
    """``theories=`` picks theories by name: the named one's lanes, escape times and training are
    bitwise those of the run that solves every theory, the others are absent (and not sized);
    a name that does not apply is refused, naming the parameter and the names that do."""
    ds = tasks.make("add", N=4)
    settings = dict(gammas=(0.8, 1.2), max_orders=(1,), d=8, lr=0.5, steps=60, snapshot_every=5)
    every = comparison.theory_vs_training(ds, **settings)
    flow = theories.signature_flow(1).name
    named = comparison.theory_vs_training(ds, theories=[flow], **settings)
    assert set(every.runs[0].theories) == {flow, "closed_form", "closed_form_feedback"}
    for whole, alone in zip(every.runs, named.runs, strict=True):
        assert set(alone.theories) == set(alone.comparisons) == {flow}
        np.testing.assert_array_equal(alone.theories[flow].W_E, whole.theories[flow].W_E)
        np.testing.assert_array_equal(alone.simulation.W_E, whole.simulation.W_E)
        assert alone.comparisons[flow].escape_time == whole.comparisons[flow].escape_time
    assert set(named.escape.as_json()) == {"gamma", "simulation", flow}
    # a theory's output is what `theory.Size.trajectory_bytes` sizes: W_E and W_U of every lane
    size = theory.Size(len(every.runs), len(every.ts), 0, 2, ds.vocab_size, 8, 0, 0, (1,), "", 1)
    for name in every.runs[0].theories:
        held = sum(r.theories[name].W_E.nbytes + r.theories[name].W_U.nbytes for r in every.runs)
        assert held == size.trajectory_bytes, name
    one = budget.theory_stages(ds, d=8, max_orders=(1,), steps=60, theories=[flow])
    all_ = budget.theory_stages(ds, d=8, max_orders=(1,), steps=60)
    assert one["compare"] < all_["compare"]
    with pytest.raises(ValueError, match=r"theories must name .*'signature_flow_m1'.*got \['relu"):
        comparison.theory_vs_training(ds, theories=["relu_gated_flow"], **settings)
    with pytest.raises(ValueError, match="theories must name one or more"):
        comparison.theory_vs_training(ds, theories=[], **settings)


def test_a_run_costs_each_theory_and_training_and_says_which_are_laws(tmp_path):
    """`Cost`: the wall seconds of training and of every solved theory (the attention plateau
    law too), each theory a law; the signature flows of both orders are solved in one call, and
    each is charged all of it; a training resumed from a folder was not measured, so its cost is
    None, not the seconds of loading it."""
    ds = tasks.make("add", N=4)
    settings = dict(gammas=(0.8, 1.2), max_orders=(0, 1), d=8, lr=0.5, steps=60, snapshot_every=5)
    first = comparison.theory_vs_training(ds, out=tmp_path, **settings)
    names = set(first.runs[0].theories)
    assert set(first.cost.theories) == names == set(first.roles)
    assert set(first.roles.values()) == {theory.Role.LAW}
    assert first.cost.simulation > 0 and all(v > 0 for v in first.cost.theories.values())
    flows = [first.cost.theories[f"signature_flow_m{m}"] for m in (0, 1)]
    assert 0.5 * max(flows) < min(flows)  # the shared solve, charged to each
    resumed = comparison.theory_vs_training(ds, out=tmp_path, **settings)
    assert resumed.cost.simulation is None and set(resumed.cost.theories) == names
    attention = comparison.theory_vs_training(
        tasks.make("add", N=4), model="attention", gammas=(0.6,), d=8, steps=40
    )
    law = attention.law.name
    assert attention.roles[law] is theory.Role.LAW and attention.cost.theories[law] > 0


def test_the_automatic_horizon_rounds_up_to_whole_tens_of_steps():
    """``steps = ceil(HORIZON_MARGIN t_max / lr / 10) * 10``: 1.25 x 1.0 / 0.01 = 125 steps
    rounds up to 130 (never down to 120, which would end before the margin); an exact multiple
    stays; NaN lanes are ignored; a given horizon is kept."""
    assert comparison.HORIZON_MARGIN == 1.25
    assert comparison.horizon(np.array([1.0, np.nan]), [1.0, 1.2], 0.01, None)[0] == 130
    assert comparison.horizon(np.array([0.8]), [1.0], 0.01, None)[0] == 100
    assert comparison.horizon(np.array([0.001]), [1.0], 0.01, None)[0] == 10
    assert comparison.horizon(np.array([1.0]), [1.0], 0.01, 170)[0] == 170


def test_a_fitted_escape_law_passes_through_the_mean_of_the_measured_offsets():
    """The FFN's drawn law ``t = slope gamma + offset`` (eq. C8, `theory.ModelTheory
    .analytic_curve`) with the analytic slope: its offset is the mean of ``t_measured - slope
    gamma`` over every lane, so its residuals on the measured times sum to 0; and each escape
    ratio is the theory's time over training's."""
    ds = tasks.make("add", N=4)
    out = comparison.theory_vs_training(
        ds, gammas=(0.8, 1.0, 1.2), max_orders=(1,), d=8, lr=0.5, theories=["closed_form"]
    )
    gammas = np.asarray(out.escape.gamma)
    slope = out.escape_slope.analytic
    offsets = np.asarray(out.escape.simulation) - slope * gammas
    assert np.ptp(offsets) > 1e-6  # the lanes are not exactly on the analytic slope
    fine = np.linspace(0.5, 1.5, 5)
    curve, _ = out.model.analytic_curve(fine, out)
    np.testing.assert_allclose(curve, offsets.mean() + slope * fine, rtol=1e-12)
    for run in out.runs:
        c = run.comparisons["closed_form"]
        assert c.escape_ratio == pytest.approx(c.escape_time.theory / c.escape_time.simulation)


@pytest.mark.parametrize("term", ["none", "uniform", "linear"])
def test_the_prediction_term_becomes_its_enum_once_checked(term):
    """A name at the edge, a `flows.Prediction` in the setting, equal to the name it was."""
    inputs = comparison.check_theory_inputs(
        tasks.make("add", N=5), **(THEORY_SETTINGS | {"prediction": term})
    )
    assert type(inputs.setting.prediction) is flows.Prediction
    assert inputs.setting.prediction == term and str(inputs.setting.prediction) == term
