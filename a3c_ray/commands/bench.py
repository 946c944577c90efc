"""``a3c-ray bench``: how fast a3c-ray trains on this machine, against this machine's own limit.

In one run it measures (see ``a3c_ray.bench.throughput``):

1. the raw limit: one process stepping K vector envs with the same policy's batched forward pass
   and action sampling, no learning, per core;
2. the ParameterServer's gradient applications per second, in process and as a Ray actor;
3. a3c-ray's training throughput with N Workers (env steps/s, updates/s, staleness, and each
   Worker's time in env, forward, backward and waiting on Ray), for each N of ``--scaling``;

and prints the ratio of (3) to (1) x N, and a model of where throughput stops growing with N.
``--plot-runs`` instead draws the learning curves of finished training runs (``a3c_ray.bench.plot``), and
``--seeds`` measures learning and keeping it over seeds (``bench_stability``), and ``--ps-scale``
the ParameterServer alone under synthetic clients (``bench_ps``), and ``--serve`` a served policy
under HTTP clients (``bench_serve``), and ``--chaos`` a run that loses actors and nodes all the
time (``bench_chaos``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path
from typing import Any

from a3c_ray.algo import choices
from a3c_ray.bench import ps_server as pm
from a3c_ray.bench import throughput as bm
from a3c_ray.bench.report import format_profile, format_report
from a3c_ray.commands import bench_chaos, bench_ps, bench_serve
from a3c_ray.commands import bench_stability as bs
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.runtime import cluster


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


def _levels(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected returns like 0,10,18, got '{text}'") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", help="gymnasium environment id (default CartPole-v1)")
    p.add_argument(
        "--config",
        help="a YAML config file or a shipped config name (pong, cartpole, ...) to start from",
    )
    p.add_argument("--workers", type=int, help="Workers to train with (default: one per CPU)")
    p.add_argument(
        "--scaling",
        type=_counts,
        metavar="N,N,...",
        help="also measure training with each of these numbers of Workers, e.g. 1,2,4",
    )
    p.add_argument("--envs-per-worker", type=int, help="environments per Worker (K)")
    p.add_argument("--t-max", type=int, help="rollout length per gradient push")
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
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="set any config field, as for train (repeatable)",
    )
    p.add_argument("--address", help="Ray cluster to attach to (default: an embedded Ray)")
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=None,
        help="port of the embedded Ray's dashboard (default 8265, or a free port when another "
        "Ray on this machine holds 8265)",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of the throughput report: where each Worker's time goes per agent step "
        "(emulator, preprocessing, forward, backward, push, pull, waiting), with the "
        "ParameterServer's and the network's costs, over --seconds of training",
    )
    p.add_argument(
        "--plot-runs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="instead of measuring, plot the learning curves of these training runs",
    )
    p.add_argument(
        "--out", type=Path, default=Path("docs"), help="where --plot-runs writes its PNGs"
    )
    p.add_argument(
        "--levels",
        type=_levels,
        metavar="R,R,...",
        help="with --plot-runs: plot each run against frames and hours with its evaluations, and "
        "print when it first reached each of these returns (e.g. 0,10,18 for Pong)",
    )
    bs.add_arguments(p)
    bench_ps.add_arguments(p)
    bench_serve.add_arguments(p)
    bench_chaos.add_arguments(p)


def bench_config(args: argparse.Namespace) -> Config:
    """The config under test: the defaults with the flags and ``--set`` items applied."""
    from a3c_ray.configs import starting_config

    cfg, _ = starting_config(args.config, args.env)
    problems = cfg.apply_sets(args.set)
    for dest, value in (
        ("env.id", args.env),
        ("run.workers", args.workers),
        ("env.num_envs", args.envs_per_worker),
        ("algo.t_max", args.t_max),
    ):
        if value is not None:
            cfg.set(dest, value)
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


def measure(cfg: Config, counts: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement, ``args.repeat`` times, in one Ray session; medians and every run."""
    load_before = os.getloadavg()[0]
    raws: list[dict[str, float]] = []
    # One raw loop per Worker at once, up to one per CPU: what the cores give together.
    processes = min(max(counts), os.cpu_count() or 1)
    parallel: list[dict[str, Any]] = []
    ale: list[float] = []
    ps_runs: list[dict[str, Any]] = []
    trains: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with cluster.session(cfg, max(counts), args.address, args.dashboard_port):
        for _ in range(args.repeat):
            raws.append(bm.raw_limit(cfg, args.raw_seconds))
            if processes > 1:
                parallel.append(bm.raw_limit_parallel(cfg, args.raw_seconds, processes))
            if bm.frames_per_step(cfg) > 1:
                ale.append(raw_ale_fps(cfg, args.raw_seconds))
            ps_runs.append(
                {
                    "in_process": pm.ps_in_process(cfg, args.ps_seconds),
                    "actor": pm.ps_actor(cfg, args.ps_seconds, args.in_flight),
                }
            )
            for n in counts:
                trains[n].append(bm.train_throughput(cfg, n, args.seconds))
    raw = median_run(raws, "env_steps_per_second")
    training = []
    for n in counts:
        t = median_run(trains[n], "env_steps_per_second")
        t["ratio"] = t["env_steps_per_second"] / (raw["env_steps_per_second"] * n)
        t["ratio_cpu"] = t["env_steps_per_second"] / (raw["env_steps_per_cpu_second"] * n)
        if ale:
            fps = t["env_steps_per_second"] * bm.frames_per_step(cfg)
            t["ale_ratio"] = fps / (_median(ale) * n)
        t["runs"] = [r["env_steps_per_second"] for r in trains[n]]
        training.append(t)
    ps = {
        "params": bm.model_size(cfg),
        "in_process_applications_per_second": _median(
            [r["in_process"]["applications_per_second"] for r in ps_runs]
        ),
        "actor_round_trips_per_second": _median(
            [r["actor"]["round_trips_per_second"] for r in ps_runs]
        ),
        "actor_applications_per_second": _median(
            [r["actor"]["applications_per_second"] for r in ps_runs]
        ),
        "in_flight": args.in_flight,
        "shards": cfg.ps.shards,
        "wire_dtype": cfg.ps.wire_dtype,
    }
    main = next(t for t in training if t["workers"] == cfg.run.workers)
    return {
        "machine": {
            **machine(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg()[0],
        },
        "settings": {
            "env": cfg.env.id,
            "envs_per_worker": cfg.env.num_envs,
            "t_max": cfg.algo.t_max,
            "steps_per_push": cfg.env.num_envs * cfg.algo.t_max,
            "frames_per_step": bm.frames_per_step(cfg),
            "workers": cfg.run.workers,
            "seconds": args.seconds,
            "warmup_seconds": bm.WARMUP_SECONDS,
            "repeat": args.repeat,
        },
        "raw": {
            **raw,
            "runs": [r["env_steps_per_second"] for r in raws],
            **({"ale_frames_per_second": _median(ale)} if ale else {}),
            **({"parallel": median_run(parallel, "env_steps_per_second")} if parallel else {}),
        },
        "ps": ps,
        "training": training,
        "ratio": main["ratio"],
        "model": bend_model(training, ps["actor_applications_per_second"], cfg),
    }


def profile(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    """Where an agent step's time goes, ``args.repeat`` times (the median run by env steps/s)."""
    load_before = os.getloadavg()[0]
    runs = []
    with cluster.session(cfg, cfg.run.workers or 1, args.address, args.dashboard_port):
        for _ in range(args.repeat):
            runs.append(bm.train_throughput(cfg, cfg.run.workers or 1, args.seconds))
        ps = pm.ps_in_process(cfg, args.ps_seconds)
    run = median_run(runs, "env_steps_per_second")
    steps_per_push = cfg.env.num_envs * cfg.algo.t_max
    return {
        "machine": {
            **machine(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg()[0],
        },
        "settings": {
            "env": cfg.env.id,
            "model": cfg.model.kind,
            "lstm": cfg.model.lstm,
            "screen_size": cfg.env.screen_size,
            "max_pool": cfg.env.max_pool,
            "envs_per_worker": cfg.env.num_envs,
            "t_max": cfg.algo.t_max,
            "workers": cfg.run.workers,
            "seconds": args.seconds,
            "repeat": args.repeat,
        },
        "env_steps_per_second": run["env_steps_per_second"],
        "runs": [r["env_steps_per_second"] for r in runs],
        "per_worker": run["per_worker"],
        "ps_us_per_push": ps["us_per_application"],
        "ps_us_per_step": ps["us_per_application"] / steps_per_push,
        "network": bm.network_costs(cfg),
    }


def raw_ale_fps(cfg: Config, seconds: float) -> float:
    """Frames/s of one bare emulator (``a3c_ray.bench.atari.raw_ale_fps``), for roughly ``seconds``."""
    from a3c_ray.bench.atari import raw_ale_fps as bare

    probe = bare(cfg.env.id, frames=2_000, seed=cfg.run.seed)
    return bare(cfg.env.id, frames=max(2_000, int(probe * seconds)), seed=cfg.run.seed)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``key`` is the median (the lower one of an even count), whole and consistent."""
    ordered = sorted(runs, key=lambda r: r[key])
    return dict(ordered[(len(ordered) - 1) // 2])


def bend_model(training: list[dict[str, Any]], ps_limit: float, cfg: Config) -> dict[str, Any]:
    """Where throughput stops growing with Workers: a roofline of three limits on pushes per second.

    - Workers: N x the pushes/s of one Worker (from the fewest-Workers run measured);
    - the ParameterServer: its applications/s as an actor with pushes in flight;
    - the CPUs: each push costs a Worker ``busy`` CPU seconds (its time not spent waiting) and
      the ParameterServer 1/limit, so ``cores`` CPUs carry at most cores / (busy + 1/limit).
    Env steps/s is pushes/s x t_max x K.
    """
    base = min(training, key=lambda t: t["workers"])
    per_worker = base["per_worker"]
    pushes = statistics.fmean(w["pushes_per_second"] for w in per_worker)
    busy = statistics.fmean(w["busy_seconds_per_push"] for w in per_worker)
    cores = os.cpu_count() or 1
    cpu_limit = cores / (busy + 1.0 / ps_limit)
    steps = cfg.algo.t_max * cfg.env.num_envs
    return {
        "worker_pushes_per_second": pushes,
        "worker_busy_ms_per_push": 1e3 * busy,
        "ps_applications_per_second": ps_limit,
        "ps_bound_workers": ps_limit / pushes,
        "cores": cores,
        "cpu_bound_pushes_per_second": cpu_limit,
        "cpu_bound_workers": cpu_limit / pushes,
        "predicted_env_steps_per_second": {
            str(n): min(n * pushes, ps_limit, cpu_limit) * steps for n in (1, 2, 4, 8, 16, 32, 64)
        },
    }


def machine() -> dict[str, Any]:
    import gymnasium
    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "ray": cluster.ray_version(),
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
    }


def plot(args: argparse.Namespace) -> int:
    """``--plot-runs``: learning curves of finished runs; ``--levels``: one run against frames and
    hours, with its evaluations and when it first reached each level."""
    from a3c_ray.bench import plot as bp

    if not args.levels:
        for path in bp.plot_runs(args.plot_runs, args.out):
            print(path)
        return 0
    from a3c_ray.envs.make import is_atari

    for run_dir in args.plot_runs:
        cfg = Config.load(run_dir / layout.CONFIG) if (run_dir / layout.CONFIG).exists() else None
        fps = bm.frames_per_step(cfg) if cfg is not None and is_atari(cfg.env.id) else 1
        print(bp.plot_learning(run_dir, args.out, fps))
        rows = bp.milestones(run_dir, args.levels, fps)
        print(json.dumps(rows) if args.json else bp.format_milestones(rows, fps))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.plot_runs:
        return plot(args)
    if args.stability_of:
        return bs.read_stability(args)
    if args.serve:
        return bench_serve.run(args)
    cfg = bench_config(args)
    if args.chaos:
        return bench_chaos.run(cfg, args)
    if args.seeds is not None:
        return bs.run_stability(cfg, args)
    if args.ps_scale:
        return bench_ps.run_ps_scale(cfg, args)
    if args.profile:
        report = profile(cfg, args)
        print(json.dumps(report) if args.json else format_profile(report))
        return 0
    counts = sorted({*(args.scaling or []), cfg.run.workers})
    report = measure(cfg, counts, args)
    print(json.dumps(report) if args.json else format_report(report))
    return 0
