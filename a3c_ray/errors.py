"""What goes wrong, said once: the exit codes, the errors that map to them, one-line messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

EXIT_OK = 0
EXIT_FAILURE = 1
"""The run, or the job, failed."""
EXIT_BAD_INPUT = 2
"""Bad input: a flag, a config, a checkpoint or an address. Nothing was started or written."""
EXIT_INTERRUPTED = 130
"""Stopped by Ctrl-C or SIGTERM, after saving what there was to save."""


class ConfigError(ValueError):
    """Bad user input in the config or on the command line; ``problems`` lists each one."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or not one of ours; the message says which and where."""


class UsageError(Exception):
    """A command line argparse refuses; the message names the command and the problem."""


def install_hint(extra: str) -> str:
    """The pip line that adds one of the package's extras to this installation, for the way it
    was installed: an editable install or a run from a checkout (``-e <checkout>[extra]``), a
    plain install of a directory, a git URL or an archive (pip's ``direct_url.json`` says which),
    each with the torch already installed held (``torch==X``) so that pip does not swap it."""
    source = _install_source(extra)
    hold = _torch_hold()
    return f"install the '{extra}' extra: pip install {source}{hold}"


def _install_source(extra: str) -> str:
    root = Path(__file__).resolve().parents[1]
    checkout = root if (root / "pyproject.toml").is_file() and (root / "a3c_ray").is_dir() else None
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        direct = distribution("a3c-ray").read_text("direct_url.json")
    except (ImportError, PackageNotFoundError):
        direct = None
    return pip_target(extra, checkout, json.loads(direct) if direct else {})


def pip_target(extra: str, checkout: Path | None, direct_url: dict[str, Any]) -> str:
    """What ``pip install`` takes to add ``extra``: the ``checkout`` the code runs from (editable,
    or run in place), else where pip's ``direct_url.json`` (PEP 610) says this copy came from."""
    if checkout is not None:
        return f"-e '{checkout}[{extra}]'"
    url = str(direct_url.get("url", ""))
    if "vcs_info" in direct_url:
        vcs = direct_url["vcs_info"]
        ref = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"'a3c-ray[{extra}] @ {vcs.get('vcs', 'git')}+{url}{'@' + ref if ref else ''}'"
    if "dir_info" in direct_url and url.startswith("file://"):
        path = unquote(url.removeprefix("file://"))
        editable = "-e " if direct_url["dir_info"].get("editable") else ""
        return f"{editable}'{path}[{extra}]'"
    if "archive_info" in direct_url and url:
        return f"'a3c-ray[{extra}] @ {url}'"
    return f"'a3c-ray[{extra}]' from where a3c-ray came (its checkout or git URL)"


def _torch_hold() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        installed = version("torch")
    except (ImportError, PackageNotFoundError):
        return ""
    return f" torch=={installed.split('+')[0]}"


def one_line(e: BaseException) -> str:
    """An exception as one line: the last ``SomeError: message`` line it carries (the cause, where
    Ray wraps an error raised in another process with its traceback), else its first line."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    causes = [line for line in lines if _ERROR_LINE.match(line)]
    return causes[-1] if causes else lines[0]


# "ValueError: ...", "a3c_ray.envs.faults.EnvFailure: ...": an exception's own line in a traceback.
_ERROR_LINE = re.compile(r"^([a-z_]\w*\.)*[A-Z]\w*: ")
