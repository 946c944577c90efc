"""``a3c-ray plot RUN_DIR...``: the learning curves of training runs, from their TensorBoard
events, as PNG files (``a3c_ray.bench.plot``).

Without ``--levels``: the mean return of the last 100 training episodes against env steps and
against training seconds, one line per run (``<env>_return_vs_steps.png``, ``..._seconds.png``).
With ``--levels R,R,...``: the runs (typically seeds of one config) in one chart against frames
and hours with their evaluations (``<env>_learning.png``), and for each run a table of when it
first reached each return. A run still training can be drawn as far as it got.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from a3c_ray.config import Config
from a3c_ray.errors import ConfigError, install_hint
from a3c_ray.rundir import layout


def levels(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected returns like 0,10,18, got '{text}'") from None


def reference(text: str) -> tuple[str, float]:
    """``LABEL=RETURN``, e.g. ``SB3 A2C (40M frames)=279.8``: a peer's score drawn as a line."""
    label, sep, value = text.rpartition("=")
    try:
        if not sep or not label.strip():
            raise ValueError
        return label.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LABEL=RETURN like 'A2C, 40M frames=280', got '{text}'"
        ) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="training runs")
    add_plot_flags(p)


def add_plot_flags(p: argparse.ArgumentParser, out_default: Path = Path(".")) -> None:
    p.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=out_default,
        help=f"directory for the PNG files (default {out_default})",
    )
    p.add_argument(
        "--levels",
        type=levels,
        metavar="R,R,...",
        help="plot the runs against frames and hours with their evaluations, and print when "
        "each first reached each of these returns (e.g. 0,10,18 for Pong)",
    )
    p.add_argument(
        "--reference",
        type=reference,
        action="append",
        default=[],
        metavar="LABEL=RETURN",
        help="with --levels: draw a peer's score as a dashed line across both charts, e.g. "
        "--reference 'SB3 A2C, 40M frames=279.8' (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="with --levels: print the tables as JSON")


def draw(
    run_dirs: list[Path],
    out: Path,
    at_levels: list[float] | None,
    as_json: bool,
    references: list[tuple[str, float]] | None = None,
) -> int:
    """Write the runs' charts into ``out`` and print their paths (and, with ``at_levels``, when
    each run first reached each level; ``references`` are peers' scores drawn as lines)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError([f"a3c-ray plot needs matplotlib: {install_hint('plot')}"])
    from a3c_ray.bench import plot as bp

    if not at_levels:
        for path in bp.plot_runs(run_dirs, out):
            print(path)
        return 0
    from a3c_ray.envs.atari import FRAME_SKIP
    from a3c_ray.envs.make import is_atari

    # Atari's charts count emulator frames, as the papers do: FRAME_SKIP of them per agent step.
    first = run_dirs[0] / layout.CONFIG
    cfg = Config.load(first) if first.exists() else None
    fps = FRAME_SKIP if cfg is not None and is_atari(cfg.env.id) else 1
    print(bp.plot_learning(run_dirs, out, fps, references or []))
    for run_dir in run_dirs:
        rows = bp.milestones(run_dir, at_levels, fps)
        if len(run_dirs) > 1 and not as_json:
            print(f"{run_dir}:")
        print(json.dumps(rows) if as_json else bp.format_milestones(rows, fps))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.reference and not args.levels:
        raise ConfigError(["--reference draws on the charts of --levels: give --levels too"])
    return draw(args.run_dirs, args.out, args.levels, args.json, args.reference)
