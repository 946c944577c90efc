"""What ``a3c-ray serve`` is asked to serve, without Ray: the options (flags, or a Serve config
file's ``args``) and the policy to start with. The command checks both before Ray is imported, so
a bad flag or checkpoint is exit 2 at once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from a3c_ray.algo.policy import Policy
from a3c_ray.errors import CheckpointError, ConfigError
from a3c_ray.rundir.policy import best_checkpoint_name, checkpoint_in_run, load_policy


@dataclass(frozen=True)
class ServeOptions:
    """What ``a3c-ray serve`` and a Serve config file's ``args`` set; one docstring per field."""

    source: str
    """A checkpoint, pointer, checkpoints dir, run dir or URI; with ``follow``, the run dir."""
    follow: bool = False
    """Swap in each newer ``best`` checkpoint of the run ``source`` while serving."""
    follow_every: float = 5.0
    """Seconds between two looks at the run's ``best`` pointer."""
    replicas: int = 1
    """Replicas of the Policy deployment."""
    replica_cpus: float = 1.0
    """CPUs Ray reserves for each replica."""
    max_batch_size: int = 32
    """Requests in one forward pass at most; 1 turns batching off."""
    batch_wait_ms: float = 2.0
    """How long the first request of a batch waits for others."""
    max_body_bytes: int = 8 << 20
    """Larger request bodies are refused (413)."""
    max_observations: int = 1024
    """Observations in one request at most (also the envs of one session)."""
    max_sessions: int = 10_000
    """Sessions kept at once; the least recently used goes first."""
    session_idle_seconds: float = 3600.0
    """A session unused this long is dropped."""

    @classmethod
    def from_dict(cls, args: dict[str, Any]) -> ServeOptions:
        """Options from a Serve config file's ``args``; every problem at once, as ConfigError."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ConfigError([f"unknown serve option(s): {', '.join(unknown)}"])
        if "source" not in args:
            raise ConfigError(["serve needs 'source': a checkpoint or run directory"])
        options = cls(**args)
        problems = options.problems()
        if problems:
            raise ConfigError(problems)
        return options

    def problems(self) -> list[str]:
        out = []
        for name in ("replicas", "max_batch_size", "max_body_bytes", "max_observations"):
            if int(getattr(self, name)) < 1:
                out.append(f"{name}: must be >= 1")
        for name in ("batch_wait_ms", "replica_cpus"):
            if float(getattr(self, name)) < 0:
                out.append(f"{name}: must be >= 0")
        if self.follow_every <= 0:
            out.append("follow_every: must be > 0 seconds")
        return out


def run_of(checkpoint: str | None) -> str | None:
    """The run directory of a checkpoint file inside one (``RUN/checkpoints/ckpt-N.pt``)."""
    if not checkpoint:
        return None
    parent, _, _ = checkpoint.rstrip("/").rpartition("/")
    run, _, name = parent.rpartition("/")
    return run if name == "checkpoints" and run else None


def first_policy(options: ServeOptions) -> Policy:
    """The policy to start with: the checkpoint ``source`` names (with ``follow``, its run's
    ``best``). A CheckpointError says what is missing."""
    if options.follow:
        name = best_checkpoint_name(options.source)
        if name is None:
            raise CheckpointError(
                f"no checkpoint in {options.source} yet: --follow needs a run directory with a "
                "best or latest checkpoint"
            )
        return load_policy(checkpoint_in_run(options.source, name))
    return load_policy(options.source)
