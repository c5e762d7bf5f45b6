"""One generic save and load for typed records: frozen dataclasses and NamedTuples of numbers,
strings, NumPy arrays, tuples, dicts, enums and other records.

`encode` turns a record into plain JSON values (`results.write_json` writes them); `decode`
reads them back into the type named, guided by its annotations, so a record saved by one run is
the same record when a later one loads it (``decode(T, encode(x)) == x``, arrays equal with NaN
in the same places). Nothing is renamed between the two: the JSON keys are the field names,
or a field's ``metadata={"key": ...}`` where the JSON's key is no Python name (``"mod/relu"``).
A dataclass field with ``metadata={"saved": False}`` (and a default) is left out of both; one
with ``metadata={"saved": IF_SET}`` (and the default None) is left out where it is None.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

import numpy as np

__all__ = ["IF_SET", "decode", "encode"]

#: A field's ``metadata["saved"]`` for a value saved only where it is not None.
IF_SET = "if set"


def encode(value: Any) -> Any:
    """``value`` as JSON values: a record (dataclass or NamedTuple) as the dict of its fields, an
    array as nested lists, an enum as its value, a NumPy scalar as a Python number, tuples and
    lists as lists, dicts with string keys as dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = _saved_fields(type(value))
        return {
            _key(f): encode(getattr(value, f.name))
            for f in fields
            if not (f.metadata.get("saved") == IF_SET and getattr(value, f.name) is None)
        }
    if _is_named_tuple(type(value)):
        return {name: encode(getattr(value, name)) for name in type(value)._fields}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        bad = [key for key in value if not isinstance(key, str)]
        if bad:
            raise TypeError(f"record dict keys must be str; got {bad[0]!r}")
        return {key: encode(item) for key, item in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__} in a record: {value!r}")


def decode(kind: Any, data: Any) -> Any:
    """The value of type ``kind`` (a record class or an annotation such as ``tuple[float, ...]``,
    ``np.ndarray``, ``dict[str, Cell]`` or ``float | None``) that `encode` wrote as ``data``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"cannot decode the union {kind}: name one type besides None")
        return decode(options[0], data)
    if isinstance(kind, type) and (dataclasses.is_dataclass(kind) or _is_named_tuple(kind)):
        return _decode_record(kind, data)
    if kind is np.ndarray:
        return np.asarray(data, dtype=float)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], item) for item in data)
        return tuple(decode(a, item) for a, item in zip(args, data, strict=True))
    if origin is list:
        return [decode(args[0] if args else Any, item) for item in data]
    if origin is dict:
        value = args[1] if args else Any
        return {key: decode(value, item) for key, item in data.items()}
    if kind is float:
        return float(data)
    if kind in (int, str, bool):
        return kind(data)
    raise TypeError(f"cannot decode into {kind!r}")


def _saved_fields(kind: type) -> list[dataclasses.Field]:
    """A dataclass's fields but those marked ``metadata={"saved": False}`` (what a run keeps
    for its figures, not for its record)."""
    return [f for f in dataclasses.fields(kind) if f.metadata.get("saved", True)]


def _key(field: dataclasses.Field) -> str:
    """A field's key in the JSON: its ``metadata["key"]``, else its name."""
    return field.metadata.get("key", field.name)


def _decode_record(kind: type, data: dict) -> Any:
    hints = typing.get_type_hints(kind)
    if dataclasses.is_dataclass(kind):
        fields = _saved_fields(kind)
        keys = {f.name: _key(f) for f in fields}
        optional = {f.name for f in fields if f.metadata.get("saved") == IF_SET}
    else:
        keys, optional = {name: name for name in kind._fields}, set()
    missing = [key for name, key in keys.items() if key not in data and name not in optional]
    if missing:
        raise ValueError(f"a saved {kind.__name__} lacks {missing}; it has {sorted(data)}")
    return kind(
        **{
            name: decode(hints.get(name, Any), data[key])
            for name, key in keys.items()
            if key in data
        }
    )


def _is_named_tuple(kind: type) -> bool:
    return isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")
