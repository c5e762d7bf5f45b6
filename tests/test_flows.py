"""The signature flows against independent autodiff of plain-array models (theory/ffn.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import flows, signatures, tasks


def polynomial(coefficients, z):
    return sum(C * z**k for k, C in enumerate(coefficients, start=1))


def ffn_objective(W, ds, coefficients, mode):
    """E_D of the label term, the uniform-softmax linearization, or the exact log-likelihood."""
    logits = polynomial(coefficients, W["W_E"][ds.tokens].sum(axis=1)) @ W["W_U"].T
    p = jnp.asarray(ds.probabilities)
    picked = logits[jnp.arange(ds.n), ds.labels]
    if mode == "label":
        return jnp.sum(p * picked)
    if mode == "uniform":
        return jnp.sum(p * (picked - logits.mean(axis=-1)))
    return jnp.sum(p * jax.nn.log_softmax(logits)[jnp.arange(ds.n), ds.labels])


def normal_weights(seed, scale=1.0, **shapes):
    """Standard normals times ``scale``, one jax array per named shape, drawn in that order."""
    rng = np.random.default_rng(seed)
    return {name: jnp.asarray(rng.normal(size=shape) * scale) for name, shape in shapes.items()}


def random_weights(seed, V, d, scale):
    return normal_weights(seed, scale, W_E=(V, d), W_U=(V, d))


def relative(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


@pytest.mark.parametrize("L", [2, 3, 4])
def test_theorem1_identity_order_contributions(L):
    """Sum over m of the Theorem 1 terms = autodiff E[(df/dw_alpha)^T e_y], random sigma."""
    rng = np.random.default_rng(L)
    ds = tasks.random_dataset(80, L, 7, seed=L)
    sigs = signatures.signature_set(ds, L - 1)
    for trial in range(3):
        coefficients = tuple(rng.normal(size=rng.integers(1, 5)))  # degree <= 4
        W = random_weights(10 * L + trial, 7, 6, 0.5)
        contributions = flows.order_contributions(W["W_E"], W["W_U"], sigs, coefficients)
        assert contributions.shape == (L, 7, 6)
        autodiff = jax.grad(ffn_objective)(W, ds, coefficients, "label")["W_E"]
        assert relative(contributions.sum(axis=0), autodiff) <= 1e-10


@pytest.mark.parametrize("L", [2, 3])
def test_signature_flow_is_exact_for_the_linearized_softmax(L):
    """W_E and W_U flows (Theorems 1-2 with m=0, and our W_U equation F7-F8) are exact."""
    ds = tasks.random_dataset(60, L, 6, seed=7)
    sigs = flows.flow_signatures(signatures.signature_set(ds, L - 1))
    coefficients = (0.9, -0.5, 0.3, 0.2)
    W = random_weights(1, 6, 5, 0.7)
    for mode, prediction in (("label", "none"), ("uniform", "uniform")):
        dW_E, dW_U = flows.ffn_signature_field(
            W["W_E"], W["W_U"], sigs, coefficients, L=L, prediction=prediction
        )
        exact = jax.grad(ffn_objective)(W, ds, coefficients, mode)
        assert relative(dW_E, exact["W_E"]) <= 1e-12
        assert relative(dW_U, exact["W_U"]) <= 1e-12


def test_signature_flow_error_against_the_full_softmax_scales_as_the_truncation():
    """Uniform truncation drops O(|f|) = O(s^2) relative terms; the linear one O(s^4)."""
    ds = tasks.random_dataset(60, 3, 6, seed=3)
    sigs = flows.flow_signatures(signatures.signature_set(ds, 2))
    coefficients = (1.0, 0.5, 0.2)
    scales = np.array([1e-2, 3e-3, 1e-3, 3e-4])
    errors = {"uniform": [], "linear": []}
    for scale in scales:
        W = random_weights(2, 6, 5, scale)
        exact = jax.grad(ffn_objective)(W, ds, coefficients, "exact")
        for prediction in errors:
            dW_E, _ = flows.ffn_signature_field(
                W["W_E"], W["W_U"], sigs, coefficients, L=3, prediction=prediction
            )
            errors[prediction].append(relative(dW_E, exact["W_E"]))
    assert errors["uniform"][-1] <= 1e-3  # at small init the signature flow is the flow
    slope_uniform = np.polyfit(np.log(scales), np.log(errors["uniform"]), 1)[0]
    slope_linear = np.polyfit(np.log(scales), np.log(errors["linear"]), 1)[0]
    assert slope_uniform == pytest.approx(2.0, abs=0.15)
    assert slope_linear == pytest.approx(4.0, abs=0.3)


def test_max_order_masks_orders_and_can_be_traced():
    ds = tasks.random_dataset(50, 3, 6, seed=4)
    sigs_np = signatures.signature_set(ds, 2)
    sigs = flows.flow_signatures(sigs_np)
    coefficients = (1.0, 0.7, 0.4)
    W = random_weights(3, 6, 4, 0.3)
    per_order = flows.order_contributions(W["W_E"], W["W_U"], sigs_np, coefficients)

    def label_drive(max_order):
        return flows.ffn_signature_field(
            W["W_E"], W["W_U"], sigs, coefficients, L=3, max_order=max_order, prediction="none"
        )[0]

    batched = jax.jit(jax.vmap(label_drive))(jnp.arange(3))
    for m in range(3):
        np.testing.assert_allclose(batched[m], per_order[: m + 1].sum(axis=0), atol=1e-13)


def test_proposition1_order_m_over_order_0_scales_as_d_to_minus_m_gamma():
    """Claim §8.2 (the paper's Prop. 1): RMS ratio of order m to order 0 at init has log-log
    slope -m gamma."""
    ds = tasks.random_dataset(40, 3, 5, seed=5)
    sigs = signatures.signature_set(ds, 2)
    coefficients = (1.0, 1.0, 1.0)
    widths = np.array([64, 256, 1024, 4096])
    for gamma in (0.6, 0.8, 1.0):
        ratios = []
        for d in widths:
            rms = np.zeros(3)
            for seed in range(4):
                W = random_weights(seed, 5, int(d), float(d) ** -gamma)
                terms = flows.order_contributions(W["W_E"], W["W_U"], sigs, coefficients)
                rms += np.asarray(jnp.mean(terms**2, axis=(1, 2)))
            ratios.append(np.sqrt(rms[1:] / rms[0]))
        ratios = np.array(ratios)  # [widths, m=1..2]
        for m in (1, 2):
            slope = np.polyfit(np.log(widths), np.log(ratios[:, m - 1]), 1)[0]
            assert slope == pytest.approx(-m * gamma, abs=0.1), (gamma, m, slope)


def test_drive_matrix_columns_are_centred_weighted_signatures():
    ds = tasks.make("add", N=6)
    sigs = signatures.signature_set(ds, 0)
    M = flows.drive_matrix(sigs, ds.vocab_size)
    np.testing.assert_allclose(M.sum(axis=0), 0.0, atol=1e-15)  # 1^T M = 0
    phi0 = signatures.label_signature(ds, 0)
    r = signatures.occurrence(ds)
    for alpha in ds.groups["numbers"]:
        np.testing.assert_allclose(M[:, alpha], 2 * r[alpha] * (phi0[alpha] - 1 / ds.vocab_size))
    assert not M[:, 0].any()  # token 0 never occurs
    restricted = signatures.signature_set(
        ds, 0, alphas=np.unique(ds.tokens), labels=np.unique(ds.labels)
    )
    np.testing.assert_allclose(flows.drive_matrix(restricted, ds.vocab_size), M, atol=1e-15)


def test_attention_uniform_flow_is_the_gradient_of_the_uniform_attention_model():
    ds = tasks.make("add", N=5)
    V, d, d_k = ds.vocab_size, 6, 4
    params = normal_weights(0, W_E=(V, d), W_U=(V, d), W_O=(d, d_k), W_V=(d_k, d))
    M = flows.drive_matrix(signatures.signature_set(ds, 0), V)

    def objective(P):
        pooled = P["W_E"][ds.tokens].mean(axis=1)
        logits = pooled @ P["W_V"].T @ P["W_O"].T @ P["W_U"].T
        picked = logits[jnp.arange(ds.n), ds.labels]
        return jnp.sum(jnp.asarray(ds.probabilities) * (picked - logits.mean(axis=-1)))

    exact = jax.grad(objective)(params)
    field = flows.attention_uniform_field(params, M, ds.L)
    for name in params:
        assert relative(field[name], exact[name]) <= 1e-12, name


def test_attention_paths_sum_to_the_gradient_and_value_path_is_theorem3():
    ds = tasks.make("anchor_parity", n=300, L=5)
    V, d, d_k = ds.vocab_size, 8, 4
    qkv = (d_k, d)
    weights = normal_weights(1, W_E=(V, d), W_U=(V, d), W_Q=qkv, W_K=qkv, W_V=qkv, W_O=(d, d_k))
    paths = flows.attention_path_gradients(weights, ds.tokens, ds.labels, ds.probabilities)

    def label_term(W_E):
        logits = flows.attention_logits(
            W_E, *(weights[k] for k in ("W_U", "W_Q", "W_K", "W_V", "W_O")), ds.tokens
        )
        return jnp.sum(jnp.asarray(ds.probabilities) * logits[jnp.arange(ds.n), ds.labels])

    total = jax.grad(label_term)(weights["W_E"])
    assert relative(paths["value"] + paths["key"] + paths["query"], total) <= 1e-12
    assert relative(paths["key"], total) > 1e-3  # the split is not trivial at this scale

    # value path in signature form: L r (W_U W_O W_V)^T (phi^{y;0} * psi^y) (paper §5.2, Theorem 3)
    scores = jnp.einsum(
        "nsk,nk->ns",
        weights["W_E"][ds.tokens] @ weights["W_K"].T,
        weights["W_E"][ds.tokens[:, -1]] @ weights["W_Q"].T,
    ) / jnp.sqrt(float(d))
    attention = np.asarray(jax.nn.softmax(scores, axis=-1))
    psi = signatures.attention_factor(ds, attention)
    phi0 = signatures.label_signature(ds, 0)
    r = signatures.occurrence(ds)
    value = flows.attention_value_path(weights, phi0, psi, r, ds.L)
    assert relative(value, paths["value"]) <= 1e-12


@pytest.mark.parametrize(("task", "params"), [("add", dict(N=7)), ("modsum", dict(N=4, L=3))])
@pytest.mark.parametrize("prediction", ["uniform", "linear"])
def test_sparse_label_contraction_equals_the_dense_one(task, params, prediction):
    """A deterministic task's label signature of order L-1 has one label per context: its COO
    contraction (nnz * d) gives the dense field's numbers."""
    ds = tasks.make(task, **params)
    sigs = signatures.signature_set(ds, ds.L - 1)
    sparse, dense = flows.flow_signatures(sigs), flows.flow_signatures(sigs, sparse=False)
    assert sparse.sparse[ds.L - 1] is not None and sparse.sparse[0] is None
    assert all(s is None for s in dense.sparse)
    rng = np.random.default_rng(3)
    W_E, W_U = (jnp.asarray(rng.normal(size=(ds.vocab_size, 6))) for _ in range(2))
    coefficients = (1.0, 0.5, 0.25)
    got = flows.ffn_signature_field(W_E, W_U, sparse, coefficients, L=ds.L, prediction=prediction)
    want = flows.ffn_signature_field(W_E, W_U, dense, coefficients, L=ds.L, prediction=prediction)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * float(jnp.max(jnp.abs(w))))


def second_order_objective(W, ds, coefficients):
    """E_D of the second-order Taylor expansion of log softmax at uniform logits:
    ``f_y - mean f - |H f|^2 / (2V)``, whose gradient in f is ``e_y - (1/V + (1/V) H f)``,
    the linear softmax of Remark 1 (theory/ffn.md eq. F9-F10)."""
    logits = polynomial(coefficients, W["W_E"][ds.tokens].sum(axis=1)) @ W["W_U"].T
    centred = logits - logits.mean(axis=-1, keepdims=True)
    picked = centred[jnp.arange(ds.n), ds.labels]
    penalty = jnp.sum(centred**2, axis=-1) / (2 * logits.shape[-1])
    return jnp.sum(jnp.asarray(ds.probabilities) * (picked - penalty))


@pytest.mark.parametrize("L", [2, 3])
def test_linear_softmax_flow_is_the_gradient_of_the_second_order_loss(L):
    """prediction="linear" is exactly -grad of the loss it linearizes, W_E *and* W_U.

    At unit-scale weights the linear-softmax correction is as large as the rest of the field
    (the uniform-only field is ~100% off), so a wrong sign or factor in either correction
    term (extra_E, extra_U) is far above the 1e-12 tolerance."""
    ds = tasks.random_dataset(40, L, 6, seed=11)  # random tokens: repeats within a sequence
    sigs = flows.flow_signatures(signatures.signature_set(ds, L - 1))
    coefficients = (0.9, -0.5, 0.3)
    W = random_weights(20 + L, 6, 5, 0.7)
    exact = jax.grad(second_order_objective)(W, ds, coefficients)
    dW_E, dW_U = flows.ffn_signature_field(
        W["W_E"], W["W_U"], sigs, coefficients, L=L, prediction="linear"
    )
    assert relative(dW_E, exact["W_E"]) <= 1e-12
    assert relative(dW_U, exact["W_U"]) <= 1e-12
    uniform_E, uniform_U = flows.ffn_signature_field(
        W["W_E"], W["W_U"], sigs, coefficients, L=L, prediction="uniform"
    )
    # the correction is not negligible here: W_U's part is a large share of the field
    assert relative(uniform_U, exact["W_U"]) > 0.3 and relative(uniform_E, exact["W_E"]) > 0.3
    # the ODE wrapper gives the same field
    field = flows.ffn_signature_flow(
        signatures.signature_set(ds, L - 1), coefficients, prediction="linear"
    )
    dy = field(0.0, W, None)
    assert relative(dy["W_U"], exact["W_U"]) <= 1e-12


def test_drive_matrix_is_float64_without_x64():
    """drive_matrix promises float64 (NumPy) whatever JAX's flag."""
    ds = tasks.make("add", N=5)
    with jax.enable_x64(False):
        M = flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size)
        assert not jax.config.jax_enable_x64
    assert M.dtype == np.float64
    np.testing.assert_allclose(M.sum(axis=0), 0.0, atol=1e-15)


def test_drive_matrix_vocab_size_must_cover_every_id():
    ds = tasks.make("add", N=4)
    sigs = signatures.signature_set(ds, 0)
    needed = 1 + max(int(sigs.alphas.max()), int(sigs.labels.max()))
    assert flows.drive_matrix(sigs, needed).shape == (needed, needed)
    with pytest.raises(
        ValueError, match=rf"^vocab_size must be an int >= {needed}; got {needed - 1}"
    ):
        flows.drive_matrix(sigs, needed - 1)


def test_signature_order_is_l_minus_one_for_a_linear_readout_else_the_largest_order():
    assert flows.signature_order(4, (1, 2), "linear") == 3
    assert flows.signature_order(4, (2, 1), "softmax") == 2
    assert flows.signature_order(6, (0, 3, 1), "full") == 3
