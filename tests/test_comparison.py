"""Theory against training: escape statistics, the plateau law, input checks, float64 scoping."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import budget, cli, closed_form, comparison, models, plateau, tasks, train


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
    got = comparison.uniform_attention_logit_scale(weights, jnp.asarray(ds.tokens))
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
    gammas = np.asarray(out.escape["gamma"])
    for name, times in out.escape.items():
        if name == "gamma":
            continue
        log_t = np.log(np.asarray(times))
        by_hand = (log_t[1] - log_t[0]) / (gammas[1] - gammas[0])
        assert out.escape_slope[name] == pytest.approx(by_hand, rel=1e-9), name


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
    law = np.asarray(out.escape["plateau_law"]) / np.asarray(out.escape["simulation"])
    assert np.all(np.abs(law - 1) <= 0.10), law
    slopes = out.escape_slope
    assert slopes["analytic"] == pytest.approx(slopes["simulation"], rel=0.05)


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
