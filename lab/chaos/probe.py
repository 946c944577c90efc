"""What the chaos soak reads of a live local cluster, apart from the run's own progress: which
node hosts which Worker, and each actor's resident memory.

The memory of an actor process comes from two places: its RSS from the per-actor process stats
that the dashboard's agents gather on every node (what the dashboard's Actors page shows), its
anonymous part from ``/proc`` on this machine (a local cluster's nodes are this machine's
processes).
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from typing import Any

import ray

from a3c_ray.runtime.jobs import auth_headers
from a3c_ray.runtime.remote import NAMESPACE
from lab.local_cluster import LocalCluster


def attach(address: str) -> None:
    """Connect this process to the local cluster at ``address`` as a driver on its head."""
    # local.sh's clusters want the token, which Ray sends in token mode only; Ray reads the mode
    # once, when it is imported (``python -m lab chaos`` sets it before).
    if os.environ.get("RAY_AUTH_MODE") != "token":
        raise RuntimeError(
            "attaching to a local.sh cluster needs RAY_AUTH_MODE=token before Ray is imported"
        )
    host = address.rsplit(":", 1)[0]
    ray.init(
        address=address, _node_ip_address=host, logging_level=logging.WARNING, log_to_driver=False
    )


def worker_hosts(run: str) -> dict[int, list[int]]:
    """Worker node index (1, 2, ... for 127.0.0.11, .12, ...) -> the run's Worker slots on it."""
    from ray.util.state import list_actors, list_nodes

    gcs = ray.get_runtime_context().gcs_address
    ips = {n.node_id: n.node_ip for n in list_nodes(address=gcs, filters=[("state", "=", "ALIVE")])}
    hosts: dict[int, list[int]] = {}
    for a in list_actors(
        address=gcs, filters=[("class_name", "=", "Worker"), ("state", "=", "ALIVE")], limit=10_000
    ):
        name = a.name or ""
        ip = ips.get(a.node_id or "", "")
        if a.ray_namespace == NAMESPACE and name.startswith(run + "/Worker-") and ip:
            index = int(ip.rsplit(".", 1)[1]) - 10
            if index >= 1:
                hosts.setdefault(index, []).append(int(name.rsplit("-", 1)[1]))
    return hosts


def actor_memory(cluster: LocalCluster, run: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The resident memory of each live actor of ``run``, and Ray's restarts of each: the actors
    and their processes from the state API, each process's RSS from the dashboard's per-actor
    process stats (gathered by the agent of every node, refreshed every few seconds), its
    anonymous part (``anon``) from ``/proc``."""
    from ray.util.state import list_actors

    gcs = ray.get_runtime_context().gcs_address
    actors = {
        a.actor_id: a
        for a in list_actors(
            address=gcs,
            filters=[("ray_namespace", "=", NAMESPACE), ("state", "=", "ALIVE")],
            detail=True,
            limit=10_000,
        )
        if (a.name or "").startswith(run + "/")
    }
    restarts = {role(a.name): int(a.num_restarts or 0) for a in actors.values()}
    if not actors:
        return [], restarts
    request = urllib.request.Request(
        f"{cluster.dashboard}/logical/actors?ids={','.join(actors)}", headers=auth_headers()
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        infos = json.load(r)["data"]["actors"]
    rows = []
    now = time.time()
    for actor_id, info in infos.items():
        stats = (info or {}).get("processStats") or {}
        rss = (stats.get("memoryInfo") or {}).get("rss")
        a = actors.get(actor_id)
        if rss is None or a is None or stats.get("pid") != a.pid:
            continue  # not sampled by its node's agent yet (a new process)
        created = stats.get("createTime")
        age = None
        if created:
            created = created / 1000 if created > 1e11 else created  # ms or s since the epoch
            age = round(now - created, 1)
        pid = int(a.pid or 0)
        row: dict[str, Any] = {"actor": role(a.name), "pid": pid, "rss": int(rss), "age": age}
        anon = anonymous_rss(pid)
        if anon is not None:
            row["anon"] = anon
        rows.append(row)
    return rows, restarts


def anonymous_rss(pid: int) -> int | None:
    """The resident anonymous memory of a process of this machine (``RssAnon`` of
    /proc/PID/status, in bytes): its heap, stacks and anonymous maps, what a leak grows. RSS
    adds the pages it maps from files and shared memory: the libraries' code, and the object
    store's pages it has read, which grow with what it reads, not with what it keeps. None where
    the process is gone or not on this machine."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def role(name: str | None) -> str:
    """An actor's name in its run: ``<run-id>/Worker-1`` -> ``Worker-1``."""
    return (name or "").split("/", 1)[-1]
