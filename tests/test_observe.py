"""Watching a live run: `a3c-ray status`, Ray metrics on the Prometheus endpoint, TensorBoard tags."""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from a3c_ray import metric_names as M
from a3c_ray.commands.cli import main
from a3c_ray.config import RunConfig
from a3c_ray.rundir import layout
from a3c_ray.runtime.session import train

from .conftest import named_actor, small_config, wait_for
from .test_train_ray import read_tags

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def metrics_port(dashboard_ray: dict[str, Any]) -> int:
    return int(dashboard_ray["metrics_port"])


def test_dashboard_rest_api_wants_the_token_and_ray_clients_send_it(
    dashboard_ray: dict[str, Any],
) -> None:
    from ray.job_submission import JobSubmissionClient

    url = dashboard_ray["dashboard_url"] + "/api/jobs/"
    assert url.startswith("http://127.0.0.1:")  # the dashboard listens on loopback only
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(url, timeout=10)
    assert denied.value.code == 401
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    assert urllib.request.urlopen(request, timeout=10).status == 200
    bad = urllib.request.Request(url, headers={"Authorization": "Bearer not-the-token"})
    with pytest.raises(urllib.error.HTTPError) as forbidden:
        urllib.request.urlopen(bad, timeout=10)
    assert forbidden.value.code in (401, 403)
    assert isinstance(JobSubmissionClient(dashboard_ray["dashboard_url"]).list_jobs(), list)


def scrape(port: int) -> dict[str, float]:
    """Sum of each ray_a3c_* sample over its labels, from the node's Prometheus text."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(ray_a3c_\w+?)(?:\{[^}]*\})? ([-+0-9.eEinfa]+)$", line)
        if m and not m.group(1).endswith(("_created",)):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


@pytest.fixture(scope="module")
def live_run(
    metrics_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A run in a background thread, with evaluations every second and a video every 2nd one."""
    run_dir = tmp_path_factory.mktemp("observe") / "live"
    cfg = small_config(
        run_dir,
        run__max_steps=10_000_000,
        run__time_limit=900.0,  # a safety net: the fixture stops the run
        monitor__eval_every=1.0,
        monitor__video_every=2,
        run__restart_backoff=0.1,
        run__actor_env=RunConfig().actor_env,  # the default, which small_config leaves out
    )
    box: dict[str, Any] = {"run_dir": run_dir}
    t = threading.Thread(target=lambda: box.update(result=train(cfg)), daemon=True)
    t.start()
    ps = named_actor("ParameterServer", run_dir)
    wait_for(lambda: ray.get(ps.progress.remote()).env_steps > 3_000, what="training")  # type: ignore[attr-defined]
    box["ps"] = ps
    yield box
    if t.is_alive():
        ray.get(ps.request_stop.remote("interrupted"))  # type: ignore[attr-defined]
    t.join(timeout=120)


def test_status_lists_the_live_run_with_progress_and_workers(
    live_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    def record() -> dict[str, Any]:
        assert main(["status", "--json", "--interval", "0.5"]) == 0
        (rec,) = [r for r in json.loads(capsys.readouterr().out) if r["run"].startswith("live-")]
        return rec

    # Other tests here restart and scale Workers: wait until the slots in use are all up.
    wait_for(
        lambda: any(w["state"] == "ALIVE" for w in record()["workers"]),
        timeout=60,
        what="a live Worker",
    )
    rec = record()
    assert rec["env_steps"] > 3_000 and rec["sps"] > 0 and rec["version"] > 0
    assert rec["updates_per_second"] > 0 and rec["staleness_max"] >= 0
    assert rec["ps_shards"] == 1
    slots = [w["worker"] for w in rec["workers"]]
    assert "Worker-0" in slots and all(s.startswith("Worker-") for s in slots), slots
    assert all(w["node_id"] for w in rec["workers"] if w["state"] == "ALIVE")
    assert main(["status", rec["run"], "--interval", "0.2"]) == 0
    table = capsys.readouterr().out
    assert rec["run"] in table and "steps/s" in table and "Worker-0" in table and "ALIVE" in table


def test_every_actor_of_the_run_runs_with_run_actor_env(live_run: dict[str, Any]) -> None:
    """The ParameterServer, the Monitor and the Workers are started with ``run.actor_env`` (glibc's
    malloc settings by default) in their processes' environment."""
    from ray.util.state import list_actors

    want = {k: str(v) for k, v in RunConfig().actor_env.items()}
    assert want.get("MALLOC_ARENA_MAX") == "2"
    gcs = ray.get_runtime_context().gcs_address
    seen = {}
    for a in list_actors(address=gcs, filters=[("state", "=", "ALIVE")], limit=10_000):
        if (a.name or "").startswith("live-") and a.pid:
            raw = Path(f"/proc/{a.pid}/environ").read_bytes().split(b"\0")
            env = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
            seen[a.class_name] = {k: env.get(k) for k in want}
    assert {"ParameterServer", "Monitor", "Worker"} <= set(seen), seen
    assert all(v == want for v in seen.values()), seen


def labelled(port: int, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of ``name`` on the node's Prometheus text, by its labels (Ray's own omitted)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{([^}}]*)\}} ([-+0-9.eEinfa]+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            keep = tuple(
                sorted((k, v) for k, v in labels.items() if k in ("run", "worker", "reason"))
            )
            out[keep] = out.get(keep, 0.0) + float(m.group(2))
    return out


def test_counters_are_exported_at_zero_before_their_first_event(
    live_run: dict[str, Any], metrics_port: int
) -> None:
    """A healthy run drops nothing and restarts nothing, and dashboards still see both counters:
    at 0 for every drop reason and every Worker slot, from the start."""
    prefix = os.path.basename(str(live_run["run_dir"])) + "-"

    def ours(samples: dict[Any, float]) -> dict[str, float]:
        """This run's samples, keyed by their reason or worker label."""
        return {
            dict(k).get("reason", dict(k).get("worker", "")): v
            for k, v in samples.items()
            if dict(k).get("run", "").startswith(prefix)
        }

    def series() -> tuple[dict[str, float], dict[str, float]]:
        return (
            ours(labelled(metrics_port, "ray_a3c_gradients_dropped_total")),
            ours(labelled(metrics_port, "ray_a3c_worker_restarts_total")),
        )

    wait_for(
        lambda: len(series()[0]) == 3 and len(series()[1]) >= 2,
        timeout=60,
        what="the counters at 0",
    )
    dropped, restarts = series()
    assert dropped == {"nonfinite": 0.0, "stale": 0.0, "resync": 0.0}
    assert set(restarts) >= {"0", "1"}


def test_ray_metrics_are_exported_with_sane_values(
    live_run: dict[str, Any], metrics_port: int
) -> None:
    ray.kill(named_actor("Worker-0", live_run["run_dir"]), no_restart=False)
    wanted = {f"ray_{n}" for n in M.RAY_METRICS}
    wanted = {
        n + "_total" if n.endswith(("env_steps", "applied", "dropped", "restarts")) else n
        for n in wanted
    }
    first: dict[str, float] = {}
    wait_for(
        lambda: wanted <= set(first.update(scrape(metrics_port)) or first),
        timeout=90,
        what=f"{wanted}",
    )
    wait_for(
        lambda: scrape(metrics_port)["ray_a3c_env_steps_total"] > first["ray_a3c_env_steps_total"],
        timeout=60,
        what="env steps to grow",
    )
    # The driver restarts the killed Worker after its back-off, and Ray exports the count on its
    # next report: other Workers' steps can grow before that.
    wait_for(
        lambda: scrape(metrics_port)["ray_a3c_worker_restarts_total"] >= 1,
        timeout=60,
        what="the killed Worker's restart to be counted",
    )
    now = scrape(metrics_port)
    assert now["ray_a3c_param_version"] > 0
    assert now["ray_a3c_gradients_applied_total"] > 0
    assert now["ray_a3c_env_steps_per_second"] > 0
    assert 0 < now["ray_a3c_episode_return"] <= 500 and 0 < now["ray_a3c_eval_return"] <= 500


def test_status_shows_the_restarted_worker(
    live_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed Worker is replaced by a new actor in the same slot, and status shows it alive."""
    killed = named_actor("Worker-0", live_run["run_dir"])
    ray.kill(killed, no_restart=False)

    def replaced() -> bool:
        try:
            now = named_actor("Worker-0", live_run["run_dir"], timeout=1.0)
        except Exception:  # between the old actor's death and the new one's name
            return False
        return now._actor_id != killed._actor_id  # type: ignore[attr-defined]

    wait_for(replaced, timeout=60, what="a new Worker-0")

    def slot_0() -> str:
        main(["status", "--json", "--interval", "0.1"])
        (rec,) = [r for r in json.loads(capsys.readouterr().out) if r["run"].startswith("live-")]
        return next(w["state"] for w in rec["workers"] if w["worker"] == "Worker-0")

    wait_for(lambda: slot_0() == "ALIVE", timeout=60, what="Worker-0 alive again")


@pytest.mark.long
def test_scale_adds_and_retires_workers_of_a_live_run(
    live_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    def alive() -> list[str]:
        code = main(["status", "--json", "--interval", "0.1"])
        out = capsys.readouterr()
        assert code == 0, out.err
        (rec,) = [r for r in json.loads(out.out) if r["run"].startswith("live-")]
        return [w["worker"] for w in rec["workers"] if w["state"] == "ALIVE"]

    # As the README writes it: the run named by its directory.
    assert main(["scale", str(live_run["run_dir"]), "--workers", "3"]) == 0
    assert "asked for 3 Workers" in capsys.readouterr().out
    wait_for(lambda: len(alive()) == 3, timeout=60, what="3 workers")
    assert main(["scale", "live-", "--workers", "1"]) == 0
    capsys.readouterr()
    wait_for(lambda: len(alive()) == 1, timeout=60, what="1 worker")
    assert main(["scale", "no-such-run", "--workers", "2"]) == 2
    assert "must name exactly one live run" in capsys.readouterr().err
    assert main(["scale", "live-", "--workers", "2"]) == 0  # as the other tests found it
    capsys.readouterr()
    wait_for(lambda: len(alive()) == 2, timeout=60, what="2 workers again")


def test_tensorboard_has_every_tag_the_config_and_eval_videos(live_run: dict[str, Any]) -> None:
    """Read while the run goes on: the Monitor flushes its events every 10 seconds."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = Path(live_run["run_dir"]) / layout.TENSORBOARD

    def missing() -> list[str]:
        tags = read_tags(tb)
        acc = EventAccumulator(str(tb), size_guidance={"tensors": 0, "images": 0})
        acc.Reload()
        return [tag for tag in M.TENSORBOARD_TAGS if not tags.get(tag)] + [
            tag
            for tag, kind in (("config/text_summary", "tensors"), (M.EVAL_VIDEO, "images"))
            if tag not in acc.Tags()[kind]  # tensorboardX stores videos as animated images
        ]

    wait_for(lambda: not missing(), timeout=90, what="every tag")
    assert missing() == []
