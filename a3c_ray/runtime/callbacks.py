"""Callbacks of a run started from Python (``a3c_ray.train(callbacks=...)``).

A callback is a function ``callback(progress, evaluation)``. The session calls it at every refresh
of the run's progress (a few times a second) with the ParameterServer's counters (``Progress``),
and ``evaluation`` is ``None``, or the Monitor's evaluation that came in since the last call
(``Evaluation``). The final evaluation of a run is passed once more after the run stopped.

Returning ``False``, or raising ``StopTraining``, stops the run as a target would: the Workers stop,
the final evaluation and checkpoint are written, and ``summary.json`` says ``stopped_because:
callback``. Any other exception stops the run the same way with ``stopped_because: error``, and
``a3c_ray.train`` raises it again once the run has ended.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from a3c_ray import metric_names as M
from a3c_ray.algo.messages import Progress
from a3c_ray.errors import ConfigError, one_line
from a3c_ray.rundir.scalars import Scalar

log = logging.getLogger("a3c_ray")


class StopTraining(Exception):
    """Raised by a callback: stop the run now (``stopped_because: callback``)."""


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of the Monitor: the mean of ``monitor.eval_episodes`` episodes played with
    the weights of ``env_steps``, and the checkpoint written right after it."""

    env_steps: int
    mean_return: float
    mean_length: float | None
    best_return: float | None
    """The best evaluation of the run so far (this one included)."""
    number: int
    """Evaluations so far in the run (resumes included)."""
    checkpoint: str | None


Callback = Callable[[Progress, Evaluation | None], Any]
"""``callback(progress, evaluation) -> bool | None``: False stops the run."""


def check_callbacks(callbacks: Sequence[Callback] | Callback) -> list[Callback]:
    """The callbacks as a list; a ConfigError names any that is not callable."""
    if callable(callbacks):
        callbacks = [callbacks]
    bad = [repr(c) for c in callbacks if not callable(c)]
    if bad:
        raise ConfigError([f"callbacks: not callable: {', '.join(bad)}"])
    return list(callbacks)


def evaluation_of(report: dict[str, Any], evals_before: int) -> Evaluation | None:
    """The evaluation a Monitor report brings, or None when it brings none new."""
    number = int(report.get("evals") or 0)
    mean = report.get("last_eval_return")
    if number <= evals_before or mean is None:
        return None
    scalars: list[Scalar] = report.get("scalars") or []
    ret = next((s for s in reversed(scalars) if s.tag == M.EVAL_RETURN), None)
    length = next((s for s in reversed(scalars) if s.tag == M.EVAL_LENGTH), None)
    return Evaluation(
        env_steps=ret.step if ret is not None else _steps_of(report.get("checkpoint")),
        mean_return=float(mean),
        mean_length=None if length is None else length.value,
        best_return=report.get("best_eval_return"),
        number=number,
        checkpoint=report.get("checkpoint"),
    )


def _steps_of(checkpoint: str | None) -> int:
    """Env steps from a checkpoint's name (``ckpt-<steps>.pt``); 0 when there is none."""
    name = (checkpoint or "").rstrip("/").rsplit("/", 1)[-1]
    digits = name.removeprefix("ckpt-").removesuffix(".pt")
    return int(digits) if digits.isdigit() else 0


def raised(e: BaseException) -> str:
    """``Type: message`` of what a callback raised, in one line."""
    return f"{type(e).__name__}: {one_line(e)}"


class Callbacks:
    """The run's callbacks, called in order; what the first to ask for a stop said, kept."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)
        self.stop_asked = False
        self.error: BaseException | None = None
        """An exception other than ``StopTraining`` that a callback raised: the run stops with
        an error, and ``a3c_ray.train`` raises it once the run has ended."""

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def __call__(self, progress: Progress, evaluation: Evaluation | None) -> bool:
        """Call every callback; True when one asked to stop (or failed) now, the first time."""
        if self.stop_asked:
            return False
        for callback in self.callbacks:
            try:
                keep_going = callback(progress, evaluation)
            except StopTraining:
                keep_going = False
            except Exception as e:
                log.warning("a3c-ray: a callback raised %s: the run stops", raised(e))
                self.error = e
                keep_going = False
            if keep_going is False:
                self.stop_asked = True
                return True
        return False

    def last(self, progress: Progress, evaluation: Evaluation) -> None:
        """The final evaluation, once the run has stopped: what the callbacks return is moot."""
        for callback in self.callbacks:
            try:
                callback(progress, evaluation)
            except StopTraining:
                pass
            except Exception as e:
                log.warning("a3c-ray: a callback raised %s", raised(e))
                self.error = self.error or e
