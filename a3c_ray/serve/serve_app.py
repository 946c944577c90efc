"""What the served policy does with each HTTP request, without Ray: the lock, the routes, the
batch's forward pass, the sessions' state in and out, ``/metadata`` and ``--follow``'s swaps.

``serving`` wraps these in Ray Serve deployments: ``PolicyService`` in the ``Policy`` replicas
(with Serve's ``@serve.batch`` as its batcher and a handle to the ``Sessions`` deployment as its
session store), ``sessions.LocalSessions`` as the ``Sessions`` deployment. Tests run them
in-process.

The lock: with a bearer token, every route but ``GET /healthz`` answers 401 unless the request
carries ``Authorization: Bearer <token>`` (compared in constant time), before its body is read.
What a caller learns of where the policy lives (the checkpoint's path or URI, the run directory)
is in ``/metadata`` for an authenticated caller only, and no error body carries an exception's
text: a 500 says to read the server's log.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from a3c_ray.algo.policy import Policy
from a3c_ray.envs.spaces import json_safe
from a3c_ray.serve.serve_follow import Follower
from a3c_ray.serve.serve_options import ServeOptions, run_of
from a3c_ray.serve.serve_protocol import (
    ActRequest,
    Limits,
    RequestError,
    answer,
    error_body,
    json_body,
    parse_act,
    parse_json,
    session_id,
)
from a3c_ray.serve.sessions import SessionError, SessionStore, State

logger = logging.getLogger("a3c_ray.serve")

Answer = tuple[int, dict[str, Any]]
"""One request's status and JSON payload, as a batch hands them back."""
OPEN_ROUTES = ("/healthz",)
"""Routes that answer without the token: a load balancer's health check carries none."""
BIG_MODEL = 200_000
"""Parameters past which a forward pass leaves the event loop for a thread: a CNN's batch takes
milliseconds, during which the next requests are parsed; a small MLP's costs less than the hop."""


def bearer_matches(header: str | None, token: str) -> bool:
    """True when an ``Authorization`` header carries ``Bearer <token>`` (the scheme in any case),
    compared in constant time."""
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("latin-1", "replace"), token.encode())


class PolicyService:
    """The routes of one replica. ``batch`` answers one ``/act`` request; Serve's is
    ``@serve.batch`` over ``act_batch``, and without it each request is a batch of its own."""

    def __init__(
        self,
        options: ServeOptions,
        policy: Policy,
        sessions: SessionStore | None = None,
        token: str | None = None,
        batch: Callable[[ActRequest], Awaitable[Answer]] | None = None,
    ):
        self.settings = options
        self.policy = policy
        self.sessions = sessions if policy.is_recurrent else None
        self.token = token
        self.batch = batch or self._alone
        self.limits = Limits(options.max_body_bytes, options.max_observations)
        self.follower = Follower(options.source) if options.follow else None
        self.swaps = 0
        self.batches = 0
        self.batched_requests = 0
        """Forward passes and the requests they answered, for /metadata (this replica's)."""
        self.offload = sum(p.numel() for p in policy.model.parameters()) > BIG_MODEL

    async def _alone(self, req: ActRequest) -> Answer:
        return (await self.act_batch([req]))[0]

    # -- HTTP ----------------------------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        """The response to any request: a 4xx with one line of JSON for what the caller got
        wrong, a 500 that tells nothing of the server's insides for what the server did."""
        try:
            path = route_path(request)
            authenticated = self.check_token(request, path)
            return await self.route(request, path, authenticated)
        except (RequestError, SessionError) as e:
            headers = dict(getattr(e, "headers", {}))
            retry = getattr(e, "retry_after", None)
            if retry is not None:
                headers["Retry-After"] = str(int(retry))
            return Response(error_body(e.message), e.status, headers, "application/json")
        except Exception:  # a bug, not the client's: the details go to the log only
            logger.exception("request failed")
            return Response(
                error_body("internal error: the server's log has the details"),
                500,
                media_type="application/json",
            )

    def check_token(self, request: Request, path: str) -> bool:
        """Whether the caller is authenticated; a 401 when the route needs the token."""
        if self.token is None:
            return False
        if bearer_matches(request.headers.get("authorization"), self.token):
            return True
        if path in OPEN_ROUTES:
            return False
        raise RequestError(
            401,
            "this policy needs a token: send the header Authorization: Bearer <token>",
            {"WWW-Authenticate": 'Bearer realm="a3c-ray"'},
        )

    async def route(self, request: Request, path: str, authenticated: bool) -> Response:
        method = request.method
        if path == "/act":
            allow(method, "POST")
            return ok(await self.act(request))
        if path == "/healthz":
            allow(method, "GET")
            return ok({"status": "ok", "step": self.policy.env_steps})
        if path == "/metadata":
            allow(method, "GET")
            return ok(self.metadata(authenticated))
        if path == "/sessions":
            allow(method, "POST")
            return ok(await self.create_session(request))
        if path.startswith("/sessions/"):
            allow(method, "DELETE")
            return ok(await self.delete_session(path.split("/", 2)[2]))
        raise RequestError(
            404, f"no route {path[:80]}: use POST /act, GET /metadata or GET /healthz"
        )

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

    # -- acting --------------------------------------------------------------------------------
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
        status, payload = await self.batch(req)
        if status != 200:
            raise RequestError(status, payload["error"])
        return payload

    async def act_batch(self, reqs: list[ActRequest]) -> list[Answer]:
        """All requests of a batch in one forward pass; each gets its rows back in order."""
        policy = self.policy  # a swap between batches, never inside one
        self.batches += 1
        self.batched_requests += len(reqs)
        results: list[Answer | None] = [None] * len(reqs)
        states: list[State | None] = [None] * len(reqs)
        if policy.is_recurrent:
            await self.check_out(reqs, results, states)
        live = [i for i, r in enumerate(results) if r is None]
        if live:
            counts = [len(reqs[i].observations) for i in live]
            obs = np.concatenate([reqs[i].observations for i in live])
            greedy: bool | np.ndarray = all(reqs[i].greedy for i in live)
            if not greedy:
                greedy = np.repeat([reqs[i].greedy for i in live], counts)
            state = batch_state(policy, [states[i] for i in live], counts)
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

    async def check_out(
        self, reqs: list[ActRequest], results: list[Answer | None], states: list[State | None]
    ) -> None:
        ids = [(i, r.session) for i, r in enumerate(reqs) if r.session is not None]
        if not ids or self.sessions is None:
            return
        got = await self.sessions.checkout([sid for _, sid in ids])
        release: dict[str, State | None] = {}
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
            await self.sessions.checkin(release)

    async def check_in(
        self, reqs: list[ActRequest], live: list[int], new: State | None, counts: list[int]
    ) -> None:
        """The new state of each session row back to the store (None: released unchanged)."""
        if self.sessions is None:
            return
        out: dict[str, State | None] = {}
        at = 0
        for i, n in zip(live, counts, strict=True):
            sid = reqs[i].session
            if sid is not None:
                out[sid] = None if new is None else tuple(s[at : at + n].copy() for s in new)
            at += n
        if out:
            await self.sessions.checkin(out)

    # -- sessions, metadata, follow ------------------------------------------------------------
    async def create_session(self, request: Request) -> dict[str, Any]:
        if self.sessions is None:
            raise RequestError(400, "this policy is feed-forward: it has no sessions")
        payload = parse_json(await self.body(request))
        unknown = set(payload) - {"envs"}
        if unknown:
            raise RequestError(400, f"unknown field(s) {', '.join(sorted(unknown))}: send envs")
        envs = payload.get("envs", 1)
        top = self.limits.max_observations
        if not isinstance(envs, int) or isinstance(envs, bool) or not 1 <= envs <= top:
            raise RequestError(400, f'"envs" must be a whole number from 1 to {top}')
        state = self.policy.initial_state(envs)
        assert state is not None
        sid = await self.sessions.create(state)
        if isinstance(sid, SessionError):
            raise sid
        return {"session": sid, "envs": envs}

    async def delete_session(self, sid: str) -> dict[str, Any]:
        sid = session_id(sid) or ""
        if self.sessions is None or not await self.sessions.delete(sid):
            raise RequestError(404, f"unknown session {sid}")
        return {"deleted": sid}

    def metadata(self, authenticated: bool) -> dict[str, Any]:
        """What a client needs to call the policy. Where it was loaded from (a path or URI) is
        for an authenticated caller only: an open server names the checkpoint file alone."""
        p = self.policy
        out = {
            **p.describe(),
            "checkpoint": Path(p.checkpoint).name if p.checkpoint else None,
            "checkpoint_step": p.env_steps,
            "follow": self.settings.follow,
            "swaps": self.swaps,
            "replica": {"batches": self.batches, "requests": self.batched_requests},
            "max_batch_size": self.settings.max_batch_size,
            "batch_wait_ms": self.settings.batch_wait_ms,
            "max_observations": self.settings.max_observations,
            "max_body_bytes": self.settings.max_body_bytes,
            "auth": "bearer" if self.token is not None else "none",
        }
        if authenticated:
            out["checkpoint"] = p.checkpoint
            out["run"] = self.settings.source if self.settings.follow else run_of(p.checkpoint)
        return dict(json_safe(out))

    async def follow_once(self) -> None:
        """Swap in the run's best checkpoint when ``Follower`` says it may replace the one being
        served; a failed look keeps serving and is tried again at the next."""
        if self.follower is None:
            return
        try:
            new = await asyncio.to_thread(self.follower.newer, self.policy)
        except Exception as e:  # e.g. the storage is unreachable for a moment
            logger.warning("follow %s: %s", self.settings.source, e)
            return
        if new is not None:
            self.policy = new
            self.swaps += 1

    async def follow(self) -> None:
        """``follow_once`` every ``follow_every`` seconds, for as long as the replica lives."""
        while True:
            await asyncio.sleep(self.settings.follow_every)
            await self.follow_once()


def route_path(request: Request) -> str:
    """The request's path below the application's route prefix, as ``/name/...``."""
    path = str(request.scope["path"])
    root = str(request.scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return "/" + path.strip("/")


def allow(method: str, wanted: str) -> None:
    if method != wanted:
        raise RequestError(405, f"use {wanted} here, not {method}")


def ok(payload: dict[str, Any]) -> Response:
    return Response(json_body(payload), media_type="application/json")


def batch_state(policy: Policy, given: list[State | None], counts: list[int]) -> State | None:
    """The rows' recurrent state: a session's own, zeros for a request without a session."""
    if not policy.is_recurrent:
        return None
    parts = [
        s if s is not None else policy.initial_state(n) for s, n in zip(given, counts, strict=True)
    ]
    return tuple(np.concatenate([p[k] for p in parts if p is not None]) for k in range(2))
