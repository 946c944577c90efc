"""Bad input: exit code 2, one line on stderr, no traceback, and nothing written into existing runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from a3c_ray.commands.cli import main
from a3c_ray.rundir import layout


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a3c_ray", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture()
def existing_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / layout.CHECKPOINTS).mkdir(parents=True)
    (run / layout.CONFIG).write_text("env:\n  id: CartPole-v1\n")
    (run / layout.CHECKPOINTS / layout.LATEST).write_text("ckpt-10.pt\n")
    return run


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["train", "--env", "NoSuchEnv-v0"], "env.id: unknown environment 'NoSuchEnv-v0'"),
        (["train", "--t-max", "0"], "algo.t_max: must be >= 1"),
        (["train", "--lr", "-0.1"], "algo.lr: must be a positive number"),
        (["train", "--workers", "0"], "run.workers: must be >= 1"),
        (["train", "--set", "algo.gamma=2"], "algo.gamma: must be in [0, 1]"),
        (["train", "--set", "algo.optimizer=sgd"], "algo.optimizer: must be one of"),
        (
            ["train", "--set", "algo.value_loss=l1"],
            "algo.value_loss: must be one of mse, huber, got 'l1'",
        ),
        (["train", "--set", "algo.nope=1"], "unknown config field 'algo.nope'"),
        (["train", "--set", "run.max_steps=lots"], "run.max_steps: expected an integer"),
        (["train", "--set", "oops"], "expected FIELD=VALUE"),
        (["train", "--workers", "two"], "invalid int value"),
        (
            ["train", "--env", "tests.odd_spaces:GridActions"],
            "MultiDiscrete action space; only Discrete and 1-D Box are supported",
        ),
        (
            ["train", "--env", "Pendulum-v1", "--set", "model.policy=categorical"],
            "model.policy: categorical does not fit the gaussian actions of 'Pendulum-v1'",
        ),
        (["eval", "/no/such/checkpoint"], "no checkpoint at /no/such/checkpoint"),
        (["eval", "x.pt", "--episodes", "0"], "--episodes must be >= 1"),
        (["eval", "--random", "Nope-v9"], "unknown environment 'Nope-v9'"),
        (["eval", "--random", "tests.odd_spaces:GridActions"], "not an import path"),
        (["eval", "--random", "CartPole-v1", "--greedy"], "--random takes neither --greedy"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_problem(
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err
    assert not (tmp_path / "runs").exists(), "bad input must not create a run directory"


def test_every_bad_field_is_reported_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["train", "--t-max", "0", "--lr", "0", "--env", "Nope-v9", "--set", "env.num_envs=0"])
        == 2
    )
    err = capsys.readouterr().err
    for field in ("algo.t_max", "algo.lr", "env.id", "env.num_envs"):
        assert field in err


def test_bad_config_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo:\n  t_max: -3\n  lr: fast\nwhatever: 1\n")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "algo.lr: expected a number" in err and "unknown config section 'whatever'" in err


def test_existing_run_directory_is_refused_and_left_untouched(
    existing_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(existing_run)
    assert main(["train", "--run-dir", str(existing_run), "--max-steps", "100"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert snapshot(existing_run) == before


def test_bad_input_into_existing_run_directory_writes_nothing(existing_run: Path) -> None:
    before = snapshot(existing_run)
    assert main(["train", "--run-dir", str(existing_run), "--overwrite", "--env", "Nope-v0"]) == 2
    assert snapshot(existing_run) == before


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"PK\x03\x04truncated zip"])
def test_corrupt_checkpoint_for_eval_exits_2_without_traceback(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "ckpt-5.pt"
    bad.write_bytes(content)
    assert main(["eval", str(bad)]) == 2  # an exception would fail the test with its traceback
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0
    assert "corrupt" in err


@pytest.mark.slow  # a process of its own
def test_unknown_env_from_the_command_line_exits_2_without_traceback() -> None:
    proc = run_cli("train", "--env", "CartPole-v999")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "env.id" in proc.stderr


def test_help_lists_the_train_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--env",
        "--workers",
        "--envs-per-worker",
        "--t-max",
        "--max-steps",
        "--target-return",
        "--time-limit",
        "--seed",
        "--run-dir",
        "--address",
        "--config",
    ):
        assert flag in out


def test_dashboard_open_to_the_network_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from a3c_ray.config import Config
    from a3c_ray.runtime import session

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # connect() puts the working directory on PYTHONPATH for Ray's processes: restored after.
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    with pytest.warns(UserWarning, match="dashboard will listen on 0.0.0.0"):
        assert session.connect(Config(), None, dashboard_host="0.0.0.0") is True
    assert calls[-1]["dashboard_host"] == "0.0.0.0"
    session.connect(Config(), None)  # the default: loopback, no warning
    assert calls[-1]["dashboard_host"] == "127.0.0.1"


def test_status_names_the_shards_of_a_sharded_parameter_server() -> None:
    from a3c_ray.commands.status import render

    rec = {
        "run": "cp-1", "env_steps": 1000, "sps": 10.0, "updates_per_second": 1.0, "version": 5,
        "staleness_mean": 1.0, "staleness_max": 2, "mean_return_100": 20.0,
        "last_eval_return": None, "stop_reason": None, "workers": [],
    }  # fmt: skip
    assert "shards" not in render([{**rec, "ps_shards": 1}])
    assert "| 3 ParameterServer shards" in render([{**rec, "ps_shards": 3}])


@pytest.mark.parametrize(
    "query, expected",
    [
        ("runs/cp", ["cp-1a2b3c"]),
        ("runs/cp/", ["cp-1a2b3c"]),
        ("s3://bucket/runs/cp", ["cp-1a2b3c"]),
        ("cp", ["cp-1a2b3c"]),  # the directory's name, not every id that starts with it
        ("cp2-4d5e6f", ["cp2-4d5e6f"]),
        ("cp2", ["cp2-4d5e6f"]),
        ("pong-x", ["pong-x-9f8e7d"]),  # a directory name with a dash in it
        ("c", ["cp-1a2b3c", "cp2-4d5e6f"]),  # the start of an id: both
        ("nothing", []),
        (None, ["cp-1a2b3c", "cp2-4d5e6f", "pong-x-9f8e7d"]),
    ],
)
def test_a_run_is_named_by_its_directory_its_name_or_its_id(
    query: str | None, expected: list[str]
) -> None:
    from a3c_ray.runtime.live import run_filter

    assert run_filter(query, ["cp-1a2b3c", "cp2-4d5e6f", "pong-x-9f8e7d"]) == expected


def test_a_missing_extra_is_named_with_an_install_line_that_works() -> None:
    # The package is not on PyPI: `pip install 'a3c-ray[video]'` would find nothing. Every
    # message names the extra with the install this copy came from (here: the checkout), and
    # every doc with the install from a checkout or a git URL.
    from importlib.metadata import version

    from a3c_ray.errors import install_hint

    root = Path(__file__).resolve().parents[1]
    torch = version("torch").split("+")[0]
    assert install_hint("video") == (
        f"install the 'video' extra: pip install -e '{root}[video]' torch=={torch}"
    )
    texts = [*root.glob("a3c_ray/**/*.py"), *root.glob("a3c_ray/configs/*.yaml")]
    texts += [root / "README.md", *root.glob("docs/*.md")]
    registry = re.compile(r"pip install 'a3c-ray\[[\w,]*\]'")  # not '... @ git+URL'
    offenders = [str(p) for p in texts if registry.search(p.read_text())]
    assert offenders == []


def test_one_meaning_per_word_across_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """A live run is RUN wherever a command takes one; --out is a directory (export takes its
    FILE as the second argument); every command that starts an embedded Ray takes both
    dashboard flags; bench seeds' --learned-return judges where train's --target-return stops."""
    from a3c_ray.commands.cli import build_parser

    def help_of(*words: str) -> str:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*words, "--help"])
        return capsys.readouterr().out

    assert re.search(r"\[RUN\]", help_of("status")) and "--run" not in help_of("status")
    assert re.search(r"--workers WORKERS .*RUN", " ".join(help_of("scale").split()))
    assert "--follow RUN " in help_of("serve") and "RUN_DIR" not in help_of("serve")
    assert "--out" not in help_of("export") and "FILE" in help_of("export")
    for words in (("tune",), ("plot",)):
        assert re.search(r"--out \S+\s+directory", help_of(*words)), words
    for words in (("train",), ("tune",), ("serve",), ("bench", "throughput"), ("bench", "seeds")):
        text = help_of(*words)
        assert "--dashboard-host" in text and "--dashboard-port" in text, words
    assert "--target-return" not in help_of("bench", "seeds")
    assert "stop when" in help_of("train").split("--target-return TARGET_RETURN\n")[1][:100]
    # A run named twice (RUN and the older --run RUN) is one line and exit 2.
    assert main(["status", "runs/a", "--run", "runs/b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give the run once" in err[0], err
