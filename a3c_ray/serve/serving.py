"""``a3c-ray serve``: a trained policy as a Ray Serve application.

The application has one ingress deployment, ``Policy``: its replicas answer HTTP (through Serve's
proxy) and put ``/act`` requests through ``@serve.batch``, so that the requests that arrive within
``batch_wait_ms`` of each other go through one forward pass. A recurrent policy adds a
``Sessions`` deployment that holds each session's LSTM state (``sessions`` says why there). With
``follow``, every replica polls the run's ``best`` pointer and swaps in each newer checkpoint
between two batches: a batch runs on the policy it started with, so no request fails or mixes
weights during a swap.

Routes (``serve_protocol`` has the bodies, ``serve_app`` what each does, without Ray): ``POST
/act``, ``GET /healthz``, ``GET /metadata``, ``POST /sessions``, ``DELETE /sessions/<id>``.
``build_app`` is also the import path of a Serve config file for ``serve deploy``
(cluster/serve.yaml). It refuses to build an application that anyone who reaches its port could
call: without a bearer token (``A3C_RAY_SERVE_TOKEN`` or ``token_file``), Serve's HTTP must
listen on a loopback address, unless ``no_auth`` says otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import ray
import torch
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from a3c_ray.errors import ConfigError
from a3c_ray.serve.serve_app import Answer, PolicyService
from a3c_ray.serve.serve_ingress import direct_ingress
from a3c_ray.serve.serve_options import (
    ServeOptions,
    exposure_problem,
    first_policy,
    read_token,
)
from a3c_ray.serve.serve_protocol import ActRequest
from a3c_ray.serve.sessions import LocalSessions, SessionError, State

logger = logging.getLogger("a3c_ray.serve")

APP_NAME = "a3c-ray"
QUIET = {"enable_access_log": False, "log_level": "WARNING"}
"""Serve's logging for the proxy and the replicas: a log line per request costs about as much CPU
as the forward pass of a small policy."""

Sessions = serve.deployment(
    name="Sessions",
    num_replicas=1,
    max_ongoing_requests=10_000,
    ray_actor_options={"num_cpus": 0},
    logging_config=QUIET,
)(LocalSessions)
"""The recurrent state of every session, in one replica (``sessions`` says why there)."""


class HandleSessions:
    """The ``Sessions`` deployment as a ``SessionStore`` of the Policy replicas."""

    def __init__(self, handle: DeploymentHandle):
        self.handle = handle

    async def create(self, state: State) -> str | SessionError:
        return await self.handle.create.remote(state)

    async def checkout(self, ids: list[str]) -> list[State | SessionError]:
        return await self.handle.checkout.remote(ids)

    async def checkin(self, states: dict[str, State | None]) -> None:
        await self.handle.checkin.remote(states)

    async def delete(self, sid: str) -> bool:
        return await self.handle.delete.remote(sid)


@serve.deployment(name="Policy", logging_config=QUIET)
class PolicyServer:
    # Serve runs an async constructor on the replica's event loop (the follower's task needs it).
    async def __init__(  # type: ignore[misc]
        self,
        options: ServeOptions,
        sessions: DeploymentHandle | None = None,
        token: str | None = None,
    ):
        torch.set_num_threads(1)  # as every actor: the replicas share the CPUs with the proxy
        # build_app checked this where the application was built; a replica checks it where it
        # answers HTTP too, since that node's settings (its ingress) may differ.
        host = await asyncio.to_thread(serve_http_host)
        problem = exposure_problem(host, token, options.no_auth, direct_ingress(os.environ))
        if problem is not None:
            raise ConfigError([problem])
        self.service = PolicyService(
            options,
            first_policy(options),
            HandleSessions(sessions) if sessions is not None else None,
            token,
            self.act_batch,
        )
        self.act_batch.set_max_batch_size(options.max_batch_size)  # type: ignore[attr-defined]
        self.act_batch.set_batch_wait_timeout_s(options.batch_wait_ms / 1000.0)  # type: ignore[attr-defined]
        self.follower = asyncio.create_task(self.service.follow()) if options.follow else None

    async def __call__(self, request: Request) -> Response:
        return await self.service.handle(request)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def act_batch(self, reqs: list[ActRequest]) -> list[Answer]:
        """The requests that arrived within ``batch_wait_ms``, in one forward pass."""
        return await self.service.act_batch(reqs)


def serve_http_host() -> str | None:
    """The address Serve's HTTP proxy listens on, asked of the running Serve; None when there is
    none to ask (or Serve no longer answers this way: the caller then assumes the worst)."""
    if not ray.is_initialized():
        return None
    try:
        from ray.serve.context import _get_global_client

        client = _get_global_client(raise_if_no_controller_running=False)
        return None if client is None else str(client.http_config.host)
    except Exception:
        return None


def build_app(args: dict[str, Any]) -> Any:
    """The application for ``args`` (ServeOptions' fields): the import path of a Serve config
    file (``a3c_ray.serve.serving:build_app``) and what ``a3c-ray serve`` runs. The token is
    read here, in the process that builds the application (``token_file``, else
    ``A3C_RAY_SERVE_TOKEN``), and reaches the replicas with their arguments."""
    options = ServeOptions.from_dict(args)
    token = read_token(options)
    problem = exposure_problem(
        serve_http_host(), token, options.no_auth, direct_ingress(os.environ)
    )
    if problem is not None:
        raise ConfigError([problem])
    policy = first_policy(options)
    sessions = (
        Sessions.bind(options.max_sessions, options.session_idle_seconds, options.max_session_bytes)
        if policy.is_recurrent
        else None
    )
    return PolicyServer.options(  # type: ignore[attr-defined]
        num_replicas=options.replicas,
        # Room for a full batch waiting while the previous one runs.
        max_ongoing_requests=max(2 * options.max_batch_size, 8),
        ray_actor_options={"num_cpus": options.replica_cpus},
    ).bind(options, sessions, token)
