"""A partially observed CartPole, registered as ``a3c_ray/MaskedCartPole-v1``: the memory task."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

MASKED_CARTPOLE_ID = "a3c_ray/MaskedCartPole-v1"


class MaskedCartPoleEnv(CartPoleEnv):
    """CartPole that shows only the cart position and the pole angle, not their velocities.

    A partially observed task: a policy that sees one observation cannot tell which way the pole is
    moving, so it needs memory (an LSTM state, or stacked frames) to balance well.
    """

    VISIBLE = (0, 2)  # x, theta; x_dot and theta_dot are hidden

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        full = self.observation_space
        assert isinstance(full, gym.spaces.Box)
        # Scaled by the failure thresholds, so that both inputs span [-1, 1] while the pole is up.
        self.scale = np.array([self.x_threshold, self.theta_threshold_radians], dtype=np.float32)
        idx = list(self.VISIBLE)
        low, high = full.low[idx] / self.scale, full.high[idx] / self.scale
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._mask(obs), reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return self._mask(obs), info

    def _mask(self, obs: np.ndarray) -> np.ndarray:
        return (obs[list(self.VISIBLE)] / self.scale).astype(np.float32)
