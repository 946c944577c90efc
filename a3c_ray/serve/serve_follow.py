"""``a3c-ray serve --follow``: the run's newest best checkpoint, when it may replace the one
being served (plain code, no Ray; the Serve replicas poll it).

A checkpoint is swapped in only when it is of the same env and network as the one being served:
the same env id, observation and action spaces, and model (clients were told these by
``/metadata``, and their observations are shaped for them); and when it was trained longer. Each
checkpoint file is written once and never changes, so one that is refused, or broken, is not
fetched again. A run at a URI is read without the run's staging directory, which the run's own
actors on this node share: the pointer is read in memory, and a checkpoint is fetched into a
private temporary directory that is removed once it is loaded.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import fsspec

from a3c_ray.algo.policy import Policy
from a3c_ray.envs.spaces import describe_space
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.policy import _same_network, checkpoint_in_run, load_policy
from a3c_ray.rundir.storage import is_uri

logger = logging.getLogger("a3c_ray.serve")


def pointed_name(run_dir: str | os.PathLike[str]) -> str | None:
    """The checkpoint file the run's ``best`` pointer names (else its ``latest``), read afresh;
    None when the run has neither yet. An OSError other than a missing pointer propagates (the
    caller looks again later rather than fall back to ``latest`` on a network hiccup)."""
    fs, root = fsspec.core.url_to_fs(str(run_dir))
    for pointer in (layout.BEST, layout.LATEST):
        try:
            text = fs.cat_file(f"{root.rstrip('/')}/{layout.CHECKPOINTS}/{pointer}")
        except FileNotFoundError:
            continue
        name = bytes(text).decode(errors="replace").strip()
        if layout.CHECKPOINT_RE.match(name):
            return name
    return None


def load_from_run(run_dir: str | os.PathLike[str], name: str) -> Policy:
    """The policy of checkpoint ``name`` of a run. A run at a URI: fetched into a temporary
    directory that is gone when this returns (an OSError when the fetch fails); the policy's
    ``checkpoint`` is the URI. A CheckpointError when the file is not a usable checkpoint."""
    where = checkpoint_in_run(run_dir, name)
    if not is_uri(run_dir):
        return load_policy(where)
    fs, path = fsspec.core.url_to_fs(where)
    with tempfile.TemporaryDirectory(prefix="a3c-ray-follow-") as tmp:
        local = Path(tmp) / name
        fs.get_file(path, str(local))
        policy = load_policy(local)
    policy.checkpoint = where
    return policy


def first_of_run(run_dir: str | os.PathLike[str]) -> Policy:
    """The checkpoint ``--follow`` starts from: the run's best, else its latest."""
    try:
        name = pointed_name(run_dir)
        if name is not None:
            return load_from_run(run_dir, name)
    except OSError as e:
        raise CheckpointError(f"cannot read the run {run_dir}: {e}") from None
    raise CheckpointError(
        f"no checkpoint in {run_dir} yet: --follow needs a run directory with a best or latest "
        "checkpoint"
    )


def mismatch(served: Policy, new: Policy) -> str | None:
    """How ``new`` differs from the policy being served in what its callers rely on, or None."""
    if not _same_network(served.meta, new.meta):
        if served.env_id != new.env_id:
            return f"it is for env {new.env_id}, the one served for {served.env_id}"
        return "its network (model, observation shape or actions) is another"
    for name in ("observation_space", "action_space"):
        if describe_space(getattr(served, name)) != describe_space(getattr(new, name)):
            return f"its {name.replace('_', ' ')} is another"
    return None


class Follower:
    """Which checkpoint of the run ``source`` to swap in next; ``newer`` is called on a timer."""

    def __init__(self, source: str):
        self.source = source
        self.passed: set[str] = set()
        """Checkpoint files looked at and not taken (older, another env or network, broken)."""

    def newer(self, served: Policy) -> Policy | None:
        """The run's best checkpoint when it may replace ``served``, else None. A fetch that
        fails (OSError) propagates and is tried again at the next look."""
        name = pointed_name(self.source)
        if name is None or name == Path(served.checkpoint or "").name or name in self.passed:
            return None
        try:
            new = load_from_run(self.source, name)
        except CheckpointError as e:
            self.passed.add(name)
            logger.warning("follow %s: not served: %s", self.source, e)
            return None
        problem = mismatch(served, new)
        if problem is None and new.env_steps <= served.env_steps:
            problem = f"it has {new.env_steps} env steps, the one served {served.env_steps}"
        if problem is not None:
            self.passed.add(name)
            logger.warning("follow %s: %s not served: %s", self.source, name, problem)
            return None
        return new
