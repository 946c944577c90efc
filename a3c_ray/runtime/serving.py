"""``a3c-ray serve``: a trained policy as a Ray Serve application.

The application has one ingress deployment, ``Policy``: its replicas answer HTTP (through Serve's
proxy) and put ``/act`` requests through ``@serve.batch``, so that the requests that arrive within
``batch_wait_ms`` of each other go through one forward pass. A recurrent policy adds a
``Sessions`` deployment that holds each session's LSTM state (``sessions`` says why there). With
``follow``, every replica polls the run's ``best`` pointer and swaps in each newer checkpoint
between two batches: a batch runs on the policy it started with, so no request fails or mixes
weights during a swap.

Routes (``serve_protocol`` has the bodies): ``POST /act``, ``GET /healthz``, ``GET /metadata``,
``POST /sessions``, ``DELETE /sessions/<id>``. ``build_app`` is also the import path of a Serve
config file for ``serve deploy`` (cluster/serve.yaml).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request
from starlette.responses import Response

from a3c_ray.algo.policy import Policy
from a3c_ray.envs.spaces import json_safe
from a3c_ray.rundir.policy import best_checkpoint_name, checkpoint_in_run, load_policy
from a3c_ray.runtime.serve_options import ServeOptions, first_policy, run_of
from a3c_ray.runtime.serve_protocol import (
    ActRequest,
    Limits,
    RequestError,
    answer,
    error_body,
    json_body,
    parse_act,
    parse_json,
)
from a3c_ray.runtime.sessions import SessionError, SessionTable

logger = logging.getLogger("a3c_ray.serve")

APP_NAME = "a3c-ray"
QUIET = {"enable_access_log": False, "log_level": "WARNING"}
"""Serve's logging for the proxy and the replicas: a log line per request costs about as much CPU
as the forward pass of a small policy."""


@serve.deployment(
    name="Sessions",
    num_replicas=1,
    max_ongoing_requests=10_000,
    ray_actor_options={"num_cpus": 0},
    logging_config=QUIET,
)
class Sessions:
    """The recurrent state of every session (``sessions.SessionTable``). Its methods are async with
    no await inside: each runs whole on the replica's event loop, never two at once."""

    def __init__(self, max_sessions: int, idle_seconds: float):
        self.table = SessionTable(max_sessions, idle_seconds)

    async def create(self, state: tuple[np.ndarray, ...]) -> str:
        return self.table.create(state)

    async def checkout(self, ids: list[str]) -> list[Any]:
        return self.table.checkout(ids)

    async def checkin(self, states: dict[str, Any]) -> None:
        self.table.checkin(states)

    async def delete(self, sid: str) -> bool:
        return self.table.delete(sid)

    async def count(self) -> int:
        return len(self.table.sessions)


@serve.deployment(name="Policy", logging_config=QUIET)
class PolicyServer:
    # Serve runs an async constructor on the replica's event loop (the follower's task needs it).
    async def __init__(  # type: ignore[misc]
        self, options: ServeOptions, sessions: DeploymentHandle | None = None
    ):
        torch.set_num_threads(1)  # as every actor: the replicas share the CPUs with the proxy
        self.settings = options
        self.policy = first_policy(options)
        self.sessions = sessions
        self.limits = Limits(options.max_body_bytes, options.max_observations)
        self.swaps = 0
        self.batches = 0
        self.batched_requests = 0
        """Forward passes and the requests they answered, for /metadata (this replica's)."""
        self.act_batch.set_max_batch_size(options.max_batch_size)  # type: ignore[attr-defined]
        self.act_batch.set_batch_wait_timeout_s(options.batch_wait_ms / 1000.0)  # type: ignore[attr-defined]
        # A CNN's forward pass of a whole batch takes milliseconds: off the event loop, so that
        # the next requests are parsed meanwhile. A small MLP's costs less than the thread hop.
        self.offload = sum(p.numel() for p in self.policy.model.parameters()) > 200_000
        self.follower = asyncio.create_task(self.follow()) if options.follow else None

    # -- routes --------------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        try:
            return await self.route(request)
        except (RequestError, SessionError) as e:
            return Response(error_body(e.message), e.status, media_type="application/json")
        except Exception as e:  # a bug, not the client's: one line all the same
            logger.exception("request failed")
            return Response(
                error_body(f"internal error: {type(e).__name__}: {e}"),
                500,
                media_type="application/json",
            )

    async def route(self, request: Request) -> Response:
        path = request.scope["path"]
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = "/" + path.strip("/")
        method = request.method
        if path == "/act":
            self.allow(method, "POST")
            return self.ok(await self.act(request))
        if path == "/healthz":
            self.allow(method, "GET")
            return self.ok({"status": "ok", "step": self.policy.env_steps})
        if path == "/metadata":
            self.allow(method, "GET")
            return self.ok(self.metadata())
        if path == "/sessions":
            self.allow(method, "POST")
            return self.ok(await self.create_session(request))
        if path.startswith("/sessions/"):
            self.allow(method, "DELETE")
            return self.ok(await self.delete_session(path.rsplit("/", 1)[1]))
        raise RequestError(404, f"no route {path}: use POST /act, GET /metadata or GET /healthz")

    @staticmethod
    def allow(method: str, wanted: str) -> None:
        if method != wanted:
            raise RequestError(405, f"use {wanted} here, not {method}")

    @staticmethod
    def ok(payload: dict[str, Any]) -> Response:
        return Response(json_body(payload), media_type="application/json")

    async def body(self, request: Request) -> bytes:
        """The body, refused with 413 as soon as it is known to pass the limit."""
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length", "")
        too_big = f"the body is over the limit of {limit} bytes"
        if declared.isdigit() and int(declared) > limit:
            raise RequestError(413, too_big)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, too_big)
            chunks.append(chunk)
        return b"".join(chunks)

    async def act(self, request: Request) -> dict[str, Any]:
        req = parse_act(
            await self.body(request),
            request.headers.get("content-type", ""),
            request.query_params,
            self.policy.observation_space,
            self.limits,
        )
        if req.session is not None and self.sessions is None:
            raise RequestError(
                400, "this policy is feed-forward and keeps no session state: leave out session"
            )
        status, payload = await self.act_batch(req)
        if status != 200:
            raise RequestError(status, payload["error"])
        return payload

    # -- the batch -----------------------------------------------------------------------------
    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def act_batch(self, reqs: list[ActRequest]) -> list[tuple[int, dict[str, Any]]]:
        """All requests of a batch in one forward pass; each gets its rows back in order."""
        policy = self.policy  # a swap between batches, never inside one
        self.batches += 1
        self.batched_requests += len(reqs)
        results: list[tuple[int, dict[str, Any]] | None] = [None] * len(reqs)
        states: list[tuple[np.ndarray, ...] | None] = [None] * len(reqs)
        if policy.is_recurrent:
            await self.check_out(reqs, policy, results, states)
        live = [i for i, r in enumerate(results) if r is None]
        if live:
            counts = [len(reqs[i].observations) for i in live]
            obs = np.concatenate([reqs[i].observations for i in live])
            greedy: bool | np.ndarray = all(reqs[i].greedy for i in live)
            if not greedy:
                greedy = np.repeat([reqs[i].greedy for i in live], counts)
            state = self.batch_state(policy, [states[i] for i in live], counts)
            reset = None
            if any(reqs[i].reset is not None for i in live):
                reset = np.concatenate(
                    [
                        r if (r := reqs[i].reset) is not None else np.zeros(n, dtype=bool)
                        for i, n in zip(live, counts, strict=True)
                    ]
                )
            try:
                if self.offload:
                    acted = await asyncio.to_thread(policy.act, obs, state, greedy, None, reset)
                else:
                    acted = policy.act(obs, state, greedy, None, reset)
            except BaseException:
                await self.check_in(reqs, live, None, counts)
                raise
            at = 0
            for i, n in zip(live, counts, strict=True):
                results[i] = (
                    200,
                    answer(acted.actions[at : at + n], acted.values[at : at + n], policy.env_steps),
                )
                at += n
            if policy.is_recurrent:
                await self.check_in(reqs, live, acted.state, counts)
        return [r if r is not None else (500, {"error": "no answer"}) for r in results]

    @staticmethod
    def batch_state(
        policy: Policy, given: list[tuple[np.ndarray, ...] | None], counts: list[int]
    ) -> tuple[np.ndarray, ...] | None:
        """The rows' recurrent state: a session's own, zeros for a request without a session."""
        if not policy.is_recurrent:
            return None
        parts = [
            s if s is not None else policy.initial_state(n)
            for s, n in zip(given, counts, strict=True)
        ]
        return tuple(np.concatenate([p[k] for p in parts if p is not None]) for k in range(2))

    async def check_out(
        self,
        reqs: list[ActRequest],
        policy: Policy,
        results: list[tuple[int, dict[str, Any]] | None],
        states: list[tuple[np.ndarray, ...] | None],
    ) -> None:
        ids = [(i, r.session) for i, r in enumerate(reqs) if r.session is not None]
        if not ids or self.sessions is None:
            return
        got = await self.sessions.checkout.remote([sid for _, sid in ids])
        release: dict[str, Any] = {}
        for (i, sid), value in zip(ids, got, strict=True):
            if isinstance(value, SessionError):
                results[i] = (value.status, {"error": value.message})
            elif len(value[0]) != len(reqs[i].observations):
                results[i] = (
                    400,
                    {
                        "error": f"session {sid} has {len(value[0])} envs, the request "
                        f"{len(reqs[i].observations)} observations"
                    },
                )
                release[sid] = None
            else:
                states[i] = value
        if release:
            await self.sessions.checkin.remote(release)

    async def check_in(
        self,
        reqs: list[ActRequest],
        live: list[int],
        new: tuple[np.ndarray, ...] | None,
        counts: list[int],
    ) -> None:
        """The new state of each session row back to Sessions (None: released unchanged)."""
        if self.sessions is None:
            return
        out: dict[str, Any] = {}
        at = 0
        for i, n in zip(live, counts, strict=True):
            sid = reqs[i].session
            if sid is not None:
                out[sid] = None if new is None else tuple(s[at : at + n].copy() for s in new)
            at += n
        if out:
            await self.sessions.checkin.remote(out)

    # -- sessions, metadata, follow ------------------------------------------------------------
    async def create_session(self, request: Request) -> dict[str, Any]:
        if self.sessions is None:
            raise RequestError(400, "this policy is feed-forward: it has no sessions")
        payload = parse_json(await self.body(request))
        envs = payload.get("envs", 1)
        if (
            not isinstance(envs, int)
            or isinstance(envs, bool)
            or not 1 <= envs <= self.limits.max_observations
        ):
            raise RequestError(
                400, f'"envs" must be a whole number from 1 to {self.limits.max_observations}'
            )
        state = self.policy.initial_state(envs)
        assert state is not None
        sid = await self.sessions.create.remote(state)
        return {"session": sid, "envs": envs}

    async def delete_session(self, sid: str) -> dict[str, Any]:
        if self.sessions is None or not await self.sessions.delete.remote(sid):
            raise RequestError(404, f"unknown session {sid}")
        return {"deleted": sid}

    def metadata(self) -> dict[str, Any]:
        p = self.policy
        return json_safe(
            {
                **p.describe(),
                "checkpoint_step": p.env_steps,
                "run": self.settings.source if self.settings.follow else run_of(p.checkpoint),
                "follow": self.settings.follow,
                "swaps": self.swaps,
                "replica": {"batches": self.batches, "requests": self.batched_requests},
                "max_batch_size": self.settings.max_batch_size,
                "batch_wait_ms": self.settings.batch_wait_ms,
                "max_observations": self.settings.max_observations,
                "max_body_bytes": self.settings.max_body_bytes,
            }
        )

    async def follow(self) -> None:
        """Swap in each newer best checkpoint of the run; a failed look or load keeps serving."""
        source = self.settings.source
        skipped: set[str] = set()
        while True:
            await asyncio.sleep(self.settings.follow_every)
            try:
                name = await asyncio.to_thread(best_checkpoint_name, source)
                current = Path(self.policy.checkpoint or "").name
                if name is None or name == current or name in skipped:
                    continue
                new = await asyncio.to_thread(load_policy, checkpoint_in_run(source, name))
                if (
                    new.env_steps <= self.policy.env_steps
                    or new.meta.model != self.policy.meta.model
                ):
                    skipped.add(name)  # older, or another network: keep the one being served
                    continue
                self.policy = new
                self.swaps += 1
            except Exception as e:  # e.g. a checkpoint pruned between the look and the load
                logger.warning("follow %s: %s", source, e)


def build_app(args: dict[str, Any]) -> Any:
    """The application for ``args`` (ServeOptions' fields): the import path of a Serve config
    file (``a3c_ray.runtime.serving:build_app``) and what ``a3c-ray serve`` runs."""
    options = ServeOptions.from_dict(args)
    policy = first_policy(options)
    sessions = (
        Sessions.bind(  # type: ignore[attr-defined]
            options.max_sessions, options.session_idle_seconds
        )
        if policy.is_recurrent
        else None
    )
    return PolicyServer.options(  # type: ignore[attr-defined]
        num_replicas=options.replicas,
        # Room for a full batch waiting while the previous one runs.
        max_ongoing_requests=max(2 * options.max_batch_size, 8),
        ray_actor_options={"num_cpus": options.replica_cpus},
    ).bind(options, sessions)
