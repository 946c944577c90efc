"""End to end on a real local Ray: learning, run directory contents, eval, interrupts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from a3c_ray import metric_names as M
from a3c_ray.algo.models import build_model, num_params
from a3c_ray.commands.cli import main
from a3c_ray.commands.evaluate import evaluate_checkpoint
from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_checkpoint
from a3c_ray.rundir.summary import RunSummary
from a3c_ray.runtime.session import train

from .conftest import free_port, small_config


def interruptible() -> None:
    """In the child, before exec: Ctrl-C's default, which a suite started in the background
    (``cmd &``, where the shell ignores SIGINT) would otherwise pass on as ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


pytestmark = pytest.mark.ray


def read_tags(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's event files, by tag, as (step, value)."""
    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def to_450(run_dir: Path, **sets: object) -> Config:
    """The defaults with 2 Workers and seed 1, stopping at a mean of 450 or 500k env steps."""
    cfg = Config()
    cfg.run.run_dir = str(run_dir)
    cfg.run.workers = 2
    cfg.run.target_return = 450
    cfg.run.max_steps = 500_000
    cfg.run.seed = 1
    cfg.run.progress = False
    for key, value in sets.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


@pytest.mark.slow
@pytest.mark.long
def test_two_workers_solve_cartpole_to_450_within_500k_steps(
    ray_session: None, tmp_path: Path
) -> None:
    """Seeded CartPole-v1 with 2 Workers reaches a mean of 450 over the last 100 training episodes
    within 500k env steps, and the run directory holds what DESIGN.md promises.

    The defaults need a median of 107k and at most 142k over 10 seeds (docs/benchmarks.md); the
    margin covers the Workers' asynchrony, which makes a run vary even with a fixed seed."""
    run_dir = tmp_path / "cp"
    cfg = to_450(run_dir)
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0, s
    assert s["stopped_because"] == "target", s
    assert s["mean_return_100"] >= 450 and s["steps_to_target"] <= 500_000
    assert s["seconds_to_target"] > 0 and s["gradient_updates"] > 0 and s["workers"] == 2
    assert json.loads((run_dir / layout.SUMMARY).read_text()) == json.loads(json.dumps(s))
    for key in (
        "env_id",
        "workers",
        "env_steps",
        "gradient_updates",
        "train_seconds",
        "target_return",
        "seconds_to_target",
        "steps_to_target",
        "mean_return_100",
        "best_eval_return",
        "checkpoint",
        "stopped_because",
        "worker_restarts",
        "gradients_dropped",
        "worker_nodes",
    ):
        assert key in s
    assert len(s["worker_nodes"]) == 1

    # The resolved config is saved and loads back.
    saved = Config.load(run_dir / layout.CONFIG)
    assert saved.run.workers == 2 and saved.run.target_return == 450

    # Checkpoints: files, pointers, weights_only loads.
    ckpts = list_checkpoints(run_dir / layout.CHECKPOINTS)
    assert (
        ckpts
        and (run_dir / layout.CHECKPOINTS / layout.LATEST).exists()
        and (run_dir / layout.CHECKPOINTS / layout.BEST).exists()
    )
    raw = torch.load(ckpts[-1], weights_only=True)
    assert raw["env_id"] == "CartPole-v1" and raw["env_steps"] == int(ckpts[-1].stem.split("-")[1])
    assert load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)["path"] == s["checkpoint"]

    # TensorBoard: the training charts and the evaluations.
    tags = read_tags(run_dir / layout.TENSORBOARD)
    for tag in (
        M.EPISODIC_RETURN,
        M.EPISODIC_LENGTH,
        M.EVAL_RETURN,
        M.EVAL_LENGTH,
        M.POLICY_LOSS,
        M.VALUE_LOSS,
        M.ENTROPY,
        M.GRAD_NORM,
        M.STALENESS,
        M.UPDATES_PER_SECOND,
        M.SPS,
    ):
        assert tags.get(tag), f"no {tag} in TensorBoard"
    assert max(v for _, v in tags[M.EPISODIC_RETURN]) == 500.0

    # The best checkpoint plays well under `eval`.
    res = evaluate_checkpoint(run_dir / layout.CHECKPOINTS / layout.BEST, episodes=20, seed=7)
    assert res["mean_return"] >= 400, res


def one_whole_checkpoint_of_two_shards(cfg: Config, s: RunSummary) -> None:
    """The run's checkpoint is one whole model and its optimizer state, which a one-shard
    ParameterServer could restore, and the step size of the whole weights is charted."""
    run_dir = Path(cfg.run.run_dir or "")
    assert s["gradients_dropped"] == 0 and s["ps_restarts"] == 0, s
    ckpt = load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)
    assert (
        ckpt["params"].numel() == num_params(build_model(cfg.model, (4,), 2))
        and ckpt["version"] == s["version"]
    )
    assert ckpt["optimizer"]["state"][0]["square_avg"].numel() == ckpt["params"].numel()
    assert read_tags(run_dir / layout.TENSORBOARD).get(M.UPDATE_NORM), "no step size chart"


@pytest.mark.slow
@pytest.mark.long
def test_two_shards_on_a_bfloat16_wire_solve_cartpole(ray_session: None, tmp_path: Path) -> None:
    """The defaults with the ParameterServer in 2 shards and bfloat16 on the wire reach 450 within
    500k env steps (they need about 100k), and the run's checkpoint is one whole model that
    ``eval`` plays and a one-shard ParameterServer could restore."""
    cfg = to_450(tmp_path / "shards", ps__shards=2, ps__wire_dtype="bfloat16")
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "target", s
    one_whole_checkpoint_of_two_shards(cfg, s)
    best = tmp_path / "shards" / layout.CHECKPOINTS / layout.BEST
    res = evaluate_checkpoint(best, episodes=20, seed=7)
    assert res["mean_return"] >= 400, res


@pytest.mark.long
def test_two_shards_on_a_bfloat16_wire_train_to_one_whole_checkpoint(
    ray_session: None, tmp_path: Path
) -> None:
    """The short run of the learning test above (make test-long): 2 shards and bfloat16 on the
    wire train to the step budget, and ``eval`` plays the one whole checkpoint they leave."""
    cfg = small_config(
        tmp_path / "shards", run__max_steps=3_000, ps__shards=2, ps__wire_dtype="bfloat16"
    )
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    one_whole_checkpoint_of_two_shards(cfg, s)
    latest = tmp_path / "shards" / layout.CHECKPOINTS / layout.LATEST
    assert evaluate_checkpoint(latest, episodes=2, seed=7)["episodes"] == 2


@pytest.mark.long
def test_a_box_action_space_trains_on_ray_and_eval_plays_its_checkpoint(
    ray_session: None, tmp_path: Path
) -> None:
    """Pendulum's Box actions take the Gaussian policy through the whole run: Workers, the
    ParameterServer, the Monitor's evaluation, the checkpoint and ``eval``."""
    run_dir = tmp_path / "pendulum"
    cfg = small_config(run_dir, env__id="Pendulum-v1", run__max_steps=4_000)
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert Config.load(run_dir / layout.CONFIG).model.policy == "gaussian"
    ckpt = load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)
    assert ckpt["model"]["policy"] == "gaussian" and ckpt["n_actions"] == 1
    res = evaluate_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST, episodes=2, seed=3)
    assert res["mean_length"] == 200 and -2000 < res["mean_return"] <= 0, res


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.long), pytest.param(2, marks=pytest.mark.long)]
)
def test_defaults_learn_cartpole_and_keep_it_for_300k_steps(
    ray_session: None, tmp_path: Path, seed: int
) -> None:
    """With no settings but the seed and no target to stop at, 2 Workers train CartPole-v1 for
    300k env steps: the defaults keep what they learn instead of collapsing after the first
    solve (the failure this guards against ended near 9, a policy that pushes one way). Once the
    mean of the last 100 training episodes has reached 450, it never falls below 300, and it ends
    at 350 or more. Over 26 runs on Ray (docs/benchmarks.md) the mean at 300k was 450 or more in
    25 and 447 in the other; the timing of asynchronous pushes varies it between runs of one seed
    (one of make test's ended at 391, its lowest after the solve 377). Seed 0 runs with make
    test, seeds 1 and 2 with make test-long."""
    from a3c_ray.bench.plot import load_curve
    from a3c_ray.bench.stability_score import seed_result

    cfg = Config()
    cfg.run.run_dir = str(tmp_path / "cp")
    cfg.run.workers, cfg.run.max_steps, cfg.run.seed, cfg.run.progress = 2, 300_000, seed, False
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    curve = load_curve(tmp_path / "cp")
    r = seed_result(seed, curve.steps, curve.seconds, curve.mean_100, 450, 300, 0, 0.0)
    assert r.steps_to_target is not None and r.final_mean == pytest.approx(s["mean_return_100"])
    assert r.held and s["mean_return_100"] >= 350, r  # a collapse falls to near 9


def test_short_run_stops_at_max_steps_and_writes_everything(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = small_config(tmp_path / "short", run__max_steps=2_000)
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps"
    assert 2_000 <= s["env_steps"] < 2_000 + 2 * cfg.algo.t_max * cfg.env.num_envs
    assert s["checkpoint"] and Path(s["checkpoint"]).exists()
    assert s["best_eval_return"] is not None and s["steps_to_target"] is None

    # `eval` plays the checkpoint and records one mp4 per episode through gymnasium's RecordVideo.
    videos = tmp_path / "videos"
    assert main(["eval", s["checkpoint"], "--episodes", "2", "--video", str(videos), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["episodes"] == 2 and len(out["returns"]) == 2
    assert len(list(videos.glob("*.mp4"))) == 2


@pytest.mark.parametrize(
    ("overlap", "staleness"),
    [pytest.param(False, 0, marks=pytest.mark.long), pytest.param(True, 1, marks=pytest.mark.long)],
)
def test_a_lone_worker_is_exactly_one_version_staler_with_the_push_overlapped(
    ray_session: None, tmp_path: Path, overlap: bool, staleness: int
) -> None:
    """On Ray, a lone Worker waiting for each reply computes every gradient from the newest
    weights; overlapping the push makes every gradient after the first one version old."""
    cfg = small_config(
        tmp_path / f"overlap-{overlap}",
        run__workers=1,
        run__max_steps=3_000,
        algo__overlap_push=overlap,
    )
    s = train(cfg).summary
    assert s["stopped_because"] == "max_steps" and s["version"] > 100, s
    assert s["staleness_max"] == staleness, s
    assert s["staleness_mean"] == pytest.approx(staleness * (1 - 1 / s["version"])), s


def sigint_ignored() -> None:
    """In the child, before exec: SIGINT ignored, as a shell script's ``a3c-ray train &`` gets it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "sig, preexec",
    [
        # Ctrl-C on a terminal: the handler that the ignored case below installs too (long).
        pytest.param(signal.SIGINT, interruptible, marks=pytest.mark.long),
        (signal.SIGTERM, interruptible),
        # started in the background of a script: `kill -INT` / `timeout -s INT` still stop it
        pytest.param(signal.SIGINT, sigint_ignored, marks=pytest.mark.long),
    ],
)
def test_interrupt_saves_a_checkpoint_and_summary_then_exits_130(
    tmp_path: Path, sig: signal.Signals, preexec: Callable[[], None]
) -> None:
    run_dir = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "a3c_ray",
            "train",
            "--workers",
            "1",
            "--max-steps",
            "10000000",
            "--run-dir",
            str(run_dir),
            "--dashboard-port",
            str(free_port()),
            "--no-progress",
            "--set",
            "run.ps_cpus=0.25",
            "--set",
            "run.monitor_cpus=0.25",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": ""},
        preexec_fn=preexec,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / layout.CHECKPOINTS / layout.LATEST).exists():  # training is under way
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    summary = json.loads((run_dir / layout.SUMMARY).read_text())
    assert summary["stopped_because"] == "interrupted"
    final = load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)
    assert final["env_steps"] == summary["env_steps"]


@pytest.mark.long
def test_two_runs_side_by_side_each_get_a_dashboard(tmp_path: Path) -> None:
    """A second `a3c-ray train` on a machine where one is already training starts its own
    embedded Ray, with its dashboard on a free port when the first holds 8265, and both finish."""
    import re

    def train_cmd(run_dir: Path, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "a3c_ray", "train", "--workers", "1",
            "--run-dir", str(run_dir), "--no-progress", "--envs-per-worker", "2",
            "--set", "run.ps_cpus=0.25", "--set", "run.monitor_cpus=0.25", *extra,
        ]  # fmt: skip

    env = {**os.environ, "RAY_ADDRESS": ""}
    first = subprocess.Popen(
        train_cmd(
            tmp_path / "first",
            "--max-steps",
            "10000000",
            "--time-limit",
            "600",
            "--set",
            "run.target_return=null",  # no target to stop at: it trains until told
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=interruptible,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "first" / layout.CHECKPOINTS / layout.LATEST).exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run did not start training"
            time.sleep(0.5)
        # `a3c-ray status`, in a process of its own, finds the run on its embedded Ray, fast.
        t0 = time.monotonic()
        status = subprocess.run(
            [sys.executable, "-m", "a3c_ray", "status", "--json", "--interval", "0.2"],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr[-2000:]
        assert time.monotonic() - t0 < 30
        listed = [r for r in json.loads(status.stdout) if r["run"].startswith("first-")]
        assert len(listed) == 1 and listed[0]["env_steps"] > 0, status.stdout
        assert listed[0]["cluster"].startswith("127.0.0.1:")
        second = subprocess.run(
            train_cmd(tmp_path / "second", "--max-steps", "4000"),
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
        assert second.returncode == 0, second.stderr[-2000:]
        assert first.poll() is None  # the first run trained on throughout
        first.send_signal(signal.SIGINT)
        _, first_err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    ports = [
        re.search(r"Ray dashboard at http://127\.0\.0\.1:(\d+)", err).group(1)  # type: ignore[union-attr]
        for err in (first_err, second.stderr)
    ]
    assert ports[0] != ports[1]
    if ports[0] == "8265":
        assert "8265 is taken by another Ray on this machine" in second.stderr
    assert json.loads((tmp_path / "second" / layout.SUMMARY).read_text())["env_steps"] >= 4000
    assert json.loads((tmp_path / "first" / layout.SUMMARY).read_text())["stopped_because"] == (
        "interrupted"
    )


def test_a_dashboard_port_asked_for_and_taken_is_a_one_line_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "a3c_ray", "train", "--max-steps", "100", "--run-dir",
             str(tmp_path / "r"), "--dashboard-port", str(port), "--no-progress"],
            capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""}, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot start Ray" in last and "--dashboard-port" in last


@pytest.mark.parametrize("command", [["status"], ["scale", "some-run", "--workers", "2"]])
def test_status_and_scale_give_up_fast_when_no_cluster_answers(command: list[str]) -> None:
    """An address where nothing listens is a one-line error within seconds, not a hang."""
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "a3c_ray", *command, "--address", f"127.0.0.1:{port}"],
        capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""}, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert time.monotonic() - t0 < 15
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"a3c-ray: error: no Ray cluster answers at 127.0.0.1:{port} (within 2 s)"
