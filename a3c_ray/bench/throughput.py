"""The measurements behind ``a3c-ray bench``.

- ``raw_limit``: one process stepping K vector envs with the policy's batched forward pass and
  action sampling, no learning: the most env steps per second one core can give a Worker.
- the ParameterServer alone: ``a3c_ray.bench.ps_server``.
- ``train_throughput``: a3c-ray training as ``a3c-ray train`` runs it (the driver's ``Run``: the
  ParameterServer, the Monitor and N Workers), measured over a window after a warm-up.
"""

from __future__ import annotations

import copy
import math
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from a3c_ray.algo.messages import Progress, WorkerResult
from a3c_ray.algo.models import build_model, num_params, sample_actions
from a3c_ray.config import Config
from a3c_ray.envs.atari import FRAME_SKIP
from a3c_ray.envs.make import (
    action_bounds,
    action_size,
    clip_actions,
    env_spaces,
    is_atari,
    make_vector_env,
)
from a3c_ray.runtime.session import RunSession

WARMUP_SECONDS = 1.0
"""Training seconds left out of the window: actor start-up and the first pushes are not steady."""
SPLIT_KEYS = ("env", "forward", "backward", "push", "wait", "pull")
"""The parts of a Worker's loop that do not overlap (``Worker.timings``; emulator is part of env)."""


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
        model = build_model(
            cfg.model, obs_space.shape, action_size(act_space), action_bounds(act_space)
        )
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


def unbounded(cfg: Config) -> Config:
    """A copy of ``cfg`` that trains until the bench stops it: no target, time or step limit."""
    c = copy.deepcopy(cfg)
    c.run.target_return, c.run.time_limit, c.run.max_steps = None, None, 2**62
    return c


def train_throughput(cfg: Config, workers: int, seconds: float) -> dict[str, Any]:
    """Train for ``WARMUP_SECONDS + seconds`` with ``workers`` Workers; rates over the last ``seconds``."""
    c = unbounded(cfg)
    c.run.workers, c.run.time_limit, c.run.progress = workers, WARMUP_SECONDS + seconds, False
    samples: list[Progress] = []
    with tempfile.TemporaryDirectory(prefix="a3c-bench-") as tmp:
        c.run.run_dir = str(Path(tmp) / f"bench-{workers}w")
        session = RunSession.checked(c, on_progress=samples.append)
        session.prepare()
        try:
            run = session.start()
            run.watch(None)  # no progress bar: on_progress keeps every snapshot
            results = dict(run.results)
            summary, _ = session.end(interrupted=False, evaluate=False)  # no game to wait for
        finally:
            session.close()
        if summary.get("errors"):
            raise RuntimeError("; ".join(summary["errors"]))
    out = window_rates(samples, WARMUP_SECONDS)
    stop = next((p for p in samples if p.stop_reason), samples[-1])
    out["workers"] = workers
    out["staleness_max"] = stop.staleness_max
    out["per_worker"] = [worker_split(results[i], stop.train_seconds) for i in sorted(results)]
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
    total = float(t.get("total", 0.0)) or max(seconds, sum(t.get(k, 0.0) for k in SPLIT_KEYS), 1e-9)
    split = {k: t.get(k, 0.0) / total for k in SPLIT_KEYS}
    split["other"] = max(0.0, 1.0 - sum(split.values()))
    steps = max(result.env_steps, 1)
    us = {k: 1e6 * t.get(k, 0.0) / steps for k in SPLIT_KEYS}
    emulator = min(1e6 * t.get("emulator", 0.0) / steps, us["env"])
    return {
        "worker": result.worker,
        "env_steps_per_second": result.env_steps / total,
        "pushes_per_second": result.pushes / total,
        "busy_seconds_per_push": (total - t.get("wait", 0.0)) / max(result.pushes, 1),
        "split": split,
        # Microseconds of the Worker's wall time per agent step, the env's split in two.
        "us_per_step": {
            "emulator": emulator,
            "preprocessing": us["env"] - emulator,
            **{k: v for k, v in us.items() if k != "env"},
            "other": 1e6 * total * split["other"] / steps,
            "total": 1e6 * total / steps,
        },
    }


def network_costs(cfg: Config, repeats: int = 20) -> dict[str, float]:
    """Microseconds per sample of the network as a Worker runs it, one torch thread: the forward
    pass of a rollout step (batch K), and forward and backward of a whole rollout (batch T x K), in
    float32 and under bfloat16 autocast (which this CPU may or may not run fast)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        obs_space, act_space = env_spaces(cfg.env)
        model = build_model(cfg.model, obs_space.shape, action_size(act_space))
        k, t = cfg.env.num_envs, cfg.algo.t_max
        low, high = float(obs_space.low.min()), float(obs_space.high.max())
        batch = torch.rand(t * k, *obs_space.shape) * (min(high, 255.0) - max(low, -1.0))
        state = model.initial_state(k)

        def forward() -> None:
            with torch.no_grad():
                model(batch[:k], state)

        def forward_backward(dtype: torch.dtype | None) -> Any:
            def step() -> None:
                with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                    logits, values, _ = model(batch, model.initial_state(t * k))
                (logits.float().sum() + values.float().sum()).backward()

            return step

        def timed(fn: Any, n: int) -> float:
            fn()  # the first call allocates
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - t0) / n

        return {
            "forward_us_per_sample": 1e6 * timed(forward, repeats) / k,
            "forward_backward_us_per_sample": 1e6
            * timed(forward_backward(None), max(2, repeats // 4))
            / (t * k),
            "forward_backward_bfloat16_us_per_sample": 1e6
            * timed(forward_backward(torch.bfloat16), max(2, repeats // 4))
            / (t * k),
        }
    finally:
        torch.set_num_threads(threads)
