"""How HTTP reaches the policy's replicas, chosen before Ray starts (no Ray imported here).

- ``proxy``: Serve's HTTP proxy actor (Python, uvicorn) takes each request and forwards it to a
  replica as an actor call. Serve's default; every port stays on the ``--host`` given.
- ``haproxy``: Ray's high-throughput mode (Ray 2.55+): HAProxy (C) in front, replicas that answer
  HTTP themselves (direct ingress) and gRPC between deployments. About a third of the CPU per
  request of ``proxy`` (docs/serving.md), but the replicas' own HTTP ports and HAProxy's metrics
  port listen on every interface of the node.

Ray reads these settings from the environment of each of its processes when they start: an
embedded Ray inherits them from this process; a cluster's nodes need them at ``ray start``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

INGRESS_ENV: dict[str, dict[str, str]] = {
    "proxy": {},
    "haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"},
}


def set_ingress(name: str) -> None:
    """Set the environment of ``name`` for the Ray this process is about to start."""
    for key in {k for env in INGRESS_ENV.values() for k in env}:
        os.environ.pop(key, None)
    os.environ.update(INGRESS_ENV[name])


@contextlib.contextmanager
def ingress(name: str) -> Iterator[None]:
    """``set_ingress`` for a ``with`` block, then the environment as it was."""
    keys = {k for env in INGRESS_ENV.values() for k in env}
    saved = {k: os.environ.get(k) for k in keys}
    set_ingress(name)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def direct_ingress(environ: Mapping[str, str]) -> bool:
    """True when Ray Serve in this environment lets the replicas answer HTTP themselves, on
    every interface of their node (``haproxy``), whatever ``--host`` says."""
    return environ.get("RAY_SERVE_ENABLE_HA_PROXY", "0").strip().lower() in ("1", "true")
