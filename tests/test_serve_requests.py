"""a3c-ray serve without a cluster: request parsing and its refusals, the session table, the exits
before Ray starts, and the Serve config file for `serve deploy`."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from a3c_ray.commands.cli import main
from a3c_ray.errors import ConfigError
from a3c_ray.serve.serve_protocol import Limits, RequestError, answer, json_body, parse_act
from a3c_ray.serve.sessions import SessionError, SessionTable

from .policy_checkpoints import save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
VECTOR = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (2, 3, 3), np.uint8)
LIMITS = Limits(max_body_bytes=1 << 20, max_observations=8)


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def as_json(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def test_a_json_request_becomes_a_checked_batch() -> None:
    req = parse_act(
        as_json({"observations": [[1, 2, 3, 4], [0.5, 0, 0, 0]], "session": "s", "greedy": False}),
        "application/json",
        {},
        VECTOR,
        LIMITS,
    )
    assert req.observations.dtype == np.float32 and req.observations.shape == (2, 4)
    assert req.session == "s" and req.greedy is False and req.reset is None
    req = parse_act(as_json({"observations": [[0] * 4], "reset": True}), "", {}, VECTOR, LIMITS)
    assert req.reset is not None and req.reset.tolist() == [True] and req.greedy is False


def test_image_observations_come_as_npy_bytes_or_json_numbers() -> None:
    frames = np.arange(36, dtype=np.uint8).reshape(2, 2, 3, 3)
    raw = parse_act(
        npy(frames), "application/x-npy", {"greedy": "false", "reset": "true"}, IMAGE, LIMITS
    )
    listed = parse_act(as_json({"observations": frames.tolist()}), "", {}, IMAGE, LIMITS)
    np.testing.assert_array_equal(raw.observations, frames)
    np.testing.assert_array_equal(listed.observations, frames)
    assert raw.observations.dtype == listed.observations.dtype == np.uint8
    assert raw.greedy is False and raw.reset is not None and raw.reset.all()


@pytest.mark.parametrize(
    ("body", "content_type", "space", "match"),
    [
        (as_json({"observations": [[1, 2, 3]]}), "", VECTOR, "wrong shape"),
        (as_json({"observations": [1, 2, 3, 4]}), "", VECTOR, "wrong shape"),
        (as_json({"observations": [[1, 2], [1, 2, 3, 4]]}), "", VECTOR, "ragged"),
        (as_json({"observations": [[1, 2, "3", 4]]}), "", VECTOR, "wrong dtype"),
        (as_json({"observations": [[1, 2, None, 4]]}), "", VECTOR, "wrong dtype"),
        (as_json({"observations": [[True, False, True, False]]}), "", VECTOR, "wrong dtype"),
        (b'{"observations": [[1, 2, NaN, 4]]}', "", VECTOR, "NaN"),
        (b'{"observations": [[1, 2, Infinity, 4]]}', "", VECTOR, "NaN or infinite"),
        (as_json({"observations": [[1e300, 0, 0, 0]]}), "", VECTOR, "overflow"),
        (b'{"observations": [[1, 2', "", VECTOR, "not JSON"),
        (b"\xff\xfe", "", VECTOR, "not JSON"),
        (as_json([[1, 2, 3, 4]]), "", VECTOR, "JSON object"),
        (as_json({"obs": [[1, 2, 3, 4]]}), "", VECTOR, '"observations"'),
        (as_json({"observations": [[0] * 4], "greedy": "yes"}), "", VECTOR, "greedy"),
        (as_json({"observations": [[0] * 4], "session": 7}), "", VECTOR, "session"),
        (as_json({"observations": [[0] * 4], "reset": [True, False]}), "", VECTOR, "reset"),
        (as_json({"observations": [[0] * 4] * 9}), "", VECTOR, "1 to 8 observations"),
        (as_json({"observations": []}), "", VECTOR, "wrong shape"),
        (npy(np.zeros((1, 2, 3, 3), np.float32)), "application/x-npy", IMAGE, "must be uint8"),
        (npy(np.zeros((1, 3, 3), np.uint8)), "application/x-npy", IMAGE, "wrong shape"),
        (b"\x93NUMPY garbage", "application/x-npy", IMAGE, "not a .npy"),
        (as_json({"observations": [[[[256] * 3] * 3] * 2]}), "", IMAGE, "out of range"),
        (as_json({"observations": [[[[0.5] * 3] * 3] * 2]}), "", IMAGE, "whole numbers"),
    ],
    ids=lambda v: v if isinstance(v, str) and v and not v.startswith("application") else None,
)
def test_a_bad_request_is_refused_with_400_and_one_line(
    body: bytes, content_type: str, space: gym.Space[Any], match: str
) -> None:
    with pytest.raises(RequestError, match=match) as info:
        parse_act(body, content_type, {}, space, LIMITS)
    assert info.value.status == 400 and "\n" not in info.value.message


def test_an_answer_is_strict_json_even_for_a_nan_value() -> None:
    out = answer(np.array([1, 0]), np.array([0.5, np.nan], dtype=np.float32), 10)
    assert json.loads(json_body(out)) == {"actions": [1, 0], "values": [0.5, None], "step": 10}


def test_nan_actions_of_a_diverged_gaussian_go_out_as_null() -> None:
    actions = np.array([[np.nan, 0.25], [-np.inf, 1.0]], dtype=np.float32)
    out = answer(actions, np.array([np.nan, 2.0], dtype=np.float32), 10)
    assert json.loads(json_body(out)) == {
        "actions": [[None, 0.25], [None, 1.0]],
        "values": [None, 2.0],
        "step": 10,
    }


def test_json_nested_deeper_than_python_allows_is_a_400() -> None:
    deep = b'{"observations": ' + b"[" * 1001 + b"]" * 1001 + b"}"
    with pytest.raises(RequestError, match="nested too deep") as info:
        parse_act(deep, "", {}, VECTOR, LIMITS)
    assert info.value.status == 400


def test_a_npy_header_cannot_claim_more_data_than_the_body_holds() -> None:
    body = npy(np.zeros((1, 4), np.float32)).replace(b"(1, 4)", b"(10000000000, 4)")
    with pytest.raises(RequestError, match="announces") as info:
        parse_act(body, "application/x-npy", {}, VECTOR, LIMITS)
    assert info.value.status == 400


# -- sessions ----------------------------------------------------------------------------------


def zeros(envs: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((envs, 3), np.float32), np.zeros((envs, 3), np.float32)


def test_a_session_is_checked_out_once_and_checked_in_with_its_new_state() -> None:
    table = SessionTable()
    a, b = table.create(zeros(2)), table.create(zeros(1))
    got = table.checkout([a, b, a, "nope"])
    assert [type(g) for g in got[:2]] == [tuple, tuple]
    assert isinstance(got[2], SessionError) and got[2].status == 409
    assert isinstance(got[3], SessionError) and got[3].status == 404
    assert table.envs(a) == 2
    table.checkin({a: (np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)), b: None})
    again = table.checkout([a, b])
    assert again[0][0].sum() == 6 and again[1][0].sum() == 0  # type: ignore[index]
    assert table.delete(a) and not table.delete(a)


def test_sessions_expire_when_idle_and_a_full_table_refuses_new_ones() -> None:
    now = [0.0]
    table = SessionTable(max_sessions=2, idle_seconds=20, lease_seconds=10, clock=lambda: now[0])
    first, second = table.create(zeros(1)), table.create(zeros(1))
    with pytest.raises(SessionError) as full:
        table.create(zeros(1))
    assert full.value.status == 503 and full.value.retry_after == 20
    assert {first, second} == set(table.sessions)  # no live session evicted to make room
    now[0] = 5.0
    table.checkout([second])
    now[0] = 15.1
    # A state checked out longer than the lease is free again (its replica died mid-request).
    assert isinstance(table.checkout([second])[0], tuple)
    assert first in table.sessions  # idle for 15.1 s of 20
    now[0] = 20.1
    third = table.create(zeros(1))  # the first, idle for 20.1 s, has expired: room for a third
    assert first not in table.sessions and {second, third} == set(table.sessions)
    now[0] = 41.0
    got = table.checkout([second, third])
    assert all(isinstance(g, SessionError) and g.status == 404 for g in got)
    assert table.nbytes == 0


def test_the_table_counts_the_bytes_of_state_it_holds() -> None:
    table = SessionTable(max_bytes=100)
    a = table.create(zeros(2))  # 2 x 2 x 3 float32 = 48 bytes
    assert table.nbytes == 48
    with pytest.raises(SessionError, match="as many sessions") as full:
        table.create(zeros(3))  # 72 more: over 100
    assert full.value.status == 503
    table.delete(a)
    assert table.nbytes == 0 and table.create(zeros(3)) in table.sessions


@pytest.mark.parametrize(
    "kwargs",
    [{"max_sessions": 0}, {"max_bytes": 0}, {"idle_seconds": 0}, {"lease_seconds": -1}],
)
def test_a_session_table_of_no_room_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SessionTable(**kwargs)  # type: ignore[arg-type]


def test_a_session_error_survives_pickling_between_replicas() -> None:
    import pickle

    e = pickle.loads(pickle.dumps(SessionError(409, "busy")))
    assert (e.status, e.message) == (409, "busy")


# -- the command, before Ray -------------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [None, b"", b"not a checkpoint"], ids=["missing", "empty", "text"]
)
def test_serve_of_a_missing_or_corrupt_checkpoint_is_exit_2_before_ray_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None
) -> None:
    target = tmp_path / "ckpt-1.pt"
    if content is not None:
        target.write_bytes(content)
    start = time.monotonic()
    assert main(["serve", str(target), "--port", "8999"]) == 2
    assert time.monotonic() - start < 30  # no Ray was started to find this out
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ckpt-1.pt" in err[0], err


def test_serve_flags_are_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(tmp_path, "mlp")
    assert main(["serve"]) == 2
    assert "a checkpoint or --follow" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--follow", str(tmp_path)]) == 2
    assert main(["serve", str(tmp_path), "--max-batch-size", "0"]) == 2
    assert "max_batch_size: must be >= 1" in capsys.readouterr().err
    assert main(["serve", "--follow", str(tmp_path / "empty")]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_the_serve_config_file_is_valid_and_builds_the_application_only_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.serve.deployment import Application
    from ray.serve.schema import ServeDeploySchema

    from a3c_ray.serve import serving

    monkeypatch.delenv("A3C_RAY_SERVE_TOKEN", raising=False)
    config = yaml.safe_load((ROOT / "cluster" / "serve.yaml").read_text())
    ServeDeploySchema.model_validate(config)  # Serve's own check of a config file
    assert config["http_options"]["host"] == "0.0.0.0"
    app = config["applications"][0]
    module, _, attr = app["import_path"].partition(":")
    assert f"{module}:{attr}" == "a3c_ray.serve.serving:build_app"
    assert app["args"]["token_file"]  # the shipped file is locked
    save_checkpoint(tmp_path, "mlp")
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    args = {**app["args"], "source": str(tmp_path), "token_file": str(token)}
    assert isinstance(serving.build_app(args), Application)
    with pytest.raises(ConfigError, match="unknown serve option"):
        serving.build_app({**args, "max_batch": 3})
    # Without a token the application is not built: here no Serve says where HTTP listens.
    open_args = {k: v for k, v in args.items() if k != "token_file"}
    with pytest.raises(ConfigError, match="no token locks the policy"):
        serving.build_app(open_args)
    monkeypatch.setenv("A3C_RAY_SERVE_TOKEN", "from-env")
    assert isinstance(serving.build_app(open_args), Application)
    monkeypatch.delenv("A3C_RAY_SERVE_TOKEN")
    assert isinstance(serving.build_app({**open_args, "no_auth": True}), Application)
    with pytest.raises(ConfigError, match="both given"):
        serving.build_app({**args, "no_auth": True})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"max_sessions": 0}, "max_sessions: must be >= 1"),
        ({"max_session_bytes": 0}, "max_session_bytes: must be >= 1"),
        ({"session_idle_seconds": 0}, "session_idle_seconds: must be > 0"),
        ({"session_idle_seconds": float("inf")}, "session_idle_seconds: must be > 0"),
        ({"max_sessions": "10"}, "max_sessions: must be int"),
        ({"follow": "yes"}, "follow: must be bool"),
        ({"max_sessions": True}, "max_sessions: must be int"),
    ],
)
def test_serve_options_of_a_config_file_are_checked(change: dict[str, Any], match: str) -> None:
    from a3c_ray.serve.serve_options import ServeOptions

    with pytest.raises(ConfigError, match=match):
        ServeOptions.from_dict({"source": "runs/x", **change})


# -- the token, before Ray -----------------------------------------------------------------------


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.org", ""])
def test_serve_on_a_non_loopback_host_without_a_token_is_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    host: str,
) -> None:
    monkeypatch.delenv("A3C_RAY_SERVE_TOKEN", raising=False)
    save_checkpoint(tmp_path, "mlp")
    start = time.monotonic()
    assert main(["serve", str(tmp_path), "--host", host]) == 2
    assert time.monotonic() - start < 30  # no Ray was started to find this out
    line = one_error_line(capsys)
    assert "A3C_RAY_SERVE_TOKEN" in line and "--token-file" in line and "--no-auth" in line


def test_serve_with_haproxy_ingress_needs_a_token_even_on_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("A3C_RAY_SERVE_TOKEN", raising=False)
    for name in ("RAY_SERVE_ENABLE_HA_PROXY", "RAY_SERVE_THROUGHPUT_OPTIMIZED"):
        monkeypatch.setenv(name, "0")  # what the command sets goes when the test ends
    save_checkpoint(tmp_path, "mlp")
    assert main(["serve", str(tmp_path), "--ingress", "haproxy"]) == 2
    assert "every interface" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "env", "match"),
    [
        (["--token-file", "{tmp}/missing"], None, "cannot be read"),
        (["--token-file", "{tmp}/empty"], None, "is empty"),
        (["--token-file", "{tmp}/two-words"], None, "one word"),
        ([], "", "A3C_RAY_SERVE_TOKEN is empty"),
        (["--no-auth", "--token-file", "{tmp}/good"], None, "both given"),
        (["--no-auth"], "from-env", "both given"),
    ],
    ids=["missing", "empty-file", "two-words", "empty-env", "file-and-no-auth", "env-no-auth"],
)
def test_a_bad_or_contradicted_token_is_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: str | None,
    match: str,
) -> None:
    save_checkpoint(tmp_path, "mlp")
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "two-words").write_text("a b\n")
    (tmp_path / "good").write_text("token\n")
    if env is None:
        monkeypatch.delenv("A3C_RAY_SERVE_TOKEN", raising=False)
    else:
        monkeypatch.setenv("A3C_RAY_SERVE_TOKEN", env)
    words = [w.replace("{tmp}", str(tmp_path)) for w in argv]
    assert main(["serve", str(tmp_path), *words]) == 2
    assert match in one_error_line(capsys)


def test_serve_flags_for_sessions_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(tmp_path, "lstm")
    assert main(["serve", str(tmp_path), "--max-sessions", "0"]) == 2
    assert "max_sessions: must be >= 1" in one_error_line(capsys)
    assert main(["serve", str(tmp_path), "--session-idle-seconds", "-5"]) == 2
    assert "session_idle_seconds: must be > 0" in one_error_line(capsys)
    assert main(["serve", str(tmp_path), "--max-session-mb", "0"]) == 2
    assert "max_session_bytes: must be >= 1" in one_error_line(capsys)


# -- a deployment that fails -------------------------------------------------------------------


def test_waiting_ends_false_when_the_application_fails_or_goes() -> None:
    from types import SimpleNamespace

    from a3c_ray.serve import serve_run

    def status_of(*states: Any) -> Any:
        seq = iter(states)
        return lambda: SimpleNamespace(applications=next(seq))

    running = {"a3c-ray": SimpleNamespace(status="RUNNING", message="")}
    failed = {"a3c-ray": SimpleNamespace(status="DEPLOY_FAILED", message="replica died")}
    no_sleep = lambda s: None  # noqa: E731
    assert (
        serve_run.wait_until_interrupted(status=status_of(running, failed), sleep=no_sleep) is False
    )
    assert serve_run.wait_until_interrupted(status=status_of(running, {}), sleep=no_sleep) is False

    def interrupted(s: float) -> None:
        raise KeyboardInterrupt

    assert serve_run.wait_until_interrupted(status=status_of(), sleep=interrupted) is True


@pytest.mark.parametrize("how", ["fails-later", "fails-to-start"])
def test_serve_exits_1_when_its_deployment_fails(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    from a3c_ray.serve import serve_run

    save_checkpoint(tmp_path, "mlp")
    stopped: list[bool] = []

    def start(*args: Any, **kwargs: Any) -> bool:
        if how == "fails-to-start":
            raise RuntimeError(
                "Deploying application a3c-ray failed:\nTraceback ...\nValueError: boom"
            )
        return True

    monkeypatch.setattr(serve_run, "start", start)
    monkeypatch.setattr(serve_run, "wait_until_interrupted", lambda: False)
    monkeypatch.setattr(serve_run, "stop", lambda started: stopped.append(started))
    assert main(["serve", str(tmp_path), "--port", "8999"]) == 1
    if how == "fails-to-start":
        assert "did not deploy: ValueError: boom" in one_error_line(capsys)
    else:
        assert stopped == [True]
