"""Property: whatever a client sends to a served policy, the answer is a 2xx or a 4xx with one line
of JSON, never a 5xx, and the policy goes on serving. Fuzzed in-process against each kind of
policy (feed-forward, LSTM with sessions, Gaussian), and the parsing alone against an image space;
tests/test_serve.py sends a shorter round of the same requests over real HTTP to Ray Serve."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings

from a3c_ray.serve.serve_app import PolicyService
from a3c_ray.serve.serve_protocol import Limits, RequestError, parse_act

from .policy_checkpoints import save_checkpoint
from .serve_bodies import JSON, NPY, Call, calls, nested, npy_bytes
from .serve_inprocess import Reply, acall, service

OBS_DIM = {"mlp": 4, "lstm": 2, "gaussian": 3}
VALID = {
    "mlp": {"observations": [[0.0, 0.1, 0.0, -0.1]]},
    "lstm": {"observations": [[0.0, 0.1]]},
    "gaussian": {"observations": [[1.0, 0.0, 0.5]]},
}
EXAMPLES = {"mlp": 200, "lstm": 200, "gaussian": 100}
ONCE_500 = [
    Call("POST", "/act", nested(1001), {"content-type": JSON}, {}),
    Call("POST", "/act", b'{"observations": ' + nested(1001) + b"}", {}, {}),
    Call("POST", "/sessions", b'{"envs": ' + nested(1001) + b"}", {}, {}),
    Call(
        "POST",
        "/act",
        npy_bytes(np.zeros((1, 4), np.float32)).replace(b"(1, 4)", b"(10000000000, 4)"),
        {"content-type": NPY},
        {},
    ),
]
"""Requests that answered 500 once, run first in every fuzzing."""
IMAGE = gym.spaces.Box(0, 255, (2, 3, 3), np.uint8)
FUZZ = settings(
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_answer(r: Reply, call: Call) -> None:
    """2xx with a JSON object, or 4xx with one line of JSON naming the error; never a 5xx."""
    assert r.status < 500, (call, r)
    assert 200 <= r.status < 300 or 400 <= r.status < 500, (call, r)
    assert b"\n" not in r.body.strip(), (call, r)
    payload = json.loads(r.body)  # strict JSON either way
    assert isinstance(payload, dict), (call, r)
    if r.status >= 400:
        assert isinstance(payload.get("error"), str) and payload["error"], (call, r)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PolicyService]:
    root = tmp_path_factory.mktemp("fuzz")
    out = {}
    for kind in OBS_DIM:
        save_checkpoint(root / kind, kind)
        out[kind] = service(root / kind)
    return out


@pytest.mark.parametrize("kind", list(OBS_DIM))
def test_any_request_answers_2xx_or_4xx_and_the_policy_keeps_serving(
    kind: str, services: dict[str, PolicyService], loop: asyncio.AbstractEventLoop
) -> None:
    svc = services[kind]
    sessions: list[str] = []
    if kind == "lstm":
        for envs in (1, 2):
            r = loop.run_until_complete(
                acall(svc, "POST", "/sessions", json.dumps({"envs": envs}).encode())
            )
            sessions.append(r.json()["session"])
    valid = json.dumps(VALID[kind]).encode()
    seen: dict[int, int] = {}

    @settings(FUZZ, max_examples=EXAMPLES[kind])
    @given(call=calls(OBS_DIM[kind], sessions))
    @example(call=ONCE_500[0])
    @example(call=ONCE_500[1])
    @example(call=ONCE_500[2])
    @example(call=ONCE_500[3])
    def fuzz(call: Call) -> None:
        r = loop.run_until_complete(
            acall(svc, call.method, call.path, call.body, call.headers, call.query)
        )
        check_answer(r, call)
        seen[r.status] = seen.get(r.status, 0) + 1
        again = loop.run_until_complete(acall(svc, "POST", "/act", valid))
        assert again.status == 200, (call, again)

    fuzz()
    assert seen.get(200, 0) > 0 and seen.get(400, 0) > 0, seen  # both sides were reached
    if sessions:  # the sessions the fuzzing used are released, not stuck in flight
        for sid in sessions:
            body = json.dumps(
                {"observations": [[0.0, 0.0]] * (1 + sessions.index(sid)), "session": sid}
            )
            r = loop.run_until_complete(acall(svc, "POST", "/act", body.encode()))
            assert r.status in (200, 404), r  # 404: the fuzz deleted it


@settings(FUZZ, max_examples=200)
@given(call=calls(3, ["s"]))
@example(call=ONCE_500[0])
@example(call=ONCE_500[3])
def test_any_body_for_an_image_space_parses_or_is_a_4xx(call: Call) -> None:
    """Whole-number bounds and uint8 casts: the parsing alone, no network to run."""
    if call.path != "/act":
        return
    try:
        req = parse_act(
            call.body, call.headers.get("content-type", ""), call.query, IMAGE, Limits()
        )
    except RequestError as e:
        assert 400 <= e.status < 500 and e.message and "\n" not in e.message
        return
    assert req.observations.dtype == np.uint8 and req.observations.shape[1:] == (2, 3, 3)
