"""The chaos soak's plan (what it does and when) and its records (each fault and its recovery, the
soak's result) and when training went on after a fault, without Ray: ``lab.chaos.soak`` runs a plan,
``lab.chaos.report`` reads a result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from a3c_ray.algo.messages import Progress
from lab.chaos.checkpoints import CheckpointSeen


@dataclass
class ChaosPlan:
    """What the soak does and when; every time is in seconds from the run's first env steps."""

    seconds: float
    """Training seconds (the run's time limit)."""
    worker_every: float = 30.0
    """Seconds between kills of a random Worker; 0: none."""
    ps_every: float = 300.0
    """Seconds between kills of the ParameterServer (a random shard of several); 0: none."""
    monitor_at: float | None = None
    """When the Monitor is killed, once; None: never."""
    node_at: float | None = None
    """When a worker node that hosts a Worker is lost; None: never."""
    node_down: float = 30.0
    """Seconds the lost node stays away before it is added back."""
    sample_every: float = 10.0
    """Seconds between samples of every actor's resident memory."""
    quiet_end: float = 15.0
    """No fault comes in the last seconds: each fault's recovery is seen before the run ends."""
    worker_nodes: int = 2
    seed: int = 0

    def schedule(self) -> list[tuple[float, str]]:
        """(when, what) in time order: worker, ps, monitor, node (lost) and node-back."""
        last = self.seconds - self.quiet_end
        events: list[tuple[float, str]] = []
        for every, kind in ((self.worker_every, "worker"), (self.ps_every, "ps")):
            k = 1
            while every > 0 and k * every < last:
                events.append((k * every, kind))
                k += 1
        if self.monitor_at is not None and self.monitor_at < last:
            events.append((self.monitor_at, "monitor"))
        if self.node_at is not None and self.node_at < last:
            events += [(self.node_at, "node"), (self.node_at + self.node_down, "node-back")]
        return sorted(events)


@dataclass
class Fault:
    kind: str
    """worker, ps, monitor or node."""
    target: str
    """The actor's name in its run (Worker-1, ParameterServer, Monitor) or the node (node 2)."""
    at: float
    recovered_after: float | None = None
    """Seconds until training went on (see the module's docstring); None: it never did."""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class SoakResult:
    plan: ChaosPlan
    run_id: str
    run_dir: str
    job_status: str
    started_after: float
    """Seconds from the job's submission to its first env steps."""
    faults: list[Fault]
    checkpoints: list[CheckpointSeen]
    files_left: dict[str, str]
    """Each checkpoint file left in the run directory at the end: loaded, or why not."""
    progress: list[dict[str, Any]]
    """(at, env_steps, mean_return_100, episodes, gradients dropped by reason) every second."""
    memory: list[dict[str, Any]]
    """(at, actor, pid, rss and anon in bytes, age of its process in seconds) per actor per
    sample; ``anon`` is the anonymous part of ``rss`` (``anonymous_rss``), where it could be read."""
    actor_restarts: dict[str, int]
    """Ray's restarts of each actor it restarts itself (the ParameterServer, the Monitor)."""
    summary: dict[str, Any]
    """The run's summary.json."""
    job_logs_tail: str = ""


def lost_slots(pending: list[Fault]) -> set[int]:
    """Worker slots lost to a fault still ``pending`` (not yet trained on): the slot of a killed
    Worker, or those of the lost node, whose death Ray may not have noticed yet. The soak kills
    only a Worker that trains, so that every kill costs the run one restart of its own."""
    lost: set[int] = set()
    for f in pending:
        if f.kind == "worker":
            lost.add(int(f.detail["slot"]))
        elif f.kind == "node":
            lost.update(int(s) for s in f.detail["slots"])
    return lost


def went_on(f: Fault, p: Progress, now: float, latest_checkpoint: str | None) -> bool:
    """Has training gone on after fault ``f`` (``lab.chaos.soak``'s docstring says what that means),
    seen at ``now`` in progress ``p``, with ``latest_checkpoint`` the one the run names now? Notes
    what it saw on the way in ``f.detail``; a node loss is over once all its Workers are back."""
    d = f.detail
    if f.kind == "worker":
        return slot_back(d, d["slot"], p)
    if f.kind == "ps":
        if p.ps_restarts <= d["ps_restarts"]:
            return False  # still the old server (ray.kill is asynchronous), or none yet
        if "restored_steps" not in d:
            d["restored_steps"] = p.env_steps
            d["restored_from"] = p.restored_from
            d["lost_steps"] = d["env_steps"] - p.env_steps
            return False
        return p.env_steps > d["restored_steps"]
    if f.kind == "monitor":
        return latest_checkpoint is not None and latest_checkpoint != d["latest_checkpoint"]
    if f.kind == "node":
        if "trains_on_after" not in d and p.env_steps > d["env_steps"]:
            d["trains_on_after"] = round(now - f.at, 2)
        if "back_at" in d and all(slot_back(d, s, p) for s in d["slots"]):
            d["slots_back_after_return"] = round(now - d["back_at"], 2)
            return True
    return False


def slot_back(d: dict[str, Any], slot: int, p: Progress) -> bool:
    """Has Worker slot ``slot`` pushed since its Worker was lost? A ParameterServer restored
    since then took its counters back to a checkpoint: from there, any push counts."""
    baselines = d.setdefault("baselines", {slot: d.get("baseline", 0)})
    if p.ps_restarts != d["ps_restarts"]:
        d["ps_restarts"] = p.ps_restarts
        for s in baselines:
            baselines[s] = int(p.worker_steps.get(s, 0))
        return False
    return int(p.worker_steps.get(slot, 0)) > baselines[slot]
