"""The Monitor as a plain class beside a plain ParameterServer: evaluations, checkpoints, the stop
at an evaluation that reaches the target."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from a3c_ray.algo.evaluation import run_episodes, summarize
from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.algo.seeding import Stream, derive_seeds
from a3c_ray.config import Config
from a3c_ray.envs.make import make_eval_env
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import load_checkpoint
from a3c_ray.rundir.monitor import Monitor
from a3c_ray.rundir.policy import policy_from_state


def monitor_and_server(run_dir: Path, **sets: object) -> tuple[Monitor, ParameterServer]:
    cfg = Config()
    cfg.model.policy = "categorical"
    cfg.monitor.eval_episodes = 2
    for key, value in sets.items():
        cfg.set(key.replace("__", "."), value)
    ps = ParameterServer(cfg, initial_params(cfg, (4,), 2), CheckpointMeta.of(cfg, (4,), 2))
    return Monitor(cfg, run_dir, (4,), 2, ps), ps


@pytest.mark.parametrize("source, stops", [("eval", True), ("train", False)])
def test_an_evaluation_at_the_target_stops_the_run_after_its_checkpoint(
    tmp_path: Path, source: str, stops: bool
) -> None:
    # An untrained CartPole policy plays about 20 steps: any evaluation reaches a target of 5.
    monitor, ps = monitor_and_server(tmp_path, run__target_return=5.0, run__target_from=source)
    report = monitor.tick(force_eval=True)
    monitor.close()
    assert report["last_eval_return"] >= 5.0
    assert (ps.coordinator.stop_reason == "target") is stops
    saved = load_checkpoint(tmp_path / layout.CHECKPOINTS / layout.LATEST)
    assert saved["env_steps"] == 0
    if stops:
        assert ps.progress().steps_to_target == saved["env_steps"]


def test_a_forced_checkpoint_without_evaluation_is_saved_at_once(tmp_path: Path) -> None:
    monitor, _ = monitor_and_server(tmp_path)
    report = monitor.tick(force_eval=True, evaluate=False)
    monitor.close()
    assert report["evals"] == 0 and report["last_eval_return"] is None
    assert (tmp_path / layout.CHECKPOINTS / layout.LATEST).exists()


def test_the_monitor_builds_its_evaluation_network_at_start_and_evaluates_with_it(
    tmp_path: Path,
) -> None:
    # The network exists before any evaluation; the first evaluation loads the newest weights
    # into that same network, and its return is what a fresh network and env give on the
    # evaluation's seed: the start-up step changes no result.
    monitor, ps = monitor_and_server(tmp_path)
    built = monitor.policy
    assert built is not None and monitor.last_eval_error is None
    report = monitor.tick(force_eval=True)
    monitor.close()
    assert monitor.policy is built
    state = ps.state_dict()
    fresh = policy_from_state({**monitor.meta.to_state(), **state})
    seed = derive_seeds(monitor.cfg.run.seed, Stream.EVAL, 0)[0]
    episodes = run_episodes(fresh, make_eval_env(monitor.cfg.env), 2, seed)
    assert report["last_eval_return"] == summarize(episodes)[0]


def test_an_evaluation_env_that_cannot_reset_is_reported_when_the_monitor_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_reset(self: gym.Env, **kwargs: object) -> None:
        raise RuntimeError("no emulator")

    monkeypatch.setattr(gym.Wrapper, "reset", broken_reset)
    monitor, _ = monitor_and_server(tmp_path)
    monitor.close()
    assert monitor.last_eval_error == "at start: RuntimeError: no emulator"
