"""Tests of the similarity and alignment metrics (paper §4.2, §4.5, App. A; theory/metrics.md)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import metrics, signatures, tasks


def _random_similarity(rng: np.random.Generator, n: int = 9, d: int = 4) -> np.ndarray:
    return np.asarray(metrics.cosine_matrix(rng.normal(size=(n, d))))


def _average_ranks_reference(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties averaged, by brute force."""
    return np.array([np.sum(x < xi) + (np.sum(x == xi) + 1) / 2 for xi in x])


# --------------------------------------------------------------------------------- cosines


def test_cosine_matrix_matches_numpy_and_zero_rows_give_zero():
    X = np.random.default_rng(0).normal(size=(6, 5))
    X[2] = 0.0
    S = np.asarray(metrics.cosine_matrix(X))
    norms = np.linalg.norm(X, axis=1)
    present = norms > 0
    expected = np.zeros((6, 6))
    expected[np.ix_(present, present)] = (X[present] @ X[present].T) / np.outer(
        norms[present], norms[present]
    )
    assert np.all(np.isfinite(S))
    np.testing.assert_allclose(S, expected, atol=1e-14)
    np.testing.assert_array_equal(np.diag(S), present.astype(float))
    grad = jax.grad(lambda X: jnp.sum(metrics.cosine_matrix(X) ** 2))(jnp.asarray(X))
    assert bool(jnp.all(jnp.isfinite(grad)))


def test_cosine_matrix_batched_equals_looped():
    X = np.random.default_rng(1).normal(size=(3, 2, 7, 4))
    batched = metrics.cosine_matrix(X)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(batched[i, j], metrics.cosine_matrix(X[i, j]), atol=1e-15)


def test_mixed_dtypes_are_cast_explicitly():
    S_sig = _random_similarity(np.random.default_rng(17))
    S_emb = metrics.cosine_matrix(np.arange(18, dtype=np.int32).reshape(9, 2) % 5)
    assert S_emb.dtype == jnp.float64
    result = metrics.alignment(S_emb.astype(jnp.float32), S_sig)
    assert result.value.dtype == jnp.float64 and np.isfinite(float(result.value))


def test_upper_triangle_is_row_major_strict_triangle():
    S = np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(metrics.upper_triangle(S), [1, 2, 3, 6, 7, 11])
    assert metrics.upper_triangle(np.zeros((5, 3, 3))).shape == (5, 3)
    with pytest.raises(ValueError, match="S must have shape"):
        metrics.upper_triangle(np.zeros((3, 4)))


# --------------------------------------------------------------------------------- primitives


def test_weighted_pearson_equals_pearson_of_the_selected_entries_and_is_jittable():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 30))
    mask = rng.random(30) < 0.5
    weighted = jax.jit(metrics.pearson)(a, b, mask.astype(float))
    np.testing.assert_allclose(weighted, np.corrcoef(a[mask], b[mask])[0, 1], rtol=1e-12)
    folds = jnp.asarray(rng.random((4, 30)) < 0.5, dtype=jnp.float64)
    np.testing.assert_allclose(
        jax.vmap(metrics.pearson, in_axes=(None, None, 0))(a, b, folds),
        [metrics.pearson(a, b, w) for w in folds],
        rtol=1e-12,
    )


def test_pearson_of_a_constant_vector_is_zero_with_finite_gradient():
    a = jnp.full(10, 0.7)
    b = jnp.asarray(np.random.default_rng(3).normal(size=10))
    assert float(metrics.pearson(a, b)) == 0.0
    assert bool(jnp.all(jnp.isfinite(jax.grad(metrics.pearson)(a, b))))


def test_spearman_matches_a_rank_then_pearson_reference_with_ties():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 5, size=40).astype(float)  # many ties
    b = rng.integers(0, 7, size=40).astype(float) + 0.1 * a
    reference = np.corrcoef(_average_ranks_reference(a), _average_ranks_reference(b))[0, 1]
    np.testing.assert_allclose(metrics.spearman(a, b), reference, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(metrics.spearman)(a, b), reference, rtol=1e-12)


def test_spearman_is_batched_over_leading_axes_and_propagates_nan():
    rng = np.random.default_rng(6)
    a = rng.integers(0, 4, size=(3, 2, 9)).astype(float)
    b = rng.normal(size=(9,))
    batched = np.asarray(metrics.spearman(a, b))
    assert batched.shape == (3, 2)
    for i, j in np.ndindex(3, 2):
        assert batched[i, j] == float(metrics.spearman(a[i, j], b))
    # ranks are invariant under a monotone map of either argument
    np.testing.assert_array_equal(batched, metrics.spearman(np.exp(a), b**3))
    a[0, 1, 4] = np.nan
    out = np.asarray(metrics.spearman(a, b))
    assert np.isnan(out[0, 1]) and np.isfinite(np.delete(out.ravel(), 1)).all()


def test_ties_split_by_rounding_rank_as_one_tie_on_any_host():
    # A signature cosine matrix has large groups of equal entries, which rounding splits into
    # values a few ulp apart in a host-dependent order: every such split is the exact tie.
    rng = np.random.default_rng(9)
    exact = rng.integers(0, 4, size=60) / 7.0  # four tie groups, the largest ~15 members
    other = rng.normal(size=60)
    reference = np.corrcoef(_average_ranks_reference(exact), _average_ranks_reference(other))[0, 1]
    for _ in range(5):
        rounded = exact * (1 + rng.integers(-8, 9, size=60) * np.finfo(float).eps)
        assert not np.array_equal(rounded, exact)
        np.testing.assert_array_equal(
            metrics.tied_ranks(rounded), _average_ranks_reference(exact) - 1
        )
        assert float(metrics.spearman(rounded, other)) == pytest.approx(reference, rel=1e-12)
    # in float32 the tie is up to float32 rounding
    rounded32 = (exact * (1 + rng.integers(-8, 9, size=60) * 2e-7)).astype(np.float32)
    np.testing.assert_array_equal(
        metrics.tied_ranks(rounded32), _average_ranks_reference(exact.astype(np.float32)) - 1
    )


def test_tied_ranks_separate_values_just_beyond_the_rounding_tolerance():
    tol = metrics.signatures.ROUNDING_RTOL
    # the largest |x|, 2, scales the tolerance of the whole vector to 2 tol
    within = np.array([0.5, 0.5 + 1.9 * tol, 0.25, 2.0, 2.0 + 1.9 * tol])
    np.testing.assert_array_equal(metrics.tied_ranks(within), [1.5, 1.5, 0, 3.5, 3.5])
    beyond = np.array([0.5, 0.5 + 2.5 * tol, 0.25, 2.0, 2.0 + 2.5 * tol])
    np.testing.assert_array_equal(metrics.tied_ranks(beyond), [1, 2, 0, 3, 4])
    batched = np.stack([within, beyond])
    np.testing.assert_array_equal(
        metrics.tied_ranks(batched), [metrics.tied_ranks(within), metrics.tied_ranks(beyond)]
    )


def test_spearman_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    a, b = np.random.default_rng(5).integers(0, 4, size=(2, 25)).astype(float)
    np.testing.assert_allclose(metrics.spearman(a, b), stats.spearmanr(a, b)[0], rtol=1e-12)


# --------------------------------------------------------------------------------- alignment


@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_alignment_is_invariant_under_positive_affine_maps(method):
    rng = np.random.default_rng(6)
    S_a, S_b = _random_similarity(rng), _random_similarity(rng)
    base = metrics.alignment(S_a, S_b, method)
    assert base.method == method
    assert -1 <= float(base.value) <= 1
    for scale, shift in [(3.0, -2.0), (0.01, 5.0)]:
        np.testing.assert_allclose(
            metrics.alignment(scale * S_a + shift, S_b, method).value, base.value, rtol=1e-10
        )
        np.testing.assert_allclose(
            metrics.alignment(S_a, scale * S_b + shift, method).value, base.value, rtol=1e-10
        )


def test_spearman_alignment_is_invariant_under_strictly_increasing_maps():
    rng = np.random.default_rng(7)
    S_a, S_b = _random_similarity(rng), _random_similarity(rng)
    base = metrics.alignment(S_a, S_b, "spearman").value
    np.testing.assert_allclose(metrics.alignment(np.exp(3 * S_a), S_b, "spearman").value, base)
    np.testing.assert_allclose(metrics.alignment(S_a, S_b**3, "spearman").value, base)
    assert abs(float(metrics.alignment(S_a, S_a, "spearman").value) - 1) < 1e-12


def test_alignment_batched_trajectory_equals_looped():
    rng = np.random.default_rng(8)
    trajectory = np.stack([_random_similarity(rng) for _ in range(4)])
    S_sig = _random_similarity(rng)
    for method in metrics.ALIGNMENT_METHODS:
        batched = metrics.alignment(trajectory, S_sig, method)
        assert batched.value.shape == (4,)
        looped = [metrics.alignment(S, S_sig, method).value for S in trajectory]
        np.testing.assert_allclose(batched.value, looped, rtol=1e-12)


def test_constant_similarity_falls_back_to_one_minus_mse():
    S_emb = _random_similarity(np.random.default_rng(9))
    S_sig = np.ones_like(S_emb)  # F_mod: S^{sig,(0)} is constant
    for method in ("pearson", "spearman"):
        result = metrics.alignment(S_emb, S_sig, method)
        assert result.method == "1-mse"
        triangle = metrics.upper_triangle(S_emb)
        np.testing.assert_allclose(result.value, 1 - np.mean((triangle - 1) ** 2), rtol=1e-12)
        assert np.isfinite(float(result.value))
    # one constant snapshot puts a whole trajectory on the 1 - MSE scale
    trajectory = metrics.alignment(np.stack([S_emb, S_sig]), S_emb)
    assert trajectory.method == "1-mse" and trajectory.value.shape == (2,)
    np.testing.assert_allclose(trajectory.value[0], 1.0)
    # constant up to rounding noise is still constant
    noisy = S_sig + 1e-15 * np.random.default_rng(10).normal(size=S_sig.shape)
    assert metrics.alignment(noisy, S_emb).method == "1-mse"


def test_alignment_errors_name_the_parameter():
    S = np.eye(4)
    with pytest.raises(ValueError, match=r"method must be one of .*'kendall'"):
        metrics.alignment(S, S, method="kendall")
    with pytest.raises(ValueError, match="S_a and S_b"):
        metrics.alignment(np.eye(4), np.eye(5))
    with pytest.raises(ValueError, match="S_a must have shape"):
        metrics.alignment(np.zeros((4, 3)), S)
    with pytest.raises(ValueError, match="S_b has non-finite"):
        metrics.alignment(S, np.full((4, 4), np.nan))


# --------------------------------------------------------------------------------- Fourier


def _circulant_signature(N: int) -> np.ndarray:
    """F_mod-like phi^{y;1}: phi_a(nu, beta) = 1{nu = (a + beta) mod N} / N, shape [N, N, N]."""
    a, nu, beta = np.meshgrid(np.arange(N), np.arange(N), np.arange(N), indexing="ij")
    return (nu == (a + beta) % N) / N


def test_fourier_basis_values():
    basis = signatures.fourier_basis(8, [0, 1, 4])
    assert basis.shape == (3, 8)
    np.testing.assert_allclose(basis[0], 1.0)
    np.testing.assert_allclose(basis[1], np.cos(2 * np.pi * np.arange(8) / 8), atol=1e-15)
    np.testing.assert_allclose(basis[2], (-1.0) ** np.arange(8), atol=1e-15)
    with pytest.raises(TypeError, match="ks"):
        signatures.fourier_basis(8, [0.5])


def test_frequency_alignment_on_a_circulant_signature_picks_its_frequency():
    N = 12
    phi1 = _circulant_signature(N)
    a = np.arange(N)
    ks = np.arange(N // 2 + 1)
    basis = np.asarray(signatures.fourier_basis(N, ks))
    for k in ks[1:]:  # S^{sig,(1)}_k = cos(2 pi k (a - b) / N) exactly
        S_k = metrics.probe_similarity(phi1, [basis[k]])
        np.testing.assert_allclose(S_k, np.cos(2 * np.pi * k * (a[:, None] - a) / N), atol=1e-12)
    S_emb = np.cos(2 * np.pi * 5 * (a[:, None] - a) / N)
    rho = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks))
    assert rho.shape == (len(ks),)
    np.testing.assert_allclose(rho[5], 1.0, atol=1e-12)
    # k = 0: S^{sig,(1)}_0 = S^{sig,(0)} is constant (all ones) for F_mod: scored 1 - MSE
    off = S_emb[np.triu_indices(N, 1)]
    np.testing.assert_allclose(rho[0], 1 - np.mean((off - 1.0) ** 2), atol=1e-12)
    assert metrics.constant_frequencies(phi1, ks).tolist() == [True] + [False] * (len(ks) - 1)
    assert np.all(np.abs(np.delete(rho, [0, 5])) < 0.99)
    collapsed = metrics.frequency_alignment(phi1, np.ones((N, N)), ks)
    np.testing.assert_allclose(collapsed[0], 1.0, atol=1e-12)  # a collapsed geometry is k = 0
    batched = metrics.frequency_alignment(phi1, np.stack([S_emb, S_emb.T**2]), ks)
    assert batched.shape == (2, len(ks))
    np.testing.assert_allclose(batched[0], rho)


# --------------------------------------------------------------------------------- probe


def test_probe_recovers_a_planted_first_order_vector():
    rng = np.random.default_rng(11)
    phi = rng.random((16, 12, 10))
    v_planted = rng.normal(size=10)
    S_emb = metrics.cosine_matrix(phi @ v_planted)
    result = metrics.probe_fit(phi, S_emb)  # 4 restarts by default at order 1
    assert float(result.heldout_corr) >= 0.99
    assert result.fold_corr.shape == result.fold_mse.shape == (5,)
    assert float(result.heldout_mse) < 1e-2
    assert len(result.v) == 1 and result.v[0].shape == (10,)
    assert result.S_sig.shape == (16, 16)
    assert float(metrics.alignment(result.S_sig, S_emb).value) >= 0.99
    # a constant S_emb has no pairwise structure: correlation 0, never NaN
    flat = metrics.probe_fit(phi, np.ones((16, 16)))
    assert float(flat.heldout_corr) == 0.0 and np.isfinite(float(flat.heldout_mse))


def test_probe_compiles_once_per_shape(compilations):
    """A trajectory's snapshots share one compiled fit: another geometry, seed and learning rate
    of the same shapes compile no XLA program."""
    rng = np.random.default_rng(12)
    phi = rng.random((10, 6, 5))
    S_emb = np.asarray(metrics.cosine_matrix(phi @ rng.normal(size=5)))
    metrics.probe_fit(phi, S_emb, steps=20)
    compilations.clear()
    metrics.probe_fit(phi, 0.5 * (S_emb + np.eye(10)), steps=20, seed=1, lr=0.02)
    metrics.probe_fit(phi, np.ones((10, 10)), steps=20, seed=2)
    assert not compilations, f"{len(compilations)} XLA programs compiled for a second snapshot"


def test_probe_similarity_is_invariant_to_rescaling_each_vector():
    rng = np.random.default_rng(18)
    phi = rng.random((7, 5, 4, 3))
    v1, v2 = rng.normal(size=4), rng.normal(size=3)
    S = metrics.probe_similarity(phi, [v1, v2])
    np.testing.assert_allclose(metrics.probe_similarity(phi, [1e3 * v1, -0.1 * v2]), S, atol=1e-13)
    expected = metrics.cosine_matrix(np.einsum("anpq,p,q->an", phi, v1, v2))
    np.testing.assert_allclose(S, expected, atol=1e-13)


def test_probe_recovers_a_planted_second_order_pair():
    rng = np.random.default_rng(12)
    phi = rng.random((14, 8, 6, 6))
    v1, v2 = rng.normal(size=(2, 6))
    S_emb = metrics.cosine_matrix(phi @ v2 @ v1)
    result = metrics.probe_fit(phi, S_emb)
    assert float(result.heldout_corr) >= 0.99
    assert [v.shape for v in result.v] == [(6,), (6,)]


def test_adam_descent_is_optax_adam_step_by_step():
    """`adam_descent` = ``steps`` hand-run ``optax.adam`` updates, exactly, on a pytree."""
    import optax

    target = (jnp.arange(3.0, dtype=jnp.float32), jnp.float32(-2.0))

    def loss(v):
        return jnp.sum((v[0] - target[0]) ** 2) + (v[1] - target[1]) ** 4

    v0 = (jnp.ones(3, jnp.float32), jnp.float32(0.5))
    got = jax.jit(metrics.adam_descent, static_argnums=(0, 3))(loss, v0, 0.1, 7)
    optimizer = optax.adam(0.1)
    v = v0
    with jax.numpy_dtype_promotion("standard"):
        state = optimizer.init(v)
        for _ in range(7):
            updates, state = optimizer.update(jax.grad(loss)(v), state, v)
            v = optax.apply_updates(v, updates)
    assert jax.tree.structure(got) == jax.tree.structure(v0)
    for a, b in zip(got, v, strict=True):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert float(loss(got)) < float(loss(v0))
    unchanged = metrics.adam_descent(loss, v0, 0.1, 0)
    assert all(np.array_equal(a, b) for a, b in zip(unchanged, v0, strict=True))


def test_probe_defaults_are_the_papers_protocol():
    import inspect

    from ctx_staircase import lm

    assert (metrics.PROBE_STEPS, metrics.PROBE_LR) == (300, 0.01)
    for fit in (metrics.probe_fit, lm.prefix_probe):
        parameters = inspect.signature(fit).parameters
        assert parameters["steps"].default == metrics.PROBE_STEPS
        assert parameters["lr"].default == metrics.PROBE_LR


def test_probe_rejects_bad_input():
    phi = np.random.default_rng(13).random((6, 4, 5))
    with pytest.raises(ValueError, match="S_emb must have shape"):
        metrics.probe_fit(phi, np.eye(5))
    with pytest.raises(ValueError, match="phi must have shape"):
        metrics.probe_fit(phi[..., 0], np.eye(6))
    with pytest.raises(ValueError, match="folds"):
        metrics.probe_fit(phi, np.eye(6), folds=8)


# --------------------------------------------------------------------------------- Task 1


def test_distribution_match_identical_rows():
    p = np.random.default_rng(14).dirichlet(np.ones(7), size=3)
    match = metrics.distribution_match(p, p)
    np.testing.assert_allclose(match.pearson, 1.0, rtol=1e-12)
    np.testing.assert_allclose(match.kl, 0.0, atol=1e-15)
    np.testing.assert_allclose(match.jsd, 0.0, atol=1e-15)


def test_distribution_match_kl_by_hand_and_jsd_bounds():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    match = metrics.distribution_match(p, q)
    np.testing.assert_allclose(match.kl, np.log(2), rtol=1e-12)  # 2 * 0.5 log(0.5 / 0.25)
    assert float(metrics.distribution_match(q, p).kl) == np.inf  # q > 0 = p somewhere
    rng = np.random.default_rng(15)
    p, q = rng.dirichlet(0.3 * np.ones(9), size=(2, 50))
    forward, backward = metrics.distribution_match(p, q), metrics.distribution_match(q, p)
    np.testing.assert_allclose(forward.jsd, backward.jsd, rtol=1e-12)
    assert np.all((forward.jsd >= 0) & (forward.jsd <= np.log(2) + 1e-15))
    disjoint = metrics.distribution_match(np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(disjoint.jsd, np.log(2), rtol=1e-12)


def test_distribution_match_pearson_is_numpy_pearson_of_p_and_q_per_row():
    """r of each row against an independent NumPy Pearson of that row's p and q (p != q)."""
    rng = np.random.default_rng(19)
    p = rng.dirichlet(np.ones(8), size=(2, 3))  # leading batch axes [2, 3]
    q = rng.dirichlet(np.ones(8), size=(2, 3))
    q[0, 0] = 0.9 * p[0, 0] + 0.1 * q[0, 0]  # a row that agrees well: r near 1, not 1
    match = metrics.distribution_match(p, q)
    assert match.pearson.shape == (2, 3)
    reference = np.array(
        [[np.corrcoef(p[i, j], q[i, j])[0, 1] for j in range(3)] for i in range(2)]
    )
    np.testing.assert_allclose(match.pearson, reference, rtol=1e-12, atol=1e-15)
    assert 0.99 < float(match.pearson[0, 0]) < 1.0
    assert np.all(np.abs(reference[0, 1:]) < 0.99)  # rows where p and q differ
    # the KL and the JSD of the same rows, from scratch
    np.testing.assert_allclose(match.kl, np.sum(p * np.log(p / q), axis=-1), rtol=1e-12)
    m = (p + q) / 2
    jsd = (np.sum(p * np.log(p / m), -1) + np.sum(q * np.log(q / m), -1)) / 2
    np.testing.assert_allclose(match.jsd, jsd, rtol=1e-12)
    # a uniform prediction is a constant row: r is undefined and reported as 0
    uniform = metrics.distribution_match(p[0, 0], np.full(8, 1 / 8))
    assert float(uniform.pearson) == 0.0


# --------------------------------------------------------------------------------- PCA


def test_pca_recovers_a_planted_line_with_deterministic_sign():
    rng = np.random.default_rng(16)
    t = rng.permutation(np.linspace(-1, 1, 20))
    direction = rng.normal(size=6)
    X = 3.0 + t[:, None] * direction + 1e-3 * rng.normal(size=(20, 6))
    result = metrics.pca(X, k=3)
    assert result.scores.shape == (20, 3) and result.components.shape == (3, 6)
    order = np.argsort(np.asarray(result.scores[:, 0]))
    assert np.array_equal(order, np.argsort(t)) or np.array_equal(order, np.argsort(-t))
    ratio = np.asarray(result.explained_variance_ratio)
    assert ratio[0] > 0.999 and np.sum(ratio) <= 1 + 1e-12
    components = np.asarray(result.components)
    largest = components[np.arange(3), np.argmax(np.abs(components), axis=1)]
    assert np.all(largest > 0)
    flipped = metrics.pca(-X, k=3)
    np.testing.assert_allclose(flipped.components[0], components[0], atol=1e-10)
    np.testing.assert_allclose(flipped.scores[:, 0], -result.scores[:, 0], atol=1e-10)
    assert np.all(np.asarray(metrics.pca(np.ones((4, 3))).explained_variance_ratio) == 0)


def test_procrustes_similarity_is_invariant_to_similarity_transforms():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(12, 2))
    theta = 0.7
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    assert metrics.procrustes_similarity(a, 2.5 * a @ rotation + 3.0) == pytest.approx(1.0)
    assert metrics.procrustes_similarity(a, a * np.array([1.0, -1.0])) == pytest.approx(1.0)
    assert metrics.procrustes_similarity(a, rng.normal(size=(12, 2))) < 0.5
    assert np.isnan(metrics.procrustes_similarity(np.ones((3, 2)), a[:3]))


def test_ring_order_fraction_reads_the_ring_of_frequency_k():
    """Tokens placed at angle 2 pi k a / N: neighbours on the circle differ by k^{-1} mod N."""
    N, k = 40, 19
    tokens = np.arange(1, N + 1)
    angles = 2 * np.pi * k * (tokens - 1) / N
    scores = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    assert metrics.ring_order_fraction(scores, tokens, k, N) == pytest.approx(1.0)
    assert metrics.ring_order_fraction(scores, tokens, 3, N) < 0.2
    assert np.isnan(metrics.ring_order_fraction(scores, tokens, 20, N))  # no inverse mod 40


# --------------------------------------------------------------------------------- float64 cosines


def _sub_signature() -> np.ndarray:
    """phi^{y;0} of |x1 - x2| on the numbers: alpha and N + 1 - alpha have the same label law up
    to a permutation, so their cosine is exactly 1 and float32 rounding puts it above 1."""
    ds = tasks.make("sub", N=20)
    return signatures.label_signature(ds, 0, alphas=ds.groups["numbers"])


def _cosines_reference(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=-1)
    present = norms > 0
    S = np.zeros((len(X), len(X)))
    S[np.ix_(present, present)] = (
        X[present] @ X[present].T / np.outer(norms, norms)[present][:, present]
    )
    return S


def test_cosines_of_signatures_stay_in_range_without_x64():
    """A reported bug: float32 cosines of rows equal in theory came out above 1."""
    phi0 = _sub_signature()
    with jax.enable_x64(False):
        S32 = np.asarray(metrics.cosine_matrix(phi0))  # the caller's precision: float32 here
        S = metrics.signature_cosine_matrix(phi0)
        assert not jax.config.jax_enable_x64  # the scoped float64 did not leak out
    assert S32.dtype == np.float32 and S32.max() <= 1.0 and S32.min() >= -1.0
    assert S.dtype == np.float64 and S.max() <= 1.0 and S.min() >= -1.0
    np.testing.assert_allclose(S, np.clip(_cosines_reference(phi0), -1, 1), atol=1e-15)
    np.testing.assert_allclose(S[2, 17], 1.0, atol=1e-15)
    np.testing.assert_array_equal(np.diag(S), 1.0)


def test_rows_zero_up_to_rounding_are_exact_zero_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, 5, 4))  # batched: the largest row norm is per matrix
    X[0, 1] = 1e-14 * rng.normal(size=4)  # rounding noise, ~1e-14 of the other rows
    X[1] *= 1e-20  # a whole matrix of small rows: each is large against its own matrix
    X[1, 3] = 0.0
    for S in (np.asarray(metrics.cosine_matrix(X)), metrics.signature_cosine_matrix(X)):
        np.testing.assert_array_equal(S[0, 1], 0.0)
        np.testing.assert_array_equal(S[0, :, 1], 0.0)
        np.testing.assert_array_equal(
            np.diagonal(S, axis1=-2, axis2=-1), [[1, 0, 1, 1, 1], [1, 1, 1, 0, 1]]
        )
        np.testing.assert_allclose(S[1], _cosines_reference(X[1] * 1e20), atol=1e-14)
        kept = [0, 2, 3, 4]
        np.testing.assert_allclose(S[0][np.ix_(kept, kept)], _cosines_reference(X[0, kept]))
    grad = jax.grad(lambda X: jnp.sum(metrics.cosine_matrix(X) ** 2))(jnp.asarray(X))
    assert bool(jnp.all(jnp.isfinite(grad)))


def test_frequency_alignment_treats_components_zero_in_theory_as_zero_without_x64():
    """modsum (L = 3): phi^{y;1}_alpha(nu, beta) is constant in beta, so h_{alpha,k} = 0 for
    k != 0; its float64 rounding (~1e-17) must not become a cosine structure."""
    ds = tasks.make("modsum", N=12, L=3)
    numbers = ds.groups["numbers"]
    phi1 = signatures.label_signature(ds, 1, alphas=numbers, context=numbers)
    a = np.arange(12)
    S_emb = np.cos(2 * np.pi * (a[:, None] - a) / 12)
    off = S_emb[np.triu_indices(12, 1)]
    for x64 in (False, True):
        with jax.enable_x64(x64):
            rho = np.asarray(metrics.frequency_alignment(phi1, S_emb, [1, 6]))
            constant = metrics.constant_frequencies(phi1, [1, 6])
        assert constant.tolist() == [True, True]
        # S^{sig,(1)}_k is the zero matrix, not the all-ones matrix of noise rows
        np.testing.assert_allclose(rho, 1 - np.mean(off**2), rtol=1e-6)


def test_check_finite_names_the_first_bad_array_and_passes_finite_ones():
    metrics.check_finite(a=np.zeros(3), b=jnp.ones((2, 2)))
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"^b has non-finite entries"):
            metrics.check_finite(a=np.zeros(3), b=np.array([0.0, bad]), c=np.array([np.nan]))
    with pytest.raises(ValueError, match="S_emb has non-finite"):
        metrics.probe_fit(np.ones((4, 2, 3)), np.full((4, 4), np.nan))


def test_the_held_out_probe_score_is_the_mean_over_folds_only():
    """On a geometry unrelated to the signature (a null), a rich probe fits its training
    pairs but not the held-out ones: the reported held-out correlation is the mean of the
    folds' held-out correlations, never mixed with the in-sample refit's."""
    rng = np.random.default_rng(0)
    A = 16
    phi = rng.random((A, 12, 10))
    X = rng.normal(size=(A, 5))
    S_emb = np.asarray(metrics.cosine_matrix(X))  # no relation to phi
    result = metrics.probe_fit(phi, S_emb, folds=4, steps=300, seed=1)
    assert np.shape(result.fold_corr) == (4,)
    np.testing.assert_allclose(result.heldout_corr, np.mean(result.fold_corr), rtol=1e-12)
    # in sample the probe fits the noise; held out it does not
    assert abs(float(result.heldout_corr)) < 0.25
    assert float(result.fit_corr) > float(result.heldout_corr) + 0.2


def test_token_split_keeps_the_pairs_inside_each_side_and_drops_the_mixed_pairs():
    """A pair trains when both its tokens are kept, is held out when both are held out, and a
    pair with one token of each side is in neither (an independent enumeration of the pairs)."""
    A, held = 6, [1, 4]
    train, heldout = metrics.token_split(np.asarray(held), A)
    pairs = list(itertools.combinations(range(A), 2))  # np.triu_indices(A, 1)'s order
    kept = [a not in held and b not in held for a, b in pairs]
    both_held = [a in held and b in held for a, b in pairs]
    np.testing.assert_array_equal(train[0], kept)
    np.testing.assert_array_equal(heldout[0], both_held)
    assert train.sum() == math.comb(A - len(held), 2) and heldout.sum() == 1
    assert not np.any(train & heldout)


def test_ring_order_fraction_is_blind_to_the_direction_of_the_ring():
    """The ring a -> a + k^{-1} is the same ring walked either way: a PCA plane may come out
    mirrored (a sign of PC2), and a mirrored ring is still the frequency-k ring."""
    N = 11
    tokens = np.arange(N)
    for k in (1, 3, 5):
        angles = 2 * np.pi * k * tokens / N
        for sign in (1.0, -1.0):  # counter-clockwise and clockwise
            scores = np.stack([np.cos(angles), sign * np.sin(angles)], axis=1)
            assert metrics.ring_order_fraction(scores, tokens, k, N) == 1.0, (k, sign)


def test_cosine_matrix_zeroes_rows_only_below_the_rounding_tolerance():
    """A row at most ``tol`` times the largest row norm is a zero row, one above it is a genuine
    direction (module docstring): the norms are compared, not their squares with ``tol``."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(4, 3))
    largest = np.linalg.norm(X, axis=1).max()
    small = X[1] / np.linalg.norm(X[1]) * largest
    X = np.stack([X[0], X[1], 1e-9 * small, 1e-14 * small])  # 1e-9 is far above tol = 1e-12
    S = np.asarray(metrics.cosine_matrix(X))
    np.testing.assert_allclose(S[1, 2], 1.0, rtol=0, atol=1e-15)  # same direction as row 1
    np.testing.assert_allclose(S[2, 0], S[1, 0], rtol=0, atol=1e-15)
    assert S[2, 2] == 1.0
    np.testing.assert_array_equal(S[3], 0.0)  # 1e-14 of the largest: rounding, a zero row
    np.testing.assert_array_equal(S[:, 3], 0.0)


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (each one planted-bug checked, tests/README.md)


def test_is_constant_reads_only_the_positively_weighted_entries():
    x = np.array([[0.0, 1.0, 5.0], [2.0, 2.0, 2.0]])
    assert np.asarray(metrics.is_constant(x)).tolist() == [False, True]
    # a zero weight drops the entry, a positive one keeps it
    assert bool(metrics.is_constant(x[0], weights=np.array([1.0, 0.0, 0.0])))
    assert not bool(metrics.is_constant(x[0], weights=np.array([1.0, 0.0, 1e-9])))
    assert bool(metrics.is_constant(x[0], weights=np.array([0.0, 2.0, 0.0])))
    # an empty selection counts as constant
    assert bool(metrics.is_constant(x[0], weights=np.zeros(3)))


def test_is_constant_tolerance_is_relative_above_one_and_absolute_below():
    """``max - min <= tol * max(1, |max|)`` with tol = ROUNDING_RTOL in float64."""
    tol = signatures.ROUNDING_RTOL
    big = 1e6
    assert bool(metrics.is_constant(np.array([big, big + 0.5 * tol * big])))
    assert not bool(metrics.is_constant(np.array([big, big + 4 * tol * big])))
    # below 1 the scale is 1, not |max|: a spread of tol/2 on numbers near 1e-6 is constant
    assert bool(metrics.is_constant(np.array([1e-6, 1e-6 + 0.5 * tol])))
    assert not bool(metrics.is_constant(np.array([0.0, 4 * tol])))
    # a negative maximum scales by its magnitude
    assert bool(metrics.is_constant(np.array([-big, -big - 0.5 * tol * big])))


def test_probe_restarts_is_four_at_order_one_and_eight_above():
    assert [metrics.probe_restarts(m) for m in (1, 2, 3)] == [4, 8, 8]


def test_probe_init_std_is_the_inverse_root_of_each_context_size():
    assert metrics.probe_init_std([4, 16, 1]) == [0.5, 0.25, 1.0]
    assert metrics.probe_init_std([]) == []


def test_pca_centres_each_column_and_projects_on_the_covariance_eigenvectors():
    """`pca` of ``X [n, d]`` centres every feature (column) over the samples: the scores are
    ``(X - column means) @ components.T``, the components the covariance's top eigenvectors
    (sign: largest loading positive) and the ratios its eigenvalue shares, all by NumPy."""
    X = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
    out = metrics.pca(X, k=2)
    centred = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order].T
    vectors *= np.sign(vectors[np.arange(2), np.abs(vectors).argmax(axis=1)])[:, None]
    np.testing.assert_allclose(np.asarray(out.components), vectors, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out.scores), centred @ vectors.T, atol=1e-12)
    np.testing.assert_allclose(out.explained_variance_ratio, values / values.sum(), atol=1e-12)
    np.testing.assert_allclose(np.asarray(out.scores).mean(axis=0), 0.0, atol=1e-12)


@pytest.mark.parametrize("folds", [2, 5, 7])
def test_a_probe_needs_two_token_pairs_per_fold(folds):
    """`probe_min_tokens` is the fewest tokens A with A (A - 1) / 2 >= 2 folds pairs (counted by
    enumeration), and `probe_fit` refuses one token fewer, naming ``folds``."""
    least = metrics.probe_min_tokens(folds)
    pairs = [len(list(itertools.combinations(range(A), 2))) for A in (least - 1, least)]
    assert pairs[0] < 2 * folds <= pairs[1]
    rng = np.random.default_rng(0)
    for A in (least - 1, least):
        phi, S_emb = rng.random((A, 3, 4)), np.eye(A)
        if A < least:
            with pytest.raises(ValueError, match=f"folds={folds} needs at least {2 * folds}"):
                metrics.probe_fit(phi, S_emb, folds=folds, steps=0)
        else:
            assert metrics.probe_fit(phi, S_emb, folds=folds, steps=0).fold_mse.shape == (folds,)


def test_first_best_takes_the_first_restart_tied_with_the_best_up_to_rounding():
    tol = metrics.signatures.ROUNDING_RTOL
    # rounding ties in either order pick the first; a real margin picks the better
    assert int(metrics.first_best(np.array([0.3, 0.5, 0.5 + 1e-15, 0.4]))) == 1
    assert int(metrics.first_best(np.array([0.3, 0.5 + 1e-15, 0.5, 0.4]))) == 1
    assert int(metrics.first_best(np.array([0.3, 0.5, 0.5 + 2 * tol, 0.4]))) == 2
    assert int(metrics.first_best(np.array([0.3, 0.5, 0.5 + 0.5 * tol, 0.4]))) == 1
    # float32 objectives tie up to float32 rounding; |best| > 1 scales the tolerance
    assert int(metrics.first_best(np.array([0.5, 0.5 + 1e-6], np.float32))) == 0
    assert int(metrics.first_best(np.array([3.0, 3.0 + 2.5 * tol]))) == 0


def test_a_probe_on_a_flat_objective_keeps_the_same_restart_under_a_rounding_perturbation():
    # Cyclic signatures (a modular task): S^sig(v) depends on v only through its power
    # spectrum, and the Pearson objective is flat in the constant mode's power, so restarts end
    # on one correlation while their MSEs differ. A perturbation of S_emb at its float32
    # rounding, as another host gives, must not change which restart is kept.
    A = 7
    phi = np.zeros((A, A, A))
    for alpha in range(A):
        for beta in range(A):
            phi[alpha, (alpha + beta) % A, beta] = 1.0
    rng = np.random.default_rng(11)
    W = rng.normal(size=(A, 5)).astype(np.float32)
    S = np.asarray(metrics.cosine_matrix(W), np.float32)
    nudged = np.nextafter(S, np.float32(np.inf)) * (1 - np.eye(A, dtype=np.float32)) + np.eye(
        A, dtype=np.float32
    )
    fits = [metrics.probe_fit(phi, s, folds=3, restarts=4) for s in (S, nudged)]
    assert float(fits[0].heldout_corr) == pytest.approx(float(fits[1].heldout_corr), abs=1e-6)
    np.testing.assert_allclose(fits[0].fold_mse, fits[1].fold_mse, rtol=1e-5)
