"""summary.json's counters come from the ParameterServer's Progress by name, not by hand."""

from __future__ import annotations

import dataclasses
import math

from a3c_ray.algo.messages import Progress
from a3c_ray.rundir.summary import FROM_PROGRESS, RunSummary, progress_part


def progress(**values: object) -> Progress:
    # Every field a different value, so that a key read from the wrong field shows.
    base = {f.name: i + 1 for i, f in enumerate(dataclasses.fields(Progress))}
    return dataclasses.replace(Progress(**base), **values)  # type: ignore[arg-type]


def test_every_counter_the_summary_shares_with_progress_is_carried_under_its_name() -> None:
    p = progress(stop_reason="time_limit", train_seconds=12.34567, mean_return_100=471.5)
    part = progress_part(p)
    fields = {f.name for f in dataclasses.fields(Progress)}
    shared = [k for k in RunSummary.__annotations__ if FROM_PROGRESS.get(k, k) in fields]
    assert set(part) == set(shared)
    assert {"env_steps", "gradient_updates", "stopped_because", "staleness_max"} <= set(part)
    for key in shared:
        if key not in ("train_seconds",):
            assert part[key] == getattr(p, FROM_PROGRESS.get(key, key)), key  # type: ignore[literal-required]
    assert part["train_seconds"] == 12.346
    assert part["gradient_updates"] == p.gradients_applied
    assert part["stopped_because"] == "time_limit"


def test_a_mean_return_before_the_first_episode_is_null() -> None:
    assert progress_part(progress(mean_return_100=math.nan))["mean_return_100"] is None
