"""Helpers shared by the library's modules: argument checks and pytree utilities.

The role ``equinox.internal`` plays for equinox: not part of the user-facing API, but the one
home of what several modules need.

Every check has one signature, ``check_X(value, name, ...)``, returns the checked value, and
raises one message style, ``"{name} must be {what is allowed}; got {value!r}"``. A wrong kind
of value (a string where a number belongs) raises `WrongTypeError`, which is both a
``TypeError`` and a ``ValueError`` so callers catching either see it.

jax is imported inside the pytree helpers only (and never by the checks), so the CLI can
validate its arguments before paying for the jax import.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = [
    "INT32_MAX",
    "SEED_MAX",
    "WrongTypeError",
    "all_finite",
    "check_choice",
    "check_ids",
    "check_int",
    "check_real",
    "check_scalar",
    "check_type",
    "select",
]

#: The largest step count, snapshot step or size a compiled program holds: they are int32 there.
INT32_MAX = int(np.iinfo(np.int32).max)
#: The largest seed: seeds become uint32 PRNG keys.
SEED_MAX = int(np.iinfo(np.uint32).max)


class WrongTypeError(TypeError, ValueError):
    """A value of the wrong kind (e.g. a string where an int belongs)."""


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | np.integer)


def _is_real(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)


def _interval(low, high, low_open: bool = False, high_open: bool = False) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low}"
    if low is None:
        return f"{'<' if high_open else '<='} {high}"
    return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


def _converted(value, name, allowed, accepts, convert, in_range, why="") -> Any:
    """``convert(value)`` if ``accepts(value)`` (else `WrongTypeError`) and ``in_range`` holds
    for the converted value (else ``ValueError``); both messages say ``allowed`` and the
    converted value."""
    if not accepts(value):
        raise WrongTypeError(f"{name} must be {allowed}; got {value!r}{why}")
    value = convert(value)
    if not in_range(value):
        raise ValueError(f"{name} must be {allowed}; got {value!r}{why}")
    return value


def check_int(
    value: Any,
    name: str,
    low: int | None = 1,
    high: int | None = None,
    *,
    none_ok: bool = False,
    why: str = "",
) -> Any:
    """``value`` as an ``int`` in ``[low, high]`` (either bound may be None), else ``ValueError``.

    ``none_ok`` lets None through unchanged; ``why`` is appended to the message (e.g. the
    memory a larger value would need).
    """
    if value is None and none_ok:
        return None
    allowed = "an int" if low is None and high is None else f"an int {_interval(low, high)}"

    def in_range(number: int) -> bool:
        return (low is None or number >= low) and (high is None or number <= high)

    # converted to a plain int first, so the message reads ``got 0``, not ``got np.int64(0)``
    return _converted(value, name, allowed, _is_int, int, in_range, why)


def check_real(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    none_ok: bool = False,
) -> Any:
    """``value`` as a finite ``float`` in the interval the bounds give, else ``ValueError``.

    NaN and ±inf are always refused; ``low_open``/``high_open`` make a bound strict.
    """
    if value is None and none_ok:
        return None
    bounds = "" if low is None and high is None else " " + _interval(low, high, low_open, high_open)
    allowed = f"a finite real number{bounds}"

    def in_range(number: float) -> bool:
        ok = math.isfinite(number)
        ok = ok and (low is None or (number > low if low_open else number >= low))
        return ok and (high is None or (number < high if high_open else number <= high))

    return _converted(value, name, allowed, _is_real, float, in_range)


def check_scalar(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    low_open: bool = False,
    nonzero: bool = False,
) -> Any:
    """``value`` unchanged if it is a real scalar: a number or a 0-d int/float array (jax too).

    Its value must be finite, above ``low`` (strictly with ``low_open``) and, with ``nonzero``,
    not 0. A jax tracer has no value to check: only its shape and dtype are, so the check is
    safe under ``jax.jit`` and ``jax.vmap``.
    """
    bound = "" if low is None else " " + _interval(low, None, low_open)
    allowed = f"a finite{' nonzero' if nonzero else ''} real scalar{bound}"
    dtype = getattr(value, "dtype", None)
    kind = "f" if _is_real(value) else None if dtype is None else np.dtype(dtype).kind
    if kind is None or kind not in "iuf" or np.ndim(value) != 0:
        raise WrongTypeError(f"{name} must be {allowed}; got {value!r}")
    jax = sys.modules.get("jax")  # not imported: then value cannot be a tracer
    if jax is not None and isinstance(value, jax.core.Tracer):
        return value
    number = float(value)
    ok = math.isfinite(number) and not (nonzero and number == 0)
    ok = ok and (low is None or (number > low if low_open else number >= low))
    if not ok:
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return value


def check_ids(value: Any, name: str, size: int, size_name: str = "vocab_size") -> np.ndarray:
    """``value`` as a numpy integer array, any shape, of ids in ``[0, size)``, else an error.

    ``size_name`` names the bound in the message (``vocab_size`` for token ids, ``n`` for
    sample indices). An empty array passes whatever its dtype (``[]`` is float64 to numpy) and
    comes back as int64.
    """
    arr = np.asarray(value)
    allowed = f"integer ids in [0, {size_name}) = [0, {size})"
    if arr.size == 0:
        return arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise WrongTypeError(f"{name} must hold {allowed}; got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= size:
        raise ValueError(f"{name} must hold {allowed}; got values in [{lo}, {hi}]")
    return arr


def check_choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices``, else ``ValueError`` listing them."""
    choices = tuple(choices)
    try:
        known = value in choices
    except (TypeError, ValueError):  # unhashable in a dict/set, or an array's ambiguous ==
        known = False
    if not known:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def check_type(value: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is an instance of ``kind``, else `WrongTypeError` saying ``what``."""
    if not isinstance(value, kind):
        raise WrongTypeError(f"{name} must be {what}; got {type(value).__name__} {value!r}")
    return value


# --------------------------------------------------------------------------------------------
# pytree helpers (jax imported lazily, see the module docstring)


def all_finite(tree: Any) -> Any:
    """A scalar bool array: every leaf of ``tree`` is finite (True for an empty tree)."""
    import jax
    import jax.numpy as jnp

    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def select(keep: Any, new: Any, old: Any) -> Any:
    """Leafwise ``where(keep, new, old)`` over two pytrees of one structure."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, old)
