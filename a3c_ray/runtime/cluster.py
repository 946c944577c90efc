"""Connecting to Ray, said once: start an embedded Ray or attach to a cluster, find the Ray
instances on this machine, and read or steer the live runs on them through their named actors.

An embedded Ray (no ``--address``, no ``RAY_ADDRESS``) is started for this process alone, with its
dashboard on 127.0.0.1. Every run's actors are named ``<run-id>/ParameterServer``,
``<run-id>/Monitor`` and ``<run-id>/Worker-<i>`` in the ``a3c-ray`` namespace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, cast

import ray

from a3c_ray.algo.messages import Progress
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError, one_line
from a3c_ray.runtime.placement import autoscaler_cpus, central_cpus, free_cpus, waiting_line
from a3c_ray.runtime.remote import NAMESPACE

DEFAULT_DASHBOARD_PORT = 8265


def port_is_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def pick_dashboard_port(host: str, asked: int | None) -> int:
    """The port asked for; with none asked, 8265, or a free one when another Ray on this machine
    (a second run, a ``ray start`` cluster) holds 8265."""
    if asked is not None:
        return asked
    if port_is_free(host, DEFAULT_DASHBOARD_PORT):
        return DEFAULT_DASHBOARD_PORT
    return free_port(host)


def connect(
    cfg: Config,
    address: str | None,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
    num_cpus: int | None = None,
    log_to_driver: bool = True,
) -> bool:
    """Attach to a running cluster or start an embedded one; True when this call started Ray.

    The embedded Ray's dashboard is on ``dashboard_port``; with none given, on 8265 or, when that
    is taken, on a free port; the address goes to stderr either way. It has ``num_cpus`` logical
    CPUs, by default what the run's actors take. ``log_to_driver=False`` keeps its processes'
    output out of this one's (a report on stdout stays clean).
    """
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except (ConnectionError, ValueError) as e:
            raise ConfigError(
                [f"cannot attach to the Ray cluster at {address}: {one_line(e)}"]
            ) from None
        return False
    if dashboard_host not in ("127.0.0.1", "localhost", "::1"):
        warnings.warn(
            f"the Ray dashboard will listen on {dashboard_host}: anyone who can reach this machine "
            "and holds the auth token can submit jobs to it",
            stacklevel=2,
        )
    workers = cfg.run.workers or os.cpu_count() or 1
    cpus = num_cpus or math.ceil(workers * cfg.run.worker_cpus + central_cpus(cfg))
    # The node's services bind to loopback when ray was imported in single-machine mode (the CLI
    # sees to that); the dashboard binds to ``dashboard_host``.
    port = pick_dashboard_port(dashboard_host, dashboard_port)
    # The actors import what this process imports from its working directory too (an env given as
    # ``module:Class``): Ray's processes inherit this environment.
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if os.getcwd() not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *path])
    try:
        ray.init(
            address="local",  # a new instance, even when a `ray start` cluster runs on this machine
            num_cpus=cpus,
            include_dashboard=True,
            dashboard_host=dashboard_host,
            dashboard_port=port,
            logging_level=logging.WARNING,
            log_to_driver=log_to_driver,
            _node_ip_address="127.0.0.1",
        )
    except ValueError as e:  # e.g. the dashboard port asked for is taken
        ray.shutdown()
        hint = "" if dashboard_port is None else " (choose another --dashboard-port, or omit it)"
        raise ConfigError([f"cannot start Ray: {one_line(e)}{hint}"]) from None
    taken = dashboard_port is None and port != DEFAULT_DASHBOARD_PORT
    url = f"http://{'[' + dashboard_host + ']' if ':' in dashboard_host else dashboard_host}:{port}"
    print(
        f"a3c-ray: Ray dashboard at {url}"
        + (f" ({DEFAULT_DASHBOARD_PORT} is taken by another Ray on this machine)" if taken else ""),
        file=sys.stderr,
        flush=True,
    )
    return True


def connect_for(
    cfg: Config, max_workers: int, address: str | None, dashboard_port: int | None
) -> bool:
    """Start an embedded Ray as ``a3c-ray train`` would, or use the one this process already has.

    True when this call started Ray (and so must shut it down).
    """
    c = Config.from_dict(cfg.to_dict())
    c.run.workers = max_workers
    started = connect(c, address, dashboard_port=dashboard_port)
    need = max_workers * cfg.run.worker_cpus + central_cpus(cfg)
    have = ray.cluster_resources().get("CPU", 0.0)
    if have + 1e-9 < need:
        if started:
            ray.shutdown()
        raise ConfigError(
            [
                f"the Ray cluster has {have:g} CPUs; {max_workers} Workers, the ParameterServer "
                f"and the Monitor need {need:g}"
            ]
        )
    return started


@contextlib.contextmanager
def session(
    cfg: Config, max_workers: int, address: str | None, dashboard_port: int | None
) -> Iterator[None]:
    """A Ray for ``max_workers`` Workers of ``cfg`` for the ``with`` block; one this process started
    is shut down at its end."""
    started = connect_for(cfg, max_workers, address, dashboard_port)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def ray_version() -> str:
    return str(ray.__version__)


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
