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


def run_episodes(
    policy: Policy, env: gym.Env, episodes: int, seed: int, greedy: bool = False
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
