"""Pushes over Ray compiled graphs, for Workers on a shard's own node (``ps.graph_workers``).

Such a Worker compiles one small graph to the shard, ``InputNode -> shard.push_inline``, and drives
it itself: ``execute`` writes the push into a shared-memory channel that the shard's graph loop
reads, and the reply comes back through another. That skips Ray's per-call task submission,
scheduling and object store, most of what a push costs the shard as an actor call.

The price is on the shard: each graph's loop is a thread of its ``_ray_system`` concurrency group
(``GRAPH_THREADS``) that polls its channel, yielding the core, all the time, between pushes too. A
few such loops cost little beside the pushes they carry; dozens swamp the shard (docs/benchmarks.md).
So each shard grants at most ``ps.graph_workers`` graphs (``ParameterServerShell.claim_graph``);
the other Workers, and those on other nodes, push by actor calls.

Failures fall back to actor calls: when a graph cannot be compiled, does not answer, or breaks
(the shard died and Ray restarted it), the Worker tears its graphs down and sends the same push by
call, which Ray retries until the shard is back; it tries graphs again ``RECOMPILE_AFTER`` pushes
later, and keeps to calls after ``MAX_GRAPH_FAILURES`` failures. A shard that applied the push
before the graph failed answers the call as it answered the graph and applies nothing twice: the
push keeps its id (``GradientPush.seq``). With ``algo.max_staleness`` and several shards, pushes go
by call only: the shards past the coordinator take its verdict on staleness as an argument. A Worker gives its graphs back
when it stops. One that is killed leaves its loop polling on the shard until the shard restarts,
and its slot taken, so a shard never polls more than ``ps.graph_workers`` channels.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import ray

from a3c_ray.algo.messages import GradientPush, PushReply
from a3c_ray.algo.shards import ShardRouter, coordinator_judges
from a3c_ray.config import MAX_GRAPH_WORKERS
from a3c_ray.runtime.remote import resolve

GRAPH_THREADS = MAX_GRAPH_WORKERS
"""Threads of a shard's ``_ray_system`` group, each the loop of one graph."""
GET_TIMEOUT = 60.0
"""Seconds a Worker waits on a graph's reply before it treats the graph as broken."""
RECOMPILE_AFTER = 100
MAX_GRAPH_FAILURES = 3
log = logging.getLogger("a3c_ray")


def compile_push(shard: Any) -> Any:
    """A compiled graph that takes one push to ``shard`` and returns its reply."""
    from ray.dag import InputNode

    # Ray narrates every compile and teardown at INFO; a run's output keeps to warnings.
    logging.getLogger("ray.dag.compiled_dag_node").setLevel(logging.WARNING)
    with InputNode() as inp:
        dag = shard.push_inline.bind(inp)
    return dag.experimental_compile(_submit_timeout=GET_TIMEOUT)


def _teardown(graph: Any) -> None:
    with contextlib.suppress(Exception):  # a broken graph may fail to tear down too
        graph.teardown()


class ShardCalls(Protocol):
    """What a GraphServer uses of the shards reached by actor calls (``actors.ShardedServer``)."""

    handles: list[Any]
    """The shard actors, coordinator first."""
    router: ShardRouter | None
    """Splits pushes and merges replies; set by the first ``pull``."""

    def pull(self) -> PushReply: ...

    def send(self, p: GradientPush) -> Callable[[], PushReply]: ...


class GraphServer:
    """A Worker's side of the shards when some are reached by compiled graphs: the others, and
    every fallback, by the actor calls of ``calls``, whose router splits the pushes and merges
    the replies. ``max_staleness`` is the run's ``algo.max_staleness``."""

    def __init__(
        self,
        calls: ShardCalls,
        worker: int,
        node: str,
        shard_nodes: list[str],
        max_staleness: int | None,
    ):
        self.calls = calls
        self.handles = calls.handles
        self.worker = worker
        # Graphs only to shards on this Worker's node: shared memory, no network; none where the
        # other shards wait for the coordinator's verdict on staleness, which calls carry.
        judged = coordinator_judges(len(shard_nodes), max_staleness)
        self.local = [] if judged else [k for k, n in enumerate(shard_nodes) if n == node]
        self.graphs: dict[int, Any] = {}
        self.failures = 0
        self.calls_left = 0  # pushes to send by call before graphs are tried again
        self.pushes_by_graph = 0

    def pull(self) -> PushReply:
        return self.calls.pull()

    def _connect(self) -> None:
        """Claim a graph slot on each local shard and compile a graph to each that grants one."""
        for k in self.local:
            h = self.handles[k]
            try:
                if not ray.get(h.claim_graph.remote(self.worker)):
                    continue
                try:
                    self.graphs[k] = compile_push(h)
                except Exception:
                    h.release_graph.remote(self.worker)
                    raise
            except Exception as e:  # any failure leaves the calls, which always work
                self._broken(e)
                return

    def _broken(self, error: BaseException) -> None:
        self.close()
        self.failures += 1
        self.calls_left = RECOMPILE_AFTER
        how = (
            "keeps to actor calls"
            if self.failures >= MAX_GRAPH_FAILURES
            else f"actor calls for the next {RECOMPILE_AFTER} pushes"
        )
        log.warning("compiled graph to the ParameterServer failed (%s); %s", error, how)

    def send(self, p: GradientPush) -> Callable[[], PushReply]:
        """Start the push to every shard; the returned function waits for the merged reply."""
        if not self.graphs and self.local and self.failures < MAX_GRAPH_FAILURES:
            if self.calls_left > 0:
                self.calls_left -= 1
            else:
                self.calls_left = RECOMPILE_AFTER  # (when no shard grants a slot)
                self._connect()
        if not self.graphs:
            return self.calls.send(p)
        router = self.calls.router
        assert router is not None, "pull the weights before the first push"
        parts = router.split(p)
        graphs = self.graphs  # (a failure rebinds self.graphs; this push keeps its own)
        try:
            refs = [
                graphs[k].execute(q) if k in graphs else h.push.remote(q)
                for k, (h, q) in enumerate(zip(self.handles, parts, strict=True))
            ]
        except Exception as e:
            self._broken(e)
            return self.calls.send(p)
        self.pushes_by_graph += 1

        def wait() -> PushReply:
            try:
                replies: list[PushReply] = [
                    ray.get(r, timeout=GET_TIMEOUT) if k in graphs else ray.get(r)
                    for k, r in enumerate(refs)
                ]
            except Exception as e:
                self._broken(e)
                # The same push by calls, which Ray retries until the shard is back (a shard's
                # own error is so raised as a call raises it).
                return self.calls.send(p)()
            return router.merge([r._replace(weights=resolve(r.weights)) for r in replies])

        return wait

    def close(self) -> None:
        """Tear the graphs down and give their slots back."""
        graphs, self.graphs = self.graphs, {}
        for k, g in graphs.items():
            _teardown(g)
            with contextlib.suppress(Exception):  # a shard that died freed its slots anyway
                ray.get(self.handles[k].release_graph.remote(self.worker), timeout=GET_TIMEOUT)
