"""The settings reference of docs/configuration.md, read from the config dataclasses' docstrings.

``make docs`` rewrites the reference; tests/test_docs.py checks that it is current.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from typing import Any

import yaml

from a3c_ray.config import fields as config
from a3c_ray.config import sections
from a3c_ray.config.fields import Config
from a3c_ray.config.values import type_name


def field_docs() -> list[tuple[str, str, Any, str]]:
    """(dotted name, type, default, docstring) of every field, read from the sections' source."""
    tree = ast.parse(inspect.getsource(sections))
    docs: dict[tuple[str, str], str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for stmt, nxt in zip(node.body, node.body[1:], strict=False):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                ):
                    docs[(node.name, stmt.target.id)] = " ".join(str(nxt.value.value).split())
    rows = []
    defaults = Config()
    for section in config.SECTIONS:
        obj = getattr(defaults, section)
        for f in dataclasses.fields(obj):
            rows.append(
                (
                    f"{section}.{f.name}",
                    type_name(typing.get_type_hints(type(obj))[f.name]),
                    getattr(obj, f.name),
                    docs.get((type(obj).__name__, f.name), ""),
                )
            )
    return rows


def markdown_table() -> str:
    """The settings reference of docs/configuration.md."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, tp, default, doc in field_docs():
        shown = (
            "null"
            if default is None
            else yaml.safe_dump(default, default_flow_style=True)
            .strip()
            .removesuffix("...")
            .strip()
        )
        lines.append(f"| `{name}` | {tp} | `{shown}` | {doc} |")
    return "\n".join(lines) + "\n"
