"""``a3c-ray plot``: learning curves of finished runs, and the episode clock they
are drawn against."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from a3c_ray.bench.plot import episode_seconds, moving_mean
from a3c_ray.commands import plot
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout

from .bench_cli import write_fake_run


def draw(argv: list[str]) -> int:
    """``a3c-ray plot`` with ``argv``, parsed by its own parser."""
    p = argparse.ArgumentParser()
    plot.add_arguments(p)
    return plot.run(p.parse_args(argv))


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


def test_plot_runs_writes_both_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [tmp_path / f"s{i}" for i in range(3)]
    for i, r in enumerate(runs):
        write_fake_run(r, seed=i)
    out = tmp_path / "docs"
    assert draw([*map(str, runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["cartpole_v1_return_vs_seconds.png", "cartpole_v1_return_vs_steps.png"]
    assert sorted(Path(p).name for p in printed) == names
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def fake_pong_run(run: Path, seed: int = 0, slower: int = 1) -> None:
    """One tick a second at 1,000 agent steps/s; 300 games whose score climbs 1 every 10 games
    (every ``10 x slower`` games), evaluations of -15, 2 and 12 at 100k, 200k and 300k steps."""
    from tensorboardX import SummaryWriter

    from a3c_ray import metric_names as M

    w = SummaryWriter(str(run / layout.TENSORBOARD))
    for tick in range(0, 301):
        w.add_scalar(M.UPDATES_PER_SECOND, 10.0, tick * 1000, walltime=5000.0 + tick)
    for game in range(300):
        score = -21.0 + game // (10 * slower)
        w.add_scalar(M.EPISODIC_RETURN, score, 1000 * (game + 1), walltime=0)
    for at, score in ((100, -15.0), (200, 2.0), (300, 12.0)):
        w.add_scalar(M.EVAL_RETURN, score, at * 1000, walltime=5000.0 + at)
    w.close()
    (run / layout.CONFIG).write_text(f"env:\n  id: PongNoFrameskip-v4\nrun:\n  seed: {seed}\n")


def test_plot_with_levels_draws_one_run_against_frames_and_hours_with_its_evaluations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "pong"
    fake_pong_run(run)
    out = tmp_path / "docs"
    argv = [str(run), "--levels=-15,0,10,18", "--out", str(out), "--json"]
    assert draw(argv) == 0
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


def test_plot_with_levels_draws_several_seeds_in_one_chart_and_a_table_for_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [tmp_path / "pong-s0", tmp_path / "pong-s1"]
    fake_pong_run(runs[0], seed=0)
    fake_pong_run(runs[1], seed=1, slower=2)
    out = tmp_path / "docs"
    argv = [*map(str, runs), "--levels=-15,0", "--out", str(out), "--json"]
    assert draw(argv) == 0
    path, *tables = capsys.readouterr().out.splitlines()
    assert [p.name for p in out.iterdir()] == ["pongnoframeskip_v4_learning.png"]
    assert Path(path).stat().st_size > 5000
    first, second = ({row["level"]: row for row in json.loads(t)} for t in tables)
    # the same evaluations, a training mean that climbs half as fast in the second run
    assert first[-15]["eval_frames"] == second[-15]["eval_frames"] == 4 * 100_000
    assert first[-15]["train_frames"] < second[-15]["train_frames"]
    assert first[0]["train_frames"] is not None and second[0]["train_frames"] is None


def test_plot_runs_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an a3c-ray run directory"):
        draw([str(tmp_path), "--out", str(tmp_path / "o")])


def test_episode_seconds_leave_out_the_pause_between_two_sittings_of_a_resumed_run() -> None:
    """Ticks every second at 100 steps/s, then an hour's pause (the run resumed), then more."""
    first = np.arange(1, 101, dtype=float)
    steps = np.concatenate([first * 100, 10_000 + first * 100])
    walls = np.concatenate([first, 3600.0 + 100 + first])
    seconds = episode_seconds(np.array([10_000.0, 20_000.0]), steps, walls)
    assert seconds[0] == pytest.approx(100.0, abs=1.0)
    assert seconds[1] == pytest.approx(200.0, abs=2.0), "the hour between sittings is not training"


def test_plot_draws_peers_scores_as_lines_on_both_charts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import matplotlib.figure

    run = tmp_path / "pong"
    fake_pong_run(run)
    saved: list[matplotlib.figure.Figure] = []
    real_savefig = matplotlib.figure.Figure.savefig

    def keep(fig: matplotlib.figure.Figure, *a: object, **k: object) -> None:
        saved.append(fig)
        real_savefig(fig, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    refs = ["--reference", "A2C, 40M frames=15.5", "--reference", "PPO=19"]
    assert draw([str(run), "--levels=0", "--out", str(tmp_path), *refs]) == 0
    (fig,) = saved
    for ax in fig.axes:
        flat = {line.get_label(): set(line.get_ydata()) for line in ax.get_lines()}
        assert flat["A2C, 40M frames: 15.5"] == {15.5} and flat["PPO: 19"] == {19.0}


@pytest.mark.parametrize("bad", ["280", "=280", "A2C=lots"])
def test_a_reference_that_is_not_label_equals_return_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit) as e:
        draw(["run", "--levels=0", "--reference", bad])
    assert e.value.code == 2


def test_a_reference_without_levels_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--reference draws on the charts of --levels"):
        draw([str(tmp_path), "--reference", "A2C=280"])
