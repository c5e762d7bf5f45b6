"""The staircase claims' nulls, notes and read-out epochs on measurements whose numbers differ
where two of them could be confused: the probe's correlation and MSE at init, rho_0 at the first
two snapshots, the two shuffled peaks, and a predicted collapse between snapshots."""

from __future__ import annotations

import numpy as np

from ctx_staircase.experiments import staircase_claims as scoring


def measurement() -> dict:
    """A staircase measurement over epochs 0..1200 (the dict of `fig3_staircase.measure`), every
    curve rising, rho_0 0.1 at init and 0.2 at epoch 100."""
    steps = np.arange(0, 1201, 100)
    probe = np.array([0.1, 0.95, 0.99])
    return {
        "steps": steps,
        "loss": np.linspace(4.0, 1.0, steps.size),
        "accuracy": np.where(steps >= 600, 0.9, 0.01),
        "rho0": np.linspace(0.1, 0.7, steps.size) + 0.1 * (steps > 0),
        "rho0_method": "pearson",
        "mse0": np.linspace(0.9, 0.3, steps.size),
        "mean_offdiag_S_emb": steps / 2000,
        "probe_steps": np.array([100, 600, 1200]),
        "probe_corr": probe,
        "probe_mse": np.array([0.8, 0.3, 0.2]),
        "init_probe": (0.3, 0.85),  # held-out (corr, MSE) at epoch 0
    }


def test_probe_claim_null_is_the_init_probe_against_the_init_rho0_on_rho0s_scale():
    """The null scores the epoch-0 probe (its Pearson 0.3, or 1 − its MSE 0.85 = 0.15 for a
    1 − MSE rho_0) against rho_0 at epoch 0 (0.1): a gap closed of 2/9, or 1/18."""
    d = measurement()
    claim = scoring.probe_claim(d, "add", "r")
    assert claim.null == "init: rho_0 +0.100, probe +0.300 (Pearson): gap closed +0.222"
    assert claim.null_passed is False
    mod = scoring.probe_claim({**d, "rho0_method": "1-mse"}, "mod", "r")
    assert mod.null == "init: rho_0 +0.100, probe +0.150 (1−MSE): gap closed +0.056"
    # an init probe that already closes 7/9 of the gap makes the null pass and the claim vacuous
    vacuous = scoring.probe_claim({**d, "init_probe": (0.8, 0.9)}, "add", "r")
    assert vacuous.null_passed is True and vacuous.note.startswith("vacuous: at init the probe")
    assert "closes 0.78 of rho_0's gap" in vacuous.note


def test_collapse_is_read_at_the_first_snapshot_at_or_after_the_predicted_collapse():
    """A predicted collapse at 250 is read at epoch 300, one at exactly 300 at 300 too; a NaN
    prediction, or one past the last snapshot, is read at the paper's early epoch."""
    d = measurement()
    for predicted, epoch in [(250.0, 300), (300.0, 300), (0.0, 0), (1200.0, 1200)]:
        got, why = scoring.collapse_epoch({**d, "collapse_predicted": predicted})
        assert got == epoch, predicted
        assert why.startswith("read at the collapse the plateau flow predicts")
    for predicted in (float("nan"), 1250.0, None):
        got, why = scoring.collapse_epoch({**d, "collapse_predicted": predicted})
        assert got == scoring.EARLY and why.startswith("read at the paper's early epoch")
    claim = scoring.collapse_claim({**d, "collapse_predicted": 250.0}, 10, "r")
    assert claim.measured.startswith("epoch 300 (")
    assert "accuracy 0.010, mean off-diagonal S^emb 0.150" in claim.measured


def test_peak_order_null_names_each_of_the_shuffled_runs_two_peaks():
    """The null of t^peak_0 ≤ t^peak_1 names the shuffled run's rho_0 peak and probe peak."""
    d, shuffled = measurement(), measurement()
    shuffled["rho0"] = np.where(shuffled["steps"] == 700, 0.99, 0.5)  # rho_0 peaks at 700
    shuffled["probe_corr"] = np.array([0.9, 0.1, 0.2])  # the probe peaks at 100
    claim = scoring.peak_order_claim(d, shuffled, "add", "r")
    assert claim.null == "shuffled labels: t^peak_0 = 700, t^peak_1 = 100"
    assert claim.null_passed is False
    assert claim.measured == "t^peak_0 = 1200 (rho_0 pearson), t^peak_1 = 1200 (probe corr)"


def test_low_frequency_note_names_the_largest_pearson_entry_at_the_early_epoch():
    """Where k = 0 is scored 1 − MSE, the note names the largest Pearson entry of the early
    spectrum (k = 2 at 0.600), not of the init's."""
    constant = np.array([True, False, False, False])
    early = np.array([0.95, 0.2, 0.6, 0.1])
    init = np.array([0.1, 0.9, 0.1, 0.3])
    claim = scoring.low_frequency_claim(early, init, constant, "mod", "r")
    assert "k=0 0.950 at epoch 100, the largest Pearson entry is k=2 at 0.600" in claim.note
    assert claim.passed is True and claim.null_passed is True
    assert claim.null == "init: argmax_k = 1 (seed 0)"
