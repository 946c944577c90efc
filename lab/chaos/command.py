"""``python -m lab chaos``: the chaos soak (``lab.chaos.soak``), its flags, its files and its table.

It trains the config under test as a Ray job on a cluster of ``cluster/local.sh`` that it starts
and stops itself, for ``--seconds`` of training, while it kills Workers, the
ParameterServer and the Monitor and loses a worker node on a schedule. It writes, into
``--dir``: the run directory (``run/``), the whole record and its figures
(``chaos.json``) and each actor's memory over time (``chaos_memory.png``); and prints the table
that docs/reliability.md holds. With every fault interval at 0 it is a memory soak alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from datetime import datetime
from pathlib import Path

from a3c_ray.config import Config
from a3c_ray.errors import EXIT_FAILURE, EXIT_OK, ConfigError
from lab.chaos import report as chaos_report
from lab.chaos.plan import ChaosPlan

NEVER_STEPS = 10**12
"""The soak's step budget: its time limit is what ends it."""


def add_arguments(g: argparse.ArgumentParser) -> None:
    """The soak's flags, in seconds of training (0: never); each lands in ``args`` as
    ``chaos_<name>``. ``--config``, ``--set``, ``--workers`` choose what is trained,
    ``--learned-return`` and ``--floor`` judge its learning."""
    g.add_argument(
        "--seconds", dest="chaos_seconds", type=float, default=600.0, help="seconds of training"
    )
    g.add_argument(
        "--worker-every",
        dest="chaos_worker_every",
        type=float,
        default=30.0,
        metavar="S",
        help="kill a random Worker every S seconds",
    )
    g.add_argument(
        "--ps-every",
        dest="chaos_ps_every",
        type=float,
        default=300.0,
        metavar="S",
        help="kill the ParameterServer (a random shard of several) every S seconds",
    )
    g.add_argument(
        "--monitor-at",
        dest="chaos_monitor_at",
        type=float,
        metavar="S",
        help="kill the Monitor once, at S seconds (default: a third of --seconds)",
    )
    g.add_argument(
        "--node-at",
        dest="chaos_node_at",
        type=float,
        metavar="S",
        help="lose a worker node that hosts a Worker at S seconds (default: half of --seconds)",
    )
    g.add_argument(
        "--node-down",
        dest="chaos_node_down",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds before the lost node is added back",
    )
    g.add_argument(
        "--nodes",
        dest="chaos_nodes",
        type=int,
        default=2,
        help="one-CPU worker nodes of the cluster",
    )
    g.add_argument(
        "--sample-every",
        dest="chaos_sample_every",
        type=float,
        default=10.0,
        metavar="S",
        help="sample every actor's resident memory every S seconds",
    )
    g.add_argument(
        "--memory-after",
        dest="chaos_memory_after",
        type=float,
        default=300.0,
        metavar="S",
        help="an actor's memory growth counts from when its process is S seconds old",
    )
    g.add_argument(
        "--bound",
        dest="chaos_bound",
        type=float,
        default=60.0,
        metavar="S",
        help="training must go on within S seconds of every fault",
    )
    g.add_argument(
        "--dir",
        dest="chaos_dir",
        type=Path,
        metavar="DIR",
        help="where the run, chaos.json and chaos_memory.png go (default runs/chaos-<env>-<time>)",
    )


def plan_of(args: argparse.Namespace, seed: int = 0) -> ChaosPlan:
    """The soak's schedule from the flags; every problem at once as a ConfigError."""
    seconds = args.chaos_seconds
    problems = [
        f"--{name.replace('_', '-')}: must be >= 0 seconds, got {value:g}"
        for name, value in (
            ("worker_every", args.chaos_worker_every),
            ("ps_every", args.chaos_ps_every),
            ("monitor_at", args.chaos_monitor_at or 0),
            ("node_at", args.chaos_node_at or 0),
            ("node_down", args.chaos_node_down),
            ("memory_after", args.chaos_memory_after),
        )
        if value < 0
    ]
    for name, value in (
        ("seconds", seconds),
        ("sample_every", args.chaos_sample_every),
        ("bound", args.chaos_bound),
    ):
        if not value > 0:
            problems.append(f"--{name.replace('_', '-')}: must be > 0, got {value:g}")
    if args.chaos_nodes < 1:
        problems.append(f"--nodes: must be >= 1, got {args.chaos_nodes}")
    if problems:
        raise ConfigError(problems)

    def at(value: float | None, default: float) -> float | None:
        value = default if value is None else value
        return value or None  # 0: never

    return ChaosPlan(
        seconds=seconds,
        worker_every=args.chaos_worker_every,
        ps_every=args.chaos_ps_every,
        monitor_at=at(args.chaos_monitor_at, seconds / 3),
        node_at=at(args.chaos_node_at, seconds / 2),
        node_down=args.chaos_node_down,
        sample_every=args.chaos_sample_every,
        worker_nodes=args.chaos_nodes,
        seed=seed,
    )


def train_config(cfg: Config, run_dir: Path, workers: int, seconds: float) -> Config:
    """The run the soak trains: the config under test for ``seconds`` of training, no target."""
    c = Config.from_dict(cfg.to_dict())
    c.run.run_dir = str(run_dir)
    c.run.workers = workers
    c.run.time_limit = seconds
    c.run.max_steps = NEVER_STEPS
    c.run.target_return = None
    c.run.progress = False
    return c


def run(cfg: Config, args: argparse.Namespace) -> int:
    from a3c_ray.commands.bench_stability import stability_target
    from a3c_ray.commands.submit import build_entrypoint, build_runtime_env
    from lab.chaos import soak as chaos
    from lab.local_cluster import SCRIPT

    plan = plan_of(args, cfg.run.seed)
    target = stability_target(cfg, args)
    if target is None:
        raise ConfigError(
            [f"chaos needs --learned-return: neither the config nor {cfg.env.id} sets one"]
        )
    floor = args.floor if args.floor is not None else 2 * target / 3
    workers = getattr(args, "run.workers") or plan.worker_nodes
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (
        args.chaos_dir or Path("runs") / f"chaos-{cfg.env.id.replace('/', '_')}-{stamp}"
    ).resolve()
    run_dir = out / "run"
    if run_dir.exists():
        raise ConfigError([f"{run_dir} already exists: choose another --dir"])
    out.mkdir(parents=True, exist_ok=True)
    train_file = out / "train.yaml"
    train_config(cfg, run_dir, workers, plan.seconds).save(train_file)
    entrypoint = build_entrypoint(
        ["--config", str(train_file), "--run-dir", str(run_dir), "--resume", "auto"]
    )
    root = SCRIPT.parents[1]
    runtime_env = build_runtime_env(str(root), root / "cluster" / "runtime_env.preinstalled.yaml")
    load_before = os.getloadavg()[0]
    try:
        result = chaos.soak(plan, entrypoint, runtime_env, run_dir, workers, cfg)
    except RuntimeError as e:
        print(f"a3c-ray: error: the chaos soak did not run: {e}", file=sys.stderr)
        return EXIT_FAILURE
    load = (load_before, os.getloadavg()[0])
    record = json.loads(json.dumps(dataclasses.asdict(result)))  # plain JSON types throughout
    figs = chaos_report.figures(record, target, floor, args.chaos_memory_after, args.chaos_bound)
    (out / "chaos.json").write_text(
        json.dumps({"figures": figs, "load_average": load, "record": record}, indent=1)
    )
    title = f"{cfg.env.id}: resident memory of each actor, {plan.seconds / 60:g} min chaos soak"
    plot = chaos_report.plot_memory(record, out / "chaos_memory.png", title)
    if args.json:
        print(json.dumps({"figures": figs, "load_average": load, "dir": str(out)}))
    else:
        print(chaos_report.format_report(record, figs, load))
        print(f"\n{out / 'chaos.json'}\n{plot}")
    lost = figs["checkpoints"]["unreadable"] + figs["checkpoints"]["files_left_unreadable"]
    return EXIT_OK if figs["within_bound"] and not lost else EXIT_FAILURE
