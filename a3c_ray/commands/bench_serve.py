"""``a3c-ray bench serve``: the serving load test (``a3c_ray.bench.serving``), its flags and its
table. docs/serving.md holds the figures of this machine."""

from __future__ import annotations

import argparse
import json
from typing import Any

from a3c_ray.errors import ConfigError

GOALS = (
    "goals on a 2-core machine: CartPole >= 1,000 requests/s with p99 <= 20 ms at 32 clients; "
    "Pong >= 300 observations/s"
)


def _names(text: str) -> list[str]:
    from a3c_ray.bench.serving import MODELS

    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in MODELS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected models among {', '.join(MODELS)}, got '{text}'")
    return names


def _ingresses(text: str) -> list[str]:
    from a3c_ray.serve.serve_ingress import INGRESS_ENV

    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(n not in INGRESS_ENV for n in names):
        raise argparse.ArgumentTypeError(
            f"expected ingresses among {', '.join(INGRESS_ENV)}, got '{text}'"
        )
    return names


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected client counts like 1,8,32, got '{text}'"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected client counts >= 1, got '{text}'")
    return counts


def add_arguments(g: argparse.ArgumentParser) -> None:
    """The flags of ``bench serve``; each lands in ``args`` as ``serve_<name>``."""
    g.add_argument(
        "--models",
        dest="serve_models",
        type=_names,
        default=["cartpole", "pong"],
        metavar="M,M",
        help="cartpole (the MLP) and/or pong (the paper's CNN)",
    )
    g.add_argument(
        "--clients",
        dest="serve_clients",
        type=_counts,
        default=[1, 8, 32],
        metavar="N,N,...",
        help="concurrent clients, each one request at a time",
    )
    g.add_argument(
        "--ingress",
        dest="serve_ingress",
        type=_ingresses,
        default=["proxy", "haproxy"],
        metavar="I,I",
        help="proxy (Serve's HTTP proxy) and/or haproxy (Ray's high-throughput mode), each on "
        "its own embedded Ray",
    )
    g.add_argument(
        "--batch-wait-ms",
        dest="serve_batch_wait_ms",
        type=float,
        default=2.0,
        help="the batched mode's --batch-wait-ms",
    )
    g.add_argument(
        "--seconds",
        dest="serve_seconds",
        type=float,
        default=5.0,
        help="seconds of each point, after 1 s of warm-up",
    )
    g.add_argument(
        "--requests",
        dest="serve_requests",
        type=int,
        default=50_000,
        help="requests of each point at most",
    )


def run(args: argparse.Namespace) -> int:
    problems = []
    if not args.serve_seconds > 0:
        problems.append("--seconds: must be > 0")
    if args.serve_batch_wait_ms < 0:
        problems.append("--batch-wait-ms: must be >= 0")
    if args.serve_requests < 1:
        problems.append("--requests: must be >= 1")
    if args.repeat < 1:
        problems.append("--repeat: must be >= 1")
    if args.address and args.serve_ingress != ["proxy"]:
        problems.append(
            "--ingress haproxy needs an embedded Ray; with --address, pass --ingress proxy "
            "(a cluster's nodes take the ingress they were started with)"
        )
    if problems:
        raise ConfigError(problems)
    from a3c_ray.bench import serving

    report = serving.serve_load(
        args.serve_models,
        args.serve_clients,
        args.serve_ingress,
        args.serve_batch_wait_ms,
        args.serve_seconds,
        args.serve_requests,
        args.repeat,
        args.address,
        args.dashboard_port,
        args.dashboard_host,
    )
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def cpu_limit(point: dict[str, Any], cpus: int) -> float:
    """Requests/s that ``cpus`` idle cores would carry at the CPU this point spent per request
    (ingress, replica, controller and the clients together): the ceiling the CPU sets."""
    total = sum(point["server_cpu_ms_per_request"].values()) + point["client_cpu_ms_per_request"]
    return 1e3 * cpus / total if total > 0 else float("nan")


def format_report(report: dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    lines = [
        f"a3c-ray serve under load: {m['cpus']} CPUs, load average {m['loadavg_before']:.2f} "
        f"before and {m['loadavg_after']:.2f} after; {s['seconds']:g} s per point, "
        f"median of {s['repeat']}; batched = up to {s['modes']['batched']} requests per forward "
        f"pass, waiting {s['batch_wait_ms']:g} ms",
        "",
        "| ingress | model | mode | clients | requests/s | observations/s | p50 ms | p99 ms "
        "| errors | CPU ms/request: ingress, replica, clients | CPU limit requests/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for p in report["points"]:
        cpu = p["server_cpu_ms_per_request"]
        lines.append(
            f"| {p['ingress']} | {p['model']} | {p['mode']} | {p['clients']} | {p['requests_per_second']:,.0f} | "
            f"{p['observations_per_second']:,.0f} | {p['p50_ms']:.1f} | {p['p99_ms']:.1f} | "
            f"{p['errors']} | {cpu.get('proxy', float('nan')):.2f}, "
            f"{cpu.get('replica', float('nan')):.2f}, {p['client_cpu_ms_per_request']:.2f} | "
            f"{cpu_limit(p, m['cpus']):,.0f} |"
        )
    lines += ["", "Where a request's time goes, measured alone in one process (ms):", ""]
    ingresses = s["ingresses"]
    lines += [
        "| model | request I/O (parse + JSON answer) | forward, 1 obs | forward, 32 obs | "
        + " | ".join(f"/healthz requests/s, {i}" for i in ingresses)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(ingresses),
    ]
    for model, c in report["costs"].items():
        ceilings = " | ".join(
            f"{c.get(f'healthz_requests_per_second_{i}', float('nan')):,.0f}" for i in ingresses
        )
        lines.append(
            f"| {model} | {c['request_io_ms']:.3f} | {c['forward_1_ms']:.3f} | "
            f"{c['forward_32_ms']:.3f} | {ceilings} |"
        )
    lines += [
        "",
        "CPU limit: the requests/s this machine's cores would carry, idle, at the CPU each "
        "request took here (every Serve process and the clients together).",
        GOALS,
    ]
    return "\n".join(lines)
