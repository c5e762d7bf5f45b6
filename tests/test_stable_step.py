"""Verdicts from runs that can test their claims: the GD step search of Fig. 6 with its halving
check, Fig. 5's plateau-bound cells and its reduced N, and the mod collapse read where the
plateau flow predicts it (theory/regimes.md, "Verdicts")."""

import dataclasses

import numpy as np
import pytest

from ctx_staircase import second_escape as se
from ctx_staircase import sweep
from ctx_staircase.experiments import (
    Claim,
    appc_task4_orders,
    fig5_activation_order,
    fig6_attention,
    verdict,
)
from ctx_staircase.experiments import staircase_claims as scoring
from ctx_staircase.experiments.declarative import Size
from ctx_staircase.experiments.regime import PRIMARY, Regime

# ------------------------------------------------------------------------ a regime's GD step


def test_a_smaller_gd_step_keeps_the_flow_time_of_an_epoch():
    ds = PRIMARY.make("mod", N=5)
    quarter = Regime("gd", "wide", gd_lr=0.25)
    config = quarter.train_config(ds, epochs=30, snapshots=[0, 10, 30])
    assert (config.lr, config.steps, tuple(config.snapshots)) == (0.25, 120, (0, 40, 120))
    np.testing.assert_array_equal(quarter.epochs_of([0, 40, 120]), [0, 10, 30])
    assert PRIMARY.halved() == Regime("gd", "wide", gd_lr=0.5)
    assert quarter.name == "gd-wide-lr0.25" and "lr 0.25" in quarter.label
    assert PRIMARY.name == "gd-wide" and "lr" not in PRIMARY.label


@pytest.mark.parametrize("gd_lr", [0.3, 2.0, 0.0, -0.5, float("nan")])
def test_a_gd_step_that_is_not_one_over_a_whole_number_is_refused(gd_lr):
    with pytest.raises(ValueError, match="gd_lr"):
        Regime("gd", "wide", gd_lr=gd_lr)


def test_a_gd_step_on_adam_is_refused():
    with pytest.raises(ValueError, match="gd_lr"):
        Regime("adam", "wide", gd_lr=0.5)


# ------------------------------------------------------------------------ Fig. 6's step search


class _Job:
    """A stand-in for `fig6_attention.Job` whose runs diverge at every step above ``stable``."""

    def __init__(self, regime: Regime, stable: float):
        self.regime, self.stable, self.trained = regime, stable, []

    def train(self, regime: Regime) -> sweep.SweepResult:
        self.trained.append(regime.gd_lr)
        status = sweep.RunStatus(None if regime.gd_lr <= self.stable else 7)
        return sweep.SweepResult(np.ones(1), np.zeros(1), np.ones(1), None, (status,))


@pytest.mark.parametrize(
    "stable, trained, scored, check",
    [
        (1.0, [1.0, 0.5], 1.0, 0.5),
        (0.25, [1.0, 0.5, 0.25, 0.125], 0.25, 0.125),
        (0.01, [1.0, 0.5, 0.25, 0.125], 0.125, None),  # HALVINGS spent, none stable
    ],
)
def test_the_step_search_halves_until_a_run_ends_finite_then_checks_half_that_step(
    stable, trained, scored, check
):
    job = _Job(PRIMARY, stable)
    search = fig6_attention.step_search(job)
    assert job.trained == trained
    assert search.regime.gd_lr == scored
    record = search.record()
    assert record["check_gd_lr"] == check and record["stable"] == (check is not None)
    assert [t["gd_lr"] for t in record["tried"]] == trained[: len(record["tried"])]


def test_adam_has_no_step_to_search():
    job = _Job(Regime("adam", "wide"), stable=0.0)
    search = fig6_attention.step_search(job)
    assert job.trained == [1.0] and search.check is None


def _claim(passed, null_passed=False):
    return Claim("§8.9", "c", "m", "k", passed, note="seen", null_passed=null_passed)


def test_a_verdict_the_halving_keeps_is_noted_and_one_it_changes_is_not_tested():
    search = {"gd_lr": 0.5, "check_gd_lr": 0.25}
    claims = [_claim(True), _claim(False), _claim(True)]
    checks = [_claim(True), _claim(False), _claim(False)]
    kept, failed, changed = fig6_attention.halving_verdicts(claims, checks, search)
    assert verdict(kept) == "pass" and "same (pass)" in kept.note and kept.note.startswith("seen.")
    assert verdict(failed) == "FAIL" and "same (FAIL)" in failed.note
    assert verdict(changed) == "not tested"
    assert "lr 0.5: pass, lr 0.25: FAIL" in changed.untested
    vacuous = fig6_attention.halving_verdicts(
        [_claim(True, null_passed=True)], [_claim(True)], search
    )[0]
    assert verdict(vacuous) == "not tested"  # vacuous and pass are different verdicts
    none = {"gd_lr": 1.0, "check_gd_lr": None}
    assert fig6_attention.halving_verdicts(claims, checks, none) == claims


# ------------------------------------------------------------------------ Fig. 5


def _cell(L, K, max_accuracy, norm_change):
    return fig5_activation_order.Cell(
        L=L, K=K, epochs=1000, loss_rises=0, max_accuracy=max_accuracy,
        final_accuracy=max_accuracy, loss_start=2.0, final_loss=2.0, norm_change=norm_change,
        top_share=1.0, top_share_init=0.2, mean_offdiag_cos=1.0, status="ok",
    )  # fmt: skip


def _fig5(cells, null_cells):
    tiny = fig5_activation_order.SPEC.config(Size.TINY)
    config = dataclasses.replace(tiny, N=8, epochs=1000)
    record = fig5_activation_order.Record(
        mechanism={}, chance=1 / 8, cells=cells, null_cells=null_cells, long_gd_cells={},
        max_accuracy_grid=(), top_share_grid=(),
    )  # fmt: skip
    return fig5_activation_order.SPEC.score(record, config)[0]


def test_fig5_cells_that_never_left_their_plateau_leave_the_claim_not_tested():
    learned = {"L2_K1": _cell(2, 1, 0.12, 0.4), "L2_K2": _cell(2, 2, 1.0, 3.0)}
    null = {"L2_K2": _cell(2, 2, 0.6, 3.0)}
    assert verdict(_fig5(learned, null)) == "pass"
    stuck = learned | {"L2_K3": _cell(2, 3, 0.11, fig5_activation_order.PLATEAU_MOVED)}
    claim = _fig5(stuck, null)
    assert verdict(claim) == "not tested" and "L2K3" in claim.untested
    assert "criterion holds" in claim.note  # on the cells that can be read
    moved = learned | {"L2_K3": _cell(2, 3, 0.11, 2 * fig5_activation_order.PLATEAU_MOVED)}
    assert verdict(_fig5(moved, null)) == "FAIL"  # it left its plateau and did not learn


def test_fig5_reduced_n_keeps_the_token_independence_of_every_order_below_L_minus_1():
    spreads = fig5_activation_order.mechanism(Ns=(5,), Ls=(2, 3))
    for key, spread in spreads.items():
        assert all(s < fig5_activation_order.UNIFORM_SPREAD for s in spread[:-1]), key
        assert spread[-1] > 1e-3, key
    assert fig5_activation_order.mechanism_holds(spreads)
    broken = {"N5_L3": [0.0, 0.01, 0.02]}  # an order below L-1 that depends on the token
    assert not fig5_activation_order.mechanism_holds(broken)


# ------------------------------------------------------------------------ the mod collapse


def _collapse_run(predicted):
    steps = np.arange(0, 301, 10)
    return {
        "steps": steps,
        "accuracy": np.full(steps.size, 0.01),
        "mean_offdiag_S_emb": np.where(steps >= 120, 0.95, 0.5),
        "collapse_predicted": predicted,
    }


def test_the_collapse_is_read_at_the_first_snapshot_at_or_after_the_predicted_collapse():
    assert scoring.collapse_epoch(_collapse_run(115.0))[0] == 120
    assert scoring.collapse_epoch(_collapse_run(120.0))[0] == 120
    assert scoring.collapse_claim(_collapse_run(115.0), 40, "r").passed is True
    assert scoring.collapse_claim(_collapse_run(105.0), 40, "r").passed is False  # read at 110
    for missing in (None, float("nan"), 1e9):
        epoch, why = scoring.collapse_epoch(_collapse_run(missing))
        run = _collapse_run(missing)
        assert epoch == scoring.early_epoch(run) and "early epoch" in why


def test_the_plateau_flow_predicts_the_collapse_that_gradient_descent_shows():
    """mod N = 8 in the wide vocabulary, d = 32: t_c from the init by the plateau flow against
    GD at lr 0.5 from the same weights, both read as the first save with rho_0 >= 0.99."""
    ds = PRIMARY.make("mod", N=8)
    regime = Regime("gd", "wide", gd_lr=0.5)
    config = regime.train_config(ds, epochs=400, snapshots=list(range(0, 401, 10)))
    result = sweep.train_sweep("ffn", ds, config, gammas=(1.0,), seeds=(0,), d=32)
    lane = result.lane(0)
    problem = se.plateau_problem(ds)
    measured = se.crossings(regime.epochs_of(lane.steps), se.rho0(lane.W_E, problem.geometry_ids))
    predicted = se.predict_collapse(lane.W_E[0], lane.W_U[0], problem, horizon=400.0)
    assert np.isfinite(measured[0]) and 20 <= measured[0] < 400, measured
    assert abs(predicted - measured[0]) <= 10.0  # one save


def test_a_collapse_not_reached_by_the_horizon_is_nan():
    ds = PRIMARY.make("mod", N=5)
    problem = se.plateau_problem(ds)
    rng = np.random.default_rng(0)
    W_E, W_U = (rng.standard_normal((ds.vocab_size, 8)) for _ in range(2))  # no plateau
    assert np.isnan(se.predict_collapse(W_E, W_U, problem, horizon=20.0))
    with pytest.raises(ValueError, match="horizon"):
        se.predict_collapse(W_E, W_U, problem, horizon=0.0)


def test_search_record_reads_back_through_the_claims():
    """The saved step search is what the claims' measured text reports."""
    search = {
        "tried": [{"gd_lr": 1.0, "status": "diverged at step 9"}, {"gd_lr": 0.5, "status": "ok"}],
        "gd_lr": 0.5,
        "stable": True,
        "check_gd_lr": 0.25,
    }
    text = fig6_attention.step_text(search)
    assert "lr 0.5" in text and "lr 1 diverged at step 9" in text
    assert fig6_attention.step_text(search | {"tried": search["tried"][1:]}) == ""


# ------------------------------------------------------------------------ App. C's late window


@pytest.mark.parametrize(
    "t1, failure",
    [(333.0, "false"), (333.4, "unclassified"), (None, "unclassified"), (100.0, "false")],
)
def test_a_late_fail_is_false_only_where_the_window_starts_past_twice_the_predicted_escape(
    t1, failure
):
    """The late window of 1000 epochs starts at 666.7: twice a predicted escape of 333 lies
    before it, twice 333.4 after it."""
    late_from = appc_task4_orders.SPEC.config(Size.CPU).late_from  # 2/3 of 1000 epochs
    assert appc_task4_orders.late_failure(t1, late_from) == failure
