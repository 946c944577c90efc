"""``summary.json``: what a run reports when it ends, however it ends."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, TypedDict, cast

from a3c_ray.algo.messages import Progress
from a3c_ray.rundir import layout


class RunSummary(TypedDict, total=False):
    """The keys of ``summary.json``. A run that could not start has ``env_id``, ``run_dir`` and
    ``errors`` only; every other run has them all."""

    env_id: str
    workers: int
    """The Workers at the end (after any ``a3c-ray scale``)."""
    workers_max: int
    env_steps: int
    gradient_updates: int
    train_seconds: float
    """Seconds from the first gradient applied, resumes included."""
    wall_seconds: float
    """Seconds of this invocation, start-up and final evaluation included."""
    stopping_seconds: float | None
    """Seconds from the driver seeing the stop decision to the last Worker done (or killed):
    at most about ``run.stop_grace``."""
    env_steps_per_second: float | None
    """Env steps per second of training in this invocation (a resumed run's earlier sittings
    are in ``env_steps`` and ``train_seconds``, not in this rate)."""
    target_return: float | None
    seconds_to_target: float | None
    steps_to_target: int | None
    mean_return_100: float | None
    episodes: int
    best_eval_return: float | None
    last_eval_return: float | None
    checkpoint: str | None
    """The newest checkpoint: a path, or a URI for a run directory at a URI."""
    eval_failures: int
    stopped_because: str | None
    """target, max_steps, time_limit, interrupted, error, or callback (a callback of
    ``a3c_ray.train`` returned False or raised ``StopTraining``)."""
    worker_restarts: int
    ps_restarts: int
    env_restarts: int
    gradients_dropped: int
    staleness_mean: float
    staleness_max: int
    version: int
    resumed_from: str | None
    worker_nodes: list[str]
    pushes: int
    """Pushes of the Workers that finished (a killed Worker's are not counted)."""
    pushes_by_graph: int
    """Of those, the pushes sent through compiled graphs (``ps.graph_workers``)."""
    ps_nodes: list[str]
    """The Ray node of each ParameterServer shard, coordinator first."""
    run_id: str
    run_dir: str
    failures: list[str]
    """The last 20 Worker failures, one line each."""
    errors: list[str]


FROM_PROGRESS = {"gradient_updates": "gradients_applied", "stopped_because": "stop_reason"}
"""The summary's keys that ``Progress`` names otherwise; every other key the two share is the same
counter under the same name."""


def progress_part(p: Progress) -> RunSummary:
    """The keys of a summary that the ParameterServer's counters give (seconds to the
    millisecond, a mean return of NaN as null)."""
    fields = {f.name for f in dataclasses.fields(p)}
    out: dict[str, Any] = {}
    for key in RunSummary.__annotations__:
        name = FROM_PROGRESS.get(key, key)
        if name in fields:
            out[key] = getattr(p, name)
    out["train_seconds"] = round(p.train_seconds, 3)
    out["mean_return_100"] = p.mean_return_100 if math.isfinite(p.mean_return_100) else None
    return cast(RunSummary, out)


@dataclasses.dataclass(frozen=True)
class Summary:
    """A run's ``summary.json`` as typed fields (``RunSummary``'s keys, each documented there),
    with the run directory and the best checkpoint: what ``a3c_ray.train`` returns.

    A key the run did not get to write (one that could not start) takes the default here."""

    env_id: str
    run_dir: str
    best_checkpoint: str | None = None
    """The checkpoint of the best evaluation (the ``best`` pointer's), else the newest one."""
    stopped_because: str | None = None
    env_steps: int = 0
    gradient_updates: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    stopping_seconds: float | None = None
    env_steps_per_second: float | None = None
    target_return: float | None = None
    seconds_to_target: float | None = None
    steps_to_target: int | None = None
    mean_return_100: float | None = None
    episodes: int = 0
    best_eval_return: float | None = None
    last_eval_return: float | None = None
    checkpoint: str | None = None
    eval_failures: int = 0
    workers: int = 0
    workers_max: int = 0
    worker_restarts: int = 0
    ps_restarts: int = 0
    env_restarts: int = 0
    gradients_dropped: int = 0
    staleness_mean: float = 0.0
    staleness_max: int = 0
    version: int = 0
    resumed_from: str | None = None
    worker_nodes: list[str] = dataclasses.field(default_factory=list)
    pushes: int = 0
    pushes_by_graph: int = 0
    ps_nodes: list[str] = dataclasses.field(default_factory=list)
    run_id: str = ""
    failures: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, summary: RunSummary, best_checkpoint: str | None = None) -> Summary:
        """The typed form of a summary; keys it does not know (a newer run's) are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: v for k, v in summary.items() if k in known and v is not None}
        return cls(**{"run_dir": "", **values, "best_checkpoint": best_checkpoint})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_summary(run_dir: str | Path) -> RunSummary:
    """The summary of a finished run in a local directory."""
    return cast(RunSummary, json.loads((Path(run_dir) / layout.SUMMARY).read_text()))


def summary_json(summary: RunSummary) -> str:
    return json.dumps(summary, indent=2)
