"""The record of a run's Worker slots (``WorkerSlots``): when each one's Worker started, how often
it failed, when its replacement is due, and which slots are being retired. No Ray here: the
driver's loop (``a3c_ray.runtime.driver``) feeds it the times, failures and counters it sees.

A Worker that dies or raises is replaced after a backoff that doubles with each failure of its
slot, up to ``MAX_BACKOFF_SECONDS``; after ``run.max_worker_restarts`` failures in a row the run
stops with an error. A Worker that trained (its slot's env steps grew at the ParameterServer) or
ran for ``run.healthy_after`` seconds before it failed starts its slot's count afresh, so that a
long run survives Workers lost at any rate and still stops on a Worker that cannot run at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_BACKOFF_SECONDS = 60.0


@dataclass(frozen=True)
class SlotFailure:
    """What became of a slot whose Worker failed."""

    slot: int
    count: int
    """Failures in a row of this slot, this one included."""
    give_up: bool
    """More failures in a row than ``run.max_worker_restarts``: the run must stop."""
    restart_in: float
    """Seconds until the replacement starts (0 when giving up)."""


class WorkerSlots:
    """Each Worker slot's starts, failures in a row, pending restart and retirement."""

    def __init__(
        self,
        n: int,
        max_restarts: int,
        healthy_after: float,
        backoff: float,
        max_backoff: float = MAX_BACKOFF_SECONDS,
    ):
        self.max_restarts = max_restarts
        self.healthy_after = healthy_after
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.failures: dict[int, int] = dict.fromkeys(range(n), 0)
        self.starts: dict[int, int] = {}  # slot -> Workers started in it (for their random streams)
        self.started_at: dict[int, float] = {}
        # slot -> its env steps at the ParameterServer when last seen; slots whose current Worker
        # has pushed since it started (a Worker that trained is not one that cannot run)
        self.steps_seen: dict[int, int] = {}
        self.trained: set[int] = set()
        self.restart_at: dict[int, float] = {}
        self.retiring: set[int] = set()

    def started(self, slot: int, now: float) -> int:
        """Note a Worker started in ``slot`` at ``now``; return how many started there before it."""
        n = self.starts[slot] = self.starts.get(slot, -1) + 1
        self.started_at[slot] = now
        self.trained.discard(slot)  # steps_seen[slot] already holds the last mark
        return n

    def failed(self, slot: int, now: float) -> SlotFailure | None:
        """Note that the Worker in ``slot`` failed at ``now``: None for one being retired (it was on
        its way out), else when its replacement is due, or that the run must give up."""
        if slot in self.retiring:
            return None
        ran = now - self.started_at.get(slot, now)
        if slot in self.trained or ran >= self.healthy_after:
            self.failures[slot] = 0  # it trained before it failed: not a Worker that cannot run
        count = self.failures[slot] = self.failures.get(slot, 0) + 1
        if count > self.max_restarts:
            return SlotFailure(slot, count, give_up=True, restart_in=0.0)
        delay = min(self.backoff * 2 ** (count - 1), self.max_backoff)
        self.restart_at[slot] = now + delay
        return SlotFailure(slot, count, give_up=False, restart_in=delay)

    def note_steps(self, worker_steps: Mapping[int, int]) -> None:
        """Mark the slots whose env steps grew since they were last seen: their Workers train.
        (Steps that went back, to a restored checkpoint's, are only taken as the new mark.)"""
        for slot, steps in worker_steps.items():
            if steps > self.steps_seen.get(slot, steps):
                self.trained.add(slot)
            self.steps_seen[slot] = steps

    def due(self, now: float) -> list[int]:
        """The slots whose replacement is due at ``now``, taken off the waiting list."""
        slots = sorted(i for i, at in self.restart_at.items() if now >= at)
        for slot in slots:
            del self.restart_at[slot]
        return slots

    def cancel_restarts(self) -> None:
        """No replacement is started any more (the run is stopping)."""
        self.restart_at.clear()

    @property
    def waiting(self) -> bool:
        """Some slot waits for its replacement."""
        return bool(self.restart_at)

    def active(self, training: Iterable[int]) -> list[int]:
        """Slots with a Worker ``training`` or waiting to be restarted, and not being retired."""
        return sorted((set(training) | set(self.restart_at)) - self.retiring)

    def new_slot(self) -> int:
        """A slot never used before, for a Worker added when the run scales up."""
        slot = max([*self.failures, -1]) + 1
        self.failures[slot] = 0
        return slot

    def retire(self, slot: int) -> bool:
        """Mark ``slot`` as being retired; True when its Worker is running (and must be told),
        False when it only waited for a restart, which is dropped."""
        self.retiring.add(slot)
        return self.restart_at.pop(slot, None) is None
