"""`a3c-ray submit` and Ray jobs on a local multi-node cluster.

The fast tests drive ``a3c_ray.commands.submit.run`` against a stand-in for JobSubmissionClient. The
end-to-end test starts a head and two worker nodes with cluster/local.sh (127.0.0.10-12, token
auth), submits a short CartPole run through the Jobs API over HTTP, and stops the cluster however
the test ends. It never calls ray.init in this process.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from a3c_ray.commands import submit
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.runtime import jobs
from lab.local_cluster import free_port_block

ROOT = Path(__file__).resolve().parents[1]
LOCAL_SH = ROOT / "cluster" / "local.sh"
PREINSTALLED = ROOT / "cluster" / "runtime_env.preinstalled.yaml"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="a3c-ray submit")
    submit.add_arguments(parser)
    return parser.parse_args(list(argv))


class FakeClient:
    """The part of JobSubmissionClient that submit uses, with a scripted job."""

    def __init__(self, final: str = "SUCCEEDED", logs: tuple[str, ...] = ("line 1\n", "line 2\n")):
        self.final, self.logs = final, logs
        self.submitted: list[dict[str, Any]] = []
        self.stopped: list[str] = []
        self.interrupt_tail = False

    def submit_job(self, **kwargs: Any) -> str:
        self.submitted.append(kwargs)
        return kwargs.get("submission_id") or "raysubmit_fake"

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        for chunk in self.logs:
            yield chunk
        if self.interrupt_tail:
            raise KeyboardInterrupt

    def get_job_status(self, job_id: str) -> str:
        return self.final

    def get_job_info(self, job_id: str) -> Any:
        return SimpleNamespace(message=f"job {self.final.lower()}")

    def stop_job(self, job_id: str) -> bool:
        self.stopped.append(job_id)
        return True


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(submit, "make_client", lambda address: client)
    return client


# -- arguments and runtime env ------------------------------------------------------------------


def test_arguments_after_double_dash_become_the_train_entrypoint() -> None:
    args = parse("--no-wait", "--", "--env", "CartPole-v1", "--set", "run.run_dir=a b")
    assert args.no_wait and args.train_args == ["--env", "CartPole-v1", "--set", "run.run_dir=a b"]
    assert (
        submit.build_entrypoint(args.train_args)
        == "python -m a3c_ray train --env CartPole-v1 --set 'run.run_dir=a b'"
    )


def test_address_comes_from_the_flag_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert submit.resolve_address(None) == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.1:8265")
    assert submit.resolve_address(None) == "http://10.0.0.1:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://10.0.0.2:8265")
    assert submit.resolve_address(None) == "http://10.0.0.2:8265"
    assert submit.resolve_address("http://h:1") == "http://h:1"


def test_runtime_env_defaults_to_cluster_runtime_env_yaml_with_working_dir_and_excludes() -> None:
    env = submit.build_runtime_env(str(ROOT), None)
    assert env["working_dir"] == str(ROOT)
    assert "torch>=2.4,<2.15" in env["pip"]["packages"]
    assert set(submit.DEFAULT_EXCLUDES) <= set(env["excludes"])


def test_big_files_are_left_out_of_the_upload_but_excluded_dirs_are_not_walked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "small.txt").write_text("x")
    for big in (tmp_path / "data" / "replay.bin", tmp_path / "runs" / "huge.bin"):
        with big.open("wb") as f:  # sparse: large st_size, no disk
            f.truncate(submit.MAX_FILE_BYTES)
    env = submit.build_runtime_env(str(tmp_path), PREINSTALLED)
    assert "/data/replay.bin" in env["excludes"]
    assert not any("huge.bin" in e for e in env["excludes"])  # runs/ is excluded as a whole
    assert "not uploading data/replay.bin (16 MiB)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read runtime env"),
        ("pip: [unclosed", "is not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("env_vars:\n  OMP_NUM_THREADS: 1\n", "bad runtime env"),
    ],
)
def test_bad_runtime_env_file_is_bad_input_exit_2_and_nothing_is_submitted(
    tmp_path: Path,
    fake: FakeClient,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    message: str,
) -> None:
    path = tmp_path / "env.yaml"
    if content is not None:
        path.write_text(content)
    code = submit.run(parse("--runtime-env", str(path), "--working-dir", str(tmp_path)))
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not fake.submitted


def test_unknown_train_flag_is_bad_input_exit_2_before_submitting(
    fake: FakeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    code = submit.run(parse("--working-dir", str(ROOT), "--", "--env", "CartPole-v1", "--wrkers"))
    err = capsys.readouterr().err
    assert code == 2 and "--wrkers" in err and "a3c-ray train" in err
    assert not fake.submitted


def test_unreachable_address_is_bad_input_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = submit.run(parse("--address", f"http://127.0.0.1:{port}", "--working-dir", str(ROOT)))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot reach the Ray Jobs API" in err and len(err.splitlines()) == 1


def test_auth_header_comes_from_rays_token_sources_in_rays_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert jobs.auth_headers() == {}  # no token anywhere, mode unset: send nothing
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConfigError, match="no token found"):
        jobs.auth_headers()
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert jobs.auth_headers() == {"Authorization": "Bearer from-home"}
    (tmp_path / "tok").write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert jobs.auth_headers() == {"Authorization": "Bearer from-path"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert jobs.auth_headers() == {"Authorization": "Bearer from-env"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert jobs.auth_headers() == {}
    monkeypatch.delenv("RAY_AUTH_MODE")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="RAY_AUTH_TOKEN_PATH"):
        jobs.auth_headers()


# -- following a job ----------------------------------------------------------------------------


@pytest.mark.parametrize(("final", "code"), [("SUCCEEDED", 0), ("FAILED", 1), ("STOPPED", 1)])
def test_prints_the_submission_id_then_the_logs_and_exits_by_the_jobs_status(
    fake: FakeClient, capsys: pytest.CaptureFixture[str], final: str, code: int
) -> None:
    fake.final = final
    out = io.StringIO()
    args = parse("--working-dir", str(ROOT), "--submission-id", "cp-1", "--", "--workers", "2")
    assert submit.run(args, out=out) == code
    assert out.getvalue() == "cp-1\nline 1\nline 2\n"
    job = fake.submitted[0]
    assert job["entrypoint"] == "python -m a3c_ray train --workers 2"
    assert job["runtime_env"]["working_dir"] == str(ROOT) and job["submission_id"] == "cp-1"
    err = capsys.readouterr().err
    assert (f"cp-1 {final}" in err) == (final != "SUCCEEDED")


def test_no_wait_prints_the_id_and_returns_without_following(
    fake: FakeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.final = "RUNNING"
    out = io.StringIO()
    assert submit.run(parse("--no-wait", "--working-dir", str(ROOT)), out=out) == 0
    assert out.getvalue() == "raysubmit_fake\n"
    assert "ray job logs raysubmit_fake" in capsys.readouterr().err


@pytest.mark.parametrize("second_ctrl_c", [False, True])
def test_ctrl_c_stops_following_and_only_a_second_one_stops_the_job(
    fake: FakeClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    second_ctrl_c: bool,
) -> None:
    fake.interrupt_tail = True

    def sleep(seconds: float) -> None:
        if second_ctrl_c:
            raise KeyboardInterrupt

    monkeypatch.setattr(submit.time, "sleep", sleep)
    assert submit.run(parse("--working-dir", str(ROOT)), out=io.StringIO()) == 130
    err = capsys.readouterr().err
    assert "it keeps running" in err and "ray job stop raysubmit_fake" in err
    assert fake.stopped == (["raysubmit_fake"] if second_ctrl_c else [])


# -- end to end on a local multi-node cluster ---------------------------------------------------


def marked_pids(marker: bytes) -> list[int]:
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except OSError:
            continue
    return pids


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[dict[str, Any]]:
    """A head and two worker nodes of one logical CPU each, stopped however the tests end."""
    state_dir = Path(tempfile.mkdtemp(prefix="a3c-", dir="/tmp"))  # short: Ray's socket paths
    base = free_port_block(9)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY")},
        "A3C_LOCAL_DIR": str(state_dir),
        "A3C_GCS_PORT": str(base),
        "A3C_DASHBOARD_PORT": str(base + 1),
        "A3C_CLIENT_PORT": str(base + 2),
        "A3C_METRICS_PORT": str(base + 3),  # nodes 0-2: base+3 .. base+5
        "A3C_AGENT_PORT": str(base + 6),  # nodes 0-2: base+6 .. base+8
        "A3C_HEAD_CPUS": "1",
        "A3C_NUM_CPUS": "1",
    }
    cluster = {
        "dashboard": f"http://127.0.0.1:{base + 1}",
        "metrics": [base + 3 + i for i in range(3)],
        "dir": state_dir,
        "env": env,
    }
    recorded: list[int] = []
    try:
        up = subprocess.run(
            ["bash", str(LOCAL_SH), "up", "2"], env=env, capture_output=True, text=True, timeout=180
        )
        assert up.returncode == 0, up.stdout + up.stderr
        recorded = [
            int(line.split()[1])
            for line in (state_dir / "state").read_text().splitlines()
            if line.startswith("pid ")
        ]
        yield cluster
    finally:
        down = subprocess.run(
            ["bash", str(LOCAL_SH), "down"], env=env, capture_output=True, text=True, timeout=120
        )
        left = [p for p in recorded if running(p)]
        left += marked_pids(f"A3C_RAY_LOCAL_CLUSTER={state_dir}".encode())
        shutil.rmtree(state_dir, ignore_errors=True)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not left, f"processes left after local.sh down: {left}"


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.long
def test_cartpole_job_on_a_local_three_node_cluster_succeeds_and_leaves_its_run_directory(
    local_cluster: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    dashboard = local_cluster["dashboard"]
    run_dir = tmp_path / "cp"

    # A wrong token is bad input: exit 2, one line, nothing submitted.
    with monkeypatch.context() as m:
        m.setenv("RAY_AUTH_TOKEN", "not-the-token")
        code = submit.run(parse("--address", dashboard, "--working-dir", str(ROOT)))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "refused the auth token" in err and len(err.splitlines()) == 1
    out = io.StringIO()
    args = parse(
        "--address", dashboard, "--working-dir", str(ROOT), "--runtime-env", str(PREINSTALLED),
        "--submission-id", "a3c-e2e-cartpole", "--",
        "--env", "CartPole-v1", "--max-steps", "20000", "--workers", "2",
        "--run-dir", str(run_dir), "--no-progress",
    )  # fmt: skip
    started = time.monotonic()
    assert submit.run(args, out=out) == 0, out.getvalue()
    logs = out.getvalue()
    assert logs.splitlines()[0] == "a3c-e2e-cartpole"
    assert f"run directory: {run_dir}" in logs  # the job's own output, followed to its end
    assert time.monotonic() - started < 120

    summary = json.loads((run_dir / layout.SUMMARY).read_text())
    assert summary["stopped_because"] == "max_steps" and summary["env_steps"] >= 20_000
    assert summary["workers"] == 2 and summary["worker_nodes"]
    assert Path(summary["checkpoint"]).is_file()
    assert (run_dir / layout.CHECKPOINTS / layout.LATEST).is_file() and (
        run_dir / layout.CONFIG
    ).is_file()

    # The Jobs API wants the token; Ray's own client gets in with it.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{dashboard}/api/jobs/", timeout=10)
    assert refused.value.code == 401
    client = JobSubmissionClient(dashboard, headers=jobs.auth_headers())
    info = client.get_job_info("a3c-e2e-cartpole")
    assert info.status == JobStatus.SUCCEEDED
    assert (info.runtime_env or {})["working_dir"].startswith("gcs://")

    # The working directory went up without runs/, .venv and .git, and the job ran that copy.
    job_id = client.submit_job(
        entrypoint="python -c 'import a3c_ray; print(a3c_ray.__file__)'",
        runtime_env=submit.build_runtime_env(str(ROOT), PREINSTALLED),
    )
    deadline = time.monotonic() + 60
    while not client.get_job_status(job_id).is_terminal():
        assert time.monotonic() < deadline, client.get_job_logs(job_id)
        time.sleep(0.5)
    assert client.get_job_status(job_id) == JobStatus.SUCCEEDED, client.get_job_logs(job_id)
    # The job prints the module's path; Ray may add log lines of its own around it.
    logs = client.get_job_logs(job_id)
    source = next(
        Path(x.strip()) for x in reversed(logs.splitlines()) if x.strip().endswith("__init__.py")
    )
    package = source.parents[1]
    assert package.parent.name == "working_dir_files" and str(local_cluster["dir"]) in str(source)
    uploaded = {p.name for p in package.iterdir()}
    assert {"a3c_ray", "cluster", "pyproject.toml"} <= uploaded
    assert not uploaded & {"runs", ".venv", ".git", ".mypy_cache"}

    # Each node exports its own Prometheus metrics; `status` lists the three nodes.
    for port in local_cluster["metrics"]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200 and b"ray_" in r.read()
    status = subprocess.run(
        ["bash", str(LOCAL_SH), "status"],
        env=local_cluster["env"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert [line.split()[2] for line in status.stdout.splitlines() if line.startswith("node ")] == [
        "127.0.0.10",
        "127.0.0.11",
        "127.0.0.12",
    ]
    assert "Active:" in status.stdout


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(
    "ship",
    [
        pytest.param("working_dir", marks=pytest.mark.long),
        pytest.param("py_modules", marks=pytest.mark.long),
    ],
)
def test_custom_env_job_finds_its_module_on_every_node(
    local_cluster: dict[str, Any], tmp_path: Path, ship: str
) -> None:
    """A job trains an env of the user's own, shipped as the job's working directory (the
    example, as docs/custom-envs.md submits it) or as a package in ``py_modules`` (an empty
    working directory: the module is found through py_modules alone)."""
    example = ROOT / "examples" / "custom_env"
    run_dir = tmp_path / "corridor"
    if ship == "working_dir":
        working_dir, runtime_env = example, PREINSTALLED
        train = ["--config", "corridor.yaml"]
    else:
        package = tmp_path / "pkg" / "my_envs"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        shutil.copy(example / "corridor.py", package / "corridor.py")
        runtime_env = tmp_path / "runtime_env.yaml"
        runtime_env.write_text(PREINSTALLED.read_text() + f"py_modules:\n  - {package}\n")
        working_dir = tmp_path / "empty"
        working_dir.mkdir()
        train = ["--env", "my_envs.corridor:Corridor", "--set", "env.kwargs.size=6"]
    out = io.StringIO()
    args = parse(
        "--address", local_cluster["dashboard"], "--working-dir", str(working_dir),
        "--runtime-env", str(runtime_env), "--",
        *train, "--max-steps", "4000", "--workers", "2", "--run-dir", str(run_dir),
        "--no-progress",
    )  # fmt: skip
    assert submit.run(args, out=out) == 0, out.getvalue()
    summary = json.loads((run_dir / layout.SUMMARY).read_text())
    assert summary["stopped_because"] in ("max_steps", "target"), summary
    assert summary["env_steps"] > 0 and len(summary["worker_nodes"]) >= 1
    assert summary["env_id"] == (
        "corridor:Corridor" if ship == "working_dir" else "my_envs.corridor:Corridor"
    )
