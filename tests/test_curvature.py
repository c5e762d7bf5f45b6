"""The curvature of a loss at a state (`curvature`), the run that keeps its last state
(`train.finish`) and how a FAIL at a plateau is classed from them (`common.plateau_failure`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import curvature, tasks, train
from ctx_staircase.experiments import common


def _symmetric(n: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((n, n))
    return (A + A.T) / 2


def test_lanczos_finds_the_extreme_eigenpairs_of_a_symmetric_matrix():
    A = _symmetric(40, 1)
    exact, vectors = np.linalg.eigh(A)
    # a full Krylov basis: exact
    found = curvature.lanczos(lambda v: A @ v, 40, modes=3, iterations=40)
    np.testing.assert_allclose(found.least, exact[:3], atol=1e-10)
    assert found.greatest == pytest.approx(exact[-1], abs=1e-10)
    for k in range(3):  # unit eigenvectors, up to sign
        assert abs(found.vectors[k] @ vectors[:, k]) == pytest.approx(1.0, abs=1e-8)
    # fewer products: the extremes converge first
    few = curvature.lanczos(lambda v: A @ v, 40, modes=1, iterations=25)
    assert few.least[0] == pytest.approx(exact[0], rel=1e-3)
    assert few.greatest == pytest.approx(exact[-1], rel=1e-3)


def test_lanczos_stops_on_an_invariant_subspace():
    # rank-2 operator: the Krylov space closes after 3 products, and the spectrum is exact
    u, v = np.eye(30)[0], np.eye(30)[1]
    A = 3.0 * np.outer(u, u) - 2.0 * np.outer(v, v)
    found = curvature.lanczos(lambda q: A @ q, 30, modes=1, iterations=20)
    assert found.least[0] == pytest.approx(-2.0, abs=1e-12)
    assert found.greatest == pytest.approx(3.0, abs=1e-12)


def test_curvature_of_a_quadratic_on_a_pytree_is_its_matrix():
    A = _symmetric(7, 2)
    b = np.random.default_rng(3).standard_normal(7)
    exact = np.linalg.eigvalsh(A)

    def loss(params):  # x split across two leaves of different shapes and dtype
        x = jnp.concatenate([params["a"].ravel(), params["b"]])
        return 0.5 * x @ jnp.asarray(A) @ x + jnp.asarray(b) @ x

    x = np.random.default_rng(4).standard_normal(7)
    params = {"a": jnp.asarray(x[:4].reshape(2, 2), jnp.float32), "b": jnp.asarray(x[4:])}
    x32 = np.concatenate([np.asarray(params["a"], np.float64).ravel(), x[4:]])
    got = curvature.curvature(loss, params, modes=2, iterations=7)
    np.testing.assert_allclose(got.least, exact[:2], atol=1e-10)
    assert got.greatest == pytest.approx(exact[-1], abs=1e-10)
    assert got.gradient_norm == pytest.approx(np.linalg.norm(A @ x32 + b), rel=1e-12)
    assert got.loss == pytest.approx(0.5 * x32 @ A @ x32 + b @ x32, rel=1e-12)


def test_a_strict_saddle_has_an_unstable_rate_and_a_minimum_has_none():
    def saddle(p):  # x^2 - y^2 + y^4 at the origin: Hessian diag(2, -2)
        return p[0] ** 2 - p[1] ** 2 + p[1] ** 4

    at_saddle = curvature.curvature(saddle, jnp.zeros(2), iterations=2)
    assert at_saddle.least[0] == pytest.approx(-2.0) and at_saddle.greatest == pytest.approx(2.0)
    assert at_saddle.unstable_rate(common.UNSTABLE) == pytest.approx(2.0)
    # the minimum at y^2 = 1/2: Hessian diag(2, 4)
    at_minimum = curvature.curvature(saddle, jnp.asarray([0.0, np.sqrt(0.5)]), iterations=2)
    assert at_minimum.least[0] == pytest.approx(2.0)
    assert at_minimum.unstable_rate(common.UNSTABLE) == 0.0
    assert at_minimum.gradient_norm == pytest.approx(0.0, abs=1e-12)


def test_finish_is_the_same_run_as_train_and_ends_in_its_last_snapshot():
    ds = tasks.make("mod", N=5)
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=30, snapshots=(0, 10, 30))
    kwargs = dict(gamma=0.7, seed=2, d=16, d_k=8)
    trajectory = train.train("attention", ds, config, **kwargs)
    finished = train.finish("attention", ds, config, **kwargs)
    for got, want in zip(
        jax.tree.leaves(finished.trajectory), jax.tree.leaves(trajectory), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    module = __import__("flax").nnx.merge(finished.graphdef, finished.state)
    np.testing.assert_array_equal(np.asarray(module.W_E[...]), np.asarray(trajectory.W_E[-1]))
    # and it is the state the loss is evaluated at
    loss = train.loss_function(finished.graphdef, ds)(finished.state)
    assert float(loss) == pytest.approx(float(trajectory.loss[-1]), rel=1e-5)


def test_plateau_start_is_where_the_loss_last_leaves_its_final_band():
    epochs = np.arange(0, 100, 10)
    loss = np.array([5.0, 4.0, 3.0, 3.1, 2.0, 2.01, 1.995, 2.0, 2.005, 2.0])
    assert common.plateau_start(epochs, loss) == 40  # 3.1 at 30 is outside, all after inside
    assert common.plateau_start(epochs, np.full(10, 2.0)) == 0
    assert common.plateau_start(epochs, np.linspace(5, 1, 10)) == 90


def _end(rate: float, start: float, length: float) -> common.EndState:
    return common.EndState(
        loss=3.0,
        gradient_norm=0.01,
        least_eigenvalue=-rate,
        sharpness=2.0,
        gd_lr=1.0,
        unstable_rate=rate,
        plateau_start=start,
        plateau_epochs=length,
        efolds_from_rounding=16.6,
    )


def test_a_fail_at_a_plateau_is_classed_by_its_curvature():
    # the loss moved within the last quarter: still learning
    assert common.plateau_failure(_end(0.02, 900, 100)) == "budget"
    # settled at a second-order minimum: false
    assert common.plateau_failure(_end(0.0, 100, 900)) == "false"
    # settled on a strict saddle that has had the time to grow rounding to O(1): false
    assert common.plateau_failure(_end(0.02, 100, 900)) == "false"  # 18 e-folds
    # ... and one that has not: the plateau may end later
    assert common.plateau_failure(_end(0.01, 100, 900)) == "budget"  # 9 e-folds
    text = common.curvature_text(_end(0.02, 100, 900))
    assert "18.0 e-folds" in text and "outlasted" in text and "stability edge" in text
    assert "may yet end" in common.curvature_text(_end(0.01, 100, 900))
    assert "minimum to second order" in common.curvature_text(_end(0.0, 100, 900))


def test_end_curvature_reads_a_collapsed_attention_run():
    ds = tasks.make("mod", N=5, vocab_size=12)
    steps = 200
    config = train.TrainConfig(
        optimizer="gd", lr=1.0, steps=steps, snapshots=tuple(range(0, steps + 1, 20))
    )
    finished = train.finish("attention", ds, config, gamma=0.75, seed=0, d=16, d_k=8)
    end = common.end_curvature(finished, ds, np.asarray(config.snapshots), 1.0)
    loss = train.loss_function(finished.graphdef, ds)
    assert end.loss == pytest.approx(float(loss(finished.state)), rel=1e-5)
    assert end.least_eigenvalue <= end.sharpness
    assert end.efolds_from_rounding == pytest.approx(24 * np.log(2))  # float32
    assert end.plateau_start == common.plateau_start(config.snapshots, finished.trajectory.loss)
    assert end.plateau_epochs == steps - end.plateau_start
    assert common.EndState(**end._asdict()) == end  # as a record's JSON keeps it
