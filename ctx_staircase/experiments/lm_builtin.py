"""Language model on the built-in corpus: the semantic structure of next-token signatures and
what the embeddings keep of it (the paper's Fig. 11 and §6.1, on a corpus of known structure).

The built-in corpus (`text.builtin_corpus`, 40 000 sentences of a probabilistic grammar) has
known structure: numbers with order relations, weekdays and months in cycles, and categories
(colors, animals, family roles) in category-typical contexts. The vocabulary keeps every word.

- Data side (exact counts): PCA of the next-token signatures ``phi^{y;nt}_alpha`` of each group;
  PC1 orders the numbers, adjacent weekdays are nearest neighbours (Fig. 11, kind "paper").
- Model side: the GPT of `lm_text` trained for 1000 steps on batches of 32 windows of 64 tokens,
  at gamma = 1 and 0.5 (one compiled program); the same measures on the final ``W_E`` (kind
  "project"), plus the `lm_text` curves and claims on this corpus.

All are measured in one fixed setting (``regime``; the FFN regime axis does not apply). Nulls: a
shuffled training stream for the signatures, the untrained embeddings for the model. Writes
figures ``semantics`` and ``curves``. Sizes: tiny (4000 sentences, the smoke-run GPT), CPU and
full (`lm_text`'s models, 1000 steps).

The [R] acceptance thresholds and the nulls: theory/experiments.md, lm_builtin.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np

from ctx_staircase import lm, lm_study, models, records, signatures, text
from ctx_staircase.experiments import Kind, get, lm_text
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec

SIGNATURE_ORDER_MIN = 0.9  # the project's acceptance threshold
SIGNATURE_CYCLE_MIN = 6  # of 7, the project's acceptance threshold
EMBEDDING_ORDER_MIN = 0.7  # [R]
EMBEDDING_CYCLE_MIN = 5  # [R], of 7
EMBEDDING_PURITY_MIN = 0.7  # [R]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """What a run is: the built-in corpus of ``n_sentences`` (not saved: 4000 tiny, 40 000
    otherwise) drawn with ``seed``, its training tokens and vocabulary (`settle`), the gamma
    lanes, the probe's steps, and the `lm.LMConfig` of the GPT (its fields, flat)."""

    corpus: str = "builtin"
    tokens_train: int = 0  # the corpus's (`settle`)
    vocab_size: int = 0  # the corpus's (`settle`)
    gammas: tuple[float, ...] = lm_study.GAMMAS
    seed: int = 0
    probe_steps: int
    d: int
    n_layers: int
    n_heads: int
    tied: bool
    context_length: int
    batch_size: int
    steps: int
    lr: float
    warmup_fraction: float
    min_lr_ratio: float
    weight_decay: float
    snapshot_every: int
    tracked: int
    min_count: int
    probe_vocabulary: int
    signature_windows: int
    validation_windows: int
    n_sentences: int = dataclasses.field(default=40_000, metadata={"saved": False})

    @property
    def lm(self) -> lm.LMConfig:
        """The GPT and its training, as `lm.train_lm` takes them."""
        return lm.LMConfig(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(lm.LMConfig)}
        )


def _config(model: lm.LMConfig, n_sentences: int, probe_steps: int) -> Config:
    return Config(n_sentences=n_sentences, probe_steps=probe_steps, **dataclasses.asdict(model))


_STEPS = dict(steps=1000, snapshot_every=20)
CONFIGS = {
    Size.TINY: _config(lm_text.lm_config(tiny=True), n_sentences=4000, probe_steps=50),
    Size.CPU: _config(dataclasses.replace(lm_text.lm_config(), **_STEPS), 40_000, 300),
    Size.FULL: _config(dataclasses.replace(lm_text.lm_config(full=True), **_STEPS), 40_000, 300),
}


def corpus_of(config: Config) -> text.Corpus:
    """The built-in corpus of ``config``, every word in the vocabulary."""
    source = text.builtin_corpus(n_sentences=config.n_sentences, seed=config.seed)
    return text.prepare_corpus(source, vocab_size=None)


def settle(config: Config, regime: Any = None) -> Config:
    """``config`` with its corpus's training tokens and vocabulary size."""
    corpus = corpus_of(config)
    return dataclasses.replace(
        config, tokens_train=int(corpus.train.size), vocab_size=corpus.vocab_size
    )


@dataclasses.dataclass(frozen=True)
class Structure:
    """`lm_study.structure` of a set of vectors: |Spearman| of PC1 with the numbers' order,
    weekdays and months whose nearest neighbour is adjacent, category purity."""

    number_order: float
    weekday_cycle: int
    month_cycle: int
    category_purity: float


def structure(vectors: np.ndarray, vocabulary: text.Vocabulary) -> Structure:
    return records.decode(Structure, lm_study.structure(vectors, vocabulary))


class Panels(NamedTuple):
    """What the figures draw: the next-token signatures, the trajectory and its curves."""

    phi_next: np.ndarray
    trajectory: lm.LMTrajectory
    curves: lm.LMCurves
    vocabulary: text.Vocabulary


@dataclasses.dataclass(frozen=True)
class Record:
    """What a run measured: the structure of the next-token signatures and of their shuffled
    stream, of the final ``W_E`` per gamma (keyed ``f"{gamma:g}"``) and of the untrained one;
    `lm_study.summarize` per gamma and the curves (`lm_study.curve_lists`); and, unsaved, what
    the figures draw."""

    signature_structure: Structure
    signature_structure_shuffled_stream: Structure
    embedding_structure: dict[str, Structure]
    embedding_structure_init: Structure
    summary: dict[str, lm_text.Lane]
    curves: dict[str, Any]
    panels: Panels | None = dataclasses.field(
        default=None, compare=False, metadata={"saved": False}
    )


def initial_embedding(config: lm.LMConfig, vocab_size: int, seed: int) -> np.ndarray:
    """The untrained ``W_E`` ``[V, d]`` of `lm.train_lm`'s gamma = 1 lane (the gamma lanes
    share this draw up to scale, so their cosines and PCA planes are the same)."""
    key = jax.random.fold_in(jax.random.key(seed), 0)
    return np.asarray(models.weights(lm.gpt(config, vocab_size, 1.0, key))["W_E"])


def signature_structures(
    corpus: text.Corpus, phi_next: np.ndarray, seed: int
) -> tuple[Structure, Structure]:
    """The `Structure` of ``phi_next``, the next-token signature of ``corpus``'s training
    stream, and of its null: the same stream with its tokens shuffled by ``seed`` (word order
    destroyed, word counts kept)."""
    shuffled = np.random.default_rng(seed).permutation(corpus.train)
    return (
        structure(phi_next, corpus.vocabulary),
        structure(
            signatures.next_token_signature(shuffled, corpus.vocab_size)[0], corpus.vocabulary
        ),
    )


def measure(config: Config, regime: Any = None) -> Record:
    """The signatures' structure (exact counts), then the GPT's gamma lanes trained and
    measured (`lm_study.train_and_measure`)."""
    corpus = corpus_of(config)
    vocabulary = corpus.vocabulary
    phi_next, _ = signatures.next_token_signature(corpus.train, corpus.vocab_size)
    trajectory, _, curves = lm_study.train_and_measure(
        corpus, config.lm, gammas=config.gammas, seed=config.seed, probe_steps=config.probe_steps
    )
    signature, shuffled = signature_structures(corpus, phi_next, config.seed)
    untrained = initial_embedding(config.lm, corpus.vocab_size, config.seed)
    return Record(
        signature_structure=signature,
        signature_structure_shuffled_stream=shuffled,
        embedding_structure={
            f"{gamma:g}": structure(trajectory.final_W_E[g], vocabulary)
            for g, gamma in enumerate(trajectory.gammas)
        },
        embedding_structure_init=structure(untrained, vocabulary),
        summary=records.decode(dict[str, lm_text.Lane], lm_study.summarize(trajectory, curves)),
        curves=lm_study.curve_lists(trajectory, curves),
        panels=Panels(phi_next, trajectory, curves, vocabulary),
    )


def figures(config: Config, record: Record) -> dict:
    """``semantics``: PCA of the signatures and of the gamma = 1 ``W_E``; ``curves``: the
    `lm_text` curves."""
    panels = record.panels
    trajectory = panels.trajectory
    return {
        "semantics": lm_study.semantic_figure(
            panels.phi_next, trajectory.final_W_E[0], panels.vocabulary
        ),
        "curves": lm_study.curves_figure(
            trajectory, panels.curves, f"built-in corpus: {get('lm_text').title}"
        ),
    }


# --------------------------------------------------------------------------------------------
# claims: Fig. 11 on the signatures (null: the shuffled stream), the embeddings' (null: the
# untrained ones), then `lm_text`'s on this corpus


def _cycles(s: Structure) -> str:
    return (
        f"{s.weekday_cycle}/7 nearest neighbours adjacent (months {s.month_cycle}/12; category "
        f"purity {s.category_purity:.2f})"
    )


def _found(s: Structure) -> str:
    return (
        f"numbers |Spearman| {s.number_order:.3f}; weekday cycle {s.weekday_cycle}/7; month "
        f"cycle {s.month_cycle}/12; category purity {s.category_purity:.2f}"
    )


def _keeps(s: Structure) -> bool:
    return (
        s.number_order >= EMBEDDING_ORDER_MIN
        and s.weekday_cycle >= EMBEDDING_CYCLE_MIN
        and s.category_purity >= EMBEDDING_PURITY_MIN
    )


def _embedding_measured(record: Record, config: Config) -> str:
    small, standard = lm_text.lanes(record.embedding_structure)
    return _found(small) + "; standard init: " + _found(standard)


def _on_signatures(claim: str, measured, criterion: Criterion, null_text) -> ClaimSpec:
    """A Fig. 11 claim on the next-token signatures' `Structure`, its null the shuffled stream's
    (``measured`` and ``null_text`` functions of a `Structure`)."""
    return ClaimSpec(
        item="Fig. 11",
        claim=claim,
        statistic=lambda r, c: r.signature_structure,
        measured=lambda r, c: measured(r.signature_structure),
        criterion=criterion,
        null=lambda r, c: r.signature_structure_shuffled_stream,
        null_text=lambda r, c: (
            "shuffled stream: " + null_text(r.signature_structure_shuffled_stream)
        ),
    )


CLAIMS = (
    _on_signatures(
        "PC1 of the next-token signatures orders the numbers",
        lambda s: f"|Spearman| {s.number_order:.3f}",
        Criterion(f">= {SIGNATURE_ORDER_MIN}", lambda s: s.number_order >= SIGNATURE_ORDER_MIN),
        lambda s: f"|Spearman| {s.number_order:.3f}",
    ),
    _on_signatures(
        "weekdays form a cycle in the top-2 PCA plane of their next-token signatures",
        _cycles,
        Criterion(
            f">= {SIGNATURE_CYCLE_MIN} of 7", lambda s: s.weekday_cycle >= SIGNATURE_CYCLE_MIN
        ),
        lambda s: f"{s.weekday_cycle}/7",
    ),
    ClaimSpec(
        item="Fig. 11 [R]",
        claim="after training (gamma = 1) the embeddings keep the structure measurably",
        statistic=lambda r, c: lm_text.lanes(r.embedding_structure)[0],
        measured=_embedding_measured,
        criterion=Criterion(
            f"numbers >= {EMBEDDING_ORDER_MIN}, weekday cycle >= {EMBEDDING_CYCLE_MIN}/7, "
            f"purity >= {EMBEDDING_PURITY_MIN} [R: 'measurably', fixed before the run: below "
            f"the signatures' {SIGNATURE_ORDER_MIN} and {SIGNATURE_CYCLE_MIN}/7, purity well "
            "above chance (about 0.3)]",
            _keeps,
        ),
        null=lambda r, c: r.embedding_structure_init,
        null_text=lambda r, c: "init: " + _found(r.embedding_structure_init),
        kind=Kind.PROJECT,
        failure="false",  # read at the end of the whole schedule: the learning rate has decayed
    ),
    *lm_text.CLAIMS,
)


def regime_text(config: Config) -> str:
    """The regime its claims name: the built-in corpus in its vocabulary."""
    return lm_text.regime("built-in corpus", config.vocab_size)


SPEC = Spec.declared(globals())
