"""``a3c-ray scale RUN --workers N``: change the number of Workers of a live run.

The new number is handed to the run's ParameterServer; the run's driver, which owns the Workers,
reads it within a second and starts Workers in new slots (placed with the SPREAD strategy, so nodes
that joined the cluster get them) or tells the newest ones to stop at their next push.

More Workers than the cluster's free CPUs take are refused (exit 2) on a cluster without an
autoscaler, where they would wait for good; with one, the command says how many will wait for it.
"""

from __future__ import annotations

import argparse

from a3c_ray.commands import flags
from a3c_ray.errors import ConfigError
from a3c_ray.runtime import live


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags.add_run_argument(p, "the live run")
    p.add_argument(
        "--workers", type=int, required=True, help="the number of Workers the run should have"
    )
    p.add_argument(
        "--address", help="Ray cluster address (default: RAY_ADDRESS, else the local cluster)"
    )


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ConfigError([f"--workers must be >= 1, got {args.workers}"])
    run_id, before, waiting = live.set_workers(args.run, args.workers, args.address)
    was = "its current number" if before is None else str(before)
    print(
        f"{run_id}: asked for {args.workers} Workers (was {was}); the driver applies it within a second"
    )
    if waiting:
        print(f"{run_id}: {waiting}")
    return 0
