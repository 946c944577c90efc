"""The ParameterServer of one run as its shard actors: started where ``shard_placement`` says,
kept at one moment after a shard restarts, and asked where they run."""

from __future__ import annotations

import logging
from typing import Any

import ray

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.config import Config
from a3c_ray.runtime import actors
from a3c_ray.runtime.placement import actor_env, shard_placement

log = logging.getLogger("a3c_ray")


class ParameterServerGroup:
    """The ``ps.shards`` shard actors of a run; ``handles[0]`` is the coordinator."""

    def __init__(
        self, cfg: Config, meta: CheckpointMeta, run_dir: str, run_id: str, options: dict[str, Any]
    ):
        self.handles = [
            actors.parameter_server_class()
            .options(
                name=actors.shard_name(run_id, k),
                num_cpus=cfg.run.ps_cpus,
                **options,
                **shard_placement(cfg, k),
                **actor_env(cfg),
            )
            .remote(cfg, meta, run_dir, run_id, k)
            for k in range(cfg.ps.shards)
        ]
        self.lineages: list[tuple[str, str | None]] = []

    @property
    def coordinator(self) -> Any:
        """The shard whose counters and stop are the run's."""
        return self.handles[0]

    def wait_ready(self) -> None:
        """Wait until every shard has started (restored), and note its lineage."""
        self.lineages = ray.get([s.restore_info.remote() for s in self.handles])

    def resync(self) -> None:
        """After a shard restarted from a checkpoint, roll every other shard back to that one."""
        if len(self.handles) == 1:
            return
        now: list[tuple[str, str | None]] = ray.get([s.restore_info.remote() for s in self.handles])
        moved = [k for k, info in enumerate(now) if info[0] != self.lineages[k][0]]
        if moved:
            checkpoint = now[moved[0]][1]
            again = [
                k for k in range(len(self.handles)) if k not in moved or now[k][1] != checkpoint
            ]
            lineages = ray.get([self.handles[k].reload.remote(checkpoint) for k in again])
            for k, lineage in zip(again, lineages, strict=True):
                now[k] = (lineage, checkpoint)
            log.warning(
                "ParameterServer shard %s restarted from %s; shards %s rolled back to it",
                ", ".join(map(str, moved)),
                checkpoint or "the initial weights",
                ", ".join(map(str, again)),
            )
        self.lineages = now

    def nodes(self) -> list[str]:
        """The Ray node of each shard, coordinator first; empty when they do not answer."""
        try:
            nodes: list[str] = ray.get([s.node_id.remote() for s in self.handles], timeout=30)
        except ray.exceptions.RayError:
            return []
        return nodes
