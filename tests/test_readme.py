"""The README's Python runs verbatim: the tour of the API (its first block in the default suite,
the language-model block with it in the slow suite) and "Bring your own model", against a
Pythia-shaped folder of snapshots and a tokenizer.json built here (the README's paths, made in
a temporary folder)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(section: str) -> list[str]:
    """The ```python blocks of the README section headed ``## {section}``, in order."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end >= 0 else None]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


def test_the_tour_has_its_blocks():
    assert len(python_blocks("A tour of the API")) == 2
    assert len(python_blocks("Bring your own model")) == 1
    assert len(python_blocks("Word vectors")) == 1


def test_the_tour_runs_verbatim(capsys):
    namespace: dict = {}
    exec(python_blocks("A tour of the API")[0], namespace)
    assert namespace["rho0"].value.shape == namespace["S_emb"].shape[:2]
    assert capsys.readouterr().out.startswith(f"({namespace['S_emb'].shape[0]}, ")


@pytest.mark.slow  # trains the README's GPT: minutes
def test_the_language_model_tour_runs_verbatim():
    namespace: dict = {}
    exec(python_blocks("A tour of the API")[1], namespace)
    assert namespace["curves"].rho_next.shape == namespace["trajectory"].loss.shape


def test_bring_your_own_model_runs_verbatim(tmp_path, monkeypatch):
    tokenizers = pytest.importorskip("tokenizers")
    words = "the cat sat on a mat and the dog ran to the cat".split()
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(words))}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    rng = np.random.default_rng(0)
    (tmp_path / "corpus.txt").write_text(" ".join(rng.choice(words, size=4000)))
    for step in (0, 143000):
        folder = tmp_path / "pythia-70m" / f"step{step}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
        weights = rng.normal(size=(len(vocab) + 3, 8)).astype(np.float16)  # padded rows
        save_file({"gpt_neox.embed_in.weight": weights}, str(folder / "model.safetensors"))
        tokenizer.save(str(folder / "tokenizer.json"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(python_blocks("Bring your own model")[0], namespace)
    measured = namespace["measured"]
    np.testing.assert_array_equal(measured.steps, [0, 143000])
    assert measured.keys == ("gpt_neox.embed_in.weight",) * 2
    assert np.all(np.abs(measured.alignment["rho_next"]) < 1)


def test_word_vectors_run_verbatim(tmp_path, monkeypatch):
    """The "Word vectors" block and its command on a GloVe-format file of the corpus's words,
    one word left out: the out-of-vocabulary share is that word's share of the text, and the
    command, run as the README gives it, writes the same measurement."""
    from ctx_staircase import cli

    rng = np.random.default_rng(0)
    words = "the cat sat on a mat and dog ran to".split()
    corpus = " ".join(rng.choice(words, size=4000))
    (tmp_path / "corpus.txt").write_text(corpus)
    rows = [f"{w} " + " ".join(f"{v:.6f}" for v in rng.normal(size=8)) for w in words[:-1]]
    (tmp_path / "glove.6B.100d.txt").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(python_blocks("Word vectors")[0], namespace)
    measured = namespace["measured"]
    assert measured.settings["oov_share"] == corpus.split().count("to") / 4000
    section = README.read_text().split("\n## Word vectors\n")[1].split("\n## ")[0]
    command = re.search(r"```bash\n(ctx-staircase measure .*?)\n```", section).group(1)
    assert cli.main(command.split()[1:]) == 0
    saved = json.loads((tmp_path / "runs" / "glove" / "metrics.json").read_text())
    assert saved["rho_next"] == pytest.approx(measured.alignment["rho_next"].tolist())
