"""The driver: connects to Ray, starts the actors of one run, watches them and ends the run.

It is the only place that waits on actor futures. The loop has the shape of Ray's parameter-server
example: a dict of in-flight refs and ``ray.wait`` over it, with a timeout so that the Monitor is
ticked and the progress bar refreshed while Workers train.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import ray
import torch
from tqdm import tqdm

from a3c_ray import monitor as monitor_mod
from a3c_ray import parameter_server as ps_mod
from a3c_ray import worker as worker_mod
from a3c_ray.checkpoint import atomic_write
from a3c_ray.config import Config, ConfigError
from a3c_ray.envs import derive_seeds, env_spaces
from a3c_ray.models import build_model, get_flat_params

NAMESPACE = "a3c-ray"
EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
log = logging.getLogger("a3c_ray")


@dataclass
class RunResult:
    exit_code: int
    summary: dict[str, Any]
    run_dir: Path
    errors: list[str] = field(default_factory=list)


def default_run_dir(env_id: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{env_id.replace('/', '_')}-{stamp}"


def prepare_run_dir(cfg: Config, overwrite: bool) -> Path:
    """The run directory, new and empty; an existing one is refused unless ``overwrite``."""
    run_dir = Path(cfg.run.run_dir) if cfg.run.run_dir else default_run_dir(cfg.env.id)
    if run_dir.exists() and any(run_dir.iterdir()) and not overwrite:
        raise ConfigError(
            [
                f"run directory {run_dir} already exists; pass --resume {run_dir} to continue it or --overwrite to replace it"
            ]
        )
    if run_dir.exists() and overwrite:
        for sub in ("checkpoints", "tb"):
            _remove_tree(run_dir / sub)
        for name in ("summary.json", "config.yaml"):
            with contextlib.suppress(FileNotFoundError):
                (run_dir / name).unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.run.run_dir = str(run_dir)
    return run_dir


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def connect(cfg: Config, address: str | None) -> bool:
    """Attach to a running cluster or start an embedded one; True when this call started Ray."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return False
    workers = cfg.run.workers or os.cpu_count() or 1
    cpus = math.ceil(workers * cfg.run.worker_cpus + cfg.run.ps_cpus + cfg.run.monitor_cpus)
    ray.init(
        num_cpus=cpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        logging_level=logging.WARNING,
    )
    return True


def default_workers(cfg: Config, started: bool) -> int:
    """One Worker per CPU: of this machine for an embedded Ray, else what the cluster has left."""
    if started:
        return os.cpu_count() or 1
    cpus = ray.cluster_resources().get("CPU", 1.0) - cfg.run.ps_cpus - cfg.run.monitor_cpus
    return max(1, int(cpus // cfg.run.worker_cpus))


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """``ray job stop`` sends SIGTERM: treat it as Ctrl-C, so the run checkpoints and exits 130."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Run:
    """The actors of one run, and the loop that watches them."""

    def __init__(self, cfg: Config, run_dir: Path, workers: int):
        self.cfg = cfg
        self.run_dir = run_dir
        self.n_workers = workers
        self.run_id = f"{run_dir.name}-{uuid.uuid4().hex[:6]}"
        obs_space, act_space = env_spaces(cfg.env)
        self.obs_shape = tuple(int(x) for x in obs_space.shape)
        self.n_actions = int(act_space.n)
        torch.manual_seed(derive_seeds(cfg.run.seed, 0)[0])
        model = build_model(cfg.model, self.obs_shape, self.n_actions)
        meta = {
            "env_id": cfg.env.id,
            "env": {"max_episode_steps": cfg.env.max_episode_steps},
            "model": {k: v for k, v in vars(cfg.model).items()},
            "obs_shape": list(self.obs_shape),
            "n_actions": self.n_actions,
        }
        self.ps = (
            ps_mod.remote_class()
            .options(
                name=f"{self.run_id}/ParameterServer", namespace=NAMESPACE, num_cpus=cfg.run.ps_cpus
            )
            .remote(cfg, get_flat_params(model), meta)
        )
        self.monitor = (
            monitor_mod.remote_class()
            .options(
                name=f"{self.run_id}/Monitor", namespace=NAMESPACE, num_cpus=cfg.run.monitor_cpus
            )
            .remote(cfg, str(run_dir), self.obs_shape, self.n_actions, self.ps)
        )
        self.worker_cls = worker_mod.remote_class()
        self.workers: dict[int, Any] = {}
        self.pending: dict[Any, int] = {}
        self.results: dict[int, dict[str, Any]] = {}
        self.errors: list[str] = []
        self.monitor_report: dict[str, Any] = {}
        for i in range(workers):
            self._start_worker(i)

    def _start_worker(self, i: int) -> None:
        w = self.worker_cls.options(
            name=f"{self.run_id}/Worker-{i}", namespace=NAMESPACE, num_cpus=self.cfg.run.worker_cpus
        ).remote(self.cfg, i, self.obs_shape, self.n_actions)
        self.workers[i] = w
        self.pending[w.train.remote(self.ps)] = i

    def watch(self, bar: tqdm) -> None:
        """Wait for the Workers to finish, ticking the Monitor and the progress bar meanwhile."""
        tick_ref, last_tick = None, 0.0
        while self.pending:
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=0.25)
            for ref in ready:
                i = self.pending.pop(ref)
                try:
                    self.results[i] = ray.get(ref)
                except ray.exceptions.RayError as e:
                    self.errors.append(f"worker {i}: {str(e).strip().splitlines()[-1]}")
                    ray.get(self.ps.request_stop.remote(ps_mod.STOP_ERROR))
            if tick_ref is not None and ray.wait([tick_ref], timeout=0)[0]:
                self.monitor_report = ray.get(tick_ref)
                tick_ref = None
            if tick_ref is None and time.monotonic() - last_tick >= self.cfg.monitor.log_every:
                tick_ref, last_tick = self.monitor.tick.remote(), time.monotonic()
            self._refresh(bar)
        if tick_ref is not None:
            self.monitor_report = ray.get(tick_ref)

    def _refresh(self, bar: tqdm) -> None:
        p = ray.get(self.ps.progress.remote())
        bar.update(min(p["env_steps"], bar.total) - bar.n)
        secs = p["train_seconds"]
        ev = self.monitor_report.get("last_eval_return")
        bar.set_postfix_str(
            f"SPS {p['env_steps'] / secs if secs > 0 else 0:,.0f} | ret100 {p['mean_return_100']:.1f}"
            f" | eval {'-' if ev is None else f'{ev:.1f}'} | stale {p['staleness_mean']:.2f}/{p['staleness_max']}",
            refresh=False,
        )

    def interrupt(self, grace: float = 30.0) -> None:
        """Stop the Workers at their next push and wait for them (bounded)."""
        ray.get(self.ps.request_stop.remote(ps_mod.STOP_INTERRUPTED))
        if self.pending:
            ray.wait(list(self.pending), num_returns=len(self.pending), timeout=grace)

    def finish(self, started_at: float) -> dict[str, Any]:
        """Final evaluation and checkpoint, then the summary."""
        try:
            self.monitor_report = ray.get(self.monitor.tick.remote(force_eval=True))
            ray.get(self.monitor.close.remote())
        except ray.exceptions.RayError as e:
            self.errors.append(f"monitor: {str(e).strip().splitlines()[-1]}")
        p = ray.get(self.ps.progress.remote())
        nodes = sorted({r["node_id"] for r in self.results.values() if "node_id" in r})
        return {
            "env_id": self.cfg.env.id,
            "workers": self.n_workers,
            "env_steps": p["env_steps"],
            "gradient_updates": p["gradients_applied"],
            "train_seconds": round(p["train_seconds"], 3),
            "wall_seconds": round(time.monotonic() - started_at, 3),
            "env_steps_per_second": p["env_steps"] / p["train_seconds"]
            if p["train_seconds"]
            else None,
            "target_return": self.cfg.run.target_return,
            "seconds_to_target": p["seconds_to_target"],
            "steps_to_target": p["steps_to_target"],
            "mean_return_100": _finite(p["mean_return_100"]),
            "episodes": p["episodes"],
            "best_eval_return": self.monitor_report.get("best_eval_return"),
            "last_eval_return": self.monitor_report.get("last_eval_return"),
            "checkpoint": self.monitor_report.get("checkpoint"),
            "stopped_because": p["stop_reason"],
            "worker_restarts": 0,
            "gradients_dropped": p["gradients_dropped"],
            "staleness_mean": p["staleness_mean"],
            "staleness_max": p["staleness_max"],
            "version": p["version"],
            "worker_nodes": nodes,
            "run_dir": str(self.run_dir),
            "errors": self.errors,
        }

    def shutdown(self) -> None:
        for actor in [*self.workers.values(), self.monitor, self.ps]:
            with contextlib.suppress(Exception):
                ray.kill(actor)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    atomic_write(
        run_dir / "summary.json", lambda f: f.write(json.dumps(summary, indent=2).encode())
    )


def train(cfg: Config, address: str | None = None, overwrite: bool = False) -> RunResult:
    """Run one training to its end. Bad input raises ConfigError before anything is written."""
    cfg.check()
    run_dir = prepare_run_dir(cfg, overwrite)
    started = connect(cfg, address)
    cfg.run.workers = cfg.run.workers or default_workers(cfg, started)
    cfg.save(run_dir / "config.yaml")
    t0 = time.monotonic()
    run = None
    interrupted = False
    bar = tqdm(
        total=cfg.run.max_steps,
        unit="step",
        unit_scale=True,
        dynamic_ncols=True,
        disable=not cfg.run.progress,
        mininterval=0.5,
    )
    try:
        with sigterm_as_interrupt():
            try:
                run = Run(cfg, run_dir, cfg.run.workers)
                run.watch(bar)
            except KeyboardInterrupt:
                interrupted = True
                if run is not None:
                    run.interrupt()
            bar.close()
            if run is None:
                summary = {
                    "env_id": cfg.env.id,
                    "stopped_because": "interrupted",
                    "run_dir": str(run_dir),
                }
            else:
                summary = run.finish(t0)
            if interrupted:
                summary["stopped_because"] = ps_mod.STOP_INTERRUPTED
            write_summary(run_dir, summary)
    finally:
        bar.close()
        if run is not None:
            run.shutdown()
        if started:
            ray.shutdown()
    errors: list[str] = list(summary.get("errors", []))
    if interrupted:
        code = EXIT_INTERRUPTED
    elif errors or summary.get("stopped_because") == ps_mod.STOP_ERROR:
        code = EXIT_FAILURE
    else:
        code = EXIT_OK
    return RunResult(code, summary, run_dir, errors)
