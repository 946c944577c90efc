"""Pushes through Ray compiled graphs (``ps.graph_workers``) on a real local Ray: a push by graph
applies exactly what the same push by actor call applies, a shard grants no more graphs than
configured, and a run's Workers on the server's node push by graph up to that limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from a3c_ray.algo.messages import CheckpointMeta, GradientPush
from a3c_ray.algo.parameter_server import initial_params
from a3c_ray.config import Config
from a3c_ray.runtime import actors
from a3c_ray.runtime.driver import train
from a3c_ray.runtime.graphs import compile_push

from .conftest import small_config

pytestmark = pytest.mark.ray

META = CheckpointMeta(env_id="CartPole-v1", obs_shape=(4,), n_actions=2)


def shard(cfg: Config, tmp_path: Path, name: str) -> Any:
    """One whole ParameterServer actor, started from the seed's weights."""
    return (
        actors.parameter_server_class()
        .options(num_cpus=0)
        .remote(cfg, META, str(tmp_path / name), name, 0)
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


def test_workers_on_the_servers_node_push_by_graph_up_to_the_limit(
    ray_session: None, tmp_path: Path
) -> None:
    """2 Workers, 1 graph slot: one Worker pushes by graph, the other by call, and the run
    trains to its end; with no slot, every push is a call."""
    one = train(small_config(tmp_path / "one", run__max_steps=40_000, ps__graph_workers=1))
    s = one.summary
    assert one.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert 0 < s["pushes_by_graph"] < s["pushes"], s
    # One Worker of two, the whole run (less its graph's compile, seconds on a busy machine).
    assert s["pushes_by_graph"] >= s["pushes"] / 5, s
    none = train(small_config(tmp_path / "none", run__max_steps=10_000, ps__graph_workers=0))
    assert none.exit_code == 0 and none.summary["pushes_by_graph"] == 0
    assert none.summary["pushes"] > 0
