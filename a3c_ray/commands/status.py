"""``a3c-ray status [RUN]``: the live runs on a cluster, read from their named actors.

Every run's actors are named ``<run-id>/ParameterServer``, ``<run-id>/Monitor`` and
``<run-id>/Worker-<i>`` in the ``a3c-ray`` namespace. Progress comes from the ParameterServer
(sampled twice, ``--interval`` seconds apart, for live rates), the last evaluation from the Monitor,
and each Worker's state and node from Ray's state API.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from a3c_ray.commands import flags
from a3c_ray.errors import UsageError
from a3c_ray.runtime import cluster, live


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", help="Ray cluster address (default: RAY_ADDRESS, else the local cluster)"
    )
    flags.add_run_argument(p, "show only this run", optional=True)
    # The run was once named by --run; it still works, unlisted.
    p.add_argument("--run", dest="run_flag", help=argparse.SUPPRESS)
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between the two samples of the rates"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def render(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no live a3c-ray runs"
    lines = []
    for r in records:
        ev = r["last_eval_return"]
        lines.append(
            f"{r['run']}: {r['env_steps']:,} env steps | {r['sps']:,.0f} steps/s | "
            f"{r['updates_per_second']:,.1f} updates/s | version {r['version']:,} | "
            f"staleness {r['staleness_mean']:.2f} (max {r['staleness_max']}) | "
            f"return(100) {r['mean_return_100']:.1f} | eval {'-' if ev is None else f'{ev:.1f}'}"
            + (f" | {r['ps_shards']} ParameterServer shards" if r.get("ps_shards", 1) > 1 else "")
            + (f" | stopping: {r['stop_reason']}" if r["stop_reason"] else "")
        )
        for w in r["workers"]:
            where = f"({w['reason']})" if w.get("reason") else f"node {w['node_id']}"
            lines.append(f"  {w['worker']:<10} {w['state']:<11} {where}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.run_flag is not None and args.run is not None:
        raise UsageError("a3c-ray status: give the run once (RUN, or the older --run RUN)")
    name = args.run if args.run is not None else args.run_flag
    records = []
    for address in cluster.each_cluster(args.address):
        records += [{**r, "cluster": address} for r in live.collect(name, args.interval)]
    if args.json:
        print(json.dumps(records, default=float))
    else:
        print(render(records))
    return 0
