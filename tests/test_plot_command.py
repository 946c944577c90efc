"""``a3c-ray plot RUN_DIR...``: the learning curves of runs, as its own command (``bench
--plot-runs`` still draws the same, saying it moved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from a3c_ray.commands.cli import main

from .bench_cli import write_fake_run
from .test_bench_plot import fake_pong_run

PNG = b"\x89PNG\r\n\x1a\n"


def test_plot_draws_runs_into_the_out_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [tmp_path / f"s{i}" for i in range(2)]
    for i, r in enumerate(runs):
        write_fake_run(r, seed=i)
    out = tmp_path / "charts"
    assert main(["plot", *map(str, runs), "--out", str(out)]) == 0
    printed = sorted(Path(p).name for p in capsys.readouterr().out.split())
    names = sorted(p.name for p in out.iterdir())
    assert (
        names == printed == ["cartpole_v1_return_vs_seconds.png", "cartpole_v1_return_vs_steps.png"]
    )
    assert all((out / n).read_bytes()[:8] == PNG for n in names)


def test_plot_with_levels_prints_when_each_run_reached_them_and_bench_plot_runs_points_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "pong"
    fake_pong_run(run)
    assert main(["plot", str(run), "--levels=-15,0", "--out", str(tmp_path / "a"), "--json"]) == 0
    path, rows = capsys.readouterr().out.splitlines()
    assert Path(path) == tmp_path / "a" / "pongnoframeskip_v4_learning.png"
    assert [r["level"] for r in json.loads(rows)] == [-15, 0]
    assert json.loads(rows)[0]["eval_frames"] == 4 * 100_000  # Atari: frames, 4 per agent step

    argv = [
        "bench",
        "--plot-runs",
        str(run),
        "--levels=-15,0",
        "--out",
        str(tmp_path / "b"),
        "--json",
    ]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert not captured.out and not (tmp_path / "b").exists()
    assert "is now its own command: a3c-ray plot RUN_DIR" in captured.err


def test_plot_of_a_directory_that_is_not_a_run_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not an a3c-ray run directory" in err, err
    assert main(["plot"]) == 2
    assert "RUN_DIR" in capsys.readouterr().err
