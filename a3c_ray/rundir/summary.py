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
    """target, max_steps, time_limit, interrupted or error."""
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


def read_summary(run_dir: str | Path) -> RunSummary:
    """The summary of a finished run in a local directory."""
    return cast(RunSummary, json.loads((Path(run_dir) / layout.SUMMARY).read_text()))


def summary_json(summary: RunSummary) -> str:
    return json.dumps(summary, indent=2)
