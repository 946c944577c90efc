"""Your own environment: ``--env package.module:ClassOrFactory`` with ``env.kwargs`` and
``env.wrappers``, built the same way in Workers, the Monitor and ``eval``; bad input is one line
and exit 2. The env is examples/custom_env/corridor.py, imported from the working directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from a3c_ray.algo import inprocess
from a3c_ray.commands.cli import main
from a3c_ray.config import Config, EnvConfig
from a3c_ray.envs.make import check_env, make_env
from a3c_ray.rundir import layout

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"


@pytest.fixture
def in_example(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(EXAMPLE)
    return EXAMPLE


def test_kwargs_and_wrappers_are_config_fields_set_from_yaml_or_the_command_line() -> None:
    cfg = Config.from_dict({"env": {"id": "corridor:Corridor", "kwargs": {"size": 5}}})
    assert cfg.env.kwargs == {"size": 5}
    cfg.set("env.kwargs.size", "8")
    cfg.set("env.kwargs.render_mode", "ansi")
    assert cfg.env.kwargs == {"size": 8, "render_mode": "ansi"}
    assert cfg.apply_sets(['env.wrappers=["corridor:ScaleReward"]']) == []
    assert cfg.env.wrappers == ["corridor:ScaleReward"]
    assert Config.from_dict(cfg.to_dict()).env == cfg.env  # and back through YAML
    assert cfg.apply_sets(["env.num_envs.x=1"]) == ["unknown config field 'env.num_envs.x'"]


@pytest.mark.parametrize(
    "env_id", ["corridor:Corridor", "corridor:make_corridor", "corridor:Corridor-v0"]
)
def test_a_class_a_factory_or_gymnasiums_module_id_build_the_env_with_kwargs(
    in_example: Path, env_id: str
) -> None:
    kwargs = {} if env_id.endswith("-v0") else {"size": 5}
    env = make_env(EnvConfig(id=env_id, kwargs=kwargs), training=False)
    size = 8 if env_id.endswith("-v0") else 5
    obs, _ = env.reset(seed=0)
    assert obs.shape == (size,) and obs[0] == 1.0
    for _ in range(size - 1):
        obs, reward, terminated, truncated, _ = env.step(1)
    assert terminated and not truncated and reward == pytest.approx(0.99)


def test_wrappers_of_your_own_apply_in_order_inside_a3c_rays_statistics(in_example: Path) -> None:
    cfg = EnvConfig(id="corridor:Corridor", kwargs={"size": 3}, wrappers=["corridor:ScaleReward"])
    assert check_env(cfg) is None
    env = make_env(cfg)
    env.reset(seed=0)
    env.step(1)
    _, reward, terminated, _, info = env.step(1)
    assert terminated and reward == pytest.approx(9.9)
    # The episode statistics are taken above the user's wrappers: they chart what the agent earns.
    assert info["episode"]["r"] == pytest.approx(9.9 - 0.1)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "no_such_module:Env"], "cannot import no_such_module: ModuleNotFoundError"),
        (["--env", "corridor:gym"], "'corridor:gym' is a module, not an env class or factory"),
        (["--env", "collections:OrderedDict"], "made a OrderedDict, not a gymnasium.Env"),
        (["--env", "corridor:Corridor", "--set", "env.kwargs.size=1"], "size must be >= 2"),
        (["--env", "corridor:Corridor", "--set", "env.kwargs.colour=3"], "unexpected keyword"),
        (
            ["--env", "tests.odd_spaces:MatrixActions"],
            "Box action space of shape (2, 2); only 1-D Box actions are supported",
        ),
        (
            ["--env", "tests.odd_spaces:DictObservations"],
            "has a Dict observation space; only Box is supported",
        ),
        (
            ["--env", "tests.odd_spaces:UnboundedActions"],
            "Box action space with infinite bounds; only finite bounds are supported",
        ),
        (
            ["--env", "CartPole-v1", "--set", "model.policy=gaussian"],
            "model.policy: gaussian does not fit the categorical actions of 'CartPole-v1'",
        ),
        (
            ["--env", "corridor:Corridor", "--set", 'env.wrappers=["corridor:nope"]'],
            "env.wrappers: wrapper 'corridor:nope' is not a wrapper class or function",
        ),
    ],
)
def test_bad_custom_envs_are_one_line_errors_with_exit_2(
    in_example: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code = main(["train", *argv, "--run-dir", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists(), "bad input leaves nothing behind"


@pytest.mark.slow
def test_the_corridor_is_learned_in_process_with_its_kwargs(in_example: Path) -> None:
    """Seeded, no Ray, 30k env steps: always going right in a corridor of 6 earns 0.95, a random
    policy about 0.4 (it often runs out of its 24 steps); the last 100 episodes must average 0.9."""
    torch.manual_seed(0)
    cfg = Config.from_dict(
        {"env": {"id": "corridor:Corridor", "kwargs": {"size": 6}}, "run": {"max_steps": 30_000}}
    )
    run = inprocess.train(cfg, workers=1)
    assert run.env_steps >= 30_000
    assert float(np.asarray(run.mean_100)[-1]) >= 0.9


@pytest.mark.ray
@pytest.mark.long
def test_a_custom_env_trains_on_ray_and_eval_rebuilds_it_from_the_checkpoint(
    tmp_path: Path,
) -> None:
    """The example's own command, in its directory: Ray's processes import corridor from there."""
    run_dir = tmp_path / "corridor"
    env = {**os.environ, "PYTHONPATH": ""}
    train = subprocess.run(
        [
            *(sys.executable, "-m", "a3c_ray", "train", "--config", "corridor.yaml"),
            *("--run-dir", str(run_dir), "--workers", "2", "--no-progress"),
        ],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    summary = json.loads((run_dir / layout.SUMMARY).read_text())
    assert summary["stopped_because"] == "target" and summary["steps_to_target"] is not None
    evaluated = subprocess.run(
        [sys.executable, "-m", "a3c_ray", "eval", str(run_dir), "--episodes", "5", "--trust-env"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert evaluated.stdout.startswith("corridor:Corridor: mean return")
    mean = float(evaluated.stdout.split("mean return ")[1].split()[0])
    assert mean >= 0.8
