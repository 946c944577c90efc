"""Usage errors and help: a usage line and one ``a3c-ray: error:`` line at the top level, one line
naming the command below it; every flag's help shows its default, the config fields' taken from
the package defaults."""

from __future__ import annotations

import pytest

from a3c_ray.commands.cli import main
from a3c_ray.config import Config


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: command"),
        (["bench", "seeds", "2", "--serve"], "unrecognized arguments: --serve"),
    ],
)
def test_a_top_level_usage_error_prints_the_usage_and_one_error_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("usage: a3c-ray "), lines
    (error,) = [line for line in lines if "error" in line]
    assert error.startswith("a3c-ray: error: ") and says in error, lines
    assert not error.startswith("a3c-ray: error: a3c-ray"), error


def test_a_commands_usage_error_is_one_line_naming_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["train", "--workers", "two"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "a3c-ray: error: train: argument --workers: invalid int value: 'two'"
    assert main(["bench", "seeds", "three"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("a3c-ray: error: bench seeds: argument N|S,S,...:"), err


def helps(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_shows_the_defaults_of_the_fields_and_of_each_commands_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = Config()
    train = helps(["train"], capsys)
    assert f"rollout length n per gradient push (default {c.algo.t_max})" in train
    assert f"learning rate (default {c.algo.lr:g})" in train
    assert f"gymnasium environment id (default {c.env.id})" in train
    assert "seed of the env and the action sampling (default 0)" in helps(["eval"], capsys)
    assert "seconds between the two samples of the rates (default 1)" in helps(["status"], capsys)
    assert "(default 127.0.0.1)" in helps(["serve"], capsys)
    serve = helps(["serve"], capsys)
    assert "(5) (default 5)" not in serve and "(the default)" in serve  # said once


def test_tune_sets_fields_with_the_one_set_flag(capsys: pytest.CaptureFixture[str]) -> None:
    text = helps(["tune"], capsys)
    assert "--set FIELD=VALUE set any config field for every trial, e.g. --set" in text
    assert "(repeatable)" in text and "--set FIELD=VALUE set any config field, e.g." in helps(
        ["train"], capsys
    )
