"""A run always ends: Workers that cannot be placed, or that hang in their env, do not hold a
stopping run, and Ctrl-C ends a run within ``run.stop_grace`` plus its final checkpoint in every
state."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a3c_ray.commands import status
from a3c_ray.envs.faults import STUCK_ENV_ID
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import load_checkpoint
from a3c_ray.runtime import live
from a3c_ray.runtime.session import train

from .conftest import small_config, wait_for

pytestmark = pytest.mark.ray


# What the machine may add to a bound on its own: starting and killing actors, the final
# checkpoint and the shutdown of Ray, on a busy 2-core machine.
SLACK = 45.0
# What it may add between a time limit and the stop decision, which the ParameterServer takes at
# the next push or the driver's next poll (every quarter second) when its process gets the CPU.
DECISION_SLACK = 10.0


@pytest.mark.long
def test_workers_that_cannot_be_placed_do_not_hold_a_run_past_its_time_limit(
    dashboard_ray: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The module's Ray has 4 CPUs: the ParameterServer and the Monitor take 1, 3 Workers the
    # rest, and 2 more wait for CPUs that never come. A grace of 10 minutes would show if the
    # run waited for them.
    cfg = small_config(
        tmp_path,
        run__workers=5,
        run__time_limit=4,
        run__max_steps=10**9,
        run__stop_grace=600,
        monitor__eval_every=1000,
    )
    with caplog.at_level(logging.WARNING, logger="a3c_ray"):
        result = train(cfg)
    s = result.summary
    assert s["stopped_because"] == "time_limit", s
    # Up to the decision, not to the run's end (which a grace of 10 minutes would hold).
    assert 4 <= s["train_seconds"] < 4 + DECISION_SLACK, s
    # The placed Workers stop at their next push; the others are not waited for.
    assert s["stopping_seconds"] < 20, s
    assert sum("never started" in f for f in s["failures"]) == 2, s["failures"]
    assert any("2 Workers will wait" in r.getMessage() for r in caplog.records), caplog.text
    assert result.exit_code == 0


def test_a_worker_stuck_in_its_env_is_killed_after_the_grace(
    dashboard_ray: None, tmp_path: Path
) -> None:
    # Every Worker hangs inside env.step after 100 steps of each env; the time limit is then
    # reached by the driver's polling alone, and the Workers are killed after the 3 s grace. (The
    # Monitor's one final game stays below 100 steps: a policy of a few pushes plays ~20.) No
    # Worker spends its 100 steps spreading its envs (env.decorrelate_steps 0).
    cfg = small_config(
        tmp_path,
        env__id=STUCK_ENV_ID,
        env__kwargs__stuck_after=100,
        env__decorrelate_steps=0,
        run__time_limit=5,
        run__max_steps=10**9,
        run__stop_grace=3,
        monitor__eval_every=1000,
        monitor__eval_episodes=1,
    )
    result = train(cfg)
    s = result.summary
    assert s["stopped_because"] == "time_limit", s
    assert 5 <= s["train_seconds"] < 5 + DECISION_SLACK, s
    assert 3 <= s["stopping_seconds"] < 3 + 20, s
    assert sum("did not stop within run.stop_grace=3 s" in f for f in s["failures"]) == 2, s
    assert s["env_steps"] > 0 and s["checkpoint"], s


@pytest.mark.long
def test_status_names_waiting_workers_and_why_and_scale_refuses_more_than_fit(
    dashboard_ray: None, tmp_path: Path
) -> None:
    cfg = small_config(
        tmp_path / "waiting",
        run__workers=5,
        run__time_limit=20,
        run__max_steps=10**9,
        monitor__eval_every=1000,
    )
    ended: dict[str, object] = {}
    trainer = threading.Thread(target=lambda: ended.update(result=train(cfg)))
    trainer.start()
    try:
        wait_for(
            lambda: (
                sum(
                    w["state"] == "ALIVE"
                    for r in live.collect("waiting", 0.1)
                    for w in r["workers"]
                )
                == 3
            ),
            timeout=180,
            what="3 Workers placed",
        )
        records = live.collect("waiting", 0.1)
        waiting = [w for w in records[0]["workers"] if w["state"] in live.PENDING]
        assert len(waiting) == 2, records
        assert all("waiting for 1 CPU: 0 free" in w["reason"] for w in waiting), waiting
        assert all(w["reason"].endswith("no autoscaler") for w in waiting), waiting
        assert "waiting for 1 CPU" in status.render(records)
        with pytest.raises(ConfigError, match=r"without an autoscaler; ask for at most 3$"):
            live.set_workers("waiting", 6, None)
    finally:
        trainer.join(timeout=300)
    s = ended["result"].summary  # type: ignore[attr-defined]
    assert s["stopped_because"] == "time_limit" and s["workers"] == 5, s


DRIVER = """
import json, logging, sys
import ray
from a3c_ray.config import Config
from a3c_ray.runtime.session import train
ray.init(address="local", num_cpus=int(sys.argv[2]), include_dashboard=False,
         _node_ip_address="127.0.0.1")
logging.basicConfig(level=logging.INFO, format="%(message)s")
cfg = Config.from_dict(json.loads(sys.argv[1]))
sys.exit(train(cfg).exit_code)
"""

STOPPING = "a3c-ray: stopping (time_limit)"
"""What the driver logs once it stops and waits for its Workers."""


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def started(run_dir: Path) -> bool:
    return (run_dir / layout.CONFIG).exists()


def training(run_dir: Path) -> bool:
    return (run_dir / layout.CHECKPOINTS / layout.LATEST).exists()


def stopping(run_dir: Path) -> bool:
    """The run has stopped and waits for its Workers: read from the driver's log (``STOPPING``),
    not from the run directory."""
    return False


@pytest.mark.parametrize(
    "state, sets, cpus, when",
    [
        # Ctrl-C while the actors start, two of the three Workers without a CPU.
        ("starting, Workers pending", {"run.workers": 3}, 2, started),
        # Ctrl-C while one Worker trains and two wait for CPUs.
        pytest.param(
            "training, Workers pending",
            {"run.workers": 3},
            2,
            training,
            marks=pytest.mark.long,
        ),
        # Ctrl-C while both Workers hang inside env.step: they are killed after the grace. (No
        # Worker spends its 300 steps spreading its envs: env.decorrelate_steps 0.)
        pytest.param(
            "training, Workers stuck",
            {
                "env.id": STUCK_ENV_ID,
                "env.kwargs": {"stuck_after": 300},
                "env.decorrelate_steps": 0,
            },
            4,
            training,
            marks=pytest.mark.long,
        ),
        # Ctrl-C after the time limit, while the run waits out the grace for stuck Workers (they
        # are stuck long before the 10 s limit: 300 steps take well under a second).
        pytest.param(
            "stopping, Workers stuck",
            {
                "env.id": STUCK_ENV_ID,
                "env.kwargs": {"stuck_after": 300},
                "env.decorrelate_steps": 0,
                "run.time_limit": 10,
            },
            4,
            stopping,
            marks=pytest.mark.long,
        ),
    ],
)
def test_ctrl_c_ends_the_run_within_the_grace_and_keeps_a_checkpoint_and_summary(
    tmp_path: Path, state: str, sets: dict[str, object], cpus: int, when: object
) -> None:
    # A run that stops at its time limit waits this long for its stuck Workers: Ctrl-C, sent as
    # soon as the driver logs that it stops, comes inside that wait however slow the machine is.
    grace = 10.0 if when is stopping else 5.0
    cfg = small_config(
        tmp_path / "run",
        run__max_steps=10**9,
        run__stop_grace=grace,
        monitor__eval_every=0.5,
        monitor__eval_episodes=1,
    )
    for key, value in sets.items():
        cfg.set(key, value)
    run_dir = Path(cfg.run.run_dir or "")
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, json.dumps(cfg.to_dict()), str(cpus)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": ""},
        preexec_fn=interruptible,
    )
    lines: list[str] = []
    stopped = threading.Event()

    def read_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith(STOPPING):
                stopped.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not (stopped.is_set() if when is stopping else when(run_dir)):  # type: ignore[operator]
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, f"not {state} within 180 s"
            time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=grace + 2 * SLACK)
        ended_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 130, err
    assert ended_in < grace + SLACK, (state, ended_in)
    summary = json.loads((run_dir / layout.SUMMARY).read_text())
    expected = "time_limit" if "stopping" in state else "interrupted"
    assert summary["stopped_because"] == expected, summary
    latest = run_dir / layout.CHECKPOINTS / layout.LATEST
    if when is started and "env_steps" not in summary:
        # Interrupted before its ParameterServer started: nothing trained, nothing to save.
        assert not latest.exists(), summary
        return
    final = load_checkpoint(latest)
    assert final["env_steps"] == summary["env_steps"], summary


def test_interrupts_held_while_a_run_ends_are_reported_not_raised() -> None:
    from a3c_ray.runtime.session import interrupts_held

    before = signal.getsignal(signal.SIGINT)
    with interrupts_held("the test's block ends", raise_after=False) as held:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handlers run between bytecodes of the main thread
    assert held == [signal.SIGINT, signal.SIGTERM]
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt), interrupts_held("the test's block ends"):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)


def test_ctrl_c_before_the_actors_start_ends_the_run_with_its_summary(
    dashboard_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between the run directory and the actors (here, while the free CPUs are counted)
    is exit code 130 with a summary, not a traceback: on a busy machine that gap lasts seconds."""
    from a3c_ray.runtime import session

    def interrupted_while_counting(*args: object) -> str | None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)  # the handler runs between two bytecodes of this thread
        raise AssertionError("Ctrl-C did not interrupt the run's start")

    monkeypatch.setattr(session, "start_shortfall", interrupted_while_counting)
    cfg = small_config(tmp_path / "run", run__max_steps=10**9)
    result = train(cfg)
    assert result.exit_code == 130, result.summary
    assert result.summary["stopped_because"] == "interrupted", result.summary
    written = json.loads((tmp_path / "run" / layout.SUMMARY).read_text())
    assert written["stopped_because"] == "interrupted"
    assert (tmp_path / "run" / layout.CONFIG).exists()
    assert not (tmp_path / "run" / layout.CHECKPOINTS / layout.LATEST).exists()
