"""Smoke runs replayed against their records (`tiny_records`): the numbers each experiment
builds from its trainings, and the claims it scores from them, are what they were when recorded.
Five run whole; four, whose smoke runs are nearly all training, run their analysis on their
recorded trainings. The default suite otherwise reaches an experiment's numbers only through its
saved full-size record, never through the code that computes them.

The records are float32 arithmetic of one host, so each number is compared within the spread
measured for it by perturbing the computation as another host does (`host_spread`, its record
tests/data/tiny/spread.json): verdicts exactly, rounded numbers within four times their gap,
chaotic ones within the range their perturbations spanned."""

from __future__ import annotations

import dataclasses
import functools
import os

import host_spread
import pytest
import xla_flags
from tiny_records import ANALYSED, RECORDED, path, recorded_sweeps, tiny_record

from ctx_staircase import experiments, results
from ctx_staircase.experiments import declarative


@pytest.mark.parametrize("name", RECORDED)
def test_a_tiny_run_reproduces_its_recorded_numbers_and_claims(name):
    _replay(name, tiny_record(name))


@pytest.mark.parametrize("name", ANALYSED)
def test_an_analysis_on_its_recorded_trainings_reproduces_its_numbers_and_claims(name, monkeypatch):
    with recorded_sweeps(monkeypatch, name, record=bool(os.environ.get("RECORD_TINY"))):
        got = tiny_record(name)
    _replay(name, got)


def _replay(name: str, got: dict) -> None:
    """``got`` (`tiny_record`) against experiment ``name``'s record: the same config, each number
    within its measured host-to-host spread (`host_spread.admits`), the same verdicts, and
    claims that are a function of the numbers alone."""
    recorded = path(name)
    if os.environ.get("RECORD_TINY"):
        results.write_json(recorded, got)
        pytest.skip(f"recorded {recorded}; now measure its spread: python tests/host_spread.py")
    want = results.read_json(recorded)
    assert got["config"] == want["config"]
    spread = host_spread.load(name)
    assert spread["digest"] == host_spread.digest(want["numbers"]), (
        "the record changed since its spread was measured: python tests/host_spread.py"
    )
    assert spread["verdicts_moved_under"] == [], "a verdict depends on the host"
    wanted, replayed = host_spread.flatten(want["numbers"]), host_spread.flatten(got["numbers"])
    assert replayed.keys() == wanted.keys()
    for where, value in wanted.items():
        agrees, rule = host_spread.admits(replayed[where], value, spread["moved"].get(where))
        assert agrees, f"{where} = {replayed[where]!r}, recorded {value!r}: not {rule}"
    assert len(got["claims"]) == len(want["claims"]) > 0
    for claim, saved in zip(got["claims"], want["claims"], strict=True):
        for key in ("item", "claim", "criterion", "kind", "regime", "passed", "null_passed"):
            assert claim[key] == saved[key], (saved["claim"], key)
    module = experiments.get(name).load()
    # and the claims are a function of the saved numbers alone (fig6's part (a) only: (b)'s are
    # scored on curves its JSON rounds; a declarative module's by its own table)
    rebuild = getattr(module, "saved_claims", getattr(module, "claims", None))
    if hasattr(module, "SPEC"):  # declarative: the same table scored on the decoded record
        rebuild = functools.partial(declarative.rescore, module.SPEC)
    if rebuild is not None:
        rebuilt = [dataclasses.asdict(c) for c in rebuild(got["numbers"], got["config"])]
        assert rebuilt == got["claims"][: len(rebuilt)]
        assert len(rebuilt) == len(got["claims"]) or name == "fig6_attention"


def test_admits_compares_each_kind_of_number_by_its_rule():
    def admits(value, recorded, *others):
        gap, low, high = host_spread.spread_of([recorded, *others])
        moved = {"spread": gap, "low": low, "high": high, "seen": [recorded, *others]}
        return host_spread.admits(value, recorded, moved if others else None)[0]

    # unmoved: the floor only (a changed computation moves a number by far more)
    assert admits(0.5 + 4e-6, 0.5) and not admits(0.5 + 1e-4, 0.5)
    assert admits(3, 3) and not admits(4, 3)
    # rounded: four times the measured gap
    assert admits(0.8 - 7.9e-5, 0.8, 0.8 + 2e-5) and not admits(0.8 - 8.1e-5, 0.8, 0.8 + 2e-5)
    # chaotic (gap above 1e-3 of max(|x|, 1)): the range, widened by the gap on each side
    assert admits(0.375, 0.25, 0.3125) and admits(0.1875, 0.25, 0.3125)
    assert not admits(0.44, 0.25, 0.3125)
    # non-numbers exactly, or as a perturbation gave them; NaN is NaN; a number is no None
    assert admits("ok", "ok") and not admits("x", "ok") and admits("x", "ok", "x")
    assert admits(float("nan"), float("nan")) and not admits(0.0, None)
    assert not admits(True, 1) and not admits(float("nan"), 0.5)


def test_every_recorded_number_is_admitted_at_each_value_its_perturbations_gave():
    """The spread record matches the records it was measured on, and no tolerance it implies is
    tighter than the gap measured: both ends of each moved number's range are admitted."""
    for name in (*RECORDED, *ANALYSED):
        spread, numbers = host_spread.load(name), results.read_json(path(name))["numbers"]
        assert spread["digest"] == host_spread.digest(numbers), name
        recorded = host_spread.flatten(numbers)
        for where, moved in spread["moved"].items():
            x, gap = recorded[where], moved["spread"]
            for value in (moved.get("low", x - gap), moved.get("high", x + gap)):
                assert host_spread.admits(value, x, moved)[0], (name, where)


def test_extra_xla_flags_are_appended_once():
    base = {"XLA_FLAGS": "--a"}
    assert xla_flags.flags({}) == xla_flags.BASE
    assert xla_flags.flags(base) == "--a"
    capped = {**base, xla_flags.EXTRA: "--xla_cpu_max_isa=AVX"}
    assert xla_flags.flags(capped) == "--a --xla_cpu_max_isa=AVX"
    inherited = {**capped, "XLA_FLAGS": xla_flags.flags(capped)}  # a pytest-xdist worker
    assert xla_flags.flags(inherited) == "--a --xla_cpu_max_isa=AVX"
    assert xla_flags.flags({xla_flags.EXTRA: "--b"}) == f"{xla_flags.BASE} --b"
