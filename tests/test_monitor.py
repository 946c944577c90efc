"""The Monitor as a plain class beside a plain ParameterServer: evaluations, checkpoints, the stop
at an evaluation that reaches the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.parameter_server import ParameterServer, initial_params
from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import load_checkpoint
from a3c_ray.rundir.monitor import Monitor


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
