"""The Ray actors: thin shells that give the plain ParameterServer, Worker and Monitor classes a
place on the cluster, their restarts, their metrics and their handles to each other."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import ray

from a3c_ray.algo.messages import CheckpointMeta, GradientPush, PushReply, WorkerResult
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.worker import Worker
from a3c_ray.config import Config
from a3c_ray.rundir.checkpoint import newest_good_state
from a3c_ray.rundir.monitor import Monitor
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.runtime.metrics import EvalMetrics, ParameterServerMetrics
from a3c_ray.runtime.remote import NAMESPACE, RemoteProxy, actor_class, one_torch_thread, resolve

# Weights above this size are sent as one object-store ref per version, which every Worker on a
# node reads from shared memory, instead of being serialized into each reply.
WEIGHTS_BY_REF_BYTES = 1 << 20


class ParameterServerShell(ParameterServer):
    """The Ray actor. Ray restarts it after a crash; it then resumes from the newest checkpoint.

    It builds its initial weights from the seed rather than taking them as an argument, so that a
    restart never depends on a large constructor argument kept in the object store.
    """

    def __init__(self, cfg: Config, meta: CheckpointMeta, run_dir: str, run: str):
        one_torch_thread()
        init = initial_params(cfg, meta.obs_shape, meta.n_actions)
        # The run directory may be a URI: restore from this node's copy of its checkpoints.
        restore = newest_good_state(RunStorage(run_dir).download_checkpoints())
        ParameterServer.__init__(self, cfg, init, meta, restore)
        with warnings.catch_warnings():  # Ray's own deprecation notice from inside this property
            warnings.simplefilter("ignore", DeprecationWarning)
            if ray.get_runtime_context().was_current_actor_reconstructed:
                self.restarts += 1
        self._ref: tuple[int, Any] | None = None
        self.metrics = ParameterServerMetrics(run, self)

    def push(self, p: GradientPush) -> PushReply:
        reply = ParameterServer.push(self, p)
        self.metrics.maybe_export(self)
        if reply.weights is not None and reply.weights.nbytes > WEIGHTS_BY_REF_BYTES:
            if self._ref is None or self._ref[0] != reply.version:
                self._ref = (reply.version, ray.put(reply.weights))
            reply = reply._replace(weights=self._ref[1])
        return reply


class WorkerShell(Worker):
    """The Ray actor of one Worker slot; the driver restarts a slot whose actor died."""

    def __init__(self, *args: Any, **kwargs: Any):
        one_torch_thread()
        Worker.__init__(self, *args, **kwargs)

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def train(self, ps: Any) -> WorkerResult:
        """Pull the newest weights from the ParameterServer actor ``ps``, then train until it says stop."""
        weights, version, lineage = ray.get(ps.get_weights.remote())
        self.set_weights(resolve(weights), version, lineage)

        def push(p: GradientPush) -> PushReply:
            return wait_for(ps.push.remote(p))

        def wait_for(ref: Any) -> PushReply:
            reply: PushReply = ray.get(ref)
            return reply._replace(weights=resolve(reply.weights))

        def send(p: GradientPush) -> Callable[[], PushReply]:
            ref = ps.push.remote(p)
            return lambda: wait_for(ref)

        result = self.run_overlapped(send) if self.cfg.algo.overlap_push else self.run(push)
        return dataclasses.replace(result, node_id=self.node_id())


class MonitorShell(Monitor):
    """The Ray actor. Ray restarts it after a crash; checkpoints are atomic, so none is lost."""

    def __init__(
        self, cfg: Config, run_dir: str, obs_shape: tuple[int, ...], n_actions: int, run: str
    ):
        one_torch_thread()
        # Found by name, so that a restarted Monitor needs no handle among its arguments.
        ps = ray.get_actor(f"{run}/ParameterServer", namespace=NAMESPACE)
        Monitor.__init__(self, cfg, run_dir, obs_shape, n_actions, RemoteProxy(ps))
        self.metrics = EvalMetrics(run)

    def evaluate_and_checkpoint(self) -> None:
        Monitor.evaluate_and_checkpoint(self)
        if self.last_eval_return is not None:
            self.metrics.record(self.last_eval_return)


def parameter_server_class() -> Any:
    return actor_class(ParameterServerShell, "ParameterServer")


def worker_class() -> Any:
    return actor_class(WorkerShell, "Worker")


def monitor_class() -> Any:
    return actor_class(MonitorShell, "Monitor")
