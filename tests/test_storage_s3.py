"""Run directories on an S3 API: a real S3-compatible server (moto's, on loopback) and s3fs.

Everything a run reports must be where the run lives (its s3:// URI, never a node's staging copy),
and `a3c-ray eval` must read any run directory URI that `a3c-ray train` writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from a3c_ray.commands.cli import main
from a3c_ray.runtime.session import train

from .conftest import init_local_ray, moto_s3, small_config

pytestmark = pytest.mark.ray

BUCKET = "a3c-runs"


@pytest.fixture(scope="module")
def s3_and_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1, and a Ray whose actors reach it through the environment."""
    import ray

    with moto_s3(BUCKET, tmp_path_factory.mktemp("staging")) as env:
        if ray.is_initialized():
            ray.shutdown()
        init_local_ray(  # a new Ray, even where a `ray start` cluster runs on this machine
            num_cpus=4,
            include_dashboard=False,
            logging_level="WARNING",
            _node_ip_address="127.0.0.1",
            runtime_env={"env_vars": env},
        )
        try:
            yield env["AWS_ENDPOINT_URL"]
        finally:
            ray.shutdown()


@pytest.mark.long
def test_a_run_on_s3_reports_s3_paths_eval_reads_them_and_resume_auto_continues_it(
    s3_and_ray: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import s3fs

    uri = f"s3://{BUCKET}/runs/cp"
    cfg = small_config(uri, run__max_steps=3_000)
    result = train(cfg)
    assert result.exit_code == 0, result.summary
    s = result.summary
    assert s["run_dir"] == uri
    assert s["checkpoint"].startswith(f"{uri}/checkpoints/ckpt-"), s["checkpoint"]
    fs = s3fs.S3FileSystem()
    assert fs.exists(s["checkpoint"])
    assert json.loads(fs.cat(f"{uri}/summary.json"))["checkpoint"] == s["checkpoint"]
    for target in (f"{uri}/checkpoints/best", f"{uri}/checkpoints/latest", uri, s["checkpoint"]):
        capsys.readouterr()
        assert main(["eval", target, "--episodes", "2", "--json"]) == 0, target
        res = json.loads(capsys.readouterr().out)
        assert res["episodes"] == 2 and res["checkpoint"].startswith(f"{uri}/checkpoints/ckpt-")
    assert main(["eval", f"s3://{BUCKET}/runs/none/checkpoints/best"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint at s3://" in err[0]

    # The job submitted again (its cluster lost): the run goes on from S3 and names the
    # checkpoint it went on from by its URI, not by the staging copy it was read from.
    again = ["train", "--run-dir", uri, "--resume", "auto", "--max-steps", "6000", "--no-progress"]
    assert main(again) == 0
    fs.invalidate_cache()
    resumed = json.loads(fs.cat(f"{uri}/summary.json"))
    assert resumed["resumed_from"] == s["checkpoint"] and resumed["env_steps"] >= 6_000, resumed
