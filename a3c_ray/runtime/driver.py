"""The actors of one run (``Run``): started, watched, and ended; ``a3c_ray.runtime.session``
owns the run's life around them (its directory, config, summary and signals).

It is the only place that waits on actor futures. The loop has the shape of Ray's parameter-server
example: a dict of in-flight refs and ``ray.wait`` over it, with a timeout so that the Monitor is
ticked, failed Workers are restarted and the progress bar is refreshed while Workers train.

Failures: a Worker that dies or raises is replaced after a backoff, or the run stops with an
error; ``a3c_ray.runtime.slots`` keeps each slot's record and its rules. The ParameterServer and
the Monitor are restarted by Ray itself (``max_restarts=-1``), and calls to them are retried; the
ParameterServer comes back from the newest good checkpoint and the Workers resync to it. With
``ps.shards`` > 1, a shard that comes back so has every other shard rolled back to the same
checkpoint, so the weights are again of one moment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import ray
from tqdm import tqdm

from a3c_ray.algo.coordinator import STOP_ERROR, STOP_INTERRUPTED, lost_decisions
from a3c_ray.algo.messages import CheckpointMeta, Progress, WorkerResult
from a3c_ray.config import Config
from a3c_ray.envs.make import action_size, env_spaces
from a3c_ray.envs.spaces import recorded_spaces
from a3c_ray.errors import one_line
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.rundir.summary import RunSummary, progress_part
from a3c_ray.runtime import actors
from a3c_ray.runtime.metrics import DriverMetrics
from a3c_ray.runtime.monitor_link import MonitorLink
from a3c_ray.runtime.placement import (
    actor_env,
    shard_placement,
    worker_placement,
)
from a3c_ray.runtime.ps_group import ParameterServerGroup
from a3c_ray.runtime.remote import NAMESPACE
from a3c_ray.runtime.slots import WorkerSlots

CALL_TIMEOUT = 30.0
"""Seconds a stopping driver waits for an answer from the ParameterServer or the Monitor."""
FINAL_CHECKPOINT_TIMEOUT = 600.0
"""Seconds for the final evaluation and checkpoint (a slow storage, a long Atari game)."""
log = logging.getLogger("a3c_ray")


class Run:
    """The actors of one run, and the loop that watches them.

    ``start`` creates the actors; whatever it created is what ``shutdown`` kills, also when it was
    interrupted half way. A run that decides to stop ends within ``run.stop_grace`` seconds
    (``watch`` and ``interrupt``): Workers that never started are killed at once, and those still
    busy at the end of the grace are killed too.
    """

    def __init__(
        self,
        cfg: Config,
        storage: RunStorage | str | os.PathLike[str],
        workers: int,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.cfg = cfg
        self.on_progress = on_progress
        """Called with every snapshot of the run's counters that ``watch`` reads."""
        if not isinstance(storage, RunStorage):
            storage = RunStorage(storage)
        self.storage = storage
        run_dir = storage.location
        self.run_dir = run_dir
        self.n_workers = workers
        self.run_id = f"{run_dir.rstrip('/').rsplit('/', 1)[-1]}-{uuid.uuid4().hex[:6]}"
        obs_space, act_space = env_spaces(cfg.env)
        self.obs_shape = tuple(int(x) for x in obs_space.shape)
        self.n_actions = action_size(act_space)
        self.shards: list[Any] = []
        self.ps: Any = None
        self.monitor = MonitorLink(cfg.monitor.log_every, CALL_TIMEOUT, FINAL_CHECKPOINT_TIMEOUT)
        """The run's Monitor: its handle (once created), its ticks and its newest report."""
        self.start_steps = 0
        self.start_train_seconds = 0.0
        self.restored_from: str | None = None
        self.metrics = DriverMetrics(self.run_id)
        self.worker_cls = actors.worker_class()
        self.workers: dict[int, Any] = {}
        self.pending: dict[Any, int] = {}
        # slot -> a call queued before the Worker's ``train``: done once the Worker is placed
        self.started: dict[int, Any] = {}
        run = cfg.run
        self.slots = WorkerSlots(
            workers, run.max_worker_restarts, run.healthy_after, run.restart_backoff
        )
        self.worker_restarts = 0
        self.restarts_before = 0  # of earlier sittings of a resumed run
        self.current_workers = workers
        self.results: dict[int, WorkerResult] = {}
        self.errors: list[str] = []
        self.failure_log: list[str] = []
        self.stopping_since: float | None = None
        self.stopping_seconds: float | None = None
        self.progress: Progress | None = None
        self.spaces = recorded_spaces(obs_space, act_space)

    def start(self) -> None:
        """Start the ParameterServer's shards and the Monitor, wait for the shards, start the Workers."""
        if self.ps is None:
            self.create_actors()
        self.ps_group.wait_ready()
        start = ray.get(self.ps.progress.remote())
        self.start_steps = start.env_steps
        self.start_train_seconds = start.train_seconds
        self.restored_from = start.restored_from
        self.restarts_before = start.worker_restarts
        self.progress = start
        for i in range(self.n_workers):
            self._start_worker(i)

    def create_actors(self) -> None:
        """Create the ParameterServer's shards and the Monitor without waiting for them: what a
        final checkpoint needs, whenever the run is interrupted after this."""
        cfg, run_dir = self.cfg, self.run_dir
        meta = CheckpointMeta.of(cfg, self.obs_shape, self.n_actions, self.spaces)
        restartable = {"max_restarts": -1, "max_task_retries": -1, "namespace": NAMESPACE}
        self.ps_group = ParameterServerGroup(cfg, meta, run_dir, self.run_id, restartable)
        self.shards = self.ps_group.handles
        self.ps = self.ps_group.coordinator  # the run's counters and its stop
        self.monitor.handle = (
            actors.monitor_class()
            .options(
                name=f"{self.run_id}/Monitor",
                num_cpus=cfg.run.monitor_cpus,
                **restartable,
                **shard_placement(cfg, 0),
                **actor_env(cfg),
            )
            .remote(cfg, run_dir, self.obs_shape, self.n_actions, self.run_id)
        )

    # -- workers -----------------------------------------------------------------------------
    def _start_worker(self, i: int) -> None:
        # A restarted or resumed Worker gets a fresh random stream, still derived from the seed.
        n = self.slots.started(i, time.monotonic())
        stream = (self.start_steps, n) if self.start_steps or n else ()
        w = self.worker_cls.options(
            name=f"{self.run_id}/Worker-{i}",
            namespace=NAMESPACE,
            num_cpus=self.cfg.run.worker_cpus,
            **worker_placement(),
            **actor_env(self.cfg),
        ).remote(self.cfg, i, self.obs_shape, self.n_actions, stream)
        self.workers[i] = w
        self.started[i] = w.node_id.remote()  # runs before train: done once the actor exists
        self.pending[w.train.remote(self.shards)] = i
        self.metrics.worker_slot(i)

    def _worker_failed(self, i: int, error: BaseException) -> None:
        """Lose the Worker's in-flight rollout, nothing else: replace it after a backoff, or give up."""
        with contextlib.suppress(Exception):
            ray.kill(self.workers[i])  # a Worker whose task raised is still alive and holds a CPU
        failure = self.slots.failed(i, time.monotonic())
        if failure is None:
            return  # it was being retired anyway
        reason = one_line(error)
        self.failure_log.append(f"worker {i} failure {failure.count}: {reason}")
        if failure.give_up:
            self.errors.append(
                f"worker {i} failed {failure.count} times (run.max_worker_restarts="
                f"{self.cfg.run.max_worker_restarts}); last error: {reason}"
            )
            ray.get(self.ps.request_stop.remote(STOP_ERROR))

    def total_worker_restarts(self) -> int:
        """Worker restarts since the run began, earlier sittings of a resumed run included."""
        return self.restarts_before + self.worker_restarts

    def active_slots(self) -> list[int]:
        """Slots with a Worker training or waiting to be restarted, and not being retired."""
        return self.slots.active(self.pending.values())

    def _scale_to(self, n: int) -> None:
        """Add Workers in new slots, or retire the newest ones, until ``n`` are active."""
        active = self.active_slots()
        for _ in range(len(active), n):
            self._start_worker(self.slots.new_slot())
        for slot in active[n:]:
            if self.slots.retire(slot):
                ray.get(self.ps.retire.remote(slot))
        self.n_workers = max(self.n_workers, n)
        self.current_workers = n

    def _restart_due_workers(self, stopping: bool) -> None:
        if stopping:
            self.slots.cancel_restarts()
            return
        for i in self.slots.due(time.monotonic()):
            self._start_worker(i)
            self.worker_restarts += 1
            self.metrics.worker_restarted(i)
            # Kept in the run's checkpoints, so that a resumed run goes on counting.
            self.ps.note_worker_restarts.remote(self.total_worker_restarts())

    # -- the loop ----------------------------------------------------------------------------
    def watch(self, bar: tqdm | None, until: float | None = None) -> bool:
        """Wait for the Workers to finish, ticking the Monitor and the progress bar (if any)
        meanwhile; once the run stops, wait for its Workers within ``run.stop_grace``.

        With ``until`` (a ``time.monotonic()`` deadline), return at it; True once every Worker is
        done (the run has ended), False when the deadline came first."""
        while self.pending or self.slots.waiting:
            if until is not None and time.monotonic() >= until:
                return False
            self._collect(0.25)
            self.monitor.tick()
            self.ps_group.resync()
            progress = self._read_progress()
            self.progress = progress
            self.slots.note_steps(progress.worker_steps)
            if self.on_progress is not None:
                self.on_progress(progress)
            stopping = progress.stop_reason is not None
            self._restart_due_workers(stopping)
            if stopping:
                self._end_stragglers()
            elif progress.desired_workers is not None:
                self._scale_to(progress.desired_workers)
            if bar is not None:
                self._refresh(bar, progress)
        self._stopped()
        self.monitor.take_last()
        return True

    def _read_progress(self) -> Progress:
        """The run's counters; a coordinator that Ray restarted came back from a checkpoint,
        which holds no decisions, and is first told the stop and the Workers it forgot."""
        progress: Progress = ray.get(self.ps.progress.remote())
        forgotten = lost_decisions(self.progress, progress, set(self.slots.retiring))
        if forgotten is not None:
            log.warning("ParameterServer restarted: told again the run's decisions %s", forgotten)
            ray.get(self.ps.keep_decisions.remote(forgotten))
            progress = ray.get(self.ps.progress.remote())
        return progress

    def _stopped(self) -> None:
        if self.stopping_since is not None and self.stopping_seconds is None:
            self.stopping_seconds = round(time.monotonic() - self.stopping_since, 3)

    def _collect(self, timeout: float) -> None:
        """Take the results of the Workers that finished within ``timeout`` seconds."""
        if not self.pending:
            return
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=timeout)
        for ref in ready:
            i = self.pending.pop(ref)
            try:
                self.results[i] = ray.get(ref)
            except ray.exceptions.RayError as e:
                self._worker_failed(i, e)
            else:
                if i in self.slots.retiring:  # scaled down: free its CPU now
                    ray.kill(self.workers[i], no_restart=True)

    def _end_stragglers(self) -> None:
        """Once stopping: kill the Workers that never started (no CPU for them: nothing to wait
        for), and after ``run.stop_grace`` seconds those that have not finished (stuck)."""
        now = time.monotonic()
        if self.stopping_since is None:
            self.stopping_since = now
            reason = self.progress.stop_reason if self.progress is not None else None
            log.info(
                "a3c-ray: stopping (%s): waiting up to %g s (run.stop_grace) for %d Workers",
                reason,
                self.cfg.run.stop_grace,
                len(self.pending),
            )
        overdue = now - self.stopping_since >= self.cfg.run.stop_grace
        for ref, i in list(self.pending.items()):
            never_started = not ray.wait([self.started[i]], timeout=0)[0]
            if never_started or overdue:
                del self.pending[ref]
                with contextlib.suppress(Exception):
                    ray.kill(self.workers[i], no_restart=True)
                why = (
                    "never started (no resources for it)"
                    if never_started
                    else f"did not stop within run.stop_grace={self.cfg.run.stop_grace:g} s"
                )
                self.failure_log.append(f"worker {i} {why}: killed")
                log.warning("worker %d %s: killed", i, why)

    def _refresh(self, bar: tqdm, p: Progress) -> None:
        bar.update(min(p.env_steps, bar.total) - bar.n)
        secs = p.train_seconds
        ev = self.monitor.report.get("last_eval_return")
        total = self.total_worker_restarts()
        restarts = f" | restarts {total}" if total else ""
        bar.set_postfix_str(
            f"SPS {p.env_steps / secs if secs > 0 else 0:,.0f} | ret100 {p.mean_return_100:.1f}"
            f" | eval {'-' if ev is None else f'{ev:.1f}'}"
            f" | stale {p.staleness_mean:.2f}/{p.staleness_max}{restarts}",
            refresh=False,
        )

    def request_stop(self, reason: str) -> None:
        """Stop the run for ``reason`` (``stopped_because``): ``watch`` then ends it as any stop."""
        ray.get(self.ps.request_stop.remote(reason), timeout=CALL_TIMEOUT)

    def interrupt(self) -> None:
        """Stop the Workers at their next push, and end them within ``run.stop_grace``."""
        self.slots.cancel_restarts()
        if self.progress is not None:  # (a ParameterServer that never started has no Workers)
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(self.ps.request_stop.remote(STOP_INTERRUPTED), timeout=CALL_TIMEOUT)
        while self.pending:
            self._collect(0.25)
            self._end_stragglers()
        self._stopped()

    def finish(self, started_at: float, evaluate: bool = True) -> RunSummary:
        """The final checkpoint, after a final evaluation with ``evaluate`` (an interrupted run
        skips it to end soon), then the summary. A run whose ParameterServer never started
        (not placed, still restoring) trained nothing since it was last saved: it ends at once,
        without waiting on actors that may never be placed."""
        p = self.progress
        if p is None:
            return RunSummary(
                env_id=self.cfg.env.id,
                run_dir=str(self.run_dir),
                run_id=self.run_id,
                stopped_because=STOP_INTERRUPTED,
                errors=self.errors,
            )
        self.monitor.final_checkpoint(evaluate, self.errors)
        try:
            if self.ps is not None:
                p = ray.get(self.ps.progress.remote(), timeout=CALL_TIMEOUT)
        except ray.exceptions.RayError as e:
            self.errors.append(f"parameter server: {one_line(e)}")
        nodes = sorted({r.node_id for r in self.results.values() if r.node_id is not None})
        report = self.monitor.report
        rest = RunSummary(
            env_id=self.cfg.env.id,
            workers=self.current_workers,
            workers_max=self.n_workers,
            wall_seconds=round(time.monotonic() - started_at, 3),
            stopping_seconds=self.stopping_seconds,
            env_steps_per_second=_rate(
                p.env_steps - self.start_steps, p.train_seconds - self.start_train_seconds
            ),
            target_return=self.cfg.run.target_return,
            best_eval_return=report.get("best_eval_return"),
            last_eval_return=report.get("last_eval_return"),
            checkpoint=report.get("checkpoint"),
            eval_failures=report.get("eval_failures", 0),
            worker_restarts=self.total_worker_restarts(),
            resumed_from=self.restored_from,
            worker_nodes=nodes,
            pushes=sum(r.pushes for r in self.results.values()),
            pushes_by_graph=sum(r.pushes_by_graph for r in self.results.values()),
            ps_nodes=self.ps_group.nodes() if self.shards else [],
            run_id=self.run_id,
            run_dir=str(self.run_dir),
            failures=self.failure_log[-20:],
            errors=self.errors,
        )
        return cast(RunSummary, {**progress_part(p), **rest})

    def shutdown(self) -> None:
        for actor in [*self.workers.values(), self.monitor.handle, *self.shards]:
            if actor is None:
                continue
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)


def _rate(steps: int, seconds: float) -> float | None:
    return steps / seconds if seconds else None
