"""Config: validation gathers every problem by field, ``set`` parses YAML strings, files round-trip."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from a3c_ray.algo import choices
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems
from a3c_ray.errors import ConfigError


def fields_named(problems: list[str]) -> list[str]:
    """The field each problem names: the text before the first ': '."""
    return [p.split(": ", 1)[0] for p in problems]


# -- validate -------------------------------------------------------------------------------


def test_defaults_validate_with_no_problems() -> None:
    cfg = Config()
    assert cfg.validate(choices.problems, env_problems) == []
    cfg.check(choices.problems, env_problems)  # does not raise


BAD_VALUES: list[tuple[str, Any]] = [
    ("env.num_envs", 0),
    ("env.num_envs", -3),
    ("env.max_episode_steps", 0),
    ("model.kind", "transformer"),
    ("model.hidden_sizes", []),
    ("model.hidden_sizes", [64, 0]),
    ("model.activation", "gelu"),
    ("model.lstm_size", 0),
    ("algo.t_max", 0),
    ("algo.gamma", 1.5),
    ("algo.gamma", -0.1),
    ("algo.gamma", math.nan),
    ("algo.gae_lambda", 1.01),
    ("algo.gae_lambda", -0.5),
    ("algo.entropy_coef", -0.01),
    ("algo.bound_coef", -1.0),
    ("algo.value_coef", 0.0),
    ("algo.max_grad_norm", 0.0),
    ("algo.max_grad_norm", -1.0),
    ("algo.optimizer", "sgd"),
    ("algo.lr", -1.0),
    ("algo.lr", 0.0),
    ("algo.lr", math.inf),
    ("algo.lr", math.nan),
    ("algo.lr_half_life", 0.0),
    ("algo.lr_half_life", -5.0),
    ("algo.lr_half_life", math.inf),
    ("algo.rmsprop_alpha", 1.0),
    ("algo.rmsprop_alpha", 0.0),
    ("algo.optimizer_eps", 0.0),
    ("algo.max_staleness", -1),
    ("run.workers", 0),
    ("run.max_steps", 0),
    ("run.target_return", math.inf),
    ("run.time_limit", 0.0),
    ("run.seed", -1),
    ("run.worker_cpus", 0.0),
    ("run.ps_cpus", -0.5),
    ("run.monitor_cpus", -1.0),
    ("monitor.eval_every", 0.0),
    ("monitor.eval_episodes", 0),
    ("monitor.keep_checkpoints", 0),
    ("monitor.log_every", 0.0),
    ("ps.graph_workers", -1),
    ("ps.graph_workers", 33),
]


@pytest.mark.parametrize(("dotted", "value"), BAD_VALUES, ids=[f"{d}={v!r}" for d, v in BAD_VALUES])
def test_each_bad_field_is_named_in_the_problems(dotted: str, value: Any) -> None:
    cfg = Config()
    cfg.set(dotted, value)
    problems = cfg.validate(choices.problems)
    assert fields_named(problems) == [dotted], problems
    with pytest.raises(ConfigError) as info:
        cfg.check(choices.problems)
    assert info.value.problems == problems


GOOD_EDGES: list[tuple[str, Any]] = [
    ("algo.gamma", 0.0),
    ("algo.gamma", 1.0),
    ("algo.gae_lambda", 0.0),
    ("algo.entropy_coef", 0.0),
    ("algo.max_grad_norm", None),
    ("algo.max_staleness", 0),
    ("algo.max_staleness", None),
    ("algo.optimizer", "rmsprop"),
    ("model.activation", "relu"),
    ("model.kind", "mlp"),
    ("run.workers", None),
    ("run.workers", 1),
    ("run.ps_cpus", 0.0),
    ("run.target_return", -100.0),
    ("env.max_episode_steps", 1),
    ("ps.graph_workers", 0),
    ("ps.graph_workers", 32),
]


@pytest.mark.parametrize(("dotted", "value"), GOOD_EDGES, ids=[f"{d}={v!r}" for d, v in GOOD_EDGES])
def test_edge_values_that_are_allowed_validate(dotted: str, value: Any) -> None:
    cfg = Config()
    cfg.set(dotted, value)
    assert cfg.validate(choices.problems) == []


def test_several_bad_fields_are_all_reported_in_one_call() -> None:
    cfg = Config()
    bad = {
        "env.num_envs": 0,
        "algo.t_max": 0,
        "algo.gamma": 1.5,
        "algo.lr": -1.0,
        "algo.optimizer": "sgd",
        "run.workers": 0,
        "run.max_steps": 0,
        "monitor.eval_every": 0.0,
        "model.activation": "gelu",
        "algo.max_grad_norm": 0.0,
    }
    for dotted, value in bad.items():
        cfg.set(dotted, value)
    cfg.set("env.id", "NoSuchEnvironment-v0")
    problems = cfg.validate(choices.problems, env_problems)
    assert sorted(fields_named(problems)) == sorted([*bad, "env.id"])
    with pytest.raises(ConfigError) as info:
        cfg.check(choices.problems, env_problems)
    assert len(info.value.problems) == len(bad) + 1
    for dotted in bad:
        assert dotted in str(info.value)


def test_unknown_env_id_is_reported_with_field_env_id() -> None:
    cfg = Config()
    cfg.set("env.id", "NoSuchEnvironment-v0")
    problems = cfg.validate(choices.problems, env_problems)
    assert fields_named(problems) == ["env.id"]
    assert "NoSuchEnvironment-v0" in problems[0]
    assert "\n" not in problems[0]
    # the env is only looked up when asked for
    assert cfg.validate(choices.problems) == []


# -- set ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dotted", "text", "expected"),
    [
        ("algo.lr", "3e-4", 3e-4),
        ("algo.lr", "0.0003", 3e-4),
        ("algo.lr", "1", 1.0),  # an integer widens to a float
        ("algo.gamma", "0.95", 0.95),
        ("algo.t_max", "20", 20),
        ("run.max_steps", "1_000_000", 1_000_000),
        ("algo.max_grad_norm", "null", None),
        ("algo.max_grad_norm", "2.5", 2.5),
        ("run.workers", "null", None),
        ("run.workers", "6", 6),
        ("run.target_return", "~", None),
        ("env.max_episode_steps", "null", None),
        ("model.hidden_sizes", "[32, 32]", [32, 32]),
        ("model.hidden_sizes", "[128]", [128]),
        ("model.lstm", "true", True),
        ("run.progress", "false", False),
        ("env.id", "Acrobot-v1", "Acrobot-v1"),
        ("algo.optimizer", "rmsprop", "rmsprop"),
    ],
)
def test_set_parses_strings_as_yaml(dotted: str, text: str, expected: Any) -> None:
    cfg = Config()
    cfg.set(dotted, text)
    got = cfg.get(dotted)
    assert got == expected
    assert type(got) is type(expected)


def test_set_keeps_string_fields_as_strings() -> None:
    # a str field is not YAML-parsed: 'null' stays the string 'null', which validate then names
    cfg = Config()
    cfg.set("model.activation", "null")
    assert cfg.model.activation == "null"
    assert cfg.validate(choices.problems) == [
        "model.activation: must be one of tanh, relu, elu, got 'null'"
    ]


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("algo.t_max", "2.5"),
        ("algo.t_max", 2.5),
        ("algo.t_max", "true"),
        ("algo.t_max", True),
        ("algo.lr", "fast"),
        ("algo.lr", "null"),  # not Optional
        ("algo.lr", True),
        ("model.hidden_sizes", "64"),
        ("model.hidden_sizes", "[64, wide]"),
        ("model.hidden_sizes", [64, 1.5]),
        ("model.lstm", "1"),
        ("model.lstm", "yes please"),
        ("run.workers", "[1]"),
        ("env.id", 3),
    ],
)
def test_set_rejects_wrong_types_naming_the_field(dotted: str, value: Any) -> None:
    cfg = Config()
    before = cfg.get(dotted)
    with pytest.raises(ConfigError) as info:
        cfg.set(dotted, value)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"{dotted}: ")
    assert cfg.get(dotted) == before  # a rejected value leaves the field unchanged


@pytest.mark.parametrize("dotted", ["algo.nope", "nosection.lr", "algo", "", "algo.", ".lr"])
def test_set_rejects_unknown_fields(dotted: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config().set(dotted, "1")
    assert "unknown config field" in str(info.value)


# -- from_dict ------------------------------------------------------------------------------


def test_from_dict_builds_a_config() -> None:
    cfg = Config.from_dict({"algo": {"lr": 0.01, "t_max": 5}, "env": {"num_envs": 2}})
    assert cfg.algo.lr == 0.01
    assert cfg.algo.t_max == 5
    assert cfg.env.num_envs == 2
    assert cfg.algo.gamma == Config().algo.gamma  # the rest keeps its defaults


@pytest.mark.parametrize("data", [None, {}])
def test_from_dict_of_nothing_gives_the_defaults(data: dict | None) -> None:
    assert Config.from_dict(data).to_dict() == Config().to_dict()


def test_from_dict_rejects_unknown_sections_and_fields_all_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_dict(
            {
                "optim": {"lr": 0.1},
                "algo": {"learning_rate": 0.1, "t_max": "five"},
                "env": "CartPole-v1",
            }
        )
    problems = info.value.problems
    assert len(problems) == 4, problems
    joined = "\n".join(problems)
    assert "optim" in joined
    assert "algo.learning_rate" in joined
    assert "algo.t_max" in joined
    assert "'env' must be a mapping" in joined


# -- files ----------------------------------------------------------------------------------


def test_yaml_round_trip_gives_an_equal_config(tmp_path: Path) -> None:
    cfg = Config()
    cfg.set("env.id", "Acrobot-v1")
    cfg.set("env.max_episode_steps", 200)
    cfg.set("model.hidden_sizes", [32, 16, 8])
    cfg.set("model.lstm", True)
    cfg.set("algo.lr", 0.0003)
    cfg.set("algo.optimizer_eps", 1e-7)
    cfg.set("algo.max_grad_norm", None)
    cfg.set("run.workers", 3)
    cfg.set("run.target_return", -1e30)
    cfg.set("run.run_dir", "runs/my run")
    cfg.set("monitor.eval_every", 2.5)
    path = tmp_path / "config.yaml"
    cfg.save(path)
    loaded = Config.load(path)
    assert loaded.to_dict() == cfg.to_dict()
    assert loaded == cfg


def test_yaml_round_trip_of_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    Config().save(path)
    assert Config.load(path).to_dict() == Config().to_dict()


def test_load_reads_a_hand_written_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("algo:\n  gamma: 0.95\n  max_staleness: null\nmodel:\n  hidden_sizes: [8]\n")
    cfg = Config.load(path)
    assert cfg.algo.gamma == 0.95
    assert cfg.algo.max_staleness is None
    assert cfg.model.hidden_sizes == [8]


def test_load_reads_exponent_floats_the_way_users_write_them(tmp_path: Path) -> None:
    # YAML 1.1 reads '3e-4' as a string; a config file holding it must still give a number
    path = tmp_path / "cfg.yaml"
    path.write_text("algo:\n  lr: 3e-4\n  optimizer_eps: 1e-5\n")
    cfg = Config.load(path)
    assert cfg.algo.lr == pytest.approx(3e-4)
    assert cfg.algo.optimizer_eps == pytest.approx(1e-5)
    assert cfg.validate(choices.problems) == []


def test_load_of_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert Config.load(path).to_dict() == Config().to_dict()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("missing.yaml", None),
        ("invalid.yaml", "algo: [1, 2\n  lr: {\n"),
        ("tabs.yaml", "algo:\n\tlr: 0.1\n"),
        ("list.yaml", "- algo\n- env\n"),
        ("scalar.yaml", "42\n"),
    ],
)
def test_load_of_a_bad_file_raises_a_one_line_config_error(
    tmp_path: Path, name: str, text: str | None
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert len(info.value.problems) == 1
    assert str(path) in message


def test_load_of_a_file_with_bad_fields_names_them(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("algo:\n  lr: fast\n  momentum: 0.9\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    assert len(info.value.problems) == 2
    assert "algo.lr" in str(info.value)
    assert "algo.momentum" in str(info.value)


def test_the_shipped_cartpole_config_is_the_defaults_written_out() -> None:
    """The package defaults are CartPole's: cartpole.yaml differs from them only in the run's
    length and target and in its step size's half-life, so the documented defaults and the file
    cannot drift apart."""
    from a3c_ray import configs

    shipped = Config.load(configs.resolve("cartpole")).to_dict()
    defaults = Config().to_dict()
    assert (
        shipped["algo"].pop("lr_half_life") == 1e6 and defaults["algo"].pop("lr_half_life") is None
    )
    for section in ("env", "model", "algo", "monitor"):
        assert shipped[section] == defaults[section], section
    run = {k: v for k, v in shipped["run"].items() if k not in ("max_steps", "target_return")}
    assert run == {k: v for k, v in defaults["run"].items() if k in run}


def test_every_shipped_config_is_the_starting_point_of_its_env_or_a_named_variant() -> None:
    from a3c_ray.configs import FOR_ENV, VARIANTS, names, resolve

    for name in names():
        env_id = Config.load(resolve(name)).env.id
        assert FOR_ENV.get(env_id) == name or name in VARIANTS, (name, env_id)
    for env_id, name in FOR_ENV.items():
        assert Config.load(resolve(name)).env.id == env_id, (env_id, name)


def test_leaving_env_out_trains_as_the_default_env_given() -> None:
    """`a3c-ray train` alone and `a3c-ray train --env CartPole-v1` (the default of --env) start
    from the same shipped config, so the settings of the quick start are cartpole.yaml's."""
    from a3c_ray.commands.cli import build_parser, config_and_note
    from a3c_ray.configs import resolve

    bare, line = config_and_note(build_parser("train").parse_args(["train"]))
    given, _ = config_and_note(build_parser("train").parse_args(["train", "--env", "CartPole-v1"]))
    assert bare.to_dict() == given.to_dict() == Config.load(resolve("cartpole")).to_dict()
    assert line is not None and "shipped config 'cartpole'" in line
    defaults, _ = config_and_note(build_parser("train").parse_args(["train", "--no-env-config"]))
    assert defaults.to_dict() == Config().to_dict()


@pytest.mark.parametrize(
    "argv, lr, note",
    [
        # --env alone: the shipped config for that env, said in one line.
        (["--env", "Pendulum-v1"], "pendulum", True),
        # opted out: the package defaults
        (["--env", "Pendulum-v1", "--no-env-config"], None, False),
        # an env with no shipped config: the defaults
        (["--env", "Acrobot-v1"], None, False),
    ],
)
def test_env_starts_from_its_shipped_config_unless_told_otherwise(
    argv: list[str], lr: str | None, note: bool
) -> None:
    from a3c_ray.commands.cli import build_parser, config_and_note
    from a3c_ray.configs import resolve

    cfg, line = config_and_note(build_parser("train").parse_args(["train", *argv]))
    expected = Config.load(resolve(lr)) if lr else Config()
    assert cfg.algo == expected.algo and cfg.model == expected.model
    assert cfg.env.id == argv[1]
    assert (line is not None and "starts from the shipped config 'pendulum'" in line) is note
