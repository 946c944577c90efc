"""The Monitor's TensorBoard scalars, kept as they are written so that the driver can pass them on
(to MLflow or Weights & Biases, ``a3c_ray.runtime.tracking``) at the same steps.

``RecordingWriter`` is the Monitor's ``SummaryWriter``: every ``add_scalar`` writes the event file
as before and keeps a ``Scalar``; the Monitor's report to the driver drains them at each tick.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from tensorboardX import SummaryWriter

KEEP = 100_000
"""Scalars kept between two drains at most (the oldest go first): a driver that stops asking for
the Monitor's reports cannot make it grow without bound."""


class Scalar(NamedTuple):
    """One TensorBoard scalar: its tag (``charts/episodic_return``), value, global step (env
    steps) and wall time (seconds since the epoch)."""

    tag: str
    value: float
    step: int
    wall: float = 0.0


class RecordingWriter(SummaryWriter):
    """A ``SummaryWriter`` that also keeps each scalar it writes, until ``drain``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: list[Scalar] = []

    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().add_scalar(tag, scalar_value, global_step, walltime, **kwargs)
        wall = time.time() if walltime is None else float(walltime)
        self.recorded.append(Scalar(tag, float(scalar_value), int(global_step or 0), wall))
        if len(self.recorded) > KEEP:
            del self.recorded[: len(self.recorded) - KEEP]

    def drain(self) -> list[Scalar]:
        """The scalars written since the last drain, oldest first."""
        out, self.recorded = self.recorded, []
        return out
