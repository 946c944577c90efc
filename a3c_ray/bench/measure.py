"""One measure for ``a3c-ray bench``: the raw limit, the ParameterServer and training runs of a
config, repeated and reduced to medians (``measure``), where an agent step's time goes
(``profile``), or an Atari config's emulator, env and training frames per second (``atari``), with
the machine they ran on, all on one set of settings (``Times``).

Every figure comes from ``throughput`` (runs on Ray) and ``ps_server`` (the ParameterServer
alone); ``report`` prints them.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a3c_ray.bench import ps_server, throughput
from a3c_ray.config import Config
from a3c_ray.runtime import cluster


@dataclass(frozen=True)
class Times:
    """How long, and how often, each part is measured, and on which Ray."""

    seconds: float = 10.0
    """Of each training run, after its warm-up."""
    raw_seconds: float = 3.0
    """Of the raw limit."""
    ps_seconds: float = 2.0
    """Of the ParameterServer alone, in process and as an actor."""
    in_flight: int = 8
    """Pushes each client keeps in flight to the ParameterServer actor."""
    repeat: int = 1
    """Runs of every measurement; the report gives their medians."""
    cost_seconds: float = 10.0
    """Of the in-process CPU costs of an Atari Worker's agent step and of the ParameterServer's
    push (``atari``); 0 skips them."""
    address: str | None = None
    """Ray cluster to attach to; None starts an embedded Ray."""
    dashboard_port: int | None = None
    """The embedded Ray's dashboard port."""
    dashboard_host: str = "127.0.0.1"
    """Where the embedded Ray's dashboard listens."""


def measure(cfg: Config, counts: list[int], t: Times) -> dict[str, Any]:
    """Every measurement, ``t.repeat`` times, in one Ray session; medians and every run."""
    load_before = os.getloadavg()[0]
    raws: list[dict[str, float]] = []
    # One raw loop per Worker at once, up to one per CPU: what the cores give together.
    processes = min(max(counts), os.cpu_count() or 1)
    parallel: list[dict[str, Any]] = []
    ale: list[float] = []
    ps_runs: list[dict[str, Any]] = []
    trains: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with cluster.session(cfg, max(counts), t.address, t.dashboard_port, t.dashboard_host):
        for _ in range(t.repeat):
            raws.append(throughput.raw_limit(cfg, t.raw_seconds))
            if processes > 1:
                parallel.append(throughput.raw_limit_parallel(cfg, t.raw_seconds, processes))
            if throughput.frames_per_step(cfg) > 1:
                ale.append(bare_emulator_fps(cfg, t.raw_seconds))
            ps_runs.append(
                {
                    "in_process": ps_server.ps_in_process(cfg, t.ps_seconds),
                    "actor": ps_server.ps_actor(cfg, t.ps_seconds, t.in_flight),
                }
            )
            for n in counts:
                trains[n].append(throughput.train_throughput(cfg, n, t.seconds))
    raw = median_run(raws, "env_steps_per_second")
    training = []
    for n in counts:
        row = median_run(trains[n], "env_steps_per_second")
        row["ratio"] = row["env_steps_per_second"] / (raw["env_steps_per_second"] * n)
        row["ratio_cpu"] = row["env_steps_per_second"] / (raw["env_steps_per_cpu_second"] * n)
        if ale:
            fps = row["env_steps_per_second"] * throughput.frames_per_step(cfg)
            row["ale_ratio"] = fps / (_median(ale) * n)
        row["runs"] = [r["env_steps_per_second"] for r in trains[n]]
        training.append(row)
    ps: dict[str, Any] = {
        "params": throughput.model_size(cfg),
        "in_process_applications_per_second": _median(
            [r["in_process"]["applications_per_second"] for r in ps_runs]
        ),
        "actor_round_trips_per_second": _median(
            [r["actor"]["round_trips_per_second"] for r in ps_runs]
        ),
        "actor_applications_per_second": _median(
            [r["actor"]["applications_per_second"] for r in ps_runs]
        ),
        "in_flight": t.in_flight,
        "shards": cfg.ps.shards,
        "wire_dtype": cfg.ps.wire_dtype,
    }
    main = next(row for row in training if row["workers"] == cfg.run.workers)
    return {
        "machine": machine(load_before),
        "settings": {
            "env": cfg.env.id,
            "envs_per_worker": cfg.env.num_envs,
            "t_max": cfg.algo.t_max,
            "steps_per_push": cfg.env.num_envs * cfg.algo.t_max,
            "frames_per_step": throughput.frames_per_step(cfg),
            "workers": cfg.run.workers,
            "seconds": t.seconds,
            "warmup_seconds": throughput.WARMUP_SECONDS,
            "repeat": t.repeat,
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


def profile(cfg: Config, t: Times) -> dict[str, Any]:
    """Where an agent step's time goes, ``t.repeat`` times (the median run by env steps/s)."""
    load_before = os.getloadavg()[0]
    runs = []
    with cluster.session(cfg, cfg.run.workers or 1, t.address, t.dashboard_port, t.dashboard_host):
        for _ in range(t.repeat):
            runs.append(throughput.train_throughput(cfg, cfg.run.workers or 1, t.seconds))
        ps = ps_server.ps_in_process(cfg, t.ps_seconds)
    run = median_run(runs, "env_steps_per_second")
    steps_per_push = cfg.env.num_envs * cfg.algo.t_max
    return {
        "machine": machine(load_before),
        "settings": {
            "env": cfg.env.id,
            "model": cfg.model.kind,
            "lstm": cfg.model.lstm,
            "screen_size": cfg.env.screen_size,
            "max_pool": cfg.env.max_pool,
            "envs_per_worker": cfg.env.num_envs,
            "t_max": cfg.algo.t_max,
            "workers": cfg.run.workers,
            "seconds": t.seconds,
            "repeat": t.repeat,
        },
        "env_steps_per_second": run["env_steps_per_second"],
        "runs": [r["env_steps_per_second"] for r in runs],
        "per_worker": run["per_worker"],
        "ps_us_per_push": ps["us_per_application"],
        "ps_us_per_step": ps["us_per_application"] / steps_per_push,
        "network": throughput.network_costs(cfg),
    }


def atari(cfg: Config, t: Times) -> dict[str, Any]:
    """An Atari config's bare emulator and preprocessed env frames per CPU second, ``t.seconds``
    of training on Ray (no evaluation competing), and with ``t.cost_seconds`` > 0 the in-process
    costs of a Worker and the ParameterServer (``bench.atari``); the run directory is temporary."""
    from a3c_ray.bench import atari as parts
    from a3c_ray.runtime.session import train

    raw = parts.raw_ale_fps(cfg.env.id)
    with tempfile.TemporaryDirectory(prefix="a3c-bench-") as tmp:
        run_cfg = parts.atari_config(cfg, t.seconds, Path(tmp) / "run")
        pre = parts.env_fps(run_cfg.env)
        cost = parts.costs(run_cfg, t.cost_seconds) if t.cost_seconds > 0 else None
        with cluster.session(
            run_cfg, run_cfg.run.workers or 1, t.address, t.dashboard_port, t.dashboard_host
        ):
            summary = train(run_cfg, address=t.address).summary
    return parts.AtariBench.of(run_cfg, raw, pre, summary, cost).to_dict()


def bare_emulator_fps(cfg: Config, seconds: float) -> float:
    """Frames/s of one bare emulator (``atari.raw_ale_fps``), for roughly ``seconds``."""
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
    base = min(training, key=lambda row: row["workers"])
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


def machine(load_before: float) -> dict[str, Any]:
    """This machine and its software, with the load average before a measurement and now."""
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
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg()[0],
    }
