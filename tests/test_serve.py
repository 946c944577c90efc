"""a3c-ray serve on a real Ray Serve, answering real HTTP on 127.0.0.1: actions and values as the
policy computes them, batching, images as .npy, sessions that act as eval does, refusals that
leave the server serving, a checkpoint swap under load, and the command itself.

``make test`` runs the command itself (Serve's proxy, an embedded Ray, a request and Ctrl-C): the
application's answers are proven in process there (test_serve_app, test_serve_requests,
test_serve_fuzz). The tests over one shared Serve application (``server``) run with
``make test-long``."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from a3c_ray import load_policy
from a3c_ray.algo.evaluation import run_episodes
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager

from .conftest import free_port, init_local_ray, wait_for
from .policy_checkpoints import save_checkpoint

httpx = pytest.importorskip("httpx")
pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]
SMALL_BODY = 64 << 10  # the /mlp app's body limit, to test 413 without megabytes
TOKEN = "serve-test-token-7c1e"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One Ray and one Serve proxy on 127.0.0.1 with four applications: an MLP, an LSTM on two
    replicas (its sessions must not depend on which replica answers), the Pong CNN, and an LSTM
    locked with a token that keeps one session at most."""
    import ray
    from ray import serve

    from a3c_ray.serve import serving

    root = tmp_path_factory.mktemp("serve")
    for kind in ("mlp", "lstm", "cnn"):
        save_checkpoint(root / kind, kind)
    (root / "token").write_text(TOKEN + "\n")
    env_token = os.environ.pop("A3C_RAY_SERVE_TOKEN", None)  # the open apps are built open
    if ray.is_initialized():
        ray.shutdown()
    init_local_ray(  # a Ray of its own, even when `ray start` left one on this machine
        num_cpus=4,
        include_dashboard=False,
        logging_level="WARNING",
        _node_ip_address="127.0.0.1",
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=serving.QUIET)
    common = {"replica_cpus": 0, "batch_wait_ms": 5.0}
    apps = {
        "mlp": {"source": str(root / "mlp"), "max_body_bytes": SMALL_BODY, **common},
        "lstm": {"source": str(root / "lstm"), "replicas": 2, **common},
        "cnn": {"source": str(root / "cnn"), **common},
        "locked": {
            "source": str(root / "lstm"),
            "token_file": str(root / "token"),
            "max_sessions": 1,
            **common,
        },
    }
    for name, args in apps.items():
        serve.run(serving.build_app(args), name=name, route_prefix=f"/{name}")
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        yield {"client": client, "root": root, "port": port}
    finally:
        client.close()
        serve.shutdown()
        ray.shutdown()
        if env_token is not None:
            os.environ["A3C_RAY_SERVE_TOKEN"] = env_token


def post(client: Any, path: str, payload: Any) -> Any:
    return client.post(
        path, content=json.dumps(payload), headers={"content-type": "application/json"}
    )


def ok(client: Any, path: str, payload: Any) -> dict[str, Any]:
    r = post(client, path, payload)
    assert r.status_code == 200, r.text
    return dict(r.json())


# -- acting ------------------------------------------------------------------------------------


@pytest.mark.long
def test_act_answers_in_order_what_the_policy_computes(server: dict[str, Any]) -> None:
    policy = load_policy(server["root"] / "mlp")
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    out = ok(server["client"], "/mlp/act", {"observations": obs.tolist(), "greedy": True})
    want = policy.act(obs, greedy=True)
    assert out["actions"] == want.actions.tolist() and out["step"] == 1000
    np.testing.assert_allclose(out["values"], want.values, rtol=1e-5, atol=1e-6)
    sampled = ok(server["client"], "/mlp/act", {"observations": obs.tolist()})  # the default
    assert len(sampled["actions"]) == 7 and set(sampled["actions"]) <= {0, 1}


@pytest.mark.long
def test_concurrent_requests_share_forward_passes_and_each_gets_its_own_answer(
    server: dict[str, Any],
) -> None:
    policy = load_policy(server["root"] / "mlp")
    client = server["client"]
    before = client.get("/mlp/metadata").json()["replica"]
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(1 + i % 3, 4)).astype(np.float32) * 3 for i in range(96)]

    def one(obs: np.ndarray) -> dict[str, Any]:
        return ok(client, "/mlp/act", {"observations": obs.tolist(), "greedy": True})

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(one, batches))
    for obs, got in zip(batches, answers, strict=True):
        want = policy.act(obs, greedy=True)
        assert got["actions"] == want.actions.tolist()
        np.testing.assert_allclose(got["values"], want.values, rtol=1e-5, atol=1e-6)
    after = client.get("/mlp/metadata").json()["replica"]
    requests, batches_run = (
        after["requests"] - before["requests"],
        after["batches"] - before["batches"],
    )
    assert requests == 96
    assert batches_run < requests, (
        f"{requests} requests in {batches_run} forward passes: no batching"
    )


@pytest.mark.long
def test_healthz_and_metadata_describe_the_policy(server: dict[str, Any]) -> None:
    client = server["client"]
    assert client.get("/cnn/healthz").json() == {"status": "ok", "step": 1000}
    meta = client.get("/cnn/metadata").json()
    assert meta["env_id"] == "PongNoFrameskip-v4" and meta["checkpoint_step"] == 1000
    assert meta["observation_space"] == {
        "type": "Box",
        "shape": [4, 84, 84],
        "dtype": "uint8",
        "low": 0.0,
        "high": 255.0,
    }
    assert meta["action_space"] == {"type": "Discrete", "n": 6, "start": 0}
    assert meta["checkpoint"] == "ckpt-1000.pt" and meta["recurrent"] is False
    assert "run" not in meta and str(server["root"]) not in json.dumps(meta)  # served open
    lstm = client.get("/lstm/metadata").json()
    assert lstm["recurrent"] is True and lstm["lstm_size"] == 8


@pytest.mark.long
def test_image_observations_as_npy_bytes_and_as_json_get_the_same_answer(
    server: dict[str, Any],
) -> None:
    policy = load_policy(server["root"] / "cnn")
    frames = np.random.default_rng(2).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    buf = io.BytesIO()
    np.save(buf, frames)
    raw = server["client"].post(
        "/cnn/act?greedy=true",
        content=buf.getvalue(),
        headers={"content-type": "application/x-npy"},
    )
    assert raw.status_code == 200, raw.text
    listed = ok(server["client"], "/cnn/act", {"observations": frames.tolist(), "greedy": True})
    want = policy.act(frames, greedy=True)
    assert raw.json()["actions"] == listed["actions"] == want.actions.tolist()
    np.testing.assert_allclose(raw.json()["values"], want.values, rtol=1e-4, atol=1e-5)


# -- sessions ----------------------------------------------------------------------------------


@pytest.mark.long
def test_a_session_acts_as_eval_does_over_an_episode(server: dict[str, Any]) -> None:
    """Two sessions played in turn on two replicas: each one's actions and values are the ones
    the loaded policy computes with its state carried, and the episode is the one eval plays."""
    client = server["client"]
    policy = load_policy(server["root"] / "lstm")
    envs = [gym.make("a3c_ray/MaskedCartPole-v1") for _ in range(2)]
    sessions = [ok(client, "/lstm/sessions", {})["session"] for _ in envs]
    obs = [env.reset(seed=10 + i)[0] for i, env in enumerate(envs)]
    states: list[Any] = [None, None]
    lengths, done = [0, 0], [False, False]
    while not all(done):
        for i, env in enumerate(envs):
            if done[i]:
                continue
            request = {"observations": [obs[i].tolist()], "session": sessions[i], "greedy": True}
            got = ok(client, "/lstm/act", request)
            want = policy.act(obs[i][None], states[i], greedy=True)
            states[i] = want.state
            assert got["actions"] == want.actions.tolist(), f"session {i} step {lengths[i]}"
            np.testing.assert_allclose(got["values"], want.values, rtol=1e-5, atol=1e-6)
            obs[i], _, term, trunc, _ = env.step(got["actions"][0])
            lengths[i] += 1
            done[i] = bool(term or trunc)
    for i in range(2):
        played = run_episodes(policy, gym.make("a3c_ray/MaskedCartPole-v1"), 1, 10 + i, greedy=True)
        assert played[0].length == lengths[i]
        assert client.delete(f"/lstm/sessions/{sessions[i]}").status_code == 200


@pytest.mark.long
def test_a_session_of_several_envs_resets_the_rows_it_is_told_to(server: dict[str, Any]) -> None:
    client = server["client"]
    policy = load_policy(server["root"] / "lstm")
    sid = ok(client, "/lstm/sessions", {"envs": 2})["session"]
    obs = np.array([[0.1, -0.2], [0.3, 0.05]], dtype=np.float32)
    ok(client, "/lstm/act", {"observations": obs.tolist(), "session": sid})
    got = ok(
        client, "/lstm/act", {"observations": obs.tolist(), "session": sid, "reset": [True, False]}
    )
    first = policy.act(obs)
    want = policy.act(obs, first.state, reset=np.array([True, False]))
    np.testing.assert_allclose(got["values"], want.values, rtol=1e-5, atol=1e-6)
    r = post(client, "/lstm/act", {"observations": obs[:1].tolist(), "session": sid})
    assert r.status_code == 400 and "2 envs" in r.json()["error"]


# -- bad input ---------------------------------------------------------------------------------

BAD = [
    ("/mlp/act", {"observations": [[0.0, 1.0, 2.0]]}, None, 400, "wrong shape"),
    ("/mlp/act", {"observations": [[0.0, "x", 2.0, 3.0]]}, None, 400, "wrong dtype"),
    ("/mlp/act", b'{"observations": [[0.0, NaN, 2.0, 3.0]]}', None, 400, "NaN"),
    ("/mlp/act", {"observations": [[0.0] * 4] * 5000}, None, 413, "over the limit"),
    ("/mlp/act", b'{"observations": [[0.0, 1.0', None, 400, "not JSON"),
    (
        "/lstm/act",
        {"observations": [[0.0, 0.0]], "session": "no-such-session"},
        None,
        404,
        "unknown session",
    ),
    ("/cnn/act", np.zeros((1, 4, 84, 84), np.float32), "application/x-npy", 400, "must be uint8"),
    ("/mlp/nowhere", {}, None, 404, "no route"),
]


@pytest.mark.parametrize(
    ("path", "body", "content_type", "status", "match"),
    BAD,
    ids=["shape", "dtype", "nan", "too-big", "not-json", "unknown-session", "npy-dtype", "route"],
)
@pytest.mark.long
def test_a_bad_request_gets_a_4xx_one_line_json_error_and_the_server_keeps_serving(
    server: dict[str, Any], path: str, body: Any, content_type: str | None, status: int, match: str
) -> None:
    client = server["client"]
    if isinstance(body, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, body)
        content = buf.getvalue()
    else:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(
        path, content=content, headers={"content-type": content_type or "application/json"}
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert "\n" not in r.text.strip() and match in r.json()["error"]
    app = path.split("/")[1]
    obs = (
        [[0.0] * (2 if app == "lstm" else 4)]
        if app != "cnn"
        else np.zeros((1, 4, 84, 84), int).tolist()
    )
    ok(client, f"/{app}/act", {"observations": obs})


@pytest.mark.long
def test_wrong_methods_get_405(server: dict[str, Any]) -> None:
    r = server["client"].get("/mlp/act")
    assert r.status_code == 405 and "POST" in r.json()["error"]


# -- the token ---------------------------------------------------------------------------------


@pytest.mark.long
def test_a_locked_policy_answers_401_without_its_token_and_200_with_it(
    server: dict[str, Any],
) -> None:
    client = server["client"]
    body = {"observations": [[0.0, 0.1]]}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}):
        for r in (
            client.post("/locked/act", json=body, headers=headers),
            client.get("/locked/metadata", headers=headers),
            client.get("/locked/nowhere", headers=headers),
            client.post("/locked/sessions", json={}, headers=headers),
        ):
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert str(server["root"]) not in r.text
    assert client.get("/locked/healthz").json() == {"status": "ok", "step": 1000}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post("/locked/act", json=body, headers=auth)
    assert r.status_code == 200 and len(r.json()["actions"]) == 1
    meta = client.get("/locked/metadata", headers=auth).json()
    assert meta["auth"] == "bearer" and meta["run"] == str(server["root"] / "lstm")


# -- sessions past the limit -------------------------------------------------------------------


@pytest.mark.long
def test_a_session_past_the_limit_gets_503_and_the_live_one_is_kept(server: dict[str, Any]) -> None:
    client = server["client"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    sid = client.post("/locked/sessions", json={}, headers=auth).json()["session"]
    refused = client.post("/locked/sessions", json={}, headers=auth)
    assert refused.status_code == 503, refused.text
    assert "DELETE /sessions" in refused.json()["error"] and int(refused.headers["retry-after"]) > 0
    r = client.post(
        "/locked/act", json={"observations": [[0.0, 0.0]], "session": sid}, headers=auth
    )
    assert r.status_code == 200, r.text
    assert client.delete(f"/locked/sessions/{sid}", headers=auth).status_code == 200
    again = client.post("/locked/sessions", json={}, headers=auth)
    assert again.status_code == 200, again.text
    assert (
        client.delete(f"/locked/sessions/{again.json()['session']}", headers=auth).status_code
        == 200
    )


# -- fuzzing over HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize(("app", "obs_dim"), [("mlp", 4), ("lstm", 2)])
@pytest.mark.long
def test_fuzzed_requests_over_http_answer_2xx_or_4xx_and_the_server_keeps_serving(
    server: dict[str, Any], app: str, obs_dim: int
) -> None:
    """A short round of tests/test_serve_fuzz.py's requests through Serve's proxy."""
    from urllib.parse import quote

    from hypothesis import HealthCheck, given, settings

    from .serve_bodies import Call, calls

    client = server["client"]
    sessions = [ok(client, f"/{app}/sessions", {})["session"]] if app == "lstm" else []
    valid = {"observations": [[0.0] * obs_dim]}
    statuses: list[int] = []

    @settings(
        max_examples=30,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(call=calls(obs_dim, sessions))
    def fuzz(call: Call) -> None:
        r = client.request(
            call.method,
            f"/{app}{quote(call.path, safe='/')}",
            content=call.body,
            headers=call.headers,
            params=call.query,
        )
        assert r.status_code < 500, (call, r.status_code, r.text)
        if r.status_code >= 400:
            assert r.headers["content-type"] == "application/json", (call, r.text)
            assert "\n" not in r.text.strip() and r.json()["error"], (call, r.text)
        statuses.append(r.status_code)

    fuzz()
    assert any(400 <= s < 500 for s in statuses), statuses
    ok(client, f"/{app}/act", valid)
    if sessions:  # released after each request (or deleted by one): never stuck in flight
        r = post(client, f"/{app}/act", {**valid, "session": sessions[0]})
        assert r.status_code in (200, 404), r.text


# -- follow ------------------------------------------------------------------------------------


@pytest.mark.long
def test_follow_swaps_in_each_newer_best_checkpoint_without_a_failed_request(
    server: dict[str, Any], tmp_path: Path
) -> None:
    """Four clients send requests back to back while the run writes three better checkpoints (and
    one worse, which is not served): every request answers 200, each client sees the steps only
    grow, and the last answers are the last best checkpoint's."""
    from ray import serve

    from a3c_ray.serve import serving

    manager = CheckpointManager(tmp_path / layout.CHECKPOINTS, keep=10)
    save_checkpoint(tmp_path, env_steps=100, seed=0, eval_return=1.0, manager=manager)
    args = {"source": str(tmp_path), "follow": True, "follow_every": 0.2, "replica_cpus": 0}
    serve.run(serving.build_app(args), name="follow", route_prefix="/follow")
    client = server["client"]
    obs = np.random.default_rng(3).normal(size=(2, 4)).astype(np.float32)
    stop = threading.Event()
    seen: list[list[int]] = [[] for _ in range(4)]
    failures: list[str] = []

    def hammer(i: int) -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=60) as c:
            while not stop.is_set():
                try:
                    r = post(c, "/follow/act", {"observations": obs.tolist()})
                except httpx.HTTPError as e:
                    failures.append(repr(e))
                    continue
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text}")
                else:
                    seen[i].append(r.json()["step"])

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: all(len(s) > 3 for s in seen), 60, "answers from the first checkpoint")
        for steps, ret in ((200, 2.0), (300, 3.0), (400, 0.5), (500, 4.0)):
            save_checkpoint(tmp_path, env_steps=steps, seed=steps, eval_return=ret, manager=manager)
            if ret > 1.0:
                wait_for(
                    lambda s=steps: any(x and x[-1] == s for x in seen), 60, f"step {steps} served"
                )
        wait_for(lambda: all(x and x[-1] == 500 for x in seen), 60, "every client on step 500")
        final = ok(client, "/follow/act", {"observations": obs.tolist(), "greedy": True})
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        serve.delete("follow")
    assert not failures, failures[:5]
    for steps in seen:
        assert steps == sorted(steps), "a client saw an older checkpoint after a newer one"
        assert 400 not in steps  # not the best: never served
    served = {s for steps in seen for s in steps}
    assert {100, 200, 500} <= served
    last = load_policy(tmp_path / layout.CHECKPOINTS / "ckpt-500.pt").act(obs, greedy=True)
    assert final["step"] == 500 and final["actions"] == last.actions.tolist()
    np.testing.assert_allclose(final["values"], last.values, rtol=1e-5, atol=1e-6)


# -- the command -------------------------------------------------------------------------------


@pytest.mark.parametrize("ingress", ["proxy", pytest.param("haproxy", marks=pytest.mark.long)])
def test_the_command_serves_on_an_embedded_ray_until_interrupted(
    tmp_path: Path, ingress: str
) -> None:
    """Open on loopback with Serve's proxy; locked with a token in the environment with haproxy,
    whose replicas listen on every interface."""
    save_checkpoint(tmp_path, "mlp")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("A3C_RAY_SERVE_TOKEN", None)
    auth = {}
    if ingress == "haproxy":
        env["A3C_RAY_SERVE_TOKEN"] = TOKEN
        auth = {"Authorization": f"Bearer {TOKEN}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "a3c_ray",
            "serve",
            str(tmp_path),
            "--port",
            str(port),
            "--replica-cpus",
            "0",
            "--ingress",
            ingress,
            "--dashboard-port",
            str(free_port()),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr").open("w"),  # a file: Ray's notes must not fill a pipe
        text=True,
    )
    try:
        # The command prints its one JSON line once the application is up.
        assert proc.stdout is not None
        line = json.loads(proc.stdout.readline() or "{}")
        url = f"http://127.0.0.1:{port}"
        assert line.get("url") == url, (tmp_path / "stderr").read_text()[-2000:]
        assert line["env_id"] == "CartPole-v1"
        assert line["auth"] == ("bearer" if auth else "none") and TOKEN not in json.dumps(line)
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
        body = {"observations": [[0.0, 0.1, 0.0, -0.1]]}
        r = httpx.post(f"{url}/act", json=body, headers=auth, timeout=30)
        assert r.status_code == 200 and len(r.json()["actions"]) == 1
        if auth:
            assert httpx.post(f"{url}/act", json=body, timeout=30).status_code == 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0
        with pytest.raises(httpx.HTTPError):  # the proxy went with the embedded Ray
            httpx.get(f"{url}/healthz", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
