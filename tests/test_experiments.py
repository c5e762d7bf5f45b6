"""The reproduction machinery of theory/regimes.md: regimes, null controls, verdicts, the report."""

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ctx_staircase import experiments, tasks
from ctx_staircase.experiments import Claim, declarative, report, verdict
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
    with pytest.raises(ValueError, match="failure must be one of"):
        Claim("§8.3", "c", "m", "k", False, failure="unlucky")


@pytest.mark.parametrize("passed,null_passed", [(True, False), (False, False), (True, True)])
def test_a_claim_its_run_cannot_test_is_not_tested_whatever_its_criterion_gave(passed, null_passed):
    claim = Claim("§8.5", "c", "m", "k", passed, null_passed=null_passed, untested="diverged")
    assert verdict(claim) is experiments.Verdict.NOT_TESTED
    assert verdict(dataclasses.asdict(claim)) == "not tested"
    assert experiments.shown(claim) == "not tested: diverged"


def test_a_fail_shows_its_class():
    unclassified = Claim("§8.5", "c", "m", "k", False)
    false = Claim("§8.5", "c", "m", "k", False, failure="false")
    budget = Claim("§8.5", "c", "m", "k", False, failure="budget")
    assert experiments.shown(unclassified) == "FAIL"
    assert experiments.shown(false) == "FAIL (false in this regime)"
    assert experiments.shown(budget) == "FAIL (budget cap reached, still learning)"
    assert verdict(budget) is experiments.Verdict.FAIL
    assert f"{verdict(budget)}" == "FAIL"  # a str: records and tables hold its text
    assert budget.failure is experiments.Failure.BUDGET  # the name is read as the enum
    assert dataclasses.asdict(false)["failure"] == "false"  # and saved as its text


def test_report_headline_counts_not_tested_apart_from_fail_and_fails_by_class():
    """pass / FAIL (by class) / vacuous / not tested: a run that diverged counts as not tested
    and its row gives the reason."""
    claims = [
        Claim("§8.3", "passes", "v", "k", True, null_passed=False),
        Claim("§8.4", "false", "v", "k", False, failure="false"),
        Claim("§8.5", "capped", "v", "k", False, failure="budget"),
        Claim("§8.5", "open", "v", "k", False),
        Claim("§8.6", "blew up", "v", "k", False, untested="the run diverged at step 466"),
    ]
    text = report.render([_record("figA", claims)])
    headline = next(line for line in text.splitlines() if line.startswith("**The paper"))
    counts = "1 pass, 3 fail (1 false in this regime, 1 budget cap, 1 not classified), 1 not tested"
    assert counts in headline, headline
    rows = {
        line.split(" | ")[2]: line.split(" | ")[7]
        for line in text.splitlines()
        if line.startswith("| figA |")
    }
    assert rows == {
        "passes": "pass",
        "false": "**FAIL (false in this regime)**",
        "capped": "**FAIL (budget cap reached, still learning)**",
        "open": "**FAIL**",
        "blew up": "*not tested: the run diverged at step 466*",
    }


def test_fig6_claims_about_a_diverged_runs_end_are_not_tested():
    from ctx_staircase.experiments import fig6_attention

    claims = [Claim("§8.9", "c", "m", "k", False), Claim("Fig. 6I", "d", "m", "k", True)]
    assert fig6_attention.untested_if_diverged(claims, "ok") == claims
    marked = fig6_attention.untested_if_diverged(claims, "diverged at step 444")
    assert [verdict(c) for c in marked] == ["not tested"] * 2
    assert all("diverged at step 444" in c.untested for c in marked)


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
    assert "1 pass, 1 fail (1 not classified), 1 vacuous" in headline
    assert "Project-defined claims: 1 pass" in headline
    assert "Beyond the paper: 1 fail (1 not classified)" in headline
    assert "## Claims the paper makes: 1 pass, 1 fail (1 not classified), 1 vacuous" in text
    assert "*vacuous*" in text and "because 0.5" in text


def test_report_rows_say_whether_each_null_passes():
    """The null-control cell is the null's text and its own result: "(passes)", "(fails)", or
    nothing for a claim whose null was not scored."""
    claims = [
        Claim("§8.3", "scored null passes", "v", "k", True, null="shuffled", null_passed=True),
        Claim("§8.3", "scored null fails", "v", "k", True, null="shuffled", null_passed=False),
        Claim("§8.3", "null not scored", "v", "k", True, null="shuffled"),
    ]
    rows = {
        line.split(" | ")[2]: line.split(" | ")[6]
        for line in report.render([_record("figA", claims)]).splitlines()
        if line.startswith("| figA |")
    }
    assert rows == {
        "scored null passes": "shuffled (passes)",
        "scored null fails": "shuffled (fails)",
        "null not scored": "shuffled",
    }


def test_report_shows_each_theorys_cost_next_to_its_training_and_its_role():
    """One row per theory of each comparison whose record says what it cost: its role, its
    seconds and their ratio to training's; no ratio where training was not measured."""
    record = _record("theoryA", [Claim("theory", "c", "v", "k", True, kind="beyond")])
    record["cost"] = {
        "add": {"simulation": 8.0, "theories": {"closed_form": {"role": "law", "seconds": 0.5}}},
        "mod": {"simulation": None, "theories": {"L1": {"role": "replay", "seconds": 3.0}}},
    }
    text = report.render([record, _record("figA", [Claim("§8.3", "c", "v", "k", True)])])
    rows = [line for line in text.splitlines() if line.startswith("| theoryA |")]
    assert "## What the theories cost" in text
    assert "| theoryA | add | closed_form | law | 0.50 | 8.0 | 0.0625 |" in rows
    assert "| theoryA | mod | L1 | replay | 3.00 | — | — |" in rows
    assert "What the theories cost" not in report.render([_record("figA", [])])


def test_report_sums_the_costs_of_an_experiment_of_many_comparisons_per_theory():
    """Past `report.COST_ROWS` comparisons, one row per theory: the sums over the comparisons,
    their ratio, and the range of the per-comparison ratios."""
    record = _record("gridA", [Claim("theory", "c", "v", "k", True, kind="beyond")])
    cells = report.COST_ROWS + 1
    record["cost"] = {
        f"cell {i}": {
            "simulation": 10.0 * (i + 1),
            "theories": {
                "law": {"role": "law", "seconds": 0.1 * (i + 1)},
                "flow": {"role": "law", "seconds": 1.0},
            },
        }
        for i in range(cells)
    }
    label = f"{cells} comparisons, summed"
    text = report.render([record]).splitlines()
    rows = [line for line in text if line.startswith(f"| gridA | {label} |")]
    total = 10.0 * cells * (cells + 1) / 2
    summed = f"{total:.1f}"
    law = f"| gridA | {label} | law | law | {0.01 * total:.2f} | {summed} |"
    flow = f"| gridA | {label} | flow | law | {cells:.2f} | {summed} |"
    assert rows == [f"{law} 0.01 (each 0.01–0.01) |", f"{flow} 0.0182 (each 0.01–0.1) |"]


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
    counts = next(line for line in text.splitlines() if line.startswith("| pass |"))
    assert counts.count("1 / 1") == 2 and counts.count("0 / 0") == 4  # paper / all claims
    # a claim's kind is its full-size record's: a project claim is no paper claim in any regime
    project = _record("figA", [Claim("§8.3", "c", "v", "k", True, kind="project")])
    counts = next(
        line for line in report.render([study, project]).splitlines() if line.startswith("| pass |")
    )
    assert counts.count("0 / 1") == 2 and "1 / 1" not in counts


# ---------------------------------------------------------------------------- theory's null


def test_compare_scores_the_nothing_moves_null_on_the_same_window():
    from ctx_staircase import comparison
    from ctx_staircase.theory import WeightTrajectory

    ds = tasks.make("add", N=4)
    rng = np.random.default_rng(0)
    W0, D, U = (1e-3 * rng.standard_normal((ds.vocab_size, 8)) for _ in range(3))
    ts = np.linspace(0.0, 10.0, 11)
    W_E = W0 + ts[:, None, None] * D  # never escapes: the window is the first half of ts
    sim = WeightTrajectory(ts, W_E, np.broadcast_to(U, W_E.shape))
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


# ------------------------------------------------------------------- claims from saved numbers


def _claims_of(name: str):
    """How ``name`` scores its claims from a saved record (`results.read_json`)."""
    import importlib

    module = importlib.import_module(f"ctx_staircase.experiments.{name}")
    if hasattr(module, "SPEC"):
        return lambda r: declarative.rescore(module.SPEC, r["numbers"], r["config"])
    if name == "lm_text":
        return lambda r: module.claims(
            r["numbers"]["summary"],
            r["config"]["steps"],
            module.regime(r["config"]["text"], r["config"]["vocab_size"]),
        )
    if name == "attention_departure":
        return lambda r: module.claims(r["numbers"])
    if name == "fig3_staircase":
        return lambda r: module.saved_claims(r["numbers"], r["config"])
    return lambda r: module.claims(r["numbers"], r["config"])


REBUILT = (
    "appc_task4_orders",
    "attention_departure",
    "attention_theory",
    "escape_feedback",
    "fig2_geometry",
    "fig2a_label_laws",
    "fig3_staircase",
    "fig4_frequency",
    "fig5_activation_order",
    "fig6_attention",  # (a)'s claims; (b)'s need the unrounded attention curves
    "fig8_role",
    "fig9_modulus",
    "lm_builtin",
    "lm_text",
    "order1_onset",
    "rb_anchor_tasks",
    "relu_escape",
    "second_plateau",
    "staircase_steps",
    "theory_vs_training",
)


@pytest.mark.parametrize("name", REBUILT)
def test_claims_scored_from_the_saved_numbers_are_the_saved_claims(name):
    """Each claim is a criterion scored on the run's numbers and on its null's: scored again from
    each saved record in sims/results (the full-size one and the regime study's) they give its
    verdicts and texts, so no record keeps a verdict of a criterion since changed. ("The null
    passes" is what a verdict reads of ``null_passed``: a null with no verdict and one that
    fails agree.)"""
    for record in _records(name):
        rebuilt = [dataclasses.asdict(c) for c in _claims_of(name)(record)]
        saved = record["claims"][: len(rebuilt)]
        assert len(rebuilt) == len(saved) > 0
        where = record["regime"], record["quick"]
        for got, want in zip(rebuilt, saved, strict=True):
            for key in ("item", "claim", "measured", "criterion", "note", "kind", "regime", "null"):
                assert got[key] == want[key], (want["claim"], key, where)
            assert got["passed"] == want["passed"], (want["claim"], where)
            assert (got["null_passed"] is True) == (want["null_passed"] is True), want["claim"]


def _records(name: str) -> list[dict]:
    """Every saved record of ``name``: sims/results/NAME.json and the regime study's runs."""
    from pathlib import Path

    from ctx_staircase import results

    saved = Path(__file__).resolve().parents[1] / "sims" / "results"
    paths = [saved / f"{name}.json", *sorted((saved / "regimes").glob(f"{name}__*.json"))]
    records = [results.read_json(p) for p in paths if p.is_file()]
    if not records:
        pytest.skip(f"no saved record of {name}")
    return records


def test_staircase_theory_rows_scored_from_the_saved_numbers_are_the_saved_claims():
    from ctx_staircase.experiments import staircase

    record = _saved("staircase")
    rebuilt = [dataclasses.asdict(c) for c in staircase.theory_rows(*_numbers_config(record))]
    assert [c["item"] for c in rebuilt] == ["theory", "theory", "§8.14"]
    assert rebuilt == record["claims"][-len(rebuilt) :]


def test_saved_theory_runs_read_back_as_the_records_they_were_written_from():
    """`comparison.experiment_from_summary` inverts `experiment_summary` on every saved run."""
    from ctx_staircase import comparison

    runs = [_saved("theory_vs_training")["numbers"], _saved("staircase")["numbers"]["theory"]]
    runs += [_saved("attention_theory")["numbers"][task] for task in ("add", "sub")]
    runs += list(_saved("escape_feedback")["numbers"].values())
    for numbers in runs:
        back = comparison.experiment_summary(comparison.experiment_from_summary(numbers))
        assert _same(back, {k: v for k, v in numbers.items() if k in back})


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (the saved runs have never-escaping lanes)."""
    import json

    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_theory_vs_training_nulls_are_recomputed_from_the_saved_escapes():
    """The constant-escape null divides the mean measured escape by each one; the origin slope
    is the least-squares slope through 0; the static predictor's errors are the comparisons'."""
    from ctx_staircase import comparison
    from ctx_staircase.experiments import theory_vs_training as tvt

    numbers = _saved("theory_vs_training")["numbers"]
    nulls = tvt.null_numbers(comparison.experiment_from_summary(numbers))
    assert nulls == numbers["nulls"]
    measured = np.asarray(numbers["escape"]["simulation"])
    gammas = np.asarray(numbers["escape"]["gamma"])
    np.testing.assert_allclose(nulls["constant_escape_ratio"], measured.mean() / measured)
    assert nulls["origin_escape_slope"] == pytest.approx(
        np.sum(gammas * measured) / np.sum(gammas**2)
    )


def _numbers_config(record: dict) -> tuple[dict, dict]:
    return record["numbers"], record["config"]


def test_staircase_spectrum_numbers_by_hand_and_from_the_saved_spectra():
    """k* is the best frequency k >= 1 (the slice's offset counted back), k_best may be 0; the
    early spectrum is the row of the early epoch."""
    from ctx_staircase.experiments import staircase

    spectrum = np.array([[0.1, 0.2, 0.3], [0.5, 0.4, 0.6], [0.9, 0.1, 0.8]])
    got = staircase.spectrum_numbers(spectrum, [0, 10, 20], 10)
    assert (got["k_best_late"], got["k_star_late"], got["early_epoch"]) == (0, 2, 10)
    np.testing.assert_array_equal(got["early_spectrum"], [0.5, 0.4, 0.6])
    numbers = _saved("staircase")["numbers"]
    for task in ("add", "mod"):
        n = numbers[task]
        again = staircase.spectrum_numbers(n["spectrum"], n["steps"], n["early_epoch"])
        assert again["k_star_late"] == n["k_star_late"] and again["k_best_late"] == n["k_best_late"]
        np.testing.assert_array_equal(again["early_spectrum"], n["early_spectrum"])


def _saved(name: str) -> dict:
    from pathlib import Path

    from ctx_staircase import results

    path = Path(__file__).resolve().parents[1] / "sims" / "results" / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return results.read_json(path)


def test_fig5_learnability_null_is_the_shuffled_boundary_cells():
    """Every cell as §8.7 predicts (K >= L learned, K < L at chance): the run passes, and the
    label-shuffled K = L cells, which learn nothing, fail the same criterion."""
    from ctx_staircase.experiments import fig5_activation_order as fig5

    record = _saved("fig5_activation_order")
    numbers, chance = record["numbers"], record["numbers"]["chance"]
    for cell in numbers["cells"].values():
        cell["max_accuracy"] = 1.0 if cell["K"] >= cell["L"] else chance
    for cell in numbers["null_cells"].values():
        cell["max_accuracy"] = chance
    learnability = declarative.rescore(fig5.SPEC, numbers, record["config"])[0]
    assert (learnability.passed, learnability.null_passed) == (True, False)


def test_attention_departure_task3_null_never_departs():
    """Training and theory depart together: the run passes; the uniform-attention flow, which
    never departs, fails the same criterion."""
    from ctx_staircase.experiments import attention_departure

    numbers = _saved("attention_departure")["numbers"]
    for row in numbers["anchor_parity"].values():
        row.update(trained=100.0, theory=110.0, trained_sign=1, theory_sign=1)
    task3 = attention_departure.claims(numbers)[1]
    assert task3.claim.startswith("Task 3") and (task3.passed, task3.null_passed) == (True, False)


def test_order1_onset_nulls_a_constant_onset_and_a_frozen_model():
    """A heuristic within 10% of spread-out onsets passes while the constant (median) onset
    fails; onsets where C2 = 0.5 predicts none fail while the frozen model, which has none,
    passes; the step-size check has no null verdict."""
    from ctx_staircase.experiments import order1_onset

    record = _saved("order1_onset")
    main, default = record["numbers"]["C2_main"]["rows"], record["numbers"]["C2_default"]["rows"]
    for i, row in enumerate(main):
        row.update(M1_probe=100.0 * (i + 1), P3_heuristic=110.0 * (i + 1), ratio_P3_M1=1.1)
    default[0]["S1_trained_weights"] = 50.0
    claims = {c.item: c for c in order1_onset.claims(record["numbers"], record["config"])}
    heuristic, no_onset = claims["beyond / O5"], claims["beyond / C2=0.5"]
    assert (heuristic.passed, heuristic.null_passed) == (True, False)
    assert (no_onset.passed, no_onset.null_passed) == (False, True)
    robust = claims["beyond / robustness"]
    assert robust.null_passed is None and robust.null.startswith("none natural: ")


def test_fig9_jump_is_no_lower_bound_with_a_censored_non_divisor():
    """A large log-jump with a censored M ∤ N run is an upper bound at most: it fails, and each
    relabelling is scored by the same rule."""
    from ctx_staircase.experiments import fig9_modulus as fig9

    def entry(divides, hit):
        return SimpleNamespace(divides=divides, epochs_to_95=[hit], censored=[hit is None])

    per_M = {"4": entry(True, 5000), "5": entry(True, 5000), "7": entry(False, 100)}
    speeds = fig9.Speeds.of({**per_M, "9": entry(False, None)}, max_epochs=6000)
    assert fig9.log_jump(speeds.log_epochs, speeds.divides) > fig9.MIN_JUMP
    assert not speeds.jumps(speeds.divides)
    exact = fig9.Speeds.of({**per_M, "9": entry(False, 200)}, max_epochs=6000)
    assert exact.jumps(exact.divides) and not exact.jumps(np.array([True, False, True, False]))


def test_fig4_own_match_without_a_testable_seed_has_no_verdict_on_either_side():
    """No seed with a dominant k*: the run and its null are both untestable, not one failing."""
    from ctx_staircase.experiments import fig4_frequency as fig4

    record = _saved("fig4_frequency")
    for seed in record["numbers"]["mod/relu"]["seeds"]:
        seed["rho_k_star"] = 0.1
    claims = declarative.rescore(fig4.SPEC, record["numbers"], record["config"])
    own = next(c for c in claims if c.item == "App. D")
    assert own.passed is None and own.null_passed is None and own.note == "not testable"


# ------------------------------------------------------------------ measures and nulls by hand


def test_fig9_censored_runs_bound_the_jump_from_the_side_they_are_on():
    """Censored runs (a lower bound on their epochs) among M | N can only raise the jump (a lower
    bound); among the others only lower it (an upper bound); in both groups, no bound."""
    from ctx_staircase.experiments import fig9_modulus as fig9

    def speeds(censored):
        return fig9.Speeds.of(
            {str(M): SimpleNamespace(divides=M in (4, 5), epochs_to_95=[None if M in censored
                          else 99], censored=[M in censored]) for M in (3, 4, 5, 7)},
            max_epochs=6000,
        )  # fmt: skip

    assert speeds(()).bound().startswith("exact")
    assert speeds((4,)).bound().startswith("a lower bound")
    assert speeds((7,)).bound().startswith("an upper bound")
    assert speeds((4, 7)).bound().startswith("no bound")


def test_fig5_top_share_is_the_largest_eigenvalue_over_the_trace():
    from ctx_staircase.experiments import fig5_activation_order as fig5

    n = 6
    assert fig5.top_share(np.ones((n, n))) == pytest.approx(1.0)  # rank one
    assert fig5.top_share(np.eye(n)) == pytest.approx(1 / n)
    S = np.diag([3.0, 1.0, 0.5, 0.5])
    assert fig5.top_share(S) == pytest.approx(0.6)


def test_fig5_loss_rises_counts_the_intervals_whose_loss_rose_beyond_rounding():
    from ctx_staircase.experiments import fig5_activation_order as fig5

    rise = fig5.LOSS_RISE
    assert fig5.loss_rises([2.0, 1.5, 1.5, 1.0]) == 0  # flat and falling
    assert fig5.loss_rises([2.0, 2.0 * (1 + 0.5 * rise), 1.0]) == 0  # within rounding
    assert fig5.loss_rises([2.0, 1.0, 1.0 * (1 + 2 * rise), 1.2, 0.5, 0.6]) == 3
    assert fig5.loss_rises([1.0]) == 0


def test_fig5_learnability_note_names_the_cells_whose_gd_loss_rose():
    """A cell whose full-batch GD loss rose between snapshots is beyond the stability edge, and
    the claim says its accuracy is a chaotic statistic; under Adam a rising loss says nothing."""
    from ctx_staircase.experiments import fig5_activation_order as fig5

    record = _saved("fig5_activation_order")
    numbers, config = record["numbers"], dict(record["config"])
    for cell in numbers["cells"].values():
        cell["loss_rises"] = 0
    numbers["cells"]["L3_K1"]["loss_rises"] = 2
    note = declarative.rescore(fig5.SPEC, numbers, config)[0].note
    assert "The full-batch loss rose between snapshots in L3K1:" in note and "chaotic" in note
    config["regime"] = "adam-wide"
    assert "rose between snapshots" not in declarative.rescore(fig5.SPEC, numbers, config)[0].note


def test_unordered_label_shuffle_gives_each_input_multiset_one_label():
    """The unordered null permutes labels across the input multisets: ``(a, b)`` and ``(b, a)``
    keep one shared label, and the multiset's label marginal is kept."""
    ds = tasks.make("add", N=7)
    null = regimes.shuffled_labels(ds, seed=1, unordered=True)
    key = np.sort(ds.tokens, axis=1)
    label_of = {}
    for row, label in zip(map(tuple, key), null.labels.tolist(), strict=True):
        assert label_of.setdefault(row, label) == label
    _, first = np.unique(key, axis=0, return_index=True)  # one sample per multiset
    np.testing.assert_array_equal(np.sort(null.labels[first]), np.sort(ds.labels[first]))
    assert np.mean(null.labels == ds.labels) < 0.3


def test_staircase_epochs_scale_with_a_shorter_horizon_and_the_early_phase_ends_at_half():
    """On a run shorter than the paper's 1200 epochs, ``EARLY`` scales by the horizon's ratio
    to the nearest snapshot; the early phase ends at the first snapshot with accuracy >= 0.5."""
    from ctx_staircase.experiments import staircase_claims as sc

    steps = np.arange(0, 601, 10)
    d = {"steps": steps, "accuracy": np.minimum(steps / 400, 1.0)}
    assert sc.early_epoch(d) == round(sc.EARLY * 600 / sc.HORIZON / 10) * 10
    assert sc.early_epoch({"steps": np.arange(0, 1201, 10)}) == sc.EARLY
    assert sc.end_of_early_phase(d) == 200  # accuracy exactly 0.5 there
    assert sc.end_of_early_phase({**d, "accuracy": np.zeros(steps.size)}) == 600


def test_order1_onset_up_crossing_interpolates_linearly_after_start():
    from ctx_staircase.experiments import order1_onset

    ts, values = [0.0, 1.0, 2.0, 3.0], [0.0, 0.2, 1.0, 0.0]
    assert order1_onset.up_crossing(ts, values, 0.4) == pytest.approx(1.25)
    assert order1_onset.up_crossing(ts, values, 0.1) == pytest.approx(0.5)
    assert order1_onset.up_crossing(ts, values, 0.1, start=1.5) == 2.0  # already above at 1.5
    assert order1_onset.up_crossing(ts, values, 2.0) is None


def test_order1_onset_within_needs_every_ratio_and_at_least_one():
    from ctx_staircase.experiments import order1_onset

    assert order1_onset.within([1.04, 0.96], 0.05)
    assert not order1_onset.within([1.04, 0.9], 0.05)
    assert not order1_onset.within([1.0, None], 0.05)
    assert not order1_onset.within([], 0.05)  # nothing measured is no pass


def test_order1_onset_guarded_freezes_the_flow_once_the_embedding_reaches_the_cap():
    """The guarded field is the field while max |W_E| < cap and zero from there on, whatever
    W_U holds."""
    import jax.numpy as jnp

    from ctx_staircase.experiments import order1_onset

    def field(t, y, args):
        return {k: 2.0 * v + t for k, v in y.items()}

    guarded = order1_onset.guarded(field, 3.0)
    below = {"W_E": jnp.array([[1.0, -2.9]]), "W_U": jnp.array([[50.0, -7.0]])}
    at = {"W_E": jnp.array([[1.0, -3.0]]), "W_U": jnp.array([[0.1, 0.2]])}
    moved = guarded(0.5, below, None)
    for k in below:
        np.testing.assert_array_equal(moved[k], 2.0 * below[k] + 0.5)
    frozen = guarded(0.5, at, None)
    for k in at:
        np.testing.assert_array_equal(frozen[k], np.zeros_like(at[k]))


def test_minmax_superposition_sums_the_rows_of_the_inputs_tokens():
    """``sum_s phi_{x_s}`` by hand; on minmax each exact zero-order row sums to 1, so each
    input's scores sum to L."""
    from ctx_staircase import signatures
    from ctx_staircase.experiments import minmax

    rows = np.arange(12.0).reshape(4, 3) ** 2
    tokens = np.array([[0, 1, 3], [2, 2, 2]])
    np.testing.assert_array_equal(
        minmax.superposition(rows, tokens), [rows[0] + rows[1] + rows[3], 3 * rows[2]]
    )
    ds = tasks.make("minmax", N=5)
    scores = minmax.superposition(signatures.label_signature(ds, 0), ds.tokens)
    np.testing.assert_allclose(scores.sum(axis=1), ds.L, rtol=1e-12)


def test_order1_onset_drive_ratio_is_the_ratio_of_root_mean_square_drives():
    """R(t) (eq. O2): RMS over the tokens of the order-1 drive's norm over that of order 0,
    from `flows.order_contributions` written out here."""
    from ctx_staircase import flows, signatures
    from ctx_staircase.experiments import order1_onset

    ds = tasks.make("add", N=4)
    sigs = signatures.signature_set(ds, 1)
    rng = np.random.default_rng(2)
    W_E, W_U = rng.normal(size=(2, 3, ds.vocab_size, 5))
    tokens = ds.groups["numbers"]
    coefficients = (1.0, 0.5)
    ratio = order1_onset.drive_ratio(W_E, W_U, sigs, coefficients, tokens)
    for t in range(3):
        c = np.asarray(flows.order_contributions(W_E[t], W_U[t], sigs, coefficients))[:, tokens]
        rms = np.sqrt(np.mean(np.sum(c**2, axis=-1), axis=-1))
        assert ratio[t] == pytest.approx(rms[1] / rms[0], rel=1e-10)


def test_fig8_fixed_embeddings_have_number_rows_of_mean_norm_one():
    from ctx_staircase.experiments import fig8_role

    ds = tasks.make("mod", N=6)
    numbers = ds.groups["numbers"]
    for E in fig8_role.signature_embedding(ds, d=8, seed=3):
        assert E.shape == (ds.vocab_size, 8)
        assert np.linalg.norm(E[numbers], axis=1).mean() == pytest.approx(1.0, rel=1e-12)
        others = np.setdiff1d(np.arange(ds.vocab_size), numbers)
        np.testing.assert_array_equal(E[others], 0.0)


def test_selector_target_is_the_position_of_the_anchor_the_selector_names():
    """The selector task's target is one position per sample: the A-anchor's when the selector
    is 61, the B-anchor's when it is 62, and the label is that anchor's parity."""
    from ctx_staircase.experiments import attention_departure

    ds, target = attention_departure.selector_parity(n=300, L=6, seed=4)
    assert target.shape == ds.tokens.shape and np.all(target.sum(axis=1) == 1)
    chosen = ds.tokens[target]  # the targeted token of each sample
    selector = ds.tokens[:, -1]
    assert np.all(np.isin(chosen[selector == 61], ds.groups["anchors_a"]))
    assert np.all(np.isin(chosen[selector == 62], ds.groups["anchors_b"]))
    np.testing.assert_array_equal(ds.labels, chosen % 2)
    assert set(selector.tolist()) == {61, 62}


# --------------------------------------------------------------------------------------------
# direct tests of the experiments' public helpers (planted-bug checked, tests/README.md)


def test_ready_time_is_the_first_time_at_or_above_the_level():
    from ctx_staircase.experiments import order1_onset

    ts, rho0 = np.array([0.0, 10.0, 20.0, 30.0]), np.array([0.1, 0.5, 0.7, 0.5])
    assert order1_onset.ready_time(ts, rho0, 0.5) == 10.0
    assert order1_onset.ready_time(ts, rho0, 0.6) == 20.0
    assert order1_onset.ready_time(ts, rho0, 0.75) is None


def test_rho0_departure_interpolates_the_last_lasting_drop_after_start():
    from ctx_staircase.experiments import order1_onset

    ts = np.arange(6.0)
    # from start = 1 the running maximum is 1.0 (the 5.0 at t = 0 is before start); rho_0
    # falls 0.25 then 0.5 below it, so the gap rises through drop = 0.125 halfway in [3, 4]
    rho0 = np.array([5.0, 0.5, 1.0, 1.0, 0.75, 0.5])
    assert order1_onset.rho0_departure(ts, rho0, 1.0, 0.125) == 3.5
    # a transient dip that recovers by the end is no departure
    recovered = np.array([5.0, 0.5, 1.0, 0.5, 0.75, 1.0])
    assert order1_onset.rho0_departure(ts, recovered, 1.0, 0.125) is None
    # the last drop counts, not the first: the dip at t = 2 recovers at t = 3
    dips = np.array([5.0, 1.0, 0.5, 1.0, 1.0, 0.5])
    assert order1_onset.rho0_departure(ts, dips, 1.0, 0.25) == 4.5


def test_ratio_or_none():
    from ctx_staircase.experiments import order1_onset

    assert order1_onset.ratio_or_none(6.0, 3.0) == 2.0
    assert order1_onset.ratio_or_none(0.0, 3.0) == 0.0
    assert order1_onset.ratio_or_none(None, 3.0) is None
    assert order1_onset.ratio_or_none(6.0, None) is None


@pytest.mark.parametrize(("n", "k"), [(5, 2), (4, 0), (4, 4), (6, 3)])
def test_relabellings_are_every_k_subset_once(n, k):
    import itertools

    from ctx_staircase.experiments import fig9_modulus

    rows = fig9_modulus.relabellings(n, k)
    assert rows.shape == (math.comb(n, k), n) and rows.dtype == bool
    brute = {bits for bits in itertools.product([False, True], repeat=n) if sum(bits) == k}
    assert {tuple(row) for row in rows.tolist()} == brute


def test_weighted_mod_labels_every_triple_by_its_weighted_sum():
    from ctx_staircase.experiments import escape_feedback

    ds = escape_feedback.weighted_mod()
    assert ds.tokens.shape == (343, 3) and ds.vocab_size == 15
    expected = {}
    for a in range(1, 8):
        for b in range(1, 8):
            for c in range(1, 8):
                expected[(a, b, c)] = 8 + (a + 2 * b + 4 * c) % 7
    got = {tuple(x): int(y) for x, y in zip(ds.tokens.tolist(), ds.labels, strict=True)}
    assert got == expected
    assert ds.groups["numbers"].tolist() == list(range(1, 8))


def test_max3_labels_every_triple_by_its_maximum():
    from ctx_staircase.experiments import escape_feedback

    ds = escape_feedback.max3()
    assert ds.tokens.shape == (512, 3) and ds.vocab_size == 17
    got = {tuple(x): int(y) for x, y in zip(ds.tokens.tolist(), ds.labels, strict=True)}
    assert len(got) == 512
    assert all(y == 8 + max(x) for x, y in got.items())
    # m^3 - (m-1)^3 triples have maximum m: 169 of them have label 16
    counts = np.bincount(ds.labels, minlength=17)
    assert counts[9:].tolist() == [m**3 - (m - 1) ** 3 for m in range(1, 9)]


def test_theory_gammas_nest_tiny_in_default_in_full():
    from ctx_staircase.experiments import staircase

    tiny, default, full = (
        staircase.theory_gammas(tiny=True),
        staircase.theory_gammas(),
        staircase.theory_gammas(full=True),
    )
    for gammas in (tiny, default, full):
        assert list(gammas) == sorted(set(gammas))
    assert set(tiny) < set(default) < set(full)
    assert staircase.theory_gammas(full=True, tiny=True) == tiny


def test_rho0_departure_needs_more_than_drop():
    from ctx_staircase.experiments import order1_onset

    ts = np.arange(4.0)
    rho0 = np.array([1.0, 1.0, 0.875, 0.875])  # exactly drop = 0.125 below, never more
    assert order1_onset.rho0_departure(ts, rho0, 0.0, 0.125) is None


@pytest.mark.parametrize(("peak", "at_epoch", "passes"), [(0.95, 0.5, True), (0.5, 0.95, False)])
def test_fig6_zero_order_claim_is_scored_on_the_early_peak(peak, at_epoch, passes):
    """fig6's §8.3 analogue reads the peak of ρ0 over the early window, not ρ0 at the one early
    epoch it also reports: on the saved record with the two set on either side of the
    threshold, the verdict follows the peak."""
    import copy

    from ctx_staircase.experiments import fig6_attention as fig6

    record = copy.deepcopy(_saved("fig6_attention"))
    cfg = record["config"]["arithmetic"]
    for task in cfg["tasks"]:
        main = record["numbers"]["arithmetic"][task]["by_gamma"][f"{cfg['primary_gamma']:g}"]
        main["rho0_early_peak"], main["rho0_at_early_epoch"] = peak, at_epoch
    claims = fig6.claims(record["numbers"], record["config"])
    zero_order = [c for c in claims if "early geometry is zero-order" in c.claim]
    assert len(zero_order) == len(cfg["tasks"])
    assert all(c.passed is passes for c in zero_order)


def _rebuilt_claim(name: str, record: dict, starts: str) -> dict:
    """The claim of ``name`` whose text starts with ``starts``, scored again from ``record``."""
    found = [c for c in _claims_of(name)(record) if c.claim.startswith(starts)]
    assert len(found) == 1, [c.claim for c in _claims_of(name)(record)]
    return dataclasses.asdict(found[0])


def test_lm_text_rise_needs_a_start_near_zero_on_either_side():
    """The rise of rho_next is scored on |rho_next(0)|: a start of -0.5 (far from 0 below) with
    the saved peak fails, as +0.5 does; the saved start passes."""
    import copy

    record = _saved("lm_text")
    rise = "rho_next rises from about 0"
    assert _rebuilt_claim("lm_text", record, rise)["passed"] is True
    for start in (-0.5, 0.5):
        changed = copy.deepcopy(record)
        changed["numbers"]["summary"]["1"]["rho_next_start"] = start
        assert _rebuilt_claim("lm_text", changed, rise)["passed"] is False, start


def test_lm_builtin_embedding_claim_reads_the_gamma_1_embeddings():
    """The trained-structure claim is scored on gamma = 1: giving gamma = 1 the measures of a
    structured embedding passes it whatever gamma = 0.5 holds, and taking them away fails it."""
    import copy

    from ctx_staircase.experiments import lm_builtin

    record = _saved("lm_builtin")
    keeps = "after training (gamma = 1)"
    good = dict(number_order=1.0, weekday_cycle=7, month_cycle=12, category_purity=1.0)
    bad = dict(number_order=0.0, weekday_cycle=0, month_cycle=0, category_purity=0.0)
    assert lm_builtin.EMBEDDING_ORDER_MIN <= 1.0 and lm_builtin.EMBEDDING_CYCLE_MIN <= 7
    # each criterion on its own: one failing fails the claim (the months are not the weekdays)
    alone = [(good | {key: bad[key]}, good, False) for key in good if key != "month_cycle"]
    for one, half, passed in ((good, bad, True), (bad, good, False), *alone):
        changed = copy.deepcopy(record)
        changed["numbers"]["embedding_structure"] = {"1": one, "0.5": half}
        assert _rebuilt_claim("lm_builtin", changed, keeps)["passed"] is passed, one


def test_lm_builtin_signature_structures_are_the_saved_ones_and_the_null_is_shuffled():
    """The next-token signatures' structure and its null (the training stream shuffled) need no
    training: rebuilt from the full-size built-in corpus they are the saved record's, and the
    shuffled stream has lost the weekday and month cycles the real one shows."""
    from ctx_staircase import records, signatures
    from ctx_staircase.experiments import lm_builtin

    record = _saved("lm_builtin")
    corpus = lm_builtin.corpus_of(lm_builtin.CONFIGS[declarative.Size.CPU])
    phi_next = signatures.next_token_signature(corpus.train, corpus.vocab_size)[0]
    real, null = lm_builtin.signature_structures(corpus, phi_next, seed=0)
    saved = record["numbers"]
    assert records.encode(real) == pytest.approx(saved["signature_structure"])
    assert records.encode(null) == pytest.approx(saved["signature_structure_shuffled_stream"])
    assert real.weekday_cycle > null.weekday_cycle and real.month_cycle > null.month_cycle


def test_task4_staging_compares_the_first_collapse_with_the_last_band():
    """Collapsed first, banded later: the anchors' cosines near-uniform from snapshot 3 and
    their order-1 band at snapshots 1 and 5 is staged (3 < 5, the last band), not refused for
    the earlier band at 1; banded only before the collapse is not staged."""
    import copy

    record = _saved("appc_task4_orders")
    staged = "anchor geometry: collapsed"
    T = len(record["numbers"]["curves"]["offdiag_cos"][0])
    collapsed = [[0.0] * 3 + [1.0] * (T - 3)]
    for band, passed in (({1, 5}, True), ({1, 2}, False)):
        changed = copy.deepcopy(record)
        changed["numbers"]["curves"]["offdiag_cos"] = collapsed
        changed["numbers"]["curves"]["S1_flat"] = [[1.0 if t in band else 0.0 for t in range(T)]]
        assert _rebuilt_claim("appc_task4_orders", changed, staged)["passed"] is passed, band


def test_second_plateau_null_is_each_tasks_mean_plateau_length_after_t0():
    """The constant-plateau null predicts every cell at its task's mean measured length
    t_1 - t_0: cells that all end at t_1 = 200 but start their plateau at t_0 = 100 or 0 have
    lengths 100 and 200, so a constant predicts neither within 20% (null fails); read as
    lengths from 0 they would all be 200 and the null would pass."""
    import copy

    record = copy.deepcopy(_saved("second_plateau"))
    for name, summary in record["numbers"].items():
        if name == "smooth":
            continue
        level1 = [i for i, level in enumerate(summary["level"]) if level == "L1"]
        for j, i in enumerate(level1):
            summary["t0"][i], summary["t1_measured"][i] = (100.0 if j % 2 else 0.0), 200.0
    claim = _rebuilt_claim("second_plateau", record, "the split-unit flow from the training")
    assert claim["null"].startswith("constant plateau (each task's mean measured length): 0%")
    assert claim["null_passed"] is False


def test_second_plateau_null_skips_a_missing_escape_in_its_task_mean():
    """A cell whose rho_0 never left the plateau (t_1 missing) is a miss for the prediction and
    for the null alike, but the rest of its task keeps its null: every other cell has the same
    length, so the task's mean over the escapes that happened predicts each of them exactly
    (a mean that took in the missing one would be NaN and miss them all)."""
    import copy

    record = copy.deepcopy(_saved("second_plateau"))
    shares = {}
    for missing in (False, True):
        changed = copy.deepcopy(record)
        total = 0
        for name, summary in changed["numbers"].items():
            if name == "smooth":
                continue
            level1 = [i for i, level in enumerate(summary["level"]) if level == "L1"]
            total += len(level1)
            for i in level1:
                summary["t0"][i], summary["t1_measured"][i] = 100.0, 300.0
            if missing:
                summary["t1_measured"][level1[0]] = float("nan")
        claim = _rebuilt_claim("second_plateau", changed, "the split-unit flow from the training")
        shares[missing] = claim["null"]
    tasks = sum(name != "smooth" for name in record["numbers"])
    assert shares[False].endswith(": 100% within")
    assert shares[True].endswith(f": {(total - tasks) / total:.0%} within")


def _second_plateau_cells(record: dict, level: str, times) -> dict:
    """``record`` with every ``level`` cell's (t_c, t_1 measured, t_1 predicted) set by
    ``times(gamma)``."""
    import copy

    changed = copy.deepcopy(record)
    for name, summary in changed["numbers"].items():
        if name == "smooth":
            continue
        lanes = len(summary["t_collapse_measured"])
        for i, cell_level in enumerate(summary["level"]):
            if cell_level == level:
                collapse, measured, predicted = times(summary["gamma"][i])
                summary["t_collapse_measured"][i % lanes] = collapse
                summary["t1_measured"][i], summary["t1_predicted"][i] = measured, predicted
    return changed


@pytest.mark.parametrize("predicted, passes", [(315.0, True), (325.0, False)])
def test_second_plateau_L2_is_scored_on_the_plateau_after_the_collapse(predicted, passes):
    """L2 is scored on the plateau that remains after training's collapse t_c = 100: with
    t_1 = 300, a prediction of 325 is 12.5% long on the remaining 200 epochs (a miss at 10%),
    though only 8% long counted from 0; 315 is 7.5% long (a hit). The null (each task's mean
    remaining plateau) is exact when every cell has the same one."""
    record = _second_plateau_cells(_saved("second_plateau"), "L2", lambda g: (100, 300, predicted))
    claim = _rebuilt_claim("second_plateau", record, "the split-unit flow from the initial")
    assert claim["passed"] is passes
    assert claim["measured"].startswith(f"{100 if passes else 0}% of ")
    assert claim["null_passed"] is True


@pytest.mark.parametrize("slope, passes", [(540.0, True), (600.0, False)])
def test_second_plateau_slope_is_each_tasks_least_squares_slope_against_gamma(slope, passes):
    """Training's t_1 = 400 + 500 gamma after a collapse at 100: a law with slope 540 is 8% off
    (a hit at 10%), 600 is 20% off (a miss), whatever its offset. The proportional null
    (t_1 − t_c ∝ gamma, scaled to the task's mean) has slope 500 + mean(300 / gamma), about 760:
    it fails."""
    record = _second_plateau_cells(
        _saved("second_plateau"), "L2", lambda g: (100, 400 + 500 * g, 380 + slope * g)
    )
    claim = _rebuilt_claim("second_plateau", record, "L2 predicts how the escape moves")
    assert claim["passed"] is passes
    assert f"{slope:.0f} against 500 ({slope / 500 - 1:+.0%})" in claim["measured"]
    assert claim["null_passed"] is False


def _second_plateau_ledgers(record: dict, realized: float, missing: bool = False) -> dict:
    """``record`` with every lane's ledger halfway set to a log-gain of 1, a realized-rate
    integral of ``realized`` and a band integral of 3; with ``missing``, each task's first lane
    has no plateau past t_0 (NaN)."""
    import copy

    changed = copy.deepcopy(record)
    for name, summary in changed["numbers"].items():
        if name == "smooth":
            continue
        lanes = len(summary["t_collapse_measured"])
        book = {key: [1.0] * lanes for key in ("t0", "t_half", "gain_half")}
        book |= {"realized_half": [realized] * lanes, "band_half": [3.0] * lanes}
        if missing:
            for key in book:
                book[key][0] = float("nan")
        summary["ledger"] = book
    return changed


@pytest.mark.parametrize("realized, passes", [(1.08, True), (1.12, False), (0.88, False)])
def test_second_plateau_ledger_is_scored_halfway_with_the_band_as_null(realized, passes):
    """The ledger claim: the realized-rate integral within 10% of the log-gain halfway along the
    plateau, on either side; the frozen-gate band (3 times the gain) is the null and fails; a
    lane with no plateau past t_0 is not tested, not a miss."""
    claim = "the collapsed saddle's gated drives"
    for missing in (False, True):
        record = _second_plateau_ledgers(_saved("second_plateau"), realized, missing)
        scored = _rebuilt_claim("second_plateau", record, claim)
        assert scored["passed"] is passes and scored["null_passed"] is False
        assert scored["measured"].startswith(f"realized-rate integral / log-gain within 10% in "
                                             f"{100 if passes else 0}% of ")  # fmt: skip


@pytest.mark.parametrize("ratio, passes", [(1.15, True), (1.25, False)])
def test_staircase_steps_law_is_scored_against_the_smaller_step(ratio, passes):
    """The law's prediction is scored against the lr/4 run, the flow limit: every law row with
    t_step = (2000 at lr 1, 1000 at lr/4) and a prediction of ``ratio`` x 1000 passes at 1.15
    and fails at 1.25 (against lr 1 both would fail); the constant null (the mean lr/4 time of
    the rows whose step exists) is then 1000: exact."""
    import copy

    record = copy.deepcopy(_saved("staircase_steps"))
    for row in record["numbers"]["rows"]:
        row["existence"], row["t_step"] = "exists", [2000.0, 1000.0]
        row["predicted"], row["null"] = ratio * 1000.0, 1000.0
    claim = _rebuilt_claim("staircase_steps", record, "where a step exists")
    assert claim["passed"] is passes
    assert claim["null_passed"] is True


@pytest.mark.parametrize("second_fraction, passes", [(0.85, True), (0.1, False)])
def test_fig4_ring_needs_every_eligible_seed_ordered(second_fraction, passes):
    """§8.6's ring test holds when every eligible seed (gcd(k*, N) = 1, rho_k* >= 0.5) has a
    ring fraction >= 0.8: with two eligible seeds, one ordered ring is not enough."""
    import copy

    record = copy.deepcopy(_saved("fig4_frequency"))
    seeds = record["numbers"]["mod/relu"]["seeds"]
    for s in seeds:
        s["pca_match"]["11"] = 0.0  # a new k* below: every seed is scored against it
    for s, k_star, fraction in ((seeds[3], 19, 0.9), (seeds[9], 11, second_fraction)):
        s["k_star"], s["rho_k_star"], s["ring_fraction"] = k_star, 0.9, fraction
    claim = _rebuilt_claim("fig4_frequency", record, "mod: the PCA ring")
    assert claim["passed"] is passes
    assert "seed 3: k*=19" in claim["measured"] and "seed 9: k*=11" in claim["measured"]


def test_escape_feedback_tracking_needs_every_solve_ok():
    """ "The feedback closed form tracks the flow" needs the flow solved at every gamma: with
    the feedback's escapes equal to the flow's (ratios 1) it passes, and one failed flow solve
    fails it, however close the ratios."""
    import copy

    record = copy.deepcopy(_saved("escape_feedback"))
    escape = record["numbers"]["add"]["escape"]
    escape["closed_form_feedback"] = list(escape["signature_flow_m1"])
    tracks = "the feedback closed form tracks"
    verdicts = []
    for failed in (False, True):
        if failed:
            solver = record["numbers"]["add"]["runs"][0]["solver"]
            solver["signature_flow_m1"] = {"ok": False, "result": "max_steps reached"}
        found = [
            c
            for c in _claims_of("escape_feedback")(record)
            if c.item == "escape law / add" and c.claim.startswith(tracks)
        ]
        verdicts.append(found[0].passed)
    assert verdicts == [True, False]


def test_fig8_epochs_to_target_counts_an_exact_hit():
    """`fig8_role.first_epoch`: the first epoch at or above the target, an exact 0.95 included;
    None when never reached."""
    from ctx_staircase.experiments import fig8_role

    epochs = [0, 10, 20, 30]
    assert fig8_role.first_epoch(epochs, [0.5, 0.95, 1.0, 1.0], 0.95) == 10
    assert fig8_role.first_epoch(epochs, [0.5, 0.94, 0.96, 0.9], 0.95) == 20
    assert fig8_role.first_epoch(epochs, [0.5, 0.9, 0.9, 0.9], 0.95) is None


def test_minmax_early_peak_includes_the_last_early_epoch():
    """`minmax.early_peak`: the snapshot of the largest rho_0 up to and including
    `EARLY_EPOCHS`; a larger value after it does not count."""
    from ctx_staircase.experiments import minmax

    steps = np.array([0, minmax.EARLY_EPOCHS // 2, minmax.EARLY_EPOCHS, 2 * minmax.EARLY_EPOCHS])
    assert minmax.early_peak(steps, np.array([0.1, 0.5, 0.9, 0.99])) == 2
    assert minmax.early_peak(steps, np.array([0.1, 0.7, 0.5, 0.99])) == 1


def test_fig2a_readouts_through_the_ffn_literal_and_at_temperature_one_over_L():
    """``W_U[X] relu(w_a)`` under softmax, at L times the logits, and without the ReLU."""
    from ctx_staircase.experiments import fig2a_label_laws as fig2a

    W_E = np.array([[0.0, 0.0], [1.0, -2.0]])  # anchor 1: relu(w_a) = (1, 0)
    W_U = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    got = fig2a.readouts(W_E, W_U, anchor=1, X=np.array([2, 3]), L=3)

    def softmax(z):
        return np.exp(z) / np.exp(z).sum()

    np.testing.assert_allclose(got.ffn, softmax(np.array([1.0, 0.0])))
    np.testing.assert_allclose(got.ffn_times_L, softmax(np.array([3.0, 0.0])))
    np.testing.assert_allclose(got.literal, softmax(np.array([-1.0, -2.0])))


def test_fig2a_claims_read_the_worst_seed_and_fail_when_one_seed_fails():
    from ctx_staircase.experiments import fig2a_label_laws as fig2a

    def snapshot(match):
        return dict(
            ffn=match,
            ffn_vs_empirical_signature=match,
            literal=match,
            ffn_times_L=match,
            anchor_norm=1.0,
            number_norm_mean=1.0,
        )

    def seed(pearson, jsd):
        init = fig2a.Snapshot(**snapshot(fig2a.Match(0.0, 1.0, 0.5)))
        trained = snapshot(fig2a.Match(pearson, 2 * jsd, jsd))
        return fig2a.Run(seed=0, final_loss=0.1, status="ok", **trained, init=init)

    def law(*runs):
        return fig2a.LawRun(vocab_size=101, empirical_signature_vs_p=runs[0].ffn, runs=runs)

    good, bad = seed(0.99, 0.001), seed(0.5, fig2a.JSD_MAX * 3)
    record = fig2a.Record({"uniform": law(good, good), "normal": law(good, bad)})
    config = fig2a.Config(laws=("uniform", "normal"), regime="gd-wide")
    uniform, normal, empirical = fig2a.SPEC.score(record, config)
    assert uniform.passed and empirical.passed and not normal.passed
    assert f"r {0.5:.3f}" in normal.measured and f"JSD {fig2a.JSD_MAX * 3:.4f}" in normal.measured


def test_attention_departure_loss_gap_runs_to_the_first_departure():
    """Training departs at 5, the theory at 8, the horizon is 20: the loss gaps are taken up to
    t = 5, the ratio is 8 / 5, and a flow that never departs has no time (None)."""
    from ctx_staircase import attention_dynamics as ad
    from ctx_staircase.experiments import attention_departure

    ts = np.arange(0.0, 21.0)

    def path(departs, loss, attention=None):
        attention = np.full(ts.size, 0.5) if attention is None else attention
        departure = ad.Departure(departs, 1 if np.isfinite(departs) else 0, -1)
        return ad.Path(ts, attention, loss, True, departure)

    trained = path(5.0, np.zeros(ts.size), np.linspace(0.5, 1.0, ts.size))
    theory = path(8.0, np.where(ts <= 5, 0.1 * ts, 10.0))  # off by 0.5 at t = 5, by 10 later
    uniform = path(np.nan, np.where(ts <= 5, 0.2, 3.0))
    row = dict(trained=trained, theory=theory, uniform=uniform, baseline=0.5, t_max=20.0, gamma=0.6)
    got = attention_departure.departure_numbers([row], {0.6: 12.0})["0.6"]
    assert got["loss_gap_until"] == got["loss_gap_uniform_until"] == 5.0
    assert got["loss_gap"] == pytest.approx(0.5) and got["loss_gap_uniform"] == pytest.approx(0.2)
    assert got["ratio"] == pytest.approx(8 / 5) and got["uniform_prediction"] is None
    assert got["max_rel_trained"] == pytest.approx(1.0) and got["max_rel_theory"] == 0.0
    assert (got["trained"], got["theory"], got["plateau_A5"]) == (5.0, 8.0, 12.0)


def test_fig4_frequency_peaks_by_hand_and_on_every_saved_seed():
    """k* searches from K_SEARCH_MIN on (the slice's offset counted back); the overall argmax may
    be a low frequency; each saved seed row (trained and at init) is its spectrum's peaks."""
    from ctx_staircase.experiments import fig4_frequency as fig4

    rho = np.zeros(21)
    rho[[0, fig4.K_SEARCH_MIN + 2, 20]] = [0.9, 0.7, 0.4]
    assert fig4.frequency_peaks(rho)._asdict() == {
        "k_star": fig4.K_SEARCH_MIN + 2,
        "rho_k_star": 0.7,
        "rho_k20": 0.4,
        "argmax_all_k": 0,
    }
    rows = [
        row
        for run in _saved("fig4_frequency")["numbers"].values()
        for row in run["seeds"] + run["init"]
    ]
    assert len(rows) >= 20
    for row in rows:
        assert fig4.frequency_peaks(row["rho_vs_k"])._asdict() == {
            key: row[key] for key in ("k_star", "rho_k_star", "rho_k20", "argmax_all_k")
        }


def test_fig6_label_entropy_weighs_the_samples():
    from ctx_staircase.dataset import TokenDataset
    from ctx_staircase.experiments import fig6_attention as fig6

    tokens = np.array([[0, 1], [1, 2], [2, 0], [0, 0]])
    uniform = TokenDataset(tokens, np.array([0, 0, 1, 1]), 3)
    assert fig6.label_entropy(uniform) == pytest.approx(np.log(2))
    weighted = TokenDataset(tokens, np.array([0, 0, 1, 1]), 3, weights=np.array([3, 3, 1, 1.0]))
    assert fig6.label_entropy(weighted) == pytest.approx(
        -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    )


def test_fig6_finite_prefix_stops_before_divergence_at_a_loss_no_worse_than_the_start():
    """All finite: every snapshot. Diverged at snapshot 4: back from 4 to the last snapshot
    whose loss is at most the initial one (1.2 > 1.0 at 3 and 2 is dropped, 0.8 at 1 kept)."""
    from types import SimpleNamespace

    from ctx_staircase.experiments import fig6_attention as fig6

    loss = np.array([[1.0, 0.8, 1.1, 1.2, np.nan, np.nan], [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]])
    W_E = np.ones((2, 6, 3, 2))
    W_E[1, 5, 0, 0] = np.inf  # lane 1: the loss is finite but the weights overflowed at 5
    traj = SimpleNamespace(loss=loss, W_E=W_E)
    assert fig6.finite_prefix(traj, 0) == 2
    assert fig6.finite_prefix(traj, 1) == 5
    traj.W_E[1, 5, 0, 0] = 1.0
    assert fig6.finite_prefix(traj, 1) == 6
    at_start = SimpleNamespace(loss=np.array([[1.0, 0.8, 1.0, np.nan]]), W_E=np.ones((1, 4, 3, 2)))
    assert fig6.finite_prefix(at_start, 0) == 3  # a loss equal to the initial one is kept


CONFIGURED = (
    "appc_task4_orders",
    "fig2_geometry",
    "fig2a_label_laws",
    "fig3_staircase",
    "fig4_frequency",
    "fig5_activation_order",
    "fig8_role",
    "fig9_modulus",
    "lm_builtin",
    "minmax",
    "order1_onset",
    "rb_anchor_tasks",
    "second_plateau",
    "staircase_steps",
)


@pytest.mark.parametrize("name", CONFIGURED)
def test_the_saved_records_were_run_with_the_configuration_the_code_gives(name):
    """Every saved record of ``name`` (the full-size one and each regime-study run): the
    configuration `run_config` gives for its options is the one it recorded, key by key."""
    import importlib

    from ctx_staircase import experiments, records, results

    module = importlib.import_module(f"ctx_staircase.experiments.{name}")
    for record in _records(name):
        options = dict(full=record["full"], tiny=record["tiny"])
        if experiments.get(name).regimes:
            options.update(regime=regimes.parse(record["regime"]), quick=record["quick"])
        if hasattr(module, "SPEC"):
            regime = options.pop("regime", None)
            size = declarative.Size.of(**options)
            config = records.encode(module.SPEC.config(size, regime))
        else:
            config = module.run_config(**options)
        config = results.loads(results.dumps(config))  # tuples as the JSON's lists
        assert config == {key: record["config"][key] for key in config}, record["regime"]


def test_fig9_speeds_of_a_modulus_take_the_median_run_and_censor_by_the_majority():
    """Two seeds at M = 4, one at 100 epochs and one censored at the 6000-epoch cap: the median
    time is 3050 and, with half the runs censored, the median run is not censored; three seeds
    with two censored are."""
    from ctx_staircase.experiments import fig9_modulus as fig9

    half = fig9.Speeds.of(
        {"4": SimpleNamespace(epochs_to_95=[100, None], censored=[False, True], divides=True)},
        6000,
    )
    assert half.epochs.tolist() == [3050.0] and half.censored.tolist() == [False]
    assert half.any_censored.tolist() == [True] and half.Ms.tolist() == [4]
    most = fig9.Speeds.of(
        {
            "5": SimpleNamespace(
                epochs_to_95=[100, None, None], censored=[False, True, True], divides=False
            )
        },
        6000,
    )
    assert most.epochs.tolist() == [6000.0] and most.censored.tolist() == [True]
    assert most.divides.tolist() == [False]


def test_fig6_frequency_numbers_leave_out_the_constant_mode():
    """k = 0 (the largest entry at init and late here) is never the best frequency."""
    from ctx_staircase.experiments import fig6_attention as fig6

    spectrum = np.array([[0.99, 0.2, 0.3], [0.9, 0.1, 0.4], [0.95, 0.6, 0.5]])
    assert fig6.frequency_numbers(spectrum, 2) == {
        "k_star_late": 1,
        "rho1_kstar_late": 0.6,
        "rho1_best_init": 0.3,
    }
    assert fig6.frequency_numbers(spectrum, 1)["k_star_late"] == 2


def test_the_saved_regime_study_is_the_study_of_its_saved_units():
    """sims/results/regime_study.json's table and counts are `study_numbers` of the unit records
    saved beside it: a unit rerun without rebuilding the study shows here."""
    from pathlib import Path

    from ctx_staircase import results
    from ctx_staircase.experiments import regime_study

    sims = Path(__file__).resolve().parents[1] / "sims"
    study = _saved("regime_study")["numbers"]
    rebuilt = results.loads(
        results.dumps(regime_study.study_numbers(regime_study.saved_grid(sims)))
    )
    for key in ("regimes", "primary", "rows", "counts"):
        assert rebuilt[key] == study[key], key
