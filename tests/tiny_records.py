"""The recorded ``--tiny`` runs the default suite replays (`test_tiny_records`).

A smoke run is seeded and deterministic, so rerunning it must give the numbers and verdicts it
gave when recorded. Five experiments whose smoke runs take a few seconds are recorded here, each
in ``tests/data/tiny/NAME.json`` (its numbers, claims and config). They are recorded under the
test suite's settings (tests/conftest.py: float64 enabled, four host devices), which move float32
results at the rounding level, so after a change that is meant to move their numbers,
regenerate them through the test itself and read the diff:

    RECORD_TINY=1 python -m pytest tests/test_tiny_records.py -n 0
    python tests/host_spread.py    # their host-to-host spread, which the replay compares within

Four more experiments spend nearly all of their smoke run training (`ANALYSED`): their
trainings are recorded too (``NAME.sweeps.npz``, each `sweep.train_sweep` result under a digest
of its arguments), and the replay hands them back (`recorded_sweeps`), so what runs is the
experiment's own analysis: its measures, numbers and claims. A training whose arguments
changed (another width, seed, schedule or data set) has no recording and fails the replay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from ctx_staircase import experiments, results, sweep, train

#: The replayed experiments: their smoke runs are the shortest (4-9 s each on 2 cores).
RECORDED = ("fig2a_label_laws", "fig2_geometry", "fig5_activation_order", "fig9_modulus", "minmax")

#: The experiments replayed on their recorded trainings (`recorded_sweeps`): analysis only.
ANALYSED = ("fig3_staircase", "fig4_frequency", "appc_task4_orders", "fig6_attention")

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


#: `sweep.train_sweep`'s keywords that say how the lanes run, not what they train (the same
#: bits either way: tests/test_sweep.py).
HOW_LANES_RUN = ("out", "chunk", "layout", "progress")


def sweeps_path(name: str) -> Path:
    return DIRECTORY / f"{name}.sweeps.npz"


def training_digest(model, ds, config, gammas, seeds, lrs=None, **model_kwargs) -> str:
    """A digest of everything a `sweep.train_sweep` call trains on: the model, the data set's
    arrays, the training configuration, the grid and the model's keywords (their ``repr``:
    a `models.FrozenArray` prints a digest of its contents)."""
    h = hashlib.sha256(repr((model, ds.name, ds.vocab_size, config)).encode())
    for array in (ds.tokens, ds.labels, ds.weights):
        h.update(np.ascontiguousarray(array).tobytes())
    grid = [np.asarray(v, float).tolist() if v is not None else None for v in (gammas, seeds, lrs)]
    h.update(repr((grid, sorted((k, repr(v)) for k, v in model_kwargs.items()))).encode())
    return h.hexdigest()[:16]


def _flatten(result: sweep.SweepResult) -> tuple[dict, dict]:
    """A sweep result as ``(arrays, meta)``: the grid and `train.trajectory_arrays` of its
    trajectory (under ``trajectory/``), and the lane statuses as JSON."""
    trajectory = train.trajectory_arrays(result.trajectory)
    arrays = {"gamma": result.gamma, "seed": result.seed, "lr": result.lr}
    arrays |= {f"trajectory/{name}": value for name, value in trajectory.items()}
    return {k: np.asarray(v) for k, v in arrays.items()}, {
        "status": [str(s) for s in result.status]
    }


def _unflatten(arrays: dict, meta: dict) -> sweep.SweepResult:
    """Inverse of `_flatten`."""
    prefix = "trajectory/"
    trajectory = train.trajectory_from_arrays(
        {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    )
    return sweep.SweepResult(
        arrays["gamma"],
        arrays["seed"],
        arrays["lr"],
        trajectory,
        tuple(sweep.RunStatus.parse(s) for s in meta["status"]),
    )


@contextlib.contextmanager
def recorded_sweeps(monkeypatch, name: str, *, record: bool):
    """`sweep.train_sweep` answered from experiment ``name``'s recorded trainings (``record``:
    trained for real, and the results written when the block ends)."""
    real, saved = sweep.train_sweep, {}
    if not record:
        with np.load(sweeps_path(name)) as stored:
            meta = json.loads(str(stored["meta"]))
            arrays = {k: stored[k] for k in stored.files if k != "meta"}

    def replay(model, ds, config, *, gammas, seeds=(0,), lrs=None, **kwargs):
        trains = {k: v for k, v in kwargs.items() if k not in HOW_LANES_RUN}
        digest = training_digest(model, ds, config, gammas, seeds, lrs, **trains)
        if record:
            result = real(model, ds, config, gammas=gammas, seeds=seeds, lrs=lrs, **kwargs)
            saved[digest] = _flatten(result)
            return result
        if digest not in meta:
            raise LookupError(
                f"no recorded training of {model} on {ds.name} with {config} and "
                f"{sorted(trains)} (digest {digest}): its arguments changed since the recording"
            )
        prefix = f"{digest}/"
        own = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        return _unflatten(own, meta[digest])

    monkeypatch.setattr(sweep, "train_sweep", replay)
    yield
    if record:
        stored = {f"{d}/{k}": v for d, (a, _) in saved.items() for k, v in a.items()}
        meta = json.dumps({d: m for d, (_, m) in saved.items()})
        np.savez_compressed(sweeps_path(name), meta=np.asarray(meta), **stored)
