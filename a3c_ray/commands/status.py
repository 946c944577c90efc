"""``a3c-ray status``: the live runs on a cluster, read from their named actors.

Every run's actors are named ``<run-id>/ParameterServer``, ``<run-id>/Monitor`` and
``<run-id>/Worker-<i>`` in the ``a3c-ray`` namespace. Progress comes from the ParameterServer
(sampled twice, ``--interval`` seconds apart, for live rates), the last evaluation from the Monitor,
and each Worker's state and node from Ray's state API.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from a3c_ray.runtime import cluster, live


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", help="Ray cluster address (default: RAY_ADDRESS, else the local cluster)"
    )
    p.add_argument(
        "--run",
        help="show only this run: its run directory (or that directory's name), its id, or the "
        "start of its id",
    )
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
    records = []
    for address in cluster.each_cluster(args.address):
        records += [{**r, "cluster": address} for r in live.collect(args.run, args.interval)]
    if args.json:
        print(json.dumps(records, default=float))
    else:
        print(render(records))
    return 0
