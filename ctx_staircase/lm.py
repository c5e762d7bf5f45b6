"""A small GPT trained on text, and the signature alignment of its trajectory (the paper §6,
§6.1 and Fig. 7, scaled down to a CPU; theory/lm.md).

- `eligible_tokens` picks the tracked tokens: the ``tracked`` most frequent *eligible* ones (the
  paper's 200). [GAP] (theory/lm.md §2): a token is eligible when it is a word (it contains a
  letter or a digit: punctuation and ``<unk>`` are not) and it occurs at least ``min_count`` times
  as a predicting position of the training stream, so its next-token distribution is estimated
  from at least that many transitions;
- `lm_signatures` counts the data side: the next-token, previous-token and prefix (eq. 20)
  signatures of the tracked tokens;
- `train_lm` trains one `models.GPT` per initial scale gamma, the lanes laid out by
  `sweep.sweep_map` (vmapped on an accelerator, concurrent on CPU), each one compiled
  scan of AdamW with warmup-cosine. Every lane sees the same batches. At every snapshot it
  records the whole ``W_E``, the tracked rows of ``W_U``, the value path ``z^l_alpha = W_O^l W_V^l
  w^E_alpha`` of each layer, and the cosine matrix of the attention-path signature (eq. 22),
  computed on device from the model's own attention;
- `lm_metrics` turns the trajectory into the curves ``rho_next``, ``rho_pre``, ``rho^l_attn`` and
  the held-out rank-one prefix probe with its linear readout (`prefix_probe`), scored against
  the best constant.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ctx_staircase import (
    internal,
    loop,
    metrics,
    models,
    signatures,
    sweep,
    text,
)

__all__ = [
    "LMConfig",
    "LMCurves",
    "LMSignatures",
    "LMTrajectory",
    "PrefixProbe",
    "attention_path_signature",
    "cross_entropy",
    "eligible_tokens",
    "embedding_alignment",
    "gpt",
    "initial_states",
    "lane_data",
    "lane_function",
    "lm_metrics",
    "lm_signatures",
    "most_frequent",
    "optimizer",
    "prefix_probe",
    "spread_windows",
    "step_function",
    "tracked_rows",
    "train_lm",
]

_WORD = re.compile(r"[^\W_]")
_SPECIAL = re.compile(r"^\s*(<.*>|\[.*\])\s*$")  # <unk>, <|endoftext|>, [CLS], ...


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """The GPT, its training and what the trajectory tracks (paper App. A.4 scaled down [R]).

    Attributes:
        d, n_layers, n_heads, tied: the `models.GPT` shape.
        context_length: T, tokens per training window (the model's ``seq_len``).
        batch_size: windows per AdamW step, drawn at uniform random starts of the training stream.
        steps: AdamW steps.
        lr: peak learning rate; linear warm-up over ``warmup_fraction`` of the steps, then cosine
            decay to ``min_lr_ratio * lr`` (App. A.4: warm-up 3 %, ratio 0.1).
        weight_decay: decoupled decay of the weight matrices (not of the RMSNorm scales).
        snapshot_every: k; snapshots at steps 0, k, 2k, ..., and ``steps``.
        tracked: how many eligible tokens the metrics use (the paper's 200).
        min_count: the eligibility count (the module docstring, theory/lm.md §2).
        probe_vocabulary: the prefix probe's next-token and context axes keep this many of the
            most frequent tokens (any token), so ``phi^{y;1}`` stays ``[tracked, K, K]``.
        signature_windows: training windows on which eq. 22 and the training loss are evaluated.
        validation_windows: validation windows for the validation loss.
    """

    d: int = 128
    n_layers: int = 2
    n_heads: int = 4
    tied: bool = False
    context_length: int = 64
    batch_size: int = 32
    steps: int = 2000
    lr: float = 3e-3
    warmup_fraction: float = 0.03
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    snapshot_every: int = 50
    tracked: int = 200
    min_count: int = 20
    probe_vocabulary: int = 100
    signature_windows: int = 128
    validation_windows: int = 64

    def __post_init__(self) -> None:
        for name in (
            "d",
            "n_layers",
            "n_heads",
            "context_length",
            "batch_size",
            "steps",
            "snapshot_every",
            "min_count",
            "signature_windows",
            "validation_windows",
        ):
            internal.check_int(getattr(self, name), name, 1, internal.INT32_MAX)
        if self.d % self.n_heads or (self.d // self.n_heads) % 2:
            raise ValueError(
                f"n_heads: d={self.d} must split into n_heads={self.n_heads} heads of an even "
                "head_dim (RoPE rotates pairs)"
            )
        internal.check_int(self.tracked, "tracked", 4)
        internal.check_int(self.probe_vocabulary, "probe_vocabulary", 2)
        if self.snapshot_every > self.steps:
            raise ValueError(
                f"snapshot_every must be <= steps = {self.steps}; got {self.snapshot_every}"
            )
        _check_float(self.lr, "lr", low=0.0, low_open=True)
        _check_float(self.warmup_fraction, "warmup_fraction", low=0.0, high=1.0, high_open=True)
        _check_float(self.min_lr_ratio, "min_lr_ratio", low=0.0, high=1.0)
        _check_float(self.weight_decay, "weight_decay", low=0.0)

    @property
    def snapshots(self) -> tuple[int, ...]:
        """Snapshot steps: ``0, k, 2k, ..., steps``."""
        return tuple(sorted({*range(0, self.steps, self.snapshot_every), self.steps}))


class LMSignatures(NamedTuple):
    """The data side of the LM metrics, for the tracked tokens ``[A]`` (float64).

    Attributes:
        tracked: int ``[A]`` token ids (rows of every array below).
        next_token: ``phi^{y;nt}`` ``[A, V]`` (paper §6).
        frequency: ``r^{nt}`` ``[V]``.
        previous_token: ``phi^{pre}_nu(alpha)`` ``[A, V]``, rows indexed by the tracked target nu.
        prefix: ``phi^{y;1}`` ``[A, K, K]`` (eq. 20) over the probe tokens.
        probe_tokens: int ``[K]``, the next-token and context axes of ``prefix``.
        S_next, S_previous: the cosine matrices ``[A, A]`` of ``next_token`` and
            ``previous_token``.
    """

    tracked: np.ndarray
    next_token: np.ndarray
    frequency: np.ndarray
    previous_token: np.ndarray
    prefix: np.ndarray
    probe_tokens: np.ndarray
    S_next: np.ndarray
    S_previous: np.ndarray


class LMTrajectory(NamedTuple):
    """Snapshots of the gamma lanes, lane axis first (G init scales, S snapshots, A tracked).

    Attributes:
        gammas: ``[G]``; steps: int ``[S]``; tracked: int ``[A]``.
        loss: ``[G, S]`` mean next-token cross-entropy on the fixed training windows.
        validation_loss: ``[G, S]`` the same on the validation windows.
        W_E: ``[G, S, V, d]`` the whole input embedding at every snapshot.
        W_U: ``[G, S, A, d]`` the tracked rows of the unembedding.
        value_path: ``[G, S, n_layers, A, d]``, ``z^l_alpha = W_O^l W_V^l w^E_alpha``.
        S_attention_signature: ``[G, S, n_layers, A, A]``, cosines of eq. 22's rows.
        final_W_E: ``[G, V, d]`` the whole embedding at the last step.
        diverged_step: int ``[G]``, the step whose update went non-finite (the lane froze
            there), or -1.
    """

    gammas: np.ndarray
    steps: np.ndarray
    tracked: np.ndarray
    loss: np.ndarray
    validation_loss: np.ndarray
    W_E: np.ndarray
    W_U: np.ndarray
    value_path: np.ndarray
    S_attention_signature: np.ndarray
    final_W_E: np.ndarray
    diverged_step: np.ndarray


class LMCurves(NamedTuple):
    """The alignment curves of a trajectory, ``[G, S]`` unless noted.

    Attributes:
        rho_next: Pearson of ``S^emb`` (tracked ``W_E``) with ``S^next`` (paper §6.1).
        rho_previous: Pearson of the tracked ``W_U`` cosines with ``S^pre``.
        rho_attention: ``[G, S, n_layers]`` Pearson of the value-path cosines with the
            attention-path signature cosines (``rho^{l,(t)}_attn``).
        probe_mse, probe_corr: the rank-one prefix probe with its linear readout
            (`prefix_probe`): MSE and Pearson correlation of its prediction on the held-out
            token pairs.
        probe_baseline_mse: the held-out pairs' variance, the MSE of the best constant: the
            scale against which ``probe_mse`` is "low".
        probe_constant_mse: the held-out MSE of the training pairs' mean (the readout with
            slope 0, the constant a fit on the training tokens can know).
        probe_slope: the fitted readout's slope ``a``.
        loss, validation_loss: copied from the trajectory.
    """

    rho_next: np.ndarray
    rho_previous: np.ndarray
    rho_attention: np.ndarray
    probe_mse: np.ndarray
    probe_corr: np.ndarray
    probe_baseline_mse: np.ndarray
    probe_constant_mse: np.ndarray
    probe_slope: np.ndarray
    loss: np.ndarray
    validation_loss: np.ndarray


class PrefixProbe(NamedTuple):
    """`prefix_probe` fitted to a batch of embedding geometries, every field ``[...]`` (the
    batch axes of ``S_emb``) unless noted.

    Attributes:
        heldout_mse: MSE of the prediction ``a * S^(1)(v) + b`` on the held-out pairs.
        heldout_corr: Pearson correlation of that prediction with ``S_emb`` on the held-out
            pairs (the sign of ``a`` times the correlation of the raw probe cosines).
        variance: the held-out pairs' variance of ``S_emb``: the MSE of the best constant.
        constant_mse: the held-out MSE of the training pairs' mean of ``S_emb``.
        train_mse: the fit's MSE on the training pairs.
        slope, intercept: the readout ``a``, ``b``.
        v: ``[..., K]`` the probe (defined up to a positive or negative factor).
    """

    heldout_mse: np.ndarray
    heldout_corr: np.ndarray
    variance: np.ndarray
    constant_mse: np.ndarray
    train_mse: np.ndarray
    slope: np.ndarray
    intercept: np.ndarray
    v: np.ndarray


# --------------------------------------------------------------------------------------------
# data side


def eligible_tokens(
    stream,
    vocabulary: text.Vocabulary | Sequence[str] | None,
    *,
    count: int = 200,
    min_count: int = 20,
) -> np.ndarray:
    """The ``count`` most frequent eligible tokens of ``stream`` (module docstring), int ``[A]``.

    ``vocabulary`` gives the text of each id: a `text.Vocabulary`, or the strings of any
    tokenizer (id ``i`` is ``vocabulary[i]``; special tokens written ``<...>`` or ``[...]`` are
    not words); ``None`` (no text known) makes every id a word. Ties are broken by token id.
    Raises ``ValueError`` (naming ``min_count``) when fewer than 4 tokens are eligible; returns
    fewer than ``count`` when fewer are eligible.
    """
    stream = np.asarray(stream)
    internal.check_int(count, "count", 4)
    internal.check_int(min_count, "min_count", 1)
    strings = vocabulary.tokens if isinstance(vocabulary, text.Vocabulary) else vocabulary
    size = int(stream.max()) + 1 if strings is None else max(len(strings), int(stream.max()) + 1)
    counts = np.bincount(stream[:-1], minlength=size)
    word = np.ones(size, dtype=bool)
    if strings is not None:
        word[: len(strings)] = [bool(_WORD.search(t)) and not _SPECIAL.match(t) for t in strings]
    eligible = np.nonzero(word & (counts >= min_count))[0]
    if eligible.size < 4:
        raise ValueError(
            f"min_count={min_count}: only {eligible.size} word tokens occur that often in the "
            "training stream; at least 4 are needed (lower min_count or give more text)"
        )
    order = np.lexsort((eligible, -counts[eligible]))
    return eligible[order[:count]].astype(np.int64)


def lm_signatures(
    stream, vocab_size: int, tracked, *, context_length: int, probe_vocabulary: int = 100
) -> LMSignatures:
    """Count the LM signatures of ``tracked`` tokens over the tiled training windows.

    The windows are ``text.windows(stream, context_length)`` ``[n, T+1]``: every transition of
    the stream counts once, and the prefix of eq. 20 is the model's context window.
    """
    windows = text.windows(stream, context_length)
    tracked = np.asarray(tracked, dtype=np.int64)
    phi_next, r = signatures.next_token_signature(windows, vocab_size, alphas=tracked)
    phi_previous = signatures.previous_token_signature(windows, vocab_size, labels=tracked)
    probe_tokens = most_frequent(windows, vocab_size, probe_vocabulary)
    prefix = signatures.prefix_signature(
        windows, vocab_size, alphas=tracked, labels=probe_tokens, context=probe_tokens
    )
    return LMSignatures(
        tracked=tracked,
        next_token=phi_next,
        frequency=r,
        previous_token=phi_previous,
        prefix=prefix,
        probe_tokens=probe_tokens,
        S_next=np.asarray(metrics.signature_cosine_matrix(phi_next)),
        S_previous=np.asarray(metrics.signature_cosine_matrix(phi_previous)),
    )


def most_frequent(windows, vocab_size: int, count: int) -> np.ndarray:
    """The ``count`` most frequent token ids of ``windows`` (ties by id), sorted: the probe
    tokens ``[K]`` spanning the prefix signature's next-token and context axes."""
    counts = np.bincount(np.asarray(windows).ravel(), minlength=vocab_size)
    return np.sort(np.argsort(-counts, kind="stable")[:count])


def attention_path_signature(
    windows, attention, alpha_position, vocab_size: int, n_tracked: int
) -> jax.Array:
    """The paper's eq. 22 on device (jittable): the rows of ``phi^{y;attn}`` for the tracked tokens.

    Args:
        windows: int ``[n, T+1]``; the model reads ``windows[:, :T]`` and position s predicts
            ``windows[:, s+1]``.
        attention: ``[n, T, T]`` head-averaged attention (query row, key column).
        alpha_position: int ``[V]``, the row of each tracked token and -1 for the others.
        vocab_size: V; n_tracked: A, the number of tracked tokens (static).

    Returns:
        ``[A, V]``, equal to ``signatures.attention_path_signature`` with ``alphas=tracked``
        (an independent NumPy implementation; tested); 0 for a token absent from every prefix.
    """
    windows = jnp.asarray(windows, jnp.int32)
    alpha_position = jnp.asarray(alpha_position, jnp.int32)
    T, A = windows.shape[1] - 1, n_tracked
    query, key = np.nonzero(np.tril(np.ones((T, T), dtype=bool)))  # key <= query
    prefix = jnp.asarray(1.0 / (query + 1), attention.dtype)  # I_s uniform over 0..s
    row = alpha_position[windows[:, key]]
    row = jnp.where(row < 0, A, row)  # untracked keys go to a discarded row
    target = windows[:, query + 1]
    weight = prefix * attention[:, query, key]
    joint = jnp.zeros(((A + 1) * vocab_size,), attention.dtype)
    joint = joint.at[(row * vocab_size + target).ravel()].add(weight.ravel())
    norm = (
        jnp.zeros((A + 1,), attention.dtype)
        .at[row.ravel()]
        .add(jnp.broadcast_to(prefix, row.shape).ravel())[:A]
    )
    joint = joint.reshape(A + 1, vocab_size)[:A]
    return joint / jnp.where(norm > 0, norm, 1)[:, None]


# --------------------------------------------------------------------------------------------
# training


def train_lm(
    corpus: text.Corpus,
    config: LMConfig | None = None,
    *,
    gammas=(1.0, 0.5),
    seed: int = 0,
    tracked=None,
    layout: sweep.Layout | None = None,
    out: str | Path | None = None,
) -> LMTrajectory:
    """Train one GPT per gamma (one compiled program over the lanes) and record the trajectory.

    Args:
        corpus: the train / validation streams and vocabulary (`text.prepare_corpus`).
        config: model, optimizer and tracking settings (default ``LMConfig()``).
        gammas: initial scales (std ``d^{-gamma}``); every lane gets the same standard normal
            draw from ``seed``, scaled, and the same batches.
        seed: seeds the weights and the batch order.
        tracked: token ids to track (default `eligible_tokens`).
        layout: how the gamma lanes run, a `sweep.Layout` (None: by default vmapped together on
            an accelerator, and on CPU one lane at a time in one concurrent call per core). The
            layout changes the speed, not the result (bitwise on CPU, see `sweep.sweep_map`).
        out: a folder where each finished lane is saved (`sweep.LaneStore`); rerunning the same
            call into it trains only the lanes not yet saved. Without it, lanes are saved under
            the active `units.caching` folder, if any.
    """
    config = LMConfig() if config is None else config
    gamma = _check_gammas(gammas)
    internal.check_int(seed, "seed", 0, internal.SEED_MAX)
    _check_streams(corpus, config.context_length)
    tracked = _tracked_tokens(corpus, config, tracked)
    store = _lane_store(out, corpus, config, gamma, seed, tracked)
    lanes = sweep.resumable_map(
        lane_function(config, corpus.vocab_size, tracked_rows(tracked, corpus.vocab_size)),
        initial_states(config, corpus.vocab_size, gamma, seed),
        store=store,
        shared=lane_data(corpus, config, tracked, seed),
        steps_per_lane=config.steps,
        layout=layout,
    )
    if store:
        store.finish(lanes=gamma.size)
    return LMTrajectory(
        gammas=gamma,
        steps=np.asarray(config.snapshots),
        tracked=tracked,
        **{k: np.stack([lane[k] for lane in lanes]) for k in _LANE_FIELDS},
    )


def lane_data(corpus: text.Corpus, config: LMConfig, tracked, seed: int) -> tuple:
    """What every lane of `train_lm` reads, the ``shared`` arguments of its `lane_function`:
    the training stream (int32 ``[N]``), the tracked ids (int32 ``[A]``), the fixed signature
    and validation windows (int32 ``[n, T+1]``, `spread_windows`) and the batch seed (uint32)."""
    T = config.context_length
    return (
        jnp.asarray(corpus.train, jnp.int32),
        jnp.asarray(tracked, jnp.int32),
        jnp.asarray(
            spread_windows(text.windows(corpus.train, T), config.signature_windows), jnp.int32
        ),
        jnp.asarray(
            spread_windows(text.windows(corpus.validation, T), config.validation_windows),
            jnp.int32,
        ),
        jnp.asarray(seed, jnp.uint32),
    )


def tracked_rows(tracked, vocab_size: int) -> bytes:
    """The row of each token among ``tracked`` (-1 for the others) as the bytes of an int32
    ``[V]`` array: `lane_function`'s hashable ``alpha_bytes``."""
    position = np.full(vocab_size, -1, dtype=np.int32)
    position[np.asarray(tracked)] = np.arange(len(tracked), dtype=np.int32)
    return position.tobytes()


def _tracked_tokens(corpus: text.Corpus, config: LMConfig, tracked) -> np.ndarray:
    """The tracked ids of a `train_lm`, int64 ``[A]``: ``tracked``, else the ``config.tracked``
    most frequent `eligible_tokens` of the training stream; checked (`_check_tracked`)."""
    if tracked is None:
        tracked = eligible_tokens(
            corpus.train, corpus.vocabulary, count=config.tracked, min_count=config.min_count
        )
    return _check_tracked(tracked, corpus.vocab_size)


def _lane_store(out, corpus: text.Corpus, config: LMConfig, gamma, seed: int, tracked):
    """The `sweep.LaneStore` of a `train_lm` (None: nothing is saved): one lane per gamma, the
    run finished once ``finished.json`` is written."""
    return sweep.LaneStore.create(
        "lm",
        out,
        _lane_spec(corpus, config, gamma, seed, tracked),
        done="finished.json",
        required=_LANE_FIELDS,
    )


def _lane_spec(corpus: text.Corpus, config: LMConfig, gamma, seed: int, tracked) -> dict:
    """What a `train_lm` computes, as its `sweep.LaneStore` records it."""
    return {
        "kind": "lm lanes",
        "config": dataclasses.asdict(config),
        "gammas": gamma.tolist(),
        "seed": seed,
        "tracked": tracked.tolist(),
        "corpus": _sha256(corpus.train),
        "validation": _sha256(corpus.validation),  # the validation loss is read on it
        "vocabulary": corpus.vocab_size,
    }


def _sha256(stream) -> str:
    return hashlib.sha256(np.ascontiguousarray(stream).tobytes()).hexdigest()


def _check_gammas(gammas) -> np.ndarray:
    gamma = np.asarray(gammas, dtype=np.float64).ravel()
    if gamma.size == 0 or not np.all(np.isfinite(gamma)):
        raise ValueError(f"gammas must be finite numbers (at least one); got {list(gammas)}")
    return gamma


def _check_streams(corpus: text.Corpus, T: int) -> None:
    for name, stream in (("train", corpus.train), ("validation", corpus.validation)):
        if stream.size < T + 1:
            raise ValueError(
                f"context_length={T} needs >= {T + 1} tokens in the {name} stream; it has "
                f"{stream.size} (use a shorter context or more text)"
            )


def _check_tracked(tracked, V: int) -> np.ndarray:
    """``tracked`` as int64 ``[A]``: >= 2 distinct ids in ``[0, V)``."""
    tracked = np.asarray(tracked)
    if (
        tracked.ndim != 1
        or tracked.size < 2
        or not np.issubdtype(tracked.dtype, np.integer)
        or np.unique(tracked).size != tracked.size
        or tracked.min() < 0
        or tracked.max() >= V
    ):
        raise ValueError(
            f"tracked must be >= 2 distinct token ids in [0, {V}); got {tracked.tolist()[:10]}"
        )
    return tracked.astype(np.int64)


#: The per-lane arrays of an `LMTrajectory` (what a saved lane holds).
_LANE_FIELDS = tuple(f for f in LMTrajectory._fields if f not in ("gammas", "steps", "tracked"))


def spread_windows(windows: np.ndarray, count: int) -> np.ndarray:
    """``count`` windows ``[count, T+1]`` evenly spread over ``windows`` ``[n, T+1]`` (all of
    them if there are fewer): the fixed windows a run records its losses and eq. 22 on."""
    index = np.unique(np.linspace(0, len(windows) - 1, min(count, len(windows))).astype(int))
    return windows[index]


def gpt(config: LMConfig, vocab_size: int, gamma, key) -> models.GPT:
    """The `models.GPT` of ``config`` over ``vocab_size`` tokens, initial scale ``d^{-gamma}``,
    weights drawn from ``key``."""
    return models.GPT(
        vocab_size,
        config.context_length,
        config.d,
        n_layers=config.n_layers,
        n_heads=config.n_heads,
        tied=config.tied,
        gamma=gamma,
        rngs=nnx.Rngs(key),
    )


def initial_states(config: LMConfig, vocab_size: int, gamma: np.ndarray, seed: int):
    """The initial states of the gamma lanes, an ``nnx.State`` with a leading ``[G]`` axis: one
    standard normal draw from ``fold_in(key(seed), 0)``, scaled per lane (as `train_lm`)."""
    key = jax.random.fold_in(jax.random.key(seed), 0)
    return jax.vmap(lambda g: nnx.split(gpt(config, vocab_size, g, key))[1])(
        jnp.asarray(gamma, dtype=jnp.float32)
    )


def optimizer(config: LMConfig) -> optax.GradientTransformation:
    """AdamW (b1 0.9, b2 0.95) with linear warm-up over ``warmup_fraction`` of the steps, then
    cosine decay to ``min_lr_ratio * lr``; weight decay on the weight matrices only."""
    warmup = max(1, round(config.warmup_fraction * config.steps))
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.lr,
        warmup_steps=warmup,
        decay_steps=max(config.steps, warmup + 1),
        end_value=config.lr * config.min_lr_ratio,
    )
    return optax.adamw(
        schedule,
        b1=0.9,
        b2=0.95,
        weight_decay=config.weight_decay,
        mask=_decayed,
    )


def _decayed(params):
    """The AdamW decay mask: the weight matrices, not the RMSNorm scales (``*_norm``, stacked
    ``[n_layers, d]`` per layer, so their rank alone does not tell them apart)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, p: p.ndim >= 2 and "norm" not in jax.tree_util.keystr(path), params
    )


def cross_entropy(module: models.GPT, windows) -> tuple[jax.Array, jax.Array]:
    """Mean next-token cross-entropy of ``windows`` ``[n, T+1]`` (``module`` reads the first T
    tokens, position s predicts token s+1) and the attention maps ``module.forward`` returns."""
    logits, maps = module.forward(windows[:, :-1])
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:])
    return jnp.mean(nll), maps


def step_function(graphdef: nnx.GraphDef, optimizer, config: LMConfig):
    """One AdamW step of one lane: ``step(i, carry, stream, key) -> carry``, a `loop.Carry`.

    Draws ``batch_size`` windows of ``context_length + 1`` tokens at uniform random starts of
    ``stream`` from ``fold_in(key, i)``, so lanes sharing ``key`` see the same batches. A lane
    whose loss or parameters become non-finite keeps its last finite state and records ``i`` in
    ``diverged`` (-1 while finite). Returns the new carry.
    """
    T, B = config.context_length, config.batch_size

    def batch_loss(state, windows):
        return cross_entropy(nnx.merge(graphdef, state), windows)[0]

    def step(i, carry, stream, key):
        first = jax.random.randint(jax.random.fold_in(key, i), (B,), 0, stream.shape[0] - T)
        batch = stream[first[:, None] + jnp.arange(T + 1)]
        loss, grads = jax.value_and_grad(batch_loss)(carry.state, batch)
        with jax.numpy_dtype_promotion("standard"):  # optax's schedules mix dtypes
            updates, new_opt_state = optimizer.update(grads, carry.opt_state, carry.state)
        new_state = optax.apply_updates(carry.state, updates)
        return loop.guarded_step(i, carry, loss, new_state, new_opt_state)

    return step


@functools.lru_cache(maxsize=8)
def lane_function(config: LMConfig, vocab_size: int, alpha_bytes: bytes):
    """One gamma lane's whole run, ``lane(state, stream, tracked, signature_windows,
    validation_windows, seed) -> record`` (the arguments after ``state``: `lane_data`).

    ``alpha_bytes`` is the int32 ``[V]`` row of each tracked token (-1 for the others) as bytes
    (hashable, `tracked_rows`); ``record`` holds the per-lane fields of `LMTrajectory`: those of
    each snapshot (``[S, ...]``), ``final_W_E`` ``[V, d]`` and ``diverged_step``. The function is
    cached because `sweep.sweep_map` caches its compiled program per function."""
    alpha_position = np.frombuffer(alpha_bytes, dtype=np.int32)
    n_tracked = int(np.sum(alpha_position >= 0))
    alpha_position = jnp.asarray(alpha_position)
    graphdef = nnx.split(gpt(config, vocab_size, 1.0, jax.random.key(0)))[0]
    adamw = optimizer(config)
    train_step = step_function(graphdef, adamw, config)

    def record(state, tracked, signature_windows, validation_windows):
        module = nnx.merge(graphdef, state)
        loss, maps = cross_entropy(module, signature_windows)
        validation_loss, _ = cross_entropy(module, validation_windows)
        weights = models.weights(module)
        W_E = weights["W_E"][tracked]  # the tracked rows
        attention = jnp.mean(maps, axis=2)  # [layers, n, T, T], averaged over heads

        def attention_similarity(layer_attention):
            phi = attention_path_signature(
                signature_windows, layer_attention, alpha_position, vocab_size, n_tracked
            )
            return metrics.cosine_matrix(phi)

        return dict(
            loss=loss,
            validation_loss=validation_loss,
            W_E=weights["W_E"],  # every row: the snapshot a checkpoint export holds
            W_U=weights["W_U"][tracked],
            value_path=jnp.einsum("lij,ljk,ak->lai", weights["W_O"], weights["W_V"], W_E),
            S_attention_signature=jax.lax.map(attention_similarity, attention),
        )

    def lane(state, stream, tracked, signature_windows, validation_windows, seed):
        key = jax.random.key(seed)

        def step(i, carry):
            return train_step(i, carry, stream, key)

        with jax.numpy_dtype_promotion("standard"):
            opt_state = adamw.init(state)
        result = loop.run(
            step,
            loop.initial_carry(state, opt_state),
            lambda state: record(state, tracked, signature_windows, validation_windows),
            config.snapshots,
            record_initial=True,
        )
        final = models.weights(nnx.merge(graphdef, result.carry.state))["W_E"]
        return {**result.recorded, "final_W_E": final, "diverged_step": result.carry.diverged}

    return lane


# --------------------------------------------------------------------------------------------
# metrics of a trajectory


def lm_metrics(
    trajectory: LMTrajectory,
    lm_signature: LMSignatures,
    *,
    heldout_fraction: float = 0.5,
    seed: int = 0,
    probe_steps: int = metrics.PROBE_STEPS,
) -> LMCurves:
    """The alignment curves of ``trajectory`` (the paper §6.1).

    The prefix probe (`prefix_probe`) is fitted at every snapshot, step 0 included (the null:
    the untrained init), on the pairs of a fixed random ``1 - heldout_fraction`` of the tracked
    tokens and scored on the pairs of the held-out rest.
    """
    if not np.array_equal(trajectory.tracked, lm_signature.tracked):
        raise ValueError("lm_signature: its tracked tokens differ from the trajectory's")
    S_emb = np.asarray(metrics.cosine_matrix(trajectory.W_E[..., trajectory.tracked, :]))
    rho_next, probe = embedding_alignment(
        S_emb,
        lm_signature.S_next,
        lm_signature.prefix,
        heldout_fraction=heldout_fraction,
        seed=seed,
        probe_steps=probe_steps,
    )
    S_unembed = np.asarray(metrics.cosine_matrix(trajectory.W_U))
    rho_previous = np.asarray(metrics.alignment(S_unembed, lm_signature.S_previous).value)
    S_value = metrics.cosine_matrix(trajectory.value_path)
    rho_attention = np.asarray(metrics.alignment(S_value, trajectory.S_attention_signature).value)
    return LMCurves(
        rho_next=rho_next,
        rho_previous=rho_previous,
        rho_attention=rho_attention,
        probe_mse=probe.heldout_mse,
        probe_corr=probe.heldout_corr,
        probe_baseline_mse=probe.variance,
        probe_constant_mse=probe.constant_mse,
        probe_slope=probe.slope,
        loss=trajectory.loss,
        validation_loss=trajectory.validation_loss,
    )


def embedding_alignment(
    S_emb, S_next, prefix, *, heldout_fraction: float, seed: int, probe_steps: int
) -> tuple[np.ndarray, PrefixProbe]:
    """``rho_next`` (Pearson of ``S_emb`` with ``S^next`` ``[A, A]``, paper §6.1) and the prefix
    probe (``prefix [A, V_nu, K]``, eq. 20) of the embedding cosines ``S_emb`` ``[..., A, A]``
    of the A tracked tokens, one of each per leading index.

    The probe is fitted on the pairs of a fixed random ``1 - heldout_fraction`` of the tracked
    tokens (drawn from ``seed``) and scored on the pairs of the held-out rest (`prefix_probe`).
    """
    _check_float(
        heldout_fraction, "heldout_fraction", low=0.0, high=1.0, low_open=True, high_open=True
    )
    A = np.shape(S_next)[0]
    rng = np.random.default_rng(seed)
    heldout = np.zeros(A, dtype=bool)
    heldout[rng.permutation(A)[: max(2, round(heldout_fraction * A))]] = True
    rho_next = np.asarray(metrics.alignment(S_emb, S_next).value)
    probe = prefix_probe(prefix, S_emb, heldout, steps=probe_steps, seed=seed)
    return rho_next, probe


def prefix_probe(
    phi,
    S_emb,
    heldout_tokens,
    *,
    steps: int = metrics.PROBE_STEPS,
    lr: float = metrics.PROBE_LR,
    restarts: int = 4,
    seed: int = 0,
) -> PrefixProbe:
    """The LM's rank-one first-order probe with a linear readout ([CS] §6, eq. 21; theory/lm.md §3).

    ``h_alpha(v) = phi_alpha v`` (one shared ``v`` over the context axis), ``S^(1)(v)`` the
    cosine matrix of the ``h_alpha``, and the prediction ``a * S^(1)(v) + b`` of ``S_emb``'s
    pairs. ``v``, ``a`` and ``b`` minimize the MSE on the pairs of two training tokens: for each
    ``v`` the best ``a``, ``b`` are the least-squares line of ``S_emb`` on ``S^(1)(v)`` over
    those pairs, so Adam descends the profiled MSE ``var(S_emb) (1 - r^2)``. The fit is scored
    on the pairs of two held-out tokens only.

    Args:
        phi: the prefix signature ``[A, V_nu, K]`` (eq. 20).
        S_emb: ``[..., A, A]`` embedding cosines; every leading index (a snapshot) gets its own
            fit, all of them in one compiled call.
        heldout_tokens: a bool mask ``[A]`` or indices of the held-out tokens (>= 2 on each side).
        steps, lr: Adam steps and learning rate (App. A.1.5: 300 and 0.01).
        restarts: initial ``v`` ~ N(0, 1/K) per fit, drawn from ``seed``; the best by training
            MSE is kept.

    Returns:
        `PrefixProbe` (NumPy arrays).
    """
    phi, S_emb, train_ids, held_ids = _checked_probe_inputs(
        phi, S_emb, heldout_tokens, steps=steps, lr=lr, restarts=restarts
    )
    A, K = phi.shape[0], phi.shape[2]
    batch = S_emb.shape[:-2]
    S_emb = S_emb.reshape(-1, A, A)

    def pairs(ids):  # [N, n(n-1)/2]: the pairs of two tokens of ``ids``
        return metrics.upper_triangle(S_emb[:, ids[:, None], ids[None, :]])

    v_init = K**-0.5 * jax.random.normal(jax.random.key(seed), (restarts, K), phi.dtype)
    result = _prefix_probe(
        phi[train_ids],
        phi[held_ids],
        pairs(train_ids),
        pairs(held_ids),
        v_init,
        jnp.asarray(lr, phi.dtype),
        steps=int(steps),
    )
    return PrefixProbe(
        **{
            name: np.asarray(value).reshape(batch + np.shape(value)[1:])
            for name, value in result.items()
        }
    )


def _checked_probe_inputs(phi, S_emb, heldout_tokens, *, steps, lr, restarts):
    """`prefix_probe`'s inputs checked (ValueError naming the parameter): ``phi [A, V_nu, K]``
    and ``S_emb [..., A, A]`` as finite float arrays of one dtype, then the ids of the training
    and of the held-out tokens (int ``[A_train]``, ``[A_held]``)."""
    phi = jnp.asarray(phi, dtype=jnp.result_type(float))
    S_emb = jnp.asarray(S_emb, dtype=phi.dtype)
    if phi.ndim != 3:
        raise ValueError(f"phi must have shape [A, V_nu, K]; got {phi.shape}")
    A = phi.shape[0]
    if S_emb.ndim < 2 or S_emb.shape[-2:] != (A, A):
        raise ValueError(f"S_emb must have shape [..., {A}, {A}] to match phi; got {S_emb.shape}")
    metrics.check_finite(phi=phi, S_emb=S_emb)
    internal.check_int(steps, "steps", 0)
    internal.check_int(restarts, "restarts", 1)
    _check_float(lr, "lr", low=0.0, low_open=True)
    metrics.token_split(heldout_tokens, A)  # validates the split
    given = np.asarray(heldout_tokens)
    held = given if given.dtype == bool else np.isin(np.arange(A), given)
    return phi, S_emb, np.nonzero(~held)[0], np.nonzero(held)[0]


def _readout(x, s):
    """The least-squares line ``s ~ a x + b`` over the last axis -> ``(a, b)``; ``a`` is 0
    where ``x`` is constant."""
    mx, ms = jnp.mean(x, axis=-1), jnp.mean(s, axis=-1)
    var = jnp.mean((x - mx) ** 2, axis=-1)
    flat = var <= 1e-12 * jnp.maximum(1.0, mx**2)
    covariance = jnp.mean((x - mx) * (s - ms), axis=-1)
    a = jnp.where(flat, 0.0, covariance / jnp.where(flat, 1.0, var))
    return a, ms - a * mx


@functools.partial(jax.jit, static_argnames=("steps",))
def _prefix_probe(phi_train, phi_held, s_train, s_held, v_init, lr, *, steps):
    """`prefix_probe` on the pairs ``s_train`` ``[N, P_train]`` of the training tokens (whose
    signatures are ``phi_train``) and ``s_held`` ``[N, P_held]`` of the held-out ones, vmapped
    over the N snapshots and the restarts (so the contraction of ``phi`` is one matrix product
    for all of them). The fit only ever sees the training tokens."""

    def cosines(phi, v):
        return metrics.upper_triangle(metrics.probe_similarity(phi, (v,)))

    def training_mse(v, s):
        x = cosines(phi_train, v)
        a, b = _readout(x, s)
        return jnp.mean((a * x + b - s) ** 2)

    def fit(v, s):
        return metrics.adam_descent(lambda v: training_mse(v, s), v, lr, steps)

    def one(s, s_heldout):
        vs = jax.vmap(fit, in_axes=(0, None))(v_init, s)
        losses = jax.vmap(training_mse, in_axes=(0, None))(vs, s)
        v = vs[jnp.argmin(jnp.where(jnp.isfinite(losses), losses, jnp.inf))]
        a, b = _readout(cosines(phi_train, v), s)
        prediction = a * cosines(phi_held, v) + b
        return dict(
            heldout_mse=jnp.mean((prediction - s_heldout) ** 2),
            heldout_corr=metrics.pearson(prediction, s_heldout),
            variance=jnp.var(s_heldout),
            constant_mse=jnp.mean((s_heldout - jnp.mean(s)) ** 2),
            train_mse=training_mse(v, s),
            slope=a,
            intercept=b,
            v=v,
        )

    return jax.vmap(one)(s_train, s_held)


# --------------------------------------------------------------------------------------------
# validation


def _check_float(value, name, *, low=None, high=None, low_open=False, high_open=False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float | np.number)
    ok = ok and math.isfinite(value)
    ok = ok and (low is None or (value > low if low_open else value >= low))
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}; got {value!r}")
