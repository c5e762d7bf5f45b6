"""The reproduction machinery of theory/regimes.md: regimes, null controls, verdicts, the report."""

import dataclasses

import numpy as np
import pytest

from ctx_staircase import tasks
from ctx_staircase.experiments import Claim, report, verdict
from ctx_staircase.experiments import regime as regimes

# ------------------------------------------------------------------------------------ verdicts


@pytest.mark.parametrize(
    "passed,null_passed,expected",
    [
        (True, False, "pass"),
        (True, None, "pass"),
        (True, True, "vacuous"),  # the null meets the criterion too: the pass proves nothing
        (False, True, "FAIL"),
        (False, False, "FAIL"),
        (None, True, "—"),
    ],
)
def test_verdict_marks_a_pass_whose_null_passes_as_vacuous(passed, null_passed, expected):
    claim = Claim("§8.3", "c", "m", "k", passed, null="init: x", null_passed=null_passed)
    assert verdict(claim) == expected
    assert verdict(dataclasses.asdict(claim)) == expected


def test_claim_kind_is_checked():
    with pytest.raises(ValueError, match="kind"):
        Claim("§8.3", "c", "m", "k", True, kind="headline")


# ------------------------------------------------------------------------------------- regimes


def test_regime_grid_names_and_primary():
    assert len(regimes.ALL) == 6 and len({r.name for r in regimes.ALL}) == 6
    assert regimes.PRIMARY == regimes.Regime("gd", "wide") and regimes.PRIMARY.primary
    for regime in regimes.ALL:
        assert regimes.parse(regime.name) == regime
    assert regimes.parse(None) == regimes.PRIMARY
    with pytest.raises(ValueError, match="regime"):
        regimes.parse("sgd-huge")
    with pytest.raises(ValueError, match="optimizer"):
        regimes.Regime("rmsprop", "wide")
    with pytest.raises(ValueError, match="vocab"):
        regimes.Regime("gd", "tiny")


def test_regime_vocabulary_and_shared_minimum():
    wide, minimal = regimes.Regime("gd", "wide"), regimes.Regime("gd", "minimal")
    assert minimal.make("mod", N=40).vocab_size == 41
    assert wide.make("mod", N=40).vocab_size == 82
    # Fig. 2: one shared V for add, sub and mul, twice mul's minimal vocabulary
    V_mul = tasks.make("mul", N=20).vocab_size
    assert {wide.make(t, N=20, minimal=V_mul).vocab_size for t in ("add", "sub", "mul")} == {802}


def test_regime_train_configs():
    ds = tasks.make("add", N=10)  # n = 100
    gd = regimes.Regime("gd", "wide").train_config(ds, epochs=50, snapshots=(0, 10, 50))
    assert (gd.optimizer, gd.lr, gd.steps, gd.batch_size) == ("gd", 1.0, 50, None)
    assert gd.snapshots == (0, 10, 50)
    adam = regimes.Regime("adam", "wide").train_config(ds, epochs=50, adam_lr=1e-2)
    assert (adam.optimizer, adam.lr, adam.steps, adam.batch_size) == ("adam", 1e-2, 50, None)
    mini = regimes.Regime("adam_minibatch", "minimal")
    config = mini.train_config(ds, epochs=50, snapshots=(0, 10, 50))
    per = regimes.MINIBATCHES_PER_EPOCH
    assert config.steps == 50 * per and config.batch_size == -(-100 // per)
    assert config.snapshots == (0, 10 * per, 50 * per)
    np.testing.assert_array_equal(mini.epochs_of(config.snapshots), [0, 10, 50])


def test_shuffled_labels_keep_the_marginal_and_break_the_relation():
    ds = tasks.make("add", N=12)
    null = regimes.shuffled_labels(ds, seed=0)
    np.testing.assert_array_equal(np.sort(null.labels), np.sort(ds.labels))
    np.testing.assert_array_equal(null.tokens, ds.tokens)
    assert null.vocab_size == ds.vocab_size
    assert np.mean(null.labels == ds.tokens.sum(axis=1)) < 0.2  # add's rule no longer holds
    np.testing.assert_array_equal(regimes.shuffled_labels(ds, seed=0).labels, null.labels)


# -------------------------------------------------------------------------------------- report


def _record(name, claims, figures=None):
    return {
        "name": name,
        "title": name.upper(),
        "seconds": 1.0,
        "full": False,
        "claims": [dataclasses.asdict(c) for c in claims],
        "figures": figures or {"main": f"figures/{name}.png"},
        "config": {},
        "environment": {"packages": {"jax": "x", "flax": "y"}},
    }


def test_report_headline_counts_only_paper_claims_and_sections_split_by_kind():
    records = [
        _record(
            "figA",
            [
                Claim("§8.3", "paper pass", "0.95", ">= 0.9", True, null_passed=False),
                Claim("§8.3", "paper vacuous", "0.01", "JSD <= 0.05", True, null_passed=True),
                Claim("§8.4", "paper fail", "0.5", ">= 0.9", False, note="because 0.5"),
                Claim("§8.5 [R]", "project pass", "x", "y", True, kind="project"),
                Claim("beyond", "beyond fail", "x", "y", False, kind="beyond"),
            ],
        )
    ]
    text = report.render(records)
    headline = next(line for line in text.splitlines() if line.startswith("**The paper"))
    assert "1 pass, 1 fail, 1 vacuous" in headline
    assert "Project-defined claims: 1 pass" in headline and "Beyond the paper: 1 fail" in headline
    assert "## Claims the paper makes: 1 pass, 1 fail, 1 vacuous" in text
    assert "*vacuous*" in text and "because 0.5" in text


def test_report_renders_the_regime_table():
    cells = {
        r.name: {"verdict": "pass" if r.optimizer == "gd" else "FAIL", "measured": "v", "null": ""}
        for r in regimes.ALL
    }
    study = _record("regime_study", [])
    study["numbers"] = {
        "regimes": {r.name: r.label for r in regimes.ALL},
        "primary": regimes.PRIMARY.name,
        "rows": [
            {"experiment": "figA", "item": "§8.3", "claim": "c", "kind": "paper", "cells": cells}
        ],
    }
    text = report.render([study, _record("figA", [Claim("§8.3", "c", "v", "k", True)])])
    assert "## Regime study" in text and "(**primary**)" in text
    row = next(line for line in text.splitlines() if line.startswith("| figA | §8.3: c"))
    assert row.count("**pass**") == 2 and row.count("**FAIL**") == 4


# ---------------------------------------------------------------------------- theory's null


def test_compare_scores_the_nothing_moves_null_on_the_same_window():
    from ctx_staircase import comparison

    ds = tasks.make("add", N=4)
    rng = np.random.default_rng(0)
    W0, D, U = (1e-3 * rng.standard_normal((ds.vocab_size, 8)) for _ in range(3))
    ts = np.linspace(0.0, 10.0, 11)
    W_E = W0 + ts[:, None, None] * D  # never escapes: the window is the first half of ts
    sim = comparison.WeightTrajectory(ts, W_E, np.broadcast_to(U, W_E.shape))
    out = comparison.compare(sim, sim, ds, coefficients=(1.0,))
    assert out.weight_rel_error_max == 0.0  # a theory equal to training
    before = ts <= 5.0
    expected = max(np.linalg.norm(W - W0) / np.linalg.norm(W) for W in W_E[before])
    assert out.null_weight_rel_error_max == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------- fig3's measurement


def test_fig3_measures_the_probe_at_init_and_at_each_probe_epoch():
    """fig3's probe null is a fit at epoch 0 (the untrained init), its curve a fit at each probe
    epoch, and rho_0, the off-diagonal MSE and the checkpoints come from the right snapshots."""
    from types import SimpleNamespace

    from ctx_staircase import geometry, metrics
    from ctx_staircase.experiments import fig3_staircase as fig3

    ds = regimes.PRIMARY.make("add", N=6)
    sig = fig3.signatures_of(ds)
    epochs = np.array([0, 10, fig3.EARLY, 500, fig3.LATE])
    rng = np.random.default_rng(3)
    W_E = rng.normal(size=(len(epochs), ds.vocab_size, 8))  # every snapshot independent
    trajectory = SimpleNamespace(
        steps=epochs * regimes.PRIMARY.steps_per_epoch,
        W_E=W_E,
        loss=rng.random(len(epochs)),
        accuracy=rng.random(len(epochs)),
    )
    cfg = {"probe_epochs": [10, 500, fig3.LATE], "probe_seed": 0}
    measured = fig3.measure(sig, trajectory, regimes.PRIMARY, cfg)

    S_emb = np.asarray(geometry.embedding_similarity(W_E, sig["alphas"]))
    fits = [metrics.probe_fit(sig["phi1"], S_emb[s], seed=0) for s in (0, 1, 3, 4)]
    assert measured["init_probe"] == (float(fits[0].heldout_corr), float(fits[0].heldout_mse))
    np.testing.assert_array_equal(measured["probe_corr"], [float(f.heldout_corr) for f in fits[1:]])
    np.testing.assert_array_equal(measured["probe_mse"], [float(f.heldout_mse) for f in fits[1:]])
    np.testing.assert_array_equal(measured["steps"], epochs)
    rho0 = [float(metrics.alignment(S, sig["S_sig0"]).value) for S in S_emb]
    np.testing.assert_allclose(measured["rho0"], rho0, rtol=1e-6)
    offdiag = np.triu_indices(len(sig["alphas"]), k=1)
    mse0 = [np.mean((S[offdiag] - sig["S_sig0"][offdiag]) ** 2) for S in S_emb]
    np.testing.assert_allclose(measured["mse0"], mse0, rtol=1e-6)
    np.testing.assert_array_equal(measured["geometry"][fig3.EARLY]["S"], S_emb[2])
    np.testing.assert_array_equal(measured["geometry"][fig3.LATE]["S"], S_emb[4])
