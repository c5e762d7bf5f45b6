"""Atomic result files and the provenance recorded with every result (DESIGN.md "Results").

Every write goes to a temporary file in the destination folder and is renamed into place, so a
reader never sees a half-written file and an interrupted run leaves the previous file intact.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

PACKAGES = ("ctx-staircase", "jax", "jaxlib", "flax", "optax", "diffrax", "numpy", "matplotlib")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + rename); creates parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically; NumPy scalars and arrays become lists."""
    text = json.dumps(obj, indent=2, default=_to_json, allow_nan=True)
    return atomic_write_bytes(path, (text + "\n").encode())


def write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """Write arrays to a compressed ``.npz``, atomically."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return atomic_write_bytes(path, buffer.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int = 90) -> Path:
    """Save a Matplotlib figure as PNG, atomically, and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def source_fingerprint() -> str:
    """SHA-256 (16 hex digits) of the package's Python sources, so a stored result can tell
    whether it was made by the code that reads it."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def environment() -> dict[str, Any]:
    """Package versions, Python, platform, JAX devices and the source fingerprint."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "source_fingerprint": source_fingerprint(),
    }
    try:
        import jax

        info["devices"] = [str(d) for d in jax.devices()]
        info["x64"] = bool(jax.config.jax_enable_x64)
    except Exception as err:  # provenance must never fail a run
        info["devices"] = f"unavailable: {err}"
    return info


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _to_json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return np.asarray(value).tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
