"""`measure.measure_snapshots`, `checkpoints` and ``ctx-staircase measure``: known answers for
every snapshot format (an embedding equal to the next-token distributions scores rho_next >= 0.99,
a random one |rho_next| <= 0.1, and rotating and scaling it changes nothing), the embedding found
by its common names, token streams from ids, text and an HF tokenizer, the task path against
`geometry`, the loop from an `lm` export back to its own rho_next, and bad input as one line with
exit 2 and nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import small_lm_config
from safetensors.numpy import save_file

from ctx_staircase import checkpoints, cli, geometry, lm, measure, signatures, tasks, text

V = 40  # token ids of the synthetic stream
PADDED = 48  # rows of its checkpoints: padded past the vocabulary, as Pythia's are


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    """A Markov chain over V tokens with sparse, distinct transition rows (20k tokens)."""
    rng = np.random.default_rng(0)
    transitions = rng.dirichlet(np.full(V, 0.2), size=V)
    ids = [0]
    for u in rng.random(20_000):
        ids.append(int(np.searchsorted(np.cumsum(transitions[ids[-1]]), u * 0.999999)))
    return np.asarray(ids)


@pytest.fixture(scope="module")
def next_token(stream) -> np.ndarray:
    """Each token's empirical next-token distribution ``[V, V]``."""
    phi, _ = signatures.next_token_signature(text.windows(stream, 64), V, alphas=np.arange(V))
    return phi


def padded(rows: np.ndarray, seed: int = 1) -> np.ndarray:
    """``rows [V, d]`` padded with random rows to ``[PADDED, d]`` (float32, a checkpoint's)."""
    extra = np.random.default_rng(seed).normal(size=(PADDED - V, rows.shape[1]))
    return np.concatenate([rows, extra]).astype(np.float32)


def planted(next_token: np.ndarray) -> dict[str, np.ndarray]:
    """Three snapshots: the signature rows, random rows, the signature rotated and scaled."""
    rng = np.random.default_rng(2)
    rotation = np.linalg.qr(rng.normal(size=(V, V)))[0]
    return {
        "signature": padded(next_token),
        "random": padded(rng.normal(size=(V, V))),
        "rotated": padded(3.7 * next_token @ rotation),
    }


def write_npz(folder: Path, name: str, W_E: np.ndarray) -> Path:
    path = folder / f"{name}.npz"
    np.savez(path, W_E=W_E, W_U=W_E.T.copy())
    return path


def write_safetensors(folder: Path, name: str, W_E: np.ndarray) -> Path:
    """A Pythia-style file: the embedding under its GPT-NeoX name among other tensors."""
    path = folder / f"{name}.safetensors"
    others = {"gpt_neox.layers.0.attention.dense.weight": np.ones((8, 8), np.float32)}
    save_file({"gpt_neox.embed_in.weight": W_E.astype(np.float16), **others}, str(path))
    return path


def write_folder(folder: Path, name: str, W_E: np.ndarray) -> Path:
    """An HF model folder with two shards and their index; the embedding in the second."""
    path = folder / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"lm_head.weight": W_E.copy()}, str(path / "model-00001-of-00002.safetensors"))
    save_file({"model.embed_tokens.weight": W_E}, str(path / "model-00002-of-00002.safetensors"))
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {
            "lm_head.weight": "model-00001-of-00002.safetensors",
            "model.embed_tokens.weight": "model-00002-of-00002.safetensors",
        },
    }
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return path


WRITERS = {"npz": write_npz, "safetensors": write_safetensors, "hf_folder": write_folder}


# --------------------------------------------------------------------------------------------
# known answers, every format


@pytest.mark.parametrize("kind", WRITERS)
def test_known_answers_in_every_format(kind, stream, next_token, tmp_path):
    paths = [WRITERS[kind](tmp_path, n, W) for n, W in planted(next_token).items()]
    measured = measure.measure_snapshots(stream, paths, count=V, min_count=20, probe_steps=30)
    signature, random, rotated = measured.alignment["rho_next"]
    assert signature >= 0.99
    assert abs(random) <= 0.1
    assert rotated == pytest.approx(signature, abs=1e-3 if kind == "safetensors" else 1e-6)
    assert np.all(np.abs(measured.null["rho_next"]) <= 0.1)  # the permuted rows: the null
    assert measured.tracked.size == V and measured.settings["vocab_rows"] == PADDED
    np.testing.assert_array_equal(measured.steps, [0, 1, 2])  # no step in the names


def test_arrays_and_files_give_the_same_measurement(stream, next_token, tmp_path):
    snapshots = list(planted(next_token).values())
    from_arrays = measure.measure_snapshots(stream, snapshots, count=V, probe_steps=30)
    paths = [write_npz(tmp_path, f"step{100 * i}", W) for i, W in enumerate(snapshots)]
    from_files = measure.measure_snapshots(stream, paths, count=V, probe_steps=30)
    np.testing.assert_array_equal(
        from_files.alignment["rho_next"], from_arrays.alignment["rho_next"]
    )
    np.testing.assert_array_equal(from_files.probe["corr"], from_arrays.probe["corr"])
    np.testing.assert_array_equal(from_files.steps, [0, 100, 200])  # steps from the names


def test_the_probe_sees_the_signature_and_not_noise(stream, next_token):
    signature, random, _ = planted(next_token).values()
    measured = measure.measure_snapshots(stream, [signature, random], count=V, probe_steps=300)
    assert measured.probe["corr"][0] > 0.5 > abs(measured.probe["corr"][1])


# --------------------------------------------------------------------------------------------
# finding the embedding


@pytest.mark.parametrize(
    "name",
    [
        "transformer.wte.weight",  # GPT-2
        "wte.weight",  # GPT-2 as HF saves it
        "gpt_neox.embed_in.weight",  # GPT-NeoX / Pythia
        "model.embed_tokens.weight",  # Llama / Mistral
        "model.decoder.embed_tokens.weight",  # OPT
        "bert.embeddings.word_embeddings.weight",  # BERT
        "embed.W_E",  # TransformerLens
        "W_E",  # this package's exports
    ],
)
def test_the_embedding_is_found_by_its_common_name(name, tmp_path):
    W_E = np.arange(12, dtype=np.float32).reshape(4, 3)
    decoys = {"lm_head.weight": np.zeros((4, 3), np.float32), "pos_embed.W_pos": np.ones((2, 3))}
    path = tmp_path / "model.safetensors"
    save_file({name: W_E, **{k: v.astype(np.float32) for k, v in decoys.items()}}, str(path))
    embedding = checkpoints.load_embedding(path)
    assert embedding.key == name
    np.testing.assert_array_equal(embedding.W_E, W_E)


def test_key_chooses_among_several_and_bfloat16_becomes_float32(tmp_path):
    import ml_dtypes

    W = np.arange(6, dtype=np.float32).reshape(3, 2)
    path = tmp_path / "t5.safetensors"
    tensors = {"encoder.embed_tokens.weight": W, "decoder.embed_tokens.weight": 2 * W}
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}, str(path))
    with pytest.raises(ValueError, match="several tensors look like the input embedding"):
        checkpoints.load_embedding(path)
    embedding = checkpoints.load_embedding(path, key="decoder.embed_tokens.weight")
    assert embedding.W_E.dtype == ml_dtypes.bfloat16  # as stored, until rows are read
    rows = embedding.rows([2, 0])
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, 2 * W[[2, 0]])


def test_npy_is_memory_mapped_and_steps_come_from_names(tmp_path):
    path = tmp_path / "pythia-70m-step143000.npy"
    np.save(path, np.ones((5, 2), np.float32))
    embedding = checkpoints.load_embedding(path)
    assert isinstance(embedding.W_E, np.memmap)
    assert checkpoints.snapshot_step(path) == 143000
    assert checkpoints.snapshot_step("runs/checkpoint-500/model.safetensors") == 500
    assert checkpoints.snapshot_step("final.npz") is None


def test_a_torch_checkpoint_reads_its_state_dict(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
    W = torch.arange(8, dtype=torch.bfloat16).reshape(4, 2)
    torch.save({"embed.W_E": W, "blocks.0.attn.W_Q": torch.zeros(2, 2)}, tmp_path / "tl.pt")
    embedding = checkpoints.load_embedding(tmp_path / "tl.pt")
    assert embedding.key == "embed.W_E" and embedding.rows([3, 1]).dtype == np.float32
    np.testing.assert_array_equal(embedding.rows([3, 1]), np.arange(8).reshape(4, 2)[[3, 1]])


# --------------------------------------------------------------------------------------------
# token streams


def test_token_files_ids_text_and_hf_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    np.save(tmp_path / "ids.npy", np.array([3, 1, 2, 3]))
    np.testing.assert_array_equal(checkpoints.load_tokens(tmp_path / "ids.npy").ids, [3, 1, 2, 3])
    corpus = tmp_path / "text.txt"
    corpus.write_text("the cat sat . the cat ran .")
    own = checkpoints.load_tokens(corpus)
    assert [own.token_strings[i] for i in own.ids[:3]] == ["the", "cat", "sat"]
    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, "ran": 4, ".": 5}
    model = tokenizers.models.WordLevel(vocab, unk_token="[UNK]")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    hf = checkpoints.load_tokens(corpus, tmp_path / "tokenizer.json")
    np.testing.assert_array_equal(hf.ids, [1, 2, 3, 5, 1, 2, 4, 5])
    assert hf.token_strings[2] == "cat"
    # an HF vocabulary has no <unk> at id 0; its special tokens are not words
    tracked = lm.eligible_tokens(np.tile(hf.ids, 10), hf.token_strings, count=4, min_count=1)
    assert set(tracked.tolist()) == {1, 2, 3, 4}


# --------------------------------------------------------------------------------------------
# task data


def test_task_snapshots_agree_with_geometry(tmp_path):
    ds = tasks.make("add", N=10)
    rng = np.random.default_rng(0)
    W_E = rng.normal(size=(3, ds.vocab_size, 8))
    paths = [write_npz(tmp_path, f"step_{s}", W) for s, W in zip((0, 5, 9), W_E, strict=True)]
    measured = measure.measure_snapshots(ds, paths)
    curves = geometry.alignment_curves(W_E[None], measured.steps, ds, probe_snapshots=3)
    np.testing.assert_allclose(measured.alignment["rho0"], curves.rho0[0], atol=1e-6)
    np.testing.assert_allclose(measured.probe["corr"], curves.probe_corr[0], atol=1e-6)
    rho = geometry.alignment_orders(ds, W_E)
    rho1 = np.max([v for k, v in measured.alignment.items() if k.startswith("rho1_k")], axis=0)
    np.testing.assert_allclose(rho1, rho[1], atol=1e-6)
    np.testing.assert_array_equal(measured.steps, [0, 5, 9])


def test_task_embedding_equal_to_its_signature_scores_one():
    ds = tasks.make("add", N=10)
    alphas = geometry.group_tokens(ds, geometry.default_group(ds))
    labels = np.unique(ds.labels[ds.weights > 0])
    phi0 = signatures.label_signature(ds, 0, alphas=alphas, labels=labels)
    W_E = np.random.default_rng(0).normal(size=(ds.vocab_size, phi0.shape[1]))
    W_E[alphas] = phi0
    measured = measure.measure_snapshots(ds, [W_E])
    assert measured.alignment["rho0"][0] == pytest.approx(1.0, abs=1e-6)
    assert abs(measured.null["rho0"][0]) < 0.5


# --------------------------------------------------------------------------------------------
# the loop: an lm export measured back


@pytest.mark.slow  # trains an LM, exports and measures it back: about 18 s
def test_measure_on_an_lm_export_reproduces_its_rho_next(tmp_path):
    corpus = text.prepare_corpus(text.builtin_corpus(n_sentences=600, seed=0), vocab_size=None)
    config = small_lm_config(
        tracked=30, min_count=5, signature_windows=16, validation_windows=8, probe_vocabulary=20
    )
    trajectory = lm.train_lm(corpus, config, gammas=(1.0,), seed=0)
    signature = lm.lm_signatures(
        corpus.train, corpus.vocab_size, trajectory.tracked, context_length=8, probe_vocabulary=20
    )
    curves = lm.lm_metrics(trajectory, signature, probe_steps=20)
    tokens = checkpoints.export_tokens(tmp_path / "tokens.npz", corpus.train, trajectory.tracked, 8)
    paths = checkpoints.export_embeddings(tmp_path / "g1", trajectory.W_E[0], trajectory.steps)
    measured = measure.measure_snapshots(
        checkpoints.load_tokens(tokens), paths, probe_vocabulary=20, probe_steps=20
    )
    np.testing.assert_array_equal(measured.steps, trajectory.steps)
    np.testing.assert_allclose(measured.alignment["rho_next"], curves.rho_next[0], atol=1e-6)
    np.testing.assert_allclose(measured.probe["corr"], curves.probe_corr[0], atol=1e-6)


@pytest.mark.slow  # two CLI runs, about 40 s
def test_cli_measure_on_a_tiny_lm_run_equals_its_rho_next(tmp_path):
    run = tmp_path / "lm"
    assert cli.main(["lm", "--tiny", "--out", str(run)]) == 0
    lane = run / "embeddings" / "gamma_1"
    snapshots = [str(p) for p in sorted(lane.glob("step_*.safetensors"))]
    out = tmp_path / "measured"
    argv = ["measure", "--tokens", str(run / "embeddings" / "tokens.npz"), "--snapshots"]
    assert cli.main([*argv, *snapshots, "--out", str(out)]) == 0
    measured = json.loads((out / "metrics.json").read_text())
    arrays = np.load(run / "arrays.npz")
    np.testing.assert_allclose(measured["rho_next"], arrays["curves_rho_next"][0], atol=1e-6)
    assert (out / "alignment.png").read_bytes()[:4] == b"\x89PNG"
    assert set(np.load(out / "curves.npz").files) >= {"steps", "rho_next", "null_rho_next"}


@pytest.mark.slow  # trains, exports and measures through the CLI: over 20 s
def test_cli_measure_on_a_task_export(tmp_path, capsys):
    run = tmp_path / "train"
    argv = ["train", "add", "--param", "N=8", "--steps", "40", "--snapshot-steps", "0", "20", "40"]
    assert cli.main([*argv, "--d", "16", "--out", str(run)]) == 0
    lane = next((run / "embeddings").iterdir())
    snapshots = [str(p) for p in sorted(lane.glob("step_*.safetensors"))]
    out = tmp_path / "measured"
    argv = ["measure", "--task", "add", "--param", "N=8", "--snapshots", *snapshots]
    assert cli.main([*argv, "--out", str(out)]) == 0
    measured = json.loads((out / "metrics.json").read_text())
    trained = json.loads((run / "metrics.json").read_text())
    np.testing.assert_allclose(measured["rho0"], trained["alignment"]["rho0"][0], atol=1e-6)
    assert measured["steps"] == trained["alignment"]["steps"]


# --------------------------------------------------------------------------------------------
# bad input: one line, exit 2, nothing written


def _bad_inputs(folder: Path, stream: np.ndarray) -> dict[str, tuple[list[str], str]]:
    np.save(folder / "ids.npy", stream)
    np.save(folder / "empty.npy", np.array([], dtype=np.int64))
    outside = stream.copy()
    outside[100] = PADDED  # one id past the padded rows: rare, so it is not a tracked token
    np.save(folder / "outside.npy", outside)
    np.save(folder / "rank3.npy", np.zeros((2, 3, 4), np.float32))
    good = folder / "good.npy"
    np.save(good, np.zeros((PADDED, 4), np.float32))
    save_file({"wte.weight": np.zeros((PADDED, 4), np.float32)}, str(folder / "ok.safetensors"))
    whole = (folder / "ok.safetensors").read_bytes()
    (folder / "truncated.safetensors").write_bytes(whole[: len(whole) // 2])
    (folder / "corrupt.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    save_file({"a.weight": np.zeros((4, 4), np.float32)}, str(folder / "nokey.safetensors"))
    save_file({"wte.weight": np.zeros((4, 4), np.float32)}, str(folder / "small.safetensors"))
    both = {"wte.weight": np.zeros((4, 4), np.float32), "embed_in.weight": np.zeros((4, 4))}
    save_file({k: v.astype(np.float32) for k, v in both.items()}, str(folder / "two.safetensors"))
    (folder / "weights.h5").write_bytes(b"\x89HDF\r\n")
    ids = ["--tokens", str(folder / "ids.npy"), "--snapshots"]
    return {
        "missing key": ([*ids, str(folder / "nokey.safetensors")], "--key"),
        "unknown key": ([*ids, str(folder / "ok.safetensors"), "--key", "nope"], "--key 'nope'"),
        "ambiguous key": ([*ids, str(folder / "two.safetensors")], "several tensors"),
        "wrong rank": ([*ids, str(folder / "rank3.npy")], "shape (2, 3, 4)"),
        "truncated": ([*ids, str(folder / "truncated.safetensors")], "truncated.safetensors"),
        "corrupt": ([*ids, str(folder / "corrupt.safetensors")], "not a readable safetensors"),
        "empty tokens": (
            ["--tokens", str(folder / "empty.npy"), "--snapshots", str(good)], "no tokens"
        ),
        "id outside": (
            ["--tokens", str(folder / "outside.npy"), "--snapshots", str(good)],
            f"id {PADDED} is outside",
        ),
        "missing snapshot": ([*ids, str(folder / "nothere.safetensors")], "no such file"),
        "unknown format": ([*ids, str(folder / "weights.h5")], "unknown format '.h5'"),
        "labels count": ([*ids, str(good), "--labels", "1", "2"], "--labels"),
        "id past one of two": (
            [*ids, str(folder / "ok.safetensors"), str(folder / "small.safetensors")],
            "which has 4 rows",
        ),
        "key for a .npy": ([*ids, str(good), "--key", "W_E"], "is a .npy file"),
        "context of one": ([*ids, str(good), "--context", "1"], "--context"),
    }  # fmt: skip


def test_models_of_different_widths_measure_as_in_separate_calls(stream, next_token, tmp_path):
    """Two snapshots of different widths and paddings in one call give each the numbers a
    call of its own gives (rho_next, the null and the probe), with its width; a task still
    needs one shape."""
    rng = np.random.default_rng(5)
    narrow = np.concatenate([next_token @ rng.normal(size=(V, 24)), rng.normal(size=(4, 24))])
    paths = [write_npz(tmp_path, "wide", padded(next_token)), write_npz(tmp_path, "narrow", narrow)]
    options = dict(count=V, min_count=20, probe_steps=30)
    both = measure.measure_snapshots(stream, paths, **options)
    assert both.widths == (V, 24)
    for i, path in enumerate(paths):
        alone = measure.measure_snapshots(stream, [path], **options)
        assert alone.widths == both.widths[i : i + 1]
        for curves in ("alignment", "null", "probe"):
            for name, values in getattr(alone, curves).items():
                np.testing.assert_allclose(getattr(both, curves)[name][i], values[0], rtol=1e-6)
    ds = tasks.make("add", N=5)
    with pytest.raises(ValueError, match="every snapshot of a task must be the same"):
        measure.measure_snapshots(ds, [np.ones((ds.vocab_size, 4)), np.ones((ds.vocab_size, 5))])


def test_a_finished_measurement_is_replaced_only_with_force(stream, tmp_path, capsys):
    """A second ``measure`` into the folder of a finished one exits 2 with one line naming
    ``--force`` and leaves its files as they were; with ``--force`` it replaces them."""
    np.save(tmp_path / "ids.npy", stream)
    np.save(tmp_path / "a.npy", np.random.default_rng(0).normal(size=(PADDED, 8)))
    out = tmp_path / "out"
    argv = [
        "measure",
        "--tokens",
        str(tmp_path / "ids.npy"),
        "--snapshots",
        str(tmp_path / "a.npy"),
    ]
    argv += ["--tracked", "10", "--out", str(out)]
    assert cli.main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert cli.main([*argv, "--probe-seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a finished run" in err and "--force" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert cli.main([*argv, "--probe-seed", "1", "--force"]) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["seed"] == 1


def test_bad_input_is_one_line_exit_2_and_nothing_written(stream, tmp_path, capsys):
    cases = _bad_inputs(tmp_path, stream)
    for name, (argv, needle) in cases.items():
        out = tmp_path / f"out_{name.replace(' ', '_')}"
        assert cli.main(["measure", *argv, "--out", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (name, err)
        assert not out.exists(), name


def test_semantic_structure_of_the_word_groups_a_tokenizer_has(tmp_path):
    """Numbers planted on a line and weekdays on a circle score number order 1 and a 7/7
    cycle on the last snapshot, and not on the random first one; groups the tokenizer splits
    are left out."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text.builtin_corpus(n_sentences=3000, seed=0))
    stream = checkpoints.load_tokens(corpus)
    groups = measure.word_group_ids(stream.token_strings)
    assert {"numbers", "weekdays", "months"} <= set(groups)
    rng = np.random.default_rng(0)
    size = len(stream.token_strings)
    first, last = rng.normal(size=(size, 16)), rng.normal(size=(size, 16))
    last[groups["numbers"]] = np.outer(np.arange(len(groups["numbers"])), np.eye(16)[0]) + 0.01
    angles = 2 * np.pi * np.arange(7) / 7
    last[groups["weekdays"], :2] = 10 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    last[groups["weekdays"], 2:] = 0
    measured = measure.measure_snapshots(stream, [first, last], probe_steps=10)
    assert measured.semantic["last"]["number_order"] == pytest.approx(1.0)
    assert measured.semantic["last"]["weekday_cycle"] == 7
    assert measured.semantic["first"]["number_order"] < 0.9
    strings = list(stream.token_strings)
    strings[groups["weekdays"][0]] = "mon"  # "monday" is no longer one token
    assert "weekdays" not in measure.word_group_ids(strings)


def test_word_group_ids_take_the_lowest_id_of_a_word():
    """A word that several tokens spell (``"monday"`` and GPT-2's ``" Monday"``) gets the
    lowest of their ids, in either order of the two spellings."""
    words = [w for group in text.BUILTIN_GROUPS.values() for w in group]
    spelled = [" " + w.capitalize() for w in words]
    for strings in (["<pad>", *words, *spelled], ["<pad>", *spelled, *words]):
        groups = measure.word_group_ids(strings)
        assert set(groups) == set(text.BUILTIN_GROUPS)
        for group, ids in groups.items():  # the first of the two spellings is at 1 + index
            lowest = [1 + words.index(w) for w in text.BUILTIN_GROUPS[group]]
            np.testing.assert_array_equal(ids, lowest)


def test_results_keep_the_given_order_and_the_figure_draws_by_step(stream, next_token):
    """rho_next lists the snapshots in the order given (a glob's order is not the step order);
    the figure's curves run in step order."""
    import matplotlib.pyplot as plt

    from ctx_staircase import plots

    snapshots = list(planted(next_token).values())
    measured = measure.measure_snapshots(
        stream, snapshots, steps=[2000, 0, 512], count=V, probe_steps=10
    )
    assert measured.steps.tolist() == [2000, 0, 512]
    assert measured.alignment["rho_next"][0] >= 0.99  # the first given: the signature rows
    figure = plots.measurement_figure(measured, "test")
    for line in figure.axes[0].lines[:2] + figure.axes[1].lines[:1]:
        assert list(line.get_xdata()) == [0, 512, 2000]
    plt.close(figure)


def test_a_single_snapshot_figure_draws_the_null_it_lists_and_the_probe_line_says_when_it_fails(
    stream, tmp_path, capsys
):
    """One snapshot: the null the legend lists is drawn (a marker: a one-point line is
    invisible); random rows give a probe no better than a constant, and the printed table says
    so for that step."""
    import matplotlib.pyplot as plt

    from ctx_staircase import plots

    rows = np.random.default_rng(9).normal(size=(PADDED, 8))
    measured = measure.measure_snapshots(stream, [rows], count=V, probe_steps=10)
    figure = plots.measurement_figure(measured, "one")
    null = [line for line in figure.axes[0].lines if len(line.get_xdata()) == 1]
    assert [line.get_linestyle() for line in null] == ["-", "--"]  # the score, then its null
    assert null[1].get_marker() not in ("", "None", None)  # so its one point is drawn
    plt.close(figure)
    np.save(tmp_path / "ids.npy", stream)
    np.save(tmp_path / "random.npy", rows)
    argv = ["measure", "--tokens", str(tmp_path / "ids.npy"), "--snapshots"]
    assert cli.main([*argv, str(tmp_path / "random.npy"), "--out", str(tmp_path / "o")]) == 0
    record = json.loads((tmp_path / "o" / "metrics.json").read_text())
    printed = " ".join(capsys.readouterr().out.split())
    worse = record["probe"]["mse"][0] > record["probe"]["baseline_mse"][0]
    assert ("the probe does worse than a constant" in printed) is worse
    assert worse  # random rows: the probe has nothing to find


def test_stream_null_relabels_the_tracked_tokens_of_both_axes():
    """The null is the alignment of ``S^emb`` with its tracked tokens relabelled: rows and
    columns permuted together, a similarity matrix again. Here ``S^emb = S^next = I`` plus one
    pair at 1 (tokens 0 and 1 have one successor and one embedding), so the null's matrix has that
    pair elsewhere or in place: Pearson ``-1/14`` or 1 over the 15 pairs, whatever the seed."""
    pattern = [0, 7, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]  # tokens 0-5 tracked, each then a successor
    ids = np.tile(pattern, 30)
    W_E = np.zeros((12, 6))
    W_E[np.arange(6), [0, 0, 2, 3, 4, 5]] = 1.0  # rows 0 and 1 equal, the others orthogonal
    for seed in range(2):
        measured = measure.measure_snapshots(
            ids, [W_E], tracked=np.arange(6), context_length=12, probe_steps=2, seed=seed
        )
        assert measured.alignment["rho_next"][0] == pytest.approx(1.0, abs=1e-12)
        null = float(measured.null["rho_next"][0])
        assert min(abs(null - 1.0), abs(null + 1 / 14)) < 1e-12, (seed, null)


def test_task_nulls_of_every_order_are_on_the_shuffled_geometry():
    """An embedding on the frequency-1 ring of ``mod`` has ``rho_(1),1 = 1``; the null permutes the
    number rows, which breaks the ring, so the null's ``rho_(1),1`` is far below it (it equals
    the run's only if the null were the unshuffled rows)."""
    ds = tasks.make("mod", N=10)
    numbers = ds.groups["numbers"]
    W_E = np.zeros((ds.vocab_size, 2))
    angle = 2 * np.pi * numbers / len(numbers)
    W_E[numbers] = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    measured = measure.measure_snapshots(ds, [W_E], seed=0)
    assert measured.alignment["rho1_k1"][0] == pytest.approx(1.0, abs=1e-6)
    assert measured.null["rho1_k1"][0] < 0.8


def test_snapshot_step_is_the_last_step_named_in_the_path():
    """The step of a snapshot is the one its own name states, not a folder's above it."""
    assert checkpoints.snapshot_step("step1000") == 1000
    assert checkpoints.snapshot_step("out/checkpoint-500") == 500
    assert checkpoints.snapshot_step("embeddings/step_000120.safetensors") == 120
    assert checkpoints.snapshot_step("runs/step_100/checkpoint-500/model.safetensors") == 500
    assert checkpoints.snapshot_step("run_iter3/W_E_step42.npy") == 42
    assert checkpoints.snapshot_step("final/model.safetensors") is None


def test_export_lanes_writes_each_gamma_its_own_lane(tmp_path):
    """`checkpoints.export_lanes`: folder ``gamma_{g}`` holds lane g's snapshots, tagged with
    its gamma and the shared metadata, and loads back bitwise; a lane count that does not
    match the gammas is refused."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    W_E = np.arange(2 * 3 * 4 * 2, dtype=np.float32).reshape(2, 3, 4, 2)
    written = checkpoints.export_lanes(tmp_path, W_E, [0.5, 1.0], [0, 5, 10], {"seed": "7"})
    assert sorted(written) == [0.5, 1.0]
    for g, (gamma, lane) in enumerate(zip(("0.5", "1"), W_E, strict=True)):
        paths = written[float(gamma)]
        assert [p.parent.name for p in paths] == [f"gamma_{gamma}"] * 3
        assert [p.name for p in paths] == [f"step_{s:06d}.safetensors" for s in (0, 5, 10)]
        for snapshot, path in zip(lane, paths, strict=True):
            np.testing.assert_array_equal(load_file(path)["W_E"], snapshot)
        with safe_open(paths[-1], "np") as f:
            assert f.metadata() == {"gamma": gamma, "seed": "7", "step": "10"}, g
    with pytest.raises(ValueError, match="one gamma per lane"):
        checkpoints.export_lanes(tmp_path / "bad", W_E, [1.0], [0, 5, 10])


def test_a_text_file_of_tokens_is_read_whole(tmp_path):
    """`checkpoints.load_tokens` on a text file: every word of it, in order, the validation
    tail `text.prepare_corpus` splits off included (20 words: 20 ids, decoding to the text)."""
    words = [f"w{i % 7}" for i in range(20)]
    path = tmp_path / "text.txt"
    path.write_text(" ".join(words))
    stream = checkpoints.load_tokens(path)
    assert stream.ids.shape == (20,)
    assert [stream.token_strings[i] for i in stream.ids] == words


def test_task_snapshots_are_probed_at_every_snapshot(tmp_path):
    """Every snapshot of a task measurement gets its probe fit, also beyond the 8 a training
    run's curves sample by default: 10 snapshots, 10 probe values, equal to geometry's with
    ``probe_snapshots=10``."""
    ds = tasks.make("add", N=10)
    W_E = np.random.default_rng(1).normal(size=(10, ds.vocab_size, 8))
    paths = [write_npz(tmp_path, f"step_{s}", W) for s, W in enumerate(W_E)]
    measured = measure.measure_snapshots(ds, paths)
    curves = geometry.alignment_curves(W_E[None], measured.steps, ds, probe_snapshots=10)
    assert np.all(np.isfinite(measured.probe["corr"])) and len(measured.probe["corr"]) == 10
    np.testing.assert_allclose(measured.probe["corr"], curves.probe_corr[0], atol=1e-6)


# --------------------------------------------------------------------------------------------
# lines the default suite never ran (tests/README.md, "Tests for lines the default suite never
# ran"): the other folder layouts, damaged files and streams, each refusal naming what is wrong


def test_a_model_folder_with_one_model_safetensors_or_one_file_is_read_from_it(tmp_path):
    """A folder with ``model.safetensors`` reads it (its source is that file); a folder with one
    .npz and nothing else reads the .npz; two candidate files and no index are refused."""
    W_E = np.arange(15, dtype=np.float32).reshape(5, 3)
    single = tmp_path / "single"
    single.mkdir()
    save_file({"transformer.wte.weight": W_E, "lm_head.weight": 0 * W_E}, str(single / "x"))
    (single / "x").rename(single / "model.safetensors")
    embedding = checkpoints.load_embedding(single)
    assert embedding.source == single / "model.safetensors"
    assert embedding.key == "transformer.wte.weight" and embedding.vocab_rows == 5
    np.testing.assert_array_equal(embedding.rows([4, 1]), W_E[[4, 1]])

    one = tmp_path / "one"
    one.mkdir()
    path = write_npz(one, "weights", W_E)
    embedding = checkpoints.load_embedding(one)
    assert embedding.source == path and embedding.vocab_rows == 5
    np.testing.assert_array_equal(embedding.rows([0, 2]), W_E[[0, 2]])

    write_npz(one, "other", W_E)
    with pytest.raises(ValueError, match=r"'.*one': a model folder needs model.safetensors"):
        checkpoints.load_embedding(one)


def test_a_sharded_folder_with_a_broken_index_or_a_missing_shard_is_refused(tmp_path):
    W_E = np.ones((4, 2), np.float32)
    folder = write_folder(tmp_path, "sharded", W_E)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match=r"shard 'model-00002-of-00002.safetensors' is missing"):
        checkpoints.load_embedding(folder)
    (folder / "model.safetensors.index.json").write_text('{"metadata": {}}')  # no weight_map
    with pytest.raises(ValueError, match=r"unreadable model.safetensors.index.json \('weight_m"):
        checkpoints.load_embedding(folder)
    (folder / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"sharded': unreadable model.safetensors.index.json"):
        checkpoints.load_embedding(folder)


def test_damaged_npy_npz_and_safetensors_rows_are_refused_naming_the_file(tmp_path):
    import zipfile

    (tmp_path / "bad.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match=r"bad.npy': not a readable .npy file"):
        checkpoints.load_embedding(tmp_path / "bad.npy")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"bad.npz': not a readable .npz file"):
        checkpoints.load_embedding(tmp_path / "bad.npz")
    # a valid archive whose member is a truncated array: found by name, unreadable when read
    whole = tmp_path / "whole.npy"
    np.save(whole, np.zeros((4, 3), np.float32))
    with zipfile.ZipFile(tmp_path / "member.npz", "w") as archive:
        archive.writestr("W_E.npy", whole.read_bytes()[:-8])
    with pytest.raises(ValueError, match=r"member.npz': array 'W_E' is unreadable"):
        checkpoints.load_embedding(tmp_path / "member.npz")
    # safetensors rows are read on demand: a row past the matrix is refused when asked for
    save_file({"wte.weight": np.zeros((4, 3), np.float32)}, str(tmp_path / "ok.safetensors"))
    embedding = checkpoints.load_embedding(tmp_path / "ok.safetensors")
    assert embedding.rows([3]).shape == (1, 3)
    with pytest.raises(ValueError, match=r"tensor 'wte.weight' is unreadable"):
        embedding.rows([7])


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".PT"])
def test_a_torch_checkpoint_without_torch_asks_for_torch(suffix, tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: test_a_torch_checkpoint_reads_its_state_dict runs")
    path = tmp_path / f"model{suffix}"
    path.write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(ValueError, match=r"a torch checkpoint needs torch \(pip install torch\)"):
        checkpoints.load_embedding(path)


def test_an_integer_tensor_is_not_an_embedding(tmp_path):
    save_file({"wte.weight": np.ones((4, 3), np.int32)}, str(tmp_path / "ints.safetensors"))
    with pytest.raises(ValueError, match=r"'wte.weight' has dtype int32; an input embedding"):
        checkpoints.load_embedding(tmp_path / "ints.safetensors")


def test_token_arrays_read_back_and_bad_streams_are_refused_naming_the_file(tmp_path):
    """An export reads back whole (ids, tracked, context length); an archive's only array is the
    stream whatever its name; anything else is refused in one line naming the file."""
    ids, tracked = np.array([5, 0, 3, 3, 1]), np.array([3, 5])
    stream = checkpoints.load_tokens(checkpoints.export_tokens(tmp_path / "e.npz", ids, tracked, 4))
    np.testing.assert_array_equal(stream.ids, ids)
    np.testing.assert_array_equal(stream.tracked, tracked)
    assert stream.context_length == 4 and stream.ids.dtype == np.int64
    np.savez(tmp_path / "only.npz", ids=np.array([2, 7, 2], np.int16))
    only = checkpoints.load_tokens(tmp_path / "only.npz")
    np.testing.assert_array_equal(only.ids, [2, 7, 2])
    assert only.ids.dtype == np.int64 and only.tracked is None and only.context_length is None
    np.savez(tmp_path / "two.npz", a=ids, b=ids)
    np.save(tmp_path / "rank2.npy", np.zeros((2, 3), np.int64))
    np.save(tmp_path / "floats.npy", np.array([1.0, 2.0]))
    np.save(tmp_path / "negative.npy", np.array([4, -2, 1]))
    (tmp_path / "text.txt").write_text("a b c")
    (tmp_path / "tokenizer.json").write_text("{}")
    cases = {
        "nothere.npy": (None, r"nothere.npy': no such file"),
        "two.npz": (None, r"two.npz': holds \['a', 'b'\]; name the stream 'tokens'"),
        "rank2.npy": (None, r"rank2.npy': token ids must be one stream \[n\]; got shape \(2, 3\)"),
        "floats.npy": (None, r"floats.npy': token ids must be integers; got dtype float64"),
        "negative.npy": (None, r"negative.npy': token ids must be >= 0; found -2"),
        "e.npz": ("tokenizer.json", r"--tokenizer applies to a text file; --tokens '.*e.npz'"),
        "text.txt": ("tokenizer.json", r"--tokenizer '.*tokenizer.json': not a tokenizer.json"),
    }
    for name, (tokenizer, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            checkpoints.load_tokens(tmp_path / name, tokenizer and tmp_path / tokenizer)


def test_export_embeddings_refuses_a_step_count_that_is_not_the_snapshot_count(tmp_path):
    W_E = np.zeros((2, 4, 3), np.float32)
    assert len(checkpoints.export_embeddings(tmp_path / "ok", W_E, [0, 9])) == 2
    for bad_W, bad_steps in ((W_E, [0]), (W_E[0], [0, 9])):
        with pytest.raises(ValueError, match=r"W_E must be \[S, V, d\] with one step each"):
            checkpoints.export_embeddings(tmp_path / "bad", bad_W, bad_steps)
    assert not (tmp_path / "bad").exists()


def table_rows(printed: str) -> list[list[str]]:
    """The body rows of a rich table in ``printed`` (cells stripped)."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in printed.splitlines()
        if line.startswith("│")
    ]


def test_cli_measure_prints_each_snapshot_s_row_and_the_semantic_structure(
    tmp_path, monkeypatch, capsys
):
    """``measure --tokens`` prints one row per snapshot (its step, rho_next, the null's, the
    probe's correlation, the file and key), the same numbers as metrics.json, then the word
    groups' semantic measures from the first to the last snapshot."""
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text(text.builtin_corpus(n_sentences=3000, seed=0))
    stream = checkpoints.load_tokens("corpus.txt")
    groups = measure.word_group_ids(stream.token_strings)
    rng = np.random.default_rng(0)
    first, last = rng.normal(size=(2, len(stream.token_strings), 16)).astype(np.float32)
    last[groups["numbers"]] = np.outer(np.arange(len(groups["numbers"])), np.eye(16)[0]) + 0.01
    np.save("first.npy", first)
    np.save("last.npy", last)
    argv = ["measure", "--tokens", "corpus.txt", "--snapshots", "first.npy", "last.npy"]
    assert cli.main([*argv, "--labels", "0", "100", "--out", "out"]) == 0
    record = json.loads(Path("out/metrics.json").read_text())
    printed = capsys.readouterr().out
    assert "rho_next of 2 snapshots (corpus.txt)" in printed
    assert table_rows(printed) == [
        [
            str(step),
            f"{record['rho_next'][i]:.3f}",
            f"{record['null']['rho_next'][i]:.3f}",
            f"{record['probe']['corr'][i]:.3f}",
            "16",
            f"{name} [W_E]",
        ]
        for i, (step, name) in enumerate(zip((0, 100), ("first.npy", "last.npy"), strict=True))
    ]
    semantic = record["semantic"]
    assert semantic["last"]["number_order"] == pytest.approx(1.0)  # planted on a line
    shown = ", ".join(
        f"{k} {semantic['first'][k]:.2f} → {semantic['last'][k]:.2f}" for k in semantic["last"]
    )
    expected = f"semantic structure of the word groups (first → last snapshot): {shown}"
    assert expected in " ".join(printed.split())


def test_cli_measure_on_a_task_prints_its_headline_and_refuses_mixed_flags(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    ds = tasks.make("add", N=5)
    W_E = np.random.default_rng(3).normal(size=(2, ds.vocab_size, 6))
    paths = [str(write_npz(Path("."), f"step_{s}", W)) for s, W in zip((0, 7), W_E, strict=True)]
    argv = ["measure", "--task", "add", "--param", "N=5", "--snapshots", *paths]
    assert cli.main([*argv, "--out", "out"]) == 0
    record = json.loads(Path("out/metrics.json").read_text())
    printed = capsys.readouterr().out
    assert "rho0 of 2 snapshots (task add)" in printed
    rows = table_rows(printed)
    assert [row[0] for row in rows] == ["0", "7"]  # steps from the names
    assert [row[1] for row in rows] == [f"{v:.3f}" for v in record["rho0"]]
    assert [row[4:] for row in rows] == [["6", "step_0.npz [W_E]"], ["6", "step_7.npz [W_E]"]]
    for extra, message in (
        (["--tokenizer", "tokenizer.json"], "--tokenizer applies with --tokens, not with --task"),
        (["--labels", "1"], r"--labels: give one per snapshot \(2\); got 1"),
    ):
        assert cli.main([*argv, *extra, "--out", "bad"]) == 2
        assert re.search(message, capsys.readouterr().err)
    tokens = ["measure", "--tokens", "ids.npy", "--param", "N=5", "--snapshots", *paths]
    np.save("ids.npy", np.arange(4))
    assert cli.main([*tokens, "--out", "bad"]) == 2
    assert "--param applies with --task, not with --tokens" in capsys.readouterr().err
    assert not Path("bad").exists()
