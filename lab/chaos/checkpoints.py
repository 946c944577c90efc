"""What a chaos soak sees of a run's checkpoints: each one the ``latest`` pointer names, loaded
once as soon as it names it, and every file left at the end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import list_checkpoints, load_checkpoint, read_pointer


@dataclass
class CheckpointSeen:
    name: str
    at: float
    state: str
    """loaded, unreadable (it did not load), or pruned (gone, with newer ones kept, before read)."""
    env_steps: int | None = None
    error: str | None = None


class CheckpointWatch:
    """Follows the checkpoints of the run in ``run_dir`` that keeps the newest ``keep`` of them;
    ``now`` gives the soak's clock."""

    def __init__(self, run_dir: Path, keep: int, now: Callable[[], float]):
        self.directory = run_dir / layout.CHECKPOINTS
        self.keep = keep
        self.now = now
        self.seen: list[CheckpointSeen] = []
        self.latest: str | None = None
        """The name the ``latest`` pointer held when last read."""

    def follow(self) -> None:
        """Load the checkpoint the ``latest`` pointer names, each one once, as soon as it names it."""
        try:
            name = read_pointer(self.directory / layout.LATEST).name
        except (OSError, CheckpointError):
            return
        if name == self.latest:
            return
        self.latest = name
        at = round(self.now(), 2)
        try:
            state = load_checkpoint(self.directory / name)
        except CheckpointError as e:
            newer = [p for p in list_checkpoints(self.directory) if _steps(p) > _steps(Path(name))]
            if not (self.directory / name).exists() and len(newer) >= self.keep:
                self.seen.append(CheckpointSeen(name, at, "pruned"))
            else:
                self.seen.append(CheckpointSeen(name, at, "unreadable", error=str(e)))
            return
        self.seen.append(CheckpointSeen(name, at, "loaded", int(state["env_steps"])))

    def files_left(self) -> dict[str, str]:
        """Each checkpoint file in the directory now: loaded, or why it did not load."""
        out = {}
        for p in list_checkpoints(self.directory):
            try:
                load_checkpoint(p)
                out[p.name] = "loaded"
            except CheckpointError as e:
                out[p.name] = f"unreadable: {e}"
        return out


def _steps(path: Path) -> int:
    m = layout.CHECKPOINT_RE.match(path.name)
    return int(m.group(1)) if m else -1
