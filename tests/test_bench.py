"""`a3c-ray bench`'s command and its one measure: flags, the report's arithmetic, and short real
runs. No speed is asserted here."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from a3c_ray.bench import measure as bench_measure
from a3c_ray.commands import bench
from a3c_ray.config import Config
from a3c_ray.errors import ConfigError

from .bench_cli import TINY, parse


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
        [
            "throughput",
            "--env",
            "NoSuchEnv-v0",
            "--seconds",
            "0",
            "--repeat",
            "0",
            "--set",
            "algo.nope=1",
        ]
    )
    with pytest.raises(ConfigError) as e:
        bench.config_of(args)
    text = str(e.value)
    for part in ("NoSuchEnv-v0", "--seconds", "--repeat", "algo.nope"):
        assert part in text


def test_atari_figures_refuse_an_env_that_is_not_atari_before_any_ray() -> None:
    args = parse(["atari", "--env", "CartPole-v1"])
    with pytest.raises(ConfigError, match="bench atari: CartPole-v1 is not an Atari env"):
        bench.atari(bench.config_of(args), args)
    args = parse(["atari", "--config", "pong", "--cost-seconds", "-1"])
    with pytest.raises(ConfigError, match="--cost-seconds: must be >= 0"):
        bench.atari(bench.config_of(args), args)


def test_atari_report_names_each_figure() -> None:
    from a3c_ray.bench.report import format_atari

    r = {
        "env_id": "ALE/Pong-v5", "workers": 2, "num_envs": 8, "lstm": False,
        "raw_ale_fps": 12000.0, "env_fps": 9000.0, "train_fps": 1500.0,
        "train_steps_per_second": 375.0, "train_seconds": 60.0, "gradient_updates": 2800,
        "ratio": 0.125, "ratio_per_worker": 0.0625,
        "costs": {"worker_ms_per_step": 1.37, "worker_fps": 2920.0, "ps_ms_per_push": 5.65,
                  "ps_bound_fps": 28300.0},
    }  # fmt: skip
    text = format_atari(r)
    for part in ("2 Workers of 8 envs", "training / raw:        0.125", "1.37 ms", "5.65 ms"):
        assert part in text, part
    assert "Worker CPU" not in format_atari({**r, "costs": None})


def test_scaling_takes_a_list_of_worker_counts() -> None:
    assert parse(["throughput", "--scaling", "1,2,4"]).scaling == [1, 2, 4]
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["throughput", "--scaling", "0,2"])


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
@pytest.mark.long
def test_bench_json_has_every_figure_and_the_text_report_prints_them_keeping_the_callers_ray(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """One short real run: its JSON figures, then the text report the command prints of them."""
    import ray

    from a3c_ray.bench.report import format_report

    assert bench.run(parse([*TINY, "--json"])) == 0
    assert ray.is_initialized()  # the bench used this Ray and did not shut it down
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

    # What the command prints without --json is this report of the same figures.
    lines = format_report(r).splitlines()
    raw = next(line for line in lines if line.startswith("raw limit"))
    assert numbers(raw.split("env steps/s")[0])[-1] == pytest.approx(
        r["raw"]["env_steps_per_second"], rel=0.01, abs=1
    )
    row = lines[lines.index(next(x for x in lines if x.startswith("workers  env steps/s"))) + 1]
    workers, steps, updates, stale_mean, stale_max, ratio, ratio_cpu = numbers(row)
    assert workers == 1 and steps > 0 and updates > 0 and stale_mean >= 0 and stale_max >= 0
    assert 0 < ratio < 10 and 0 < ratio_cpu < 10
    assert math.isclose(steps / updates, 2 * Config().algo.t_max, rel_tol=0.2)
    final = lines[-1]
    assert final.startswith("ratio:") and numbers(final)[0] == pytest.approx(ratio, abs=0.01)


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


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "seeds", "2", "--serve"],
        ["bench", "throughput", "--chaos"],
        ["bench", "atari", "--seeds", "2"],
        ["bench", "serve", "seeds"],
        ["bench"],
    ],
)
def test_one_measurement_per_run_two_at_once_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from a3c_ray.commands.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "a3c-ray: error:" in err and "Traceback" not in err, err


def test_each_measurement_has_only_its_own_flags_and_shows_their_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from a3c_ray.bench.measure import Times
    from a3c_ray.commands.cli import main
    from lab import cli as lab

    helps = {}
    for name in bench.MEASURES:
        with pytest.raises(SystemExit) as done:
            main(["bench", name, "--help"])
        assert done.value.code == 0
        helps[name] = " ".join(capsys.readouterr().out.split())
    for name in lab.MEASURES:  # the checkout's own measurements: python -m lab MEASURE
        with pytest.raises(SystemExit) as done:
            lab.main([name, "--help"])
        assert done.value.code == 0
        helps[name] = " ".join(capsys.readouterr().out.split())
    assert (
        f"--raw-seconds RAW_SECONDS seconds of the raw limit (default {Times.raw_seconds:g})"
        in (helps["throughput"])
    )
    assert f"(default {Config().env.num_envs})" in helps["throughput"]
    assert "--raw-seconds" not in helps["profile"] and "--scaling" not in helps["seeds"]
    assert "--shards" in helps["ps"] and "--shards" not in helps["throughput"]
    assert "--models" in helps["serve"] and "--config" not in helps["serve"]
    assert "--worker-every" in helps["chaos"] and "--address" not in helps["chaos"]
    assert "RUN_DIR" in helps["stability"] and "--workers" not in helps["stability"]


@pytest.mark.parametrize("measure", ["chaos", "ps", "stability"])
def test_the_labs_measurements_are_not_the_packages_and_say_where_they_went(
    measure: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from a3c_ray.commands.cli import main

    assert main(["bench", measure, "--seconds", "5"]) == 2
    err = capsys.readouterr().err
    assert f"python -m lab {measure} with the same flags" in err and "Traceback" not in err, err
    assert measure not in bench.MEASURES
