"""Reproduction experiments: one module per claim or paper figure, one `REGISTRY` of records.

`REGISTRY` lists every experiment as an `Experiment` record: its name, title, module, the
inputs it needs from outside (``"corpus"``: a UTF-8 text file; ``"root"``: the output folder,
for the regime study's units), whether it takes a training regime, and whether
`sims/reproduce.py` runs it into ``sims/REPORT.md``. A module is imported only when its
experiment runs (`Experiment.load`), so listing the registry is instant.

Each experiment module defines ``run(full: bool, ..., tiny: bool) -> Outcome`` (``tiny``: its
smoke run, ``--tiny``): it composes library calls,
measures, and states every claim with its criterion and pass/fail. `execute` runs one,
writes ``ROOT/results/NAME.json`` and its figures ``ROOT/figures/NAME_*.png`` atomically, and
returns the record; ``ctx-staircase run NAME`` calls it, and every ``sims/NAME.py`` is a wrapper
of that command. While an experiment runs, its training lanes are saved under
``ROOT/units/NAME/`` (`units.caching`), so an interrupted experiment resumes; the folder is
removed once the result is written.

Experiments whose record has ``regimes`` are FFN or attention-only experiments that also take
``regime=`` (a `regime.Regime`, default the primary regime) and ``quick=`` (the reduced sizes of
the regime study); `execute` writes a non-primary run under ``results/regimes/``.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import shutil
import time
from pathlib import Path
from typing import Any

from ctx_staircase import distributed, results, units

#: What an experiment may need from outside: a text file, or the output folder itself.
INPUTS = ("corpus", "root")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One registered experiment.

    Attributes:
        name: the name on the command line (``ctx-staircase run NAME``, ``sims/NAME.py``).
        title: one line saying what it checks.
        module: the module holding its ``run`` (imported only by `load`).
        inputs: what it needs from outside, each one of `INPUTS`: ``"corpus"`` (``text_path=``,
            ``--text FILE``) or ``"root"`` (``root=``, the output folder).
        regimes: whether it takes ``regime=`` and ``quick=`` (the regime study runs it).
        report: whether `sims/reproduce.py` runs it and ``sims/REPORT.md`` shows it.
    """

    name: str
    title: str
    module: str
    inputs: tuple[str, ...] = ()
    regimes: bool = False
    report: bool = True

    def __post_init__(self) -> None:
        unknown = [i for i in self.inputs if i not in INPUTS]
        if unknown:
            raise ValueError(f"inputs must be among {list(INPUTS)}; got {unknown}")

    def load(self):
        """The experiment's module (imported now, on first use)."""
        return importlib.import_module(self.module)

    def run(self, **options) -> Outcome:
        """The experiment itself, nothing written (see `execute`): ``module.run(**options)``, or
        for a declarative module (one with a ``SPEC``) `declarative.Spec.outcome`."""
        module = self.load()
        return module.SPEC.outcome(**options) if hasattr(module, "SPEC") else module.run(**options)

    def memory_bytes(self, full: bool = False, tiny: bool = False) -> int | None:
        """The module's up-front memory estimate in bytes, or ``None`` when it has none."""
        module = self.load()
        if not hasattr(module, "memory_bytes"):
            return None
        return module.memory_bytes(full=full, tiny=tiny)


def _experiment(name: str, title: str, **fields) -> Experiment:
    return Experiment(name, title, f"ctx_staircase.experiments.{name}", **fields)


#: Every experiment, in report order; the flagship first (it is not in the report).
REGISTRY: tuple[Experiment, ...] = (
    _experiment(
        "staircase",
        "The context staircase on add and mod (N=40), with the theory overlay",
        report=False,
    ),
    _experiment(
        "fig2a_label_laws",
        "Task 1: the anchor's predicted label law matches p_a (Fig. 2A)",
        regimes=True,
    ),
    _experiment(
        "fig2_geometry",
        "Early embedding geometry vs the zero-order signature: add, sub, mul, N=20 (Fig. 2B-F)",
        regimes=True,
    ),
    _experiment(
        "fig3_staircase", "The staircase in one run: add and mod, N=40 (Fig. 3A-C)", regimes=True
    ),
    _experiment(
        "fig4_frequency",
        "Frequency-resolved first-order alignment and the seed study, N=40 (Fig. 4, App. D)",
        regimes=True,
    ),
    _experiment(
        "fig5_activation_order",
        "Activation order gates learnability: modsum with sigma = z^K, L in {2,3,4}, K in 1..6",
        regimes=True,
    ),
    _experiment(
        "fig6_attention",
        "Attention-only staircase on add/mod (N=20) and attention routing on Task 3",
        regimes=True,
    ),
    _experiment(
        "fig8_role",
        "FFN vs attention-only on mod (N=40), and fixed signature embeddings (Fig. 8)",
        regimes=True,
    ),
    _experiment(
        "fig9_modulus",
        "Epochs to 95% train accuracy vs modulus M (N=20): slow iff M | N?",
        regimes=True,
    ),
    _experiment(
        "appc_task4_orders",
        "Task 4 anchor geometry against signature orders 0, 1, 2 (App. C Figs. 12-13)",
        regimes=True,
    ),
    _experiment(
        "minmax",
        "Min-max selection: zero-order signature superposition and a trained FFN (N=20)",
        regimes=True,
    ),
    _experiment(
        "rb_anchor_tasks",
        "[RB] reasoning vs memory anchors at gamma in {0.3, 0.5, 0.8} (one-layer transformer)",
    ),
    _experiment(
        "theory_vs_training",
        "Closed-form linear phase and signature flow against GD training (add, N=20)",
    ),
    _experiment(
        "escape_feedback",
        "The escape law with the softmax feedback on five tasks; ReLU gate alignment",
    ),
    _experiment(
        "relu_escape",
        "The ReLU first escape as a law: unit flow and feedback clock on add, sub, mod, Task 4",
    ),
    _experiment(
        "second_plateau",
        "The end of the collapse plateau: the second escape predicted against training",
    ),
    _experiment(
        "staircase_steps",
        "Where a staircase step is a gradient-flow phenomenon: lr and lr/4 on every L >= 2 task",
    ),
    _experiment(
        "attention_theory",
        "Attention-only theory against GD training: uniform-attention flow and plateau law",
    ),
    _experiment(
        "attention_departure",
        "When attention leaves uniform: departure times from the first-order attention flow",
    ),
    _experiment(
        "lm_builtin",
        "Built-in corpus: semantic structure of next-token signatures and of learned embeddings",
    ),
    _experiment(
        "regime_study",
        "Every FFN and attention-only claim under label vocabulary x optimizer (theory/regimes.md)",
        inputs=("root",),
    ),
    _experiment(
        "order1_onset",
        "Order-1 onset: order-1 drive overtaking order-0 vs first-order probe overtaking rho_0",
    ),
    _experiment(
        "lm_text",
        "Language model on real text: rho_next rises to an early peak, then settles lower",
        inputs=("corpus",),
    ),
)

#: The flagship run of ``ctx-staircase run`` with no name (it writes runs/staircase/).
FLAGSHIP = "staircase"

_BY_NAME = {experiment.name: experiment for experiment in REGISTRY}


def names() -> tuple[str, ...]:
    """Every experiment's name, in `REGISTRY` order."""
    return tuple(_BY_NAME)


def reported() -> tuple[str, ...]:
    """The experiments `sims/reproduce.py` runs and ``sims/REPORT.md`` shows, in order."""
    return tuple(e.name for e in REGISTRY if e.report)


def with_regimes() -> tuple[str, ...]:
    """The experiments the regime study runs under every `regime.Regime`."""
    return tuple(e.name for e in REGISTRY if e.regimes)


def get(name: str) -> Experiment:
    """The record named ``name``; ``ValueError`` naming every allowed name otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"experiment must be one of {', '.join(_BY_NAME)}; got {name!r}")
    return _BY_NAME[name]


def check_options(
    name: str,
    *,
    full: bool = False,
    tiny: bool = False,
    regime: str | None = None,
    quick: bool = False,
    corpus: str | Path | None = None,
) -> Experiment:
    """The record of ``name`` once the options suit it; else ``ValueError`` naming the option
    and the experiments (or values) it applies to. Checks names only: nothing is imported."""
    experiment = get(name)
    if tiny and full:
        raise ValueError("--tiny and --full exclude each other")
    if tiny and quick:
        raise ValueError("--tiny and --quick exclude each other")
    if (regime is not None or quick) and not experiment.regimes:
        allowed = ", ".join(with_regimes())
        raise ValueError(f"--regime and --quick apply to {allowed} only; got experiment {name!r}")
    if "corpus" in experiment.inputs and corpus is None:
        raise ValueError(f"experiment {name!r} needs --text FILE (a UTF-8 text file)")
    if "corpus" not in experiment.inputs and corpus is not None:
        allowed = ", ".join(e.name for e in REGISTRY if "corpus" in e.inputs)
        raise ValueError(f"--text applies to {allowed} only; got experiment {name!r}")
    return experiment


class Kind(enum.StrEnum):
    """Whose claim a `Claim` checks (theory/regimes.md, "Which claims the headline counts"):
    the paper's (a figure or a prediction §8.n), the project's (a threshold, summary statistic
    or diagnostic it chose to make a claim testable), or a result beyond the paper."""

    PAPER = "paper"
    PROJECT = "project"
    BEYOND = "beyond"


#: Every `Kind`'s name, in report order.
KINDS = tuple(kind.value for kind in Kind)


class Verdict(enum.StrEnum):
    """What a claim's run says about it (a ``str``, so records and tables hold its text)."""

    PASS = "pass"
    FAIL = "FAIL"
    #: it passes, and so does its null control: the criterion cannot tell
    VACUOUS = "vacuous"
    #: the run cannot test it (it diverged, or stopped before the effect could appear)
    NOT_TESTED = "not tested"
    #: no criterion: a descriptive row
    DESCRIPTIVE = "—"


class Failure(enum.StrEnum):
    """The class of a FAIL (a ``str``, so records hold its text)."""

    #: no measurement says which
    UNCLASSIFIED = "unclassified"
    #: the claim is false in the regime it was run in
    FALSE = "false"
    #: the run reached its budget cap while still learning
    BUDGET = "budget"


#: Every `Failure`'s name.
FAILURES = tuple(failure.value for failure in Failure)


@dataclasses.dataclass
class Claim:
    """One checked claim: what the paper (or our theory) says, what we measured, the criterion.

    Attributes:
        item: the claim id (§8.n numbers the paper's checkable predictions) or the paper's
            section or figure.
        claim, measured, criterion: what is claimed, what was measured, the pass rule.
        passed: the criterion on the trained run (``None``: descriptive, no criterion).
        note: why, when it fails (with data), or what else was seen.
        kind: its `Kind` (a name such as ``"paper"`` is read as one): the paper's claim (a
            figure or a prediction §8.n), one the project made operational with a threshold or
            a diagnostic variant, or one beyond the paper (theory checks, order-1 onset, ...).
        regime: the `regime.Regime` name the claim was measured in (or a short description).
        null: the null control scored with the same criterion, and its measured value.
        null_passed: the criterion on the null; a pass whose null also passes is *vacuous*.
        untested: why the run cannot test the claim (it diverged at step k, or stopped before
            the effect could appear); a claim with a reason is *not tested*, whatever its
            criterion gave.
        failure: the class of a FAIL, a `Failure` (its name, such as ``"false"``, is read as
            one): false in this regime, the budget cap reached while still learning, or
            unclassified (the default: nothing measured says which).
    """

    item: str
    claim: str
    measured: str
    criterion: str
    passed: bool | None
    note: str = ""
    kind: Kind = Kind.PAPER
    regime: str = ""
    null: str = ""
    null_passed: bool | None = None
    untested: str = ""
    failure: Failure = Failure.UNCLASSIFIED

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}; got {self.kind!r}")
        self.kind = Kind(self.kind)
        if self.failure not in FAILURES:
            raise ValueError(f"failure must be one of {list(FAILURES)}; got {self.failure!r}")
        self.failure = Failure(self.failure)


def verdict(claim: dict | Claim) -> Verdict:
    """The claim's `Verdict`: not tested when it says why its run cannot test it; else none
    without a criterion, FAIL, vacuous (it passes, but so does its null) or pass."""
    if isinstance(claim, Claim):
        claim = dataclasses.asdict(claim)
    if claim.get("untested"):
        return Verdict.NOT_TESTED
    passed = claim["passed"]
    if passed is None:
        return Verdict.DESCRIPTIVE
    if not passed:
        return Verdict.FAIL
    return Verdict.VACUOUS if claim.get("null_passed") is True else Verdict.PASS


def shown(claim: dict | Claim) -> str:
    """The verdict as a report shows it: a FAIL with its class, a claim not tested with its
    reason."""
    if isinstance(claim, Claim):
        claim = dataclasses.asdict(claim)
    result = verdict(claim)
    if result is Verdict.NOT_TESTED:
        return f"not tested: {claim['untested']}"
    if result is Verdict.FAIL:
        return f"FAIL{_FAILURE_SHOWN[claim.get('failure', 'unclassified')]}"
    return result.value


_FAILURE_SHOWN = {
    Failure.UNCLASSIFIED: "",
    Failure.FALSE: " (false in this regime)",
    Failure.BUDGET: " (budget cap reached, still learning)",
}


@dataclasses.dataclass
class Outcome:
    """What an experiment returns: its claims, figures (name -> Matplotlib figure) and numbers,
    and, for each of its theory comparisons, what it cost (`comparison.cost_summary`; saved
    beside ``seconds``, outside the numbers, as wall time changes from run to run)."""

    claims: list[Claim]
    figures: dict[str, Any]
    numbers: dict[str, Any]
    config: dict[str, Any]
    cost: dict[str, Any] = dataclasses.field(default_factory=dict)


def execute(
    name: str | Experiment,
    *,
    full: bool = False,
    root: str | Path = "sims",
    tiny: bool = False,
    regime: str | None = None,
    quick: bool = False,
    **options,
) -> dict:
    """Run one experiment (its name, or an `Experiment` record outside the registry) and write
    its JSON and figures under ``root``; returns the JSON dict.

    ``tiny`` shrinks every size to a smoke run (every stage and claim at the smallest sizes
    that exercise it, 5-35 s on 2 CPU cores), which writes its figures as PNG only; ``options`` go
    to the experiment's ``run`` (``text_path=`` for the ones that need a ``"corpus"``).
    ``regime`` (a `regime.Regime` name) and ``quick`` apply to the experiments of
    `with_regimes`; a run in a non-primary regime, or a quick one, writes
    ``results/regimes/NAME__REGIME[_quick].json`` and no figures.
    """
    from ctx_staircase import plots  # here, so that `run --list` loads no Matplotlib
    from ctx_staircase.experiments import regime as regimes

    experiment = name if isinstance(name, Experiment) else get(name)
    name = experiment.name
    chosen = regimes.parse(regime)
    if (regime is not None or quick) and not experiment.regimes:
        raise ValueError(f"experiment {name!r} takes no regime or quick option")
    if experiment.regimes:
        options.update(regime=chosen, quick=quick)
    side_run = experiment.regimes and (not chosen.primary or quick)
    start = time.perf_counter()
    if tiny:
        options["tiny"] = True
    if "root" in experiment.inputs:
        options["root"] = root
    root = Path(root)
    unit_root = (
        root / "units" / result_path(root, name, chosen.name if side_run else None, quick).stem
    )
    with units.caching(unit_root):  # an interrupted experiment resumes from its saved lanes
        outcome = experiment.run(full=full, **options)
    seconds = time.perf_counter() - start
    figures = {}
    for key, figure in outcome.figures.items():
        if side_run:
            import matplotlib.pyplot as plt

            plt.close(figure)
            continue
        path = root / "figures" / f"{name}_{key}.png"
        plots.save_figure(figure, path, pdf=not tiny)
        figures[key] = str(path.relative_to(root))
    regime_name = chosen.name if experiment.regimes else None
    record = _record(experiment, outcome, figures, seconds, full, tiny, regime_name, quick)
    results.write_json(result_path(root, name, chosen.name if side_run else None, quick), record)
    if distributed.is_writer():  # finished: a rerun recomputes from scratch
        shutil.rmtree(unit_root, ignore_errors=True)
    return record


def _record(
    experiment: Experiment,
    outcome: Outcome,
    figures: dict,
    seconds: float,
    full: bool,
    tiny: bool,
    regime: str | None,
    quick: bool,
) -> dict:
    """The JSON record `execute` writes: the run's options, its cost, claims, figure paths,
    numbers, config and environment."""
    return {
        "name": experiment.name,
        "title": experiment.title,
        "full": full,
        "tiny": tiny,
        "regime": regime,
        "quick": quick,
        "seconds": seconds,
        **({"cost": outcome.cost} if outcome.cost else {}),
        "claims": [dataclasses.asdict(c) for c in outcome.claims],
        "figures": figures,
        "numbers": outcome.numbers,
        "config": outcome.config,
        "environment": results.environment(),
    }


def result_path(root: str | Path, name: str, regime: str | None = None, quick: bool = False):
    """Where `execute` writes an experiment's record (a regime-study run when ``regime``)."""
    root = Path(root)
    if regime is None and not quick:
        return root / "results" / f"{name}.json"
    return root / "results" / "regimes" / f"{name}__{regime}{'_quick' if quick else ''}.json"
