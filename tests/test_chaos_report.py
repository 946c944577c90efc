"""The chaos soak's schedule and its figures, from records made by hand (no cluster, no Ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.chaos import report as cr
from lab.chaos.plan import ChaosPlan

MB = 2**20


def test_the_schedule_holds_every_kind_of_fault_and_none_in_the_quiet_end() -> None:
    plan = ChaosPlan(
        seconds=150, worker_every=40, ps_every=60, monitor_at=30, node_at=50, node_down=10
    )
    assert plan.schedule() == [
        (30, "monitor"),
        (40, "worker"),
        (50, "node"),
        (60, "node-back"),
        (60, "ps"),
        (80, "worker"),
        (120, "ps"),
        (120, "worker"),
    ]
    assert ChaosPlan(seconds=3600, worker_every=0, ps_every=0).schedule() == []
    # A fault that would come in the last quiet_end seconds does not come at all.
    assert ChaosPlan(seconds=100, worker_every=90, ps_every=0, node_at=95).schedule() == []


def fault(kind: str, at: float, after: float | None, **detail: Any) -> dict[str, Any]:
    return {"kind": kind, "target": kind, "at": at, "recovered_after": after, "detail": detail}


def progress(at: float, steps: int, mean: float | None, episodes: int = 200) -> dict[str, Any]:
    dropped = {"resync": 3, "stale": 0, "nonfinite": 0}
    return {
        "at": at,
        "env_steps": steps,
        "mean_return_100": mean,
        "episodes": episodes,
        "dropped": dropped,
    }


def memory(actor: str, pid: int, rows: list[tuple[float, float, float]]) -> list[dict[str, Any]]:
    """(at, MiB, age) samples of one process."""
    return [
        {"at": at, "actor": actor, "pid": pid, "rss": int(mb * MB), "age": age}
        for at, mb, age in rows
    ]


def record(**changes: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "plan": {"seconds": 600, "worker_nodes": 2},
        "job_status": "SUCCEEDED",
        "faults": [
            fault("worker", 30, 4.0),
            fault("worker", 60, 12.0),
            fault("worker", 90, 8.0),
            fault(
                "ps",
                300,
                10.0,
                latest_checkpoint="ckpt-9000.pt",
                restored_from="s3://b/run/checkpoints/ckpt-10000.pt",
                lost_steps=700,
            ),
            fault("monitor", 200, 20.0, latest_checkpoint="ckpt-7000.pt"),
            fault("node", 300, 0.5, slots_back_after_return=9.0),
        ],
        "checkpoints": [
            {"name": "ckpt-1.pt", "state": "loaded"},
            {"name": "ckpt-2.pt", "state": "pruned"},
            {"name": "ckpt-3.pt", "state": "loaded"},
        ],
        "files_left": {"ckpt-3.pt": "loaded"},
        "progress": [
            progress(1, 100, 20.0, episodes=50),
            progress(100, 80_000, 460.0),
            progress(200, 160_000, 420.0),
            progress(600, 500_000, 495.0),
        ],
        "memory": [
            *memory("ParameterServer", 11, [(10, 400, 20), (300, 405, 310), (600, 420, 610)]),
            *memory("Worker-0", 12, [(10, 340, 15), (40, 341, 45)]),
            *memory("Worker-0", 13, [(50, 345, 5), (400, 346, 355), (600, 500, 555)]),
        ],
        "actor_restarts": {"ParameterServer": 1, "Monitor": 1, "Worker-0": 0},
        "summary": {"env_id": "CartPole-v1", "workers": 2, "worker_restarts": 4, "ps_restarts": 1},
    }
    rec.update(changes)
    return rec


def test_figures_say_how_soon_training_went_on_and_whether_a_checkpoint_was_lost() -> None:
    figs = cr.figures(record(), target=450, floor=300, memory_after=300, bound=60)
    assert figs["kills"] == {"worker": 3, "ps": 1, "monitor": 1, "node": 1}
    assert figs["recovery"]["worker"] == {
        "faults": 3,
        "median_seconds": 8.0,
        "max_seconds": 12.0,
        "never": 0,
    }
    assert figs["within_bound"]
    c = figs["checkpoints"]
    assert (c["written"], c["loaded"], c["unreadable"], c["pruned_before_read"]) == (3, 2, 0, 1)
    assert c["restores_from_newest"] == c["restores"] == 1 and c["lost_env_steps_max"] == 700
    assert figs["restarts"] == {
        "workers": 4,
        "parameter_server": 1,
        "ray:Monitor": 1,
        "ray:ParameterServer": 1,
    }
    assert figs["gradients_dropped"] == {"resync": 3, "stale": 0, "nonfinite": 0}

    slow = record(faults=[fault("worker", 30, 75.0), fault("ps", 60, None, ps_restarts=0)])
    slow_figs = cr.figures(slow, target=450, floor=300, memory_after=300, bound=60)
    assert not slow_figs["within_bound"] and slow_figs["recovery"]["ps"]["never"] == 1
    older = record()
    older["faults"][3]["detail"]["restored_from"] = "s3://b/run/checkpoints/ckpt-800.pt"
    assert cr.figures(older, 450, 300, 300, 60)["checkpoints"]["restores_from_newest"] == 0


def test_learning_is_judged_as_the_stability_bench_judges_a_seed() -> None:
    le = cr.figures(record(), target=450, floor=300, memory_after=300, bound=60)["learning"]
    assert le["reached_at"] == 100 and le["reached_env_steps"] == 80_000
    assert le["lowest_after"] == 420.0 and le["final_mean"] == 495.0
    assert (
        le["held"]
        and le["kept"]
        and le["at_or_above_target_after"] == pytest.approx(2 / 3, abs=1e-3)
    )
    collapsed = record(progress=[progress(100, 1, 460.0), progress(200, 2, 250.0)])
    le = cr.learning(collapsed, target=450, floor=300)
    assert not le["held"] and not le["kept"]
    never = record(progress=[progress(100, 1, 460.0, episodes=99), progress(200, 2, 300.0)])
    assert cr.learning(never, target=450, floor=300)["reached_at"] is None  # no full window


def test_memory_growth_counts_from_each_process_own_mark_and_flags_more_than_ten_percent() -> None:
    figs = cr.figures(record(), target=450, floor=300, memory_after=300, bound=60)
    by_pid = {m["pid"]: m for m in figs["memory"]}
    assert by_pid[11]["base_mb"] == 405.0 and by_pid[11]["growth"] == pytest.approx(
        15 / 405, abs=1e-4
    )
    assert by_pid[12]["growth"] is None  # killed before it was 300 s old
    assert by_pid[13]["base_mb"] == 346.0 and by_pid[13]["growth"] > 0.10
    assert not figs["memory_flat"] and figs["memory_checked"] == 2
    flat = record(memory=memory("Monitor", 21, [(10, 300, 10), (400, 320, 400), (600, 330, 600)]))
    assert cr.figures(flat, 450, 300, 300, 60)["memory_flat"]


def test_private_memory_is_judged_apart_from_rss() -> None:
    # A Monitor whose RSS grows 20% after its mark, none of it anonymous (the object store's
    # pages it read): RSS growth is flagged, private growth is not.
    rows = [(10, 300, 10, 280), (400, 320, 400, 280), (600, 384, 600, 280)]
    rec = record(
        memory=[
            {"at": at, "actor": "Monitor", "pid": 21, "rss": mb * MB, "anon": an * MB, "age": age}
            for at, mb, age, an in rows
        ]
    )
    figs = cr.figures(rec, 450, 300, 300, 60)
    (m,) = figs["memory"]
    assert m["growth"] == pytest.approx(0.2) and m["private_growth"] == pytest.approx(0.0)
    assert m["private_base_mb"] == 280.0 and m["private_last_mb"] == 280.0
    assert not figs["memory_flat"] and figs["private_memory_flat"] is True
    text = cr.format_report(rec, figs, (1.0, 2.0))
    assert "| +20.0% | 280.0 | 280.0 | +0.0% |" in text
    assert "private (anonymous) memory grew more than 10%: yes" in text
    # Private growth is flagged on its own.
    grown = [dict(r, anon=r["rss"] - 20 * MB) for r in rec["memory"]]
    assert cr.figures(record(memory=grown), 450, 300, 300, 60)["private_memory_flat"] is False
    # Samples without it have no private figure.
    assert cr.figures(record(), 450, 300, 300, 60)["private_memory_flat"] is None


def test_anonymous_memory_of_a_live_process_and_of_none() -> None:
    import os

    from lab.chaos.probe import anonymous_rss

    anon = anonymous_rss(os.getpid())
    with open(f"/proc/{os.getpid()}/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert anon is not None and 0 < anon < rss
    assert anonymous_rss(2**22 + 1) is None  # above Linux's largest pid


def test_the_report_and_the_plot(tmp_path: Path) -> None:
    rec = record()
    figs = cr.figures(rec, target=450, floor=300, memory_after=300, bound=60)
    text = cr.format_report(rec, figs, (1.0, 2.0))
    assert "| Worker killed | 3 | 8.0 | 12.0 | 0 |" in text
    assert "every fault followed by training within 60 s: yes" in text
    assert "held (floor 300): yes; kept: yes" in text
    assert "| Worker-0 | 13 | 50-600 | 345.0 | 346.0 | 500.0 | 500.0 | +44.5% | - | - | - |" in text
    assert "no actor grew more than 10% after its first 300 s: NO" in text
    png = cr.plot_memory(rec, tmp_path / "m.png", "test")
    assert png.stat().st_size > 10_000
