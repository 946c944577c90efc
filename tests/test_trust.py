"""A checkpoint and a run directory are data: an env they name by import path (``module:Name``,
or a wrapper) is imported only when the user names it too or passes ``--trust-env``
(``trust_env=True``). Registered gymnasium ids need nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from a3c_ray.commands.cli import build_parser, config_and_note, main
from a3c_ray.commands.evaluate import evaluate_checkpoint
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.rundir.policy import load_policy

from .policy_checkpoints import save_checkpoint

PICKY = "tests.picky_env:Picky"


def crafted(
    tmp_path: Path,
    env_id: str,
    kwargs: dict[str, Any] | None = None,
    wrappers: tuple[str, ...] = (),
) -> Path:
    """A CartPole network's checkpoint whose metadata names another env (as anyone who can write
    a checkpoint file may make one)."""
    state = torch.load(save_checkpoint(tmp_path / "source"), weights_only=True)
    state["env_id"] = env_id
    state["env"] = {**state["env"], "kwargs": kwargs or {}, "wrappers": list(wrappers)}
    path = tmp_path / "crafted" / "ckpt-1000.pt"
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    return path


def test_a_checkpoint_naming_os_system_is_refused_by_eval_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pwned = tmp_path / "pwned"
    ckpt = crafted(tmp_path, "os:system", {"command": f"touch {pwned}"})
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0, err
    assert "'os:system'" in err and "--trust-env" in err
    assert not pwned.exists()
    with pytest.raises(ConfigError, match="trust_env=True"):
        evaluate_checkpoint(ckpt, episodes=1)
    assert not pwned.exists()


def test_load_policy_of_such_a_checkpoint_builds_no_env_and_runs_nothing(tmp_path: Path) -> None:
    """What ``serve`` and ``export`` load: the network and the recorded spaces, never the env."""
    pwned = tmp_path / "pwned"
    policy = load_policy(crafted(tmp_path, "os:system", {"command": f"touch {pwned}"}))
    assert policy.env_id == "os:system"
    assert policy.act(torch.zeros(3, 4).numpy()).actions.shape == (3,)
    assert not pwned.exists()


def test_a_wrapper_named_by_a_checkpoint_needs_the_opt_in_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = crafted(tmp_path, "CartPole-v1", wrappers=["os:system"])
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 2
    assert "'os:system'" in capsys.readouterr().err


def test_trust_env_evaluates_a_custom_env_a_checkpoint_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = crafted(tmp_path, PICKY, {"tolerance": 0.5})
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 2
    assert PICKY in capsys.readouterr().err
    assert main(["eval", str(ckpt), "--episodes", "1", "--trust-env"]) == 0
    assert capsys.readouterr().out.startswith(f"{PICKY}: mean return")
    result = evaluate_checkpoint(ckpt, episodes=1, trust_env=True)
    assert result["env_id"] == PICKY and result["episodes"] == 1


def test_registered_ids_need_no_opt_in(tmp_path: Path) -> None:
    result = evaluate_checkpoint(save_checkpoint(tmp_path), episodes=1)
    assert result["env_id"] == "CartPole-v1"


def test_a_trusted_checkpoint_env_is_not_looked_for_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opting in imports the module from the installed packages and PYTHONPATH; a file of that
    name that happens to lie in the working directory is not picked up on the way."""
    module = "a3c_ray_test_cwd_only_env"
    here = tmp_path / "here"
    here.mkdir()
    (here / f"{module}.py").write_text(
        "from gymnasium.envs.classic_control.cartpole import CartPoleEnv as Env\n"
    )
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(here))])
    ckpt = crafted(tmp_path, f"{module}:Env")
    assert main(["eval", str(ckpt), "--episodes", "1", "--trust-env"]) == 2
    err = capsys.readouterr().err
    assert f"cannot import {module}" in err and "not from the working directory" in err
    assert str(here) not in sys.path
    monkeypatch.syspath_prepend(str(here))  # named explicitly (PYTHONPATH=.): found
    assert main(["eval", str(ckpt), "--episodes", "1", "--trust-env"]) == 0
    sys.modules.pop(module, None)


def saved_run(tmp_path: Path, env_id: str, kwargs: dict[str, Any] | None = None) -> Path:
    """A run directory holding only its config.yaml, as a run writes it."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = Config()
    cfg.env.id = env_id
    cfg.env.kwargs = dict(kwargs or {})
    cfg.run.run_dir = str(run)
    (run / layout.CONFIG).write_text(cfg.to_yaml())
    return run


def train_args(*words: str) -> argparse.Namespace:
    return build_parser("train").parse_args(["train", *words])


def test_resume_of_a_run_directory_naming_os_system_is_refused_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pwned = tmp_path / "pwned"
    run = saved_run(tmp_path, "os:system", {"command": f"touch {pwned}"})
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0, err
    assert f"run directory {run}" in err and "--trust-env" in err
    assert not pwned.exists()


def test_resume_imports_an_env_the_user_names_or_trusts(tmp_path: Path) -> None:
    run = saved_run(tmp_path, PICKY)
    with pytest.raises(ConfigError, match="--trust-env"):
        config_and_note(train_args("--resume", str(run)))
    named = tmp_path / "mine.yaml"
    named.write_text(f"env:\n  id: {PICKY}\n")
    for words in (["--env", PICKY], ["--config", str(named)], ["--trust-env"]):
        cfg, _ = config_and_note(train_args("--resume", str(run), *words))
        assert cfg.env.id == PICKY, words
