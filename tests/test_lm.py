"""The language-model arm: eligible tokens, LM signatures, eq. 22 on device, the vmapped GPT
run and its metrics, the semantic measures, and the `lm` command."""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import small_lm_config

from ctx_staircase import cli, lm, metrics, models, semantics, signatures, sweep, text
from ctx_staircase.experiments import lm_text, verdict

TINY = small_lm_config()


@pytest.fixture(scope="module")
def corpus():
    return text.prepare_corpus(text.builtin_corpus(n_sentences=600, seed=3), vocab_size=None)


@pytest.fixture(scope="module")
def run(corpus):
    trajectory = lm.train_lm(corpus, TINY, gammas=(1.0, 0.5), seed=1)
    signature = lm.lm_signatures(
        corpus.train, corpus.vocab_size, trajectory.tracked, context_length=8, probe_vocabulary=12
    )
    return trajectory, signature


# --------------------------------------------------------------------------------------------
# data side


def test_eligible_tokens_are_frequent_words():
    vocabulary = text.build_vocabulary("a a a b b , , , , c e".split(), size=None)
    ids = vocabulary.encode("a b a , c , a b , d , e a".split())  # d is <unk>
    # predicting positions: "," 4 times, a 3, b 2, c, e and <unk> once each
    chosen = lm.eligible_tokens(ids, vocabulary, count=4, min_count=1)
    words = vocabulary.decode(chosen)
    assert words[:2] == ["a", "b"] and set(words[2:]) == {"c", "e"}  # no "," and no <unk>
    assert chosen[2] < chosen[3]  # ties broken by id
    assert vocabulary.decode(lm.eligible_tokens(ids, vocabulary, count=5, min_count=1)) == words
    with pytest.raises(ValueError, match="min_count=2"):
        lm.eligible_tokens(ids, vocabulary, count=4, min_count=2)


def test_eligible_tokens_order_and_min_count(corpus):
    counts = np.bincount(corpus.train[:-1], minlength=corpus.vocab_size)
    chosen = lm.eligible_tokens(corpus.train, corpus.vocabulary, count=10, min_count=20)
    assert chosen.size == 10 and np.all(counts[chosen] >= 20)
    assert np.all(np.diff(counts[chosen]) <= 0)
    punctuation = [i for i, t in enumerate(corpus.vocabulary.tokens) if not t[0].isalnum()]
    assert not set(chosen) & set(punctuation)
    # nothing eligible and more frequent was skipped
    eligible = [
        i
        for i, t in enumerate(corpus.vocabulary.tokens)
        if t != text.UNK and any(c.isalnum() for c in t) and counts[i] >= 20
    ]
    assert counts[chosen].min() >= np.sort(counts[eligible])[::-1][9]


def test_lm_signatures_on_a_hand_made_stream():
    # stream over V = 4: 1 2 1 3 1 2 ; windows of T = 5 hold the whole stream
    stream = np.array([1, 2, 1, 3, 1, 2])
    sig = lm.lm_signatures(stream, 4, [1, 2], context_length=5, probe_vocabulary=4)
    # after 1 comes 2, 3, 2: P(.|1) = (0, 0, 2/3, 1/3); after 2 comes 1: P(.|2) = e_1
    np.testing.assert_allclose(sig.next_token, [[0, 0, 2 / 3, 1 / 3], [0, 1, 0, 0]])
    # before 1 comes 2, 3; before 2 comes 1 twice
    np.testing.assert_allclose(sig.previous_token, [[0, 0, 0.5, 0.5], [0, 1, 0, 0]])
    # S_next: cosine of the two rows is 0; the diagonal is 1
    np.testing.assert_allclose(sig.S_next, np.eye(2), atol=1e-15)
    # prefix: alpha = 1 at s = 0, 2, 4 (targets 2, 3, 2), with prefixes {}, {1, 2}, {1, 2, 3}
    expected = np.zeros((4, 4))
    expected[3, [1, 2]] += 1 / 3  # s = 2: target 3, prefix holds 1 and 2
    expected[2, [1, 2, 3]] += 1 / 3  # s = 4: target 2, prefix holds 1, 2, 3
    np.testing.assert_allclose(sig.prefix[0], expected, atol=1e-15)
    np.testing.assert_array_equal(sig.probe_tokens, [0, 1, 2, 3])


def test_attention_path_signature_on_device_equals_numpy():
    rng = np.random.default_rng(0)
    n, T, V = 5, 6, 9
    windows = rng.integers(0, V, size=(n, T + 1))
    logits = rng.normal(size=(n, T, T))
    causal = np.tril(np.ones((T, T), dtype=bool))
    attention = np.where(causal, np.exp(logits), 0)
    attention /= attention.sum(-1, keepdims=True)
    tracked = np.array([4, 0, 7, 2])
    position = np.full(V, -1, dtype=np.int32)
    position[tracked] = np.arange(tracked.size)
    device = lm.attention_path_signature(
        jnp.asarray(windows), jnp.asarray(attention), jnp.asarray(position), V, tracked.size
    )
    padded = np.zeros((n, T + 1, T + 1))
    padded[:, :T, :T] = attention  # the last row/column is no predicting position
    reference = signatures.attention_path_signature(windows, padded, V, alphas=tracked)
    np.testing.assert_allclose(np.asarray(device), reference, rtol=1e-12, atol=1e-15)


def tracked_rows(trajectory, rows):
    """A whole-vocabulary ``W_E [G, S, V, k]`` holding ``rows [G, S, A, k]`` at the tracked
    ids (zeros elsewhere), as `lm.train_lm` records it."""
    V = trajectory.W_E.shape[2]
    full = np.zeros((*rows.shape[:2], V, rows.shape[-1]))
    full[:, :, trajectory.tracked] = rows
    return full


# --------------------------------------------------------------------------------------------
# training


def test_trajectory_shapes_and_initial_state(run, corpus):
    trajectory, _ = run
    G, S, A, d = 2, len(TINY.snapshots), trajectory.tracked.size, TINY.d
    assert TINY.snapshots == (0, 4, 8, 12)
    assert trajectory.W_E.shape == (G, S, corpus.vocab_size, d)  # every row
    assert trajectory.W_U.shape == (G, S, A, d)
    assert trajectory.value_path.shape == (G, S, 1, A, d)
    assert trajectory.S_attention_signature.shape == (G, S, 1, A, A)
    np.testing.assert_array_equal(trajectory.final_W_E, trajectory.W_E[:, -1])  # the last step
    np.testing.assert_array_equal(trajectory.diverged_step, [-1, -1])
    # the same standard-normal draw at both scales: step-0 rows differ by d^{1 - 0.5}
    np.testing.assert_allclose(
        trajectory.W_E[1, 0], trajectory.W_E[0, 0] * d**0.5, rtol=1e-5, atol=1e-7
    )
    # at small init the logits z are ~0 with variance ~ d * (d^-gamma)^2 (unit-RMS stream):
    # to second order the loss is ln V + Var(z) / 2
    excess = trajectory.loss[0, 0] - np.log(corpus.vocab_size)
    assert 0 < excess < d ** (1 - 2 * 1.0)
    assert np.all(trajectory.loss[:, -1] < trajectory.loss[:, 0])  # 12 AdamW steps help


def test_value_path_matches_the_model(run, corpus):
    trajectory, _ = run
    key = jax.random.fold_in(jax.random.key(1), 0)
    weights = models.weights(lm.gpt(TINY, corpus.vocab_size, 1.0, key))
    np.testing.assert_allclose(trajectory.W_E[0, 0], np.asarray(weights["W_E"]), rtol=1e-6)
    W_E = np.asarray(weights["W_E"])[trajectory.tracked]
    z = np.einsum("ij,jk,ak->ai", weights["W_O"][0], weights["W_V"][0], W_E)
    np.testing.assert_allclose(trajectory.value_path[0, 0, 0], z, rtol=1e-4, atol=1e-9)


def test_lane_equals_solo_run(run, corpus):
    trajectory, _ = run
    solo = lm.train_lm(corpus, TINY, gammas=(0.5,), seed=1)
    np.testing.assert_allclose(solo.W_E[0], trajectory.W_E[1], rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(solo.loss[0], trajectory.loss[1], rtol=1e-5)


def _lanes_computed(monkeypatch) -> list[int]:
    """From now on, record the lane count of every `sweep.sweep_map` call; returns the list."""
    computed, original = [], sweep.sweep_map

    def counting(fn, *lanes, **kwargs):
        computed.append(int(jax.tree.leaves(lanes)[0].shape[0]))
        return original(fn, *lanes, **kwargs)

    monkeypatch.setattr(sweep, "sweep_map", counting)
    return computed


def _assert_same_trajectory(a: lm.LMTrajectory, b: lm.LMTrajectory) -> None:
    for field in lm.LMTrajectory._fields:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_interrupted_lm_resumes_bitwise_training_only_the_missing_lane(
    run, corpus, tmp_path, monkeypatch
):
    """Killed after saving lane 0, a rerun trains lane 1 alone and returns the uninterrupted
    trajectory bitwise; the finished folder then trains nothing."""
    trajectory, _ = run
    original = sweep.LaneStore.save

    def dies_at_lane_1(self, lane, record):
        if lane == 1:
            raise KeyboardInterrupt
        original(self, lane, record)

    monkeypatch.setattr(sweep.LaneStore, "save", dies_at_lane_1)
    with pytest.raises(KeyboardInterrupt):
        lm.train_lm(corpus, TINY, gammas=(1.0, 0.5), seed=1, out=tmp_path)
    monkeypatch.setattr(sweep.LaneStore, "save", original)
    assert len(list((tmp_path / "units").glob("*.npz"))) == 1

    computed = _lanes_computed(monkeypatch)
    resumed = lm.train_lm(corpus, TINY, gammas=(1.0, 0.5), seed=1, out=tmp_path)
    assert computed == [1]
    _assert_same_trajectory(resumed, trajectory)
    again = lm.train_lm(corpus, TINY, gammas=(1.0, 0.5), seed=1, out=tmp_path)
    assert computed == [1]
    _assert_same_trajectory(again, trajectory)


@pytest.fixture(scope="module")
def finished_lanes(run, corpus, tmp_path_factory):
    """A finished one-lane `lm.train_lm` folder and the settings it was trained with."""
    same = dict(corpus=corpus, config=TINY, gammas=(1.0,), seed=1, tracked=run[0].tracked)
    out = tmp_path_factory.mktemp("lm_lanes")
    lm.train_lm(**same, out=out)
    return out, same


@pytest.mark.parametrize(
    "changed",
    ["seed", "gammas", "config", "tracked", "train stream", "validation stream"],
)
def test_lm_lanes_of_other_settings_are_never_reused(finished_lanes, corpus, changed):
    """Whatever a lane depends on is in its store's spec: a finished folder refuses a run that
    differs in any one of them instead of returning the finished lanes."""
    out, same = finished_lanes
    other = {
        "seed": dict(seed=2),
        "gammas": dict(gammas=(0.75,)),
        "config": dict(config=dataclasses.replace(TINY, lr=1e-3)),
        "tracked": dict(tracked=same["tracked"][:-1]),
        "train stream": dict(corpus=dataclasses.replace(corpus, train=corpus.train[::-1])),
        "validation stream": dict(
            corpus=dataclasses.replace(corpus, validation=corpus.validation[::-1])
        ),
    }[changed]
    with pytest.raises(ValueError, match="finished run of other settings"):
        lm.train_lm(**{**same, **other}, out=out)


def test_divergence_freezes_the_lane(corpus):
    config = dataclasses.replace(TINY, lr=1e30, warmup_fraction=0.0)
    trajectory = lm.train_lm(corpus, config, gammas=(1.0,), seed=0)
    step = int(trajectory.diverged_step[0])
    assert 0 <= step < config.steps
    assert np.all(np.isfinite(trajectory.W_E)) and np.all(np.isfinite(trajectory.loss))


# --------------------------------------------------------------------------------------------
# metrics


def test_lm_metrics_planted_geometry(run):
    trajectory, signature = run
    A, V = signature.next_token.shape
    # embeddings equal to the signature rows: rho_next = 1 exactly; random ones: about 0
    planted = np.zeros((*trajectory.W_E.shape[:2], A, V))
    planted[:] = signature.next_token
    fake = trajectory._replace(
        W_E=tracked_rows(trajectory, planted),
        W_U=np.broadcast_to(signature.previous_token, planted.shape),
    )
    curves = lm.lm_metrics(fake, signature, probe_steps=20)
    np.testing.assert_allclose(curves.rho_next, 1.0, atol=1e-12)
    np.testing.assert_allclose(curves.rho_previous, 1.0, atol=1e-12)
    real = lm.lm_metrics(trajectory, signature, probe_steps=20)
    assert real.rho_attention.shape == (2, len(TINY.snapshots), 1)
    assert np.all(np.abs(real.rho_next[:, 0]) < 0.5)  # random init: no structure to speak of
    assert np.all(real.probe_baseline_mse > 0) and np.all(np.isfinite(real.probe_mse))
    assert real.probe_constant_mse.shape == real.probe_slope.shape == real.probe_mse.shape


def affine_geometry(phi, v, slope, intercept):
    """Embeddings whose off-diagonal cosines are exactly ``slope * S^(1)(v) + intercept``:
    ``w_alpha = [sqrt(slope) h_alpha / |h_alpha|, sqrt(intercept), sqrt(1 - slope - intercept)
    e_alpha]`` (the last block one-hot per token)."""
    h = np.asarray(phi) @ v
    h /= np.linalg.norm(h, axis=1, keepdims=True)
    A = h.shape[0]
    return np.concatenate(
        [
            np.sqrt(slope) * h,
            np.full((A, 1), np.sqrt(intercept)),
            np.sqrt(1 - slope - intercept) * np.eye(A),
        ],
        axis=1,
    )


def test_prefix_probe_readout_recovers_an_affine_geometry():
    rng = np.random.default_rng(1)
    A, K = 30, 6
    phi = rng.random((A, 8, K))  # non-negative, like a signature
    v = rng.normal(size=K)
    W = affine_geometry(phi, v, 0.3, 0.2)
    S_emb = np.asarray(metrics.cosine_matrix(W))
    rows, cols = np.triu_indices(A, k=1)
    S_sig = np.asarray(metrics.probe_similarity(phi, (v,)))
    np.testing.assert_allclose(S_emb[rows, cols], 0.3 * S_sig[rows, cols] + 0.2, atol=1e-6)
    heldout = np.arange(A) % 2 == 0
    probe = lm.prefix_probe(phi, S_emb, heldout)
    assert probe.heldout_mse.shape == () and probe.v.shape == (K,)
    # the readout is identified (the cosines are invariant to v's scale and sign)
    assert probe.slope == pytest.approx(0.3, abs=1e-3)
    assert probe.intercept == pytest.approx(0.2, abs=1e-3)
    assert probe.heldout_mse < 1e-3 * probe.variance
    assert probe.heldout_corr > 0.999 and probe.train_mse < 1e-3 * probe.variance
    # without the readout the MSE-fitted probe cannot match the scale 0.3 and the offset 0.2
    bare = metrics.probe_fit(phi, S_emb, heldout_tokens=heldout, objective="mse")
    assert float(bare.heldout_mse) > 0.5 * probe.variance
    # a batch of snapshots: one fit each, in the batch's shape
    batch = lm.prefix_probe(phi, np.stack([[S_emb, np.eye(A)]] * 3), heldout, steps=50)
    assert batch.heldout_mse.shape == (3, 2) and batch.v.shape == (3, 2, K)
    np.testing.assert_array_equal(batch.slope[:, 1], 0.0)  # constant pairs: slope 0


def test_prefix_probe_baselines_and_null():
    rng = np.random.default_rng(2)
    A, K = 30, 6
    phi = rng.random((A, 8, K))
    heldout = np.zeros(A, dtype=bool)
    heldout[rng.permutation(A)[:14]] = True
    rows, cols = np.triu_indices(A, k=1)
    held_pairs = heldout[rows] & heldout[cols]
    train_pairs = ~heldout[rows] & ~heldout[cols]
    ratios = []
    for seed in range(3):  # random embeddings, the untrained init: no signal to find
        S_emb = np.asarray(metrics.cosine_matrix(np.random.default_rng(seed).normal(size=(A, 16))))
        s = S_emb[rows, cols]
        probe = lm.prefix_probe(phi, S_emb, heldout)
        assert probe.variance == pytest.approx(np.var(s[held_pairs]), rel=1e-4)
        expected = np.mean((s[held_pairs] - s[train_pairs].mean()) ** 2)
        assert probe.constant_mse == pytest.approx(expected, rel=1e-4)
        assert probe.constant_mse >= probe.variance * (1 - 1e-5)  # the best constant is best
        ratios.append(float(probe.heldout_mse / probe.variance))
    assert min(ratios) > 1.0, ratios  # the probe does not beat the constant on noise


def test_lm_metrics_fits_the_probe_on_held_out_tokens(run):
    trajectory, signature = run
    rng = np.random.default_rng(3)
    A = trajectory.tracked.size
    prefix = rng.random((A, 5, 4))
    W = affine_geometry(prefix, rng.normal(size=4), 0.5, 0.1)
    W = np.broadcast_to(W, (*trajectory.W_E.shape[:2], *W.shape))
    fake = trajectory._replace(W_E=tracked_rows(trajectory, W))
    curves = lm.lm_metrics(fake, signature._replace(prefix=prefix), probe_steps=300)
    assert np.all(curves.probe_mse < 1e-3 * curves.probe_baseline_mse)
    np.testing.assert_allclose(curves.probe_slope, 0.5, atol=1e-3)
    # the baseline is the held-out variance (the best constant), strictly below the constant
    # of the training pairs' mean whenever the two means differ, as they do on random data
    assert np.all(curves.probe_baseline_mse < curves.probe_constant_mse)


def summary_lane(**changes):
    lane = dict(
        rho_next_start=0.0,
        rho_next_peak=0.8,
        rho_next_peak_step=40,
        rho_next_final=0.5,
        rho_next_min_after_peak=0.5,
        probe_mse_ratio_median=0.5,
        probe_mse_ratio_max=0.9,
        probe_mse_ratio_init=1.3,
        probe_constant_ratio_median=0.5,
        probe_corr_median=0.7,
        probe_corr_at_peak=0.7,
        probe_slope_median=0.4,
        rho_previous_peak=0.5,
        rho_previous_final=0.4,
        rho_attention_early_max=[0.3],
        rho_attention_final=[0.2],
        loss_final=1.0,
        validation_loss_final=1.1,
        diverged_step=-1,
    )
    return lane | changes


def test_lm_claims_score_their_nulls():
    summary = {"1": summary_lane(), "0.5": summary_lane(rho_next_peak=0.4)}
    claims = lm_text.claims(summary, 1000, "test regime")
    assert [verdict(c) for c in claims] == ["pass"] * 5
    assert [c.kind for c in claims] == ["paper", "paper", "paper", "project", "paper"]
    assert all(c.regime == "test regime" and c.null_passed is False for c in claims)
    # a probe that beats the constant on the untrained embeddings too proves nothing
    summary["1"]["probe_mse_ratio_init"] = 0.9
    assert verdict(lm_text.claims(summary, 1000, "r")[-1]) == "vacuous"
    # an init already aligned: the flat curve meets the early-peak criterion
    summary["1"] = summary_lane(rho_next_start=0.5)
    early = lm_text.claims(summary, 1000, "r")[1]
    assert early.null_passed is True and verdict(early) == "vacuous"


def test_lm_settles_claim_needs_a_drop_below_the_peak_and_a_nonzero_final():
    """The claim that rho_next settles at a lower, nonzero level: final <= peak - DROP_MIN and
    final >= FINAL_MIN, checked on each side of both bounds."""
    assert (lm_text.DROP_MIN, lm_text.FINAL_MIN) == (0.05, 0.1)

    def settles(final: float) -> bool:
        small = summary_lane(rho_next_peak=0.8, rho_next_final=final, rho_next_min_after_peak=final)
        claim = lm_text.claims({"1": small, "0.5": summary_lane()}, 1000, "r")[2]
        assert claim.claim.startswith("rho_next then settles")
        return claim.passed

    assert settles(0.74) and not settles(0.76)  # the drop from the peak 0.8
    assert settles(0.11) and not settles(0.09)  # the final level
    assert not settles(0.8)  # a curve that ends at its peak never settled


def test_lm_metrics_rejects_other_tokens(run):
    trajectory, signature = run
    with pytest.raises(ValueError, match="tracked"):
        lm.lm_metrics(trajectory, signature._replace(tracked=signature.tracked[::-1]))
    with pytest.raises(ValueError, match="heldout_fraction"):
        lm.lm_metrics(trajectory, signature, heldout_fraction=1.0)


def test_probe_fit_token_split_recovers_a_planted_probe():
    rng = np.random.default_rng(1)
    phi = rng.random((20, 6, 5))
    v = rng.normal(size=5)
    S_emb = metrics.probe_similarity(phi, (v,))
    heldout = np.arange(20) % 2 == 0
    fit = metrics.probe_fit(phi, S_emb, heldout_tokens=heldout, objective="mse", steps=400)
    assert fit.fold_mse.shape == (1,)
    assert float(fit.heldout_mse) < 1e-4
    assert float(fit.heldout_corr) > 0.99
    with pytest.raises(ValueError, match="heldout_tokens"):
        metrics.probe_fit(phi, S_emb, heldout_tokens=[0])
    with pytest.raises(ValueError, match="heldout_tokens"):
        metrics.probe_fit(phi, S_emb, heldout_tokens=np.ones(19, dtype=bool))
    with pytest.raises(ValueError, match="objective"):
        metrics.probe_fit(phi, S_emb, objective="l1")


@pytest.mark.parametrize(
    "field, value, name",
    [
        ("steps", 0, "steps"),
        ("snapshot_every", 20, "snapshot_every"),
        ("n_heads", 3, "n_heads"),
        ("lr", float("nan"), "lr"),
        ("warmup_fraction", 1.0, "warmup_fraction"),
        ("tracked", 2, "tracked"),
    ],
)
def test_config_rejects_bad_values(field, value, name):
    with pytest.raises(ValueError, match=name):
        dataclasses.replace(TINY, **{field: value})


def test_train_lm_rejects_bad_input(corpus):
    with pytest.raises(ValueError, match="gammas"):
        lm.train_lm(corpus, TINY, gammas=(float("nan"),))
    for tracked in ([1, 1, 2], [0, corpus.vocab_size], [[1, 2]]):
        with pytest.raises(ValueError, match="tracked"):
            lm.train_lm(corpus, TINY, tracked=tracked)
    short = text.prepare_corpus("a b c d e f g h i j " * 3, vocab_size=None)
    with pytest.raises(ValueError, match="context_length"):
        lm.train_lm(short, TINY)


# --------------------------------------------------------------------------------------------
# semantic measures


def test_semantic_measures_on_known_shapes():
    line = np.outer(np.arange(8.0), [1.0, 2.0, 0.5]) + 0.01 * np.random.default_rng(0).normal(
        size=(8, 3)
    )
    assert semantics.number_order(line) == pytest.approx(1.0)
    assert semantics.number_order(line[::-1]) == pytest.approx(1.0)  # PC sign is arbitrary
    angle = 2 * np.pi * np.arange(7) / 7
    circle = np.stack([np.cos(angle), np.sin(angle), 0.01 * angle], axis=1)
    assert semantics.cycle_neighbours(circle) == 7
    assert semantics.cycle_neighbours(circle[[0, 3, 6, 2, 5, 1, 4]]) == 0  # a star, not a cycle
    clusters = {
        "a": np.array([[1, 0.1, 0], [1, 0, 0.1]]),
        "b": np.array([[0, 1, 0.1], [0.1, 1, 0]]),
        "c": np.array([[0, 0.1, 1], [0.1, 0, 1]]),
    }
    assert semantics.category_purity(clusters) == 1.0
    with pytest.raises(ValueError, match="categories"):
        semantics.category_purity({"a": clusters["a"]})
    with pytest.raises(ValueError, match="vectors"):
        semantics.number_order(np.ones((2, 3)))


# --------------------------------------------------------------------------------------------
# command line


@pytest.mark.slow  # a real CLI process, over 20 s
def test_cli_lm_tiny_run(tmp_path):
    out = tmp_path / "lm"
    assert cli.main(["lm", "--tiny", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {
        "metrics.json",
        "arrays.npz",
        "curves.png",
        "curves.pdf",  # every figure has its PDF beside the PNG
        "semantics.png",
        "semantics.pdf",
        "lanes",  # the saved lanes a rerun resumes from
        "embeddings",  # the W_E snapshots `ctx-staircase measure` reads
    }
    record = json.loads((out / "metrics.json").read_text())
    assert set(record["summary"]) == {"1", "0.5"}
    assert record["environment"]["packages"]["jax"]
    assert set(record["embedding_structure"]["1"]) == {
        "number_order",
        "weekday_cycle",
        "month_cycle",
        "category_purity",
    }


@pytest.mark.parametrize(
    "content, extra, message",
    [
        (None, [], "not found|does not exist|no such"),
        (b"", [], "empty"),
        (b"\xff\xfe\xfa bad bytes", [], "UTF-8"),
        (b"some words " * 50, ["--steps", "0"], "steps"),
        (b"some words " * 50, ["--gamma", "nan"], "gamma"),
        (b"some words " * 50, ["--heads", "3"], "n_heads"),
    ],
)
def test_cli_lm_bad_input(tmp_path, capsys, content, extra, message):
    path = tmp_path / "corpus.txt"
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "out"
    code = cli.main(["lm", "--text", str(path), "--out", str(out), *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert "ctx-staircase lm: error:" in err
    assert any(m.lower() in err.lower() for m in message.split("|")), err
    assert not out.exists()


@pytest.mark.slow
def test_lm_text_experiment_on_real_text(shakespeare_path, tmp_path):
    from ctx_staircase.experiments import execute

    record = execute("lm_text", tiny=True, root=tmp_path, text_path=shakespeare_path)
    assert record["config"]["text"] == "tinyshakespeare.txt"
    assert record["config"]["vocab_size"] == text.DEFAULT_VOCAB_SIZE + 1
    assert len(record["claims"]) == 5 and (tmp_path / record["figures"]["curves"]).is_file()
    summary = record["numbers"]["summary"]["1"]
    assert summary["diverged_step"] == -1 and abs(summary["rho_next_start"]) < 0.2


# --------------------------------------------------------------------------------------------
# exact semantics against independent computations: the two losses on their own
# windows, the head-averaged attention signature, AdamW's mask and schedule, rho_attn from the
# value path, the prefix probe's token split


def numpy_cosines(X):
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    unit = X / np.where(norms > 0, norms, 1)
    return unit @ np.swapaxes(unit, -1, -2)


def numpy_pearson(a, b):
    a, b = a - a.mean(-1, keepdims=True), b - b.mean(-1, keepdims=True)
    return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


def initial_model(corpus, gamma, seed=1):
    """The model a lane of `run` starts from (the same draw at every gamma, from seed)."""
    return lm.gpt(TINY, corpus.vocab_size, gamma, jax.random.fold_in(jax.random.key(seed), 0))


def mean_cross_entropy(model, windows):
    logits = np.asarray(model(jnp.asarray(windows[:, :-1])), dtype=np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    targets = windows[:, 1:]
    return -np.take_along_axis(logp, targets[..., None], axis=-1).mean()


def recorded_windows(stream, count):
    """The ``count`` windows of ``stream`` a run records on (evenly spread, `lm.spread_windows`)."""
    return lm.spread_windows(text.windows(stream, TINY.context_length), count)


def test_training_and_validation_losses_are_on_their_own_windows(run, corpus):
    """At step 0 (the known init) the recorded loss is the mean cross-entropy on training
    windows and the validation loss the one on validation windows, computed independently;
    at gamma 0.5 the two differ by far more than the float32 tolerance, so swapping streams
    is visible."""
    trajectory, _ = run
    train_windows = recorded_windows(corpus.train, TINY.signature_windows)
    validation_windows = recorded_windows(corpus.validation, TINY.validation_windows)
    assert not np.isin(validation_windows, train_windows).all()  # other text
    for lane, gamma in enumerate((1.0, 0.5)):
        model = initial_model(corpus, gamma)
        on_train = mean_cross_entropy(model, train_windows)
        on_validation = mean_cross_entropy(model, validation_windows)
        assert trajectory.loss[lane, 0] == pytest.approx(on_train, rel=2e-6)
        assert trajectory.validation_loss[lane, 0] == pytest.approx(on_validation, rel=2e-6)
    assert abs(on_train - on_validation) > 1e-2 * on_train  # the last lane: gamma 0.5


def test_recorded_rows_at_step_0_are_the_init_model(run, corpus):
    """Step 0 of each lane records the tracked rows of the init model's own W_E and W_U (an
    untied GPT: two different matrices) and the value path W_O W_V w^E."""
    trajectory, _ = run
    tracked = trajectory.tracked
    for lane, gamma in enumerate((1.0, 0.5)):
        model = initial_model(corpus, gamma)
        weights = {k: np.asarray(v) for k, v in models.weights(model).items()}
        for name, rows in (("W_E", slice(None)), ("W_U", tracked)):  # W_E: every row
            expected = weights[name][rows]
            recorded = getattr(trajectory, name)[lane, 0]
            np.testing.assert_allclose(recorded, expected, atol=1e-6 * np.abs(expected).max())
        assert np.abs(weights["W_U"] - weights["W_E"]).max() > 0.1 * np.abs(weights["W_U"]).max()
        z = np.einsum("lij,ljk,ak->lai", weights["W_O"], weights["W_V"], weights["W_E"][tracked])
        np.testing.assert_allclose(trajectory.value_path[lane, 0], z, atol=1e-5 * np.abs(z).max())


def test_attention_signature_averages_the_heads(run, corpus):
    """S_attention_signature at step 0 equals eq. 22 (the NumPy reference) of the attention
    averaged over heads, recomputed from the init model; at gamma 0.5 the heads differ, so one
    head alone gives visibly other cosines."""
    trajectory, _ = run
    windows = recorded_windows(corpus.train, TINY.signature_windows)
    n, T = windows.shape[0], TINY.context_length
    maps = np.asarray(initial_model(corpus, 0.5).attention_maps(jnp.asarray(windows[:, :-1])))
    assert maps.shape == (1, n, TINY.n_heads, T, T)

    def cosines(attention):
        padded = np.zeros((n, T + 1, T + 1))
        padded[:, :T, :T] = attention
        phi = signatures.attention_path_signature(
            windows, padded, corpus.vocab_size, alphas=trajectory.tracked
        )
        return numpy_cosines(phi)

    averaged = cosines(maps[0].mean(axis=1))
    recorded = trajectory.S_attention_signature[1, 0, 0]
    np.testing.assert_allclose(recorded, averaged, atol=2e-5)
    for head in range(TINY.n_heads):
        assert np.abs(cosines(maps[0, :, head]) - averaged).max() > 1e-2  # not vacuous


ADAMW_CONFIG = dataclasses.replace(
    TINY, n_layers=2, steps=10, warmup_fraction=0.3, lr=0.05, weight_decay=0.5
)
NORM_SCALES = ("attention_norm", "mlp_norm", "final_norm")


@functools.lru_cache(maxsize=2)
def zero_gradient_updates(config):
    """The parameters and the AdamW updates of every step of ``config`` under zero gradients,
    where Adam's direction is exactly 0 and only the decoupled decay acts."""
    model = lm.gpt(config, 11, 0.5, jax.random.key(0))
    params = nnx.split(model, nnx.Param)[1]
    optimizer = lm.optimizer(config)

    @jax.jit
    def steps(params):
        with jax.numpy_dtype_promotion("standard"):
            opt_state = optimizer.init(params)
            zeros = jax.tree.map(jnp.zeros_like, params)

            def step(carry, _):
                params, opt_state = carry
                updates, opt_state = optimizer.update(zeros, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), (params, updates)

            return jax.lax.scan(step, (params, opt_state), length=config.steps)[1]

    before, updates = steps(params)
    names = set(models.weights(model))
    assert set(NORM_SCALES) < names and len(names - set(NORM_SCALES)) == 9  # 9 weight matrices
    return {n: np.asarray(before[n][...]) for n in names}, {
        n: np.asarray(updates[n][...]) for n in names
    }


def lm_rate(config, step):
    """The documented LM schedule: linear warm-up from 0 over round(warmup_fraction * steps)
    steps to lr, then a cosine down to min_lr_ratio * lr at the last step."""
    warmup = max(1, round(config.warmup_fraction * config.steps))
    if step < warmup:
        return config.lr * step / warmup
    progress = (step - warmup) / (config.steps - warmup)
    ratio = config.min_lr_ratio
    return config.lr * (ratio + (1 - ratio) * 0.5 * (1 + np.cos(np.pi * progress)))


def test_adamw_decays_the_weight_matrices_on_the_schedule_and_not_the_final_norm():
    """Zero gradients: a step is W <- W (1 - lr_t wd) for every weight matrix, lr_t the warm-up
    then cosine closed form, and nothing for the final RMSNorm scale."""
    params, updates = zero_gradient_updates(ADAMW_CONFIG)
    wd = ADAMW_CONFIG.weight_decay
    for name in set(params) - set(NORM_SCALES):
        for step in range(ADAMW_CONFIG.steps):
            np.testing.assert_allclose(
                updates[name][step],
                -lm_rate(ADAMW_CONFIG, step) * wd * params[name][step],
                rtol=1e-5,
                atol=1e-9,
                err_msg=f"{name} at step {step}",
            )
    np.testing.assert_array_equal(updates["final_norm"], 0.0)
    rates = [lm_rate(ADAMW_CONFIG, s) for s in range(ADAMW_CONFIG.steps)]
    assert rates[0] == 0 and max(rates) == ADAMW_CONFIG.lr and rates[-1] < 0.2 * ADAMW_CONFIG.lr


def test_adamw_does_not_decay_the_per_layer_norm_scales():
    """LMConfig.weight_decay: "decoupled decay of the weight matrices (not of the RMSNorm
    scales)": under zero gradients the stacked per-layer scales must not move."""
    _, updates = zero_gradient_updates(ADAMW_CONFIG)
    for name in ("attention_norm", "mlp_norm"):
        np.testing.assert_array_equal(updates[name], 0.0, err_msg=name)


def test_signature_cosines_are_float64_whatever_the_x64_flag():
    """The LM's signature cosine matrices are exact statistics: float64 even with x64 off (the
    CLI's setting), and the same numbers as with it."""
    corpus = text.prepare_corpus(text.builtin_corpus(), vocab_size=None)
    tracked = lm.eligible_tokens(corpus.train, corpus.vocabulary, count=12, min_count=5)
    with jax.enable_x64(False):
        low = lm.lm_signatures(corpus.train, corpus.vocab_size, tracked, context_length=8)
    high = lm.lm_signatures(corpus.train, corpus.vocab_size, tracked, context_length=8)
    for name in ("S_next", "S_previous"):
        assert getattr(low, name).dtype == np.float64, name
        np.testing.assert_array_equal(getattr(low, name), getattr(high, name), err_msg=name)


def test_rho_attention_compares_the_value_path_with_the_attention_signature(run):
    """rho_attn is the Pearson of the value-path cosines with the attention-signature cosines:
    a value path planted with exactly the signature's geometry scores 1 while W_E stays
    random, and a random value path scores the independent NumPy Pearson."""
    trajectory, signature = run
    G, S, layers, A, _ = trajectory.value_path.shape
    rng = np.random.default_rng(5)
    S_attention = numpy_cosines(rng.random((G, S, layers, A, 3 * A)))
    planted = np.linalg.cholesky(S_attention + 1e-12 * np.eye(A))  # rows with these cosines
    fake = trajectory._replace(
        value_path=planted,
        S_attention_signature=S_attention,
        W_E=rng.normal(size=trajectory.W_E.shape),
    )
    curves = lm.lm_metrics(fake, signature, probe_steps=20)
    np.testing.assert_allclose(curves.rho_attention, 1.0, atol=1e-9)
    value_path = rng.normal(size=(G, S, layers, A, 5))
    fake = fake._replace(value_path=value_path)
    curves = lm.lm_metrics(fake, signature, probe_steps=20)
    rows, cols = np.triu_indices(A, k=1)
    expected = numpy_pearson(
        numpy_cosines(value_path)[..., rows, cols], S_attention[..., rows, cols]
    )
    np.testing.assert_allclose(curves.rho_attention, expected, rtol=1e-9, atol=1e-12)
    assert np.all(np.abs(expected) < 0.9)


def test_prefix_probe_fits_on_training_pairs_and_scores_held_out_pairs_only():
    """Three kinds of pairs, each with its own relation to S^(1)(v): training pairs
    0.3 S + 0.2, held-out pairs -0.4 S + 0.9, mixed pairs 5 (garbage). The fit must recover the
    training relation exactly, and every score (variance, constant, MSE, correlation) must be
    that of the held-out pairs alone: a leak of either set into the other shows."""
    rng = np.random.default_rng(4)
    A, K = 24, 5
    phi = rng.random((A, 7, K))
    v = rng.normal(size=K)
    S = np.asarray(metrics.probe_similarity(phi, (v,)), dtype=np.float64)
    held = rng.permutation(A) < 10
    S_emb = np.full((A, A), 5.0)
    both_train, both_held = np.outer(~held, ~held), np.outer(held, held)
    S_emb[both_train] = 0.3 * S[both_train] + 0.2
    S_emb[both_held] = -0.4 * S[both_held] + 0.9
    probe = lm.prefix_probe(phi, S_emb, held)
    assert float(probe.slope) == pytest.approx(0.3, abs=1e-3)
    assert float(probe.intercept) == pytest.approx(0.2, abs=1e-3)
    assert float(probe.train_mse) < 1e-7

    def pairs(mask):
        index = np.flatnonzero(mask)
        rows, cols = np.triu_indices(index.size, k=1)
        return index[rows], index[cols]

    s_train = S_emb[pairs(~held)]
    s_held = S_emb[pairs(held)]
    assert float(probe.variance) == pytest.approx(np.var(s_held), rel=1e-9)
    assert float(probe.constant_mse) == pytest.approx(
        np.mean((s_held - s_train.mean()) ** 2), rel=1e-9
    )
    x_held = numpy_cosines(phi[held] @ np.asarray(probe.v))[np.triu_indices(held.sum(), k=1)]
    prediction = probe.slope * x_held + probe.intercept
    assert float(probe.heldout_mse) == pytest.approx(np.mean((prediction - s_held) ** 2), rel=1e-6)
    assert float(probe.heldout_corr) == pytest.approx(-1.0, abs=1e-6)  # the held-out relation


def test_embedding_alignment_holds_out_the_given_share_of_the_tracked_tokens():
    """``heldout_fraction`` of the A = 8 tokens are held out: at 0.25 two tokens, one held-out
    pair (its variance is 0); at 0.75 six tokens, so the fit sees two training tokens, one pair,
    which its readout line passes through exactly (training MSE 0)."""
    rng = np.random.default_rng(0)
    A, K = 8, 5
    prefix = rng.random((A, 3, K))
    S_emb = np.asarray(metrics.cosine_matrix(rng.normal(size=(A, 4))))
    S_next = np.asarray(metrics.cosine_matrix(rng.normal(size=(A, 6))))
    kwargs = dict(seed=0, probe_steps=5)
    _, few = lm.embedding_alignment(S_emb, S_next, prefix, heldout_fraction=0.25, **kwargs)
    assert float(few.variance) == 0.0 and float(few.train_mse) > 0.0
    _, many = lm.embedding_alignment(S_emb, S_next, prefix, heldout_fraction=0.75, **kwargs)
    assert float(many.variance) > 0.0 and float(many.train_mse) == 0.0


def _lm_record(rho_next, probe_mse, baseline):
    """A one-lane `lm.LMTrajectory` and `lm.LMCurves` over ``len(rho_next)`` snapshots."""
    S = len(rho_next)
    G, A, layers = 1, 4, 2
    zeros = np.zeros((G, S))
    trajectory = lm.LMTrajectory(
        gammas=np.array([1.0]),
        steps=np.arange(S) * 10,
        tracked=np.arange(A),
        loss=zeros + 2.0,
        validation_loss=zeros + 2.5,
        W_E=np.zeros((G, S, A, 3)),
        W_U=np.zeros((G, S, A, 3)),
        value_path=np.zeros((G, S, layers, A, 3)),
        S_attention_signature=np.zeros((G, S, layers, A, A)),
        final_W_E=np.zeros((G, A, 3)),
        diverged_step=np.array([-1]),
    )
    curves = lm.LMCurves(
        rho_next=np.asarray([rho_next]),
        rho_previous=zeros + 0.1,
        rho_attention=np.zeros((G, S, layers)),
        probe_mse=np.asarray([probe_mse]),
        probe_corr=zeros + 0.5,
        probe_baseline_mse=np.asarray([baseline]),
        probe_constant_mse=np.asarray([baseline]),
        probe_slope=zeros + 1.0,
        loss=trajectory.loss,
        validation_loss=trajectory.validation_loss,
    )
    return trajectory, curves


def test_lm_summary_reads_the_shape_after_the_peak_and_the_trained_probe_only():
    """`lm_study.summarize`: the minimum after the peak ignores the start (below it), and the
    probe's MSE ratios are over the trained snapshots (step 0, the untrained null, excluded)."""
    from ctx_staircase import lm_study

    rho = [-0.2, 0.3, 0.9, 0.6, 0.7]
    trajectory, curves = _lm_record(rho, [9.0, 0.2, 0.4, 0.6, 0.8], [1.0] * 5)
    summary = lm_study.summarize(trajectory, curves)["1"]
    assert summary["rho_next_start"] == -0.2 and summary["rho_next_peak"] == 0.9
    assert summary["rho_next_peak_step"] == 20 and summary["rho_next_final"] == 0.7
    assert summary["rho_next_min_after_peak"] == 0.6
    assert summary["probe_mse_ratio_median"] == pytest.approx(0.5)
    assert summary["probe_mse_ratio_max"] == pytest.approx(0.8)
    assert summary["probe_mse_ratio_init"] == 9.0


def test_lm_summary_reads_each_curve_at_its_own_extremes():
    """rho_previous's peak is its own maximum (not its value at rho_next's peak) and its final
    value its last; the attention's early maximum is over the first quarter of the snapshots
    (at least two), per layer."""
    from ctx_staircase import lm_study

    trajectory, curves = _lm_record([0.1, 0.9, 0.5, 0.4], [0.5] * 4, [1.0] * 4)
    rho_attention = np.zeros((1, 4, 2))
    rho_attention[0, :, 0] = [0.3, 0.6, 0.9, 0.1]  # its maximum after the first two snapshots
    rho_attention[0, :, 1] = [0.7, 0.2, 0.0, 0.0]
    curves = curves._replace(
        rho_previous=np.array([[0.2, 0.1, 0.8, 0.3]]), rho_attention=rho_attention
    )
    summary = lm_study.summarize(trajectory, curves)["1"]
    assert summary["rho_next_peak_step"] == 10
    assert summary["rho_previous_peak"] == 0.8 and summary["rho_previous_final"] == 0.3
    assert summary["rho_attention_early_max"] == [0.6, 0.7]


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (planted-bug checked, tests/README.md)


def test_most_frequent_takes_the_top_counts_breaking_ties_by_the_smaller_id():
    windows = np.array([[1, 1, 1, 3], [3, 3, 2, 2], [4, 4, 0, 4]])
    # counts: id 0 x1, 1 x3, 2 x2, 3 x3, 4 x3, 5 x0
    assert lm.most_frequent(windows, 6, 1).tolist() == [1]
    assert lm.most_frequent(windows, 6, 3).tolist() == [1, 3, 4]
    assert lm.most_frequent(windows, 6, 4).tolist() == [1, 2, 3, 4]
    # a count beyond the tokens present fills with the absent ids, smallest first
    assert lm.most_frequent(windows, 6, 6).tolist() == [0, 1, 2, 3, 4, 5]


def test_most_frequent_agrees_with_a_brute_force_ranking():
    rng = np.random.default_rng(3)
    windows = rng.integers(0, 9, size=(40, 5)) % 6  # ids 0..5 with many ties
    counts = {v: int(np.sum(windows == v)) for v in range(12)}
    for count in (1, 3, 5, 8):
        ranked = sorted(counts, key=lambda v: (-counts[v], v))[:count]
        assert lm.most_frequent(windows, 12, count).tolist() == sorted(ranked)


def test_category_purity_looks_past_each_word_itself():
    """Each word's nearest *other* word: two categories whose words sit each next to a word of
    the other category give purity 0 (counting the word itself would give 1); on random
    vectors, the share a brute-force loop over pairs of distinct words counts."""
    crossed = {
        "a": np.array([[1.0, 0.0], [0.0, 1.0]]),
        "b": np.array([[1.0, 0.01], [0.01, 1.0]]),
    }
    assert semantics.category_purity(crossed) == 0.0
    rng = np.random.default_rng(3)
    groups = {name: rng.normal(size=(size, 3)) for name, size in (("a", 4), ("b", 3), ("c", 5))}
    words = [(name, v / np.linalg.norm(v)) for name, vs in groups.items() for v in vs]
    same = 0
    for i, (name, v) in enumerate(words):
        others = [(float(v @ u), other) for j, (other, u) in enumerate(words) if j != i]
        same += max(others)[1] == name
    assert semantics.category_purity(groups) == pytest.approx(same / len(words), abs=1e-12)


def test_eligibility_counts_predicting_positions_only():
    """A token is eligible when it occurs ``min_count`` times as a predicting position (module
    docstring): every position but the stream's last. Token 5 occurs twice, once as the final
    token, so one transition: not eligible at min_count 2; ranked by that count, ties by id."""
    stream = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5, 5]
    assert lm.eligible_tokens(stream, None, count=10, min_count=2).tolist() == [1, 2, 3, 4]
    assert lm.eligible_tokens(stream, None, count=10, min_count=1).tolist() == [1, 2, 3, 4, 5]


def test_lm_optimizer_is_adamw_with_b2_0_95_on_the_warmup_cosine_schedule():
    """Three updates of `lm.optimizer` equal AdamW written out by hand (b1 0.9, b2 0.95, eps
    1e-8, decoupled decay of matrices only) at the warm-up-cosine learning rates."""
    import optax as _optax

    config = lm.LMConfig(steps=15, snapshot_every=5, lr=0.1, warmup_fraction=0.1, min_lr_ratio=0.1)
    params = {"W": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "out_norm": jnp.array([1.0, 2.0])}
    grads = [jax.tree.map(lambda p, k=k: jnp.sin(p * (k + 1)), params) for k in range(3)]
    rate = _optax.warmup_cosine_decay_schedule(0.0, 0.1, 2, 15, 0.01)  # round(1.5) = 2
    tx = lm.optimizer(config)
    state, got = tx.init(params), params
    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    want = params
    for t, g in enumerate(grads, start=1):
        with jax.numpy_dtype_promotion("standard"):  # optax mixes its int32 count with floats
            updates, state = tx.update(g, state, got)
            lr = float(rate(jnp.asarray(t - 1, dtype=jnp.int32)))  # float32, as in optax
        got = _optax.apply_updates(got, updates)
        m = jax.tree.map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
        v = jax.tree.map(lambda v_, g_: 0.95 * v_ + 0.05 * g_**2, v, g)
        want = {
            name: want[name]
            - lr
            * (
                (m[name] / (1 - 0.9**t)) / (jnp.sqrt(v[name] / (1 - 0.95**t)) + 1e-8)
                + (config.weight_decay * want[name] if name == "W" else 0.0)
            )
            for name in want
        }
    for name in params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------------
# lines the default suite never ran (tests/README.md, "Tests for lines the default suite never
# ran"): `lm_study.train_and_measure` and the two figures, read back from the drawn artists


def test_train_and_measure_is_train_lm_then_its_signatures_then_its_metrics(corpus, run):
    from ctx_staircase import lm_study

    trajectory, signature = run
    got = lm_study.train_and_measure(corpus, TINY, gammas=(1.0, 0.5), seed=1, probe_steps=20)
    np.testing.assert_array_equal(got[0].W_E, trajectory.W_E)
    np.testing.assert_array_equal(got[0].tracked, trajectory.tracked)
    for name in signature._fields:
        np.testing.assert_array_equal(getattr(got[1], name), getattr(signature, name), name)
    expected = lm.lm_metrics(trajectory, signature, seed=1, probe_steps=20)
    for name in expected._fields:
        np.testing.assert_allclose(getattr(got[2], name), getattr(expected, name), err_msg=name)


def test_lm_curves_figure_draws_each_curve_of_the_record():
    import matplotlib.pyplot as plt

    from ctx_staircase import lm_study, plots

    trajectory, curves = _lm_record([0.1, 0.9, 0.5, 0.4], [2.0, 1.0, 0.5, 0.25], [4.0] * 4)
    rho_attention = np.stack([np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.5, 0.6, 0.7, 0.8])], -1)
    curves = curves._replace(
        rho_previous=np.array([[0.2, 0.1, 0.8, 0.3]]),
        rho_attention=rho_attention[None],
        probe_constant_mse=np.array([[8.0, 8.0, 5.0, 1.0]]),
        loss=np.array([[3.0, 2.0, 1.5, 1.0]]),
        validation_loss=np.array([[3.5, 2.5, 2.0, 1.8]]),
    )
    fig = lm_study.curves_figure(trajectory, curves, "a title")
    try:
        assert fig.get_suptitle() == "a title"
        axes = fig.axes
        assert len(axes) == 5

        def ys(ax):
            return [np.asarray(line.get_ydata(), dtype=float).tolist() for line in ax.lines]

        assert ys(axes[0]) == [[0.1, 0.9, 0.5, 0.4]]
        assert ys(axes[1]) == [[0.2, 0.1, 0.8, 0.3]]
        assert ys(axes[2]) == [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]]  # one per layer
        # the probe's MSE over the best constant's (4), over the training mean's, the line at 1
        assert ys(axes[3]) == [[0.5, 0.25, 0.125, 0.0625], [0.25, 0.125, 0.1, 0.25], [1.0, 1.0]]
        assert ys(axes[4]) == [[3.0, 2.0, 1.5, 1.0], [3.5, 2.5, 2.0, 1.8]]
        for ax in axes:
            assert ax.get_xscale() == "symlog" and ax.get_xlabel() == plots.STEP
            np.testing.assert_array_equal(ax.lines[0].get_xdata(), trajectory.steps)
            assert ax.lines[0].get_color() == plots.gamma_colour(1.0)
        assert [t.get_text() for t in axes[2].get_legend().get_texts()] == [
            "$\\gamma$=1, layer 0",
            "$\\gamma$=1, layer 1",
        ]
    finally:
        plt.close(fig)


def test_semantic_figure_shows_the_pca_of_each_word_group(corpus):
    import matplotlib.pyplot as plt

    from ctx_staircase import lm_study

    rng = np.random.default_rng(0)
    V = corpus.vocab_size
    phi, W_E = rng.random((V, 6)), rng.normal(size=(V, 5))
    fig = lm_study.semantic_figure(phi, W_E, corpus.vocabulary)
    try:
        axes = np.asarray(fig.axes).reshape(2, 4)
        for row, (vectors, kind) in enumerate(((phi, "signature"), (W_E, "embedding"))):
            panels = ("numbers", "weekdays", "months", "categories")
            for ax, panel in zip(axes[row], panels, strict=True):
                groups = lm_study.CATEGORIES if panel == "categories" else (panel,)
                ids = np.concatenate([text.word_group_ids(corpus.vocabulary, g) for g in groups])
                scores = np.asarray(metrics.pca(vectors[ids].astype(np.float64), 2).scores)
                assert ax.get_title() == f"{kind}: {panel}"
                np.testing.assert_allclose(ax.collections[0].get_offsets(), scores, atol=1e-12)
                assert [t.get_text() for t in ax.texts] == corpus.vocabulary.decode(ids)
                if panel == "categories":  # coloured by category, no line
                    sizes = [len(text.BUILTIN_GROUPS[g]) for g in groups]
                    colours = np.repeat(np.arange(3), sizes)
                    np.testing.assert_array_equal(ax.collections[0].get_array(), colours)
                    assert not ax.lines
                    continue
                x = np.asarray(ax.lines[0].get_xdata())
                if panel == "numbers":  # joined in order, open
                    np.testing.assert_allclose(x, scores[:, 0])
                else:  # a cycle: back to the first word
                    np.testing.assert_allclose(x, [*scores[:, 0], scores[0, 0]])
    finally:
        plt.close(fig)


def test_curve_lists_are_the_curves_to_five_decimals_with_steps_and_gammas():
    from ctx_staircase import lm_study

    trajectory, curves = _lm_record([0.123456789, 0.5, -0.333333333], [1.0] * 3, [3.0] * 3)
    lists = lm_study.curve_lists(trajectory, curves)
    assert set(lists) == {"steps", "gammas", *curves._fields}
    assert lists["steps"] == [0, 10, 20] and lists["gammas"] == [1.0]
    assert lists["rho_next"] == [[0.12346, 0.5, -0.33333]]
    assert lists["rho_attention"] == [[[0.0, 0.0]] * 3]  # [G, S, layers] kept nested
    assert lists["validation_loss"] == [[2.5, 2.5, 2.5]]
    json.dumps(lists)  # plain JSON
