"""The signature alignment of any model's embedding snapshots (``ctx-staircase measure``).

`measure_snapshots` takes the data and a list of input-embedding snapshots ``W_E [V, d]``
(arrays, `checkpoints.Embedding` records, or paths `checkpoints.load_embedding` reads) and
returns one `Measurement`:

- **a token stream** (ids ``[n]`` or a `checkpoints.TokenStream`): the paper's §6.1 language-model
  measurement (theory/lm.md §3). ``rho_next`` is the Pearson alignment of the tracked tokens'
  embedding cosines with the cosines of their next-token distributions ``phi^{y;nt}``; the
  rank-one prefix probe (eq. 21, `lm.prefix_probe`) is fitted on the pairs of half the tracked
  tokens and scored on the pairs of the other half. The tracked tokens are the most frequent
  eligible ones (`lm.eligible_tokens`, theory/lm.md §2), or those the stream names;
- **a `dataset.TokenDataset`**: the controlled tasks' measurement, ``rho0`` against the
  zero-order signature, the frequency-resolved first-order alignments ``rho_(1),k`` (paper
  §4.5) and the first-order probe (eq. 7), on the dataset's default token group.

Every alignment comes with its **null**, the same score after the tracked tokens' rows are
permuted (one fixed permutation): the embedding's own cosine distribution, with the token
identities destroyed. Snapshots are read one at a time and only their tracked rows kept, so a
long list of large checkpoints needs the memory of one embedding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctx_staircase import (
    checkpoints,
    geometry,
    internal,
    lm,
    lm_study,
    metrics,
    signatures,
    text,
)
from ctx_staircase.checkpoints import Embedding, TokenStream
from ctx_staircase.dataset import TokenDataset

__all__ = [
    "Measurement",
    "measure_snapshots",
    "word_group_ids",
]

#: The context length of the stream's windows when the stream does not say it (the `lm`
#: subcommand's standard size; it sets the prefix of eq. 20, not ``rho_next``).
_CONTEXT_LENGTH = 64


@dataclasses.dataclass(frozen=True)
class Measurement:
    """The alignment of S snapshots.

    Attributes:
        reference: what the embedding is aligned with, e.g. ``"next-token signature"``.
        steps: int ``[S]`` each snapshot's training step.
        tracked: int ``[A]`` the measured token ids.
        alignment: name -> ``[S]``: ``"rho_next"`` for a stream; ``"rho0"`` and
            ``"rho1_k{k}"`` (k = 1 .. A/2) for a task (the keys `train` and `geometry` use).
        null: the same names -> ``[S]``, scored on the row-permuted embeddings.
        probe: name -> ``[S]``: ``"corr"`` and ``"mse"`` (held out), and for a stream
            ``"baseline_mse"`` (the held-out variance: the MSE of the best constant).
        sources: each snapshot's file (``"<array>"`` for an array) and ``keys`` its tensor name.
        widths: each snapshot's d (a stream measures models of different widths side by side).
        settings: what the measurement used (context length, counts, seed, ...).
        semantic: for a stream whose token texts are known, the semantic measures of
            `lm_study.group_structure` on the first and the last snapshot (``{"first": ...,
            "last": ...}``) over the word groups of `text.BUILTIN_GROUPS` that are single
            tokens of the tokenizer; else empty.
    """

    reference: str
    steps: np.ndarray
    tracked: np.ndarray
    alignment: dict[str, np.ndarray]
    null: dict[str, np.ndarray]
    probe: dict[str, np.ndarray]
    sources: tuple[str, ...]
    keys: tuple[str, ...]
    widths: tuple[int, ...]
    settings: dict[str, Any]
    semantic: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    @property
    def headline(self) -> str:
        """The main curve's name: ``rho_next`` for a stream, ``rho0`` for a task."""
        return next(iter(self.alignment))

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-ready lists (``metrics.json``)."""

        def listed(curves: dict) -> dict:
            return {k: np.asarray(v).tolist() for k, v in curves.items()}

        return {
            "reference": self.reference,
            "steps": self.steps.tolist(),
            **listed(self.alignment),
            "null": listed(self.null),
            "probe": listed(self.probe),
            "tracked": self.tracked.tolist(),
            "snapshots": list(self.sources),
            "keys": list(self.keys),
            "widths": list(self.widths),
            "semantic": self.semantic,
            "settings": self.settings,
        }


def measure_snapshots(
    data: TokenDataset | TokenStream | np.ndarray | Sequence[int],
    snapshots: Sequence[Embedding | np.ndarray | str | Path],
    *,
    steps: Sequence[int] | None = None,
    key: str | None = None,
    tracked: Sequence[int] | None = None,
    context_length: int | None = None,
    count: int = 200,
    min_count: int = 20,
    probe_vocabulary: int = 100,
    probe_steps: int = metrics.PROBE_STEPS,
    seed: int = 0,
) -> Measurement:
    """Measure ``snapshots`` against ``data`` (module docstring).

    Args:
        data: a token stream (ids ``[n]``, or a `checkpoints.TokenStream`, whose ``tracked`` and
            ``context_length`` are used when given) or a `dataset.TokenDataset`.
        snapshots: ``[V, d]`` arrays, `checkpoints.Embedding` records or paths; on a stream
            each may have its own V and d (every token id must index one of its rows, and its
            ids must be the stream's, `checkpoints.check_ids`); on a task, one shape.
        steps: each snapshot's step; default: the step in each path's name, or in an
            `Embedding`'s source (`checkpoints.snapshot_step`), else the snapshot's position.
        key: the tensor to read from each path (default: found by name).
        tracked: the token ids to measure (a stream; default: the stream's, else the ``count``
            most frequent eligible ones occurring ``min_count`` times, `lm.eligible_tokens`).
        context_length: window length of the stream (default: the stream's, else 64).
        probe_vocabulary: K, the most frequent tokens spanning the prefix signature.
        probe_steps, seed: the probe's Adam steps and its split and initialization.

    Raises:
        ValueError: naming the parameter, for an empty or inconsistent list of snapshots,
            token ids outside an embedding, or bad settings.
    """
    if isinstance(snapshots, str | Path | np.ndarray) or not len(snapshots):
        raise ValueError("snapshots must be a non-empty list of [V, d] embeddings or paths")
    internal.check_int(seed, "seed", 0, internal.SEED_MAX)
    internal.check_int(probe_steps, "probe_steps", 0)
    steps = _steps(snapshots, steps)
    if isinstance(data, TokenDataset):
        if tracked is not None:
            raise ValueError("tracked applies to a token stream; a task measures its group")
        return _measure_task(data, snapshots, steps, key, seed)
    stream = data if isinstance(data, TokenStream) else TokenStream(ids=np.asarray(data))
    return _measure_stream(
        stream,
        snapshots,
        steps,
        key=key,
        tracked=tracked,
        context_length=context_length,
        count=count,
        min_count=min_count,
        probe_vocabulary=probe_vocabulary,
        probe_steps=probe_steps,
        seed=seed,
    )


def _measure_stream(
    stream,
    snapshots,
    steps,
    *,
    key,
    tracked,
    context_length,
    count,
    min_count,
    probe_vocabulary,
    probe_steps,
    seed,
) -> Measurement:
    ids = stream.ids
    tracked = _stream_tracked(stream, tracked, count, min_count)
    T = context_length or stream.context_length or _CONTEXT_LENGTH
    internal.check_int(T, "context_length", 2, ids.size - 1, why=" (a window needs a next token)")
    internal.check_int(probe_vocabulary, "probe_vocabulary", 2)
    if stream.unknown >= 0 and np.any(tracked == stream.unknown):
        raise ValueError(
            f"tracked: id {stream.unknown} stands for the unknown words; it has no row"
        )
    known = ids[ids != stream.unknown] if stream.unknown >= 0 else ids
    rows, sources, keys, V = _tracked_rows(
        snapshots,
        key,
        tracked,
        int(known.max()),
        check=lambda e: checkpoints.check_ids(stream, e),
        same_shape=False,  # models of any width and padding side by side: cosines only
    )
    # the signatures live on the stream's own ids (the unknown words' id included), so a
    # snapshot's padding rows, which no token reaches, change nothing
    S_next, prefix, probe_tokens = _stream_signatures(
        ids, int(ids.max()) + 1, tracked, T, probe_vocabulary
    )
    rho_next, probe, null = _stream_scores(rows, tracked, S_next, prefix, seed, probe_steps)
    semantic = _semantic_structure(stream.token_strings, snapshots, key, V)
    return Measurement(
        reference="next-token signature",
        steps=steps,
        tracked=tracked,
        alignment={"rho_next": rho_next},
        null={"rho_next": null},
        probe={
            "corr": probe.heldout_corr,
            "mse": probe.heldout_mse,
            "baseline_mse": probe.variance,
        },
        sources=sources,
        keys=keys,
        widths=tuple(r.shape[1] for r in rows),
        semantic=semantic,
        settings=_stream_settings(stream, T, V, probe_tokens, probe_steps, seed),
    )


def _stream_tracked(stream, tracked, count: int, min_count: int) -> np.ndarray:
    """The token ids ``[A]`` a stream is measured on: ``tracked``, else the stream's, else its
    ``count`` most frequent eligible tokens (`lm.eligible_tokens`); ``ValueError`` for a stream
    without a transition or fewer than 4 distinct ids."""
    ids = stream.ids
    if ids.size < 2:
        raise ValueError(f"tokens: a stream needs >= 2 tokens to have a transition; got {ids.size}")
    if tracked is None:
        tracked = stream.tracked
    if tracked is None:
        tracked = lm.eligible_tokens(ids, stream.token_strings, count=count, min_count=min_count)
    tracked = np.asarray(tracked, dtype=np.int64)
    if tracked.ndim != 1 or tracked.size < 4 or np.unique(tracked).size != tracked.size:
        raise ValueError(f"tracked must be >= 4 distinct token ids; got {tracked.tolist()[:10]}")
    return tracked


def _stream_scores(rows, tracked, S_next, prefix, seed: int, probe_steps: int):
    """``(rho_next [S], probe, null [S])`` of each snapshot's tracked ``rows`` ``[A, d_s]``:
    the alignment of their cosines with ``S_next [A, A]`` and the held-out prefix probe
    (`lm.embedding_alignment`, half the tracked tokens held out), and the same alignment after
    one fixed permutation (from ``seed``) of the tracked rows."""
    S_emb = np.stack([np.asarray(metrics.cosine_matrix(r)) for r in rows])  # [S, A, A]
    rho_next, probe = lm.embedding_alignment(
        S_emb, S_next, prefix, heldout_fraction=0.5, seed=seed, probe_steps=probe_steps
    )
    permutation = np.random.default_rng(seed).permutation(tracked.size)
    null = np.asarray(metrics.alignment(S_emb[:, permutation][:, :, permutation], S_next).value)
    return rho_next, probe, null


def _stream_settings(stream, T: int, V: int, probe_tokens, probe_steps: int, seed: int) -> dict:
    """What a stream's measurement used (`Measurement.settings`)."""
    ids = stream.ids
    return {
        "context_length": T,
        "tokens": int(ids.size),
        "id_space": stream.id_space.value,
        **_oov_settings(stream),
        "vocab_rows": V,
        "id_range": int(ids.max()) + 1,
        "probe_vocabulary": int(probe_tokens.size),
        "probe_steps": probe_steps,
        "heldout_fraction": 0.5,
        "seed": seed,
        "null": "the tracked rows permuted (one fixed permutation from seed)",
    }


def _oov_settings(stream: TokenStream) -> dict:
    """A text tokenized by word vectors' words: how many words it had, the share the
    vocabulary lacks, and what became of them."""
    if stream.id_space is not checkpoints.IdSpace.VOCABULARY:
        return {}
    treatment = {
        "unknown": f"kept in the stream as one unknown id ({stream.unknown}), never measured",
        "drop": "dropped from the stream (their neighbours become adjacent)",
    }[stream.oov]
    return {
        "words": stream.words,
        "out_of_vocabulary": stream.out_of_vocabulary,
        "oov_share": stream.oov_share,
        "oov": treatment,
    }


def _stream_signatures(ids, V: int, tracked, T: int, probe_vocabulary: int):
    """``(S^next [A, A], phi^{y;1} [A, K, K], probe tokens [K])`` of the stream, as
    `lm.lm_signatures` counts them, with ``phi^{y;nt}`` kept only on the tokens that follow a
    tracked one: the other columns are zero, so the cosines are the same, and memory grows
    with the stream rather than with a 50k-token vocabulary."""
    windows = text.windows(ids, T)
    current, following = windows[:, :-1].ravel(), windows[:, 1:].ravel()
    successors = np.unique(following[np.isin(current, tracked)])
    phi_next, _ = signatures.next_token_signature(windows, V, alphas=tracked, labels=successors)
    probe_tokens = lm.most_frequent(windows, V, min(probe_vocabulary, V))
    prefix = signatures.prefix_signature(
        windows, V, alphas=tracked, labels=probe_tokens, context=probe_tokens
    )
    return np.asarray(metrics.signature_cosine_matrix(phi_next)), prefix, probe_tokens


def word_group_ids(token_strings) -> dict[str, np.ndarray]:
    """The ids of each word group of `text.BUILTIN_GROUPS` whose every word is one token: a
    token is the word when its text, stripped and lowercased, equals it (the lowest such id,
    so GPT-2's ``" monday"`` and ``"monday"`` both count)."""
    first: dict[str, int] = {}
    for i, token in enumerate(token_strings):
        first.setdefault(token.strip().lower(), i)
    return {
        group: np.asarray([first[w] for w in words])
        for group, words in text.BUILTIN_GROUPS.items()
        if all(w in first for w in words)
    }


def _semantic_structure(token_strings, snapshots, key, V: int) -> dict[str, dict[str, float]]:
    if token_strings is None:
        return {}
    groups = {g: ids for g, ids in word_group_ids(token_strings).items() if ids.max() < V}
    if not groups:
        return {}
    ids = np.concatenate(list(groups.values()))
    edges = np.cumsum([len(v) for v in groups.values()])[:-1]
    result = {}
    for name, index in (("first", 0), ("last", len(snapshots) - 1)):
        rows = _embedding(snapshots[index], key, index).rows(ids)
        structure = lm_study.group_structure(dict(zip(groups, np.split(rows, edges), strict=True)))
        result[name] = {k: float(v) for k, v in structure.items()}
    return result


def _measure_task(ds: TokenDataset, snapshots, steps, key, seed) -> Measurement:
    group = geometry.default_group(ds)
    alphas = geometry.group_tokens(ds, group)
    rows, sources, keys, _ = _tracked_rows(snapshots, key, np.arange(ds.vocab_size), -1)
    W_E = np.stack(rows)  # [S, V, d]: one shape (checked)
    curves = geometry.alignment_curves(W_E[None], steps, ds, probe_snapshots=len(steps), seed=seed)
    S_emb = geometry.embedding_similarity(W_E, alphas)  # [S, A, A]
    permutation = np.random.default_rng(seed).permutation(alphas.size)
    shuffled = S_emb[:, permutation][:, :, permutation]
    alignment = {"rho0": np.asarray(curves.rho0)[0]}
    null = {"rho0": np.asarray(metrics.alignment(shuffled, curves.S_sig0).value)}
    if ds.L >= 2:
        labels = np.unique(ds.labels[ds.weights > 0])
        phi1 = signatures.label_signature(ds, 1, alphas=alphas, labels=labels, context=alphas)
        ks = np.arange(1, alphas.size // 2 + 1)
        rho1 = np.asarray(metrics.frequency_alignment(phi1, S_emb, ks))  # [S, K]
        rho1_null = np.asarray(metrics.frequency_alignment(phi1, shuffled, ks))
        for i, k in enumerate(ks):
            alignment[f"rho1_k{k}"], null[f"rho1_k{k}"] = rho1[:, i], rho1_null[:, i]
    return Measurement(
        reference="zero-order signature",
        steps=steps,
        tracked=alphas,
        alignment=alignment,
        null=null,
        probe={"corr": curves.probe_corr[0], "mse": curves.probe_mse[0]},
        sources=sources,
        keys=keys,
        widths=(W_E.shape[2],) * len(rows),
        settings={
            "task": ds.name,
            "group": group,
            "seed": seed,
            "rho0_method": curves.rho0_method,
            "null": "the group's rows permuted (one fixed permutation from seed)",
        },
    )


def _tracked_rows(
    snapshots, key, tracked, largest_id, check=None, same_shape: bool = True
) -> tuple[list[np.ndarray], tuple, tuple, int]:
    """Each snapshot's rows of ``tracked`` ``[A, d_s]``, read one at a time, with the sources,
    keys and the largest row count V; ``ValueError`` for ids past a snapshot's rows, an
    embedding ``check`` refuses, or (``same_shape``) shapes that differ."""
    rows, sources, keys, shape, V = [], [], [], None, 0
    largest = max(largest_id, int(np.max(tracked)))
    for i, snapshot in enumerate(snapshots):
        embedding = _embedding(snapshot, key, i)
        if check is not None:
            check(embedding)
        if same_shape and shape is not None and embedding.W_E.shape != shape:
            raise ValueError(
                f"snapshots: {embedding.source} has shape {embedding.W_E.shape}, but "
                f"{sources[0]} has {shape}; every snapshot of a task must be the same [V, d]"
            )
        shape, V = shape or embedding.W_E.shape, max(V, embedding.vocab_rows)
        if largest >= embedding.vocab_rows:
            raise ValueError(
                f"tokens: id {largest} is outside the embedding of {str(embedding.source)!r}, "
                f"which has {embedding.vocab_rows} rows (ids 0..{embedding.vocab_rows - 1}); the "
                "tokens and the checkpoint must come from the same tokenizer"
            )
        rows.append(embedding.rows(tracked))
        sources.append(str(embedding.source))
        keys.append(embedding.key)
        if not np.all(np.isfinite(rows[-1])):
            raise ValueError(f"snapshots: {embedding.source} has non-finite tracked rows")
    return rows, tuple(sources), tuple(keys), V


def _embedding(snapshot, key, index) -> Embedding:
    if isinstance(snapshot, Embedding):
        return snapshot
    if isinstance(snapshot, str | Path):
        return checkpoints.load_embedding(snapshot, key)
    array = np.asarray(snapshot)
    source = Path(f"<array {index}>")
    return Embedding(W_E=checkpoints.check_matrix(array, "W_E", source), key="W_E", source=source)


def _steps(snapshots, steps) -> np.ndarray:
    if steps is not None:
        steps = np.asarray(steps)
        if steps.shape != (len(snapshots),) or not np.issubdtype(steps.dtype, np.integer):
            raise ValueError(
                f"steps must be one integer per snapshot ({len(snapshots)}); got {steps.tolist()}"
            )
        return steps.astype(np.int64)
    named = [
        checkpoints.snapshot_step(s.source if isinstance(s, Embedding) else s)
        if isinstance(s, str | Path | Embedding)
        else None
        for s in snapshots
    ]
    if all(n is not None for n in named):
        return np.asarray(named, dtype=np.int64)
    return np.arange(len(snapshots), dtype=np.int64)
