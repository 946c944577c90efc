"""``python -m lab stability RUN_DIR...``: the stability table of runs that have already finished
(Ray jobs of the shipped configs, say), each judged as ``a3c-ray bench seeds`` judges its own:
the steps and seconds to first reach the target, the final mean of the last 100 episodes, the
lowest mean after the target, and whether the seed held and kept it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a3c_ray.bench.report import format_stability
from a3c_ray.bench.stability_score import read_run, result_of
from a3c_ray.commands.bench_stability import (
    add_judge_arguments,
    default_floor,
    report,
    stability_target,
)
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Finished runs, and ``--learned-return`` and ``--floor`` as ``bench seeds`` has them."""
    p.add_argument(
        "stability_of",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="finished runs (e.g. Ray jobs), read as a3c-ray bench seeds reads its own",
    )
    add_judge_arguments(p)


def run(args: argparse.Namespace) -> int:
    runs = [read_run(Path(d)) for d in args.stability_of]
    cfg = Config.load(Path(args.stability_of[0]) / layout.CONFIG)
    target = stability_target(cfg, args)
    if target is None:
        raise ConfigError([f"stability needs --learned-return: {cfg.env.id} sets none"])
    floor = default_floor(target, args.floor)
    results = [result_of(r, target, floor) for r in runs]
    out = report(cfg, results, target, floor, in_process=False)
    print(json.dumps(out) if args.json else format_stability(out))
    return 0
