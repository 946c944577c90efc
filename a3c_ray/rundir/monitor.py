"""The Monitor: training charts, periodic evaluation of the newest weights, and checkpoints.

The driver calls ``tick`` about every ``monitor.log_every`` seconds. Each tick drains the
ParameterServer's training statistics into TensorBoard; every ``monitor.eval_every`` seconds it
also evaluates the newest weights on the Monitor's own environment and saves a checkpoint of the
ParameterServer's full state (weights, optimizer statistics, counters).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import yaml

from a3c_ray import metric_names as M
from a3c_ray.algo.evaluation import run_episodes, summarize
from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.policy import Policy
from a3c_ray.algo.seeding import Stream, derive_seeds
from a3c_ray.algo.stats import WindowStats
from a3c_ray.config import Config
from a3c_ray.envs.make import make_eval_env
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, load_checkpoint
from a3c_ray.rundir.policy import policy_from_state
from a3c_ray.rundir.scalars import RecordingWriter
from a3c_ray.rundir.storage import RunStorage


class ParameterServerLike(Protocol):
    def drain_stats(self) -> WindowStats: ...
    def state_dict(self) -> dict[str, Any]: ...
    def evaluation_reached(self, mean: float, env_steps: int, train_seconds: float) -> bool: ...


class Monitor:
    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path,
        obs_shape: tuple[int, ...],
        n_actions: int,
        ps: ParameterServerLike,
    ):
        self.cfg = cfg
        # Staged apart from the node's readers of the run (see RunStorage), and a restarted
        # Monitor, here or on another node, starts from the run's checkpoints as they are.
        self.storage = RunStorage(run_dir, own_staging="monitor")
        self.storage.download_checkpoints()
        self.run_dir = self.storage.local
        self.ps = ps
        # Its scalars also go to the driver with each report (for MLflow or W&B).
        self.writer = RecordingWriter(str(self.run_dir / layout.TENSORBOARD), flush_secs=10)
        self.writer.add_text(
            "config", "```\n" + yaml.safe_dump(cfg.to_dict(), sort_keys=False) + "```"
        )
        self.ckpts = CheckpointManager(
            self.run_dir / layout.CHECKPOINTS,
            cfg.monitor.keep_checkpoints,
            on_write=self._mirror,
            on_delete=lambda p: self.storage.delete(self._rel(p)),
        )
        self.env = make_eval_env(cfg.env)
        # What the run's checkpoints say of it, for states that do not say it themselves.
        self.meta = CheckpointMeta.of(cfg, obs_shape, n_actions)
        self.policy: Policy | None = None
        self.last_eval_error: str | None = None
        self._probe_evaluation()
        # Evaluations so far: each takes the seeds of its number, so a resumed run, or a restarted
        # Monitor, goes on with new episodes instead of replaying the first ones.
        self.n_evals = self._evals_so_far()
        self.last_eval_time = time.monotonic()
        self.last_eval_return: float | None = None
        self.best_eval_return: float | None = self.ckpts.best_return
        self.last_checkpoint: str | None = None
        self.eval_failures = 0
        # A resumed run, or a restarted Monitor, does not re-evaluate what is already checkpointed.
        self.last_eval_steps: int | None = self.ckpts.latest_steps()
        self._last_steps: int | None = None
        self._last_time = time.monotonic()

    def _probe_evaluation(self) -> None:
        """Build the evaluation network, reset the evaluation env and pick an action for it.

        Everything an evaluation runs (the emulator, the network's kernels) is loaded when the run
        starts, not minutes later at its first evaluation, so the Monitor's memory is at its level
        from the start; and an env that cannot reset, or a network that cannot take its
        observations, is reported at once in ``last_eval_error`` (the driver logs it). Each
        evaluation reseeds the env and its action sampling itself, so this step leaves their
        results unchanged."""
        try:
            self.policy = Policy.build(self.meta)
            obs, _ = self.env.reset()
            self.policy.act(np.asarray(obs)[None], self.policy.initial_state(1), True)
        except Exception as e:  # as an evaluation's failure: reported, the run goes on
            self.last_eval_error = f"at start: {type(e).__name__}: {e}"

    def _evals_so_far(self) -> int:
        try:
            return int(load_checkpoint(self.ckpts.dir / layout.LATEST).get("evals", 0))
        except (CheckpointError, OSError):
            return 0

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.run_dir))

    def _mirror(self, path: Path) -> None:
        self.storage.upload(self._rel(path))

    def tick(self, force_eval: bool = False, evaluate: bool = True) -> dict[str, Any]:
        """Chart what happened since the last tick; evaluate and checkpoint when due (or forced).
        With ``evaluate`` false a forced checkpoint is saved without an evaluation first (an
        interrupted run's: it ends within seconds whatever an evaluation would take)."""
        self.log_training(self.ps.drain_stats())
        due = time.monotonic() - self.last_eval_time >= self.cfg.monitor.eval_every
        new_steps = (self._last_steps or 0) > (self.last_eval_steps or 0)
        if force_eval or (due and new_steps):
            self.evaluate_and_checkpoint(evaluate=evaluate or not force_eval)
        return self.report()

    def report(self) -> dict[str, Any]:
        return {
            "evals": self.n_evals,
            "last_eval_return": self.last_eval_return,
            "best_eval_return": self.best_eval_return,
            "checkpoint": self.last_checkpoint,
            "eval_failures": self.eval_failures,
            "last_eval_error": self.last_eval_error,
            "scalars": self.writer.drain(),
        }

    def log_training(self, s: WindowStats) -> None:
        w, step = self.writer, s.env_steps
        for at, ret, length in s.episodes:
            w.add_scalar(M.EPISODIC_RETURN, ret, at)
            w.add_scalar(M.EPISODIC_LENGTH, length, at)
        now = time.monotonic()
        if self._last_steps is not None and now > self._last_time:
            w.add_scalar(M.SPS, (step - self._last_steps) / (now - self._last_time), step)
        self._last_steps, self._last_time = step, now
        for key, tag in M.LOSS_TAGS.items():
            if key in s.means:
                w.add_scalar(tag, s.means[key], step)
        if s.updates:
            w.add_scalar(M.GRAD_NORM, s.grad_norm, step)
            w.add_scalar(M.STALENESS, s.staleness_mean, step)
            if s.update_norm is not None:
                w.add_scalar(M.UPDATE_NORM, s.update_norm, step)
        w.add_scalar(M.UPDATES_PER_SECOND, s.updates_per_second, step)
        if s.lr is not None:
            w.add_scalar(M.LEARNING_RATE, s.lr, step)

    def evaluate_and_checkpoint(self, evaluate: bool = True) -> None:
        """Evaluate the newest weights, then checkpoint them; a failed evaluation still checkpoints."""
        state = self.ps.state_dict()
        step = int(state["env_steps"])
        self.last_eval_steps = step
        self.last_eval_time = time.monotonic()
        mean = self._evaluate(state, step) if evaluate else None
        if mean is not None and (self.best_eval_return is None or mean >= self.best_eval_return):
            self.best_eval_return = mean
        # Where the run lives (its URI for a remote run), not this node's staging copy.
        self.last_checkpoint = self.storage.where(
            self._rel(self.ckpts.save({**state, "evals": self.n_evals}, eval_return=mean))
        )
        if mean is not None and self.cfg.run.target_from == "eval":
            # After the checkpoint: the weights that reached the target are saved when it stops.
            self.ps.evaluation_reached(mean, step, float(state["train_seconds"]))
        every = self.cfg.monitor.video_every
        if mean is not None and every and self.n_evals % every == 0:
            self.record_video(step)

    def _evaluate(self, state: dict[str, Any], step: int) -> float | None:
        # Built as any checkpoint's policy is; one network, new weights at each evaluation.
        self.policy = policy_from_state({**self.meta.to_state(), **state}, reuse=self.policy)
        seed = derive_seeds(self.cfg.run.seed, Stream.EVAL, self.n_evals)[0]
        try:
            episodes = run_episodes(
                self.policy,
                self.env,
                self.cfg.monitor.eval_episodes,
                seed,
                greedy=self.cfg.monitor.greedy,
            )
        except Exception as e:  # an env that cannot even be reset: count it, keep the checkpoint
            self.eval_failures += 1
            self.last_eval_error = f"{type(e).__name__}: {e}"
            return None
        mean, _, mean_len = summarize(episodes)
        self.writer.add_scalar(M.EVAL_RETURN, mean, step)
        self.writer.add_scalar(M.EVAL_LENGTH, mean_len, step)
        self.writer.flush()
        self.storage.upload_tree(layout.TENSORBOARD)
        self.n_evals += 1
        self.last_eval_return = mean
        return mean

    def record_video(self, step: int, max_frames: int = 300) -> None:
        """One greedy-or-sampled episode as a TensorBoard video (tensorboardX encodes it with moviepy)."""
        import torch

        env = gym.wrappers.RenderCollection(make_eval_env(self.cfg.env, render_mode="rgb_array"))
        try:
            seed = derive_seeds(self.cfg.run.seed, Stream.VIDEO, self.n_evals)[0]
            assert self.policy is not None  # a video follows an evaluation
            run_episodes(self.policy, env, 1, seed, greedy=self.cfg.monitor.greedy)
            frames = env.render()[:max_frames]
        finally:
            env.close()
        if frames:
            # [N=1, T, C, H, W], halved in each spatial dimension to keep event files small.
            video = np.stack(frames)[:, ::2, ::2].transpose(0, 3, 1, 2)[None]
            self.writer.add_video(
                M.EVAL_VIDEO, torch.from_numpy(np.ascontiguousarray(video)), step, fps=30
            )

    def close(self) -> None:
        self.writer.close()
        self.storage.upload_tree(layout.TENSORBOARD)
        self.env.close()
