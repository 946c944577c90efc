"""``a3c-ray scale RUN --workers N``: change the number of Workers of a live run.

The new number is handed to the run's ParameterServer; the run's driver, which owns the Workers,
reads it within a second and starts Workers in new slots (placed with the SPREAD strategy, so nodes
that joined the cluster get them) or tells the newest ones to stop at their next push.
"""

from __future__ import annotations

import argparse
from typing import Any, cast

import ray

from a3c_ray.commands.status import attach, detach, each_cluster, live_runs
from a3c_ray.config import ConfigError
from a3c_ray.runtime.remote import NAMESPACE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run", help="the run's id, or a prefix of it that names one live run (see a3c-ray status)"
    )
    p.add_argument(
        "--workers", type=int, required=True, help="the number of Workers the run should have"
    )
    p.add_argument(
        "--address", help="Ray cluster address (default: RAY_ADDRESS, else the local cluster)"
    )


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ConfigError([f"--workers must be >= 1, got {args.workers}"])
    found = {
        cluster: [r for r, roles in live_runs(args.run).items() if "ParameterServer" in roles]
        for cluster in each_cluster(args.address)
    }
    runs = [(cluster, run) for cluster, names in found.items() for run in names]
    if len(runs) != 1:
        named = ", ".join(run for _, run in runs) if runs else "none"
        raise ConfigError([f"'{args.run}' must name exactly one live run (found: {named})"])
    cluster, run_id = runs[0]
    started = attach(cluster) if not ray.is_initialized() else False
    try:
        ps = ray.get_actor(f"{run_id}/ParameterServer", namespace=NAMESPACE)
        progress = cast(dict[str, Any], ray.get(ps.progress.remote()))
        before = progress["desired_workers"]
        ray.get(ps.set_workers.remote(args.workers))
    finally:
        detach(started)
    was = "its current number" if before is None else str(before)
    print(
        f"{run_id}: asked for {args.workers} Workers (was {was}); the driver applies it within a second"
    )
    return 0
