"""Training statistics gathered by the ParameterServer between two reads of the Monitor."""

from __future__ import annotations

import time
from typing import Any


class Window:
    """Sums over the pushes and updates between two drains."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.episodes: list[tuple[int, float, int]] = []
        self.pushes = 0
        self.updates = 0
        self.staleness_sum = 0
        self.staleness_max = 0
        self.grad_norm_sum = 0.0
        self.update_norm_sum = 0.0
        self.stat_sums: dict[str, float] = {}

    def add_push(self, stats: dict[str, float]) -> None:
        self.pushes += 1
        for k, v in stats.items():
            self.stat_sums[k] = self.stat_sums.get(k, 0.0) + float(v)

    def add_update(self, staleness: int, grad_norm: float, update_norm: float = 0.0) -> None:
        self.updates += 1
        self.update_norm_sum += update_norm
        self.staleness_sum += staleness
        self.staleness_max = max(self.staleness_max, staleness)
        self.grad_norm_sum += grad_norm

    def summary(self) -> dict[str, Any]:
        seconds = max(time.monotonic() - self.t0, 1e-9)
        pushes, updates = max(self.pushes, 1), max(self.updates, 1)
        return {
            "seconds": seconds,
            "episodes": self.episodes,
            "pushes": self.pushes,
            "updates": self.updates,
            "updates_per_second": self.updates / seconds,
            "staleness_mean": self.staleness_sum / updates if self.updates else None,
            "staleness_max": self.staleness_max if self.updates else None,
            "grad_norm": self.grad_norm_sum / updates if self.updates else None,
            "update_norm": self.update_norm_sum / updates if self.updates else None,
            "means": {k: v / pushes for k, v in self.stat_sums.items()},
        }
