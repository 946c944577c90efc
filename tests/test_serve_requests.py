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
from a3c_ray.runtime.serve_protocol import Limits, RequestError, answer, parse_act
from a3c_ray.runtime.sessions import SessionError, SessionTable

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
    assert json.loads(json.dumps(out, allow_nan=False)) == {
        "actions": [1, 0],
        "values": [0.5, None],
        "step": 10,
    }


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


def test_sessions_expire_when_idle_and_the_oldest_goes_beyond_the_limit() -> None:
    table = SessionTable(max_sessions=2, idle_seconds=0.2, lease_seconds=0.1)
    first, second = table.create(zeros(1)), table.create(zeros(1))
    third = table.create(zeros(1))
    assert first not in table.sessions and {second, third} == set(table.sessions)
    table.checkout([second])
    time.sleep(0.15)
    # A state checked out longer than the lease is free again (its replica died mid-request).
    assert isinstance(table.checkout([second])[0], tuple)
    time.sleep(0.25)
    got = table.checkout([second, third])
    assert all(isinstance(g, SessionError) and g.status == 404 for g in got)


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


def test_the_serve_config_file_is_valid_and_builds_the_application(tmp_path: Path) -> None:
    from ray.serve.deployment import Application
    from ray.serve.schema import ServeDeploySchema

    from a3c_ray.runtime import serving

    config = yaml.safe_load((ROOT / "cluster" / "serve.yaml").read_text())
    ServeDeploySchema.model_validate(config)  # Serve's own check of a config file
    app = config["applications"][0]
    module, _, attr = app["import_path"].partition(":")
    assert f"{module}:{attr}" == "a3c_ray.runtime.serving:build_app"
    save_checkpoint(tmp_path, "mlp")
    args = {**app["args"], "source": str(tmp_path)}
    assert isinstance(serving.build_app(args), Application)
    with pytest.raises(ConfigError, match="unknown serve option"):
        serving.build_app({**args, "max_batch": 3})
