"""`a3c-ray bench`: its arithmetic, its plots, and short real runs. No speed is asserted here."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from a3c_ray.algo.messages import Progress, WorkerResult
from a3c_ray.bench import measure as bench_measure
from a3c_ray.bench import ps_server as pm
from a3c_ray.bench import throughput as bm
from a3c_ray.bench.plot import episode_seconds, moving_mean
from a3c_ray.commands import bench, bench_stability
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout

TINY = ["--workers", "1", "--envs-per-worker", "2", "--seconds", "1.5"]
TINY += ["--raw-seconds", "0.5", "--ps-seconds", "0.5", "--in-flight", "4"]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(argv)


def sample(t: float, steps: int, updates: int, stale: float, stop: str | None = None) -> Progress:
    zero = {f.name: 0 for f in dataclasses.fields(Progress)}
    return dataclasses.replace(
        Progress(**zero),  # type: ignore[arg-type]
        train_seconds=t,
        env_steps=steps,
        gradients_applied=updates,
        staleness_mean=stale,
        staleness_max=3,
        stop_reason=stop,
    )


# -- arithmetic ---------------------------------------------------------------------------------
def test_window_rates_count_from_the_first_snapshot_after_warmup_to_the_last_before_stop() -> None:
    samples = [
        sample(0.0, 0, 0, 0.0),
        sample(0.5, 100, 10, 0.0),
        sample(1.2, 1000, 100, 1.0),  # window start
        sample(2.2, 3000, 300, 1.5),
        sample(3.2, 5000, 500, 1.4),  # window end
        sample(3.4, 5400, 540, 1.4, stop="time_limit"),
    ]
    r = bm.window_rates(samples, warmup=1.0)
    assert r["seconds"] == pytest.approx(2.0)
    assert r["env_steps_per_second"] == pytest.approx(2000.0)
    assert r["updates_per_second"] == pytest.approx(200.0)
    # Staleness summed over the window's 400 updates: 500 * 1.4 - 100 * 1.0.
    assert r["staleness_mean"] == pytest.approx((700 - 100) / 400)


def test_window_rates_fall_back_to_the_whole_run_when_the_window_is_too_short() -> None:
    samples = [sample(0.4, 800, 20, 0.5), sample(0.6, 1200, 30, 0.5, stop="time_limit")]
    r = bm.window_rates(samples, warmup=1.0)
    assert r["env_steps_per_second"] == pytest.approx(800 / 0.4)
    assert r["updates_per_second"] == pytest.approx(20 / 0.4)


@pytest.mark.parametrize("total", [None, 10.0])
def test_worker_split_fractions_cover_the_workers_time(total: float | None) -> None:
    timings = {"env": 2.0, "forward": 1.0, "backward": 2.0, "wait": 3.0}
    if total is not None:
        timings["total"] = total
    w = bm.worker_split(
        WorkerResult(worker=1, env_steps=4000, pushes=100, timings=timings), seconds=9.0
    )
    wall = total or 9.0
    assert sum(w["split"].values()) == pytest.approx(1.0)
    assert w["split"]["wait"] == pytest.approx(3.0 / wall)
    assert w["split"]["other"] == pytest.approx(1.0 - 8.0 / wall)
    assert w["env_steps_per_second"] == pytest.approx(4000 / wall)
    assert w["busy_seconds_per_push"] == pytest.approx((wall - 3.0) / 100)


def test_bend_model_takes_the_least_of_workers_ps_and_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_measure.os, "cpu_count", lambda: 2)
    cfg = Config()
    cfg.env.num_envs, cfg.algo.t_max = 8, 5
    worker = {"pushes_per_second": 100.0, "busy_seconds_per_push": 0.004}
    training = [{"workers": 1, "per_worker": [worker]}, {"workers": 2, "per_worker": [worker] * 2}]
    m = bench_measure.bend_model(training, ps_limit=1000.0, cfg=cfg)
    cpu_limit = 2 / (0.004 + 0.001)  # 400 pushes/s
    assert m["ps_bound_workers"] == pytest.approx(10.0)
    assert m["cpu_bound_pushes_per_second"] == pytest.approx(cpu_limit)
    pred = m["predicted_env_steps_per_second"]
    assert pred["1"] == pytest.approx(100 * 40)  # Worker-bound
    assert pred["8"] == pytest.approx(cpu_limit * 40)  # CPU-bound


def test_median_run_is_one_whole_run() -> None:
    runs = [
        {"x": 3.0, "id": "a"},
        {"x": 1.0, "id": "b"},
        {"x": 2.0, "id": "c"},
        {"x": 9.0, "id": "d"},
    ]
    assert bench_measure.median_run(runs[:3], "x")["id"] == "c"
    assert bench_measure.median_run(runs, "x")["id"] == "c"  # the lower median of an even count


def test_bad_input_is_reported_all_at_once() -> None:
    args = parse(
        ["--env", "NoSuchEnv-v0", "--seconds", "0", "--repeat", "0", "--set", "algo.nope=1"]
    )
    with pytest.raises(ConfigError) as e:
        bench.bench_config(args)
    text = str(e.value)
    for part in ("NoSuchEnv-v0", "--seconds", "--repeat", "algo.nope"):
        assert part in text


def test_scaling_takes_a_list_of_worker_counts() -> None:
    assert parse(["--scaling", "1,2,4"]).scaling == [1, 2, 4]
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--scaling", "0,2"])


# -- measurements without Ray -------------------------------------------------------------------
def test_raw_limit_steps_the_envs_and_reports_its_split() -> None:
    cfg = Config()
    cfg.env.num_envs = 2
    r = bm.raw_limit(cfg, seconds=0.3)
    assert r["env_steps_per_second"] > 0 and r["frames_per_second"] == r["env_steps_per_second"]
    assert 0.3 <= r["seconds"] < 5 and r["env_steps_per_cpu_second"] > 0
    for key in ("forward_us_per_batch", "sample_us_per_batch", "env_us_per_batch"):
        assert r[key] > 0


def test_parameter_server_in_process_applies_gradients() -> None:
    r = pm.ps_in_process(Config(), seconds=0.2)
    assert r["applications_per_second"] > 0
    assert r["us_per_application"] == pytest.approx(1e6 / r["applications_per_second"])


# -- learning curves ----------------------------------------------------------------------------
def test_the_synthetic_pushes_carry_the_norm_of_their_whole_gradient() -> None:
    """As a Worker's router sends them: every shard then clips by the whole gradient's norm."""
    for p in pm._pushes(Config(), 5_000):
        assert p.norm == pytest.approx(float(np.linalg.norm(p.grad)), rel=1e-5)


def test_moving_mean_is_over_the_last_100_episodes() -> None:
    values = np.arange(1, 201, dtype=float)
    m = moving_mean(values)
    assert m[0] == 1.0 and m[99] == pytest.approx(50.5)
    assert m[199] == pytest.approx(np.mean(values[100:]))


def test_episode_seconds_interpolate_the_ticks_and_skip_startup_and_final_ticks() -> None:
    # Ticks: one at start-up (step 0), three while training at 1,000 steps/s, one after the stop.
    tick_steps = np.array([0, 1000, 2000, 3000, 3000])
    tick_walls = np.array([100.0, 103.0, 104.0, 105.0, 109.0])
    secs = episode_seconds(np.array([500.0, 1500.0, 3000.0]), tick_steps, tick_walls)
    assert secs == pytest.approx([0.5, 1.5, 3.0])


def write_fake_run(run_dir: Path, seed: int) -> None:
    from tensorboardX import SummaryWriter

    from a3c_ray import metric_names as M

    w = SummaryWriter(str(run_dir / layout.TENSORBOARD))
    for tick in range(1, 6):
        step = tick * 1000
        w.add_scalar(M.UPDATES_PER_SECOND, 25.0, step, walltime=1000.0 + tick)
        for i in range(20):
            w.add_scalar(M.EPISODIC_RETURN, 20.0 * tick + i, step - 50 * i, walltime=1000.0 + tick)
    w.close()
    (run_dir / layout.CONFIG).write_text(f"run:\n  seed: {seed}\n")
    summary = {"env_id": "CartPole-v1", "target_return": 450, "steps_to_target": None}
    (run_dir / layout.SUMMARY).write_text(json.dumps(summary))


def test_plot_runs_writes_both_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [tmp_path / f"s{i}" for i in range(3)]
    for i, r in enumerate(runs):
        write_fake_run(r, seed=i)
    out = tmp_path / "docs"
    assert bench.run(parse(["--plot-runs", *map(str, runs), "--out", str(out)])) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cartpole_v1_return_vs_seconds.png", "cartpole_v1_return_vs_steps.png"]
    assert sorted(Path(p).name for p in printed) == names
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_plot_with_levels_draws_one_run_against_frames_and_hours_with_its_evaluations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorboardX import SummaryWriter

    from a3c_ray import metric_names as M

    run = tmp_path / "pong"
    w = SummaryWriter(str(run / layout.TENSORBOARD))
    # One tick a second at 1,000 agent steps/s; 300 games whose score climbs 1 every 10 games.
    for tick in range(0, 301):
        w.add_scalar(M.UPDATES_PER_SECOND, 10.0, tick * 1000, walltime=5000.0 + tick)
    for game in range(300):
        w.add_scalar(M.EPISODIC_RETURN, -21.0 + game // 10, 1000 * (game + 1), walltime=0)
    for at, score in ((100, -15.0), (200, 2.0), (300, 12.0)):
        w.add_scalar(M.EVAL_RETURN, score, at * 1000, walltime=5000.0 + at)
    w.close()
    (run / layout.CONFIG).write_text("env:\n  id: PongNoFrameskip-v4\nrun:\n  seed: 0\n")
    out = tmp_path / "docs"
    argv = ["--plot-runs", str(run), "--levels=-15,0,10,18", "--out", str(out), "--json"]
    assert bench.run(parse(argv)) == 0
    path, rows = capsys.readouterr().out.splitlines()
    assert Path(path) == out / "pongnoframeskip_v4_learning.png"
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = {row["level"]: row for row in json.loads(rows)}
    # Training: the first game (from the 100th on) whose mean of the last 100 is -15 or more.
    means = moving_mean(np.array([-21.0 + g // 10 for g in range(300)]))
    first = 99 + int(np.flatnonzero(means[99:] >= -15)[0])
    assert r[-15]["train_frames"] == 4 * 1000 * (first + 1)
    assert r[-15]["train_hours"] == pytest.approx((first + 1) / 3600, rel=0.02)
    assert r[-15]["eval_frames"] == 4 * 100_000 and r[0]["eval_frames"] == 4 * 200_000
    assert r[10]["eval_frames"] == 4 * 300_000 and r[10]["train_frames"] is None
    assert r[18]["eval_frames"] is None and r[18]["eval_hours"] is None


def test_plot_runs_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an a3c-ray run directory"):
        bench.run(parse(["--plot-runs", str(tmp_path), "--out", str(tmp_path / "o")]))


# -- real runs on Ray ---------------------------------------------------------------------------
def numbers(line: str) -> list[float]:
    return [float(x.replace(",", "")) for x in line.replace("/", " ").split() if _num(x)]


def _num(x: str) -> bool:
    try:
        float(x.replace(",", ""))
    except ValueError:
        return False
    return True


@pytest.mark.ray
def test_bench_prints_sane_numbers_and_keeps_the_callers_ray(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    assert bench.run(parse(TINY)) == 0
    assert ray.is_initialized()  # the bench used this Ray and did not shut it down
    out = capsys.readouterr().out
    lines = out.splitlines()
    raw = next(line for line in lines if line.startswith("raw limit"))
    assert numbers(raw.split("env steps/s")[0])[-1] > 0
    row = lines[lines.index(next(x for x in lines if x.startswith("workers  env steps/s"))) + 1]
    workers, steps, updates, stale_mean, stale_max, ratio, ratio_cpu = numbers(row)
    assert workers == 1 and steps > 0 and updates > 0 and stale_mean >= 0 and stale_max >= 0
    assert 0 < ratio < 10 and 0 < ratio_cpu < 10
    assert math.isclose(steps / updates, 2 * Config().algo.t_max, rel_tol=0.2)
    final = lines[-1]
    assert final.startswith("ratio:") and numbers(final)[0] == pytest.approx(ratio, abs=0.01)


@pytest.mark.ray
def test_bench_json_parses_with_every_figure(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.run(parse([*TINY, "--json"])) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r) >= {"machine", "settings", "raw", "ps", "training", "ratio", "model"}
    assert r["settings"]["steps_per_push"] == 2 * r["settings"]["t_max"]
    assert r["raw"]["env_steps_per_second"] > 0 and len(r["raw"]["runs"]) == 1
    assert r["raw"]["env_steps_per_cpu_second"] > 0
    ps = r["ps"]
    assert ps["params"] == 4675  # CartPole's 64x64 MLP
    for key in (
        "in_process_applications_per_second",
        "actor_round_trips_per_second",
        "actor_applications_per_second",
    ):
        assert ps[key] > 0
    (t,) = r["training"]
    assert t["workers"] == 1 and t["env_steps_per_second"] > 0 and t["updates_per_second"] > 0
    assert 0 < t["seconds"] <= 2.5  # the window after the warm-up, or the whole run if too short
    assert t["ratio"] == pytest.approx(t["env_steps_per_second"] / r["raw"]["env_steps_per_second"])
    assert r["ratio"] == t["ratio"] and t["staleness_mean"] >= 0 and t["staleness_max"] >= 0
    (w,) = t["per_worker"]
    assert set(w["split"]) == {"env", "forward", "backward", "push", "wait", "pull", "other"}
    assert all(v >= 0 for v in w["split"].values())
    assert sum(w["split"].values()) == pytest.approx(1.0)
    m = r["model"]
    assert m["ps_bound_workers"] > 0 and m["cpu_bound_pushes_per_second"] > 0
    assert m["predicted_env_steps_per_second"]["1"] > 0


@pytest.mark.ray
def test_ps_scale_measures_every_shard_count_wire_and_load(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every transport and shard layout, one wire and one depth: each row starts its own actors
    # (and graphs), so the grid's size is the test's time; other wires and depths parse below.
    argv = ["--ps-scale", "--shards", "1,2", "--wire", "bfloat16"]
    argv += ["--pushes-in-flight", "4", "--ps-seconds", "0.3", "--seconds", "1", "--json"]
    assert bench.run(parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["params"] == 4675 and r["worker_pushes_per_second"] > 0
    keys = sorted(
        (row["transport"], row["shards"], row["alone"], row["wire_dtype"], row["in_flight"])
        for row in r["rows"]
    )
    assert keys == sorted(
        (t, s, alone, w, f)
        for t in ("call", "graph")
        for s, alone in ((1, False), (2, False), (2, True))  # one shard alone: S > 1 only
        for w in ("bfloat16",)
        for f in (4,)
    )
    for row in r["rows"]:
        assert row["applications_per_second"] > 0 and len(row["runs"]) == 1
        assert 0 < row["latency_ms_median"] <= row["latency_ms_p90"]
        assert row["ps_cpu_us_per_application"] > 0
        assert row["workers_before_saturation"] == pytest.approx(
            row["applications_per_second"] / r["worker_pushes_per_second"]
        )
        assert row["clients"] == min(2, row["in_flight"])
    here = [x["applications_per_second"] for x in r["rows"] if not x["alone"]]
    assert r["best_applications_per_second"] == max(here)
    assert r["best_on_own_nodes_applications_per_second"] == max(
        x["applications_per_second"] for x in r["rows"]
    )


def test_ps_scale_refuses_unknown_wire_dtypes_and_zero_counts() -> None:
    with pytest.raises(SystemExit):
        parse(["--ps-scale", "--wire", "float8"])
    with pytest.raises(SystemExit):
        parse(["--ps-scale", "--shards", "0,2"])
    with pytest.raises(SystemExit):
        parse(["--ps-scale", "--transport", "grpc"])


def test_raw_limit_in_parallel_runs_one_loop_per_process_at_once() -> None:
    cfg = Config()
    cfg.env.num_envs = 2
    r = bm.raw_limit_parallel(cfg, seconds=0.3, processes=2)
    assert r["processes"] == 2 and len(r["per_process"]) == 2
    assert all(x > 0 for x in r["per_process"])
    assert r["env_steps_per_second"] == pytest.approx(sum(r["per_process"]))


def test_report_shows_the_parallel_raw_limit_against_one_process() -> None:
    from a3c_ray.bench.report import _parallel_line

    assert _parallel_line({"env_steps_per_second": 100.0}) == []
    (line,) = _parallel_line(
        {
            "env_steps_per_second": 100.0,
            "parallel": {"processes": 2, "env_steps_per_second": 150.0, "per_process": [75, 75]},
        }
    )
    assert (
        line
        == "raw limit, 2 processes at once: 150 env steps/s in all, each 0.75 x one process alone"
    )


# -- stability (--seeds) ------------------------------------------------------------------------
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
    argv = ["--seeds", "0", "--first-seed", "-1", "--runs-dir", str(tmp_path / "old")]
    with pytest.raises(ConfigError) as e:
        bench.bench_config(parse(argv))
    text = str(e.value)
    assert "--seeds: must be >= 1" in text and "--first-seed: must be >= 0" in text
    assert "is not empty" in text
    assert (tmp_path / "old" / "x").read_text() == "keep me"
    # Blackjack-v1's spec has no reward threshold, and the defaults set no target.
    with pytest.raises(ConfigError, match="--seeds needs --target-return"):
        bench.bench_config(parse(["--seeds", "2", "--env", "Blackjack-v1"]))


def test_stability_target_falls_back_to_the_envs_reward_threshold() -> None:
    args = parse(["--seeds", "2"])
    assert bench_stability.stability_target(Config(), args) == 475.0  # CartPole-v1's spec
    cfg = Config()
    cfg.run.target_return = 450
    assert bench_stability.stability_target(cfg, args) == 450
    assert (
        bench_stability.stability_target(cfg, parse(["--seeds", "2", "--target-return", "200"]))
        == 200
    )


@pytest.mark.ray
def test_bench_seeds_trains_each_seed_without_stopping_at_the_target(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tiny seeds run to their step budget (a target of 20 is reached early and must not
    stop them), each read back from its own TensorBoard episodes."""
    runs = tmp_path / "runs"
    argv = [
        "--seeds",
        "2",
        "--first-seed",
        "5",
        "--steps",
        "6000",
        "--target-return",
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


def test_bench_seeds_in_process_reports_each_seed_with_its_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--seeds", "2", "--steps", "3000", "--in-process", "--trace-every", "1000",
            "--target-return", "15", "--workers", "2", "--envs-per-worker", "4", "--json"]  # fmt: skip
    assert bench.run(parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["settings"]["in_process"] and [x["seed"] for x in r["runs"]] == [0, 1]
    assert all(len(x["trace"]) == 3 and x["steps_to_target"] for x in r["runs"])
    with pytest.raises(ConfigError, match="--trace-every: needs --in-process"):
        bench.bench_config(parse(["--seeds", "2", "--trace-every", "100"]))


def test_seeds_take_a_count_or_a_list() -> None:
    assert parse(["--seeds", "10"]).seeds == 10
    assert parse(["--seeds", "3,21,23"]).seeds == [3, 21, 23]
    with pytest.raises(SystemExit):
        parse(["--seeds", "three"])


def test_stability_of_finished_runs_reads_their_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [tmp_path / f"s{i}" for i in range(2)]
    for i, r in enumerate(runs):
        write_fake_run(r, seed=i)
        (r / layout.SUMMARY).write_text(json.dumps({"env_id": "CartPole-v1", "env_steps": 5000}))
    argv = ["--stability-of", *map(str, runs), "--target-return", "60", "--floor", "30", "--json"]
    assert bench.run(parse(argv)) == 0
    r = json.loads(capsys.readouterr().out)
    # write_fake_run's 100th and last episode completes the first full window: mean 69.5.
    assert [x["seed"] for x in r["runs"]] == [0, 1]
    assert all(x["steps_to_target"] is not None and x["env_steps"] == 5000 for x in r["runs"])
    assert r["summary"]["reached"] == 2 and r["summary"]["floor"] == 30
    with pytest.raises(ConfigError, match="not a finished a3c-ray run"):
        bench.run(parse(["--stability-of", str(tmp_path / "none"), "--target-return", "1"]))


def test_episode_seconds_leave_out_the_pause_between_two_sittings_of_a_resumed_run() -> None:
    """Ticks every second at 100 steps/s, then an hour's pause (the run resumed), then more."""
    first = np.arange(1, 101, dtype=float)
    steps = np.concatenate([first * 100, 10_000 + first * 100])
    walls = np.concatenate([first, 3600.0 + 100 + first])
    seconds = episode_seconds(np.array([10_000.0, 20_000.0]), steps, walls)
    assert seconds[0] == pytest.approx(100.0, abs=1.0)
    assert seconds[1] == pytest.approx(200.0, abs=2.0), "the hour between sittings is not training"
