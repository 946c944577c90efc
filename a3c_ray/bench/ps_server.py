"""The ParameterServer alone, for ``a3c-ray bench``: ``ps_in_process`` (a plain object),
``ps_load`` (its shard actors under synthetic clients, by actor call or compiled graph, with any
number of pushes in flight) and ``ps_actor`` (one client's round trips, and the sustained rate)."""

from __future__ import annotations

import math
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from a3c_ray.algo import wire
from a3c_ray.algo.messages import CheckpointMeta, GradientPush
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.shards import ShardRouter
from a3c_ray.bench.throughput import model_size, unbounded
from a3c_ray.config import Config, PSConfig
from a3c_ray.envs.make import action_size, env_spaces
from a3c_ray.rundir import layout
from a3c_ray.runtime import actors, placement
from a3c_ray.runtime.graphs import GRAPH_THREADS, compile_push


def _pushes(cfg: Config, size: int, n: int = 8, seed: int = 0) -> list[GradientPush]:
    """Gradients of a real size and a plausible scale, as a Worker would push them."""
    rng = np.random.default_rng((cfg.run.seed, seed))
    steps = cfg.algo.t_max * cfg.env.num_envs
    stats = {"policy_loss": 0.1, "value_loss": 1.0, "entropy": 0.69}
    grads = [rng.normal(0, 0.01, size).astype(np.float32) for _ in range(n)]
    return [
        # version -1: the server's version always moved, so every reply carries the weights, as
        # it does for every push once two or more Workers train. The norm of the whole gradient,
        # as a Worker's router sends it, by which every shard clips.
        GradientPush(g, -1, steps, i, stats=dict(stats), norm=wire.norm(g, "float32"))
        for i, g in enumerate(grads)
    ]


def ps_in_process(cfg: Config, seconds: float) -> dict[str, float]:
    """Applications per second of a plain ParameterServer: check, clip, optimizer step, weights."""
    c = unbounded(cfg)
    c.ps = PSConfig()  # one whole server, nothing on a wire
    obs_space, act_space = env_spaces(c.env)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ps = ParameterServer(c, initial_params(c, obs_space.shape, action_size(act_space)))
        pushes = _pushes(c, ps.flat.numel())
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for p in pushes:
                ps.push(p)
            n += len(pushes)
        elapsed = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return {"applications_per_second": n / elapsed, "us_per_application": 1e6 * elapsed / n}


class _PushClient:
    """A synthetic Worker: pushes prepared gradients (no env, no backward) to the shards, keeping
    ``in_flight`` pushes outstanding, and takes each reply's weights as a Worker does."""

    def __init__(self, cfg: Config, size: int, seed: int, graph: bool):
        self.cfg = cfg
        self.router = ShardRouter(size, cfg.ps.shards, cfg.ps.wire_dtype)
        self.graph = graph
        # Split and put on the wire once: the client's own cost is not what is measured.
        self.pushes = [self.router.split(p) for p in _pushes(cfg, size, seed=seed)]

    def run(self, shards: list[Any], in_flight: int, seconds: float) -> dict[str, Any]:
        """Keep ``in_flight`` pushes outstanding for ``seconds``; by compiled graphs, each is on
        its own graphs (one per shard), as each Worker drives its own."""
        import ray

        lanes = [[compile_push(s) for s in shards] for _ in range(in_flight)] if self.graph else []

        def send(lane: int, i: int) -> tuple[int, float, list[Any]]:
            parts = self.pushes[i % len(self.pushes)][: len(shards)]  # (a shard alone: its part)
            if lanes:
                refs = [g.execute(q) for g, q in zip(lanes[lane], parts, strict=True)]
            else:
                refs = [s.push.remote(q) for s, q in zip(shards, parts, strict=True)]
            return lane, time.perf_counter(), refs

        def take(refs: list[Any]) -> None:
            for reply in ray.get(refs) if not lanes else [ray.get(r) for r in refs]:
                if isinstance(reply.weights, ray.ObjectRef):
                    ray.get(reply.weights)

        try:
            # Warm-up: the first push of each graph, or two calls, set up the connections.
            for lane in range(len(lanes)) if lanes else (0, 0):
                take(send(lane, lane)[2])
            latencies: list[float] = []
            queue = deque(send(lane, lane) for lane in range(in_flight))
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                lane, sent, refs = queue.popleft()
                take(refs)
                latencies.append(time.perf_counter() - sent)
                n += 1
                queue.append(send(lane, n))
            elapsed = time.perf_counter() - t0
            for _, _, refs in queue:
                take(refs)
        finally:
            for graphs in lanes:
                for g in graphs:
                    g.teardown()
        return {"pushes": n, "seconds": elapsed, "latencies": latencies}


def ps_load(
    cfg: Config,
    seconds: float,
    in_flights: list[int],
    clients: int = 2,
    alone: bool = False,
    graph: bool = False,
) -> list[dict[str, Any]]:
    """The ParameterServer alone, as ``cfg.ps`` shards it and puts it on the wire, under synthetic
    clients with each number of pushes in flight: applications/s and round-trip latencies.

    With ``alone``, only shard 0 runs, and the clients push it its slice alone: what one shard
    applies when each shard has a node to itself (on a cluster of S nodes, the S shards work in
    parallel and the ParameterServer applies as many pushes as its slowest shard).

    With ``graph``, every push goes by compiled graph, one lane of graphs per push in flight, up
    to the threads a shard keeps for them (larger counts are left out)."""
    import ray

    if graph:
        in_flights = [n for n in in_flights if n <= GRAPH_THREADS]
    c = unbounded(cfg)
    obs_space, act_space = env_spaces(c.env)
    meta = CheckpointMeta.of(c, obs_space.shape, action_size(act_space))
    size = model_size(c)
    out = []
    with tempfile.TemporaryDirectory(prefix="a3c-bench-ps-") as tmp:
        shards = [
            actors.parameter_server_class()
            .options(num_cpus=0, **placement.shard_placement(c, k))
            .remote(c, meta, str(Path(tmp) / layout.CHECKPOINTS), "bench", k)
            for k in range(1 if alone else c.ps.shards)
        ]
        client_cls: Any = ray.remote(num_cpus=0)(_PushClient)
        try:
            ray.get([s.counts.remote() for s in shards])  # every shard is up
            pool = [client_cls.remote(c, size, seed, graph) for seed in range(clients)]
            for in_flight in in_flights:
                used = pool[: min(clients, in_flight)]
                shares = [
                    in_flight // len(used) + (i < in_flight % len(used)) for i in range(len(used))
                ]
                before = ray.get(shards[0].cpu_seconds.remote())
                runs = ray.get(
                    [cl.run.remote(shards, k, seconds) for cl, k in zip(used, shares, strict=True)]
                )
                after = ray.get(shards[0].cpu_seconds.remote())
                cpu_us = 1e6 * (after[0] - before[0]) / max(after[1] - before[1], 1)
                lat = np.concatenate([r["latencies"] for r in runs]) * 1e3
                out.append(
                    {
                        "shards": c.ps.shards,
                        "alone": alone,
                        "wire_dtype": c.ps.wire_dtype,
                        "transport": "graph" if graph else "call",
                        "in_flight": in_flight,
                        "clients": len(used),
                        "applications_per_second": sum(r["pushes"] / r["seconds"] for r in runs),
                        "latency_ms_median": float(np.median(lat)) if lat.size else math.nan,
                        # CPU of shard 0's process (Ray's threads in it too) per push it took.
                        "ps_cpu_us_per_application": cpu_us,
                        "latency_ms_p90": float(np.percentile(lat, 90)) if lat.size else math.nan,
                    }
                )
        finally:
            for s in shards:
                ray.kill(s, no_restart=True)
    return out


def ps_actor(cfg: Config, seconds: float, in_flight: int) -> dict[str, float]:
    """The ParameterServer's actors: round trips of one client, and their rate with pushes in flight."""
    one, many = ps_load(cfg, seconds / 2, [1, in_flight])
    return {
        "round_trips_per_second": one["applications_per_second"],
        "applications_per_second": many["applications_per_second"],
        "latency_ms_median": one["latency_ms_median"],
        "in_flight": in_flight,
    }
