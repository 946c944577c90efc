"""How a finished run is scored for ``a3c-ray bench seeds``: the steps and seconds to first reach
the target, the final mean of the last 100 training episodes, the lowest mean after the target,
and whether the seed held and kept what it learned; and the counts and medians over seeds."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from a3c_ray.config import Config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.rundir.summary import RunSummary, read_summary


@dataclass
class SeedResult:
    seed: int
    env_steps: int
    train_seconds: float
    steps_to_target: int | None
    """Env steps when the mean of the last 100 episodes first reached the target; None if never."""
    seconds_to_target: float | None
    final_mean: float | None
    """Mean return of the last 100 training episodes when the run ended."""
    low_after_target: float | None
    """Lowest mean of the last 100 episodes after first reaching the target; None if never reached."""
    held: bool
    """Reached the target and never fell below the floor after."""
    kept: bool
    """Held, and ended at the target or above."""
    run_dir: str | None = None
    trace: list[dict[str, Any]] | None = None
    """With ``--in-process --trace-every K``: what the ParameterServer saw every K env steps."""


def seed_result(
    seed: int,
    steps: np.ndarray,
    seconds: np.ndarray,
    mean_100: np.ndarray,
    target: float,
    floor: float,
    env_steps: int,
    train_seconds: float,
    window: int = 100,
) -> SeedResult:
    """Stability figures of one run from its per-episode means (the first ``window - 1`` episodes
    have no full window and cannot reach the target, as in the run's own stop rule)."""
    full = np.arange(len(mean_100)) >= window - 1
    hits = np.flatnonzero(full & (mean_100 >= target))
    final = float(mean_100[-1]) if len(mean_100) else None
    if hits.size == 0:
        return SeedResult(seed, env_steps, train_seconds, None, None, final, None, False, False)
    first = int(hits[0])
    low = float(mean_100[first:].min())
    held = low >= floor
    return SeedResult(
        seed,
        env_steps,
        train_seconds,
        int(steps[first]),
        float(seconds[first]),
        final,
        low,
        held,
        held and final is not None and final >= target,
    )


def summarize(results: list[SeedResult], target: float, floor: float) -> dict[str, Any]:
    reached = [r for r in results if r.steps_to_target is not None]

    def median(xs: list[float]) -> float | None:
        return float(statistics.median(xs)) if xs else None

    return {
        "seeds": len(results),
        "target": target,
        "floor": floor,
        "reached": len(reached),
        "final_at_target": sum(
            1 for r in results if r.final_mean is not None and r.final_mean >= target
        ),
        "held": sum(r.held for r in results),
        "kept": sum(r.kept for r in results),
        "median_steps_to_target": median([float(r.steps_to_target or 0) for r in reached]),
        "median_seconds_to_target": median([float(r.seconds_to_target or 0) for r in reached]),
        "median_final_mean": median([r.final_mean for r in results if r.final_mean is not None]),
    }


@dataclass
class FinishedRun:
    seed: int
    run_dir: Path
    summary: RunSummary
    steps: np.ndarray
    seconds: np.ndarray
    mean_100: np.ndarray


def read_run(run_dir: Path) -> FinishedRun:
    """A finished run's seed, summary and per-episode means (from its TensorBoard episodes)."""
    from a3c_ray.bench.plot import load_curve

    try:
        summary = read_summary(run_dir)
        seed = Config.load(run_dir / layout.CONFIG).run.seed
    except (OSError, ValueError) as e:
        raise ConfigError([f"{run_dir} is not a finished a3c-ray run: {e}"]) from None
    curve = load_curve(run_dir)
    return FinishedRun(seed, run_dir, summary, curve.steps, curve.seconds, curve.mean_100)


def result_of(run: FinishedRun, target: float, floor: float) -> SeedResult:
    r = seed_result(
        run.seed,
        run.steps,
        run.seconds,
        run.mean_100,
        target,
        floor,
        int(run.summary.get("env_steps") or 0),
        float(run.summary.get("train_seconds") or 0.0),
    )
    r.run_dir = str(run.run_dir)
    return r
