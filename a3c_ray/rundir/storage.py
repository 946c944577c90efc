"""Where a run's files live: a local path (one machine, or a shared mount such as NFS) or a URI.

A URI run directory (``s3://bucket/runs/cp``, ``gs://...``, ``file:///mnt/shared/runs/cp``, any
filesystem fsspec knows) is reached the way Ray Train's ``storage_path`` is: every actor works in a
local staging directory and copies whole files to the URI after writing them, and from it before
reading them. A file appears at the URI only once complete: object stores make each upload atomic,
and for other filesystems the copy goes to a temporary name first. So the Monitor's checkpoints
reach every node, and a ParameterServer restarted on another node, or a resumed run, reads them back.

Layout (the same locally and at the URI): ``config.yaml``, ``summary.json``, ``checkpoints/``
(``ckpt-<steps>.pt``, ``latest``, ``best``) and ``tb/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec

from a3c_ray.rundir import layout


def is_uri(path: str | os.PathLike[str]) -> bool:
    return "://" in str(path)


def staging_root() -> Path:
    return Path(os.environ.get("A3C_RAY_STAGING", Path(tempfile.gettempdir()) / "a3c-ray-staging"))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, then fsync and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


class RunStorage:
    """The run directory ``location``, and the local directory that mirrors it on this node.

    The actors of one node that read a URI run directory (ParameterServer shards, ``serve``
    replicas, ``eval``) share one staging directory for it. The run's one writer of checkpoints
    (the Monitor) stages in a directory of its own (``own_staging``): a reader fetching the URI's
    ``latest`` or ``best`` pointer must never replace the newer one the writer has just written
    and not yet uploaded, which it would then upload (or prune by)."""

    def __init__(self, location: str | os.PathLike[str], own_staging: str | None = None):
        self.location = str(location)
        self.remote = is_uri(self.location)
        if self.remote:
            self.fs, self.root = fsspec.core.url_to_fs(self.location)
            digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
            self.local = staging_root() / (
                digest if own_staging is None else f"{digest}-{own_staging}"
            )
        else:
            self.fs, self.root = None, self.location
            self.local = Path(self.location)

    def __repr__(self) -> str:
        return f"RunStorage({self.location!r})"

    def where(self, rel: str) -> str:
        """Where the run's file ``rel`` lives, as a user reaches it: its URI for a remote run (not
        this node's staging copy), its path for a local one."""
        if self.remote:
            return f"{self.location.rstrip('/')}/{rel}"
        return str(self.local / rel)

    def _remote(self, rel: str) -> str:
        return f"{self.root.rstrip('/')}/{rel}"

    # -- questions -----------------------------------------------------------------------------
    def exists(self) -> bool:
        """True when the run directory exists and holds anything."""
        if not self.remote:
            return self.local.exists() and any(self.local.iterdir())
        assert self.fs is not None
        return bool(self.fs.exists(self.root) and self.fs.ls(self.root))

    def has(self, rel: str) -> bool:
        if not self.remote:
            return (self.local / rel).exists()
        assert self.fs is not None
        return bool(self.fs.exists(self._remote(rel)))

    # -- moving files --------------------------------------------------------------------------
    def write_text(self, rel: str, text: str) -> None:
        """Write the file ``rel`` atomically: staged in the local directory, then copied to the
        run directory (a URI's)."""
        atomic_write(self.local / rel, lambda f: f.write(text.encode()))
        self.upload(rel)

    def upload(self, rel: str) -> None:
        """Copy the local file ``rel`` to the run directory (nothing to do for a local run)."""
        if not self.remote:
            return
        assert self.fs is not None
        target = self._remote(rel)
        self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        if getattr(self.fs, "local_file", False) or self.fs.protocol in ("file", "local"):
            tmp = f"{target}.uploading"
            self.fs.put_file(str(self.local / rel), tmp)
            self.fs.mv(tmp, target)
        else:
            self.fs.put_file(str(self.local / rel), target)

    def upload_tree(self, rel: str) -> None:
        """Copy every file under the local directory ``rel`` (TensorBoard events)."""
        if not self.remote:
            return
        base = self.local / rel
        for p in sorted(base.rglob("*")) if base.exists() else []:
            if p.is_file():
                self.upload(str(p.relative_to(self.local)))

    def delete(self, rel: str) -> None:
        """Remove the file ``rel`` from the run directory (a URI's; the caller removes its own
        local copy)."""
        if self.remote:
            assert self.fs is not None
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self._remote(rel))

    def delete_tree(self, rel: str) -> None:
        """Remove the directory ``rel`` and everything in it from the run directory (a URI's), as
        ``--overwrite`` clears an earlier run's checkpoints and events. On an object store a
        directory is only a prefix of its files' names: each file under it goes."""
        if self.remote:
            assert self.fs is not None
            target = self._remote(rel)
            if self.fs.exists(target):
                self.fs.rm(target, recursive=True)
            self.fs.invalidate_cache(target)

    def download(self, rel: str) -> Path:
        """The local copy of ``rel``, fetched from the run directory when it is remote."""
        local = self.local / rel
        if self.remote:
            assert self.fs is not None
            local.parent.mkdir(parents=True, exist_ok=True)
            # To a temporary name, then renamed: actors on one node share its staging directory,
            # and one may read a checkpoint while another fetches the same file again.
            # (Not *.tmp: a starting Monitor removes those as its own leftovers.)
            fd, tmp = tempfile.mkstemp(prefix=f".{local.name}.", suffix=".get", dir=local.parent)
            os.close(fd)
            try:
                self.fs.get_file(self._remote(rel), tmp)
                os.replace(tmp, local)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        return local

    def download_dir(self, rel: str) -> Path:
        """The local copy of the directory ``rel``: every complete file in it, and no file it no
        longer holds (pruned, or the whole run replaced by ``--overwrite``), which would otherwise
        be read back as the run's."""
        local = self.local / rel
        if self.remote:
            assert self.fs is not None
            self.fs.invalidate_cache(self._remote(rel))
            there: set[str] = set()
            if self.has(rel):
                for entry in self.fs.ls(self._remote(rel), detail=False):
                    name = str(entry).rstrip("/").rsplit("/", 1)[-1]
                    if not name.endswith(".uploading") and not self.fs.isdir(entry):
                        self.download(f"{rel}/{name}")
                        there.add(name)
            for p in local.iterdir() if local.is_dir() else []:
                # (Dot files are temporary names: another actor's download or write in progress.)
                if p.is_file() and not p.name.startswith(".") and p.name not in there:
                    with contextlib.suppress(FileNotFoundError):
                        p.unlink()
        return local

    def download_checkpoints(self) -> Path:
        """The local checkpoints directory, holding every checkpoint and pointer of the run."""
        return self.download_dir(layout.CHECKPOINTS)


def fetch_checkpoint(uri: str) -> tuple[Path, str]:
    """A local copy of what a checkpoint URI names, for ``checkpoint.resolve``: a ``ckpt-*.pt``
    file, a ``latest``/``best`` pointer with the file it names, or a checkpoints or run directory
    with every checkpoint in it; and the URI of the directory that holds those checkpoints. The
    copies are staged as a run directory's are."""
    base = uri.rstrip("/")
    parent, _, name = base.rpartition("/")
    fs, path = fsspec.core.url_to_fs(base)
    if not fs.exists(path):
        raise FileNotFoundError(f"nothing at {uri}")
    if fs.isdir(path):
        if fs.isdir(f"{path}/checkpoints"):  # a run directory
            return RunStorage(base).download_checkpoints(), f"{base}/checkpoints"
        return RunStorage(parent).download_dir(name), base
    storage = RunStorage(parent)
    local = storage.download(name)
    if not name.endswith(".pt"):  # a pointer: fetch the checkpoint it names beside it
        target = local.read_text().strip()
        if "/" not in target and storage.has(target):
            storage.download(target)
    return local, parent


def describe(storage: RunStorage) -> dict[str, Any]:
    return {"location": storage.location, "remote": storage.remote, "local": str(storage.local)}
