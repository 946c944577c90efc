"""Where a run's actors go: how many Workers a cluster takes, and the node of the ParameterServer
and the Monitor. A run started inside a placement group (a Ray Tune trial's) keeps every actor in
that group: its first bundle holds the ParameterServer and the Monitor, the others the Workers."""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, get_current_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

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
    if shard == 0 or get_current_placement_group() is not None:
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
    In a placement group: its first bundle, which ``group_bundles`` sizes for them.
    """
    group = get_current_placement_group()
    if group is not None:
        return _in(group, 0 if central_cpus(cfg) > 0 else -1)
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


def actor_env(cfg: Config) -> dict[str, Any]:
    """The ``runtime_env`` option of the run's actors: ``run.actor_env`` as environment variables
    (none when it is empty, so the actors share Ray's prestarted processes)."""
    if not cfg.run.actor_env:
        return {}
    return {"runtime_env": {"env_vars": {k: str(v) for k, v in cfg.run.actor_env.items()}}}


def worker_placement() -> dict[str, Any]:
    """Where a Worker goes: one per node before two on any node, or any bundle of the group."""
    group = get_current_placement_group()
    return _in(group, -1) if group is not None else {"scheduling_strategy": "SPREAD"}


def group_bundles(cfg: Config, workers: int) -> list[dict[str, float]]:
    """The bundles of a placement group that holds one run: an empty head (the driver, which
    takes no CPU and is placed with the next bundle), the ParameterServer and the Monitor together,
    then one bundle per Worker."""
    central = central_cpus(cfg)
    return [
        {},
        *([{"CPU": central}] if central > 0 else []),
        *[{"CPU": cfg.run.worker_cpus}] * workers,
    ]


def _in(group: PlacementGroup, bundle: int) -> dict[str, Any]:
    return {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=True
        )
    }


def free_cpus() -> float:
    """Logical CPUs of the cluster that no actor or task holds now."""
    return float(ray.available_resources().get("CPU", 0.0))


def autoscaler_cpus() -> float | None:
    """The most CPUs the cluster's autoscaler may grow it to; None when it has none (a local or
    fixed-size cluster), so that what is not free now may never be."""
    try:  # the autoscaler publishes its node types in the GCS; Ray Data reads them the same way
        from ray._private.state import state

        limits = state.get_max_resources_from_cluster_config()
    except Exception:  # a Ray without it, or a GCS that does not answer: assume no autoscaler
        return None
    return float(limits.get("CPU", 0.0)) if limits else None


def waiting_line(workers: int, asked: float, free: float, scale_to: float | None) -> str:
    """What happens to ``workers`` Workers that ask for ``asked`` CPUs more than the ``free`` ones."""
    where = (
        f"for the autoscaler to add nodes (up to {scale_to:g} CPUs)"
        if scale_to
        else "until CPUs free up: this cluster has no autoscaler"
    )
    return (
        f"{workers} Worker{'s' if workers != 1 else ''} will wait {where} "
        f"({asked:g} CPUs asked, {free:g} free)"
    )


def start_shortfall(cfg: Config, workers: int) -> str | None:
    """One line when a run's ``workers`` Workers, its ParameterServer and its Monitor do not all
    fit in the cluster's free CPUs now (before they start); None when they do."""
    asked = workers * cfg.run.worker_cpus + central_cpus(cfg)
    free = free_cpus()
    if asked <= free + 1e-9:
        return None
    fit = max(0, int((free - central_cpus(cfg) + 1e-9) // cfg.run.worker_cpus))
    return waiting_line(workers - fit, asked, free, autoscaler_cpus())
