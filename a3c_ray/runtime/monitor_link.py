"""The driver's side of the run's Monitor (``a3c_ray.runtime.driver``): a tick asked for every
``monitor.log_every`` seconds while the run trains, the newest report kept, and the final
evaluation and checkpoint at the run's end, waited for within bounds."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from a3c_ray.errors import one_line

log = logging.getLogger("a3c_ray")


class MonitorLink:
    """Ticks of one run's Monitor actor (``handle``, set once it is created) and its reports."""

    def __init__(self, log_every: float, call_timeout: float, final_timeout: float):
        self.handle: Any = None
        self.log_every = log_every
        self.call_timeout = call_timeout
        """Seconds to wait for the Monitor to start, close, or send a tick in flight."""
        self.final_timeout = final_timeout
        """Seconds for the final evaluation and checkpoint (a slow storage, a long Atari game)."""
        self.report: dict[str, Any] = {}
        """The newest report taken: its scalars, evaluations and checkpoint."""
        self.on_report: Callable[[dict[str, Any]], None] | None = None
        """Called with every report taken."""
        self._ref: Any = None
        self._last = 0.0

    def tick(self) -> None:
        """Take the last tick's report when it is in; ask for the next every ``log_every``."""
        if self._ref is not None and ray.wait([self._ref], timeout=0)[0]:
            with contextlib.suppress(ray.exceptions.RayError):  # a failed tick is retried next time
                self.take(ray.get(self._ref))
            self._ref = None
        if self._ref is None and time.monotonic() - self._last >= self.log_every:
            self._ref, self._last = self.handle.tick.remote(), time.monotonic()

    def take_last(self) -> None:
        """Take the report of a tick still in flight, waiting ``call_timeout`` at most."""
        if self._ref is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                self.take(ray.get(self._ref, timeout=self.call_timeout))
            self._ref = None

    def take(self, report: dict[str, Any]) -> None:
        """Keep the Monitor's report; say so, once, when its evaluations start failing anew."""
        error = report.get("last_eval_error")
        if error and error != self.report.get("last_eval_error"):
            log.warning("monitor: evaluation failed: %s", error)
        self.report = report
        if self.on_report is not None:
            self.on_report(report)

    def final_checkpoint(self, evaluate: bool, errors: list[str]) -> None:
        """The final tick (an evaluation with ``evaluate``) and its checkpoint, then the Monitor
        closed; what went wrong goes into ``errors``. A Monitor that has not started within
        ``call_timeout`` (never placed) gets no final checkpoint: it would hold the run's end
        for the checkpoint's whole timeout."""
        if self.handle is None:
            return
        ready, _ = ray.wait([self.handle.__ray_ready__.remote()], timeout=self.call_timeout)
        if not ready:
            errors.append(
                f"monitor: not started within {self.call_timeout:g} s (no resources for it?): "
                "no final checkpoint"
            )
            return
        try:
            tick = self.handle.tick.remote(force_eval=True, evaluate=evaluate)
            self.take(ray.get(tick, timeout=self.final_timeout))
            ray.get(self.handle.close.remote(), timeout=self.call_timeout)
        except ray.exceptions.RayError as e:
            errors.append(f"monitor: {one_line(e)}")
