"""``a3c-ray status``: the live runs on a cluster, read from their named actors.

Every run's actors are named ``<run-id>/ParameterServer``, ``<run-id>/Monitor`` and
``<run-id>/Worker-<i>`` in the ``a3c-ray`` namespace. Progress comes from the ParameterServer
(sampled twice, ``--interval`` seconds apart, for live rates), the last evaluation from the Monitor,
and each Worker's state and node from Ray's state API.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import ray

from a3c_ray.config import ConfigError
from a3c_ray.runtime.remote import NAMESPACE

CALL_TIMEOUT = 10.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", help="Ray cluster address (default: RAY_ADDRESS, else the local cluster)"
    )
    p.add_argument("--run", help="show only runs whose id starts with this")
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between the two samples of the rates"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def live_runs(prefix: str | None = None) -> dict[str, dict[str, str]]:
    """Run id -> {role: actor name} for every named a3c-ray actor on the cluster."""
    runs: dict[str, dict[str, str]] = defaultdict(dict)
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or "/" not in entry["name"]:
            continue
        run, role = entry["name"].split("/", 1)
        if prefix is None or run.startswith(prefix):
            runs[run][role] = entry["name"]
    return dict(runs)


def _get(ref: Any) -> Any:
    try:
        return ray.get(ref, timeout=CALL_TIMEOUT)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
        return None


def worker_states(run: str) -> list[dict[str, Any]]:
    """State and node of each of the run's Worker actors, from Ray's state API (newest first per slot)."""
    from ray.util.state import list_actors

    rows: dict[str, dict[str, Any]] = {}
    gcs = ray.get_runtime_context().gcs_address  # this cluster, not any other on the machine
    for a in list_actors(
        address=gcs, filters=[("class_name", "=", "Worker")], detail=True, limit=10_000
    ):
        name = a.name or ""
        if a.ray_namespace == NAMESPACE and name.startswith(run + "/"):
            slot = name.split("/", 1)[1]
            # A replaced Worker leaves a DEAD actor of the same name: the live one wins.
            if slot not in rows or rows[slot]["state"] == "DEAD":
                rows[slot] = {"worker": slot, "state": a.state, "node_id": a.node_id}
    return sorted(rows.values(), key=lambda r: int(r["worker"].rsplit("-", 1)[-1]))


def collect(prefix: str | None = None, interval: float = 1.0) -> list[dict[str, Any]]:
    """One record per live run: progress, live rates, last eval and Workers."""
    runs = live_runs(prefix)
    handles = {
        run: ray.get_actor(roles["ParameterServer"], namespace=NAMESPACE)
        for run, roles in runs.items()
        if "ParameterServer" in roles
    }
    first = {run: _get(h.progress.remote()) for run, h in handles.items()}
    t0 = time.monotonic()
    time.sleep(interval)
    out: list[dict[str, Any]] = []
    for run, h in handles.items():
        second = _get(h.progress.remote())
        if second is None:
            continue
        dt = time.monotonic() - t0
        before = first.get(run) or second
        monitor = None
        if "Monitor" in runs[run]:
            monitor = _get(ray.get_actor(runs[run]["Monitor"], namespace=NAMESPACE).report.remote())
        out.append(
            {
                "run": run,
                "env_steps": second["env_steps"],
                "sps": (second["env_steps"] - before["env_steps"]) / dt,
                "updates_per_second": (second["gradients_applied"] - before["gradients_applied"])
                / dt,
                "version": second["version"],
                "staleness_mean": second["staleness_mean"],
                "staleness_max": second["staleness_max"],
                "mean_return_100": second["mean_return_100"],
                "last_eval_return": (monitor or {}).get("last_eval_return"),
                "stop_reason": second["stop_reason"],
                "ps_restarts": second["ps_restarts"],
                "workers": worker_states(run),
            }
        )
    return out


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
            + (f" | stopping: {r['stop_reason']}" if r["stop_reason"] else "")
        )
        for w in r["workers"]:
            lines.append(f"  {w['worker']:<10} {w['state']:<11} node {w['node_id']}")
    return "\n".join(lines)


PROBE_TIMEOUT = 2.0


def local_clusters() -> list[str]:
    """The GCS address of every Ray instance on this machine: `ray start` clusters and the
    embedded Rays of `a3c-ray train`, found from their raylet processes as `ray status` does."""
    try:
        from ray._private.services import find_gcs_addresses
    except ImportError:  # a Ray without it: let ray.init's own "auto" look
        return ["auto"]
    return sorted(find_gcs_addresses())


def answers(address: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """True when something accepts a TCP connection at ``host:port`` within ``timeout`` seconds
    (anything else, e.g. ray:// or auto, is left to ray.init)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return True
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError:
        return False
    return True


def targets(address: str | None) -> list[str]:
    """The clusters to look at: the one asked for, else every Ray instance on this machine."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    found = [address] if address and address != "auto" else local_clusters()
    if not found:
        raise ConfigError(
            ["no Ray instance runs on this machine; pass --address HOST:PORT of a cluster"]
        )
    live = [a for a in found if answers(a)]
    if not live:
        raise ConfigError(
            [f"no Ray cluster answers at {', '.join(found)} (within {PROBE_TIMEOUT:g} s)"]
        )
    return live


def attach(address: str | None) -> bool:
    """Connect this process to the cluster at ``address`` unless it already is connected; True
    when this call connected. Fails within seconds, with one line, when nothing answers there."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    if not answers(address):
        raise ConfigError([f"no Ray cluster answers at {address} (within {PROBE_TIMEOUT:g} s)"])
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(
            [f"cannot reach a Ray cluster at {address}: {str(e).splitlines()[0]}"]
        ) from None
    return True


def detach(started: bool) -> None:
    if started:
        ray.shutdown()


def each_cluster(address: str | None) -> Iterator[str]:
    """Attach to each target cluster in turn (or stay on the one this process is connected to),
    yielding its address while attached."""
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    for target in targets(address):
        started = attach(target)
        try:
            yield target
        finally:
            detach(started)


def run(args: argparse.Namespace) -> int:
    records = []
    for cluster in each_cluster(args.address):
        records += [{**r, "cluster": cluster} for r in collect(args.run, args.interval)]
    if args.json:
        print(json.dumps(records, default=float))
    else:
        print(render(records))
    return 0
