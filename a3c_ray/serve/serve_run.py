"""``a3c-ray serve``'s life on a Ray: the application (``serving.build_app``) deployed on an
embedded Ray or a cluster, served until Ctrl-C, and deleted, with Serve and Ray shut down when this
process started them."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from ray import serve

from a3c_ray.config import Config
from a3c_ray.errors import one_line
from a3c_ray.runtime import cluster
from a3c_ray.serve.serve_options import HOST, PORT, ServeOptions
from a3c_ray.serve.serving import APP_NAME, QUIET, build_app


def start(
    options: ServeOptions,
    address: str | None,
    host: str = HOST,
    port: int = PORT,
    name: str = APP_NAME,
    route_prefix: str = "/",
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
) -> bool:
    """Deploy the application on an embedded Ray (or the cluster at ``address``); True when this
    call started Ray. Returns once every replica is up."""
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its start-up notes, in this process
    cpus = max(os.cpu_count() or 1, int(np.ceil(options.replicas * options.replica_cpus)) + 1)
    started = cluster.connect(
        Config(), address, dashboard_host, dashboard_port=dashboard_port, num_cpus=cpus
    )
    try:
        serve.start(http_options={"host": host, "port": port}, logging_config=QUIET)
        serve.run(build_app(dataclasses.asdict(options)), name=name, route_prefix=route_prefix)
    except BaseException:
        stop(started, name)
        raise
    return started


def wait_until_interrupted(
    name: str = APP_NAME,
    status: Callable[[], Any] = serve.status,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Serve until Ctrl-C (or SIGTERM): True. False when the application failed or was deleted
    meanwhile (said on stderr in one line): the command then exits non-zero."""
    try:
        while True:
            sleep(1.0)
            app = status().applications.get(name)
            if app is None or app.status == "DEPLOY_FAILED":
                state = "gone" if app is None else f"failed: {one_line(Exception(app.message))}"
                print(f"a3c-ray: the application {name} is {state}", file=sys.stderr)
                return False
    except KeyboardInterrupt:
        return True


def stop(started: bool, name: str = APP_NAME) -> None:
    """Delete the application; shut Serve and Ray down when this process started them."""
    import ray

    if not ray.is_initialized():
        return
    try:
        if started:
            serve.shutdown()
        else:
            serve.delete(name)
    finally:
        if started:
            ray.shutdown()
