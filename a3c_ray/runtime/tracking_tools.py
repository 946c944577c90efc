"""The two tools a run is tracked with (``a3c_ray.runtime.tracking``), behind one interface
(``Backend``): MLflow through its client, Weights & Biases through one ``wandb.Run`` per run.
Each imports its library only when a run is tracked with it."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from a3c_ray.errors import one_line

if TYPE_CHECKING:
    from a3c_ray.rundir.scalars import Scalar
    from a3c_ray.runtime.tracking import TrackSpec

log = logging.getLogger("a3c_ray")

FINISHED, KILLED, FAILED = "FINISHED", "KILLED", "FAILED"
"""How a tracked run ended (MLflow's statuses; W&B gets exit codes 0, 130 and 1)."""


class Backend(Protocol):
    """One tool. ``begin`` returns the tool's run id (the one given when it continues it)."""

    def begin(
        self, run_id: str | None, name: str, params: dict[str, Any], tags: dict[str, str]
    ) -> str: ...
    def log(self, scalars: list[Scalar]) -> None: ...
    def save(self, files: dict[str, Path]) -> None:
        """``files``: the artifact's name in the run (``checkpoints/ckpt-9.pt``) -> local file."""

    def end(self, status: str) -> None: ...


class MLflowBackend:
    """MLflow through its client (no process-wide active run: several runs may share a process)."""

    BATCH = 1000  # metrics per log_batch, MLflow's limit
    PARAMS = 100  # params per log_batch

    def __init__(self, spec: TrackSpec):
        import mlflow

        self.spec = spec
        self.client = mlflow.MlflowClient(tracking_uri=spec.uri)
        self.run_id = ""
        self.last_ms = 0

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        name = self.spec.project
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except MlflowException:  # another trial created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def begin(
        self, run_id: str | None, name: str, params: dict[str, Any], tags: dict[str, str]
    ) -> str:
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException

        known: dict[str, str] = {}
        if run_id:
            try:
                known = dict(self.client.get_run(run_id).data.params)
                self.client.update_run(run_id, status="RUNNING")
            except MlflowException as e:
                log.warning(
                    "a3c-ray: MLflow run %s not found at %s (%s): starting a new one",
                    run_id,
                    self.spec.uri,
                    one_line(e),
                )
                run_id = None
        if not run_id:
            run = self.client.create_run(self._experiment_id(), run_name=name, tags=tags)
            run_id = run.info.run_id
        self.run_id = run_id
        # A resumed run keeps the params it began with (MLflow refuses to change one); those it
        # did not have yet are added.
        new = [Param(k, str(v)) for k, v in params.items() if k not in known]
        for i in range(0, len(new), self.PARAMS):
            self.client.log_batch(run_id, params=new[i : i + self.PARAMS])
        if known:
            self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        return run_id

    def log(self, scalars: list[Scalar]) -> None:
        from mlflow.entities import Metric

        metrics = []
        for s in scalars:
            # MLflow keeps one point per (step, value, timestamp): two episodes that end at one
            # step with one return need two timestamps.
            self.last_ms = max(int((s.wall or time.time()) * 1000), self.last_ms + 1)
            metrics.append(Metric(s.tag, s.value, self.last_ms, s.step))
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + self.BATCH])

    def save(self, files: dict[str, Path]) -> None:
        for name, path in files.items():
            folder = name.rpartition("/")[0] or None
            self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def end(self, status: str) -> None:
        # MLflow prints the run's address to stdout, where `a3c-ray train` prints its result.
        with contextlib.redirect_stdout(sys.stderr):
            self.client.set_terminated(self.run_id, status)


class WandbBackend:
    """Weights & Biases: one ``wandb.Run`` object per run (``reinit="create_new"``), its metrics
    charted against ``env_steps``."""

    STEP = "env_steps"

    def __init__(self, spec: TrackSpec):
        self.spec = spec
        self.run: Any = None

    def begin(
        self, run_id: str | None, name: str, params: dict[str, Any], tags: dict[str, str]
    ) -> str:
        import wandb

        s = self.spec
        labels = [tags["env_id"], f"seed={tags['seed']}"]
        if s.config_name:
            labels.append(s.config_name)
        self.run = wandb.init(
            project=s.project,
            entity=s.entity,
            group=s.group,
            name=name,
            id=run_id,
            resume="allow" if run_id else None,
            tags=[t[:64] for t in labels],
            mode=s.mode,  # type: ignore[arg-type]  # checked by W&B itself
            dir=s.dir,
            reinit="create_new",
        )
        self.run.config.update(params, allow_val_change=True)
        # Steps are env steps, and episodes of one tick end at steps below the last tick's
        # evaluation: W&B's own step only grows, so every metric is charted against env_steps.
        self.run.define_metric(self.STEP)
        self.run.define_metric("*", step_metric=self.STEP)
        return str(self.run.id)

    def log(self, scalars: list[Scalar]) -> None:
        row: dict[str, float] = {}
        step: int | None = None
        for s in scalars:
            if row and (s.step != step or s.tag in row):
                self.run.log({self.STEP: step, **row})
                row = {}
            row[s.tag], step = s.value, s.step
        if row:
            self.run.log({self.STEP: step, **row})

    def save(self, files: dict[str, Path]) -> None:
        import wandb

        artifact = wandb.Artifact(f"run-{self.run.id}", type="a3c-ray-run")
        for name, path in files.items():
            artifact.add_file(str(path), name=name)
        self.run.log_artifact(artifact)

    def end(self, status: str) -> None:
        # finish() returns once W&B's service has the run's end; the service then writes the
        # offline run's log (run-<id>.wandb) out as it closes the run, an instant later, even
        # when this process exits at once: a reader of that file waits for its exit record.
        self.run.finish(exit_code={FINISHED: 0, KILLED: 130}.get(status, 1))


def backend(spec: TrackSpec) -> Backend:
    return MLflowBackend(spec) if spec.kind == "mlflow" else WandbBackend(spec)
