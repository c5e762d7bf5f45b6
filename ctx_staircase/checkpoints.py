"""Input embeddings read from checkpoints trained elsewhere, and token streams to measure them on.

A *snapshot* is one file or folder holding a model's input embedding ``W_E [V, d]`` (row ``i``
is token id ``i``, the layout of every common checkpoint):

- ``.npy``: the matrix itself (memory-mapped);
- ``.npz``: an archive of named arrays (only the chosen one is read);
- ``.safetensors``: read with the `safetensors` package's NumPy API, which memory-maps the file
  and copies out only the chosen tensor;
- a Hugging Face model folder: ``config.json`` beside ``model.safetensors``, or shards listed in
  ``model.safetensors.index.json`` (only the shard holding the embedding is opened), or
  ``pytorch_model.bin`` (with its index when sharded);
- ``.pt`` / ``.pth`` / ``.bin``: a torch state dict, loaded memory-mapped on the CPU with
  ``weights_only=True``; torch is imported only then (``pip install torch``).

The embedding is the tensor whose name is, or ends in ``.`` followed by, one of
`EMBEDDING_NAMES` (GPT-2 ``transformer.wte.weight``, GPT-NeoX/Pythia
``gpt_neox.embed_in.weight``, Llama/Mistral ``model.embed_tokens.weight``, OPT
``model.decoder.embed_tokens.weight``, BERT ``embeddings.word_embeddings.weight``,
TransformerLens ``embed.W_E``, this package's exports ``W_E``), unless a ``key`` names it. No
match, or several, is a ``ValueError`` that lists the tensors found.

A *token stream* is int ids ``[n]``: ``.npy``, ``.npz`` (the array ``tokens``, or its only
array; this package's exports add ``tracked`` and ``context_length``), or a UTF-8 text file
encoded by a tokenizer: an HF ``tokenizer.json`` (read with the `tokenizers` package) or, with
none, this package's word tokenizer (`text.prepare_corpus`'s vocabulary of the text itself).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctx_staircase import text

#: The trailing names of the input embedding in common checkpoints (see the module docstring).
EMBEDDING_NAMES = (
    "wte.weight",
    "embed_in.weight",
    "embed_tokens.weight",
    "word_embeddings.weight",
    "embed.W_E",
    "W_E",
)
#: File suffixes read as torch state dicts.
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
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
        key: the tensor's name in the checkpoint.
        source: the file it came from (a shard, for a sharded folder).
    """

    W_E: Any
    key: str
    source: Path

    @property
    def vocab_rows(self) -> int:
        """V, the number of rows (often padded past the tokenizer's vocabulary)."""
        return int(self.W_E.shape[0])

    def rows(self, ids) -> np.ndarray:
        """``W_E[ids]`` ``[k, d]`` in memory, half precision as float32 (NumPy computes poorly
        in float16 and not at all in bfloat16)."""
        rows = np.asarray(self.W_E[np.asarray(ids)])
        return rows.astype(np.float32) if rows.dtype.itemsize < 4 else rows


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
    """

    ids: np.ndarray
    token_strings: tuple[str, ...] | None = None
    tracked: np.ndarray | None = None
    context_length: int | None = None


# --------------------------------------------------------------------------------------------
# embeddings


def choose_key(names, key: str | None, where: str) -> str:
    """The embedding's name among ``names``: ``key`` if given, else the one name that is, or
    ends in ``.`` followed by, one of `EMBEDDING_NAMES`; ``ValueError`` (naming ``--key`` and
    listing ``names``) otherwise."""
    names = list(names)
    found = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
    if key is not None:
        if key not in names:
            raise ValueError(f"--key {key!r}: {where} has no such tensor; it has: {found}")
        return key
    matches = [n for n in names if any(n == e or n.endswith("." + e) for e in EMBEDDING_NAMES)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ValueError(
            f"{where}: no input embedding among its tensors (looked for names ending in "
            f"{', '.join(EMBEDDING_NAMES)}); choose one with --key; it has: {found}"
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
    else:
        source, names, read = path, *_reader(path)
    # a .npy holds one unnamed matrix: there is nothing for a key to choose
    chosen = "W_E" if names is None else choose_key(names, key, f"snapshot {str(source)!r}")
    return Embedding(W_E=check_matrix(read(chosen), chosen, source), key=chosen, source=source)


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
    if suffix in TORCH_SUFFIXES:
        return _torch(path, where)
    raise ValueError(
        f"{where}: unknown format {suffix or '(no suffix)'!r}; allowed: .npy, .npz, "
        f".safetensors, {', '.join(TORCH_SUFFIXES)}, or a Hugging Face model folder"
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


def load_tokens(path: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> TokenStream:
    """The token stream in ``path`` (module docstring); ``tokenizer``: an HF ``tokenizer.json``
    for a text file.

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
    corpus = text.prepare_corpus(text.load_text(path), vocab_size=None)
    ids = np.concatenate([corpus.train, corpus.validation])
    return TokenStream(ids=_check_stream(ids, where), token_strings=corpus.vocabulary.tokens)


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
    return TokenStream(ids=_check_stream(ids, where), token_strings=strings)


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
