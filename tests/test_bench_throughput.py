"""What a bench run on Ray is measured by: the window of its counters, each Worker's time split,
and the raw limit. No speed is asserted here."""

from __future__ import annotations

import dataclasses

import pytest

from a3c_ray.algo.messages import Progress, WorkerResult
from a3c_ray.bench import throughput as bm
from a3c_ray.config import Config


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


# -- measurements without Ray -------------------------------------------------------------------
def test_raw_limit_steps_the_envs_and_reports_its_split() -> None:
    cfg = Config()
    cfg.env.num_envs = 2
    r = bm.raw_limit(cfg, seconds=0.3)
    assert r["env_steps_per_second"] > 0 and r["frames_per_second"] == r["env_steps_per_second"]
    assert 0.3 <= r["seconds"] < 5 and r["env_steps_per_cpu_second"] > 0
    for key in ("forward_us_per_batch", "sample_us_per_batch", "env_us_per_batch"):
        assert r[key] > 0


@pytest.mark.slow  # starts a process per loop, each importing torch and gymnasium
def test_raw_limit_in_parallel_runs_one_loop_per_process_at_once() -> None:
    cfg = Config()
    cfg.env.num_envs = 2
    r = bm.raw_limit_parallel(cfg, seconds=0.3, processes=2)
    assert r["processes"] == 2 and len(r["per_process"]) == 2
    assert all(x > 0 for x in r["per_process"])
    assert r["env_steps_per_second"] == pytest.approx(sum(r["per_process"]))
