"""The messages between the Worker and the ParameterServer, typed once for both."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from a3c_ray.config import Config, EnvConfig, ModelConfig


@dataclass
class GradientPush:
    """What a Worker sends after each rollout."""

    grad: np.ndarray
    """Flat gradient of the loss: float32, or its slice as ``ps.wire_dtype`` carries it."""
    version: int
    """Version of the weights the gradient was computed from."""
    env_steps: int
    """Env steps taken in this rollout (t_max x K)."""
    worker: int = 0
    episode_returns: list[float] = field(default_factory=list)
    """Undiscounted returns of the episodes that finished during the rollout."""
    episode_lengths: list[int] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    """Loss terms and timings of the rollout, for the charts."""
    lineage: str = ""
    """Lineage of the ParameterServer the weights came from; a restored server starts a new one."""
    env_restarts: int = 0
    """Environments recreated after raising, during this rollout."""
    norm: float | None = None
    """L2 norm of the whole gradient as the wire carries it (every shard checks and clips by it);
    None: the server computes it, which only a whole ParameterServer, not a shard, may do."""
    seq: int = -1
    """The Worker's count of its pushes: with ``worker`` and ``sender``, the push's id, by which a
    shard applies a push sent again at most once; -1: no id, every copy is applied."""
    sender: str = ""
    """The Worker's incarnation: a restarted Worker in the same slot counts from 0 again."""
    stale: bool | None = None
    """The coordinator's verdict on staleness, which every other shard follows (``algo.max_staleness``
    with several shards); None: the shard judges by its own version."""


class PushReply(NamedTuple):
    weights: Any
    """The newest flat weights (or an object ref to them) when the version moved past the Worker's,
    as ``ps.wire_dtype`` carries them; else None."""
    version: int
    stop: bool
    applied: bool
    lineage: str = ""
    stale: bool = False
    """Dropped as too stale: the verdict the other shards follow."""


# The env settings a checkpoint records: what ``eval`` needs to rebuild the env it was trained on.
CHECKPOINT_ENV_FIELDS = (
    "max_episode_steps",
    "frame_stack",
    "screen_size",
    "max_pool",
    "fire_reset",
    "repeat_action_probability",
    "kwargs",
    "wrappers",
)


@dataclass(frozen=True)
class CheckpointMeta:
    """What every checkpoint says of its run besides the weights: the driver makes it, the
    ParameterServer writes it into each checkpoint and checks a restore against it, and ``eval``
    rebuilds the env and the network from it."""

    env_id: str
    obs_shape: tuple[int, ...]
    n_actions: int
    env: dict[str, Any] = field(default_factory=dict)
    """The ``env`` settings of CHECKPOINT_ENV_FIELDS."""
    model: dict[str, Any] = field(default_factory=dict)
    """The ``model`` section, field by field."""
    spaces: dict[str, Any] = field(default_factory=dict)
    """``observation`` and ``action``: the env's spaces as ``envs.spaces.describe_space`` gives
    them (empty in checkpoints written before they were recorded)."""

    @classmethod
    def of(
        cls,
        cfg: Config,
        obs_shape: tuple[int, ...],
        n_actions: int,
        spaces: dict[str, Any] | None = None,
    ) -> CheckpointMeta:
        return cls(
            env_id=cfg.env.id,
            obs_shape=tuple(int(x) for x in obs_shape),
            n_actions=int(n_actions),
            env={k: getattr(cfg.env, k) for k in CHECKPOINT_ENV_FIELDS},
            model=dataclasses.asdict(cfg.model),
            spaces=dict(spaces or {}),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CheckpointMeta:
        """The meta of a loaded checkpoint (older ones may lack ``env``). A Gaussian policy saved
        before ``model.scale_actions`` existed acted in the env's own units, and goes on doing so."""
        model = dict(state.get("model") or {})
        if model.get("policy") == "gaussian":
            model.setdefault("scale_actions", False)
        return cls(
            env_id=str(state["env_id"]),
            obs_shape=tuple(int(x) for x in state["obs_shape"]),
            n_actions=int(state["n_actions"]),
            env=dict(state.get("env") or {}),
            model=model,
            spaces=dict(state.get("spaces") or {}),
        )

    def to_state(self) -> dict[str, Any]:
        """Plain values only, as checkpoints hold (they are loaded with ``weights_only``)."""
        return {
            "env_id": self.env_id,
            "obs_shape": list(self.obs_shape),
            "n_actions": self.n_actions,
            "env": dict(self.env),
            "model": dict(self.model),
            "spaces": dict(self.spaces),
        }

    def model_config(self) -> ModelConfig:
        return ModelConfig(**self.model)

    def env_config(self, stack_from_shape: bool) -> EnvConfig:
        """One env as the run had it; settings the checkpoint lacks take their defaults, except the
        frame stack and the screen's size, which [stack, H, W] observations tell when
        ``stack_from_shape`` (Atari)."""
        saved = {k: v for k, v in self.env.items() if k in CHECKPOINT_ENV_FIELDS}
        cfg = EnvConfig(id=self.env_id, num_envs=1, **saved)
        if stack_from_shape and len(self.obs_shape) == 3:
            if "frame_stack" not in saved:
                cfg.frame_stack = self.obs_shape[0]
            if "screen_size" not in saved:
                cfg.screen_size = self.obs_shape[1]
        return cfg

    def mismatch(self, other: CheckpointMeta) -> str | None:
        """How a checkpoint of ``other`` does not fit this run, or None."""
        for key in ("env_id", "obs_shape", "n_actions"):
            if getattr(self, key) != getattr(other, key):
                return f"is for {key}={getattr(other, key)!r}, this run has {getattr(self, key)!r}"
        return None


@dataclass(frozen=True)
class ShardCounts:
    """One shard's own counters: the pushes it saw, applied and dropped. Every shard has them;
    the run's counters (``Progress``) are the coordinator's."""

    version: int
    env_steps: int
    gradients_applied: int
    dropped_nonfinite: int
    dropped_stale: int
    dropped_resync: int


@dataclass(frozen=True)
class Progress:
    """The ParameterServer's counters at one moment: what the driver, `status`, `scale` and the
    bench read of a run."""

    env_steps: int
    """Env steps in all pushes applied or not, since the run began (resumes included)."""
    version: int
    """The weights' version: gradients applied since the run began."""
    gradients_applied: int
    gradients_dropped: int
    """All three reasons together."""
    dropped_nonfinite: int
    dropped_stale: int
    dropped_resync: int
    env_restarts: int
    ps_restarts: int
    restored_from: str | None
    """The checkpoint this server started from, if any."""
    worker_steps: dict[int, int]
    """Env steps per Worker slot."""
    desired_workers: int | None
    """The Workers `a3c-ray scale` asked for; None: as started."""
    episodes: int
    mean_return_100: float
    """Mean return of the last 100 episodes (NaN before the first)."""
    staleness_mean: float
    staleness_max: int
    train_seconds: float
    """Seconds since the first gradient arrived, resumes included."""
    stop_reason: str | None
    """Why training stops (target, max_steps, time_limit, interrupted, error); None while it goes on."""
    steps_to_target: int | None
    seconds_to_target: float | None
    worker_restarts: int = 0
    """Workers restarted since the run began (resumes included), as the driver reported them."""


@dataclass(frozen=True)
class RunDecisions:
    """What the run's coordinator has decided, as against what it counts: the stop, and the
    Workers asked for and retired. Not in checkpoints (a resumed run goes on, with the Workers
    it starts with); a coordinator reset within one sitting keeps them, and one that Ray restarted
    is told them again by the driver."""

    stop_reason: str | None
    steps_to_target: int | None
    seconds_to_target: float | None
    desired_workers: int | None
    retiring: frozenset[int] = frozenset()


@dataclass(frozen=True)
class WorkerResult:
    """What a Worker reports when it stops: its share of the run and where its time went."""

    worker: int
    env_steps: int
    pushes: int
    timings: dict[str, float]
    """Seconds in env, forward, backward and wait, and the Worker's ``total``."""
    node_id: str | None = None
    """The Ray node it ran on (set by the actor)."""
    pushes_by_graph: int = 0
    """Pushes sent through compiled graphs (``ps.graph_workers``); the others by actor calls."""
