"""The Worker: n-step rollouts on K environments, and the actor-critic gradient of each.

One training step (Mnih et al. 2016, Algorithm S3, with K envs batched in one forward pass):
run ``t_max`` steps of every env with the current local weights, compute returns bootstrapped from
V(s_T) (and from V(final_obs) where an episode was truncated), take the gradient of the loss, push
it to the ParameterServer and take the newer weights it sends back, all in one round trip.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from a3c_ray.algo.losses import actor_critic_loss
from a3c_ray.algo.messages import GradientPush, PushReply, WorkerResult
from a3c_ray.algo.models import (
    State,
    build_model,
    compute_context,
    get_flat_grad,
    resolve_compute_dtype,
    sample_actions,
    set_flat_params,
)
from a3c_ray.algo.returns import gae
from a3c_ray.algo.seeding import Stream, derive_seeds
from a3c_ray.config import Config
from a3c_ray.envs.atari import emulator_seconds
from a3c_ray.envs.faults import count_failures
from a3c_ray.envs.make import action_bounds, clip_actions, make_vector_env

TIMING_KEYS = ("env", "emulator", "forward", "backward", "push", "wait", "pull")


class Rollout(NamedTuple):
    obs: np.ndarray
    """Observations s_0 .. s_{T-1}, [T, K, *obs_shape], in the env's dtype (uint8 for Atari)."""
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    values: np.ndarray
    """V(s_t) under the weights that acted, [T, K]."""
    final_values: np.ndarray
    """V(final_obs) where the transition truncated an episode, else 0, [T, K]."""
    last_values: np.ndarray
    """V(s_T), [K]."""
    resets: np.ndarray
    """True where s_t starts a new episode (recurrent state is zeroed before it), [T, K]."""
    initial_state: State
    episode_returns: list[float]
    episode_lengths: list[int]


DECORRELATE_UP_TO = 1_000
"""The longest time limit ``env.decorrelate_steps: null`` spreads a Worker's envs over."""


class Worker:
    def __init__(
        self,
        cfg: Config,
        index: int,
        obs_shape: tuple[int, ...],
        n_actions: int,
        stream: tuple[int, ...] = (),
    ):
        """Worker ``index`` of a run; ``stream`` names a fresh random stream for a restarted or resumed Worker."""
        self.cfg = cfg
        self.index = index
        k = cfg.env.num_envs
        seeds = derive_seeds(cfg.run.seed, Stream.WORKER, index, *stream, n=k + 1)
        self.generator = torch.Generator().manual_seed(seeds[-1])
        self.envs = make_vector_env(cfg.env)
        self.obs, _ = self.envs.reset(seed=seeds[:k])  # type: ignore[arg-type]  # one seed per env
        self.model = build_model(cfg.model, obs_shape, n_actions, action_bounds(self.envs))
        # The action Box's centre and half-width, for the loss's penalty on a mean outside it.
        self._action_bounds = (self.model.action_centre, self.model.log_half_width.exp())
        # ``auto`` resolved here, on the node this Worker runs on.
        self.compute_dtype = resolve_compute_dtype(cfg.algo.compute_dtype)
        self.version = -1
        self.lineage = ""
        self._env_failures_reported = 0
        self.state = self.model.initial_state(k)
        self.reset_next = np.zeros(k, dtype=bool)
        self.env_steps = 0
        self.pushes = 0
        # The id of each push (``GradientPush.seq``): this incarnation and a count of its own, as
        # a restarted Worker in the same slot counts from 0 again.
        self.sender = uuid.uuid4().hex[:12]
        self._seq = 0
        # Seconds in each part of a Worker's loop. ``emulator`` is the part of ``env`` spent inside
        # the Atari emulator (0 for other envs); ``push`` hands a gradient to the transport,
        # ``wait`` blocks for the reply, ``pull`` loads the weights it brought.
        self.timings = dict.fromkeys(TIMING_KEYS, 0.0)
        self._emulator_start = emulator_seconds()

    def set_weights(self, flat: np.ndarray, version: int, lineage: str = "") -> None:
        set_flat_params(self.model, flat)
        self.version = version
        self.lineage = lineage

    # -- start -------------------------------------------------------------------------------
    def decorrelation_steps(self) -> int:
        """``env.decorrelate_steps``, or where it is null the episode's time limit when that is
        at most ``DECORRELATE_UP_TO`` steps (CartPole's 500, Pendulum's 200), else 0."""
        n = self.cfg.env.decorrelate_steps
        if n is not None:
            return n
        subenvs: list[Any] = getattr(self.envs, "envs", [])
        spec = getattr(subenvs[0], "spec", None) if subenvs else None
        limit = self.cfg.env.max_episode_steps or getattr(spec, "max_episode_steps", None)
        return int(limit) if limit and limit <= DECORRELATE_UP_TO else 0

    def spread_envs(self) -> bool:
        """Spread the envs over an episode (``decorrelate``) when the weights have trained
        (version > 0: on resume, after a restart); True when it did. At a run's start an
        untrained policy's episodes differ in length, and the envs fall out of step by
        themselves."""
        return self.decorrelate(self.decorrelation_steps() if self.version > 0 else 0)

    @torch.no_grad()
    def decorrelate(self, steps: int) -> bool:
        """Spread the envs over an episode before training: play ``steps`` steps on the current
        weights, training on none and reporting no episode, and reset env i of K at step
        ``steps * (K - i) / K``, so that env i starts training i/K of ``steps`` into an episode.

        Envs reset together stay in step where every episode lasts the time limit (a solved
        CartPole): all K then send the same part of an episode at once, and a Worker started
        beside one that trained for long sent bursts of failed episodes (docs/reliability.md).
        True when it spread them (some steps, more than one env).
        """
        k = self.cfg.env.num_envs
        if steps <= 0 or k < 2:
            return False
        reset_at = steps - (np.arange(k) * steps) // k
        for s in range(steps + 1):
            mask = reset_at == s
            if mask.any():
                self.obs, _ = self.envs.reset(options={"reset_mask": mask})
                self.reset_next = self.reset_next | mask
            if s == steps:
                break
            logits, _, self.state = self._act(self.obs, self.state, self.reset_next)
            action = sample_actions(logits, self.generator, continuous=self.model.continuous)
            self.obs, _, term, trunc, _ = self.envs.step(clip_actions(self.envs, action.numpy()))
            self.reset_next = term | trunc
        return True

    # -- rollout -----------------------------------------------------------------------------
    def _act(
        self, obs: np.ndarray, state: State, reset: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        t0 = time.perf_counter()
        resets = torch.from_numpy(reset) if self.model.is_recurrent else None
        with compute_context(self.compute_dtype):
            logits, value, state = self.model(torch.as_tensor(obs), state, resets)
        self.timings["forward"] += time.perf_counter() - t0
        return logits.float(), value.float(), tuple(s.float() for s in state)

    @torch.no_grad()
    def rollout(self) -> Rollout:
        t_max, k = self.cfg.algo.t_max, self.cfg.env.num_envs
        obs_buf = np.empty((t_max, k, *self.obs.shape[1:]), dtype=self.obs.dtype)
        continuous = self.model.continuous
        actions = (
            np.empty((t_max, k, self.model.policy.out_features), dtype=np.float32)
            if continuous
            else np.empty((t_max, k), dtype=np.int64)
        )
        rewards = np.empty((t_max, k), dtype=np.float32)
        terminated = np.empty((t_max, k), dtype=bool)
        truncated = np.empty((t_max, k), dtype=bool)
        values = np.empty((t_max, k), dtype=np.float32)
        resets = np.empty((t_max, k), dtype=bool)
        final_values = np.zeros((t_max, k), dtype=np.float32)
        initial_state = tuple(s.clone() for s in self.state)
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        for t in range(t_max):
            obs_buf[t] = self.obs
            resets[t] = self.reset_next
            logits, value, self.state = self._act(self.obs, self.state, self.reset_next)
            action = sample_actions(logits, self.generator, continuous=continuous).numpy()
            t0 = time.perf_counter()
            self.obs, reward, term, trunc, info = self.envs.step(clip_actions(self.envs, action))
            self.timings["env"] += time.perf_counter() - t0
            actions[t], rewards[t], terminated[t], truncated[t], values[t] = (
                action,
                reward,
                term,
                trunc,
                value.numpy(),
            )
            self.reset_next = term | trunc
            if self.reset_next.any():
                final_values[t] = self._final_values(info, trunc)
                # Whole episodes only: an Atari life lost ends a training episode, not the game.
                final_info = info["final_info"]
                if "episode" in final_info:
                    done = final_info["_episode"]
                    ep_returns += [float(x) for x in final_info["episode"]["r"][done]]
                    ep_lengths += [int(x) for x in final_info["episode"]["l"][done]]
        _, last_values, _ = self._act(self.obs, self.state, self.reset_next)
        self.env_steps += t_max * k
        return Rollout(
            obs=obs_buf,
            actions=actions,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            values=values,
            final_values=final_values,
            last_values=last_values.numpy(),
            resets=resets,
            initial_state=initial_state,
            episode_returns=ep_returns,
            episode_lengths=ep_lengths,
        )

    def _final_values(self, info: dict[str, Any], truncated: np.ndarray) -> np.ndarray:
        """V(final_obs) for envs whose episode was truncated this step (bootstrap), else 0."""
        out = np.zeros(len(truncated), dtype=np.float32)
        idx = np.flatnonzero(truncated)
        if idx.size:
            final = np.stack([info["final_obs"][i] for i in idx])
            # The state after this step is the one that would have read final_obs next.
            state = tuple(s[idx] for s in self.state)
            _, v, _ = self._act(final, state, np.zeros(idx.size, dtype=bool))
            out[idx] = v.numpy()
        return out

    # -- gradient ----------------------------------------------------------------------------
    def compute_gradient(self, ro: Rollout) -> tuple[np.ndarray, dict[str, float]]:
        a = self.cfg.algo
        t0 = time.perf_counter()
        targets = gae(
            ro.rewards,
            ro.terminated,
            ro.truncated,
            ro.values,
            ro.final_values,
            ro.last_values,
            a.gamma,
            a.gae_lambda,
        )
        adv = targets.advantages.reshape(-1)
        if a.normalize_advantages and adv.size > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        with compute_context(self.compute_dtype):
            logits, values = self.model.forward_sequence(
                torch.from_numpy(ro.obs), ro.initial_state, torch.from_numpy(ro.resets)
            )
        # The loss in float32 whatever the passes computed in.
        out = actor_critic_loss(
            logits.float().reshape(-1, logits.shape[-1]),
            values.float().reshape(-1),
            torch.from_numpy(ro.actions.reshape(ro.rewards.size, *ro.actions.shape[2:])),
            torch.from_numpy(targets.returns.reshape(-1)),
            torch.from_numpy(adv),
            a.value_coef,
            a.entropy_coef,
            self.model.continuous,
            a.value_loss,
            a.bound_coef,
            self._action_bounds if a.bound_coef > 0 else None,
        )
        self.model.zero_grad(set_to_none=False)
        out.loss.backward()
        grad = get_flat_grad(self.model)
        self.timings["backward"] += time.perf_counter() - t0
        stats = {
            "policy_loss": float(out.policy_loss),
            "value_loss": float(out.value_loss),
            "entropy": float(out.entropy),
        }
        return grad, stats

    def train_step(self) -> GradientPush:
        ro = self.rollout()
        grad, stats = self.compute_gradient(ro)
        return GradientPush(
            grad=grad,
            version=self.version,
            env_steps=ro.rewards.size,
            worker=self.index,
            episode_returns=ro.episode_returns,
            episode_lengths=ro.episode_lengths,
            stats=stats,
            lineage=self.lineage,
            env_restarts=self._new_env_failures(),
            seq=self._next_seq(),
            sender=self.sender,
        )

    def _next_seq(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _new_env_failures(self) -> int:
        subenvs: list[Any] = getattr(self.envs, "envs", [])
        total = sum(count_failures(env) for env in subenvs)
        new, self._env_failures_reported = total - self._env_failures_reported, total
        return new

    def handle_reply(self, reply: PushReply) -> None:
        if reply.weights is not None:
            t0 = time.perf_counter()
            self.set_weights(np.asarray(reply.weights), reply.version, reply.lineage)
            self.timings["pull"] += time.perf_counter() - t0

    def run(self, push: Callable[[GradientPush], PushReply]) -> WorkerResult:
        """Train until the ParameterServer says stop; ``push`` makes the round trip."""
        start = time.perf_counter()
        while True:
            p = self.train_step()
            t0 = time.perf_counter()
            reply = push(p)
            self.timings["wait"] += time.perf_counter() - t0
            self.handle_reply(reply)
            self.pushes += 1
            if reply.stop:
                break
        return self._result(start)

    def run_overlapped(
        self, send: Callable[[GradientPush], Callable[[], PushReply]]
    ) -> WorkerResult:
        """Train until the ParameterServer says stop, each round trip hidden behind a rollout.

        ``send`` starts a push and returns the function that waits for its reply. That reply is
        taken after the next rollout, which so still runs on the weights from before the push:
        one more version of staleness per Worker, in exchange for a Worker that never idles
        while its gradient and the new weights travel.
        """
        start = time.perf_counter()
        waiting: Callable[[], PushReply] | None = None
        while True:
            p = self.train_step()
            if waiting is not None:
                t0 = time.perf_counter()
                reply = waiting()
                self.timings["wait"] += time.perf_counter() - t0
                self.handle_reply(reply)
                if reply.stop:
                    break
            t0 = time.perf_counter()
            waiting = send(p)
            self.timings["push"] += time.perf_counter() - t0
            self.pushes += 1
        return self._result(start)

    def _result(self, start: float) -> WorkerResult:
        return WorkerResult(
            worker=self.index,
            env_steps=self.env_steps,
            pushes=self.pushes,
            timings={
                **self.timings,
                "emulator": emulator_seconds() - self._emulator_start,
                "total": time.perf_counter() - start,
            },
        )
