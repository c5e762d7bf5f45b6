"""Exact signatures: brute force, Lemma 1 and closed forms (paper §3.2, theory/signatures.md)."""

import itertools
import math
from collections import defaultdict

import jax
import numpy as np
import pytest

from ctx_staircase import geometry, signatures, tasks
from ctx_staircase.dataset import TokenDataset

TOL = 1e-12


def random_dataset(seed: int, V: int, L: int, n: int = 40, weighted: bool = True) -> TokenDataset:
    rng = np.random.default_rng(seed)
    weights = rng.random(n) if weighted else None
    return TokenDataset(
        tokens=rng.integers(0, V, (n, L)),
        labels=rng.integers(0, V, n),
        vocab_size=V,
        weights=weights,
    )


def brute_force(ds: TokenDataset, order: int, with_label: bool) -> np.ndarray:
    """Literal paper §3.2: condition on x_I = alpha, average over ordered distinct tuples."""
    V, L = ds.vocab_size, ds.L
    joint: dict[tuple, float] = defaultdict(float)
    norm = np.zeros(V)
    p = ds.weights / ds.weights.sum()
    for x, y, w in zip(ds.tokens.tolist(), ds.labels.tolist(), p, strict=True):
        for i in range(L):
            norm[x[i]] += w
            others = [j for j in range(L) if j != i]
            tuples = list(itertools.permutations(others, order))
            for js in tuples:
                key = (x[i], *((y,) if with_label else ()), *(x[j] for j in js))
                joint[key] += w / len(tuples)
    shape = (V,) * (order + 1 + with_label)
    out = np.zeros(shape)
    for key, value in joint.items():
        out[key] += value / norm[key[0]]
    return out


@pytest.mark.parametrize("V,L,order", [(5, 2, 1), (6, 3, 2), (4, 4, 3), (8, 5, 3), (3, 5, 2)])
def test_label_and_cooccurrence_signatures_equal_brute_force(V, L, order):
    ds = random_dataset(seed=V * 10 + L, V=V, L=L)
    for m in range(order + 1):
        np.testing.assert_allclose(
            signatures.label_signature(ds, m), brute_force(ds, m, True), rtol=0, atol=TOL
        )
        np.testing.assert_allclose(
            signatures.cooccurrence_signature(ds, m), brute_force(ds, m, False), rtol=0, atol=TOL
        )


def check_lemma1(phi_by_order, occurring):
    """The paper's Lemma 1 (App. B.3): normalization, marginal consistency, non-increasing
    Frobenius norms."""
    for m, phi in enumerate(phi_by_order):
        sums = phi.reshape(phi.shape[0], -1).sum(axis=1)
        np.testing.assert_allclose(sums[occurring], 1.0, rtol=0, atol=TOL)
        np.testing.assert_array_equal(sums[~occurring], 0.0)
        if m == 0:
            continue
        # Summing any one context axis gives the order below (axes after alpha and nu).
        first_context = phi.ndim - m
        for axis in range(first_context, phi.ndim):
            np.testing.assert_allclose(phi.sum(axis=axis), phi_by_order[m - 1], atol=TOL)
        norms = np.sqrt((phi.reshape(phi.shape[0], -1) ** 2).sum(axis=1))
        previous = np.sqrt((phi_by_order[m - 1].reshape(phi.shape[0], -1) ** 2).sum(axis=1))
        assert np.all(norms <= previous + TOL)


def test_lemma1_on_random_data():
    ds = random_dataset(seed=3, V=6, L=4, n=200)
    sigs = signatures.signature_set(ds, max_order=3)
    occurring = sigs.r > 0
    check_lemma1(sigs.label, occurring)
    check_lemma1(sigs.cooccurrence[1:], occurring)


SMALL_PARAMS = {
    "label_law": {"x_max": 8},
    "add": {"N": 7},
    "sub": {"N": 7},
    "mul": {"N": 7},
    "mod": {"N": 7},
    "modsum": {"N": 5, "L": 4},
    "modulus": {"N": 8, "M": 4},
    "anchor_parity": {"n": 300},
    "task4": {"n_x": 6, "n_a": 4},
    "minmax": {"N": 6},
    "rb_anchor": {"n": 1000},
}


def test_small_params_cover_every_task():
    assert set(SMALL_PARAMS) == set(tasks.names())


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_lemma1_for_every_task(name):
    ds = tasks.make(name, **SMALL_PARAMS[name])
    # The context axes are restricted to the tokens that occur, to keep V^{m+2} small; the
    # order stops where the dense tensor would pass ~4M entries (rb_anchor's order 3).
    context = np.unique(ds.tokens)
    label_ids = np.unique(ds.labels)
    max_order = min(ds.L - 1, 3)
    while ds.vocab_size * label_ids.size * context.size**max_order > 4_000_000:
        max_order -= 1
    sigs = signatures.signature_set(ds, max_order, labels=label_ids, context=context)
    occurring = sigs.r > 0
    check_lemma1(sigs.label, occurring)
    check_lemma1(sigs.cooccurrence[1:], occurring)


def test_chunked_counts_equal_unchunked(monkeypatch):
    ds = random_dataset(seed=5, V=7, L=4, n=300)
    whole = [signatures.label_signature(ds, m) for m in range(4)]
    monkeypatch.setattr(signatures, "CHUNK_INDICES", 50)
    for m in range(4):
        np.testing.assert_allclose(signatures.label_signature(ds, m), whole[m], rtol=0, atol=TOL)


def test_subsets_are_slices_of_the_full_result():
    ds = random_dataset(seed=7, V=8, L=4, n=150)
    alphas, labels, context = [5, 1, 2], [0, 7], [6, 3, 4, 0]
    for m in range(3):
        full = signatures.label_signature(ds, m)
        sub = signatures.label_signature(ds, m, alphas=alphas, labels=labels, context=context)
        expected = full[np.ix_(alphas, labels, *([context] * m))]
        np.testing.assert_allclose(sub, expected, rtol=0, atol=TOL)
        cooc = signatures.cooccurrence_signature(ds, m, alphas=alphas, context=context)
        full_cooc = signatures.cooccurrence_signature(ds, m)
        np.testing.assert_allclose(cooc, full_cooc[np.ix_(alphas, *([context] * m))], atol=TOL)


def test_sample_weights_equal_replication():
    ds = random_dataset(seed=11, V=5, L=3, n=30, weighted=False)
    repeats = np.random.default_rng(0).integers(1, 4, ds.n)
    replicated = TokenDataset(
        np.repeat(ds.tokens, repeats, axis=0), np.repeat(ds.labels, repeats), ds.vocab_size
    )
    weighted = TokenDataset(ds.tokens, ds.labels, ds.vocab_size, weights=repeats.astype(float))
    for m in range(3):
        np.testing.assert_allclose(
            signatures.label_signature(weighted, m),
            signatures.label_signature(replicated, m),
            atol=TOL,
        )


def test_absent_tokens_have_zero_rows_not_nan():
    ds = TokenDataset(np.array([[0, 1], [1, 0]]), np.array([2, 2]), vocab_size=4)
    phi = signatures.label_signature(ds, 1)
    assert np.isfinite(phi).all()
    assert signatures.occurrence(ds)[3] == 0 and not phi[3].any()


def test_occurrence_matches_counts():
    ds = random_dataset(seed=2, V=6, L=5, n=50)
    expected = sum(
        w * np.bincount(row, minlength=6)
        for row, w in zip(ds.tokens, ds.probabilities, strict=True)
    )
    np.testing.assert_allclose(signatures.occurrence(ds), expected / ds.L, atol=TOL)
    assert math.isclose(signatures.occurrence(ds).sum(), 1.0, rel_tol=1e-14)


# ----------------------------------------------------------------------------------------------
# Closed forms (theory/signatures.md)


def cosine(rows):
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    unit = rows / norms
    return unit @ unit.T


def number_signatures(name, N, order):
    ds = tasks.make(name, N=N)
    numbers = np.arange(1, N + 1)
    return ds, signatures.label_signature(ds, order, alphas=numbers, context=numbers)


@pytest.mark.parametrize("N", [5, 12, 20])
def test_add_zero_order_geometry_is_banded_toeplitz(N):
    _, phi0 = number_signatures("add", N, 0)
    a = np.arange(1, N + 1)
    expected = np.maximum(0.0, 1.0 - np.abs(a[:, None] - a[None, :]) / N)
    np.testing.assert_allclose(cosine(phi0), expected, atol=TOL)


@pytest.mark.parametrize("N", [5, 12, 20])
def test_sub_zero_order_geometry_closed_form(N):
    _, phi0 = number_signatures("sub", N, 0)
    a, b = np.meshgrid(np.arange(1, N + 1), np.arange(1, N + 1), indexing="ij")
    inner = (
        1
        + np.minimum(a - 1, b - 1)
        + np.minimum(a - 1, N - b)
        + np.minimum(N - a, b - 1)
        + np.minimum(N - a, N - b)
    )
    sq_norm = N + 2 * np.minimum(a - 1, N - a)
    expected = inner / np.sqrt(sq_norm * sq_norm.T)
    np.testing.assert_allclose(cosine(phi0), expected, atol=TOL)
    # the "X": every token is as similar to its mirror image N+1-a as to itself
    np.testing.assert_allclose(np.diag(np.fliplr(cosine(phi0))), 1.0, atol=TOL)


@pytest.mark.parametrize("N", [5, 12, 20])
def test_mul_zero_order_geometry_closed_form(N):
    _, phi0 = number_signatures("mul", N, 0)
    a, b = np.meshgrid(np.arange(1, N + 1), np.arange(1, N + 1), indexing="ij")
    expected = np.floor(N * np.gcd(a, b) / np.maximum(a, b)) / N
    np.testing.assert_allclose(cosine(phi0), expected, atol=TOL)


@pytest.mark.parametrize(
    "name,rule",
    [
        ("add", lambda a, b, N: a + b),
        ("sub", lambda a, b, N: abs(a - b)),
        ("mul", lambda a, b, N: a * b),
        ("mod", lambda a, b, N: (a + b + 1) % N),
    ],
)
def test_first_order_signature_is_the_label_rule(name, rule):
    N = 9
    ds, phi1 = number_signatures(name, N, 1)
    expected = np.zeros((N, ds.vocab_size, N))
    for a, b in itertools.product(range(1, N + 1), repeat=2):
        expected[a - 1, rule(a, b, N), b - 1] = 1.0 / N
    np.testing.assert_allclose(phi1, expected, atol=TOL)


@pytest.mark.parametrize("N", [8, 40])
def test_mod_geometry_closed_forms(N):
    ds, phi1 = number_signatures("mod", N, 1)
    phi0 = signatures.label_signature(ds, 0, alphas=np.arange(1, N + 1))
    np.testing.assert_allclose(cosine(phi0), 1.0, atol=TOL)  # S^{sig,(0)} is constant
    a = np.arange(N)
    for k in range(N // 2 + 1):
        h = signatures.fourier_projection(phi1, [k])[0]
        expected = np.cos(2 * np.pi * k * (a[:, None] - a[None, :]) / N)
        np.testing.assert_allclose(cosine(h), expected, atol=1e-11)


def test_label_law_anchor_signature_is_the_prescribed_law():
    for law in ("uniform", "normal", "poisson", "exponential"):
        ds = tasks.make("label_law", law=law, labels="expected")
        anchor = int(ds.groups["anchors"][0])
        phi0 = signatures.label_signature(ds, 0, alphas=[anchor], labels=ds.groups["numbers"])
        p = tasks.label_law_distribution(law, x_max=int(ds.groups["numbers"].max()))
        np.testing.assert_allclose(phi0[0], p, atol=TOL)


def test_fourier_k0_projection_is_the_marginal():
    ds = random_dataset(seed=13, V=6, L=4, n=80)
    for m in (1, 2):
        phi = signatures.label_signature(ds, m)
        lower = signatures.label_signature(ds, m - 1)
        np.testing.assert_allclose(signatures.fourier_projection(phi, [0])[0], lower, atol=TOL)


@pytest.mark.parametrize("N", [6, 20])
def test_minmax_superposition_of_zero_order_signatures_is_exact(N):
    """Claim §8.12 (paper §7.2): argmax_nu sum_s phi^{y;0}_{x_s}(nu) is the label on every input."""
    ds = tasks.make("minmax", N=N)
    phi0 = signatures.label_signature(ds, 0)
    scores = phi0[ds.tokens].sum(axis=1)
    assert np.array_equal(scores.argmax(axis=1), ds.labels)


# ----------------------------------------------------------------------------------------------
# Position-specific and attention-weighted signatures (paper §5.2, App. B.5)


def test_positional_signatures_equal_direct_conditionals():
    ds = random_dataset(seed=17, V=4, L=3, n=60)
    p = ds.probabilities
    x, y = ds.tokens, ds.labels
    occurrence_joint = np.zeros((4, 4, 4))
    query_joint = np.zeros((4, 4, 4, 4))
    for n in range(ds.n):
        for i in range(3):
            occurrence_joint[x[n, i], y[n], x[n, 1]] += p[n]
        query_joint[x[n, 2], y[n], x[n, 0], x[n, 1]] += p[n]
    occurrence_norm = occurrence_joint.sum(axis=(1, 2), keepdims=True)
    query_norm = query_joint.sum(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(
        signatures.positional_signature(ds, (1,)),
        np.divide(
            occurrence_joint,
            occurrence_norm,
            where=occurrence_norm > 0,
            out=np.zeros_like(occurrence_joint),
        ),
        atol=TOL,
    )
    np.testing.assert_allclose(
        signatures.positional_signature(ds, (0, 1), query=-1),
        np.divide(query_joint, query_norm, where=query_norm > 0, out=np.zeros_like(query_joint)),
        atol=TOL,
    )


def test_attention_weighted_identity():
    """The key identity of paper §5.2: E[a_I e_y | alpha] = phi^{y;0}_alpha * psi^y_alpha."""
    ds = random_dataset(seed=19, V=5, L=4, n=100)
    rng = np.random.default_rng(1)
    attention = rng.dirichlet(np.ones(4), size=ds.n)
    lhs = np.zeros((5, 5))
    norm = np.zeros(5)
    for n, w in enumerate(ds.probabilities):
        for i in range(4):
            lhs[ds.tokens[n, i], ds.labels[n]] += w * attention[n, i]
            norm[ds.tokens[n, i]] += w
    lhs /= norm[:, None]
    psi = signatures.attention_factor(ds, attention)
    phi0 = signatures.label_signature(ds, 0)
    np.testing.assert_allclose(phi0 * psi, lhs, atol=TOL)
    # uniform attention gives psi = 1/L wherever the event has positive probability
    uniform = signatures.attention_factor(ds, np.full(ds.tokens.shape, 0.25))
    np.testing.assert_allclose(uniform[phi0 > 0], 0.25, atol=TOL)


def test_query_attention_factor_brute_force():
    ds = random_dataset(seed=23, V=3, L=3, n=50)
    attention = np.random.default_rng(2).dirichlet(np.ones(3), size=ds.n)
    num = np.zeros((3, 3, 3))
    den = np.zeros((3, 3, 3))
    for n, w in enumerate(ds.probabilities):
        key = (ds.tokens[n, 2], ds.labels[n], ds.tokens[n, 0])
        num[key] += w * attention[n, 0]
        den[key] += w
    expected = np.divide(num, den, where=den > 0, out=np.zeros_like(num))
    got = signatures.attention_factor(ds, attention, (0,), weighted=(0,), query=-1)
    np.testing.assert_allclose(got, expected, atol=TOL)


# ----------------------------------------------------------------------------------------------
# Language-model signatures (paper §6), by hand


def test_language_model_signatures_by_hand():
    # stream: a b a c b a   (a=0, b=1, c=2), one window of length 6
    stream = np.array([0, 1, 0, 2, 1, 0])
    phi, r = signatures.next_token_signature(stream, 3)
    # predicting positions 0..4 hold a, b, a, c, b; their successors b, a, c, b, a
    np.testing.assert_allclose(r, [2 / 5, 2 / 5, 1 / 5])
    np.testing.assert_allclose(phi, [[0, 0.5, 0.5], [1, 0, 0], [0, 1, 0]])
    previous = signatures.previous_token_signature(stream, 3)
    # targets a (positions 1, 5): preceded by b, b; b (1, 4): a, c; c (3): a
    np.testing.assert_allclose(previous, [[0, 1, 0], [0.5, 0, 0.5], [1, 0, 0]])
    prefix = signatures.prefix_signature(stream, 3)
    # a at s=0 (-> b, prefix {}), a at s=2 (-> c, prefix {a, b})
    expected_a = np.zeros((3, 3))
    expected_a[2, 0] = expected_a[2, 1] = 0.5
    np.testing.assert_allclose(prefix[0], expected_a)
    # b at s=1 (-> a, prefix {a}), b at s=4 (-> a, prefix {a, b, c})
    np.testing.assert_allclose(prefix[1], [[1, 0.5, 0.5], [0, 0, 0], [0, 0, 0]])


# ----------------------------------------------------------------------------------------------
# Bad input


def test_bad_input_names_the_parameter():
    ds = random_dataset(seed=1, V=4, L=3)
    with pytest.raises(ValueError, match="order"):
        signatures.label_signature(ds, 3)
    with pytest.raises(ValueError, match="alphas"):
        signatures.label_signature(ds, 1, alphas=[0, 9])
    with pytest.raises(ValueError, match="context"):
        signatures.label_signature(ds, 1, context=[])
    with pytest.raises(ValueError, match="attention"):
        signatures.attention_factor(ds, np.ones((2, 3)))
    with pytest.raises(ValueError, match="windows"):
        signatures.next_token_signature(np.array([1, 5]), 4)
    with pytest.raises(ValueError, match="tokens"):
        TokenDataset(np.array([[0, 5]]), np.array([0]), vocab_size=4)
    with pytest.raises(ValueError, match="labels"):
        TokenDataset(np.array([[0, 1]]), np.array([0, 1]), vocab_size=4)


def test_attention_path_signature_by_brute_force():
    """The paper's eq. 22 literally: s uniform over predicting positions, I_s uniform over 0..s."""
    rng = np.random.default_rng(5)
    V, n, T = 4, 3, 5
    windows = rng.integers(0, V, (n, T))
    raw = rng.random((n, T, T)) * np.tril(np.ones((T, T)))
    attention = raw / raw.sum(axis=-1, keepdims=True)
    num, den = np.zeros((V, V)), np.zeros(V)
    for b in range(n):
        for s in range(T - 1):
            for j in range(s + 1):
                w = 1.0 / (s + 1)
                num[windows[b, j], windows[b, s + 1]] += w * attention[b, s, j]
                den[windows[b, j]] += w
    expected = np.divide(num, den[:, None], out=np.zeros_like(num), where=den[:, None] > 0)
    got = signatures.attention_path_signature(windows, attention, V)
    np.testing.assert_allclose(got, expected, atol=TOL)
    with pytest.raises(ValueError, match="attention"):
        signatures.attention_path_signature(windows, attention[:, :-1], V)


# ----------------------------------------------------------------------------------------------
# Float64 geometry, whatever JAX's x64 flag


def test_fourier_components_zero_in_theory_are_exact_zeros():
    """modsum with L = 3: given alpha and beta the label is uniform, so phi^{y;1} is constant
    along beta and every k != 0 component vanishes; float64 leaves ~1e-17 of rounding."""
    ds = tasks.make("modsum", N=12, L=3)
    numbers = ds.groups["numbers"]
    phi1 = signatures.label_signature(ds, 1, alphas=numbers, context=numbers)
    ks = [0, 1, 5, 6]
    h = signatures.fourier_projection(phi1, ks)
    raw = np.moveaxis(np.tensordot(phi1, signatures.fourier_basis(12, ks), ([-1], [1])), -1, 0)
    assert np.abs(raw[1:]).max() < 1e-15  # the rounding the projection removes
    np.testing.assert_array_equal(h[1:], 0.0)
    np.testing.assert_array_equal(h[0], raw[0])  # genuine values are untouched
    np.testing.assert_allclose(h[0], signatures.label_signature(ds, 0, alphas=numbers), atol=TOL)


def test_signature_geometry_is_float64_with_cosines_in_range_without_x64():
    """The `signatures` CLI (no x64) printed cosines above 1 for sub and garbage cosines of
    modsum's zero Fourier rows: both were float32 cosines of float64 signatures."""
    with jax.enable_x64(False):
        sub = geometry.signature_geometry(tasks.make("sub", N=20), 1)
        modsum = geometry.signature_geometry(tasks.make("modsum", N=12, L=3), 1)
        assert not jax.config.jax_enable_x64
    for geom in (sub, modsum):
        for name, S in geom.similarity.items():
            assert S.dtype == np.float64 and S.max() <= 1.0 and S.min() >= -1.0, name
            assert geom.summary[name]["offdiag_max"] <= 1.0
            assert geom.pca[name].explained_variance_ratio.dtype == np.float64
    numbers = np.arange(1, 21)
    phi0 = signatures.label_signature(tasks.make("sub", N=20), 0, alphas=numbers)
    np.testing.assert_allclose(sub.similarity["order0"], np.clip(cosine(phi0), -1, 1), atol=1e-15)
    np.testing.assert_allclose(sub.similarity["order0"][2, 17], 1.0, atol=1e-15)
    # modsum's Fourier rows are exact zeros: cosine 0 to every row, no PCA structure
    for name in ("order1_k1", "order1_k6"):
        np.testing.assert_array_equal(modsum.similarity[name], 0.0)
        np.testing.assert_array_equal(modsum.pca[name].explained_variance_ratio, 0.0)
        assert modsum.summary[name]["constant"]


def test_signatures_are_float64_without_x64():
    """The module promises NumPy float64 whatever JAX's flag: the same numbers with x64 off."""
    ds = random_dataset(21, V=5, L=3, n=30)
    windows = np.random.default_rng(21).integers(0, 5, (4, 7))

    def compute():
        sigs = signatures.signature_set(ds, 2)
        return {
            "r": sigs.r,
            **{f"label{m}": p for m, p in enumerate(sigs.label)},
            **{f"cooc{m}": p for m, p in enumerate(sigs.cooccurrence)},
            "positional": signatures.positional_signature(ds, (0,), query=-1),
            "fourier": signatures.fourier_projection(sigs.label[1], [0, 1, 2]),
            "next": signatures.next_token_signature(windows, 5)[0],
            "prefix": signatures.prefix_signature(windows, 5),
        }

    with jax.enable_x64(False):
        off = compute()
        assert not jax.config.jax_enable_x64
    on = compute()
    for name, value in off.items():
        assert value.dtype == np.float64, name
        np.testing.assert_array_equal(value, on[name], err_msg=name)
    np.testing.assert_allclose(off["label2"], brute_force(ds, 2, True), atol=TOL)


def test_positions_lie_in_minus_L_to_L_minus_one():
    ds = tasks.make("add", N=4)
    first = signatures.positional_signature(ds, (0,))
    assert np.array_equal(signatures.positional_signature(ds, (-ds.L,)), first)
    for outside in (ds.L, -ds.L - 1):
        with pytest.raises(
            ValueError, match=rf"^positions must be an int in \[-{ds.L}, {ds.L - 1}\]"
        ):
            signatures.positional_signature(ds, (outside,))


def test_fourier_projection_zeroes_exactly_what_is_rounding_of_its_scale():
    """``|h| <= ROUNDING_RTOL * sum_p |phi_p c_p|`` is rounding and exactly 0; a value above it
    is genuine and kept (the module docstring's threshold, on a short axis)."""
    p = 8
    rng = np.random.default_rng(3)
    flat = np.full((5, p), 0.25)
    for relative, zero in ((1e-14, True), (1e-13, True), (1e-6, False)):
        phi = flat * (1 + relative * rng.standard_normal((5, p)))
        h = signatures.fourier_projection(phi, [1, 2, 3])
        raw = np.tensordot(phi, signatures.fourier_basis(p, [1, 2, 3]), axes=([-1], [1])).T
        basis = np.abs(signatures.fourier_basis(p, [1, 2, 3]))
        scale = np.tensordot(np.abs(phi), basis, axes=([-1], [1])).T
        kept = np.abs(raw) > signatures.ROUNDING_RTOL * scale
        np.testing.assert_array_equal(h, np.where(kept, raw, 0.0))
        assert (not kept.any()) if zero else kept.all(), relative
