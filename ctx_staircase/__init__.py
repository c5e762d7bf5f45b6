"""ctx_staircase: which statistics of the data does a token embedding learn, and in what order?

Modules, left to right in the data flow of DESIGN.md: `tasks` (datasets), `signatures` (exact
probability signatures), `metrics` (similarity, alignment, probes), `geometry` (the
measurement: S^emb against each signature order over time, and the signature geometry of a token
group); the simulation side `activations`, `models` (Flax NNX), `train` (one compiled scan per
run) and `sweep` (vmapped, sharded grids); the theory side `flows` (signature flows), `closed_form` (the linear phase) and
`ode` (solvers); `comparison` (theory against training); the language-model arm `text` (corpora),
`lm` (a GPT on text and its signature alignment) and `semantics` (known structure in vectors);
then `plots`, `results`, the run-keeping helpers `units` (resumable work), `paths`, `budget`
(memory estimates) and `progress`, and `cli`.

Submodules and the names below load on first use (PEP 562), so ``ctx-staircase --version`` and
``--help`` answer without importing JAX.
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
    "budget",
    "closed_form",
    "comparison",
    "flows",
    "geometry",
    "lm",
    "metrics",
    "models",
    "ode",
    "paths",
    "progress",
    "results",
    "semantics",
    "signatures",
    "sweep",
    "tasks",
    "text",
    "train",
    "units",
)

__all__ = sorted([*_NAMES, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ctx_staircase.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(f"ctx_staircase.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'ctx_staircase' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
