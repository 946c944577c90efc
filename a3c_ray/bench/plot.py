"""Learning curves of finished training runs, from their TensorBoard events, as PNG files.

Two figures for a set of runs (one line per run, typically one per seed): the mean return of the
last 100 training episodes (the quantity ``--target-return`` is checked against) against env
steps, and against seconds of training.

Seconds come from the events' wall times. The Monitor writes ``charts/episodic_return`` once per
tick (``monitor.log_every``, 1 s) for all episodes that finished since the last tick, so each
episode's time is interpolated from the ticks' (env steps, wall time) pairs, read from
``ps/updates_per_second`` (written at every tick); time 0 is extrapolated at the run's mean rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from a3c_ray import metric_names as M
from a3c_ray.errors import ConfigError, install_hint
from a3c_ray.rundir import layout
from a3c_ray.rundir.summary import read_summary


class Curve(NamedTuple):
    label: str
    steps: np.ndarray
    """Env step at which each training episode finished."""
    seconds: np.ndarray
    """Training seconds at which each episode finished."""
    mean_100: np.ndarray
    """Mean return of the last (up to) 100 episodes, after each episode."""


def moving_mean(values: np.ndarray, window: int = 100) -> np.ndarray:
    out, recent, total = np.empty(len(values)), deque[float](), 0.0
    for i, v in enumerate(values):
        recent.append(float(v))
        total += float(v)
        if len(recent) > window:
            total -= recent.popleft()
        out[i] = total / len(recent)
    return out


GAP_SECONDS = 120.0
"""Ticks further apart than this (and than 30 of their usual spacing) are two sittings of a run."""


def episode_seconds(
    episode_steps: np.ndarray, tick_steps: np.ndarray, tick_walls: np.ndarray
) -> np.ndarray:
    """Training seconds of each episode, from the ticks' (env steps, wall time) pairs.

    Ticks before the first env step (start-up) and after the last (the final evaluation) say
    nothing about training time and are left out; time 0 is extrapolated at the run's mean rate.
    """
    order = np.argsort(tick_walls, kind="stable")
    steps, walls = tick_steps[order].astype(float), tick_walls[order].astype(float)
    keep = (steps > 0) & np.concatenate([[True], np.diff(steps) > 0])
    steps, walls = steps[keep], walls[keep]
    if len(steps) == 0:
        return np.zeros(len(episode_steps))
    if len(steps) >= 3:
        # A resumed run: the wall time between two sittings is no training. A pause far longer
        # than the ticks' own spacing is counted at the run's median rate instead.
        dt, ds = np.diff(walls), np.diff(steps)
        rates = ds[dt > 0] / dt[dt > 0]
        gap = dt > max(GAP_SECONDS, 30.0 * float(np.median(dt)))
        if gap.any() and len(rates) and np.median(rates) > 0:
            dt[gap] = ds[gap] / float(np.median(rates))
            walls = walls[0] + np.concatenate([[0.0], np.cumsum(dt)])
    rate = (steps[-1] - steps[0]) / (walls[-1] - walls[0]) if len(steps) >= 2 else 0.0
    t0 = walls[0] - steps[0] / rate if rate > 0 else walls[0]
    xs, ts = np.concatenate([[0.0], steps]), np.concatenate([[t0], walls])
    return np.interp(episode_steps, xs, ts) - t0


def load_curve(run_dir: Path) -> Curve:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = run_dir / layout.TENSORBOARD
    if not tb.is_dir():
        raise ConfigError([f"{run_dir} has no tb/ directory: not an a3c-ray run directory"])
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if M.EPISODIC_RETURN not in tags:
        raise ConfigError([f"{run_dir} has no {M.EPISODIC_RETURN} events yet"])
    episodes = acc.Scalars(M.EPISODIC_RETURN)
    steps = np.array([e.step for e in episodes], dtype=float)
    returns = np.array([e.value for e in episodes], dtype=float)
    ticks = acc.Scalars(M.UPDATES_PER_SECOND) if M.UPDATES_PER_SECOND in tags else episodes
    seconds = episode_seconds(
        steps,
        np.array([e.step for e in ticks], dtype=float),
        np.array([e.wall_time for e in ticks], dtype=float),
    )
    return Curve(_label(run_dir), steps, seconds, moving_mean(returns))


def _label(run_dir: Path) -> str:
    label = run_dir.name
    try:
        import yaml

        seed = yaml.safe_load((run_dir / layout.CONFIG).read_text())["run"]["seed"]
        label = f"seed {seed}"
        s = read_summary(run_dir)
        steps, seconds = s.get("steps_to_target"), s.get("seconds_to_target")
        if steps is not None and seconds is not None:
            label += f": {steps / 1e3:.0f}k steps, {seconds:.1f} s"
    except (OSError, KeyError, TypeError, ValueError):
        pass
    return label


def _target(run_dir: Path) -> float | None:
    try:
        value: Any = read_summary(run_dir).get("target_return")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, int | float) else None


def plot_runs(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    """Write ``<env>_return_vs_steps.png`` and ``<env>_return_vs_seconds.png``; their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError([f"a3c-ray plot needs matplotlib: {install_hint('plot')}"]) from None
    curves = [load_curve(Path(d)) for d in run_dirs]
    env = _env_name(Path(run_dirs[0]))
    target = _target(Path(run_dirs[0]))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for x, xlabel, name in (
        ("steps", "env steps", "steps"),
        ("seconds", "training seconds", "seconds"),
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for c in curves:
            ax.plot(getattr(c, x), c.mean_100, label=c.label, linewidth=1.5)
        if target is not None:
            ax.axhline(
                target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}"
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean return, last 100 training episodes")
        ax.set_title(f"{env}: return against {xlabel}")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        path = out_dir / f"{env.lower().replace('/', '_').replace('-', '_')}_return_vs_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _env_name(run_dir: Path) -> str:
    """The run's env id, from summary.json or, while the run still trains, config.yaml."""
    try:
        return str(read_summary(run_dir)["env_id"])
    except (OSError, KeyError, ValueError):
        pass
    try:
        import yaml

        return str(yaml.safe_load((run_dir / layout.CONFIG).read_text())["env"]["id"])
    except (OSError, KeyError, TypeError, ValueError):
        return "run"


class Evals(NamedTuple):
    steps: np.ndarray
    """Env step of each evaluation."""
    seconds: np.ndarray
    """Training seconds of each evaluation, interpolated as for the episodes."""
    returns: np.ndarray
    """Mean return of the evaluation's episodes."""


def load_evals(run_dir: Path) -> Evals:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / layout.TENSORBOARD), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if M.EVAL_RETURN not in tags or M.UPDATES_PER_SECOND not in tags:
        return Evals(np.zeros(0), np.zeros(0), np.zeros(0))
    evals = acc.Scalars(M.EVAL_RETURN)
    ticks = acc.Scalars(M.UPDATES_PER_SECOND)
    steps = np.array([e.step for e in evals], dtype=float)
    seconds = episode_seconds(
        steps,
        np.array([e.step for e in ticks], dtype=float),
        np.array([e.wall_time for e in ticks], dtype=float),
    )
    return Evals(steps, seconds, np.array([e.value for e in evals], dtype=float))


def first_at(xs: np.ndarray, values: np.ndarray, level: float, skip: int = 0) -> float | None:
    """The first x whose value is at least ``level``, ignoring the first ``skip`` values."""
    hits = np.flatnonzero(values[skip:] >= level)
    return float(xs[skip + hits[0]]) if hits.size else None


def milestones(run_dir: Path, levels: list[float], frames_per_step: int) -> list[dict[str, Any]]:
    """For each level: frames and hours of training when the mean of the last 100 training
    episodes (from the 100th on), and when an evaluation, first reached it."""
    curve, evals = load_curve(run_dir), load_evals(run_dir)
    rows = []
    for level in levels:
        row: dict[str, Any] = {"level": level}
        for name, steps, seconds, values, skip in (
            ("train", curve.steps, curve.seconds, curve.mean_100, 99),
            ("eval", evals.steps, evals.seconds, evals.returns, 0),
        ):
            at = first_at(np.arange(len(values), dtype=float), values, level, skip)
            i = None if at is None else int(at)
            row[f"{name}_frames"] = None if i is None else int(steps[i]) * frames_per_step
            row[f"{name}_hours"] = None if i is None else float(seconds[i]) / 3600.0
        rows.append(row)
    return rows


def plot_learning(
    run_dirs: list[Path],
    out_dir: Path,
    frames_per_step: int,
    references: Sequence[tuple[str, float]] = (),
) -> Path:
    """Runs' training means (last 100 episodes) and evaluations against frames and hours, in one
    ``<env>_learning.png`` (the env of the first run): one colour per run, its evaluations as
    dots of that colour; each of ``references`` (label, return) a grey dashed line across both
    charts."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError([f"a3c-ray plot needs matplotlib: {install_hint('plot')}"]) from None
    runs = [(Path(d), load_curve(Path(d)), load_evals(Path(d))) for d in run_dirs]
    env = _env_name(runs[0][0])
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0), dpi=100, sharey=True)
    unit = "frames" if frames_per_step > 1 else "env steps"
    several = len(runs) > 1
    for ax, (key, factor), xlabel in (
        (axes[0], ("steps", frames_per_step / 1e6), f"{unit} (millions)"),
        (axes[1], ("seconds", 1 / 3600.0), "hours of training"),
    ):
        for i, (_, curve, evals) in enumerate(runs):
            name = f"{curve.label.split(':')[0]}, " if several else ""
            colour = f"C{i}"
            ax.plot(
                getattr(curve, key) * factor,
                curve.mean_100,
                color=colour,
                label=f"{name}training, mean of last 100",
            )
            if len(evals.steps):
                ax.plot(
                    getattr(evals, key) * factor,
                    evals.returns,
                    "o",
                    color=colour,
                    markersize=4 if not several else 3,
                    alpha=1.0 if not several else 0.7,
                    label=f"{name}evaluation, mean of its games",
                )
        for j, (label, value) in enumerate(references):
            ax.axhline(
                value,
                color="0.45",
                linestyle=("--", ":", "-.")[j % 3],
                linewidth=1.0,
                label=f"{label}: {value:g}",
            )
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return (raw score of whole games)")
    axes[0].legend(
        # Clear of a rising curve where lines of references run across the chart.
        loc="upper left" if several or references else "lower right",
        fontsize="x-small" if several else "small",
    )
    fig.suptitle(f"{env}: {', '.join(d.name for d, _, _ in runs)}")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{env.lower().replace('/', '_').replace('-', '_')}_learning.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def format_milestones(rows: list[dict[str, Any]], frames_per_step: int) -> str:
    unit = "frames" if frames_per_step > 1 else "env steps"

    def cell(frames: int | None, hours: float | None) -> str:
        if frames is None or hours is None:
            return "not reached"
        return f"{frames / 1e6:.2f}M {unit}, {hours:.2f} h"

    lines = [
        "| return | training mean of last 100 first at | an evaluation first at |",
        "|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['level']:g} | {cell(r['train_frames'], r['train_hours'])} "
            f"| {cell(r['eval_frames'], r['eval_hours'])} |"
        )
    return "\n".join(lines)
