"""Configs shipped with the package: ``pong``, ``breakout``, ``cartpole``, ... (the YAML files here).

``resolve("pong")`` is the path of ``pong.yaml`` here; any other argument is taken as a path, so
``--config`` can accept both a shipped name and a file. ``for_env("Pendulum-v1")`` is the shipped
config that ``a3c-ray train --env Pendulum-v1`` starts from (settings keyed by environment id).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import yaml

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
    for by name.

    Without ``config``: for an ``env_id`` with a shipped config (and ``use_env_config``), that
    one; else, for an Atari game (``is_atari``, which the caller passes: settings know no envs),
    the Atari starting point ``atari.yaml`` with that id; else the package defaults. No
    ``env_id`` means the default env's (``CartPole-v1``): leaving ``--env`` out trains as giving
    its default.

    With ``config`` (a file or a shipped name) and an ``env_id``, the file is laid over what that
    env starts from without it: the fields the file sets win, every other field keeps the env's
    shipped config (``--env CartPole-v1 --config my.yaml`` keeps cartpole.yaml's
    ``algo.lr_half_life`` unless my.yaml sets it). With ``config`` and no ``env_id`` the file is
    laid over the package defaults: a file names its own env and stands alone, which is how
    ``--config pong`` is exactly pong.yaml."""
    if config and not env_id:
        return Config.load(resolve(config)), None
    env_id = env_id or Config().env.id
    base, base_file, what = _env_start(env_id, use_env_config, is_atari)
    if not config:
        if base_file is None:
            return base, None
        if base_file == resolve(ATARI) and for_env(env_id) is None:
            return base, f"{env_id} has no config of its own: it starts from {what}"
        return base, f"{env_id} starts from {what}"
    path = resolve(config)
    layered = _laid_over(base, path)
    if base_file is None or base_file.resolve() == path.resolve():
        return layered, None
    return layered, f"--config {config} is laid over {env_id}'s starting point, {what}"


def _env_start(
    env_id: str, use_env_config: bool, is_atari: Callable[[str], bool] | None
) -> tuple[Config, Path | None, str]:
    """The config ``--env env_id`` starts from, its file (None: the package defaults) and what
    it is, in words."""
    shipped = for_env(env_id) if use_env_config else None
    if shipped is None and use_env_config and is_atari is not None and is_atari(env_id):
        cfg = Config.load(resolve(ATARI))
        cfg.env.id = env_id
        return cfg, resolve(ATARI), f"the Atari starting point '{ATARI}' ({resolve(ATARI)})"
    if shipped is None:
        return Config(), None, "the package defaults"
    return (
        Config.load(resolve(shipped)),
        resolve(shipped),
        f"the shipped config '{shipped}' ({resolve(shipped)})",
    )


def _laid_over(base: Config, path: Path) -> Config:
    """``base`` with the fields that the YAML file at ``path`` sets taken from it. The file is
    first read as a whole config, so that its problems are reported as for a file alone."""
    Config.load(path)
    data = yaml.safe_load(path.read_text()) or {}
    cfg = copy.deepcopy(base)
    for section, values in data.items():
        for key, value in values.items():
            cfg.set(f"{section}.{key}", value)
    return cfg
