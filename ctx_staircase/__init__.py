"""ctx_staircase: which statistics of the data does a token embedding learn, and in what order?

The layers of ARCHITECTURE.md, bottom up:

- foundations: `internal` (argument checks, pytree `all_finite`/`select`), `distributed`
  (several processes or hosts), `results` (atomic
  strict JSON), `units` (resumable work), `paths`, `progress`, `interrupt`, `dataset`,
  `activations`, `text` (corpora);
- data and models: `tasks` (synthetic datasets), `signatures` (exact probability signatures),
  `models` (Flax NNX), `ode` (jitted solvers);
- theory and primitives: `flows` (signature flows), `closed_form` (the linear phase),
  `attention_dynamics`, `plateau`, `metrics` (correlations, probes), `curvature` (is a plateau a
  saddle?), `semantics`;
- training and measurement: `loop` (the one training loop), `train`, `sweep` (vmapped, sharded
  grids), `lm` (a GPT on text), `geometry` (the measurement: S^emb against each signature order
  over time);
- comparison and output: `comparison` (theory against training), `budget` (memory estimates),
  `plots` (the one figure convention), `lm_study` (the language-model study);
- `experiments` (one registry of reproduced claims) and `cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public names defined in a submodule, by the submodule that defines them.
_NAMES = {
    "TokenDataset": "dataset",
    "SignatureGeometry": "geometry",
    "signature_geometry": "geometry",
    "Alignment": "metrics",
    "ProbeResult": "metrics",
    "alignment": "metrics",
    "cosine_matrix": "metrics",
    "probe_fit": "metrics",
    "SignatureSet": "signatures",
    "signature_set": "signatures",
    "SweepResult": "sweep",
    "train_sweep": "sweep",
    "TrainConfig": "train",
    "Trajectory": "train",
}
_SUBMODULES = (
    "activations",
    "attention_dynamics",
    "budget",
    "checkpoints",
    "closed_form",
    "comparison",
    "curvature",
    "dataset",
    "distributed",
    "escape",
    "flows",
    "geometry",
    "internal",
    "interrupt",
    "ledger",
    "lm",
    "lm_study",
    "loop",
    "measure",
    "metrics",
    "models",
    "ode",
    "paths",
    "plateau",
    "plateau_study",
    "plots",
    "progress",
    "records",
    "relu",
    "relu_escape",
    "results",
    "second_escape",
    "semantics",
    "signatures",
    "steps",
    "sweep",
    "tasks",
    "text",
    "theories",
    "theory",
    "train",
    "units",
    "word_vectors",
)

#: Submodules the others import (argument checks, file paths, progress bars): importable as
#: ``ctx_staircase.internal`` and so on, but not advertised as the public API.
_IMPLEMENTATION = ("internal", "paths", "progress")

__all__ = sorted([*_NAMES, *(m for m in _SUBMODULES if m not in _IMPLEMENTATION)])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ctx_staircase.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(f"ctx_staircase.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'ctx_staircase' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
