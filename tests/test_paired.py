"""The paired test over seeds (`experiments.paired`) and App. C's order-2 claim decided by it."""

from __future__ import annotations

import numpy as np
import pytest

from ctx_staircase import experiments
from ctx_staircase.experiments import Verdict
from ctx_staircase.experiments import appc_task4_orders as appc
from ctx_staircase.experiments.declarative import Size
from ctx_staircase.experiments.paired import MIN_SEEDS, paired_test


def test_the_paired_test_calls_each_side_and_a_tie():
    assert paired_test([0.01, 0.012, 0.009, 0.011, 0.010]).outcome == "greater"
    assert paired_test([-0.01, -0.012, -0.009, -0.011, -0.010]).outcome == "less"
    assert paired_test([0.01, -0.01, 0.02, -0.02, 0.0]).outcome == "tie"
    assert paired_test([0.0] * 5).outcome == "tie"  # no spread, no difference
    assert paired_test([0.003] * 5).outcome == "greater"  # no spread, one sign
    assert paired_test([0.5] * (MIN_SEEDS - 1)).outcome is None


def test_a_true_tie_is_called_a_tie_not_a_coin_flip():
    """Differences drawn symmetric about 0: a tie in about 90% of draws (each side at 0.05),
    where the sign of the mean would split them about evenly."""
    rng = np.random.default_rng(0)
    outcomes = [paired_test(rng.normal(size=5)).outcome for _ in range(2000)]
    assert outcomes.count("tie") / len(outcomes) == pytest.approx(0.9, abs=0.03)


def _claim(differences, init_differences):
    """App. C's order-2 claim scored on per-seed held-out S^(1), S^(2) curves of two snapshots
    (the init, then one late snapshot) whose differences are the given ones."""
    n = len(differences)
    S1 = np.full((n, 2), 0.9)
    S1[:, 0] = 0.1
    S2 = S1.copy()
    S2[:, 1] += differences
    S2[:, 0] += init_differences
    curves = appc.Curves(
        S0_1mse=S1, S1_flat=S1, offdiag_cos=S1, S1_probe=S1, S1_probe_fit=S1, S2_probe=S2,
        S2_probe_fit=S2,
    )  # fmt: skip
    record = appc.Record(
        vocab_size=60, steps=(0, 1000), train_accuracy=S1, null_train_accuracy=S1, curves=curves,
        null_curves=curves, late_mean=appc.Late(*(float(c[:, 1:].mean()) for c in (S1, S2))),
        late_by_seed=appc.LateBySeed(tuple(S1[:, 1]), tuple(S2[:, 1])),
        init=appc.Levels.at(curves, 0), final=appc.Levels.at(curves, -1), t_peak={},
        null_t_peak={}, S0_exact=np.eye(2), S1_flat=np.eye(2), S0_alignment_method="",
        second_escape_predicted=None,
    )  # fmt: skip
    config = appc.SPEC.config(Size.CPU)  # 1000 epochs
    return appc.HELD_OUT_CLAIMS[0].score(record, config, "gd-wide")


TIE = [0.001, -0.001, 0.002, -0.0015, 0.0]
S1_BETTER = [-0.0005, -0.0006, -0.0004, -0.0007, -0.0005]
S2_BETTER = [0.05, 0.04, 0.06, 0.05, 0.045]


def test_app_c_order2_passes_a_tie_and_fails_a_significant_deficit():
    """'>=' passes 'S^(2) better' and a tie and fails 'S^(1) better'; an init that ties too
    makes a pass vacuous, one where S^(1) is better does not."""
    cases = (
        (S2_BETTER, S1_BETTER, Verdict.PASS),
        (TIE, S1_BETTER, Verdict.PASS),
        (TIE, TIE, Verdict.VACUOUS),
        (S1_BETTER, TIE, Verdict.FAIL),
    )
    for run, init, verdict in cases:
        claim = _claim(run, init)
        assert experiments.verdict(claim) is verdict, (run, init)
    assert "tie within noise" in _claim(TIE, TIE).measured


def test_app_c_order2_with_fewer_than_five_seeds_is_not_tested():
    claim = _claim(TIE[:2], TIE[:2])
    assert experiments.verdict(claim) is Verdict.NOT_TESTED
    assert claim.untested.startswith("fewer than 5 seeds")
