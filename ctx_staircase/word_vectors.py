"""Word vectors in the formats they ship in, recognised by their content, read lazily.

Each of these files carries its own vocabulary (the word of every row), so a text is tokenized
by it (`tokenize`) and not by a tokenizer of the package's choosing:

- **word2vec text** (``.vec``, ``.txt``): a header line ``count dim``, then ``word v_1 ... v_d``
  per line;
- **GloVe text**: the same lines with no header;
- **word2vec binary**: the header ``count dim\\n``, then per word its UTF-8 bytes, a space and
  ``d`` little-endian float32 (a newline after each record is allowed);
- **fastText** ``.bin`` (a model, file format 12): the words of its dictionary and its input
  matrix. A word's vector is fastText's own: the mean of the input rows of the word and of its
  character n-grams (``minn``..``maxn`` of ``<word>``, hashed by 32-bit FNV-1a into ``bucket``
  rows past the words; none when ``maxn = 0``). Quantized models (``.ftz``) are refused.

The rows are read on demand: a text file is scanned once for its words and the byte offset of
each line, a binary one for the offset of each vector (a memory map serves the rows), and a
fastText matrix is memory-mapped. `read` returns the vocabulary and a `checkpoints.LazyMatrix`.
"""

from __future__ import annotations

import enum
import mmap
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ctx_staircase import text as text_module

__all__ = [
    "Case",
    "Format",
    "Tokenized",
    "WordVectors",
    "fasttext_subwords",
    "read",
    "recognise",
    "tokenize",
]

#: fastText's file magic and the file format version it reads.
_FASTTEXT_MAGIC, _FASTTEXT_VERSION = 793712314, 12
_HEADER = re.compile(rb"^\s*(\d+)[ \t]+(\d+)\s*$")
#: The bytes read to recognise a format.
_SNIFF = 1 << 16


class Format(enum.Enum):
    """The word-vector formats `recognise` tells apart."""

    WORD2VEC_TEXT = "word2vec text"
    GLOVE_TEXT = "GloVe text"
    WORD2VEC_BINARY = "word2vec binary"
    FASTTEXT = "fastText .bin"


class WordVectors(NamedTuple):
    """A word-vector file read lazily.

    Attributes:
        format: its `Format`.
        vocabulary: the word of each row, ``[V]``.
        shape: ``(V, d)``.
        take: ``ids [k] -> rows [k, d]`` float32, read from the file on demand.
    """

    format: Format
    vocabulary: tuple[str, ...]
    shape: tuple[int, int]
    take: object


def recognise(path: str | Path) -> Format | None:
    """The `Format` of the file at ``path`` from its first bytes, or ``None`` when it is none of
    them (a NumPy, safetensors, zip or pickle file, or text that is not word vectors)."""
    with open(path, "rb") as handle:
        head = handle.read(_SNIFF)
    if len(head) >= 8 and struct.unpack("<i", head[:4])[0] == _FASTTEXT_MAGIC:
        return Format.FASTTEXT
    if head[:6] == b"\x93NUMPY" or head[:4] == b"PK\x03\x04" or head[:1] == b"\x80":
        return None
    first, _, rest = head.partition(b"\n")
    header = _HEADER.match(first)
    if header:
        dim = int(header.group(2))
        line = rest.partition(b"\n")[0]
        return Format.WORD2VEC_TEXT if _vector_line(line, dim) else Format.WORD2VEC_BINARY
    fields = first.split()
    return Format.GLOVE_TEXT if len(fields) >= 2 and _vector_line(first, len(fields) - 1) else None


def _vector_line(line: bytes, dim: int) -> bool:
    """Whether ``line`` is ``word v_1 .. v_dim`` in text."""
    try:
        fields = line.decode("utf-8").rstrip().split(" ")
    except UnicodeDecodeError:
        return False
    if len(fields) < dim + 1 or dim < 1:
        return False
    try:
        [float(v) for v in fields[-dim:]]
    except ValueError:
        return False
    return True


def read(path: str | Path) -> WordVectors:
    """The `WordVectors` of the file at ``path``; ``ValueError`` (naming the file and what is
    wrong) for a file that is not word vectors, or is truncated or inconsistent."""
    path = Path(path)
    where = f"snapshot {str(path)!r}"
    found = recognise(path)
    if found is None:
        raise ValueError(
            f"{where}: not word vectors (word2vec text or binary, GloVe text, fastText .bin)"
        )
    reader = {
        Format.WORD2VEC_TEXT: _text,
        Format.GLOVE_TEXT: _text,
        Format.WORD2VEC_BINARY: _binary,
        Format.FASTTEXT: _fasttext,
    }[found]
    try:
        return reader(path, found, where)
    except (struct.error, UnicodeDecodeError, OverflowError) as error:
        raise ValueError(f"{where}: a damaged {found.value} file ({error})") from None


def _text(path: Path, found: Format, where: str) -> WordVectors:
    words, offsets = [], []
    with open(path, "rb") as handle:
        if found is Format.WORD2VEC_TEXT:
            count, dim = (int(v) for v in handle.readline().split())
        else:
            count, dim = None, len(handle.readline().split()) - 1
            handle.seek(0)
        while True:
            offset = handle.tell()
            line = handle.readline()
            if not line:
                break
            if not line.strip():
                continue
            fields = line.rstrip().split(b" ")  # fastText's .vec ends each line with a space
            if len(fields) < dim + 1:
                raise ValueError(
                    f"{where}: line {len(words) + 1 + (count is not None)} has "
                    f"{len(fields) - 1} values; the file's vectors have {dim}"
                )
            words.append(b" ".join(fields[: len(fields) - dim]).decode("utf-8", "replace"))
            offsets.append(offset)
    if count is not None and count != len(words):
        raise ValueError(f"{where}: the header says {count} words; the file holds {len(words)}")
    if not words:
        raise ValueError(f"{where}: holds no vectors")
    offsets = np.asarray(offsets, np.int64)

    def take(ids: np.ndarray) -> np.ndarray:
        rows = np.empty((len(ids), dim), np.float32)
        with open(path, "rb") as handle:
            for k, i in enumerate(np.asarray(ids, np.int64)):
                handle.seek(offsets[i])
                fields = handle.readline().rstrip().split(b" ")
                rows[k] = np.asarray(fields[len(fields) - dim :], np.float32)
        return rows

    return WordVectors(found, tuple(words), (len(words), dim), take)


def _binary(path: Path, found: Format, where: str) -> WordVectors:
    with open(path, "rb") as handle:
        count, dim = (int(v) for v in handle.readline().split())
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    words, offsets, position, size = [], [], len(data[:64].partition(b"\n")[0]) + 1, len(data)
    for _ in range(count):
        while position < size and data[position : position + 1] in (b"\n", b"\r"):
            position += 1
        end = data.find(b" ", position)
        if end < 0 or end + 4 * dim > size:
            raise ValueError(
                f"{where}: truncated after {len(words)} of the header's {count} vectors"
            )
        words.append(data[position:end].decode("utf-8", "replace"))  # GoogleNews has a few
        offsets.append(end + 1)
        position = end + 1 + 4 * dim
    offsets = np.asarray(offsets, np.int64)

    def take(ids: np.ndarray) -> np.ndarray:
        return (
            np.stack(
                [
                    np.frombuffer(data, "<f4", dim, int(offsets[i]))
                    for i in np.asarray(ids, np.int64)
                ]
            ).astype(np.float32)
            if len(ids)
            else np.zeros((0, dim), np.float32)
        )

    return WordVectors(found, tuple(words), (count, dim), take)


class _Reader:
    """Little-endian fields read in order from a memory map."""

    def __init__(self, data: mmap.mmap):
        self.data, self.position = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.data, self.position)
        self.position += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.position)
        if end < 0:
            raise struct.error("a word runs past the end of the file")
        word = self.data[self.position : end].decode("utf-8")
        self.position = end + 1
        return word


def _fasttext(path: Path, found: Format, where: str) -> WordVectors:
    with open(path, "rb") as handle:
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    reader = _Reader(data)
    _, version = reader.take("ii")
    if version != _FASTTEXT_VERSION:
        raise ValueError(
            f"{where}: fastText file format {version}; this reader knows {_FASTTEXT_VERSION}"
        )
    dim, _, _, _, _, _, _, _, bucket, minn, maxn, _ = reader.take("12i")
    reader.take("d")  # the sampling threshold t
    size, nwords, _, _, pruned = reader.take("iiiqq")
    words = []
    for _ in range(size):
        word = reader.cstring()
        _, kind = reader.take("qb")
        if kind == 0:  # a word; labels (kind 1) follow the words and have no input row
            words.append(word)
    if len(words) != nwords:
        raise ValueError(f"{where}: the dictionary says {nwords} words; it holds {len(words)}")
    prune = dict(reader.take("ii") for _ in range(max(pruned, 0)))
    if reader.take("?"):
        raise ValueError(f"{where}: a quantized fastText model; its input matrix is not stored")
    rows, columns = reader.take("qq")
    if columns != dim or rows < nwords or reader.position + 4 * rows * columns > len(data):
        raise ValueError(
            f"{where}: an input matrix of [{rows}, {columns}] for {nwords} words of dim {dim}"
        )
    matrix = np.frombuffer(data, "<f4", rows * columns, reader.position).reshape(rows, columns)

    pruning = prune if pruned >= 0 else None

    def take(ids: np.ndarray) -> np.ndarray:
        out = np.empty((len(ids), dim), np.float32)
        for k, i in enumerate(np.asarray(ids, np.int64)):
            # fastText gives the end-of-sentence token "</s>" no character n-grams
            grams = (
                []
                if words[i] == "</s>"
                else fasttext_subwords(words[i], minn, maxn, bucket, pruning)
            )
            out[k] = matrix[[int(i), *(nwords + g for g in grams)]].mean(axis=0)
        return out

    return WordVectors(found, tuple(words), (nwords, dim), take)


def fasttext_subwords(
    word: str, minn: int, maxn: int, bucket: int, prune: dict[int, int] | None = None
) -> list[int]:
    """The bucket indices (past the words) of ``word``'s character n-grams, as fastText forms
    them: the n-grams of ``<word>`` of ``minn``..``maxn`` characters (a UTF-8 character whole),
    no single ``<`` or ``>``, each hashed by 32-bit FNV-1a over its bytes (each byte taken as a
    signed char) modulo ``bucket``; a pruned model maps each through ``prune`` and drops those
    it lacks (an empty ``prune``: no subwords)."""
    if maxn <= 0 or bucket <= 0:
        return []
    wrapped = ("<" + word + ">").encode("utf-8")
    starts = [i for i, byte in enumerate(wrapped) if byte & 0xC0 != 0x80]
    out = []
    for a, i in enumerate(starts):
        for n in range(1, maxn + 1):
            if a + n > len(starts):
                break
            j = starts[a + n] if a + n < len(starts) else len(wrapped)
            if n < minn or (n == 1 and (i == 0 or j == len(wrapped))):
                continue
            index = _fnv1a_signed(wrapped[i:j]) % bucket
            if prune is not None:
                if index not in prune:
                    continue
                index = prune[index]
            out.append(index)
    return out


def _fnv1a_signed(data: bytes) -> int:
    """32-bit FNV-1a with each byte read as a signed char and widened (fastText's hash; the
    standard FNV-1a on ASCII)."""
    h = 2166136261
    for byte in data:
        widened = byte | 0xFFFFFF00 if byte > 127 else byte
        h = ((h ^ widened) * 16777619) & 0xFFFFFFFF
    return h


# ------------------------------------------------------------------------------------------------
# a text tokenized by a vocabulary


class Case(enum.Enum):
    """How a word of the text is looked up in a vocabulary."""

    EXACT = "exact"  # as written
    LOWER = "lower"  # lowercased
    FALLBACK = "fallback"  # as written, else lowercased


#: What becomes of a word the vocabulary lacks: ``unknown`` keeps its place in the stream as one
#: shared id past the vectors (it counts as a next word, and is never measured); ``drop`` removes
#: it, so its neighbours become adjacent.
_OOV_POLICIES = ("unknown", "drop")
_PUNCTUATION = re.compile(r"^[^\w\s]+$")


class Tokenized(NamedTuple):
    """A text tokenized by a vocabulary.

    Attributes:
        ids: int64 ``[n]`` (the unknown id is ``len(vocabulary)``).
        words: the text's words that were looked up, ``n_words``.
        out_of_vocabulary: how many of them the vocabulary lacks.
        unknown: the id the unknown words got, or -1 where they were dropped.
    """

    ids: np.ndarray
    words: int
    out_of_vocabulary: int
    unknown: int

    @property
    def oov_share(self) -> float:
        return self.out_of_vocabulary / self.words if self.words else 0.0


def tokenize(
    text: str,
    vocabulary: Sequence[str],
    *,
    case: Case = Case.FALLBACK,
    punctuation: bool = True,
    oov: str = "unknown",
) -> Tokenized:
    """``text`` as ids of ``vocabulary``: words are runs of letters, digits and apostrophes,
    every other non-space character a token of its own (dropped with ``punctuation=False``);
    each is looked up by ``case``; a word the vocabulary lacks is treated by ``oov``
    (`_OOV_POLICIES`)."""
    if oov not in _OOV_POLICIES:
        raise ValueError(f"oov must be one of {_OOV_POLICIES}; got {oov!r}")
    index: dict[str, int] = {}
    for i, word in enumerate(vocabulary):
        index.setdefault(word, i)
    unknown = len(vocabulary)
    ids, missing, total = [], 0, 0
    for token in text_module.words(text):
        if not punctuation and _PUNCTUATION.match(token):
            continue
        total += 1
        found = index.get(token.lower() if case is Case.LOWER else token)
        if found is None and case is Case.FALLBACK:
            found = index.get(token.lower())
        if found is None:
            missing += 1
            if oov == "drop":
                continue
            found = unknown
        ids.append(found)
    return Tokenized(np.asarray(ids, np.int64), total, missing, unknown if oov == "unknown" else -1)
