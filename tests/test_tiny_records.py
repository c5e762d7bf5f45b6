"""Smoke runs replayed against their records (`tiny_records`): the numbers each experiment
builds from its trainings, and the claims it scores from them, are what they were when recorded.
Five run whole; four, whose smoke runs are nearly all training, run their analysis on their
recorded trainings. The default suite otherwise reaches an experiment's numbers only through its
saved full-size record, never through the code that computes them."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
from tiny_records import ANALYSED, RECORDED, path, recorded_sweeps, tiny_record

from ctx_staircase import experiments, results

#: Float32 training replayed on the same kind of CPU agrees to rounding; a changed computation
#: moves a number by far more.
RTOL, ATOL = 1e-4, 1e-7


@pytest.mark.parametrize("name", RECORDED)
def test_a_tiny_run_reproduces_its_recorded_numbers_and_claims(name):
    _replay(name, tiny_record(name))


@pytest.mark.parametrize("name", ANALYSED)
def test_an_analysis_on_its_recorded_trainings_reproduces_its_numbers_and_claims(name, monkeypatch):
    with recorded_sweeps(monkeypatch, name, record=bool(os.environ.get("RECORD_TINY"))):
        got = tiny_record(name)
    _replay(name, got)


def _replay(name: str, got: dict) -> None:
    """``got`` (`tiny_record`) against experiment ``name``'s record: the same config, numbers
    to `RTOL`, the same verdicts, and claims that are a function of the numbers alone."""
    recorded = path(name)
    if os.environ.get("RECORD_TINY"):
        results.write_json(recorded, got)
        pytest.skip(f"recorded {recorded}")
    want = results.read_json(recorded)
    assert got["config"] == want["config"]
    _assert_close(got["numbers"], want["numbers"], "numbers")
    assert len(got["claims"]) == len(want["claims"]) > 0
    for claim, saved in zip(got["claims"], want["claims"], strict=True):
        for key in ("item", "claim", "criterion", "kind", "regime", "passed", "null_passed"):
            assert claim[key] == saved[key], (saved["claim"], key)
    module = experiments.get(name).load()
    # and the claims are a function of the saved numbers alone (fig6's part (a) only: (b)'s are
    # scored on curves its JSON rounds)
    rebuild = getattr(module, "saved_claims", getattr(module, "claims", None))
    if rebuild is not None:
        rebuilt = [dataclasses.asdict(c) for c in rebuild(got["numbers"], got["config"])]
        assert rebuilt == got["claims"][: len(rebuilt)]
        assert len(rebuilt) == len(got["claims"]) or name == "fig6_attention"


def _assert_close(got, want, where: str) -> None:
    """``got`` equals ``want`` (JSON values) key by key, numbers to `RTOL`/`ATOL`, NaN to NaN."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            _assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list) and _numeric(want):
        np.testing.assert_allclose(
            np.asarray(got, dtype=float), np.asarray(want, dtype=float), RTOL, ATOL, err_msg=where
        )
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_close(a, b, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(
            want, rel=RTOL, abs=ATOL
        ), where
    else:
        assert got == want, where


def _numeric(values: list) -> bool:
    """A (nested) list of plain numbers and None, e.g. a curve."""
    flat = np.asarray(values, dtype=object).ravel()
    return all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in flat
    ) and bool(flat.size)
