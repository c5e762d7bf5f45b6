"""Atomic result files and the provenance recorded with every result (ARCHITECTURE.md, Conventions).

Every write goes to a temporary file in the destination folder and is renamed into place, so a
reader never sees a half-written file and an interrupted run leaves the previous file intact.

**Strict JSON.** `write_json` writes standard JSON, which has no NaN or infinity: a strict parser
(JavaScript's ``JSON.parse``, ``jq``, Python with ``parse_constant`` raising) accepts every file.
A non-finite number is written as ``null`` and its reason is kept beside it, in a sibling entry
of the enclosing object named ``KEY + NONFINITE_SUFFIX`` (``"loss__nonfinite"`` for ``"loss"``):

- a scalar: the reason itself, ``"nan"``, ``"inf"`` or ``"-inf"``:
  ``{"loss": null, "loss__nonfinite": "nan"}``;
- a (nested) list: an object mapping each non-finite element's index path (indices joined by
  ``","``: ``"3"``, or ``"2,5"`` for ``value[2][5]``) to its reason:
  ``{"curve": [0.5, null, null], "curve__nonfinite": {"1": "inf", "2": "nan"}}``.

Objects inside lists carry their own siblings; a list's paths stop at such an object. A root that
is not an object but holds non-finite numbers is wrapped as
``{"value": ..., "value__nonfinite": ..., "__nonfinite": "root"}``. Keys ending in
``_NONFINITE_SUFFIX`` are reserved. `read_json` restores every value.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ctx_staircase import distributed

__all__ = [
    "SCHEMA_VERSION",
    "atomic_write_bytes",
    "cpu",
    "dumps",
    "environment",
    "git_state",
    "loads",
    "numerics_key",
    "read_json",
    "source_fingerprint",
    "write_json",
    "write_npz",
]

_PACKAGES = (
    "ctx-staircase",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "diffrax",
    "numpy",
    "scipy",
    "matplotlib",
)

#: The packages whose versions decide a computed number (matplotlib draws, it does not compute).
_NUMERICAL_PACKAGES = tuple(name for name in _PACKAGES if name != "matplotlib")

#: Raised by a change to the package that alters the numbers a stored unit holds without a new
#: release, so stored lanes of the old numbers are not resumed (`numerics_key`).
_NUMERICS_REVISION = 1

#: Version of the result-file format, recorded by `environment` in every result. 1: bare
#: ``NaN``/``Infinity`` in the JSON (the first format). 2: strict JSON with non-finite numbers as
#: ``null`` plus a ``__nonfinite`` sibling (module docstring), and the provenance fields
#: ``schema_version``, ``git_commit``, ``git_dirty`` and ``command_line``.
SCHEMA_VERSION = 2

#: Suffix of the sibling entry that gives the reason of a ``null`` written for NaN or infinity.
_NONFINITE_SUFFIX = "__nonfinite"

#: Seconds each ``git`` call of `git_state` may take before provenance gives up on it.
_GIT_TIMEOUT_S = 2.0

_ROOT_KEY = "value"
_REASONS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + rename); creates parent folders.

    In a run of several processes only the writer writes (`distributed.is_writer`); the others
    return ``path`` and write nothing, so no two processes race for one file."""
    path = Path(path)
    if not distributed.is_writer():
        return path
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
    """Write ``obj`` as indented strict JSON, atomically (module docstring: non-finite numbers).

    NumPy scalars and arrays (and anything with ``__array__``) become numbers and lists, tuples
    become lists, paths become strings.

    Raises:
        ValueError: a key ends in ``_NONFINITE_SUFFIX`` (reserved), or a key is a non-finite float.
        TypeError: a value JSON cannot hold.
    """
    text = dumps(obj)
    return atomic_write_bytes(path, (text + "\n").encode())


def dumps(obj: Any, indent: int | None = 2) -> str:
    """The strict JSON text `write_json` writes for ``obj``."""
    encoded, reasons = _encode(obj)
    if reasons is not None:  # a non-finite root that is not an object: wrap it
        encoded = {
            _ROOT_KEY: encoded,
            _ROOT_KEY + _NONFINITE_SUFFIX: reasons,
            _NONFINITE_SUFFIX: "root",
        }
    return json.dumps(encoded, indent=indent, allow_nan=False)


def read_json(path: str | os.PathLike) -> Any:
    """Read a result file written by `write_json`, restoring NaN and infinities.

    ``read_json(write_json(path, x))`` equals ``x`` with NaN in the same places (tuples and NumPy
    arrays come back as lists, NumPy scalars as Python numbers). It also reads the bare ``NaN``
    and ``Infinity`` of files written before schema version 2.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not JSON, or a ``__nonfinite`` entry does not fit its value.
    """
    return loads(Path(path).read_text())


def loads(text: str) -> Any:
    """The value `read_json` returns for the JSON ``text``."""
    return _decode(json.loads(text), root=True)


def _versions(names) -> dict[str, str | None]:
    """The installed version of each distribution in ``names`` (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def numerics_key() -> dict[str, Any]:
    """What decides a stored unit's numbers besides its own settings: the versions of
    `_NUMERICAL_PACKAGES` (this package included), `_NUMERICS_REVISION` and the JAX backend.

    Stored work is keyed on this, not on `source_fingerprint`: a reinstall of the same versions,
    or an edit that changes no number (a docstring, the command line), resumes it; an upgrade of
    any numerical package, or a new revision, does not.
    """
    versions = _versions(_NUMERICAL_PACKAGES)
    try:
        import jax

        backend = jax.default_backend()
    except Exception as err:  # a key must never fail a run
        backend = f"unavailable: {type(err).__name__}"
    return {"packages": versions, "revision": _NUMERICS_REVISION, "backend": backend}


def source_fingerprint() -> str:
    """SHA-256 (16 hex digits) of the package's Python sources, so a stored result can tell
    whether it was made by the code that reads it."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def git_state(directory: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``directory`` (default: this package).

    ``commit`` is ``git rev-parse HEAD``; ``dirty`` is whether tracked files differ from it
    (staged or not; untracked files do not count, as for ``git describe --dirty``). ``(None,
    None)`` when ``directory`` is not tracked by a git checkout (an installed copy, even one inside
    some repository's ignored folder), git is missing, or it does not answer within
    ``_GIT_TIMEOUT_S``; ``dirty`` alone is None when only the status fails. Never raises.
    """
    directory = Path(directory) if directory is not None else Path(__file__).resolve().parent
    tracked = _git(directory, "ls-files", "--", ".")
    commit = _git(directory, "rev-parse", "--verify", "HEAD")
    if not tracked or not commit:
        return None, None
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return commit.strip(), None if status is None else bool(status.strip())


def environment() -> dict[str, Any]:
    """Provenance: schema version, package versions, Python, platform, command line, git commit,
    source fingerprint and JAX devices.

    Keys: ``schema_version`` (`SCHEMA_VERSION`), ``python``, ``platform``, ``packages``
    (``{name: version or None}``), ``command_line`` (``sys.argv``, a list of strings),
    ``git_commit`` and ``git_dirty`` (`git_state` of the package sources; None outside a git
    checkout), ``source_fingerprint``, ``cpu`` (`cpu`), ``devices`` and ``x64``. Never raises.
    """
    versions = _versions(_PACKAGES)
    commit, dirty = git_state()
    info: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "command_line": [str(arg) for arg in sys.argv],
        "git_commit": commit,
        "git_dirty": dirty,
        "source_fingerprint": source_fingerprint(),
        "cpu": cpu(),
    }
    try:
        import jax

        info["devices"] = [str(d) for d in jax.devices()]
        info["x64"] = bool(jax.config.jax_enable_x64)
    except Exception as err:  # provenance must never fail a run
        info["devices"] = f"unavailable: {err}"
    return info


#: Prefixes of the instruction-set extensions that change XLA's CPU code (vector width, FMA).
_VECTOR_ISA = ("sse4", "avx", "fma", "f16c", "amx")


def cpu(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, Any]:
    """The host CPU: ``{"model", "machine", "cores", "isa"}``; ``isa`` is the sorted list of its
    `_VECTOR_ISA` flags, ``None`` where ``cpuinfo`` cannot be read (off Linux). Never raises.

    XLA compiles float32 code for the host's vector extensions, so one program can differ in the
    last bits between hosts; this says which kind of host a result came from.
    """
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():  # the first processor's block comes first
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags")
    return {
        "model": fields.get("model name") or platform.processor() or None,
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "isa": None
        if flags is None
        else sorted(f for f in flags.split() if f.startswith(_VECTOR_ISA)),
    }


def write_npz(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """Write arrays to a compressed ``.npz``, atomically."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    return atomic_write_bytes(path, buffer.getvalue())


# --------------------------------------------------------------------------------------------
# Helpers


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _git(directory: Path, *arguments: str) -> str | None:
    """Standard output of ``git -C directory ARGUMENTS``, or None on any failure."""
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), *arguments],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            # no index refresh written by `git status`: other processes may be using the checkout
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def _to_json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return np.asarray(value).tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _reason(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _encode(value: Any) -> tuple[Any, str | dict[str, str] | None]:
    """``(JSON-native value with non-finite numbers as None, their reasons)``.

    The reasons are None when there are none, a reason string for a non-finite number, and
    ``{index path: reason}`` for a list.
    """
    if value is None or isinstance(value, str | bool | int):
        return value, None
    if isinstance(value, float):
        return (float(value), None) if math.isfinite(value) else (None, _reason(value))
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            key = _json_key(key)
            encoded, reasons = _encode(item)
            out[key] = encoded
            if reasons is not None:
                out[key + _NONFINITE_SUFFIX] = reasons
        return out, None
    if isinstance(value, list | tuple):
        items, paths = [], {}
        for index, item in enumerate(value):
            encoded, reasons = _encode(item)
            items.append(encoded)
            if isinstance(reasons, str):
                paths[str(index)] = reasons
            elif reasons is not None:
                paths.update({f"{index},{path}": r for path, r in reasons.items()})
        return items, paths or None
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "__array__"):
        array = np.asarray(value)
        if array.ndim and array.dtype.kind in "biuf":  # fast path: NumPy finds the non-finite
            items = array.tolist()
            bad = np.argwhere(~np.isfinite(array)) if array.dtype.kind == "f" else ()
            paths = {}
            for index in bad:
                *outer, last = index.tolist()
                target = items
                for i in outer:
                    target = target[i]
                paths[",".join(map(str, index.tolist()))] = _reason(target[last])
                target[last] = None
            return items, paths or None
    return _encode(_to_json(value))


def _json_key(key: Any) -> str:
    """``key`` as the string JSON writes for it; rejects reserved and non-finite keys."""
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, str):
        text = key
    elif isinstance(key, bool) or key is None:
        text = json.dumps(key)
    elif isinstance(key, int):
        text = str(int(key))
    elif isinstance(key, float):
        if not math.isfinite(key):
            raise ValueError(f"a JSON key cannot be {key!r}")
        text = float.__repr__(key)
    else:
        raise TypeError(
            f"JSON keys must be str, int, float, bool or None; got {type(key).__name__}"
        )
    if text.endswith(_NONFINITE_SUFFIX):
        raise ValueError(
            f"key {text!r}: keys ending in {_NONFINITE_SUFFIX!r} are reserved for the reasons of "
            "non-finite numbers (read result files with results.read_json, not json.loads)"
        )
    return text


def _decode(value: Any, root: bool = False) -> Any:
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    if root and value.get(_NONFINITE_SUFFIX) == "root" and "" not in value:
        return _restore(_decode(value[_ROOT_KEY]), value[_ROOT_KEY + _NONFINITE_SUFFIX])
    out = {}
    for key, item in value.items():
        if key.endswith(_NONFINITE_SUFFIX):
            base = key[: -len(_NONFINITE_SUFFIX)]
            if base not in value:
                raise ValueError(f"{key!r} gives the reasons of {base!r}, which is absent")
            continue
        out[key] = _decode(item)
        reasons = value.get(key + _NONFINITE_SUFFIX)
        if reasons is not None:
            out[key] = _restore(out[key], reasons, key)
    return out


def _restore(value: Any, reasons: Any, key: str = "the root") -> Any:
    """``value`` with the non-finite numbers named by ``reasons`` (a reason or index paths)."""
    if isinstance(reasons, str):
        if value is not None or reasons not in _REASONS:
            raise ValueError(f"{key}: reason {reasons!r} does not fit the value {value!r}")
        return _REASONS[reasons]
    if not isinstance(reasons, dict) or not isinstance(value, list):
        raise ValueError(f"{key}: reasons {reasons!r} do not fit the value")
    for path, reason in reasons.items():
        try:
            *outer, last = (int(i) for i in path.split(","))
            target = value
            for index in outer:
                target = target[index]
            if target[last] is not None or reason not in _REASONS:
                raise ValueError
            target[last] = _REASONS[reason]
        except (ValueError, IndexError, KeyError, TypeError):
            raise ValueError(f"{key}: entry {path!r}: {reason!r} does not fit the value") from None
    return value
