"""The regime study: every FFN and attention-only claim under each training regime.

The regimes and why the paper's claims need them: theory/regimes.md.

For every experiment of `experiments.with_regimes` and every `regime.Regime` of `regime.ALL`
(label vocabulary ``{V_min, 2·V_min}`` x optimizer ``{full-batch GD lr 1, full-batch Adam,
minibatch Adam}``), the experiment runs at its reduced ``quick`` sizes in a process of its own
(so one experiment's settings, float64 say, never leak into another) and writes
``results/regimes/NAME__REGIME_quick.json``. A unit whose file exists and was made by the same
package source is reused, so an interrupted study resumes where it stopped; any change to the
package's code recomputes every unit.

The primary regime (``gd-wide``, theory/regimes.md) was fixed before these results were seen;
the headline verdicts come from the full-size primary runs of each experiment, and this study
shows how each verdict moves across the other regimes. The quick runs use the same claim logic
at reduced sizes (each experiment's config says what is reduced). ``tiny``: a smoke run of the
grid, `TINY_EXPERIMENTS` in every regime at their ``tiny`` sizes, in this process.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from ctx_staircase import plots, results
from ctx_staircase.experiments import Outcome, get, result_path, verdict, with_regimes
from ctx_staircase.experiments import regime as regimes

VERDICTS = ("pass", "vacuous", "FAIL", "not tested", "—", "missing")
#: The smoke run's grid: one cheap experiment in every regime.
TINY_EXPERIMENTS = ("minmax",)


def _load(path: Path, fingerprint: str | None) -> dict | None:
    """The record at ``path`` if it is complete JSON (from the same sources, when
    ``fingerprint`` is given), else ``None``."""
    try:
        record = results.read_json(path)
    except (OSError, ValueError):
        return None
    made_by = record.get("environment", {}).get("source_fingerprint")
    if fingerprint is not None and made_by != fingerprint:
        return None
    return record


def run_unit(name: str, regime: regimes.Regime, root: Path, fingerprint: str) -> dict | None:
    """Run (or reuse) one experiment in one regime at quick sizes; ``None`` if it crashed."""
    path = result_path(root, name, regime.name, quick=True)
    record = _load(path, fingerprint)
    if record is not None:
        return record
    command = [sys.executable, "-m", "ctx_staircase", "run", name]
    command += ["--regime", regime.name, "--quick", "--out", str(root)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    print(f"  {name} {regime.name}: {status} in {seconds:.0f} s", file=sys.stderr, flush=True)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return _load(path, None)  # just made: valid even if the sources changed meanwhile


def tiny_unit(name: str, regime: regimes.Regime) -> dict:
    """One experiment in one regime at its ``tiny`` sizes, in this process, nothing written."""
    import matplotlib.pyplot as plt

    start = time.perf_counter()
    outcome = get(name).run(regime=regime, tiny=True)
    for figure in outcome.figures.values():
        plt.close(figure)
    return {
        "claims": [dataclasses.asdict(c) for c in outcome.claims],
        "seconds": time.perf_counter() - start,
    }


def run(full: bool = False, root: str | Path = "sims", tiny: bool = False) -> Outcome:
    """Run the grid (``full`` is accepted for the common interface; the study is always quick).

    ``tiny``: the experiments of `TINY_EXPERIMENTS` only, at their ``tiny`` sizes, in this
    process (each unit takes seconds; nothing is saved per unit, so nothing resumes)."""
    root = Path(root)
    fingerprint = results.source_fingerprint()
    names = TINY_EXPERIMENTS if tiny else with_regimes()
    grid: dict[str, dict[str, dict | None]] = {}
    for name in names:
        if tiny:
            grid[name] = {r.name: tiny_unit(name, r) for r in regimes.ALL}
        else:
            grid[name] = {r.name: run_unit(name, r, root, fingerprint) for r in regimes.ALL}
    numbers = study_numbers(grid)
    rows = numbers["rows"]
    config = {
        "experiments": list(names),
        "regimes": [r.name for r in regimes.ALL],
        "sizes": (
            "each experiment's tiny sizes (a smoke run)"
            if tiny
            else "each experiment's quick sizes (see its record under results/regimes/)"
        ),
        "rule": "theory/regimes.md (primary regime fixed before the results)",
        "source_fingerprint": fingerprint,
    }
    return Outcome([], {"grid": verdict_figure(rows)}, numbers, config)


def study_numbers(grid: dict[str, dict[str, dict | None]]) -> dict:
    """The study's numbers from its ``grid`` (experiment -> regime -> unit record, None where it
    crashed): the regimes, the `table_rows`, the verdict counts per regime and the seconds."""
    rows = table_rows(grid)
    return {
        "regimes": {r.name: r.label for r in regimes.ALL},
        "primary": regimes.PRIMARY.name,
        "rows": rows,
        "counts": {
            r.name: {v: sum(row["cells"][r.name]["verdict"] == v for row in rows) for v in VERDICTS}
            for r in regimes.ALL
        },
        "seconds": {
            name: {regime: (record or {}).get("seconds") for regime, record in by_regime.items()}
            for name, by_regime in grid.items()
        },
    }


def saved_grid(root: str | Path = "sims") -> dict[str, dict[str, dict | None]]:
    """The grid of the unit records saved under ``root`` (whatever sources made them; None
    where a unit is missing), for `study_numbers`."""
    return {
        name: {
            r.name: _load(result_path(Path(root), name, r.name, quick=True), None)
            for r in regimes.ALL
        }
        for name in with_regimes()
    }


def table_rows(grid: dict[str, dict[str, dict | None]]) -> list[dict]:
    """One row per (experiment, item, claim) with a cell per regime: verdict, measured, null."""
    rows: dict[tuple[str, str, str], dict] = {}
    for name, by_regime in grid.items():
        for regime_name, record in by_regime.items():
            for claim in (record or {}).get("claims", []):
                key = (name, claim["item"], claim["claim"])
                row = rows.setdefault(
                    key,
                    {
                        "experiment": name,
                        "item": claim["item"],
                        "claim": claim["claim"],
                        "kind": claim.get("kind", "paper"),
                        "cells": {},
                    },
                )
                row["cells"][regime_name] = {
                    "verdict": verdict(claim),
                    "measured": claim["measured"],
                    "null": claim.get("null", ""),
                }
    missing = {"verdict": "missing", "measured": "", "null": ""}
    for row in rows.values():
        for regime in regimes.ALL:
            row["cells"].setdefault(regime.name, missing)
    return list(rows.values())


#: Characters per line of a claim's label in the verdict figure: labels wrap, never cut.
LABEL_WIDTH = 72


def _lines(row: dict) -> int:
    """Lines the label of ``row`` takes in the verdict figure."""
    return len(textwrap.wrap(f"{row['experiment']}: {row['claim']}", LABEL_WIDTH))


def verdict_figure(rows: list[dict]):
    """Claims × regimes, coloured by verdict (``rows[i]["cells"][regime]["verdict"]``)."""
    codes = {"pass": 4, "vacuous": 3, "not tested": 2, "FAIL": 0, "—": 1, "missing": np.nan}
    columns = [r.name for r in regimes.ALL]
    values = np.array([[codes[row["cells"][c]["verdict"]] for c in columns] for row in rows])
    fig, ax = plots.figure(
        1,
        1,
        figsize=(11, 0.2 * max(sum(_lines(row) for row in rows), 4) + 1.8),
        suptitle="Verdict of every claim in every regime (quick sizes; primary: gd-wide)",
    )
    verdicts = (
        ("FAIL", "#d62728"),
        ("no criterion", "#bbbbbb"),
        ("not tested", "#6baed6"),
        ("vacuous", "#ff9f1c"),
        ("pass", "#2ca02c"),
    )
    plots.category_image(ax, values, verdicts)
    ax.set_xticks(
        range(len(columns)),
        [regimes.parse(c).label for c in columns],
        rotation=30,
        ha="right",
    )
    labels = [textwrap.fill(f"{row['experiment']}: {row['claim']}", LABEL_WIDTH) for row in rows]
    ax.set_yticks(range(len(rows)), labels)
    plots.axis_labels(ax, "regime", "claim")
    return fig
