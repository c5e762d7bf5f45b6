"""Benchmark: reading word vectors (`word_vectors`) and measuring them on a real text.

Writes synthetic files of ``WORDS`` words of dimension ``DIM`` (the size of GloVe 6B's 100-d
file is 400k words; this is a quarter of it) in each format into a temporary folder, then times,
per format:

- ``open``: `checkpoints.load_embedding` (recognising the format, scanning the words and the
  offset of each row; a fastText matrix is memory-mapped);
- ``rows``: reading 200 rows on demand (`Embedding.rows`);
- ``tokenize``: the corpus tokenized by the vectors' words (`checkpoints.load_tokens`);
- ``measure``: `measure.measure_snapshots` on that stream (200 tracked words).

The corpus is ``../shared/data/tinyshakespeare.txt`` (``--corpus``); its words are the file's
first words so the text is mostly in the vocabulary. No speed is asserted.

Usage: python benchmarks/word_vectors.py [--corpus PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ctx_staircase import checkpoints, measure, results

WORDS, DIM = 100_000, 100
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"


def vocabulary(corpus: str) -> list[str]:
    """The corpus's words by frequency (lowercased), then filler words up to `WORDS`."""
    counts = Counter(re.findall(r"(?:[^\W_]|')+|\S", corpus.lower()))
    words = [w for w, _ in counts.most_common()]
    return words + [f"filler{i}" for i in range(WORDS - len(words))]


def write(folder: Path, words: list[str], M: np.ndarray) -> dict[str, Path]:
    paths = {}
    lines = [w + " " + " ".join(f"{v:.5f}" for v in row) for w, row in zip(words, M, strict=True)]
    paths["word2vec text"] = folder / "vectors.vec"
    paths["word2vec text"].write_text(f"{len(words)} {DIM}\n" + "\n".join(lines) + "\n")
    paths["GloVe text"] = folder / "glove.txt"
    paths["GloVe text"].write_text("\n".join(lines) + "\n")
    paths["word2vec binary"] = folder / "vectors.bin"
    body = b"".join(
        w.encode() + b" " + r.astype("<f4").tobytes() for w, r in zip(words, M, strict=True)
    )
    paths["word2vec binary"].write_bytes(f"{len(words)} {DIM}\n".encode() + body)
    paths["fastText .bin"] = folder / "model.bin"
    head = struct.pack("<ii12id", 793712314, 12, DIM, 5, 5, 1, 5, 1, 2, 2, 0, 0, 0, 100, 1e-4)
    entries = b"".join(w.encode() + b"\0" + struct.pack("<qb", 1, 0) for w in words)
    dictionary = struct.pack("<iiiqq", len(words), len(words), 0, len(words), -1) + entries
    matrix = struct.pack("<?qq", False, *M.shape) + M.astype("<f4").tobytes()
    paths["fastText .bin"].write_bytes(head + dictionary + matrix)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    corpus = args.corpus.read_text()
    words = vocabulary(corpus)
    M = np.random.default_rng(0).normal(size=(WORDS, DIM)).astype(np.float32)
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, path in write(Path(folder), words, M).items():
            size = path.stat().st_size / 2**20
            start = time.perf_counter()
            embedding = checkpoints.load_embedding(path)
            opened = time.perf_counter()
            embedding.rows(np.arange(0, WORDS, WORDS // 200))
            read = time.perf_counter()
            stream = checkpoints.load_tokens(args.corpus, vocabulary=embedding.vocabulary)
            tokenized = time.perf_counter()
            measured = measure.measure_snapshots(stream, [embedding])
            done = time.perf_counter()
            rows[name] = dict(
                megabytes=size,
                open=opened - start,
                rows=read - opened,
                tokenize=tokenized - read,
                measure=done - tokenized,
                oov_share=stream.oov_share,
                rho_next=float(measured.alignment["rho_next"][0]),
            )
            print(
                f"{name:16s} {size:6.1f} MB  open {opened - start:6.2f} s  200 rows "
                f"{read - opened:5.3f} s  tokenize {tokenized - read:5.2f} s  measure "
                f"{done - tokenized:5.2f} s  (OOV {stream.oov_share:.1%}, rho_next "
                f"{rows[name]['rho_next']:+.3f})",
                flush=True,
            )
    if args.json:
        record = dict(words=WORDS, dim=DIM, rows=rows, environment=results.environment())
        args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
