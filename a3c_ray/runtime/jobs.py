"""Ray jobs, through the Jobs API of a cluster's dashboard: authenticate, submit, follow, wait."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ray.exceptions import AuthenticationError
from ray.job_submission import JobSubmissionClient
from ray.runtime_env import RuntimeEnv

from a3c_ray.errors import EXIT_FAILURE, EXIT_OK, ConfigError, one_line


@contextlib.contextmanager
def quiet_ray_logs() -> Iterator[None]:
    """Ray logs a line per ignore file while packaging and warns that it skips .git and .venv,
    which would bury the job's own logs; the command reports what matters itself."""
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        ray_logger.setLevel(level)


TERMINAL = {"SUCCEEDED": EXIT_OK, "FAILED": EXIT_FAILURE, "STOPPED": EXIT_FAILURE}


def check_runtime_env(env: dict[str, Any], source: Path | None) -> None:
    try:
        RuntimeEnv(**env)
    except (TypeError, ValueError) as e:
        where = f" in {source}" if source else ""
        raise ConfigError([f"bad runtime env{where}: {one_line(e)}"]) from None


def auth_headers() -> dict[str, str]:
    """The bearer token for the dashboard, read where Ray reads it.

    Ray's own clients send it only when ``RAY_AUTH_MODE=token``; like ``ray start`` and
    ``ray.init``, this sends it also when the mode is unset and a token exists. Order:
    ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``.
    """
    mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower()
    if mode == "disabled":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not token and token_path:
        try:
            token = Path(token_path).expanduser().read_text().strip()
        except OSError as e:
            raise ConfigError([f"RAY_AUTH_TOKEN_PATH={token_path}: {e.strerror or e}"]) from None
        if not token:
            raise ConfigError([f"RAY_AUTH_TOKEN_PATH={token_path} is empty"])
    if not token:
        default = Path.home() / ".ray" / "auth_token"
        token = default.read_text().strip() if default.is_file() else ""
    if not token:
        if mode == "token":
            raise ConfigError(
                [
                    "RAY_AUTH_MODE=token but no token found (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                    "or ~/.ray/auth_token); copy the cluster's token there"
                ]
            )
        return {}
    return {"Authorization": f"Bearer {token}"}


def make_client(address: str) -> Any:
    """A JobSubmissionClient for ``address``; an unreachable or refusing cluster is bad input."""
    try:
        return JobSubmissionClient(address, headers=auth_headers())
    except ConnectionError:
        raise ConfigError(
            [
                f"cannot reach the Ray Jobs API at {address}; start a cluster (cluster/local.sh "
                "up 2) or pass --address http://HEAD:8265"
            ]
        ) from None
    except AuthenticationError as e:
        raise ConfigError([f"{address} refused the auth token: {one_line(e)}"]) from None
    except (RuntimeError, ValueError) as e:
        raise ConfigError([f"cannot use the Ray Jobs API at {address}: {one_line(e)}"]) from None


def submit(
    client: Any, entrypoint: str, runtime_env: dict[str, Any], submission_id: str | None
) -> str:
    try:
        return str(
            client.submit_job(
                entrypoint=entrypoint,
                runtime_env=runtime_env,
                submission_id=submission_id,
                metadata={"a3c_ray": "train"},
            )
        )
    except AuthenticationError as e:
        raise ConfigError([f"the cluster refused the auth token: {one_line(e)}"]) from None
    except (RuntimeError, ValueError) as e:  # e.g. a submission id in use, a package too big
        raise ConfigError([f"job not submitted: {one_line(e)}"]) from None


def follow_logs(client: Any, submission_id: str, out: TextIO) -> None:
    """Copy the job's logs to ``out`` until it ends (polling if the log stream breaks)."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(submission_id):
            out.write(chunk)
            out.flush()

    try:
        asyncio.run(tail())
    except (RuntimeError, OSError):
        seen = 0
        while True:
            logs = client.get_job_logs(submission_id)
            out.write(logs[seen:])
            out.flush()
            seen = len(logs)
            if job_status(client, submission_id) in TERMINAL:
                return
            time.sleep(1.0)


def wait_until_done(client: Any, submission_id: str, poll: float = 0.5) -> str:
    """The job's terminal status (the log stream may end a moment before the status is set)."""
    while (status := job_status(client, submission_id)) not in TERMINAL:
        time.sleep(poll)
    return status


def job_status(client: Any, submission_id: str) -> str:
    status = client.get_job_status(submission_id)
    return str(getattr(status, "value", status))
