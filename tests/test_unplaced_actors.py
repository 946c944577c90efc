"""Ctrl-C is not held when the ParameterServer or the Monitor could not be placed: a run whose
ParameterServer never started has nothing to save and ends at once, and a final checkpoint waits
a bounded time for a Monitor that never came up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from a3c_ray.envs.make import resolve_policy
from a3c_ray.rundir.summary import RunSummary
from a3c_ray.runtime import driver
from a3c_ray.runtime.driver import Run

from .conftest import small_config

pytestmark = pytest.mark.ray


def ended_within(seconds: float, end: Callable[[], RunSummary]) -> RunSummary | None:
    """What ``end`` returned, if it returned within ``seconds`` (as Ctrl-C ends a run)."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(summary=end()), daemon=True)
    thread.start()
    thread.join(seconds)
    return out.get("summary")


def test_ctrl_c_ends_a_run_whose_parameter_server_was_never_placed_at_once(
    ray_session: None, tmp_path: Path
) -> None:
    cfg = small_config(tmp_path / "run", run__ps_cpus=64)  # the module's Ray has 4 CPUs
    resolve_policy(cfg)
    run = Run(cfg, str(tmp_path / "run"), 2)
    run.create_actors()  # the ParameterServer waits for CPUs; start() would wait for it

    def interrupted() -> RunSummary:
        run.interrupt()
        return run.finish(time.monotonic())

    try:
        summary = ended_within(10.0, interrupted)
    finally:
        run.shutdown()
    assert summary is not None, "the run held Ctrl-C waiting on a ParameterServer never placed"
    assert summary["stopped_because"] == "interrupted"


@pytest.mark.slow
@pytest.mark.long
def test_a_final_checkpoint_waits_a_bounded_time_for_a_monitor_never_placed(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "CALL_TIMEOUT", 2.0)
    cfg = small_config(tmp_path / "run", run__monitor_cpus=64, run__workers=1)
    resolve_policy(cfg)
    run = Run(cfg, str(tmp_path / "run"), 1)
    run.create_actors()
    try:
        run.start()
        run.watch(None, until=time.monotonic() + 1.0)

        def interrupted() -> RunSummary:
            run.interrupt()
            return run.finish(time.monotonic(), evaluate=False)

        summary = ended_within(cfg.run.stop_grace + 30.0, interrupted)
    finally:
        run.shutdown()
    assert summary is not None, "the run held Ctrl-C for the final checkpoint's whole timeout"
    assert summary["stopped_because"] == "interrupted"
    assert any("monitor: not started" in e for e in summary["errors"]), summary["errors"]
