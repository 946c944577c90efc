"""Shared fixtures. The tests that ask for a local Ray (``ray_session``, ``dashboard_ray``) run after
the others, grouped by the Ray they ask for, and each group shares one (ray.init costs seconds)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

# Ray's "single-machine" mode: every node of a test cluster (and every child process) takes the
# loopback address, so no test traffic leaves 127.0.0.0/8.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest

from a3c_ray.config import Config

USER_RAY_VARIABLES = (
    "RAY_ADDRESS",
    "RAY_API_SERVER_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "RAY_PROMETHEUS_HOST",
    "RAY_GRAFANA_HOST",
    "RAY_GRAFANA_IFRAME_HOST",
)
"""What docs/cluster.md and docs/monitoring.md tell users to export. The suite starts without
them, whatever the shell that runs it holds; a test that needs one sets it itself."""
for _name in USER_RAY_VARIABLES:
    os.environ.pop(_name, None)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """As in every actor: one intra-op thread, so that timings hold on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.fixture(autouse=True)
def no_ray_unless_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test not marked ``ray`` must not start one (``make fast`` and ``make unit`` leave Ray
    out): a call that starts Ray on its own, such as ``ray.get_runtime_context()``, fails here."""
    before = _ray_running()
    yield
    if not before and _ray_running() and request.node.get_closest_marker("ray") is None:
        import ray

        ray.shutdown()
        pytest.fail("this test started Ray: mark it with @pytest.mark.ray or keep Ray out of it")


def init_local_ray(**kwargs: Any) -> Any:
    """``ray.init(address="local", **kwargs)``, once more if the node did not register within
    Ray's fixed 30 s (a machine busy with other work can take longer to start a raylet)."""
    import ray

    # Ray reads its auth mode when it is imported, and reads it again only where ray.init turns
    # token auth on by default (the mode unset). A command run in this process earlier (status,
    # scale) may have set the mode after Ray's import: a new local Ray starts from the default.
    os.environ.pop("RAY_AUTH_MODE", None)
    try:
        return ray.init(address="local", **kwargs)
    except Exception as e:
        if "timed out during startup" not in str(e):
            raise
        ray.shutdown()
        return ray.init(address="local", **kwargs)


SHARED_RAY: dict[str, Any] = {
    "num_cpus": 4,
    "include_dashboard": False,
    "logging_level": "WARNING",
    "_node_ip_address": "127.0.0.1",
}
"""The options of ``ray_session``'s Ray; ``dashboard_ray`` adds a dashboard and a metrics port."""

RAY_FIXTURES = ("dashboard_ray", "ray_session")
"""The shared Rays, in the order their tests run (after every test that asks for neither)."""

_next_item: list[pytest.Item | None] = [None]
_running: dict[str, Any] = {}
"""The shared Ray running now: its fixture's name ("kind") and what that fixture yields."""


def _ray_kind(fixturenames: list[str]) -> str | None:
    return next((name for name in RAY_FIXTURES if name in fixturenames), None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that ask for no shared Ray run first; then those on the Ray with a dashboard,
    then those on the plain one: each group keeps its order (module by module), its first test
    starts the group's Ray and the others have it. A test that must see no Ray running (a bad
    input that starts nothing) asks for none, and so runs while none does."""
    order: dict[str | None, int] = {None: 0}
    order.update((kind, i + 1) for i, kind in enumerate(RAY_FIXTURES))
    items.sort(key=lambda item: order[_ray_kind(item.fixturenames)])  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _next_item[0] = nextitem  # read by the shared Rays' teardown, which runs inside this hook
    return (yield)


def _ray_left_clean(timeout: float = 5.0) -> bool:
    """No actor of a run alive, every CPU free: the next module may have this Ray as it is."""
    import time

    import ray

    deadline = time.monotonic() + timeout
    while True:
        named = ray.util.list_named_actors(all_namespaces=True)
        free = ray.available_resources().get("CPU", 0.0) >= ray.cluster_resources().get("CPU", 0.0)
        if not named and free:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _start_ray(kind: str) -> Any:
    import ray

    if ray.is_initialized():
        ray.shutdown()
    if kind == "ray_session":
        init_local_ray(**SHARED_RAY)  # a new Ray, even where a `ray start` cluster runs here
        return None
    metrics_port = free_port()
    ctx = init_local_ray(
        **{**SHARED_RAY, "include_dashboard": True},
        dashboard_port=free_port(),
        _metrics_export_port=metrics_port,
    )
    return {"metrics_port": metrics_port, "dashboard_url": "http://" + ctx.dashboard_url}


def _shared_ray(kind: str) -> Iterator[Any]:
    """The Ray of ``kind`` for one module: the running one if it is of that kind (or, for
    ``ray_session``, any), else a new one. The module leaves it to the next test only when that
    test asks for the same Ray and nothing of this module's is left on it; otherwise it is shut
    down."""
    import ray

    running = _running.get("kind") if ray.is_initialized() else None
    if running is None or (running != kind and kind != "ray_session"):
        _running.update(kind=kind, value=_start_ray(kind))
    value = _running["value"] if _running.get("kind") == kind else None
    yield value
    following = _next_item[0]
    if not ray.is_initialized():
        return
    wants = _ray_kind(following.fixturenames) if following is not None else None  # type: ignore[attr-defined]
    if wants is None or wants != _running.get("kind") or not _ray_left_clean():
        ray.shutdown()
        _running.clear()


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """A local Ray with 4 CPUs and no dashboard, shared by the modules that ask for it."""
    yield from _shared_ray("ray_session")


@pytest.fixture(scope="module")
def dashboard_ray() -> Iterator[dict[str, Any]]:
    """A local Ray with 4 CPUs, a dashboard (Ray's state API, the Jobs API) and a metrics port:
    ``{"metrics_port": ..., "dashboard_url": "http://127.0.0.1:..."}``."""
    yield from _shared_ray("dashboard_ray")


def small_config(tmp_path: os.PathLike[str] | str, **overrides: object) -> Config:
    """A CartPole config that runs in seconds; ``overrides`` are dotted fields.

    Its actors start without ``run.actor_env`` (malloc settings for hours-long Atari runs): an
    actor with a runtime_env of its own cannot take one of the worker processes Ray keeps
    started, and the first one of a Ray waits for its runtime_env to be set up. The shipped
    default is tested where runs use it (test_observe, the learning tests, the command lines)."""
    cfg = Config()
    cfg.run.run_dir = str(tmp_path)
    cfg.run.progress = False
    cfg.run.workers = 2
    cfg.run.actor_env = {}
    cfg.env.num_envs = 2
    cfg.monitor.eval_episodes = 2
    for key, value in overrides.items():
        cfg.set(key.replace("__", "."), value)
    return cfg


def named_actor(suffix: str, run_dir: os.PathLike[str] | str, timeout: float = 60.0) -> object:
    """The handle of a live run's actor ``<run-id>/<suffix>``; the run id starts with the run dir's name."""
    import time

    import ray

    from a3c_ray.runtime.remote import NAMESPACE

    prefix = os.path.basename(str(run_dir))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if (
                entry["namespace"] == NAMESPACE
                and name.startswith(prefix)
                and name.endswith("/" + suffix)
            ):
                return ray.get_actor(name, namespace=NAMESPACE)
        time.sleep(0.2)
    raise TimeoutError(f"no actor {suffix} of run {prefix}")


def wait_for(predicate: object, timeout: float = 120.0, what: str = "condition") -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


AFTER_RECOVERY = 3_000
"""Env steps a fault test lets its run train once it has recovered, before it ends the run."""


def progress(run_dir: os.PathLike[str] | str) -> Any:
    """The live run's ``Progress``, from its ParameterServer (the coordinator, of several shards)."""
    import ray

    return ray.get(named_actor("ParameterServer", run_dir).progress.remote())  # type: ignore[attr-defined]


def train_on_then_stop(run_dir: os.PathLike[str] | str, steps: int = AFTER_RECOVERY) -> int:
    """Let the live run train ``steps`` more env steps, then end it as its step budget would
    (``stopped_because: max_steps``): a fault test ends once training has gone on after the
    fault, not after a fixed budget. The env steps it counted from."""
    import ray

    start = int(progress(run_dir).env_steps)
    wait_for(lambda: progress(run_dir).env_steps >= start + steps, what=f"{steps} env steps more")
    ray.get(named_actor("ParameterServer", run_dir).request_stop.remote("max_steps"))  # type: ignore[attr-defined]
    return start


def interruptible() -> None:
    """In a child, before exec: Ctrl-C's default, which a suite started in the background
    (``cmd &``, where the shell ignores SIGINT) would otherwise pass on as ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_bounded(
    command: list[str], timeout: float, cleanup: float = 120.0, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True, **kwargs)`` for a command that
    starts Ray or a cluster of its own. Past ``timeout`` seconds, or when the test is stopped, it
    gets Ctrl-C, so that it stops what it started, and ``cleanup`` seconds later SIGKILL. Keep
    ``timeout + cleanup`` below the test's pytest timeout, whose SIGKILL would leave a cluster up."""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
        **kwargs,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as e:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=cleanup)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if not isinstance(e, subprocess.TimeoutExpired):
            raise
        pytest.fail(
            f"{' '.join(command[:5])} ... ran past {timeout:g} s:\n{out[-2000:]}\n{err[-4000:]}"
        )
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for dashboards and metrics of test clusters)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3(bucket: str, staging: os.PathLike[str] | str) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 holding ``bucket``, with the AWS variables (and the run
    directories' staging folder) pointing at it while the block runs; the variables it set."""
    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "A3C_RAY_STAGING": str(staging),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        s3fs.S3FileSystem.clear_instance_cache()
        s3fs.S3FileSystem().mkdir(bucket)
        yield env
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
