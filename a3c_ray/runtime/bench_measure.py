"""The measurements behind ``a3c-ray bench``.

- ``raw_limit``: one process stepping K vector envs with the policy's batched forward pass and
  action sampling, no learning: the most env steps per second one core can give a Worker.
- ``ps_in_process`` and ``ps_actor``: gradient applications per second of the ParameterServer, as a
  plain object and as a Ray actor fed by one client (latency) or several pushes in flight (its
  sustained rate).
- ``train_throughput``: a3c-ray training as ``a3c-ray train`` runs it (the driver's ``Run``: the
  ParameterServer, the Monitor and N Workers), measured over a window after a warm-up.
"""

from __future__ import annotations

import copy
import math
import multiprocessing as mp
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from a3c_ray.algo.messages import CheckpointMeta, GradientPush, Progress, WorkerResult
from a3c_ray.algo.models import build_model, num_params, sample_actions
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.shards import ShardRouter
from a3c_ray.config import Config, PSConfig
from a3c_ray.envs.make import (
    FRAME_SKIP,
    action_size,
    clip_actions,
    env_spaces,
    is_atari,
    make_vector_env,
)
from a3c_ray.rundir import layout
from a3c_ray.runtime import actors, driver, placement

WARMUP_SECONDS = 1.0
"""Training seconds left out of the window: actor start-up and the first pushes are not steady."""
SPLIT_KEYS = ("env", "forward", "backward", "wait")


def frames_per_step(cfg: Config) -> int:
    """Emulator frames per agent step: 4 for Atari (frame skip), else 1."""
    return FRAME_SKIP if is_atari(cfg.env.id) else 1


def model_size(cfg: Config) -> int:
    obs_space, act_space = env_spaces(cfg.env)
    return num_params(build_model(cfg.model, obs_space.shape, action_size(act_space)))


def raw_limit(cfg: Config, seconds: float) -> dict[str, float]:
    """Env steps per second of one process (one torch thread): K envs, batched forward, sampling.

    Per second of wall time, as training is measured, and per second of CPU time, which a busy
    machine skews less.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    envs = make_vector_env(cfg.env)
    try:
        obs_space, act_space = env_spaces(cfg.env)
        model = build_model(cfg.model, obs_space.shape, action_size(act_space))
        generator = torch.Generator().manual_seed(cfg.run.seed)
        k = cfg.env.num_envs
        obs, _ = envs.reset(seed=cfg.run.seed)
        state = model.initial_state(k)
        times = {"forward": 0.0, "sample": 0.0, "env": 0.0}
        steps, t0, cpu0 = 0, time.perf_counter(), time.thread_time()
        with torch.no_grad():
            # A few steps first: torch's first calls allocate and are not representative.
            for warm in (True, False):
                while True:
                    a = time.perf_counter()
                    logits, _, state = model(torch.as_tensor(obs), state)
                    b = time.perf_counter()
                    sample = sample_actions(logits, generator, continuous=model.continuous)
                    action = clip_actions(envs, sample.numpy())
                    c = time.perf_counter()
                    obs, *_ = envs.step(action)
                    d = time.perf_counter()
                    if warm:
                        if d - t0 > min(0.2, seconds / 4):
                            t0, cpu0 = time.perf_counter(), time.thread_time()
                            break
                        continue
                    times["forward"] += b - a
                    times["sample"] += c - b
                    times["env"] += d - c
                    steps += 1
                    if d - t0 >= seconds:
                        break
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
    finally:
        envs.close()
        torch.set_num_threads(threads)
    return {
        "env_steps_per_second": steps * k / elapsed,
        "frames_per_second": steps * k * frames_per_step(cfg) / elapsed,
        # Per second of this thread's CPU time: what a core gives when nothing else wants it.
        "env_steps_per_cpu_second": steps * k / max(cpu, 1e-9),
        "seconds": elapsed,
        **{f"{name}_us_per_batch": 1e6 * t / max(steps, 1) for name, t in times.items()},
    }


def _raw_limit_in_child(cfg: dict[str, Any], seconds: float, start: Any, out: Any) -> None:
    c = Config.from_dict(cfg)
    start.wait()
    out.put(raw_limit(c, seconds))


def raw_limit_parallel(cfg: Config, seconds: float, processes: int) -> dict[str, Any]:
    """``processes`` raw-limit loops at once, one process each, started together.

    What N cores give N Workers when nothing else runs: the sum is the machine's limit for N
    Workers, and each process's rate against one loop alone shows whether the cores slow one
    another down (shared physical cores, memory bandwidth, a throttled VM).
    """
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(processes), ctx.Queue()
    children = [
        ctx.Process(
            target=_raw_limit_in_child, args=(cfg.to_dict(), seconds, start, out), daemon=True
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    try:
        # Each child first imports torch and gymnasium: allow for that beyond the window.
        rates = [out.get(timeout=4 * seconds + 120)["env_steps_per_second"] for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.terminate()
    return {
        "processes": processes,
        "env_steps_per_second": sum(rates),
        "per_process": rates,
    }


def _pushes(cfg: Config, size: int, n: int = 8, seed: int = 0) -> list[GradientPush]:
    """Gradients of a real size and a plausible scale, as a Worker would push them."""
    rng = np.random.default_rng((cfg.run.seed, seed))
    steps = cfg.algo.t_max * cfg.env.num_envs
    stats = {"policy_loss": 0.1, "value_loss": 1.0, "entropy": 0.69}
    return [
        # version -1: the server's version always moved, so every reply carries the weights, as
        # it does for every push once two or more Workers train.
        GradientPush(rng.normal(0, 0.01, size).astype(np.float32), -1, steps, i, stats=dict(stats))
        for i in range(n)
    ]


def _bench_config(cfg: Config) -> Config:
    c = copy.deepcopy(cfg)
    c.run.target_return, c.run.time_limit, c.run.max_steps = None, None, 2**62
    return c


def ps_in_process(cfg: Config, seconds: float) -> dict[str, float]:
    """Applications per second of a plain ParameterServer: check, clip, optimizer step, weights."""
    c = _bench_config(cfg)
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

        lanes = [self._graphs(shards) for _ in range(in_flight)] if self.graph else []

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

    def _graphs(self, shards: list[Any]) -> list[Any]:
        from a3c_ray.runtime.graphs import compile_push

        return [compile_push(s) for s in shards]


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

    from a3c_ray.runtime.graphs import GRAPH_THREADS

    if graph:
        in_flights = [n for n in in_flights if n <= GRAPH_THREADS]
    c = _bench_config(cfg)
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
            ray.get([s.progress.remote() for s in shards])
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


class _MeasuredRun(driver.Run):
    """The driver's Run, keeping each progress snapshot the watch loop reads."""

    def __init__(self, cfg: Config, run_dir: Path, workers: int):
        self.samples: list[Progress] = []
        super().__init__(cfg, run_dir, workers)

    def _refresh(self, bar: tqdm, p: Progress) -> None:
        self.samples.append(p)


def train_throughput(cfg: Config, workers: int, seconds: float) -> dict[str, Any]:
    """Train for ``WARMUP_SECONDS + seconds`` with ``workers`` Workers; rates over the last ``seconds``."""
    c = _bench_config(cfg)
    c.run.workers, c.run.time_limit, c.run.progress = workers, WARMUP_SECONDS + seconds, False
    with tempfile.TemporaryDirectory(prefix="a3c-bench-") as tmp:
        run = _MeasuredRun(c, Path(tmp) / f"bench-{workers}w", workers)
        try:
            run.watch(tqdm(disable=True))
        finally:
            run.shutdown()
        if run.errors:
            raise RuntimeError("; ".join(run.errors))
    out = window_rates(run.samples, WARMUP_SECONDS)
    stop = next((p for p in run.samples if p.stop_reason), run.samples[-1])
    out["workers"] = workers
    out["staleness_max"] = stop.staleness_max
    out["per_worker"] = [
        worker_split(run.results[i], stop.train_seconds) for i in sorted(run.results)
    ]
    return out


def window_rates(samples: list[Progress], warmup: float) -> dict[str, Any]:
    """Env steps/s, updates/s and mean staleness between the first snapshot after ``warmup`` seconds
    of training and the last one before the stop; the whole run when that window is empty."""
    live = [p for p in samples if p.gradients_applied > 0 and not p.stop_reason]
    inside = [p for p in live if p.train_seconds >= warmup]
    a, b = (inside[0], inside[-1]) if len(inside) >= 2 else (None, (live or samples)[-1])
    secs = b.train_seconds - (a.train_seconds if a else 0.0)
    steps = b.env_steps - (a.env_steps if a else 0)
    updates = b.gradients_applied - (a.gradients_applied if a else 0)
    stale_sum = b.staleness_mean * b.gradients_applied - (
        a.staleness_mean * a.gradients_applied if a else 0.0
    )
    return {
        "seconds": secs,
        "env_steps_per_second": steps / secs if secs > 0 else math.nan,
        "updates_per_second": updates / secs if secs > 0 else math.nan,
        "staleness_mean": stale_sum / updates if updates else math.nan,
    }


def worker_split(result: WorkerResult, seconds: float) -> dict[str, Any]:
    """A Worker's rates and the fractions of its time in env, forward, backward, wait and the rest.

    A Worker reports its timings; its wall time is its own ``total`` when it reports one, else the
    run's training seconds (it starts one rollout earlier and stops one push later: close enough).
    """
    t = result.timings
    total = float(t.get("total", 0.0)) or max(seconds, sum(t[k] for k in SPLIT_KEYS), 1e-9)
    split = {k: t[k] / total for k in SPLIT_KEYS}
    split["other"] = max(0.0, 1.0 - sum(split.values()))
    return {
        "worker": result.worker,
        "env_steps_per_second": result.env_steps / total,
        "pushes_per_second": result.pushes / total,
        "busy_seconds_per_push": (total - t["wait"]) / max(result.pushes, 1),
        "split": split,
    }
