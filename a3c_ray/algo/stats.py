"""Training statistics gathered by the ParameterServer between two reads of the Monitor, and the
one accounting of gradient staleness (``Staleness``), which the run's counters use too."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class WindowStats:
    """Training between two reads of the Monitor: what its charts plot."""

    seconds: float
    env_steps: int
    """The run's env steps at the read: the charts' x axis."""
    version: int
    episodes: list[tuple[int, float, int]] = field(default_factory=list)
    """(env steps at its end, return, length) of each episode that ended."""
    pushes: int = 0
    updates: int = 0
    updates_per_second: float = 0.0
    staleness_mean: float | None = None
    """None when no gradient was applied in the window; so are the next three."""
    staleness_max: int | None = None
    grad_norm: float | None = None
    update_norm: float | None = None
    lr: float | None = None
    """The optimizer's learning rate at the read."""
    means: dict[str, float] = field(default_factory=dict)
    """Mean of each loss term and timing the Workers reported."""


@dataclass
class Staleness:
    """How stale the applied gradients were: for each, the server's version when it applied it less
    the version of the weights it was computed from. Their sum and the largest; a mean over any
    count follows. The run's (``Coordinator``, kept in checkpoints) and each window's between two
    reads of the Monitor (``Window``) are both this."""

    sum: int = 0
    max: int = 0

    def add(self, staleness: int) -> None:
        """One gradient applied ``staleness`` versions after its weights."""
        self.sum += staleness
        self.max = max(self.max, staleness)

    def mean(self, updates: int) -> float | None:
        """The mean over ``updates`` gradients applied; None when there were none."""
        return self.sum / updates if updates else None


class Window:
    """Sums over the pushes and updates between two drains."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.episodes: list[tuple[int, float, int]] = []
        self.pushes = 0
        self.updates = 0
        self.staleness = Staleness()
        self.grad_norm_sum = 0.0
        self.update_norm_sum = 0.0
        self.update_norms = 0
        self.stat_sums: dict[str, float] = {}

    def add_push(self, stats: dict[str, float]) -> None:
        self.pushes += 1
        for k, v in stats.items():
            self.stat_sums[k] = self.stat_sums.get(k, 0.0) + float(v)

    def add_update(
        self, staleness: int, grad_norm: float, update_norm: float | None = None
    ) -> None:
        """One applied gradient; ``update_norm`` where that step's size was measured."""
        self.updates += 1
        if update_norm is not None:
            self.update_norm_sum += update_norm
            self.update_norms += 1
        self.staleness.add(staleness)
        self.grad_norm_sum += grad_norm

    def summary(self, env_steps: int, version: int, lr: float | None = None) -> WindowStats:
        seconds = max(time.monotonic() - self.t0, 1e-9)
        pushes, updates = max(self.pushes, 1), max(self.updates, 1)
        return WindowStats(
            seconds=seconds,
            env_steps=env_steps,
            version=version,
            episodes=self.episodes,
            pushes=self.pushes,
            updates=self.updates,
            updates_per_second=self.updates / seconds,
            staleness_mean=self.staleness.mean(self.updates),
            staleness_max=self.staleness.max if self.updates else None,
            grad_norm=self.grad_norm_sum / updates if self.updates else None,
            update_norm=self.update_norm_sum / self.update_norms if self.update_norms else None,
            lr=lr,
            means={k: v / pushes for k, v in self.stat_sums.items()},
        )
