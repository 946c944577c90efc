"""a3c-ray from Python: ``a3c_ray.train`` from a thread other than the main one, to a CartPole
target, its policy loaded and evaluated as ``a3c-ray eval`` does; callbacks that see progress and
evaluations and stop the run; Ctrl-C in the main thread; bad input as a one-line ValueError."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import a3c_ray
from a3c_ray.commands.cli import main
from a3c_ray.rundir import layout
from a3c_ray.rundir.summary import RunSummary, Summary

SMALL = {"monitor.eval_every": 1.0, "monitor.eval_episodes": 2, "env.num_envs": 4}
"""Evaluations every second, of 2 episodes: a short run still sees several."""


# -- bad input: one line, a ValueError, nothing started or written ----------------------------------
@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"overrides": {"algo.lr": -1.0}}, "algo.lr"),
        ({"overrides": {"algo.bogus": 1}}, "unknown config field 'algo.bogus'"),
        ({"overrides": ["algo.lr=1"]}, "overrides: expected a mapping"),
        ({"config": 3}, "config: expected a name"),
        ({"config": "no_such_config"}, "cannot read config file no_such_config"),
        ({"env": "NoSuchEnv-v0"}, "NoSuchEnv-v0"),
        ({"track": "tensorboard"}, "track: expected one of mlflow, wandb"),
        ({"callbacks": [3]}, "callbacks: not callable"),
        ({"workers": 0}, "run.workers"),
        ({"resume": 5}, "resume: expected a run directory"),
        ({"resume": "/nonexistent/run"}, "cannot resume /nonexistent/run: no config.yaml"),
    ],
)
def test_bad_input_raises_a_one_line_value_error_and_starts_nothing(
    tmp_path: Path, kwargs: dict[str, Any], says: str
) -> None:
    import ray

    run_dir = tmp_path / "run"
    args: dict[str, Any] = {"env": "CartPole-v1", "run_dir": run_dir, "progress": False, **kwargs}
    with pytest.raises(ValueError) as caught:
        a3c_ray.train(**args)
    message = str(caught.value)
    assert says in message and "\n" not in message, message
    assert not isinstance(caught.value, SystemExit)
    assert not run_dir.exists() and not ray.is_initialized()


def test_evaluate_refuses_bad_input_with_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="episodes: must be an integer >= 1"):
        a3c_ray.evaluate(tmp_path, episodes=0)
    with pytest.raises(ValueError, match="no checkpoint found"):
        a3c_ray.evaluate(tmp_path)


def test_the_typed_summary_has_every_key_of_summary_json() -> None:
    fields = {f.name for f in dataclasses.fields(Summary)}
    assert fields == set(RunSummary.__annotations__) | {"best_checkpoint"}
    s = Summary.of(RunSummary(env_id="CartPole-v1", run_dir="r", errors=["x"], bogus=1))  # type: ignore[typeddict-unknown-key]
    assert (s.env_id, s.run_dir, s.errors, s.env_steps, s.stopped_because) == (
        "CartPole-v1",
        "r",
        ["x"],
        0,
        None,
    )


def progress_at(env_steps: int) -> a3c_ray.Progress:
    return a3c_ray.Progress(
        env_steps,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        None,
        {},
        None,
        0,
        float("nan"),
        0.0,
        0,
        0.0,
        None,
        None,
        None,
    )


def test_callbacks_stop_on_false_or_stop_training_and_keep_what_else_was_raised() -> None:
    from a3c_ray.runtime.callbacks import Callbacks

    calls: list[int] = []

    def counting(p: a3c_ray.Progress, e: a3c_ray.Evaluation | None) -> None:
        calls.append(p.env_steps)

    def stop_at(n: int, how: str) -> Any:
        def callback(p: a3c_ray.Progress, e: a3c_ray.Evaluation | None) -> bool | None:
            if p.env_steps < n:
                return None
            if how == "raise":
                raise a3c_ray.StopTraining
            if how == "bug":
                raise KeyError("oops")
            return False

        return callback

    for how in ("false", "raise", "bug"):
        calls.clear()
        cbs = Callbacks([counting, stop_at(10, how)])
        assert not cbs(progress_at(5), None) and calls == [5]
        assert cbs(progress_at(10), None) and calls == [5, 10]  # asks for the stop once
        assert not cbs(progress_at(11), None) and calls == [5, 10]
        assert (cbs.error is None) == (how != "bug")
    assert isinstance(cbs.error, KeyError)
    going_on = Callbacks([lambda p, e: True, lambda p, e: 0, lambda p, e: None])
    assert not going_on(progress_at(5), None)  # only False stops


def test_import_a3c_ray_stays_free_of_ray_and_torch() -> None:
    import subprocess
    import sys

    code = "import sys, a3c_ray; print('ray' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -- runs on Ray ------------------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.slow
def test_train_from_a_thread_reaches_a_cartpole_target_and_its_policy_loads_and_plays(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "cp"
    seen: list[tuple[a3c_ray.Progress, a3c_ray.Evaluation | None]] = []
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["summary"] = a3c_ray.train(
                env="CartPole-v1",
                target_return=150,
                max_steps=300_000,
                workers=2,
                seed=1,
                run_dir=run_dir,
                overrides=SMALL,
                progress=False,
                callbacks=[lambda p, e: seen.append((p, e))],
            )
        except BaseException as e:  # reported by the test, in the main thread
            out["error"] = e

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=400)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    s: Summary = out["summary"]
    assert isinstance(s, Summary)
    assert s.stopped_because == "target" and s.mean_return_100 is not None, s
    assert s.mean_return_100 >= 150 and s.steps_to_target is not None
    assert s.run_dir == str(run_dir) and s.errors == []
    assert json.loads((run_dir / layout.SUMMARY).read_text())["stopped_because"] == "target"
    assert s.best_checkpoint is not None and Path(s.best_checkpoint).is_file()
    assert Path(s.best_checkpoint).name == (run_dir / "checkpoints/best").read_text().strip()

    # The callbacks saw the counters grow and the Monitor's evaluations as they came.
    steps = [p.env_steps for p, _ in seen]
    assert len(steps) > 5 and steps == sorted(steps) and steps[-1] >= s.env_steps * 0.9
    evaluations = [e for _, e in seen if e is not None]
    assert len(evaluations) >= 2
    assert [e.number for e in evaluations] == sorted({e.number for e in evaluations})
    last = evaluations[-1]
    assert last.mean_return == s.last_eval_return and last.checkpoint == s.checkpoint

    # The policy loads without Ray and acts on a batch of observations.
    policy = a3c_ray.load_policy(s.best_checkpoint)
    acted = policy.act(np.zeros((3, 4), dtype=np.float32), greedy=True)
    assert acted.actions.shape == (3,) and set(acted.actions.tolist()) <= {0, 1}

    # evaluate gives what `a3c-ray eval` gives, with each episode's length.
    res = a3c_ray.evaluate(run_dir, episodes=3, seed=5)
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "3", "--seed", "5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert res.returns == cli["returns"] and res.mean_return == cli["mean_return"]
    assert len(res.lengths) == 3 and res.checkpoint == s.best_checkpoint
    assert res.mean_length == pytest.approx(np.mean(res.lengths))


@pytest.mark.ray
@pytest.mark.long
def test_a_callback_returning_false_stops_the_run_cleanly_and_says_so(
    ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "cb"
    s = a3c_ray.train(
        env="CartPole-v1",
        workers=1,
        max_steps=10**7,
        run_dir=run_dir,
        overrides=SMALL,
        progress=False,
        callbacks=lambda p, e: p.env_steps < 3000,
    )
    assert s.stopped_because == "callback", s
    assert 3000 <= s.env_steps < 100_000 and s.errors == []
    assert json.loads((run_dir / layout.SUMMARY).read_text())["stopped_because"] == "callback"
    # Stopped as a target stops a run: a final evaluation, then its checkpoint.
    assert s.last_eval_return is not None and s.checkpoint is not None
    assert Path(s.checkpoint).is_file()


@pytest.mark.ray
@pytest.mark.long
def test_a_callback_that_raises_ends_the_run_whole_then_train_raises_it_again(
    ray_session: None, tmp_path: Path
) -> None:
    class Mine(Exception):
        pass

    def broken(p: a3c_ray.Progress, e: a3c_ray.Evaluation | None) -> None:
        if p.env_steps >= 2000:
            raise Mine("my bug")

    with pytest.raises(Mine, match="my bug"):
        a3c_ray.train(
            env="CartPole-v1", workers=1, run_dir=tmp_path / "b", progress=False, callbacks=broken
        )
    summary = json.loads((tmp_path / "b" / layout.SUMMARY).read_text())
    assert summary["stopped_because"] == "error"
    assert "a callback raised Mine: my bug" in summary["errors"], summary["errors"]
    assert summary["checkpoint"] is not None and Path(summary["checkpoint"]).is_file()


@pytest.mark.ray
@pytest.mark.long
def test_ctrl_c_in_the_main_thread_ends_the_run_with_a_checkpoint_and_returns_its_summary(
    ray_session: None, tmp_path: Path
) -> None:
    assert threading.current_thread() is threading.main_thread()
    sent: list[int] = []

    def interrupt(p: a3c_ray.Progress, e: a3c_ray.Evaluation | None) -> None:
        if p.env_steps >= 2000 and not sent:
            sent.append(p.env_steps)
            os.kill(os.getpid(), signal.SIGINT)  # what a notebook's interrupt button sends

    s = a3c_ray.train(
        env="CartPole-v1",
        workers=1,
        run_dir=tmp_path / "i",
        progress=False,
        callbacks=[interrupt],
    )
    assert sent and s.stopped_because == "interrupted", s
    assert s.checkpoint is not None and Path(s.checkpoint).is_file()
    assert json.loads((tmp_path / "i" / layout.SUMMARY).read_text())["stopped_because"] == (
        "interrupted"
    )
