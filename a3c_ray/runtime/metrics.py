"""The Ray metrics of a run's actors and driver; their names are in ``a3c_ray.metric_names``."""

from __future__ import annotations

import time
from typing import Any

from a3c_ray.metric_names import (
    DROP_REASONS,
    RAY_ENV_STEPS,
    RAY_ENV_STEPS_PER_SECOND,
    RAY_EPISODE_RETURN,
    RAY_EVAL_RETURN,
    RAY_GRADIENT_STALENESS,
    RAY_GRADIENTS_APPLIED,
    RAY_GRADIENTS_DROPPED,
    RAY_PARAM_VERSION,
    RAY_WORKER_RESTARTS,
)


def start_at_zero(counter: Any, tags: dict[str, str]) -> bool:
    """Export ``counter`` at 0 for ``tags`` before its first event, as Prometheus asks of counters
    whose label values are known (dashboards and alerts otherwise see "no data", and ``rate`` misses
    the first event). Ray's ``Counter.inc`` refuses 0, so the point is recorded through Ray's
    private ``_record``. A Ray that renamed or changed it costs only that first point (the counter
    appears at its first event): never the actor that exports it. True when it was recorded."""
    record = getattr(counter, "_record", None)
    if not callable(record):
        return False
    try:
        record(0.0, tags)
    except Exception:  # another signature, other checks: the same loss of one point
        return False
    return True


class ParameterServerMetrics:
    """The ParameterServer's Ray metrics, exported as deltas at most once per ``every`` seconds.

    Counting happens in plain Python on the hot path; only ``maybe_export`` talks to Ray.
    """

    def __init__(self, run: str, ps: Any, every: float = 1.0):
        from ray.util.metrics import Counter, Gauge

        self.run, self.every = run, every
        self.env_steps = Counter(RAY_ENV_STEPS, "Env steps taken, by worker.", ("run", "worker"))
        self.applied = Counter(RAY_GRADIENTS_APPLIED, "Gradients applied.", ("run",))
        self.dropped = Counter(
            RAY_GRADIENTS_DROPPED, "Gradients dropped, by reason.", ("run", "reason")
        )
        self.version = Gauge(RAY_PARAM_VERSION, "Version of the global weights.", ("run",))
        self.staleness = Gauge(
            RAY_GRADIENT_STALENESS,
            "Staleness of applied gradients since the last export (mean, max).",
            ("run", "stat"),
        )
        self.episode_return = Gauge(
            RAY_EPISODE_RETURN, "Mean return of the last 100 training episodes.", ("run",)
        )
        self.sps = Gauge(RAY_ENV_STEPS_PER_SECOND, "Env steps per second, all workers.", ("run",))
        # Counters count from this process's start: a restored server does not re-count its past.
        self._last: dict[Any, Any] = {
            "applied": ps.gradients_applied,
            "staleness_sum": ps.coordinator.staleness_sum,
            "env_steps": ps.env_steps,
            **{("steps", w): n for w, n in ps.coordinator.worker_steps.items()},
            ("dropped", "nonfinite"): ps.dropped_nonfinite,
            ("dropped", "stale"): ps.dropped_stale,
            ("dropped", "resync"): ps.dropped_resync,
        }
        self._last_time = time.monotonic()
        self._next = 0.0
        for reason in DROP_REASONS:
            start_at_zero(self.dropped, {"run": run, "reason": reason})
        start_at_zero(self.applied, {"run": run})
        for worker in range(ps.cfg.run.workers or 0):
            start_at_zero(self.env_steps, {"run": run, "worker": str(worker)})

    def maybe_export(self, ps: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every
        last, run, coordinator = self._last, {"run": self.run}, ps.coordinator
        for worker, steps in coordinator.worker_steps.items():
            delta = steps - last.get(("steps", worker), 0)
            if delta > 0:
                self.env_steps.inc(delta, {**run, "worker": str(worker)})
            last[("steps", worker)] = steps
        for reason, count in zip(
            DROP_REASONS, (ps.dropped_nonfinite, ps.dropped_stale, ps.dropped_resync), strict=True
        ):
            delta = count - last.get(("dropped", reason), 0)
            if delta > 0:
                self.dropped.inc(delta, {**run, "reason": reason})
            last[("dropped", reason)] = count
        applied = ps.gradients_applied - last["applied"]
        if applied > 0:
            self.applied.inc(applied, run)
            mean = (coordinator.staleness_sum - last.get("staleness_sum", 0)) / applied
            self.staleness.set(mean, {**run, "stat": "mean"})
        self.staleness.set(coordinator.staleness_max, {**run, "stat": "max"})
        last["applied"], last["staleness_sum"] = ps.gradients_applied, coordinator.staleness_sum
        self.version.set(ps.version, run)
        if coordinator.recent_returns:
            self.episode_return.set(coordinator.mean_return_100(), run)
        steps = ps.env_steps
        if now > self._last_time:
            self.sps.set((steps - last["env_steps"]) / (now - self._last_time), run)
        last["env_steps"], self._last_time = steps, now


class EvalMetrics:
    def __init__(self, run: str):
        from ray.util.metrics import Gauge

        self.run = run
        self.eval_return = Gauge(RAY_EVAL_RETURN, "Mean return of the latest evaluation.", ("run",))

    def record(self, mean_return: float) -> None:
        self.eval_return.set(mean_return, {"run": self.run})


class DriverMetrics:
    def __init__(self, run: str):
        from ray.util.metrics import Counter

        self.run = run
        self.restarts = Counter(
            RAY_WORKER_RESTARTS, "Workers restarted after a failure.", ("run", "worker")
        )
        self._slots: set[int] = set()

    def worker_slot(self, worker: int) -> None:
        """A Worker slot exists: its restart count is exported, at 0 until it first restarts."""
        if worker not in self._slots:
            self._slots.add(worker)
            start_at_zero(self.restarts, {"run": self.run, "worker": str(worker)})

    def worker_restarted(self, worker: int) -> None:
        self.restarts.inc(1, {"run": self.run, "worker": str(worker)})
