"""Loading a policy from a checkpoint: the one place that turns a checkpoint into a network.

``load_policy`` takes what ``a3c-ray eval`` takes: a ``ckpt-*.pt`` file, a ``latest`` or ``best``
pointer, a checkpoints directory, a run directory (its ``best``, else its ``latest``), or a URI of
any of them (``s3://bucket/runs/cp``). ``eval``, the Monitor, ``serve`` and ``export`` build their
policy here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import num_params
from a3c_ray.algo.policy import Policy
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import load_checkpoint, read_pointer
from a3c_ray.rundir.storage import RunStorage, is_uri


def load_policy(path_or_uri: str | Path) -> Policy:
    """The policy of a checkpoint, ready to ``act``.

    Raises ``CheckpointError`` (a ``ValueError``) with one line when nothing loadable is there.
    """
    return policy_from_state(load_checkpoint(path_or_uri))


def policy_from_state(state: dict[str, Any], reuse: Policy | None = None) -> Policy:
    """The policy of a loaded checkpoint, or of a ParameterServer's ``state_dict`` (the same keys).

    ``reuse``, a policy of the same architecture, gets the new weights instead of a new network:
    the Monitor evaluates every checkpoint it writes with one network."""
    where = state.get("path", "checkpoint")
    try:
        meta = CheckpointMeta.from_state(state)
        policy = (
            reuse if reuse is not None and _same_network(reuse.meta, meta) else Policy.build(meta)
        )
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(
            f"checkpoint {where} has an unusable model description ({e})"
        ) from None
    params = state["params"]
    need = num_params(policy.model)
    if params.numel() != need:
        raise CheckpointError(
            f"checkpoint {where} holds {params.numel()} parameters, its model needs {need}"
        )
    policy.set_weights(params.numpy(), int(state.get("env_steps", 0)))
    policy.checkpoint = state.get("path")
    return policy


def _same_network(a: CheckpointMeta, b: CheckpointMeta) -> bool:
    return (a.env_id, a.obs_shape, a.n_actions, a.model) == (
        b.env_id,
        b.obs_shape,
        b.n_actions,
        b.model,
    )


def best_checkpoint_name(run_dir: str | os.PathLike[str]) -> str | None:
    """The file name the run's ``best`` pointer names (else its ``latest``), read afresh; None when
    the run has neither yet. Cheap enough to poll: one small file, local or at the run's URI."""
    for pointer in (layout.BEST, layout.LATEST):
        rel = f"{layout.CHECKPOINTS}/{pointer}"
        try:
            if is_uri(run_dir):
                storage = RunStorage(run_dir)
                if not storage.has(rel):
                    continue
                return read_pointer(storage.download(rel)).name
            path = Path(run_dir) / rel
            if path.exists():
                return read_pointer(path).name
        except (OSError, CheckpointError):
            continue
    return None


def checkpoint_in_run(run_dir: str | os.PathLike[str], name: str) -> str:
    """Where the checkpoint ``name`` of a run directory is, for ``load_policy``."""
    if is_uri(run_dir):
        return f"{str(run_dir).rstrip('/')}/{layout.CHECKPOINTS}/{name}"
    return str(Path(run_dir) / layout.CHECKPOINTS / name)
