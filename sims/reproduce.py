"""Run every reproduction experiment and write sims/REPORT.md.

Usage: python sims/reproduce.py [--full] [--only NAME ...] [--report-only]

Each experiment runs in its own process (`python sims/NAME.py`), so one experiment's settings
(float64, say) never leak into another, and writes sims/results/NAME.json and its figures; the
FFN and attention-only ones run in the primary regime (theory/regimes.md). `regime_study` then
runs each of them in all six regimes at reduced sizes (results/regimes/; an interrupted study
resumes, and a code change recomputes). The report is rendered from those JSON files: the
paper's claims, the project's and those beyond the paper, each with its regime, measured value,
criterion, null control and verdict, then the regime table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ctx_staircase.experiments import names
from ctx_staircase.experiments.report import render

SIMS = Path(__file__).resolve().parent
#: Scripts beyond the paper's experiments that also report claims (same record format).
EXTRA = ("order1_onset", "lm_text")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the paper's sizes (for a GPU)")
    parser.add_argument("--only", nargs="+", default=None, help="run only these experiments")
    parser.add_argument("--report-only", action="store_true", help="render the saved results")
    args = parser.parse_args()
    everything = [*names(), *EXTRA]
    selected = args.only or everything
    failures = []
    if not args.report_only:
        for name in selected:
            start = time.perf_counter()
            command = [sys.executable, str(SIMS / f"{name}.py")] + (["--full"] if args.full else [])
            print(f"== {name}", flush=True)
            done = subprocess.run(command, cwd=SIMS.parent)
            print(f"== {name}: exit {done.returncode} in {time.perf_counter() - start:.0f} s")
            if done.returncode != 0:
                failures.append(name)
    records = []
    for name in everything:
        path = SIMS / "results" / f"{name}.json"
        if path.exists():
            records.append(json.loads(path.read_text()))
    (SIMS / "REPORT.md").write_text(
        render(
            records,
            missing=[n for n in names() if not (SIMS / "results" / f"{n}.json").exists()],
            crashed=failures,
        )
    )
    print(f"wrote {SIMS / 'REPORT.md'} ({len(records)} experiments)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
