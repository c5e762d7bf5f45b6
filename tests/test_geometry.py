"""geometry: THE measurement of embedding geometry against the signature geometry.

Each function is checked against an independent route: brute-force loops over the pairs, direct
calls of the primitives it is built from, and planted embeddings whose geometry is known.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect

import jax
import numpy as np
import pytest

from ctx_staircase import budget, comparison, geometry, metrics, signatures, tasks
from ctx_staircase.theory import SolverStatus, TheoryLanes, WeightTrajectory, frozen_past


def _cos(X: np.ndarray) -> np.ndarray:
    """Brute-force cosine matrix of the rows of ``X`` ``[A, d]``."""
    X = np.asarray(X, dtype=np.float64)
    A = X.shape[0]
    out = np.empty((A, A))
    for i in range(A):
        for j in range(A):
            out[i, j] = X[i] @ X[j] / (np.linalg.norm(X[i]) * np.linalg.norm(X[j]))
    return out


def _pairs(S: np.ndarray) -> np.ndarray:
    """The pairs a < b of ``S`` ``[A, A]``, by a double loop."""
    A = S.shape[0]
    return np.asarray([S[a, b] for a in range(A) for b in range(a + 1, A)])


@pytest.fixture(scope="module")
def add():
    return tasks.make("add", N=6)


def test_embedding_similarity_is_the_cosine_matrix_of_the_group_rows(add):
    rng = np.random.default_rng(0)
    W_E = rng.normal(size=(2, 3, add.vocab_size, 5))
    alphas = geometry.group_tokens(add, "numbers")
    S = geometry.embedding_similarity(W_E, alphas)
    assert S.shape == (2, 3, alphas.size, alphas.size)
    for g in range(2):
        for s in range(3):
            np.testing.assert_allclose(S[g, s], _cos(W_E[g, s, alphas]), rtol=1e-12, atol=1e-12)


def test_offdiagonal_statistics_are_those_of_the_pairs_above_the_diagonal():
    rng = np.random.default_rng(1)
    S_emb = np.stack([_cos(rng.normal(size=(5, 3))) for _ in range(4)])  # [4, 5, 5]
    S_sig0 = _cos(rng.normal(size=(5, 3)))
    stats = geometry.offdiagonal_statistics(S_emb, S_sig0)
    assert stats.mse.shape == stats.mean.shape == (4,)
    for s in range(4):
        emb, sig = _pairs(S_emb[s]), _pairs(S_sig0)
        assert stats.mse[s] == pytest.approx(np.mean((emb - sig) ** 2), rel=1e-12)
        assert stats.mean[s] == pytest.approx(emb.mean(), rel=1e-12)
    # exact identities: a geometry equal to the reference, and a collapsed one
    same = geometry.offdiagonal_statistics(S_sig0, S_sig0)
    assert same.mse == 0.0
    collapsed = geometry.offdiagonal_statistics(np.ones((5, 5)), S_sig0)
    assert collapsed.mean == 1.0
    assert collapsed.mse == pytest.approx(np.mean((1 - _pairs(S_sig0)) ** 2), rel=1e-12)


def test_offdiagonal_statistics_read_the_pairs_in_upper_triangle_order():
    # an asymmetric S: only the pairs a < b count, not a > b
    S = np.arange(16.0).reshape(4, 4)
    stats = geometry.offdiagonal_statistics(S, np.zeros((4, 4)))
    assert stats.mean == pytest.approx(np.mean([1, 2, 3, 6, 7, 11]))


def test_probe_curve_is_probe_fit_at_each_chosen_snapshot(add):
    rng = np.random.default_rng(2)
    alphas = geometry.group_tokens(add, "numbers")
    phi1 = signatures.label_signature(add, 1, alphas=alphas, context=np.unique(add.tokens))
    S_emb = np.stack([_cos(rng.normal(size=(alphas.size, 4))) for _ in range(3)])  # [S=3]
    curve = geometry.probe_curve(phi1, S_emb, [2, 0], seed=3)
    assert curve.corr.shape == curve.mse.shape == (2,)
    for j, s in enumerate([2, 0]):
        fit = metrics.probe_fit(phi1, S_emb[s], seed=3)
        assert curve.corr[j] == float(fit.heldout_corr)
        assert curve.mse[j] == float(fit.heldout_mse)
    # leading lane axes: each lane gets its own fits
    lanes = geometry.probe_curve(phi1, np.stack([S_emb, S_emb[::-1]]), [2, 0], seed=3)
    assert lanes.corr.shape == (2, 2)
    np.testing.assert_array_equal(lanes.corr[0], curve.corr)
    np.testing.assert_array_equal(lanes.corr[1], curve.corr[::-1])


def test_a_probe_planted_in_the_embeddings_is_recovered(add):
    alphas = geometry.group_tokens(add, "numbers")
    phi1 = signatures.label_signature(add, 1, alphas=alphas, context=np.unique(add.tokens))
    v = np.random.default_rng(4).normal(size=phi1.shape[-1])
    planted = np.asarray(metrics.probe_similarity(phi1, (v,)))
    curve = geometry.probe_curve(phi1, np.stack([np.eye(alphas.size), planted]), [1])
    assert curve.corr[0] >= 0.99


def test_alignment_curves_match_their_primitives_and_the_planted_geometry(add):
    rng = np.random.default_rng(5)
    alphas = geometry.group_tokens(add, "numbers")
    labels = np.unique(add.labels[add.weights > 0])
    phi0 = signatures.label_signature(add, 0, alphas=alphas, labels=labels)
    W_E = rng.normal(size=(2, 4, add.vocab_size, phi0.shape[1]))
    W_E[1, 3, alphas] = phi0  # lane 1 ends with S^emb = S^{sig,(0)} exactly
    steps = np.array([0, 5, 10, 20])
    curves = geometry.alignment_curves(W_E, steps, add, probe_snapshots=2, seed=1)
    assert curves.group == "numbers" and curves.rho0.shape == (2, 4)
    np.testing.assert_array_equal(curves.alphas, alphas)
    np.testing.assert_allclose(curves.S_sig0, _cos(phi0), atol=1e-12)
    for g in range(2):
        for s in range(4):
            want = metrics.alignment(_cos(W_E[g, s, alphas]), _cos(phi0))
            assert curves.rho0[g, s] == pytest.approx(float(want.value), abs=1e-9)
    assert curves.rho0[1, 3] == pytest.approx(1.0, abs=1e-9)
    # probes at the evenly spread snapshots 0 and 3, i.e. steps 0 and 20
    np.testing.assert_array_equal(curves.probe_steps, [0, 20])
    S_emb = geometry.embedding_similarity(W_E, alphas)
    phi1 = signatures.label_signature(
        add, 1, alphas=alphas, labels=labels, context=np.unique(add.tokens)
    )
    probe = geometry.probe_curve(phi1, S_emb, [0, 3], seed=1)
    np.testing.assert_array_equal(curves.probe_corr, probe.corr)
    np.testing.assert_array_equal(curves.probe_mse, probe.mse)
    none = geometry.alignment_curves(W_E, steps, add, probe_snapshots=0)
    assert none.probe_corr.shape == (2, 0) and none.probe_steps.size == 0
    np.testing.assert_array_equal(none.rho0, curves.rho0)


def test_probe_snapshots_are_the_nearest_to_an_even_spread(add):
    """8 probes over 10 snapshots sit at the rounded positions of ``linspace(0, 9, 8)`` (0, 1.29,
    2.57, ...: 0, 1, 3, 4, 5, 6, 8, 9), the ends included; more probes than snapshots take all."""
    W_E = np.random.default_rng(2).normal(size=(1, 10, add.vocab_size, 3))
    steps = np.arange(10) * 7
    curves = geometry.alignment_curves(W_E, steps, add, probe_snapshots=8, seed=0)
    np.testing.assert_array_equal(curves.probe_steps, steps[[0, 1, 3, 4, 5, 6, 8, 9]])
    assert curves.probe_corr.shape == (1, 8)
    every = geometry.alignment_curves(W_E[:, :4], steps[:4], add, probe_snapshots=9, seed=0)
    np.testing.assert_array_equal(every.probe_steps, steps[:4])


def test_alignment_orders_rho0_agrees_with_alignment_curves(add):
    rng = np.random.default_rng(6)
    W_E = rng.normal(size=(3, add.vocab_size, 4))
    orders = geometry.alignment_orders(add, W_E)
    curves = geometry.alignment_curves(W_E[None], np.arange(3), add, probe_snapshots=0)
    assert orders.shape == (2, 3)
    np.testing.assert_allclose(orders[0], curves.rho0[0], rtol=1e-12, atol=1e-12)


def test_alignment_orders_rho1_is_the_best_frequency_alignment(add):
    rng = np.random.default_rng(7)
    W_E = rng.normal(size=(2, add.vocab_size, 4))
    alphas = geometry.group_tokens(add, "numbers")
    phi1 = signatures.label_signature(
        add, 1, alphas=alphas, labels=np.unique(add.labels[add.weights > 0]), context=alphas
    )
    ks = np.arange(1, alphas.size // 2 + 1)
    per_k = np.asarray(
        metrics.frequency_alignment(phi1, geometry.embedding_similarity(W_E, alphas), ks)
    )  # [2, K]
    orders = geometry.alignment_orders(add, W_E)
    np.testing.assert_array_equal(orders[1], per_k.max(axis=-1))
    assert np.all(orders[1] >= per_k[:, 0])


def test_alignment_orders_has_no_first_order_without_context():
    ds = tasks.make("add", N=4)
    ds1 = dataclasses.replace(ds, tokens=ds.tokens[:, :1])
    assert ds1.L == 1
    W_E = np.random.default_rng(8).normal(size=(2, ds.vocab_size, 3))
    orders = geometry.alignment_orders(ds1, W_E)
    assert np.all(np.isnan(orders[1])) and np.all(np.isfinite(orders[0]))


def test_signature_geometry_summary_offdiagonal_numbers(add):
    geo = geometry.signature_geometry(add, 1)
    for name, S in geo.similarity.items():
        upper = _pairs(S)
        assert geo.summary[name]["offdiag_mean"] == pytest.approx(upper.mean(), rel=1e-12)
        assert geo.summary[name]["offdiag_min"] == upper.min()
        assert geo.summary[name]["offdiag_max"] == upper.max()


def test_signature_geometry_is_float64_without_x64():
    with jax.enable_x64(False):
        geo = geometry.signature_geometry(tasks.make("mod", N=5), 0)
    assert geo.similarity["order0"].dtype == np.float64
    assert geo.summary["order0"]["constant"]  # mod: every number has the same label law


# ------------------------------------------------------------------ comparison's typed records


def test_theory_lanes_hold_one_solver_status_per_lane():
    traj = WeightTrajectory(np.zeros(2), np.zeros((2, 3, 1)), np.zeros((2, 3, 1)))
    closed = TheoryLanes((traj, traj))
    assert closed.solver is None
    ode = TheoryLanes((traj,), (SolverStatus(False, "max_steps"),))
    assert ode.solver[0]._asdict() == {"ok": False, "result": "max_steps"}


def test_frozen_past_stops_the_flow_once_a_weight_reaches_the_cap():
    def field(t, y, args):
        return {k: np.ones_like(v) * (1.0 + t) for k, v in y.items()}

    guarded = frozen_past(field, cap=1.0)
    below = {"W_E": np.full((2, 2), 0.5), "W_U": np.full((2, 2), -0.9)}
    np.testing.assert_array_equal(guarded(2.0, below, None)["W_E"], np.full((2, 2), 3.0))
    above = {"W_E": np.full((2, 2), 0.5), "W_U": np.array([[0.0, -1.0], [0.0, 0.0]])}
    out = guarded(2.0, above, None)
    assert all(np.all(np.asarray(v) == 0.0) for v in out.values())


def test_slope_is_the_least_squares_slope_of_the_finite_values():
    gammas = np.array([0.5, 1.0, 1.5, 2.0])
    values = 3.0 * gammas - 1.0
    assert comparison.slope(gammas, values) == pytest.approx(3.0, rel=1e-12)
    noisy = values + np.array([0.1, -0.1, -0.1, 0.1])
    expected = np.cov(gammas, noisy, bias=True)[0, 1] / np.var(gammas)
    assert comparison.slope(gammas, noisy) == pytest.approx(expected, rel=1e-12)
    assert comparison.slope(gammas, [1.0, np.nan, np.inf, 4.0]) == pytest.approx(2.0)
    assert np.isnan(comparison.slope(gammas, [1.0, np.nan, np.inf, -np.inf]))


def test_snapshot_steps_count_is_budgets_bound():
    for steps, every in ((35, None), (35, 7), (12_345, None), (50_000, None)):
        grid = comparison.snapshot_steps(steps, every)
        assert grid[0] == 0 and grid[-1] == steps and list(grid) == sorted(set(grid))
        assert len(grid) <= budget.theory_snapshots(steps, every)


def test_theory_signature_order():
    ds = tasks.make("add", N=4)
    assert budget.theory_signature_order(ds, "attention", (0, 1), "linear") == 0
    assert budget.theory_signature_order(ds, "ffn", (0, 1), "linear") == ds.L - 1
    assert budget.theory_signature_order(ds, "ffn", (0, 1), "none") == 1


def test_budget_does_not_import_comparison():
    """budget sizes the theory run before it starts; comparison imports budget, never back."""
    tree = ast.parse(inspect.getsource(budget))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom | ast.Import)
        for alias in node.names
    }
    assert "comparison" not in imported
    assert "comparison." not in inspect.getsource(budget).replace(
        "comparison.theory_vs_training", ""
    )


def test_compare_puts_each_side_in_its_field():
    """`Comparison`'s `TheorySimulation` pairs: the theory's curves and times in ``theory``,
    training's in ``simulation``, the escape times read off the paired logit scales."""
    from ctx_staircase import closed_form

    ds = tasks.make("add", N=4)
    rng = np.random.default_rng(1)
    ts = np.linspace(0.0, 4.0, 9)
    W_E = 1e-2 * rng.standard_normal((9, ds.vocab_size, 6))
    W_U = 1e-2 * rng.standard_normal((9, ds.vocab_size, 6))
    theory = WeightTrajectory(ts, W_E, W_U, np.exp(ts) * 0.1)
    sim = WeightTrajectory(ts, 2 * W_E, W_U, np.exp(2 * ts) * 0.1)
    c = comparison.compare(theory, sim, ds, coefficients=(1.0,), threshold=0.5)
    np.testing.assert_array_equal(c.logit_scale.theory, theory.logit_scale)
    np.testing.assert_array_equal(c.logit_scale.simulation, sim.logit_scale)
    for side in ("theory", "simulation"):
        scale = getattr(c.logit_scale, side)
        assert getattr(c.escape_time, side) == closed_form.crossing_time(ts, scale, 0.5)
    assert c.escape_time.theory == pytest.approx(2 * c.escape_time.simulation)
    assert c.escape_ratio == c.escape_time.theory / c.escape_time.simulation
    np.testing.assert_array_equal(c.rho.theory, geometry.alignment_orders(ds, W_E))
    np.testing.assert_array_equal(c.rho.simulation, geometry.alignment_orders(ds, 2 * W_E))


def test_offdiagonal_statistics_keep_float64_without_x64():
    """fig3's mean off-diagonal cosine is NumPy's float64 mean of the pairs, whatever the flag."""
    rng = np.random.default_rng(3)
    S_emb = rng.uniform(-1, 1, (3, 6, 6))
    with jax.enable_x64(False):
        stats = geometry.offdiagonal_statistics(S_emb, np.eye(6))
    rows, cols = np.triu_indices(6, k=1)
    assert stats.mean.dtype == np.float64
    np.testing.assert_array_equal(stats.mean, S_emb[:, rows, cols].mean(axis=-1))


def test_compare_scores_the_weights_before_half_the_measured_escape():
    """The pre-escape window ends at half of training's escape (here 0.40), not the theory's
    (0.80): the relative weight error t / (1 + t) is largest at the window's last time."""
    ds = tasks.make("add", N=4)
    rng = np.random.default_rng(1)
    ts = np.linspace(0.0, 4.0, 41)
    W_E = 1e-2 * rng.standard_normal((ds.vocab_size, 6))
    W_U = 1e-2 * rng.standard_normal((41, ds.vocab_size, 6))
    grown = (1 + ts)[:, None, None] * W_E
    theory = WeightTrajectory(ts, np.broadcast_to(W_E, grown.shape), W_U, np.exp(ts) * 0.1)
    sim = WeightTrajectory(ts, grown, W_U, np.exp(2 * ts) * 0.1)
    c = comparison.compare(theory, sim, ds, coefficients=(1.0,), threshold=0.5, window=0.5)
    assert c.escape_time.simulation == pytest.approx(np.log(5) / 2, abs=0.01)
    assert c.window_end == pytest.approx(0.5 * c.escape_time.simulation)
    last = ts[ts <= c.window_end][-1]
    assert c.weight_rel_error_max == pytest.approx(last / (1 + last))
    assert c.null_weight_rel_error_max == pytest.approx(last / (1 + last))
