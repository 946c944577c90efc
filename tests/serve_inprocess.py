"""The served application without Ray: a ``PolicyService`` with its session store in this process,
called with real starlette requests (an ASGI scope and body), as Serve's proxy calls a replica."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from a3c_ray.serve.serve_app import PolicyService
from a3c_ray.serve.serve_options import ServeOptions, first_policy
from a3c_ray.serve.sessions import LocalSessions


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def service(
    source: Path | str,
    token: str | None = None,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> PolicyService:
    """The service of the checkpoint or run ``source``, with sessions in this process."""
    opts = ServeOptions.from_dict({"source": str(source), **options})
    policy = first_policy(opts)
    extra = {} if clock is None else {"clock": clock}
    sessions = LocalSessions(
        opts.max_sessions, opts.session_idle_seconds, opts.max_session_bytes, **extra
    )
    return PolicyService(opts, policy, sessions, token)


async def acall(
    svc: PolicyService,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    root: str = "",
) -> Reply:
    """One request through ``svc.handle``, as an ASGI server hands it over."""
    raw_headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()
    ]
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": root + path,
        "root_path": root,
        "raw_path": (root + path).encode("utf-8", "surrogateescape"),
        "query_string": urlencode(query or {}).encode(),
        "headers": raw_headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    sent = iter(enumerate(chunks))

    async def receive() -> dict[str, Any]:
        i, chunk = next(sent, (-1, b""))
        if i < 0:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}

    response = await svc.handle(Request(scope, receive))
    return Reply(response.status_code, bytes(response.body), dict(response.headers))


def call(svc: PolicyService, method: str, path: str, body: Any = b"", **kw: Any) -> Reply:
    """``acall`` from synchronous code; a dict or list body goes as JSON."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return asyncio.run(acall(svc, method, path, body, **kw))
