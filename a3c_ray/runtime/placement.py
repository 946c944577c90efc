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
    cpus = ray.cluster_resources().get("CPU", 1.0) - cfg.run.ps_cpus - cfg.run.monitor_cpus
    return max(1, int(cpus // cfg.run.worker_cpus))


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
