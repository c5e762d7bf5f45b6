"""The staircase claims: one criterion per claim, the same verdict wherever it is scored."""

import numpy as np
import pytest

from ctx_staircase.experiments import fig3_staircase as fig3
from ctx_staircase.experiments import staircase
from ctx_staircase.experiments import staircase_claims as scoring


def measurement(rho0_final: float, probe_final: float, method: str = "pearson") -> dict:
    """A staircase measurement (the dict of `fig3_staircase.measure`) over epochs 0..1200."""
    steps = np.arange(0, 1201, 100)
    rho0 = np.linspace(0.0, rho0_final, steps.size)
    probe_steps = np.array([100, 600, 1200])
    probe = np.array([0.1, 0.5, probe_final])
    return {
        "steps": steps,
        "loss": np.linspace(4.0, 1.0, steps.size),
        "accuracy": np.where(steps >= 600, 0.9, 0.01),
        "rho0": rho0,
        "rho0_method": method,
        "mse0": 1.0 - rho0,
        "mean_offdiag_S_emb": np.linspace(0.0, 0.95, steps.size),
        "probe_steps": probe_steps,
        "probe_corr": probe,
        "probe_mse": 1.0 - probe,
        "init_probe": (0.0, 1.0),
    }


def test_gap_closed_is_the_share_of_zero_orders_gap():
    assert scoring.gap_closed(0.95, 0.9) == pytest.approx(0.5)
    assert scoring.gap_closed(0.9, 0.9) == 0.0
    assert scoring.gap_closed(1.0, 0.2) == pytest.approx(1.0)


def test_a_probe_that_only_reproduces_zero_order_fails():
    """The probe's family contains the zero-order geometry, so a probe a hair above rho_0 (what
    add gave: +0.001) must not count as beating it; one that closes most of the gap does."""
    d = measurement(rho0_final=0.99, probe_final=0.991)
    d["rho0"][-7:] = 0.99
    d["probe_corr"][1:] = [0.991, 0.991]
    assert scoring.probe_claim(d, "add", "gd-wide").passed is False
    d["probe_corr"][1:] = [0.999, 0.999]
    assert scoring.probe_claim(d, "add", "gd-wide").passed is True


def test_probe_claim_scores_mod_on_rho0s_own_scale():
    """mod's rho_0 is 1 − MSE, so the probe enters as 1 − its MSE, not as its Pearson."""
    d = measurement(rho0_final=0.3, probe_final=0.2, method="1-mse")
    d["rho0"][-7:] = 0.3
    d["probe_mse"][1:] = [0.05, 0.05]  # 1 − MSE = 0.95: closes 0.93 of the gap
    d["probe_corr"][1:] = [0.2, 0.2]  # a Pearson below rho_0 would have failed it
    claim = scoring.probe_claim(d, "mod", "gd-wide")
    assert claim.passed is True and "1−MSE" in claim.criterion


def test_the_flagship_and_fig3_score_one_claim_alike():
    """The flagship's staircase claims are fig3's claims on the same measurement: same item,
    claim text, criterion, measured value and verdict."""
    run, null = measurement(0.99, 0.999), measurement(0.1, 0.2)
    mod, mod_null = measurement(0.3, 0.9, "1-mse"), measurement(0.1, 0.2, "1-mse")
    data = {
        ("add", "trained"): run,
        ("add", "shuffled"): null,
        ("mod", "trained"): mod,
        ("mod", "shuffled"): mod_null,
    }
    regime = fig3.PRIMARY
    by_fig3 = {(c.item, c.claim): c for c in fig3.claims(data, {"N": 40}, regime)}
    spectrum = np.zeros((run["steps"].size, 21))
    n = {
        "N": 40,
        "spectrum": spectrum,
        "early_spectrum": spectrum[1],
        "constant_ks": np.zeros(21, bool),
        "early_epoch": 100,
    }
    shared = 0
    for task, measured, shuffled in (("add", run, null), ("mod", mod, mod_null)):
        for claim in staircase.scored_claims(task, n, (None, measured, shuffled)):
            twin = by_fig3.get((claim.item, claim.claim))
            if twin is not None:
                shared += 1
                assert claim == twin
    assert shared == 4  # §8.3, both §8.5 and the mod collapse


# --------------------------------------------------------------------------------------------
# direct tests of the claim functions at their thresholds (planted-bug checked, tests/README.md)


def peaked(peak_epoch: int, peak: float, final: float, horizon: int = 1200) -> dict:
    """A measurement whose rho_0 is 0.5 except ``peak`` at ``peak_epoch`` and ``final`` last."""
    d = measurement(0.5, 0.9)
    d["steps"] = np.arange(0, horizon + 1, 100)
    d["rho0"] = np.full(d["steps"].size, 0.5)
    d["rho0"][np.flatnonzero(d["steps"] == peak_epoch)[0]] = peak
    d["rho0"][-1] = final
    return d


def test_rho0_peak_claim_passes_exactly_at_its_thresholds():
    peak, by, decline = scoring.PEAK_MIN, scoring.PEAK_BY, scoring.DECLINE
    flat = peaked(0, 0.5, 0.5)
    claim = scoring.rho0_peak_claim(peaked(by, peak, peak - decline), flat, 10, "r")
    assert claim.passed is True and claim.null_passed is False
    # one snapshot late, a hair below PEAK_MIN, or a decline a hair short: fails
    assert scoring.rho0_peak_claim(peaked(by + 100, peak, 0.5), flat, 10, "r").passed is False
    assert scoring.rho0_peak_claim(peaked(by, peak - 1e-9, 0.5), flat, 10, "r").passed is False
    short = peaked(by, peak, peak - decline + 1e-9)
    assert scoring.rho0_peak_claim(short, flat, 10, "r").passed is False


def test_rho0_peak_claim_scales_peak_by_to_a_shorter_horizon():
    """On a 600-epoch run PEAK_BY = 400 becomes 200: a peak at 200 passes, at 300 it fails."""
    flat = peaked(0, 0.5, 0.5, 600)
    assert scoring.rho0_peak_claim(peaked(200, 1.0, 0.5, 600), flat, 10, "r").passed is True
    assert scoring.rho0_peak_claim(peaked(300, 1.0, 0.5, 600), flat, 10, "r").passed is False


def with_peaks(rho0_epoch: int, probe_epoch: int) -> dict:
    d = measurement(0.5, 0.9)
    d["rho0"] = np.where(d["steps"] == rho0_epoch, 0.99, 0.5)
    d["probe_corr"] = np.where(d["probe_steps"] == probe_epoch, 0.99, 0.5)
    return d


def test_peak_order_claim_counts_a_tie_as_ordered():
    null = with_peaks(1200, 100)
    for rho0_epoch, probe_epoch, passed in [(600, 600, True), (100, 600, True), (1200, 600, False)]:
        claim = scoring.peak_order_claim(with_peaks(rho0_epoch, probe_epoch), null, "add", "r")
        assert claim.passed is passed, (rho0_epoch, probe_epoch)
        assert claim.null_passed is False


def collapsed(accuracy: float, mean_s: float) -> dict:
    """Accuracy and mean off-diagonal S^emb 0 at init and the given values from epoch 100 on."""
    d = measurement(0.5, 0.9)
    d["accuracy"] = np.where(d["steps"] >= scoring.EARLY, accuracy, 0.0)
    d["mean_offdiag_S_emb"] = np.where(d["steps"] >= scoring.EARLY, mean_s, 0.0)
    return d


def test_collapse_claim_passes_exactly_at_two_over_n_and_collapse():
    N, c = 10, scoring.COLLAPSE
    claim = scoring.collapse_claim(collapsed(2 / N, c), N, "r")
    assert claim.passed is True
    assert claim.null_passed is False  # the init: accuracy 0 but no collapse
    assert scoring.collapse_claim(collapsed(2 / N + 1e-9, c), N, "r").passed is False
    assert scoring.collapse_claim(collapsed(2 / N, c - 1e-9), N, "r").passed is False


def test_low_frequency_claim_passes_at_early_k_max_and_not_one_above():
    K = scoring.EARLY_K_MAX + 3
    constant = np.zeros(K, dtype=bool)

    def spike(k):
        return np.where(np.arange(K) == k, 0.9, 0.1)

    top = scoring.EARLY_K_MAX
    claim = scoring.low_frequency_claim(spike(top), spike(top + 1), constant, "add", "r")
    assert claim.passed is True and claim.null_passed is False
    above = scoring.low_frequency_claim(spike(top + 1), spike(0), constant, "add", "r")
    assert above.passed is False and above.null_passed is True


def test_probe_claim_counts_the_epoch_the_early_phase_ends():
    """Accuracy reaches the phase's end at epoch 600, where the probe (0.5 against rho_0 0.4)
    closes a sixth of the gap: the claim fails there though epoch 1200 alone would pass."""
    d = measurement(rho0_final=0.8, probe_final=1.0)
    assert scoring.end_of_early_phase(d) == 600
    claim = scoring.probe_claim(d, "add", "gd-wide")
    assert claim.passed is False and "epochs ≥ 600" in claim.measured
    d["probe_corr"][1] = 0.9  # closes 5/6 of the gap at 600: passes
    assert scoring.probe_claim(d, "add", "gd-wide").passed is True
