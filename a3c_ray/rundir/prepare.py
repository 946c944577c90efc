"""The run directory: where it is, what it holds, and how a run takes it over.

Run directories are checked before Ray starts and created only after, so bad input never leaves
anything behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from datetime import datetime
from pathlib import Path

from a3c_ray.algo.optim import optimizer_mismatch
from a3c_ray.config import Config
from a3c_ray.errors import CheckpointError, ConfigError, one_line
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_latest_good
from a3c_ray.rundir.storage import RunStorage


def in_ray_job() -> bool:
    """True in the entrypoint of a Ray job (the job supervisor hands it its job config)."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


def default_run_dir(env_id: str) -> Path:
    """``runs/<env>-<time>``; in a Ray job, under ``~/a3c-ray/`` instead, because Ray deletes a
    job's working directory when the job ends."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path.home() / "a3c-ray" / "runs" if in_ray_job() else Path("runs")
    return base / f"{env_id.replace('/', '_')}-{stamp}"


def check_run_dir(
    cfg: Config, overwrite: bool, resume: bool, existing_ok: bool = False
) -> RunStorage:
    """The run directory to use: new, the one to resume, or an old one with ``overwrite``; writes
    nothing. With ``existing_ok`` (``--resume auto``) a run may start in a directory that exists
    without a run in it, and one resumed before its first checkpoint starts from the beginning."""
    location = cfg.run.run_dir or str(default_run_dir(cfg.env.id))
    try:
        storage = RunStorage(location)
        exists = storage.exists() and not (existing_ok and not storage.has(layout.CONFIG))
        if resume:
            local = storage.download_checkpoints()
            if not (existing_ok and not list_checkpoints(local)):
                state = load_latest_good(local)
                # Statistics of another optimizer would fail at the first push.
                problem = optimizer_mismatch(state, cfg.algo)
                if problem:
                    raise CheckpointError(f"its checkpoint {problem}")
    except CheckpointError as e:
        raise ConfigError([f"cannot resume {location}: {e}"]) from None
    except (
        OSError,
        ValueError,
        ImportError,
    ) as e:  # unreachable storage, unknown scheme, no driver
        raise ConfigError([f"cannot use run directory {location}: {one_line(e)}"]) from None
    if not resume and exists and not overwrite:
        raise ConfigError(
            [
                f"run directory {location} already exists; pass --resume {location} to continue it "
                "or --overwrite to replace it"
            ]
        )
    cfg.run.run_dir = location
    return storage


def prepare_run_dir(storage: RunStorage, overwrite: bool) -> None:
    """Create the run directory; with ``overwrite``, first remove what an earlier run left in it."""
    if overwrite:
        for sub in (layout.CHECKPOINTS, layout.TENSORBOARD):
            shutil.rmtree(storage.local / sub, ignore_errors=True)
            storage.delete_tree(sub)
        for name in (layout.SUMMARY, layout.CONFIG):
            with contextlib.suppress(FileNotFoundError):
                (storage.local / name).unlink()
            storage.delete(name)
    storage.local.mkdir(parents=True, exist_ok=True)
