"""Multi-node on one machine (ray.cluster_utils.Cluster, every node on loopback): placement and node loss."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from a3c_ray.runtime.session import train

from .conftest import (
    AFTER_RECOVERY,
    free_port,
    named_actor,
    progress,
    small_config,
    train_on_then_stop,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]
NODE = {"object_store_memory": 100 * 1024 * 1024}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head with one CPU (ParameterServer and Monitor) and two one-CPU worker nodes."""
    assert not ray.is_initialized(), "another module left Ray running"
    c = Cluster(
        initialize_head=True, head_node_args={**NODE, "num_cpus": 1, "dashboard_port": free_port()}
    )
    for _ in range(2):
        c.add_node(**NODE, num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="WARNING")
    yield c
    ray.shutdown()
    c.shutdown()


def actor_node(run_dir: Path, suffix: str) -> str:
    prefix = run_dir.name
    gcs = ray.get_runtime_context().gcs_address
    for a in list_actors(address=gcs, filters=[("state", "=", "ALIVE")], detail=True):
        if a.name and a.name.startswith(prefix) and a.name.endswith("/" + suffix):
            return str(a.node_id)
    raise LookupError(suffix)


def alive(run_dir: Path, suffix: str) -> bool:
    try:
        actor_node(run_dir, suffix)
    except LookupError:
        return False
    return True


@pytest.mark.long
def test_workers_spread_over_nodes_and_central_actors_stay_on_the_head(
    cluster: Cluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / "spread"
    seen: dict[str, str] = {}

    def look() -> None:
        wait_for(lambda: bool(ray.util.list_named_actors(all_namespaces=True)), what="actors")
        named_actor("Worker-1", run_dir)
        wait_for(lambda: alive(run_dir, "Monitor"), what="the Monitor to be placed")
        seen["monitor"] = actor_node(run_dir, "Monitor")
        wait_for(lambda: len(progress(run_dir).worker_steps) == 2, what="both Workers to push")
        train_on_then_stop(run_dir)  # the run's end: each Worker reports the node it ran on

    t = threading.Thread(target=look, daemon=True)
    t.start()
    result = train(small_config(run_dir, run__max_steps=60_000))
    t.join(timeout=60)
    assert not t.is_alive()
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert len(set(s["worker_nodes"])) == 2, s["worker_nodes"]
    head = cluster.head_node.node_id
    assert s["ps_nodes"] == [head] and seen.get("monitor") == head, (s["ps_nodes"], seen)
    assert head not in s["worker_nodes"]


@pytest.mark.long
def test_parameter_server_shards_go_on_distinct_nodes(cluster: Cluster, tmp_path: Path) -> None:
    """Three shards on three nodes, the coordinator on the head; the run reaches its end."""
    run_dir = tmp_path / "shards"
    cfg = small_config(
        run_dir, run__max_steps=10_000, run__workers=1, run__worker_cpus=0.5, ps__shards=3
    )
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert len(set(s["ps_nodes"])) == 3 and s["ps_nodes"][0] == cluster.head_node.node_id, s


@pytest.mark.long
def test_losing_a_node_restarts_its_worker_elsewhere_and_training_completes(
    cluster: Cluster, tmp_path: Path
) -> None:
    spare = cluster.add_node(**NODE, num_cpus=1)
    cluster.wait_for_nodes()
    run_dir = tmp_path / "nodeloss"
    errors: list[BaseException] = []
    seen: dict[str, Any] = {}

    def remove() -> None:
        try:
            wait_for(lambda: progress(run_dir).env_steps > 5_000, what="training")
            victim_id = actor_node(run_dir, "Worker-0")
            seen["victim"], seen["other"] = victim_id, actor_node(run_dir, "Worker-1")
            victim = next(n for n in cluster.worker_nodes if n.node_id == victim_id)
            cluster.remove_node(victim, allow_graceful=False)
            wait_for(lambda: progress(run_dir).worker_restarts >= 1, what="the restart")
            pushed = progress(run_dir).worker_steps.get(0, 0)
            wait_for(lambda: progress(run_dir).worker_steps.get(0, 0) > pushed, what="a push")
            seen["recovered"] = train_on_then_stop(run_dir)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=remove, daemon=True)
    t.start()
    result = train(small_config(run_dir, run__max_steps=40_000, run__restart_backoff=0.1))
    t.join(timeout=30)
    assert not errors, errors
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert s["worker_restarts"] >= 1 and s["env_steps"] >= seen["recovered"] + AFTER_RECOVERY
    # Worker-0 ended on a live node that is not Worker-1's: the one with a free CPU left (the
    # spare, unless Worker-0 had started there).
    nodes = set(s["worker_nodes"])
    assert seen["victim"] not in nodes and seen["other"] in nodes and len(nodes) == 2, (seen, s)
    assert nodes <= {n.node_id for n in cluster.worker_nodes}, (nodes, spare.node_id)
