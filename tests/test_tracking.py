"""``--track mlflow|wandb``: a run sent to MLflow (a real tracking server started here, on
127.0.0.1, with a SQLite store) and to Weights & Biases (offline: its run directory on disk).

What is checked: the resolved config as dotted params, every TensorBoard scalar as a metric at the
same step, the tags, config.yaml, summary.json and the best checkpoint as artifacts, a resumed run
appended to the same tracked run, each Tune trial a run of one experiment, and a tracking server
that is down costing one warning and nothing else.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from a3c_ray.commands.cli import main
from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.scalars import Scalar
from a3c_ray.rundir.storage import RunStorage
from a3c_ray.runtime.tracking import Tracker, TrackSpec, flat_params, track_spec

from .conftest import free_port

mlflow = pytest.importorskip("mlflow", reason="--track needs the track extra")


def tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / layout.TENSORBOARD), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: sorted((e.step, e.value) for e in acc.Scalars(t)) for t in acc.Tags()["scalars"]}


# -- without a tool --------------------------------------------------------------------------------
def test_params_are_the_config_in_dotted_names() -> None:
    cfg = Config()
    cfg.env.kwargs = {"size": 8}
    params = flat_params(cfg)
    assert params["algo.lr"] == cfg.algo.lr and params["run.seed"] == cfg.run.seed
    assert params["env.kwargs.size"] == 8 and params["model.hidden_sizes"] == cfg.model.hidden_sizes
    # Every field, and nothing else: a mapping field's entries one by one, under its name.
    for name, value in params.items():
        section, field, *key = name.split(".", 2)
        stored = cfg.get(f"{section}.{field}")
        assert (stored[key[0]] if key else stored) == value, name


class Failing:
    """A tool whose every call fails, slowly: a server that is down."""

    def __init__(self) -> None:
        self.calls = 0

    def begin(self, *args: Any) -> str:
        self.calls += 1
        time.sleep(3.0)
        raise ConnectionError("server down")

    def log(self, scalars: list[Scalar]) -> None:
        self.calls += 1
        raise ConnectionError("server down")

    def save(self, files: dict[str, Path]) -> None:
        self.calls += 1

    def end(self, status: str) -> None:
        self.calls += 1


def test_a_tool_that_fails_costs_one_warning_and_never_holds_the_caller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tool = Failing()
    tracker = Tracker(TrackSpec("mlflow", "x"), make=lambda spec: tool)
    cfg = Config()
    cfg.run.run_dir = str(tmp_path)
    with caplog.at_level(logging.WARNING, logger="a3c_ray"):
        t0 = time.monotonic()
        tracker.open(cfg, RunStorage(tmp_path), resume=False)
        for step in range(100):
            tracker.log([Scalar("charts/SPS", 1.0, step)])
        queued = time.monotonic() - t0
        assert tracker.finish({}, "FINISHED", timeout=10) is False
    assert queued < 2.0  # the failing server's 3 seconds are spent on the tracker's thread
    warnings = [r.getMessage() for r in caplog.records if "tracking with mlflow" in r.getMessage()]
    assert len(warnings) == 1 and "server down" in warnings[0], warnings
    assert tool.calls == 1  # nothing more is sent once it failed
    assert not (tmp_path / layout.TRACKING).exists()


def test_an_unreachable_mlflow_server_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    tracker = Tracker(track_spec("mlflow"))
    cfg = Config()
    cfg.run.run_dir = str(tmp_path)
    with caplog.at_level(logging.WARNING, logger="a3c_ray"):
        tracker.open(cfg, RunStorage(tmp_path), resume=False)
        tracker.log([Scalar("charts/SPS", 1.0, 1)])
        assert tracker.finish({}, "FINISHED", timeout=60) is False
    warnings = [r for r in caplog.records if "tracking with mlflow failed" in r.getMessage()]
    assert len(warnings) == 1, caplog.text


def test_track_refuses_an_unknown_tool_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--track", "neptune", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--track: invalid choice: 'neptune'" in err, err


# -- Weights & Biases, offline ---------------------------------------------------------------------
def wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file (``run-<id>.wandb``): W&B's log format, blocks of 32 KiB of
    records with a 7-byte header (CRC, length, FULL/FIRST/MIDDLE/LAST), after a 7-byte file header.
    Those written so far: a chunk cut short by the file's end ends the list."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    out, pending = [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    records = []
    for raw in out:
        r = pb.Record()
        r.ParseFromString(raw)
        records.append(r)
    return records


def finished_wandb_records(run_dir: Path, timeout: float = 30.0) -> list[Any]:
    """The records of an offline run directory once its log holds the run's end (its ``exit``
    record). ``run.finish()`` returns once W&B's service has handled the run's end, and then asks
    it to close the run without waiting: the service keeps the log's last block (all of a short
    run) in memory until then, so the file may still hold its header alone for a moment."""
    (file,) = run_dir.glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        records = wandb_records(file)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            pytest.fail(f"{file} holds no exit record {timeout:g} s after the run's end")
        time.sleep(0.05)


def wandb_history(records: list[Any]) -> list[dict[str, Any]]:
    return [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]


@pytest.mark.slow
def test_wandb_offline_keeps_the_metrics_config_and_artifacts_and_a_resume_keeps_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    storage = RunStorage(run_dir)
    cfg = Config()
    cfg.run.run_dir = str(run_dir)
    cfg.run.seed = 7
    storage.write_text(layout.CONFIG, cfg.to_yaml())
    storage.write_text(layout.SUMMARY, json.dumps({"env_id": "CartPole-v1"}))
    # Two episodes ending in one tick at steps below the tick's own scalars: the charts' x is
    # env_steps, not W&B's own step, which only grows.
    first = [
        Scalar("charts/episodic_return", 10.0, 96),
        Scalar("charts/episodic_return", 12.0, 96),
        Scalar("charts/episodic_return", 14.0, 120),
        Scalar("charts/SPS", 1000.0, 128),
        Scalar("eval/total_reward", 20.0, 128),
    ]
    tracker = Tracker(track_spec("wandb", "cartpole"))
    tracker.open(cfg, storage, resume=False)
    tracker.log(first)
    assert tracker.finish({layout.CONFIG: run_dir / layout.CONFIG}, "FINISHED", timeout=120)
    run_id = json.loads((run_dir / layout.TRACKING).read_text())["wandb"]["run_id"]
    (offline,) = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}")
    records = finished_wandb_records(offline)
    rows = wandb_history(records)
    got = sorted(
        (r["env_steps"], k, v)
        for r in rows
        for k, v in r.items()
        if k != "env_steps" and not k.startswith("_")
    )
    assert got == sorted((s.step, s.tag, s.value) for s in first)
    config = {}
    for r in records:
        if r.WhichOneof("record_type") == "config":
            config.update({i.key: json.loads(i.value_json) for i in r.config.update})
    assert config["algo.lr"] == cfg.algo.lr and config["run.seed"] == 7
    run_record = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert "CartPole-v1" in run_record.tags and "seed=7" in run_record.tags
    assert any(r.WhichOneof("record_type") == "artifact" for r in records)
    assert next(r.exit for r in records if r.WhichOneof("record_type") == "exit").exit_code == 0

    # A resumed run goes on in the same W&B run. W&B names an offline run's directory by the
    # second it began and the run's id: the resumed one begins in a later second, so that its
    # directory is a new one (on a fast machine both began within one second).
    time.sleep(1.05 - time.time() % 1.0)
    again = Tracker(track_spec("wandb", "cartpole"))
    again.open(cfg, storage, resume=True)
    again.log([Scalar("charts/episodic_return", 30.0, 200)])
    assert again.finish({}, "FINISHED", timeout=120)
    assert json.loads((run_dir / layout.TRACKING).read_text())["wandb"]["run_id"] == run_id
    later = [d for d in (tmp_path / "wandb").glob(f"offline-run-*-{run_id}") if d != offline]
    assert len(later) == 1
    rows = wandb_history(finished_wandb_records(later[0]))
    assert [(r["env_steps"], r["charts/episodic_return"]) for r in rows] == [(200, 30.0)]


# -- MLflow, a real server ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with a SQLite store, for this module; its URI."""
    where = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{where / 'mlflow.db'}",
            "--artifacts-destination",
            str(where / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=where,
        stdout=subprocess.DEVNULL,
        stderr=open(where / "server.log", "wb"),  # noqa: SIM115  # closed with the process
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(
                "mlflow server did not start: " + (where / "server.log").read_text()[-2000:]
            )
        time.sleep(0.5)
    try:
        yield uri
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def only_run(client: Any, experiment: str) -> Any:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment}"
    return client.search_runs([exp.experiment_id])


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.long
def test_train_track_mlflow_logs_params_every_scalar_artifacts_and_a_resume_appends(
    ray_session: None,
    mlflow_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "train-cartpole")
    run_dir = tmp_path / "cp"
    base = ["--workers", "1", "--seed", "3", "--no-progress", "--track", "mlflow"]
    code = main(
        [
            "train",
            "--env",
            "CartPole-v1",
            "--max-steps",
            "5000",
            "--run-dir",
            str(run_dir),
            "--set",
            "monitor.eval_every=1",
            *base,
        ]
    )
    assert code == 0, capsys.readouterr().err
    client = mlflow.MlflowClient(mlflow_server)
    (run,) = only_run(client, "train-cartpole")
    assert (
        json.loads((run_dir / layout.TRACKING).read_text())["mlflow"]["run_id"] == run.info.run_id
    )
    assert run.info.status == "FINISHED" and run.info.run_name == "cp"
    saved = Config.load(run_dir / layout.CONFIG)
    assert run.data.params["algo.lr"] == str(saved.algo.lr)
    assert run.data.params["run.max_steps"] == "5000"
    assert len(run.data.params) == len(flat_params(saved))
    assert run.data.tags["env_id"] == "CartPole-v1" and run.data.tags["seed"] == "3"
    assert run.data.tags["config"] == "cartpole"

    def histories() -> dict[str, list[tuple[int, float]]]:
        return {
            tag: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag))
            for tag in tensorboard_scalars(run_dir)
        }

    # Every TensorBoard scalar, at the same step.
    tb = tensorboard_scalars(run_dir)
    assert {"charts/episodic_return", "eval/total_reward", "losses/policy_loss"} <= set(tb)
    tracked = histories()
    for tag, points in tb.items():
        assert [s for s, _ in tracked[tag]] == [s for s, _ in points], tag
        assert [v for _, v in tracked[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag

    def artifacts() -> dict[str, str]:
        out = {}
        for a in [
            *client.list_artifacts(run.info.run_id),
            *client.list_artifacts(run.info.run_id, "checkpoints"),
        ]:
            if not a.is_dir:
                out[a.path] = a.path
        return out

    best = "checkpoints/" + (run_dir / "checkpoints/best").read_text().strip()
    assert set(artifacts()) == {"config.yaml", "summary.json", best}
    got = Path(client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path)))
    assert json.loads(got.read_text()) == json.loads((run_dir / layout.SUMMARY).read_text())

    # A resumed run continues the same MLflow run: its new scalars are appended.
    before = tracked["charts/episodic_return"]
    code = main(["train", "--resume", str(run_dir), "--max-steps", "9000", *base])
    assert code == 0, capsys.readouterr().err
    (again,) = only_run(client, "train-cartpole")
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert again.data.params["run.max_steps"] == "5000"  # params stay as the run began
    tracked = histories()
    after = tracked["charts/episodic_return"]
    assert after[: len(before)] == before and after[-1][0] > 5000
    tb = tensorboard_scalars(run_dir)
    assert [s for s, _ in after] == [s for s, _ in tb["charts/episodic_return"]]
    summary = Path(client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path / "2")))
    assert json.loads(summary.read_text())["env_steps"] >= 9000


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.long
def test_tune_track_mlflow_logs_each_trial_as_a_run_of_one_experiment(
    ray_session: None,
    mlflow_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("ray.tune")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    config = tmp_path / "s.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "env": {"id": "CartPole-v1", "num_envs": 2},
                "run": {
                    "workers": 1,
                    "worker_cpus": 0.5,
                    "ps_cpus": 0.25,
                    "monitor_cpus": 0.25,
                    "max_steps": 3000,
                    "target_return": None,
                },
                "monitor": {"eval_every": 1.0, "eval_episodes": 2},
                "tune": {
                    "report_every": 1.0,
                    "num_samples": 1,
                    "space": {"algo.lr": "grid([0.001, 0.005])"},
                },
            }
        )
    )
    out = tmp_path / "search-lr"
    code = main(["tune", "--config", str(config), "--out", str(out), "--json", "--track", "mlflow"])
    assert code == 0, capsys.readouterr().err
    trials = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["trials"]
    client = mlflow.MlflowClient(mlflow_server)
    runs = only_run(client, "search-lr")
    assert len(runs) == 2 == len(trials)
    assert sorted(r.data.params["algo.lr"] for r in runs) == ["0.001", "0.005"]
    by_dir = {r.data.tags["run_dir"]: r for r in runs}
    for t in trials:
        r = by_dir[t["run_dir"]]
        assert r.info.status == "FINISHED" and r.data.tags["config"] == "s"
        tb = tensorboard_scalars(Path(t["run_dir"]))
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "charts/episodic_return")]
        assert sorted(steps) == [s for s, _ in tb["charts/episodic_return"]]
        names = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"config.yaml", "summary.json"} <= names
    assert os.path.isdir(out / "runs")
