"""A cluster of ``cluster/local.sh`` (a head at 127.0.0.10 and worker nodes at 127.0.0.11, ...) in a
directory and on ports of its own, driven from Python: up, down, killed whole, a node lost and
back. The chaos soak and the tests of a lost cluster use it; nothing here imports Ray.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from a3c_ray.errors import ConfigError

SCRIPT = Path(__file__).resolve().parents[1] / "cluster" / "local.sh"
"""The script, in a source checkout of a3c-ray (an installed wheel does not ship it)."""
COMMAND_TIMEOUT = 300.0
"""Seconds for one local.sh command: on a loaded machine each node takes 20-60 s to start."""


def free_port_block(n: int) -> int:
    """The first of ``n`` consecutive ports free on every interface, above Ray's default worker
    ports (10002-19999) and below the ephemeral range."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - n)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports")


class LocalCluster:
    """``worker_nodes`` one-CPU worker nodes and a one-CPU head (the ParameterServer and the
    Monitor), in a fresh short directory under /tmp (Ray's socket paths must stay short), on a
    free block of ports. ``env`` is added to every node's environment."""

    def __init__(
        self,
        worker_nodes: int = 2,
        head_cpus: int = 1,
        node_cpus: int = 1,
        env: dict[str, str] | None = None,
    ):
        if not SCRIPT.is_file():
            raise ConfigError(
                [f"a local cluster needs {SCRIPT} (a source checkout of a3c-ray, not a wheel)"]
            )
        self.worker_nodes = worker_nodes
        self.dir = Path(tempfile.mkdtemp(prefix="a3c-", dir="/tmp"))
        base = free_port_block(3 + 2 * (worker_nodes + 1))
        self.gcs_port, self.dashboard_port = base, base + 1
        ray_bin = Path(sys.executable).with_name("ray")
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY")},
            **(env or {}),
            "RAY": os.environ.get("RAY") or str(ray_bin),
            "A3C_LOCAL_DIR": str(self.dir),
            "A3C_GCS_PORT": str(base),
            "A3C_DASHBOARD_PORT": str(base + 1),
            "A3C_CLIENT_PORT": str(base + 2),
            "A3C_METRICS_PORT": str(base + 3),
            "A3C_AGENT_PORT": str(base + 3 + worker_nodes + 1),
            "A3C_HEAD_CPUS": str(head_cpus),
            "A3C_NUM_CPUS": str(node_cpus),
        }

    @property
    def address(self) -> str:
        """The GCS address, for ``ray.init``."""
        return f"127.0.0.10:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        """The dashboard and Jobs API."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def marker(self) -> str:
        """What every process of this cluster holds in its environment (local.sh's marker)."""
        return f"A3C_RAY_LOCAL_CLUSTER={self.dir}"

    def run(self, *args: str, check: bool = True) -> str:
        """``local.sh ARGS``; its output, or RuntimeError with it when it fails and ``check``."""
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        out = done.stdout + done.stderr
        if check and done.returncode != 0:
            raise RuntimeError(f"local.sh {' '.join(args)} failed ({done.returncode}): {out}")
        return out

    def up(self) -> None:
        self.run("up", str(self.worker_nodes))

    def down(self) -> None:
        """Stop it as ``local.sh down`` does: SIGTERM, then SIGKILL after a grace."""
        self.run("down")

    def kill(self) -> None:
        """Lose it whole, as a crash would: SIGKILL to every process at once."""
        self.run("kill")

    def remove_node(self, index: int) -> None:
        """Lose worker node ``index`` (1, 2, ...): SIGKILL to its raylet and everything on it."""
        self.run("remove-node", str(index))

    def add_node(self, index: int) -> None:
        self.run("add-node", str(index))

    def processes(self) -> list[int]:
        """The processes still running that belong to this cluster."""
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if self.marker.encode() in environ.read_bytes().split(b"\0"):
                    stat = (environ.parent / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(environ.parent.name))
            except (OSError, IndexError):
                continue
        return found

    def close(self) -> list[int]:
        """Stop whatever runs and remove the directory; the processes that outlived ``down``."""
        self.run("down", check=False)
        left = self.processes()
        shutil.rmtree(self.dir, ignore_errors=True)
        return left
