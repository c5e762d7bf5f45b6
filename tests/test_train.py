"""Training: exact loop semantics, gradient-flow limit, divergence, the early phenomenon."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import metrics, signatures, tasks, train

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
    """SPEC.md §8 item 3 (smoke): add, N=20, ReLU FFN, small init, Adam: rho_0 >= 0.9 at 100."""
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
