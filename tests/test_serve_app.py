"""The served application in-process (no Ray): the bearer token and what an unauthenticated caller
may learn, the bound on sessions' state, answers of a diverged policy, deeply nested JSON, and
--follow's choice of what to swap in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, load_checkpoint
from a3c_ray.serve import serve_app, serve_follow
from a3c_ray.serve.serve_follow import Follower, first_of_run

from .policy_checkpoints import save_checkpoint
from .serve_inprocess import call, service

TOKEN = "tok-3f9a1c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
OBS = {"observations": [[0.1, 0.0, -0.1, 0.0]]}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ckpts")
    for kind in ("mlp", "lstm", "gaussian"):
        save_checkpoint(root / kind, kind)
    return root


# -- the token ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/act", OBS),
        ("GET", "/metadata", b""),
        ("POST", "/sessions", {}),
        ("DELETE", "/sessions/abc", b""),
        ("GET", "/nowhere", b""),
        ("GET", "/act", b""),
    ],
)
@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x", "Bearer"],
    ids=["none", "wrong", "basic", "bare", "longer", "empty"],
)
def test_every_route_but_healthz_answers_401_without_the_token(
    ckpts: Path, method: str, path: str, body: Any, header: str | None
) -> None:
    svc = service(ckpts / "mlp", token=TOKEN)
    headers = {} if header is None else {"Authorization": header}
    r = call(svc, method, path, body, headers=headers)
    assert r.status == 401, r.body
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert "Bearer" in r.json()["error"] and TOKEN.encode() not in r.body
    assert svc.batches == 0  # refused before anything ran


def test_with_the_token_every_route_answers_and_healthz_needs_none(ckpts: Path) -> None:
    svc = service(ckpts / "lstm", token=TOKEN)
    assert call(svc, "GET", "/healthz").status == 200
    assert call(svc, "GET", "/healthz", headers={"Authorization": "Bearer no"}).status == 200
    sid = call(svc, "POST", "/sessions", {"envs": 1}, headers=AUTH).json()["session"]
    lower = {"Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive (RFC 6750)
    r = call(svc, "POST", "/act", {"observations": [[0.0, 0.1]], "session": sid}, headers=lower)
    assert r.status == 200 and len(r.json()["actions"]) == 1
    assert call(svc, "GET", "/metadata", headers=AUTH).json()["auth"] == "bearer"
    assert call(svc, "DELETE", f"/sessions/{sid}", headers=AUTH).status == 200


def test_the_token_is_compared_in_constant_time(
    ckpts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = serve_app.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(serve_app.hmac, "compare_digest", spy)
    svc = service(ckpts / "mlp", token=TOKEN)
    assert call(svc, "POST", "/act", OBS, headers={"Authorization": "Bearer guess"}).status == 401
    assert call(svc, "POST", "/act", OBS, headers=AUTH).status == 200
    assert compared == [(b"guess", TOKEN.encode()), (TOKEN.encode(), TOKEN.encode())]


def test_metadata_names_paths_to_authenticated_callers_only(ckpts: Path) -> None:
    where = str(ckpts / "mlp")
    open_meta = call(service(ckpts / "mlp"), "GET", "/metadata").json()
    assert open_meta["checkpoint"] == "ckpt-1000.pt" and "run" not in open_meta
    assert where not in json.dumps(open_meta) and open_meta["auth"] == "none"
    locked = call(service(ckpts / "mlp", token=TOKEN), "GET", "/metadata", headers=AUTH).json()
    assert locked["run"] == where and locked["checkpoint"].startswith(where)


def test_a_500_tells_nothing_of_the_server(ckpts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = service(ckpts / "mlp")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"cannot read {ckpts}/secret.pt at s3://bucket/run")

    monkeypatch.setattr(svc.policy, "act", broken)
    r = call(svc, "POST", "/act", OBS)
    assert r.status == 500 and r.body.count(b"\n") == 0
    assert b"secret" not in r.body and b"s3://" not in r.body and b"RuntimeError" not in r.body
    monkeypatch.undo()
    assert call(svc, "POST", "/act", OBS).status == 200


# -- bodies that once made a 500 -----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/act", "/sessions"])
def test_json_nested_1001_deep_is_a_400(ckpts: Path, path: str) -> None:
    svc = service(ckpts / "lstm")
    deep = b"[" * 1001 + b"]" * 1001
    for body in (deep, b'{"observations": ' + deep + b"}", b'{"envs": ' + deep + b"}"):
        r = call(svc, "POST", path, body)
        assert r.status == 400 and "nested" in r.json()["error"], r.body
    assert call(svc, "POST", "/act", {"observations": [[0.0, 0.0]]}).status == 200


def test_a_diverged_gaussian_policy_answers_200_with_null_actions(ckpts: Path) -> None:
    svc = service(ckpts / "gaussian")
    weights = [p for p in svc.policy.model.parameters()]
    with torch.no_grad():
        for p in weights:
            p.fill_(float("nan"))
    for greedy in (True, False):
        r = call(svc, "POST", "/act", {"observations": [[1.0, 0.0, 0.0]] * 2, "greedy": greedy})
        assert r.status == 200, r.body
        out = json.loads(r.body)  # strict JSON: no NaN literal
        assert out["actions"] == [[None], [None]] and out["values"] == [None, None]


# -- sessions: a bound in bytes, refused past it -------------------------------------------------


def test_sessions_past_the_byte_bound_get_503_and_no_live_session_is_evicted(
    ckpts: Path,
) -> None:
    # LSTM of 8: (h, c) of one env are 2 x 8 float32 = 64 bytes.
    svc = service(ckpts / "lstm", max_session_bytes=1000)
    first = call(svc, "POST", "/sessions", {"envs": 10}).json()["session"]  # 640 bytes
    full = call(svc, "POST", "/sessions", {"envs": 10})
    assert full.status == 503 and "DELETE /sessions" in full.json()["error"]
    assert int(full.headers["retry-after"]) >= 1
    too_big = call(svc, "POST", "/sessions", {"envs": 16})  # 1024 bytes: never fits
    assert too_big.status == 400 and "fewer envs" in too_big.json()["error"]
    obs = {"observations": [[0.0, 0.0]] * 10, "session": first}
    assert call(svc, "POST", "/act", obs).status == 200  # the live session is still there
    assert call(svc, "DELETE", f"/sessions/{first}").status == 200
    assert call(svc, "POST", "/sessions", {"envs": 10}).status == 200  # room again


def test_sessions_past_max_sessions_get_503_until_one_ends_or_expires(ckpts: Path) -> None:
    now = [0.0]
    svc = service(ckpts / "lstm", max_sessions=2, session_idle_seconds=60, clock=lambda: now[0])
    a, b = (call(svc, "POST", "/sessions", {}).json()["session"] for _ in range(2))
    now[0] = 10.0
    refused = call(svc, "POST", "/sessions", {})
    assert refused.status == 503 and refused.headers["retry-after"] == "50"
    for sid in (a, b):
        assert (
            call(svc, "POST", "/act", {"observations": [[0.0, 0.0]], "session": sid}).status == 200
        )
    now[0] = 75.0  # both idle for 65 s since their last request
    assert call(svc, "POST", "/sessions", {}).status == 200


# -- --follow ------------------------------------------------------------------------------------


def save_variant(run: Path, steps: int, ret: float, **change: Any) -> None:
    """A checkpoint of the run's network and weights with ``change`` made to its state."""
    state = load_checkpoint(save_checkpoint(run / "scratch", "mlp", env_steps=steps))
    state.pop("path")
    for key, value in change.items():
        state[key] = value
    CheckpointManager(run / layout.CHECKPOINTS, keep=100).save(state, eval_return=ret)


@pytest.mark.parametrize(
    "change",
    [
        {"env_id": "CartPole-v0"},
        {
            "spaces": {
                "observation": {
                    "type": "Box",
                    "shape": [4],
                    "dtype": "float32",
                    "low": -1.0,
                    "high": 1.0,
                },
                "action": {"type": "Discrete", "n": 2, "start": 0},
            }
        },
    ],
    ids=["another-env", "other-spaces"],
)
def test_follow_keeps_serving_when_the_best_is_of_another_env_with_the_same_network(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    save_checkpoint(tmp_path, "mlp", env_steps=100)
    follower = Follower(str(tmp_path))
    served = first_of_run(tmp_path)
    save_variant(tmp_path, 200, 5.0, **change)
    assert follower.newer(served) is None
    assert follower.passed == {"ckpt-200.pt"}
    save_checkpoint(tmp_path, "mlp", env_steps=300, eval_return=9.0)  # the same env again
    new = follower.newer(served)
    assert new is not None and new.env_steps == 300


def test_follow_fetches_a_broken_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    save_checkpoint(run, "mlp", env_steps=100)
    follower = Follower(f"file://{run}")
    served = first_of_run(f"file://{run}")
    (run / layout.CHECKPOINTS / "ckpt-200.pt").write_bytes(b"not a checkpoint")
    (run / layout.CHECKPOINTS / layout.BEST).write_text("ckpt-200.pt\n")
    loads: list[str] = []
    real = serve_follow.load_policy

    def counting(path: Any) -> Any:
        loads.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(serve_follow, "load_policy", counting)
    for _ in range(3):
        assert follower.newer(served) is None
    assert loads == ["ckpt-200.pt"]


def test_follow_of_a_uri_run_leaves_no_copies_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    staging, scratch = tmp_path / "staging", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("A3C_RAY_STAGING", str(staging))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run = tmp_path / "run"
    manager = CheckpointManager(run / layout.CHECKPOINTS, keep=100)
    save_checkpoint(run, "mlp", env_steps=100, manager=manager)
    uri = f"file://{run}"
    follower = Follower(uri)
    served = first_of_run(uri)
    for steps in (200, 300, 400):
        save_checkpoint(run, "mlp", env_steps=steps, seed=steps, eval_return=steps, manager=manager)
        new = follower.newer(served)
        assert new is not None and new.env_steps == steps
        assert new.checkpoint == f"{uri}/{layout.CHECKPOINTS}/ckpt-{steps}.pt"
        served = new
    left = [p for p in (*staging.rglob("*"), *scratch.rglob("*")) if p.is_file()]
    assert left == []
    np.testing.assert_array_equal(
        served.act(np.zeros((1, 4), np.float32)).actions,
        first_of_run(run).act(np.zeros((1, 4), np.float32)).actions,
    )
