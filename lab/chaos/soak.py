"""The chaos soak: a run trained for a fixed time on a local multi-node cluster while faults arrive
all the time, and what the run does about each of them.

``python -m lab chaos`` (``lab/chaos/command.py``) drives it. It starts a cluster of
``cluster/local.sh`` (a head for the ParameterServer and the Monitor, one-CPU worker nodes for the
Workers), submits ``a3c-ray train --resume auto`` as a Ray job through the Jobs SDK, attaches to
the cluster, and on a fixed schedule, counted from the run's first env steps:

- kills a random Worker every ``worker_every`` seconds (the driver replaces it), one that is
  training: not one lost before (killed, or on the lost node) that has not pushed since;
- kills the ParameterServer, or a random shard, every ``ps_every`` seconds (Ray restarts it from
  the newest checkpoint);
- kills the Monitor once, at ``monitor_at`` (Ray restarts it);
- loses a worker node that hosts a Worker at ``node_at`` (``local.sh remove-node``: SIGKILL to its
  raylet and everything on it) and adds it back ``node_down`` seconds later.

Meanwhile it polls the run's progress (env steps overall and per Worker slot, twice a second),
loads every checkpoint the ``latest`` pointer names as soon as it names it, and every
``sample_every`` seconds samples each actor's resident memory: which actors run, their processes
and restarts from Ray's state API (``list_actors``), each process's RSS from the per-actor process
stats the dashboard's agents gather on every node (what the dashboard's Actors page shows), and its
anonymous part from ``/proc`` (``lab.chaos.probe``).

"Training goes on" after a fault means: a killed Worker's slot pushes env steps again; a restarted
ParameterServer's env steps grow past those it restored; the restarted Monitor writes a
checkpoint; after a node loss, the run's env steps grow again (its lost Workers come back once the
node does, ``slots_back_after_return``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, cast

import ray

from a3c_ray.algo.messages import Progress
from a3c_ray.rundir import layout
from a3c_ray.runtime.actors import shard_name
from a3c_ray.runtime.jobs import (
    TERMINAL,
    job_status,
    make_client,
    quiet_ray_logs,
    submit,
)
from a3c_ray.runtime.live import live_runs
from a3c_ray.runtime.remote import NAMESPACE
from lab.chaos.checkpoints import CheckpointWatch
from lab.chaos.plan import ChaosPlan, Fault, SoakResult, lost_slots, went_on
from lab.chaos.probe import actor_memory, attach, worker_hosts
from lab.local_cluster import LocalCluster

log = logging.getLogger("a3c_ray")

POLL_SECONDS = 0.5
START_TIMEOUT = 600.0
"""Seconds for the job to start training (a loaded machine, a runtime env to build)."""
END_GRACE = 300.0
"""Seconds after the soak's time for the run to end by its time limit before the job is stopped."""


class Soak:
    """One soak on a started ``LocalCluster``: submit, attach, inject, watch, collect."""

    def __init__(
        self, cluster: LocalCluster, plan: ChaosPlan, run_dir: Path, workers: int, cfg: Any
    ):
        self.cluster = cluster
        self.plan = plan
        self.run_dir = run_dir
        self.workers = workers
        self.shards = int(cfg.ps.shards)
        self.push_steps = int(cfg.algo.t_max) * int(cfg.env.num_envs)
        self.rng = random.Random(plan.seed)
        self.faults: list[Fault] = []
        self.pending: list[Fault] = []
        self.watch = CheckpointWatch(run_dir, int(cfg.monitor.keep_checkpoints), self.now)
        self.progress_rows: list[dict[str, Any]] = []
        self.memory: list[dict[str, Any]] = []
        self.actor_restarts: dict[str, int] = {}
        self.last: Progress | None = None
        self.t0: float | None = None
        self._ref: Any = None
        self._next_round = 0.0
        self._stop = threading.Event()
        self.run_id = ""
        self.lost_node: int | None = None

    # -- the whole soak ------------------------------------------------------------------------
    def run(self, entrypoint: str, runtime_env: dict[str, Any]) -> SoakResult:
        client = make_client(self.cluster.dashboard)
        submitted = time.monotonic()
        with quiet_ray_logs():
            job = submit(client, entrypoint, runtime_env, None)
        attach(self.cluster.address)
        sampler = threading.Thread(target=self._sample_memory_until_stopped, daemon=True)
        try:
            self.run_id = self._find_run(client, job)
            self.ps = ray.get_actor(shard_name(self.run_id, 0), namespace=NAMESPACE)
            self._wait_for_training(client, job)
            started_after = time.monotonic() - submitted
            sampler.start()
            status = self._inject_and_watch(client, job)
        finally:
            self._stop.set()
            if sampler.is_alive():
                sampler.join(timeout=60)
            ray.shutdown()
        if self.lost_node is not None:  # the run ended while the node was away
            self.cluster.add_node(self.lost_node)
        return SoakResult(
            plan=self.plan,
            run_id=self.run_id,
            run_dir=str(self.run_dir),
            job_status=status,
            started_after=round(started_after, 1),
            faults=self.faults,
            checkpoints=self.watch.seen,
            files_left=self.watch.files_left(),
            progress=self.progress_rows,
            memory=self.memory,
            actor_restarts=self.actor_restarts,
            summary=self._summary(),
            job_logs_tail=_tail(client.get_job_logs(job)),
        )

    def _find_run(self, client: Any, job: str) -> str:
        """The id of the run the job started (its actors are named after its run directory)."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            runs = [
                r for r, roles in live_runs(self.run_dir.name).items() if "ParameterServer" in roles
            ]
            if runs:
                return runs[0]
            if job_status(client, job) in TERMINAL:
                raise RuntimeError(
                    f"the job ended before training: {_tail(client.get_job_logs(job))}"
                )
            time.sleep(1.0)
        raise RuntimeError(f"no run started within {START_TIMEOUT:g} s")

    def _wait_for_training(self, client: Any, job: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while self.t0 is None:
            if time.monotonic() > deadline or job_status(client, job) in TERMINAL:
                raise RuntimeError(f"the run never trained: {_tail(client.get_job_logs(job))}")
            p = self._poll()
            if p is not None and p.env_steps > 0:
                self.t0 = time.monotonic()
                self._record(p)
            else:
                time.sleep(POLL_SECONDS)

    def _inject_and_watch(self, client: Any, job: str) -> str:
        events = self.plan.schedule()
        next_status = 0.0
        while True:
            self._pace()
            now = self.now()
            while events and events[0][0] <= now:
                _, kind = events.pop(0)
                if not self._inject(kind):  # no Worker to kill yet: try again in a second
                    events = sorted([*events, (now + 1.0, kind)])
                    break
            p = self._poll()
            if p is not None:
                self._record(p)
                self._update_recoveries(p)
            self.watch.follow()
            if now >= next_status:
                status = job_status(client, job)
                if status in TERMINAL:
                    return status
                next_status = now + 2.0
            if now > self.plan.seconds + END_GRACE:
                log.warning("chaos: the run did not end by its time limit; stopping the job")
                client.stop_job(job)
                while (status := job_status(client, job)) not in TERMINAL:
                    time.sleep(1.0)
                return status

    def _pace(self) -> None:
        """One round of the loop every POLL_SECONDS at most: the run's ParameterServer answers
        a progress call in a millisecond, and must not be asked hundreds of times a second."""
        wait = self._next_round - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._next_round = time.monotonic() + POLL_SECONDS

    def now(self) -> float:
        assert self.t0 is not None
        return time.monotonic() - self.t0

    # -- progress --------------------------------------------------------------------------------
    def _poll(self) -> Progress | None:
        """The coordinator's progress, if it answers within a poll (one call in flight at most:
        a restarting ParameterServer answers later, or the call fails and a new one is sent)."""
        if self._ref is None:
            self._ref = self.ps.progress.remote()
        ready, _ = ray.wait([self._ref], timeout=POLL_SECONDS)
        if not ready:
            return None
        ref, self._ref = self._ref, None
        try:
            p: Progress = ray.get(ref)
        except ray.exceptions.RayError:
            time.sleep(POLL_SECONDS)
            return None
        return p

    def _record(self, p: Progress) -> None:
        self.last = p
        at = 0.0 if self.t0 is None else self.now()
        if self.progress_rows and at - self.progress_rows[-1]["at"] < 1.0:
            return
        self.progress_rows.append(
            {
                "at": round(at, 2),
                "env_steps": p.env_steps,
                "mean_return_100": p.mean_return_100 if p.episodes else None,
                "episodes": p.episodes,
                "ps_restarts": p.ps_restarts,
                "worker_restarts": p.worker_restarts,
                "dropped": {
                    "resync": p.dropped_resync,
                    "stale": p.dropped_stale,
                    "nonfinite": p.dropped_nonfinite,
                },
            }
        )

    # -- faults ----------------------------------------------------------------------------------
    def _inject(self, kind: str) -> bool:
        """Inject one fault of ``kind``; False when it must wait (every Worker is already lost)."""
        try:
            if kind == "worker":
                return self._kill_worker()
            elif kind == "ps":
                self._kill_ps()
            elif kind == "monitor":
                self._kill_monitor()
            elif kind == "node":
                self._lose_node()
            elif kind == "node-back":
                self._node_back()
        except (ray.exceptions.RayError, ValueError, RuntimeError) as e:
            log.warning("chaos: %s not injected: %s", kind, e)
        return True

    def _fault(self, kind: str, target: str, **detail: Any) -> Fault:
        f = Fault(kind, target, round(self.now(), 2), detail=detail)
        self.faults.append(f)
        self.pending.append(f)
        log.warning("chaos: %.0f s: %s %s", f.at, kind, target)
        return f

    def _slot_steps(self, slot: int) -> int:
        return 0 if self.last is None else int(self.last.worker_steps.get(slot, 0))

    def _kill_worker(self) -> bool:
        live = sorted(set(range(self.workers)) - lost_slots(self.pending))
        if not live:
            return False
        slot = self.rng.choice(live)
        handle = ray.get_actor(f"{self.run_id}/Worker-{slot}", namespace=NAMESPACE)
        assert self.last is not None
        # The slot's steps read now, not at the last poll (a Worker pushes many times in one),
        # and the dying Worker's push in flight may still land: its replacement's is the next.
        try:
            now = cast(Progress, ray.get(self.ps.progress.remote(), timeout=POLL_SECONDS))
            steps, restarts = int(now.worker_steps.get(slot, 0)), now.ps_restarts
        except ray.exceptions.RayError:
            steps, restarts = self._slot_steps(slot), self.last.ps_restarts
        ray.kill(handle, no_restart=False)
        self._fault(
            "worker",
            f"Worker-{slot}",
            slot=slot,
            baseline=steps + self.push_steps,
            ps_restarts=restarts,
        )
        return True

    def _kill_ps(self) -> None:
        shard = self.rng.randrange(self.shards)
        name = shard_name(self.run_id, shard).split("/", 1)[1]
        handle = ray.get_actor(shard_name(self.run_id, shard), namespace=NAMESPACE)
        assert self.last is not None
        self._fault(
            "ps",
            name,
            ps_restarts=self.last.ps_restarts,
            env_steps=self.last.env_steps,
            latest_checkpoint=self.watch.latest,
        )
        ray.kill(handle, no_restart=False)

    def _kill_monitor(self) -> None:
        handle = ray.get_actor(f"{self.run_id}/Monitor", namespace=NAMESPACE)
        self._fault("monitor", "Monitor", latest_checkpoint=self.watch.latest)
        ray.kill(handle, no_restart=False)

    def _lose_node(self) -> None:
        """Lose a worker node that hosts a Worker (the ParameterServer and Monitor are on the head)."""
        hosts = worker_hosts(self.run_id)
        if not hosts:
            raise RuntimeError("no Worker is placed on a worker node")
        index = self.rng.choice(sorted(hosts))
        slots = hosts[index]
        assert self.last is not None
        self._fault(
            "node",
            f"node {index}",
            slots=slots,
            baselines={s: self._slot_steps(s) + self.push_steps for s in slots},
            env_steps=self.last.env_steps,
            ps_restarts=self.last.ps_restarts,
        )
        self.cluster.remove_node(index)
        self.lost_node = index

    def _node_back(self) -> None:
        if self.lost_node is None:
            return
        index, self.lost_node = self.lost_node, None
        self.cluster.add_node(index)
        for f in self.faults:
            if f.kind == "node" and f.target == f"node {index}":
                f.detail["back_at"] = round(self.now(), 2)

    # -- recoveries ------------------------------------------------------------------------------
    def _update_recoveries(self, p: Progress) -> None:
        now = self.now()
        for f in list(self.pending):
            if went_on(f, p, now, self.watch.latest):
                # After a node loss: the run trained on at once; its Workers came back later.
                back = f.detail["trains_on_after"] if f.kind == "node" else round(now - f.at, 2)
                f.recovered_after = back
                self.pending.remove(f)

    def _summary(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((self.run_dir / layout.SUMMARY).read_text())
        except (OSError, ValueError):
            return {}
        return data

    # -- memory ----------------------------------------------------------------------------------
    def _sample_memory_until_stopped(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                rows, restarts = actor_memory(self.cluster, self.run_id)
            except Exception as e:  # a sample lost to a busy dashboard is not a failed soak
                log.warning("chaos: memory sample failed: %s", e)
            else:
                at = round(self.now(), 2)
                self.memory += [{"at": at, **r} for r in rows]
                for name, n in restarts.items():
                    self.actor_restarts[name] = max(n, self.actor_restarts.get(name, 0))
            self._stop.wait(max(0.0, self.plan.sample_every - (time.monotonic() - began)))


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def soak(
    plan: ChaosPlan,
    entrypoint: str,
    runtime_env: dict[str, Any],
    run_dir: Path,
    workers: int,
    cfg: Any,
) -> SoakResult:
    """Start a cluster of ``plan.worker_nodes`` one-CPU worker nodes, soak the run that
    ``entrypoint`` trains in ``run_dir`` (``workers`` Workers of ``cfg``), and stop the cluster."""
    cluster = LocalCluster(plan.worker_nodes)
    try:
        cluster.up()
        return Soak(cluster, plan, run_dir, workers, cfg).run(entrypoint, runtime_env)
    finally:
        with contextlib.suppress(Exception):
            cluster.close()
