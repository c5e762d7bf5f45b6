"""Models and activations: the FFN Jacobian (paper §4.3, App. B.1), the std d^{-γ} initialization
rule, and every forward pass against an independent NumPy re-implementation written from
``weights(model)``."""

import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ctx_staircase import activations, models

F64 = jnp.float64


def random_tokens(seed: int, shape: tuple[int, int], vocab_size: int) -> jax.Array:
    """Token ids int32 ``shape`` (NumPy's generator: nothing to compile)."""
    return jnp.asarray(np.random.default_rng(seed).integers(0, vocab_size, shape, dtype=np.int32))


def relative_error(actual, expected) -> float:
    actual, expected = np.asarray(actual), np.asarray(expected)
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


@functools.partial(jax.jit, static_argnames=("graphdef", "method"))
def _apply(graphdef, state, tokens, method):
    return getattr(nnx.merge(graphdef, state), method)(tokens)


def jitted(model, method: str = "__call__"):
    """``model.method`` compiled, cached across models of one configuration: a single compile is
    much cheaper than op-by-op dispatch."""
    graphdef, state = nnx.split(model)
    return functools.partial(_apply, graphdef, state, method=method)


def numpy_weights(model) -> dict[str, np.ndarray]:
    return {name: np.asarray(value) for name, value in models.weights(model).items()}


# --------------------------------------------------------------------------------------------
# paper §4.3, App. B.1: the FFN Jacobian and the two parts of the embedding flow

COEFFICIENTS = (0.7, -0.4, 0.3)  # σ(z) = 0.7 z - 0.4 z² + 0.3 z³


def polynomial_derivative(h: np.ndarray) -> np.ndarray:
    """σ'(h) = Σ_k k C_k h^{k-1}, written out independently of ``activations.derivative``."""
    return sum(k * c * h ** (k - 1) for k, c in enumerate(COEFFICIENTS, start=1))


@pytest.fixture
def ffn_dataset():
    """A float64 polynomial FFN (std 1 so the expansion terms are all O(1)) and weighted data."""
    vocab_size, d, n, length = 7, 5, 40, 4
    model = models.FFN(
        vocab_size,
        d,
        activation=("poly", COEFFICIENTS),
        gamma=0.0,
        rngs=nnx.Rngs(0),
        dtype=F64,
    )
    tokens = random_tokens(1, (n, length), vocab_size)
    labels = random_tokens(2, (n, 1), vocab_size)[:, 0]
    p = jnp.asarray(np.random.default_rng(3).uniform(size=n))
    return model, tokens, labels, p / p.sum()


def test_label_driven_gradient_matches_jacobian_formula(ffn_dataset):
    """∇_{W_E} Σ_n p_n f(X_n)_{y_n}, row α = Σ_n p_n N_α(X_n) σ'(h_n) ⊙ w^U_{y_n} (paper §4.3)."""
    model, tokens, labels, p = ffn_dataset

    def expected_label_logit(m):
        logits = m(tokens)
        return jnp.sum(p * jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0])

    autodiff = nnx.jit(nnx.grad(expected_label_logit))(model)["W_E"][...]

    W = numpy_weights(model)
    tokens_np, labels_np, p_np = np.asarray(tokens), np.asarray(labels), np.asarray(p)
    counts = np.zeros((len(tokens_np), W["W_E"].shape[0]))  # N_α(X_n)
    np.add.at(counts, (np.arange(len(tokens_np))[:, None], tokens_np), 1.0)
    h = W["W_E"][tokens_np].sum(axis=1)
    formula = np.einsum("n,na,nd->ad", p_np, counts, polynomial_derivative(h) * W["W_U"][labels_np])

    assert autodiff.dtype == F64
    assert relative_error(autodiff, formula) <= 1e-12


def test_cross_entropy_descent_direction_matches_flow(ffn_dataset):
    """-∇_{W_E} E[-log p(X)_y], row α = Σ_n p_n N_α (σ'(h_n) ⊙ W_U^T (e_{y_n} - p(X_n))).

    Sign: the right-hand side is dW_E/dt of the paper's eq. (2) (label-driven minus
    prediction-induced part), i.e. the gradient-flow (descent) direction, the negative of the loss
    gradient.
    """
    model, tokens, labels, p = ffn_dataset

    def cross_entropy(m):
        log_probabilities = jax.nn.log_softmax(m(tokens), axis=-1)
        return -jnp.sum(p * jnp.take_along_axis(log_probabilities, labels[:, None], axis=1)[:, 0])

    descent = -nnx.jit(nnx.grad(cross_entropy))(model)["W_E"][...]

    W = numpy_weights(model)
    tokens_np, labels_np, p_np = np.asarray(tokens), np.asarray(labels), np.asarray(p)
    n, vocab_size = len(tokens_np), W["W_E"].shape[0]
    counts = np.zeros((n, vocab_size))
    np.add.at(counts, (np.arange(n)[:, None], tokens_np), 1.0)
    h = W["W_E"][tokens_np].sum(axis=1)
    sigma = sum(c * h**k for k, c in enumerate(COEFFICIENTS, start=1))
    predicted = softmax(sigma @ W["W_U"].T)
    residual = np.eye(vocab_size)[labels_np] - predicted  # e_y - p(X)
    formula = np.einsum(
        "n,na,nd->ad", p_np, counts, polynomial_derivative(h) * (residual @ W["W_U"])
    )

    assert relative_error(descent, formula) <= 1e-12


# --------------------------------------------------------------------------------------------
# initialization: std d^{-γ} (the paper's small init), or fan-in (as in [RB], arXiv 2502.04375)


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_default_init_std_is_d_to_minus_gamma(gamma):
    vocab_size, d = 1000, 128
    model = models.FFN(vocab_size, d, gamma=gamma, rngs=nnx.Rngs(4))
    W = numpy_weights(model)
    for name in ("W_E", "W_U"):
        assert abs(W[name].std() / d**-gamma - 1) < 0.03, name
        assert abs(W[name].mean()) < 0.03 * d**-gamma, name


def test_fan_in_init_uses_input_dimension():
    vocab_size, seq_len, d, d_k, gamma = 1000, 64, 128, 32, 0.5
    ffn = models.FFN(vocab_size, d, gamma=gamma, init="fan_in", rngs=nnx.Rngs(5))
    W = numpy_weights(ffn)
    assert abs(W["W_E"].std() / vocab_size**-gamma - 1) < 0.03  # embedding table: d_in = V
    assert abs(W["W_U"].std() / d**-gamma - 1) < 0.03

    attention = models.AttentionOnly(
        vocab_size, seq_len, d, d_k, gamma=gamma, init="fan_in", rngs=nnx.Rngs(6)
    )
    W = numpy_weights(attention)
    expected = {"W_E": vocab_size, "P": seq_len, "W_Q": d, "W_O": d_k, "W_U": d}
    for name, d_in in expected.items():
        assert abs(W[name].std() / d_in**-gamma - 1) < 0.06, name  # P has only 8192 entries


def test_init_std_is_traced_in_gamma():
    gammas = jnp.array([0.5, 1.0], F64)
    stds = jax.jit(jax.vmap(lambda g: models.init_std(g, 128, F64)))(gammas)
    np.testing.assert_allclose(stds, [128**-0.5, 128**-1.0], rtol=1e-14)


def test_vmapped_construction_over_gamma_matches_eager():
    keys = jax.random.split(jax.random.key(7), 3)
    gammas = jnp.array([0.3, 0.8, 1.5], F64)

    def build_ffn(key, gamma):
        return nnx.state(models.FFN(7, 5, gamma=gamma, rngs=nnx.Rngs(key), dtype=F64))

    def build_attention(key, gamma):  # one shape for all five matrices: one compile
        return nnx.state(
            models.AttentionOnly(8, 8, 8, 8, gamma=gamma, rngs=nnx.Rngs(key), dtype=F64)
        )

    for build in (build_ffn, build_attention):
        stacked = jax.vmap(build)(keys, gammas)
        for i in range(3):
            eager = build(keys[i], float(gammas[i]))
            flat_stacked = jax.tree.leaves(stacked)
            flat_eager = jax.tree.leaves(eager)
            assert len(flat_stacked) == len(flat_eager)
            for batched, single in zip(flat_stacked, flat_eager, strict=True):
                np.testing.assert_allclose(batched[i], single, rtol=1e-14, atol=0)


# --------------------------------------------------------------------------------------------
# forward passes against independent NumPy re-implementations (float64)


@pytest.mark.parametrize("activation", ["relu", "gelu", "poly:0.5,-1,0.25", "z^2"])
def test_ffn_forward_matches_reference(activation):
    model = models.FFN(7, 5, activation=activation, gamma=0.0, rngs=nnx.Rngs(8), dtype=F64)
    tokens = random_tokens(9, (5, 3), 7)
    W = numpy_weights(model)
    h = W["W_E"][np.asarray(tokens)].sum(axis=1)
    sigma = {
        "relu": lambda z: np.maximum(z, 0.0),
        "gelu": lambda z: z * 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2))),
        "poly:0.5,-1,0.25": lambda z: 0.5 * z - z**2 + 0.25 * z**3,
        "z^2": lambda z: z**2,
    }[activation]
    expected = sigma(h) @ W["W_U"].T
    logits = jitted(model)(tokens)
    assert logits.shape == (5, 7)
    assert relative_error(logits, expected) <= 1e-12


def reference_last_row_attention(W, tokens, d):
    """a = last row of causal softmax(H W_K^T W_Q H^T / √d) (paper §5.1), built with W^QK."""
    h = W["W_E"][tokens] + W["P"][: tokens.shape[1]]
    W_QK = W["W_K"].T @ W["W_Q"]
    length = tokens.shape[1]
    scores = np.einsum("bsd,de,bte->bts", h, W_QK, h) / math.sqrt(d)  # row t = query position
    scores = np.where(np.tril(np.ones((length, length), bool)), scores, -np.inf)
    return h, softmax(scores)[:, -1]


@pytest.mark.parametrize("positional", [True, False])
def test_attention_only_forward_matches_reference(positional):
    vocab_size, seq_len, d, d_k = 10, 6, 8, 4  # d != d_k, so a 1/√d_k scale would fail
    model = models.AttentionOnly(
        vocab_size, seq_len, d, d_k, gamma=0.0, positional=positional, rngs=nnx.Rngs(10), dtype=F64
    )
    tokens = np.asarray(random_tokens(11, (7, 5), vocab_size))  # L = 5 < seq_len
    W = numpy_weights(model)
    if not positional:
        assert not W["P"].any()
    h, attention = reference_last_row_attention(W, tokens, d)
    expected = (np.einsum("bs,bsd->bd", attention, h) @ (W["W_O"] @ W["W_V"]).T) @ W["W_U"].T

    assert np.abs(attention - 1 / 5).max() > 0.05  # the test exercises non-uniform attention
    model_attention = jitted(model, "attention")(tokens)
    assert relative_error(model_attention, attention) <= 1e-12
    assert relative_error(jitted(model)(tokens), expected) <= 1e-12
    np.testing.assert_allclose(np.asarray(model_attention).sum(axis=-1), 1.0, rtol=1e-14)


def test_one_layer_transformer_forward_matches_reference():
    vocab_size, seq_len, d, d_ff = 9, 5, 6, 10
    model = models.OneLayerTransformer(
        vocab_size, seq_len, d, d_ff=d_ff, gamma=0.0, rngs=nnx.Rngs(12), dtype=F64
    )
    tokens = np.asarray(random_tokens(13, (4, seq_len), vocab_size))
    W = numpy_weights(model)
    assert W["W_f1"].shape == (d_ff, d) and W["W_f2"].shape == (d, d_ff)
    h, attention = reference_last_row_attention(W, tokens, d)
    u = h[:, -1] + np.einsum("bs,bsd->bd", attention, h) @ W["W_V"].T @ W["W_O"].T
    v = u + np.maximum(u @ W["W_f1"].T, 0.0) @ W["W_f2"].T
    assert relative_error(jitted(model, "attention")(tokens), attention) <= 1e-12
    assert relative_error(jitted(model)(tokens), v @ W["W_U"].T) <= 1e-12


def test_attention_models_draw_the_shared_weights_alike_and_in_order():
    """`AttentionOnly` (d_k = d) and `OneLayerTransformer` from one seed hold the same W_E, P,
    W_Q, W_K, W_V, W_O (bitwise) and the same attention; the k-th ``rngs.params()`` key draws
    the k-th of them: d^{-γ} N(0, 1) (the paper's small init)."""
    V, seq_len, d, gamma = 9, 5, 6, 0.5
    only = models.AttentionOnly(V, seq_len, d, d, gamma=gamma, rngs=nnx.Rngs(3), dtype=F64)
    full = models.OneLayerTransformer(V, seq_len, d, gamma=gamma, rngs=nnx.Rngs(3), dtype=F64)
    rngs = nnx.Rngs(3)
    shapes = dict(W_E=(V, d), P=(seq_len, d), W_Q=(d, d), W_K=(d, d), W_V=(d, d), W_O=(d, d))
    a, b = models.weights(only), models.weights(full)
    for name, shape in shapes.items():
        assert np.array_equal(a[name], b[name]) and a[name].dtype == b[name].dtype, name
        expected = models.init_std(gamma, d, F64) * jax.random.normal(rngs.params(), shape, F64)
        np.testing.assert_allclose(a[name], expected, rtol=1e-14, err_msg=name)
    tokens = random_tokens(4, (3, seq_len), V)
    assert np.array_equal(only.attention(tokens), full.attention(tokens))


def reference_rope(x: np.ndarray, base: float) -> np.ndarray:
    """RoPE as complex rotation: pair (x_i, x_{i+half}) ↦ (x_i + i x_{i+half}) e^{i t θ_i}."""
    length, head_dim = x.shape[1], x.shape[-1]
    half = head_dim // 2
    theta = base ** (-2.0 * np.arange(half) / head_dim)
    rotation = np.exp(1j * np.arange(length)[:, None] * theta[None, :])  # [T, half]
    rotated = (x[..., :half] + 1j * x[..., half:]) * rotation[None, :, :]
    return np.concatenate([rotated.real, rotated.imag], axis=-1)


def reference_gpt(W, tokens, n_heads, base=10000.0, eps=1e-6):
    def rms(x, scale):
        return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * scale

    x = W["W_E"][tokens]
    length, d = tokens.shape[1], x.shape[-1]
    head_dim = d // n_heads
    mask = np.tril(np.ones((length, length), bool))
    maps = []
    for layer in range(W["W_Q"].shape[0]):
        a_in = rms(x, W["attention_norm"][layer])
        heads_out, layer_maps = [], []
        for head in range(n_heads):
            rows = slice(head * head_dim, (head + 1) * head_dim)
            q = reference_rope(a_in @ W["W_Q"][layer][rows].T, base)
            k = reference_rope(a_in @ W["W_K"][layer][rows].T, base)
            v = a_in @ W["W_V"][layer][rows].T
            scores = np.where(mask, q @ k.transpose(0, 2, 1) / math.sqrt(head_dim), -np.inf)
            weights = softmax(scores)
            layer_maps.append(weights)
            heads_out.append(weights @ v)
        maps.append(np.stack(layer_maps, axis=1))
        x = x + np.concatenate(heads_out, axis=-1) @ W["W_O"][layer].T
        m_in = rms(x, W["mlp_norm"][layer])
        gate = m_in @ W["W_gate"][layer].T
        x = x + (gate / (1 + np.exp(-gate)) * (m_in @ W["W_up"][layer].T)) @ W["W_down"][layer].T
    return rms(x, W["final_norm"]) @ W["W_U"].T, np.stack(maps)


@pytest.mark.parametrize("tied", [False, True])
def test_gpt_forward_matches_reference(tied):
    vocab_size, seq_len, d, n_heads = 13, 7, 8, 2
    model = models.GPT(
        vocab_size,
        seq_len,
        d,
        n_layers=2,
        n_heads=n_heads,
        tied=tied,
        gamma=0.0,
        rope_base=100.0,
        rngs=nnx.Rngs(14),
        dtype=F64,
    )
    # random norm scales, so the test sees whether each scale is used where it should be
    scales = jnp.asarray(np.random.default_rng(15).normal(size=2 * 2 * d + d))
    model.attention_norm[...] = 1 + scales[: 2 * d].reshape(2, d)
    model.mlp_norm[...] = 1 + scales[2 * d : 4 * d].reshape(2, d)
    model.final_norm[...] = 1 + scales[4 * d :]
    tokens = np.asarray(random_tokens(16, (3, 6), vocab_size))
    W = numpy_weights(model)
    assert W["W_gate"].shape == (2, models.swiglu_hidden(d), d) and models.swiglu_hidden(128) == 344
    assert ("W_U" in nnx.state(model)) is not tied
    if tied:
        np.testing.assert_array_equal(W["W_U"], W["W_E"])

    logits, maps = reference_gpt(W, tokens, n_heads, base=100.0)
    model_logits, model_maps = jitted(model)(tokens), jitted(model, "attention_maps")(tokens)
    assert model_logits.shape == (3, 6, vocab_size)
    assert relative_error(model_logits, logits) <= 1e-12
    assert model_maps.shape == (2, 3, n_heads, 6, 6)
    assert relative_error(model_maps, maps) <= 1e-12


def test_gpt_is_causal():
    vocab_size, t = 13, 3  # the shapes of test_gpt_forward_matches_reference: no new compiles
    model = models.GPT(
        vocab_size, 7, 8, n_heads=2, gamma=0.0, rope_base=100.0, rngs=nnx.Rngs(17), dtype=F64
    )
    tokens = random_tokens(18, (3, 6), vocab_size)
    changed = tokens.at[:, t].set((tokens[:, t] + 1) % vocab_size)
    forward = jitted(model)
    before, after = forward(tokens), forward(changed)
    np.testing.assert_array_equal(before[:, :t], after[:, :t])
    assert float(jnp.abs(before[:, t:] - after[:, t:]).min()) > 0.0
    maps = jitted(model, "attention_maps")(tokens)
    assert float(jnp.abs(jnp.triu(maps, k=1)).max()) == 0.0
    np.testing.assert_allclose(maps.sum(axis=-1), 1.0, rtol=1e-14)


def test_tiny_init_gives_uniform_attention():
    """Uniform attention at small init (as in [RB] Lemma 1): z_s = O(ε⁴), so a_s = 1/L."""
    length = 5  # the shapes of the forward tests (d = 8, d_k = 4), so nothing new is compiled
    model = models.AttentionOnly(10, 6, 8, 4, gamma=3.0, rngs=nnx.Rngs(19), dtype=F64)
    attention = jitted(model, "attention")(random_tokens(20, (6, length), 10))
    assert float(jnp.abs(attention - 1 / length).max()) <= 1e-6
    transformer = models.OneLayerTransformer(
        9, length, 6, d_ff=10, gamma=3.0, rngs=nnx.Rngs(21), dtype=F64
    )
    attention = jitted(transformer, "attention")(random_tokens(22, (4, length), 9))
    assert float(jnp.abs(attention - 1 / length).max()) <= 1e-6


@pytest.mark.parametrize("name", ["ffn", "attention", "transformer", "gpt"])
def test_float32_models_run_under_jit(name):
    model = models.create(name, vocab_size=6, seq_len=4, d=8, rngs=nnx.Rngs(23))
    logits = jitted(model)(random_tokens(24, (3, 4), 6))
    assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())
    assert logits.shape == ((3, 4, 6) if name == "gpt" else (3, 6))
    assert all(w.dtype == jnp.float32 for w in models.weights(model).values())


def _built(spec: models.ModelSpec, **sizes):
    """``spec``'s model at small sizes, from `models.create` (a fixed embedding when it needs
    one)."""
    needs = inspect.signature(spec.factory.__init__).parameters
    extra = {"embedding": np.ones((6, sizes.get("d", 8)))} if "embedding" in needs else {}
    return models.create(spec.name, vocab_size=6, seq_len=4, rngs=nnx.Rngs(0), **sizes, **extra)


@pytest.mark.parametrize("spec", models.REGISTRY, ids=lambda spec: spec.name)
def test_each_spec_states_the_facts_of_its_model(spec):
    """What a `models.ModelSpec` says of its model holds for the model `create` builds: its
    class and paper roles, its parameter count, whether it attends and takes an activation
    or a sequence length."""
    assert models.get(spec.name) is spec and spec.name in models.names()
    model = _built(spec, d=8)
    assert type(model) is spec.factory and models.spec_of(model) is spec
    assert tuple(models.weights(model)) == spec.roles
    needs = inspect.signature(spec.factory.__init__).parameters
    assert spec.activation == ("activation" in needs)
    assert spec.sequence == ("seq_len" in needs)
    assert spec.attention == callable(getattr(model, "attention", None))
    if spec.attention:  # last-row attention weights [B, L], rows summing to 1
        rows = model.attention(random_tokens(1, (3, 4), 6)).sum(axis=-1)
        np.testing.assert_allclose(rows, 1.0, rtol=1e-6)
    if spec.parameters is not None:
        for d in (8, 12):
            count = sum(p.size for p in jax.tree.leaves(nnx.state(_built(spec, d=d), nnx.Param)))
            assert spec.parameters(models.Sizes(V=6, L=4, d=d)) == count, d
        if "positional" in needs:  # no positional table: its L d parameters are not counted
            model = _built(spec, d=8, positional=False)
            count = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
            assert spec.parameters(models.Sizes(V=6, L=4, d=8, positional=False)) == count


def test_spec_of_refuses_what_is_not_a_model():
    with pytest.raises(TypeError, match="model"):
        models.spec_of(object())


def test_create_and_weights_keys():
    assert len(set(models.names())) == len(models.REGISTRY)
    expected = {
        "ffn": {"W_E", "W_U"},
        "attention": {"W_E", "W_U", "W_Q", "W_K", "W_V", "W_O", "P"},
        "transformer": {"W_E", "W_U", "W_Q", "W_K", "W_V", "W_O", "P", "W_f1", "W_f2"},
    }
    # the shapes of test_float32_models_run_under_jit, so nothing new is compiled
    for name, keys in expected.items():
        model = models.create(name, vocab_size=6, seq_len=4, d=8, rngs=nnx.Rngs(0))
        assert set(models.weights(model)) == keys
        assert isinstance(
            model,
            {"ffn": models.FFN, "attention": models.AttentionOnly}.get(
                name, models.OneLayerTransformer
            ),
        )
    assert model.d_ff == 32  # the transformer's default d_ff = 4d
    ffn = models.create("ffn", vocab_size=6, d=8, activation="z^3", rngs=nnx.Rngs(0))
    assert ffn.activation == activations.Activation("monomial", (0.0, 0.0, 1.0))
    assert models.weights(ffn)["W_E"].shape == (6, 8)
    gpt = models.create("gpt", vocab_size=6, seq_len=4, d=8, rngs=nnx.Rngs(0))
    assert isinstance(gpt, models.GPT) and gpt.n_layers == 2
    for role in ("W_Q", "W_K", "W_V", "W_O"):
        assert models.weights(gpt)[role].shape == (2, 8, 8)


# --------------------------------------------------------------------------------------------
# FixedEmbeddingFFN: w^E = λ E with E frozen (Fig. 8D)


def fixed_embedding(seed: int = 30, shape: tuple[int, int] = (6, 8)) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def test_fixed_embedding_ffn_forward_equals_ffn_with_scaled_embedding():
    E = fixed_embedding()
    fixed = models.FixedEmbeddingFFN(
        6, E, activation="poly:0.5,-1,0.25", gamma=0.3, scale=1.7, rngs=nnx.Rngs(31), dtype=F64
    )
    ffn = models.FFN(6, 8, activation="poly:0.5,-1,0.25", gamma=0.3, rngs=nnx.Rngs(0), dtype=F64)
    ffn.W_E[...] = 1.7 * jnp.asarray(E)
    ffn.W_U[...] = fixed.W_U[...]
    tokens = random_tokens(32, (5, 3), 6)
    np.testing.assert_allclose(jitted(fixed)(tokens), jitted(ffn)(tokens), rtol=1e-13)
    weights = numpy_weights(fixed)
    assert set(weights) == {"W_E", "W_U"}
    np.testing.assert_allclose(weights["W_E"], 1.7 * E, rtol=1e-15)
    # W_U is the W_U of an FFN built from the same rngs (§5.5 rule, std d^{-γ})
    reference = models.FFN(6, 8, gamma=0.3, rngs=nnx.Rngs(31), dtype=F64)
    np.testing.assert_array_equal(weights["W_U"], np.asarray(reference.W_U[...]))


def test_fixed_embedding_ffn_trains_only_scale_and_unembedding():
    E = fixed_embedding()
    model = models.create(
        "ffn_fixed", vocab_size=6, seq_len=3, embedding=E, gamma=0.3, rngs=nnx.Rngs(33), dtype=F64
    )
    graphdef, state = nnx.split(model)
    assert {str(path[0]) for path, _ in nnx.to_flat_state(state)} == {"W_U", "scale"}
    tokens, labels = random_tokens(34, (7, 3), 6), random_tokens(35, (7, 1), 6)[:, 0]

    def loss(state):
        logits = nnx.merge(graphdef, state)(tokens)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

    grads = jax.grad(loss)(state)
    assert float(jnp.abs(grads["scale"][...])) > 0
    assert float(jnp.abs(grads["W_U"][...]).max()) > 0
    stepped = jax.tree.map(lambda p, g: p - 0.1 * g, state, grads)
    moved = nnx.merge(graphdef, stepped)
    np.testing.assert_array_equal(moved.embedding.array, E)  # E itself never changes
    np.testing.assert_allclose(models.weights(moved)["W_E"], moved.scale[...] * E, rtol=1e-15)


def test_frozen_array_is_hashable_by_content():
    E = fixed_embedding()
    a, b = models.FrozenArray(E), models.FrozenArray(E.copy())
    assert a == b and hash(a) == hash(b) and a != models.FrozenArray(E + 1)
    assert not a.array.flags.writeable and "shape=(6, 8)" in repr(a)
    kwargs = tuple(sorted({"embedding": a, "d": 8}.items()))  # what train_sweep caches on
    assert hash(kwargs) == hash(tuple(sorted({"embedding": b, "d": 8}.items())))
    model = models.create("ffn_fixed", vocab_size=6, embedding=a, rngs=nnx.Rngs(0), dtype=F64)
    assert model.d == 8 and model.embedding == a


@pytest.mark.parametrize(
    "embedding",
    [np.zeros((5, 8)), np.zeros(8), np.zeros((6, 0)), np.full((6, 8), np.nan), [["a"] * 8] * 6],
)
def test_fixed_embedding_bad_embedding_names_embedding(embedding):
    with pytest.raises(ValueError, match=r"^embedding "):
        models.FixedEmbeddingFFN(6, embedding, rngs=nnx.Rngs(0))


def test_fixed_embedding_bad_d_and_scale():
    with pytest.raises(ValueError, match=r"^embedding "):
        models.FixedEmbeddingFFN(6, fixed_embedding(), d=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"^scale "):
        models.FixedEmbeddingFFN(6, fixed_embedding(), scale=float("inf"), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError):
        models.create("ffn_fixed", vocab_size=6, rngs=nnx.Rngs(0))  # embedding is required


# --------------------------------------------------------------------------------------------
# activations


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("relu", activations.Activation("relu", None)),
        ("gelu", activations.Activation("gelu", None)),
        ("identity", activations.Activation("identity", (1.0,))),
        ("poly:1,0.5,-2", activations.Activation("poly", (1.0, 0.5, -2.0))),
        (("poly", (1, 0.5)), activations.Activation("poly", (1.0, 0.5))),
        ("z^3", activations.Activation("monomial", (0.0, 0.0, 1.0))),
        ("monomial:2", activations.Activation("monomial", (0.0, 1.0))),
        (("monomial", 1), activations.Activation("monomial", (1.0,))),
        (activations.Activation("poly", (0.0, 3.0)), activations.Activation("poly", (0.0, 3.0))),
    ],
)
def test_activation_specs_parse(spec, expected):
    assert activations.get(spec) == expected
    assert activations.get(spec).name in activations.names()


@pytest.mark.parametrize("spec", ["relu", "gelu", "identity", "poly:0.3,-1,0.5,0.2", "z^4"])
def test_activation_derivative_matches_autodiff(spec):
    activation = activations.get(spec)
    z = jnp.linspace(-2.0, 2.0, 41, dtype=F64) + 0.013  # avoid the ReLU kink at 0
    autodiff = jax.vmap(jax.grad(lambda x: activations.apply(activation, x)))(z)
    derivative = jax.jit(lambda x: activations.derivative(activation, x))(z)
    np.testing.assert_allclose(derivative, autodiff, rtol=1e-13, atol=1e-14)
    assert derivative.dtype == F64
    if activation.coefficients is not None:
        z_np = np.asarray(z)
        power_sum = sum(c * z_np**k for k, c in enumerate(activation.coefficients, start=1))
        np.testing.assert_allclose(activations.apply(activation, z), power_sum, rtol=1e-13)


def test_gelu_effective_coefficients_are_its_taylor_series_to_degree_4():
    """GELU's signature-flow coefficients truncate the series of ``z Phi(z)``: the error of the
    degree-4 polynomial is the next term, ``z^6 / (40 sqrt(2 pi))``, at small ``z``."""
    coefficients = activations.effective_coefficients("gelu")
    assert len(coefficients) == 4
    z = np.array([0.05, 0.1, 0.2, -0.1])
    polynomial = sum(c * z**k for k, c in enumerate(coefficients, start=1))
    exact = np.asarray(activations.apply(activations.get("gelu"), jnp.asarray(z, F64)))
    next_term = z**6 / (40 * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(exact - polynomial, next_term, rtol=0.05, atol=1e-17)


def test_relu_derivative_is_zero_at_zero_and_dtype_is_kept():
    relu = activations.get("relu")
    assert float(activations.derivative(relu, jnp.zeros((), F64))) == 0.0
    z32 = jnp.ones(3, jnp.float32)
    for spec in ("relu", "gelu", "poly:1,2"):
        assert activations.apply(activations.get(spec), z32).dtype == jnp.float32
        assert activations.derivative(activations.get(spec), z32).dtype == jnp.float32


@pytest.mark.parametrize(
    "spec",
    [
        "tanh",
        "poly:",
        "poly:a,1",
        "poly:1,inf",
        "z^0",
        "monomial:1.5",
        ("monomial", 0),
        ("monomial", True),
        ("monomial", 2.0),
        ("poly", "12"),
        ("poly", ()),
        3,
        None,
        activations.Activation("relu", (1.0,)),
        activations.Activation("identity", (2.0,)),
        activations.Activation("swish", None),
    ],
)
def test_bad_activation_specs_raise(spec):
    with pytest.raises(ValueError, match="activation"):
        activations.get(spec)


# --------------------------------------------------------------------------------------------
# argument validation


@pytest.mark.parametrize(
    ("build", "parameter"),
    [
        (lambda r: models.FFN(0, 4, rngs=r), "vocab_size"),
        (lambda r: models.FFN(5, 0, rngs=r), "d"),
        (lambda r: models.FFN(5, 4, init="xavier", rngs=r), "init"),
        (lambda r: models.FFN(5, 4, activation="tanh", rngs=r), "activation"),
        (lambda r: models.FFN(5, 4, gamma=float("nan"), rngs=r), "gamma"),
        (lambda r: models.FFN(5, 4, gamma=jnp.inf, rngs=r), "gamma"),
        (lambda r: models.FFN(5, 4, gamma=jnp.ones(2), rngs=r), "gamma"),
        (lambda r: models.FFN(5, 4, dtype=jnp.int32, rngs=r), "dtype"),
        (lambda r: models.AttentionOnly(5, 0, 4, rngs=r), "seq_len"),
        (lambda r: models.AttentionOnly(5, 3, 4, 0, rngs=r), "d_k"),
        (lambda r: models.OneLayerTransformer(5, 3, 4, d_ff=0, rngs=r), "d_ff"),
        (lambda r: models.GPT(5, 3, 8, n_heads=3, rngs=r), "n_heads"),
        (lambda r: models.GPT(5, 3, 8, n_heads=8, rngs=r), "n_heads"),  # odd head_dim
        (lambda r: models.GPT(5, 3, 8, n_layers=0, rngs=r), "n_layers"),
        (lambda r: models.GPT(5, 3, 8, rope_base=-1.0, rngs=r), "rope_base"),
        (lambda r: models.create("mlp", vocab_size=5, seq_len=3, rngs=r), "model"),
        (lambda r: models.create("gpt", vocab_size=5, rngs=r), "seq_len"),
    ],
)
def test_bad_arguments_name_the_parameter(build, parameter):
    with pytest.raises(ValueError, match=rf"^{parameter} "):
        build(nnx.Rngs(0))


def test_bad_tokens_and_model_raise():
    model = models.AttentionOnly(10, 6, 8, 4, rngs=nnx.Rngs(0), dtype=F64)
    with pytest.raises(ValueError, match=r"^tokens "):
        model(jnp.zeros((2, 7), jnp.int32))  # longer than seq_len
    with pytest.raises(ValueError, match=r"^tokens "):
        model(jnp.zeros((2, 3), jnp.float32))

    class NotAModel(nnx.Module):
        pass

    with pytest.raises(TypeError, match=r"^model "):
        models.weights(NotAModel())
