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


def decode(wire: np.ndarray, dtype: str) -> np.ndarray:
    out = np.empty(wire.shape, dtype=np.float32)
    decode_into(wire, dtype, out)
    return out
