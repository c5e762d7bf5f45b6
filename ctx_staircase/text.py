"""Text data for the language-model experiments (the paper §6 and §6.1).

The data flow is ``text -> tokenize -> Vocabulary -> int32 token streams -> windows / batches``:

- :func:`load_text` reads any UTF-8 text file and rejects bad input with a clear error;
- :func:`tokenize` is a lowercase word-level tokenizer (words and punctuation characters);
- :func:`build_vocabulary` keeps the ``size`` most frequent words plus ``<unk>`` (id 0);
- :func:`prepare_corpus` splits a text by position into training and validation streams;
- :func:`windows` and :func:`batches` cut a stream into next-token training windows;
- :func:`builtin_corpus` is the embedded default text, made by a small probabilistic grammar whose
  semantic structure (number order, weekday and month cycles, word categories) is known, so the
  claims about learned geometry can be tested; :data:`BUILTIN_GROUPS` names its word groups.

Token streams are NumPy int32 arrays, the input of ``signatures.next_token_signature``,
``previous_token_signature`` and ``prefix_signature``.
"""

from __future__ import annotations

import itertools
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctx_staircase.internal import check_ids, check_int, check_real, check_type

#: The out-of-vocabulary token; always id 0.
UNK = "<unk>"
#: Default number of words kept in the vocabulary (``<unk>`` comes on top).
DEFAULT_VOCAB_SIZE = 2000

# A word is a run of letters, digits and apostrophes (``_`` is not a letter); any other
# non-whitespace character is a token of its own.
_TOKEN = re.compile(r"(?:[^\W_]|')+|\S")


# --------------------------------------------------------------------------------------------
# Tokenizer and vocabulary


def tokenize(text: str) -> list[str]:
    """Lowercase word-level tokens of ``text``.

    A word is a maximal run of letters, digits and apostrophes (``"don't"``, ``"know't"``,
    ``"1599"``; Unicode letters count); every other non-whitespace character, punctuation and
    ``_`` included, is a token of its own; whitespace separates tokens and is dropped.
    ``tokenize("Hello, World!") == ["hello", ",", "world", "!"]``.
    """
    check_type(text, "text", str, "a str")
    return words(text.lower())


def words(text: str) -> list[str]:
    """The tokens of `tokenize`, case kept: runs of letters, digits and apostrophes, and each
    other non-whitespace character on its own."""
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class Vocabulary:
    """A word vocabulary: ``tokens[i]`` is the word with id ``i``.

    Attributes:
        tokens: the words, ``tokens[0] == "<unk>"`` (every out-of-vocabulary word maps to id 0),
            then the kept words by decreasing frequency (ties alphabetically).
        index: word -> id, the inverse of ``tokens`` (built automatically).
    """

    tokens: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tokens = tuple(self.tokens)
        if not tokens or tokens[0] != UNK:
            raise ValueError(f'tokens must start with "{UNK}" (id 0); got {tokens[:1]}')
        if len(set(tokens)) != len(tokens):
            raise ValueError("tokens must not repeat a word")
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "index", {word: i for i, word in enumerate(tokens)})

    @property
    def size(self) -> int:
        """V, the number of ids, ``<unk>`` included."""
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: Iterable[str]) -> np.ndarray:
        """Ids of ``words`` (a list of tokens), int32 ``[len(words)]``; unknown words -> 0."""
        if isinstance(words, str):
            raise TypeError("words must be a list of tokens, not a str; use tokenize(text) first")
        get = self.index.get
        return np.fromiter((get(w, 0) for w in words), dtype=np.int32)

    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Words of the ids ``[n]`` (id 0 decodes to ``"<unk>"``)."""
        ids = check_ids(ids, "ids", self.size, "size")
        if ids.ndim != 1:
            raise ValueError(f"ids must be a 1-D integer array; got shape {ids.shape}")
        return [self.tokens[i] for i in ids.tolist()]


def build_vocabulary(words: Iterable[str], size: int | None = DEFAULT_VOCAB_SIZE) -> Vocabulary:
    """The ``size`` most frequent words, plus ``<unk>`` at id 0: ``V = size + 1``.

    Ties in frequency are broken alphabetically, so the vocabulary is a deterministic function of
    the word counts. ``size=None`` keeps every distinct word.

    Raises:
        ValueError: if the words hold strictly fewer than ``size`` distinct words (exactly
            ``size`` is fine), naming ``size`` and the number there is.
    """
    return _build_vocabulary(words, size, "size")


def _build_vocabulary(words: Iterable[str], size: int | None, name: str) -> Vocabulary:
    if isinstance(words, str):
        raise TypeError("words must be a list of tokens, not a str; use tokenize(text) first")
    check_int(size, name, none_ok=True)
    counts = Counter(words)
    counts.pop(UNK, None)  # cannot come from tokenize ("<", "unk", ">"), but a list may hold it
    if size is not None and len(counts) < size:
        raise ValueError(
            f"{name}={size} asks for {size} words, but the text has only {len(counts)} distinct "
            f"words; lower {name} (at most {len(counts)})"
        )
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept = ranked if size is None else ranked[: int(size)]
    return Vocabulary((UNK, *(word for word, _ in kept)))


# --------------------------------------------------------------------------------------------
# Loading text


def load_text(path: str | os.PathLike) -> str:
    """The contents of the UTF-8 text file ``path`` (a leading byte-order mark is dropped).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``path`` is not a regular file, is empty or whitespace-only, holds binary
            content (a NUL byte), or is not valid UTF-8 (the message gives the byte offset).
        TypeError: ``path`` is not a str or os.PathLike.
        Every message names ``path``.
    """
    check_type(path, "path", str | os.PathLike, "a str or os.PathLike (a text file)")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"path {str(path)!r}: no such file")
    if not path.is_file():
        raise ValueError(f"path {str(path)!r} is not a regular file")
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(
            f"path {str(path)!r} holds binary content (a NUL byte at byte offset {nul}), not text"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
        offset = err.start + bom
        raise ValueError(
            f"path {str(path)!r} is not valid UTF-8: byte 0x{data[offset]:02x} at byte offset "
            f"{offset} ({err.reason})"
        ) from None
    if not text.strip():
        what = "empty" if not data else "whitespace-only"
        raise ValueError(f"path {str(path)!r} is {what}; it holds no text")
    return text


# --------------------------------------------------------------------------------------------
# Corpus: vocabulary and train / validation streams


@dataclass(frozen=True, eq=False)
class Corpus:
    """A tokenized text split by position.

    Attributes:
        vocabulary: built from the training part only.
        train: int32 ``[N_train]`` token stream, the first part of the text.
        validation: int32 ``[N_val]`` token stream, the part right after ``train``; words never
            seen in training are ``<unk>`` (id 0).
    """

    vocabulary: Vocabulary
    train: np.ndarray
    validation: np.ndarray

    @property
    def vocab_size(self) -> int:
        """V, ``<unk>`` included."""
        return self.vocabulary.size


def prepare_corpus(
    text: str,
    vocab_size: int | None = DEFAULT_VOCAB_SIZE,
    validation_fraction: float = 0.1,
) -> Corpus:
    """Tokenize ``text``, split it by position and encode both parts.

    The last ``round(validation_fraction * N)`` tokens (contiguous) are the validation stream;
    the vocabulary (``vocab_size`` words + ``<unk>``, or every training word if ``None``) is
    built from the training tokens only.

    Raises:
        ValueError: ``validation_fraction`` outside (0, 1), or leaving either part empty; too few
            distinct training words for ``vocab_size`` (see :func:`build_vocabulary`).
    """
    check_real(
        validation_fraction, "validation_fraction", low=0, high=1, low_open=True, high_open=True
    )
    words = tokenize(text)
    if not words:
        raise ValueError("text holds no tokens")
    n_val = round(validation_fraction * len(words))
    if not 1 <= n_val <= len(words) - 1:
        raise ValueError(
            f"validation_fraction={validation_fraction} of {len(words)} tokens leaves "
            f"{n_val} validation and {len(words) - n_val} training tokens; both must be >= 1"
        )
    train_words = words[: len(words) - n_val]
    vocabulary = _build_vocabulary(train_words, vocab_size, "vocab_size")
    return Corpus(
        vocabulary=vocabulary,
        train=vocabulary.encode(train_words),
        validation=vocabulary.encode(words[len(words) - n_val :]),
    )


# --------------------------------------------------------------------------------------------
# Next-token windows and batches


def windows(stream, context_length: int, *, stride: int | None = None) -> np.ndarray:
    """Windows of ``context_length + 1`` tokens for next-token training, int32 ``[n, T+1]``.

    Window ``i`` is ``stream[i*stride : i*stride + T + 1]``; ``inputs = w[:, :-1]`` and
    ``targets = w[:, 1:]``. The default ``stride = T`` tiles the stream: consecutive windows
    share one boundary token, so every transition before the leftover tail is a target exactly
    once. ``n = (N - T - 1) // stride + 1``.
    """
    stream, T = _check_window_args(stream, context_length)
    stride = T if stride is None else check_int(stride, "stride")
    starts = np.arange(0, stream.size - T, stride)
    return stream[starts[:, None] + np.arange(T + 1)]


def sample_windows(stream, context_length: int, batch_size: int, rng: np.random.Generator):
    """``batch_size`` windows ``[B, T+1]`` (int32) at uniform random starts, drawn from ``rng``."""
    stream, T = _check_window_args(stream, context_length)
    B = check_int(batch_size, "batch_size")
    starts = rng.integers(0, stream.size - T, size=B)
    return stream[starts[:, None] + np.arange(T + 1)]


def batches(stream, context_length: int, batch_size: int, seed: int = 0) -> Iterator[np.ndarray]:
    """An endless iterator of random windows ``[B, T+1]`` (int32), deterministic from ``seed``.

    Each batch is :func:`sample_windows` from one ``numpy.random.default_rng(seed)``; two
    iterators with the same seed yield the same batches.
    """
    stream, T = _check_window_args(stream, context_length)
    B = check_int(batch_size, "batch_size")  # checked now, not at the first next()
    return _batch_iterator(stream, T, B, np.random.default_rng(seed))


def _batch_iterator(stream, T, B, rng) -> Iterator[np.ndarray]:
    while True:
        yield sample_windows(stream, T, B, rng)


def _check_window_args(stream, context_length) -> tuple[np.ndarray, int]:
    stream = _check_stream(stream)
    T = check_int(context_length, "context_length")
    if stream.size < T + 1:
        raise ValueError(
            f"the stream has {stream.size} tokens; context_length={T} needs at least {T + 1}"
        )
    return stream, T


def _check_stream(stream) -> np.ndarray:
    arr = np.asarray(stream)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"stream must be a 1-D integer array; got {arr.dtype} {arr.shape}")
    return arr.astype(np.int32, copy=False)


# --------------------------------------------------------------------------------------------
# The built-in corpus: a probabilistic grammar with known semantic structure

_NUMBERS = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_COLORS = "red blue green yellow black white brown orange".split()
_ANIMALS = "dog cat cow horse bird sheep duck pig".split()
_FAMILY = "mother father sister brother grandmother grandfather aunt uncle".split()

#: The word groups of the built-in corpus; numbers, weekdays and months are in order.
BUILTIN_GROUPS: dict[str, tuple[str, ...]] = {
    "numbers": tuple(_NUMBERS),
    "weekdays": tuple(_WEEKDAYS),
    "months": tuple(_MONTHS),
    "colors": tuple(_COLORS),
    "animals": tuple(_ANIMALS),
    "family": tuple(_FAMILY),
}

_SOUNDS = dict(
    dog="barks", cat="meows", cow="moos", horse="neighs",
    bird="sings", sheep="bleats", duck="quacks", pig="grunts",
)  # fmt: skip
_ANIMAL_ACTS = "runs sleeps eats drinks walks plays".split()
_ANIMAL_PLACES = "farm field barn garden yard".split()
_THINGS = "apple car ball house hat shirt flower door box bag".split()
_TYPICAL_COLOR = dict(sky="blue", grass="green", sun="yellow", snow="white", night="black")
_FAMILY_ACTS = "cooks reads sings works laughs smiles sleeps".split()
_FAMILY_PAIRS = [
    ("mother", "father"), ("sister", "brother"), ("grandmother", "grandfather"),
    ("aunt", "uncle"),
]  # fmt: skip
_DAY_ACTIVITY = {d: "we go to work" for d in _WEEKDAYS[:5]} | {
    "saturday": "we play",
    "sunday": "we rest",
}
_SEASON = dict(
    zip(_MONTHS, ["cold"] * 2 + ["mild"] * 3 + ["hot"] * 3 + ["cool"] * 3 + ["cold"], strict=True)
)


def _number_sentence(r: random.Random) -> str:
    """Order relations among the numbers one..twenty (value v = index + 1)."""
    N = len(_NUMBERS)
    kind = r.random()
    if kind < 0.2:  # successor
        i = r.randrange(N - 1)
        return f"after {_NUMBERS[i]} comes {_NUMBERS[i + 1]} ."
    if kind < 0.3:  # predecessor
        i = r.randrange(N - 1)
        return f"before {_NUMBERS[i + 1]} comes {_NUMBERS[i]} ."
    if kind < 0.6:  # counting up by 1, 2 or 3 from a random start
        step = r.choice((1, 1, 2, 3))
        start = r.randrange(N)
        length = r.randint(2, 6)
        run = [_NUMBERS[i] for i in range(start, min(N, start + step * length), step)]
        if len(run) < 2:
            return f"{_NUMBERS[start]} is a number ."
        return ("we count " if r.random() < 0.5 else "") + " ".join(run) + " ."
    if kind < 0.8:  # a comparison
        i, j = sorted(r.sample(range(N), 2))
        if r.random() < 0.5:
            return f"{_NUMBERS[j]} is more than {_NUMBERS[i]} ."
        return f"{_NUMBERS[i]} is less than {_NUMBERS[j]} ."
    # an increasing list of a few numbers
    picks = sorted(r.sample(range(N), r.randint(2, 5)))
    return "in order : " + " ".join(_NUMBERS[i] for i in picks) + " ."


def _cycle_sentence(r: random.Random, cycle: list[str], unit: str, activity) -> str:
    """Cyclic order among weekdays or months (indices taken mod the cycle length)."""
    n = len(cycle)
    kind = r.random()
    i = r.randrange(n)
    if kind < 0.3:
        return f"after {cycle[i]} comes {cycle[(i + 1) % n]} ."
    if kind < 0.45:
        return f"before {cycle[(i + 1) % n]} comes {cycle[i]} ."
    if kind < 0.75:  # a run of consecutive days or months, wrapping around
        return " ".join(cycle[(i + k) % n] for k in range(r.randint(2, 5))) + " ."
    if kind < 0.85:  # every other day / month
        return f"every other {unit} : " + " ".join(cycle[(i + 2 * k) % n] for k in range(3)) + " ."
    return activity(cycle[i])


def _weekday_sentence(r: random.Random) -> str:
    return _cycle_sentence(r, _WEEKDAYS, "day", lambda d: f"on {d} {_DAY_ACTIVITY[d]} .")


def _month_sentence(r: random.Random) -> str:
    return _cycle_sentence(r, _MONTHS, "month", lambda m: f"in {m} it is {_SEASON[m]} .")


def _category_sentence(r: random.Random) -> str:
    """Colors, animals and family roles in category-typical contexts."""
    kind = r.randrange(6)
    if kind == 0:
        a, b = r.sample(_COLORS, 2)
        return f"the {a} {r.choice(_THINGS)} and the {b} {r.choice(_THINGS)} ."
    if kind == 1:
        thing, color = r.choice(list(_TYPICAL_COLOR.items()))
        return f"the {thing} is {color} ."
    if kind == 2:
        animal = r.choice(_ANIMALS)
        verb = _SOUNDS[animal] if r.random() < 0.5 else r.choice(_ANIMAL_ACTS)
        return f"the {animal} {verb} ."
    if kind == 3:
        a, b = r.sample(_ANIMALS, 2)
        return f"the {a} and the {b} live near the {r.choice(_ANIMAL_PLACES)} ."
    if kind == 4:
        a, b = r.choice(_FAMILY_PAIRS)
        return f"my {a} and my {b} {r.choice(('are at home', 'love me', 'visit us'))} ."
    return f"my {r.choice(_FAMILY)} {r.choice(_FAMILY_ACTS)} ."


_SENTENCE_KINDS = (
    (0.35, _number_sentence),
    (0.2, _weekday_sentence),
    (0.2, _month_sentence),
    (0.25, _category_sentence),
)


def builtin_corpus(n_sentences: int = 40_000, seed: int = 0) -> str:
    """The built-in text: ``n_sentences`` sentences of a small probabilistic grammar.

    The grammar (``random.Random(seed)``, so deterministic) mixes four kinds of sentence:

    - numbers one..twenty with order relations: ``"after three comes four ."``,
      ``"before four comes three ."``, counting runs by 1, 2 or 3 (``"we count five six seven
      ."``), comparisons (``"nine is more than two ."``, ``"two is less than nine ."``) and
      increasing lists (``"in order : two five eleven ."``);
    - weekdays and months in cycles (indices mod 7 and 12): successors, predecessors, runs of
      consecutive days that wrap around (``"saturday sunday monday ."``), "every other" runs
      (``"every other day : monday wednesday friday ."``) and typical contexts
      (``"on monday we go to work ."``, ``"in january it is cold ."``);
    - colors, animals and family roles in category-typical contexts (``"the red apple and the
      blue ball ."``, ``"the dog barks ."``, ``"my mother and my father visit us ."``).

    Sentences are separated by a space (paragraphs every 10 sentences); the default 40 000
    sentences are about 233 000 tokens. The structure is in the sentence semantics only: e.g. a
    number is followed by nearby larger numbers in counting and increasing lists, so the
    next-token signatures order the numbers, and a day by the next day(s) in the cycle.
    """
    n_sentences = check_int(n_sentences, "n_sentences")
    check_int(seed, "seed", None)
    r = random.Random(int(seed))
    kinds = [make for _, make in _SENTENCE_KINDS]
    cumulative = list(itertools.accumulate(w for w, _ in _SENTENCE_KINDS))
    makers = r.choices(kinds, cum_weights=cumulative, k=n_sentences)
    lines = [make(r) for make in makers]
    paragraphs = (" ".join(lines[i : i + 10]) for i in range(0, n_sentences, 10))
    return "\n".join(paragraphs) + "\n"


def word_group_ids(vocabulary: Vocabulary, group: str | Sequence[str]) -> np.ndarray:
    """Token ids ``[k]`` (int32) of a word group, in the group's order.

    ``group`` is a name in :data:`BUILTIN_GROUPS` or a list of words. Raises ``KeyError`` for an
    unknown group name and ``ValueError`` naming the words missing from the vocabulary.
    """
    if isinstance(group, str):
        if group not in BUILTIN_GROUPS:
            raise KeyError(f"group {group!r} is not one of {sorted(BUILTIN_GROUPS)}")
        words = BUILTIN_GROUPS[group]
    else:
        words = tuple(group)
    missing = [w for w in words if w not in vocabulary.index]
    if missing:
        raise ValueError(f"group words missing from the vocabulary: {missing}")
    return np.array([vocabulary.index[w] for w in words], dtype=np.int32)


__all__ = [
    "BUILTIN_GROUPS",
    "DEFAULT_VOCAB_SIZE",
    "UNK",
    "Corpus",
    "Vocabulary",
    "batches",
    "build_vocabulary",
    "builtin_corpus",
    "load_text",
    "prepare_corpus",
    "sample_windows",
    "tokenize",
    "windows",
    "word_group_ids",
    "words",
]
