"""Fault injection on a real local Ray: each run reaches its end and loses at most what is stated.

Each run ends once training has gone on ``AFTER_RECOVERY`` env steps past its recovery from the
fault, as its step budget would end it; ``run.max_steps`` is only the bound of a run whose test
never got that far."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from a3c_ray.config import Config
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_checkpoint
from a3c_ray.rundir.summary import RunSummary
from a3c_ray.runtime.session import train

from .conftest import (
    AFTER_RECOVERY,
    named_actor,
    progress,
    small_config,
    train_on_then_stop,
    wait_for,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


class InBackground:
    """``fn`` run in a thread; ``check`` waits for it to end and says whether it did its part."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.errors: list[BaseException] = []

        def target() -> None:
            try:
                fn()
            except BaseException as e:
                self.errors.append(e)

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def check(self) -> None:
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the fault was never injected"
        assert not self.errors, self.errors


def trains_to_max_steps_despite(cfg: Config, fault: Callable[[], None]) -> RunSummary:
    """Train with ``fault`` injected from a thread; the run must end at max_steps, exit 0."""
    fault_thread = InBackground(fault)
    result = train(cfg)
    fault_thread.check()
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    return s


@pytest.mark.long
def test_killed_worker_is_restarted_and_only_its_rollout_is_lost(
    ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "killworker"
    cfg = small_config(run_dir, run__max_steps=40_000, run__restart_backoff=0.1)
    seen: dict[str, int] = {}

    def kill() -> None:
        wait_for(lambda: progress(run_dir).env_steps > 5_000, what="training to start")
        ray.kill(named_actor("Worker-1", run_dir), no_restart=False)
        wait_for(lambda: progress(run_dir).worker_restarts >= 1, what="the restart")
        pushed = progress(run_dir).worker_steps.get(1, 0)
        wait_for(lambda: progress(run_dir).worker_steps.get(1, 0) > pushed, what="a push")
        seen["recovered"] = train_on_then_stop(run_dir)

    s = trains_to_max_steps_despite(cfg, kill)
    assert s["worker_restarts"] == 1 and any("worker 1" in f for f in s["failures"])
    assert s["env_steps"] >= seen["recovered"] + AFTER_RECOVERY and s["ps_restarts"] == 0


@pytest.mark.long
@pytest.mark.parametrize(
    "healthy_after, wait",
    [(1.0, 1.5), (3600.0, 1.0)],
    ids=["ran-healthy_after", "trained"],
)
def test_a_worker_lost_now_and_then_is_restarted_more_often_than_max_worker_restarts(
    ray_session: None, tmp_path: Path, healthy_after: float, wait: float
) -> None:
    """A long run loses Workers now and then (a node drained or preempted, a process killed): a
    Worker that ran for run.healthy_after seconds, or trained, before it died starts its slot's
    count afresh, so three such losses of one slot do not stop a run that allows one restart of a
    failing Worker. With healthy_after an hour, each Worker is killed a second after its slot's
    env steps grew, which the driver sees within its quarter-second poll."""
    run_dir = tmp_path / "nowandthen"
    cfg = small_config(
        run_dir,
        run__max_steps=10**9,
        run__time_limit=300,
        run__max_worker_restarts=1,
        run__restart_backoff=0.1,
        run__healthy_after=healthy_after,
    )

    def pushing(slot: int) -> None:
        steps = progress(run_dir).worker_steps.get(slot, 0)
        wait_for(lambda: progress(run_dir).worker_steps.get(slot, 0) > steps, what="a push")

    def kill_three_times_then_stop() -> None:
        for k in range(3):
            pushing(1)  # the Worker of the last restart trains
            time.sleep(wait)
            ray.kill(named_actor("Worker-1", run_dir), no_restart=False)
            wait_for(lambda k=k: progress(run_dir).worker_restarts > k, what="the restart")
        pushing(1)
        # The run ends as its step budget would.
        ray.get(named_actor("ParameterServer", run_dir).request_stop.remote("max_steps"))  # type: ignore[attr-defined]

    fault = InBackground(kill_three_times_then_stop)
    result = train(cfg)
    fault.check()
    s = result.summary
    assert result.exit_code == 0 and s["stopped_because"] == "max_steps", s
    assert s["worker_restarts"] == 3 and not result.errors, s


@pytest.mark.long
def test_killed_parameter_server_comes_back_from_the_latest_checkpoint(
    ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "killps"
    cfg = small_config(run_dir, run__max_steps=60_000, monitor__eval_every=0.5)
    seen: dict[str, int] = {}

    def kill() -> None:
        wait_for(
            lambda: len(list_checkpoints(run_dir / layout.CHECKPOINTS)) >= 2, what="two checkpoints"
        )
        before = progress(run_dir)
        seen["steps_before"] = before.env_steps
        seen["ckpt_steps"] = int(
            load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)["env_steps"]
        )
        ray.kill(named_actor("ParameterServer", run_dir), no_restart=False)
        # ray.kill is asynchronous: a call right after it may still reach the old instance, so
        # wait until the restarted server answers.
        wait_for(lambda: progress(run_dir).ps_restarts >= 1, what="the restarted server")
        after = progress(run_dir)
        seen["steps_after"] = after.env_steps
        seen["restarts"] = after.ps_restarts
        seen["recovered"] = train_on_then_stop(run_dir)

    s = trains_to_max_steps_despite(cfg, kill)
    assert s["ps_restarts"] == 1 and seen["restarts"] == 1
    # Restored from a checkpoint: progress went back at most to that checkpoint, never further.
    assert seen["steps_after"] >= seen["ckpt_steps"] - 1
    lost = seen["steps_before"] - seen["ckpt_steps"]
    assert lost >= 0
    assert s["env_steps"] >= seen["recovered"] + AFTER_RECOVERY and s["worker_restarts"] == 0
    # The Workers pushed by compiled graph; the graphs that broke with the server fell back to
    # calls without failing a Worker.
    assert s["pushes_by_graph"] > 0, s
    for ckpt in list_checkpoints(run_dir / layout.CHECKPOINTS):
        load_checkpoint(ckpt)  # every checkpoint left is whole


@pytest.mark.long
def test_killed_shard_comes_back_and_every_shard_rolls_back_to_its_checkpoint(
    ray_session: None, tmp_path: Path
) -> None:
    """With the ParameterServer in 2 shards, killing shard 1 restores it from the newest checkpoint
    and the driver rolls the coordinator back to the same one: the weights are again of one
    moment, the run's counters go back with them, and the run goes on to its end."""
    run_dir = tmp_path / "killshard"
    cfg = small_config(run_dir, run__max_steps=60_000, monitor__eval_every=0.5, ps__shards=2)
    seen: dict[str, Any] = {}

    def kill() -> None:
        wait_for(
            lambda: len(list_checkpoints(run_dir / layout.CHECKPOINTS)) >= 2, what="two checkpoints"
        )
        shard = named_actor("ParameterServer-1", run_dir)  # looked up first: the kill follows
        seen["steps_before"] = progress(run_dir).env_steps  # the reading with no wait between
        ray.kill(shard, no_restart=False)
        wait_for(lambda: progress(run_dir).ps_restarts >= 1, what="the coordinator's rollback")
        after = progress(run_dir)
        seen["steps_after"] = after.env_steps
        seen["restored"] = [
            ray.get(named_actor(name, run_dir).restore_info.remote())[1]  # type: ignore[attr-defined]
            for name in ("ParameterServer", "ParameterServer-1")
        ]
        seen["recovered"] = train_on_then_stop(run_dir)

    s = trains_to_max_steps_despite(cfg, kill)
    assert s["ps_restarts"] == 1 and s["worker_restarts"] == 0
    a, b = seen["restored"]
    assert a is not None and a == b, seen  # both shards from the one checkpoint
    ckpt_steps = int(Path(a).stem.split("-")[1])  # (pruned since: ckpt-<env steps>.pt)
    assert seen["steps_after"] >= ckpt_steps - 1 and ckpt_steps <= seen["steps_before"]
    assert s["env_steps"] >= seen["recovered"] + AFTER_RECOVERY
    for ckpt in list_checkpoints(run_dir / layout.CHECKPOINTS):
        load_checkpoint(ckpt)  # every checkpoint left is whole


@pytest.mark.long
def test_killed_monitor_is_restarted_and_no_checkpoint_is_corrupted(
    ray_session: None, tmp_path: Path
) -> None:
    run_dir = tmp_path / "killmonitor"
    cfg = small_config(run_dir, run__max_steps=40_000, monitor__eval_every=0.5)
    latest = run_dir / layout.CHECKPOINTS / layout.LATEST

    def newest() -> int:
        """Env steps of the checkpoint the ``latest`` pointer names (``ckpt-<steps>.pt``)."""
        return int(latest.read_text().strip().split("-")[1].split(".")[0])

    def kill() -> None:
        wait_for(latest.exists, what="a checkpoint")
        ray.kill(named_actor("Monitor", run_dir), no_restart=False)
        # The restarted Monitor checkpoints weights newer than those of the kill; the final
        # checkpoint, of the run's last env step, is its too.
        killed_at = progress(run_dir).env_steps
        wait_for(lambda: newest() > killed_at, what="a checkpoint of the restarted Monitor")
        train_on_then_stop(run_dir)

    s = trains_to_max_steps_despite(cfg, kill)
    ckpts = list_checkpoints(run_dir / layout.CHECKPOINTS)
    assert ckpts and all(load_checkpoint(c)["format"] for c in ckpts)
    assert not [p for p in (run_dir / layout.CHECKPOINTS).iterdir() if p.name.startswith(".")]
    assert (
        load_checkpoint(run_dir / layout.CHECKPOINTS / layout.LATEST)["env_steps"] == s["env_steps"]
    )


def test_env_that_raises_is_recreated_and_counted(ray_session: None, tmp_path: Path) -> None:
    run_dir = tmp_path / "flaky"
    cfg = small_config(
        run_dir, env__id="a3c_ray/FlakyCartPole-v1", env__num_envs=8, run__max_steps=30_000
    )

    def fail_five_times() -> None:
        wait_for(lambda: progress(run_dir).env_restarts >= 5, what="five envs recreated")
        train_on_then_stop(run_dir)

    s = trains_to_max_steps_despite(cfg, fail_five_times)
    # ~0.1% of the steps fail: envs recreated every thousand steps or so, and training went on
    # around them: no Worker restarted, every push was applied (no failed step made a gradient
    # that was not finite), and the episodes cut short by a failure count as episodes of real
    # lengths.
    assert s["env_restarts"] >= 5 and s["worker_restarts"] == 0, s
    assert (
        s["gradients_dropped"] == 0
        and s["gradient_updates"] * cfg.env.num_envs * cfg.algo.t_max == s["env_steps"]
    ), s
    assert s["episodes"] > 0 and 1 <= s["mean_return_100"] <= 500, s


@pytest.mark.long
def test_worker_that_fails_over_and_over_stops_the_run_with_a_clear_error(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = small_config(
        tmp_path / "broken",
        env__id="a3c_ray/BrokenCartPole-v1",
        run__max_worker_restarts=2,
        run__restart_backoff=0.05,
        run__workers=1,
    )
    result = train(cfg)
    s = result.summary
    assert result.exit_code == 1 and s["stopped_because"] == "error"
    assert len(result.errors) == 1
    assert "worker 0 failed 3 times" in result.errors[0] and "reset" in result.errors[0]
    assert s["worker_restarts"] == 2
    # The Monitor's env is broken too: its evaluation fails, is counted, and the checkpoint is kept.
    assert s["eval_failures"] >= 1 and s["checkpoint"] and Path(s["checkpoint"]).exists()
    assert (tmp_path / "broken" / layout.SUMMARY).exists()
