"""Environments with spaces a3c-ray does not take, for the bad-input tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class _Still(gym.Env[np.ndarray, Any]):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(2, np.float32), 0.0, True, False, {}


class GridActions(_Still):
    action_space = gym.spaces.MultiDiscrete([3, 3])


class MatrixActions(_Still):
    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


class UnboundedActions(_Still):
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


class DictObservations(gym.Env[dict[str, Any], int]):
    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "goal": gym.spaces.Discrete(4)}
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, True, False, {}


class BoxActions(gym.Env[np.ndarray, np.ndarray]):
    """One action dimension within [low, high]; the reward is the action the env received, so a
    rollout's rewards show what the policy's samples became."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, low: float = -1.0, high: float = 1.0):
        self.action_space = gym.spaces.Box(low, high, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(2, np.float32), float(action[0]), False, False, {}
