"""Connecting to Ray, said once: start an embedded Ray or attach to a cluster, and find the Ray
instances on this machine (``runtime.live`` reads and steers the runs on them).

An embedded Ray (no ``--address``, no ``RAY_ADDRESS``) is started for this process alone, with its
dashboard on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import warnings
from collections.abc import Iterator

import ray

from a3c_ray.config import Config
from a3c_ray.errors import ConfigError, one_line
from a3c_ray.runtime.placement import central_cpus

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
    # ``module:Class``): Ray's processes inherit this environment when they start, in ray.init, and
    # this process gets its own back after it.
    before = os.environ.get("PYTHONPATH")
    path = [p for p in (before or "").split(os.pathsep) if p]
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
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
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
    cfg: Config,
    max_workers: int,
    address: str | None,
    dashboard_port: int | None,
    dashboard_host: str = "127.0.0.1",
) -> bool:
    """Start an embedded Ray as ``a3c-ray train`` would, or use the one this process already has.

    True when this call started Ray (and so must shut it down).
    """
    c = Config.from_dict(cfg.to_dict())
    c.run.workers = max_workers
    started = connect(c, address, dashboard_host, dashboard_port)
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
    cfg: Config,
    max_workers: int,
    address: str | None,
    dashboard_port: int | None,
    dashboard_host: str = "127.0.0.1",
) -> Iterator[None]:
    """A Ray for ``max_workers`` Workers of ``cfg`` for the ``with`` block; one this process started
    is shut down at its end."""
    started = connect_for(cfg, max_workers, address, dashboard_port, dashboard_host)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def ray_version() -> str:
    return str(ray.__version__)


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
