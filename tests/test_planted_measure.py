"""`measure.measure_snapshots` records beyond their easiest case: the JSON record of snapshots of
different widths and rows, a stream holding an unknown-word id, a text tokenized by word
vectors' words, the semantic measures of the last of more than two snapshots, and a task's
nulls as the scores of the relabelled embedding."""

from __future__ import annotations

import numpy as np
import pytest

from ctx_staircase import checkpoints, geometry, measure, tasks, text


def test_the_json_record_lists_the_width_of_every_snapshot_and_the_most_rows():
    """Snapshots of widths 4, 6 and 3 (12, 14 and 12 rows) are recorded as widths [4, 6, 3], in
    the record and its JSON form, and as 14 vocabulary rows."""
    rng = np.random.default_rng(7)
    stream = checkpoints.TokenStream(
        ids=rng.integers(0, 10, size=203), tracked=np.array([2, 5, 1, 7, 3, 8]), context_length=5
    )
    snapshots = [rng.normal(size=(V, d)) for V, d in ((12, 4), (14, 6), (12, 3))]
    measured = measure.measure_snapshots(stream, snapshots, probe_vocabulary=6, probe_steps=0)
    assert measured.widths == (4, 6, 3)
    record = measured.to_json()
    assert record["widths"] == [4, 6, 3]
    assert record["snapshots"] == ["<array 0>", "<array 1>", "<array 2>"]
    assert record["keys"] == ["W_E"] * 3
    assert measured.settings["vocab_rows"] == 14 and record["settings"]["vocab_rows"] == 14


def test_a_stream_with_an_unknown_word_id_records_the_id_range_past_the_rows():
    """A stream whose ids 0..9 are rows of the snapshot and whose id 10 is the unknown words'
    (one past the 10 rows) records an id range of 11 and 10 vocabulary rows."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 11, size=300)
    assert (ids == 10).any()
    stream = checkpoints.TokenStream(ids=ids, tracked=np.arange(1, 7), context_length=5, unknown=10)
    measured = measure.measure_snapshots(
        stream, [rng.normal(size=(10, 4))], probe_vocabulary=5, probe_steps=0
    )
    assert measured.settings["id_range"] == 11
    assert measured.settings["vocab_rows"] == 10
    assert measured.settings["tokens"] == 300


def test_semantic_structure_is_read_on_the_first_and_the_last_of_three_snapshots(tmp_path):
    """Of three snapshots, only the last has the numbers on a line: "last" scores number order 1,
    "first" (random) does not."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text.builtin_corpus(n_sentences=1000, seed=0))
    stream = checkpoints.load_tokens(corpus)
    numbers = measure.word_group_ids(stream.token_strings)["numbers"]
    rng = np.random.default_rng(0)
    size = len(stream.token_strings)
    first, middle, last = (rng.normal(size=(size, 16)) for _ in range(3))
    last[numbers] = np.outer(np.arange(len(numbers)), np.eye(16)[0]) + 0.01
    measured = measure.measure_snapshots(
        stream, [first, middle, last], count=12, probe_vocabulary=8, probe_steps=0
    )
    assert measured.semantic["last"]["number_order"] == pytest.approx(1.0)
    assert measured.semantic["first"]["number_order"] < 0.9


def test_a_task_null_is_the_score_of_the_embedding_with_its_group_rows_relabelled():
    """The null of every order is the run's score of the embedding whose group rows are
    permuted by the null's permutation (the seed's): rows and columns of S^emb together."""
    ds = tasks.make("add", N=8)
    alphas = geometry.group_tokens(ds, geometry.default_group(ds))
    W_E = np.random.default_rng(2).normal(size=(ds.vocab_size, 6))
    seed = 3
    relabelled = W_E.copy()
    relabelled[alphas] = W_E[alphas][np.random.default_rng(seed).permutation(alphas.size)]
    measured = measure.measure_snapshots(ds, [W_E], seed=seed)
    moved = measure.measure_snapshots(ds, [relabelled], seed=seed)
    assert set(measured.null) == set(measured.alignment) and "rho1_k1" in measured.null
    for name, null in measured.null.items():
        assert null[0] == pytest.approx(moved.alignment[name][0], rel=1e-9, abs=1e-12), name
    assert measured.null["rho0"][0] != pytest.approx(measured.alignment["rho0"][0], abs=1e-3)


def test_a_text_tokenized_by_word_vectors_records_its_word_and_oov_counts(tmp_path):
    """A 400-word text of which one word (a tenth of the words) is not among the vectors'
    records 400 words, 40 out of the vocabulary, a share of 0.1 and the unknown-id treatment."""
    words = "the cat sat on a mat and dog ran to".split()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(words * 40))
    vocabulary = tuple(words[:-1])  # "to" has no vector
    stream = checkpoints.load_tokens(corpus, vocabulary=vocabulary)
    assert (stream.words, stream.out_of_vocabulary) == (400, 40)
    rng = np.random.default_rng(0)
    embedding = checkpoints.Embedding(
        rng.normal(size=(len(vocabulary), 5)), "glove", tmp_path / "v.txt", vocabulary
    )
    measured = measure.measure_snapshots(
        stream, [embedding], tracked=np.arange(1, 6), context_length=5, probe_steps=0
    )
    settings = measured.settings
    assert settings["words"] == 400 and settings["out_of_vocabulary"] == 40
    assert settings["oov_share"] == pytest.approx(0.1, rel=1e-14)
    assert settings["oov"].startswith("kept in the stream as one unknown id")


def test_a_word_group_with_a_word_past_the_snapshots_rows_is_left_out():
    """Token texts naming the numbers (ids within the rows) and the weekdays, the last weekday
    at id V, one past the snapshot's V rows: the semantic measures score the numbers and leave
    the weekdays out."""
    numbers, weekdays = text.BUILTIN_GROUPS["numbers"], text.BUILTIN_GROUPS["weekdays"]
    strings = numbers + weekdays
    V = len(strings) - 1  # the last weekday has no row
    rng = np.random.default_rng(1)
    stream = checkpoints.TokenStream(
        ids=rng.integers(0, V, size=400), token_strings=strings, tracked=np.arange(6)
    )
    measured = measure.measure_snapshots(
        stream, [rng.normal(size=(V, 4))], context_length=5, probe_vocabulary=5, probe_steps=0
    )
    assert set(measured.semantic["last"]) == {"number_order"}
    assert measured.semantic["first"] == measured.semantic["last"]
