"""Reproduction experiments: one module per claim or paper figure (sims/ holds thin wrappers).

Each experiment module defines ``NAME``, ``TITLE`` and ``run(full: bool) -> Outcome``: it composes
library calls, measures, and states every claim with its SPEC.md §8 criterion and pass/fail.
`execute` runs one, writes ``sims/results/NAME.json`` and its figures ``sims/figures/NAME*.png``
atomically, and returns the outcome; `sims/reproduce.py` runs them all and writes the report.
While an experiment runs, its training lanes are saved under ``ROOT/units/NAME/``
(`units.caching`), so an interrupted experiment resumes; the folder is removed once the result
is written.

Modules whose ``REGIMES`` is true are FFN or attention-only experiments that also take
``regime=`` (a `regime.Regime`, default the primary regime) and ``quick=`` (the reduced sizes of
the regime study); `execute` writes a non-primary run under ``results/regimes/``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import shutil
import time
from pathlib import Path
from typing import Any

from ctx_staircase import results, units

#: Experiment modules, in report order.
EXPERIMENTS = (
    "fig2a_label_laws",
    "fig2_geometry",
    "fig3_staircase",
    "fig4_frequency",
    "fig5_activation_order",
    "fig6_attention",
    "fig8_role",
    "fig9_modulus",
    "appc_task4_orders",
    "minmax",
    "rb_anchor_tasks",
    "theory_vs_training",
    "escape_feedback",
    "attention_theory",
    "attention_departure",
    "lm_builtin",
    "regime_study",
)


KINDS = ("paper", "project", "beyond")


@dataclasses.dataclass
class Claim:
    """One checked claim: what the paper (or our theory) says, what we measured, the criterion.

    Attributes:
        item: the SPEC.md section or figure.
        claim, measured, criterion: what is claimed, what was measured, the pass rule.
        passed: the criterion on the trained run (``None``: descriptive, no criterion).
        note: why, when it fails (with data), or what else was seen.
        kind: ``"paper"`` (a claim the paper makes, SPEC §7–8), ``"project"`` (made operational
            with a claim or threshold the project chose, or a diagnostic variant) or ``"beyond"``
            (beyond the paper: theory checks, order-1 onset, min-max ρ₀, ...).
        regime: the `regime.Regime` name the claim was measured in (or a short description).
        null: the null control scored with the same criterion, and its measured value.
        null_passed: the criterion on the null; a pass whose null also passes is *vacuous*.
    """

    item: str
    claim: str
    measured: str
    criterion: str
    passed: bool | None
    note: str = ""
    kind: str = "paper"
    regime: str = ""
    null: str = ""
    null_passed: bool | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}; got {self.kind!r}")


def verdict(claim: dict | Claim) -> str:
    """``"pass"``, ``"FAIL"``, ``"vacuous"`` (passes, but so does its null) or ``"—"``."""
    if isinstance(claim, Claim):
        claim = dataclasses.asdict(claim)
    passed = claim["passed"]
    if passed is None:
        return "—"
    if not passed:
        return "FAIL"
    return "vacuous" if claim.get("null_passed") is True else "pass"


@dataclasses.dataclass
class Outcome:
    """What an experiment returns: its claims, figures (name -> Matplotlib figure) and numbers."""

    claims: list[Claim]
    figures: dict[str, Any]
    numbers: dict[str, Any]
    config: dict[str, Any]


#: Experiments that read a text file (``text_path=``), run by their sims/ script, not by default.
TEXT_EXPERIMENTS = ("lm_text",)

#: The flagship run of `ctx-staircase run` (not a sims/ script: it writes runs/staircase/).
FLAGSHIP = "staircase"


def names() -> tuple[str, ...]:
    return EXPERIMENTS


def with_regimes() -> tuple[str, ...]:
    """The experiments the regime study runs under every `regime.Regime`."""
    return tuple(name for name in EXPERIMENTS if getattr(load(name), "REGIMES", False))


def load(name: str):
    if name not in (FLAGSHIP, *EXPERIMENTS, *TEXT_EXPERIMENTS):
        allowed = ", ".join((FLAGSHIP, *EXPERIMENTS, *TEXT_EXPERIMENTS))
        raise ValueError(f"experiment must be one of {allowed}; got {name!r}")
    return importlib.import_module(f"ctx_staircase.experiments.{name}")


def execute(
    name: str,
    *,
    full: bool = False,
    root: str | Path = "sims",
    tiny: bool = False,
    regime: str | None = None,
    quick: bool = False,
    **options,
) -> dict:
    """Run one experiment and write its JSON and figures under ``root``; returns the JSON dict.

    ``tiny`` (the flagship and the LM experiments) shrinks every size to a seconds-long smoke
    run; ``options`` go to the experiment's ``run`` (``text_path=`` for `lm_text`). ``regime``
    (a `regime.Regime` name) and ``quick`` apply to the experiments of `with_regimes`; a run in
    a non-primary regime, or a quick one, writes ``results/regimes/NAME__REGIME[_quick].json``
    and no figures.
    """
    from ctx_staircase.experiments import regime as regimes

    module = load(name)
    chosen = regimes.parse(regime)
    if (regime is not None or quick) and not getattr(module, "REGIMES", False):
        raise ValueError(f"experiment {name!r} takes no regime or quick option")
    if getattr(module, "REGIMES", False):
        options.update(regime=chosen, quick=quick)
    side_run = getattr(module, "REGIMES", False) and (not chosen.primary or quick)
    start = time.perf_counter()
    if tiny:
        options["tiny"] = True
    if "root" in inspect.signature(module.run).parameters:
        options["root"] = root
    root = Path(root)
    unit_root = (
        root / "units" / result_path(root, name, chosen.name if side_run else None, quick).stem
    )
    with units.caching(unit_root):  # an interrupted experiment resumes from its saved lanes
        outcome = module.run(full=full, **options)
    seconds = time.perf_counter() - start
    figures = {}
    for key, figure in outcome.figures.items():
        if side_run:
            import matplotlib.pyplot as plt

            plt.close(figure)
            continue
        path = root / "figures" / f"{name}_{key}.png"
        results.save_figure(figure, path)
        figures[key] = str(path.relative_to(root))
    record = {
        "name": name,
        "title": module.TITLE,
        "full": full,
        "tiny": tiny,
        "regime": chosen.name if getattr(module, "REGIMES", False) else None,
        "quick": quick,
        "seconds": seconds,
        "claims": [dataclasses.asdict(c) for c in outcome.claims],
        "figures": figures,
        "numbers": outcome.numbers,
        "config": outcome.config,
        "environment": results.environment(),
    }
    results.write_json(result_path(root, name, chosen.name if side_run else None, quick), record)
    shutil.rmtree(unit_root, ignore_errors=True)  # finished: a rerun recomputes from scratch
    return record


def result_path(root: str | Path, name: str, regime: str | None = None, quick: bool = False):
    """Where `execute` writes an experiment's record (a regime-study run when ``regime``)."""
    root = Path(root)
    if regime is None and not quick:
        return root / "results" / f"{name}.json"
    return root / "results" / "regimes" / f"{name}__{regime}{'_quick' if quick else ''}.json"
