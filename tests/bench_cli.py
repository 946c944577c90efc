"""The bench command's parser and the lab's, and the tiniest settings, shared by the bench tests;
and a finished run's TensorBoard events, written without training."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a3c_ray.commands import bench
from a3c_ray.rundir import layout

TINY = ["throughput", "--workers", "1", "--envs-per-worker", "2", "--seconds", "1.5"]
TINY += ["--raw-seconds", "0.5", "--ps-seconds", "0.5", "--in-flight", "4"]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(argv)


def lab_parse(argv: list[str]) -> argparse.Namespace:
    """``python -m lab``'s parser (the checkout's own measurements) over ``argv``."""
    from lab.cli import build_parser

    return build_parser().parse_args(argv)


def write_fake_run(run_dir: Path, seed: int) -> None:
    from tensorboardX import SummaryWriter

    from a3c_ray import metric_names as M

    w = SummaryWriter(str(run_dir / layout.TENSORBOARD))
    for tick in range(1, 6):
        step = tick * 1000
        w.add_scalar(M.UPDATES_PER_SECOND, 25.0, step, walltime=1000.0 + tick)
        for i in range(20):
            w.add_scalar(M.EPISODIC_RETURN, 20.0 * tick + i, step - 50 * i, walltime=1000.0 + tick)
    w.close()
    (run_dir / layout.CONFIG).write_text(f"run:\n  seed: {seed}\n")
    summary = {"env_id": "CartPole-v1", "target_return": 450, "steps_to_target": None}
    (run_dir / layout.SUMMARY).write_text(json.dumps(summary))
