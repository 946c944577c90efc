"""Multi-node on one machine (ray.cluster_utils.Cluster, every node on loopback): placement and node loss."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from a3c_ray.runtime.session import train

from .conftest import free_port, named_actor, small_config, wait_for

pytestmark = pytest.mark.ray
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

    t = threading.Thread(target=look, daemon=True)
    t.start()
    result = train(small_config(run_dir, run__max_steps=60_000))
    t.join(timeout=60)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert len(set(s["worker_nodes"])) == 2, s["worker_nodes"]
    head = cluster.head_node.node_id
    assert s["ps_nodes"] == [head] and seen.get("monitor") == head, (s["ps_nodes"], seen)
    assert head not in s["worker_nodes"]


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


def test_losing_a_node_restarts_its_worker_elsewhere_and_training_completes(
    cluster: Cluster, tmp_path: Path
) -> None:
    spare = cluster.add_node(**NODE, num_cpus=1)
    cluster.wait_for_nodes()
    run_dir = tmp_path / "nodeloss"
    errors: list[BaseException] = []

    def remove() -> None:
        try:
            ps = named_actor("ParameterServer", run_dir)
            wait_for(lambda: ray.get(ps.progress.remote()).env_steps > 5_000, what="training")  # type: ignore[attr-defined]
            victim_id = actor_node(run_dir, "Worker-0")
            victim = next(n for n in cluster.worker_nodes if n.node_id == victim_id)
            cluster.remove_node(victim, allow_graceful=False)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=remove, daemon=True)
    t.start()
    result = train(small_config(run_dir, run__max_steps=40_000, run__restart_backoff=0.1))
    t.join(timeout=30)
    assert not errors, errors
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert s["worker_restarts"] >= 1 and s["env_steps"] >= 40_000
    assert spare.node_id in s["worker_nodes"] or len(s["worker_nodes"]) == 2
