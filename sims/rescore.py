"""Rescore saved records: rebuild each record's claims from its own numbers and config.

A claim is a function of its record's saved numbers (tests/test_experiments.py rebuilds them and
compares), so a change to a claim's criterion or note text leaves the saved records stale. For
each experiment named, this rebuilds the claims of every saved record of it (sims/results/NAME.json,
sims/results/regimes/NAME__*.json and tests/data/tiny/NAME.json, those that exist) with the
function the tests use (a declarative module's table by `declarative.rescore`, else
``saved_claims`` or ``claims``), and writes each record back atomically
(`results.write_json`), its numbers and everything else untouched.

Only texts may move: it refuses, writing nothing, when any rebuilt claim differs from the saved
one in anything but its ``criterion``, its ``note`` and its ``failure`` class (its verdicts
``passed`` and ``null_passed``, its ``measured`` text, its item, claim, kind, regime, null or
untested, each as far as the record keeps it), or when the number of claims differs. What it
writes is the saved claims with those three replaced.

``minmax`` and ``staircase`` keep too few numbers to score their claims again (minmax's notes read
the number pairs at the rho_0 peak, the flagship's verdicts the accuracy and loss curves), so for
them only the criterion texts are rebuilt, by the functions their claims take them from
(`minmax.criteria`, `staircase.saved_criteria`).

Usage (from the repository root):

    python sims/rescore.py --names fig3_staircase fig4_frequency staircase
    python sims/rescore.py --names minmax --check    # say what would change, write nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from ctx_staircase import results
from ctx_staircase.experiments import declarative

ROOT = Path(__file__).resolve().parents[1]
#: The claim fields a rescore may change; every other field must come back as saved.
TEXTS = ("criterion", "note", "failure")
#: The one field a rescore adds to a record that predates it: the FAIL class, which the scoring
#: derives from the numbers like the texts.
ADDED = "failure"


def record_paths(name: str) -> list[Path]:
    """Every saved record of experiment ``name``: full size, the regime study's, the tiny one."""
    saved = ROOT / "sims" / "results"
    paths = [
        saved / f"{name}.json",
        *sorted((saved / "regimes").glob(f"{name}__*.json")),
        ROOT / "tests" / "data" / "tiny" / f"{name}.json",
    ]
    return [p for p in paths if p.is_file()]


def rebuilder(name: str) -> Callable[[dict], list[dict]]:
    """How ``name``'s claims are scored again from a record, as JSON would read them back (the
    dispatch of tests/test_experiments.py's ``_claims_of``, and the criterion-only rebuild of the
    two experiments that have no such function)."""
    module = importlib.import_module(f"ctx_staircase.experiments.{name}")

    def as_saved(claims) -> list[dict]:
        return results.loads(results.dumps([dataclasses.asdict(c) for c in claims]))

    def with_criteria(record: dict, texts: list[str]) -> list[dict]:
        if len(texts) != len(record["claims"]):
            raise SystemExit(
                f"{name}: {len(texts)} criteria for {len(record['claims'])} saved claims"
            )
        return [
            claim | {"criterion": text} for claim, text in zip(record["claims"], texts, strict=True)
        ]

    if hasattr(module, "SPEC"):
        return lambda r: as_saved(declarative.rescore(module.SPEC, r["numbers"], r["config"]))
    if name == "minmax":
        return lambda r: with_criteria(r, module.criteria(r["config"]))
    if name == "staircase":
        return lambda r: with_criteria(r, module.saved_criteria(r["numbers"], r["config"]))
    if name == "lm_text":
        return lambda r: as_saved(
            module.claims(
                r["numbers"]["summary"],
                r["config"]["steps"],
                module.regime(r["config"]["text"], r["config"]["vocab_size"]),
            )
        )
    if name == "attention_departure":
        return lambda r: as_saved(module.claims(r["numbers"]))
    if hasattr(module, "saved_claims"):
        return lambda r: as_saved(module.saved_claims(r["numbers"], r["config"]))
    if hasattr(module, "claims"):
        return lambda r: as_saved(module.claims(r["numbers"], r["config"]))
    raise SystemExit(f"{name}: no function scores its claims from a saved record")


def differences(saved: list[dict], rebuilt: list[dict]) -> tuple[list[str], list[str]]:
    """``(refusals, changes)`` between the saved claims and the rebuilt ones: each field the
    saved claim keeps that moved outside `TEXTS`, and each text that moved. (Older records keep
    no ``untested`` or ``failure``; a field a record does not keep is not compared, and
    ``failure`` is added.)"""
    if len(saved) != len(rebuilt):
        return [f"{len(rebuilt)} claims rebuilt, {len(saved)} saved"], []
    refusals, changes = [], []
    for i, (old, new) in enumerate(zip(saved, rebuilt, strict=True)):
        if ADDED in new and ADDED not in old:
            changes.append(f"claim {i} ({old.get('claim', '?')!r}) {ADDED}: -> {new[ADDED]!r}")
        for key in old:
            if key in new and old[key] == new[key]:
                continue
            where = f"claim {i} ({old.get('claim', '?')!r}) {key}"
            line = f"{where}: {old[key]!r} -> {new.get(key, '(absent)')!r}"
            (changes if key in TEXTS and key in new else refusals).append(line)
    return refusals, changes


def rescored(saved: list[dict], rebuilt: list[dict]) -> list[dict]:
    """The saved claims with their `TEXTS` taken from the rebuilt ones: every other field as
    saved, and no field added that the record does not keep but `ADDED`."""
    return [
        old | {key: new[key] for key in TEXTS if key in old or (key == ADDED and key in new)}
        for old, new in zip(saved, rebuilt, strict=True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", required=True, help="experiments to rescore")
    parser.add_argument("--check", action="store_true", help="report changes, write nothing")
    args = parser.parse_args(argv)

    planned, refused = [], []
    for name in args.names:
        paths = record_paths(name)
        if not paths:
            refused.append(f"{name}: no saved record")
            continue
        rebuild = rebuilder(name)
        for path in paths:
            record = results.read_json(path)
            rebuilt = rebuild(record)
            refusals, changes = differences(record["claims"], rebuilt)
            where = path.relative_to(ROOT)
            refused += [f"{where}: {line}" for line in refusals]
            if changes and not refusals:
                planned.append((path, record | {"claims": rescored(record["claims"], rebuilt)}))
                print(f"{where}: {len(changes)} text(s) change", file=sys.stderr)
                for line in changes:
                    print(f"  {line}", file=sys.stderr)
    if refused:
        print(
            "refused, nothing written: only criterion, note and failure may change", file=sys.stderr
        )
        for line in refused:
            print(f"  {line}", file=sys.stderr)
        return 1
    if not args.check:
        for path, record in planned:
            results.write_json(path, record)
    verb = "would rewrite" if args.check else "rewrote"
    print(f"{verb} {len(planned)} record(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
