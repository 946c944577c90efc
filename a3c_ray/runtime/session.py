"""One run's life, owned in one place: ``RunSession``, and ``train``, the command's run.

A run's life is: check the run directory (new, resumed, or replaced), prepare it and write the
config; create the actors and start them; watch them; then stop the Workers within
``run.stop_grace`` if the run was interrupted, take the final evaluation and checkpoint, write
``summary.json`` and kill the actors. ``train``, the Tune trial (``runtime.search``) and the
benchmarks (``a3c_ray.bench``) all live it through ``RunSession``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from tqdm import tqdm

from a3c_ray.algo import choices
from a3c_ray.algo.coordinator import STOP_CALLBACK, STOP_ERROR, STOP_INTERRUPTED
from a3c_ray.algo.messages import Progress
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, CheckpointError, one_line
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import read_pointer
from a3c_ray.rundir.prepare import check_run_dir, prepare_run_dir
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.rundir.summary import RunSummary, summary_json
from a3c_ray.runtime.callbacks import Callback, Callbacks, Evaluation, evaluation_of, raised
from a3c_ray.runtime.cluster import connect
from a3c_ray.runtime.driver import Run
from a3c_ray.runtime.placement import default_workers, get_current_placement_group, start_shortfall
from a3c_ray.runtime.tracking import Tracker
from a3c_ray.runtime.tracking_tools import FAILED, FINISHED, KILLED

log = logging.getLogger("a3c_ray")

__all__ = [
    "RunResult",
    "RunSession",
    "connect",
    "interrupts_held",
    "stop_signals_as_interrupt",
    "train",
]


@contextlib.contextmanager
def _handled(signals: tuple[int, ...], handler: Any) -> Iterator[None]:
    """``handler`` for ``signals`` while the block runs (in the main thread only: elsewhere
    signals are left alone)."""
    try:
        previous = {s: signal.signal(s, handler) for s in signals}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def stop_signals_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """``ray job stop`` sends SIGTERM: treat it as Ctrl-C, so the run checkpoints and exits 130.
    SIGINT too, even where it came ignored: a shell script starts ``a3c-ray train &`` with SIGINT
    ignored, and ``kill -INT`` or ``timeout -s INT`` (``make learn-pong PONG_SITTING=...``) must
    still stop the run."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return _handled((signal.SIGINT, signal.SIGTERM), handler)


@contextlib.contextmanager
def interrupts_held(while_: str, raise_after: bool = True) -> Iterator[list[int]]:
    """Hold Ctrl-C and SIGTERM while the block runs; yield the signals that came.

    With ``raise_after``, raise KeyboardInterrupt after the block if one came: the run's actors
    are created under it, so an interrupted run always has the ParameterServer and the Monitor
    that its final checkpoint needs. Without, the caller reads what came: a run's ending (the
    grace, the final checkpoint, the summary and the shutdown) is held whole, so that a run never
    ends without its summary or leaves its actors behind.
    """
    caught: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if not caught:
            log.warning("a3c-ray: %s held until %s", signal.Signals(signum).name, while_)
        caught.append(signum)

    with _handled((signal.SIGINT, signal.SIGTERM), hold):
        yield caught
    if caught and raise_after:
        raise KeyboardInterrupt


class RunSession:
    """One run's life around its actors (``Run``).

    ``prepare`` creates (or, replacing an old run, empties) the run directory and writes the
    config; ``start`` creates the actors with Ctrl-C and SIGTERM held, so that a run interrupted
    from then on has what its final checkpoint needs, and starts them; ``end`` ends it whole,
    with Ctrl-C and SIGTERM held: the Workers stopped within ``run.stop_grace`` if it was
    interrupted, the final evaluation (skipped when interrupted) and checkpoint, ``summary.json``,
    and the actors killed. ``close`` kills what is left when a run ends by an exception.

    What callers add to that life: ``on_progress`` sees every snapshot of the counters;
    ``callbacks`` (``runtime.callbacks``) see them with each evaluation and may stop the run;
    a ``tracker`` (``runtime.tracking``) sends the run to MLflow or W&B from ``prepare`` to ``end``.
    """

    def __init__(
        self,
        cfg: Config,
        storage: RunStorage,
        replace: bool = False,
        on_progress: Callable[[Progress], None] | None = None,
        tracker: Tracker | None = None,
        callbacks: Sequence[Callback] = (),
        resumed: bool = False,
    ):
        self.cfg = cfg
        self.storage = storage
        self.replace = replace
        self.resumed = resumed
        self.on_progress = on_progress
        self.tracker = tracker
        self.callbacks = Callbacks(callbacks)
        self.run: Run | None = None
        self.started_at = time.monotonic()
        self.summary: RunSummary = RunSummary(env_id=cfg.env.id, run_dir=storage.location)
        self.best_checkpoint: str | None = None
        """Where the best checkpoint (else the newest) is, once the run has ended."""
        self._evals = 0
        self._evaluation: Evaluation | None = None  # in since the callbacks were last called
        self._stop: str | None = None  # a stop the callbacks asked for, not yet told the run

    @classmethod
    def checked(
        cls,
        cfg: Config,
        overwrite: bool = False,
        resume: bool = False,
        existing_ok: bool = False,
        on_progress: Callable[[Progress], None] | None = None,
        tracker: Tracker | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> RunSession:
        """A session for ``cfg``'s run directory once it is checked (``check_run_dir``: new, the
        one to resume, or an old one with ``overwrite``); raises ConfigError, writes nothing."""
        storage = check_run_dir(cfg, overwrite, resume, existing_ok)
        return cls(cfg, storage, overwrite and not resume, on_progress, tracker, callbacks, resume)

    def prepare(self) -> None:
        # Whole or not at all: a Ctrl-C here is raised once the config is written.
        with interrupts_held("the run directory is written"):
            prepare_run_dir(self.storage, self.replace)
            self.storage.write_text(layout.CONFIG, self.cfg.to_yaml())
        if self.tracker is not None:
            self.tracker.open(self.cfg, self.storage, self.resumed)

    def start(self) -> Run:
        self.started_at = time.monotonic()
        watched = self.callbacks or self.on_progress is not None
        with interrupts_held("the run's actors are created"):
            self.run = Run(
                self.cfg,
                self.storage,
                int(self.cfg.run.workers or 1),
                self._progress if watched else None,
            )
            self.run.monitor.on_report = self._report
            self.run.create_actors()
        self.run.start()
        return self.run

    def _report(self, report: dict[str, Any]) -> None:
        """A Monitor report: its scalars to the tracker, its evaluation (if new) for callbacks."""
        if self.tracker is not None:
            self.tracker.log(report.get("scalars") or [])
        evaluation = evaluation_of(report, self._evals)
        if evaluation is not None:
            self._evals, self._evaluation = evaluation.number, evaluation

    def _progress(self, p: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(p)
        if not self.callbacks:
            return
        evaluation, self._evaluation = self._evaluation, None
        if self.callbacks(p, evaluation):
            self._stop = STOP_ERROR if self.callbacks.error else STOP_CALLBACK
        if self._stop is not None and self.run is not None:
            # A ParameterServer that is restarting is asked again at the next refresh.
            try:
                self.run.request_stop(self._stop)
            except ray.exceptions.RayError as e:
                log.warning("a3c-ray: cannot stop the run yet (%s); trying again", one_line(e))
            else:
                self._stop = None

    def end(
        self,
        interrupted: bool,
        stopped_because: str | None = None,
        evaluate: bool | None = None,
    ) -> tuple[RunSummary, bool]:
        """End the run and write its summary (``stopped_because`` in it, if given); the final
        checkpoint follows a final evaluation unless interrupted (or ``evaluate`` says). Returns
        the summary, and whether Ctrl-C or SIGTERM came while it ended."""
        run, self.run = self.run, None
        with interrupts_held("the run's final checkpoint is written", raise_after=False) as held:
            try:
                if run is None:  # interrupted before its actors were created
                    summary = RunSummary(
                        **self.summary, stopped_because=STOP_INTERRUPTED, errors=[]
                    )
                else:
                    if interrupted:
                        run.interrupt()
                    summary = run.finish(
                        self.started_at, evaluate=not interrupted if evaluate is None else evaluate
                    )
                    if self._evaluation is not None and run.progress is not None:
                        self.callbacks.last(run.progress, self._evaluation)
                if stopped_because is not None:
                    summary["stopped_because"] = stopped_because
                if self.callbacks.error is not None:
                    error = f"a callback raised {raised(self.callbacks.error)}"
                    summary["errors"] = [*summary.get("errors", []), error]
                self.storage.write_text(layout.SUMMARY, summary_json(summary))
                best = best_checkpoint(self.storage)
                self.best_checkpoint = None if best is None else self.storage.where(best)
                self._finish_tracking(summary, best)
            finally:
                if run is not None:
                    run.shutdown()
        self.summary = summary
        return summary, bool(held)

    def _finish_tracking(self, summary: RunSummary, best: str | None) -> None:
        """The run's files to the tracker as artifacts, and the tool's run ended as this one did."""
        if self.tracker is None or not self.tracker.is_open:
            return
        files: dict[str, Path] = {}
        try:
            for rel in (layout.CONFIG, layout.SUMMARY, *([best] if best else [])):
                files[rel] = self.storage.download(rel)
        except OSError as e:
            log.warning("a3c-ray: tracking: cannot read the run's files: %s", one_line(e))
        reason = summary.get("stopped_because")
        status = (
            KILLED
            if reason == STOP_INTERRUPTED
            else FAILED
            if reason == STOP_ERROR or summary.get("errors")
            else FINISHED
        )
        self.tracker.finish(files, status)

    def close(self) -> None:
        """Kill the actors of a run that did not ``end`` (an exception ended it)."""
        run, self.run = self.run, None
        if run is not None:
            with interrupts_held("the run's actors are shut down", raise_after=False):
                run.shutdown()
        if self.tracker is not None and self.tracker.is_open:
            self.tracker.finish({}, FAILED, timeout=10.0)


def best_checkpoint(storage: RunStorage) -> str | None:
    """The run's best checkpoint (the ``best`` pointer's), else its newest, relative to the run
    directory (``checkpoints/ckpt-<steps>.pt``); None when it has none."""
    for pointer in (layout.BEST, layout.LATEST):
        rel = f"{layout.CHECKPOINTS}/{pointer}"
        try:
            if storage.has(rel):
                return f"{layout.CHECKPOINTS}/{read_pointer(storage.download(rel)).name}"
        except (OSError, CheckpointError):
            continue
    return None


@dataclass
class RunResult:
    exit_code: int
    summary: RunSummary
    run_dir: str
    errors: list[str] = field(default_factory=list)
    best_checkpoint: str | None = None
    """The best checkpoint (else the newest): a path, or a URI for a run directory at a URI."""
    callback_error: BaseException | None = None
    """What a callback raised (other than ``StopTraining``), for the caller to raise again."""


def train(
    cfg: Config,
    address: str | None = None,
    overwrite: bool = False,
    resume: bool = False,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
    existing_ok: bool = False,
    tracker: Tracker | None = None,
    callbacks: Sequence[Callback] = (),
) -> RunResult:
    """Run one training to its end. Bad input raises ConfigError before anything is written.

    ``resume`` continues the run in ``run.run_dir``; ``existing_ok`` lets a new run start in a
    directory that exists but holds no run yet (``--resume auto``). Ctrl-C and SIGTERM end the
    run (exit code 130) where their handlers can be installed: in the main thread; elsewhere (a
    notebook's executor, a web app's thread) they are left to the caller."""
    cfg.check(choices.problems, env_problems)
    resolve_policy(cfg)
    session = RunSession.checked(
        cfg, overwrite, resume, existing_ok, tracker=tracker, callbacks=callbacks
    )
    started = connect(cfg, address, dashboard_host, dashboard_port)
    interrupted = False
    summary = session.summary
    bar = tqdm(
        total=cfg.run.max_steps,
        unit="step",
        unit_scale=True,
        dynamic_ncols=True,
        disable=not cfg.run.progress,
        mininterval=0.5,
    )
    try:
        cfg.run.workers = cfg.run.workers or default_workers(cfg, started)
        # Ctrl-C from here on ends the run with its summary (exit code 130), however early.
        with stop_signals_as_interrupt():
            try:
                session.prepare()
                if get_current_placement_group() is None:  # a Tune trial's CPUs are reserved
                    shortfall = start_shortfall(cfg, cfg.run.workers)
                    if shortfall:
                        log.warning("a3c-ray: %s", shortfall)
                session.start().watch(bar)
            except KeyboardInterrupt:
                interrupted = True
        bar.close()
        summary, held = session.end(interrupted)
        interrupted = interrupted or held
    finally:
        with interrupts_held("the run's actors and Ray are shut down", raise_after=False) as late:
            bar.close()
            session.close()
            if started:
                ray.shutdown()
        interrupted = interrupted or bool(late)
    errors: list[str] = list(summary.get("errors", []))
    if interrupted:
        code = EXIT_INTERRUPTED
    elif errors or summary.get("stopped_because") == STOP_ERROR:
        code = EXIT_FAILURE
    else:
        code = EXIT_OK
    return RunResult(
        code,
        summary,
        session.storage.location,
        errors,
        session.best_checkpoint,
        session.callbacks.error,
    )
