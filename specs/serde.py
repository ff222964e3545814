"""Lossless JSON round trip for the frozen spec dataclasses.

`to_dict` turns a spec into plain JSON types; `from_dict` rebuilds it, checking every
key against the dataclass fields (unknown keys are rejected with the list of valid ones)
and every value against the field's type annotation (int, float, bool, str, `Literal`,
`X | None`, `tuple[X, ...]`, `frozenset[X]` (written as a sorted list), `dict[str, X]`,
nested spec dataclasses). Field-local value
checks live in each class's ``__post_init__``; this module only checks shape and type.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from specs.errors import SpecError, unknown_name_message

T = TypeVar("T")


def to_dict(spec: Any) -> dict[str, Any]:
    """Plain-JSON dict of a spec dataclass (tuples become lists)."""
    return {f.name: _encode(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted(_encode(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def from_dict(cls: type[T], data: Any, *, where: str | None = None) -> T:
    """Build ``cls`` from a plain dict; raise `SpecError` naming the bad key or value."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise SpecError(f"{where}: " + unknown_name_message("key", unknown[0], fields))
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _decode(hints[name], value, f"{where}.{name}")
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(f"{where}: missing required key(s): {', '.join(missing)}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"{where}: {exc}") from exc


def _decode(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, value, where)
            except SpecError as exc:
                errors.append(str(exc))
        raise SpecError(errors[0] if len(errors) == 1 else f"{where}: invalid value {value!r}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise SpecError(f"{where} must be one of {choices}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise SpecError(f"{where}: expected a list, got {type(value).__name__}")
        item_tp = get_args(tp)[0]
        return tuple(_decode(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is frozenset:
        if not isinstance(value, list | tuple):
            raise SpecError(f"{where}: expected a list, got {type(value).__name__}")
        item_tp = get_args(tp)[0]
        return frozenset(_decode(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where}: expected a JSON object, got {type(value).__name__}")
        key_tp, value_tp = get_args(tp)
        return {
            _decode(key_tp, k, f"{where}"): _decode(value_tp, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where=where)
    return _decode_scalar(tp, value, where)


def _decode_scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise SpecError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise SpecError(f"{where}: expected a string, got {value!r}")
        return value
    if tp is Any:
        return value
    raise SpecError(f"{where}: unsupported field type {tp!r}")


def dumps(spec: Any) -> str:
    """Indented JSON text of a spec."""
    return json.dumps(to_dict(spec), indent=2) + "\n"


def loads(cls: type[T], text: str, *, where: str | None = None) -> T:
    """Parse JSON text into ``cls``; malformed JSON is a `SpecError` with line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{where or cls.__name__}: malformed JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}"
        ) from exc
    return from_dict(cls, data, where=where)


def read_json(path: str | Path) -> Any:
    """Read a JSON file (UTF-8, as RFC 8259 requires); a missing, binary or malformed file
    is a `SpecError` naming the path."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{p}: not a JSON text file (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start} is not UTF-8); give the path of a JSON file"
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{p}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


def load(cls: type[T], path: str | Path) -> T:
    """Read a spec of type ``cls`` from a JSON file."""
    return from_dict(cls, read_json(path), where=str(path))
