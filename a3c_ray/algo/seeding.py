"""The run's random streams, each named, all derived from ``run.seed``."""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """What a stream of seeds is for. The values are part of what a seed reproduces: never reuse one."""

    INIT = 0
    """The initial weights."""
    WORKER = 1
    """A Worker's envs and action sampling, further named by its slot and incarnation."""
    EVAL = 2
    """The Monitor's evaluation games, further named by the evaluation's number."""
    VIDEO = 3
    """The Monitor's recorded episode, further named by the evaluation's number."""


def derive_seeds(seed: int, stream: Stream, *path: int, n: int = 1) -> list[int]:
    """``n`` independent 31-bit seeds for the stream named by (seed, stream, *path)."""
    ss = np.random.SeedSequence([seed, int(stream), *path])
    return [int(s) for s in ss.generate_state(n, dtype=np.uint32) % (2**31 - 1)]
