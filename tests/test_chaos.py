"""Chaos soaks: ``python -m lab chaos`` with every kind of fault at least once.

CartPole on its own ``cluster/local.sh up 2`` while Workers are killed, the ParameterServer too,
the Monitor once, and a worker node is lost (and as long again as it takes to start). The smoke
(70 s of training, every kind of fault once or twice) runs with ``make test``; the short
soak (two and a half minutes, Workers killed every 40 s, the ParameterServer every 60 s) with
``make test-long``. The command runs as a user runs it, in a process of its own (it attaches to
the cluster it starts, which this process must not do). The 60-minute soaks of
docs/reliability.md are the same command with longer times.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from .conftest import run_bounded

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[1]
BOUND = 60.0
CLEANUP = 120.0
"""Seconds a soak past its time gets to stop its cluster after Ctrl-C, within the pytest timeout."""


class Soak(NamedTuple):
    """The times of one soak, in seconds of training, and what it must show."""

    seconds: float
    worker_every: float
    ps_every: float
    monitor_at: float
    node_at: float
    node_down: float
    worker_kills: int
    """Workers killed at least (the last ``quiet_end`` seconds have no fault)."""
    checkpoints: int
    """Checkpoints written at least (one per evaluation, every 5 s)."""
    timeout: float
    """Seconds the command may take (a loaded machine starts each node in 20-60 s)."""


# The smoke loses its node first, so that the node is back, and its Worker with it, long before
# the run's end however long the node takes to start.
SMOKE = Soak(70, 20, 30, 10, 3, 2, worker_kills=2, checkpoints=6, timeout=600)
SHORT = Soak(150, 40, 60, 30, 50, 10, worker_kills=3, checkpoints=10, timeout=900)


def soak_goes_on_after_every_kind_of_fault_and_loses_no_checkpoint(soak: Soak, out: Path) -> None:
    command = [
        sys.executable, "-m", "lab", "chaos", "--env", "CartPole-v1",
        "--seconds", str(soak.seconds), "--worker-every", str(soak.worker_every),
        "--ps-every", str(soak.ps_every), "--monitor-at", str(soak.monitor_at),
        "--node-at", str(soak.node_at), "--node-down", str(soak.node_down),
        "--sample-every", "5", "--memory-after", "30",
        "--bound", str(BOUND), "--dir", str(out), "--json",
    ]  # fmt: skip
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = run_bounded(command, soak.timeout, CLEANUP, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    data = json.loads((out / "chaos.json").read_text())
    figs, record = data["figures"], data["record"]

    # Every kind of fault, and training went on after each within the bound.
    kills = figs["kills"]
    assert kills["worker"] >= soak.worker_kills and kills["ps"] >= 1, kills
    assert kills["monitor"] == 1 and kills["node"] == 1, kills
    for kind, r in figs["recovery"].items():
        assert r["never"] == 0 and r["max_seconds"] <= BOUND, (kind, r)
    node = next(f for f in record["faults"] if f["kind"] == "node")
    assert node["detail"]["slots_back_after_return"] <= BOUND, node

    # The run counted what it lost and ended by its time limit.
    summary = record["summary"]
    assert record["job_status"] == "SUCCEEDED" and summary["stopped_because"] == "time_limit"
    assert summary["worker_restarts"] >= kills["worker"] + 1, summary
    assert summary["ps_restarts"] >= kills["ps"], summary
    assert record["actor_restarts"].get("Monitor", 0) >= 1, record["actor_restarts"]

    # No checkpoint unreadable, and each restored ParameterServer took the newest one.
    c = figs["checkpoints"]
    assert c["written"] >= soak.checkpoints, c
    assert c["loaded"] + c["pruned_before_read"] == c["written"], c
    assert c["unreadable"] == 0 and c["files_left"] >= 1 and c["files_left_unreadable"] == 0, c
    assert c["restores"] == kills["ps"] and c["restores_from_newest"] == c["restores"], c

    # Every actor's memory was sampled, and the plot was drawn.
    sampled = {m["actor"] for m in figs["memory"]}
    assert {"ParameterServer", "Monitor", "Worker-0", "Worker-1"} <= sampled, sampled
    # Each sample has the process's private (anonymous) part of its RSS, read on this machine.
    assert all(0 < r["anon"] < r["rss"] for r in record["memory"] if "anon" in r)
    assert sum("anon" in r for r in record["memory"]) >= 0.9 * len(record["memory"])
    assert (out / "chaos_memory.png").stat().st_size > 10_000


@pytest.mark.timeout(SMOKE.timeout + CLEANUP + 60)
def test_a_chaos_smoke_goes_on_after_every_kind_of_fault_and_loses_no_checkpoint(
    tmp_path: Path,
) -> None:
    soak_goes_on_after_every_kind_of_fault_and_loses_no_checkpoint(SMOKE, tmp_path / "chaos")


@pytest.mark.long
@pytest.mark.timeout(SHORT.timeout + CLEANUP + 60)
def test_a_short_chaos_soak_goes_on_after_every_kind_of_fault_and_loses_no_checkpoint(
    tmp_path: Path,
) -> None:
    soak_goes_on_after_every_kind_of_fault_and_loses_no_checkpoint(SHORT, tmp_path / "chaos")
