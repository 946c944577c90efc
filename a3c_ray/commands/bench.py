"""``a3c-ray bench``: how fast a3c-ray trains on this machine, against this machine's own limit.

In one run it measures (see ``a3c_ray.bench.throughput``):

1. the raw limit: one process stepping K vector envs with the same policy's batched forward pass
   and action sampling, no learning, per core;
2. the ParameterServer's gradient applications per second, in process and as a Ray actor;
3. a3c-ray's training throughput with N Workers (env steps/s, updates/s, staleness, and each
   Worker's time in env, forward, backward and waiting on Ray), for each N of ``--scaling``;

and prints the ratio of (3) to (1) x N, and a model of where throughput stops growing with N.
``--seeds`` instead measures learning and keeping it over seeds (``bench_stability``), and
``--ps-scale`` the ParameterServer alone under synthetic clients (``bench_ps``), and ``--serve`` a
served policy under HTTP clients (``bench_serve``), and ``--chaos`` a run that loses actors and
nodes all the time (``bench_chaos``). The learning curves of runs are ``a3c-ray plot``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from a3c_ray.algo import choices
from a3c_ray.bench import measure as bench_measure
from a3c_ray.bench import throughput as bm
from a3c_ray.bench.report import format_atari, format_profile, format_report
from a3c_ray.commands import bench_chaos, bench_ps, bench_serve, flags, plot
from a3c_ray.commands import bench_stability as bs
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import ConfigError


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    flags.add_field_flags(p, ("--env", "--workers", "--envs-per-worker", "--t-max"))
    flags.add_config_flags(p)
    p.add_argument(
        "--scaling",
        type=_counts,
        metavar="N,N,...",
        help="also measure training with each of these numbers of Workers, e.g. 1,2,4",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help=f"training seconds measured per run, after {bm.WARMUP_SECONDS:g} s of warm-up (default 10)",
    )
    p.add_argument(
        "--raw-seconds", type=float, default=3.0, help="seconds of the raw limit (default 3)"
    )
    p.add_argument(
        "--ps-seconds",
        type=float,
        default=2.0,
        help="seconds of each ParameterServer measurement (default 2)",
    )
    p.add_argument(
        "--in-flight",
        type=int,
        default=8,
        help="pushes kept in flight to the ParameterServer actor (default 8)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every measurement this many times and report medians (default 1)",
    )
    p.add_argument("--address", help="Ray cluster to attach to (default: an embedded Ray)")
    flags.add_dashboard_port_flag(p)
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of the throughput report: where each Worker's time goes per agent step "
        "(emulator, preprocessing, forward, backward, push, pull, waiting), with the "
        "ParameterServer's and the network's costs, over --seconds of training",
    )
    p.add_argument(
        "--atari",
        action="store_true",
        help="instead of the throughput report: the raw emulator's and the preprocessed env's "
        "frames per CPU second, --seconds of training in frames/s, and (with --cost-seconds) "
        "the CPU a Worker spends per agent step and the ParameterServer per gradient",
    )
    p.add_argument(
        "--cost-seconds",
        type=float,
        default=10.0,
        help="with --atari: seconds of the in-process cost measurement; 0 skips it (default 10)",
    )
    # The command `a3c-ray plot RUN_DIR...` under its earlier name, with its flags.
    p.add_argument("--plot-runs", nargs="+", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=Path("docs"), help=argparse.SUPPRESS)
    p.add_argument("--levels", type=plot.levels, help=argparse.SUPPRESS)
    bs.add_arguments(p)
    bench_ps.add_arguments(p)
    bench_serve.add_arguments(p)
    bench_chaos.add_arguments(p)


def config_of(args: argparse.Namespace) -> Config:
    """The config under test: the defaults with the flags and ``--set`` items applied."""
    from a3c_ray.configs import starting_config
    from a3c_ray.envs.make import is_atari

    cfg, _ = starting_config(args.config, getattr(args, "env.id"), is_atari=is_atari)
    problems = flags.apply_field_flags(cfg, args)
    cfg.run.workers = cfg.run.workers or os.cpu_count() or 1
    for name in ("seconds", "raw_seconds", "ps_seconds"):
        if not getattr(args, name) > 0:
            problems.append(f"--{name.replace('_', '-')}: must be > 0 seconds")
    if args.steps is not None:
        cfg.set("run.max_steps", args.steps)
    if args.time_limit is not None:
        cfg.set("run.time_limit", args.time_limit)
    if args.seeds is not None:
        problems += bs.problems(cfg, args)
    for name in ("repeat", "in_flight", "clients"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')}: must be >= 1")
    problems += cfg.validate(choices.problems, env_problems)
    if problems:
        raise ConfigError(problems)
    resolve_policy(cfg)
    return cfg


def times(args: argparse.Namespace) -> bench_measure.Times:
    return bench_measure.Times(
        seconds=args.seconds,
        raw_seconds=args.raw_seconds,
        ps_seconds=args.ps_seconds,
        in_flight=args.in_flight,
        repeat=args.repeat,
        address=args.address,
        dashboard_port=args.dashboard_port,
    )


def atari(cfg: Config, args: argparse.Namespace) -> int:
    """``--atari``: emulator, env and training frames per second of an Atari config."""
    from a3c_ray.bench.atari import atari_throughput
    from a3c_ray.envs.make import is_atari

    if not is_atari(cfg.env.id):
        raise ConfigError([f"--atari: {cfg.env.id} is not an Atari env (give --config pong)"])
    if args.cost_seconds < 0:
        raise ConfigError(["--cost-seconds: must be >= 0"])
    report = atari_throughput(
        cfg, args.seconds, args.cost_seconds, args.address, args.dashboard_port
    ).to_dict()
    print(json.dumps(report) if args.json else format_atari(report))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.plot_runs:
        print("a3c-ray: bench --plot-runs is now: a3c-ray plot RUN_DIR...", file=sys.stderr)
        return plot.draw(args.plot_runs, args.out, args.levels, args.json)
    if args.stability_of:
        return bs.read_stability(args)
    if args.serve:
        return bench_serve.run(args)
    cfg = config_of(args)
    if args.chaos:
        return bench_chaos.run(cfg, args)
    if args.seeds is not None:
        return bs.run_stability(cfg, args)
    if args.ps_scale:
        return bench_ps.run_ps_scale(cfg, args)
    if args.atari:
        return atari(cfg, args)
    if args.profile:
        report = bench_measure.profile(cfg, times(args))
        print(json.dumps(report) if args.json else format_profile(report))
        return 0
    counts = sorted({*(args.scaling or []), cfg.run.workers})
    report = bench_measure.measure(cfg, counts, times(args))
    print(json.dumps(report) if args.json else format_report(report))
    return 0
