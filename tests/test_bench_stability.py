"""``a3c-ray bench seeds`` and the lab's ``stability``: whether each seed learned its target and
kept it, on Ray, in process, and from finished runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from a3c_ray.commands import bench, bench_stability
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from lab import cli as lab

from .bench_cli import lab_parse, parse, write_fake_run


# -- stability (bench seeds) ----------------------------------------------------------------------
def test_seed_result_reads_first_target_lowest_after_it_and_final() -> None:
    from a3c_ray.bench.stability_score import seed_result

    means = np.array([10.0] * 99 + [300, 460, 470, 320, 480, 455])
    steps = np.arange(len(means)) * 100.0
    r = seed_result(
        7, steps, steps / 1000, means, target=450, floor=300, env_steps=9000, train_seconds=9.0
    )
    assert r.steps_to_target == 10_000 and r.seconds_to_target == pytest.approx(10.0)
    assert r.low_after_target == 320 and r.final_mean == 455
    assert r.held and r.kept
    # The same run ending below the target held but did not keep it.
    low_end = np.concatenate([means, [440.0]])
    r = seed_result(
        7, np.arange(len(low_end)) * 100.0, np.arange(len(low_end)) / 10, low_end, 450, 300, 1, 1.0
    )
    assert r.held and not r.kept
    # A collapse below the floor after the target is not held, whatever the end.
    dip = np.concatenate([means, [9.4, 500.0]])
    r = seed_result(7, np.arange(len(dip)) * 100.0, np.arange(len(dip)) / 10, dip, 450, 300, 1, 1.0)
    assert r.low_after_target == 9.4 and not r.held and not r.kept


def test_seed_result_needs_a_full_window_of_100_episodes() -> None:
    from a3c_ray.bench.stability_score import seed_result

    means = np.array([500.0] * 99)  # 99 perfect episodes: not yet a mean of the last 100
    r = seed_result(0, np.arange(99.0), np.arange(99.0), means, 450, 300, 99, 1.0)
    assert r.steps_to_target is None and r.low_after_target is None and not r.held
    assert r.final_mean == 500.0


def test_stability_summary_counts_and_medians() -> None:
    from a3c_ray.bench.report import format_stability
    from a3c_ray.bench.stability_score import SeedResult, summarize

    runs = [
        SeedResult(0, 500, 10.0, 80_000, 15.0, 500.0, 420.0, True, True),
        SeedResult(1, 500, 10.0, 100_000, 19.0, 9.4, 9.4, False, False),
        SeedResult(2, 500, 10.0, None, None, 120.0, None, False, False),
    ]
    s = summarize(runs, 450, 300)
    assert (s["reached"], s["final_at_target"], s["held"], s["kept"]) == (2, 1, 1, 1)
    assert s["median_steps_to_target"] == 90_000 and s["median_seconds_to_target"] == 17.0
    assert s["median_final_mean"] == 120.0
    report = {
        "settings": {
            "env": "CartPole-v1",
            "workers": 2,
            "steps": 500,
            "time_limit": None,
            "optimizer": "adam",
            "lr": 1e-3,
            "t_max": 3,
            "envs_per_worker": 8,
        },
        "runs": [vars(r) for r in runs],
        "summary": s,
    }
    text = format_stability(report)
    assert "| 1 | 100k | 19.0 | 9.4 | 9.4 | no |" in text
    assert "| 2 | - | - | 120.0 | - | no |" in text
    assert "held (never below the floor after the target) 1/3" in text


def test_stability_bad_input_is_reported_all_at_once(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_text("keep me")
    argv = ["seeds", "0", "--first-seed", "-1", "--runs-dir", str(tmp_path / "old")]
    with pytest.raises(ConfigError) as e:
        bench.config_of(parse(argv))
    text = str(e.value)
    assert "N: must be >= 1 seeds" in text and "--first-seed: must be >= 0" in text
    assert "is not empty" in text
    assert (tmp_path / "old" / "x").read_text() == "keep me"
    # Blackjack-v1's spec has no reward threshold, and the defaults set no target.
    with pytest.raises(ConfigError, match="bench seeds needs --learned-return"):
        bench.config_of(parse(["seeds", "2", "--env", "Blackjack-v1"]))


def test_stability_target_falls_back_to_the_envs_reward_threshold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse(["seeds", "2"])
    assert bench_stability.stability_target(Config(), args) == 475.0  # CartPole-v1's spec
    cfg = Config()
    cfg.run.target_return = 450
    assert bench_stability.stability_target(cfg, args) == 450
    assert (
        bench_stability.stability_target(cfg, parse(["seeds", "2", "--learned-return", "200"]))
        == 200
    )
    # The flag's older name still works, unlisted: train's --target-return stops a run.
    assert bench_stability.stability_target(cfg, parse(["seeds", "2", "--target-return", "9"])) == 9
    with pytest.raises(SystemExit):
        parse(["seeds", "--help"])
    seeds_help = capsys.readouterr().out
    assert "--learned-return" in seeds_help and "--target-return" not in seeds_help


@pytest.mark.ray
@pytest.mark.long
def test_bench_seeds_trains_each_seed_without_stopping_at_the_target(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tiny seeds run to their step budget (a target of 20 is reached early and must not
    stop them), each read back from its own TensorBoard episodes."""
    runs = tmp_path / "runs"
    argv = [
        "seeds",
        "2",
        "--first-seed",
        "5",
        "--max-steps",
        "6000",
        "--learned-return",
        "20",
        "--workers",
        "1",
        "--envs-per-worker",
        "4",
        "--runs-dir",
        str(runs),
        "--json",
    ]
    assert bench.run(parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    assert [x["seed"] for x in r["runs"]] == [5, 6]
    for x in r["runs"]:
        assert x["env_steps"] >= 6000  # ran on past the target
        assert x["steps_to_target"] is not None and x["steps_to_target"] < x["env_steps"]
        assert x["final_mean"] > 0 and (runs / f"seed-{x['seed']}" / layout.TENSORBOARD).is_dir()
        assert (
            json.loads((runs / f"seed-{x['seed']}" / layout.SUMMARY).read_text())["env_steps"]
            == x["env_steps"]
        )
    assert r["summary"]["seeds"] == 2 and r["summary"]["reached"] == 2
    assert r["summary"]["floor"] == pytest.approx(40 / 3)


@pytest.mark.slow  # two short learning runs
def test_in_process_training_is_deterministic_and_traces_every_window() -> None:
    """Without Ray the same seed gives the same episodes twice; with the overlapped push two
    Workers' gradients are 3 versions stale, as on Ray; every window is traced."""
    from a3c_ray.algo.inprocess import format_trace, train

    cfg = Config()
    cfg.env.num_envs, cfg.run.max_steps, cfg.run.seed = 4, 6_000, 3
    a, b = train(cfg, 2, trace_every=1_000), train(cfg, 2, trace_every=1_000)
    assert a.env_steps >= 6_000 and len(a.mean_100) > 10
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.mean_100, b.mean_100)
    assert [r["env_steps"] for r in a.trace] == [r["env_steps"] for r in b.trace]
    assert len(a.trace) == 6 and all(r["staleness"] == 3 for r in a.trace[1:])
    assert all(r["update_norm"] > 0 and r["grad_norm_max"] >= r["grad_norm"] for r in a.trace)
    assert sum(r["episodes"] for r in a.trace) <= len(a.mean_100)
    assert format_trace(a.trace).count("\n") == len(a.trace) + 1
    cfg.algo.overlap_push = False
    assert all(r["staleness"] == 1 for r in train(cfg, 2, trace_every=1_000).trace[1:])


@pytest.mark.slow  # two short learning runs
def test_bench_seeds_in_process_reports_each_seed_with_its_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["seeds", "2", "--max-steps", "3000", "--in-process", "--trace-every", "1000",
            "--learned-return", "15", "--workers", "2", "--envs-per-worker", "4", "--json"]  # fmt: skip
    assert bench.run(parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["settings"]["in_process"] and [x["seed"] for x in r["runs"]] == [0, 1]
    assert all(len(x["trace"]) == 3 and x["steps_to_target"] for x in r["runs"])
    with pytest.raises(ConfigError, match="--trace-every: needs --in-process"):
        bench.config_of(parse(["seeds", "2", "--trace-every", "100"]))


def test_seeds_step_budget_is_max_steps_as_for_train_and_the_old_steps_still_works(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = bench.config_of(parse(["seeds", "2", "--max-steps", "7000", "--time-limit", "30"]))
    assert (cfg.run.max_steps, cfg.run.time_limit) == (7000, 30)
    assert "deprecated" not in capsys.readouterr().err
    cfg = bench.config_of(parse(["seeds", "2", "--steps", "5e3"]))  # a script's old spelling
    assert cfg.run.max_steps == 5000
    assert "--steps is deprecated and will go: it is --max-steps" in capsys.readouterr().err


def test_seeds_take_a_count_or_a_list() -> None:
    assert parse(["seeds", "10"]).seeds == 10
    assert parse(["seeds", "3,21,23"]).seeds == [3, 21, 23]
    with pytest.raises(SystemExit):
        parse(["seeds", "three"])


def test_stability_of_finished_runs_reads_their_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [tmp_path / f"s{i}" for i in range(2)]
    for i, r in enumerate(runs):
        write_fake_run(r, seed=i)
        (r / layout.SUMMARY).write_text(json.dumps({"env_id": "CartPole-v1", "env_steps": 5000}))
    argv = ["stability", *map(str, runs), "--learned-return", "60", "--floor", "30", "--json"]
    assert lab.run(lab_parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    # write_fake_run's 100th and last episode completes the first full window: mean 69.5.
    assert [x["seed"] for x in r["runs"]] == [0, 1]
    assert all(x["steps_to_target"] is not None and x["env_steps"] == 5000 for x in r["runs"])
    assert r["summary"]["reached"] == 2 and r["summary"]["floor"] == 30
    with pytest.raises(ConfigError, match="not a finished a3c-ray run"):
        lab.run(lab_parse(["stability", str(tmp_path / "none"), "--learned-return", "1"]))
