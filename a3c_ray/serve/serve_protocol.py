"""The HTTP protocol of ``a3c-ray serve``, without Ray: requests parsed and checked, answers and
errors as bytes. The Serve deployment (``serving``) calls these; the tests call them directly.

``POST /act`` takes JSON ``{"observations": [obs, ...], "session": ID?, "greedy": false?,
"reset": [bool, ...]?}``, or the raw bytes of one ``.npy`` array [N, *obs_shape] with
``Content-Type: application/x-npy`` (session, greedy and reset then go in the query string). It
answers ``{"actions": [...], "values": [...], "step": ENV_STEPS}``, one entry per observation, in
order. Every refusal is a 4xx with one line of JSON: ``{"error": "..."}``.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.lib import format as npy_format

from a3c_ray.serve.serve_options import ServeOptions

NPY_TYPES = ("application/x-npy", "application/octet-stream")
TRUE, FALSE = ("1", "true", "yes"), ("0", "false", "no")
MAX_SESSION_ID = 64


class RequestError(Exception):
    """A request refused with ``status``, a one-line message and any headers the status wants
    (``WWW-Authenticate`` with 401, ``Retry-After`` with 503)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = " ".join(message.split())
        self.headers = dict(headers or {})


@dataclass
class ActRequest:
    observations: np.ndarray
    """[N, *obs_shape] in the observation space's dtype, every value finite."""
    session: str | None = None
    greedy: bool = False
    reset: np.ndarray | None = None
    """[N] bool: rows whose recurrent state starts from zeros (an episode's first step)."""


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = ServeOptions.max_body_bytes
    """Bodies over this are refused with 413 before they are parsed."""
    max_observations: int = ServeOptions.max_observations
    """Observations in one request."""


def error_body(message: str) -> bytes:
    return json.dumps({"error": " ".join(message.split())}).encode()


def json_body(payload: dict[str, Any]) -> bytes:
    # allow_nan=False: an answer is strict JSON whatever a policy computes.
    return json.dumps(payload, allow_nan=False).encode()


def parse_act(
    body: bytes,
    content_type: str,
    query: Mapping[str, str],
    space: gym.Space[Any],
    limits: Limits,
) -> ActRequest:
    """The checked request, or RequestError (400) saying what is wrong with it."""
    if content_type.split(";")[0].strip().lower() in NPY_TYPES:
        obs = _npy(body)
        req = ActRequest(_observations(obs, space, limits, raw=True))
        req.session = session_id(query.get("session") or None)
        req.greedy = _flag(query.get("greedy", "false"), "greedy")
        if "reset" in query:
            req.reset = _reset(_flag(query["reset"], "reset"), len(req.observations))
        return req
    payload = parse_json(body)
    if "observations" not in payload:
        raise RequestError(400, 'the body needs "observations": a list of observations')
    unknown = set(payload) - {"observations", "session", "greedy", "reset"}
    if unknown:
        raise RequestError(400, f"unknown field(s) {', '.join(sorted(unknown))}")
    raw = payload["observations"]
    if not isinstance(raw, list):
        raise RequestError(400, '"observations" must be a list of observations')
    obs = _observations(_array(raw), space, limits, raw=False)
    session = payload.get("session")
    if session is not None and not isinstance(session, str):
        raise RequestError(400, '"session" must be a string')
    session = session_id(session)
    greedy = payload.get("greedy", False)
    if not isinstance(greedy, bool):
        raise RequestError(400, '"greedy" must be true or false')
    reset = payload.get("reset")
    return ActRequest(obs, session, greedy, None if reset is None else _reset(reset, len(obs)))


def session_id(sid: str | None) -> str | None:
    """A session id as a client sends it; one longer than any id ``POST /sessions`` gives is
    refused here, so that no error message echoes a long string back."""
    if sid is not None and len(sid) > MAX_SESSION_ID:
        raise RequestError(
            400, "a session id is what POST /sessions answered: this one is too long"
        )
    return sid


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the body is not JSON: {e}") from None
    except RecursionError:  # nested deeper than Python's stack allows
        raise RequestError(400, "the body is JSON nested too deep") from None
    if not isinstance(payload, dict):
        raise RequestError(400, "the body must be a JSON object")
    return payload


def _array(raw: list[Any]) -> np.ndarray:
    try:
        arr = np.asarray(raw)
    except (ValueError, RecursionError):
        raise RequestError(
            400,
            "wrong shape: the observations are ragged (not all of one shape) or nested deeper "
            "than an observation",
        ) from None
    if arr.dtype.kind not in "iuf" and arr.size:
        raise RequestError(400, f"wrong dtype: observations must be numbers, got {_kind(arr)}")
    return arr


def _kind(arr: np.ndarray) -> str:
    return {"b": "booleans", "U": "strings", "O": "mixed or null values"}.get(
        arr.dtype.kind, str(arr.dtype)
    )


def _npy(body: bytes) -> np.ndarray:
    """The array of a ``.npy`` body. Its header is read first, and the data it announces must be
    the rest of the body: a short body cannot make numpy allocate the shape a header claims."""
    f = io.BytesIO(body)
    try:
        version = npy_format.read_magic(f)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"unknown .npy version {version}")
        read_header = {
            (1, 0): npy_format.read_array_header_1_0,
            (2, 0): npy_format.read_array_header_2_0,
        }.get(version, npy_format.read_array_header_2_0)
        shape, fortran, dtype = read_header(f)
        if dtype.hasobject:
            raise ValueError("object arrays are not accepted")
        count = math.prod(shape)
        if count * dtype.itemsize != len(body) - f.tell():
            raise ValueError(
                f"the header announces {count} items of {dtype}, the body holds "
                f"{len(body) - f.tell()} bytes of data"
            )
        data = np.frombuffer(body, dtype=dtype, count=count, offset=f.tell())
        arr = data.reshape(shape[::-1]).T if fortran else data.reshape(shape)
    except Exception as e:  # numpy raises ValueError, OSError, EOFError... for a bad file
        raise RequestError(400, f"the body is not a .npy array: {e}") from None
    return arr.copy(order="C")  # writable, as torch wants it


def _observations(arr: np.ndarray, space: gym.Space[Any], limits: Limits, raw: bool) -> np.ndarray:
    """``arr`` as [N, *shape] of the space's dtype; refused with 400 when it cannot be that."""
    shape = tuple(int(x) for x in space.shape or ())
    dtype = np.dtype(space.dtype or np.float32)
    if arr.ndim != len(shape) + 1 or tuple(arr.shape[1:]) != shape:
        want = ", ".join(map(str, ("N", *shape)))
        raise RequestError(
            400, f"wrong shape: observations must be [{want}], got {list(arr.shape)}"
        )
    if not 1 <= len(arr) <= limits.max_observations:
        raise RequestError(
            400, f"a request holds 1 to {limits.max_observations} observations, got {len(arr)}"
        )
    if arr.dtype.kind not in "iuf":
        raise RequestError(400, f"wrong dtype: observations must be numbers, got {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise RequestError(400, "observations hold NaN or infinite values")
    if dtype.kind in "iu":
        # Raw bytes must come in the env's own integer type; JSON numbers must be whole and fit it.
        if raw and arr.dtype != dtype:
            raise RequestError(400, f"wrong dtype: observations must be {dtype}, got {arr.dtype}")
        info = np.iinfo(dtype)
        if arr.dtype.kind == "f" and not np.equal(np.mod(arr, 1), 0).all():
            raise RequestError(400, f"wrong dtype: observations must be whole numbers ({dtype})")
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise RequestError(
                400, f"observations out of range: {dtype} holds {info.min} to {info.max}"
            )
    elif raw and not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise RequestError(400, f"wrong dtype: observations must be {dtype}, got {arr.dtype}")
    with np.errstate(over="ignore"):  # an overflow is refused just below
        out = arr.astype(dtype, copy=False)
    if dtype.kind == "f" and not np.isfinite(out).all():  # float64 values past float32's range
        raise RequestError(400, f"observations overflow {dtype}")
    return out


def _flag(value: str, name: str) -> bool:
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise RequestError(400, f"{name} must be true or false, got '{value}'")


def _reset(value: Any, n: int) -> np.ndarray:
    if isinstance(value, bool):
        return np.full(n, value)
    if isinstance(value, list) and len(value) == n and all(isinstance(v, bool) for v in value):
        return np.array(value, dtype=bool)
    raise RequestError(400, f'"reset" must be true, false or a list of {n} of them')


def answer(actions: np.ndarray, values: np.ndarray, step: int) -> dict[str, Any]:
    """One request's answer. A value or a (Gaussian) action component that is NaN or infinite (a
    diverged network) goes out as null: the answer is strict JSON whatever the policy computes."""
    return {"actions": _finite_or_null(actions), "values": _finite_or_null(values), "step": step}


def _finite_or_null(arr: np.ndarray) -> list[Any]:
    if arr.dtype.kind != "f" or np.isfinite(arr).all():
        return list(arr.tolist())
    out = arr.astype(object)
    out[~np.isfinite(arr)] = None
    return list(out.tolist())
