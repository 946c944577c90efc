"""``a3c-ray bench MEASURE``: one measurement per run, each with its own flags.

- ``throughput``: how fast a3c-ray trains on this machine, against this machine's own limit
  (``a3c_ray.bench.measure``): the raw limit (one process stepping K vector envs with the same
  policy's batched forward pass and action sampling, no learning, per core), the
  ParameterServer's gradient applications per second (in process and as a Ray actor), and
  training with N Workers for each N of ``--scaling``; the ratio of training to the raw limit x N,
  and a model of where throughput stops growing with N.
- ``profile``: where each Worker's time goes per agent step.
- ``atari``: an Atari config's emulator, env and training frames per second.
- ``serve``: a served policy under HTTP clients (``bench_serve``).
- ``seeds``: whether a config learns and keeps it over seeds (``bench_stability``).

These are what a user measures of their own machine, cluster and config. The project's own lab
(the chaos soak over local clusters, ParameterServer shard sweeps, the stability table of
finished runs) is ``python -m lab`` in a source checkout. The learning curves of runs are
``a3c-ray plot``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from a3c_ray.algo import choices
from a3c_ray.bench import measure as bench_measure
from a3c_ray.bench import throughput as bm
from a3c_ray.bench.report import format_atari, format_profile, format_report
from a3c_ray.commands import bench_serve, flags
from a3c_ray.commands import bench_stability as bs
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import ConfigError

T = bench_measure.Times


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected worker counts like 1,2,4, got '{text}'"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected worker counts >= 1, got '{text}'")
    return counts


def add_config(p: argparse.ArgumentParser) -> None:
    """The config under test: the field flags a measurement reads, ``--config`` and ``--set``."""
    flags.add_field_flags(p, ("--env", "--workers", "--envs-per-worker", "--t-max"))
    flags.add_config_flags(p)


def add_ray(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="Ray cluster to attach to (default: an embedded Ray)")
    flags.add_dashboard_flags(p)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def add_seconds(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seconds",
        type=float,
        default=T.seconds,
        help=f"training seconds measured per run, after {bm.WARMUP_SECONDS:g} s of warm-up",
    )


def add_ps_seconds(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ps-seconds",
        type=float,
        default=T.ps_seconds,
        help="seconds of each ParameterServer measurement",
    )


def add_repeat(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--repeat",
        type=int,
        default=T.repeat,
        help="run every measurement this many times and report medians",
    )


def add_throughput(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument(
        "--scaling",
        type=_counts,
        metavar="N,N,...",
        help="also measure training with each of these numbers of Workers, e.g. 1,2,4",
    )
    add_seconds(p)
    p.add_argument(
        "--raw-seconds", type=float, default=T.raw_seconds, help="seconds of the raw limit"
    )
    add_ps_seconds(p)
    p.add_argument(
        "--in-flight",
        type=int,
        default=T.in_flight,
        help="pushes kept in flight to the ParameterServer actor",
    )
    add_repeat(p)
    add_ray(p)
    add_json(p)


def add_profile(p: argparse.ArgumentParser) -> None:
    add_config(p)
    add_seconds(p)
    add_ps_seconds(p)
    add_repeat(p)
    add_ray(p)
    add_json(p)


def add_atari(p: argparse.ArgumentParser) -> None:
    add_config(p)
    add_seconds(p)
    p.add_argument(
        "--cost-seconds",
        type=float,
        default=T.cost_seconds,
        help="seconds of the in-process cost measurement; 0 skips it",
    )
    add_ray(p)
    add_json(p)


def add_serve(p: argparse.ArgumentParser) -> None:
    bench_serve.add_arguments(p)
    add_repeat(p)
    add_ray(p)
    add_json(p)


def add_seeds(p: argparse.ArgumentParser) -> None:
    add_config(p)
    bs.add_arguments(p)
    add_ray(p)
    add_json(p)


MEASURES: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str]] = {
    "throughput": (
        add_throughput,
        "training throughput against this machine's own limit: the raw limit, the "
        "ParameterServer and training with N Workers",
    ),
    "profile": (
        add_profile,
        "where each Worker's time goes per agent step (emulator, preprocessing, forward, "
        "backward, push, pull, waiting), with the ParameterServer's and the network's costs",
    ),
    "atari": (
        add_atari,
        "an Atari config's raw emulator and preprocessed env frames per CPU second, training in "
        "frames/s, and the CPU a Worker spends per agent step and the ParameterServer per gradient",
    ),
    "serve": (
        add_serve,
        "a3c-ray serve's application under HTTP clients on loopback: batched against unbatched",
    ),
    "seeds": (
        add_seeds,
        "train seeds in turn, no target, and report whether each one reached the target and "
        "kept it",
    ),
}
"""Measurement -> (its flags, its help)."""

IN_THE_LAB = ("chaos", "ps", "stability")
"""Measurements of a3c-ray itself, run from a source checkout as ``python -m lab MEASURE``."""


class _Moved(argparse.Action):
    """A flag that became a command of its own: a usage error that names it."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        parser.error("--plot-runs is now its own command: a3c-ray plot RUN_DIR... [--out DIR]")


class _InTheLab(argparse.Action):
    """A measurement that moved to the project's lab: a usage error that says where it went."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        measure = parser.prog.rsplit(" ", 1)[-1]
        parser.error(
            "moved to the project's lab: from a source checkout of a3c-ray, run "
            f"python -m lab {measure} with the same flags"
        )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot-runs", nargs="*", action=_Moved, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="measure", required=True, metavar="MEASURE")
    flags.add_measures(sub, MEASURES)
    for name in IN_THE_LAB:  # not listed: their parsers only say where they went
        lab = sub.add_parser(name, add_help=False, formatter_class=flags.HelpFormatter)
        lab.add_argument("words", nargs=argparse.REMAINDER, action=_InTheLab)


def config_of(args: argparse.Namespace) -> Config:
    """The config under test: the defaults with the flags and ``--set`` items applied."""
    from a3c_ray.configs import starting_config
    from a3c_ray.envs.make import is_atari

    cfg, _ = starting_config(args.config, getattr(args, "env.id"), is_atari=is_atari)
    problems = flags.apply_field_flags(cfg, args)
    cfg.run.workers = cfg.run.workers or os.cpu_count() or 1
    for name in ("seconds", "raw_seconds", "ps_seconds"):
        if hasattr(args, name) and not getattr(args, name) > 0:
            problems.append(f"--{name.replace('_', '-')}: must be > 0 seconds")
    if getattr(args, "steps", None) is not None:
        print(
            "a3c-ray: bench seeds --steps is deprecated and will go: it is --max-steps, as for train",
            file=sys.stderr,
        )
        if getattr(args, "run.max_steps", None) is None:
            cfg.set("run.max_steps", args.steps)
    if args.measure == "seeds":
        problems += bs.problems(cfg, args)
    for name in ("repeat", "in_flight", "clients"):
        if hasattr(args, name) and getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')}: must be >= 1")
    problems += cfg.validate(choices.problems, env_problems)
    if problems:
        raise ConfigError(problems)
    resolve_policy(cfg)
    return cfg


def times(args: argparse.Namespace) -> bench_measure.Times:
    """The flags of ``bench_measure.Times`` that this measurement has; its defaults elsewhere."""
    given = {
        name: getattr(args, name)
        for name in ("seconds", "raw_seconds", "ps_seconds", "in_flight", "repeat", "cost_seconds")
        if hasattr(args, name)
    }
    return bench_measure.Times(
        **given,
        address=args.address,
        dashboard_port=args.dashboard_port,
        dashboard_host=args.dashboard_host,
    )


def atari(cfg: Config, args: argparse.Namespace) -> int:
    """``bench atari``: emulator, env and training frames per second of an Atari config."""
    from a3c_ray.envs.make import is_atari

    if not is_atari(cfg.env.id):
        raise ConfigError([f"bench atari: {cfg.env.id} is not an Atari env (give --config pong)"])
    if args.cost_seconds < 0:
        raise ConfigError(["--cost-seconds: must be >= 0"])
    report = bench_measure.atari(cfg, times(args))
    print(json.dumps(report) if args.json else format_atari(report))
    return 0


def profile(cfg: Config, args: argparse.Namespace) -> int:
    report = bench_measure.profile(cfg, times(args))
    print(json.dumps(report) if args.json else format_profile(report))
    return 0


def throughput(cfg: Config, args: argparse.Namespace) -> int:
    counts = sorted({*(args.scaling or []), cfg.run.workers})
    report = bench_measure.measure(cfg, counts, times(args))
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.measure == "serve":
        return bench_serve.run(args)
    measure_of_config: dict[str, Callable[[Config, argparse.Namespace], int]] = {
        "throughput": throughput,
        "profile": profile,
        "atari": atari,
        "seeds": bs.run_stability,
    }
    return measure_of_config[args.measure](config_of(args), args)
