"""Where files live: the shared corpus beside the repository, and checks on the folders a
command writes into, made before any work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = [
    "check_output_dir",
    "shared_corpus",
]

#: The repository checkout holding this package (``ctx_staircase/`` is its child).
_REPOSITORY = Path(__file__).resolve().parent.parent


def shared_corpus(name: str = "tinyshakespeare.txt") -> Path:
    """The path of a corpus in the ``shared/data/`` folder beside the repository checkout,
    ``REPOSITORY/../shared/data/NAME`` (it may not exist: callers check, and the package never
    reads it unless handed the path)."""
    return _REPOSITORY.parent / "shared" / "data" / name


def check_output_dir(path: str | os.PathLike, parameter: str = "--out") -> Path:
    """``path`` as a `Path` if it is, or can become, a writable folder; else ``ValueError``.

    Refused: an existing file, a path under a file, a path whose nearest existing ancestor is
    not writable (tested by creating and removing a temporary file there, since permission bits
    say nothing for root or read-only file systems). Nothing is left behind.
    """
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        raise ValueError(f"{parameter} must be a folder path; got {path!r}")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{parameter} {str(path)!r} is an existing file, not a folder")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(
            f"{parameter} {str(path)!r} lies under the file {str(ancestor)!r}; choose a folder path"
        )
    try:
        fd, probe = tempfile.mkstemp(dir=ancestor, prefix=".ctx-staircase-probe-")
    except OSError as err:
        raise ValueError(
            f"{parameter} {str(path)!r}: cannot write into {str(ancestor)!r} ({err.strerror})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return path
