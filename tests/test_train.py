"""Training: exact loop semantics, gradient-flow limit, divergence, the early phenomenon."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import dataset, metrics, signatures, tasks, train

F64 = dict(d=16, dtype=jnp.float64, activation="poly:1,0.5,0.2")


def test_gd_matches_a_hand_written_gradient_descent():
    """The compiled scan does exactly W <- W - lr * grad(weighted CE), step by step."""
    ds = tasks.make("add", N=5)
    config = train.TrainConfig(optimizer="gd", lr=0.3, steps=7, snapshots=(0, 3, 7))
    traj = train.train("ffn", ds, config, gamma=0.7, seed=4, **F64)

    graphdef, state = train.init_state("ffn", ds, gamma=0.7, seed=4, **F64)
    from flax import nnx

    def loss(state):
        logits = nnx.merge(graphdef, state)(jnp.asarray(ds.tokens))
        logp = jax.nn.log_softmax(logits)
        return -jnp.sum(ds.probabilities * logp[jnp.arange(ds.n), ds.labels])

    recorded = {0: state}
    for step in range(1, 8):
        state = jax.tree.map(lambda p, g: p - 0.3 * g, state, jax.grad(loss)(state))
        recorded[step] = state
    for i, step in enumerate((0, 3, 7)):
        np.testing.assert_allclose(traj.W_E[i], recorded[step]["W_E"][...], rtol=0, atol=1e-13)
        np.testing.assert_allclose(traj.loss[i], loss(recorded[step]), rtol=1e-13)
    assert int(traj.diverged_step) == -1


def test_gd_converges_to_gradient_flow_at_first_order():
    """At fixed t = lr * steps, W^E(t) from GD differs from the flow by O(lr)."""
    ds = tasks.make("add", N=6)
    T = 4.0
    W = {}
    for lr in (0.4, 0.2, 0.1, 0.05):
        steps = round(T / lr)
        config = train.TrainConfig(optimizer="gd", lr=lr, steps=steps, snapshots=(steps,))
        W[lr] = np.asarray(train.train("ffn", ds, config, gamma=0.5, seed=0, **F64).W_E[-1])
    gaps = [np.linalg.norm(W[a] - W[a / 2]) for a in (0.4, 0.2, 0.1)]
    ratios = [gaps[i] / gaps[i + 1] for i in range(2)]
    assert gaps[0] > 1e-4  # the test is not vacuous: GD is visibly off the flow at lr = 0.4
    np.testing.assert_allclose(ratios, 2.0, rtol=0.1)  # halving lr halves the error


def test_divergence_freezes_the_lane_and_records_the_step():
    ds = tasks.make("add", N=6)
    config = train.TrainConfig(optimizer="gd", lr=1e8, steps=20, snapshots=(0, 10, 20))
    traj = train.train("ffn", ds, config, gamma=0.5, seed=0, **F64)
    step = int(traj.diverged_step)
    assert 0 <= step < 20
    assert np.all(np.isfinite(traj.W_E))  # frozen at the last finite parameters


def test_attention_statistics_are_recorded():
    ds = tasks.make("anchor_parity", n=200)
    config = train.TrainConfig(optimizer="adam", lr=1e-2, steps=5, snapshots=(0, 5))
    traj = train.train("attention", ds, config, gamma=2.0, seed=0, d=16, d_k=8)
    np.testing.assert_allclose(np.sum(traj.attention_position, axis=-1), 1.0, rtol=1e-5)
    # at tiny init attention is uniform, so each group's mass is its share of positions
    np.testing.assert_allclose(traj.attention_position[0], 1 / 8, rtol=1e-4)
    np.testing.assert_allclose(traj.attention_group["anchors"][0], 1 / 8, rtol=1e-4)
    np.testing.assert_allclose(traj.attention_group["noise"][0], 7 / 8, rtol=1e-4)
    assert set(traj.group_norms) == set(ds.groups)


def test_minibatch_sgd_and_schedules_run():
    ds = tasks.make("add", N=6)
    for config in (
        train.TrainConfig(optimizer="sgd", lr=0.5, steps=30, batch_size=8),
        train.TrainConfig(
            optimizer="adamw", lr=1e-2, steps=30, schedule="warmup_cosine", warmup_steps=5
        ),
    ):
        traj = train.train("ffn", ds, config, gamma=0.5, seed=1, **F64)
        assert traj.loss[-1] < traj.loss[0] and int(traj.diverged_step) == -1


def test_early_zero_order_alignment_add():
    """Claim §8.3 (smoke, Fig. 2): add, N=20, ReLU FFN, small init, Adam: rho_0 >= 0.9 at 100."""
    ds = tasks.make("add", N=20)
    numbers = ds.groups["numbers"]
    S0 = metrics.cosine_matrix(signatures.label_signature(ds, 0, alphas=numbers))
    config = train.TrainConfig(optimizer="adam", lr=1e-3, steps=100, snapshots=(0, 100))
    for seed in (0, 1):
        traj = train.train("ffn", ds, config, gamma=1.0, seed=seed, d=128)
        rho = metrics.alignment(metrics.cosine_matrix(traj.W_E[:, numbers]), S0).value
        assert abs(float(rho[0])) < 0.3  # random at init
        assert float(rho[1]) >= 0.9


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(optimizer="lbfgs"), "optimizer"),
        (dict(lr=0.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(steps=0), "steps"),
        (dict(steps=10, snapshots=(0, 11)), "snapshots"),
        (dict(optimizer="sgd"), "batch_size"),
        (dict(schedule="cyclic"), "schedule"),
    ],
)
def test_bad_config_names_the_parameter(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        train.TrainConfig(**kwargs)


def test_bad_model_and_vocabulary():
    ds = tasks.make("add", N=6)
    config = train.TrainConfig(steps=2)
    with pytest.raises(ValueError, match="model"):
        train.train("lstm", ds, config)
    with pytest.raises(ValueError, match="vocab_size"):
        train.train("ffn", ds, config, vocab_size=5)


def test_a_model_vocabulary_larger_than_the_data_is_fine():
    ds = tasks.make("add", N=5)
    config = train.TrainConfig(optimizer="gd", lr=0.1, steps=3, snapshots=(0, 3))
    traj = train.train("ffn", ds, config, gamma=0.5, seed=0, vocab_size=ds.vocab_size + 7, **F64)
    assert traj.W_E.shape[1] == ds.vocab_size + 7
    numbers = ds.groups["numbers"]
    np.testing.assert_allclose(
        traj.group_norms["numbers"], np.linalg.norm(traj.W_E[:, numbers], axis=-1).mean(-1)
    )


# --------------------------------------------------------------------------------------------
# exact semantics against independent implementations: sample weights, AdamW,
# divergence step, accuracy and the recorded statistics, the warmup-cosine schedule


def ffn_logits(W_E, W_U, tokens):
    """The FFN of F64 written out: W_U sigma(sum_i w^E_{x_i}), sigma(z) = z + z^2/2 + z^3/5."""
    h = W_E[tokens].sum(axis=1)
    return (h + 0.5 * h**2 + 0.2 * h**3) @ W_U.T


def ffn_loss(params, tokens, labels, probabilities):
    """The probability-weighted cross-entropy of `ffn_logits`, for jax.grad."""
    logits = ffn_logits(params["W_E"], params["W_U"], tokens)
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(probabilities * logp[jnp.arange(labels.size), labels])


def initial_params(ds, gamma, seed):
    _, state = train.init_state("ffn", ds, gamma=gamma, seed=seed, **F64)
    return {name: jnp.asarray(state[name][...]) for name in ("W_E", "W_U")}


def test_minibatches_are_drawn_in_proportion_to_the_sample_weights():
    """Six one-token samples (token i, label 6 + i % 2) of weights 4:3:2:1:0:0. After one SGD
    step only the embedding row of a drawn sample moves, by -lr (count/B) grad_i, so the row
    displacements give the exact draw counts: integers summing to B, none for weight 0, and
    frequencies within binomial noise of the weights (uniform draws would give 1/6 each)."""
    weights = np.array([4.0, 3.0, 2.0, 1.0, 0.0, 0.0])
    p = weights / weights.sum()
    ds = dataset.TokenDataset(
        tokens=np.arange(6)[:, None], labels=6 + np.arange(6) % 2, vocab_size=8, weights=weights
    )
    B, lr = 4000, 0.1
    config = train.TrainConfig(optimizer="sgd", lr=lr, steps=1, batch_size=B, snapshots=(0, 1))
    traj = train.train("ffn", ds, config, gamma=0.5, seed=3, **F64)
    params = initial_params(ds, 0.5, 3)
    np.testing.assert_array_equal(traj.W_E[0], params["W_E"])
    moved = np.asarray(traj.W_E[1] - traj.W_E[0])
    np.testing.assert_array_equal(moved[6:], 0.0)  # label-only tokens are no input
    counts = []
    for i in range(6):
        one = np.zeros(6)
        one[i] = 1.0
        grad = np.asarray(jax.grad(ffn_loss)(params, ds.tokens, ds.labels, one)["W_E"][i])
        assert np.linalg.norm(grad) > 1e-3  # a drawn sample would visibly move its row
        count = -B * moved[i] @ grad / (lr * grad @ grad)
        np.testing.assert_allclose(moved[i], -lr * count / B * grad, atol=1e-13)
        counts.append(count)
    counts = np.asarray(counts)
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)  # whole draws
    counts = np.round(counts)
    assert counts.sum() == B
    np.testing.assert_array_equal(counts[4:], 0)  # weight 0: never drawn
    sigma = np.sqrt(p * (1 - p) / B)
    assert np.all(np.abs(counts / B - p) <= 5 * sigma + 1e-12), (counts / B, p)


def test_adamw_matches_optax_and_its_decay_shrinks_the_weights():
    """AdamW: the first step is exactly W - lr (g / (|g| + eps) + wd W) (Adam's bias-corrected
    first step is the sign of g), and three steps equal optax.adamw driven by hand."""
    import optax

    ds = tasks.make("add", N=5)
    lr, wd = 0.05, 0.5
    config = train.TrainConfig(
        optimizer="adamw", lr=lr, weight_decay=wd, steps=3, snapshots=(0, 1, 2, 3)
    )
    traj = train.train("ffn", ds, config, gamma=0.7, seed=2, **F64)
    params = initial_params(ds, 0.7, 2)
    args = (jnp.asarray(ds.tokens), jnp.asarray(ds.labels), jnp.asarray(ds.probabilities))
    grads = jax.grad(ffn_loss)(params, *args)
    for name, recorded in (("W_E", traj.W_E), ("W_U", traj.W_U)):
        W, g = np.asarray(params[name]), np.asarray(grads[name])
        expected = W - lr * (g / (np.abs(g) + 1e-8) + wd * W)
        np.testing.assert_allclose(recorded[1], expected, rtol=0, atol=1e-12)
    optimizer = optax.adamw(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=wd)
    with jax.numpy_dtype_promotion("standard"):
        opt_state = optimizer.init(params)
        for step in range(1, 4):
            updates, opt_state = optimizer.update(
                jax.grad(ffn_loss)(params, *args), opt_state, params
            )
            params = optax.apply_updates(params, updates)
            np.testing.assert_allclose(traj.W_E[step], params["W_E"], rtol=0, atol=1e-12)
            np.testing.assert_allclose(traj.W_U[step], params["W_U"], rtol=0, atol=1e-12)


def test_divergence_step_is_exact_and_the_state_freezes_there():
    """GD at lr 10 on the cubic FFN: a hand-written loop finds the first step whose loss or
    update is non-finite (step 7: the parameters after 7 updates are ~1e108, finite, and their
    logits overflow); the lane records that step and keeps the parameters it had then at every
    later snapshot."""
    ds = tasks.make("add", N=6)
    snapshots = (0, 3, 6, 7, 8, 10)
    config = train.TrainConfig(optimizer="gd", lr=10.0, steps=10, snapshots=snapshots)
    traj = train.train("ffn", ds, config, gamma=0.5, seed=0, **F64)

    args = (jnp.asarray(ds.tokens), jnp.asarray(ds.labels), jnp.asarray(ds.probabilities))
    params, states, expected_step = initial_params(ds, 0.5, 0), [], -1
    for step in range(10):
        states.append(params)
        loss, grads = jax.value_and_grad(ffn_loss)(params, *args)
        new = jax.tree.map(lambda p, g: p - 10.0 * g, params, grads)
        if not (np.isfinite(loss) and all(np.all(np.isfinite(x)) for x in new.values())):
            expected_step = step
            break
        params = new
    assert expected_step == 7  # the problem is as designed: 7 finite updates, then overflow
    assert int(traj.diverged_step) == expected_step
    for i, step in enumerate(snapshots):
        frozen = states[min(step, expected_step)]
        for name, recorded in (("W_E", traj.W_E[i]), ("W_U", traj.W_U[i])):
            scale = np.abs(frozen[name]).max()  # relative to the whole matrix (cancellations)
            np.testing.assert_allclose(recorded, frozen[name], rtol=0, atol=1e-10 * scale)
    assert np.all(np.isfinite(traj.W_E)) and np.all(np.isfinite(traj.W_U))
    assert np.abs(traj.W_E[-1]).max() > 1e100  # frozen at the last state, not an earlier one
    np.testing.assert_allclose(traj.loss[:3], [ffn_loss(states[s], *args) for s in (0, 3, 6)])


def test_recorded_accuracy_loss_and_statistics_are_exact():
    """Every recorded statistic recomputed from the recorded weights: weighted loss and argmax
    accuracy (non-uniform weights), per-group loss and accuracy (uniform in the group, a
    weight-0 group included), the centred logit scale and the group norms."""
    base = tasks.make("add", N=6)
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.2, 3.0, base.n)
    held = np.arange(base.n) % 5 == 0
    weights[held] = 0.0
    ds = dataset.TokenDataset(
        tokens=base.tokens,
        labels=base.labels,
        vocab_size=base.vocab_size,
        groups=base.groups,
        weights=weights,
        sample_groups={"held": np.flatnonzero(held), "kept": np.flatnonzero(~held)},
    )
    snapshots = (0, 40, 200)
    config = train.TrainConfig(optimizer="gd", lr=0.5, steps=200, snapshots=snapshots)
    traj = train.train("ffn", ds, config, gamma=0.5, seed=1, **F64)
    assert int(traj.diverged_step) == -1
    p = ds.probabilities
    argmin_accuracy = []
    for i in range(len(snapshots)):
        W_E, W_U = np.asarray(traj.W_E[i]), np.asarray(traj.W_U[i])
        logits = np.asarray(ffn_logits(W_E, W_U, ds.tokens))
        shifted = logits - logits.max(-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        nll = -logp[np.arange(ds.n), ds.labels]
        correct = (logits.argmax(-1) == ds.labels).astype(float)
        argmin_accuracy.append(p @ (logits.argmin(-1) == ds.labels))
        np.testing.assert_allclose(traj.loss[i], p @ nll, rtol=1e-12)
        assert float(traj.accuracy[i]) == pytest.approx(p @ correct, abs=1e-12)
        for name, index in ds.sample_groups.items():
            assert traj.sample_loss[name][i] == pytest.approx(nll[index].mean(), rel=1e-12)
            assert traj.sample_accuracy[name][i] == pytest.approx(correct[index].mean(), abs=1e-12)
        centred = logits - logits.mean(-1, keepdims=True)
        assert traj.logit_scale[i] == pytest.approx(np.abs(centred).max(), rel=1e-12)
        for name, ids in ds.groups.items():
            norms = np.linalg.norm(W_E[ids], axis=-1)
            assert traj.group_norms[name][i] == pytest.approx(norms.mean(), rel=1e-12)
    # not vacuous: the run learns, and argmin would score otherwise
    assert traj.accuracy[-1] > 0.5 and traj.sample_accuracy["kept"][-1] > 0.5
    assert not np.allclose(traj.accuracy, argmin_accuracy)


def warmup_cosine(step, steps, warmup, ratio):
    """The documented schedule factor: linear 0 -> 1 over ``warmup`` steps, then a cosine from 1
    down to ``ratio`` at ``steps``."""
    if step < warmup:
        return step / warmup
    return ratio + (1 - ratio) * 0.5 * (1 + np.cos(np.pi * (step - warmup) / (steps - warmup)))


def test_warmup_cosine_schedule_follows_its_closed_form():
    """GD with a schedule: step i moves the weights by exactly -lr s(i) grad(W_i), so each
    recorded step reveals s(i); it must be the closed form (warm-up, then a cosine decay to
    min_lr_ratio), for every step."""
    ds = tasks.make("add", N=5)
    steps, warmup, ratio, lr = 12, 3, 0.2, 0.3
    config = train.TrainConfig(
        optimizer="gd",
        lr=lr,
        steps=steps,
        schedule="warmup_cosine",
        warmup_steps=warmup,
        min_lr_ratio=ratio,
        snapshots=tuple(range(steps + 1)),
    )
    traj = train.train("ffn", ds, config, gamma=0.5, seed=0, **F64)
    args = (jnp.asarray(ds.tokens), jnp.asarray(ds.labels), jnp.asarray(ds.probabilities))
    rates = []
    for i in range(steps):
        params = {"W_E": jnp.asarray(traj.W_E[i]), "W_U": jnp.asarray(traj.W_U[i])}
        grads = jax.grad(ffn_loss)(params, *args)
        g = np.concatenate([np.ravel(grads["W_E"]), np.ravel(grads["W_U"])])
        moved = np.concatenate(
            [np.ravel(traj.W_E[i + 1] - traj.W_E[i]), np.ravel(traj.W_U[i + 1] - traj.W_U[i])]
        )
        rate = -moved @ g / (lr * g @ g)
        np.testing.assert_allclose(moved, -lr * rate * g, atol=1e-12)  # a pure GD step
        rates.append(rate)
    expected = [warmup_cosine(i, steps, warmup, ratio) for i in range(steps)]
    assert expected[0] == 0 and expected[warmup] == 1 and expected[-1] < 0.25
    np.testing.assert_allclose(rates, expected, rtol=1e-6, atol=1e-7)


def test_default_snapshots_hold_every_nth_of_the_run_and_log_spaced_early_steps():
    """The linear part is ``n_linear`` equal intervals of ``[0, steps]``; the log part reaches the
    first steps; 0 and ``steps`` are always there, each step once, in order."""
    for steps, n_log, n_linear in ((1600, 24, 16), (1000, 10, 8), (37, 5, 4)):
        snaps = train.default_snapshots(steps, n_log, n_linear)
        assert list(snaps) == sorted(set(snaps)) and snaps[0] == 0 and snaps[-1] == steps
        linear = np.round(np.arange(n_linear + 1) * steps / n_linear).astype(int)
        assert set(linear.tolist()) <= set(snaps), (steps, n_linear)
        assert 1 in snaps
        log_part = [s for s in snaps if s not in set(linear.tolist())]
        assert len(log_part) <= n_log


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (each one planted-bug checked, tests/README.md)


def test_time_axis_is_lr_times_step_with_a_leading_lane_axis():
    steps = np.array([0, 1, 10])
    np.testing.assert_array_equal(train.time_axis(steps, 0.5), [0.0, 0.5, 5.0])
    lrs = np.array([0.1, 2.0])
    t = train.time_axis(steps, lrs)
    assert t.shape == (2, 3) and t.dtype == np.float64
    np.testing.assert_array_equal(t, np.outer(lrs, steps))


@pytest.mark.parametrize("lr", [0.0, -0.1, np.nan, np.inf, [0.1, 0.0], [], "fast", None])
def test_check_lr_refuses_a_rate_not_finite_and_positive(lr):
    with pytest.raises(ValueError, match="lr must be finite and > 0"):
        train.check_lr(lr)


@pytest.mark.parametrize("lr", [1e-300, 0.1, 5, [0.1, 3.0], np.float32(0.5)])
def test_check_lr_accepts_finite_positive_rates(lr):
    assert train.check_lr(lr) is None


def _trajectory(logit_scale):
    S, V, d, L = 3, 4, 2, 2
    rng = np.random.default_rng(0)
    return train.Trajectory(
        steps=np.array([0, 5, 10]),
        loss=rng.random(S),
        accuracy=rng.random(S),
        W_E=rng.random((S, V, d)),
        W_U=rng.random((S, V, d)),
        group_norms={"numbers": rng.random(S), "labels": rng.random(S)},
        attention_position=rng.random((S, L)),
        attention_group={"numbers": rng.random(S)},
        sample_loss={"held_out": rng.random(S)},
        sample_accuracy={"held_out": rng.random(S), "train": rng.random(S)},
        diverged_step=np.array(-1),
        logit_scale=logit_scale,
    )


@pytest.mark.parametrize("logit_scale", [None, np.array([1.0, 2.0, 3.0])])
def test_trajectory_arrays_round_trip(logit_scale):
    original = _trajectory(logit_scale)
    arrays = train.trajectory_arrays(original)
    assert "group_norms/numbers" in arrays and "sample_accuracy/train" in arrays
    back = train.trajectory_from_arrays(arrays)
    for field in train.Trajectory._fields:
        a, b = getattr(original, field), getattr(back, field)
        if a is None:
            assert b is None, field
        elif isinstance(a, dict):
            assert a.keys() == b.keys(), field
            for g in a:
                np.testing.assert_array_equal(a[g], b[g])
        else:
            np.testing.assert_array_equal(a, b)
