"""A run sent to the tools people track runs with: MLflow and Weights & Biases (``--track``).

One interface (``Tracker``), two backends (``a3c_ray.runtime.tracking_tools``). What a run
sends, to either:

- params: the resolved config in dotted names (``algo.lr``), once at its start;
- metrics: every scalar the Monitor writes to TensorBoard, under the same tag, at the same step
  (env steps): ``charts/episodic_return``, ``eval/total_reward``, ``losses/...``;
- tags: the env id, the config's name and the seed;
- at its end: ``config.yaml``, ``summary.json`` and the best checkpoint, as artifacts.

The tool's run id is kept in the run directory (``tracking.json``), so a resumed run goes on in
the same MLflow or W&B run. MLflow is found where ``MLFLOW_TRACKING_URI`` says (MLflow's own
default when unset: a local store in the working directory), W&B as ``WANDB_PROJECT``,
``WANDB_MODE`` (``offline`` needs no network) and ``WANDB_DIR`` say.

Every call to the tool is made on the tracker's own thread: a slow or unreachable server never
holds training. The first failure is logged once, as a warning, and the tracker sends nothing
more; the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a3c_ray.config import Config
from a3c_ray.errors import ConfigError, install_hint, one_line
from a3c_ray.rundir import layout
from a3c_ray.runtime.tracking_tools import Backend, backend

if TYPE_CHECKING:  # `--track`'s choices are read by every command's parser: kept light
    from a3c_ray.rundir.scalars import Scalar
    from a3c_ray.rundir.storage import RunStorage

log = logging.getLogger("a3c_ray")

TRACKERS = ("mlflow", "wandb")
DEFAULT_PROJECT = "a3c-ray"
"""The MLflow experiment and the W&B project of a run when neither the environment
(``MLFLOW_EXPERIMENT_NAME``, ``WANDB_PROJECT``) nor the caller names one."""
FINISH_TIMEOUT = 120.0
"""Seconds a run's end waits for its tracker to send what is left (its artifacts)."""


@dataclass(frozen=True)
class TrackSpec:
    """Where a run is tracked, resolved where the run is started (the environment of a Tune
    trial's process need not hold the user's variables)."""

    kind: str
    """``mlflow`` or ``wandb``."""
    project: str
    """The MLflow experiment, or the W&B project."""
    uri: str | None = None
    """MLflow's tracking URI."""
    group: str | None = None
    """A W&B group (a search's trials), also an MLflow tag."""
    config_name: str | None = None
    """The config's name (a shipped one, or a file's stem), as a tag."""
    run_name: str | None = None
    """The tool's run name; by default the run directory's name."""
    entity: str | None = None
    mode: str | None = None
    """W&B's mode (``online``, ``offline``, ``disabled``)."""
    dir: str | None = None
    """Where W&B keeps its files (``wandb/`` under it)."""


def track_spec(
    kind: str,
    config_name: str | None = None,
    project: str | None = None,
    group: str | None = None,
) -> TrackSpec:
    """The spec of ``--track KIND`` from this process's environment; a ConfigError when the kind
    is unknown or its library is not installed. ``project`` is the default MLflow experiment
    (the environment's ``MLFLOW_EXPERIMENT_NAME`` comes first) and W&B group."""
    if kind not in TRACKERS:
        raise ConfigError([f"track: expected one of {', '.join(TRACKERS)}, got {kind!r}"])
    if importlib.util.find_spec(kind) is None:
        raise ConfigError([f"--track {kind} needs {kind}: {install_hint('track')}"])
    env = os.environ
    if kind == "mlflow":
        import mlflow

        return TrackSpec(
            kind,
            env.get("MLFLOW_EXPERIMENT_NAME") or project or DEFAULT_PROJECT,
            uri=mlflow.get_tracking_uri(),
            group=group,
            config_name=config_name,
        )
    return TrackSpec(
        kind,
        env.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        group=group or project,
        config_name=config_name,
        entity=env.get("WANDB_ENTITY"),
        mode=env.get("WANDB_MODE"),
        dir=env.get("WANDB_DIR") or os.getcwd(),
    )


def flat_params(cfg: Config) -> dict[str, Any]:
    """The config as ``section.field`` -> value (a mapping field's entries as ``env.kwargs.key``)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    walk("", cfg.to_dict())
    return out


def run_tags(cfg: Config, spec: TrackSpec) -> dict[str, str]:
    tags = {"env_id": cfg.env.id, "seed": str(cfg.run.seed), "run_dir": str(cfg.run.run_dir)}
    if spec.config_name:
        tags["config"] = spec.config_name
    if spec.group:
        tags["group"] = spec.group
    return tags


def stored_run_id(storage: RunStorage, kind: str) -> str | None:
    """The tool's run id that a run directory keeps, if any."""
    try:
        if not storage.has(layout.TRACKING):
            return None
        record = json.loads(storage.download(layout.TRACKING).read_text())
        run_id = record.get(kind, {}).get("run_id")
    except (OSError, ValueError, AttributeError) as e:
        log.warning("a3c-ray: cannot read %s: %s", layout.TRACKING, one_line(e))
        return None
    return str(run_id) if run_id else None


def store_run_id(storage: RunStorage, spec: TrackSpec, run_id: str) -> None:
    record: dict[str, Any] = {}
    if storage.has(layout.TRACKING):
        try:
            record = json.loads(storage.download(layout.TRACKING).read_text())
        except (OSError, ValueError):
            record = {}
    entry = {"run_id": run_id, "project": spec.project}
    if spec.uri:
        entry["tracking_uri"] = spec.uri
    record[spec.kind] = entry
    storage.write_text(layout.TRACKING, json.dumps(record, indent=2) + "\n")


class Tracker:
    """One run's tracking: each call queues work for the tracker's thread and returns at once.

    ``open`` begins the tool's run (or continues the one the run directory names, or the one this
    tracker began before: the segments of a Tune trial), ``log`` sends scalars, ``finish`` sends
    the artifacts and ends the tool's run, waiting for it up to ``FINISH_TIMEOUT`` seconds."""

    def __init__(self, spec: TrackSpec, make: Callable[[TrackSpec], Backend] = backend):
        self.spec = spec
        self.make = make
        self.backend: Backend | None = None
        self.run_id: str | None = None
        self.failed = False
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    @property
    def is_open(self) -> bool:
        return self._thread is not None

    def _work(self, tasks: queue.Queue[Callable[[], None] | None]) -> None:
        while (task := tasks.get()) is not None:
            if self.failed:
                continue
            try:
                task()
            except Exception as e:
                self.failed = True
                log.warning(
                    "a3c-ray: tracking with %s failed, training goes on without it: %s",
                    self.spec.kind,
                    one_line(e),
                )

    def open(self, cfg: Config, storage: RunStorage, resume: bool) -> None:
        """Begin the tool's run for ``cfg``'s run in ``storage``; with ``resume``, continue the one
        the run directory names."""
        if self._thread is not None:
            return
        self._queue = queue.Queue()
        self._thread = threading.Thread(
            target=self._work, args=(self._queue,), name="a3c-ray-tracking", daemon=True
        )
        self._thread.start()
        params, tags = flat_params(cfg), run_tags(cfg, self.spec)
        name = self.spec.run_name or str(storage.location).rstrip("/").rsplit("/", 1)[-1]

        def begin() -> None:
            if self.backend is None:
                self.backend = self.make(self.spec)
            before = self.run_id or (stored_run_id(storage, self.spec.kind) if resume else None)
            self.run_id = self.backend.begin(before, name, params, tags)
            store_run_id(storage, self.spec, self.run_id)

        self._queue.put(begin)

    def log(self, scalars: list[Scalar]) -> None:
        if scalars and self._thread is not None and not self.failed:
            self._queue.put(lambda: self.backend_now().log(scalars))

    def backend_now(self) -> Backend:
        assert self.backend is not None  # begun by the task before, on the same thread
        return self.backend

    def finish(self, files: dict[str, Path], status: str, timeout: float = FINISH_TIMEOUT) -> bool:
        """Send ``files`` as artifacts, end the tool's run with ``status`` and wait for it; False
        when that failed or did not end within ``timeout`` seconds."""
        thread, self._thread = self._thread, None
        if thread is None:
            return False
        if files:
            self._queue.put(lambda: self.backend_now().save(files))
        self._queue.put(lambda: self.backend_now().end(status))
        self._queue.put(None)
        thread.join(timeout)
        if thread.is_alive():
            log.warning(
                "a3c-ray: tracking with %s: gave up waiting %g s for the run's last data",
                self.spec.kind,
                timeout,
            )
            return False
        return not self.failed
