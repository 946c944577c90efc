"""Where a run's actors go: how many Workers a cluster takes, and the node of the ParameterServer
and the Monitor."""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from a3c_ray.config import Config


def default_workers(cfg: Config, started: bool) -> int:
    """One Worker per CPU: of this machine for an embedded Ray, else what the cluster has left."""
    if started:
        return os.cpu_count() or 1
    cpus = ray.cluster_resources().get("CPU", 1.0) - central_cpus(cfg)
    return max(1, int(cpus // cfg.run.worker_cpus))


def central_cpus(cfg: Config) -> float:
    """Logical CPUs of the ParameterServer's shards and the Monitor together."""
    return cfg.run.ps_cpus * cfg.ps.shards + cfg.run.monitor_cpus


def shard_placement(cfg: Config, shard: int) -> dict[str, Any]:
    """Where shard ``shard`` goes: the coordinator (0) as ``central_placement`` says; the others
    on the cluster's other nodes in turn, so that S shards use S nodes where there are S (soft
    affinity: a restart may land on any node)."""
    if shard == 0:
        return central_placement(cfg)
    nodes = sorted(
        (n for n in ray.nodes() if n["Alive"]),
        key=lambda n: (
            "node:__internal_head__" not in n["Resources"]
            if not cfg.run.ps_resource
            else cfg.run.ps_resource not in n["Resources"],
            n["NodeID"],
        ),
    )
    if len(nodes) < 2:
        return central_placement(cfg)
    node = nodes[shard % len(nodes)]["NodeID"]
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=True)}


def central_placement(cfg: Config) -> dict[str, Any]:
    """Where the ParameterServer and the Monitor go: a node with ``run.ps_resource``, else the head.

    Affinity to the head is soft, so a restart after losing the head's raylet can land elsewhere.
    """
    if cfg.run.ps_resource:
        return {"resources": {cfg.run.ps_resource: 0.001}}
    head = next(
        (
            n["NodeID"]
            for n in ray.nodes()
            if n["Alive"] and "node:__internal_head__" in n["Resources"]
        ),
        None,
    )
    if head is None:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=head, soft=True)}
