"""Recurrent state per session, for ``a3c-ray serve`` of an LSTM policy (plain classes, no Ray):
the table (``SessionTable``) and its async face (``LocalSessions``, a ``SessionStore``).

Where the state lives: in one ``Sessions`` deployment of the Serve application (``serving``), not
in the policy replicas and not in the client. The replicas stay stateless, so the proxy may send
any request to any replica, replicas can be added or restarted, and a checkpoint swap
(``--follow``) keeps every session; a client needs no affinity and no state of its own. The cost is
two calls to the Sessions replica per batch (check out, check in), for recurrent policies only.

A session is created with ``POST /sessions`` (``{"envs": N}``: N parallel envs, 1 by default) and
then takes N observations per ``/act``, row i continuing env i. One request per session at a
time: a second one while the first is in flight is refused (409), since its state would depend on
which finished first. Sessions idle for ``idle_seconds`` are dropped. The table holds at most
``max_sessions`` sessions and ``max_bytes`` of state: past either, a new session is refused (503,
with the seconds until the least recently used one would expire), and no live session is evicted
to make room, since its client could not tell that from an expiry.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from a3c_ray.serve.serve_options import ServeOptions

State = tuple[np.ndarray, ...]


class SessionError(Exception):
    """An unknown (404), busy (409) or refused (400, 503) session; it travels between replicas,
    so it pickles. ``retry_after``: seconds after which asking again may succeed (503)."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        # Every field in args: an unpickled copy is rebuilt from them.
        super().__init__(status, message, retry_after)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass
class Session:
    state: State
    envs: int
    used: float
    busy_since: float | None = None
    """When the request in flight checked the state out; None when none is."""

    @property
    def nbytes(self) -> int:
        return sum(int(s.nbytes) for s in self.state)


class SessionTable:
    def __init__(
        self,
        max_sessions: int = ServeOptions.max_sessions,
        idle_seconds: float = ServeOptions.session_idle_seconds,
        lease_seconds: float = 60.0,
        max_bytes: int = ServeOptions.max_session_bytes,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``clock``: seconds from any start, never going back (tests pass their own)."""
        if max_sessions < 1 or max_bytes < 1:
            raise ValueError(
                f"max_sessions and max_bytes must be >= 1: {max_sessions}, {max_bytes}"
            )
        if not (idle_seconds > 0 and lease_seconds > 0):
            raise ValueError(f"idle and lease seconds must be > 0: {idle_seconds}, {lease_seconds}")
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self.lease_seconds = lease_seconds
        """A state checked out longer than this is free again (its replica died mid-request)."""
        self.clock = clock
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        """Least recently used first."""
        self.nbytes = 0
        """Bytes of state the sessions hold together."""

    def create(self, state: State) -> str:
        """A new session holding ``state``; a SessionError when it cannot be kept (400: larger
        than the whole limit; 503: the table is full until sessions are deleted or expire)."""
        self._expire()
        session = Session(tuple(np.array(s) for s in state), len(state[0]), self.clock())
        size = session.nbytes
        if size > self.max_bytes:
            raise SessionError(
                400,
                f"a session of {session.envs} envs holds {size} bytes of state, over the "
                f"server's limit of {self.max_bytes}: ask for fewer envs",
            )
        if len(self.sessions) >= self.max_sessions or self.nbytes + size > self.max_bytes:
            raise SessionError(
                503,
                f"the server holds as many sessions as it keeps ({len(self.sessions)} sessions, "
                f"{self.nbytes} bytes of state): end sessions that are done (DELETE "
                "/sessions/ID), or retry once idle ones expire",
                retry_after=self._next_expiry(),
            )
        sid = uuid.uuid4().hex
        self.sessions[sid] = session
        self.nbytes += size
        return sid

    def delete(self, sid: str) -> bool:
        session = self.sessions.pop(sid, None)
        if session is None:
            return False
        self.nbytes -= session.nbytes
        return True

    def envs(self, sid: str) -> int:
        return self._get(sid).envs

    def checkout(self, ids: list[str]) -> list[State | SessionError]:
        """The state of each session, marked in flight; an error for an unknown or busy one."""
        self._expire()
        now = self.clock()
        out: list[State | SessionError] = []
        for sid in ids:
            try:
                s = self._get(sid)
            except SessionError as e:
                out.append(e)
                continue
            if s.busy_since is not None and now - s.busy_since < self.lease_seconds:
                out.append(SessionError(409, f"session {sid} has a request in flight"))
                continue
            s.busy_since = s.used = now
            self.sessions.move_to_end(sid)
            out.append(s.state)
        return out

    def checkin(self, states: dict[str, State | None]) -> None:
        """New states of checked-out sessions; None releases one unchanged (its request failed)."""
        for sid, state in states.items():
            s = self.sessions.get(sid)
            if s is None:  # deleted while in flight
                continue
            if state is not None:
                self.nbytes += sum(int(x.nbytes) for x in state) - s.nbytes
                s.state = state
            s.busy_since, s.used = None, self.clock()
            self.sessions.move_to_end(sid)  # least recently used first, for _expire

    def _get(self, sid: str) -> Session:
        s = self.sessions.get(sid)
        if s is None:
            raise SessionError(
                404, f"unknown session {sid}: create one with POST /sessions (sessions expire)"
            )
        return s

    def _expire(self) -> None:
        cutoff = self.clock() - self.idle_seconds
        while self.sessions:
            sid, s = next(iter(self.sessions.items()))
            if s.used >= cutoff:
                break
            self.delete(sid)

    def _next_expiry(self) -> float:
        """Whole seconds until the least recently used session expires (at least 1)."""
        if not self.sessions:
            return 1.0
        oldest = next(iter(self.sessions.values()))
        return float(max(1, math.ceil(oldest.used + self.idle_seconds - self.clock())))


class SessionStore(Protocol):
    """Where sessions' recurrent state lives: ``LocalSessions``, or a handle to it in Serve."""

    async def create(self, state: State) -> str | SessionError: ...

    async def checkout(self, ids: list[str]) -> list[State | SessionError]: ...

    async def checkin(self, states: dict[str, State | None]) -> None: ...

    async def delete(self, sid: str) -> bool: ...


class LocalSessions:
    """A ``SessionTable`` behind the ``SessionStore`` calls. Async with no await inside: in Serve
    each call runs whole on the replica's event loop, never two at once. Errors come back as
    values, as ``checkout``'s do, so that they cross a Serve handle unwrapped."""

    def __init__(
        self,
        max_sessions: int,
        idle_seconds: float,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.table = SessionTable(max_sessions, idle_seconds, max_bytes=max_bytes, clock=clock)

    async def create(self, state: State) -> str | SessionError:
        try:
            return self.table.create(state)
        except SessionError as e:
            return e

    async def checkout(self, ids: list[str]) -> list[State | SessionError]:
        return self.table.checkout(ids)

    async def checkin(self, states: dict[str, State | None]) -> None:
        self.table.checkin(states)

    async def delete(self, sid: str) -> bool:
        return self.table.delete(sid)

    async def count(self) -> int:
        return len(self.table.sessions)
