"""Run directories given as URIs: files staged locally and copied to (and from) the URI with fsspec."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from a3c_ray.commands.cli import main
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_checkpoint
from a3c_ray.rundir.storage import RunStorage, is_uri
from a3c_ray.runtime.session import train

from .conftest import small_config


def test_local_paths_are_used_in_place(tmp_path: Path) -> None:
    s = RunStorage(tmp_path / "run")
    assert not s.remote and s.local == tmp_path / "run" and not s.exists()
    s.local.mkdir()
    (s.local / layout.CONFIG).write_text("x: 1\n")
    s.upload(layout.CONFIG)  # nothing to copy
    assert (
        s.exists() and s.has(layout.CONFIG) and s.download(layout.CONFIG) == s.local / layout.CONFIG
    )


def test_uri_round_trip_through_the_staging_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A3C_RAY_STAGING", str(tmp_path / "staging"))
    uri = f"file://{tmp_path}/remote/run"
    s = RunStorage(uri)
    assert is_uri(uri) and s.remote and str(tmp_path / "staging") in str(s.local) and not s.exists()
    (s.local / layout.CHECKPOINTS).mkdir(parents=True)
    torch.save({"a": torch.ones(2)}, s.local / layout.CHECKPOINTS / "ckpt-10.pt")
    (s.local / layout.CHECKPOINTS / layout.LATEST).write_text("ckpt-10.pt\n")
    for rel in ("checkpoints/ckpt-10.pt", "checkpoints/latest"):
        s.upload(rel)
    remote = tmp_path / "remote" / "run" / layout.CHECKPOINTS
    assert sorted(p.name for p in remote.iterdir()) == [
        "ckpt-10.pt",
        "latest",
    ]  # no temp names left
    shutil.rmtree(s.local)  # another node: nothing staged yet
    local = RunStorage(uri).download_checkpoints()
    assert (local / layout.LATEST).read_text() == "ckpt-10.pt\n"
    assert torch.equal(torch.load(local / "ckpt-10.pt", weights_only=True)["a"], torch.ones(2))
    s.delete("checkpoints/latest")
    assert not s.has("checkpoints/latest") and s.exists()


def test_unknown_uri_scheme_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--run-dir", "nosuchfs://bucket/run", "--max-steps", "10"]) == 2
    assert "cannot use run directory nosuchfs://bucket/run" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.long
def test_training_into_a_uri_then_resuming_from_it(ray_session: None, tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/shared/run"
    remote = tmp_path / "shared" / "run"
    result = train(small_config(uri, run__max_steps=8_000, monitor__eval_every=0.5))
    assert result.exit_code == 0, result.summary
    assert (remote / layout.CONFIG).exists() and list(
        (remote / layout.TENSORBOARD).glob("events.out.tfevents.*")
    )
    summary = json.loads((remote / layout.SUMMARY).read_text())
    assert summary["run_dir"] == uri and summary["stopped_because"] == "max_steps"
    ckpts = list_checkpoints(remote / layout.CHECKPOINTS)
    assert (
        ckpts
        and load_checkpoint(remote / layout.CHECKPOINTS / layout.LATEST)["env_steps"]
        == summary["env_steps"]
    )
    assert len(ckpts) <= 3 + 1  # pruned at the URI too: the last 3 and the best

    shutil.rmtree(RunStorage(uri).local)  # resume on a "node" that has no staged copy
    assert main(["train", "--resume", uri, "--max-steps", "12000", "--no-progress"]) == 0
    resumed = json.loads((remote / layout.SUMMARY).read_text())
    assert resumed["env_steps"] >= 12_000 and resumed["resumed_from"] is not None
    assert resumed["version"] > summary["version"]
