"""Input embeddings read from checkpoints trained elsewhere, and token streams to measure them on.

A *snapshot* is one file or folder holding a model's input embedding ``W_E [V, d]`` (row ``i``
is token id ``i``, the layout of every common checkpoint):

- ``.npy``: the matrix itself (memory-mapped); ``.npz``: named arrays, only the chosen one read;
- ``.safetensors``: read with the `safetensors` package's NumPy API, which memory-maps the file
  and copies out only the chosen tensor;
- a Hugging Face model folder: ``config.json`` beside ``model.safetensors``, or shards listed in
  ``model.safetensors.index.json`` (only the shard holding the embedding is opened), or
  ``pytorch_model.bin`` (with its index when sharded);
- ``.pt`` / ``.pth`` / ``.bin``: a torch state dict, loaded memory-mapped on the CPU with
  ``weights_only=True``; torch is imported only then (``pip install torch``);
- word vectors, recognised by their content whatever their suffix (`word_vectors`): word2vec
  text (``.vec``, ``.txt``) or binary, GloVe text, a fastText ``.bin`` model, with their own
  vocabulary (`Embedding.vocabulary`), by which a text is tokenized.

The embedding is the tensor whose name is, or ends in ``.`` followed by, one of `_EMBEDDING_NAMES`
unless a ``key`` names it (`choose_key`). A *token stream* is int ids ``[n]`` (`load_tokens`),
and says which ids they are (`IdSpace`), so a measurement refuses ids that are not the rows' ids.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctx_staircase import text, word_vectors

__all__ = [
    "Embedding",
    "IdSpace",
    "LazyMatrix",
    "TokenStream",
    "check_ids",
    "check_matrix",
    "choose_key",
    "export_embeddings",
    "export_lanes",
    "export_tokens",
    "load_embedding",
    "load_tokens",
    "snapshot_step",
]

#: The trailing names of the input embedding in common checkpoints: GPT-2
#: ``transformer.wte.weight``, GPT-NeoX/Pythia ``gpt_neox.embed_in.weight``, Llama/Mistral
#: ``model.embed_tokens.weight``, OPT ``model.decoder.embed_tokens.weight``, BERT
#: ``embeddings.word_embeddings.weight``, TransformerLens ``embed.W_E``, this package's exports
#: ``W_E``. No match, or several, is a ``ValueError`` that lists the tensors found.
_EMBEDDING_NAMES = (
    "wte.weight",
    "embed_in.weight",
    "embed_tokens.weight",
    "word_embeddings.weight",
    "embed.W_E",
    "W_E",
)
#: File suffixes read as torch state dicts.
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")
_STEP = re.compile(r"(?:step|iter|iteration|checkpoint|ckpt|revision)[-_=]?(\d+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class LazyMatrix:
    """A checkpoint's matrix read on demand: its shape and dtype come from the file's header,
    its rows only when indexed (``matrix[ids]``), so the rest of the file is never read.

    Attributes:
        shape: ``(V, d)``; dtype: as stored.
        take: ``ids [k] -> rows [k, d]``.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    take: Callable[[np.ndarray], np.ndarray]

    def __getitem__(self, ids) -> np.ndarray:
        return self.take(np.atleast_1d(np.asarray(ids)))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.asarray(self.take(np.arange(self.shape[0])), dtype=dtype)


@dataclasses.dataclass(frozen=True)
class Embedding:
    """One snapshot's input embedding.

    Attributes:
        W_E: ``[V, d]`` as stored: an array, a memory map (.npy) or a `LazyMatrix`
            (safetensors, torch); `rows` reads the rows a measurement needs.
        key: the tensor's name in the checkpoint (word vectors: their format).
        source: the file it came from (a shard, for a sharded folder).
        vocabulary: the word of each row, for word vectors; ``None`` for a checkpoint, whose
            rows are the ids of the tokenizer it was trained with.
    """

    W_E: Any
    key: str
    source: Path
    vocabulary: tuple[str, ...] | None = None

    @property
    def vocab_rows(self) -> int:
        """V, the number of rows (often padded past the tokenizer's vocabulary)."""
        return int(self.W_E.shape[0])

    def rows(self, ids) -> np.ndarray:
        """``W_E[ids]`` ``[k, d]`` in memory, half precision as float32 (NumPy computes poorly
        in float16 and not at all in bfloat16)."""
        rows = np.asarray(self.W_E[np.asarray(ids)])
        return rows.astype(np.float32) if rows.dtype.itemsize < 4 else rows


class IdSpace(enum.Enum):
    """What a token stream's ids index."""

    IDS = "token ids as given"
    TOKENIZER = "a tokenizer.json's ids"
    VOCABULARY = "the word vectors' rows"
    TEXT_WORDS = "the package's word tokenizer over the text's own words"


@dataclasses.dataclass(frozen=True)
class TokenStream:
    """The tokens to measure on.

    Attributes:
        ids: int64 ``[n]`` token ids.
        token_strings: the text of each id ``[V_tokenizer]`` when a tokenizer is known (used to
            keep word tokens only), else ``None``.
        tracked: int64 ``[A]`` the tokens to measure, when the file names them (an export),
            else ``None``.
        context_length: the window length the stream was trained with, when known.
        id_space: what the ids index (`IdSpace`).
        vocabulary: the raw token of each id, for a tokenizer's or word vectors' ids.
        unknown: the id a word the vocabulary lacks got (one past its rows; never measured),
            -1 where none did.
        words, out_of_vocabulary: for a text tokenized by word vectors' vocabulary, how many of
            its words were looked up and how many the vocabulary lacks.
        oov: how those were treated (`word_vectors._OOV_POLICIES`), "" for other streams.
    """

    ids: np.ndarray
    token_strings: tuple[str, ...] | None = None
    tracked: np.ndarray | None = None
    context_length: int | None = None
    id_space: IdSpace = IdSpace.IDS
    vocabulary: tuple[str, ...] | None = None
    unknown: int = -1
    words: int = 0
    out_of_vocabulary: int = 0
    oov: str = ""

    @property
    def oov_share(self) -> float:
        """The share of the text's words that the vocabulary lacks (0 for other streams)."""
        return self.out_of_vocabulary / self.words if self.words else 0.0


# --------------------------------------------------------------------------------------------
# embeddings


def choose_key(names, key: str | None, where: str) -> str:
    """The embedding's name among ``names``: ``key`` if given, else the one name that is, or
    ends in ``.`` followed by, one of `_EMBEDDING_NAMES`; ``ValueError`` (naming ``--key`` and
    listing ``names``) otherwise."""
    names = list(names)
    found = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
    if key is not None:
        if key not in names:
            raise ValueError(f"--key {key!r}: {where} has no such tensor; it has: {found}")
        return key
    matches = [n for n in names if any(n == e or n.endswith("." + e) for e in _EMBEDDING_NAMES)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ValueError(
            f"{where}: no input embedding among its tensors (looked for names ending in "
            f"{', '.join(_EMBEDDING_NAMES)}); choose one with --key; it has: {found}"
        )
    raise ValueError(
        f"{where}: several tensors look like the input embedding ({', '.join(matches)}); "
        "choose one with --key"
    )


def load_embedding(path: str | os.PathLike, key: str | None = None) -> Embedding:
    """The input embedding of the snapshot at ``path`` (a file or an HF folder; module
    docstring), reading that tensor only.

    Raises:
        ValueError: a missing file, an unknown format, a corrupt or truncated file, a missing or
            ambiguous key, or a tensor that is not a floating ``[V, d]`` matrix (each names the
            path and what is allowed).
    """
    path = Path(path)
    if path.is_dir():
        source, names, read = _folder(path)
    elif not path.is_file():
        raise ValueError(f"snapshot {str(path)!r}: no such file or folder")
    elif path.suffix.lower() not in (".npy", ".npz", ".safetensors") and (
        word_vectors.recognise(path) is not None
    ):
        return _word_vectors(path, key)
    else:
        source, names, read = path, *_reader(path)
    if names is None:  # a .npy holds one unnamed matrix: there is nothing for a key to choose
        if key is not None:
            raise ValueError(
                f"--key {key!r}: snapshot {str(source)!r} is a .npy file, one unnamed matrix; "
                "--key chooses a tensor in .npz, safetensors and torch checkpoints"
            )
        chosen = "W_E"
    else:
        chosen = choose_key(names, key, f"snapshot {str(source)!r}")
    return Embedding(W_E=check_matrix(read(chosen), chosen, source), key=chosen, source=source)


def _word_vectors(path: Path, key: str | None) -> Embedding:
    vectors = word_vectors.read(path)
    if key is not None:
        raise ValueError(
            f"--key {key!r}: snapshot {str(path)!r} is {vectors.format.value} vectors, one matrix "
            "with its words; --key chooses a tensor in .npz, safetensors and torch checkpoints"
        )
    matrix = LazyMatrix(vectors.shape, np.dtype(np.float32), vectors.take)
    return Embedding(matrix, vectors.format.value, path, vectors.vocabulary)


def snapshot_step(path: str | os.PathLike) -> int | None:
    """The training step in a snapshot's name (``step1000``, ``checkpoint-500``,
    ``step_000120.safetensors``; the last match in the path), else ``None``."""
    matches = _STEP.findall(str(path))
    return int(matches[-1]) if matches else None


def _reader(path: Path):
    """``(names, read)`` for one file: its tensor names (``None`` for a .npy: one unnamed
    matrix) and a function reading one of them."""
    suffix = path.suffix.lower()
    where = f"snapshot {str(path)!r}"
    if suffix == ".npy":
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as error:
            raise ValueError(f"{where}: not a readable .npy file ({error})") from None
        return None, lambda name: array
    if suffix == ".npz":
        try:
            archive = np.load(path, allow_pickle=False)
            names = list(archive.files)
        except (OSError, ValueError) as error:
            raise ValueError(f"{where}: not a readable .npz file ({error})") from None
        return names, lambda name: _read_npz(archive, name, where)
    if suffix == ".safetensors":
        return _safetensors(path, where)
    if suffix in _TORCH_SUFFIXES:
        return _torch(path, where)
    raise ValueError(
        f"{where}: unknown format {suffix or '(no suffix)'!r}; allowed: .npy, .npz, "
        f".safetensors, {', '.join(_TORCH_SUFFIXES)}, a Hugging Face model folder, or word "
        "vectors (word2vec text or binary, GloVe text, fastText .bin; recognised by content)"
    )


def _read_npz(archive, name: str, where: str) -> np.ndarray:
    try:
        return archive[name]
    except (OSError, ValueError, EOFError) as error:  # a damaged member
        raise ValueError(f"{where}: array {name!r} is unreadable ({error})") from None


def _safetensors(path: Path, where: str):
    from safetensors import SafetensorError, safe_open

    def opened():
        try:
            return safe_open(str(path), framework="numpy")
        except (SafetensorError, OSError, ValueError) as error:
            raise ValueError(f"{where}: not a readable safetensors file ({error})") from None

    with opened() as handle:
        names = list(handle.keys())

    def read(name: str) -> LazyMatrix:
        with opened() as handle:
            part = handle.get_slice(name)
            shape, dtype = tuple(part.get_shape()), _SAFETENSORS_DTYPES.get(part.get_dtype())

        def take(ids: np.ndarray) -> np.ndarray:
            with opened() as handle:
                part = handle.get_slice(name)
                try:  # one row at a time: only the pages of the rows asked for are read
                    rows = [part[int(i) : int(i) + 1] for i in ids]
                except (SafetensorError, OSError, ValueError, TypeError) as error:
                    raise ValueError(f"{where}: tensor {name!r} is unreadable ({error})") from None
            return np.concatenate(rows) if rows else np.zeros((0, *shape[1:]), dtype)

        return LazyMatrix(shape, np.dtype(dtype or "V1"), take)

    return names, read


def _safetensors_dtypes() -> dict[str, Any]:
    import ml_dtypes

    floats = {"F64": np.float64, "F32": np.float32, "F16": np.float16}
    ints = {"I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8}
    return {**floats, **ints, "BF16": ml_dtypes.bfloat16, "BOOL": np.bool_}


_SAFETENSORS_DTYPES = _safetensors_dtypes()


def _torch(path: Path, where: str):
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"{where}: a torch checkpoint needs torch (pip install torch), or convert it to "
            "safetensors"
        ) from None
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as error:  # torch raises many kinds for a damaged or foreign file
        raise ValueError(f"{where}: not a readable torch checkpoint ({error})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]  # a training checkpoint wrapping the weights
    if not isinstance(state, dict):
        raise ValueError(f"{where}: holds a {type(state).__name__}, not a state dict")
    names = [n for n, v in state.items() if isinstance(v, torch.Tensor)]

    def read(name: str) -> LazyMatrix:
        tensor = state[name].detach()
        dtype = np.float32 if tensor.dtype in (torch.bfloat16, torch.float16) else None

        def take(ids: np.ndarray) -> np.ndarray:  # only these rows leave the memory map
            rows = tensor[torch.from_numpy(ids.astype(np.int64))]
            return (rows.float() if dtype else rows).numpy()

        stored = np.float32 if dtype else torch.empty(0, dtype=tensor.dtype).numpy().dtype
        return LazyMatrix(tuple(tensor.shape), np.dtype(stored), take)

    return names, read


def _folder(path: Path):
    """``(source, names, read)`` for an HF model folder; only the shard holding ``read``'s
    tensor is opened."""
    where = f"snapshot {str(path)!r}"
    for single, index in (
        ("model.safetensors", "model.safetensors.index.json"),
        ("pytorch_model.bin", "pytorch_model.bin.index.json"),
    ):
        if (path / single).is_file():
            names, read = _reader(path / single)
            return path / single, names, read
        if (path / index).is_file():
            try:
                weight_map = json.loads((path / index).read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{where}: unreadable {index} ({error})") from None

            def read(name: str, weight_map=weight_map) -> np.ndarray:
                shard = path / weight_map[name]
                if not shard.is_file():
                    raise ValueError(f"{where}: shard {weight_map[name]!r} is missing")
                return _reader(shard)[1](name)

            return path / index, list(weight_map), read
    files = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.npz"))
    if len(files) == 1:
        names, read = _reader(files[0])
        return files[0], names, read
    raise ValueError(
        f"{where}: a model folder needs model.safetensors, model.safetensors.index.json, "
        "pytorch_model.bin or its index (or exactly one .safetensors/.npz file)"
    )


def check_matrix(array, name: str, source: Path):
    """``array`` itself once it is an input embedding ``[V, d]`` of a floating dtype (nothing
    is read), else ``ValueError`` naming the snapshot, the tensor and its shape or dtype."""
    where = f"snapshot {str(source)!r}: tensor {name!r}"
    shape = tuple(np.shape(array))
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{where} has shape {shape}; an input embedding is a matrix [V, d]")
    dtype = np.dtype(array.dtype)
    if dtype.kind != "f" and dtype.name != "bfloat16":
        raise ValueError(f"{where} has dtype {dtype.name}; an input embedding is floating point")
    return array


# --------------------------------------------------------------------------------------------
# token streams


def load_tokens(
    path: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    *,
    vocabulary: Sequence[str] | None = None,
    case: word_vectors.Case = word_vectors.Case.FALLBACK,
    punctuation: bool = True,
    oov: str = "unknown",
) -> TokenStream:
    """The token stream in ``path``: int ids ``[n]``.

    ``path`` is ``.npy``, ``.npz`` (the array ``tokens``, or its only array; this package's
    exports add ``tracked`` and ``context_length``), or a UTF-8 text file. A text file is encoded
    by ``tokenizer`` (an HF ``tokenizer.json``, read with the `tokenizers` package), else by
    ``vocabulary`` (the words of word vectors, `Embedding.vocabulary`: `word_vectors.tokenize`
    with ``case``, ``punctuation`` and ``oov``), else by this package's word tokenizer
    (`text.prepare_corpus`'s vocabulary of the text itself). The stream says which (`IdSpace`);
    whether the ids are a snapshot's rows is `check_ids`'s to say (a measurement calls it).

    Raises:
        ValueError: a missing, unreadable or empty file, ids that are not a 1-D non-negative
            integer array, or a tokenizer given for a file of ids.
    """
    path = Path(path)
    where = f"--tokens {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz"):
        if tokenizer is not None:
            raise ValueError(f"--tokenizer applies to a text file; {where} holds ids already")
        return _token_arrays(path, where)
    if tokenizer is not None:
        return _tokenized(path, Path(tokenizer), where)
    if vocabulary is not None:
        vocabulary = tuple(vocabulary)
        found = word_vectors.tokenize(
            text.load_text(path), vocabulary, case=case, punctuation=punctuation, oov=oov
        )
        strings = vocabulary + ((text.UNK,) if found.unknown >= 0 else ())
        return TokenStream(
            ids=_check_stream(found.ids, where),
            token_strings=strings,
            id_space=IdSpace.VOCABULARY,
            vocabulary=vocabulary,
            unknown=found.unknown,
            words=found.words,
            out_of_vocabulary=found.out_of_vocabulary,
            oov=oov,
        )
    corpus = text.prepare_corpus(text.load_text(path), vocab_size=None)
    ids = np.concatenate([corpus.train, corpus.validation])
    return TokenStream(
        ids=_check_stream(ids, where),
        token_strings=corpus.vocabulary.tokens,
        id_space=IdSpace.TEXT_WORDS,
    )


def check_ids(stream: TokenStream, embedding: Embedding, where: str = "--tokens") -> None:
    """``ValueError`` unless ``stream``'s ids are ``embedding``'s rows (`IdSpace`).

    A text split by the package's own word tokenizer has the ids of the text's own words, so it
    matches only a snapshot with exactly that many rows (one trained on this text by this
    package's tokenizer); a tokenizer must not have more tokens than the rows, nor disagree
    with word vectors' words; a text tokenized by word vectors' words needs those same words.
    Token ids as given are the caller's to vouch for (their largest is checked against the rows
    when measured).
    """
    rows, source = embedding.vocab_rows, str(embedding.source)
    if stream.id_space is IdSpace.TEXT_WORDS:
        if embedding.vocabulary is not None:
            raise ValueError(
                f"{where} is text split by the package's word tokenizer, but snapshot {source!r} "
                "is word vectors with their own words; tokenize the text by them "
                "(checkpoints.load_tokens(path, vocabulary=embedding.vocabulary))"
            )
        if rows != len(stream.token_strings):
            raise ValueError(
                f"{where} is text split by the package's word tokenizer "
                f"({len(stream.token_strings)} ids of the text's own words), but snapshot "
                f"{source!r} has {rows} rows, the ids of the tokenizer it was trained with; "
                "give that tokenizer (--tokenizer tokenizer.json) or token ids (.npy/.npz)"
            )
    if stream.id_space is IdSpace.TOKENIZER:
        if len(stream.vocabulary) > rows:
            raise ValueError(
                f"the tokenizer has {len(stream.vocabulary)} tokens but snapshot {source!r} has "
                f"{rows} rows; give the tokenizer the model was trained with (--tokenizer)"
            )
        if embedding.vocabulary is not None:
            _check_agreement(stream.vocabulary, embedding.vocabulary, "the tokenizer")
    if stream.id_space is IdSpace.VOCABULARY and embedding.vocabulary != stream.vocabulary:
        if embedding.vocabulary is None:
            raise ValueError(
                f"{where} was tokenized by word vectors' words, but snapshot {source!r} is a "
                "checkpoint whose rows are its tokenizer's ids; measure the two apart"
            )
        raise ValueError(
            f"snapshot {source!r} has other words than the vectors the text was tokenized by "
            f"({rows} against {len(stream.vocabulary)}); measure word vectors of different "
            "vocabularies in separate calls"
        )


def _check_agreement(tokens: tuple[str, ...], vocabulary: tuple[str, ...], tokenizer: str):
    """``ValueError`` unless the tokenizer's tokens are the vectors' words, id for id."""
    pairs = zip(tokens, vocabulary, strict=False)  # the shorter decides; sizes compared below
    differ = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
    if differ is None and len(tokens) == len(vocabulary):
        return
    at = (
        f"id {differ} is {tokens[differ]!r} in the tokenizer and {vocabulary[differ]!r} in the "
        "vectors"
        if differ is not None
        else f"the tokenizer has {len(tokens)} tokens and the vectors {len(vocabulary)} words"
    )
    raise ValueError(
        f"{tokenizer} disagrees with the snapshot's own vocabulary ({at}); drop --tokenizer to "
        "tokenize the text by the vectors' words"
    )


def _token_arrays(path: Path, where: str) -> TokenStream:
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return TokenStream(ids=_check_stream(loaded, where))
        arrays = {name: loaded[name] for name in loaded.files}
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{where}: not a readable {path.suffix} file ({error})") from None
    if "tokens" in arrays:
        ids = arrays["tokens"]
    elif len(arrays) == 1:
        (ids,) = arrays.values()
    else:
        raise ValueError(f"{where}: holds {sorted(arrays)}; name the stream 'tokens'")
    tracked = arrays.get("tracked")
    context = arrays.get("context_length")
    return TokenStream(
        ids=_check_stream(ids, where),
        tracked=None if tracked is None else _check_stream(tracked, f"{where} (tracked)"),
        context_length=None if context is None else int(context),
    )


def _tokenized(path: Path, tokenizer: Path, where: str) -> TokenStream:
    from tokenizers import Tokenizer

    try:
        encoder = Tokenizer.from_file(str(tokenizer))
    except Exception as error:  # tokenizers raises its own exception types
        raise ValueError(
            f"--tokenizer {str(tokenizer)!r}: not a tokenizer.json ({error})"
        ) from None
    ids = np.asarray(encoder.encode(text.load_text(path)).ids, dtype=np.int64)
    size = encoder.get_vocab_size(with_added_tokens=True)
    strings = tuple(encoder.decode([i]) for i in range(size))
    raw = tuple(encoder.id_to_token(i) or "" for i in range(size))
    return TokenStream(
        ids=_check_stream(ids, where),
        token_strings=strings,
        id_space=IdSpace.TOKENIZER,
        vocabulary=raw,
    )


def _check_stream(ids, where: str) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"{where}: token ids must be one stream [n]; got shape {ids.shape}")
    if ids.size == 0:
        raise ValueError(f"{where}: holds no tokens")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{where}: token ids must be integers; got dtype {ids.dtype}")
    if ids.min() < 0:
        raise ValueError(f"{where}: token ids must be >= 0; found {int(ids.min())}")
    return ids.astype(np.int64)


# --------------------------------------------------------------------------------------------
# exports


def export_embeddings(
    folder: str | os.PathLike, W_E, steps, metadata: dict[str, str] | None = None
) -> list[Path]:
    """Write each snapshot ``W_E[s]`` (``[S, V, d]``) as ``folder/step_{steps[s]:06d}.safetensors``
    holding the tensor ``W_E`` (and ``metadata``, strings); each file atomically. Returns the
    paths, in order: the ``--snapshots`` of ``ctx-staircase measure``."""
    from safetensors.numpy import save

    from ctx_staircase import results

    W_E, steps = np.asarray(W_E), np.asarray(steps)
    if W_E.ndim != 3 or steps.shape != (W_E.shape[0],):
        raise ValueError(
            f"W_E must be [S, V, d] with one step each; got {W_E.shape}, {steps.shape}"
        )
    paths = []
    for step, snapshot in zip(steps.tolist(), W_E, strict=True):
        data = save(
            {"W_E": np.ascontiguousarray(snapshot)}, {**(metadata or {}), "step": str(step)}
        )
        paths.append(
            results.atomic_write_bytes(Path(folder) / f"step_{step:06d}.safetensors", data)
        )
    return paths


def export_lanes(
    folder: str | os.PathLike, W_E, gammas, steps, metadata: dict[str, str] | None = None
) -> dict[float, list[Path]]:
    """Each lane of a sweep, ``W_E [G, S, V, d]`` with ``gammas [G]``, as its own
    `export_embeddings` folder ``folder/gamma_{gamma:g}`` (``metadata`` plus its ``gamma``).
    Returns each gamma's paths."""
    W_E, gammas = np.asarray(W_E), np.asarray(gammas, dtype=np.float64)
    if W_E.ndim != 4 or gammas.shape != (W_E.shape[0],):
        raise ValueError(
            f"W_E must be [G, S, V, d] with one gamma per lane; got {W_E.shape}, {gammas.shape}"
        )
    return {
        float(gamma): export_embeddings(
            Path(folder) / f"gamma_{gamma:g}",
            lane,
            steps,
            {**(metadata or {}), "gamma": f"{gamma:g}"},
        )
        for gamma, lane in zip(gammas, W_E, strict=True)
    }


def export_tokens(path: str | os.PathLike, ids, tracked=None, context_length: int | None = None):
    """Write the token stream ``ids [n]`` (with the ``tracked [A]`` ids and the
    ``context_length`` when given) as the ``.npz`` that `load_tokens` reads back."""
    from ctx_staircase import results

    arrays = {"tokens": np.asarray(ids)}
    if tracked is not None:
        arrays["tracked"] = np.asarray(tracked)
    if context_length is not None:
        arrays["context_length"] = np.asarray(context_length)
    return results.write_npz(path, **arrays)
