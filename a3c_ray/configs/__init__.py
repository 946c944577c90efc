"""Configs shipped with the package: ``pong``, ``breakout``, ``cartpole``, ... (the YAML files here).

``resolve("pong")`` is the path of ``pong.yaml`` here; any other argument is taken as a path, so
``--config`` can accept both a shipped name and a file. ``for_env("Pendulum-v1")`` is the shipped
config that ``a3c-ray train --env Pendulum-v1`` starts from (settings keyed by environment id).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from a3c_ray.config import Config

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


FOR_ENV: dict[str, str] = {
    "CartPole-v1": "cartpole",
    "PongNoFrameskip-v4": "pong",
    "BreakoutNoFrameskip-v4": "breakout",
    "Pendulum-v1": "pendulum",
    "InvertedPendulum-v5": "inverted_pendulum",
    "a3c_ray/MaskedCartPole-v1": "masked_cartpole_lstm",
}
"""The shipped config each env id starts from when it is given with ``--env`` and no ``--config``."""

VARIANTS = ("atari", "breakout_lstm", "cartpole_throughput", "pong_lstm")
"""Shipped configs that are not an env's starting point, only taken by name (``atari`` is the
starting point of every Atari game without a config of its own)."""

ATARI = "atari"
"""The shipped config that an Atari game with no config of its own starts from."""


def for_env(env_id: str) -> str | None:
    """The name of the shipped config for ``env_id``, or None when there is none."""
    return FOR_ENV.get(env_id)


def starting_config(
    config: Path | str | None,
    env_id: str | None,
    use_env_config: bool = True,
    is_atari: Callable[[str], bool] | None = None,
) -> tuple[Config, str | None]:
    """What a run's settings start from, and a line that says so when it is not what was asked
    for by name: ``config`` (a file or a shipped name); else, for an ``env_id`` with a shipped
    config (and ``use_env_config``), that one; else, for an Atari game (``is_atari``, which the
    caller passes: settings know no envs), the Atari starting point ``atari.yaml`` with that id;
    else the package defaults. No ``env_id`` means the default env's (``CartPole-v1``): leaving
    ``--env`` out trains as giving its default."""
    if config:
        return Config.load(resolve(config)), None
    env_id = env_id or Config().env.id
    shipped = for_env(env_id) if use_env_config else None
    if shipped is None and use_env_config and is_atari is not None and is_atari(env_id):
        cfg = Config.load(resolve(ATARI))
        cfg.env.id = env_id
        return cfg, (
            f"{env_id} has no config of its own: it starts from the Atari starting point "
            f"'{ATARI}' ({resolve(ATARI)})"
        )
    if shipped is None:
        return Config(), None
    note = f"{env_id} starts from the shipped config '{shipped}' ({resolve(shipped)})"
    return Config.load(resolve(shipped)), note
