"""``tune.space``'s sampler expressions such as
``loguniform(1e-4, 1e-2)``, parsed into ``Sampler`` values and checked against the config fields
they set, without importing Ray.

``a3c_ray.runtime.search`` turns each ``Sampler`` into the Ray Tune domain of the same name.
"""

from __future__ import annotations

import ast
import copy
import math
from dataclasses import dataclass
from typing import Any

from a3c_ray.config.fields import Config
from a3c_ray.errors import ConfigError

# Sampler name -> (the number of arguments, what they are).
SAMPLERS: dict[str, tuple[int, str]] = {
    "uniform": (2, "low, high"),
    "loguniform": (2, "low, high"),
    "quniform": (3, "low, high, q"),
    "randint": (2, "low, high (exclusive)"),
    "choice": (1, "[value, ...]"),
    "grid": (1, "[value, ...]"),
}
# Fields a trial may not take from the search: where it runs, and how it reports.
NOT_SEARCHED = ("run.run_dir", "run.progress", "run.workers")
# Fields a population-based search cannot change: a checkpoint only fits its env and network,
# and its optimizer statistics only the optimizer that gathered them.
FROZEN_BY_PBT = ("env", "model")
FROZEN_FIELDS_BY_PBT = ("algo.optimizer",)


@dataclass(frozen=True)
class Sampler:
    kind: str
    args: tuple[Any, ...]

    def values(self) -> list[Any]:
        """The values to check against the field: the ends of a range, or every choice; for a
        continuous range also a value just above its low end, which no integer field takes."""
        if self.kind in ("choice", "grid"):
            return list(self.args[0])
        if self.kind == "randint":
            return [self.args[0], self.args[1] - 1]
        if self.kind == "quniform":
            return list(self._grid_ends())
        low, high = self.args[0], self.args[1]
        return [low, high, math.nextafter(float(low), high)]

    def _grid_ends(self) -> tuple[Any, Any]:
        """The lowest and highest multiples of q in a quniform's [low, high] (integers when its
        arguments are); the 1e-9 forgives the rounding of a decimal q such as 0.1."""
        low, high, q = self.args
        lo, hi = math.ceil(low / q - 1e-9) * q, math.floor(high / q + 1e-9) * q
        return (int(lo), int(hi)) if self.integral else (lo, hi)

    @property
    def integral(self) -> bool:
        """Whether the sampler gives integers: randint, or quniform of integer arguments."""
        return self.kind == "randint" or (
            self.kind == "quniform" and all(isinstance(a, int) for a in self.args)
        )

    def clamp(self, value: Any) -> Any:
        """A value population-based training perturbed (Ray multiplies it by 0.8 or 1.2) put back
        into the range: at its nearer end when past it, on quniform's grid, an integer where the
        sampler's values are. Choices are left as they are: Ray moves them to a neighbour."""
        if self.kind in ("choice", "grid"):
            return value
        if self.kind == "quniform":
            q = self.args[2]
            low, high = self._grid_ends()
            value = round(value / q) * q
        else:
            low, high = self.args[0], self.args[1] - (self.kind == "randint")
        value = min(max(value, low), high)
        return round(float(value)) if self.integral else float(value)

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.args))})"


def parse(expr: str) -> Sampler:
    """``name(args)`` with literal arguments; anything else raises ValueError naming the problem."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError("not a sampler expression such as loguniform(1e-4, 1e-2)") from None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or node.keywords:
        raise ValueError("not a sampler expression such as loguniform(1e-4, 1e-2)")
    kind = node.func.id
    if kind not in SAMPLERS:
        raise ValueError(f"unknown sampler {kind!r} (known: {', '.join(SAMPLERS)})")
    n, shape = SAMPLERS[kind]
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
    except ValueError:
        raise ValueError(f"{kind} takes literal values: {kind}({shape})") from None
    if len(args) != n:
        raise ValueError(f"{kind} takes {n} argument{'s' * (n > 1)}: {kind}({shape})")
    if kind in ("choice", "grid"):
        if not isinstance(args[0], list | tuple) or not args[0]:
            raise ValueError(f"{kind} takes a non-empty list: {kind}({shape})")
        return Sampler(kind, (list(args[0]),))
    if not all(isinstance(a, int | float) and not isinstance(a, bool) for a in args):
        raise ValueError(f"{kind} takes numbers: {kind}({shape})")
    if kind == "randint" and not all(isinstance(a, int) for a in args):
        raise ValueError(f"randint takes integers: randint({shape})")
    low, high = args[0], args[1]
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"{kind} needs finite low < high, got {low} and {high}")
    if kind == "loguniform" and low <= 0:
        raise ValueError(f"loguniform needs low > 0, got {low}")
    if kind == "quniform" and not args[2] > 0:
        raise ValueError(f"quniform needs q > 0, got {args[2]}")
    sampler = Sampler(kind, args)
    if kind == "quniform":
        lo, hi = sampler._grid_ends()
        if lo > hi:
            raise ValueError(f"quniform has no multiple of q between low and high: {sampler}")
    return sampler


def samplers(cfg: Config) -> dict[str, Sampler]:
    """The parsed ``tune.space``; raises ConfigError with every problem (``space_problems``)."""
    problems = space_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return {name: parse(expr) for name, expr in cfg.tune.space.items()}


def space_problems(cfg: Config) -> list[str]:
    """Each entry of ``tune.space`` that does not parse, names no config field, or whose values
    the field does not accept (every choice, and both ends of a range, are checked)."""
    problems: list[str] = []
    if not cfg.tune.space:
        problems.append(
            "tune.space: empty; name the fields to search, e.g. tune: {space: {algo.lr: "
            "'loguniform(1e-4, 1e-2)'}}"
        )
    for name, expr in cfg.tune.space.items():
        where = f"tune.space.{name}"
        if name in NOT_SEARCHED or name.startswith("tune."):
            problems.append(f"{where}: {name} cannot be searched")
            continue
        if cfg.tune.scheduler == "pbt" and name.split(".")[0] in FROZEN_BY_PBT:
            problems.append(
                f"{where}: pbt continues trials from each other's checkpoints, which fit one "
                "env and model; search env and model fields with fifo or asha"
            )
            continue
        if cfg.tune.scheduler == "pbt" and name in FROZEN_FIELDS_BY_PBT:
            problems.append(
                f"{where}: pbt continues trials from each other's checkpoints, whose optimizer "
                "statistics fit only the optimizer that gathered them; search it with fifo or asha"
            )
            continue
        if not isinstance(expr, str):
            problems.append(
                f"{where}: expected a sampler such as loguniform(1e-4, 1e-2), got {expr!r}"
            )
            continue
        try:
            sampler = parse(expr)
        except ValueError as e:
            problems.append(f"{where}: {expr}: {e}")
            continue
        if cfg.tune.scheduler == "pbt" and sampler.kind == "grid":
            problems.append(f"{where}: pbt perturbs sampled values; use choice instead of grid")
            continue
        for value in sampler.values():
            trial = copy.deepcopy(cfg)
            try:
                trial.set(name, value)
            except ConfigError as e:
                problems.append(f"{where}: {expr}: {e.problems[0]}")
                break
            bad = [q for q in trial.validate() if q.startswith(name + ":")]
            if bad:
                problems.append(f"{where}: {expr}: {bad[0]}")
                break
    return problems
