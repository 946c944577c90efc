"""``--overwrite`` on a URI run directory (an S3 API, ``file://``) clears what the earlier run left
there, and no node's staging copy of it is read back as the new run's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import fsspec
import pytest

from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, newest_good_state
from a3c_ray.rundir.prepare import check_run_dir, prepare_run_dir
from a3c_ray.rundir.storage import RunStorage

from .conftest import moto_s3, small_config
from .policy_checkpoints import save_checkpoint

BUCKET = "a3c-overwrite"


@contextmanager
def staging(path: Path) -> Iterator[None]:
    """This process's staging folder, as another node has its own."""
    before = os.environ.get("A3C_RAY_STAGING")
    os.environ["A3C_RAY_STAGING"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("A3C_RAY_STAGING", None)
        else:
            os.environ["A3C_RAY_STAGING"] = before


def earlier_run(uri: str) -> None:
    """What a finished run leaves at ``uri``: config, summary, events, and checkpoints with their
    pointers, written the way the driver and the Monitor write them."""
    storage = RunStorage(uri, own_staging="monitor")
    storage.write_text(layout.CONFIG, "env:\n  id: CartPole-v1\n")
    storage.write_text(layout.SUMMARY, "{}\n")
    storage.write_text(f"{layout.TENSORBOARD}/events.out.tfevents.1", "events")
    ckpts = CheckpointManager(
        storage.local / layout.CHECKPOINTS,
        on_write=lambda p: storage.upload(str(p.relative_to(storage.local))),
    )
    for steps in (1000, 2000):
        save_checkpoint(storage.local, env_steps=steps, eval_return=float(steps), manager=ckpts)


@pytest.mark.parametrize("scheme", ["s3", "file"])
def test_overwrite_clears_a_uri_run_directory_and_nothing_of_it_is_restored(
    tmp_path: Path, scheme: str
) -> None:
    server = moto_s3(BUCKET, tmp_path / "staging") if scheme == "s3" else nullcontext()
    with server, staging(tmp_path / "staging"):
        uri = f"s3://{BUCKET}/runs/cp" if scheme == "s3" else f"file://{tmp_path}/remote/cp"
        fs, root = fsspec.core.url_to_fs(uri)
        earlier_run(uri)
        assert len(fs.find(root)) == 7  # config, summary, events, 2 checkpoints, 2 pointers
        with staging(tmp_path / "other-node"):  # a node that staged the earlier run's checkpoints
            assert newest_good_state(RunStorage(uri).download_checkpoints()) is not None

        cfg = small_config(uri)
        with pytest.raises(ConfigError, match="already exists"):
            check_run_dir(cfg, overwrite=False, resume=False)
        storage = check_run_dir(cfg, overwrite=True, resume=False)
        prepare_run_dir(storage, overwrite=True)

        fs.invalidate_cache()
        assert fs.find(root) == []
        assert not RunStorage(uri).exists()
        # What a ParameterServer of the new run restores from, on this node and on the other:
        # nothing, so it starts from the seed's weights and counters.
        assert newest_good_state(RunStorage(uri).download_checkpoints()) is None
        with staging(tmp_path / "other-node"):
            assert newest_good_state(RunStorage(uri).download_checkpoints()) is None
