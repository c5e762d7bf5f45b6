"""The first-order attention flow (theory/attention.md A6-A12) against autodiff and signatures."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import attention_dynamics as ad
from ctx_staircase import flows, signatures, tasks, train
from ctx_staircase.experiments import attention_departure as exp

SHAPES = {"W_E": "Vd", "W_U": "Vd", "W_Q": "kd", "W_K": "kd", "W_V": "kd", "W_O": "dk"}


def random_params(V, d, d_k, scale=0.5, seed=0):
    rng = np.random.default_rng(seed)
    size = {"V": V, "d": d, "k": d_k}
    return {
        k: jnp.asarray(rng.normal(size=tuple(size[c] for c in s)) * scale)
        for k, s in SHAPES.items()
    }


def relative(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


def reference_objective(params, ds, prediction, value=None, key=None, query=None):
    """J of eq. A7 sample by sample, written from the model: a_s = (1 + z_s - zbar) / L.

    ``value``, ``key``, ``query`` replace W_E in one role each (the A1 path split).
    """
    W_E = params["W_E"]
    h_value, h_key, h_query = (W_E if e is None else e for e in (value, key, query))
    tokens, L = jnp.asarray(ds.tokens), ds.L
    V, d = params["W_U"].shape[0], W_E.shape[1]
    keys = h_key[tokens] @ params["W_K"].T
    queries = h_query[tokens[:, -1]] @ params["W_Q"].T
    z = jnp.einsum("nsk,nk->ns", keys, queries) / jnp.sqrt(jnp.asarray(d, W_E.dtype))
    h = h_value[tokens]
    R = params["W_U"] @ params["W_O"] @ params["W_V"]
    f0 = h.mean(axis=1) @ R.T
    f1 = jnp.einsum("ns,nsd->nd", (z - z.mean(axis=1, keepdims=True)) / L, h) @ R.T
    p = jnp.asarray(ds.probabilities)
    onehot = jax.nn.one_hot(jnp.asarray(ds.labels), V, dtype=W_E.dtype)
    if prediction == "softmax":
        log_p0 = jax.nn.log_softmax(f0)
        per_sample = jnp.sum(onehot * log_p0, 1) + jnp.sum((onehot - jnp.exp(log_p0)) * f1, 1)
        return jnp.sum(p * per_sample)
    J = jnp.sum(p * jnp.sum((onehot - 1 / V) * (f0 + f1), axis=1))
    if prediction == "linear":
        Hf0 = f0 - f0.mean(axis=1, keepdims=True)
        J = J - jnp.sum(p * jnp.sum(Hf0 * (f0 / 2 + f1), axis=1)) / V
    return J


@pytest.fixture(scope="module")
def small():
    ds = tasks.make("anchor_parity", n=150, L=5, vocab_size=70)
    return ds, random_params(ds.vocab_size, 6, 4)


@pytest.mark.parametrize("prediction", ad.PREDICTIONS)
def test_field_is_the_gradient_of_the_truncated_objective(small, prediction):
    ds, params = small
    tables = ad.attention_tables(ds, prediction=prediction)
    field = ad.attention_field(params, tables, prediction)
    exact = jax.grad(reference_objective)(params, ds, prediction)
    for role in ad.ROLES:
        assert relative(field[role], exact[role]) <= 1e-12, role


@pytest.mark.parametrize("prediction", ad.PREDICTIONS)
def test_embedding_paths_are_the_role_gradients(small, prediction):
    ds, params = small
    tables = ad.attention_tables(ds, prediction=prediction)
    paths = ad.embedding_paths(params, tables, prediction)
    W_E = params["W_E"]

    def by_role(value, key, query):
        return reference_objective(params, ds, prediction, value=value, key=key, query=query)

    gradients = jax.grad(by_role, (0, 1, 2))(W_E, W_E, W_E)
    exact = dict(zip(("value", "key", "query"), gradients, strict=True))
    for role in exact:
        assert relative(paths[role], exact[role]) <= 1e-12, role
    total = ad.attention_field(params, tables, prediction)["W_E"]
    assert relative(paths["value"] + paths["key"] + paths["query"], total) <= 1e-12
    assert relative(paths["key"], total) > 1e-3  # the key path is not negligible at this scale


def test_selector_task_field_matches_autodiff():
    ds, _ = exp.selector_parity(n=120)
    params = random_params(ds.vocab_size, 5, 3, seed=3)
    tables = ad.attention_tables(ds, prediction="softmax")
    field = ad.attention_field(params, tables, "softmax")
    exact = jax.grad(reference_objective)(params, ds, "softmax")
    for role in ad.ROLES:
        assert relative(field[role], exact[role]) <= 1e-12, role


def test_uniform_attention_limit_is_eq_A3(small):
    ds, params = small
    params = {**params, "W_Q": jnp.zeros_like(params["W_Q"]), "W_K": jnp.zeros_like(params["W_K"])}
    field = ad.attention_field(params, ad.attention_tables(ds), "uniform")
    M = flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
    a3 = flows.attention_uniform_field(params, M, ds.L)
    for role in ("W_E", "W_U", "W_O", "W_V"):
        assert relative(field[role], a3[role]) <= 1e-12, role
    # B = 0 is invariant: the query-key pair gets no drive
    assert float(jnp.abs(field["W_Q"]).max()) == 0.0
    assert float(jnp.abs(field["W_K"]).max()) == 0.0


def test_tables_are_the_signatures():
    ds = tasks.make("anchor_parity", n=300, L=4, vocab_size=70)
    t = ad.attention_tables(ds, prediction="softmax")
    tokens, labels = np.asarray(t.tokens), np.asarray(t.labels)
    T0, T1, T2 = (np.asarray(x) for x in (t.label_bag, t.label_bag_query, t.label_bag2_query))
    for table in (T0, T1, T2):
        assert table.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(T1.sum(axis=2), T0, atol=1e-14)
    np.testing.assert_allclose(T2.sum(axis=2), T1, atol=1e-14)
    np.testing.assert_allclose(T2.sum(axis=1), T1, atol=1e-14)
    r = signatures.occurrence(ds)[tokens]
    kw = dict(alphas=tokens, labels=labels, context=tokens)
    phi0 = signatures.label_signature(ds, 0, alphas=tokens, labels=labels)  # [K, Y]
    np.testing.assert_allclose(T0, (r[:, None] * phi0).T, atol=1e-14)
    # T1 = r_a phi^{y;x_L}_a (occurrence-conditioned, I may be L)
    phi_L = signatures.positional_signature(ds, (-1,), **kw)  # [K, Y, K]
    np.testing.assert_allclose(T1, np.moveaxis(r[:, None, None] * phi_L, 1, 0), atol=1e-14)
    # T2 = r_a (1/L) sum_t phi^{y;x_t,x_L}_a
    phi_tL = np.mean(
        [signatures.positional_signature(ds, (s, -1), **kw) for s in range(ds.L)], axis=0
    )
    np.testing.assert_allclose(T2, np.moveaxis(r[:, None, None, None] * phi_tL, 1, 0), atol=1e-14)
    # the bag distribution: a probability over bags whose mean fraction is r
    weights, bags = np.asarray(t.bag_weights), np.asarray(t.bags)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(bags.sum(axis=1), 1.0, atol=1e-14)
    np.testing.assert_allclose(weights @ bags, r, atol=1e-14)
    assert ad.attention_tables(ds).bags is None


def test_first_order_psi_is_theorem3_psi_of_the_linearised_attention(small):
    ds, params = small
    tables = ad.attention_tables(ds)
    psi = ad.first_order_psi(params, tables, ds.L)  # [K, Y]
    h = params["W_E"][ds.tokens]
    z = jnp.einsum("nsk,nk->ns", h @ params["W_K"].T, h[:, -1] @ params["W_Q"].T) / jnp.sqrt(6.0)
    linear = np.asarray((1 + z - z.mean(axis=1, keepdims=True)) / ds.L)
    expected = signatures.attention_factor(
        ds, linear, alphas=np.asarray(tables.tokens), labels=np.asarray(tables.labels)
    )
    np.testing.assert_allclose(np.asarray(psi), expected, atol=1e-13)


def test_attention_flow_runs_under_ode_integrate(small):
    from ctx_staircase import ode

    ds, params = small
    tables = ad.attention_tables(ds)
    flow = ad.attention_flow(tables, "uniform")
    small_params = jax.tree.map(lambda w: 0.1 * w, params)
    ts = jnp.asarray([0.0, 0.5])
    solution = ode.integrate(flow, small_params, ts)
    euler = small_params
    for _ in range(2000):
        step = ad.attention_field(euler, tables, "uniform")
        euler = jax.tree.map(lambda w, f: w + 0.5 / 2000 * f, euler, step)
    assert bool(solution.ok)
    for role in ad.ROLES:
        assert relative(solution.ys[role][-1], euler[role]) < 1e-3


def test_departure_time_interpolates_and_signs():
    times = np.arange(5.0)
    rise = ad.departure_time(times, [1.0, 1.0, 1.1, 1.5, 2.0], 1.0, 0.25)
    assert rise.time == pytest.approx(2.375) and rise.sign == 1 and rise.index == 3
    fall = ad.departure_time(times, [1.0, 0.9, 0.7, 0.5, 0.5], 1.0, 0.25)
    assert fall.time == pytest.approx(1.75) and fall.sign == -1
    none = ad.departure_time(times, [1.0, 1.1, 1.2, np.nan, 2.0], 1.0, 0.25)
    assert np.isnan(none.time) and none.sign == 0  # a blow-up ends the search


def test_training_path_is_train_gd_on_task3():
    ds = tasks.make("anchor_parity", n=60, L=4, vocab_size=80)
    target = np.isin(ds.tokens, ds.groups["anchors"])
    path = exp.train_path(ds, target, 0.5, lr=0.5, t_max=10.0, stop_after=None)
    config = train.TrainConfig(optimizer="gd", lr=0.5, steps=20, snapshots=(0, 10, 20))
    trajectory = train.train(
        "attention", ds, config, gamma=0.5, seed=exp.SEED, d=exp.D, d_k=exp.D_K,
        positional=False, dtype="float64",
    )  # fmt: skip
    np.testing.assert_allclose(path.ts, [0.0, 5.0, 10.0])
    np.testing.assert_allclose(path.loss, np.asarray(trajectory.loss), rtol=1e-12)
    anchors = np.asarray(trajectory.attention_group["anchors"])
    np.testing.assert_allclose(path.attention, anchors, rtol=1e-12)


def test_departure_prediction_runs_on_a_tiny_task():
    ds, target = exp.selector_parity(n=200)
    tables = ad.attention_tables(ds, prediction="softmax")
    path = exp.theory_path(ds, target, 0.5, tables, lr=0.5, t_max=200.0)
    assert path.ts[0] == 0.0 and np.all(np.diff(path.ts) > 0)
    assert np.isfinite(path.departure.time) and 0 < path.departure.time <= 200.0
    assert path.departure.sign == 1
    assert np.all(np.isfinite(path.loss[: path.departure.index]))


@pytest.mark.slow
def test_selector_departure_is_predicted_within_25_percent():
    ds, target = exp.selector_parity(n=1000)
    tables = ad.attention_tables(ds, prediction="softmax")
    trained = exp.train_path(ds, target, 0.6, lr=exp.LR, t_max=400.0)
    theory = exp.theory_path(ds, target, 0.6, tables, lr=exp.LR, t_max=400.0)
    assert trained.departure.sign == theory.departure.sign == 1
    assert abs(theory.departure.time / trained.departure.time - 1) <= exp.TOLERANCE


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (planted-bug checked, tests/README.md)


def test_uniform_mass_is_the_expected_share_of_target_positions():
    target = np.array([[True, False, False, False], [True, True, False, True]])
    assert ad.uniform_mass([0.25, 0.75], target) == 0.25 * 0.25 + 0.75 * 0.75


def _random_attention_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    V, d, d_k, n, L = 6, 4, 3, 5, 4
    params = {
        "W_E": rng.normal(size=(V, d)),
        "W_Q": rng.normal(size=(d_k, d)),
        "W_K": rng.normal(size=(d_k, d)),
    }
    tokens = rng.integers(0, V, size=(n, L))
    probabilities = rng.dirichlet(np.ones(n))
    target = np.isin(tokens, [1, 2])
    return params, tokens, probabilities, target


def test_target_attention_matches_a_numpy_softmax():
    params, tokens, p, target = _random_attention_problem()
    W_E, W_Q, W_K = params["W_E"], params["W_Q"], params["W_K"]
    expected = 0.0
    for n in range(tokens.shape[0]):
        h = W_E[tokens[n]]  # [L, d]
        z = (h @ W_K.T) @ (W_Q @ h[-1]) / np.sqrt(W_E.shape[1])
        a = np.exp(z - z.max())
        a /= a.sum()
        expected += p[n] * a[target[n]].sum()
    got = float(ad.target_attention(params, tokens, p, target))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_target_attention_is_the_uniform_mass_when_queries_vanish_and_maps_leading_axes():
    params, tokens, p, target = _random_attention_problem(1)
    zero_q = {**params, "W_Q": np.zeros_like(params["W_Q"])}
    np.testing.assert_allclose(
        float(ad.target_attention(zero_q, tokens, p, target)),
        ad.uniform_mass(p, target),
        rtol=1e-12,
    )
    # a trajectory axis [T, ...] maps lane by lane
    stacked = {k: np.stack([zero_q[k], params[k]]) for k in params}
    both = np.asarray(ad.target_attention(stacked, tokens, p, target))
    assert both.shape == (2,)
    np.testing.assert_allclose(both[0], ad.uniform_mass(p, target), rtol=1e-12)
    np.testing.assert_allclose(both[1], float(ad.target_attention(params, tokens, p, target)))
