"""Pushes through Ray compiled graphs (``ps.graph_workers``) on a real local Ray: a push by graph
applies exactly what the same push by actor call applies, a shard grants no more graphs than
configured, a run's Workers on the server's node push by graph up to that limit, and a push sent
again by call after its graph failed is applied once per shard. Beside them, the shard actors'
calls: with ``algo.max_staleness`` every shard follows the coordinator's verdict."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from a3c_ray.algo.messages import CheckpointMeta, GradientPush
from a3c_ray.algo.parameter_server import initial_params
from a3c_ray.config import Config
from a3c_ray.runtime import actors
from a3c_ray.runtime.graphs import GraphServer, compile_push
from a3c_ray.runtime.session import train

from .conftest import small_config

pytestmark = pytest.mark.ray

META = CheckpointMeta(env_id="CartPole-v1", obs_shape=(4,), n_actions=2)


def shard(cfg: Config, tmp_path: Path, name: str, k: int = 0) -> Any:
    """Shard ``k`` of a ParameterServer actor (the whole one with one shard), from the seed's weights."""
    return (
        actors.parameter_server_class()
        .options(num_cpus=0)
        .remote(cfg, META, str(tmp_path / name), name, k)
    )


def pushes(size: int, n: int = 20) -> list[GradientPush]:
    rng = np.random.default_rng(7)
    return [
        GradientPush(
            grad=rng.normal(0, 0.5 if i % 2 else 0.01, size).astype(np.float32),
            version=max(-1, i - 3),
            env_steps=24,
            worker=i % 2,
            episode_returns=[float(i)] if i % 4 == 0 else [],
            episode_lengths=[10] if i % 4 == 0 else [],
            stats={"entropy": 0.6},
        )
        for i in range(n)
    ]


def test_a_push_by_graph_applies_exactly_what_a_push_by_call_applies(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = Config()
    size = initial_params(cfg, META.obs_shape, META.n_actions).size
    by_graph, by_call = shard(cfg, tmp_path, "graph"), shard(cfg, tmp_path, "call")
    graph = compile_push(by_graph)
    try:
        for p in pushes(size):
            a = ray.get(graph.execute(p), timeout=60)
            b = ray.get(by_call.push.remote(p))
            assert (a.version, a.stop, a.applied, a.weights is None) == (
                b.version,
                b.stop,
                b.applied,
                b.weights is None,
            )
            if a.weights is not None:
                np.testing.assert_array_equal(a.weights, b.weights)  # float32, bit for bit
    finally:
        graph.teardown()
    sa, sb = ray.get(by_graph.state_dict.remote()), ray.get(by_call.state_dict.remote())
    assert sa["version"] == sb["version"] == 20 and sa["episodes"] == sb["episodes"] == 5
    assert bool((sa["params"] == sb["params"]).all())
    stats_a, stats_b = sa["optimizer"]["state"][0], sb["optimizer"]["state"][0]
    assert bool((stats_a["square_avg"] == stats_b["square_avg"]).all())  # shared RMSProp's


@pytest.mark.long
def test_a_shard_grants_at_most_graph_workers_and_never_a_killed_workers_slot(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = Config()
    cfg.ps.graph_workers = 2
    s = shard(cfg, tmp_path, "slots")
    claim = lambda w: ray.get(s.claim_graph.remote(w))  # noqa: E731
    assert claim(0) and claim(1)
    assert not claim(2)  # two already push by graph
    assert not claim(0)  # a Worker restarted in slot 0: the old loop may still poll there
    ray.get(s.release_graph.remote(0))  # a Worker that stopped gives its slot back
    assert claim(2)


@pytest.mark.long
def test_workers_on_the_servers_node_push_by_graph_up_to_the_limit(
    ray_session: None, tmp_path: Path
) -> None:
    """2 Workers, 1 graph slot: one Worker pushes by graph, the other by call, and the run
    trains to its end; with no slot, every push is a call."""
    one = train(small_config(tmp_path / "one", run__max_steps=24_000, ps__graph_workers=1))
    s = one.summary
    assert one.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert 0 < s["pushes_by_graph"] < s["pushes"], s
    # One Worker of two, the whole run less its graph's compile (seconds on a busy machine): a
    # fifth of the pushes at least while the run lasts 4/3 of the compile or more.
    assert s["pushes_by_graph"] >= s["pushes"] / 5, s
    none = train(small_config(tmp_path / "none", run__max_steps=4_000, ps__graph_workers=0))
    assert none.exit_code == 0 and none.summary["pushes_by_graph"] == 0
    assert none.summary["pushes"] > 0


@ray.remote
def _no_reply() -> None:
    raise RuntimeError("the graph's channel broke")


class AppliedThenBroke:
    """A compiled graph to a shard that delivers the push, which the shard applies, and then
    fails instead of bringing the reply back (as one that timed out)."""

    def __init__(self, handle: Any):
        self.handle = handle

    def execute(self, p: GradientPush) -> Any:
        ray.get(self.handle.push_inline.remote(p))
        return _no_reply.remote()

    def teardown(self) -> None:
        pass


def test_a_push_sent_again_after_its_graph_failed_is_applied_once_on_every_shard(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = Config()
    cfg.ps.shards, cfg.ps.graph_workers = 2, 1
    handles = [shard(cfg, tmp_path, "again", k) for k in range(2)]
    calls = actors.ShardedServer(handles, cfg)
    server = GraphServer(calls, 0, "here", ["here", "there"], cfg.algo.max_staleness)
    version = server.pull().version
    server.graphs = {0: AppliedThenBroke(handles[0])}  # shard 0 by graph, shard 1 by call
    size = initial_params(cfg, META.obs_shape, META.n_actions).size
    p = dataclasses.replace(
        pushes(size, 1)[0], version=version, episode_returns=[1.0], episode_lengths=[8], seq=0
    )
    reply = server.send(p)()
    assert reply.applied and reply.version == 1
    assert server.failures == 1 and not server.graphs  # the fallback went by call
    counts = ray.get([h.counts.remote() for h in handles])
    assert [(q.version, q.env_steps) for q in counts] == [(1, 24), (1, 24)]
    assert ray.get(handles[0].progress.remote()).episodes == 1


@pytest.mark.long
def test_with_max_staleness_the_shards_calls_follow_the_coordinators_verdict(
    ray_session: None, tmp_path: Path
) -> None:
    """Shard 1 is 3 versions ahead of the coordinator (as after pushes that reached it first):
    by its own count a push from version 0 is stale there, not at the coordinator, whose verdict
    it follows."""
    cfg = Config()
    cfg.ps.shards, cfg.algo.max_staleness = 2, 0
    handles = [shard(cfg, tmp_path, "verdict", k) for k in range(2)]
    calls = actors.ShardedServer(handles, cfg)
    calls.pull()
    router = calls.router
    assert router is not None and router.coordinator_judges
    size = router.bounds[1][1] - router.bounds[1][0]
    for q in pushes(size, 3):
        ray.get(handles[1].push.remote(dataclasses.replace(q, version=-1, norm=1.0, stale=False)))
    router.versions = [0, 0]
    reply = calls.send(pushes(router.weights.size, 1)[0])()
    assert reply.applied
    counts = ray.get([h.counts.remote() for h in handles])
    assert [(q.version, q.dropped_stale) for q in counts] == [(1, 0), (4, 0)]
