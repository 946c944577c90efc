"""`--config FILE` with `--env ID` is laid over the env's starting point; without `--env` the file
stands alone on the package defaults (docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3c_ray import configs
from a3c_ray.config import Config


def config_of(*argv: str) -> tuple[Config, str | None]:
    from a3c_ray.commands.cli import build_parser, config_and_note

    return config_and_note(build_parser("train").parse_args(["train", *argv]))


@pytest.fixture
def workers_file(tmp_path: Path) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text("run:\n  workers: 3\nalgo:\n  lr: 0.002\n")
    return path


def test_a_file_with_env_keeps_the_env_config_fields_it_does_not_set(workers_file: Path) -> None:
    cartpole = Config.load(configs.resolve("cartpole"))
    assert cartpole.algo.lr_half_life is not None  # what a replacing --config used to drop

    cfg, note = config_of("--env", "CartPole-v1", "--config", str(workers_file))

    assert cfg.run.workers == 3 and cfg.algo.lr == 0.002  # the file's fields win
    assert cfg.algo.lr_half_life == cartpole.algo.lr_half_life  # the others stay cartpole.yaml's
    assert cfg.run.target_return == cartpole.run.target_return
    assert note is not None and "laid over" in note and "'cartpole'" in note


def test_a_file_over_another_env_keeps_that_env_policy_and_settings(workers_file: Path) -> None:
    pendulum = Config.load(configs.resolve("pendulum"))

    cfg, _ = config_of("--env", "Pendulum-v1", "--config", str(workers_file))

    assert cfg.env.id == "Pendulum-v1" and cfg.run.workers == 3
    assert cfg.model == pendulum.model
    assert cfg.algo.gamma == pendulum.algo.gamma != Config().algo.gamma


def test_a_file_without_env_stands_alone_on_the_package_defaults(workers_file: Path) -> None:
    cfg, note = config_of("--config", str(workers_file))

    expected = Config()
    expected.run.workers, expected.algo.lr = 3, 0.002
    assert cfg.to_dict() == expected.to_dict()
    assert note is None


def test_no_env_config_lays_the_file_over_the_package_defaults(workers_file: Path) -> None:
    cfg, note = config_of("--env", "CartPole-v1", "--no-env-config", "--config", str(workers_file))

    expected = Config()
    expected.run.workers, expected.algo.lr = 3, 0.002
    assert cfg.to_dict() == expected.to_dict()
    assert note is None


@pytest.mark.parametrize("name", configs.names())
def test_a_shipped_config_by_name_is_exactly_its_file(name: str) -> None:
    cfg, _ = config_of("--config", name)
    assert cfg.to_dict() == Config.load(configs.resolve(name)).to_dict()


def test_a_shipped_config_with_its_own_env_is_its_file_and_says_nothing() -> None:
    pong = Config.load(configs.resolve("pong"))
    cfg, note = config_of("--env", pong.env.id, "--config", "pong")
    assert cfg.to_dict() == pong.to_dict()
    assert note is None


def test_a_bad_file_is_reported_as_a_file_alone(tmp_path: Path) -> None:
    from a3c_ray.errors import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text("algo:\n  lr: fast\nwhatever:\n  x: 1\n")
    with pytest.raises(ConfigError) as e:
        config_of("--env", "CartPole-v1", "--config", str(bad))
    assert e.value.problems == [
        "algo.lr: expected a number, got 'fast'",
        "unknown config section 'whatever' (known: env, model, algo, run, monitor, ps, tune)",
    ]
