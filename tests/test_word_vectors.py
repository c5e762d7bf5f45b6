"""Word vectors (`word_vectors`, `checkpoints`, ``ctx-staircase measure``) on files the tests
write in each format: known answers (vectors equal to each word's next-word distribution score
rho_next >= 0.99, random ones |rho_next| <= 0.1), recognition by content, fastText's
character n-grams, tokenization by the vectors' own words with its out-of-vocabulary account,
and the id-space mismatches refused with exit 2 and nothing written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from ctx_staircase import checkpoints, cli, measure, signatures, text, word_vectors

WORDS = [f"w{i:02d}" for i in range(40)]


@pytest.fixture(scope="module")
def corpus() -> str:
    """A Markov chain over the 40 words, 20k of them; a tenth written capitalized, and an
    unknown word ``zzz`` once in about 50 (out of every vocabulary below)."""
    rng = np.random.default_rng(0)
    transitions = rng.dirichlet(np.full(len(WORDS), 0.2), size=len(WORDS))
    state, words = 0, []
    for u in rng.random(20_000):
        state = int(np.searchsorted(np.cumsum(transitions[state]), u * 0.999999))
        word = WORDS[state]
        words.append(word.upper() if u < 0.1 else word)
        if u > 0.98:
            words.append("zzz")
    return " ".join(words)


def next_word_vectors(corpus: str) -> np.ndarray:
    """Each word's next-word distribution in the corpus tokenized by ``WORDS`` ``[40, 41]``
    (the last column: the unknown word), computed here from the ids."""
    found = word_vectors.tokenize(corpus, WORDS)
    windows = text.windows(found.ids, 64)
    phi, _ = signatures.next_token_signature(windows, len(WORDS) + 1, alphas=np.arange(len(WORDS)))
    return np.asarray(phi, np.float32)


def write_word2vec_text(path: Path, words, M) -> Path:
    """As fastText writes its .vec: a space at the end of every vector line."""
    lines = [f"{len(words)} {M.shape[1]}"] + [
        w + " " + " ".join(f"{v:.9g}" for v in row) + " " for w, row in zip(words, M, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_glove(path: Path, words, M) -> Path:
    lines = [w + " " + " ".join(f"{v:.9g}" for v in row) for w, row in zip(words, M, strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_word2vec_binary(path: Path, words, M) -> Path:
    body = b"".join(
        w.encode() + b" " + row.astype("<f4").tobytes() + b"\n"
        for w, row in zip(words, M, strict=True)
    )
    path.write_bytes(f"{len(words)} {M.shape[1]}\n".encode() + body)
    return path


def write_fasttext(path: Path, words, M, *, minn=0, maxn=0, bucket=0, grams=None) -> Path:
    """A fastText model file (format 12): header, arguments, dictionary (one label after the
    words), an unquantized input matrix ``[words + bucket, d]`` (``M`` then ``grams``), and a
    stand-in output matrix after it."""
    dim = M.shape[1]
    rows = np.concatenate([M, grams if grams is not None else np.zeros((bucket, dim))])
    out = [struct.pack("<ii", 793712314, 12)]
    out.append(struct.pack("<12i", dim, 5, 5, 1, 5, 1, 2, 2, bucket, minn, maxn, 100))
    out.append(struct.pack("<d", 1e-4))
    out.append(struct.pack("<iiiqq", len(words) + 1, len(words), 1, 1000, -1))
    for word in words:
        out.append(word.encode() + b"\0" + struct.pack("<qb", 10, 0))
    out.append(b"__label__x\0" + struct.pack("<qb", 1, 1))
    out.append(struct.pack("<?qq", False, *rows.shape) + rows.astype("<f4").tobytes())
    out.append(struct.pack("<?qq", False, 1, dim) + np.zeros(dim, "<f4").tobytes())
    path.write_bytes(b"".join(out))
    return path


WRITERS = {
    "word2vec text": (write_word2vec_text, "vectors.vec", word_vectors.Format.WORD2VEC_TEXT),
    "GloVe text": (write_glove, "glove.txt", word_vectors.Format.GLOVE_TEXT),
    "word2vec binary": (write_word2vec_binary, "vectors.bin", word_vectors.Format.WORD2VEC_BINARY),
    "fastText": (write_fasttext, "model.bin", word_vectors.Format.FASTTEXT),
}


@pytest.mark.parametrize("kind", WRITERS)
def test_known_answers_in_every_word_vector_format(kind, corpus, tmp_path):
    """Vectors equal to the next-word distributions score rho_next >= 0.99 and random ones
    |rho_next| <= 0.1, read from each format's file; the words come back in order, and the
    rows as written (float32)."""
    write, name, found = WRITERS[kind]
    (tmp_path / "corpus.txt").write_text(corpus)
    signature = next_word_vectors(corpus)
    random = np.random.default_rng(1).normal(size=signature.shape).astype(np.float32)
    paths = [
        write(tmp_path / f"{tag}_{name}", WORDS, M) for tag, M in (("a", signature), ("b", random))
    ]
    assert word_vectors.recognise(paths[0]) is found
    embeddings = [checkpoints.load_embedding(p) for p in paths]
    assert embeddings[0].vocabulary == tuple(WORDS) and embeddings[0].W_E.shape == (40, 41)
    np.testing.assert_allclose(embeddings[0].rows([3, 0, 39]), signature[[3, 0, 39]], rtol=1e-6)
    stream = checkpoints.load_tokens(tmp_path / "corpus.txt", vocabulary=embeddings[0].vocabulary)
    measured = measure.measure_snapshots(stream, embeddings, count=40, probe_steps=30)
    aligned, unaligned = measured.alignment["rho_next"]
    assert aligned >= 0.99 and abs(unaligned) <= 0.1
    assert measured.tracked.size == 40 and 40 not in measured.tracked  # the unknown id: never
    assert measured.settings["out_of_vocabulary"] == corpus.split().count("zzz")


def test_formats_are_recognised_by_content_not_suffix(tmp_path):
    """Each format under a misleading suffix is still recognised; NumPy, safetensors, torch's
    zip and pickle, and plain text are not word vectors."""
    M = np.arange(12, dtype=np.float32).reshape(3, 4)
    words = ["a", "b", "c"]
    for _, (write, _, found) in WRITERS.items():
        assert word_vectors.recognise(write(tmp_path / "vectors.pt", words, M)) is found
    np.save(tmp_path / "m.npy", M)
    save_file({"W_E": M}, str(tmp_path / "m.safetensors"))
    (tmp_path / "zip.bin").write_bytes(b"PK\x03\x04" + bytes(20))
    (tmp_path / "pickle.bin").write_bytes(b"\x80\x02" + bytes(20))
    (tmp_path / "prose.txt").write_text("the cat sat on the mat\nand so on\n")
    for name in ("m.npy", "m.safetensors", "zip.bin", "pickle.bin", "prose.txt"):
        assert word_vectors.recognise(tmp_path / name) is None, name


def test_a_fasttext_bin_is_not_taken_for_torch(tmp_path):
    """A fastText ``.bin`` is read as word vectors (the old path asked for torch)."""
    path = write_fasttext(tmp_path / "cc.en.bin", ["a", "b"], np.eye(2, 3, dtype=np.float32))
    embedding = checkpoints.load_embedding(path)
    assert embedding.key == "fastText .bin" and embedding.vocabulary == ("a", "b")


def _fnv1a(data: bytes) -> int:
    """Standard 32-bit FNV-1a (bytes unsigned)."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) % 2**32
    return h


def test_fasttext_subwords_are_its_hashed_character_ngrams():
    """Against the standard FNV-1a test vectors on ASCII (fastText's hash there), the n-grams
    of ``<ab>`` from 2 to 3 characters (no lone ``<`` or ``>``), a two-byte character kept
    whole and hashed as signed chars, and pruning."""
    assert _fnv1a(b"a") == 0xE40C292C and _fnv1a(b"foobar") == 0xBF9CF968
    assert word_vectors.fasttext_subwords("a", 1, 1, 2**32) == [0xE40C292C]
    grams = [b"<a", b"<ab", b"ab", b"ab>", b"b>"]
    assert word_vectors.fasttext_subwords("ab", 2, 3, 1000) == [_fnv1a(g) % 1000 for g in grams]
    # "é" is two bytes, one character: its 1-gram is both bytes, each widened as a signed char
    h = 0x811C9DC5
    for byte in "é".encode():
        h = ((h ^ (byte + 0xFFFFFF00)) * 0x01000193) % 2**32
    assert word_vectors.fasttext_subwords("é", 1, 1, 2**32) == [h]
    assert word_vectors.fasttext_subwords("ab", 2, 3, 1000, {}) == []  # pruned to nothing
    kept = _fnv1a(b"ab") % 1000
    assert word_vectors.fasttext_subwords("ab", 2, 3, 1000, {kept: 7}) == [7]
    assert word_vectors.fasttext_subwords("ab", 0, 0, 1000) == []


def test_a_fasttext_word_vector_is_the_mean_of_its_row_and_its_ngram_rows(tmp_path):
    """minn = 2, maxn = 3, 11 buckets: each word's vector is the mean of its own input row and
    the rows of its n-grams (the end-of-sentence token's is its own row)."""
    rng = np.random.default_rng(4)
    words = ["ab", "</s>", "b"]
    M, grams = rng.normal(size=(3, 5)), rng.normal(size=(11, 5))
    path = write_fasttext(tmp_path / "m.bin", words, M, minn=2, maxn=3, bucket=11, grams=grams)
    rows = checkpoints.load_embedding(path).rows([0, 1, 2])
    ab = [_fnv1a(g) % 11 for g in (b"<a", b"<ab", b"ab", b"ab>", b"b>")]
    b = [_fnv1a(g) % 11 for g in (b"<b", b"<b>", b"b>")]
    np.testing.assert_allclose(rows[0], np.mean([M[0], *grams[ab]], axis=0), rtol=1e-6)
    np.testing.assert_allclose(rows[1], M[1], rtol=1e-6)
    np.testing.assert_allclose(rows[2], np.mean([M[2], *grams[b]], axis=0), rtol=1e-6)


def test_tokenization_by_a_vocabulary_follows_its_options():
    """Case: as written, else lowercased (the default), exactly, or lowercased; punctuation
    kept as tokens or dropped; an unknown word kept as the id past the vocabulary or dropped."""
    vocabulary = ["the", "Cat", ",", "sat"]
    sentence = "The Cat, the cat sat dog"
    found = word_vectors.tokenize(sentence, vocabulary)
    assert found.ids.tolist() == [0, 1, 2, 0, 4, 3, 4] and found.words == 7
    assert found.out_of_vocabulary == 2 and found.unknown == 4
    exact = word_vectors.tokenize(sentence, vocabulary, case=word_vectors.Case.EXACT)
    assert exact.ids.tolist() == [4, 1, 2, 0, 4, 3, 4]
    lower = word_vectors.tokenize(sentence, vocabulary, case=word_vectors.Case.LOWER)
    assert lower.ids.tolist() == [0, 4, 2, 0, 4, 3, 4]  # "cat" is not a word of it
    dropped = word_vectors.tokenize(sentence, vocabulary, punctuation=False, oov="drop")
    assert dropped.ids.tolist() == [0, 1, 0, 3] and dropped.words == 6 and dropped.unknown == -1
    with pytest.raises(ValueError, match="oov must be one of"):
        word_vectors.tokenize(sentence, vocabulary, oov="keep")


def test_cli_measures_word_vectors_on_a_text_and_reports_its_oov_share(
    corpus, tmp_path, monkeypatch, capsys
):
    """``measure --tokens corpus.txt --snapshots vectors.vec`` tokenizes the text by the
    vectors' words, prints the out-of-vocabulary share and its treatment, and saves it; with
    ``--oov drop`` the unknown words leave the stream."""
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text(corpus)
    write_word2vec_text(Path("vectors.vec"), WORDS, next_word_vectors(corpus))
    argv = ["measure", "--tokens", "corpus.txt", "--snapshots", "vectors.vec", "--tracked", "40"]
    assert cli.main([*argv, "--out", "out"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    settings = json.loads(Path("out/metrics.json").read_text())["settings"]
    unknown = corpus.split().count("zzz")
    assert settings["words"] == len(corpus.split()) and settings["out_of_vocabulary"] == unknown
    share = unknown / len(corpus.split())
    assert f"{share:.1%} not in the vocabulary, kept in the stream as one unknown id" in printed
    assert cli.main([*argv, "--oov", "drop", "--out", "dropped"]) == 0
    dropped = json.loads(Path("dropped/metrics.json").read_text())["settings"]
    assert dropped["tokens"] == settings["tokens"] - unknown and "dropped" in dropped["oov"]


def _tokenizer(path: Path, tokens: list[str]) -> Path:
    """An HF word-level tokenizer.json over ``tokens`` (id = position)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    encoder = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=tokens[0]))
    encoder.pre_tokenizer = pre_tokenizers.Whitespace()
    encoder.save(str(path))
    return path


def test_id_space_mismatches_exit_2_with_one_line_and_write_nothing(
    corpus, tmp_path, monkeypatch, capsys
):
    """A text with no tokenizer against a checkpoint (its rows are another tokenizer's ids), a
    tokenizer with more tokens than the rows, and word vectors with a tokenizer that is not
    theirs: each exits 2 with one line naming the fix, and writes nothing."""
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text(corpus)
    save_file({"wte.weight": np.zeros((32, 8), np.float32)}, "model.safetensors")
    write_glove(Path("glove.txt"), WORDS, np.eye(40, 8, dtype=np.float32))
    _tokenizer(Path("big.json"), ["<unk>", *WORDS])  # 41 tokens for 32 rows
    _tokenizer(Path("other.json"), ["<unk>", *WORDS[:39]])  # 40 tokens, shifted by one
    text_only = ["--tokens", "corpus.txt", "--snapshots"]
    cases = {
        "text without tokenizer": (
            [*text_only, "model.safetensors"], "has 32 rows, the ids of the tokenizer"
        ),
        "tokenizer past the rows": (
            [*text_only, "model.safetensors", "--tokenizer", "big.json"],
            "the tokenizer has 41 tokens but snapshot 'model.safetensors' has 32 rows",
        ),
        "tokenizer against the vectors": (
            [*text_only, "glove.txt", "--tokenizer", "other.json"],
            "id 0 is '<unk>' in the tokenizer and 'w00' in the vectors",
        ),
        "vectors beside a checkpoint": (
            [*text_only, "glove.txt", "model.safetensors"], "checkpoint whose rows are"
        ),
    }  # fmt: skip
    for name, (argv, needle) in cases.items():
        out = Path(f"out_{name.replace(' ', '_')}")
        assert cli.main(["measure", *argv, "--out", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (name, err)
        assert not out.exists(), name
