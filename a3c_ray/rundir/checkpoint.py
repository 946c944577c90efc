"""Checkpoints: atomic writes, keep-last-N plus best, and loads that never unpickle objects.

Layout of ``<run_dir>/checkpoints/``: ``ckpt-<env_steps>.pt`` files, and two pointer files,
``latest`` and ``best``, each holding the name of one checkpoint. Every file is written to a
temporary name in the same directory, flushed, fsynced and renamed over its target, so a crash at
any moment leaves the previous checkpoint and pointers intact. A checkpoint is a dict of tensors,
numbers and strings, loadable with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.storage import atomic_write, fetch_checkpoint, is_uri

FORMAT = "a3c-ray/1"
REQUIRED_KEYS = ("format", "env_id", "model", "obs_shape", "n_actions", "params", "env_steps")


def write_pointer(path: Path, target: str) -> None:
    atomic_write(path, lambda f: f.write(target.encode() + b"\n"))


def read_pointer(path: Path) -> Path:
    name = path.read_text().strip()
    if not layout.CHECKPOINT_RE.match(name):
        raise CheckpointError(f"pointer {path} does not name a checkpoint file")
    return path.parent / name


def list_checkpoints(directory: Path) -> list[Path]:
    """The checkpoint files of a directory, oldest (fewest env steps) first."""
    found = []
    for p in directory.glob(layout.CHECKPOINT_GLOB) if directory.is_dir() else []:
        m = layout.CHECKPOINT_RE.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


class CheckpointManager:
    """Writes checkpoints into one directory, keeping the last ``keep`` and the best by eval return."""

    def __init__(
        self,
        directory: str | Path,
        keep: int = 3,
        on_write: Callable[[Path], None] | None = None,
        on_delete: Callable[[Path], None] | None = None,
    ):
        """``on_write`` and ``on_delete`` are told of each file written or pruned (to mirror them)."""
        self.dir = Path(directory)
        self.keep = keep
        self.on_write = on_write or (lambda p: None)
        self.on_delete = on_delete or (lambda p: None)
        self.best_return: float | None = None
        # A writer killed between its temp file and the rename left that file behind; this
        # directory has one writer, starting now, so no temp file in it is being written.
        for stale in self.dir.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        best = self.dir / layout.BEST
        if best.exists():
            with contextlib.suppress(CheckpointError, OSError):
                self.best_return = load_checkpoint(best).get("eval_return")

    def latest_steps(self) -> int | None:
        """Env steps of the newest checkpoint, read from the ``latest`` pointer's target name."""
        try:
            m = layout.CHECKPOINT_RE.match(read_pointer(self.dir / layout.LATEST).name)
        except (OSError, CheckpointError):
            return None
        return int(m.group(1)) if m else None

    def save(self, state: dict[str, Any], eval_return: float | None = None) -> Path:
        state = {**state, "format": FORMAT, "eval_return": eval_return}
        path = self.dir / layout.checkpoint_name(state["env_steps"])
        atomic_write(path, lambda f: torch.save(state, f))
        self.on_write(path)  # the checkpoint is complete wherever it goes before a pointer names it
        write_pointer(self.dir / layout.LATEST, path.name)
        self.on_write(self.dir / layout.LATEST)
        if eval_return is not None and (
            self.best_return is None or eval_return >= self.best_return
        ):
            self.best_return = eval_return
            write_pointer(self.dir / layout.BEST, path.name)
            self.on_write(self.dir / layout.BEST)
        self._prune()
        return path

    def _prune(self) -> None:
        keep = set(list_checkpoints(self.dir)[-self.keep :])
        for pointer in (layout.LATEST, layout.BEST):
            with contextlib.suppress(OSError, CheckpointError):
                keep.add(read_pointer(self.dir / pointer))
        for p in list_checkpoints(self.dir):
            if p not in keep:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                self.on_delete(p)


def resolve(path: str | Path) -> Path:
    """A checkpoint file from a file, a ``latest``/``best`` pointer, a checkpoints dir or a run dir."""
    p = Path(path)
    if p.is_dir():
        if (p / layout.CHECKPOINTS).is_dir():
            p = p / layout.CHECKPOINTS
        for pointer in (layout.BEST, layout.LATEST):
            if (p / pointer).exists():
                return resolve(p / pointer)
        found = list_checkpoints(p)
        if not found:
            raise CheckpointError(f"no checkpoint found in {path}")
        return found[-1]
    if not p.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    if not p.name.endswith(".pt"):
        return read_pointer(p)
    return p


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load and check a checkpoint; only tensors, numbers and strings are accepted from disk.

    ``path`` may also be a URI of the kind a run directory may have (``s3://...``): what it names
    is fetched first, and the checkpoint's ``path`` is then its URI."""
    remote_dir = None
    if is_uri(path):
        try:
            path, remote_dir = fetch_checkpoint(str(path))
        except (OSError, ValueError, ImportError) as e:
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"no checkpoint at {path}: {reason}") from None
    file = resolve(path)
    if file.exists() and not zipfile.is_zipfile(file):
        raise CheckpointError(f"checkpoint {file} is truncated, corrupt or not a torch checkpoint")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {file}") from None
    except Exception as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"checkpoint {file} is corrupt or not an a3c-ray checkpoint ({reason})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{file} is not an a3c-ray checkpoint")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {file} lacks {', '.join(missing)}")
    state["path"] = str(file) if remote_dir is None else f"{remote_dir}/{file.name}"
    return state


def load_latest_good(directory: str | Path) -> dict[str, Any]:
    """The newest checkpoint in ``directory`` that loads; corrupt ones are skipped and reported."""
    d = Path(directory)
    errors = []
    for p in reversed(list_checkpoints(d)):
        try:
            return load_checkpoint(p)
        except CheckpointError as e:
            errors.append(str(e))
    detail = f": {'; '.join(errors)}" if errors else ""
    raise CheckpointError(f"no loadable checkpoint in {d}{detail}")


def newest_good_state(directory: str | Path) -> dict[str, Any] | None:
    """The newest loadable checkpoint in ``directory``, or None when it holds no checkpoint."""
    if not list_checkpoints(Path(directory)):
        return None
    return load_latest_good(directory)
