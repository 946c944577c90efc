"""Environment construction: gymnasium ids, vector envs for Workers, single envs for evaluation.

Workers step K copies of an env through gymnasium's ``SyncVectorEnv`` in *same-step* autoreset
mode: when an episode ends, ``step`` returns the first observation of the next episode and puts the
last observation of the finished one in ``info["final_obs"]``. That is what n-step returns need:
a truncated episode is bootstrapped from V(final_obs), a terminated one from 0.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from a3c_ray.config import EnvConfig


def check_env_id(env_id: str) -> str | None:
    """A one-line problem with ``env_id``, or None when gymnasium knows it and a3c-ray can train it."""
    register_extra_envs()
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        return f"unknown environment '{env_id}': {str(e).splitlines()[0]}"
    try:
        env = gym.make(env_id)
    except Exception as e:  # an env that cannot even be built is bad input, whatever it raises
        return f"cannot create environment '{env_id}': {type(e).__name__}: {e}".splitlines()[0]
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            return f"environment '{env_id}' has a {type(env.action_space).__name__} action space; only Discrete is supported"
        if not isinstance(env.observation_space, gym.spaces.Box):
            return f"environment '{env_id}' has a {type(env.observation_space).__name__} observation space; only Box is supported"
    finally:
        env.close()
    return None


_registered = False


def register_extra_envs() -> None:
    """Register optional env families (Atari through ale-py) when their package is installed."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass


def derive_seeds(seed: int, *path: int, n: int = 1) -> list[int]:
    """``n`` independent 31-bit seeds for the stream named by (seed, *path), e.g. (seed, worker)."""
    ss = np.random.SeedSequence([seed, *path])
    return [int(s) for s in ss.generate_state(n, dtype=np.uint32) % (2**31 - 1)]


def _single_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    register_extra_envs()
    kwargs: dict[str, Any] = {}
    if cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gym.make(cfg.id, **kwargs)
    # Undiscounted returns and lengths of whole episodes, as the training charts report them.
    return gym.wrappers.RecordEpisodeStatistics(env)


def make_vector_env(cfg: EnvConfig) -> gym.vector.VectorEnv:
    """K environments stepped together, autoreset in the same step (see the module docstring)."""
    return gym.vector.SyncVectorEnv(
        [lambda: _single_env(cfg) for _ in range(cfg.num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )


def make_eval_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """One environment for evaluation: full episodes, raw rewards."""
    return _single_env(cfg, render_mode=render_mode)


def env_spaces(cfg: EnvConfig) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    env = _single_env(cfg)
    try:
        return env.observation_space, env.action_space  # type: ignore[return-value]
    finally:
        env.close()
