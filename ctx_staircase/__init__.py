"""ctx_staircase: which statistics of the data does a token embedding learn, and in what order?

Modules, left to right in the data flow of DESIGN.md: `tasks` (datasets), `signatures` (exact
probability signatures), `metrics` (similarity, alignment, probes), `geometry` (signature
geometry of a token group); the simulation side `activations`, `models` (Flax NNX), `train`
(one compiled scan per run), `sweep` (vmapped, sharded grids) and `analysis` (alignment of a
trajectory); the theory side `flows` (signature flows), `closed_form` (the linear phase) and
`ode` (solvers); `comparison` (theory against training); the language-model arm `text` (corpora),
`lm` (a GPT on text and its signature alignment) and `semantics` (known structure in vectors);
then `plots`, `results` and `cli`.
"""

from ctx_staircase import (
    activations,
    analysis,
    closed_form,
    comparison,
    flows,
    geometry,
    lm,
    metrics,
    models,
    ode,
    results,
    semantics,
    signatures,
    sweep,
    tasks,
    text,
    train,
)
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.geometry import SignatureGeometry, signature_geometry
from ctx_staircase.metrics import Alignment, ProbeResult, alignment, cosine_matrix, probe_fit
from ctx_staircase.signatures import SignatureSet, signature_set
from ctx_staircase.sweep import SweepResult, train_sweep
from ctx_staircase.train import TrainConfig, Trajectory

__all__ = [
    "Alignment",
    "ProbeResult",
    "SignatureGeometry",
    "SignatureSet",
    "SweepResult",
    "TokenDataset",
    "TrainConfig",
    "Trajectory",
    "activations",
    "alignment",
    "analysis",
    "closed_form",
    "comparison",
    "cosine_matrix",
    "flows",
    "geometry",
    "lm",
    "metrics",
    "models",
    "ode",
    "probe_fit",
    "results",
    "semantics",
    "signature_geometry",
    "signature_set",
    "signatures",
    "sweep",
    "tasks",
    "text",
    "train",
    "train_sweep",
]
__version__ = "0.1.0"
