"""A trained policy acting on batches of observations.

Everything that acts with a trained network goes through ``Policy.act``: ``a3c-ray eval``, the
Monitor's evaluations, ``a3c-ray serve``, ``a3c-ray export``'s reference outputs, and users' own
programs (``a3c_ray.load_policy``). It knows the env id, the spaces and the checkpoint it came
from, and hands recurrent state in and out as numpy arrays, so a caller needs no torch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import (
    CNN_LAYERS,
    ActorCritic,
    build_model,
    resolve_kind,
    sample_actions,
    set_flat_params,
)
from a3c_ray.envs.make import action_bounds
from a3c_ray.envs.spaces import describe_space, implied_spaces, space_from

RecurrentState = tuple[np.ndarray, ...]
"""An LSTM's (h, c), each [batch, lstm_size] float32."""


class Acted(NamedTuple):
    actions: np.ndarray
    """[B] int64 for Discrete actions; [B, A] float32 for a Gaussian, clipped to the Box."""
    values: np.ndarray
    """[B] float32: the critic's value of each observation."""
    state: RecurrentState | None
    """The new recurrent state, to pass to the next ``act``; None for a feed-forward policy."""


class Policy:
    """A network with its checkpoint's description: env id, spaces, env steps trained."""

    def __init__(
        self,
        model: ActorCritic,
        meta: CheckpointMeta,
        env_steps: int = 0,
        checkpoint: str | None = None,
    ):
        self.model = model
        self.meta = meta
        self.env_id = meta.env_id
        self.obs_shape = tuple(meta.obs_shape)
        self.env_steps = int(env_steps)
        """Env steps the policy was trained for (the checkpoint's step)."""
        self.checkpoint = checkpoint
        """Where it was loaded from: a file path or a URI; None when built in memory."""
        self.observation_space, self.action_space = spaces_of(meta)
        low = getattr(self.action_space, "low", None)
        high = getattr(self.action_space, "high", None)
        bounded = low is not None and high is not None and np.isfinite([low, high]).any()
        self._bounds = (low, high) if bounded else None

    @classmethod
    def build(cls, meta: CheckpointMeta) -> Policy:
        """A fresh (untrained) network of the architecture ``meta`` describes."""
        _, action_space = spaces_of(meta)
        bounds = action_bounds(action_space)
        if bounds is not None and not np.isfinite(bounds).all():
            bounds = None
        return cls(build_model(meta.model_config(), meta.obs_shape, meta.n_actions, bounds), meta)

    @property
    def is_recurrent(self) -> bool:
        return self.model.is_recurrent

    @property
    def continuous(self) -> bool:
        return self.model.continuous

    def set_weights(self, flat: np.ndarray | torch.Tensor, env_steps: int | None = None) -> None:
        """Load a flat float32 weight vector (a checkpoint's ``params``)."""
        set_flat_params(self.model, np.asarray(flat, dtype=np.float32))
        if env_steps is not None:
            self.env_steps = int(env_steps)

    def initial_state(self, batch: int) -> RecurrentState | None:
        """The zero state an episode starts from; None for a feed-forward policy."""
        if not self.is_recurrent:
            return None
        return tuple(s.numpy() for s in self.model.initial_state(batch))

    @torch.no_grad()
    def act(
        self,
        observations: Any,
        state: RecurrentState | None = None,
        greedy: bool | np.ndarray = False,
        generator: torch.Generator | None = None,
        reset: np.ndarray | None = None,
    ) -> Acted:
        """One step for a batch of observations [B, *obs_shape].

        ``state`` is the previous call's (None: an episode's start). Actions are sampled from
        the policy, as in training, the Monitor's evaluations, ``a3c-ray eval`` and ``serve``;
        ``greedy`` takes the most likely action (the Gaussian's mean) instead, and a [B] bool
        array chooses per row. ``generator`` seeds the sampling; ``reset`` [B] zeroes the state
        of rows that start an episode."""
        obs = np.asarray(observations)
        if obs.ndim != len(self.obs_shape) + 1 or obs.shape[1:] != self.obs_shape:
            raise ValueError(
                f"observations must be a batch of shape [B, {', '.join(map(str, self.obs_shape))}]"
                f", got {list(obs.shape)}"
            )
        batch = obs.shape[0]
        torch_state: tuple[torch.Tensor, ...] = ()
        if self.is_recurrent:
            given = self.initial_state(batch) if state is None else state
            torch_state = tuple(torch.as_tensor(s, dtype=torch.float32) for s in given or ())
            want = (batch, self.model.lstm.hidden_size)  # type: ignore[union-attr]
            if len(torch_state) != 2 or any(tuple(s.shape) != want for s in torch_state):
                raise ValueError(f"state must be (h, c), each of shape {list(want)}")
        resets = None if reset is None else torch.as_tensor(np.asarray(reset, dtype=bool))
        logits, values, new_state = self.model(torch.as_tensor(obs), torch_state, resets)
        actions = self._choose(logits, greedy, generator)
        out_state = tuple(s.numpy() for s in new_state) if self.is_recurrent else None
        return Acted(actions, values.numpy(), out_state)

    def _choose(
        self, logits: torch.Tensor, greedy: bool | np.ndarray, generator: torch.Generator | None
    ) -> np.ndarray:
        if isinstance(greedy, bool | np.bool_):
            chosen = sample_actions(logits, generator, bool(greedy), self.continuous)
        else:
            mask = torch.as_tensor(np.asarray(greedy, dtype=bool))
            best = sample_actions(logits, None, True, self.continuous)
            chosen = best
            if not bool(mask.all()):
                drawn = sample_actions(logits, generator, False, self.continuous)
                rows = mask.view(-1, *([1] * (best.dim() - 1)))
                chosen = torch.where(rows, best, drawn)
        if self.continuous:
            out = chosen.numpy().astype(np.float32, copy=False)
            if self._bounds is not None:
                out = np.clip(out, *self._bounds).astype(np.float32, copy=False)
            return out
        # Indices 0..n-1, as the Workers step their envs with during training.
        return chosen.numpy().astype(np.int64, copy=False)

    def describe(self) -> dict[str, Any]:
        """What a user (or ``/metadata``) needs to know to call it."""
        return {
            "env_id": self.env_id,
            "checkpoint": self.checkpoint,
            "env_steps": self.env_steps,
            "observation_space": describe_space(self.observation_space),
            "action_space": describe_space(self.action_space),
            "recurrent": self.is_recurrent,
            "lstm_size": self.model.lstm.hidden_size if self.model.lstm is not None else None,
            "policy": "gaussian" if self.continuous else "categorical",
        }


def spaces_of(meta: CheckpointMeta) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The spaces a checkpoint recorded, or those its shapes imply when it recorded none."""
    if "observation" in meta.spaces and "action" in meta.spaces:
        return space_from(meta.spaces["observation"]), space_from(meta.spaces["action"])
    kind = resolve_kind(str(meta.model.get("kind", "auto")), meta.obs_shape)
    continuous = meta.model.get("policy") == "gaussian"
    return implied_spaces(meta.obs_shape, meta.n_actions, kind in CNN_LAYERS, continuous)
