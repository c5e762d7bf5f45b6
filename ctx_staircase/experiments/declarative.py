"""An experiment as data: a config per `Size`, one measurement, a table of `ClaimSpec`s.

A module that defines ``SPEC = Spec(...)`` is run by `experiments.execute` through `run`: the
config of the size asked for is measured once (``measure(config, regime) -> record``, a typed
record), every claim of the table is scored on the record and on its null with the same
`Criterion`, and the figures are drawn from the record. The record and the config are saved as
they are (`records.encode`), so rescoring a saved run is `rescore`: load them back
(`records.decode`) and apply the same table. Nothing is renamed between measuring, saving and
scoring.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any

from ctx_staircase import records
from ctx_staircase.experiments import Claim, Kind, Outcome
from ctx_staircase.experiments.common import NoNull, reported, scored

__all__ = ["DECLARED", "ClaimSpec", "Criterion", "Size", "Spec", "config_regime", "rescore", "run"]


class Size(enum.StrEnum):
    """How big a run is: the smoke run (``--tiny``), the regime study's reduced sizes
    (``--quick``), the default CPU-sized run, and the paper's sizes (``--full``)."""

    TINY = "tiny"
    QUICK = "quick"
    CPU = "cpu"
    FULL = "full"

    @classmethod
    def of(cls, *, full: bool = False, tiny: bool = False, quick: bool = False) -> Size:
        """The size the command-line flags ask for (at most one of them)."""
        flags = {cls.FULL: full, cls.TINY: tiny, cls.QUICK: quick}
        chosen = [size for size, flag in flags.items() if flag]
        if len(chosen) > 1:
            raise ValueError(f"size: --{chosen[0]} and --{chosen[1]} exclude each other")
        return chosen[0] if chosen else cls.CPU


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A pass rule: ``test(statistic) -> bool`` (``None``: it does not apply) and the ``text``
    the report shows for it (a text, or a callable of ``(record, config)`` where the rule's
    threshold depends on the run, e.g. on its N)."""

    text: Callable[[Any, Any], str] | str
    test: Callable[[Any], bool | None]


def _text(value: Callable[[Any, Any], str] | str, record: Any, config: Any) -> str:
    return value(record, config) if callable(value) else value


@dataclasses.dataclass(frozen=True)
class ClaimSpec:
    """One claim of an experiment, as a function of its record and config: every callable takes
    ``(record, config)``.

    Attributes:
        item: the paper's figure or prediction (§8.n), or the project's label.
        claim: what is claimed.
        statistic: the value the criterion reads on the run.
        measured: the measured text.
        criterion: the pass rule, applied to the run's statistic and to the null's (``None``:
            a descriptive row, no verdict).
        null: the null control's value (of the statistic's kind, or a `common.Draws` or
            `common.NoNull`), or ``None`` when it has none.
        null_text: what the null is and measured (a text or a callable); without a ``null``,
            why there is none.
        kind: whose claim it is (`Kind`).
        note: what else was seen (a text or a callable).
        untested: why the run cannot test the claim ("" when it can), or ``None``.
        failure: the class of a FAIL (an `experiments.FAILURES` name, or a callable).
        regime: the regime the claim names where it is not the experiment's (a data fact
            checked without training), or ``None``.
    """

    item: str
    claim: str
    statistic: Callable[[Any, Any], Any]
    measured: Callable[[Any, Any], str]
    criterion: Criterion | None
    null: Callable[[Any, Any], Any] | None = None
    null_text: Callable[[Any, Any], str] | str = ""
    kind: Kind = Kind.PAPER
    note: Callable[[Any, Any], str] | str = ""
    untested: Callable[[Any, Any], str] | None = None
    failure: Callable[[Any, Any], str] | str = "unclassified"
    regime: str | None = None

    def score(self, record: Any, config: Any, regime: str = "") -> Claim:
        """The `Claim` this spec makes of ``record`` measured under ``config``, in ``regime``."""
        texts = dict(
            item=self.item,
            claim=self.claim,
            measured=self.measured(record, config),
            note=_text(self.note, record, config),
            kind=self.kind,
            regime=regime if self.regime is None else self.regime,
            untested=self.untested(record, config) if self.untested else "",
            failure=_text(self.failure, record, config),
        )
        criterion = self.criterion or Criterion("", reported)
        null = self._null(record, config)
        verdicts = scored(criterion.test, self.statistic(record, config), null)
        null_text = verdicts.pop("null", _text(self.null_text, record, config))
        return Claim(
            **texts,
            criterion=_text(criterion.text, record, config),
            null=null_text,
            **verdicts,
        )

    def _null(self, record: Any, config: Any) -> Any:
        if self.null is None:
            why = _text(self.null_text, record, config) or "not defined for this claim"
            return NoNull(why)
        return self.null(record, config)


#: The names a declarative module defines, in `Spec`'s field order (`Spec.declared`).
DECLARED = ("Record", "CONFIGS", "measure", "CLAIMS", "figures")


def config_regime(config: Any) -> str:
    """A `Spec.regime_text` for a config that records its regime's name (``config.regime``)."""
    return config.regime


def _no_figures(config: Any, record: Any) -> dict[str, Any]:
    return {}


def _as_given(config: Any, regime: Any) -> Any:
    return config


def _no_regime(config: Any) -> str:
    return ""


@dataclasses.dataclass(frozen=True)
class Spec:
    """A declarative experiment.

    Attributes:
        record: the class of what ``measure`` returns (a frozen dataclass or NamedTuple).
        configs: the config of each `Size` the experiment runs at (frozen dataclasses of one
            class).
        measure: ``(config, regime) -> record``: every training run and theory of the
            experiment (``regime`` a `regime.Regime`, or ``None`` for an experiment without).
        claims: the table of `ClaimSpec`s, in report order, or ``config -> table`` where the
            rows depend on the config (one claim per item the size runs).
        figures: ``(config, record) -> {name: Matplotlib figure}``.
        settle: ``(config, regime) -> config``, the config with what the regime sets filled in
            (its name, the vocabulary it gives); the config as given by default.
        regime_text: ``config -> str``, the regime its claims name ("" by default).
    """

    record: type
    configs: Mapping[Size, Any]
    measure: Callable[[Any, Any], Any]
    claims: tuple[ClaimSpec, ...] | Callable[[Any], tuple[ClaimSpec, ...]]
    figures: Callable[[Any, Any], dict[str, Any]] = _no_figures
    settle: Callable[[Any, Any], Any] = _as_given
    regime_text: Callable[[Any], str] = _no_regime

    @classmethod
    def declared(cls, names: Mapping[str, Any]) -> Spec:
        """The `Spec` a module declares by its names (``SPEC = Spec.declared(globals())``):
        `DECLARED` (``Record``, ``CONFIGS``, ``measure``, ``CLAIMS``, ``figures``) and, where
        it defines them, ``settle`` and ``regime_text``; ``ValueError`` naming what is
        missing."""
        missing = [name for name in DECLARED if name not in names]
        if missing:
            raise ValueError(f"a declarative experiment must define {missing}")
        optional = {name: names[name] for name in ("settle", "regime_text") if name in names}
        return cls(*(names[name] for name in DECLARED), **optional)

    def config(self, size: Size, regime: Any = None) -> Any:
        """The config of ``size`` in ``regime`` (`settle`); ``ValueError`` naming the sizes it
        has otherwise."""
        if size not in self.configs:
            allowed = ", ".join(str(s) for s in self.configs)
            raise ValueError(f"size must be one of {allowed} for this experiment; got {size}")
        return self.settle(self.configs[size], regime)

    def score(self, record: Any, config: Any) -> list[Claim]:
        """Every claim of the table, scored on ``record`` measured under ``config``."""
        table = self.claims(config) if callable(self.claims) else self.claims
        return [claim.score(record, config, self.regime_text(config)) for claim in table]

    def outcome(self, *, full=False, tiny=False, quick=False, regime: Any = None) -> Outcome:
        """`run` at the size the command-line flags ask for (`Size.of`)."""
        return run(self, Size.of(full=full, tiny=tiny, quick=quick), regime)


def run(spec: Spec, size: Size = Size.CPU, regime: Any = None) -> Outcome:
    """Measure ``spec`` at ``size`` in ``regime``, score its claims and draw its figures. The
    outcome's numbers are the encoded record and its config the encoded config: all that
    `rescore` needs."""
    config = spec.config(Size(size), regime)
    record = spec.measure(config, regime)
    if not isinstance(record, spec.record):
        raise TypeError(f"measure must return a {spec.record.__name__}; got {type(record)}")
    figures = spec.figures(config, record)
    return Outcome(
        spec.score(record, config), figures, records.encode(record), records.encode(config)
    )


def rescore(spec: Spec, numbers: Mapping[str, Any], config: Mapping[str, Any]) -> list[Claim]:
    """The claims of a saved run (its ``numbers`` and ``config`` as `run` wrote them), scored
    again by the same table."""
    kind = type(next(iter(spec.configs.values())))
    return spec.score(records.decode(spec.record, numbers), records.decode(kind, config))
