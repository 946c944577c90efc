"""The run's state that one ParameterServer shard keeps for all: counters, stop policy, scaling.

Every shard holds its slice of the weights, its optimizer statistics and its version
(``ParameterServer``). One of them, shard 0 or the only one, also coordinates the run: it alone
receives a push's episodes, so it alone counts them, decides when training stops, times the
training and carries what ``a3c-ray scale`` asked for. That state is this class, and the other
shards do not hold one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from a3c_ray.algo.messages import GradientPush, Progress, RunDecisions, ShardCounts
from a3c_ray.algo.stats import Staleness
from a3c_ray.config import RunConfig

STOP_TARGET, STOP_MAX_STEPS, STOP_TIME_LIMIT = "target", "max_steps", "time_limit"
STOP_INTERRUPTED, STOP_ERROR = "interrupted", "error"
STOP_CALLBACK = "callback"  # a callback of ``a3c_ray.train`` asked for it


class Coordinator:
    """Counters of the whole run, when it stops and why, and the Workers asked for."""

    def __init__(self, run: RunConfig) -> None:
        self.cfg = run
        self.env_restarts = 0
        self.worker_restarts = 0  # the driver's count, kept here to go into checkpoints
        self.worker_steps: dict[int, int] = {}
        self.episodes = 0
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.staleness = Staleness()
        self.train_seconds_before = 0.0  # carried over from a resumed run
        self.t_first: float | None = None
        self.t_stop: float | None = None  # when the stop was decided: training time ends there
        self.stop_reason: str | None = None
        self.steps_to_target: int | None = None
        self.seconds_to_target: float | None = None
        self.desired_workers: int | None = None
        self.retiring: set[int] = set()

    # -- what the pushes bring -----------------------------------------------------------------
    def record_push(self, p: GradientPush) -> None:
        """A push's env restarts and its Worker's env steps (applied or not)."""
        self.env_restarts += p.env_restarts
        self.worker_steps[p.worker] = self.worker_steps.get(p.worker, 0) + p.env_steps

    def record_episode(self, ret: float) -> None:
        self.recent_returns.append(float(ret))
        self.episodes += 1

    def record_update(self, staleness: int) -> None:
        """A gradient applied; the first starts the training clock."""
        if self.t_first is None:
            self.t_first = time.monotonic()
        self.staleness.add(staleness)

    # -- the stop policy -----------------------------------------------------------------------
    def check_stop(self, env_steps: int) -> None:
        """Stop at the target (with ``target_from: train``), the step budget or the time limit."""
        if self.stop_reason is not None:
            return
        if self.cfg.target_from == "train" and self.target_reached():
            self.steps_to_target = env_steps
            self.seconds_to_target = self.train_seconds()
            self.stop(STOP_TARGET)
        elif env_steps >= self.cfg.max_steps:
            self.stop(STOP_MAX_STEPS)
        elif self.cfg.time_limit is not None and self.train_seconds() >= self.cfg.time_limit:
            self.stop(STOP_TIME_LIMIT)

    def stop(self, reason: str) -> None:
        """Decide the stop (the first reason stands); training time ends here."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.t_stop = time.monotonic()

    def stops(self, worker: int) -> bool:
        """Whether Worker ``worker`` is to stop: the run stops, or its slot is retired."""
        return self.stop_reason is not None or worker in self.retiring

    def evaluation_reached(self, mean: float, env_steps: int, train_seconds: float) -> bool:
        """An evaluation of the weights of ``env_steps`` (``train_seconds`` of training) scored
        ``mean``: with ``run.target_from: eval``, the run stops when that reaches the target, and
        it reached it at those steps and seconds. True when it did."""
        target = self.cfg.target_return
        if self.cfg.target_from != "eval" or target is None or not mean >= target:
            return False
        if self.stop_reason is None:
            self.steps_to_target, self.seconds_to_target = env_steps, train_seconds
            self.stop(STOP_TARGET)
        return True

    # -- reads ---------------------------------------------------------------------------------
    def target_reached(self) -> bool:
        target = self.cfg.target_return
        return (
            target is not None
            and len(self.recent_returns) == self.recent_returns.maxlen
            and self.mean_return_100() >= target
        )

    @property
    def staleness_sum(self) -> int:
        return self.staleness.sum

    @property
    def staleness_max(self) -> int:
        return self.staleness.max

    def progress(
        self,
        shard: ShardCounts,
        gradients_dropped: int,
        ps_restarts: int,
        restored_from: str | None,
    ) -> Progress:
        """The run's counters at this moment, with those of the coordinating shard (``shard``:
        its version, env steps and gradients, which every shard counts alike)."""
        # The time limit is reached between pushes too: when every Worker is stuck or unplaced,
        # the driver's polling is what stops the run.
        self.check_stop(shard.env_steps)
        return Progress(
            **dataclasses.asdict(shard),
            gradients_dropped=gradients_dropped,
            env_restarts=self.env_restarts,
            ps_restarts=ps_restarts,
            restored_from=restored_from,
            worker_steps=dict(self.worker_steps),
            desired_workers=self.desired_workers,
            episodes=self.episodes,
            mean_return_100=self.mean_return_100(),
            staleness_mean=self.staleness.mean(max(shard.gradients_applied, 1)) or 0.0,
            staleness_max=self.staleness.max,
            train_seconds=self.train_seconds(),
            stop_reason=self.stop_reason,
            steps_to_target=self.steps_to_target,
            seconds_to_target=self.seconds_to_target,
            worker_restarts=self.worker_restarts,
        )

    def mean_return_100(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else math.nan

    def train_seconds(self) -> float:
        """Seconds of training: from the first gradient applied to now, or to the stop decision
        (Workers that take a while to stop after it add nothing), plus those of earlier sittings."""
        end = time.monotonic() if self.t_stop is None else self.t_stop
        now = 0.0 if self.t_first is None else max(0.0, end - self.t_first)
        return self.train_seconds_before + now

    # -- elastic scaling: `a3c-ray scale` asks, the driver acts ----------------------------------
    def set_workers(self, n: int) -> None:
        """Ask for ``n`` Workers; the driver adds or retires Workers to match."""
        if n < 1:
            raise ValueError(f"a run needs at least one Worker, not {n}")
        self.desired_workers = n

    def retire(self, worker: int) -> None:
        """Tell Worker ``worker`` to stop at its next push (its slot is not restarted)."""
        self.retiring.add(worker)

    def note_worker_restarts(self, total: int) -> None:
        """The run's Worker restarts so far, as the driver counts them (resumes included), to be
        kept in checkpoints. A count older than one already known changes nothing."""
        self.worker_restarts = max(self.worker_restarts, int(total))

    # -- decisions: kept across a reset within one sitting, never in checkpoints ---------------
    def decisions(self) -> RunDecisions:
        return RunDecisions(
            self.stop_reason,
            self.steps_to_target,
            self.seconds_to_target,
            self.desired_workers,
            frozenset(self.retiring),
        )

    def keep(self, d: RunDecisions) -> None:
        """Take the decisions of this run made before this coordinator was reset or restarted:
        a stop stands (the first reason, with where the target was reached), retired slots stay
        retired, and the Workers asked for stay asked for unless asked for anew since."""
        if d.stop_reason is not None and self.stop_reason is None:
            self.steps_to_target, self.seconds_to_target = d.steps_to_target, d.seconds_to_target
            self.stop(d.stop_reason)
        self.retiring |= d.retiring
        if self.desired_workers is None:
            self.desired_workers = d.desired_workers

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "recent_returns": torch.tensor(list(self.recent_returns), dtype=torch.float64),
            "train_seconds": self.train_seconds(),
            "env_restarts": self.env_restarts,
            "worker_restarts": self.worker_restarts,
            "staleness_sum": self.staleness.sum,
            "staleness_max": self.staleness.max,
            "worker_steps": dict(self.worker_steps),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes = int(state.get("episodes", 0))
        self.recent_returns.extend(float(x) for x in state.get("recent_returns", []))
        self.train_seconds_before = float(state.get("train_seconds", 0.0))
        self.env_restarts = int(state.get("env_restarts", 0))
        self.worker_restarts = int(state.get("worker_restarts", 0))
        self.staleness = Staleness(
            int(state.get("staleness_sum", 0)), int(state.get("staleness_max", 0))
        )
        self.worker_steps = {int(k): int(v) for k, v in state.get("worker_steps", {}).items()}


def lost_decisions(
    before: Progress | None, now: Progress, retiring: set[int]
) -> RunDecisions | None:
    """What a coordinator forgot between two reads of its progress (``before``, then ``now``):
    Ray restarted it, and it came back from a checkpoint, which holds counters, not decisions.
    A stop is never taken back, nor a number of Workers asked for unset, so either missing means
    forgotten; the retired slots (``retiring``, the driver's record) go with them. None when
    nothing was forgotten."""
    if before is None:
        return None
    stop_lost = before.stop_reason is not None and now.stop_reason is None
    scale_lost = before.desired_workers is not None and now.desired_workers is None
    if not (stop_lost or scale_lost):
        return None
    return RunDecisions(
        before.stop_reason,
        before.steps_to_target,
        before.seconds_to_target,
        before.desired_workers,
        frozenset(retiring),
    )
