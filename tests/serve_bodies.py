"""Hypothesis strategies for requests to a served policy: any bytes, any JSON, JSON nested past
Python's stack, ``.npy`` arrays of any dtype and shape (whole, cut short, or with a header that
lies), and bodies close to a valid ``/act`` or ``POST /sessions`` that get one thing wrong."""

from __future__ import annotations

import io
import json
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

JSON = "application/json"
NPY = "application/x-npy"


class Call(NamedTuple):
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    query: dict[str, str]


leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity as JSON's non-standard literals


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


npy_dtypes = st.sampled_from(
    [
        "float32",
        "float64",
        "float16",
        "uint8",
        "int8",
        "int64",
        "bool",
        "complex64",
        "<U3",
        "M8[s]",
        ">f4",
    ]
)
arrays = npy_dtypes.flatmap(
    lambda dt: hnp.arrays(np.dtype(dt), hnp.array_shapes(min_dims=0, max_dims=4, max_side=6))
)


@st.composite
def npy_bodies(draw: st.DrawFn) -> bytes:
    body = npy_bytes(draw(arrays))
    how = draw(st.sampled_from(["whole", "cut", "lie", "flip"]))
    if how == "cut":
        return body[: draw(st.integers(0, len(body)))]
    if how == "lie":  # a header that claims another shape than the data holds
        shape = draw(st.sampled_from([b"(10000000000, 4)", b"(1, 4)", b"()", b"(-1,)"]))
        start, end = body.find(b"'shape': ") + 9, body.find(b"), }") + 1
        return body[:start] + shape + body[end:] if start > 8 and end > 0 else body
    if how == "flip":
        at = draw(st.integers(0, len(body) - 1))
        return body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1 :]
    return body


def observations(obs_dim: int) -> st.SearchStrategy[Any]:
    """Lists of observations that are often right in shape, with values of any kind."""
    number = st.floats(width=32, allow_nan=False, allow_infinity=False) | st.integers(-300, 300)
    row = st.lists(number, min_size=obs_dim, max_size=obs_dim)
    almost = st.lists(number | json_values, min_size=max(obs_dim - 1, 0), max_size=obs_dim + 1)
    return st.one_of(
        st.lists(row, min_size=1, max_size=4),
        st.lists(row, min_size=1, max_size=4),
        st.lists(row, max_size=4),
        st.lists(almost | row, max_size=3),
        json_values,
    )


@st.composite
def act_payloads(draw: st.DrawFn, obs_dim: int, sessions: list[str]) -> dict[str, Any]:
    """An ``/act`` body that is often valid: the optional fields are left out, right or wrong."""
    payload: dict[str, Any] = {"observations": draw(observations(obs_dim))}
    extras = draw(st.lists(st.sampled_from(["greedy", "reset", "session", "extra"]), max_size=2))
    for key in extras:
        if key == "greedy":
            payload[key] = draw(st.booleans() | json_values)
        elif key == "reset":
            payload[key] = draw(st.booleans() | st.lists(st.booleans(), max_size=4) | json_values)
        elif key == "session":
            known = st.sampled_from(sessions) if sessions else st.nothing()
            payload[key] = draw(known | st.text(max_size=70) | json_values)
        else:
            payload["extra"] = draw(json_values)
    return payload


def query(sessions: list[str]) -> st.SearchStrategy[dict[str, str]]:
    values = st.sampled_from(["true", "false", "1", "no", "maybe", ""]) | st.text(max_size=6)
    sids = st.sampled_from(sessions) | st.text(max_size=70) if sessions else st.text(max_size=70)
    return st.fixed_dictionaries({}, optional={"greedy": values, "reset": values, "session": sids})


def calls(obs_dim: int, sessions: list[str]) -> st.SearchStrategy[Call]:
    """Requests to every route: mostly ``POST /act`` and ``POST /sessions``."""
    act_json = st.one_of(
        act_payloads(obs_dim, sessions).map(dumps),
        act_payloads(obs_dim, sessions).map(dumps),
        act_payloads(obs_dim, sessions).map(dumps),
        json_values.map(dumps),
        st.integers(990, 3000).map(nested),
        st.integers(990, 3000).map(lambda d: b'{"observations": ' + nested(d) + b"}"),
        st.binary(max_size=64),
    )
    act = st.builds(
        Call,
        st.just("POST"),
        st.just("/act"),
        act_json,
        st.sampled_from([{"content-type": JSON}, {}, {"content-type": "text/plain"}]),
        st.just({}),
    )
    act_npy = st.builds(
        Call,
        st.just("POST"),
        st.just("/act"),
        npy_bodies(),
        st.just({"content-type": NPY}),
        query(sessions),
    )
    session_body = st.one_of(
        st.fixed_dictionaries(
            {}, optional={"envs": json_values | st.integers(-3, 2000), "x": leaves}
        ).map(dumps),
        json_values.map(dumps),
        st.integers(990, 3000).map(lambda d: b'{"envs": ' + nested(d) + b"}"),
        st.binary(max_size=32),
    )
    create = st.builds(
        Call, st.just("POST"), st.just("/sessions"), session_body, st.just({}), st.just({})
    )
    delete = st.builds(
        Call,
        st.just("DELETE"),
        (st.sampled_from(sessions) if sessions else st.just("x"))
        | st.text(max_size=80).map(lambda t: t.replace("/", "")),
        st.just(b""),
        st.just({}),
        st.just({}),
    ).map(lambda c: c._replace(path=f"/sessions/{c.path}"))
    other = st.builds(
        Call,
        st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
        st.sampled_from(["/act", "/healthz", "/metadata", "/sessions", "/", "/act/x", "//act"]),
        st.binary(max_size=16),
        st.just({}),
        st.just({}),
    )
    return st.one_of(act, act, act_npy, create, delete, other)
