"""Environments with action spaces a3c-ray does not take, for the bad-input tests."""

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
