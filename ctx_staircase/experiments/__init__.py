"""Reproduction experiments: one module per claim or paper figure (sims/ holds thin wrappers).

Each experiment module defines ``NAME``, ``TITLE`` and ``run(full: bool) -> Outcome``: it composes
library calls, measures, and states every claim with its SPEC.md §8 criterion and pass/fail.
`execute` runs one, writes ``sims/results/NAME.json`` and its figures ``sims/figures/NAME*.png``
atomically, and returns the outcome; `sims/reproduce.py` runs them all and writes the report.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from pathlib import Path
from typing import Any

from ctx_staircase import results

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
    "lm_builtin",
)


@dataclasses.dataclass
class Claim:
    """One checked claim: what the paper (or our theory) says, what we measured, the criterion."""

    item: str
    claim: str
    measured: str
    criterion: str
    passed: bool | None
    note: str = ""


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


def load(name: str):
    if name not in (FLAGSHIP, *EXPERIMENTS, *TEXT_EXPERIMENTS):
        allowed = ", ".join((FLAGSHIP, *EXPERIMENTS, *TEXT_EXPERIMENTS))
        raise ValueError(f"experiment must be one of {allowed}; got {name!r}")
    return importlib.import_module(f"ctx_staircase.experiments.{name}")


def execute(
    name: str, *, full: bool = False, root: str | Path = "sims", tiny: bool = False, **options
) -> dict:
    """Run one experiment and write its JSON and figures under ``root``; returns the JSON dict.

    ``tiny`` (the flagship and the LM experiments) shrinks every size to a seconds-long smoke
    run; ``options`` go to the experiment's ``run`` (``text_path=`` for `lm_text`).
    """
    module = load(name)
    start = time.perf_counter()
    if tiny:
        options["tiny"] = True
    outcome = module.run(full=full, **options)
    seconds = time.perf_counter() - start
    root = Path(root)
    figures = {}
    for key, figure in outcome.figures.items():
        path = root / "figures" / f"{name}_{key}.png"
        results.save_figure(figure, path)
        figures[key] = str(path.relative_to(root))
    record = {
        "name": name,
        "title": module.TITLE,
        "full": full,
        "tiny": tiny,
        "seconds": seconds,
        "claims": [dataclasses.asdict(c) for c in outcome.claims],
        "figures": figures,
        "numbers": outcome.numbers,
        "config": outcome.config,
        "environment": results.environment(),
    }
    results.write_json(root / "results" / f"{name}.json", record)
    return record
