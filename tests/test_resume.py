"""Resume: continue from the newest good checkpoint with the saved config; refuse what cannot continue."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import ray

from a3c_ray import metric_names as M
from a3c_ray.commands.cli import main
from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_checkpoint
from a3c_ray.runtime.session import train

from .conftest import named_actor, small_config, wait_for
from .test_cli import snapshot
from .test_train_ray import read_tags


@pytest.fixture(scope="module")
def finished_run(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("resume") / "run"
    cfg = small_config(run_dir, run__max_steps=6_000, monitor__eval_every=0.5)
    assert train(cfg).exit_code == 0
    return run_dir


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / layout.SUMMARY).read_text())


@pytest.mark.ray
@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--env", "Acrobot-v1"], "--resume cannot change env.id ('CartPole-v1' -> 'Acrobot-v1')"),
        (["--set", "model.hidden_sizes=[32]"], "--resume cannot change model.hidden_sizes"),
        (["--envs-per-worker", "3"], "--resume cannot change env.num_envs"),
        (["--overwrite"], "--resume and --overwrite exclude each other"),
        (["--set", "algo.optimizer=adam"], "its checkpoint holds rmsprop statistics"),
    ],
)
def test_resume_refuses_to_change_env_or_model_and_writes_nothing(
    finished_run: Path, flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), *flags]) == 2
    assert needle in capsys.readouterr().err
    assert snapshot(finished_run) == before


def test_resume_of_a_directory_that_is_not_a_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no config.yaml" in capsys.readouterr().err


def test_resume_of_a_run_without_a_good_checkpoint_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Config().save(tmp_path / layout.CONFIG)
    (tmp_path / layout.CHECKPOINTS).mkdir()
    (tmp_path / layout.CHECKPOINTS / "ckpt-100.pt").write_bytes(b"PK\x03\x04broken")
    assert main(["train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "ckpt-100.pt" in err


@pytest.mark.ray
@pytest.mark.long
def test_resume_continues_counters_and_curves_and_extends_max_steps(finished_run: Path) -> None:
    first = summary(finished_run)
    last_ckpt = load_checkpoint(finished_run / layout.CHECKPOINTS / layout.LATEST)
    tags_before = read_tags(finished_run / layout.TENSORBOARD)
    assert (
        main(["train", "--resume", str(finished_run), "--max-steps", "12000", "--no-progress"]) == 0
    )
    second = summary(finished_run)
    assert second["stopped_because"] == "max_steps" and second["env_steps"] >= 12_000
    assert second["resumed_from"] == last_ckpt["path"]
    assert (
        second["version"] > first["version"]
        and second["gradient_updates"] > first["gradient_updates"]
    )
    assert Config.load(finished_run / layout.CONFIG).run.max_steps == 12_000
    # The rate is this sitting's: its steps over its seconds of training, not over the run's.
    sitting_steps = second["env_steps"] - int(last_ckpt["env_steps"])
    sitting_seconds = second["train_seconds"] - float(last_ckpt["train_seconds"])
    assert second["env_steps_per_second"] == pytest.approx(
        sitting_steps / sitting_seconds, rel=0.05
    )
    # TensorBoard curves go on from the checkpoint's step: nothing new is logged before it.
    tags_after = read_tags(finished_run / layout.TENSORBOARD)
    new_evals = [
        s for s, _ in tags_after[M.EVAL_RETURN] if (s, _) not in tags_before[M.EVAL_RETURN]
    ]
    assert new_evals and min(new_evals) > int(last_ckpt["env_steps"])
    new_returns = [s for s, _ in tags_after[M.EPISODIC_RETURN]][
        len(tags_before[M.EPISODIC_RETURN]) :
    ]
    assert new_returns and min(new_returns) > int(last_ckpt["env_steps"])


@pytest.mark.ray
@pytest.mark.long
def test_resume_skips_a_corrupted_latest_checkpoint(ray_session: None, tmp_path: Path) -> None:
    run_dir = tmp_path / "corrupt"
    cfg = small_config(
        run_dir, run__max_steps=8_000, monitor__eval_every=0.3, monitor__log_every=0.1
    )
    assert train(cfg).exit_code == 0
    ckpts = list_checkpoints(run_dir / layout.CHECKPOINTS)
    assert len(ckpts) >= 2
    newest, previous = ckpts[-1], ckpts[-2]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a torn write
    assert main(["train", "--resume", str(run_dir), "--max-steps", "12000", "--no-progress"]) == 0
    s = summary(run_dir)
    assert s["resumed_from"] == str(previous)
    assert s["env_steps"] >= 12_000


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.long
def test_resumed_run_still_solves_cartpole_within_the_uninterrupted_budget(
    ray_session: None, tmp_path: Path
) -> None:
    """Stopping at 40k steps and resuming loses nothing that matters: the run still reaches a mean of
    450 within the 500k steps that the uninterrupted learning test is given (weights, optimizer
    statistics, counters and the last-100 returns all come back)."""
    run_dir = tmp_path / "cp"
    cfg = Config()
    cfg.run.run_dir, cfg.run.workers, cfg.run.seed, cfg.run.progress = str(run_dir), 2, 1, False
    cfg.run.max_steps = 40_000
    cfg.monitor.eval_every = 1.0
    assert train(cfg).exit_code == 0
    code = main(
        [
            "train",
            "--resume",
            str(run_dir),
            "--max-steps",
            "500000",
            "--target-return",
            "450",
            "--no-progress",
        ]
    )
    s = summary(run_dir)
    assert code == 0 and s["stopped_because"] == "target", s
    assert s["steps_to_target"] <= 500_000 and s["resumed_from"] is not None


def auto(run_dir: Path, *flags: str) -> list[str]:
    """The one command a retried job runs every time: start the run, or continue it."""
    return [
        "train",
        "--run-dir",
        str(run_dir),
        "--resume",
        "auto",
        "--workers",
        "2",
        "--envs-per-worker",
        "2",
        "--eval-every",
        "0.5",
        "--no-progress",
        *flags,
    ]


@pytest.mark.ray
def test_resume_auto_starts_a_run_then_continues_it_exactly(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "job"
    run_dir.mkdir()  # an empty directory holds no run: the run starts there

    def kill_a_worker() -> None:
        ps = named_actor("ParameterServer", run_dir)
        wait_for(lambda: ray.get(ps.progress.remote()).env_steps > 2_000, what="training")  # type: ignore[attr-defined]
        ray.kill(named_actor("Worker-1", run_dir), no_restart=False)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    assert main(auto(run_dir, "--max-steps", "6000", "--set", "run.restart_backoff=0.1")) == 0
    killer.join(timeout=60)
    first = summary(run_dir)
    assert first["resumed_from"] is None and first["env_steps"] >= 6_000
    assert first["worker_restarts"] == 1, first
    saved = load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)
    assert main(auto(run_dir, "--max-steps", "9000")) == 0
    second = summary(run_dir)
    assert second["resumed_from"] and second["resumed_from"].endswith(
        f"ckpt-{saved['env_steps']}.pt"
    )
    assert second["env_steps"] >= 9_000
    # Counters, training time and the best evaluation went on from the checkpoint: the Worker
    # restart of the first sitting is still counted, and evaluations take new seeds.
    assert second["gradient_updates"] > saved["gradients_applied"]
    assert second["episodes"] > saved["episodes"]
    assert second["train_seconds"] > saved["train_seconds"]
    assert second["staleness_max"] >= saved["staleness_max"]
    assert second["worker_restarts"] == 1, second
    assert second["best_eval_return"] >= first["best_eval_return"]
    assert load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)["evals"] > saved["evals"]
    assert Config.load(run_dir / layout.CONFIG).run.max_steps == 9_000


@pytest.mark.ray
@pytest.mark.long
def test_resume_auto_of_a_run_lost_before_its_first_checkpoint_starts_it_again(
    ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "lost"
    run_dir.mkdir()
    small_config(run_dir).save(run_dir / layout.CONFIG)  # a run that died as it started
    assert main(auto(run_dir, "--max-steps", "3000")) == 0
    s = summary(run_dir)
    assert s["resumed_from"] is None and s["env_steps"] >= 3_000


def test_resume_auto_needs_a_run_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--resume", "auto"]) == 2
    assert "--resume auto needs --run-dir" in capsys.readouterr().err
