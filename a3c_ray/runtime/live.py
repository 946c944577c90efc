"""The live runs on a cluster, read and steered through their named actors: which runs there are,
their progress and Workers (``a3c-ray status``), and a new number of Workers (``a3c-ray scale``).

Every run's actors are named ``<run-id>/ParameterServer``, ``<run-id>/Monitor`` and
``<run-id>/Worker-<i>`` in the ``a3c-ray`` namespace.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from typing import Any, cast

import ray

from a3c_ray.algo.messages import Progress
from a3c_ray.errors import ConfigError
from a3c_ray.runtime.cluster import attach, detach, each_cluster
from a3c_ray.runtime.placement import autoscaler_cpus, free_cpus, waiting_line
from a3c_ray.runtime.remote import NAMESPACE

CALL_TIMEOUT = 10.0


def live_runs(query: str | None = None) -> dict[str, dict[str, str]]:
    """Run id -> {role: actor name} for every named a3c-ray actor on the cluster, or for the runs
    ``query`` names (``run_filter``)."""
    runs: dict[str, dict[str, str]] = defaultdict(dict)
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or "/" not in entry["name"]:
            continue
        run, role = entry["name"].split("/", 1)
        runs[run][role] = entry["name"]
    keep = run_filter(query, list(runs))
    return {run: roles for run, roles in runs.items() if run in keep}


def run_filter(query: str | None, run_ids: list[str]) -> list[str]:
    """The runs ``query`` names, from what a user knows of a run: its id, its run directory (a
    path or a URI) or that directory's name, or the start of an id. A run's id is its run
    directory's name and 6 hex digits (``runs/cp`` -> ``cp-1a2b3c``). The first of these that
    matches any run wins, so ``cp`` names ``cp-1a2b3c`` and not ``cp2-4d5e6f``."""
    if query is None:
        return run_ids
    name = query.rstrip("/").rsplit("/", 1)[-1]
    for matches in (
        lambda r: r == query,
        lambda r: r.rsplit("-", 1)[0] == name,
        lambda r: r.startswith(query),
    ):
        found = [r for r in run_ids if matches(r)]
        if found:
            return found
    return []


def _get(ref: Any) -> Any:
    try:
        return ray.get(ref, timeout=CALL_TIMEOUT)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
        return None


def _progress(value: Any) -> Progress | None:
    """A ParameterServer's progress; a run of an older a3c-ray answers with a plain dict."""
    if isinstance(value, dict):
        known = {f.name for f in dataclasses.fields(Progress)}
        try:
            return Progress(**{k: v for k, v in value.items() if k in known})
        except TypeError:
            return None
    return cast(Progress | None, value)


PENDING = ("DEPENDENCIES_UNREADY", "PENDING_CREATION")
"""Ray's actor states of a Worker that has not started: waiting for resources to be placed."""


def worker_states(run: str) -> list[dict[str, Any]]:
    """State, node and CPUs of each of the run's Worker actors, from Ray's state API (newest first
    per slot); a Worker still waiting to be placed says why."""
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
                cpus = float((a.required_resources or {}).get("CPU", 0.0))
                rows[slot] = {"worker": slot, "state": a.state, "node_id": a.node_id, "cpus": cpus}
    waiting = [r for r in rows.values() if r["state"] in PENDING]
    if waiting:
        free, scale_to = free_cpus(), autoscaler_cpus()
        asked = sum(r["cpus"] for r in waiting)
        for r in waiting:
            r["reason"] = (
                f"waiting for {r['cpus']:g} CPU: {free:g} free, {asked:g} asked by "
                f"{len(waiting)} waiting Worker{'s' if len(waiting) > 1 else ''}"
                + (
                    f"; the autoscaler may add nodes (up to {scale_to:g} CPUs)"
                    if scale_to
                    else "; no autoscaler"
                )
            )
    return sorted(rows.values(), key=lambda r: int(r["worker"].rsplit("-", 1)[-1]))


def collect(query: str | None = None, interval: float = 1.0) -> list[dict[str, Any]]:
    """One record per live run (those ``query`` names): progress, live rates, last eval, Workers."""
    runs = live_runs(query)
    handles = {
        run: ray.get_actor(roles["ParameterServer"], namespace=NAMESPACE)
        for run, roles in runs.items()
        if "ParameterServer" in roles
    }
    first = {run: _progress(_get(h.progress.remote())) for run, h in handles.items()}
    t0 = time.monotonic()
    time.sleep(interval)
    out: list[dict[str, Any]] = []
    for run, h in handles.items():
        second = _progress(_get(h.progress.remote()))
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
                "env_steps": second.env_steps,
                "sps": (second.env_steps - before.env_steps) / dt,
                "updates_per_second": (second.gradients_applied - before.gradients_applied) / dt,
                "version": second.version,
                "staleness_mean": second.staleness_mean,
                "staleness_max": second.staleness_max,
                "mean_return_100": second.mean_return_100,
                "last_eval_return": (monitor or {}).get("last_eval_return"),
                "stop_reason": second.stop_reason,
                "ps_restarts": second.ps_restarts,
                "ps_shards": sum(role.startswith("ParameterServer") for role in runs[run]),
                "workers": worker_states(run),
            }
        )
    return out


def set_workers(run: str, workers: int, address: str | None) -> tuple[str, int | None, str | None]:
    """Ask the one live run that ``run`` names (``run_filter``) for ``workers`` Workers; its id, the
    number it wanted before (None: one per CPU), and a line when the new Workers will wait for
    CPUs an autoscaler may add. The run's driver applies it within a second.

    On a cluster without an autoscaler, more Workers than its free CPUs take are refused."""
    found = {
        cluster: [r for r, roles in live_runs(run).items() if "ParameterServer" in roles]
        for cluster in each_cluster(address)
    }
    runs = [(cluster, r) for cluster, names in found.items() for r in names]
    if len(runs) != 1:
        named = ", ".join(r for _, r in runs) if runs else "none"
        raise ConfigError([f"'{run}' must name exactly one live run (found: {named})"])
    cluster, run_id = runs[0]
    started = attach(cluster) if not ray.is_initialized() else False
    try:
        note = _capacity_for(run_id, workers)
        ps = ray.get_actor(f"{run_id}/ParameterServer", namespace=NAMESPACE)
        progress = cast(Progress, ray.get(ps.progress.remote()))
        before = progress.desired_workers
        ray.get(ps.set_workers.remote(workers))
    finally:
        detach(started)
    return run_id, before, note


def _capacity_for(run_id: str, workers: int) -> str | None:
    """None when ``workers`` Workers of the run fit in the cluster now; a line when the extra
    ones will wait for an autoscaler; ConfigError when they would wait for good."""
    live = [w for w in worker_states(run_id) if w["state"] != "DEAD"]
    more = workers - len(live)
    if more <= 0:
        return None
    placed = [w for w in live if w["state"] not in PENDING]
    cpus = max((w["cpus"] for w in live), default=1.0) or 1.0
    waiting = workers - len(placed)  # the new Workers and those still waiting for a CPU
    asked, free = waiting * cpus, free_cpus()
    if asked <= free + 1e-9:
        return None
    fit = int((free + 1e-9) // cpus)
    scale_to = autoscaler_cpus()
    if not scale_to:
        raise ConfigError(
            [
                f"{run_id}: {waiting} Worker{'s' if waiting > 1 else ''} would wait for "
                f"{asked:g} CPUs with {free:g} free, on a cluster without an autoscaler; "
                f"ask for at most {len(placed) + fit}"
            ]
        )
    return waiting_line(waiting - fit, asked, free, scale_to)
