"""Configs shipped with the package: ``pong``, ``breakout``, ``cartpole``, ... (the YAML files here).

``resolve("pong")`` is the path of ``pong.yaml`` here; any other argument is taken as a path, so
``--config`` can accept both a shipped name and a file.
"""

from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent


def names() -> list[str]:
    """The shipped config names, e.g. ``["breakout", "cartpole", "pong", ...]``."""
    return sorted(p.stem for p in DIR.glob("*.yaml"))


def resolve(name_or_path: str | Path) -> Path:
    """A shipped config's path for a bare name (``pong`` or ``pong.yaml``), else the path itself."""
    p = Path(name_or_path)
    if not p.exists() and p.parent == Path(".") and (DIR / p.with_suffix(".yaml").name).exists():
        return DIR / p.with_suffix(".yaml").name
    return p
