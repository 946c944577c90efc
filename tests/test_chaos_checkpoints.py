"""The chaos soak's view of a run's checkpoints: each one the ``latest`` pointer names is loaded
once, a file that does not load is counted unreadable, one pruned before it was read is not, and
the files left at the end are each loaded."""

from __future__ import annotations

from pathlib import Path

from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, write_pointer
from lab.chaos.checkpoints import CheckpointWatch
from tests.test_checkpoint import make_state


def watch(run_dir: Path, keep: int = 3) -> CheckpointWatch:
    return CheckpointWatch(run_dir, keep, lambda: 1.5)


def test_each_checkpoint_the_pointer_names_is_loaded_once(tmp_path: Path) -> None:
    manager, w = CheckpointManager(tmp_path / layout.CHECKPOINTS), watch(tmp_path)
    w.follow()  # no pointer yet: nothing seen
    manager.save(make_state(env_steps=100))
    w.follow()
    w.follow()
    manager.save(make_state(env_steps=200))
    w.follow()
    assert [(s.name, s.state, s.env_steps, s.at) for s in w.seen] == [
        ("ckpt-100.pt", "loaded", 100, 1.5),
        ("ckpt-200.pt", "loaded", 200, 1.5),
    ]
    assert w.latest == "ckpt-200.pt"
    assert w.files_left() == {"ckpt-100.pt": "loaded", "ckpt-200.pt": "loaded"}


def test_a_checkpoint_that_does_not_load_is_unreadable(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path / layout.CHECKPOINTS).save(make_state(env_steps=100))
    path.write_bytes(path.read_bytes()[:100])
    w = watch(tmp_path)
    w.follow()
    assert [(s.name, s.state) for s in w.seen] == [("ckpt-100.pt", "unreadable")]
    assert w.seen[0].error and "ckpt-100.pt" in w.seen[0].error
    assert w.files_left()["ckpt-100.pt"].startswith("unreadable: ")


def test_one_pruned_before_it_was_read_is_not_unreadable(tmp_path: Path) -> None:
    directory = tmp_path / layout.CHECKPOINTS
    manager = CheckpointManager(directory, keep=1)
    manager.save(make_state(env_steps=100))
    manager.save(make_state(env_steps=200))  # prunes ckpt-100.pt
    write_pointer(directory / layout.LATEST, "ckpt-100.pt")
    w = watch(tmp_path, keep=1)
    w.follow()
    assert [(s.name, s.state) for s in w.seen] == [("ckpt-100.pt", "pruned")]
    # The same missing file with no newer ones kept is lost, not pruned.
    (directory / "ckpt-200.pt").unlink()
    write_pointer(directory / layout.LATEST, "ckpt-300.pt")
    w.follow()
    assert w.seen[-1].state == "unreadable"
