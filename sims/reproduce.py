"""Run every reproduction experiment and write sims/REPORT.md.

Usage: python sims/reproduce.py [--full] [--only NAME ...] [--report-only]

The experiments are those of `experiments.REGISTRY` marked ``report``, in its order. Each runs
in its own process (`python sims/NAME.py`), so one experiment's settings
(float64, say) never leak into another, and writes sims/results/NAME.json and its figures; the
FFN and attention-only ones run in the primary regime (theory/regimes.md). `regime_study` then
runs each of them in all six regimes at reduced sizes (results/regimes/; an interrupted study
resumes, and a code change recomputes). The report is rendered from those JSON files: the
paper's claims, the project's and those beyond the paper, each with its regime, measured value,
criterion, null control and verdict, then the regime table. REPORT.md is written last, atomically.

Ctrl-C prints one line and exits 130; rerunning the same command skips the experiments it
already finished (sims/results/.reproduce_session.json) and resumes the interrupted one from its
saved lanes.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from ctx_staircase.experiments import reported
from ctx_staircase.experiments.report import render
from ctx_staircase.results import atomic_write_bytes, read_json, source_fingerprint, write_json

SIMS = Path(__file__).resolve().parent
SESSION = SIMS / "results" / ".reproduce_session.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the paper's sizes (for a GPU)")
    parser.add_argument("--only", nargs="+", default=None, help="run only these experiments")
    parser.add_argument("--report-only", action="store_true", help="render the saved results")
    args = parser.parse_args()
    everything = list(reported())
    unknown = sorted(set(args.only or ()) - set(everything))
    if unknown:
        parser.error(f"--only: unknown experiment(s) {unknown}; choose from {everything}")
    selected = args.only or everything
    failures = []
    if not args.report_only:
        try:
            failures = run_all(selected, args.full)
        except KeyboardInterrupt:
            print("reproduce: interrupted; rerun the same command to resume", file=sys.stderr)
            return 130
    records = []
    for name in everything:
        path = SIMS / "results" / f"{name}.json"
        if path.exists():
            records.append(read_json(path))
    report = render(
        records,
        missing=[n for n in everything if not (SIMS / "results" / f"{n}.json").exists()],
        crashed=failures,
    )
    atomic_write_bytes(SIMS / "REPORT.md", report.encode())  # last, and only when complete
    SESSION.unlink(missing_ok=True)
    print(f"wrote {SIMS / 'REPORT.md'} ({len(records)} experiments)")
    return 1 if failures else 0


def run_all(selected: list[str], full: bool) -> list[str]:
    """Run each selected experiment in its own process; returns the names that failed.

    The session file records which experiments of this very command (same selection, sizes and
    code) have finished, so a rerun after an interruption skips them; an experiment interrupted
    midway resumes from its own saved lanes (`units.caching`).
    """
    session = {"selected": selected, "full": full, "fingerprint": source_fingerprint()}
    finished: list[str] = []
    if SESSION.exists():
        saved = read_json(SESSION)
        if {k: saved.get(k) for k in session} == session:
            finished = list(saved.get("finished", []))
    failures = []
    for position, name in enumerate(selected, start=1):
        if name in finished:
            print(f"== {name}: finished earlier in this session, kept", flush=True)
            continue
        start = time.perf_counter()
        command = [sys.executable, str(SIMS / f"{name}.py")] + (["--full"] if full else [])
        left = [n for n in selected[position - 1 :] if n not in finished]
        print(f"== {name} ({position}/{len(selected)}; {_eta(left, full)})", flush=True)
        done = subprocess.run(command, cwd=SIMS.parent)
        if done.returncode in (130, -signal.SIGINT):
            raise KeyboardInterrupt
        print(f"== {name}: exit {done.returncode} in {time.perf_counter() - start:.0f} s")
        if done.returncode != 0:
            failures.append(name)
            continue
        finished.append(name)
        write_json(SESSION, {**session, "finished": finished})
    return failures


def _eta(names: list[str], full: bool) -> str:
    """Time left, from the seconds each experiment took when its saved result was made."""
    seconds = []
    for name in names:
        path = SIMS / "results" / f"{name}.json"
        record = read_json(path) if path.exists() else {}
        if record.get("full", False) == full and "seconds" in record:
            seconds.append(float(record["seconds"]))
    if not seconds:
        return "ETA unknown"
    guess = "" if len(seconds) == len(names) else f", {len(names) - len(seconds)} never timed"
    return f"ETA {sum(seconds) / 60:.0f} min from the last runs{guess}"


if __name__ == "__main__":
    sys.exit(main())
