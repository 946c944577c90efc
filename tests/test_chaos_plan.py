"""When the chaos soak counts training as gone on after each kind of fault, and how its command
starts (no cluster needed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from a3c_ray.algo.messages import Progress
from lab.chaos.plan import ChaosPlan, Fault, lost_slots, went_on


def progress(env_steps: int, worker_steps: dict[int, int], ps_restarts: int = 0) -> Progress:
    fields: dict[str, Any] = dict.fromkeys(
        ("version", "gradients_applied", "gradients_dropped", "dropped_nonfinite"), 0
    )
    fields.update(dropped_stale=0, dropped_resync=0, env_restarts=0, episodes=0)
    return Progress(
        env_steps=env_steps,
        ps_restarts=ps_restarts,
        restored_from=None,
        worker_steps=worker_steps,
        desired_workers=None,
        mean_return_100=0.0,
        staleness_mean=0.0,
        staleness_max=0,
        train_seconds=0.0,
        stop_reason=None,
        steps_to_target=None,
        seconds_to_target=None,
        **fields,
    )


def test_a_killed_workers_slot_counts_once_it_pushes_again() -> None:
    f = Fault("worker", "Worker-1", at=10.0, detail={"slot": 1, "baseline": 500, "ps_restarts": 0})
    assert not went_on(f, progress(900, {0: 400, 1: 500}), 11.0, None)
    assert went_on(f, progress(1000, {0: 400, 1: 600}), 12.0, None)


def test_a_restored_server_counts_once_it_trains_past_what_it_restored() -> None:
    f = Fault("ps", "ParameterServer", at=10.0, detail={"env_steps": 5000, "ps_restarts": 0})
    assert not went_on(f, progress(5100, {}), 10.5, None)  # the old server still answers
    assert not went_on(f, progress(4000, {}, ps_restarts=1), 12.0, None)  # restored, no push yet
    assert f.detail["lost_steps"] == 1000
    assert not went_on(f, progress(4000, {}, ps_restarts=1), 12.5, None)
    assert went_on(f, progress(4080, {}, ps_restarts=1), 13.0, None)


def test_a_restarted_monitor_counts_once_a_newer_checkpoint_is_named() -> None:
    f = Fault("monitor", "Monitor", at=10.0, detail={"latest_checkpoint": "ckpt-100.pt"})
    assert not went_on(f, progress(0, {}), 11.0, "ckpt-100.pt")
    assert went_on(f, progress(0, {}), 12.0, "ckpt-200.pt")


def test_a_lost_node_is_over_when_its_workers_are_back_after_it_returned() -> None:
    d: dict[str, Any] = {"env_steps": 1000, "slots": [1], "baseline": 300, "ps_restarts": 0}
    f = Fault("node", "node 2", at=10.0, detail=d)
    assert not went_on(f, progress(1200, {0: 900, 1: 300}), 14.0, None)
    assert d["trains_on_after"] == 4.0  # the run trained on without the node's Worker
    d["back_at"] = 40.0
    assert not went_on(f, progress(1500, {0: 1200, 1: 300}), 41.0, None)
    assert went_on(f, progress(1600, {0: 1200, 1: 400}), 45.0, None)
    assert d["slots_back_after_return"] == 5.0


def test_a_worker_lost_and_not_back_is_not_killed_again() -> None:
    """A Worker on a lost node may still look alive to Ray; killing it would be a second fault
    that costs the run no restart of its own."""
    node = Fault("node", "node 2", at=3.0, detail={"slots": [1], "ps_restarts": 0})
    killed = Fault("worker", "Worker-0", at=20.0, detail={"slot": 0, "ps_restarts": 0})
    assert lost_slots([]) == set()
    assert lost_slots([node]) == {1}
    assert lost_slots([node, killed]) == {0, 1}
    ps = Fault("ps", "ParameterServer", at=30.0, detail={"env_steps": 10, "ps_restarts": 0})
    assert lost_slots([ps]) == set()


def test_the_schedule_keeps_the_last_seconds_free_of_faults() -> None:
    plan = ChaosPlan(seconds=120, worker_every=30, ps_every=60, monitor_at=50, node_at=70)
    events = plan.schedule()
    assert events == sorted(events)
    assert all(at < 120 - plan.quiet_end for at, _ in events)
    assert {kind for _, kind in events} == {"worker", "ps", "monitor", "node", "node-back"}


def test_the_chaos_soak_talks_token_mode_on_a_machine_that_has_no_token_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The soak's own `local.sh up` makes ~/.ray/auth_token after the command starts; Ray reads
    its auth mode once, on import, so the mode is set before, whether the token is there yet or
    not (on a fresh machine the soak otherwise failed to attach to the cluster it had started)."""
    from lab.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "unset by the test")  # restored after the test
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert main(["chaos", "--seconds", "-5"]) == 2
    assert "--seconds: must be > 0" in capsys.readouterr().err
    assert os.environ.get("RAY_AUTH_MODE") == "token"
