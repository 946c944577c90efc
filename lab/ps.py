"""``python -m lab ps``: the ParameterServer alone at scale, its shards, wires and transports.

Synthetic clients push prepared gradients of the config's model size (no env, no backward) to the
ParameterServer's shard actors, keeping 1, 8, 32 or 128 pushes in flight, for each number of
shards, each wire dtype and each transport asked for (``call``: one actor call per push;
``graph``: a compiled graph per push in flight, as ``ps.graph_workers`` gives Workers on a shard's
node). Each row gives the gradient applications per second, the CPU the shard's process spends
per push (Ray's threads in it too), and the round trip of one push (median and 90th percentile). One Worker of the config, trained for
``--seconds``, gives its push rate; the model then says how many such Workers each ParameterServer
carries before it saturates.

On one machine S shards share its cores. For S > 1 the bench also measures shard 0 *alone*, fed
its slice only: what each shard applies when it has a node to itself, so what S shards on S
nodes apply together (each push reaches every shard; the slowest one sets the pace).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
from typing import Any

from a3c_ray.algo.wire import WIRE_DTYPES
from a3c_ray.bench import ps_server as pm
from a3c_ray.bench import throughput as bm
from a3c_ray.config import Config
from a3c_ray.runtime import cluster

IN_FLIGHT = [1, 8, 32, 128]
BEST_KEYS = ("transport", "shards", "wire_dtype", "in_flight")


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected counts like 1,2,4, got '{text}'") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected counts >= 1, got '{text}'")
    return values


def _dtypes(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in WIRE_DTYPES]
    if not values or bad:
        raise argparse.ArgumentTypeError(
            f"expected wire dtypes among {', '.join(WIRE_DTYPES)}, got '{text}'"
        )
    return values


TRANSPORTS = ("call", "graph")


def _transports(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values or any(v not in TRANSPORTS for v in values):
        raise argparse.ArgumentTypeError(
            f"expected transports among {', '.join(TRANSPORTS)}, got '{text}'"
        )
    return values


def add_arguments(g: argparse.ArgumentParser) -> None:
    """The flags of ``bench ps`` beyond the config and the times it shares with the others."""
    g.add_argument(
        "--shards",
        type=_ints,
        default=[1, 2, 4],
        metavar="S,S,...",
        help="numbers of ParameterServer shards",
    )
    g.add_argument(
        "--wire",
        type=_dtypes,
        default=["float32", "bfloat16"],
        metavar="DTYPE,...",
        help="wire dtypes",
    )
    g.add_argument(
        "--transport",
        type=_transports,
        default=list(TRANSPORTS),
        metavar="T,...",
        help="call (one actor call per push) and/or graph (a compiled graph per push in flight, "
        "up to 32)",
    )
    g.add_argument(
        "--pushes-in-flight",
        type=_ints,
        default=IN_FLIGHT,
        metavar="N,N,...",
        help="pushes kept in flight by the clients together",
    )
    g.add_argument("--clients", type=int, default=2, help="synthetic client actors")


def ps_scale(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    """Every (shards, wire dtype, pushes in flight), ``args.repeat`` times: medians and every run."""
    load_before = os.getloadavg()[0]
    rows: dict[tuple[str, int, str, bool, int], list[dict[str, Any]]] = {}
    with cluster.session(cfg, 1, args.address, args.dashboard_port, args.dashboard_host):
        worker = bm.train_throughput(cfg, 1, args.seconds)["per_worker"][0]
        for _ in range(args.repeat):
            for shards in args.shards:
                for dtype in args.wire:
                    c = copy.deepcopy(cfg)
                    c.ps.shards, c.ps.wire_dtype = shards, dtype
                    for alone in (False, True) if shards > 1 else (False,):
                        for transport in args.transport:
                            for r in pm.ps_load(
                                c,
                                args.ps_seconds,
                                args.pushes_in_flight,
                                args.clients,
                                alone,
                                transport == "graph",
                            ):
                                key = (transport, shards, dtype, alone, r["in_flight"])
                                rows.setdefault(key, []).append(r)
    pushes = worker["pushes_per_second"]
    table = []
    for runs in rows.values():
        ordered = sorted(runs, key=lambda r: r["applications_per_second"])
        row = dict(ordered[(len(ordered) - 1) // 2])
        row["runs"] = [r["applications_per_second"] for r in runs]
        row["workers_before_saturation"] = row["applications_per_second"] / pushes
        row["us_per_application"] = 1e6 / row["applications_per_second"]
        table.append(row)
    here = [r for r in table if not r["alone"]]
    best = max(here, key=lambda r: r["applications_per_second"])
    nodes = max(table, key=lambda r: r["applications_per_second"])
    return {
        "env": cfg.env.id,
        "params": bm.model_size(cfg),
        "steps_per_push": cfg.algo.t_max * cfg.env.num_envs,
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg()[0],
        "repeat": args.repeat,
        "seconds_per_row": args.ps_seconds,
        "clients": args.clients,
        "worker_pushes_per_second": pushes,
        "worker_busy_ms_per_push": 1e3 * worker["busy_seconds_per_push"],
        "rows": table,
        "best": {k: best[k] for k in BEST_KEYS},
        "best_applications_per_second": best["applications_per_second"],
        "workers_before_saturation": best["workers_before_saturation"],
        "best_on_own_nodes": {k: nodes[k] for k in BEST_KEYS},
        "best_on_own_nodes_applications_per_second": nodes["applications_per_second"],
        "workers_before_saturation_on_own_nodes": nodes["workers_before_saturation"],
        "median_applications_per_second": statistics.median(
            r["applications_per_second"] for r in table
        ),
    }


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"python -m lab ps: {r['env']}, {r['params']:,} parameters, {r['cpus']} CPUs; "
        f"load average {r['loadavg_before']:.1f} before, {r['loadavg_after']:.1f} after; "
        f"medians of {r['repeat']} run(s) of {r['seconds_per_row']:g} s, {r['clients']} clients",
        f"one Worker of this config pushes {r['worker_pushes_per_second']:.1f}/s "
        f"(busy {r['worker_busy_ms_per_push']:.1f} ms per push)",
        "",
        "transport  shards  placement            wire      in flight  applications/s  "
        "server CPU us/push  round trip ms (median/p90)  Workers carried",
    ]
    for row in r["rows"]:
        where = "shard 0 alone" if row["alone"] else "all on this machine"
        lines.append(
            f"{row['transport']:<9}  {row['shards']:>6}  {where:<19}  {row['wire_dtype']:<8}  "
            f"{row['in_flight']:>9}  {row['applications_per_second']:>14,.0f}  "
            f"{row['ps_cpu_us_per_application']:>18,.0f}  "
            f"{row['latency_ms_median']:>13.2f} / {row['latency_ms_p90']:<10.2f}  "
            f"{row['workers_before_saturation']:>15.1f}"
        )
    b = r["best"]
    lines += [
        "",
        f"best: {r['best_applications_per_second']:,.0f} applications/s by {b['transport']}, "
        f"{b['shards']} shard(s), {b['wire_dtype']} on the wire, {b['in_flight']} in flight: "
        "the ParameterServer carries "
        f"{r['workers_before_saturation']:.1f} Workers of this config before it saturates",
    ]
    n = r["best_on_own_nodes"]
    if n != b:
        lines.append(
            f"with a node per shard: {r['best_on_own_nodes_applications_per_second']:,.0f} "
            f"applications/s by {n['transport']}, {n['shards']} shards, {n['wire_dtype']}, "
            f"{n['in_flight']} in flight: {r['workers_before_saturation_on_own_nodes']:.1f} Workers"
        )
    return "\n".join(lines)


def run_ps_scale(cfg: Config, args: argparse.Namespace) -> int:
    report = ps_scale(cfg, args)
    print(json.dumps(report) if args.json else format_table(report))
    return 0
