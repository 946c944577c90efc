"""The Ray actors: thin shells that give the plain ParameterServer, Worker and Monitor classes a
place on the cluster, their restarts, their metrics and their handles to each other."""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from a3c_ray.algo.messages import CheckpointMeta, GradientPush, PushReply, WorkerResult
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.shards import ShardRouter, merge_states, shard_bounds, slice_state
from a3c_ray.algo.stats import WindowStats
from a3c_ray.algo.worker import Worker
from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import load_checkpoint, newest_good_state
from a3c_ray.rundir.monitor import Monitor
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.runtime.graphs import GRAPH_THREADS, GraphServer
from a3c_ray.runtime.metrics import EvalMetrics, ParameterServerMetrics
from a3c_ray.runtime.remote import NAMESPACE, RemoteProxy, actor_class, one_torch_thread, resolve

# Weights above this size are sent as one object-store ref per version, which every Worker on a
# node reads from shared memory, instead of being serialized into each reply.
WEIGHTS_BY_REF_BYTES = 1 << 20


def shard_name(run: str, shard: int) -> str:
    """The named actor of one shard; shard 0, the coordinator, is the run's ParameterServer."""
    return f"{run}/ParameterServer" if shard == 0 else f"{run}/ParameterServer-{shard}"


def _serialized(method: Callable[..., Any]) -> Callable[..., Any]:
    """One caller at a time: pushes arrive on compiled-graph threads beside the ordinary calls."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    call.serialized = True  # type: ignore[attr-defined]
    return call


def _as_stored(storage: RunStorage, state: dict[str, Any] | None) -> dict[str, Any] | None:
    """``state`` with its ``path`` where the run lives (its URI for a remote run), not this node's
    staging copy: what the run reports it restored from."""
    if state is not None:
        state["path"] = storage.where(f"{layout.CHECKPOINTS}/{Path(state['path']).name}")
    return state


def _shard_of(
    cfg: Config, meta: CheckpointMeta, shard: int, restore: dict[str, Any] | None
) -> tuple[np.ndarray, dict[str, Any] | None]:
    """Shard ``shard``'s slice of the initial weights (from the seed), and of ``restore``."""
    init = initial_params(cfg, meta.obs_shape, meta.n_actions)
    lo, hi = shard_bounds(init.size, cfg.ps.shards)[shard]
    if restore is not None and restore["params"].numel() == init.size:
        restore = slice_state(restore, lo, hi)  # (another size is refused by the check)
    return init[lo:hi], restore


class ParameterServerShell(ParameterServer):
    """The Ray actor of one shard (the whole ParameterServer when ``ps.shards`` is 1). Ray restarts
    it after a crash; it then resumes from the newest checkpoint, and the driver rolls the other
    shards back to the same one (``reload``).

    It builds its initial weights from the seed rather than taking them as an argument, so that a
    restart never depends on a large constructor argument kept in the object store.
    """

    def __init__(
        self, cfg: Config, meta: CheckpointMeta, run_dir: str, run: str, shard: int = 0
    ) -> None:
        one_torch_thread()
        self._lock = threading.RLock()
        self.run_dir = run_dir
        # The run directory may be a URI: restore from this node's copy of its checkpoints.
        storage = RunStorage(run_dir)
        restore = _as_stored(storage, newest_good_state(storage.download_checkpoints()))
        init, restore = _shard_of(cfg, meta, shard, restore)
        ParameterServer.__init__(self, cfg, init, meta, restore, shard)
        with warnings.catch_warnings():  # Ray's own deprecation notice from inside this property
            warnings.simplefilter("ignore", DeprecationWarning)
            if ray.get_runtime_context().was_current_actor_reconstructed:
                self.restarts += 1
        self._ref: tuple[tuple[int, str], Any] | None = None
        self.graph_holders: set[int] = set()  # Workers pushing by compiled graph
        # One exporter of the run's counters: the coordinator's.
        self.metrics = ParameterServerMetrics(run, self) if shard == 0 else None

    @_serialized
    def reload(self, checkpoint: str | None) -> str:
        """Roll back to the checkpoint file a restarted shard restored from (its name; None: the
        initial weights), so that every shard holds the weights of one moment. Returns the new
        lineage; the pushes of weights from before are dropped as after a restart."""
        restarts = self.restarts
        state = None
        if checkpoint is not None:
            storage = RunStorage(self.run_dir)
            local = storage.download_checkpoints()
            state = _as_stored(storage, load_checkpoint(local / checkpoint.rsplit("/", 1)[-1]))
        assert self.meta is not None
        self.reset(*_shard_of(self.cfg, self.meta, self.shard, state))
        self.restarts = max(self.restarts, restarts) + 1
        return self.lineage

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    @_serialized
    def claim_graph(self, worker: int) -> bool:
        """May Worker ``worker`` push by compiled graph? Not when ``ps.graph_workers`` do, nor
        when its slot is still taken by a killed incarnation, whose loop still polls here."""
        if worker in self.graph_holders or len(self.graph_holders) >= self.cfg.ps.graph_workers:
            return False
        self.graph_holders.add(worker)
        return True

    @_serialized
    def release_graph(self, worker: int) -> None:
        self.graph_holders.discard(worker)

    @_serialized
    def cpu_seconds(self) -> tuple[float, int]:
        """CPU seconds of this process so far (every thread, Ray's too), and the pushes taken."""
        return time.process_time(), self.gradients_applied + self.gradients_dropped()

    def restore_info(self) -> tuple[str, str | None]:
        """This shard's lineage, and the checkpoint it last restored from."""
        return self.lineage, self.restored_from

    @_serialized
    def push_inline(self, p: GradientPush) -> PushReply:
        """A push whose reply carries the weights themselves (a compiled graph's channel)."""
        reply = ParameterServer.push(self, p)
        if self.metrics is not None:
            self.metrics.maybe_export(self)
        return reply

    def push(self, p: GradientPush, stale: bool | None = None) -> PushReply:
        """A push by actor call; ``stale``: the coordinator's verdict (``ShardedServer.send``)."""
        if stale is not None:
            p = dataclasses.replace(p, stale=stale)
        reply = self.push_inline(p)
        if reply.weights is not None and reply.weights.nbytes > WEIGHTS_BY_REF_BYTES:
            # By lineage too: after a reload the same version may be other weights.
            if self._ref is None or self._ref[0] != (reply.version, reply.lineage):
                self._ref = ((reply.version, reply.lineage), ray.put(reply.weights))
            reply = reply._replace(weights=self._ref[1])
        return reply

    # The state the ordinary calls read or change, serialized with the pushes as well.
    get_weights = _serialized(ParameterServer.get_weights)
    progress = _serialized(ParameterServer.progress)
    counts = _serialized(ParameterServer.counts)
    drain_stats = _serialized(ParameterServer.drain_stats)
    state_dict = _serialized(ParameterServer.state_dict)
    set_workers = _serialized(ParameterServer.set_workers)
    retire = _serialized(ParameterServer.retire)
    request_stop = _serialized(ParameterServer.request_stop)
    keep_decisions = _serialized(ParameterServer.keep_decisions)
    evaluation_reached = _serialized(ParameterServer.evaluation_reached)
    note_worker_restarts = _serialized(ParameterServer.note_worker_restarts)

    def push_judging(self, p: GradientPush) -> tuple[bool, PushReply]:
        """The coordinator's push whose verdict on staleness the other shards wait for: called
        with two returns, so that they receive the verdict alone, not the weights."""
        reply = self.push(p)
        return reply.stale, reply


class ShardedServer:
    """The S shard actors seen as one ParameterServer, for a Worker or the Monitor: pushes split
    and replies merged by a ``ShardRouter``; checkpoints merged into one whole-model state."""

    def __init__(self, handles: list[Any], cfg: Config):
        self.handles = handles
        self.cfg = cfg
        self.router: ShardRouter | None = None

    def _router(self, n: int) -> ShardRouter:
        if self.router is None:
            self.router = ShardRouter(
                n, len(self.handles), self.cfg.ps.wire_dtype, self.cfg.algo.max_staleness
            )
        return self.router

    def pull(self) -> PushReply:
        """The newest weights of every shard, assembled."""
        got = ray.get([h.get_weights.remote() for h in self.handles])
        parts = [resolve(w) for w, _, _ in got]
        router = self._router(sum(int(p.size) for p in parts))
        replies = [
            PushReply(w, v, False, True, lin) for w, (_, v, lin) in zip(parts, got, strict=True)
        ]
        return router.merge(replies)

    def send(self, p: GradientPush) -> Callable[[], PushReply]:
        """Start the push to every shard; the returned function waits for the merged reply."""
        assert self.router is not None, "pull the weights before the first push"
        router = self.router
        parts = router.split(p)
        if router.coordinator_judges:
            # The other shards' calls take the coordinator's verdict as an argument: Ray starts
            # them once it is in, and the Worker waits no longer than for the slowest reply.
            verdict, first = self.handles[0].push_judging.options(num_returns=2).remote(parts[0])
            rest = zip(self.handles[1:], parts[1:], strict=True)
            refs = [first, *(h.push.remote(q, verdict) for h, q in rest)]
        else:
            refs = [h.push.remote(q) for h, q in zip(self.handles, parts, strict=True)]

        def wait() -> PushReply:
            replies: list[PushReply] = ray.get(refs)
            return router.merge([r._replace(weights=resolve(r.weights)) for r in replies])

        return wait

    def state_dict(self) -> dict[str, Any]:
        return merge_states(ray.get([h.state_dict.remote() for h in self.handles]))

    def evaluation_reached(self, mean: float, env_steps: int, train_seconds: float) -> bool:
        """The coordinator's: it keeps the run's stop."""
        return bool(
            ray.get(self.handles[0].evaluation_reached.remote(mean, env_steps, train_seconds))
        )

    def drain_stats(self) -> WindowStats:
        """The coordinator's window; the step size is of the whole weights, from every shard's."""
        stats: list[WindowStats] = ray.get([h.drain_stats.remote() for h in self.handles])
        parts = [s.update_norm for s in stats if s.update_norm is not None]
        whole = sum(u * u for u in parts) ** 0.5 if len(parts) == len(stats) else None
        return dataclasses.replace(stats[0], update_norm=whole)


def shard_handles(run: str, shards: int) -> list[Any]:
    """The named shard actors of a run, coordinator first."""
    return [ray.get_actor(shard_name(run, k), namespace=NAMESPACE) for k in range(shards)]


class WorkerShell(Worker):
    """The Ray actor of one Worker slot; the driver restarts a slot whose actor died."""

    def __init__(self, *args: Any, **kwargs: Any):
        one_torch_thread()
        Worker.__init__(self, *args, **kwargs)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def train(self, shards: list[Any]) -> WorkerResult:
        """Pull the newest weights from the ParameterServer's shard actors (coordinator first), then
        train until it says stop."""
        calls = ShardedServer(shards, self.cfg)
        server: ShardedServer | GraphServer = calls
        if self.cfg.ps.graph_workers > 0:
            nodes = ray.get([h.node_id.remote() for h in shards])
            server = GraphServer(
                calls, self.index, self.node_id(), nodes, self.cfg.algo.max_staleness
            )
        self.handle_reply(server.pull())
        if self.spread_envs():
            # The other Workers trained on meanwhile: the first rollout starts from the newest
            # weights, not from those of before the spread, whose gradient would be that stale.
            self.handle_reply(server.pull())

        def push(p: GradientPush) -> PushReply:
            return server.send(p)()

        try:
            if self.cfg.algo.overlap_push:
                result = self.run_overlapped(server.send)
            else:
                result = self.run(push)
        finally:
            if isinstance(server, GraphServer):
                server.close()
        by_graph = server.pushes_by_graph if isinstance(server, GraphServer) else 0
        return dataclasses.replace(result, node_id=self.node_id(), pushes_by_graph=by_graph)


class MonitorShell(Monitor):
    """The Ray actor. Ray restarts it after a crash; checkpoints are atomic, so none is lost."""

    def __init__(
        self, cfg: Config, run_dir: str, obs_shape: tuple[int, ...], n_actions: int, run: str
    ):
        one_torch_thread()
        # Found by name, so that a restarted Monitor needs no handle among its arguments.
        shards = shard_handles(run, cfg.ps.shards)
        server = RemoteProxy(shards[0]) if len(shards) == 1 else ShardedServer(shards, cfg)
        Monitor.__init__(self, cfg, run_dir, obs_shape, n_actions, server)
        self.metrics = EvalMetrics(run)

    def evaluate_and_checkpoint(self, evaluate: bool = True) -> None:
        Monitor.evaluate_and_checkpoint(self, evaluate)
        if self.last_eval_return is not None:
            self.metrics.record(self.last_eval_return)


def parameter_server_class() -> Any:
    # Each Worker's compiled graph runs its loop on a thread of this group.
    return actor_class(
        ParameterServerShell,
        "ParameterServer",
        concurrency_groups={"_ray_system": GRAPH_THREADS},
    )


def worker_class() -> Any:
    return actor_class(WorkerShell, "Worker")


def monitor_class() -> Any:
    return actor_class(MonitorShell, "Monitor")
