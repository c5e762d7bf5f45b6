"""The recorded ``--tiny`` runs the default suite replays (`test_tiny_records`).

A smoke run is seeded and deterministic, so rerunning it must give the numbers and verdicts it
gave when recorded. Five experiments whose smoke runs take a few seconds are recorded here, each
in ``tests/data/tiny/NAME.json`` (its numbers, claims and config). They are recorded under the
test suite's settings (tests/conftest.py: float64 enabled, four host devices), which move float32
results at the rounding level, so after a change that is meant to move their numbers,
regenerate them through the test itself and read the diff:

    RECORD_TINY=1 python -m pytest tests/test_tiny_records.py -n 0
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ctx_staircase import experiments, results

#: The replayed experiments: their smoke runs are the shortest (4-9 s each on 2 cores).
RECORDED = ("fig2a_label_laws", "fig2_geometry", "fig5_activation_order", "fig9_modulus", "minmax")

DIRECTORY = Path(__file__).resolve().parent / "data" / "tiny"


def tiny_record(name: str) -> dict:
    """``{"numbers", "claims", "config"}`` of experiment ``name``'s ``--tiny`` run as JSON would
    read them back (`results.dumps` then `results.loads`), its figures closed unsaved."""
    import matplotlib.pyplot as plt

    outcome = experiments.get(name).run(tiny=True)
    for figure in outcome.figures.values():
        plt.close(figure)
    record = {
        "numbers": outcome.numbers,
        "claims": [dataclasses.asdict(c) for c in outcome.claims],
        "config": outcome.config,
    }
    return results.loads(results.dumps(record))


def path(name: str) -> Path:
    return DIRECTORY / f"{name}.json"
