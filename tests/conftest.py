"""Shared fixtures. One local Ray instance serves every test that needs Ray (ray.init costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from a3c_ray.config import Config


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=4,
            include_dashboard=False,
            logging_level="WARNING",
            _node_ip_address="127.0.0.1",
        )
    yield
    ray.shutdown()


def small_config(tmp_path: os.PathLike[str] | str, **overrides: object) -> Config:
    """A CartPole config that runs in seconds; ``overrides`` are dotted fields."""
    cfg = Config()
    cfg.run.run_dir = str(tmp_path)
    cfg.run.progress = False
    cfg.run.workers = 2
    cfg.env.num_envs = 2
    cfg.monitor.eval_episodes = 2
    for key, value in overrides.items():
        cfg.set(key.replace("__", "."), value)
    return cfg
