"""Resumable work: each finished unit is saved atomically, and a rerun computes only the rest.

A `UnitStore` is a folder holding ``spec.json`` (what is being computed: the settings and
`results.numerics_key`, the versions of the numerical packages and of this one) and
``units/KEY.npz``, one file per finished unit (a lane, a gamma, an experiment). Rerunning the
same work into the same folder loads the finished units and computes the others, so an
interrupted run resumes; since every unit is computed by the same compiled program whatever else
runs (`sweep.sweep_map`), the resumed result equals the uninterrupted one bitwise.

What a folder may hold, and what happens to it:

- the same spec: its units are reused;
- another spec and no finished summary (a crashed or interrupted run of other settings or of
  older code): it is cleared and restarted, with one line on stderr, so a crash never blocks
  its folder;
- another spec and a finished summary (``done``, written last by `UnitStore.finish`): refused with a
  ``ValueError`` naming the folder, since clearing it would lose a finished result;
- a unit file that cannot be read back (truncated by a kill, not a zip, missing arrays): one line
  on stderr, the file is removed and the unit is recomputed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import sys
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ctx_staircase import distributed, results

__all__ = [
    "SPEC_FILE",
    "UnitStore",
    "cached_store",
    "caching",
]

SPEC_FILE = "spec.json"
_UNITS = "units"
_cache_roots: list[Path] = []


def _differences(saved: Any, wanted: Mapping[str, Any], limit: int = 4) -> str:
    """The settings that differ between a saved spec and the wanted one, as ``key: saved ->
    wanted`` (nested keys dotted, long values cut), at most ``limit`` of them."""
    if not isinstance(saved, dict):
        return "its spec is unreadable"

    def short(value: Any) -> str:
        text = json.dumps(value, default=str)
        return text if len(text) <= 40 else text[:37] + "..."

    def walk(a: Any, b: Any, prefix: str) -> list[str]:
        if isinstance(a, dict) and isinstance(b, dict):
            out = []
            for key in sorted(set(a) | set(b), key=str):
                out += walk(a.get(key, "(none)"), b.get(key, "(none)"), f"{prefix}{key}.")
            return out
        return [] if a == b else [f"{prefix[:-1]}: {short(a)} -> {short(b)}"]

    found = walk(saved, dict(wanted), "")
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more


class UnitStore:
    """A folder of finished units of one piece of work (see the module docstring).

    Args:
        root: the folder (created on the first save).
        spec: JSON-able description of the work; `results.numerics_key` is added to it as
            ``numerics``.
        done: the file name, inside ``root``, that `finish` writes last; its presence marks the
            work finished.
        parameter: how error messages name ``root`` (e.g. ``"--out"``).
    """

    def __init__(
        self,
        root: str | Path,
        spec: Mapping[str, Any],
        *,
        done: str = "finished.json",
        parameter: str = "out",
    ) -> None:
        self.root = Path(root)
        self.spec = json.loads(
            json.dumps({**spec, "numerics": results.numerics_key()}, default=str)
        )
        self.done = done
        self.parameter = parameter
        self._opened = False

    def open(self) -> UnitStore:
        """Check the folder against the spec, clearing a stale unfinished run; idempotent.

        Several processes (`distributed`) see the writer's folder: it alone reads, clears and
        writes, and every process gets its verdict."""
        if self._opened:
            return self
        spec_path = self.root / SPEC_FILE
        text = distributed.broadcast_bytes(_read(spec_path))
        if text is not None:
            try:
                saved = json.loads(text)
            except ValueError:
                saved = None
            if saved != self.spec:
                differ = _differences(saved, self.spec)
                if self.finished():
                    raise ValueError(
                        f"{self.parameter} {str(self.root)!r} holds a finished run of other "
                        f"settings ({differ}); choose another folder or delete it"
                    )
                _log(
                    f"{self.root}: discarding an unfinished run of other settings ({differ}); "
                    "starting over"
                )
                if distributed.is_writer():
                    shutil.rmtree(self.root / _UNITS, ignore_errors=True)
                    spec_path.unlink()
                text = None
        if text is None:
            results.write_json(spec_path, self.spec)
        self._opened = True
        return self

    def path(self, key: str) -> Path:
        return self.root / _UNITS / f"{key}.npz"

    def load(self, key: str, required: Iterable[str] = ()) -> dict[str, np.ndarray] | None:
        """The arrays of finished unit ``key``, or None if it is absent or unreadable (then it
        is reported in one line, removed and must be recomputed). ``required``: array names the
        unit must hold."""
        self.open()
        path = self.path(key)
        data = distributed.broadcast_bytes(_read(path))
        if data is None:
            return None
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as unit:
                arrays = {name: np.asarray(unit[name]) for name in unit.files}
            missing = sorted(set(required) - set(arrays))
            if missing:
                raise ValueError(f"missing arrays {missing}")
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
            _log(f"{path}: corrupt or partial unit file ({type(err).__name__}: {err}); recomputing")
            if distributed.is_writer():
                path.unlink(missing_ok=True)
            return None
        return arrays

    def save(self, key: str, **arrays: np.ndarray) -> None:
        self.open()
        results.write_npz(self.path(key), **arrays)

    def finish(self, **summary: Any) -> None:
        """Mark the work finished (writes ``done``, atomically, with the spec and ``summary``)."""
        self.open()
        results.write_json(self.root / self.done, {"spec": self.spec, **summary})

    def finished(self) -> bool:
        return distributed.broadcast_flag((self.root / self.done).exists())


@contextlib.contextmanager
def caching(root: str | Path) -> Iterator[Path]:
    """Inside the block, library calls that take ``out=`` but got none (`sweep.train_sweep`,
    `lm.train_lm`) save their units under ``root``, one folder per distinct spec, so a whole
    experiment resumes without passing folders through its code."""
    _cache_roots.append(Path(root))
    try:
        yield Path(root)
    finally:
        _cache_roots.pop()


def cached_store(kind: str, spec: Mapping[str, Any], **kwargs) -> UnitStore | None:
    """The `UnitStore` of ``spec`` under the active `caching` folder, or None outside one."""
    if not _cache_roots:
        return None
    text = json.dumps({"kind": kind, **spec}, sort_keys=True, default=str)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return UnitStore(_cache_roots[-1] / f"{kind}_{key}", spec, **kwargs)


def _read(path: Path) -> bytes | None:
    """The bytes of ``path``, or None when it is absent or unreadable (the writer's view)."""
    if not distributed.is_writer():
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def _log(message: str) -> None:
    """One line of progress or warning on stderr (tables go to stdout)."""
    print(message, file=sys.stderr, flush=True)
