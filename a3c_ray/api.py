"""a3c-ray from Python: ``train``, ``evaluate`` and ``load_policy``, with the command line's
vocabulary (``import a3c_ray; a3c_ray.train(env="CartPole-v1", target_return=450)``).

``train`` lives a run as ``a3c-ray train`` does (``runtime.session``): the same config, run
directory, checkpoints, TensorBoard files and ``summary.json``, and returns the summary, typed
(``Summary``). Bad input raises a ``ValueError`` (``ConfigError``, ``CheckpointError``) with a
one-line message before anything is started or written. It works from any thread: Ctrl-C and
SIGTERM are taken over only in the main thread, where Ctrl-C (a notebook's interrupt) ends the run
as on the command line: the Workers stop, a final checkpoint and the summary are written, and
``train`` returns the summary with ``stopped_because == "interrupted"``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a3c_ray.commands.train import TrainRequest, embedded_ray_on_loopback, plan
from a3c_ray.config import Config
from a3c_ray.errors import EXIT_FAILURE, ConfigError
from a3c_ray.rundir.summary import Summary
from a3c_ray.runtime.callbacks import Callback, check_callbacks

log = logging.getLogger("a3c_ray")


class TrainingFailed(RuntimeError):
    """A run that ended with an error (Workers that kept failing, a ParameterServer lost for
    good): its summary, written as for any run, is ``summary``."""

    def __init__(self, message: str, summary: Summary):
        super().__init__(message)
        self.summary = summary


def train(
    config: str | os.PathLike[str] | Config | None = None,
    *,
    env: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    workers: int | None = None,
    target_return: float | None = None,
    max_steps: int | None = None,
    time_limit: float | None = None,
    address: str | None = None,
    progress: bool = True,
    track: str | None = None,
    callbacks: Sequence[Callback] | Callback = (),
    overwrite: bool = False,
    trust_env: bool = False,
) -> Summary:
    """Train until the run stops (target, ``max_steps``, ``time_limit``, a callback, Ctrl-C) and
    return its summary.

    ``config`` is a shipped config's name (``"pong"``), a YAML file or a ``Config``; without one,
    ``env``'s starting config (as ``a3c-ray train --env``). ``overrides`` maps ``section.field``
    to a value, as ``--set`` does (``{"algo.lr": 3e-4}``); the named arguments come last, as the
    command's flags do. ``resume`` continues a run directory (``"auto"`` with ``run_dir``: continue
    it if it holds a run, else start one there). ``address`` (or ``RAY_ADDRESS``) attaches to a
    Ray cluster; a Ray this process already started is used as it is; otherwise an embedded Ray is
    started and stopped again. ``track`` is ``"mlflow"`` or ``"wandb"`` (``--track``).
    ``callbacks`` are called with the run's progress and each evaluation and may stop it
    (``a3c_ray.runtime.callbacks``).

    Raises ``ConfigError`` (a ``ValueError``) for bad input, ``TrainingFailed`` when the run ended
    with an error, and what a callback raised (other than ``StopTraining``) once the run ended.
    """
    if config is not None and not isinstance(config, str | os.PathLike | Config):
        raise ConfigError([f"config: expected a name, a YAML path or a Config, got {config!r}"])
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(
            [f"overrides: expected a mapping of 'section.field' to values, got {overrides!r}"]
        )
    if resume is not None and not isinstance(resume, str | os.PathLike):
        raise ConfigError([f"resume: expected a run directory or 'auto', got {resume!r}"])
    checked_callbacks = check_callbacks(callbacks)
    fields = {
        "env.id": env,
        "run.run_dir": None if run_dir is None else os.fspath(run_dir),
        "run.seed": seed,
        "run.workers": workers,
        "run.target_return": target_return,
        "run.max_steps": max_steps,
        "run.time_limit": time_limit,
    }
    request = TrainRequest(
        config=os.fspath(config) if isinstance(config, os.PathLike) else config,
        overrides={str(k): v for k, v in (overrides or {}).items()},
        fields=fields,
        resume=None if resume is None else os.fspath(resume),
        progress=progress,
        overwrite=overwrite,
        trust_env=trust_env,
    )
    embedded_ray_on_loopback(address)
    p = plan(request)
    if p.note:
        from a3c_ray.algo import choices
        from a3c_ray.envs.make import env_problems

        p.cfg.check(choices.problems, env_problems)
        log.info("a3c-ray: %s", p.note)
    tracker = None
    if track is not None:
        from a3c_ray.runtime.tracking import Tracker, track_spec

        tracker = Tracker(track_spec(track, p.config_name))
    from a3c_ray.runtime.session import train as train_run

    result = train_run(
        p.cfg,
        address=address,
        overwrite=overwrite,
        resume=p.resume,
        existing_ok=p.existing_ok,
        tracker=tracker,
        callbacks=checked_callbacks,
    )
    if result.callback_error is not None:
        raise result.callback_error
    summary = Summary.of(result.summary, result.best_checkpoint)
    if result.exit_code == EXIT_FAILURE:
        raise TrainingFailed(
            f"run {result.run_dir} failed: "
            + "; ".join(result.errors or ["stopped with an error"]),
            summary,
        )
    return summary


@dataclass(frozen=True)
class EvalResult:
    """What ``evaluate`` (and ``a3c-ray eval``) measured: each episode's return and length."""

    env_id: str
    checkpoint: str | None
    """The checkpoint file played; None for random actions (``evaluate_random``)."""
    env_steps: int
    """Env steps of training behind it."""
    returns: list[float]
    lengths: list[int]
    mean_return: float
    std_return: float
    mean_length: float


def evaluate(
    path: str | os.PathLike[str],
    episodes: int = 10,
    seed: int | None = None,
    greedy: bool = False,
    trust_env: bool = False,
) -> EvalResult:
    """Play a checkpoint's policy for ``episodes`` episodes on the env it was trained on, as
    ``a3c-ray eval`` does: the same numbers for the same ``seed`` (None: 0, its default).

    ``path`` is what ``a3c-ray eval`` takes: a ``ckpt-*.pt`` file, a ``latest``/``best`` pointer,
    a checkpoints directory or a run directory (its best checkpoint, else its newest), or a URI
    of one. ``greedy`` takes the most likely action instead of sampling. Raises ``ConfigError``
    or ``CheckpointError`` (both ``ValueError``) for bad input."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError([f"episodes: must be an integer >= 1, got {episodes!r}"])
    from a3c_ray.commands.evaluate import evaluate_checkpoint

    res = evaluate_checkpoint(
        path if isinstance(path, str) else Path(path),
        episodes,
        0 if seed is None else seed,
        greedy,
        trust_env=trust_env,
    )
    return _result(res)


def evaluate_random(env: str, episodes: int = 10, seed: int | None = None) -> EvalResult:
    """Play uniformly random actions for ``episodes`` on ``env``'s evaluation env, as ``a3c-ray
    eval --random env`` does: the env a run from ``train(env=env)`` evaluates on, so its score is
    the baseline to read that run's against. ``env`` is a registered id (no import paths).
    Raises ``ConfigError`` (a ``ValueError``) for bad input."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError([f"episodes: must be an integer >= 1, got {episodes!r}"])
    from a3c_ray.commands.evaluate import evaluate_random as play_random

    return _result(play_random(env, episodes, 0 if seed is None else seed))


def _result(res: dict[str, Any]) -> EvalResult:
    return EvalResult(
        env_id=str(res["env_id"]),
        checkpoint=None if res["checkpoint"] is None else str(res["checkpoint"]),
        env_steps=int(res["env_steps"]),
        returns=[float(r) for r in res["returns"]],
        lengths=[int(n) for n in res["lengths"]],
        mean_return=float(res["mean_return"]),
        std_return=float(res["std_return"]) if math.isfinite(res["std_return"]) else 0.0,
        mean_length=float(res["mean_length"]),
    )
