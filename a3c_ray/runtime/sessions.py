"""Recurrent state per session, for ``a3c-ray serve`` of an LSTM policy (plain class, no Ray).

Where the state lives: in one ``Sessions`` deployment of the Serve application (``serving``), not
in the policy replicas and not in the client. The replicas stay stateless, so the proxy may send
any request to any replica, replicas can be added or restarted, and a checkpoint swap
(``--follow``) keeps every session; a client needs no affinity and no state of its own. The cost is
two calls to the Sessions replica per batch (check out, check in), for recurrent policies only.

A session is created with ``POST /sessions`` (``{"envs": N}``: N parallel envs, 1 by default) and
then takes N observations per ``/act``, row i continuing env i. One request per session at a
time: a second one while the first is in flight is refused (409), since its state would depend on
which finished first. Sessions idle for ``idle_seconds`` are dropped, and beyond ``max_sessions``
the least recently used one goes.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

State = tuple[np.ndarray, ...]


class SessionError(Exception):
    """An unknown (404) or busy (409) session; it travels between replicas, so it pickles."""

    def __init__(self, status: int, message: str):
        super().__init__(status, message)  # both in args: an unpickled copy is rebuilt from them
        self.status = status
        self.message = message


@dataclass
class Session:
    state: State
    envs: int
    used: float = field(default_factory=time.monotonic)
    busy_since: float | None = None
    """When the request in flight checked the state out; None when none is."""


class SessionTable:
    def __init__(
        self, max_sessions: int = 10_000, idle_seconds: float = 3600.0, lease_seconds: float = 60.0
    ):
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self.lease_seconds = lease_seconds
        """A state checked out longer than this is free again (its replica died mid-request)."""
        self.sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, state: State) -> str:
        self._expire()
        while len(self.sessions) >= self.max_sessions:
            self.sessions.popitem(last=False)
        sid = uuid.uuid4().hex
        self.sessions[sid] = Session(tuple(np.array(s) for s in state), len(state[0]))
        return sid

    def delete(self, sid: str) -> bool:
        return self.sessions.pop(sid, None) is not None

    def envs(self, sid: str) -> int:
        return self._get(sid).envs

    def checkout(self, ids: list[str]) -> list[State | SessionError]:
        """The state of each session, marked in flight; an error for an unknown or busy one."""
        self._expire()
        now = time.monotonic()
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
                s.state = state
            s.busy_since, s.used = None, time.monotonic()

    def _get(self, sid: str) -> Session:
        s = self.sessions.get(sid)
        if s is None:
            raise SessionError(
                404, f"unknown session {sid}: create one with POST /sessions (sessions expire)"
            )
        return s

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        while self.sessions:
            sid, s = next(iter(self.sessions.items()))
            if s.used >= cutoff:
                break
            del self.sessions[sid]
