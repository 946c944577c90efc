"""CartPole that refuses a bad constructor argument, as a user's env does: a search whose space
reaches such a value has a trial that fails while the others go on."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class Picky(CartPoleEnv):
    def __init__(self, tolerance: float = 1.0, **kwargs: Any):
        if tolerance <= 0:
            raise ValueError(f"tolerance must be > 0, got {tolerance}")
        super().__init__(**kwargs)
