"""Declarative experiments (`experiments.declarative`) and typed records (`records`).

A toy experiment in one file (tests/toy_experiment.py) goes through `experiments.execute`, is
rescored from the JSON it wrote, and is rendered by the report.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import numpy as np
import pytest
import toy_experiment

from ctx_staircase import records, results
from ctx_staircase.experiments import Experiment, Kind, Verdict, execute, verdict
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec, rescore, run
from ctx_staircase.experiments.report import render

TOY = Experiment(
    "toy", "Is the zero-order label signature token-dependent? (a toy)", "toy_experiment"
)


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Point(NamedTuple):
    x: float
    label: str


@dataclasses.dataclass(frozen=True)
class Nested:
    points: tuple[Point, ...]
    curve: np.ndarray
    by_name: dict[str, float]
    colour: Colour
    count: int
    maybe: float | None
    other: Point | None
    pair: tuple[int, str]
    kept: object = dataclasses.field(default=None, compare=False, metadata={"saved": False})


def _nested() -> Nested:
    return Nested(
        points=(Point(1.5, "a"), Point(-2.0, "b")),
        curve=np.array([[0.25, np.nan], [np.inf, -1.0]]),
        by_name={"first": 1.0, "second": np.float64(3.5)},
        colour=Colour.BLUE,
        count=3,
        maybe=None,
        other=Point(0.5, "z"),
        pair=(4, "four"),
        kept="for the figures only",
    )


def test_a_record_comes_back_as_it_was_saved(tmp_path):
    assert "kept" not in records.encode(_nested())
    saved = results.write_json(tmp_path / "r.json", records.encode(_nested()))
    back = records.decode(Nested, results.read_json(saved))
    want = _nested()
    assert isinstance(back.curve, np.ndarray)
    np.testing.assert_array_equal(back.curve, want.curve)  # NaN in the same place
    assert back.points == want.points and isinstance(back.points[0], Point)
    assert back.by_name == want.by_name and type(back.by_name["second"]) is float
    assert back.colour is Colour.BLUE and back.count == 3 and back.maybe is None
    assert back.pair == (4, "four") and isinstance(back.other, Point) and back.kept is None


def test_records_name_what_they_cannot_hold():
    with pytest.raises(TypeError, match="cannot encode a set"):
        records.encode({"a": {1, 2}})
    with pytest.raises(TypeError, match="keys must be str"):
        records.encode({1: 2.0})
    with pytest.raises(ValueError, match=r"lacks \['label'\]"):
        records.decode(Point, {"x": 1.0})


def test_size_reads_the_flags():
    assert Size.of() is Size.CPU
    assert Size.of(full=True) is Size.FULL and Size.of(tiny=True) is Size.TINY
    assert Size.of(quick=True) is Size.QUICK
    with pytest.raises(ValueError, match="exclude each other"):
        Size.of(full=True, tiny=True)


def test_a_size_the_experiment_lacks_is_named():
    with pytest.raises(ValueError, match="size must be one of tiny, cpu, full"):
        run(toy_experiment.SPEC, Size.QUICK)


def test_the_toy_runs_through_execute_rescore_and_report(tmp_path):
    record = execute(TOY, root=tmp_path, tiny=True)
    saved = results.read_json(tmp_path / "results" / "toy.json")
    assert saved["claims"] == results.loads(results.dumps(record["claims"]))
    assert (tmp_path / "figures" / "toy_signature.png").is_file()
    (claim,) = saved["claims"]
    assert claim["passed"] is True and claim["null_passed"] is False
    assert verdict(claim) is Verdict.PASS
    assert saved["config"] == {"N": 6, "tasks": ["add", "mod"], "regime": "exact (no training)"}
    # the spread on add is a real number, and mod's is zero to rounding
    assert saved["numbers"]["spread"] > 0.1 and saved["numbers"]["null_spread"] < 1e-12
    rebuilt = rescore(toy_experiment.SPEC, saved["numbers"], saved["config"])
    assert [dataclasses.asdict(c) for c in rebuilt] == saved["claims"]
    text = render([saved])
    assert "the zero-order label signature of add depends on the token" in text


def test_a_claim_is_scored_on_its_null_with_the_same_criterion():
    spec = ClaimSpec(
        item="x",
        claim="above one",
        statistic=lambda r, c: r.x,
        measured=lambda r, c: f"{r.x}",
        criterion=Criterion("> 1", lambda v: v > 1),
        null=lambda r, c: -r.x,
        null_text="the negative",
        kind=Kind.BEYOND,
        note=lambda r, c: f"label {r.label} under {c}",
        untested=lambda r, c: "" if r.x < 10 else "too large to test",
        failure=lambda r, c: "false",
    )
    passed = spec.score(Point(1.5, "a"), "config", "here")
    assert (passed.passed, passed.null_passed) == (True, False)
    assert passed.note == "label a under config" and passed.regime == "here"
    assert passed.kind is Kind.BEYOND
    vacuous = spec.score(Point(-2.0, "b"), "config")  # fails; its null (2.0) passes
    assert (vacuous.passed, vacuous.null_passed) == (False, True) and vacuous.failure == "false"
    assert verdict(spec.score(Point(20.0, "c"), "config")) is Verdict.NOT_TESTED
    assert passed.criterion == "> 1"


def test_a_criterion_text_can_name_the_runs_threshold():
    """A rule whose threshold depends on the run (e.g. 2/N) states it from the config."""
    spec = ClaimSpec(
        item="x",
        claim="above 2/N",
        statistic=lambda r, c: (r.x, c),
        measured=lambda r, c: f"{r.x}",
        criterion=Criterion(lambda r, c: f"> 2/N = {2 / c:.2f}", lambda v: v[0] > 2 / v[1]),
    )
    claim = spec.score(Point(0.6, "a"), 4)
    assert claim.criterion == "> 2/N = 0.50" and claim.passed is True
    assert spec.score(Point(0.6, "a"), 2).passed is False


def test_measure_must_return_the_declared_record():
    spec = Spec(record=Point, configs={Size.CPU: 1}, measure=lambda c, r: (1.0, "a"), claims=())
    with pytest.raises(TypeError, match="measure must return a Point"):
        run(spec)


def test_a_table_given_as_a_function_of_the_config_has_the_rows_of_that_config():
    """One claim per item a size runs: ``claims`` as ``config -> table``."""

    def above(n):
        return ClaimSpec(
            item=f"{n}",
            claim=f"x above {n}",
            statistic=lambda r, c: r.x,
            measured=lambda r, c: f"{r.x}",
            criterion=Criterion(f"> {n}", lambda v: v > n),
        )

    spec = Spec(
        record=Point,
        configs={Size.TINY: (1,), Size.CPU: (1, 2, 3)},
        measure=lambda c, r: Point(2.5, "a"),
        claims=lambda config: tuple(above(n) for n in config),
    )
    assert [c.passed for c in run(spec, Size.TINY).claims] == [True]
    assert [c.passed for c in run(spec, Size.CPU).claims] == [True, True, False]


def test_a_claim_checked_without_training_names_its_own_regime():
    """A data fact in a regime experiment names no trained regime: its ``regime`` replaces the
    experiment's; the other claims keep the experiment's."""
    fact = ClaimSpec(
        item="x",
        claim="a data fact",
        statistic=lambda r, c: r.x,
        measured=lambda r, c: f"{r.x}",
        criterion=Criterion("> 1", lambda v: v > 1),
        regime="data only (no training)",
    )
    trained = dataclasses.replace(fact, claim="a trained one", regime=None)
    spec = Spec(
        record=Point,
        configs={Size.CPU: 1},
        measure=lambda c, r: Point(2.5, "a"),
        claims=(fact, trained),
        regime_text=lambda config: "gd-wide",
    )
    assert [c.regime for c in run(spec).claims] == ["data only (no training)", "gd-wide"]


def test_a_module_declares_its_spec_by_its_names():
    names = vars(toy_experiment) | {"CLAIMS": toy_experiment.SPEC.claims}
    spec = Spec.declared(names)
    assert spec.record is toy_experiment.Record and spec.measure is toy_experiment.measure
    assert spec.claims == toy_experiment.SPEC.claims and spec.figures is toy_experiment.figures
    assert spec.regime_text(toy_experiment.CONFIG_CPU) == ""  # none declared: no regime text
    with pytest.raises(ValueError, match=r"must define \['CONFIGS', 'CLAIMS'\]"):
        Spec.declared({"Record": Point, "measure": None, "figures": None})


@dataclasses.dataclass(frozen=True)
class Keyed:
    first: Point = dataclasses.field(metadata={"key": "a/b"})
    maybe: Point | None = dataclasses.field(default=None, metadata={"saved": records.IF_SET})


def test_a_field_saves_under_its_key_and_only_where_set():
    bare = Keyed(Point(1.0, "x"))
    assert records.encode(bare) == {"a/b": {"x": 1.0, "label": "x"}}
    full = Keyed(Point(1.0, "x"), Point(2.0, "y"))
    assert records.encode(full)["maybe"] == {"x": 2.0, "label": "y"}
    for value in (bare, full):
        assert records.decode(Keyed, records.encode(value)) == value
