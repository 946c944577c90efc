"""What goes wrong, said once: the exit codes, the errors that map to them, one-line messages."""

from __future__ import annotations

import re

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
    """How to add one of the package's extras: a3c-ray installs from its checkout or git URL
    (README, Install), not from PyPI."""
    return f"install the '{extra}' extra: pip install -e '.[{extra}]' in the a3c-ray checkout"


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
