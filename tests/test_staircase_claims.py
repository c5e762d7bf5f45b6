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
