"""Field values from YAML and the command line: typed by the config dataclasses' annotations."""

from __future__ import annotations

import types
import typing
from typing import Any

import yaml


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def admits_str(tp: Any) -> bool:
    """A str field, or an optional one; not a list or mapping of strings."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return str in typing.get_args(tp)
    return tp is str


def admits_none(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


def parse_scalar(text: str) -> Any:
    """A command-line value as YAML, except that '3e-4' is a number (YAML 1.1 wants '3.0e-4')."""
    if not text.strip():
        return None
    try:
        return (
            float(text)
            if "e" in text.lower() and not text.strip().isalpha()
            else yaml.safe_load(text)
        )
    except ValueError:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text
    except yaml.YAMLError:
        return text


def type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_name(a) for a in args)
    if typing.get_origin(tp) is list:
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(
            args[0], str(args[0])
        )
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, str(tp)
    )


def coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check ``value`` against the annotation ``tp``; ints widen to floats, nothing else converts."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, v = coerce(value, arg)
            if ok:
                return True, v
        return False, value
    if tp is type(None):
        return value is None, None
    if origin is list:
        if not isinstance(value, list | tuple):
            return False, value
        out = []
        for item in value:
            ok, v = coerce(item, typing.get_args(tp)[0])
            if not ok:
                return False, value
            out.append(v)
        return True, out
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
        return ok, dict(value) if ok else value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return True, int(value)  # 1e6 on the command line
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if tp is str:
        return isinstance(value, str), value
    return False, value
