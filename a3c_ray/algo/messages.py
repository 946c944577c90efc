"""The messages between the Worker and the ParameterServer, typed once for both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np


@dataclass
class GradientPush:
    """What a Worker sends after each rollout."""

    grad: np.ndarray
    """Flat float32 gradient of the loss."""
    version: int
    """Version of the weights the gradient was computed from."""
    env_steps: int
    """Env steps taken in this rollout (t_max x K)."""
    worker: int = 0
    episode_returns: list[float] = field(default_factory=list)
    """Undiscounted returns of the episodes that finished during the rollout."""
    episode_lengths: list[int] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    """Loss terms and timings of the rollout, for the charts."""
    lineage: str = ""
    """Lineage of the ParameterServer the weights came from; a restored server starts a new one."""
    env_restarts: int = 0
    """Environments recreated after raising, during this rollout."""


class PushReply(NamedTuple):
    weights: Any
    """The newest flat weights (or an object ref to them) when the version moved past the Worker's; else None."""
    version: int
    stop: bool
    applied: bool
    lineage: str = ""
