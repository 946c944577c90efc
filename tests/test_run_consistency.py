"""Faults that could leave a run inconsistent, each traced to a fix or ruled out: the run's
decisions across a coordinator's reset, a push torn between shards, a node's shared staging
directory, Discrete actions that do not start at 0, and the weights cached by version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from a3c_ray.algo.coordinator import Coordinator, lost_decisions
from a3c_ray.algo.messages import (
    CheckpointMeta,
    GradientPush,
    Progress,
    PushReply,
    RunDecisions,
)
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.shards import ShardRouter, merge_states, shard_bounds, slice_state
from a3c_ray.config import Config, EnvConfig, RunConfig
from a3c_ray.envs.make import check_env
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import read_pointer
from a3c_ray.rundir.monitor import Monitor
from a3c_ray.rundir.storage import RunStorage

# -- the run's decisions when the coordinator is reset ---------------------------------------


def cartpole_server(shard: int = 0, shards: int = 1, **sets: Any) -> ParameterServer:
    cfg = Config()
    cfg.model.policy = "categorical"
    cfg.ps.shards = shards
    for key, value in sets.items():
        cfg.set(key.replace("__", "."), value)
    meta = CheckpointMeta.of(cfg, (4,), 2)
    init = initial_params(cfg, (4,), 2)
    lo, hi = shard_bounds(init.size, shards)[shard]
    return ParameterServer(cfg, init[lo:hi], meta, shard=shard)


def test_a_coordinator_rolled_back_to_a_checkpoint_keeps_the_stop_and_the_retired_workers() -> None:
    """``reload`` (another shard restarted) resets the coordinator to a checkpoint: its counters
    go back to it, but what the run decided since stays decided."""
    ps = cartpole_server()
    checkpoint = ps.state_dict()
    ps.set_workers(2)
    ps.retire(3)
    ps.request_stop("error")
    ps.reset(initial_params(ps.cfg, (4,), 2), checkpoint)
    p = ps.progress()
    assert (p.stop_reason, p.desired_workers) == ("error", 2)
    assert ps.coordinator.stops(3) and ps.coordinator.stops(0)


def test_decisions_are_not_in_checkpoints_so_a_resumed_run_goes_on() -> None:
    ps = cartpole_server()
    ps.request_stop("max_steps")
    resumed = cartpole_server()
    resumed.load_state_dict(ps.state_dict())
    assert resumed.progress().stop_reason is None


def progress(**fields: Any) -> Progress:
    base: dict[str, Any] = {
        **dict.fromkeys(("env_steps", "version", "gradients_applied", "gradients_dropped"), 0),
        **dict.fromkeys(("dropped_nonfinite", "dropped_stale", "dropped_resync"), 0),
        **dict.fromkeys(("env_restarts", "ps_restarts", "episodes", "staleness_max"), 0),
        "restored_from": None,
        "worker_steps": {},
        "desired_workers": None,
        "mean_return_100": float("nan"),
        "staleness_mean": 0.0,
        "train_seconds": 0.0,
        "stop_reason": None,
        "steps_to_target": None,
        "seconds_to_target": None,
    }
    return Progress(**{**base, **fields})


def test_a_coordinator_restarted_by_ray_is_told_what_it_forgot() -> None:
    """A restarted coordinator process comes back from a checkpoint without the run's decisions;
    the driver, which read them before, finds them missing and tells them again."""
    before = progress(stop_reason="target", steps_to_target=900, seconds_to_target=3.0)
    forgot = lost_decisions(before, progress(), retiring={1})
    assert forgot == RunDecisions("target", 900, 3.0, None, frozenset({1}))
    scaled = progress(desired_workers=1)
    assert lost_decisions(scaled, progress(), retiring={1}) == RunDecisions(
        None, None, None, 1, frozenset({1})
    )
    assert lost_decisions(before, before, retiring=set()) is None
    assert lost_decisions(None, progress(), retiring=set()) is None

    fresh = Coordinator(RunConfig(max_steps=10**9))
    fresh.keep(forgot)
    assert fresh.stop_reason == "target" and fresh.steps_to_target == 900 and fresh.stops(1)
    fresh.keep(RunDecisions("error", None, None, None, frozenset()))
    assert fresh.stop_reason == "target"  # the first reason stands


# -- a push torn between shards -------------------------------------------------------------


def test_a_push_applied_on_shard_0_only_leaves_the_shards_working_together() -> None:
    """A Worker killed between its calls to the shards (or whose verdict the other shards never
    received) leaves its gradient applied on shard 0 alone. Ruled out as harm: the other slices
    missed one update, as a dropped gradient would, and the shards go on as one. The next pushes
    apply everywhere (no resync drops, no stale verdicts), Workers assemble the shards' weights,
    and a checkpoint restores the same weights."""
    shards = [cartpole_server(k, 2, algo__max_staleness=4) for k in range(2)]
    n = sum(s.flat.numel() for s in shards)
    rng = np.random.default_rng(0)

    def router_pulling() -> ShardRouter:
        router = ShardRouter(n, 2, "float32", max_staleness=4)
        got = [s.get_weights() for s in shards]
        router.merge([ps_reply(w, v, lin) for w, v, lin in got])
        return router

    def ps_reply(w: np.ndarray, v: int, lin: str) -> PushReply:
        return PushReply(w, v, False, True, lin)

    def push(router: ShardRouter, worker: int, seq: int, only: int | None = None) -> PushReply:
        p = GradientPush(
            rng.normal(size=n).astype(np.float32), version=0, env_steps=5, worker=worker, seq=seq
        )
        p.version, p.lineage = router.versions[0], router.lineages[0]
        parts = router.split(p)
        first = shards[0].push(parts[0])
        if only == 0:
            return first
        rest = [s.push(q) for s, q in zip(shards[1:], router.judged(parts[1:], first), strict=True)]
        return router.merge([first, *rest])

    killed = router_pulling()
    push(killed, worker=0, seq=0, only=0)  # the Worker died after its first call
    assert [s.version for s in shards] == [1, 0]

    survivor = router_pulling()
    for seq in range(5):
        reply = push(survivor, worker=1, seq=seq)
        assert reply.applied and not reply.stale and not reply.stop
    assert [s.version for s in shards] == [6, 5]
    assert sum(s.gradients_dropped() for s in shards) == 0
    whole = np.concatenate([s.weights() for s in shards])
    assert np.array_equal(survivor.weights, whole)
    state = merge_states([s.state_dict() for s in shards])
    for k, (lo, hi) in enumerate(shard_bounds(n, 2)):
        again = cartpole_server(k, 2)
        again.load_state_dict(slice_state(state, lo, hi))
        assert torch.equal(again.flat.detach(), shards[k].flat.detach())


# -- the Monitor's pointers and a reader on the same node ------------------------------------


def test_a_reader_staging_the_run_on_the_monitors_node_never_replaces_its_fresh_pointers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``serve --follow`` replica or a restarting ParameterServer fetches the run's pointers
    while the Monitor writes new ones: the Monitor must upload the pointer it wrote, not the
    older one the reader fetched in between."""
    monkeypatch.setenv("A3C_RAY_STAGING", str(tmp_path / "staging"))
    uri = f"file://{tmp_path}/remote/run"
    cfg = Config()
    cfg.model.policy = "categorical"
    cfg.monitor.eval_episodes = 1
    ps = ParameterServer(cfg, initial_params(cfg, (4,), 2), CheckpointMeta.of(cfg, (4,), 2))
    monitor = Monitor(cfg, uri, (4,), 2, ps)
    upload = monitor.storage.upload

    def upload_after_a_reader(rel: str) -> None:
        RunStorage(uri).download_checkpoints()  # another actor of this node, just before
        upload(rel)

    monkeypatch.setattr(monitor.storage, "upload", upload_after_a_reader)
    remote = tmp_path / "remote" / "run" / layout.CHECKPOINTS
    for steps in (100, 200, 300):
        ps.env_steps = steps
        monitor.tick(force_eval=True)
        newest = layout.checkpoint_name(steps)
        assert read_pointer(remote / layout.LATEST).name == newest
        assert (remote / newest).exists()
    monitor.close()


# -- Discrete actions from 0 -----------------------------------------------------------------


class ShiftedActions(gym.Env[np.ndarray, int]):
    """Actions 1, 2 and 3: a Worker's 0-based actions would be off by one."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> Any:
        assert self.action_space.contains(action), action
        return np.zeros(2, np.float32), 0.0, True, False, {}


def test_discrete_actions_that_do_not_start_at_0_are_refused_in_one_line() -> None:
    problem = check_env(EnvConfig(id=f"{__name__}:ShiftedActions"))
    assert problem is not None and "\n" not in problem
    assert "starting at 1" in problem and "0..2" in problem


# -- the weights cached by version -----------------------------------------------------------


def test_weights_cached_by_version_are_not_served_after_a_rollback_to_that_version() -> None:
    """After ``reload`` the server may be at the version it cached weights of, with other
    weights: ``reset`` drops the cache, so the newest weights are served."""
    ps = cartpole_server()
    before = ps.weights().copy()
    other = ps.state_dict()
    other["params"] = other["params"] + 1.0  # the same version, other weights
    ps.reset(initial_params(ps.cfg, (4,), 2), other)
    assert ps.version == 0
    assert np.array_equal(ps.weights(), before + 1.0)


@pytest.mark.ray
@pytest.mark.long
def test_weights_sent_by_reference_after_a_rollback_are_the_rolled_back_ones(
    ray_session: None, tmp_path: Path
) -> None:
    """Weights past 1 MiB go out as one object ref per version; a shard rolled back (``reload``)
    to a checkpoint of the version it last sent has other weights at that version, and a Worker
    must get those."""
    import ray

    from a3c_ray.rundir.checkpoint import CheckpointManager
    from a3c_ray.runtime import actors

    cfg = Config()
    cfg.model.policy = "categorical"
    cfg.model.hidden_sizes = [1024, 512]
    meta = CheckpointMeta.of(cfg, (4,), 2)
    ps = actors.parameter_server_class().remote(cfg, meta, str(tmp_path), "consistency", 0)
    try:
        weights, version, lineage = ray.get(ps.get_weights.remote())
        assert weights.nbytes > actors.WEIGHTS_BY_REF_BYTES
        grad = np.full(weights.size, 0.01, np.float32)
        first = ray.get(ps.push.remote(GradientPush(grad, version, 5, lineage=lineage)))
        assert first.applied and first.version == 1
        sent = ray.get(first.weights)  # (the object ref of version 1's weights)

        state = ray.get(ps.state_dict.remote())
        state["params"] = state["params"] + 1.0  # version 1, other weights
        saved = CheckpointManager(tmp_path / layout.CHECKPOINTS).save(state)
        ray.get(ps.reload.remote(saved.name))

        late = ray.get(ps.push.remote(GradientPush(grad, 1, 5, lineage=lineage)))
        assert not late.applied and late.version == 1  # computed before the rollback: resync
        assert np.array_equal(ray.get(late.weights), sent + 1.0)
    finally:
        ray.kill(ps)
