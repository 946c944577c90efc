"""How gradients and weights travel: float32 as they are, or halved to bfloat16 or float16.

The server keeps float32 weights and optimizer statistics whatever the wire carries. A bfloat16
array travels as numpy ``uint16`` (numpy has no bfloat16), so Ray still ships it as one buffer
without pickling its elements; ``decode_into`` widens it back by a 16-bit shift.
"""

from __future__ import annotations

import numpy as np
import torch

WIRE_DTYPES = ("float32", "bfloat16", "float16")


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 ``values`` as the wire carries them (round to nearest even); float32 is not copied."""
    if dtype == "float32":
        return values
    if dtype == "float16":
        # A value beyond float16's range becomes inf, which ``norm`` then reports.
        with np.errstate(over="ignore"):
            return values.astype(np.float16)
    if dtype == "bfloat16":
        return torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    raise ValueError(f"unknown wire dtype '{dtype}' (known: {', '.join(WIRE_DTYPES)})")


def decode_into(wire: np.ndarray, dtype: str, out: np.ndarray) -> None:
    """Widen ``wire`` (as ``encode`` made it) into the float32 array ``out`` of its shape."""
    if dtype == "bfloat16":
        # bfloat16 is the top half of a float32: shift it back into place.
        np.left_shift(wire, 16, out=out.view(np.uint32), dtype=np.uint32)
    else:
        np.copyto(out, wire)


def norm(wire: np.ndarray, dtype: str) -> float:
    """The L2 norm of the values ``wire`` (as ``encode`` made it) carries, in float32 (float64 where
    float32's sum overflows): infinite exactly when a value is, as one that float16 overflowed."""
    if dtype == "bfloat16":
        t = torch.from_numpy(wire.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(wire))
    out = float(torch.linalg.vector_norm(t, dtype=torch.float32))
    if not np.isfinite(out) and bool(torch.isfinite(t).all()):
        out = float(torch.linalg.vector_norm(t, dtype=torch.float64))
    return out


def decode(wire: np.ndarray, dtype: str) -> np.ndarray:
    out = np.empty(wire.shape, dtype=np.float32)
    decode_into(wire, dtype, out)
    return out
