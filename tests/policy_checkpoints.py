"""Checkpoints of untrained networks of each kind, written as the Monitor writes them, for the tests
of load_policy, serve and export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import build_model, get_flat_params
from a3c_ray.config import Config
from a3c_ray.envs.make import action_size, env_spaces, resolve_policy
from a3c_ray.envs.spaces import recorded_spaces
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager

# name -> (env id, model fields): one of each network and head a3c-ray trains.
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "mlp": ("CartPole-v1", {"hidden_sizes": [16, 16]}),
    "lstm": ("a3c_ray/MaskedCartPole-v1", {"hidden_sizes": [16], "lstm": True, "lstm_size": 8}),
    "gaussian": ("Pendulum-v1", {"hidden_sizes": [16]}),
    "cnn": ("PongNoFrameskip-v4", {"kind": "cnn"}),
}


def kind_config(kind: str) -> Config:
    env_id, model = KINDS[kind]
    cfg = Config()
    cfg.env.id = env_id
    for key, value in model.items():
        setattr(cfg.model, key, value)
    resolve_policy(cfg)
    return cfg


def save_checkpoint(
    directory: Path,
    kind: str = "mlp",
    env_steps: int = 1000,
    seed: int = 0,
    eval_return: float | None = 1.0,
    manager: CheckpointManager | None = None,
) -> Path:
    """A checkpoint of a freshly initialized network (seeded) in ``directory``/checkpoints."""
    cfg = kind_config(kind)
    obs_space, act_space = env_spaces(cfg.env)
    meta = CheckpointMeta.of(
        cfg, obs_space.shape, action_size(act_space), recorded_spaces(obs_space, act_space)
    )
    torch.manual_seed(seed)
    model = build_model(cfg.model, meta.obs_shape, meta.n_actions)
    if model.log_std is not None:  # a spread that is not the initial zeros, to be carried too
        with torch.no_grad():
            model.log_std.fill_(-0.5)
    state = {
        **meta.to_state(),
        "params": torch.from_numpy(get_flat_params(model)),
        "env_steps": env_steps,
        "version": 1,
    }
    manager = manager or CheckpointManager(directory / layout.CHECKPOINTS, keep=100)
    return manager.save(state, eval_return=eval_return)
