"""Text data for the language model: tokenizer, vocabulary, loader, corpus split, windows, and
the semantics of the built-in grammar corpus (the paper §6 and §6.1; theory/lm.md)."""

import numpy as np
import pytest

from ctx_staircase import semantics, signatures, text

# --------------------------------------------------------------------------------------------
# tokenizer


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Hello, World!", ["hello", ",", "world", "!"]),
        ("The CAT sat", ["the", "cat", "sat"]),
        ("Don't stop; we know't.", ["don't", "stop", ";", "we", "know't", "."]),
        ("in 1599 AD, act 3b", ["in", "1599", "ad", ",", "act", "3b"]),
        ("  a\tb\n\nc  \r\n", ["a", "b", "c"]),
        ("wait...what?!", ["wait", ".", ".", ".", "what", "?", "!"]),
        ("snake_case (x-y)", ["snake", "_", "case", "(", "x", "-", "y", ")"]),
        ("Café ÜBER", ["café", "über"]),
        ("", []),
        (" \n\t ", []),
    ],
)
def test_tokenize(source, expected):
    assert text.tokenize(source) == expected


def test_tokenize_rejects_non_text():
    with pytest.raises(TypeError, match="text must be a str"):
        text.tokenize(b"bytes")


# --------------------------------------------------------------------------------------------
# vocabulary


def test_vocabulary_order_ties_and_determinism():
    words = ["b", "a", "c", "b", "a", "d", "d", "d"]
    vocab = text.build_vocabulary(words, size=3)
    # frequency first (d: 3), then alphabetical among ties (a, b: 2); c (1) is cut.
    assert vocab.tokens == ("<unk>", "d", "a", "b")
    assert vocab.size == len(vocab) == 4
    assert vocab.index == {"<unk>": 0, "d": 1, "a": 2, "b": 3}
    shuffled = [words[i] for i in np.random.default_rng(0).permutation(len(words))]
    assert text.build_vocabulary(shuffled, size=3) == vocab
    assert text.build_vocabulary(words, size=None).tokens == ("<unk>", "d", "a", "b", "c")


def test_vocabulary_unk_and_round_trip():
    vocab = text.build_vocabulary(text.tokenize("the cat and the dog and the bird"), size=3)
    assert vocab.tokens == ("<unk>", "the", "and", "bird")
    ids = vocab.encode(text.tokenize("the zebra and the bird"))
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [1, 0, 2, 1, 3])
    assert vocab.decode(ids) == ["the", "<unk>", "and", "the", "bird"]
    known = ["bird", "the", "and", "and"]
    assert vocab.decode(vocab.encode(known)) == known
    assert vocab.encode([]).shape == (0,)
    with pytest.raises(ValueError, match=r"ids must hold integer ids in \[0, size\) = \[0, 4\)"):
        vocab.decode([4])
    with pytest.raises(TypeError, match="not a str"):
        vocab.encode("the cat")


def test_vocabulary_too_few_words_names_size():
    words = text.tokenize("one two three two one")  # 3 distinct words
    assert text.build_vocabulary(words, size=3).size == 4  # exactly enough is fine
    with pytest.raises(ValueError, match=r"size=4 .* only 3 distinct words"):
        text.build_vocabulary(words, size=4)
    with pytest.raises(ValueError, match="size must be an int >= 1"):
        text.build_vocabulary(words, size=0)
    with pytest.raises(ValueError, match=r"vocab_size=5 .* only 3 distinct words"):
        text.prepare_corpus("one two three two one one", vocab_size=5, validation_fraction=0.2)


def test_vocabulary_validates_tokens():
    with pytest.raises(ValueError, match="<unk>"):
        text.Vocabulary(("a", "b"))
    with pytest.raises(ValueError, match="repeat"):
        text.Vocabulary(("<unk>", "a", "a"))


# --------------------------------------------------------------------------------------------
# loading text: every bad input names `path`


def test_load_text_reads_utf8(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_text("Grüße, World!\nsecond line\n", encoding="utf-8")
    assert text.load_text(path) == "Grüße, World!\nsecond line\n"
    path.write_bytes(b"\xef\xbb\xbfbom text")  # a byte-order mark is dropped
    assert text.load_text(str(path)) == "bom text"


def test_load_text_missing_file(tmp_path):
    path = tmp_path / "absent.txt"
    with pytest.raises(FileNotFoundError, match=r"path .*absent\.txt.*no such file"):
        text.load_text(path)
    with pytest.raises(ValueError, match=r"path .* is not a regular file"):
        text.load_text(tmp_path)


@pytest.mark.parametrize(("content", "what"), [(b"", "empty"), (b" \n\t\r\n", "whitespace-only")])
def test_load_text_empty_file(tmp_path, content, what):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"path .*empty\.txt.* is {what}"):
        text.load_text(path)


def test_load_text_non_utf8_gives_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("hello wörld".encode("latin-1"))  # ö is byte 0xf6 at offset 7
    with pytest.raises(ValueError, match=r"path .*latin1\.txt.* not valid UTF-8: byte 0xf6 at "
                       r"byte offset 7"):  # fmt: skip
        text.load_text(path)
    path.write_bytes(b"\xef\xbb\xbfab\xff")  # the offset counts the byte-order mark
    with pytest.raises(ValueError, match="byte 0xff at byte offset 5"):
        text.load_text(path)


def test_load_text_binary(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"PK\x03\x04\x00\x00\x08\x00\xffbinary")
    with pytest.raises(ValueError, match=r"path .*blob\.bin.* binary content .*byte offset 4"):
        text.load_text(path)


# --------------------------------------------------------------------------------------------
# corpus split


def test_prepare_corpus_split():
    words = [f"w{i % 7}" for i in range(95)] + ["late"] * 5  # "late" only in the last part
    corpus = text.prepare_corpus(" ".join(words), vocab_size=None, validation_fraction=0.1)
    assert corpus.train.dtype == corpus.validation.dtype == np.int32
    assert (corpus.train.size, corpus.validation.size) == (90, 10)
    assert "late" not in corpus.vocabulary.index  # the vocabulary sees the training part only
    assert corpus.vocab_size == 8
    # validation is the contiguous tail that follows training
    assert corpus.vocabulary.decode(corpus.train) == words[:90]
    assert corpus.vocabulary.decode(corpus.validation) == words[90:95] + ["<unk>"] * 5


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_prepare_corpus_fraction_range(fraction):
    pattern = r"validation_fraction must be a finite real number in \(0, 1\)"
    with pytest.raises(ValueError, match=pattern):
        text.prepare_corpus("a b c d e f", vocab_size=None, validation_fraction=fraction)


def test_prepare_corpus_empty_part():
    with pytest.raises(ValueError, match=r"validation_fraction=0\.01 of 10 tokens leaves 0"):
        text.prepare_corpus("a b c d e f g h i j", vocab_size=None, validation_fraction=0.01)


# --------------------------------------------------------------------------------------------
# windows and batches


def test_windows_shapes_and_contents():
    stream = np.arange(10)
    w = text.windows(stream, 3)
    assert w.dtype == np.int32
    np.testing.assert_array_equal(w, [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]])
    inputs, targets = w[:, :-1], w[:, 1:]
    np.testing.assert_array_equal(targets, inputs + 1)
    assert text.windows(stream, 3, stride=1).shape == (7, 4)
    np.testing.assert_array_equal(text.windows(stream, 3, stride=4), [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert text.windows(stream, 9).shape == (1, 10)
    with pytest.raises(ValueError, match="context_length=10 needs at least 11"):
        text.windows(stream, 10)
    with pytest.raises(ValueError, match="stride must be an int >= 1"):
        text.windows(stream, 3, stride=0)
    with pytest.raises(ValueError, match="stream must be a 1-D integer array"):
        text.windows(np.zeros((2, 5), dtype=np.int32), 3)


def test_sample_windows_draw_every_start_including_the_last():
    """The starts are uniform over ``0 .. N - T - 1``: on a stream of ``T + 3`` tokens the three
    windows ``stream[i : i + T + 1]``, i = 0, 1, 2, all appear, the last one too."""
    T = 4
    stream = np.arange(T + 3, dtype=np.int32)
    drawn = text.sample_windows(stream, T, 300, np.random.default_rng(0))
    starts = drawn[:, 0]
    np.testing.assert_array_equal(drawn, starts[:, None] + np.arange(T + 1))
    assert set(starts.tolist()) == {0, 1, 2}
    assert np.all(np.bincount(starts) > 60)  # about 100 each


def test_batches_deterministic():
    stream = np.arange(1000, dtype=np.int32)
    first, second = text.batches(stream, 8, 4, seed=3), text.batches(stream, 8, 4, seed=3)
    a = [next(first) for _ in range(3)]
    b = [next(second) for _ in range(3)]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[0].shape == (4, 9) and a[0].dtype == np.int32
    np.testing.assert_array_equal(np.diff(a[0], axis=1), 1)  # contiguous slices of the stream
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], next(text.batches(stream, 8, 4, seed=4)))
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        text.batches(stream, 8, 0)


# --------------------------------------------------------------------------------------------
# language-model signatures on a hand-made stream (the paper §6; theory/lm.md §1)


def test_signatures_on_a_hand_made_stream():
    words = text.tokenize("the cat the dog the cat")
    vocab = text.build_vocabulary(words, size=3)
    assert vocab.tokens == ("<unk>", "the", "cat", "dog")
    stream = vocab.encode(words)
    np.testing.assert_array_equal(stream, [1, 2, 1, 3, 1, 2])
    unk, the, cat, dog = range(4)
    # transitions: the->cat, cat->the, the->dog, dog->the, the->cat
    phi, r = signatures.next_token_signature(stream, vocab.size)
    expected = np.zeros((4, 4))
    expected[the, cat], expected[the, dog] = 2 / 3, 1 / 3
    expected[cat, the] = expected[dog, the] = 1.0
    np.testing.assert_allclose(phi, expected, atol=1e-15)
    np.testing.assert_allclose(r, [0, 3 / 5, 1 / 5, 1 / 5], atol=1e-15)
    pre = signatures.previous_token_signature(stream, vocab.size)
    expected = np.zeros((4, 4))
    expected[cat, the] = expected[dog, the] = 1.0
    expected[the, cat] = expected[the, dog] = 1 / 2
    np.testing.assert_allclose(pre, expected, atol=1e-15)
    # prefix: P(next = nu, beta anywhere strictly before s | x_s = alpha); the occurs at s=0,2,4
    # with prefixes {}, {the, cat}, {the, cat, dog} and next cat, dog, cat.
    prefix = signatures.prefix_signature(stream, vocab.size)
    expected = np.zeros((4, 4, 4))
    expected[the, cat, [the, cat, dog]] = 1 / 3  # only s=4
    expected[the, dog, [the, cat]] = 1 / 3  # s=2
    expected[cat, the, the] = 1.0  # s=1, prefix {the}
    expected[dog, the, [the, cat]] = 1.0  # s=3, prefix {the, cat}
    np.testing.assert_allclose(prefix, expected, atol=1e-15)
    assert not prefix[unk].any()


# --------------------------------------------------------------------------------------------
# the built-in corpus


def test_builtin_corpus_is_deterministic_and_sized():
    small = text.builtin_corpus(200, seed=5)
    assert small == text.builtin_corpus(200, seed=5)
    assert small != text.builtin_corpus(200, seed=6)
    words = text.tokenize(text.builtin_corpus())
    assert 200_000 <= len(words) <= 400_000
    vocab = text.build_vocabulary(words, size=None)
    for group, members in text.BUILTIN_GROUPS.items():
        ids = text.word_group_ids(vocab, group)
        assert vocab.decode(ids) == list(members), group
    assert len(text.BUILTIN_GROUPS["numbers"]) == 20
    assert len(text.BUILTIN_GROUPS["weekdays"]) == 7
    assert len(text.BUILTIN_GROUPS["months"]) == 12
    # the default vocabulary asks for far more words than the grammar has
    with pytest.raises(ValueError, match="vocab_size=2000 asks for 2000 words"):
        text.prepare_corpus(text.builtin_corpus(500))


def test_word_group_ids_errors():
    vocab = text.build_vocabulary(["one", "two"], size=None)
    np.testing.assert_array_equal(text.word_group_ids(vocab, ["two", "one"]), [2, 1])
    with pytest.raises(KeyError, match="not one of"):
        text.word_group_ids(vocab, "planets")
    with pytest.raises(ValueError, match=r"missing from the vocabulary: .*'three'"):
        text.word_group_ids(vocab, "numbers")


def _builtin_next_token(seed: int):
    words = text.tokenize(text.builtin_corpus(seed=seed))
    vocab = text.build_vocabulary(words, size=None)
    phi, _ = signatures.next_token_signature(vocab.encode(words), vocab.size)
    return vocab, phi


@pytest.mark.parametrize("seed", [0, 1])
def test_builtin_corpus_semantics(seed):
    vocab, phi = _builtin_next_token(seed)
    # numbers: PC1 of the next-token signatures orders them by value
    rho = semantics.number_order(phi[text.word_group_ids(vocab, "numbers")])
    assert rho >= 0.9, rho
    # weekdays (and months) form a cycle in the top-2 PCA plane
    assert semantics.cycle_neighbours(phi[text.word_group_ids(vocab, "weekdays")]) >= 6
    assert semantics.cycle_neighbours(phi[text.word_group_ids(vocab, "months")]) >= 10


# --------------------------------------------------------------------------------------------
# real text


def test_shakespeare_loads(shakespeare_path):
    source = text.load_text(shakespeare_path)
    words = text.tokenize(source)
    assert len(words) > 100_000
    corpus = text.prepare_corpus(source)
    assert corpus.vocab_size == 2001
    assert corpus.vocabulary.tokens[0] == "<unk>"
    assert corpus.train.size + corpus.validation.size == len(words)
    assert corpus.vocabulary.decode(corpus.train[:4]) == words[:4]  # "first citizen : before"


def test_the_validation_tail_is_the_rounded_fraction():
    """``round(fraction * N)`` tokens, not truncated: 0.15 of 10 words is 2 (1.5 rounds to even),
    0.25 of 10 is 2 and 0.35 of 10 is 4 (3.5 rounds to even), 0.27 of 10 is 3."""
    words = " ".join(f"w{i}" for i in range(10))
    for fraction, expected in [(0.15, 2), (0.25, 2), (0.27, 3), (0.35, 4)]:
        corpus = text.prepare_corpus(words, vocab_size=None, validation_fraction=fraction)
        assert (corpus.train.size, corpus.validation.size) == (10 - expected, expected), fraction


def test_the_builtin_corpus_states_true_order_relations():
    """Every "after a comes b", "before b comes a", "x is more/less than y" sentence of the
    built-in text is true of the numbers one..twenty (the facts its signatures encode)."""
    import re

    names = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    value = {w: i + 1 for i, w in enumerate((names + "fifteen sixteen seventeen eighteen "
                                              "nineteen twenty").split())}  # fmt: skip
    corpus = text.builtin_corpus(n_sentences=3000, seed=1)
    checked = 0
    for sentence in corpus.split(" ."):
        words = sentence.split()
        if len(words) == 4 and words[0] in ("after", "before") and words[2] == "comes":
            a, b = value.get(words[1]), value.get(words[3])
            if a is not None and b is not None:
                assert b - a == (1 if words[0] == "after" else -1), sentence
                checked += 1
        match = re.fullmatch(r"(\w+) is (more|less) than (\w+)", sentence.strip())
        if match and match[1] in value and match[3] in value:
            x, y = value[match[1]], value[match[3]]
            assert (x > y) == (match[2] == "more"), sentence
            checked += 1
    assert checked > 200
