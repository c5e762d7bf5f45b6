"""experiments.common: the shared experiment helpers equal the calls they replace."""

import numpy as np
import pytest

from ctx_staircase import sweep, tasks
from ctx_staircase.experiments import Claim, verdict
from ctx_staircase.experiments.common import (
    Draws,
    NoNull,
    joined_outcome,
    recorded_config,
    reported,
    scored,
    train_configured,
    train_gammas,
)
from ctx_staircase.experiments.regime import PRIMARY


def _claim(name):
    return Claim("x", name, "m", "c", True)


def test_joined_outcome_orders_tags_and_names_parts():
    a, b, c = _claim("a"), _claim("b"), _claim("c")
    parts = {"first": ([a, b], "fig1", {"n": 1}), "second": ([c], "fig2", {"n": 2})}
    out = joined_outcome(parts, {"k": 0}, "gd-wide")
    assert [x.claim for x in out.claims] == ["a", "b", "c"]
    assert all(x.regime == "gd-wide" for x in out.claims)
    assert out.figures == {"first": "fig1", "second": "fig2"}
    assert list(out.figures) == ["first", "second"]
    assert out.numbers == {"first": {"n": 1}, "second": {"n": 2}}
    assert out.config == {"k": 0}


def test_train_configured_equals_train_sweep():
    ds = tasks.make("add", N=6)
    tc = PRIMARY.train_config(ds, epochs=3, snapshots=(0, 3), adam_lr=1e-3)
    config = dict(model="ffn", d=8, activation="relu", gamma=0.7)
    for activation in (None, "gelu"):
        got = train_configured(ds, tc, config, [0, 1], activation)
        want = sweep.train_sweep(
            "ffn",
            ds,
            tc,
            gammas=[0.7],
            seeds=[0, 1],
            d=8,
            activation=activation or "relu",
        )
        assert np.array_equal(np.asarray(got.trajectory.W_E), np.asarray(want.trajectory.W_E))
        assert np.array_equal(np.asarray(got.gamma), np.asarray(want.gamma))
        assert np.array_equal(np.asarray(got.seed), np.asarray(want.seed))


def test_train_configured_activation_override_matters():
    ds = tasks.make("add", N=6)
    tc = PRIMARY.train_config(ds, epochs=3, snapshots=(0, 3), adam_lr=1e-3)
    config = dict(model="ffn", d=8, activation="relu", gamma=0.7)
    relu = train_configured(ds, tc, config, [0])
    gelu = train_configured(ds, tc, config, [0], "gelu")
    assert not np.array_equal(np.asarray(relu.trajectory.W_E), np.asarray(gelu.trajectory.W_E))


def test_paper_ffn_is_the_papers_model_in_config_order():
    from ctx_staircase.experiments.common import paper_ffn

    config = paper_ffn(1e-3)
    assert list(config) == ["model", "d", "activation", "adam_lr", "gamma"]
    assert config == dict(model="ffn", d=128, activation="relu", adam_lr=1e-3, gamma=1.0)


def test_scored_applies_one_criterion_to_the_run_and_to_its_null():
    def above_half(x):
        return x > 0.5

    assert scored(above_half, 0.9, 0.1) == {"passed": True, "null_passed": False}
    assert scored(above_half, 0.1, 0.9) == {"passed": False, "null_passed": True}


def _above_half(x):
    return x > 0.5


def test_a_null_of_draws_passes_when_the_level_share_of_its_draws_does():
    """A permutation null passes at exactly its level (a one-sided test), not only above it."""
    level = Draws([0.9, 0.1, 0.1, 0.1], level=0.25)
    assert scored(_above_half, 0.9, level) == {"passed": True, "null_passed": True}
    below = Draws([0.9, 0.1, 0.1, 0.1, 0.1], level=0.25)
    assert scored(_above_half, 0.9, below) == {"passed": True, "null_passed": False}
    assert Draws(np.zeros((0, 3)), level=0.05).share(_above_half) == 0.0


def test_a_claim_without_a_natural_null_says_why_and_has_no_null_verdict():
    out = scored(_above_half, 0.9, NoNull("a robustness check compares two trainings"))
    assert out == {
        "passed": True,
        "null": "none natural: a robustness check compares two trainings",
        "null_passed": None,
    }
    assert verdict(Claim("x", "c", "m", "k", **out)) == "pass"


def test_numpy_verdicts_of_a_vacuous_claim_are_reported_vacuous():
    """NumPy booleans become Python ones: `verdict` tests ``null_passed is True``."""
    out = scored(lambda x: np.asarray(x) > 0.5, np.float32(0.9), np.float32(0.8))
    assert out["passed"] is True and out["null_passed"] is True
    assert verdict(Claim("x", "c", "m", "k", **out)) == "vacuous"
    assert scored(reported, 0.9, 0.1) == {"passed": None, "null_passed": None}


def test_a_tiny_run_is_tiny_even_when_quick_too():
    """`size` keys what a run leaves out: tiny wins over quick, and neither is the paper's."""
    from ctx_staircase.experiments.common import size

    assert [size(t, q) for t in (False, True) for q in (False, True)] == [
        "paper",
        "quick",
        "tiny",
        "tiny",
    ]


def test_recorded_config_orders_fields_nulls_reduction_then_regime():
    """The saved records keep this key order, so a refactored experiment writes the same JSON."""
    reductions = {"tiny": "t", "quick": "q", "paper": "none"}
    nulls = {"null_a": "shuffled labels", "null_b": "epoch 0"}
    got = recorded_config(
        {"task": "add", "N": 6}, nulls, reductions, PRIMARY, tiny=True, quick=True
    )
    assert list(got) == ["task", "N", "null_a", "null_b", "reduction", "regime", "regime_label"]
    assert got["reduction"] == "t" and got["null_a"] == "shuffled labels"
    assert got["regime"] == PRIMARY.name and got["regime_label"] == PRIMARY.label
    paper = recorded_config({}, {}, reductions, PRIMARY, tiny=False, quick=False)
    assert paper["reduction"] == "none"


def test_train_gammas_equals_train_sweep_at_the_configured_seed():
    ds = tasks.make("add", N=6)
    tc = PRIMARY.train_config(ds, epochs=3, snapshots=(0, 3), adam_lr=1e-3)
    config = dict(seed=3, d=8, d_k=4, unused=1)
    got = train_gammas("attention", ds, tc, [0.5, 1.0], config, "d", "d_k")
    want = sweep.train_sweep("attention", ds, tc, gammas=[0.5, 1.0], seeds=(3,), d=8, d_k=4)
    assert np.array_equal(np.asarray(got.seed), [3, 3])
    assert np.array_equal(np.asarray(got.gamma), np.asarray(want.gamma))
    assert np.array_equal(np.asarray(got.trajectory.W_E), np.asarray(want.trajectory.W_E))


def test_a_fail_is_budget_limited_when_the_run_was_still_learning_at_its_cap():
    """`common.failure_class`: accuracy that rose by more than STILL_LEARNING over the last
    quarter of the horizon (fig8's FFN on mod: 0.124 at epoch 750, 0.203 at 1000) is a budget
    cap; a settled run, or one that fell, is left unclassified (it may sit on a plateau)."""
    from ctx_staircase.experiments import common

    rising = np.concatenate([np.linspace(0.0, 0.124, 76), np.linspace(0.124, 0.203, 26)[1:]])
    assert common.failure_class(rising) == "budget"
    settled = np.concatenate([np.linspace(0.0, 0.5, 76), np.full(25, 0.505)])
    assert common.failure_class(settled) == "unclassified"
    assert common.failure_class(settled[::-1]) == "unclassified"
    diverged = np.concatenate([rising[:60], np.full(41, np.nan)])  # the finite prefix's quarter
    assert common.failure_class(diverged) == "budget"
    assert common.failure_class([0.3]) == "unclassified"


@pytest.mark.parametrize("kind", ["paper", "project", "beyond"])
def test_a_claim_kind_named_at_the_edge_is_its_enum(kind):
    from ctx_staircase.experiments import Kind

    claim = Claim("§8.3", "c", "m", "k", True, kind=kind)
    assert type(claim.kind) is Kind and claim.kind == kind
    with pytest.raises(ValueError, match="kind must be one of"):
        Claim("§8.3", "c", "m", "k", True, kind="theirs")
