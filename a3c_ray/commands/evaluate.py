"""``a3c-ray eval``: play a checkpoint's policy for N episodes, optionally recording videos."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from a3c_ray.algo.evaluation import Episode, UniformPolicy, run_episodes, summarize
from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import ActorCritic
from a3c_ray.config import EnvConfig
from a3c_ray.envs.make import check_env, is_atari, make_eval_env, untrusted_env_problem
from a3c_ray.errors import CheckpointError, ConfigError, install_hint
from a3c_ray.rundir.checkpoint import load_checkpoint
from a3c_ray.rundir.policy import policy_from_state


def env_config_from_checkpoint(state: dict[str, Any]) -> EnvConfig:
    """The evaluation env of a checkpoint: its env id and the ``env`` settings it recorded."""
    meta = CheckpointMeta.from_state(state)
    return meta.env_config(stack_from_shape=is_atari(meta.env_id))


def model_from_checkpoint(state: dict[str, Any]) -> ActorCritic:
    """The network a checkpoint was saved from, with its weights (its policy's ``model``)."""
    return policy_from_state(state).model


def _eval_env(env_cfg: EnvConfig, video_dir: Path | None) -> gym.Env:
    """The evaluation env (whole games, raw scores), recording each episode into ``video_dir``."""
    if video_dir is None:
        return make_eval_env(env_cfg, search_cwd=False)
    if importlib.util.find_spec("moviepy") is None:
        raise ConfigError([f"--video needs moviepy: {install_hint('video')}"])
    return gym.wrappers.RecordVideo(
        make_eval_env(env_cfg, render_mode="rgb_array", search_cwd=False),
        str(video_dir),
        episode_trigger=lambda _: True,
        name_prefix="eval",
        disable_logger=True,
    )


def evaluate_checkpoint(
    path: str | Path,
    episodes: int,
    seed: int = 0,
    greedy: bool = False,
    video_dir: Path | None = None,
    trust_env: bool = False,
) -> dict[str, Any]:
    """Play the checkpoint's policy for ``episodes`` on the env it records.

    A checkpoint is data: an env it names by import path (``module:Name``, or a wrapper) is
    refused with a ``ConfigError`` unless ``trust_env``; then it is imported from the installed
    packages and ``PYTHONPATH``, not from the working directory."""
    state = load_checkpoint(path)
    env_cfg = env_config_from_checkpoint(state)
    untrusted = untrusted_env_problem(env_cfg, f"checkpoint {state['path']}")
    if untrusted and not trust_env:
        raise ConfigError([untrusted])
    problem = check_env(env_cfg, search_cwd=False)
    if problem:
        if untrusted and "cannot import" in problem:
            problem += (
                " (a checkpoint's env is imported from PYTHONPATH and the installed packages,"
                " not from the working directory)"
            )
        raise ConfigError([f"checkpoint {state['path']}: {problem}"])
    policy = policy_from_state(state)
    env = _eval_env(env_cfg, video_dir)
    shape = tuple(int(x) for x in env.observation_space.shape or ())
    if shape != tuple(int(x) for x in state["obs_shape"]):
        env.close()
        raise CheckpointError(
            f"checkpoint {state['path']} was trained on observations of shape "
            f"{tuple(state['obs_shape'])}, its env now gives {shape}"
        )
    torch.set_num_threads(1)
    try:
        eps = run_episodes(policy, env, episodes, seed, greedy=greedy)
    finally:
        env.close()
    return _result(env_cfg.id, state["path"], int(state["env_steps"]), eps)


def evaluate_random(
    env_id: str, episodes: int, seed: int = 0, video_dir: Path | None = None
) -> dict[str, Any]:
    """Play uniformly random actions for ``episodes`` on ``env_id``'s evaluation env: the env
    that ``a3c-ray train --env env_id`` would evaluate on (its shipped config, the Atari starting
    point, or the defaults), so the score is a trained agent's baseline under the same protocol.
    Only registered ids: nothing is imported by path."""
    from a3c_ray import configs

    if ":" in env_id:
        raise ConfigError([f"--random takes a registered env id, not an import path: {env_id}"])
    cfg, _ = configs.starting_config(None, env_id, True, is_atari)
    cfg.env.id = env_id
    problem = check_env(cfg.env, search_cwd=False)
    if problem:
        raise ConfigError([problem])
    env = _eval_env(cfg.env, video_dir)
    try:
        policy = UniformPolicy(env.action_space)
    except ValueError as e:
        env.close()
        raise ConfigError([f"{env_id}: {e}"]) from None
    try:
        eps = run_episodes(policy, env, episodes, seed)
    finally:
        env.close()
    return {**_result(cfg.env.id, None, 0, eps), "policy": "random"}


def _result(
    env_id: str, checkpoint: str | None, env_steps: int, eps: list[Episode]
) -> dict[str, Any]:
    """What ``a3c-ray eval`` prints (``--json``): the summary and each episode's return and length."""
    mean, std, mean_len = summarize(eps)
    return {
        "env_id": env_id,
        "checkpoint": checkpoint,
        "env_steps": env_steps,
        "episodes": len(eps),
        "mean_return": mean,
        "std_return": std,
        "mean_length": mean_len,
        "returns": [e.total_reward for e in eps],
        "lengths": [e.length for e in eps],
    }
