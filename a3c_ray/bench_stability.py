"""``a3c-ray bench --seeds N --steps S``: does a config learn, and does it keep what it learned?

Trains seeds ``first_seed .. first_seed + N - 1`` in turn, each for ``S`` env steps with no target
(so a run never stops at its first success), on one Ray session. From each run's TensorBoard
episodes it reads the mean return of the last 100 training episodes after every episode, and
reports per seed: the steps and training seconds to first reach the target, the final mean, and
the lowest mean after first reaching the target. A seed *holds* when it reached the target and
its mean never fell below ``floor`` afterwards, and *keeps* when it also ends at the target or
above. A fast time to target bought with a collapse afterwards shows up here, not in a timing.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from a3c_ray.config import Config


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


def train_seed(cfg: Config, seed: int, run_dir: Path) -> tuple[dict[str, Any], Path]:
    """One whole run of ``cfg`` with ``seed`` on the connected Ray; its summary and directory."""
    import json
    import time

    from tqdm import tqdm

    from a3c_ray import driver

    c = Config.from_dict(cfg.to_dict())
    c.run.seed, c.run.progress = seed, False
    c.run.target_return = None  # never stop at the first success: what follows it is measured
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(c.to_yaml())
    run = driver.Run(c, run_dir, c.run.workers or 1)
    t0 = time.monotonic()
    try:
        run.watch(tqdm(total=c.run.max_steps, disable=True))
        summary = run.finish(t0)
    finally:
        run.shutdown()
    if run.errors:
        raise RuntimeError("; ".join(run.errors))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary, run_dir


@dataclass
class FinishedRun:
    seed: int
    run_dir: Path
    summary: dict[str, Any]
    steps: np.ndarray
    seconds: np.ndarray
    mean_100: np.ndarray


def read_run(run_dir: Path) -> FinishedRun:
    """A finished run's seed, summary and per-episode means (from its TensorBoard episodes)."""
    import json

    from a3c_ray.bench_plot import load_curve
    from a3c_ray.config import ConfigError

    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        seed = Config.load(run_dir / "config.yaml").run.seed
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


def measure_in_process(
    cfg: Config,
    seeds: list[int],
    target: float,
    floor: float,
    trace_every: int = 0,
    echo: Any = None,
) -> dict[str, Any]:
    """Train every seed in turn in this process, without Ray (``bench_inprocess``)."""
    from a3c_ray import bench_inprocess

    results = []
    for seed in seeds:
        c = Config.from_dict(cfg.to_dict())
        c.run.seed = seed
        run = bench_inprocess.train(c, c.run.workers or 1, trace_every)
        r = seed_result(
            seed,
            run.steps,
            run.seconds,
            run.mean_100,
            target,
            floor,
            run.env_steps,
            run.train_seconds,
        )
        r.trace = run.trace or None
        results.append(r)
        if echo is not None:
            echo(r)
    return report(cfg, results, target, floor, in_process=True)


def report(
    cfg: Config, results: list[SeedResult], target: float, floor: float, in_process: bool
) -> dict[str, Any]:
    return {
        "settings": {
            "env": cfg.env.id,
            "workers": cfg.run.workers,
            "steps": cfg.run.max_steps,
            "time_limit": cfg.run.time_limit,
            "optimizer": cfg.algo.optimizer,
            "lr": cfg.algo.lr,
            "t_max": cfg.algo.t_max,
            "envs_per_worker": cfg.env.num_envs,
            "in_process": in_process,
        },
        "runs": [asdict(r) for r in results],
        "summary": summarize(results, target, floor),
    }


def measure(
    cfg: Config,
    seeds: list[int],
    target: float,
    floor: float,
    runs_dir: Path | None,
    address: str | None,
    dashboard_port: int | None,
    echo: Any = None,
) -> dict[str, Any]:
    """Train every seed in turn on one Ray session; per-seed figures and the counts."""
    import ray

    from a3c_ray.bench import connect

    started = connect(cfg, cfg.run.workers or 1, address, dashboard_port)
    results: list[SeedResult] = []
    tmp = None if runs_dir is not None else tempfile.TemporaryDirectory(prefix="a3c-stability-")
    base = runs_dir if runs_dir is not None else Path(tmp.name)  # type: ignore[union-attr]
    try:
        for seed in seeds:
            _, run_dir = train_seed(cfg, seed, base / f"seed-{seed}")
            r = result_of(read_run(run_dir), target, floor)
            r.run_dir = str(run_dir) if runs_dir is not None else None
            results.append(r)
            if echo is not None:
                echo(r)
    finally:
        if tmp is not None:
            tmp.cleanup()
        if started:
            ray.shutdown()
    return report(cfg, results, target, floor, in_process=False)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_row(r: SeedResult) -> str:
    steps = "-" if r.steps_to_target is None else f"{r.steps_to_target / 1e3:.0f}k"
    return (
        f"| {r.seed} | {steps} | {_num(r.seconds_to_target, '.1f')} | {_num(r.final_mean, '.1f')} "
        f"| {_num(r.low_after_target, '.1f')} | {'yes' if r.held else 'no'} "
        f"| {r.env_steps / 1e3:.0f}k | {r.train_seconds:.0f} |"
    )


HEADER = (
    "| seed | steps to target | s to target | final mean | lowest after target | held "
    "| env steps | train s |\n|---|---|---|---|---|---|---|---|"
)


def format_report(report: dict[str, Any]) -> str:
    s, st = report["summary"], report["settings"]
    rows = [format_row(SeedResult(**r)) for r in report["runs"]]
    where = "in one process" if st.get("in_process") else "on Ray"
    lines = [
        f"stability of {st['env']}: {s['seeds']} seeds x {st['steps']:,} env steps, "
        f"{st['workers']} Workers {where}, {st['optimizer']} lr {st['lr']:g}, "
        f"{st['envs_per_worker']} envs x t_max {st['t_max']}",
        HEADER,
        *rows,
        "",
        f"target {s['target']:g}, floor {s['floor']:g}: reached {s['reached']}/{s['seeds']}, "
        f"final >= target {s['final_at_target']}/{s['seeds']}, held (never below the floor "
        f"after the target) {s['held']}/{s['seeds']}, kept (held and final >= target) "
        f"{s['kept']}/{s['seeds']}",
        f"median to target: {_num(s['median_steps_to_target'], ',.0f')} env steps, "
        f"{_num(s['median_seconds_to_target'], '.1f')} s of training; "
        f"median final mean {_num(s['median_final_mean'], '.1f')}",
    ]
    for r in report["runs"]:
        if r.get("trace"):
            from a3c_ray.bench_inprocess import format_trace

            lines += ["", f"seed {r['seed']}, every window:", format_trace(r["trace"])]
    return "\n".join(lines)
