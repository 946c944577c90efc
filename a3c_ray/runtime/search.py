"""Hyperparameter search on Ray Tune: each trial is one whole a3c-ray run (ParameterServer, Monitor,
Workers) started by a Tune ``Trainable`` inside the trial's placement group.

A trial reports to Tune every ``tune.report_every`` seconds of training: env steps, the mean of the
last 100 training episodes and the Monitor's newest evaluation. Each trial keeps an ordinary run
directory under ``OUT/runs/`` (config, TensorBoard, checkpoints, summary.json), so ``a3c-ray eval``
and TensorBoard read it as they read any run. A Tune checkpoint is one a3c-ray checkpoint file;
loading one (population-based training's exploit, or a trial restarted after a failure) starts the
trial's next segment, a new run directory whose ParameterServer starts from that file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

from a3c_ray.algo import choices
from a3c_ray.algo.coordinator import STOP_ERROR, STOP_INTERRUPTED
from a3c_ray.config import Config
from a3c_ray.config.space import Sampler, samplers
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import ConfigError, one_line
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, resolve, write_pointer
from a3c_ray.rundir.checkpoint import load_checkpoint as load_checkpoint_file
from a3c_ray.rundir.summary import RunSummary
from a3c_ray.runtime import actors
from a3c_ray.runtime.driver import Run
from a3c_ray.runtime.placement import group_bundles
from a3c_ray.runtime.session import RunSession
from a3c_ray.runtime.tracking import Tracker, TrackSpec

log = logging.getLogger("a3c_ray")
EXPERIMENT = "search"  # Tune's experiment folder under OUT
RUNS = "runs"  # the trials' run directories under OUT
TUNE_CHECKPOINT = "a3c-ray"  # the folder of a3c-ray's checkpoint inside a Tune checkpoint
SEARCH_CONFIG = "search.yaml"  # the search's whole config (tune section included), under OUT


def domain(s: Sampler) -> Any:
    """The Ray Tune search domain of a sampler."""
    make: Any = {
        "uniform": tune.uniform,
        "loguniform": tune.loguniform,
        "quniform": tune.quniform,
        "randint": tune.randint,
        "choice": tune.choice,
        "grid": tune.grid_search,
    }[s.kind]
    return make(*s.args)


def pbt_mutations(space: dict[str, Sampler]) -> dict[str, Any]:
    """What PBT perturbs, and how: a choice as the list of its values, which Ray's explore moves
    to a neighbour (a domain it would multiply by 0.8 or 1.2, strings included); a range as its
    domain, which Ray multiplies or resamples, and ``KeepInSpace`` then puts back into it."""
    return {name: list(s.args[0]) if s.kind == "choice" else domain(s) for name, s in space.items()}


class KeepInSpace:
    """PBT's explore, finished: every perturbed range value back inside its sampler's range, on
    its grid, an integer where the sampler's are (``Sampler.clamp``). A class, not a closure:
    Tune pickles its scheduler with the experiment."""

    def __init__(self, space: dict[str, Sampler]):
        self.space = space

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for name, s in self.space.items():
            if name in config:
                config[name] = s.clamp(config[name])
        return config


def trial_config(base: dict[str, Any], values: dict[str, Any], run_dir: str) -> Config:
    """The base config with one trial's sampled values, writing into ``run_dir``."""
    cfg = Config.from_dict(base)
    for name, value in values.items():
        cfg.set(name, value.item() if hasattr(value, "item") else value)  # numpy scalars
    cfg.run.run_dir = run_dir
    cfg.run.progress = False
    cfg.check(choices.problems, env_problems)
    resolve_policy(cfg)
    return cfg


class A3C(tune.Trainable):
    """One a3c-ray run as a Tune trial; ``step`` trains for ``tune.report_every`` seconds."""

    def setup(  # type: ignore[override]  # Tune passes with_parameters' values as keywords
        self,
        config: dict[str, Any],
        base: dict[str, Any],
        runs_dir: str,
        track: TrackSpec | None = None,
    ) -> None:
        self.values = dict(config)
        self.base = base
        self.runs_dir = runs_dir
        # One tracked run per trial, whatever segments the trial's run directories make.
        self.tracker = None if track is None else Tracker(replace(track, run_name=self.trial_id))
        self.run: Run | None = None
        self.restored_from = ""
        self.final_checkpoint: str | None = None
        self.summary: RunSummary = {}
        # A trial whose values the env or the checks refuse fails at its first step, where Tune
        # has recorded what it was, rather than in its constructor.
        self.setup_error: Exception | None = None
        try:
            self._new_segment()
        except Exception as e:
            self.setup_error = e

    def _new_segment(self) -> None:
        """A fresh run directory for this trial: ``<trial>``, then ``<trial>-1``, ``<trial>-2``..."""
        n, name = 0, self.trial_id
        while (Path(self.runs_dir) / name).exists():
            n += 1
            name = f"{self.trial_id}-{n}"
        self.cfg = trial_config(self.base, self.values, str(Path(self.runs_dir) / name))
        self.session = RunSession.checked(self.cfg, tracker=self.tracker)
        self.session.prepare()
        self.storage = self.session.storage
        self.run, self.final_checkpoint, self.summary = None, None, {}
        self.started = False

    def step(self) -> dict[str, Any]:
        if self.setup_error is not None:
            raise RuntimeError(one_line(self.setup_error))
        if self.run is None:
            self.started = True
            try:
                self.session.start()
            finally:  # actors created by a start that failed half way are ended with the trial
                self.run = self.session.run
        run = self.run
        assert run is not None
        deadline = time.monotonic() + self.cfg.tune.report_every
        while not (done := run.watch(None, until=deadline)) and math.isnan(self._metric()):
            deadline = time.monotonic() + 1.0  # no value of the metric yet: train on
        if done:
            self._finish(interrupted=False)
        return {**self._result(), "done": done}

    def _metric(self) -> float:
        return float(self._result()[self.cfg.tune.metric])

    def _result(self) -> dict[str, Any]:
        """What the trial reports: the run's counters, while it runs or from its summary."""
        if self.run is not None and self.run.progress is not None:
            p, m = self.run.progress, self.run.monitor.report
            values = {
                "env_steps": p.env_steps,
                "mean_return_100": p.mean_return_100,
                "eval_return": m.get("last_eval_return"),
                "best_eval_return": m.get("best_eval_return"),
                "train_seconds": p.train_seconds,
                "staleness_mean": p.staleness_mean,
            }
        else:
            s = self.summary
            values = {
                "env_steps": s.get("env_steps", 0),
                "mean_return_100": s.get("mean_return_100"),
                "eval_return": s.get("last_eval_return"),
                "best_eval_return": s.get("best_eval_return"),
                "train_seconds": s.get("train_seconds", 0.0),
                "staleness_mean": s.get("staleness_mean"),
            }
        out = {k: (math.nan if v is None else v) for k, v in values.items()}
        out["run_dir"] = self.cfg.run.run_dir
        out["restored_from"] = self.restored_from
        return out

    def _finish(self, interrupted: bool) -> None:
        """End the run: final evaluation and checkpoint, summary.json, actors gone. A run that
        failed makes the trial fail, with its errors."""
        run, self.run = self.run, None
        if run is None:
            return
        stopped = STOP_INTERRUPTED if interrupted else None
        summary, _ = self.session.end(interrupted, stopped_because=stopped)
        self.summary = summary
        self.final_checkpoint = summary.get("checkpoint")
        if summary.get("errors") or summary.get("stopped_because") == STOP_ERROR:
            raise RuntimeError(
                f"a3c-ray run {self.cfg.run.run_dir} failed: "
                + "; ".join(summary.get("errors") or ["stopped with an error"])
            )

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """The run's weights and optimizer statistics now, as one a3c-ray checkpoint file."""
        out = Path(checkpoint_dir) / TUNE_CHECKPOINT
        if self.run is not None:
            state = actors.ShardedServer(self.run.shards, self.cfg).state_dict()
            CheckpointManager(out, keep=1).save(state)
        elif self.final_checkpoint is not None:
            out.mkdir(parents=True, exist_ok=True)
            src = resolve(self.final_checkpoint)
            shutil.copy2(src, out / src.name)
            write_pointer(out / layout.LATEST, src.name)

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Continue from another trial's (or this trial's own) checkpoint, in a new segment."""
        src = resolve(Path(checkpoint) / TUNE_CHECKPOINT)
        if self.run is not None:
            self._finish(interrupted=True)
        if self.started:
            self._new_segment()
        dest = self.storage.local / layout.CHECKPOINTS
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / src.name)
        write_pointer(dest / layout.LATEST, src.name)
        self.storage.upload(f"{layout.CHECKPOINTS}/{src.name}")
        self.storage.upload(f"{layout.CHECKPOINTS}/{layout.LATEST}")
        self.restored_from = str(src)
        steps = int(load_checkpoint_file(src)["env_steps"])
        record = {"trial": self.trial_id, "restored_from": str(src), "env_steps": steps}
        self.storage.write_text(layout.SEGMENT, json.dumps(record) + "\n")

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):  # stopped by the search: nothing to report to it
            self._finish(interrupted=True)
        if hasattr(self, "session"):  # a tracked run that never started is ended too
            self.session.close()


@dataclass
class SearchResult:
    path: str
    """Tune's experiment directory: ``load_results(path)`` reads it back as a ResultGrid."""
    runs_dir: str
    grid: Any
    """The ``ray.tune.ResultGrid``."""


def scheduler(cfg: Config) -> Any:
    """The Tune scheduler of ``tune.scheduler``; a PBT one keeps its perturbations in the space."""
    t = cfg.tune
    if t.scheduler == "asha":
        return ASHAScheduler(
            time_attr="env_steps",
            max_t=cfg.run.max_steps,
            grace_period=min(t.grace_steps, cfg.run.max_steps),
            reduction_factor=t.reduction_factor,
        )
    if t.scheduler == "pbt":
        space = samplers(cfg)
        return PopulationBasedTraining(
            time_attr="env_steps",
            perturbation_interval=t.perturbation_steps,
            hyperparam_mutations=pbt_mutations(space),
            quantile_fraction=t.quantile_fraction,
            custom_explore_fn=KeepInSpace(space),
        )
    return FIFOScheduler()


def search(
    cfg: Config,
    out: str | os.PathLike[str],
    verbose: int = 1,
    fixed_size: bool = True,
    track: TrackSpec | None = None,
) -> SearchResult:
    """Run the search of ``cfg.tune`` on the Ray this process is connected to; trials write under
    ``out``. Trials that fail are in the result, not raised. On a Ray of ``fixed_size`` (no
    autoscaler), a trial larger than the whole cluster is refused before anything starts. With
    ``track``, each trial is one tracked run (``runtime.tracking``)."""
    space = {name: domain(s) for name, s in samplers(cfg).items()}
    workers = int(cfg.run.workers or 1)
    cfg.run.workers = workers
    need = sum(b.get("CPU", 0.0) for b in group_bundles(cfg, workers))
    have = ray.cluster_resources().get("CPU", 0.0)
    if fixed_size and need > have + 1e-9:
        raise ConfigError(
            [
                f"a trial takes {need:g} CPUs ({workers} Workers x run.worker_cpus "
                f"{cfg.run.worker_cpus:g}, the ParameterServer and the Monitor) and this Ray has "
                f"{have:g}; lower run.workers or run.worker_cpus"
            ]
        )
    out = os.path.abspath(out)
    runs_dir = os.path.join(out, RUNS)
    os.makedirs(runs_dir, exist_ok=True)
    Path(out, SEARCH_CONFIG).write_text(cfg.to_yaml())
    trainable = tune.with_resources(
        tune.with_parameters(A3C, base=cfg.to_dict(), runs_dir=runs_dir, track=track),
        PlacementGroupFactory(group_bundles(cfg, workers)),
    )
    t = cfg.tune
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=t.metric,
            mode="max",
            num_samples=t.num_samples,
            scheduler=scheduler(cfg),
            max_concurrent_trials=t.max_concurrent_trials,
            reuse_actors=False,
        ),
        run_config=tune.RunConfig(
            name=EXPERIMENT,
            storage_path=out,
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
            # PBT exploits a trial's newest checkpoints: keep a few, so none goes before it is used.
            checkpoint_config=tune.CheckpointConfig(num_to_keep=4, checkpoint_at_end=True),
            verbose=verbose,
        ),
    )
    with warnings.catch_warnings():
        # A trial is a set of actors; PBT's hint to reuse the trial's actor does not apply.
        warnings.filterwarnings("ignore", message=".*reuse_actors.*")
        grid = tuner.fit()
    return SearchResult(os.path.join(out, EXPERIMENT), runs_dir, grid)


def load_results(path: str | os.PathLike[str]) -> Any:
    """The ``ray.tune.ResultGrid`` of a finished search, from its experiment directory
    (``OUT/search``), with the search's metric as the one ``get_best_result`` ranks by."""
    from ray.tune import ExperimentAnalysis, ResultGrid

    saved = Path(path).parent / SEARCH_CONFIG
    metric = Config.load(saved).tune.metric if saved.is_file() else None
    return ResultGrid(
        ExperimentAnalysis(str(path), default_metric=metric, default_mode="max" if metric else None)
    )


def shutdown() -> None:
    ray.shutdown()
