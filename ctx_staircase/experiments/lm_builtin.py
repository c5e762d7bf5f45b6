"""Language model on the built-in corpus: the semantic structure of next-token signatures and
what the embeddings keep of it (SPEC.md Fig. 11, §8 item 16; issue 6).

The built-in corpus (`text.builtin_corpus`, 40 000 sentences of a probabilistic grammar) has
known structure: numbers with order relations, weekdays and months in cycles, and categories
(colors, animals, family roles) in category-typical contexts. The vocabulary keeps every word.

- Data side (exact counts): PCA of the next-token signatures ``phi^{y;nt}_alpha`` of each group.
  Acceptance: PC1 orders the numbers (|Spearman| >= 0.9) and adjacent weekdays are nearest
  neighbours in the top-2 PCA plane in >= 6 of 7 cases.
- Model side: the GPT of `lm_text` (d = 128, 2 layers, AdamW, warmup-cosine) trained for 1000
  steps on batches of 32 windows of 64 tokens, at gamma = 1 and 0.5 (one compiled program); the same
  measures on the rows of the final ``W_E``, plus the `lm_text` curves and claims on this corpus.
  [R] "keeps the structure measurably", fixed before the run: numbers |Spearman| >= 0.7,
  weekday cycle >= 5 of 7 (chance about 2), category purity >= 0.7 (chance about 0.3).

Claims: the signature structure is Fig. 11's (kind "paper", with issue 6's thresholds); the
embedding structure is issue 6's (kind "project"); the LM curves' claims are `lm_text`'s. All
are measured in one fixed setting (``regime``; the FFN regime axis does not apply). Nulls: the
signature structure is scored also on a shuffled training stream (the word order permuted: every
next-token signature becomes the unigram distribution plus counting noise), the embedding
structure on the untrained embeddings (the step-0 draw, shared by both gamma lanes up to scale).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ctx_staircase import lm, metrics, models, plots, semantics, signatures, text
from ctx_staircase.experiments import Claim, Outcome, lm_text

NAME = "lm_builtin"
TITLE = "Built-in corpus: semantic structure of next-token signatures and of learned embeddings"

SIGNATURE_ORDER_MIN = 0.9  # issue 6 acceptance
SIGNATURE_CYCLE_MIN = 6  # of 7, issue 6 acceptance
EMBEDDING_ORDER_MIN = 0.7  # [R]
EMBEDDING_CYCLE_MIN = 5  # [R], of 7
EMBEDDING_PURITY_MIN = 0.7  # [R]
CATEGORIES = ("colors", "animals", "family")


def structure(vectors: np.ndarray, vocabulary: text.Vocabulary) -> dict:
    """The three semantic measures of `semantics` on rows ``vectors[token id]``."""
    rows = {g: vectors[text.word_group_ids(vocabulary, g)] for g in text.BUILTIN_GROUPS}
    return dict(
        number_order=semantics.number_order(rows["numbers"]),
        weekday_cycle=semantics.cycle_neighbours(rows["weekdays"]),
        month_cycle=semantics.cycle_neighbours(rows["months"]),
        category_purity=semantics.category_purity({c: rows[c] for c in CATEGORIES}),
    )


def semantic_figure(phi_next: np.ndarray, W_E: np.ndarray, vocabulary: text.Vocabulary):
    """PCA of the next-token signatures (top row) and of the learned embeddings (bottom row)
    for numbers (joined in order), weekdays and months (joined as cycles), and the three
    categories together (coloured by category)."""
    panels = ("numbers", "weekdays", "months", "categories")
    fig, axes = plots.figure(
        2,
        len(panels),
        panel=(4.0, 3.75),
        suptitle=(
            r"Built-in corpus: PCA of next-token signatures and of the final $W_E$ ($\gamma$ = 1)"
        ),
    )
    for row, (vectors, kind) in enumerate(((phi_next, "signature"), (W_E, "embedding"))):
        for ax, panel in zip(axes[row], panels, strict=True):
            groups = CATEGORIES if panel == "categories" else (panel,)
            ids = np.concatenate([text.word_group_ids(vocabulary, g) for g in groups])
            result = metrics.pca(np.asarray(vectors[ids], dtype=np.float64), 2)
            x, y = np.asarray(result.scores).T
            if panel == "categories":
                sizes = [len(text.BUILTIN_GROUPS[g]) for g in groups]
                ax.scatter(
                    x,
                    y,
                    c=np.repeat(np.arange(len(groups)), sizes),
                    cmap="tab10",
                    s=18,
                    vmin=0,
                    vmax=9,
                )
            else:
                closed = panel != "numbers"
                ax.plot(
                    np.r_[x, x[:1]] if closed else x,
                    np.r_[y, y[:1]] if closed else y,
                    color="0.75",
                    lw=0.8,
                )
                ax.scatter(x, y, c=np.arange(len(ids)), cmap="viridis", s=18)
            for xi, yi, word in zip(x, y, vocabulary.decode(ids), strict=True):
                ax.annotate(word, (xi, yi), xytext=(2, 2), textcoords="offset points")
            explained = np.asarray(result.explained_variance_ratio)
            plots.axis_labels(
                ax,
                f"PC1 ({100 * explained[0]:.0f}% var.)",
                f"PC2 ({100 * explained[1]:.0f}% var.)",
                f"{kind}: {panel}",
            )
    return fig


def initial_embedding(config: lm.LMConfig, vocab_size: int, seed: int) -> np.ndarray:
    """The untrained ``W_E`` ``[V, d]`` of `lm.train_lm`'s gamma = 1 lane (the gamma lanes
    share this draw up to scale, so their cosines and PCA planes are the same)."""
    key = jax.random.fold_in(jax.random.key(seed), 0)
    return np.asarray(models.weights(lm._model(config, vocab_size, 1.0, key))["W_E"])


def run(full: bool = False, tiny: bool = False, seed: int = 0) -> Outcome:
    corpus = text.prepare_corpus(
        text.builtin_corpus(n_sentences=4000 if tiny else 40_000, seed=seed), vocab_size=None
    )
    vocabulary = corpus.vocabulary
    phi_next, _ = signatures.next_token_signature(corpus.train, corpus.vocab_size)
    data = structure(phi_next, vocabulary)
    shuffled_stream = np.random.default_rng(seed).permutation(corpus.train)
    shuffled = structure(
        signatures.next_token_signature(shuffled_stream, corpus.vocab_size)[0], vocabulary
    )
    config = lm_text.lm_config(full, tiny)
    if not tiny:
        config = dataclasses.replace(config, steps=1000, snapshot_every=20)
    probe_steps = 50 if tiny else 300
    trajectory, _, curves = lm_text.train_and_measure(
        corpus, config, seed=seed, probe_steps=probe_steps
    )
    summary = lm_text.summarize(trajectory, curves)
    learned = {
        f"{gamma:g}": structure(trajectory.final_W_E[g], vocabulary)
        for g, gamma in enumerate(trajectory.gammas)
    }
    small = learned["1"]
    untrained = structure(initial_embedding(config, corpus.vocab_size, seed), vocabulary)
    found = (
        "numbers |Spearman| {number_order:.3f}; weekday cycle {weekday_cycle}/7; month cycle "
        "{month_cycle}/12; category purity {category_purity:.2f}"
    )

    def keeps(measures: dict) -> bool:
        return (
            measures["number_order"] >= EMBEDDING_ORDER_MIN
            and measures["weekday_cycle"] >= EMBEDDING_CYCLE_MIN
            and measures["category_purity"] >= EMBEDDING_PURITY_MIN
        )

    regime = lm_text.regime("built-in corpus", corpus.vocab_size)
    claims = [
        Claim(
            "Fig. 11 / issue 6",
            "PC1 of the next-token signatures orders the numbers",
            f"|Spearman| {data['number_order']:.3f}",
            f">= {SIGNATURE_ORDER_MIN}",
            data["number_order"] >= SIGNATURE_ORDER_MIN,
            regime=regime,
            null=f"shuffled stream: |Spearman| {shuffled['number_order']:.3f}",
            null_passed=shuffled["number_order"] >= SIGNATURE_ORDER_MIN,
        ),
        Claim(
            "Fig. 11 / issue 6",
            "weekdays form a cycle in the top-2 PCA plane of their next-token signatures",
            f"{data['weekday_cycle']}/7 nearest neighbours adjacent (months "
            f"{data['month_cycle']}/12; category purity {data['category_purity']:.2f})",
            f">= {SIGNATURE_CYCLE_MIN} of 7",
            data["weekday_cycle"] >= SIGNATURE_CYCLE_MIN,
            regime=regime,
            null=f"shuffled stream: {shuffled['weekday_cycle']}/7",
            null_passed=shuffled["weekday_cycle"] >= SIGNATURE_CYCLE_MIN,
        ),
        Claim(
            "issue 6 [R]",
            "after training (gamma = 1) the embeddings keep the structure measurably",
            found.format(**small) + "; standard init: " + found.format(**learned["0.5"]),
            f"[R] numbers >= {EMBEDDING_ORDER_MIN}, weekday cycle >= {EMBEDDING_CYCLE_MIN}/7, "
            f"purity >= {EMBEDDING_PURITY_MIN}",
            keeps(small),
            kind="project",
            regime=regime,
            null="init: " + found.format(**untrained),
            null_passed=keeps(untrained),
        ),
        *lm_text.claims(summary, config.steps, regime),
    ]
    return Outcome(
        claims=claims,
        figures={
            "semantics": semantic_figure(phi_next, trajectory.final_W_E[0], vocabulary),
            "curves": lm_text.figure(trajectory, curves, f"built-in corpus: {lm_text.TITLE}"),
        },
        numbers=dict(
            signature_structure=data,
            signature_structure_shuffled_stream=shuffled,
            embedding_structure=learned,
            embedding_structure_init=untrained,
            summary=summary,
            curves=lm_text.curve_lists(trajectory, curves),
        ),
        config=dict(
            corpus="builtin",
            tokens_train=int(corpus.train.size),
            vocab_size=corpus.vocab_size,
            gammas=list(lm_text.GAMMAS),
            seed=seed,
            probe_steps=probe_steps,
            **dataclasses.asdict(config),
        ),
    )
