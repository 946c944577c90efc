"""Observation and action spaces as plain values, so that a checkpoint can carry them.

A checkpoint loads with ``torch.load(weights_only=True)``: numbers, strings, lists and dicts only.
The two kinds of space a3c-ray trains on become::

    {"type": "Box", "shape": [4], "dtype": "float32", "low": [...] or -inf, "high": ...}
    {"type": "Discrete", "n": 2, "start": 0}

A Box's bounds are one number where every element shares it (images: 0 and 255), else a flat list.
Checkpoints written before spaces were recorded get the spaces their shapes imply
(``implied_spaces``): unbounded float32 vectors, or uint8 images for a convolutional body.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np


def _bound(values: np.ndarray) -> float | list[float]:
    flat = values.astype(np.float64).reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return float(flat[0])
    return [float(v) for v in flat]


def describe_space(space: gym.Space[Any]) -> dict[str, Any]:
    """A Box or Discrete space as plain values."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": [int(x) for x in space.shape],
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    raise ValueError(f"cannot record a {type(space).__name__} space (Box and Discrete only)")


def space_from(d: dict[str, Any]) -> gym.Space[Any]:
    """The space ``describe_space`` described."""
    if d.get("type") == "Box":
        shape = tuple(int(x) for x in d["shape"])
        dtype = np.dtype(d["dtype"])

        def bound(v: float | list[float]) -> np.ndarray:
            a = np.asarray(v, dtype=np.float64)
            return np.broadcast_to(a, shape) if a.ndim == 0 else a.reshape(shape)

        return gym.spaces.Box(
            bound(d["low"]).astype(dtype), bound(d["high"]).astype(dtype), shape, dtype
        )
    if d.get("type") == "Discrete":
        return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
    raise ValueError(f"unknown space description {d!r}")


def implied_spaces(
    obs_shape: Sequence[int], n_actions: int, image: bool, continuous: bool
) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The spaces a checkpoint's shapes imply, for checkpoints that did not record theirs."""
    shape = tuple(int(x) for x in obs_shape)
    obs: gym.Space[Any] = (
        gym.spaces.Box(0, 255, shape, np.uint8)
        if image
        else gym.spaces.Box(-np.inf, np.inf, shape, np.float32)
    )
    act: gym.Space[Any] = (
        gym.spaces.Box(-np.inf, np.inf, (int(n_actions),), np.float32)
        if continuous
        else gym.spaces.Discrete(int(n_actions))
    )
    return obs, act


def json_safe(d: Any) -> Any:
    """A space description as strict JSON allows it: infinite bounds as the strings ``"inf"`` and
    ``"-inf"`` (JSON has no infinity)."""
    if isinstance(d, dict):
        return {k: json_safe(v) for k, v in d.items()}
    if isinstance(d, list):
        return [json_safe(v) for v in d]
    if isinstance(d, float) and math.isinf(d):
        return "inf" if d > 0 else "-inf"
    return d


def recorded_spaces(obs: gym.Space[Any], act: gym.Space[Any]) -> dict[str, Any]:
    """What a checkpoint records of an env's spaces; nothing for a space it cannot describe."""
    try:
        return {"observation": describe_space(obs), "action": describe_space(act)}
    except ValueError:
        return {}
