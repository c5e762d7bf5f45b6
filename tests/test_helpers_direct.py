"""Direct tests of public helpers no other test names (tests/README.md, "Direct tests of public
helpers"): each asserts an exact value on a tiny hand input, a closed form, a NumPy twin written
here, a round trip or an invariance, and each was seen to fail with one planted bug."""

from __future__ import annotations

import argparse
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import small_lm_config

from ctx_staircase import attention_dynamics as ad
from ctx_staircase import (
    checkpoints,
    dataset,
    flows,
    lm,
    lm_study,
    loop,
    measure,
    metrics,
    models,
    text,
    train,
)

# ============================================================================================
# LM group: lm, lm_study, text, measure, checkpoints

# smaller still, in the fields these tests read (the model, the batches, the schedule, the
# recorded windows); the tracking fields stay small_lm_config's, unused here
SMALL = small_lm_config(
    d=8, context_length=4, batch_size=3, steps=4, signature_windows=3, validation_windows=2
)


def _corpus(n_train: int, n_val: int, vocab: int = 7, seed: int = 0) -> text.Corpus:
    rng = np.random.default_rng(seed)
    vocabulary = text.Vocabulary(("<unk>", *(f"w{i}" for i in range(1, vocab))))
    return text.Corpus(
        vocabulary=vocabulary,
        train=rng.integers(1, vocab, size=n_train).astype(np.int32),
        validation=rng.integers(1, vocab, size=n_val).astype(np.int32),
    )


def test_lane_data_holds_the_streams_and_the_evenly_spread_tiled_windows():
    """T = 4: the training stream of 27 tokens tiles into 6 windows (starts 0, 4, ..., 20); 3 of
    them evenly spread are windows 0, 2, 5; the validation stream of 13 tokens tiles into 3
    (starts 0, 4, 8) and 2 spread are windows 0 and 2; the seed is uint32."""
    corpus = _corpus(27, 13)
    stream, tracked, sig, val, seed = lm.lane_data(corpus, SMALL, [3, 1, 5], 7)
    assert stream.dtype == tracked.dtype == sig.dtype == val.dtype == jnp.int32
    np.testing.assert_array_equal(stream, corpus.train)
    np.testing.assert_array_equal(tracked, [3, 1, 5])
    expected = [corpus.train[s : s + 5] for s in (0, 8, 20)]
    np.testing.assert_array_equal(sig, expected)
    np.testing.assert_array_equal(val, [corpus.validation[s : s + 5] for s in (0, 8)])
    assert seed.dtype == jnp.uint32 and int(seed) == 7
    # more windows asked for than there are: every tiled window, once
    wide = lm.LMConfig(**{**SMALL.__dict__, "signature_windows": 50, "validation_windows": 50})
    _, _, sig, val, _ = lm.lane_data(corpus, wide, [3, 1, 5], 0)
    np.testing.assert_array_equal(sig, [corpus.train[s : s + 5] for s in range(0, 21, 4)])
    np.testing.assert_array_equal(val, [corpus.validation[s : s + 5] for s in (0, 4, 8)])


def _adamw_by_hand(graphdef, state, opt_state, batch, config):
    """One AdamW step of ``lm.optimizer(config)`` on ``batch`` [B, T+1], by value_and_grad of
    the mean next-token cross-entropy written here (not `lm.cross_entropy`)."""

    def loss(state):
        logits, _ = nnx.merge(graphdef, state).forward(batch[:, :-1])
        logp = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(logp, batch[:, 1:, None], axis=-1)
        return -jnp.mean(picked)

    with jax.numpy_dtype_promotion("standard"):
        grads = jax.grad(loss)(state)
        updates, opt_state = lm.optimizer(config).update(grads, opt_state, state)
    return jax.tree.map(lambda p, u: p + u, state, updates), opt_state


@pytest.mark.slow  # about 20 s, most of it compiling
def test_step_function_draws_its_batch_from_fold_in_key_i_and_takes_one_adamw_step():
    """Steps 0 then 5 equal two AdamW steps on the windows at the starts
    ``randint(fold_in(key, i), (B,), 0, N - T)`` of the stream, each ``T + 1`` tokens long,
    the batches sliced here by hand (step 0 has learning rate 0: the warm-up starts at 0)."""
    config = SMALL
    T, B = config.context_length, config.batch_size
    V, N = 9, 30
    stream = np.random.default_rng(1).integers(0, V, size=N).astype(np.int32)
    graphdef, state = nnx.split(lm.gpt(config, V, 0.5, jax.random.key(3)))
    adamw = lm.optimizer(config)
    step = jax.jit(lm.step_function(graphdef, adamw, config))
    key = jax.random.key(11)
    with jax.numpy_dtype_promotion("standard"):
        carry = loop.initial_carry(state, adamw.init(state))
    expected, opt_state = state, carry.opt_state
    for i in (0, 5):
        carry = step(jnp.asarray(i), carry, jnp.asarray(stream), key)
        starts = np.asarray(jax.random.randint(jax.random.fold_in(key, i), (B,), 0, N - T))
        batch = jnp.asarray(np.stack([stream[s : s + T + 1] for s in starts]))
        expected, opt_state = _adamw_by_hand(graphdef, expected, opt_state, batch, config)
        assert int(carry.diverged) == -1
    moved = [
        not np.allclose(a, b) for a, b in zip(*map(jax.tree.leaves, (state, expected)), strict=True)
    ]
    assert all(moved)  # the second step has a learning rate
    for got, want in zip(jax.tree.leaves(carry.state), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-7)


def test_prefix_probe_fields_equal_a_numpy_evaluation_of_its_returned_probe():
    """With 0 Adam steps the probe is its initial draw; whatever ``v`` it returns, the readout
    is the least-squares line of the training pairs on the cosines of ``phi v`` (slope,
    intercept, train MSE), and the held-out MSE and correlation are those of that line on the
    held-out pairs (a NumPy evaluation)."""
    rng = np.random.default_rng(4)
    A, Vn, K = 8, 3, 5
    phi = rng.random((A, Vn, K))
    S_emb = np.asarray(metrics.cosine_matrix(rng.normal(size=(A, 6))))
    held = np.array([1, 0, 0, 1, 0, 1, 0, 1], dtype=bool)
    probe = lm.prefix_probe(phi, S_emb, held, steps=0, restarts=3, seed=2)
    h = np.einsum("avk,k->av", phi, probe.v)
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    cos = h @ h.T

    def pairs(M, ids):
        i, j = np.triu_indices(len(ids), 1)
        return M[ids[i], ids[j]]

    train_ids, held_ids = np.flatnonzero(~held), np.flatnonzero(held)
    x_tr, s_tr = pairs(cos, train_ids), pairs(S_emb, train_ids)
    x_he, s_he = pairs(cos, held_ids), pairs(S_emb, held_ids)
    a, b = np.polyfit(x_tr, s_tr, 1)
    assert float(probe.slope) == pytest.approx(a, rel=1e-9)
    assert float(probe.intercept) == pytest.approx(b, rel=1e-9, abs=1e-12)
    assert float(probe.train_mse) == pytest.approx(np.mean((a * x_tr + b - s_tr) ** 2), rel=1e-9)
    prediction = a * x_he + b
    assert float(probe.heldout_mse) == pytest.approx(np.mean((prediction - s_he) ** 2), rel=1e-9)
    corr = np.corrcoef(prediction, s_he)[0, 1]
    assert float(probe.heldout_corr) == pytest.approx(corr, rel=1e-9)
    assert float(probe.variance) == pytest.approx(np.var(s_he), rel=1e-12)
    # an embedding anti-aligned with a planted probe: the slope is negative and the held-out
    # correlation is that of the prediction (positive), not of the raw probe cosines
    phi = rng.normal(size=(2 * A, Vn, K))
    h = np.einsum("avk,k->av", phi, rng.normal(size=K))
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    held = np.arange(2 * A) % 2 == 1
    fitted = lm.prefix_probe(phi, 0.5 - 0.8 * (h @ h.T), held, restarts=4, seed=0)
    assert float(fitted.slope) < -0.5
    assert float(fitted.heldout_corr) > 0.9


def _curves_record():
    """A two-lane `lm.LMTrajectory` and `lm.LMCurves` over 5 snapshots, every curve distinct."""
    G, S, A, layers = 2, 5, 4, 2
    base = np.arange(G * S, dtype=float).reshape(G, S)
    trajectory = lm.LMTrajectory(
        gammas=np.array([1.0, 0.5]),
        steps=np.arange(S) * 10,
        tracked=np.arange(A),
        loss=3.0 - 0.1 * base,
        validation_loss=3.5 - 0.05 * base,
        W_E=np.zeros((G, S, A, 3)),
        W_U=np.zeros((G, S, A, 3)),
        value_path=np.zeros((G, S, layers, A, 3)),
        S_attention_signature=np.zeros((G, S, layers, A, A)),
        final_W_E=np.zeros((G, A, 3)),
        diverged_step=np.array([-1, 7]),
    )
    rho_attention = np.stack([base / 20 + 0.01, base / 30 - 0.2], axis=-1)
    curves = lm.LMCurves(
        rho_next=np.array([[0.1, 0.7, 0.9, 0.5, 0.6], [0.2, 0.3, 0.25, 0.8, 0.4]]),
        rho_previous=np.array([[0.0, 0.2, 0.1, 0.3, 0.15], [0.1, 0.1, 0.2, 0.2, 0.3]]),
        rho_attention=rho_attention,
        probe_mse=np.array([[5.0, 1.0, 2.0, 4.0, 3.0], [9.0, 2.0, 2.0, 6.0, 8.0]]),
        probe_corr=np.array([[0.99, 0.1, 0.3, 0.6, 0.2], [0.0, 0.4, 0.9, 0.35, 0.8]]),
        probe_baseline_mse=np.full((G, S), 2.0),
        probe_constant_mse=np.array([[1.0, 4.0, 1.0, 2.0, 8.0], [1.0, 1.0, 4.0, 3.0, 2.0]]),
        probe_slope=np.array([[-9.0, 0.5, 0.1, 0.3, 0.2], [7.0, 0.4, 0.6, 0.8, 0.7]]),
        loss=trajectory.loss,
        validation_loss=trajectory.validation_loss,
    )
    return trajectory, curves


def test_lm_summary_fields_no_other_test_reads():
    """summarize: the probe's correlation at rho_next's peak snapshot, the medians over the
    trained snapshots (step 0 excluded) of the correlation, the slope and the MSE over the
    training-mean constant, the final losses and attention alignments, and each lane's own
    diverged step, for the lane keyed by its gamma."""
    trajectory, curves = _curves_record()
    summary = lm_study.summarize(trajectory, curves)
    assert list(summary) == ["1", "0.5"]
    one, half = summary["1"], summary["0.5"]
    assert one["probe_corr_at_peak"] == 0.3 and half["probe_corr_at_peak"] == 0.35
    assert one["probe_corr_median"] == pytest.approx(0.25)  # of 0.1, 0.3, 0.6, 0.2
    assert half["probe_corr_median"] == pytest.approx(0.6)
    assert one["probe_slope_median"] == pytest.approx(0.25)
    assert half["probe_slope_median"] == pytest.approx(0.65)
    # MSE / constant MSE over steps 1..4: 1/4, 2/1, 4/2, 3/8 -> median of (0.25, 0.375, 2, 2)
    assert one["probe_constant_ratio_median"] == pytest.approx((0.375 + 2.0) / 2)
    assert one["loss_final"] == pytest.approx(3.0 - 0.4)
    assert half["loss_final"] == pytest.approx(3.0 - 0.9)
    assert one["validation_loss_final"] == pytest.approx(3.5 - 0.2)
    assert half["validation_loss_final"] == pytest.approx(3.5 - 0.45)
    assert one["rho_attention_final"] == pytest.approx([4 / 20 + 0.01, 4 / 30 - 0.2])
    assert half["rho_attention_final"] == pytest.approx([9 / 20 + 0.01, 9 / 30 - 0.2])
    assert one["diverged_step"] == -1 and half["diverged_step"] == 7
    assert one["rho_previous_final"] == 0.15 and half["rho_previous_peak"] == 0.3


def test_curve_lists_rounds_every_curve_to_five_decimals_with_the_steps_and_gammas():
    trajectory, curves = _curves_record()
    curves = curves._replace(rho_next=curves.rho_next + 1.23456789e-3)
    listed = lm_study.curve_lists(trajectory, curves)
    assert set(listed) == {"steps", "gammas", *lm.LMCurves._fields}
    assert listed["steps"] == [0, 10, 20, 30, 40] and listed["gammas"] == [1.0, 0.5]
    assert listed["rho_next"][0][0] == 0.10123 and listed["rho_next"][1][3] == 0.80123
    for name in lm.LMCurves._fields:
        value = np.asarray(getattr(curves, name), dtype=float)
        assert np.shape(listed[name]) == value.shape, name
        np.testing.assert_allclose(listed[name], value, atol=5e-6, rtol=0, err_msg=name)
    assert listed["rho_attention"][1][4] == [round(9 / 20 + 0.01, 5), round(9 / 30 - 0.2, 5)]


def _group_rows(swap_numbers: bool = False):
    """Numbers on a line (1 and 2 swapped when asked), weekdays and months on circles in their
    order, and three tight clusters of categories."""
    rng = np.random.default_rng(0)
    values = np.arange(1.0, 21.0)
    if swap_numbers:
        values[[0, 1]] = values[[1, 0]]
    numbers = np.stack([values, 0.01 * rng.normal(size=20), np.zeros(20)], axis=1)

    def circle(n):
        angle = 2 * np.pi * np.arange(n) / n
        return np.stack([np.cos(angle), np.sin(angle), np.zeros(n)], axis=1)

    rows = {"numbers": numbers, "weekdays": circle(7), "months": circle(12)}
    for k, name in enumerate(("colors", "animals", "family")):
        centre = np.eye(3)[k] * 5
        rows[name] = centre + 0.01 * rng.normal(size=(8, 3))
    return rows


def test_group_structure_scores_each_present_group_with_its_own_measure():
    """number_order 1 on an ordered line and 1 - 6 * 2 / (20 * 399) with 1 and 2 swapped (the
    Spearman of one adjacent swap); weekday_cycle 7 and month_cycle 12 on perfect circles;
    category_purity 1 on three tight clusters; a measure is present only when its groups are
    (the purity needs all three categories)."""
    rows = _group_rows()
    measures = lm_study.group_structure(rows)
    assert set(measures) == {"number_order", "weekday_cycle", "month_cycle", "category_purity"}
    assert measures["number_order"] == pytest.approx(1.0, abs=1e-12)
    assert measures["weekday_cycle"] == 7 and measures["month_cycle"] == 12
    assert measures["category_purity"] == 1.0
    swapped = lm_study.group_structure(_group_rows(swap_numbers=True))
    assert swapped["number_order"] == pytest.approx(1 - 12 / (20 * 399), abs=1e-12)
    partial = {k: rows[k] for k in ("months", "colors", "animals")}
    assert lm_study.group_structure(partial) == {"month_cycle": 12}
    assert lm_study.group_structure({}) == {}
    # structure() reads each group's rows at the vocabulary's ids of its words
    words = [w for group in text.BUILTIN_GROUPS.values() for w in group]
    order = np.random.default_rng(5).permutation(len(words))
    vocabulary = text.Vocabulary(("<unk>", *(words[i] for i in order)))
    vectors = np.zeros((vocabulary.size, 3))
    for group, members in text.BUILTIN_GROUPS.items():
        for word, row in zip(members, rows[group], strict=True):
            vectors[vocabulary.index[word]] = row
    assert lm_study.structure(vectors, vocabulary) == pytest.approx(measures, abs=1e-12)


def _pearson_upper(S_a, S_b):
    i, j = np.triu_indices(S_a.shape[-1], 1)
    return np.corrcoef(S_a[i, j], S_b[i, j])[0, 1]


def _cosines(X):
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X @ X.T


def test_measurement_fields_of_a_stream_against_a_numpy_count():
    """measure_snapshots on a stream that names its tracked tokens and context length: rho_next
    is the Pearson of the tracked rows' cosines with the cosines of the next-token counts over
    the tiled windows (a NumPy count here); the null is the same after one permutation of the
    tracked rows and columns; steps are the positions; settings, sources, keys, headline and
    to_json say what was used."""
    rng = np.random.default_rng(7)
    V, T = 10, 5
    ids = rng.integers(0, V, size=203)
    tracked = np.array([2, 5, 1, 7, 3, 8])
    stream = checkpoints.TokenStream(ids=ids, tracked=tracked, context_length=T)
    snapshots = [rng.normal(size=(12, 4)) for _ in range(2)]
    measured = measure.measure_snapshots(stream, snapshots, probe_vocabulary=6, probe_steps=3)
    # the NumPy count: windows tiled with stride T, T transitions each
    starts = np.arange(0, ids.size - T, T)
    counts = np.zeros((tracked.size, V))
    for s in starts:
        for a, b in zip(ids[s : s + T], ids[s + 1 : s + T + 1], strict=True):
            if a in tracked:
                counts[np.flatnonzero(tracked == a)[0], b] += 1
    S_next = _cosines(counts)
    permutation = np.random.default_rng(0).permutation(tracked.size)
    for k, W_E in enumerate(snapshots):
        S_emb = _cosines(W_E[tracked])
        assert measured.alignment["rho_next"][k] == pytest.approx(
            _pearson_upper(S_emb, S_next), abs=1e-10
        )
        null = _pearson_upper(S_emb[permutation][:, permutation], S_next)
        assert measured.null["rho_next"][k] == pytest.approx(null, abs=1e-10)
    assert measured.headline == "rho_next" and measured.reference == "next-token signature"
    np.testing.assert_array_equal(measured.steps, [0, 1])
    np.testing.assert_array_equal(measured.tracked, tracked)
    assert measured.sources == ("<array 0>", "<array 1>") and measured.keys == ("W_E", "W_E")
    settings = measured.settings
    assert settings["context_length"] == T and settings["tokens"] == 203
    assert settings["vocab_rows"] == 12 and settings["probe_vocabulary"] == 6
    np.testing.assert_array_equal(measured.probe["baseline_mse"].shape, (2,))
    assert measured.semantic == {}
    record = measured.to_json()
    assert record["rho_next"] == measured.alignment["rho_next"].tolist()
    assert record["null"]["rho_next"] == measured.null["rho_next"].tolist()
    assert record["steps"] == [0, 1] and record["tracked"] == tracked.tolist()
    assert record["snapshots"] == ["<array 0>", "<array 1>"] and record["keys"] == ["W_E"] * 2
    assert set(record["probe"]) == {"corr", "mse", "baseline_mse"}
    # a context length given to the call wins over the stream's; a K past the stream's ids
    # (V = 10 of them; the snapshots' 12 rows include 2 that no token reaches) is cut to them
    other = measure.measure_snapshots(
        stream, snapshots[:1], context_length=7, probe_vocabulary=50, probe_steps=1
    )
    assert other.settings["context_length"] == 7 and other.settings["probe_vocabulary"] == V
    assert other.settings["id_range"] == V and other.settings["vocab_rows"] == 12


def test_measurement_steps_from_names_only_when_every_path_names_one(tmp_path):
    """Each path's own step when every snapshot is a path naming one; positions when any does
    not; explicit steps as given (int64)."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 8, size=120)
    paths = []
    for name in ("step_000300.npy", "ckpt-20.npy", "final.npy"):
        np.save(tmp_path / name, rng.normal(size=(8, 3)))
        paths.append(tmp_path / name)
    kwargs = dict(tracked=np.arange(1, 7), context_length=4, probe_steps=1)
    named = measure.measure_snapshots(ids, paths[:2], **kwargs)
    np.testing.assert_array_equal(named.steps, [300, 20])
    mixed = measure.measure_snapshots(ids, paths, **kwargs)
    np.testing.assert_array_equal(mixed.steps, [0, 1, 2])
    given = measure.measure_snapshots(ids, paths, steps=[5, 9, 1], **kwargs)
    assert given.steps.dtype == np.int64
    np.testing.assert_array_equal(given.steps, [5, 9, 1])
    with pytest.raises(ValueError, match="steps must be one integer per snapshot"):
        measure.measure_snapshots(ids, paths, steps=[5, 9], **kwargs)


def test_choose_key_matches_a_whole_dotted_suffix_only():
    """A name is the embedding when it equals, or ends in ``.`` + , a common name: "W_E" and
    "model.embed_tokens.weight" match; "myW_E" and "lm_head.weight" do not; a given key must be
    present; two matches and none are errors; a long list is cut at 40 names."""
    assert checkpoints.choose_key(["W_U", "W_E"], None, "here") == "W_E"
    names = ["model.embed_tokens.weight", "lm_head.weight", "xembed_tokens.weight"]
    assert checkpoints.choose_key(names, None, "here") == "model.embed_tokens.weight"
    assert checkpoints.choose_key(["myW_E", "a.W_E"], None, "here") == "a.W_E"
    assert checkpoints.choose_key(["a", "b"], "b", "here") == "b"
    with pytest.raises(ValueError, match=r"--key 'c': here has no such tensor; it has: a, b"):
        checkpoints.choose_key(["a", "b"], "c", "here")
    with pytest.raises(ValueError, match=r"several tensors .*\(wte\.weight, h\.wte\.weight\)"):
        checkpoints.choose_key(["wte.weight", "h.wte.weight"], None, "here")
    with pytest.raises(ValueError, match="no input embedding among its tensors"):
        checkpoints.choose_key(["myW_E", "embed_tokens"], None, "here")
    many = [f"t{i}" for i in range(41)]
    with pytest.raises(ValueError, match=r"t39, \.\.\. \(41 in all\)"):
        checkpoints.choose_key(many, None, "here")
    with pytest.raises(ValueError, match=r"it has: t0, .*, t39$"):
        checkpoints.choose_key(many[:40], None, "here")


def test_check_matrix_returns_the_array_itself_and_refuses_what_is_no_embedding():
    import ml_dtypes

    for dtype in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16):
        array = np.zeros((3, 2), dtype=dtype)
        assert checkpoints.check_matrix(array, "W", "f") is array
    lazy = checkpoints.LazyMatrix((5, 2), np.dtype(np.float32), lambda ids: None)
    assert checkpoints.check_matrix(lazy, "W", "f") is lazy  # nothing is read
    one_row = np.zeros((1, 1))
    assert checkpoints.check_matrix(one_row, "W", "f") is one_row
    for bad, what in [
        (np.zeros(4), r"shape \(4,\)"),
        (np.zeros((2, 2, 2)), r"shape \(2, 2, 2\)"),
        (np.zeros((0, 3)), r"shape \(0, 3\)"),
        (np.zeros((3, 0)), r"shape \(3, 0\)"),
        (np.zeros((3, 2), dtype=np.int32), "dtype int32"),
        (np.zeros((3, 2), dtype=bool), "dtype bool"),
    ]:
        with pytest.raises(ValueError, match=rf"snapshot 'f': tensor 'W' has {what}"):
            checkpoints.check_matrix(bad, "W", "f")


def test_lazy_matrix_and_embedding_read_only_the_rows_asked_for():
    """LazyMatrix: ``m[3]`` and ``m[[3]]`` are one row ``[1, d]`` read through ``take``,
    ``np.asarray(m)`` the whole matrix in the asked dtype; Embedding.rows: half precision
    becomes float32, float32 and float64 stay; vocab_rows is V; TokenStream's defaults are
    None."""
    full = np.arange(12.0).reshape(6, 2)
    asked = []

    def take(ids):
        asked.append(ids.tolist())
        return full[ids]

    lazy = checkpoints.LazyMatrix((6, 2), np.dtype(np.float64), take)
    np.testing.assert_array_equal(lazy[3], [[6.0, 7.0]])
    np.testing.assert_array_equal(lazy[[4, 0]], [[8.0, 9.0], [0.0, 1.0]])
    whole = np.asarray(lazy, dtype=np.float32)
    assert whole.dtype == np.float32
    np.testing.assert_array_equal(whole, full)
    assert asked == [[3], [4, 0], list(range(6))]
    for dtype, read_as in [
        (np.float16, np.float32),
        (np.float32, np.float32),
        (np.float64, np.float64),
    ]:
        emb = checkpoints.Embedding(W_E=full.astype(dtype), key="W_E", source="x")
        rows = emb.rows([5, 1])
        assert rows.dtype == read_as and emb.vocab_rows == 6
        np.testing.assert_array_equal(rows, [[10.0, 11.0], [2.0, 3.0]])
    lazy_emb = checkpoints.Embedding(W_E=lazy, key="k", source="x")
    assert lazy_emb.vocab_rows == 6
    np.testing.assert_array_equal(lazy_emb.rows([2]), [[4.0, 5.0]])
    stream = checkpoints.TokenStream(ids=np.arange(3))
    assert stream.token_strings is None and stream.tracked is None and stream.context_length is None


_NUMBER_WORDS = text.BUILTIN_GROUPS["numbers"]
_WEEKDAYS = text.BUILTIN_GROUPS["weekdays"]
_MONTHS = text.BUILTIN_GROUPS["months"]


def test_the_builtin_corpus_states_true_facts_of_cycles_counts_and_categories():
    """Beyond the number order sentences: every weekday/month "after"/"before" sentence names
    the cyclic successor/predecessor, every run of days or months is consecutive mod 7 / 12,
    every "every other" run steps by 2, weekdays 1-5 are work days and the weekend is play and
    rest, each month has its season (winter cold, spring mild, summer hot, autumn cool),
    counting runs step by 1, 2 or 3, "in order" lists increase, each animal makes its own
    sound; paragraphs hold 10 sentences."""
    season = dict(zip(_MONTHS, ["cold"] * 2 + ["mild"] * 3 + ["hot"] * 3 + ["cool"] * 3 + ["cold"],
                      strict=True))  # fmt: skip
    sounds = dict(dog="barks", cat="meows", cow="moos", horse="neighs", bird="sings",
                  sheep="bleats", duck="quacks", pig="grunts")  # fmt: skip
    corpus = text.builtin_corpus(n_sentences=2000, seed=2)
    paragraphs = corpus.split("\n")
    assert paragraphs[-1] == "" and len(paragraphs) == 201
    assert all(p.count(" .") == 10 for p in paragraphs[:-1])
    seen = dict.fromkeys(["cycle", "run", "other", "day", "month", "order", "sound"], 0)
    seen |= dict.fromkeys(["count by 1", "count by 2", "count by 3"], 0)
    for sentence in (s.strip() for s in corpus.split(" .")):
        words = sentence.split()
        for cycle in (_WEEKDAYS, _MONTHS):
            n, at = len(cycle), {w: i for i, w in enumerate(cycle)}
            if len(words) == 4 and words[2] == "comes" and words[1] in at:
                step = 1 if words[0] == "after" else -1
                assert at[words[3]] == (at[words[1]] + step) % n, sentence
                seen["cycle"] += 1
            elif words and all(w in at for w in words):
                assert all((at[b] - at[a]) % n == 1 for a, b in itertools.pairwise(words)), sentence
                seen["run"] += 1
            elif words[:2] == ["every", "other"] and words[4] in at:
                days = [at[w] for w in words[4:]]
                assert len(days) == 3 and all((b - a) % n == 2 for a, b in itertools.pairwise(days))
                seen["other"] += 1
        if words[:1] == ["on"]:
            work = words[1] in _WEEKDAYS[:5]
            expected = "we go to work" if work else {"saturday": "we play", "sunday": "we rest"}
            assert " ".join(words[2:]) == (expected if work else expected[words[1]]), sentence
            seen["day"] += 1
        if words[:1] == ["in"] and words[1] in season:
            assert words[2:] == ["it", "is", season[words[1]]], sentence
            seen["month"] += 1
        values = [_NUMBER_WORDS.index(w) for w in words if w in _NUMBER_WORDS]
        if words[:2] == ["we", "count"] or (len(values) == len(words) >= 2):
            steps = {b - a for a, b in itertools.pairwise(values)}
            assert len(steps) == 1 and steps <= {1, 2, 3}, sentence
            seen[f"count by {steps.pop()}"] += 1
        if words[:3] == ["in", "order", ":"]:
            assert all(b > a for a, b in itertools.pairwise(values)) and len(values) >= 2
            seen["order"] += 1
        if len(words) == 3 and words[0] == "the" and words[1] in sounds:
            if words[2] in sounds.values():
                assert words[2] == sounds[words[1]], sentence
                seen["sound"] += 1
    assert min(seen.values()) >= 10, seen


def test_windows_count_and_contents_against_a_brute_force_slicing():
    """Window i is ``stream[i s : i s + T + 1]`` and there are ``(N - T - 1) // s + 1`` of
    them, for every N, T and stride s on a small grid (the last start N - T - 1 included when
    the stride reaches it)."""
    for N in range(2, 13):
        stream = np.arange(100, 100 + N)
        for T in range(1, N):
            for stride in (None, 1, 2, 3, 5):
                s = T if stride is None else stride
                got = text.windows(stream, T, stride=stride)
                expected = [stream[i : i + T + 1] for i in range(0, N - T, s)]
                assert len(expected) == (N - T - 1) // s + 1
                np.testing.assert_array_equal(got, expected, err_msg=f"{N} {T} {stride}")


def test_corpus_vocab_size_and_the_vocabulary_cut_on_the_training_part():
    """prepare_corpus with vocab_size=2 keeps the two most frequent training words (ties
    alphabetically); a word frequent only in the validation tail is <unk> there; vocab_size
    is V = 3 with <unk>."""
    words = "b a b c a c c d d d d d d b".split()
    corpus = text.prepare_corpus(" ".join(words), vocab_size=2, validation_fraction=0.15)
    # round(0.15 * 14) = round(2.1) = 2 validation tokens: "d b"
    assert corpus.train.size == 12 and corpus.validation.size == 2
    # training counts: d 5, c 3, b 2, a 2 -> "d", "c"
    assert corpus.vocabulary.tokens == ("<unk>", "d", "c") and corpus.vocab_size == 3
    np.testing.assert_array_equal(corpus.validation, [1, 0])
    np.testing.assert_array_equal(corpus.train[:4], [0, 0, 0, 2])


# ============================================================================================
# core math: the lanes of the theories, the memory estimators


def _problem(y0, M=None, ds=None, coefficients=(0.5,), ts=None, map_lanes=None):
    from ctx_staircase import theory
    from ctx_staircase.dataset import TokenDataset

    G = len(next(iter(y0.values())))
    V = y0["W_E"].shape[1]
    if ds is None:
        ds = TokenDataset(np.array([[0, 1], [1, 2], [2, 0]]), np.array([1, 2, 0]), vocab_size=V)
    setting = theory.Setting(None, np.zeros(G), (1,), "linear", "relu", tuple(coefficients))
    if map_lanes is None:

        def map_lanes(fn, *lanes):
            return jax.vmap(fn)(*lanes)

    M = np.eye(V) if M is None else M
    ts = np.linspace(0.0, 1.0, 5) if ts is None else ts
    return theory.Problem(setting, ds, y0["W_E"].shape[2], {}, y0, M, 1.0, 3.0, ts, map_lanes, {})


def test_linear_lanes_are_cosh_sinh_per_row_of_a_diagonal_drive():
    """M = diag(s): each row obeys a' = C_1 s_v b, b' = C_1 s_v a, so
    W_E(t)[v] = W_E0[v] cosh(C_1 s_v t) + W_U0[v] sinh(C_1 s_v t) (and W_E, W_U swapped for
    W_U), lane by lane, at the rate C_1 = coefficients[0]."""
    from ctx_staircase import closed_form

    rng = np.random.default_rng(0)
    s = np.array([2.0, 1.0, 0.5])
    C1 = 0.7
    y0 = {"W_E": rng.normal(size=(2, 3, 4)), "W_U": rng.normal(size=(2, 3, 4))}
    problem = _problem(y0, M=np.diag(s), coefficients=(C1, 0.3))
    lanes = closed_form.linear_lanes(problem)
    assert len(lanes.trajectories) == 2
    x = C1 * problem.ts[:, None, None] * s[None, :, None]
    for g, lane in enumerate(lanes.trajectories):
        E0, U0 = y0["W_E"][g], y0["W_U"][g]
        np.testing.assert_allclose(lane.ts, problem.ts)
        np.testing.assert_allclose(lane.W_E, E0 * np.cosh(x) + U0 * np.sinh(x), atol=1e-12)
        np.testing.assert_allclose(lane.W_U, U0 * np.cosh(x) + E0 * np.sinh(x), atol=1e-12)


def test_feedback_lanes_are_the_single_lane_feedback_solutions():
    """Each lane of feedback_lanes equals feedback_solution of its own initial weights with
    Gamma = count_second_moment(ds), rate C_1 and V of the data."""
    from ctx_staircase import closed_form, flows, signatures
    from ctx_staircase.dataset import TokenDataset

    ds = TokenDataset(np.array([[0, 1], [1, 3], [2, 0], [3, 3]]), np.array([1, 2, 0, 1]), 4)
    M = np.asarray(flows.drive_matrix(signatures.signature_set(ds, 0), 4))
    rng = np.random.default_rng(1)
    y0 = {"W_E": 0.3 * rng.normal(size=(3, 4, 5)), "W_U": 0.3 * rng.normal(size=(3, 4, 5))}
    problem = _problem(y0, M=M, ds=ds, coefficients=(0.8,), ts=np.linspace(0, 4, 6))
    lanes = closed_form.feedback_lanes(problem)
    Gamma = closed_form.count_second_moment(ds)
    for g, lane in enumerate(lanes.trajectories):
        W_E, W_U = closed_form.feedback_solution(M, Gamma, y0["W_E"][g], y0["W_U"][g], 0.8, 4)(
            problem.ts
        )
        np.testing.assert_allclose(lane.W_E, W_E, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(lane.W_U, W_U, rtol=1e-12, atol=1e-14)
    linear = closed_form.linear_lanes(problem).trajectories[0]
    assert not np.allclose(lanes.trajectories[0].W_E[-1], linear.W_E[-1])  # feedback acts


def _relu_scale(W_E, W_U, tokens):
    h = np.maximum(W_E[..., tokens, :].sum(axis=-2), 0)  # [..., n, d]
    logits = np.einsum("...nd,...vd->...nv", h, W_U)
    return np.abs(logits - logits.mean(-1, keepdims=True)).max(axis=(-2, -1))


def test_frozen_gate_lanes_are_single_solutions_with_their_relu_escape_statistic():
    from ctx_staircase import relu

    rng = np.random.default_rng(2)
    y0 = {"W_E": rng.normal(size=(2, 3, 4)), "W_U": rng.normal(size=(2, 3, 4))}
    problem = _problem(y0)
    lanes = relu.frozen_gate_lanes(problem)
    gated = relu.gated_problem(problem.ds, dtype=jnp.float64)
    for g, lane in enumerate(lanes.trajectories):
        W_E, W_U = relu.frozen_gate_solution(gated, y0["W_E"][g], y0["W_U"][g])(problem.ts)
        np.testing.assert_allclose(lane.W_E, W_E, atol=1e-13)
        np.testing.assert_allclose(lane.W_U, W_U, atol=1e-13)
        expected = _relu_scale(W_E, W_U, problem.ds.tokens)
        np.testing.assert_allclose(lane.logit_scale, expected, rtol=1e-12)


def _gated_rk4(W_E, W_U, tokens, labels, V, ts, max_step=0.05):
    """The gated ReLU flow with the linear softmax feedback (relu.gated_field's docstring, eq.
    R2 + R5), written here in NumPy, by classical RK4 in ceil(dt / max_step) equal steps."""
    n = len(labels)
    c = np.zeros((n, V))
    for i, row in enumerate(tokens):
        for v in row:
            c[i, v] += 1
    p = np.full(n, 1.0 / n)
    r0 = p[:, None] * (np.eye(V)[labels] - 1.0 / V)

    def field(E, U):
        h = c @ E
        g = (h > 0).astype(float)
        f = (g * h) @ U.T
        r = r0 - p[:, None] * (f - f.mean(-1, keepdims=True)) / V
        return c.T @ ((r @ U) * g), r.T @ (g * h)

    out = [(W_E, W_U)]
    for t0, t1 in itertools.pairwise(ts):
        steps = int(np.ceil((t1 - t0) / max_step))
        dt = (t1 - t0) / steps
        for _ in range(steps):
            k1 = field(W_E, W_U)
            k2 = field(W_E + dt / 2 * k1[0], W_U + dt / 2 * k1[1])
            k3 = field(W_E + dt / 2 * k2[0], W_U + dt / 2 * k2[1])
            k4 = field(W_E + dt * k3[0], W_U + dt * k3[1])
            W_E = W_E + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            W_U = W_U + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        out.append((W_E, W_U))
    return np.stack([e for e, _ in out]), np.stack([u for _, u in out])


def test_gated_flow_lanes_are_a_numpy_rk4_of_the_gated_linear_feedback_flow():
    """Each lane equals a NumPy RK4 (steps of at most relu.RELU_STEP) of the gated flow with
    the linear softmax feedback, from its own initial weights; the statistic of each snapshot
    is the centred ReLU logit maximum."""
    from ctx_staircase import relu

    rng = np.random.default_rng(3)
    y0 = {"W_E": 0.2 * rng.normal(size=(2, 3, 4)), "W_U": 0.2 * rng.normal(size=(2, 3, 4))}
    ts = np.linspace(0.0, 2.0, 4)  # entries stay below theory.BLOW_UP = 1: the flow runs
    problem = _problem(y0, ts=ts)
    both = relu.gated_flow_lanes(problem)
    tokens, labels = problem.ds.tokens, problem.ds.labels
    for g in range(2):
        W_E, W_U = _gated_rk4(y0["W_E"][g], y0["W_U"][g], tokens, labels, 3, ts, relu.RELU_STEP)
        lane = both.trajectories[g]
        np.testing.assert_allclose(lane.W_E, W_E, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(lane.W_U, W_U, rtol=1e-10, atol=1e-13)
        expected = _relu_scale(lane.W_E, lane.W_U, tokens)
        np.testing.assert_allclose(lane.logit_scale, expected, rtol=1e-12)
        assert both.solver[g].ok
    assert not np.allclose(both.trajectories[0].W_E[-1], y0["W_E"][0], atol=1e-3)


def test_uniform_attention_lanes_equal_one_lane_problems_with_the_attention_statistic():
    """Each lane's trajectory is its own whatever its position among the lanes (the lanes
    reversed give the same trajectories reversed); the statistic is max |centred f| of
    f = W_U W_O W_V mean_s w_{x_s} (a NumPy evaluation)."""
    from ctx_staircase import flows, signatures

    rng = np.random.default_rng(4)
    G, V, d, dk = 2, 3, 4, 2
    y0 = {
        "W_E": 0.4 * rng.normal(size=(G, V, d)),
        "W_U": 0.4 * rng.normal(size=(G, V, d)),
        "W_O": 0.4 * rng.normal(size=(G, d, dk)),
        "W_V": 0.4 * rng.normal(size=(G, dk, d)),
    }
    problem = _problem(y0, ts=np.linspace(0.0, 2.0, 4))
    M = flows.drive_matrix(signatures.signature_set(problem.ds, 0), V)
    problem = problem._replace(M=M)
    both = flows.uniform_attention_lanes(problem)
    swapped = problem._replace(y0={k: v[::-1] for k, v in y0.items()})
    reversed_lanes = flows.uniform_attention_lanes(swapped).trajectories[::-1]
    tokens = problem.ds.tokens
    for g in range(G):
        lane, alone = both.trajectories[g], reversed_lanes[g]
        np.testing.assert_allclose(lane.W_E, alone.W_E, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(lane.W_U, alone.W_U, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(lane.W_E[0], y0["W_E"][g])
        h = lane.W_E[0][tokens].mean(axis=1)
        f = h @ (y0["W_U"][g] @ y0["W_O"][g] @ y0["W_V"][g]).T
        statistic = np.abs(f - f.mean(-1, keepdims=True)).max()
        assert lane.logit_scale[0] == pytest.approx(statistic, rel=1e-12)
    assert not np.allclose(both.trajectories[1].W_E[-1], y0["W_E"][1])


def _size(**changes):
    from ctx_staircase import theory

    base = dict(
        G=3, T=5, n=7, L=2, V=6, d=4, Vnu=3, P=2, max_orders=(1,), prediction="uniform",
        in_flight=2, d_k=5,
    )  # fmt: skip
    return theory.Size(**{**base, **changes})


def test_memory_estimators_count_their_arrays_exactly():
    """Each estimate, by hand from its docstring (float64, 8 bytes), with the ODE lanes'
    ``8 (G T state + min(G, in_flight) (SOLVER_COPIES state + field))``."""
    from ctx_staircase import escape, flows, relu, theory

    size = _size()
    G, T, n, L, V, d, Vnu, P, inf, dk = 3, 5, 7, 2, 6, 4, 3, 2, 2, 5
    copies = theory.SOLVER_COPIES

    def ode(state, field):
        return 8 * (G * T * state + min(G, inf) * (copies * state + field))

    # uniform attention: table [V, Vnu + 1]; state W_E, W_U [V, d], W_O [d, dk], W_V [dk, d]
    state = 2 * V * d + 2 * d * dk
    assert flows.uniform_attention_bytes(size) == 8 * V * (Vnu + 1) + ode(state, 4 * state)
    # gated flow: trajectories, and per lane in flight 5 RK4 copies of (W_E, W_U) and [n, d]
    assert relu.gated_flow_bytes(size) == 8 * G * T * 2 * V * d + 8 * 2 * (5 * 2 * V * d + n * d)
    assert relu.gated_flow_bytes(_size(in_flight=9)) == 8 * G * T * 2 * V * d + 8 * 3 * (
        5 * 2 * V * d + n * d
    )
    # closed-form escape: per chunk of 100 times, hidden [n, (L + 1) d] and W_E, W_U twice
    assert escape.closed_form_escape_bytes(size) == 8 * 100 * (2 * 2 * V * d + n * (L + 1) * d)
    # signature flow at order 1 (uniform prediction): tables [P, Vnu + 1, P^m], m = 0, 1;
    # field 2 d max(A Vnu P^max(m-1, 0), A P^m) per m
    tables = P * (Vnu + 1) * (1 + P)
    field = 2 * d * max(P * Vnu, P) + 2 * d * max(P * Vnu, P * P)
    assert flows.signature_flow_bytes(size) == 8 * tables + ode(2 * V * d, field)
    # with the linear prediction, the order is L - 1 = 1 and the hidden states are added
    linear = _size(prediction="linear", max_orders=(3,))
    hidden = P * P ** (L - 1) * (2 * V + 4 * d)
    assert flows.signature_flow_bytes(linear) == 8 * tables + ode(2 * V * d, field + hidden)
    # order 2: one more table [P, Vnu + 1, P^2] and one more contraction
    tables2 = tables + P * (Vnu + 1) * P**2
    field2 = field + 2 * d * max(P * Vnu * P, P * P**2)
    assert flows.signature_flow_bytes(_size(max_orders=(1, 2))) == 8 * tables2 + ode(
        2 * V * d, field2
    )


# ============================================================================================
# infrastructure: distributed, comparison, cli


def test_one_process_gather_broadcast_and_index():
    """In a one-process run: gather_lanes is the local blocks cut to ``lanes`` (the padding
    dropped, every leaf of the pytree, NumPy); broadcast_flag is the flag; process_index 0."""
    from ctx_staircase import distributed

    assert distributed.process_index() == 0 and distributed.process_count() == 1
    assert distributed.broadcast_flag(True) is True and distributed.broadcast_flag(False) is False
    local = {"a": jnp.arange(10.0).reshape(5, 2), "b": (np.arange(5), np.zeros((5, 0, 3)))}
    gathered = distributed.gather_lanes(local, 3)
    assert isinstance(gathered["a"], np.ndarray)
    np.testing.assert_array_equal(gathered["a"], [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(gathered["b"][0], [0, 1, 2])
    assert gathered["b"][1].shape == (3, 0, 3)
    np.testing.assert_array_equal(distributed.gather_lanes(np.arange(4), 4), np.arange(4))
    assert distributed.block(7) == range(0, 7) and distributed.is_writer()


def test_comparison_summary_keeps_every_number_and_drops_the_curves():
    """Every field of the Comparison but rho and logit_scale, the two TheorySimulation pairs as
    {"theory", "simulation"} dicts, values untouched."""
    from ctx_staircase import comparison

    TS = comparison.TheorySimulation
    compared = comparison.Comparison(
        escape_threshold=3.0,
        window_end=1.5,
        weight_rel_error_max=0.01,
        null_weight_rel_error_max=0.4,
        gram_rel_error_max=0.02,
        escape_time=TS(10.0, 12.0),
        escape_ratio=10.0 / 12.0,
        rho_distance_max=[0.1, 0.2],
        rho_distance_mean=[0.05, 0.07],
        onset_time=TS([1.0, 2.0], [1.5, float("nan")]),
        rho=TS(np.zeros((2, 4)), np.ones((2, 4))),
        logit_scale=TS(np.zeros(4), np.ones(4)),
    )
    summary = comparison.comparison_summary(compared)
    assert summary == {
        "escape_threshold": 3.0,
        "window_end": 1.5,
        "weight_rel_error_max": 0.01,
        "null_weight_rel_error_max": 0.4,
        "gram_rel_error_max": 0.02,
        "escape_time": {"theory": 10.0, "simulation": 12.0},
        "escape_ratio": 10.0 / 12.0,
        "rho_distance_max": [0.1, 0.2],
        "rho_distance_mean": [0.05, 0.07],
        "onset_time": {"theory": [1.0, 2.0], "simulation": summary["onset_time"]["simulation"]},
    }
    assert summary["onset_time"]["simulation"][0] == 1.5
    assert np.isnan(summary["onset_time"]["simulation"][1])
    assert list(summary) == [
        f for f in comparison.Comparison._fields if f not in ("rho", "logit_scale")
    ]


def test_make_task_builds_the_named_task_with_its_params_after_the_memory_check(tmp_path):
    """make_task: tasks.make(task, **params) with the --param literals; refused, naming the
    task and its params, when the dataset estimate exceeds --max-memory (1 byte under it
    refused, exactly at it accepted). out_dir: --out when given, else the default, checked."""
    from ctx_staircase import budget, tasks
    from ctx_staircase.cli import common

    args = argparse.Namespace(task="add", param=["N=5"], max_memory=None)
    built = common.make_task(args)
    expected = tasks.make("add", N=5)
    np.testing.assert_array_equal(built.tokens, expected.tokens)
    np.testing.assert_array_equal(built.labels, expected.labels)
    assert built.vocab_size == expected.vocab_size
    need = budget.dataset_bytes("add", {"N": 5})
    common.make_task(argparse.Namespace(task="add", param=["N=5"], max_memory=need))
    with pytest.raises(
        ValueError,
        match=r"task add \{'N': 5\}: needs about .*\(--max-memory\); lower the task size",
    ):
        common.make_task(argparse.Namespace(task="add", param=["N=5"], max_memory=need - 1))
    default = tmp_path / "default"
    assert common.out_dir(argparse.Namespace(out=None), default) == default
    given = tmp_path / "given"
    assert common.out_dir(argparse.Namespace(out=str(given)), default) == given
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is an existing file"):
        common.out_dir(argparse.Namespace(out=str(tmp_path / "file")), default)


# ============================================================================================
# experiments


def test_k_text_and_k_value_text_name_the_score_of_each_frequency():
    from ctx_staircase.experiments import staircase_claims

    constant = np.array([True, False, False, True])
    assert staircase_claims.k_text(0, constant) == "0 (1−MSE)"
    assert staircase_claims.k_text(2, constant) == "2"
    assert staircase_claims.k_text(3, constant) == "3 (1−MSE)"
    assert staircase_claims.k_value_text(0, 0.95123, constant) == "0 (1−MSE 0.951)"
    assert staircase_claims.k_value_text(1, 0.4125, constant) == "1 (rho 0.412)"
    assert staircase_claims.k_value_text(2, -0.0004, constant) == "2 (rho -0.000)"


def test_drive_ratio_is_the_rms_of_order_one_over_order_zero_on_the_chosen_tokens():
    """R = sqrt(mean_alpha |c_1,alpha|^2) / sqrt(mean_alpha |c_0,alpha|^2) over the given
    tokens only, per snapshot, from the per-order drives of flows.order_contributions."""
    from ctx_staircase import flows, signatures, tasks
    from ctx_staircase.experiments import order1_onset

    ds = tasks.make("modsum", N=5, L=3)
    sigs = signatures.signature_set(ds, 2)  # orders 0, 1, 2: the ratio reads order 1
    rng = np.random.default_rng(0)
    V, d, T = ds.vocab_size, 6, 3
    W_E, W_U = rng.normal(size=(T, V, d)), rng.normal(size=(T, V, d))
    tokens = np.array([0, 2, 3])
    coefficients = (1.0, 0.5, 0.3)
    ratio = order1_onset.DriveRatio(sigs, coefficients, tokens)(W_E, W_U)
    assert ratio.shape == (T,)
    for t in range(T):
        c = np.asarray(flows.order_contributions(W_E[t], W_U[t], sigs, coefficients))
        rms = [np.sqrt(np.mean(np.sum(c[m][tokens] ** 2, axis=-1))) for m in (0, 1)]
        assert ratio[t] == pytest.approx(rms[1] / rms[0], rel=1e-10)
    everywhere = order1_onset.drive_ratio(W_E, W_U, sigs, coefficients, np.arange(V))
    assert not np.allclose(everywhere, ratio)


def _race(ts, rho0, centred):
    """A ProbeRace whose probe correlations are given (the cache), not fitted."""
    from ctx_staircase.experiments import order1_onset

    race = order1_onset.ProbeRace.__new__(order1_onset.ProbeRace)
    race.ts, race.rho0 = np.asarray(ts, float), np.asarray(rho0, float)
    race.cache = {i: (c, np.nan) for i, c in enumerate(centred)}
    return race


def test_probe_race_onset_needs_two_coarse_samples_and_refines_the_bracket():
    """M1 (eq. O7): on the coarse grid (every 2nd snapshot, from ``start`` on) the first sample
    whose gap to rho_0 is >= delta with the next coarse sample also >= delta; the crossing is
    then interpolated on the fine snapshots of the bracket; a gap exactly at delta counts;
    a lone excursion does not; None without a start."""
    ts = np.arange(10.0)
    rho0 = np.zeros(10)
    #            0    1    2    3    4    5    6    7    8    9
    centred = [0.0, 0.0, 0.0, 0.9, 0.0, 0.0, 0.0, 0.2, 0.6, 0.6]  # 3 is off the coarse grid
    race = _race(ts, rho0, centred)
    # coarse 0, 2, 4, 6, 8: gap(8) >= 0.4 and no later coarse sample; bracket 6..8 refined:
    # gap 0.0, 0.2, 0.6 crosses 0.4 at 7.5
    assert race.onset(0.0, 0.4, 2.0) == pytest.approx(7.5)
    # gaps exactly at delta on two coarse samples in a row: the first one; a lone one: None
    assert _race(ts, rho0, [0.0, 0, 0.4, 0, 0.4, 0, 0, 0, 0, 0]).onset(0.0, 0.4, 2.0) == 2.0
    assert _race(ts, rho0, [0.0, 0, 0.4, 0, 0.3, 0, 0, 0, 0, 0]).onset(0.0, 0.4, 2.0) is None
    # from start 5, coarse samples 6, 8 (gaps 0, 0.6): the bracket 6..8 refined, 7.5 again
    assert race.onset(5.0, 0.4, 2.0) == pytest.approx(7.5)
    assert race.onset(None, 0.4, 2.0) is None
    # the gap already >= delta at the first coarse sample of the pair (the grid 0, 2, 4, ...
    # kept from start 3 on: 4, 6, 8): that sample's time, unrefined
    assert _race(ts, rho0, [0.5] * 10).onset(3.0, 0.4, 2.0) == 4.0
    assert _race(ts, rho0 + 0.2, [0.5] * 10).onset(3.0, 0.4, 2.0) is None  # gap 0.3
    early = np.r_[0.3, np.zeros(9)]  # each snapshot's gap is to its own rho_0
    assert _race(ts, early, [0.5] * 10).onset(3.0, 0.4, 2.0) == 4.0
    assert race.gap(8) == pytest.approx(0.6)


# ============================================================================================
# Third round: core math (attention descent, losses, flows, probes) and experiments helpers


def _tiny_attention(n=12, L=4, V=9, seed=0):
    """A hand data set with non-uniform weights and random attention-only parameters."""
    rng = np.random.default_rng(seed)
    ds = dataset.TokenDataset(
        tokens=rng.integers(0, V, size=(n, L)),
        labels=rng.integers(0, V, size=n),
        vocab_size=V,
        weights=rng.random(n) + 0.1,
    )
    d, d_k = 5, 3
    shapes = {"W_E": (V, d), "W_U": (V, d), "W_Q": (d_k, d), "W_K": (d_k, d)}
    shapes |= {"W_V": (d_k, d), "W_O": (d, d_k)}
    params = {k: jnp.asarray(rng.normal(size=s)) for k, s in shapes.items()}
    target = np.asarray(ds.tokens) < V // 2
    return ds, params, target


def _attention_loss_loops(params, ds, target):
    """Target mass and cross-entropy of the attention-only model, sample by sample in NumPy:
    the last position queries, ``z_s = (W_K h_s) . (W_Q h_L) / sqrt(d)``, ``z = W_U W_O W_V
    sum_s a_s h_s``."""
    P = {k: np.asarray(v) for k, v in params.items()}
    d = P["W_E"].shape[1]
    p = np.asarray(ds.weights) / np.sum(ds.weights)
    mass = loss = 0.0
    for n, (x, y) in enumerate(zip(ds.tokens, ds.labels, strict=True)):
        h = P["W_E"][x]
        z = np.array([(P["W_K"] @ h_s) @ (P["W_Q"] @ h[-1]) for h_s in h]) / np.sqrt(d)
        a = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        logits = P["W_U"] @ (P["W_O"] @ (P["W_V"] @ (a @ h)))
        log_softmax = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        mass += p[n] * a[target[n]].sum()
        loss -= p[n] * log_softmax[y]
    return mass, loss


def test_exact_measure_is_the_target_mass_and_cross_entropy_of_the_model_by_loops():
    """`exact_measure` against a NumPy loop over the samples (weights normalised), and its loss
    equals `train.loss_function` of the attention-only model built with the same weights."""
    ds, params, target = _tiny_attention()
    mass, loss = ad.exact_measure(ds, target)(params)
    want_mass, want_loss = _attention_loss_loops(params, ds, target)
    assert float(mass) == pytest.approx(want_mass, rel=1e-12)
    assert float(loss) == pytest.approx(want_loss, rel=1e-12)


def test_descent_path_saves_refines_at_the_crossing_and_stops():
    """A scalar 'descent' ``y -> y + steps`` measured ``A = 1/4 + y/160``: baseline 1/4,
    threshold 1/4, so the crossing is at y = 10 and the stop (twice the threshold) at y = 20.
    Chunks of 4 save y = 4, 8; the chunk to 12 crosses and is redone one step at a time from 8;
    the crossing is exactly at t = 10 lr. A state going NaN at y = 14 ends the path, not ok,
    its chunk refined like a crossing."""
    lr = 0.5

    def measure(y):
        return 0.25 + y / 160, -2.0 * y

    path = ad.descent_path(
        lambda y, k: y + k, measure, jnp.asarray(0.0), lr=lr, t_max=30.0, save_every=4,
        baseline=0.25, threshold=0.25,
    )  # fmt: skip
    steps = np.array([0, 4, 8, *range(9, 21)])
    np.testing.assert_allclose(path.ts, lr * steps, rtol=0, atol=0)
    np.testing.assert_allclose(path.attention, 0.25 + steps / 160, rtol=1e-15)
    np.testing.assert_allclose(path.loss, -2.0 * steps, rtol=1e-15)
    assert path.ok and path.departure.sign == 1 and path.departure.index == 4
    assert path.departure.time == pytest.approx(10 * lr, rel=1e-12)
    # a falling curve: the sign is -1; stop_after=None runs to t_max (total = 12 steps)
    down = ad.descent_path(
        lambda y, k: y + k, lambda y: (0.25 - y / 160, y), jnp.asarray(0.0), lr=lr, t_max=6.0,
        save_every=5, baseline=0.25, threshold=0.25, stop_after=None,
    )  # fmt: skip
    np.testing.assert_allclose(down.ts, lr * np.array([0, 5, 6, 7, 8, 9, 10, 11, 12]))
    assert down.departure.sign == -1 and down.departure.time == pytest.approx(5.0)

    def blows_up(y, k):
        return jnp.where(y + k >= 14, jnp.nan, y + k)

    broken = ad.descent_path(
        blows_up, measure, jnp.asarray(0.0), lr=lr, t_max=30.0, save_every=4, baseline=0.25,
        threshold=0.25, stop_after=None,
    )  # fmt: skip
    np.testing.assert_allclose(broken.ts, lr * np.array([0, 4, 8, 9, 10, 11, 12, 13, 14]))
    assert not broken.ok and np.isnan(broken.attention[-1]) and np.isnan(broken.loss[-1])
    assert broken.departure.time == pytest.approx(10 * lr, rel=1e-12)
    # a blow-up before any crossing is refined too: the chunk to 16 is redone step by step
    slow = ad.descent_path(
        blows_up, lambda y: (0.25 + y / 1000, y), jnp.asarray(0.0), lr=lr, t_max=30.0,
        save_every=4, baseline=0.25, threshold=0.25,
    )  # fmt: skip
    np.testing.assert_allclose(slow.ts, lr * np.array([0, 4, 8, 12, 13, 14]))
    assert not slow.ok and slow.departure.index == -1 and np.isnan(slow.departure.time)


def test_theory_descent_is_euler_on_the_field_measured_with_the_exact_model():
    """``integrator="euler"``: the saved states are ``k`` Euler steps ``y + lr F(y)`` of
    `attention_field` with the tables built for ``prediction``, each measured with
    `exact_measure`; the departure is read at the NumPy uniform mass of the target."""
    ds, params, target = _tiny_attention(seed=1)
    params = {k: 0.8 * v for k, v in params.items()}
    lr, total = 0.05, 60
    path = ad.theory_descent(
        params, ds, target, lr=lr, t_max=total * lr, save_every=8, threshold=0.065,
        stop_after=None,
    )  # fmt: skip
    tables = ad.attention_tables(ds, prediction="softmax")
    measure = ad.exact_measure(ds, target)
    y, by_step = dict(params), {}
    for k in range(total + 1):
        by_step[k] = [float(v) for v in measure(y)]
        field = ad.attention_field(y, tables, "softmax")
        y = {r: y[r] + lr * field[r] for r in y}
    steps = np.rint(path.ts / lr).astype(int)
    assert steps[-1] == total and len(steps) > total // 8 + 1  # refined near the crossing
    np.testing.assert_allclose(path.ts, lr * steps, rtol=1e-15)
    np.testing.assert_allclose(path.attention, [by_step[k][0] for k in steps], rtol=1e-10)
    np.testing.assert_allclose(path.loss, [by_step[k][1] for k in steps], rtol=1e-10)
    p = np.asarray(ds.weights) / np.sum(ds.weights)
    baseline = float(p @ target.mean(axis=1))
    expected = ad.departure_time(path.ts, path.attention, baseline, 0.065)
    assert path.departure == expected and path.departure.index == 8  # falls past at step 43


def test_loss_function_is_the_weighted_cross_entropy_of_the_models_logits():
    """`train.loss_function` = ``sum_n p_n (logsumexp z_n - z_{n, y_n})`` with the data set's
    normalised, non-uniform weights (a NumPy log-softmax of the model's logits)."""
    rng = np.random.default_rng(2)
    n, V = 10, 7
    weights = rng.random(n) + 0.05
    ds = dataset.TokenDataset(
        tokens=rng.integers(0, V, size=(n, 3)), labels=rng.integers(0, V, size=n),
        vocab_size=V, weights=weights,
    )  # fmt: skip
    graphdef, state = train.init_state("ffn", ds, gamma=0.3, seed=1, d=6, dtype="float64")
    logits = np.asarray(nnx.merge(graphdef, state)(jnp.asarray(ds.tokens)), dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_p = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    want = -np.sum(weights / weights.sum() * log_p[np.arange(n), ds.labels])
    assert float(train.loss_function(graphdef, ds)(state)) == pytest.approx(want, rel=1e-12)


def test_gradient_flow_is_minus_the_gradient_of_the_loss_leaf_by_leaf():
    """`flows.gradient_flow` of a hand loss over a pytree: ``-grad``, every leaf, any t; and
    one Euler step of it lowers the loss."""

    def loss(y):
        return jnp.sum(y["a"] ** 2 * y["b"][0]) + jnp.sum(jnp.sin(y["b"]))

    y = {"a": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([0.7, -0.3])}
    field = flows.gradient_flow(loss)(3.0, y, None)
    np.testing.assert_allclose(field["a"], -2 * y["a"] * 0.7, rtol=1e-15)
    want_b = -np.cos(np.asarray(y["b"])) - np.array([float(jnp.sum(y["a"] ** 2)), 0.0])
    np.testing.assert_allclose(field["b"], want_b, rtol=1e-15)
    step = jax.tree.map(lambda v, f: v + 1e-3 * f, y, field)
    assert float(loss(step)) < float(loss(y))


def _np_pearson(a, b, w):
    a, b, w = (np.asarray(x, dtype=np.float64) for x in (a, b, w))
    ca, cb = a - np.sum(w * a) / w.sum(), b - np.sum(w * b) / w.sum()
    return np.sum(w * ca * cb) / np.sqrt(np.sum(w * ca**2) * np.sum(w * cb**2))


def _np_probe_pairs(phi, v):
    h = np.asarray(phi) @ np.asarray(v)
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    i, j = np.triu_indices(h.shape[0], 1)
    return (h @ h.T)[i, j]


def test_fit_probe_recovers_a_planted_probe_and_scores_only_the_eval_pairs():
    """S_emb the probe similarity of a planted ``v*`` on 11 of 15 pairs, noise on 4: trained on
    7 clean pairs, the fit scores corr ~ 1, MSE ~ 0 on the 4 other clean pairs (row 0) and the
    NumPy Pearson and MSE of its own ``v`` on the noisy pairs (row 1). With 0 steps the kept
    restart is the draw ``init_std N(0, 1)`` (key ``split(key, 1)[0]``) of largest training
    Pearson."""
    rng = np.random.default_rng(5)
    A, Vn, P = 6, 3, 4
    phi = rng.normal(size=(A, Vn, P))
    triangle = _np_probe_pairs(phi, rng.normal(size=P))
    noisy = np.array([1, 4, 9, 13])
    triangle[noisy] = rng.uniform(-1, 1, size=4)
    clean = np.setdiff1d(np.arange(15), noisy)
    train_w, eval_w = np.zeros((2, 15)), np.zeros((2, 15))
    train_w[:, clean[:7]] = 1.0
    eval_w[0, clean[7:]] = 1.0
    eval_w[1, noisy] = 1.0
    args = (jnp.asarray(phi), jnp.asarray(triangle), jnp.asarray(train_w), jnp.asarray(eval_w))
    key, std = jax.random.key(3), jnp.asarray([0.5])
    v, corr, mse = metrics.fit_probe(*args, key, std, 0.05, steps=400, restarts=3)
    assert v[0].shape == (2, P)
    assert float(corr[0]) > 1 - 1e-6 and float(mse[0]) < 1e-8
    fitted = _np_probe_pairs(phi, v[0][1])
    assert float(corr[1]) == pytest.approx(_np_pearson(fitted, triangle, eval_w[1]), rel=1e-9)
    assert float(mse[1]) == pytest.approx(np.mean((fitted - triangle)[noisy] ** 2), rel=1e-9)
    assert float(corr[1]) < 0.9
    # steps = 0: the kept draw is the best of the restarts on the training pairs
    restarts = 6
    draws = 0.5 * np.asarray(jax.random.normal(jax.random.split(key, 1)[0], (restarts, P)))
    scores = [_np_pearson(_np_probe_pairs(phi, d), triangle, train_w[0]) for d in draws]
    assert np.argmax(scores) != np.argmin(scores)
    v0, corr0, _ = metrics.fit_probe(*args, key, std, 0.05, steps=0, restarts=restarts)
    np.testing.assert_allclose(v0[0][0], draws[np.argmax(scores)], rtol=1e-12)
    fitted0 = _np_probe_pairs(phi, draws[np.argmax(scores)])
    assert float(corr0[0]) == pytest.approx(_np_pearson(fitted0, triangle, eval_w[0]), rel=1e-9)


def test_split_loss_is_the_whole_models_loss_on_the_assembled_weights():
    """`second_escape.split_loss` of a split-unit state equals `second_escape.loss` of the whole
    model whose held columns are the tied rows ``u_g`` (two groups: anchors and numbers),
    ``w_lab`` on the label rows and ``w_out`` on the others, with non-uniform sample weights,
    for ReLU and a smooth activation; the state moved off the projection so every piece
    enters."""
    from ctx_staircase import second_escape as se

    rng = np.random.default_rng(0)
    tokens = np.array([(a, n) for a in range(7) for n in range(3, 7)])  # 1 or 2 numbers
    ds = dataset.TokenDataset(
        tokens=tokens, labels=rng.choice([3, 4, 7, 8], size=28), vocab_size=10,
        groups={"anchors": np.arange(3), "numbers": np.arange(3, 7)}, weights=rng.random(28) + 0.1,
    )  # fmt: skip
    u = np.array([1.0, 1.0, -1.0, 0.0, 0.0, 0.0])
    W_E = u + 0.1 * rng.standard_normal((ds.vocab_size, 6))
    W_U = 0.5 * rng.standard_normal((ds.vocab_size, 6))
    for activation in ("relu", "poly:1,0.5"):
        problem = se.plateau_problem(ds, activation)
        layout = se.split_layout(W_E, problem)
        assert len(layout.groups) == 2 and (layout.held.size > 0) == (activation == "relu")
        state = se.split_state(W_E, W_U, layout, problem)
        state = {k: v + 0.3 * rng.standard_normal(np.shape(v)) for k, v in state.items()}
        E = np.array(W_E)
        E[:, layout.split] = state["A"]
        for g, ids in enumerate(layout.groups):
            E[np.ix_(ids, layout.held)] = state["u"][g]
        U = np.zeros_like(E)
        U[:, layout.split] = state["B"]
        U[np.ix_(problem.label_ids, layout.held)] = state["w_lab"]
        U[np.ix_(problem.other_ids, layout.held)] = state["w_out"]
        arrays = se.split_arrays(layout, problem, ds.vocab_size)
        got = float(se.split_loss(jax.tree.map(jnp.asarray, state), arrays, activation))
        want = float(se.loss(jnp.asarray(E), jnp.asarray(U), problem))
        assert got == pytest.approx(want, rel=1e-12), activation


def test_attention_departure_initial_state_is_the_seeded_float64_model_scaled_by_gamma():
    """The attention-only model without positions at width `D`, key width `D_K`, float64, one
    standard normal draw of seed `SEED` shared by every gamma, scaled by ``D^-gamma``."""
    from ctx_staircase import models
    from ctx_staircase.experiments import attention_departure as exp

    ds, _, _ = _tiny_attention(n=6, L=4, V=12)
    _, state_a = exp.initial_state(ds, 0.5)
    graphdef, state_b = exp.initial_state(ds, 1.0)
    weights = models.weights(nnx.merge(graphdef, state_b))
    assert len(jax.tree.leaves(state_b)) == 6 and not np.any(weights["P"])  # no positions
    assert weights["W_E"].shape == (12, exp.D) and weights["W_Q"].shape == (exp.D_K, exp.D)
    leaves_a, leaves_b = jax.tree.leaves(state_a), jax.tree.leaves(state_b)
    for a, b in zip(leaves_a, leaves_b, strict=True):
        assert a.dtype == b.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(b), np.asarray(a) * exp.D**-0.5, rtol=1e-13)
    _, seeded = train.init_state(
        "attention", ds, gamma=1.0, seed=exp.SEED, d=exp.D, d_k=exp.D_K, positional=False,
        dtype="float64",
    )  # fmt: skip
    for a, b in zip(jax.tree.leaves(seeded), leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_regime_study_table_rows_one_row_per_claim_a_cell_per_regime():
    """Rows keyed by (experiment, item, claim) in first-seen order; each regime's cell holds the
    claim's verdict (pass, FAIL, vacuous, —), measured and null; a regime without a record or
    without that claim is "missing"; kind defaults to "paper"."""
    from ctx_staircase.experiments import regime as regimes
    from ctx_staircase.experiments import regime_study

    names = [r.name for r in regimes.ALL]

    def claim(item, name, passed, null_passed=None, **extra):
        return dict(item=item, claim=name, passed=passed, null_passed=null_passed,
                    measured=f"{item}-{name}-{passed}", **extra)  # fmt: skip

    grid = {
        "exp_a": {
            names[0]: {
                "claims": [
                    claim("x", "c1", True),
                    claim("x", "c2", False, null="n2"),
                    claim("z", "c1", False),
                ]
            },
            names[1]: {"claims": [claim("x", "c1", True, True)]},
            names[2]: None,
        },
        "exp_b": {names[3]: {"claims": [claim("y", "c1", None, kind="extra")]}},
    }
    rows = regime_study.table_rows(grid)
    assert [(r["experiment"], r["item"], r["claim"], r["kind"]) for r in rows] == [
        ("exp_a", "x", "c1", "paper"), ("exp_a", "x", "c2", "paper"), ("exp_a", "z", "c1", "paper"),
        ("exp_b", "y", "c1", "extra"),
    ]  # fmt: skip
    missing = {"verdict": "missing", "measured": "", "null": ""}
    assert list(rows[0]["cells"])[:2] == names[:2]
    assert rows[0]["cells"][names[0]] == {"verdict": "pass", "measured": "x-c1-True", "null": ""}
    assert rows[0]["cells"][names[1]]["verdict"] == "vacuous"
    assert rows[1]["cells"][names[0]] == {"verdict": "FAIL", "measured": "x-c2-False", "null": "n2"}
    assert rows[1]["cells"][names[1]] == missing
    assert rows[2]["cells"][names[0]]["verdict"] == "FAIL" and rows[2]["cells"][names[1]] == missing
    assert rows[3]["cells"][names[3]]["verdict"] == "—"
    for row in rows:
        assert set(row["cells"]) == set(names)
        assert all(row["cells"][n] == missing for n in names[4:] + names[2:3])


def test_train_in_regime_passes_the_regimes_config_with_the_call_overrides(monkeypatch):
    """`common.train_in_regime`: the regime's `TrainConfig` at ``config["adam_lr"]`` for
    ``config["epochs"]`` and ``config["snapshots"]`` (in epochs: adam_minibatch's steps are 8 per
    epoch) unless given; the model, gamma, width and activation (or the override) of the
    config; one lane per seed."""
    from ctx_staircase import sweep, tasks
    from ctx_staircase.experiments import common
    from ctx_staircase.experiments import regime as regimes

    calls = []
    monkeypatch.setattr(sweep, "train_sweep", lambda *a, **k: calls.append((a, k)) or "done")
    ds = tasks.make("add", N=4)
    config = dict(model="ffn", gamma=0.7, d=8, activation="relu", epochs=6, snapshots=[0, 3, 6],
                  adam_lr=0.02)  # fmt: skip
    mini = regimes.Regime("adam_minibatch", "wide")
    assert common.train_in_regime(ds, mini, config, [1, 2]) == "done"
    (model, data, tc), kwargs = calls[-1]
    assert model == "ffn" and data is ds
    assert kwargs == dict(gammas=[0.7], seeds=[1, 2], d=8, activation="relu")
    assert tc.optimizer == "adam" and tc.lr == 0.02 and tc.steps == 48
    assert tuple(tc.snapshots) == (0, 24, 48) and tc.batch_size == 2  # ceil(16 / 8)
    common.train_in_regime(ds, regimes.PRIMARY, config, [0], "gelu", epochs=4, snapshots=[0, 4])
    (_, _, tc), kwargs = calls[-1]
    assert kwargs["activation"] == "gelu" and kwargs["seeds"] == [0]
    assert tc.optimizer == "gd" and tc.steps == 4 and tuple(tc.snapshots) == (0, 4)
    assert tc.lr == regimes.GD_LR


def test_minmax_superposition_check_scores_the_superposed_zero_order_signatures():
    """`minmax.superposition_check` (the numbers of `DataFacts`): on a hand data set of 4 inputs,
    the superposed ``phi^{y;0}`` rows counted by hand give accuracy 3/4, a tie on one input (not
    unique, margin 0) and, without that input, the smallest top-two margin by hand."""
    from ctx_staircase.experiments import minmax

    # tokens over ids 0..3, labels 0..3; phi^{y;0}_a(nu) = P(y = nu | token a at a uniform slot)
    tokens = np.array([[0, 1], [0, 2], [1, 2], [3, 3]])
    labels = np.array([0, 0, 2, 3])
    ds = dataset.TokenDataset(tokens=tokens, labels=labels, vocab_size=4)
    phi = np.zeros((4, 4))
    for x, y in zip(tokens, labels, strict=True):
        for a in x:
            phi[a, y] += 1
    phi /= np.maximum(phi.sum(axis=1, keepdims=True), 1)
    scores = phi[tokens].sum(axis=1)
    top = np.sort(scores, axis=1)
    accuracy, unique, margin = minmax.superposition_check(ds)
    assert accuracy == pytest.approx(np.mean(scores.argmax(1) == labels))
    assert margin == pytest.approx((top[:, -1] - top[:, -2]).min(), abs=1e-15)
    assert unique == bool(np.all(top[:, -1] - top[:, -2] > 1e-12))
    # by hand: phi_0 = (1, 0, 0, 0), phi_1 = (1/2, 0, 1/2, 0), phi_2 = (1/2, 0, 1/2, 0),
    # phi_3 = e_3: input [1, 2] ties labels 0 and 2 (argmax 0, wrong): accuracy 3/4, margin 0
    assert accuracy == 0.75 and not unique and margin == 0.0
    kept = dataset.TokenDataset(tokens=tokens[[0, 1, 3]], labels=labels[[0, 1, 3]], vocab_size=4)
    accuracy, unique, margin = minmax.superposition_check(kept)
    # phi_0 = e_0, phi_1 = phi_2 = e_0: [0, 1] scores (2, 0, 0, 0), [3, 3] (0, 0, 0, 2)
    assert accuracy == 1.0 and unique and margin == pytest.approx(2.0)


def test_block_times_are_lr_times_the_snapshot_steps_and_the_comparisons_grid():
    """`order1_onset.block_times`: ``lr * snapshot_steps(round(horizon / lr), round(dt / lr))``,
    by hand (every 5 steps and the last, 62; 0.7 / 0.1 rounded to 7), and the ``ts`` of
    `comparison.theory_vs_training` run with those settings."""
    from ctx_staircase import comparison, tasks
    from ctx_staircase.experiments import order1_onset

    cfg = {"lr": 0.5, "horizon": {"a": 30.0, "b": 31.0}, "snapshot_dt": 2.5}
    np.testing.assert_array_equal(order1_onset.block_times(cfg, "a"), np.arange(13) * 2.5)
    b = order1_onset.block_times(cfg, "b")
    np.testing.assert_array_equal(b, [*(np.arange(13) * 2.5), 31.0])
    assert b.dtype == np.float64
    # 0.7 / 0.1 and 0.3 / 0.1 are 6.999... and 2.999... in floating point: rounded, not cut
    fine = {"lr": 0.1, "horizon": {"c": 0.7}, "snapshot_dt": 0.3}
    np.testing.assert_allclose(order1_onset.block_times(fine, "c"), [0, 0.3, 0.6, 0.7], rtol=1e-15)
    run = comparison.theory_vs_training(
        tasks.make("add", N=4), gammas=(1.0,), max_orders=(1,), steps=62, lr=0.5,
        snapshot_every=5, d=8, prediction="uniform", theories=["signature_flow_m1"],
    )  # fmt: skip
    np.testing.assert_array_equal(run.ts, b)


def test_measured_onsets_read_m2_and_m3_after_ready_on_a_hand_trajectory(monkeypatch):
    """`order1_onset.measured_onsets` with the alignment orders and the probe race replaced by
    hand curves on t = 1..11: ready = first rho_0 >= 0.5 (t = 3); M2 = rho_1 - rho_0 up through 0
    after ready (6.5; the earlier crossing at t = 1.33 ignored); M3 = the drop of rho_0 more than
    0.25 below its running max from ready on (8.25); M1 is the race's onset from ready at
    ``delta`` and ``probe_dt``; the curves hold the orders and the race's samples in time
    order; ``record`` samples the coarse grid (every ``probe_dt`` from the first snapshot) from
    t = 10."""
    from ctx_staircase.experiments import order1_onset

    ts = 1.0 + np.arange(11)
    rho0 = np.array([0.1, 0.3, 0.6, 0.8, 0.9, 0.9, 0.85, 0.7, 0.5, 0.4, 0.3])
    rho1 = np.array([0.0, 0.5, 0.2, 0.3, 0.5, 0.8, 0.95, 0.9, 0.9, 0.9, 0.9])
    calls = {}

    class Race:
        def __init__(self, ds, W_E, ts_, rho0_, *, with_plain):
            calls["init"] = (W_E, np.asarray(rho0_), with_plain)
            self.cache = {3: (0.7, np.nan), 1: (0.2, np.nan)}

        def at(self, i):
            calls.setdefault("at", []).append(i)

        def onset(self, start, delta, coarse_dt):
            calls["onset"] = (start, delta, coarse_dt)
            return 4.5

    orders = np.stack([rho0, rho1])
    monkeypatch.setattr(order1_onset.geometry, "alignment_orders", lambda ds, W: orders)
    monkeypatch.setattr(order1_onset, "ProbeRace", Race)
    cfg = {"rho0_ready": 0.5, "delta": 0.1, "rho0_drop": 0.25}
    out = order1_onset.measured_onsets("ds", "W_E", ts, cfg, 2.0)
    assert out["ready"] == 3.0 and out["M1_probe"] == 4.5
    assert out["M2_frequency"] == pytest.approx(6.5, rel=1e-12)
    assert out["M3_rho0_departure"] == pytest.approx(8.25, rel=1e-12)
    assert calls["onset"] == (3.0, 0.1, 2.0) and "at" not in calls
    assert calls["init"][0] == "W_E" and not calls["init"][2]
    np.testing.assert_array_equal(calls["init"][1], rho0)
    curves = out["curves"]
    np.testing.assert_array_equal(curves["rho0"], rho0)
    np.testing.assert_array_equal(curves["rho1_max_k"], rho1)
    np.testing.assert_array_equal(curves["probe_t"], [2.0, 4.0])
    np.testing.assert_array_equal(curves["probe_centred"], [0.2, 0.7])
    order1_onset.measured_onsets("ds", "W_E", ts, cfg, 3.0, record=True)
    assert calls["at"] == [9] and calls["init"][2]  # t = 1, 4, 7, 10: only 10 is >= 10
    # never ready: no M2, no M3 (the race is asked with start None)
    never = order1_onset.measured_onsets("ds", "W_E", ts, {**cfg, "rho0_ready": 0.95}, 2.0)
    assert never["ready"] is None and never["M2_frequency"] is None
    assert never["M3_rho0_departure"] is None and calls["onset"][0] is None


def test_lm_builtin_initial_embedding_is_the_gamma_one_lane_of_the_initial_states():
    """`lm_builtin.initial_embedding`: the ``W_E`` of lane gamma = 1 of `lm.initial_states`
    (the draw `lm.train_lm` starts from), whichever lane that is; another seed, another draw;
    the gamma = 0.5 lane is the same draw up to scale (cosines equal)."""
    from ctx_staircase.experiments import lm_builtin

    V = 11
    W = lm_builtin.initial_embedding(SMALL, V, seed=4)
    assert isinstance(W, np.ndarray) and W.shape == (V, SMALL.d)
    states = lm.initial_states(SMALL, V, np.array([0.5, 1.0]), 4)
    graphdef = nnx.split(lm.gpt(SMALL, V, 1.0, jax.random.key(0)))[0]
    lanes = [
        np.asarray(
            models.weights(nnx.merge(graphdef, jax.tree.map(lambda x, g=g: x[g], states)))["W_E"]
        )
        for g in range(2)
    ]
    np.testing.assert_allclose(W, lanes[1], rtol=1e-6)
    np.testing.assert_allclose(metrics.cosine_matrix(W), metrics.cosine_matrix(lanes[0]),
                               rtol=1e-4, atol=1e-5)  # fmt: skip
    assert not np.allclose(W, lanes[0])
    assert not np.allclose(W, lm_builtin.initial_embedding(SMALL, V, seed=5))
