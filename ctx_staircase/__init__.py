"""ctx_staircase: which statistics of the data does a token embedding learn, and in what order?

Modules, left to right in the data flow of DESIGN.md: `tasks` (datasets), `signatures` (exact
probability signatures), `metrics` (similarity, alignment, probes), `geometry` (signature
geometry of a token group), `plots`, `results` (atomic files, provenance) and `cli`.
"""

from ctx_staircase import geometry, metrics, results, signatures, tasks
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.geometry import SignatureGeometry, signature_geometry
from ctx_staircase.metrics import Alignment, ProbeResult, alignment, cosine_matrix, probe_fit
from ctx_staircase.signatures import SignatureSet, signature_set

__all__ = [
    "Alignment",
    "ProbeResult",
    "SignatureGeometry",
    "SignatureSet",
    "TokenDataset",
    "alignment",
    "cosine_matrix",
    "geometry",
    "metrics",
    "probe_fit",
    "results",
    "signature_geometry",
    "signature_set",
    "signatures",
    "tasks",
]
__version__ = "0.1.0"
