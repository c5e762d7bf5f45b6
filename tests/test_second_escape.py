"""The second escape (theory/second_escape.md): the Hessian-vector product, the band, the reduced
flow on the symmetric manifold, the plateau flow, the split-unit flow, and the prediction against
training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import activations, ode, train
from ctx_staircase import ledger as lg
from ctx_staircase import second_escape as se
from ctx_staircase.dataset import merged_bags
from ctx_staircase.experiments.regime import PRIMARY


def tiny(activation="relu", N=5, d=4, seed=0):
    ds = PRIMARY.make("mod", N=N)
    problem = se.plateau_problem(ds, activation)
    rng = np.random.default_rng(seed)
    W_E, W_U = (0.5 * rng.standard_normal((ds.vocab_size, d)) for _ in range(2))
    return ds, problem, W_E, W_U


@pytest.mark.parametrize("activation", ["relu", "poly:1,0.5"])
def test_hvp_equals_the_autodiff_hessian(activation):
    """Each HVP against the dense Hessian column (jax.hessian) on a tiny model."""
    _, problem, W_E, W_U = tiny(activation)
    size = W_E.size

    def flat_loss(theta):
        return se.loss(theta[:size].reshape(W_E.shape), theta[size:].reshape(W_U.shape), problem)

    theta = jnp.concatenate([jnp.ravel(W_E), jnp.ravel(W_U)])
    H = np.asarray(jax.hessian(flat_loss)(theta))
    rng = np.random.default_rng(1)
    for _ in range(3):
        v = rng.standard_normal(2 * size)
        v_E, v_U = v[:size].reshape(W_E.shape), v[size:].reshape(W_U.shape)
        H_E, H_U = se.hessian_vector_product(W_E, W_U, (v_E, v_U), problem)
        np.testing.assert_allclose(
            np.concatenate([np.ravel(H_E), np.ravel(H_U)]), H @ v, rtol=1e-10, atol=1e-12
        )


def test_lanczos_band_is_the_bottom_of_the_dense_spectrum():
    _, problem, W_E, W_U = tiny()
    size = W_E.size

    def flat_loss(theta):
        return se.loss(theta[:size].reshape(W_E.shape), theta[size:].reshape(W_U.shape), problem)

    H = np.asarray(jax.hessian(flat_loss)(jnp.concatenate([jnp.ravel(W_E), jnp.ravel(W_U)])))
    lowest = np.linalg.eigvalsh(H)[:3]
    found = se.band(W_E, W_U, problem, modes=3, iterations=2 * size)
    np.testing.assert_allclose(found.rates, -lowest, rtol=1e-8, atol=1e-10)
    for i in range(3):  # each mode is an eigenvector
        v = (found.modes[0][i], found.modes[1][i])
        H_E, H_U = se.hessian_vector_product(W_E, W_U, v, problem)
        np.testing.assert_allclose(H_E, -found.rates[i] * v[0], atol=1e-8)
        np.testing.assert_allclose(H_U, -found.rates[i] * v[1], atol=1e-8)


def test_fourier_label_names_a_planted_frequency():
    A, d = 12, 3
    alpha = np.arange(A)[:, None]
    rows = np.cos(2 * np.pi * 5 * alpha / A) * np.ones(d) + 0.1 * np.cos(2 * np.pi * alpha / A)
    k, share = se.fourier_label(rows[None])
    assert k[0] == 5 and share[0] > 0.95


@pytest.mark.parametrize("A", [8, 9])
def test_fourier_label_shares_are_fractions_of_the_rows_power(A):
    """Each frequency's share of the number rows' power (Parseval: ``k`` and ``A - k`` are one
    frequency; ``k = 0`` and, for even ``A``, the Nyquist ``k = A / 2`` have no partner): 60% at
    ``k = 1`` and 40% at the highest frequency name ``k = 1`` with a share of 0.6."""
    j = np.arange(A)[:, None]
    top = A // 2
    rows = np.sqrt(1.2) * np.cos(2 * np.pi * j / A) * np.array([[1.0, 0.0]])
    if A % 2 == 0:  # the alternating row has all its power at k = A / 2
        rows = rows + np.sqrt(0.4) * np.cos(np.pi * j) * np.array([[0.0, 1.0]])
    else:
        rows = rows + np.sqrt(0.8) * np.cos(2 * np.pi * top * j / A) * np.array([[0.0, 1.0]])
    k, share = se.fourier_label(rows[None])
    assert k[0] == 1
    np.testing.assert_allclose(share[0], 0.6, rtol=1e-12)
    k, share = se.fourier_label(rows[None, :, ::-1] * np.array([2.0, 1.0]))  # 1.6 at the top
    assert k[0] == top
    np.testing.assert_allclose(share[0], 1.6 / 2.2, rtol=1e-12)


def symmetric_state(ds, problem, d=4, seed=0):
    rng = np.random.default_rng(seed)
    W_E, W_U = (0.3 * rng.standard_normal((ds.vocab_size, d)) for _ in range(2))
    return se.symmetric_part(W_E, W_U, problem)


def test_reduced_flow_matches_full_training_started_on_the_symmetric_manifold():
    """Full-batch GD of the Flax FFN (lr 0.01, so t = 0.01 step) from a symmetric state stays
    on the manifold and follows the reduced flow (eq. S2)."""
    ds = PRIMARY.make("mod", N=5)
    problem = se.plateau_problem(ds)
    W_E, W_U = symmetric_state(ds, problem)
    graphdef, state = train.init_state("ffn", ds, gamma=1.0, seed=0, d=4, dtype=jnp.float64)
    state["W_E"][...] = jnp.asarray(W_E)
    state["W_U"][...] = jnp.asarray(W_U)
    config = train.TrainConfig(optimizer="gd", lr=0.01, steps=2000, snapshots=(0, 1000, 2000))
    run = jax.jit(train.make_run(graphdef, config))
    trajectory = run(state, jnp.asarray(0.01), jax.random.key(0), train.TrainData.from_dataset(ds))
    reduced = se.reduced_flow(W_E, W_U, problem, np.array([0.0, 10.0, 20.0]))
    for i in (1, 2):
        E, U = np.asarray(trajectory.W_E[i]), np.asarray(trajectory.W_U[i])
        sym_E, sym_U = se.symmetric_part(E, U, problem)
        np.testing.assert_allclose(E, sym_E, atol=1e-12)  # still on the manifold
        np.testing.assert_allclose(U, sym_U, atol=1e-12)
        for name, row in (
            ("tied", E[problem.geometry_ids[0]]),
            ("w_lab", U[problem.label_ids[0]]),
            ("w_out", U[problem.other_ids[0]]),
        ):
            flow = np.asarray(reduced.ys[name][i]).reshape(-1)
            # GD at lr 0.01 is the flow up to O(lr): a relative error ~1e-3 of the vector
            assert np.linalg.norm(row - flow) <= 2e-3 * np.linalg.norm(flow), name
    moved = np.linalg.norm(reduced.ys["tied"][2] - reduced.ys["tied"][0])
    assert moved > 0.05 * np.linalg.norm(reduced.ys["tied"][0])  # the test is not of a still state


@pytest.mark.parametrize("activation", ["relu", "poly:1,0.5"])
def test_plateau_field_is_the_gradient_flow_on_the_manifold(activation):
    """At a symmetric state the plateau's residual is the state's own, so eq. S5 is exact."""
    ds = PRIMARY.make("mod", N=5)
    problem = se.plateau_problem(ds, activation)
    W_E, W_U = symmetric_state(ds, problem)
    field = se.plateau_field(0.0, {"W_E": jnp.asarray(W_E), "W_U": jnp.asarray(W_U)}, problem)
    dE, dU = jax.grad(se.loss, argnums=(0, 1))(jnp.asarray(W_E), jnp.asarray(W_U), problem)
    np.testing.assert_allclose(field["W_E"], -dE, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(field["W_U"], -dU, rtol=1e-10, atol=1e-14)


def test_plateau_field_off_the_manifold_holds_the_plateau_residual():
    """Off the manifold, eq. S5 is the gradient of sum_n sigma(h_n) . W_U^T r_n with r_n the
    residual at P(theta): computed here the slow way, with the [n, V] logits."""
    ds, problem, W_E, W_U = tiny()
    E_sym, U_sym = se.symmetric_part(W_E, W_U, problem)
    logits = np.maximum(E_sym[problem.tokens].sum(1), 0) @ U_sym.T
    q = np.exp(logits - logits.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    r = problem.weights[:, None] * (q - np.eye(ds.vocab_size)[problem.labels])

    def linear(E, U):
        return jnp.sum(r * (jnp.maximum(E[problem.tokens].sum(1), 0) @ U.T))

    dE, dU = jax.grad(linear, argnums=(0, 1))(jnp.asarray(W_E), jnp.asarray(W_U))
    field = se.plateau_field(0.0, {"W_E": jnp.asarray(W_E), "W_U": jnp.asarray(W_U)}, problem)
    np.testing.assert_allclose(field["W_E"], -dE, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(field["W_U"], -dU, rtol=1e-10, atol=1e-14)


def test_crossings_reads_collapse_then_escape():
    ts = np.arange(6.0)
    rho = np.array([0.0, 0.995, 1.0, 0.95, 0.85, 0.5])
    assert se.crossings(ts, rho) == (1.0, pytest.approx(3.5))
    assert np.isnan(se.crossings(ts, np.array([0.0, 0.995, 1, 1, 1, 1]))[1])
    assert np.isnan(se.crossings(ts, np.zeros(6))[0])


def test_cli_second_escape_writes_the_record(tmp_path, capsys):
    """`theory --second-escape` on mod N=20 (V = 2 V_min, d = 64), seeds 0 and 1: metrics.json
    holds one L1 and one L2 row per lane, and the predicted escaping k is training's."""
    import json

    from ctx_staircase import cli

    argv = [
        "theory",
        "mod",
        "--param",
        "N=20",
        "--param",
        "vocab_size=42",
        "--d",
        "64",
        "--gamma",
        "1.0",
        "--seeds",
        "0",
        "1",
        "--second-escape",
        "--steps",
        "400",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    record = json.loads((tmp_path / "metrics.json").read_text())
    escape = record["second_escape"]
    assert escape["level"] == ["L1", "L1", "L2", "L2"] and escape["level_rho0"] == se.LEVEL
    assert escape["seed"] == [0, 1, 0, 1]  # --seeds: one lane per seed, each at both levels
    for key in ("gamma", "t0", "t1_predicted", "t1_measured", "k_predicted", "rate_predicted"):
        assert len(escape[key]) == 4, key
    assert escape["t0"][2:] == [0.0, 0.0] and min(escape["t0"][:2]) > 0
    assert all(np.isfinite(escape["t1_measured"]))
    assert escape["k_predicted"] == escape["k_measured"]
    assert all(abs(r - 1) <= 0.2 for r in escape["ratio"])
    # L1 reads the training state at t0, so its cost counts training's share up to t0
    assert escape["roles"] == {"L1": "replay", "L2": "law"}
    seconds, cost = escape["seconds"], escape["cost"]
    assert cost["simulation"] == seconds["training"] and cost["L2"] == seconds["L2"]
    share = np.mean(escape["t0"][:2]) / 400
    assert cost["L1"] == pytest.approx(seconds["L1"] + share * seconds["training"])
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        f"L1 (replay) {cost['L1']:.2f} s" in printed and f"L2 (law) {cost['L2']:.2f} s" in printed
    )
    # the table also scores L2 as the experiment does: on the plateau after training's collapse
    assert "after t_c" in printed
    for i, t_c in zip((2, 3), escape["t_collapse_measured"], strict=True):
        remaining = (escape["t1_predicted"][i] - t_c) / (escape["t1_measured"][i] - t_c)
        assert f" {remaining:.3f} " in printed
    # training's ledger: halfway along its plateau the realized rate accounts for the log-gain
    # (the linear theory on mod), and the frozen-gate band would give more than twice it
    book = escape["ledger"]
    assert book["t0"] == escape["t0"][:2] and "ledger of training" in printed
    gain, realized = np.array(book["gain_half"]), np.array(book["realized_half"])
    assert np.all(gain > 0.2) and np.all(np.abs(realized / gain - 1) <= 0.10)
    assert np.all(np.array(book["band_half"]) > 2 * gain)
    t1 = np.array(escape["t1_measured"][:2])
    assert np.all(np.array(book["t"]) <= t1)
    halfway = 0.5 * (np.array(book["t0"]) + t1)  # the saves are 10 epochs apart here
    assert np.all(np.abs(np.array(book["t_half"]) - halfway) <= 10)


# ------------------------------------------------------------------------------------------------
# the split-unit flow (eq. S6)


def split_case(activation="relu", task=("mod", {"N": 5}), d=6, seed=0):
    """A task near the plateau: every number row is ``u`` plus a deviation of 0.1, with ``u_j =
    +1`` on units 0 and 1 (every gate open), ``-1`` on unit 2 (every gate closed) and 0 on units
    3-5 (the deviations split the samples)."""
    ds = PRIMARY.make(task[0], **task[1])
    problem = se.plateau_problem(ds, activation)
    rng = np.random.default_rng(seed)
    u = np.array([1.0, 1.0, -1.0, 0.0, 0.0, 0.0])[:d]
    W_E = u + 0.1 * rng.standard_normal((ds.vocab_size, d))
    W_U = 0.5 * rng.standard_normal((ds.vocab_size, d))
    return ds, problem, W_E, W_U


def test_affine_on_reads_the_gate_or_the_degree():
    relu = activations.get("relu")
    low, high = np.array([0.1, -2.0, -1.0, 0.0]), np.array([3.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(activations.affine_on(relu, low, high), [1, 1, 0, 0])
    assert activations.affine_on("identity", low, high).all()
    for smooth in ("poly:1,0.5", "gelu"):
        np.testing.assert_array_equal(activations.affine_on(smooth, low, high), [0, 0, 0, 0])
        assert activations.affine_on(smooth, 0.3, 0.3)


def test_split_layout_sorts_the_units_by_their_gates():
    _, problem, W_E, _ = split_case()
    layout = se.split_layout(W_E, problem)
    np.testing.assert_array_equal(layout.split, [3, 4, 5])
    np.testing.assert_array_equal(layout.held, [0, 1, 2])
    assert len(layout.groups) == 1 and layout.counts.shape == (problem.tokens.shape[0], 1)
    np.testing.assert_array_equal(layout.counts[:, 0], 2)  # two numbers per sample
    smooth = se.split_layout(W_E, problem._replace(activation="poly:1,0.5"))
    assert smooth.held.size == 0  # a smooth unit is affine on no interval


def full_weights(state, layout, problem, W_E):
    """The whole model's ``(W_E, W_U)`` of a split-unit state, assembled independently."""
    E = se.split_weights(state, layout, problem, W_E)
    U = np.zeros_like(E)
    U[:, layout.split] = state["B"]
    U[np.ix_(problem.label_ids, layout.held)] = state["w_lab"]
    U[np.ix_(problem.other_ids, layout.held)] = state["w_out"]
    return E, U


@pytest.mark.parametrize(
    "activation,task",
    [
        ("relu", ("mod", {"N": 5})),
        ("relu", ("modulus", {"N": 5, "M": 3})),  # 5 numbers, 3 labels: the means differ
        ("poly:1,0.5", ("mod", {"N": 5})),
    ],
)
def test_split_field_is_the_gradient_flow_projected_onto_the_held_plateau(activation, task):
    """Eq. S6 against the whole model: the split columns move with its exact gradient, a tied
    row of a held unit with the mean gradient of its rows (the orthogonal projection onto the
    plateau manifold of the held units)."""
    ds, problem, W_E, W_U = split_case(activation, task)
    layout = se.split_layout(W_E, problem)
    state = se.split_state(W_E, W_U, layout, problem)
    field = se.split_field(0.0, state, se.split_arrays(layout, problem, ds.vocab_size), activation)
    E, U = full_weights(state, layout, problem, W_E)
    G_E, G_U = (np.asarray(g) for g in jax.grad(se.loss, argnums=(0, 1))(E, U, problem))
    held = layout.held
    expected = {
        "A": -G_E[:, layout.split],
        "B": -G_U[:, layout.split],
        "u": np.stack([-G_E[ids][:, held].mean(0) for ids in layout.groups]),
        "w_lab": -G_U[problem.label_ids][:, held].mean(0),
        "w_out": -G_U[problem.other_ids][:, held].mean(0),
    }
    for key, value in expected.items():
        np.testing.assert_allclose(field[key], value, rtol=1e-10, atol=1e-14, err_msg=key)
    assert np.abs(field["A"]).max() > 1e-3  # the split units are driven


def test_the_split_unit_flow_takes_over_at_t_c_plus_start_after(monkeypatch):
    """L2 from the initial weights: the path is the plateau flow's at L2's approach step, save
    for save, up to ``t_c + START_AFTER``, where the split-unit flow takes over (and then departs
    from it). mod N = 20, d = 32 collapses near epoch 70."""
    monkeypatch.setattr(se, "PLATEAU_STEP", se.APPROACH_STEP)
    ds = PRIMARY.make("mod", N=20)
    problem = se.plateau_problem(ds)
    with jax.enable_x64(True):
        _, state = train.init_state("ffn", ds, gamma=1.0, seed=0, d=32, dtype=jnp.float64)
        W_E, W_U = np.asarray(state["W_E"][...]), np.asarray(state["W_U"][...])
        split = se.predict_second_escape(W_E, W_U, problem, horizon=400, band_modes=None)
        alone = se.predict_second_escape(
            W_E, W_U, problem, horizon=400, band_modes=None, law="plateau"
        )
    assert np.isfinite(split.t_collapse) and split.split > 0 and alone.split == -1
    for path in (split, alone):  # both save every SAVE_EVERY from 0
        np.testing.assert_array_equal(path.ts, se.SAVE_EVERY * np.arange(path.ts.size))
    t_s = split.t_collapse + se.START_AFTER
    common = min(split.ts.size, alone.ts.size)
    before = split.ts[:common] <= t_s
    np.testing.assert_array_equal(split.rho0[:common][before], alone.rho0[:common][before])
    # and they part at the very next save
    differ = np.flatnonzero(split.rho0[:common] != alone.rho0[:common])
    assert split.ts[differ[0]] == t_s + se.SAVE_EVERY


@pytest.mark.slow  # about 20 s
def test_the_split_unit_path_is_its_flow_read_save_by_save():
    """L1's path against the split-unit flow integrated here with the public pieces: Heun at
    `SPLIT_STEP` over each save, rho_0 of the whole ``W_E`` (`split_weights`, `rho0`); the
    compiled path reads rho_0 on the split and held columns in another order."""
    ds, problem, W_E, W_U = split_case(task=("mod", {"N": 8}), d=6)
    t0, horizon = 50.0, 250.0
    predicted = se.predict_second_escape(W_E, W_U, problem, t0=t0, horizon=horizon, band_modes=None)
    layout = se.split_layout(W_E, problem)
    arrays = se.split_arrays(layout, problem, ds.vocab_size)
    y = jax.tree.map(jnp.asarray, se.split_state(W_E, W_U, layout, problem))
    rho = [se.rho0(W_E, problem.geometry_ids)]
    for t in predicted.ts[:-1]:
        ts = jnp.array([t, t + se.SAVE_EVERY])
        path = ode.heun(
            lambda t, s, a: se.split_field(t, s, a, problem.activation), y, ts, arrays,
            max_step=se.SPLIT_STEP,
        )  # fmt: skip
        y = jax.tree.map(lambda leaf: leaf[-1], path.ys)
        rho.append(se.rho0(se.split_weights(y, layout, problem, W_E), problem.geometry_ids))
    np.testing.assert_allclose(predicted.rho0, rho, rtol=0, atol=1e-12)
    # it escapes near t = 151 and stops at the first save below the level
    assert predicted.rho0[-1] < se.LEVEL and np.all(predicted.rho0[:-1] >= se.LEVEL)
    assert predicted.ts[-1] < horizon


# --------------------------------------------------------------------------------------------
# direct test of measured_second_escape on a hand-built path (planted-bug checked, tests/README.md)


def _numpy_rho0(rows) -> float:
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    S = unit @ unit.T
    i, j = np.triu_indices(len(rows), 1)
    return float(1.0 - np.mean((S[i, j] - 1.0) ** 2))


def test_measured_second_escape_reads_collapse_escape_and_frequency_of_a_hand_built_path():
    """Six number rows (ids 1..6 of V = 8, d = 2): spread at t = 0, collapsed onto (1, 0) at
    t = 10, then leaving along the k = 2 Fourier pattern, slightly at t = 20, far at t = 30."""
    A, V, ids = 6, 8, np.arange(1, 7)
    wave = np.cos(2 * np.pi * 2 * np.arange(A) / A)
    frames = [
        np.stack([np.cos(np.arange(A)), np.sin(np.arange(A))], axis=1),
        np.stack([np.ones(A), np.zeros(A)], axis=1),
        np.stack([np.ones(A), 0.1 * wave], axis=1),
        np.stack([np.ones(A), 1.0 * wave], axis=1),
    ]
    W_E = np.full((len(frames), V, 2), 7.0)  # the other ids are never read
    W_E[:, ids] = frames
    ts = np.array([0.0, 10.0, 20.0, 30.0])
    empty = np.zeros(0, dtype=np.int64)
    problem = se.PlateauProblem(
        tokens=np.zeros((1, 2), np.int64),
        labels=np.zeros(1, np.int64),
        weights=np.ones(1),
        geometry_ids=ids,
        tied=(ids,),
        label_ids=empty,
        other_ids=empty,
        activation="relu",
    )
    result = se.measured_second_escape(ts, W_E, problem)
    rho = [_numpy_rho0(f) for f in frames]
    assert rho[0] < se.COLLAPSED and rho[1] == 1.0 and rho[2] > se.LEVEL > rho[3]
    np.testing.assert_allclose(result.rho0, rho, rtol=1e-12)
    assert result.t_collapse == 10.0
    expected_t1 = 20.0 + (rho[2] - se.LEVEL) / (rho[2] - rho[3]) * 10.0
    np.testing.assert_allclose(result.t1, expected_t1, rtol=1e-12)
    assert result.k == 2 and np.isnan(result.rate) and result.level == se.LEVEL
    # a path that never collapses has no escape and no frequency
    never = se.measured_second_escape(ts[[0, 3]], W_E[[0, 3]], problem)
    assert np.isnan(never.t_collapse) and np.isnan(never.t1) and never.k == -1


def test_a_replays_cost_counts_the_training_up_to_its_start():
    """L1 (a replay, started at t0 of each lane) is charged training's seconds times the mean
    share of the horizon before t0, on top of its own; L2 (a law) only its own; the record's
    account names each level's role."""
    from ctx_staircase import plateau_study

    def path(t0):
        return se.SecondEscape(se.LEVEL, t0, 100.0, 300.0, np.zeros(1), np.zeros(1), 3, 0.1, 5)

    study = plateau_study.SecondEscapeComparison(
        gamma=[1.0, 1.2], seed=[0, 0], measured=[path(0.0)] * 2,
        level1=[path(200.0), path(400.0)], level2=[path(0.0)] * 2, level1_plateau=[],
        ledgers=[plateau_study.PlateauLedger(200.0, *[lg.LedgerTotals(250.0, 1, 1, 3)] * 2)] * 2,
        seconds={"training": 10.0, "L1": 1.0, "L2": 3.0, "ledger": 0.5}, horizon=1000,
    )  # fmt: skip
    assert study.cost() == {"simulation": 10.0, "L1": 1.0 + 10.0 * 0.3, "L2": 3.0}
    assert study.cost_summary() == {
        "simulation": 10.0,
        "theories": {
            "L1": {"role": "replay", "seconds": 4.0},
            "L2": {"role": "law", "seconds": 3.0},
        },
    }
    summary = study.summary()
    assert summary["roles"] == {"L1": "replay", "L2": "law"} and summary["cost"] == study.cost()


def test_merged_bags_keep_one_sample_per_counts_and_label_with_the_summed_weight():
    tokens = np.array([[2, 1], [1, 2], [1, 2], [3, 3], [1, 2]])
    labels = np.array([0, 0, 1, 0, 0])
    weights = np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    got_tokens, got_labels, got_weights = merged_bags(tokens, labels, weights)
    np.testing.assert_array_equal(got_tokens, [[1, 2], [1, 2], [3, 3]])
    np.testing.assert_array_equal(got_labels, [0, 1, 0])
    np.testing.assert_allclose(got_weights, [0.55, 0.3, 0.15], rtol=0, atol=1e-15)


@pytest.mark.parametrize("task", ["mod", "task4"])
def test_the_plateau_problem_merges_bags_and_keeps_the_loss_and_its_gradient(task):
    ds = PRIMARY.make(task, **({"N": 6} if task == "mod" else {"n_x": 4, "n_a": 3}))
    problem = se.plateau_problem(ds, geometry="numbers" if task == "mod" else "anchors")
    whole = problem._replace(
        tokens=np.asarray(ds.tokens),
        labels=np.asarray(ds.labels),
        weights=np.asarray(ds.probabilities, np.float64),
    )
    assert problem.tokens.shape[0] < whole.tokens.shape[0]
    assert problem.weights.sum() == pytest.approx(1.0, abs=1e-15)
    rng = np.random.default_rng(3)
    W_E, W_U = (rng.standard_normal((ds.vocab_size, 5)) for _ in range(2))
    with jax.enable_x64(True):
        merged = jax.grad(se.loss, (0, 1))(W_E, W_U, problem)
        unmerged = jax.grad(se.loss, (0, 1))(W_E, W_U, whole)
        for a, b in zip(merged, unmerged, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        assert float(se.loss(W_E, W_U, problem)) == pytest.approx(
            float(se.loss(W_E, W_U, whole)), rel=1e-13
        )


def test_measured_band_rate_is_read_at_the_snapshot_nearest_t_c_plus_start_after():
    """A hand-built mod N = 5 lane (d = 3) collapsed at t = 10: the measured rate is the band's
    top rate at the snapshot nearest t_c + START_AFTER (t = 110), not at the collapse."""
    ds = PRIMARY.make("mod", N=5)
    problem = se.plateau_problem(ds)
    ids = problem.geometry_ids
    rng = np.random.default_rng(4)
    ts = np.array([0.0, 10.0, 60.0, 110.0, 160.0])
    W_E = 0.5 * rng.standard_normal((ts.size, ds.vocab_size, 3))
    W_U = 0.5 * rng.standard_normal((ts.size, ds.vocab_size, 3))
    collapsed = np.array([1.0, 0.5, -0.2])
    for s in range(1, 4):  # collapsed from t = 10 to t = 110, slightly spread after t = 10
        W_E[s, ids] = collapsed + (0.0 if s == 1 else 0.01) * rng.standard_normal((ids.size, 3))
    measured = se.measured_second_escape(ts, W_E, problem, W_U=W_U)
    assert measured.t_collapse == 10.0
    at = int(np.argmin(np.abs(ts - (10.0 + se.START_AFTER))))
    assert at == 3
    expected = se.band(W_E[at], W_U[at], problem).rates[0]
    assert measured.rate == pytest.approx(float(expected), rel=1e-12)
    assert measured.rate != pytest.approx(float(se.band(W_E[1], W_U[1], problem).rates[0]))


def test_fourier_shares_of_several_modes_are_each_modes_own():
    """`fourier_label` of two stacked modes gives each mode the (k, share) it has alone."""
    A = 8
    j = np.arange(A)[:, None]
    first = np.cos(2 * np.pi * j / A) * np.array([[1.0, 0.0]]) + 0.5 * np.cos(np.pi * j) * [[0, 1]]
    second = 3.0 * np.cos(2 * np.pi * 3 * j / A) * np.array([[1.0, 1.0]])
    k, share = se.fourier_label(np.stack([first, second]))
    for m, rows in enumerate((first, second)):
        k_m, share_m = se.fourier_label(rows[None])
        assert k[m] == k_m[0]
        assert share[m] == pytest.approx(share_m[0], rel=1e-12)
    assert k.tolist() == [1, 3] and share[1] == pytest.approx(1.0)


def test_rho0_is_one_minus_the_mean_squared_cosine_gap_over_distinct_pairs():
    """`rho0` of random rows and of stacked snapshots equals a NumPy count over pairs i < j."""
    rng = np.random.default_rng(0)
    W_E = rng.standard_normal((3, 7, 4))
    ids = np.array([1, 2, 4, 6])
    got = se.rho0(W_E, ids)
    assert got.shape == (3,)
    for s in range(3):
        assert got[s] == pytest.approx(_numpy_rho0(W_E[s, ids]), rel=1e-12)


def _task4_near_the_plateau(d: int = 6, seed: int = 0):
    """Task 4 (n_x = 4, n_a = 2): two tied groups, anchors (group 0) and numbers (group 1, the
    geometry); every input row ``u`` plus a deviation of 0.1, ``u`` open on units 0-1, closed
    on unit 2 and 0 on units 3-5 (whose gates split the samples)."""
    ds = PRIMARY.make("task4", n_x=4, n_a=2)
    problem = se.plateau_problem(ds)
    rng = np.random.default_rng(seed)
    u = np.array([1.0, 1.0, -1.0, 0.0, 0.0, 0.0])[:d]
    W_E = u + 0.1 * rng.standard_normal((ds.vocab_size, d))
    W_U = 0.5 * rng.standard_normal((ds.vocab_size, d))
    return ds, problem, W_E, W_U


def test_split_weights_give_each_group_its_own_mean_row_on_the_held_units():
    """With two tied groups, `split_weights` of `split_state` puts each group's own mean row in
    its rows' held columns and the split columns as they were."""
    _, problem, W_E, W_U = _task4_near_the_plateau()
    layout = se.split_layout(W_E, problem)
    assert len(layout.groups) == 2 and layout.split.size and layout.held.size
    state = se.split_state(W_E, W_U, layout, problem)
    out = se.split_weights(state, layout, problem, W_E)
    held = layout.held
    for ids in layout.groups:
        np.testing.assert_allclose(
            out[np.ix_(ids, held)],
            np.broadcast_to(W_E[np.ix_(ids, held)].mean(axis=0), (ids.size, held.size)),
            rtol=1e-14,
        )
    np.testing.assert_array_equal(out[:, layout.split], W_E[:, layout.split])
    means = [W_E[np.ix_(ids, held)].mean(axis=0) for ids in layout.groups]
    assert not np.allclose(means[0], means[1])


def test_the_split_unit_path_reads_rho0_on_the_geometry_groups_own_rows():
    """L1 on Task 4, whose geometry (the numbers) is the second tied group: three saves of the
    split-unit path equal Heun at `SPLIT_STEP` over each save, read by `rho0` of the whole
    `split_weights`, save by save, at times t0 + 10 k."""
    ds, problem, W_E, W_U = _task4_near_the_plateau()
    t0 = 50.0
    predicted = se.predict_second_escape(
        W_E, W_U, problem, t0=t0, horizon=t0 + 3 * se.SAVE_EVERY, band_modes=None
    )
    np.testing.assert_array_equal(predicted.ts, t0 + se.SAVE_EVERY * np.arange(4))
    layout = se.split_layout(W_E, problem)
    arrays = se.split_arrays(layout, problem, ds.vocab_size)
    y = jax.tree.map(jnp.asarray, se.split_state(W_E, W_U, layout, problem))
    rho = [se.rho0(W_E, problem.geometry_ids)]
    for t in predicted.ts[:-1]:
        path = ode.heun(
            lambda t, s, a: se.split_field(t, s, a, problem.activation),
            y,
            jnp.array([t, t + se.SAVE_EVERY]),
            arrays,
            max_step=se.SPLIT_STEP,
        )
        y = jax.tree.map(lambda leaf: leaf[-1], path.ys)
        rho.append(se.rho0(se.split_weights(y, layout, problem, W_E), problem.geometry_ids))
    np.testing.assert_allclose(predicted.rho0, rho, rtol=0, atol=1e-12)
