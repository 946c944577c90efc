"""`a3c-ray bench serve`: the load clients are bounded in count and time and count what failed;
the report's arithmetic; one short real run. No speed is asserted here."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from a3c_ray.bench import serving
from a3c_ray.commands import bench, bench_serve
from a3c_ray.commands.cli import main

from .conftest import free_port

aiohttp_web = pytest.importorskip("aiohttp.web")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(argv)


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, int]]]:
    """An aiohttp server on 127.0.0.1 in a thread: /ok answers 200, /fail 500 (every call counted)."""
    import threading

    calls = {"ok": 0, "fail": 0}
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def ok(request: Any) -> Any:
        calls["ok"] += 1
        return aiohttp_web.Response(text="{}")

    async def fail(request: Any) -> Any:
        calls["fail"] += 1
        return aiohttp_web.Response(status=500, text="{}")

    async def serve() -> Any:
        app = aiohttp_web.Application()
        app.router.add_post("/ok", ok)
        app.router.add_post("/fail", fail)
        runner = aiohttp_web.AppRunner(app, access_log=None)
        await runner.setup()
        await aiohttp_web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", calls
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_the_load_stops_at_its_request_bound(http_server: tuple[str, dict[str, int]]) -> None:
    base, calls = http_server
    latencies, errors, _ = asyncio.run(serving._load(f"{base}/ok", b"{}", {}, 4, 30.0, 50))
    assert len(latencies) + errors <= 50 + 4  # each client finishes the request it has started
    assert len(latencies) >= 50 and errors == 0 and calls["ok"] == len(latencies)


def test_the_load_stops_at_its_time_bound_and_counts_failures(
    http_server: tuple[str, dict[str, int]],
) -> None:
    base, calls = http_server
    start = time.monotonic()
    latencies, errors, wall = asyncio.run(serving._load(f"{base}/fail", b"{}", {}, 2, 0.5, 10**9))
    assert time.monotonic() - start < 10 and wall >= 0.5
    assert not latencies and errors == calls["fail"] > 0


def test_the_cpu_limit_is_the_cores_over_the_cpu_per_request() -> None:
    point = {
        "server_cpu_ms_per_request": {"proxy": 0.5, "replica": 1.0},
        "client_cpu_ms_per_request": 0.5,
    }
    assert bench_serve.cpu_limit(point, 2) == pytest.approx(1000.0)


def fake_report() -> dict[str, Any]:
    point = {
        "ingress": "haproxy",
        "model": "cartpole",
        "mode": "batched",
        "clients": 32,
        "requests": 100,
        "errors": 0,
        "seconds": 1.0,
        "requests_per_second": 1234.0,
        "observations_per_second": 1234.0,
        "p50_ms": 5.0,
        "p99_ms": 15.0,
        "client_cpu_ms_per_request": 0.3,
        "server_cpu_ms_per_request": {"proxy": 0.1, "replica": 0.6},
    }
    return {
        "machine": {"cpus": 2, "loadavg_before": 1.0, "loadavg_after": 2.0},
        "settings": {
            "seconds": 1.0,
            "repeat": 1,
            "ingresses": ["haproxy"],
            "modes": {"batched": 32, "unbatched": 1},
            "batch_wait_ms": 2.0,
        },
        "points": [point],
        "costs": {
            "cartpole": {
                "request_io_ms": 0.1,
                "forward_1_ms": 0.05,
                "forward_32_ms": 0.1,
                "healthz_requests_per_second_haproxy": 900.0,
            }
        },
    }


def test_the_report_shows_every_point_and_where_the_time_goes() -> None:
    text = bench_serve.format_report(fake_report())
    assert "| haproxy | cartpole | batched | 32 | 1,234 | 1,234 | 5.0 | 15.0 | 0 |" in text
    assert "0.10, 0.60, 0.30 | 2,000 |" in text
    assert "| cartpole | 0.100 | 0.050 | 0.100 | 900 |" in text


def test_serve_bench_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["serve", "--models", "pong", "--clients", "2,4"])
    assert args.serve_models == ["pong"] and args.serve_clients == [2, 4]
    assert args.serve_ingress == ["proxy", "haproxy"]
    for bad in (
        ["--models", "atari"],
        ["--clients", "0"],
        ["--ingress", "nginx"],
    ):
        assert main(["bench", "serve", *bad]) == 2
        assert "expected" in capsys.readouterr().err
    assert main(["bench", "serve", "--seconds", "0"]) == 2
    assert main(["bench", "serve", "--address", "127.0.0.1:1"]) == 2
    assert "needs an embedded Ray" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.long
def test_a_short_serve_bench_answers_every_request_batched_and_unbatched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "serve", "--models", "cartpole", "--clients", "4"]
    argv += ["--ingress", "proxy", "--seconds", "0.5", "--json"]
    assert main(argv) == 0
    # The report is the last line: Ray may print its own notes while Serve shuts down.
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    modes = {p["mode"]: p for p in report["points"]}
    assert set(modes) == {"batched", "unbatched"}
    for p in modes.values():
        assert p["errors"] == 0 and p["requests"] > 0 and p["p99_ms"] >= p["p50_ms"] > 0
        assert p["server_cpu_ms_per_request"]["replica"] > 0
    costs = report["costs"]["cartpole"]
    assert costs["forward_32_ms"] > 0 and costs["healthz_requests_per_second_proxy"] > 0
