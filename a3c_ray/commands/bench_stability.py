"""``a3c-ray bench seeds N --max-steps S``: does a config learn, and does it keep what it learned?

Trains seeds ``first_seed .. first_seed + N - 1`` in turn, each for ``S`` env steps with no target
(so a run never stops at its first success), on one Ray session. From each run's TensorBoard
episodes it reads the mean return of the last 100 training episodes after every episode, and
reports per seed: the steps and training seconds to first reach the target, the final mean, and
the lowest mean after first reaching the target. A seed *holds* when it reached the target and
its mean never fell below ``floor`` afterwards, and *keeps* when it also ends at the target or
above. A fast time to target bought with a collapse afterwards shows up here, not in a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from a3c_ray.bench.report import format_seed_row, format_stability
from a3c_ray.bench.stability_score import (
    SeedResult,
    read_run,
    result_of,
    seed_result,
    summarize,
)
from a3c_ray.commands import flags
from a3c_ray.config import Config


def train_seed(cfg: Config, seed: int, run_dir: Path) -> None:
    """One whole run of ``cfg`` with ``seed`` on the connected Ray, into ``run_dir``."""
    from tqdm import tqdm

    from a3c_ray.runtime.session import RunSession

    c = Config.from_dict(cfg.to_dict())
    c.run.seed, c.run.progress = seed, False
    c.run.target_return = None  # never stop at the first success: what follows it is measured
    c.run.run_dir = str(run_dir)
    session = RunSession.checked(c, existing_ok=True)
    session.prepare()
    try:
        session.start().watch(tqdm(total=c.run.max_steps, disable=True))
        summary, _ = session.end(interrupted=False)
    finally:
        session.close()
    if summary.get("errors"):
        raise RuntimeError("; ".join(summary["errors"]))


def measure_in_process(
    cfg: Config,
    seeds: list[int],
    target: float,
    floor: float,
    trace_every: int = 0,
    echo: Any = None,
    restart_every: int = 0,
) -> dict[str, Any]:
    """Train every seed in turn in this process, without Ray (``bench_inprocess``)."""
    from a3c_ray.algo import inprocess as bench_inprocess

    results = []
    for seed in seeds:
        c = Config.from_dict(cfg.to_dict())
        c.run.seed = seed
        run = bench_inprocess.train(c, c.run.workers or 1, trace_every, restart_every)
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


def measure_on_ray(
    cfg: Config,
    seeds: list[int],
    target: float,
    floor: float,
    runs_dir: Path | None,
    address: str | None,
    dashboard_port: int | None,
    echo: Any = None,
    dashboard_host: str = "127.0.0.1",
) -> dict[str, Any]:
    """Train every seed in turn on one Ray session; per-seed figures and the counts."""
    from a3c_ray.runtime.cluster import session

    results: list[SeedResult] = []
    tmp = None if runs_dir is not None else tempfile.TemporaryDirectory(prefix="a3c-stability-")
    base = runs_dir if runs_dir is not None else Path(tmp.name)  # type: ignore[union-attr]
    try:
        with session(cfg, cfg.run.workers or 1, address, dashboard_port, dashboard_host):
            for seed in seeds:
                run_dir = base / f"seed-{seed}"
                train_seed(cfg, seed, run_dir)
                r = result_of(read_run(run_dir), target, floor)
                r.run_dir = str(run_dir) if runs_dir is not None else None
                results.append(r)
                if echo is not None:
                    echo(r)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return report(cfg, results, target, floor, in_process=False)


# -- the command line: `a3c-ray bench seeds ...` ------------------------------------------------
def add_judge_arguments(p: argparse.ArgumentParser) -> None:
    """``--learned-return`` and ``--floor``: what counts as learned, and as kept. Neither stops
    a seed (train's ``--target-return`` stops a run: here every seed runs its whole budget)."""
    p.add_argument(
        "--learned-return",
        dest="learned_return",
        metavar="R",
        type=float,
        help="the mean return of the last 100 episodes that counts as learned; it does not stop "
        "the seed (default: the config's run.target_return, else the env's reward threshold, "
        "475 for CartPole-v1)",
    )
    # Its older name, unlisted (train's --target-return stops a run; this one does not).
    p.add_argument(
        "--target-return",
        dest="learned_return",
        type=float,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    p.add_argument(
        "--floor",
        type=float,
        help="a seed holds when its mean never falls below this after first reaching the target "
        "(default: two thirds of the target)",
    )


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The flags of ``bench seeds`` beyond the config."""
    s.add_argument(
        "seeds",
        type=_seeds,
        metavar="N|S,S,...",
        help="train N seeds in turn (from --first-seed), or these seeds",
    )
    s.add_argument("--first-seed", type=int, default=0, help="the first of the N seeds")
    # Each seed is one run: its step budget and time limit are train's, and mean what they mean
    # there. ``--steps`` is the old spelling of ``--max-steps`` (``config_of`` says so).
    flags.add_field_flags(s, ("--max-steps", "--time-limit"))
    s.add_argument("--steps", type=float, help=argparse.SUPPRESS)
    add_judge_arguments(s)
    s.add_argument(
        "--runs-dir", type=Path, help="keep each seed's run directory here (default: discarded)"
    )
    s.add_argument(
        "--in-process",
        action="store_true",
        help="train the seeds without Ray: the Workers take turns against the ParameterServer in "
        "this process (deterministic, one CPU; for sweeps of the algorithm)",
    )
    s.add_argument(
        "--trace-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="with --in-process: every STEPS env steps, what the ParameterServer saw (entropy, "
        "value loss, gradient and step norms, staleness, short episodes)",
    )
    s.add_argument(
        "--restart-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="with --in-process: every STEPS env steps, replace the next Worker by a new one "
        "(new envs, a fresh random stream), as a Worker killed and restarted on Ray",
    )


def _seeds(text: str) -> int | list[int]:
    """A count of seeds (``10``) or the seeds themselves (``3,21,23``)."""
    try:
        items = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seeds or seeds like 3,21,23, got '{text}'"
        ) from None
    if "," not in text:
        return items[0] if items else 0
    if any(x < 0 for x in items):
        raise argparse.ArgumentTypeError(f"seeds must be >= 0, got '{text}'")
    return items


def problems(cfg: Config, args: argparse.Namespace) -> list[str]:
    """What is wrong with the ``bench seeds`` flags, every problem at once."""
    out: list[str] = []
    if isinstance(args.seeds, int) and args.seeds < 1:
        out.append(f"N: must be >= 1 seeds, got {args.seeds}")
    if args.first_seed < 0:
        out.append(f"--first-seed: must be >= 0, got {args.first_seed}")
    if stability_target(cfg, args) is None:
        out.append(
            f"bench seeds needs --learned-return: neither the config nor {cfg.env.id} sets one"
        )
    if args.trace_every < 0 or (args.trace_every and not args.in_process):
        out.append("--trace-every: needs --in-process and a number of env steps >= 1")
    if args.restart_every < 0 or (args.restart_every and not args.in_process):
        out.append("--restart-every: needs --in-process and a number of env steps >= 1")
    if args.in_process and args.runs_dir is not None:
        out.append("--runs-dir: an --in-process run writes no run directory")
    if args.runs_dir is not None and args.runs_dir.exists() and any(args.runs_dir.iterdir()):
        out.append(f"--runs-dir: {args.runs_dir} is not empty; choose a new directory")
    return out


def default_floor(target: float, floor: float | None) -> float:
    """``--floor``, else two thirds of the target."""
    return floor if floor is not None else 2.0 * target / 3.0


def stability_target(cfg: Config, args: argparse.Namespace) -> float | None:
    """--learned-return, else the config's run.target_return, else the env's reward threshold."""
    if args.learned_return is not None:
        return float(args.learned_return)
    if cfg.run.target_return is not None:
        return cfg.run.target_return
    import gymnasium

    try:
        threshold = gymnasium.spec(cfg.env.id).reward_threshold
    except gymnasium.error.Error:
        return None
    return None if threshold is None else float(threshold)


def run_stability(cfg: Config, args: argparse.Namespace) -> int:
    """``bench seeds N``: train N seeds in turn and report how each learned and held (bench_stability)."""
    target = stability_target(cfg, args)
    assert target is not None  # config_of checked
    floor = default_floor(target, args.floor)
    seeds = (
        list(args.seeds)
        if isinstance(args.seeds, list)
        else list(range(args.first_seed, args.first_seed + args.seeds))
    )

    def echo(r: SeedResult) -> None:
        print(
            format_seed_row(asdict(r)), file=sys.stderr, flush=True
        )  # progress, whatever the output

    if args.in_process:
        out = measure_in_process(
            cfg, seeds, target, floor, args.trace_every, echo, args.restart_every
        )
    else:
        out = measure_on_ray(
            cfg,
            seeds,
            target,
            floor,
            args.runs_dir,
            args.address,
            args.dashboard_port,
            echo,
            args.dashboard_host,
        )
    print(json.dumps(out) if args.json else format_stability(out))
    return 0
