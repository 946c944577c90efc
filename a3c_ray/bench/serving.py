"""The serving load test of ``a3c-ray bench serve``: the Serve application of ``a3c-ray serve``
under real HTTP clients on loopback, and where each request's time goes.

For each model (an untrained network of a shipped config: what a request costs does not depend on
the weights), each mode (batched: ``@serve.batch`` up to 32 requests per forward pass; unbatched:
one request per pass) and each number of concurrent clients, the clients send requests back to
back for ``seconds`` (or ``max_requests``), one observation each, as an env stepping through the
policy would. Each point reports requests/s, observations/s, latency p50/p99 and errors.

Where the time goes, measured beside the load: the CPU seconds the proxy, the replica and the
clients used per request (from /proc, over the 32-client run), the forward pass and the JSON work
of one request alone in this process, and the ceiling of the HTTP path itself (``/healthz``
through the same proxy and replica, no model and no body).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from a3c_ray.algo.messages import CheckpointMeta
from a3c_ray.algo.models import build_model, get_flat_params
from a3c_ray.config import Config
from a3c_ray.configs import resolve
from a3c_ray.envs.make import action_size, env_spaces, resolve_policy
from a3c_ray.envs.spaces import recorded_spaces
from a3c_ray.rundir.checkpoint import CheckpointManager
from a3c_ray.rundir.policy import load_policy
from a3c_ray.serve.serve_ingress import ingress
from a3c_ray.serve.serve_protocol import Limits, answer, json_body, parse_act

MODELS = {"cartpole": "cartpole", "pong": "pong"}
"""Bench model name -> the shipped config whose env and network it serves."""
MODES = {"batched": 32, "unbatched": 1}
"""Mode -> max_batch_size."""
WARMUP_SECONDS = 1.0


@dataclass(frozen=True)
class LoadPoint:
    ingress: str
    model: str
    mode: str
    clients: int
    requests: int
    errors: int
    seconds: float
    requests_per_second: float
    observations_per_second: float
    p50_ms: float
    p99_ms: float
    client_cpu_ms_per_request: float
    """CPU of the load generator itself (this process) per request."""
    server_cpu_ms_per_request: dict[str, float]
    """CPU per request of each Serve process: proxy, replica, controller."""


def bench_checkpoint(model: str, directory: Path) -> Path:
    """A checkpoint of an untrained network of the shipped config ``model`` names."""
    cfg = Config.load(resolve(MODELS[model]))
    resolve_policy(cfg)
    obs, act = env_spaces(cfg.env)
    meta = CheckpointMeta.of(cfg, obs.shape, action_size(act), recorded_spaces(obs, act))
    torch.manual_seed(0)
    net = build_model(cfg.model, meta.obs_shape, meta.n_actions)
    state = {**meta.to_state(), "params": torch.from_numpy(get_flat_params(net)), "env_steps": 0}
    return CheckpointManager(directory / "checkpoints").save(state)


def request_body(policy: Any, rng: np.random.Generator) -> tuple[bytes, dict[str, str]]:
    """One observation as a client sends it: .npy bytes for images, JSON for vectors."""
    space = policy.observation_space
    if space.dtype == np.uint8:
        buf = io.BytesIO()
        np.save(buf, rng.integers(0, 256, (1, *space.shape), dtype=np.uint8))
        return buf.getvalue(), {"content-type": "application/x-npy"}
    obs = rng.normal(size=(1, *space.shape)).astype(np.float32)
    return json.dumps({"observations": obs.tolist()}).encode(), {"content-type": "application/json"}


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its children (HAProxy is the proxy actor's),
    from /proc; None where there is no /proc."""
    own = _stat(pid)
    if own is None:
        return None
    total = int(own[11]) + int(own[12])
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            child = _stat(int(entry.name))
            if child is not None and child[1] == str(pid):
                total += int(child[11]) + int(child[12])
    return total / os.sysconf("SC_CLK_TCK")


def serve_pids() -> dict[str, list[int]]:
    """The processes of the Serve application on this Ray, by role: the ingress (Serve's proxy
    actor, or the HAProxy manager with its HAProxy child), the replica, the controller."""
    import ray
    from ray.util.state import list_actors

    roles = {"ProxyActor": "proxy", "HAProxyManager": "proxy", "ServeController": "controller"}
    out: dict[str, list[int]] = {}
    gcs = ray.get_runtime_context().gcs_address
    for a in list_actors(address=gcs, filters=[("state", "=", "ALIVE")], limit=1000):
        name = str(a.class_name)
        role = roles.get(name, "replica" if name.endswith(":Policy") else None)
        if role and a.pid:
            out.setdefault(role, []).append(int(a.pid))
    return out


def role_cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far of each role's processes (and their children)."""
    out = {}
    for role, group in pids.items():
        times = [cpu_seconds(pid) for pid in group]
        if all(t is not None for t in times):
            out[role] = float(sum(t for t in times if t is not None))
    return out


async def _load(
    url: str,
    body: bytes,
    headers: dict[str, str],
    clients: int,
    seconds: float,
    max_requests: int,
    method: str = "POST",
) -> tuple[list[float], int, float]:
    """Latencies (s) of the answered requests, the errors, and the wall time.

    The clients are aiohttp's (its HTTP parser is C): a load generator written with httpx costs
    about 3 ms of CPU per request on this machine, as much as the server side, and would measure
    itself."""
    import aiohttp

    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one_client() -> None:
            nonlocal errors
            while time.perf_counter() < deadline and len(latencies) + errors < max_requests:
                t = time.perf_counter()
                try:
                    async with session.request(method, url, data=body, headers=headers) as r:
                        await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - t)
                else:
                    errors += 1

        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall = time.perf_counter() - start
    return latencies, errors, wall


def load_point(
    base: str,
    ingress: str,
    model: str,
    mode: str,
    clients: int,
    body: bytes,
    headers: dict[str, str],
    seconds: float,
    max_requests: int,
) -> LoadPoint:
    asyncio.run(_load(f"{base}/act", body, headers, clients, WARMUP_SECONDS, max_requests))
    pids = serve_pids()
    before = role_cpu(pids)
    cpu0 = time.process_time()
    lat, errors, wall = asyncio.run(
        _load(f"{base}/act", body, headers, clients, seconds, max_requests)
    )
    client_cpu = time.process_time() - cpu0
    n = max(len(lat), 1)
    after = role_cpu(pids)
    server = {role: 1e3 * (after[role] - before[role]) / n for role in after if role in before}
    lat_ms = sorted(1e3 * x for x in lat) or [float("nan")]
    return LoadPoint(
        ingress=ingress,
        model=model,
        mode=mode,
        clients=clients,
        requests=len(lat),
        errors=errors,
        seconds=wall,
        requests_per_second=len(lat) / wall,
        observations_per_second=len(lat) / wall,  # one observation per request
        p50_ms=_quantile(lat_ms, 0.50),
        p99_ms=_quantile(lat_ms, 0.99),
        client_cpu_ms_per_request=1e3 * client_cpu / n,
        server_cpu_ms_per_request=server,
    )


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def in_process_costs(policy: Any, body: bytes, headers: dict[str, str]) -> dict[str, float]:
    """Milliseconds of one request's JSON/bytes work and of forward passes, here, one thread."""
    torch.set_num_threads(1)
    limits = Limits()
    ctype = headers["content-type"]

    def parse_and_answer() -> None:
        req = parse_act(body, ctype, {}, policy.observation_space, limits)
        acted = policy.act(req.observations)
        json_body(answer(acted.actions, acted.values, 0))

    obs1 = parse_act(body, ctype, {}, policy.observation_space, limits).observations
    obs32 = np.repeat(obs1, 32, axis=0)
    forward1 = _median_ms(lambda: policy.act(obs1))
    return {
        "request_io_ms": max(_median_ms(parse_and_answer) - forward1, 0.0),
        "forward_1_ms": forward1,
        "forward_32_ms": _median_ms(lambda: policy.act(obs32)),
    }


def _median_ms(fn: Any, budget_s: float = 0.5) -> float:
    fn()
    times: list[float] = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def serve_load(
    models: list[str],
    clients: list[int],
    ingresses: list[str],
    batch_wait_ms: float,
    seconds: float,
    max_requests: int,
    repeat: int,
    address: str | None,
    dashboard_port: int | None,
    dashboard_host: str = "127.0.0.1",
) -> dict[str, Any]:
    """Every point ``repeat`` times (the median run of each is kept); one Ray per ingress."""
    load_before = os.getloadavg()[0]
    points: list[dict[str, Any]] = []
    costs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="a3c-serve-bench-") as tmp:
        checkpoints = {model: bench_checkpoint(model, Path(tmp) / model) for model in models}
        token_file = Path(tmp) / "token"
        token_file.write_text(secrets.token_urlsafe(32))
        for model, ckpt in checkpoints.items():
            policy = load_policy(ckpt)
            costs[model] = in_process_costs(policy, *request_body(policy, np.random.default_rng(0)))
        for name in ingresses:
            with ingress(name):
                points += measure_ingress(
                    name,
                    checkpoints,
                    token_file,
                    batch_wait_ms,
                    clients,
                    seconds,
                    max_requests,
                    repeat,
                    address,
                    dashboard_port,
                    dashboard_host,
                    costs,
                )
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg()[0],
        },
        "settings": {
            "seconds": seconds,
            "max_requests": max_requests,
            "repeat": repeat,
            "clients": clients,
            "ingresses": ingresses,
            "modes": MODES,
            "batch_wait_ms": batch_wait_ms,
            "observations_per_request": 1,
        },
        "points": points,
        "costs": costs,
    }


def measure_ingress(
    name: str,
    checkpoints: dict[str, Path],
    token_file: Path,
    batch_wait_ms: float,
    clients: list[int],
    seconds: float,
    max_requests: int,
    repeat: int,
    address: str | None,
    dashboard_port: int | None,
    dashboard_host: str,
    costs: dict[str, Any],
) -> list[dict[str, Any]]:
    """The points of one ingress, on a Ray started with its settings (or the cluster's). The
    application is locked with the token in ``token_file``, as one off loopback must be (the
    haproxy ingress's replicas listen on every interface): the clients send it."""
    from ray import serve

    from a3c_ray.runtime import cluster
    from a3c_ray.serve import serve_run, serving

    port = cluster.free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    points = []
    # Every Serve process, and the clients here, share this machine's CPUs.
    cpus = os.cpu_count() or 1
    started = cluster.connect(
        Config(),
        address,
        dashboard_host,
        dashboard_port=dashboard_port,
        num_cpus=cpus,
        log_to_driver=False,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=serving.QUIET)
        for model, ckpt in checkpoints.items():
            policy = load_policy(ckpt)
            body, headers = request_body(policy, np.random.default_rng(0))
            headers = {**headers, "Authorization": f"Bearer {token_file.read_text().strip()}"}
            for mode, batch in MODES.items():
                args = {
                    "source": str(ckpt),
                    "max_batch_size": batch,
                    "batch_wait_ms": batch_wait_ms,
                    "replica_cpus": 0,
                    "token_file": str(token_file),
                }
                serve.run(serving.build_app(args), name="bench", route_prefix="/")
                if mode == "batched":
                    costs[model][f"healthz_requests_per_second_{name}"] = healthz_ceiling(
                        base, max(clients), seconds, max_requests
                    )
                for n in clients:
                    runs = [
                        load_point(base, name, model, mode, n, body, headers, seconds, max_requests)
                        for _ in range(repeat)
                    ]
                    median = sorted(runs, key=lambda r: r.requests_per_second)[(repeat - 1) // 2]
                    point = dataclasses.asdict(median)
                    point["runs_requests_per_second"] = [r.requests_per_second for r in runs]
                    points.append(point)
                serve.delete("bench")
    finally:
        serve_run.stop(started, "bench")
    return points


def healthz_ceiling(base: str, clients: int, seconds: float, max_requests: int) -> float:
    """Requests/s of ``GET /healthz`` through the same ingress and replica: the HTTP path alone."""
    url = f"{base}/healthz"
    asyncio.run(_load(url, b"", {}, clients, WARMUP_SECONDS, max_requests, "GET"))
    latencies, _, wall = asyncio.run(_load(url, b"", {}, clients, seconds, max_requests, "GET"))
    return len(latencies) / wall
