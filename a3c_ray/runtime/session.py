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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ray
from tqdm import tqdm

from a3c_ray.algo import choices
from a3c_ray.algo.coordinator import STOP_ERROR, STOP_INTERRUPTED
from a3c_ray.algo.messages import Progress
from a3c_ray.config import Config
from a3c_ray.envs.make import env_problems, resolve_policy
from a3c_ray.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from a3c_ray.rundir import layout
from a3c_ray.rundir.prepare import check_run_dir, prepare_run_dir
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.rundir.summary import RunSummary, summary_json
from a3c_ray.runtime.cluster import connect
from a3c_ray.runtime.driver import Run
from a3c_ray.runtime.placement import default_workers, get_current_placement_group, start_shortfall

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
    """

    def __init__(
        self,
        cfg: Config,
        storage: RunStorage,
        replace: bool = False,
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.cfg = cfg
        self.storage = storage
        self.replace = replace
        self.on_progress = on_progress
        self.run: Run | None = None
        self.started_at = time.monotonic()
        self.summary: RunSummary = RunSummary(env_id=cfg.env.id, run_dir=storage.location)

    @classmethod
    def checked(
        cls,
        cfg: Config,
        overwrite: bool = False,
        resume: bool = False,
        existing_ok: bool = False,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> RunSession:
        """A session for ``cfg``'s run directory once it is checked (``check_run_dir``: new, the
        one to resume, or an old one with ``overwrite``); raises ConfigError, writes nothing."""
        storage = check_run_dir(cfg, overwrite, resume, existing_ok)
        return cls(cfg, storage, overwrite and not resume, on_progress)

    def prepare(self) -> None:
        prepare_run_dir(self.storage, self.replace)
        self.storage.write_text(layout.CONFIG, self.cfg.to_yaml())

    def start(self) -> Run:
        self.started_at = time.monotonic()
        with interrupts_held("the run's actors are created"):
            self.run = Run(self.cfg, self.storage, int(self.cfg.run.workers or 1), self.on_progress)
            self.run.create_actors()
        self.run.start()
        return self.run

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
                if stopped_because is not None:
                    summary["stopped_because"] = stopped_because
                self.storage.write_text(layout.SUMMARY, summary_json(summary))
            finally:
                if run is not None:
                    run.shutdown()
        self.summary = summary
        return summary, bool(held)

    def close(self) -> None:
        """Kill the actors of a run that did not ``end`` (an exception ended it)."""
        run, self.run = self.run, None
        if run is not None:
            with interrupts_held("the run's actors are shut down", raise_after=False):
                run.shutdown()


@dataclass
class RunResult:
    exit_code: int
    summary: RunSummary
    run_dir: str
    errors: list[str] = field(default_factory=list)


def train(
    cfg: Config,
    address: str | None = None,
    overwrite: bool = False,
    resume: bool = False,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int | None = None,
    existing_ok: bool = False,
) -> RunResult:
    """Run one training to its end. Bad input raises ConfigError before anything is written.

    ``resume`` continues the run in ``run.run_dir``; ``existing_ok`` lets a new run start in a
    directory that exists but holds no run yet (``--resume auto``)."""
    cfg.check(choices.problems, env_problems)
    resolve_policy(cfg)
    session = RunSession.checked(cfg, overwrite, resume, existing_ok)
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
        session.prepare()
        if get_current_placement_group() is None:  # a Tune trial's resources are reserved
            shortfall = start_shortfall(cfg, cfg.run.workers)
            if shortfall:
                log.warning("a3c-ray: %s", shortfall)
        with stop_signals_as_interrupt():
            try:
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
    return RunResult(code, summary, session.storage.location, errors)
