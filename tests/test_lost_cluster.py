"""The whole cluster lost, and the run resumed by submitting the same job again.

A CartPole job with ``--resume auto`` and its run directory on an S3-compatible server (moto's, on
loopback) runs on ``cluster/local.sh up 2``. Each incarnation of the cluster stages the run
directory in a directory of its own, so what it resumes from can only be what reached S3. This
process never calls ray.init: it talks to the cluster through the Jobs API, as a user or a
retrying scheduler would.

With ``make test``, one round: the cluster is killed outright (``local.sh kill``: SIGKILL to every
process), brought up again, and the same command, submitted again, goes on from the newest
checkpoint in S3 to its step budget. With ``make test-long``, the whole story: the cluster is
taken down mid-run (``local.sh down``), brought up again, and the same command is submitted again;
the resumed run is lost too, killed outright, and the command is submitted a third time. The run
never goes back, keeps its counters, and ends at its target.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from a3c_ray.commands import submit
from a3c_ray.rundir.checkpoint import load_checkpoint
from a3c_ray.runtime import jobs
from lab.local_cluster import LocalCluster

from .conftest import moto_s3

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[1]
PREINSTALLED = ROOT / "cluster" / "runtime_env.preinstalled.yaml"
BUCKET = "a3c-lost"
TARGET = 450.0


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with one bucket; the variables that reach it."""
    with moto_s3(BUCKET, tmp_path_factory.mktemp("staging-here")) as env:
        yield {k: v for k, v in env.items() if k != "A3C_RAY_STAGING"}


@contextlib.contextmanager
def local_cluster(worker_nodes: int, node_cpus: int) -> Iterator[LocalCluster]:
    """A one-CPU head and ``worker_nodes`` nodes of ``node_cpus``, up and down as the test says,
    and stopped however it ends."""
    c = LocalCluster(worker_nodes=worker_nodes, node_cpus=node_cpus)
    try:
        yield c
    finally:
        left = c.close()
        assert not left, f"processes left after local.sh down: {left}"


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A head and two worker nodes of one CPU each."""
    with local_cluster(2, 1) as c:
        yield c


@pytest.fixture
def one_node_cluster() -> Iterator[LocalCluster]:
    """A head and one worker node of two CPUs: the round's two Workers, one node fewer to start
    at each bring-up."""
    with local_cluster(1, 2) as c:
        yield c


class Job:
    """The one command of every submission: start the run in ``run`` (an S3 URI), or continue it;
    ``flags`` are added to the command."""

    def __init__(
        self,
        cluster: LocalCluster,
        s3_env: dict[str, str],
        tmp_path: Path,
        run: str,
        flags: tuple[str, ...] = (),
    ):
        self.cluster, self.s3_env, self.tmp_path = cluster, s3_env, tmp_path
        self.run, self.flags = run, flags
        self.sittings = 0

    def submit(self) -> tuple[Any, str]:
        """Submit ``a3c-ray train --resume auto`` through ``a3c-ray submit``, as a user would;
        each sitting stages the run directory anew (a new cluster has no local copy)."""
        self.sittings += 1
        env = yaml.safe_load(PREINSTALLED.read_text())
        env["env_vars"] = {
            **env.get("env_vars", {}),
            **self.s3_env,
            "A3C_RAY_STAGING": str(self.tmp_path / f"staging-{self.sittings}"),
        }
        runtime_env = self.tmp_path / f"runtime_env-{self.sittings}.yaml"
        runtime_env.write_text(yaml.safe_dump(env))
        job_id = f"cartpole-{self.sittings}"
        code = submit.main(
            [
                "--address", self.cluster.dashboard, "--working-dir", str(ROOT),
                "--runtime-env", str(runtime_env), "--submission-id", job_id, "--no-wait", "--",
                "--env", "CartPole-v1", "--workers", "2", "--target-return", str(TARGET),
                "--eval-every", "2", "--run-dir", self.run, "--resume", "auto", "--no-progress",
                *self.flags,
            ]
        )  # fmt: skip
        assert code == 0
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.cluster.dashboard, headers=jobs.auth_headers()), job_id


def latest_steps(run: str) -> int | None:
    """Env steps of the checkpoint the run's ``latest`` pointer names in S3, if any."""
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    try:
        name = fs.cat(f"{run}/checkpoints/latest").decode().strip()
    except FileNotFoundError:
        return None
    return int(name.split("-")[1].split(".")[0])


def watch(
    job: Job, client: Any, job_id: str, until: int | None, seen: list[int], timeout: float
) -> str:
    """Follow the run's newest checkpoint in S3 into ``seen`` until it holds ``until`` env steps
    (None: until the job ends); the job's status then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = latest_steps(job.run)
        if steps is not None and (not seen or steps != seen[-1]):
            seen.append(steps)
        status = jobs.job_status(client, job_id)
        if status in jobs.TERMINAL or (until is not None and steps is not None and steps >= until):
            return status
        time.sleep(1.0)
    raise AssertionError(f"{job_id}: nothing after {timeout:g} s: {why(client, job_id)}")


def why(client: Any, job_id: str) -> str:
    """What the job says about itself: Ray's message (a runtime env that failed), then its logs."""
    return f"{client.get_job_info(job_id).message}\n{client.get_job_logs(job_id)[-4000:]}"


def newest_checkpoint(run: str) -> dict[str, Any]:
    return load_checkpoint(f"{run}/checkpoints/latest")


@pytest.mark.timeout(570)
def test_a_run_goes_on_from_s3_after_its_whole_cluster_is_killed(
    s3: dict[str, str], one_node_cluster: LocalCluster, tmp_path: Path
) -> None:
    import s3fs

    cluster = one_node_cluster
    run = f"s3://{BUCKET}/runs/round"
    job = Job(cluster, s3, tmp_path, run, ("--max-steps", "40000"))
    seen: list[int] = []  # the newest checkpoint's env steps, as S3 held it

    cluster.up()
    client, first = job.submit()
    assert watch(job, client, first, 3_000, seen, 200) == "RUNNING", why(client, first)
    cluster.kill()  # no process gets to clean up: what S3 holds is all there is
    lost = newest_checkpoint(run)

    cluster.up()
    client, second = job.submit()
    status = watch(job, client, second, None, seen, 200)
    logs = client.get_job_logs(second)
    assert status == "SUCCEEDED", why(client, second)
    summary = json.loads(s3fs.S3FileSystem().cat(f"{run}/summary.json"))

    # Never back, and the second sitting went on from the newest checkpoint of the first to its
    # step budget, its counters and training time from there.
    assert seen == sorted(seen) and len(seen) >= 3, seen
    assert summary["resumed_from"] == f"{run}/checkpoints/ckpt-{lost['env_steps']}.pt"
    assert summary["stopped_because"] == "max_steps" and summary["env_steps"] >= 40_000, summary
    went_on = {k: (lost[k], summary[k]) for k in ("episodes", "train_seconds")}
    went_on["gradients"] = (lost["gradients_applied"], summary["gradient_updates"])
    assert all(before < after for before, after in went_on.values()), (seen, went_on)
    assert f"run directory: {run}" in logs


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_run_survives_losing_its_whole_cluster_twice_and_ends_at_its_target(
    s3: dict[str, str], cluster: LocalCluster, tmp_path: Path
) -> None:
    import s3fs

    run = f"s3://{BUCKET}/runs/cp"
    job = Job(cluster, s3, tmp_path, run)
    seen: list[int] = []  # the newest checkpoint's env steps, as S3 held it
    began = time.monotonic()

    def phase(what: str) -> None:  # where the minutes go (shown with -s, or on a failure)
        print(f"{time.monotonic() - began:6.1f} s  {what}", flush=True)

    cluster.up()
    phase("cluster up")
    client, first = job.submit()
    assert watch(job, client, first, 15_000, seen, 300) == "RUNNING", why(client, first)
    phase(f"first sitting at {seen[-1]} env steps")
    cluster.down()  # SIGTERM then SIGKILL: the job's driver may or may not checkpoint once more
    lost_once = newest_checkpoint(run)
    phase(f"cluster down; newest checkpoint at {lost_once['env_steps']} env steps")

    cluster.up()
    phase("cluster up again")
    client, second = job.submit()
    until = int(lost_once["env_steps"]) + 15_000
    assert watch(job, client, second, until, seen, 300) == "RUNNING", why(client, second)
    phase(f"second sitting at {seen[-1]} env steps")
    cluster.kill()  # no process gets to clean up
    lost_twice = newest_checkpoint(run)
    phase(f"cluster killed; newest checkpoint at {lost_twice['env_steps']} env steps")

    cluster.up()
    phase("cluster up a third time")
    client, third = job.submit()
    status = watch(job, client, third, None, seen, 420)
    logs = client.get_job_logs(third)
    assert status == "SUCCEEDED", why(client, third)
    phase(f"third sitting done at {seen[-1]} env steps")
    summary = json.loads(s3fs.S3FileSystem().cat(f"{run}/summary.json"))

    # Never back: every checkpoint S3 held came after the one before it.
    assert seen == sorted(seen) and len(seen) >= 6, seen
    # The second sitting went on from the first's newest checkpoint: its counters, training time
    # and evaluations went on from there.
    for key in ("env_steps", "version", "gradients_applied", "episodes", "evals"):
        assert lost_twice[key] > lost_once[key], key
    assert lost_twice["train_seconds"] > lost_once["train_seconds"]
    assert lost_twice["staleness_sum"] >= lost_once["staleness_sum"]
    # The third from the second's, to the target.
    assert summary["resumed_from"] == f"{run}/checkpoints/ckpt-{lost_twice['env_steps']}.pt"
    assert summary["stopped_because"] == "target" and summary["mean_return_100"] >= TARGET
    assert summary["env_steps"] > lost_twice["env_steps"]
    assert summary["gradient_updates"] > lost_twice["gradients_applied"]
    assert summary["episodes"] > lost_twice["episodes"]
    assert summary["train_seconds"] > lost_twice["train_seconds"]
    assert summary["best_eval_return"] >= (lost_twice.get("eval_return") or 0.0)
    assert f"run directory: {run}" in logs
