"""Atari throughput: training frames per second against the raw emulator, measured in one run.

Three figures, in emulator frames per second (one agent step is ``FRAME_SKIP`` = 4 frames):

- ``raw_ale_fps``: one ``gym.make(env_id, frameskip=1)`` env stepped with random actions, no
  preprocessing, no model, in this process, per CPU second: what one core can emulate.
- ``env_fps``: one training env (AtariPreprocessing, frame stack, life loss, clipping) stepped with
  random actions, per CPU second: the emulator plus preprocessing, still without a model.
- ``train_fps``: frames per second of a real training run with ``workers`` Workers on Ray
  (``session.train``), counted from the first gradient applied to the end of the run.

``ratio = train_fps / raw_ale_fps`` is how many cores of bare emulation the whole system is worth;
divided by the number of Workers, it is how much of a bare emulator each Worker's core delivers.

``costs`` measures, in one process and in CPU time (so that a busy machine skews it little), what
one agent step costs a Worker and what one push costs the ParameterServer; from them follow the
frames/s one Worker core can give and the most the one ParameterServer can take.

These are the pieces; ``measure.atari`` measures a config with them, on the one measure's
settings (``measure.Times``), as ``a3c-ray bench atari``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from a3c_ray.config import Config, EnvConfig, PSConfig
from a3c_ray.envs.atari import FRAME_SKIP
from a3c_ray.envs.make import make_env, register_extra_envs
from a3c_ray.rundir.summary import RunSummary


@dataclass
class AtariBench:
    env_id: str
    workers: int
    num_envs: int
    lstm: bool
    raw_ale_fps: float
    env_fps: float
    train_fps: float
    train_steps_per_second: float
    train_seconds: float
    env_steps: int
    gradient_updates: int
    costs: Costs | None = None

    @classmethod
    def of(
        cls,
        cfg: Config,
        raw: float,
        pre: float,
        summary: RunSummary,
        costs: Costs | None,
    ) -> AtariBench:
        """The figures of ``cfg``: its bare emulator's and preprocessed env's frames per CPU
        second, its training run's summary, and its in-process ``costs`` where measured."""
        secs = float(summary.get("train_seconds") or 0.0)
        steps = int(summary.get("env_steps") or 0)
        sps = steps / secs if secs > 0 else 0.0
        return cls(
            env_id=cfg.env.id,
            workers=cfg.run.workers or 1,
            num_envs=cfg.env.num_envs,
            lstm=cfg.model.lstm,
            raw_ale_fps=raw,
            env_fps=pre,
            train_fps=sps * FRAME_SKIP,
            train_steps_per_second=sps,
            train_seconds=secs,
            env_steps=steps,
            gradient_updates=int(summary.get("gradient_updates") or 0),
            costs=costs,
        )

    @property
    def ratio(self) -> float:
        """Training frames/s over one raw emulator's frames/s."""
        return self.train_fps / self.raw_ale_fps

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "ratio": self.ratio, "ratio_per_worker": self.ratio / self.workers}
        if self.costs is not None:
            out["costs"] = {
                **asdict(self.costs),
                "worker_fps": self.costs.worker_fps,
                "ps_bound_fps": self.costs.ps_bound_fps,
            }
        return out


def raw_ale_fps(env_id: str = "ALE/Pong-v5", frames: int = 20_000, seed: int = 0) -> float:
    """Emulator frames per CPU second of one bare env at frameskip 1, random actions."""
    register_extra_envs()
    env = gym.make(env_id, frameskip=1)
    try:
        return _random_steps_per_second(env, frames, seed)
    finally:
        env.close()


def env_fps(cfg: EnvConfig, steps: int = 5_000, seed: int = 0) -> float:
    """Emulator frames per CPU second of one preprocessed training env, random actions."""
    env = make_env(cfg, training=True)
    try:
        return _random_steps_per_second(env, steps, seed) * FRAME_SKIP
    finally:
        env.close()


def _random_steps_per_second(env: gym.Env[Any, Any], steps: int, seed: int) -> float:
    n = int(env.action_space.n)  # type: ignore[attr-defined]
    actions = np.random.default_rng(seed).integers(0, n, steps)
    env.reset(seed=seed)
    t0 = time.process_time()  # CPU time: one core's worth, however busy the machine is
    for a in actions:
        _, _, terminated, truncated, _ = env.step(int(a))
        if terminated or truncated:
            env.reset()
    return steps / (time.process_time() - t0)


@dataclass
class Costs:
    worker_ms_per_step: float
    """CPU milliseconds per agent step in a Worker: env, forward, backward (per env of K)."""
    ps_ms_per_push: float
    """CPU milliseconds per gradient applied by the ParameterServer (plain class, no Ray)."""
    steps_per_push: int
    """t_max x K agent steps per gradient."""

    @property
    def worker_fps(self) -> float:
        """Frames/s that one fully busy Worker core produces."""
        return FRAME_SKIP * 1000.0 / self.worker_ms_per_step

    @property
    def ps_bound_fps(self) -> float:
        """Frames/s past which the ParameterServer's core is the bottleneck."""
        return FRAME_SKIP * self.steps_per_push * 1000.0 / self.ps_ms_per_push


def costs(cfg: Config, seconds: float = 10.0) -> Costs:
    """One Worker and the ParameterServer in this process, measured in CPU time for ``seconds``."""
    import torch

    from a3c_ray.algo.models import build_model, get_flat_params
    from a3c_ray.algo.parameter_server import ParameterServer
    from a3c_ray.algo.worker import Worker
    from a3c_ray.envs.make import action_size, env_spaces

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        obs, act = env_spaces(cfg.env)
        model = build_model(cfg.model, tuple(obs.shape), action_size(act))
        ps = ParameterServer(
            dataclasses.replace(cfg, ps=PSConfig()),  # one server in this process, no wire
            get_flat_params(model),
        )
        w = Worker(cfg, 0, tuple(obs.shape), action_size(act))
        w.set_weights(ps.weights(), ps.version)
        worker_cpu = ps_cpu = 0.0
        steps = pushes = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end or pushes < 10:
            t0 = time.process_time()
            p = w.train_step()
            t1 = time.process_time()
            reply = ps.push(p)
            t2 = time.process_time()
            w.handle_reply(reply)
            worker_cpu += time.process_time() - t2 + t1 - t0
            ps_cpu += t2 - t1
            steps += p.env_steps
            pushes += 1
        w.envs.close()
    finally:
        torch.set_num_threads(threads)
    return Costs(1000.0 * worker_cpu / steps, 1000.0 * ps_cpu / pushes, steps // pushes)


def atari_config(cfg: Config, seconds: float, run_dir: Path) -> Config:
    """``cfg`` (the config under test) stopped by a time limit of ``seconds``, with no evaluation
    competing for CPU while it is measured."""
    out = copy.deepcopy(cfg)
    out.run.time_limit = seconds
    out.run.max_steps = 10**12
    out.run.target_return = None
    out.run.progress = False
    out.run.run_dir = str(run_dir)
    out.monitor.eval_every = 10 * seconds + 60
    out.monitor.eval_episodes = 1
    return out
