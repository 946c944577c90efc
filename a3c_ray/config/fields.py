"""Typed settings for a run: the sections (``sections``), read, set and checked as one.

A config comes from the defaults, then an optional YAML file, then command-line overrides, in that
order. ``validate`` gathers every problem before a run starts, so a user fixes them all at once.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from a3c_ray.config.checks import range_problems, tune_problems
from a3c_ray.config.sections import (
    AlgoConfig,
    EnvConfig,
    ModelConfig,
    MonitorConfig,
    PSConfig,
    RunConfig,
    TuneConfig,
)
from a3c_ray.config.values import (
    admits_none,
    admits_str,
    coerce,
    field_types,
    parse_scalar,
    type_name,
)
from a3c_ray.errors import ConfigError


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    run: RunConfig = field(default_factory=RunConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    ps: PSConfig = field(default_factory=PSConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)

    # -- conversion -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Config:
        """Build a config from nested dicts; unknown sections or keys are errors."""
        cfg = cls()
        problems: list[str] = []
        for section, values in (data or {}).items():
            if section not in SECTIONS:
                problems.append(
                    f"unknown config section '{section}' (known: {', '.join(SECTIONS)})"
                )
                continue
            if not isinstance(values, dict):
                problems.append(f"config section '{section}' must be a mapping")
                continue
            for key, value in values.items():
                try:
                    cfg.set(f"{section}.{key}", value)
                except ConfigError as e:
                    problems.extend(e.problems)
        if problems:
            raise ConfigError(problems)
        return cfg

    @classmethod
    def load_saved(cls, path: str | Path) -> Config:
        """The config a run saved: a field the run's version did not have yet takes the value that
        acts as that version did (``SAVED_BEFORE``), not today's default."""
        cfg = cls.load(path)
        data = yaml.safe_load(Path(path).read_text()) or {}
        for dotted, (applies, old) in SAVED_BEFORE.items():
            section, _, name = dotted.partition(".")
            if name not in (data.get(section) or {}) and applies(cfg):
                cfg.set(dotted, old)
        return cfg

    @classmethod
    def load(cls, path: str | Path) -> Config:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError([f"cannot read config file {path}: {e.strerror}"]) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(
                [f"config file {path} is not valid YAML: {e}".splitlines()[0]]
            ) from None
        if data is not None and not isinstance(data, dict):
            raise ConfigError([f"config file {path} must hold a mapping of sections"])
        return cls.from_dict(data)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_yaml())

    # -- field access -----------------------------------------------------------------------
    def set(self, dotted: str, value: Any) -> None:
        """Set ``section.field``; a string value is parsed as YAML (``--set algo.lr=3e-4``)."""
        section, _, name = dotted.partition(".")
        obj = getattr(self, section, None) if section in SECTIONS else None
        if obj is None or not name:
            raise ConfigError([f"unknown config field '{dotted}'"])
        hints = field_types(type(obj))
        name, _, key = name.partition(".")
        if key:  # one entry of a mapping field: env.kwargs.size=8
            if typing.get_origin(hints.get(name)) is not dict:
                raise ConfigError([f"unknown config field '{dotted}'"])
            getattr(obj, name)[key] = parse_scalar(value) if isinstance(value, str) else value
            return
        if name not in hints:
            raise ConfigError([f"unknown config field '{dotted}' (known: {', '.join(hints)})"])
        if isinstance(value, str) and not admits_str(hints[name]):
            value = parse_scalar(value)
        elif isinstance(value, str) and value.strip() in ("", "null", "~"):
            value = None if admits_none(hints[name]) else value
        ok, coerced = coerce(value, hints[name])
        if not ok:
            raise ConfigError([f"{dotted}: expected {type_name(hints[name])}, got {value!r}"])
        setattr(obj, name, coerced)

    def get(self, dotted: str) -> Any:
        section, _, name = dotted.partition(".")
        return getattr(getattr(self, section), name)

    # -- checks -----------------------------------------------------------------------------
    def apply_sets(self, items: list[str]) -> list[str]:
        """``--set FIELD=VALUE`` items, each parsed as ``set`` parses it; the problems, one per bad item."""
        problems: list[str] = []
        for item in items:
            key, eq, value = item.partition("=")
            if not eq:
                problems.append(f"--set {item}: expected FIELD=VALUE")
                continue
            try:
                self.set(key.strip(), value)
            except ConfigError as e:
                problems.extend(e.problems)
        return problems

    def validate(self, *checks: Callable[[Config], list[str]]) -> list[str]:
        """Every problem with the values, each naming its field; empty when the config is good.

        Each of ``checks`` adds the problems only a layer above can see: the names each registry
        knows (``a3c_ray.algo.choices.problems``), and whether gymnasium can make ``env.id``
        (``a3c_ray.envs.make.env_problems``)."""
        p = range_problems(self) + tune_problems(self)
        for check in checks:
            p += check(self)
        return p

    def check(self, *checks: Callable[[Config], list[str]]) -> None:
        problems = self.validate(*checks)
        if problems:
            raise ConfigError(problems)


SECTIONS = tuple(f.name for f in dataclasses.fields(Config))

SAVED_BEFORE: dict[str, tuple[Callable[[Config], bool], Any]] = {
    # Gaussian policies acted in the env's own units before their samples were scaled to the Box.
    "model.scale_actions": (lambda c: c.model.policy == "gaussian", False),
}
"""Fields added later whose default changed how a run acts: for a run saved without one (and
where it applies), the value that keeps it acting as it did."""
