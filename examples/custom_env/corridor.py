"""A corridor of ``size`` cells: start at the left end, reach the right end.

Observations are the agent's position as a one-hot vector; actions are left and right. Reaching
the end pays 1, every step costs 0.01, and an episode is cut at ``4 * size`` steps. A policy that
always goes right earns ``1 - 0.01 * (size - 1)``; a random one rarely reaches the end of a long
corridor.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Corridor(gym.Env[np.ndarray, int]):
    metadata = {"render_modes": ["ansi"]}

    def __init__(self, size: int = 8, render_mode: str | None = None):
        if size < 2:
            raise ValueError(f"size must be >= 2, got {size}")
        self.size = size
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0
        self.steps = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.size, dtype=np.float32)
        obs[self.pos] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos, self.steps = 0, 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.pos = min(self.pos + 1, self.size - 1) if action == 1 else max(self.pos - 1, 0)
        self.steps += 1
        done = self.pos == self.size - 1
        reward = (1.0 if done else 0.0) - 0.01
        return self._obs(), reward, done, self.steps >= 4 * self.size, {}

    def render(self) -> str:
        return "".join("A" if i == self.pos else "." for i in range(self.size))


class ScaleReward(gym.RewardWrapper[np.ndarray, int]):
    """A wrapper of the example's own: rewards times 10 (``env.wrappers``)."""

    def reward(self, reward: Any) -> float:
        return 10.0 * float(reward)


def make_corridor(size: int = 8, **kwargs: Any) -> gym.Env[np.ndarray, int]:
    """A factory works as well as a class: ``--env corridor:make_corridor``."""
    return Corridor(size=size, **kwargs)


# gymnasium's own form, ``--env corridor:Corridor-v0``: importing this module registers the id.
if "Corridor-v0" not in gym.registry:
    gym.register("Corridor-v0", entry_point=Corridor)
