"""``a3c-ray submit``: run ``a3c-ray train`` as a Ray job on a cluster, through the Jobs API.

A thin wrapper over :class:`ray.job_submission.JobSubmissionClient`. It uploads the working
directory (with the excludes below), submits ``python -m a3c_ray train ARGS`` with the runtime
environment of ``cluster/runtime_env.yaml``, prints the submission id and follows the job's logs.

The job runs inside the cluster: its driver attaches to the cluster through the ``RAY_ADDRESS``
that Ray sets for every job, so ``--address`` is never passed on to ``train``.

Ctrl-C stops following, not the job (a training run may have hours left). A second Ctrl-C within
a few seconds asks the job to stop, which ``train`` answers with a final checkpoint.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from a3c_ray.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    ConfigError,
    one_line,
)
from a3c_ray.rundir.storage import is_uri
from a3c_ray.runtime.jobs import (
    TERMINAL,
    check_runtime_env,
    follow_logs,
    make_client,
    quiet_ray_logs,
    submit,
    wait_until_done,
)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
DEFAULT_RUNTIME_ENV = Path("cluster") / "runtime_env.yaml"
ENTRYPOINT = ("python", "-m", "a3c_ray", "train")
# Never uploaded: environments, run outputs, caches and the large files a run leaves. The same
# patterns are in cluster/runtime_env.yaml and .rayignore, for `ray job submit`.
DEFAULT_EXCLUDES = (
    ".git",
    ".venv",
    "venv",
    "runs",
    "__pycache__",
    "*.egg-info",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "events.out.tfevents.*",
    "*.pt",
    "*.mp4",
)
# Files at least this large are left out too, whatever their name (Ray warns at 10 MiB and
# refuses packages of 500 MiB).
MAX_FILE_BYTES = 16 * 1024 * 1024
SECOND_INTERRUPT_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``a3c-ray submit``; everything after ``--`` goes to ``a3c-ray train``."""
    parser.add_argument(
        "--address",
        help="the cluster's dashboard / Jobs API (default: RAY_API_SERVER_ADDRESS, else "
        f"RAY_ADDRESS, else {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--working-dir",
        help="directory uploaded as the job's working directory (default: the runtime env's "
        "working_dir, else the current directory)",
    )
    parser.add_argument(
        "--runtime-env",
        type=Path,
        metavar="FILE",
        help=f"runtime environment YAML (default: {DEFAULT_RUNTIME_ENV} under the working "
        "directory, if it exists)",
    )
    parser.add_argument(
        "--submission-id", help="id of the job (default: one chosen by Ray, raysubmit_...)"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="print the submission id and return at once"
    )
    parser.add_argument(
        "train_args",
        nargs="*",
        metavar="-- TRAIN_ARGS",
        help="arguments of `a3c-ray train`, after `--`, e.g. -- --env CartPole-v1 --workers 4",
    )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Submit the job, print its id, and (unless ``--no-wait``) follow it to its end."""
    with quiet_ray_logs():
        return _run(args, out or sys.stdout)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        entrypoint = build_entrypoint(args.train_args)
        runtime_env = build_runtime_env(args.working_dir, args.runtime_env)
        address = resolve_address(args.address)
        client = make_client(address)
        print(f"a3c-ray: submitting to {address}: {entrypoint}", file=sys.stderr)
        submission_id = submit(client, entrypoint, runtime_env, args.submission_id)
    except ConfigError as e:
        print(f"a3c-ray: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\na3c-ray: interrupted while submitting; see `ray job list`", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(submission_id, file=out, flush=True)
    if args.no_wait:
        print(
            f"a3c-ray: follow it with: {_ray_job_command('logs', submission_id, address)} --follow",
            file=sys.stderr,
        )
        return EXIT_OK
    try:
        follow_logs(client, submission_id, out)
        status = wait_until_done(client, submission_id)
    except KeyboardInterrupt:
        return _interrupted(client, submission_id, address)
    if status != "SUCCEEDED":
        message = getattr(client.get_job_info(submission_id), "message", None) or ""
        print(f"a3c-ray: job {submission_id} {status}: {message}".rstrip(), file=sys.stderr)
    return TERMINAL[status]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="a3c-ray submit", description="Run `a3c-ray train` as a Ray job on a cluster."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


# -- input -------------------------------------------------------------------------------------


def build_entrypoint(train_args: Sequence[str]) -> str:
    """``python -m a3c_ray train ARGS``, once the flags parse as ``a3c-ray train``'s."""
    from a3c_ray.commands.cli import build_parser
    from a3c_ray.errors import UsageError

    try:
        build_parser().parse_args(["train", *train_args])
    except UsageError as e:
        raise ConfigError([f"{e} (after `--` come the arguments of `a3c-ray train`)"]) from None
    return shlex.join([*ENTRYPOINT, *train_args])


def resolve_address(address: str | None) -> str:
    return (
        address
        or os.environ.get("RAY_API_SERVER_ADDRESS")
        or os.environ.get("RAY_ADDRESS")
        or DEFAULT_ADDRESS
    )


def load_runtime_env(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError([f"cannot read runtime env {path}: {e.strerror or e}"]) from None
    except yaml.YAMLError as e:
        raise ConfigError([f"runtime env {path} is not valid YAML: {one_line(e)}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"runtime env {path} must be a mapping of runtime_env fields"])
    return data


def build_runtime_env(working_dir: str | None, runtime_env_file: Path | None) -> dict[str, Any]:
    """The runtime env: the YAML file, the working directory, and excludes for what stays home."""
    base = Path(working_dir) if working_dir and not is_uri(working_dir) else Path(".")
    if runtime_env_file is None and (base / DEFAULT_RUNTIME_ENV).is_file():
        runtime_env_file = base / DEFAULT_RUNTIME_ENV
    env = load_runtime_env(runtime_env_file) if runtime_env_file is not None else {}
    wd = working_dir or env.get("working_dir") or "."
    if not isinstance(wd, str):
        raise ConfigError([f"runtime env working_dir must be a path or URI, not {wd!r}"])
    if not is_uri(wd):
        path = Path(wd).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError([f"working directory {wd} does not exist or is not a directory"])
        wd = str(path)
        excludes = list(env.get("excludes") or [])
        excludes += [p for p in DEFAULT_EXCLUDES if p not in excludes]
        excludes += [p for p in large_files(path, excludes) if p not in excludes]
        env["excludes"] = excludes
    env["working_dir"] = wd
    check_runtime_env(env, runtime_env_file)
    return env


def large_files(root: Path, excludes: Sequence[str], limit: int = MAX_FILE_BYTES) -> list[str]:
    """Files of ``limit`` bytes or more under ``root`` that ``excludes`` keep, as root-anchored
    excludes (``/path/to/file``)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if not _excluded(rel_dir / d, excludes)]
        for name in filenames:
            rel = rel_dir / name
            if _excluded(rel, excludes):
                continue
            try:
                size = (root / rel).stat().st_size
            except OSError:
                continue
            if size >= limit:
                print(f"a3c-ray: not uploading {rel} ({size / 2**20:.0f} MiB)", file=sys.stderr)
                found.append("/" + rel.as_posix())
    return found


def _excluded(rel: Path, patterns: Sequence[str]) -> bool:
    """gitignore-style matching, enough for excludes: a pattern without a slash matches a name
    at any depth, one with a slash matches the path from the root."""
    path = rel.as_posix()
    for pattern in patterns:
        p = pattern.rstrip("/")
        if "/" in p:
            if fnmatch.fnmatchcase(path, p.lstrip("/")):
                return True
        elif any(fnmatch.fnmatchcase(part, p) for part in rel.parts):
            return True
    return False


# -- the cluster -------------------------------------------------------------------------------


def _interrupted(client: Any, submission_id: str, address: str) -> int:
    print(
        f"\na3c-ray: stopped following job {submission_id}; it keeps running. Press Ctrl-C again "
        f"within {SECOND_INTERRUPT_SECONDS:.0f} s to stop it (it saves a final checkpoint), "
        f"or later: {_ray_job_command('stop', submission_id, address)}",
        file=sys.stderr,
    )
    try:
        time.sleep(SECOND_INTERRUPT_SECONDS)
    except KeyboardInterrupt:
        client.stop_job(submission_id)
        print(f"a3c-ray: asked job {submission_id} to stop", file=sys.stderr)
    return EXIT_INTERRUPTED


def _ray_job_command(verb: str, submission_id: str, address: str) -> str:
    return f"RAY_AUTH_MODE=token ray job {verb} {submission_id} --address {address}"


if __name__ == "__main__":
    sys.exit(main())
