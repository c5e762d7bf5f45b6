"""The simulated models (paper §4.1, §5.1, App. A), in Flax NNX, with small initialization.

Five architectures, each storing its weights in the paper's roles with **rows as vectors**:

- ``FFN`` — the FFN/CBOW model f(X) = W^U σ(Σ_i w^E_{x_i}) (paper §4.1);
- ``FixedEmbeddingFFN`` — the same FFN with a frozen embedding w^E_α = λ E_α, only the scalar λ
  and W^U trained (the fixed-embedding runs of the paper's Fig. 8D);
- ``AttentionOnly`` — one causal attention head, last-position prediction (paper §5.1);
- ``OneLayerTransformer`` — attention + FFN with residuals, no LayerNorm ([RB] Def. 2);
- ``GPT`` — a small pre-norm decoder (RMSNorm, RoPE, SwiGLU) for the LM run (paper App. A.4).

``W_E [V, d]`` (row α is w^E_α) and ``W_U [V, d]`` (row ν is w^U_ν); attention projections act on
column vectors as in paper §5.1 (q_s = W_Q h_s), so ``W_Q, W_K, W_V [d_k, d]`` and ``W_O [d, d_k]``;
``weights(model)`` returns these as plain arrays, so theory code never touches a Flax object.
``tokens [B, L]`` are integers, L ≤ ``seq_len``; ``GPT`` returns next-token logits ``[B, T, V]``,
the others last-position logits ``[B, V]``; all arithmetic runs in the parameter ``dtype``.

**Initialization** (theory/transformer.md §5): every weight matrix is drawn iid N(0, std²) with
std = d^{-γ} (``init="d"``, the default) or d_in^{-γ} (``init="fan_in"``, d_in the matrix's input
dimension); γ may be traced, so construction can be vmapped over γ.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ctx_staircase import activations
from ctx_staircase.internal import (
    WrongTypeError,
    check_choice,
    check_int,
    check_real,
    check_scalar,
)

__all__ = [
    "FFN",
    "GPT",
    "REGISTRY",
    "AttentionOnly",
    "FixedEmbeddingFFN",
    "FrozenArray",
    "ModelSpec",
    "OneLayerTransformer",
    "Sizes",
    "create",
    "get",
    "init_std",
    "names",
    "spec_of",
    "swiglu_hidden",
    "task_names",
    "weights",
]

_INIT_MODES = ("d", "fan_in")
_RMS_NORM_EPS = 1e-6

# --------------------------------------------------------------------------------------------
# argument checks (ValueError naming the parameter, the value and what is allowed)


_FLOAT_DTYPES = "a floating dtype (float32, float64)"


def _check_dtype(dtype) -> np.dtype:
    try:
        dtype = np.dtype(dtype)
    except TypeError as error:
        raise WrongTypeError(
            f"dtype must be a floating dtype (float32, float64); got {dtype!r}"
        ) from error
    if not np.issubdtype(dtype, np.floating):
        raise ValueError(f"dtype must be a floating dtype (float32, float64); got {dtype}")
    return dtype


def _position_sum(rows: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``rows [B, L, d]`` summed over the positions ``mask [B, L]`` keeps (None: all). A dropped
    position adds an exact zero, so a sequence padded with dropped positions sums to the same
    bits as the unpadded one."""
    if mask is None:
        return rows.sum(axis=1)
    return jnp.where(mask[..., None], rows, jnp.zeros((), rows.dtype)).sum(axis=1)


def _check_tokens(tokens, seq_len: int | None = None) -> jax.Array:
    tokens = jnp.asarray(tokens)
    if tokens.ndim != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(
            f"tokens must be an integer array [B, L]; got {tokens.dtype} {tokens.shape}"
        )
    if seq_len is not None and tokens.shape[1] > seq_len:
        raise ValueError(f"tokens must be at most seq_len={seq_len} long; got {tokens.shape[1]}")
    return tokens


# --------------------------------------------------------------------------------------------
# initialization (the paper's std d^{-γ}, or fan-in as in [RB])


def init_std(gamma, fan: int, dtype=jnp.float32) -> jax.Array:
    """The initial standard deviation fan^{-γ}, a scalar of ``dtype``; γ may be traced."""
    return jnp.power(jnp.asarray(fan, dtype), -jnp.asarray(gamma).astype(dtype))


def _initializer(d: int, gamma, init: str, rngs: nnx.Rngs, dtype):
    """``draw(shape, d_in) -> nnx.Param``: N(0, std²) entries, one ``rngs.params()`` key per call
    (so a model's draws come in a fixed order), std = d^{-γ} for ``init="d"`` and d_in^{-γ} for
    ``init="fan_in"`` (theory/transformer.md §5)."""
    check_scalar(gamma, "gamma")
    init = check_choice(init, "init", _INIT_MODES)

    def draw(shape: tuple[int, ...], d_in: int) -> nnx.Param:
        fan = d if init == "d" else d_in
        return nnx.Param(_scaled_normal(rngs.params(), gamma, fan, shape, dtype))

    return draw


@functools.partial(jax.jit, static_argnames=("fan", "shape", "dtype"))
def _scaled_normal(key: jax.Array, gamma, fan: int, shape: tuple[int, ...], dtype) -> jax.Array:
    """fan^{-γ} · N(0, 1) of ``shape``; one compiled call per shape (construction stays fast)."""
    return init_std(gamma, fan, dtype) * jax.random.normal(key, shape, dtype)


# --------------------------------------------------------------------------------------------
# pure forward pieces on plain arrays


def _last_row_attention(h: jax.Array, W_Q: jax.Array, W_K: jax.Array, d: int) -> jax.Array:
    """a_s = softmax_s(h_s^T W_K^T W_Q h_L / √d) for h [B, L, d]; returns [B, L] (paper §5.1).

    The causal mask leaves the last row unmasked: position L sees every s ≤ L.
    """
    keys = h @ W_K.T  # [B, L, d_k]
    query = h[:, -1] @ W_Q.T  # [B, d_k]
    logits = jnp.einsum("bsk,bk->bs", keys, query) / math.sqrt(d)
    return jax.nn.softmax(logits, axis=-1)


def _attention_value(h, attention, W_V, W_O) -> jax.Array:
    """W_O W_V Σ_s a_s h_s for h [B, L, d], attention [B, L]; returns [B, d]."""
    mixed = jnp.einsum("bs,bsd->bd", attention, h)
    return (mixed @ W_V.T) @ W_O.T


def _rms_norm(x: jax.Array, scale: jax.Array, eps: float = _RMS_NORM_EPS) -> jax.Array:
    """x / sqrt(mean(x²) + eps) ⊙ scale over the last axis."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def _rotary(x: jax.Array, base: float) -> jax.Array:
    """RoPE on x [B, T, H, head_dim], "rotate-half" layout (GPT-NeoX/LLaMA).

    Coordinates i and i + head_dim/2 form a pair rotated by the angle t·base^{-2i/head_dim} at
    position t = 0, 1, ..., T-1.
    """
    _, length, _, head_dim = x.shape
    half = head_dim // 2
    frequencies = jnp.power(
        jnp.asarray(base, x.dtype), -jnp.arange(half, dtype=x.dtype) * (2.0 / head_dim)
    )
    angles = jnp.arange(length, dtype=x.dtype)[:, None] * frequencies[None, :]  # [T, half]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    first, second = x[..., :half], x[..., half:]
    return jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


def _causal_self_attention(x, W_Q, W_K, W_V, W_O, n_heads: int, rope_base: float):
    """Multi-head causal self-attention with RoPE on x [B, T, d]; heads are row blocks of
    W_Q, W_K, W_V [d, d] and column blocks of W_O [d, d]. Returns (output [B, T, d],
    attention [B, H, T, T])."""
    batch, length, d = x.shape
    head_dim = d // n_heads

    def heads(W):
        return (x @ W.T).reshape(batch, length, n_heads, head_dim)

    queries, keys = _rotary(heads(W_Q), rope_base), _rotary(heads(W_K), rope_base)
    logits = jnp.einsum("bthe,bshe->bhts", queries, keys) / math.sqrt(head_dim)
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    attention = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
    mixed = jnp.einsum("bhts,bshe->bthe", attention, heads(W_V)).reshape(batch, length, d)
    return mixed @ W_O.T, attention


def _swiglu(x, W_gate, W_up, W_down) -> jax.Array:
    """W_down (silu(W_gate x) ⊙ W_up x) on x [..., d]."""
    return (jax.nn.silu(x @ W_gate.T) * (x @ W_up.T)) @ W_down.T


# --------------------------------------------------------------------------------------------
# models


class FFN(nnx.Module):
    """f(X) = W_U σ(Σ_i w^E_{x_i}) (paper §4.1): no hidden matrix, bias, norm or position.

    Parameters ``W_E [V, d]``, ``W_U [V, d]``; ``activation`` is an ``Activation``.
    """

    def __init__(
        self,
        vocab_size: int,
        d: int = 128,
        *,
        activation="relu",
        gamma=0.8,
        init: str = "d",
        rngs: nnx.Rngs,
        dtype=jnp.float32,
    ):
        self.vocab_size = check_int(vocab_size, "vocab_size")
        self.d = check_int(d, "d")
        self.activation = activations.get(activation)
        draw = _initializer(self.d, gamma, init, rngs, _check_dtype(dtype))
        self.W_E = draw((self.vocab_size, self.d), d_in=self.vocab_size)
        self.W_U = draw((self.vocab_size, self.d), d_in=self.d)

    def hidden(self, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """h = Σ_i w^E_{x_i} over the positions ``mask`` keeps: tokens int [B, L], mask bool
        [B, L] or None (every position) -> [B, d]."""
        return _position_sum(self.W_E[...][_check_tokens(tokens)], mask)

    def __call__(self, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Logits W_U σ(h): tokens int [B, L] (mask as in `hidden`) -> [B, V]."""
        return activations.apply(self.activation, self.hidden(tokens, mask)) @ self.W_U[...].T


class FrozenArray:
    """A read-only array that is hashable by content, for array-valued model arguments.

    ``sweep.train_sweep`` caches compiled lanes on its model kwargs and Flax keeps non-array
    module attributes in the (hashed) graph definition, so a constant array passes through both
    as this wrapper. ``array`` is a read-only float NumPy copy; two wrappers are equal when their
    dtypes, shapes and values are; ``repr`` names the shape, dtype and a SHA-1 prefix of the
    contents (what a sweep folder records).
    """

    __slots__ = ("_digest", "array")

    def __init__(self, array) -> None:
        if isinstance(array, FrozenArray):
            array = array.array
        value = np.array(array, copy=True)
        if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
            raise ValueError(f"array must be a real numeric array; got dtype {value.dtype}")
        value.setflags(write=False)
        self.array = value
        meta = f"{value.dtype.str}{value.shape}".encode()
        self._digest = hashlib.sha1(meta + np.ascontiguousarray(value).tobytes()).hexdigest()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def __hash__(self) -> int:
        return hash(self._digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrozenArray) and self._digest == other._digest

    def __repr__(self) -> str:
        value = self.array
        return f"FrozenArray(shape={value.shape}, dtype={value.dtype}, sha1={self._digest[:12]})"


class FixedEmbeddingFFN(nnx.Module):
    """The FFN of paper §4.1 with a frozen embedding direction: w^E_α = λ E_α (paper Fig. 8D).

    f(X) = W_U σ(λ Σ_i E_{x_i}). ``embedding`` is the fixed matrix ``E [V, d]`` (row α is E_α; a
    NumPy/JAX array or a `FrozenArray`); it is stored as a `FrozenArray` in the graph definition,
    not in the model state, so it gets no gradient, no optimizer state and no weight decay. The
    trainable parameters are the scalar ``scale`` (λ, initialized to ``scale``, default 1) and
    ``W_U [V, d]``, drawn by the initialization rule with ``gamma`` and ``init``, and identical to
    the W_U of an `FFN` built from the same ``rngs`` (a controlled comparison with the trainable
    run). ``d`` defaults to ``E.shape[1]``; a given ``d`` must match it. ``weights`` returns
    W_E = λ E.

    Fig. 8D uses (i) E_α = R φ^{y;1}_α v (first-order signature) and (iii) E_α = v_α (random);
    both are built by the experiment (`ctx_staircase.experiments.fig8_role`), not here.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding,
        d: int | None = None,
        *,
        activation="relu",
        gamma=0.8,
        init: str = "d",
        scale: float = 1.0,
        rngs: nnx.Rngs,
        dtype=jnp.float32,
    ):
        self.vocab_size = check_int(vocab_size, "vocab_size")
        try:
            frozen = FrozenArray(embedding)
        except (TypeError, ValueError) as error:
            raise ValueError(f"embedding must be a real array [vocab_size, d]; {error}") from error
        if frozen.array.ndim != 2 or frozen.shape[0] != self.vocab_size or frozen.shape[1] < 1:
            raise ValueError(
                f"embedding must have shape [vocab_size, d] = [{self.vocab_size}, d]; "
                f"got {frozen.shape}"
            )
        if not np.all(np.isfinite(frozen.array)):
            raise ValueError("embedding must be finite")
        self.d = check_int(frozen.shape[1] if d is None else d, "d")
        if self.d != frozen.shape[1]:
            raise ValueError(f"embedding must have d={self.d} columns; got {frozen.shape[1]}")
        check_real(scale, "scale")
        self.embedding = frozen
        self.activation = activations.get(activation)
        dtype = _check_dtype(dtype)
        draw = _initializer(self.d, gamma, init, rngs, dtype)
        rngs.params()  # the key FFN spends on W_E, so W_U equals an FFN's from the same rngs
        self.W_U = draw((self.vocab_size, self.d), d_in=self.d)
        self.scale = nnx.Param(jnp.asarray(scale, dtype))

    @property
    def W_E(self) -> jax.Array:
        """λ E as an array ``[V, d]`` of the parameter dtype."""
        E = jnp.asarray(self.embedding.array, dtype=self.W_U[...].dtype)
        return self.scale[...] * E

    def hidden(self, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """h = λ Σ_i E_{x_i} over the positions ``mask`` keeps: tokens int [B, L], mask bool
        [B, L] or None (every position) -> [B, d]."""
        E = jnp.asarray(self.embedding.array, dtype=self.W_U[...].dtype)
        return self.scale[...] * _position_sum(E[_check_tokens(tokens)], mask)

    def __call__(self, tokens: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Logits W_U σ(h): tokens int [B, L] (mask as in `hidden`) -> [B, V]."""
        return activations.apply(self.activation, self.hidden(tokens, mask)) @ self.W_U[...].T


class _LastRowAttentionModel(nnx.Module):
    """The embedding and last-row attention head `AttentionOnly` and `OneLayerTransformer` share.

    ``W_E [V, d]``, ``P [seq_len, d]`` (only if ``positional``), ``W_Q, W_K, W_V [d_k, d]`` and
    ``W_O [d, d_k]``, drawn in this order (part of the determinism contract).
    """

    def _init_attention(self, vocab_size, seq_len, d, d_k, gamma, init, rngs, dtype, positional):
        """Check the sizes, draw the shared parameters and return the initializer for the rest."""
        self.vocab_size = check_int(vocab_size, "vocab_size")
        self.seq_len = check_int(seq_len, "seq_len")
        self.d = check_int(d, "d")
        self.positional = bool(positional)
        draw = _initializer(self.d, gamma, init, rngs, _check_dtype(dtype))
        self.W_E = draw((self.vocab_size, self.d), d_in=self.vocab_size)
        if self.positional:
            self.P = draw((self.seq_len, self.d), d_in=self.seq_len)
        self.W_Q = draw((d_k, self.d), d_in=self.d)
        self.W_K = draw((d_k, self.d), d_in=self.d)
        self.W_V = draw((d_k, self.d), d_in=self.d)
        self.W_O = draw((self.d, d_k), d_in=d_k)
        return draw

    def embed(self, tokens: jax.Array) -> jax.Array:
        """h_s = w^E_{x_s} + p_s: tokens int [B, L] -> [B, L, d]."""
        tokens = _check_tokens(tokens, self.seq_len)
        h = self.W_E[...][tokens]
        return h + self.P[...][: tokens.shape[1]] if self.positional else h

    def _attend(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(h [B, L, d], a [B, L])``: the embedding and its last-row attention weights."""
        h = self.embed(tokens)
        return h, _last_row_attention(h, self.W_Q[...], self.W_K[...], self.d)

    def attention(self, tokens: jax.Array) -> jax.Array:
        """Last-row attention weights a_s: tokens int [B, L] -> [B, L], rows sum to 1."""
        return self._attend(tokens)[1]


class AttentionOnly(_LastRowAttentionModel):
    """One causal attention head predicting from the last position (paper §5.1, App. A.2.1).

    h_s = w^E_{x_s} + p_s; z_s = h_s^T W_K^T W_Q h_L / √d (1/√d, not 1/√d_k, as the theory);
    a = softmax(z); f = W_U W_O W_V Σ_s a_s h_s. No residual, norm, FFN or bias. Parameters
    ``W_E [V, d]``, ``P [seq_len, d]`` (learned positions, only if ``positional``),
    ``W_Q, W_K, W_V [d_k, d]``, ``W_O [d, d_k]``, ``W_U [V, d]``.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        d: int = 128,
        d_k: int = 64,
        *,
        gamma=0.8,
        init: str = "d",
        positional: bool = True,
        rngs: nnx.Rngs,
        dtype=jnp.float32,
    ):
        self.d_k = check_int(d_k, "d_k")
        draw = self._init_attention(
            vocab_size, seq_len, d, self.d_k, gamma, init, rngs, dtype, positional
        )
        self.W_U = draw((self.vocab_size, self.d), d_in=self.d)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Logits f = W_U W_O W_V Σ_s a_s h_s: tokens int [B, L] -> [B, V]."""
        h, attention = self._attend(tokens)
        return _attention_value(h, attention, self.W_V[...], self.W_O[...]) @ self.W_U[...].T


class OneLayerTransformer(_LastRowAttentionModel):
    """Attention then FFN, both with residuals, no LayerNorm ([RB] Def. 2).

    h = W_E[x] + P; a = softmax_s(h_s^T W_K^T W_Q h_L / √d); u = h_L + W_O W_V Σ_s a_s h_s;
    v = u + W_f2 σ(W_f1 u); logits W_U v, from the last position. Parameters ``W_E [V, d]``,
    ``P [seq_len, d]``, ``W_Q, W_K, W_V, W_O [d, d]``, ``W_f1 [d_ff, d]``, ``W_f2 [d, d_ff]``,
    ``W_U [V, d]``; ``d_ff`` defaults to 4d.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        d: int = 128,
        *,
        d_ff: int | None = None,
        activation="relu",
        gamma=0.8,
        init: str = "d",
        rngs: nnx.Rngs,
        dtype=jnp.float32,
    ):
        d = check_int(d, "d")
        self.d_ff = check_int(4 * d if d_ff is None else d_ff, "d_ff")
        self.activation = activations.get(activation)
        draw = self._init_attention(vocab_size, seq_len, d, d, gamma, init, rngs, dtype, True)
        self.W_f1 = draw((self.d_ff, self.d), d_in=self.d)
        self.W_f2 = draw((self.d, self.d_ff), d_in=self.d_ff)
        self.W_U = draw((self.vocab_size, self.d), d_in=self.d)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Last-position logits W_U v: tokens int [B, L] -> [B, V]."""
        h, attention = self._attend(tokens)
        u = h[:, -1] + _attention_value(h, attention, self.W_V[...], self.W_O[...])
        v = u + activations.apply(self.activation, u @ self.W_f1[...].T) @ self.W_f2[...].T
        return v @ self.W_U[...].T


def swiglu_hidden(d: int) -> int:
    """The default SwiGLU width: 8d/3 rounded up to a multiple of 8 (LLaMA), e.g. 344 for d=128."""
    return 8 * math.ceil(d / 3)


class GPT(nnx.Module):
    """A small decoder-only transformer for the language-model run (paper §6, App. A.4).

    x⁰ = W_E[x] (no absolute positions: RoPE on queries and keys); per layer ℓ, pre-norm
    x ← x + Attn_ℓ(RMSNorm(x)), x ← x + SwiGLU_ℓ(RMSNorm(x)); logits W_U RMSNorm(x) at every
    position. Multi-head causal attention with head_dim = d / n_heads, scale 1/√head_dim; RMSNorm
    has a learned scale (init 1) and eps 1e-6; no biases. Per-layer weights are stacked on a
    leading axis: ``W_Q, W_K, W_V, W_O [n_layers, d, d]`` (head h owns rows h·head_dim ... of
    W_Q, W_K, W_V and the same columns of W_O), ``W_gate, W_up [n_layers, hidden, d]``,
    ``W_down [n_layers, d, hidden]``, ``attention_norm, mlp_norm [n_layers, d]``,
    ``final_norm [d]``, ``W_E [V, d]`` and ``W_U [V, d]`` unless ``tied`` (then W_U = W_E).
    ``mlp_hidden`` defaults to ``swiglu_hidden(d)``. At very small initialization
    (d^{-2γ} ≲ 1e-6) the RMSNorm eps dominates the normalizer, so the normalized stream is small.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        d: int = 128,
        *,
        n_layers: int = 2,
        n_heads: int = 4,
        mlp_hidden: int | None = None,
        tied: bool = False,
        gamma=0.8,
        init: str = "d",
        rope_base: float = 10000.0,
        rngs: nnx.Rngs,
        dtype=jnp.float32,
    ):
        self.vocab_size = check_int(vocab_size, "vocab_size")
        self.seq_len = check_int(seq_len, "seq_len")
        self.d = check_int(d, "d")
        self.n_layers = check_int(n_layers, "n_layers")
        self.n_heads = check_int(n_heads, "n_heads")
        if self.d % self.n_heads or (self.d // self.n_heads) % 2:
            raise ValueError(
                f"n_heads must divide d={self.d} into an even head_dim (RoPE rotates pairs); "
                f"got {self.n_heads}"
            )
        hidden = swiglu_hidden(self.d) if mlp_hidden is None else mlp_hidden
        self.mlp_hidden = check_int(hidden, "mlp_hidden")
        self.rope_base = check_real(rope_base, "rope_base", low=0, low_open=True)
        self.tied = bool(tied)
        dtype = _check_dtype(dtype)
        draw = _initializer(self.d, gamma, init, rngs, dtype)
        layers, d, hidden = self.n_layers, self.d, self.mlp_hidden
        self.W_E = draw((self.vocab_size, d), d_in=self.vocab_size)
        self.W_Q = draw((layers, d, d), d_in=d)
        self.W_K = draw((layers, d, d), d_in=d)
        self.W_V = draw((layers, d, d), d_in=d)
        self.W_O = draw((layers, d, d), d_in=d)
        self.W_gate = draw((layers, hidden, d), d_in=d)
        self.W_up = draw((layers, hidden, d), d_in=d)
        self.W_down = draw((layers, d, hidden), d_in=hidden)
        self.attention_norm = nnx.Param(jnp.ones((layers, d), dtype))
        self.mlp_norm = nnx.Param(jnp.ones((layers, d), dtype))
        self.final_norm = nnx.Param(jnp.ones((d,), dtype))
        if not self.tied:
            self.W_U = draw((self.vocab_size, d), d_in=d)

    def forward(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Logits and attention in one pass: tokens int [B, T] -> (logits [B, T, V],
        attention maps [n_layers, B, n_heads, T, T])."""
        tokens = _check_tokens(tokens, self.seq_len)
        x = self.W_E[...][tokens]
        maps = []
        for layer in range(self.n_layers):
            attended, attention = _causal_self_attention(
                _rms_norm(x, self.attention_norm[...][layer]),
                self.W_Q[...][layer],
                self.W_K[...][layer],
                self.W_V[...][layer],
                self.W_O[...][layer],
                self.n_heads,
                self.rope_base,
            )
            x = x + attended
            maps.append(attention)
            normed = _rms_norm(x, self.mlp_norm[...][layer])
            x = x + _swiglu(
                normed, self.W_gate[...][layer], self.W_up[...][layer], self.W_down[...][layer]
            )
        W_U = self.W_E[...] if self.tied else self.W_U[...]
        return _rms_norm(x, self.final_norm[...]) @ W_U.T, jnp.stack(maps)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Next-token logits at every position: tokens int [B, T] -> [B, T, V]."""
        return self.forward(tokens)[0]

    def attention_maps(self, tokens: jax.Array) -> jax.Array:
        """Causal attention weights: tokens int [B, T] -> [n_layers, B, n_heads, T, T]."""
        return self.forward(tokens)[1]


# --------------------------------------------------------------------------------------------
# the registry: one spec per model, and the paper-role weights


class Sizes(NamedTuple):
    """The sizes a model's memory formulas read: vocabulary ``V``, sequence length ``L``, width
    ``d``, attention key width ``d_k``, FFN block width ``d_ff`` (None: ``4 d``) and whether the
    attention models learn positions."""

    V: int
    L: int
    d: int = 128
    d_k: int = 64
    d_ff: int | None = None
    positional: bool = True

    @property
    def ff(self) -> int:
        """The FFN block width, ``4 d`` by default."""
        return 4 * self.d if self.d_ff is None else self.d_ff


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model as the package asks about it.

    Attributes:
        name: its name in `create`, the command line and saved records.
        factory: its class; ``factory(vocab_size, [seq_len,] **kwargs)``.
        roles: its paper-role weights (`weights`), in order.
        sequence: whether it needs ``seq_len`` (learned positions or rotary attention). A model
            without takes a position mask, ``module(tokens, mask)``, so datasets of different
            sequence lengths, padded to one shape, train as lanes of one sweep
            (`sweep.train_sweep`).
        attention: whether it has last-row attention weights, ``module.attention(tokens)``.
        activation: whether it takes an ``activation`` keyword.
        on_tasks: whether ``ctx-staircase train`` trains it on a task from its sizes alone
            (last-position logits ``[B, V]``, no input beyond the keywords).
        parameters: ``parameters(sizes) -> int``, its parameter count (None: not estimated).
        step_elements: ``step_elements(sizes, rows)``, elements a forward and backward pass over
            ``rows`` sequences keeps alive (fitted to XLA's buffer assignment,
            tests/test_budget.py).
        record_elements: ``record_elements(sizes, n, groups)``, elements of one snapshot's
            forward pass over ``n`` samples with ``groups`` token groups (no gradient).
    """

    name: str
    factory: type
    roles: tuple[str, ...]
    sequence: bool
    attention: bool
    activation: bool
    on_tasks: bool
    parameters: Callable[[Sizes], int] | None = None
    step_elements: Callable[[Sizes, int], int] | None = None
    record_elements: Callable[[Sizes, int, int], int] | None = None


def _record(s: Sizes, n: int, groups: int) -> int:
    """The logits ``[n, V]``, the gathered embeddings ``[n, L, d]``, the hidden vector and the
    per-position group masks."""
    return n * (s.V + s.L * s.d + 2 * s.d + (2 + groups) * s.L)


_EMBEDDING = ("W_E", "W_U")
_ATTENTION = ("W_Q", "W_K", "W_V", "W_O", "P")

#: Every model, in the order of `names`.
REGISTRY: tuple[ModelSpec, ...] = (
    ModelSpec(
        "ffn", FFN, _EMBEDDING, sequence=False, attention=False, activation=True, on_tasks=True,
        parameters=lambda s: 2 * s.V * s.d,
        # the gathered embeddings [rows, L, d], the hidden vector and its activation [rows, d],
        # the logits and their gradient [rows, V]
        step_elements=lambda s, rows: rows * (s.L * s.d + 2 * s.d + 2 * s.V),
        record_elements=_record,
    ),
    ModelSpec(
        "ffn_fixed", FixedEmbeddingFFN, _EMBEDDING, sequence=False, attention=False,
        activation=True, on_tasks=False,
        parameters=lambda s: s.V * s.d + 1,  # W_U and the scale lambda
        step_elements=lambda s, rows: rows * (s.L * s.d + 2 * s.d + 2 * s.V),
        record_elements=_record,
    ),
    ModelSpec(
        "attention", AttentionOnly, (*_EMBEDDING, *_ATTENTION), sequence=True, attention=True,
        activation=False, on_tasks=True,
        parameters=lambda s: 2 * s.V * s.d + (s.L * s.d if s.positional else 0) + 4 * s.d_k * s.d,
        # the embedded sequence and its keys [rows, L, d + d_k], with their gradients
        step_elements=lambda s, rows: rows * (2 * s.L * (s.d + s.d_k) + 4 * s.d + 2 * s.V),
        record_elements=lambda s, n, groups: _record(s, n, groups) + n * s.L * (s.d + s.d_k),
    ),
    ModelSpec(
        "transformer", OneLayerTransformer, (*_EMBEDDING, *_ATTENTION, "W_f1", "W_f2"),
        sequence=True, attention=True, activation=True, on_tasks=True,
        parameters=lambda s: 2 * s.V * s.d + s.L * s.d + 4 * s.d * s.d + 2 * s.ff * s.d,
        # also the FFN block [rows, d_ff]
        step_elements=lambda s, rows: rows * (4 * s.L * s.d + 2 * s.ff + 6 * s.d + 2 * s.V),
        record_elements=lambda s, n, groups: _record(s, n, groups) + n * (2 * s.L * s.d + s.ff),
    ),
    ModelSpec(
        "gpt", GPT, (*_EMBEDDING, "W_Q", "W_K", "W_V", "W_O", "W_gate", "W_up", "W_down",
                     "attention_norm", "mlp_norm", "final_norm"),
        sequence=True, attention=False, activation=False, on_tasks=False,
    ),
)  # fmt: skip


def names() -> tuple[str, ...]:
    """Model names accepted by ``create``:
    ``("ffn", "ffn_fixed", "attention", "transformer", "gpt")``."""
    return tuple(spec.name for spec in REGISTRY)


def task_names() -> tuple[str, ...]:
    """The models ``ctx-staircase train`` trains on a task (`ModelSpec.on_tasks`)."""
    return tuple(spec.name for spec in REGISTRY if spec.on_tasks)


def get(name: str) -> ModelSpec:
    """The `ModelSpec` of model ``name``; ValueError naming ``model`` and the choices."""
    check_choice(name, "model", names())
    return next(spec for spec in REGISTRY if spec.name == name)


def spec_of(model: nnx.Module) -> ModelSpec:
    """The `ModelSpec` of a built model; WrongTypeError for any other object."""
    spec = next((s for s in REGISTRY if type(model) is s.factory), None)
    if spec is None:
        raise WrongTypeError(
            f"model must be one of the {names()} models; got {type(model).__name__}"
        )
    return spec


def create(name: str, *, vocab_size: int, seq_len: int | None = None, **kwargs) -> nnx.Module:
    """Build a model by name; ``kwargs`` (``rngs`` required) go to its constructor.

    ``seq_len`` is required by every model whose spec has ``sequence`` (all but ``"ffn"`` and
    ``"ffn_fixed"``, which ignore it). ``"ffn_fixed"`` needs ``embedding=`` (an array ``[V, d]``
    or a `FrozenArray`; pass a `FrozenArray` through ``sweep.train_sweep``, whose kwargs must be
    hashable).
    """
    spec = get(name)
    if not spec.sequence:
        return spec.factory(vocab_size, **kwargs)
    if seq_len is None:
        raise ValueError(f"seq_len must be given for model {name!r}; got None")
    return spec.factory(vocab_size, seq_len, **kwargs)


def weights(model: nnx.Module) -> dict[str, jax.Array]:
    """The paper-role arrays of ``model`` as plain arrays (rows are vectors, see module doc).

    - ``FFN``: W_E, W_U [V, d].
    - ``FixedEmbeddingFFN``: W_E = λ E (the frozen matrix times the trained scalar), W_U [V, d].
    - ``AttentionOnly``: also W_Q, W_K, W_V [d_k, d], W_O [d, d_k], P [seq_len, d] (zeros when
      ``positional=False``, so h = W_E[x] + P[:L] always holds).
    - ``OneLayerTransformer``: W_Q, W_K, W_V, W_O [d, d], P, W_f1 [d_ff, d], W_f2 [d, d_ff].
    - ``GPT``: W_Q, W_K, W_V, W_O [n_layers, d, d] (heads merged), W_gate, W_up, W_down,
      attention_norm, mlp_norm, final_norm; W_U is W_E when ``tied``.
    """
    arrays = {}
    for role in spec_of(model).roles:
        if role == "P" and not getattr(model, "positional", True):
            arrays[role] = jnp.zeros((model.seq_len, model.d), model.W_E[...].dtype)
        elif role == "W_U" and getattr(model, "tied", False):
            arrays[role] = model.W_E[...]
        else:  # a parameter, or an array already (the fixed embedding's λ E)
            arrays[role] = getattr(model, role)[...]
    return arrays
