"""A3C without Ray, for sweeps of the algorithm: the Worker and ParameterServer classes in one process.

``workers`` Workers take turns against one ParameterServer. With ``algo.overlap_push`` each Worker
takes the reply to a push only after its next rollout, as on Ray, so that rollout still runs on
the older weights: with 2 Workers every gradient is 3 versions stale, as in a run of 2 Workers on
Ray. Everything is deterministic given the seed, and a run costs one CPU and no cluster. What it
does not have is Ray's timing: Workers never race, so staleness never varies.

``a3c-ray bench seeds N --in-process`` uses it; ``trace_every`` records, every that many env
steps, what the ParameterServer saw since the last record (entropy, value loss, gradient and step
norms, staleness, short episodes), the quantities to read at a collapse.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from a3c_ray.algo.stats import WindowStats
from a3c_ray.config import Config, PSConfig


@dataclass
class InProcessRun:
    steps: np.ndarray
    """Env step at which each training episode finished, in the order the server saw them."""
    seconds: np.ndarray
    """Seconds since the first gradient when each episode finished."""
    mean_100: np.ndarray
    """Mean return of the last (up to) 100 episodes after each episode."""
    env_steps: int
    train_seconds: float
    trace: list[dict[str, Any]] = field(default_factory=list)


def trace_row(ps: Any, s: WindowStats, max_grad_norm: float) -> dict[str, Any]:
    means = s.means
    episodes = s.episodes
    return {
        "env_steps": ps.env_steps,
        "mean_100": round(ps.coordinator.mean_return_100(), 1) if ps.coordinator.episodes else None,
        "entropy": round(means.get("entropy", math.nan), 3),
        "value_loss": round(means.get("value_loss", math.nan), 2),
        "grad_norm": round(s.grad_norm or 0.0, 2),
        "grad_norm_max": round(max_grad_norm, 1),
        "update_norm": round(s.update_norm or 0.0, 4),
        "staleness": round(s.staleness_mean or 0.0, 2),
        "episodes": len(episodes),
        "short_episodes": sum(1 for _, _, length in episodes if length < 100),
    }


def train(cfg: Config, workers: int, trace_every: int = 0, restart_every: int = 0) -> InProcessRun:
    """Train ``cfg`` to ``run.max_steps`` (or ``run.time_limit``) with ``workers`` Workers here.

    Every Worker starts as on Ray: the newest weights, then, once they have trained, its envs
    spread over an episode (``Worker.spread_envs``). With ``restart_every``, every that many env
    steps the Workers in turn are replaced by new ones (new envs, a fresh random stream, the newest weights), as a
    Worker killed and restarted on Ray is, and its reply in flight is lost."""
    import torch

    from a3c_ray.algo.parameter_server import ParameterServer, initial_params
    from a3c_ray.algo.worker import Worker
    from a3c_ray.envs.make import action_size, env_spaces, resolve_policy

    torch.set_num_threads(1)
    c = Config.from_dict(cfg.to_dict())
    c.run.target_return = None
    c.ps = PSConfig()  # one server in this process, nothing on a wire
    resolve_policy(c)
    obs_space, act_space = env_spaces(c.env)
    shape, n = tuple(int(x) for x in obs_space.shape), action_size(act_space)
    ps = ParameterServer(c, initial_params(c, shape, n))

    def start(i: int, stream: tuple[int, ...] = ()) -> Worker:
        w = Worker(c, i, shape, n, stream)
        weights, version, lineage = ps.get_weights()
        w.set_weights(weights.copy(), version, lineage)
        w.spread_envs()
        return w

    team = [start(i) for i in range(workers)]
    waiting: list[Any] = [None] * workers
    restarts, next_restart = 0, restart_every
    steps, seconds, means = [], [], []
    recent: list[float] = []
    trace: list[dict[str, Any]] = []
    next_trace, window_max = trace_every, 0.0
    t0 = time.perf_counter()
    while ps.coordinator.stop_reason is None:
        for i, w in enumerate(team):
            p = w.train_step()
            window_max = max(window_max, float(np.linalg.norm(p.grad)))
            if c.algo.overlap_push and waiting[i] is not None:
                w.handle_reply(waiting[i])
            # The server hands out a fresh array per version and set_weights copies it into the
            # Worker's model, so replies can be shared as they are.
            reply = ps.push(p)
            if c.algo.overlap_push:
                waiting[i] = reply
            else:
                w.handle_reply(reply)
            for r in p.episode_returns:
                recent.append(float(r))
                del recent[:-100]
                steps.append(ps.env_steps)
                seconds.append(time.perf_counter() - t0)
                means.append(sum(recent) / len(recent))
            if trace_every and ps.env_steps >= next_trace:
                trace.append(trace_row(ps, ps.drain_stats(), window_max))
                next_trace, window_max = next_trace + trace_every, 0.0
            if restart_every and ps.env_steps >= next_restart:
                j = restarts % workers
                restarts, next_restart = restarts + 1, next_restart + restart_every
                team[j].envs.close()
                team[j], waiting[j] = start(j, (ps.env_steps, restarts)), None
            if ps.coordinator.stop_reason is not None:
                break
    for w in team:
        w.envs.close()
    return InProcessRun(
        np.asarray(steps, dtype=float),
        np.asarray(seconds, dtype=float),
        np.asarray(means, dtype=float),
        ps.env_steps,
        time.perf_counter() - t0,
        trace,
    )


TRACE_HEADER = (
    "| env steps | mean 100 | entropy | value loss | gradient norm, mean / max | step norm "
    "| staleness | short episodes |\n|---|---|---|---|---|---|---|---|"
)


def format_trace(trace: list[dict[str, Any]]) -> str:
    rows = [TRACE_HEADER]
    for r in trace:
        mean = "-" if r["mean_100"] is None else f"{r['mean_100']:.1f}"
        rows.append(
            f"| {r['env_steps'] / 1e3:.0f}k | {mean} | {r['entropy']:.2f} | {r['value_loss']:.2f} "
            f"| {r['grad_norm']:.2f} / {r['grad_norm_max']:,.1f} | {r['update_norm']:.4f} "
            f"| {r['staleness']:.0f} | {r['short_episodes']} of {r['episodes']} |"
        )
    return "\n".join(rows)
