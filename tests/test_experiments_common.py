"""experiments.common: the shared experiment helpers equal the calls they replace."""

import numpy as np

from ctx_staircase import sweep, tasks
from ctx_staircase.experiments import Claim
from ctx_staircase.experiments.common import joined_outcome, scored, train_configured
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
