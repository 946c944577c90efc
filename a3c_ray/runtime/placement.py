"""Where a run happens: the Ray cluster it connects to, where its actors go, and its run directory.

An embedded Ray (no ``--address``, no ``RAY_ADDRESS``) is started for this process alone, with its
dashboard on 127.0.0.1; otherwise the run attaches to the cluster. Run directories are checked
before Ray starts and created only after, so bad input never leaves anything behind.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sys
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from a3c_ray.config import Config, ConfigError
from a3c_ray.rundir.checkpoint import CheckpointError, load_latest_good
from a3c_ray.rundir.storage import RunStorage


def in_ray_job() -> bool:
    """True in the entrypoint of a Ray job (the job supervisor hands it its job config)."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def default_run_dir(env_id: str) -> Path:
    """``runs/<env>-<time>``; in a Ray job, under ``~/a3c-ray/`` instead, because Ray deletes a
    job's working directory when the job ends."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path.home() / "a3c-ray" / "runs" if in_ray_job() else Path("runs")
    return base / f"{env_id.replace('/', '_')}-{stamp}"


def check_run_dir(cfg: Config, overwrite: bool, resume: bool) -> RunStorage:
    """The run directory to use: new, the one to resume, or an old one with ``overwrite``; writes nothing."""
    location = cfg.run.run_dir or str(default_run_dir(cfg.env.id))
    try:
        storage = RunStorage(location)
        exists = storage.exists()
        if resume:
            load_latest_good(storage.download_checkpoints())
    except CheckpointError as e:
        raise ConfigError([f"cannot resume {location}: {e}"]) from None
    except (
        OSError,
        ValueError,
        ImportError,
    ) as e:  # unreachable storage, unknown scheme, no driver
        raise ConfigError([f"cannot use run directory {location}: {one_line(e)}"]) from None
    if not resume and exists and not overwrite:
        raise ConfigError(
            [
                f"run directory {location} already exists; pass --resume {location} to continue it "
                "or --overwrite to replace it"
            ]
        )
    cfg.run.run_dir = location
    return storage


def prepare_run_dir(storage: RunStorage, overwrite: bool) -> None:
    """Create the run directory; with ``overwrite``, first remove what an earlier run left in it."""
    if overwrite:
        for sub in ("checkpoints", "tb"):
            shutil.rmtree(storage.local / sub, ignore_errors=True)
            storage.delete(sub)
        for name in ("summary.json", "config.yaml"):
            with contextlib.suppress(FileNotFoundError):
                (storage.local / name).unlink()
            storage.delete(name)
    storage.local.mkdir(parents=True, exist_ok=True)


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
) -> bool:
    """Attach to a running cluster or start an embedded one; True when this call started Ray.

    The embedded Ray's dashboard is on ``dashboard_port``; with none given, on 8265 or, when that
    is taken, on a free port; the address goes to stderr either way.
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
    cpus = math.ceil(workers * cfg.run.worker_cpus + cfg.run.ps_cpus + cfg.run.monitor_cpus)
    # The node's services bind to loopback when ray was imported in single-machine mode (the CLI
    # sees to that); the dashboard binds to ``dashboard_host``.
    port = pick_dashboard_port(dashboard_host, dashboard_port)
    try:
        ray.init(
            address="local",  # a new instance, even when a `ray start` cluster runs on this machine
            num_cpus=cpus,
            include_dashboard=True,
            dashboard_host=dashboard_host,
            dashboard_port=port,
            logging_level=logging.WARNING,
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


def default_workers(cfg: Config, started: bool) -> int:
    """One Worker per CPU: of this machine for an embedded Ray, else what the cluster has left."""
    if started:
        return os.cpu_count() or 1
    cpus = ray.cluster_resources().get("CPU", 1.0) - cfg.run.ps_cpus - cfg.run.monitor_cpus
    return max(1, int(cpus // cfg.run.worker_cpus))


def central_placement(cfg: Config) -> dict[str, Any]:
    """Where the ParameterServer and the Monitor go: a node with ``run.ps_resource``, else the head.

    Affinity to the head is soft, so a restart after losing the head's raylet can land elsewhere.
    """
    if cfg.run.ps_resource:
        return {"resources": {cfg.run.ps_resource: 0.001}}
    head = next(
        (
            n["NodeID"]
            for n in ray.nodes()
            if n["Alive"] and "node:__internal_head__" in n["Resources"]
        ),
        None,
    )
    if head is None:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=head, soft=True)}


def one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__
