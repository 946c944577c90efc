"""Policy evaluation on whole episodes, shared by the Monitor and ``a3c-ray eval``."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from a3c_ray.algo.policy import Policy
from a3c_ray.envs.make import clip_actions


class Episode(NamedTuple):
    total_reward: float
    length: int


class UniformPolicy:
    """The random agent: each action drawn uniformly from the action space (a Box's bounds),
    from the evaluation's generator, so a seed gives the same games. What a score is compared
    with: ``a3c-ray eval --random ENV``."""

    def __init__(self, action_space: gym.Space):
        if isinstance(action_space, gym.spaces.Discrete):
            self._n, self._low, self._high = int(action_space.n), None, None
        elif (
            isinstance(action_space, gym.spaces.Box)
            and np.isfinite(
                np.concatenate([action_space.low.ravel(), action_space.high.ravel()])
            ).all()
        ):
            self._n = 0
            self._low = torch.as_tensor(action_space.low, dtype=torch.float32)
            self._high = torch.as_tensor(action_space.high, dtype=torch.float32)
        else:
            raise ValueError(
                f"random actions need a Discrete or a bounded Box action space, not {action_space}"
            )

    @property
    def continuous(self) -> bool:
        return self._n == 0

    def initial_state(self, batch: int) -> None:
        return None

    def act(
        self, obs: np.ndarray, state: object, greedy: bool, generator: torch.Generator
    ) -> tuple[np.ndarray, None, None]:
        batch = len(obs)
        if self._low is None or self._high is None:
            return torch.randint(self._n, (batch,), generator=generator).numpy(), None, None
        u = torch.rand((batch, *self._low.shape), generator=generator)
        return (self._low + u * (self._high - self._low)).numpy(), None, None


def run_episodes(
    policy: Policy | UniformPolicy, env: gym.Env, episodes: int, seed: int, greedy: bool = False
) -> list[Episode]:
    """Play ``episodes`` full episodes; env and action sampling are seeded from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    obs, _ = env.reset(seed=seed)
    for i in range(episodes):
        if i:  # not after the last one: a recording wrapper would start an empty extra video
            obs, _ = env.reset()
        state = policy.initial_state(1)
        total, length, done = 0.0, 0, False
        while not done:
            # The recurrent state is carried through the episode, from zeros at its start.
            actions, _, state = policy.act(np.asarray(obs)[None], state, greedy, generator)
            action = clip_actions(env, actions[0]) if policy.continuous else int(actions[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            length += 1
            done = terminated or truncated
        out.append(Episode(total, length))
    return out


def summarize(episodes: list[Episode]) -> tuple[float, float, float]:
    """Mean and standard deviation of the total reward, and the mean length."""
    rewards = np.array([e.total_reward for e in episodes])
    return float(rewards.mean()), float(rewards.std()), float(np.mean([e.length for e in episodes]))
