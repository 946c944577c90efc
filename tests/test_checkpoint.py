"""Checkpoints: round trip, weights-only loads, keep-last-N plus best, pointers, atomic writes,
and clear errors for files that are cut short, garbage, foreign or carry pickled objects."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import a3c_ray.rundir.checkpoint as ckpt
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import (
    FORMAT,
    CheckpointManager,
    list_checkpoints,
    load_checkpoint,
    load_latest_good,
    resolve,
)


def make_state(env_steps: int = 1000, version: int = 7, seed: int = 0) -> dict[str, Any]:
    """A state shaped like ``ParameterServer.state_dict()``, with a real Adam after one step."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    flat = torch.nn.Parameter(torch.nn.utils.parameters_to_vector(net.parameters()).detach())
    opt = torch.optim.Adam([flat], lr=1e-3, eps=1e-5)
    flat.grad = torch.randn_like(flat)
    opt.step()
    return {
        "env_id": "CartPole-v1",
        "model": {"kind": "mlp", "hidden_sizes": [8], "activation": "tanh", "lstm": False},
        "obs_shape": [4],
        "n_actions": 3,
        "params": flat.detach().clone(),
        "optimizer": opt.state_dict(),
        "version": version,
        "env_steps": env_steps,
        "gradients_applied": 12,
        "recent_returns": torch.tensor([10.0, 21.5], dtype=torch.float64),
        "train_seconds": 3.25,
    }


def assert_same(a: Any, b: Any) -> None:
    """Deep equality over dicts, lists, tuples and tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict)
        assert set(a) == set(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def pointer(directory: Path, name: str) -> str:
    return (directory / name).read_text().strip()


# -- round trip -----------------------------------------------------------------------------


def test_save_then_load_round_trips_the_state(tmp_path: Path) -> None:
    state = make_state()
    manager = CheckpointManager(tmp_path, keep=3)
    path = manager.save(state, eval_return=42.0)
    assert path == tmp_path / "ckpt-1000.pt"

    loaded = load_checkpoint(path)
    for key, value in state.items():
        assert_same(value, loaded[key])
    assert loaded["format"] == FORMAT
    assert loaded["eval_return"] == 42.0
    assert loaded["path"] == str(path)
    assert "format" not in state  # the caller's dict is not modified


def test_loaded_optimizer_state_continues_exactly_like_the_original(tmp_path: Path) -> None:
    state = make_state()
    path = CheckpointManager(tmp_path).save(state)
    loaded = load_checkpoint(path)

    def next_step(params: torch.Tensor, opt_state: dict[str, Any]) -> torch.Tensor:
        p = torch.nn.Parameter(params.clone())
        opt = torch.optim.Adam([p], lr=1e-3, eps=1e-5)
        opt.load_state_dict(opt_state)
        p.grad = torch.full_like(p, 0.5)
        opt.step()
        return p.detach()

    assert torch.equal(
        next_step(state["params"], state["optimizer"]),
        next_step(loaded["params"], loaded["optimizer"]),
    )


def test_checkpoints_load_with_plain_weights_only_torch_load(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path).save(make_state(), eval_return=1.5)
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == FORMAT
    assert raw["env_steps"] == 1000
    assert_same(make_state()["params"], raw["params"])


def test_load_checkpoint_accepts_a_run_dir_a_checkpoints_dir_and_pointers(tmp_path: Path) -> None:
    directory = tmp_path / layout.CHECKPOINTS
    CheckpointManager(directory).save(make_state(env_steps=500))
    for where in (tmp_path, directory, directory / layout.LATEST, directory / "ckpt-500.pt"):
        assert load_checkpoint(where)["env_steps"] == 500


# -- pruning and pointers -------------------------------------------------------------------


def test_keep_last_n_keeps_the_best_even_when_older(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    manager.save(make_state(env_steps=100), eval_return=10.0)
    manager.save(make_state(env_steps=200), eval_return=5.0)
    manager.save(make_state(env_steps=300), eval_return=None)
    manager.save(make_state(env_steps=400), eval_return=1.0)

    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt-100.pt", "ckpt-300.pt", "ckpt-400.pt"]
    assert pointer(tmp_path, "latest") == "ckpt-400.pt"
    assert pointer(tmp_path, "best") == "ckpt-100.pt"
    assert load_checkpoint(tmp_path / layout.BEST)["eval_return"] == 10.0

    # a better evaluation moves 'best', and the old best is pruned once it falls out
    manager.save(make_state(env_steps=500), eval_return=11.0)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt-400.pt", "ckpt-500.pt"]
    assert pointer(tmp_path, "best") == "ckpt-500.pt"


@pytest.mark.parametrize("keep", [1, 3])
def test_keep_last_n_without_evaluations(tmp_path: Path, keep: int) -> None:
    manager = CheckpointManager(tmp_path, keep=keep)
    for steps in range(100, 700, 100):
        manager.save(make_state(env_steps=steps))
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == [f"ckpt-{s}.pt" for s in range(100, 700, 100)][-keep:]
    assert pointer(tmp_path, "latest") == "ckpt-600.pt"
    assert not (tmp_path / layout.BEST).exists()


def test_a_new_manager_remembers_the_best_return_from_disk(tmp_path: Path) -> None:
    CheckpointManager(tmp_path, keep=1).save(make_state(env_steps=100), eval_return=50.0)
    manager = CheckpointManager(tmp_path, keep=1)
    assert manager.best_return == 50.0
    manager.save(make_state(env_steps=200), eval_return=20.0)
    assert pointer(tmp_path, "best") == "ckpt-100.pt"
    assert (tmp_path / "ckpt-100.pt").exists()
    assert pointer(tmp_path, "latest") == "ckpt-200.pt"


def test_a_manager_survives_a_corrupt_best_checkpoint(tmp_path: Path) -> None:
    CheckpointManager(tmp_path).save(make_state(env_steps=100), eval_return=50.0)
    (tmp_path / "ckpt-100.pt").write_bytes(b"garbage")
    manager = CheckpointManager(tmp_path)
    assert manager.best_return is None
    manager.save(make_state(env_steps=200), eval_return=1.0)
    assert pointer(tmp_path, "best") == "ckpt-200.pt"


def test_pointer_files_name_their_checkpoint(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(make_state(env_steps=100), eval_return=3.0)
    manager.save(make_state(env_steps=200), eval_return=2.0)
    assert (tmp_path / layout.LATEST).read_text() == "ckpt-200.pt\n"
    assert (tmp_path / layout.BEST).read_text() == "ckpt-100.pt\n"


# -- resolve --------------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run dir whose 'best' (100 steps) and 'latest' (200 steps) are different checkpoints."""
    manager = CheckpointManager(tmp_path / layout.CHECKPOINTS, keep=3)
    manager.save(make_state(env_steps=100), eval_return=9.0)
    manager.save(make_state(env_steps=200), eval_return=1.0)
    return tmp_path


def test_resolve_a_pointer_file(run_dir: Path) -> None:
    directory = run_dir / layout.CHECKPOINTS
    assert resolve(directory / layout.LATEST) == directory / "ckpt-200.pt"
    assert resolve(directory / layout.BEST) == directory / "ckpt-100.pt"


def test_resolve_a_checkpoint_file(run_dir: Path) -> None:
    file = run_dir / layout.CHECKPOINTS / "ckpt-200.pt"
    assert resolve(file) == file
    assert resolve(str(file)) == file


def test_resolve_a_run_dir_and_a_checkpoints_dir_agree(run_dir: Path) -> None:
    directory = run_dir / layout.CHECKPOINTS
    # a directory resolves through its pointers, 'best' first
    assert resolve(run_dir) == directory / "ckpt-100.pt"
    assert resolve(directory) == directory / "ckpt-100.pt"


def test_resolve_a_dir_with_only_a_latest_pointer(tmp_path: Path) -> None:
    CheckpointManager(tmp_path).save(make_state(env_steps=300))
    assert resolve(tmp_path) == tmp_path / "ckpt-300.pt"


def test_resolve_a_dir_without_pointers_picks_the_most_env_steps(tmp_path: Path) -> None:
    for steps in (20, 100, 9):  # 100 sorts before 20 and 9 as text; the number decides
        torch.save({"x": torch.zeros(1)}, tmp_path / f"ckpt-{steps}.pt")
    (tmp_path / "notes.pt").write_bytes(b"")
    assert resolve(tmp_path) == tmp_path / "ckpt-100.pt"
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt-9.pt",
        "ckpt-20.pt",
        "ckpt-100.pt",
    ]


def test_resolve_reports_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        resolve(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        resolve(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "ckpt-5.pt")
    (tmp_path / layout.LATEST).write_text("../../etc/passwd\n")
    with pytest.raises(CheckpointError, match="does not name a checkpoint"):
        resolve(tmp_path / layout.LATEST)


# -- atomic writes --------------------------------------------------------------------------


real_save = torch.save


def failing_save(exc: BaseException) -> Callable[..., None]:
    """A torch.save that writes part of a zip archive, then fails like a full disk or a kill."""

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        buf = io.BytesIO()
        real_save(obj, buf)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise exc

    return save


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_save_leaves_the_previous_checkpoint_and_pointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(make_state(env_steps=100), eval_return=5.0)
    before = sorted(p.name for p in tmp_path.iterdir())

    monkeypatch.setattr(ckpt.torch, "save", failing_save(exc))
    with pytest.raises(type(exc)):
        manager.save(make_state(env_steps=200), eval_return=99.0)
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "ckpt-200.pt").exists()
    assert pointer(tmp_path, "latest") == "ckpt-100.pt"
    assert pointer(tmp_path, "best") == "ckpt-100.pt"
    assert load_checkpoint(tmp_path / layout.LATEST)["env_steps"] == 100
    assert load_latest_good(tmp_path)["env_steps"] == 100
    assert manager.best_return == 5.0  # the failed save did not claim to be best


def test_a_failed_overwrite_keeps_the_old_file_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(make_state(env_steps=100, version=1))
    monkeypatch.setattr(ckpt.torch, "save", failing_save(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        manager.save(make_state(env_steps=100, version=2))
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "ckpt-100.pt")["version"] == 1
    assert leftovers(tmp_path) == []


def test_successful_saves_leave_no_temp_files(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    for steps in (1, 2, 3):
        manager.save(make_state(env_steps=steps), eval_return=float(steps))
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best",
        "ckpt-2.pt",
        "ckpt-3.pt",
        "latest",
    ]


def test_a_writer_killed_mid_write_leaves_a_temp_file_the_next_manager_removes(
    tmp_path: Path,
) -> None:
    """A Monitor killed between a temp file and its rename leaves the file; the restarted Monitor's
    manager removes it and keeps every checkpoint and pointer."""
    CheckpointManager(tmp_path, keep=2).save(make_state(env_steps=7), eval_return=1.0)
    (tmp_path / ".latest.abc123.tmp").write_bytes(b"ckpt-")
    (tmp_path / ".ckpt-9.pt.def456.tmp").write_bytes(b"PK")
    CheckpointManager(tmp_path, keep=2)
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "ckpt-7.pt", "latest"]
    assert load_checkpoint(tmp_path / layout.LATEST)["env_steps"] == 7


# -- bad files ------------------------------------------------------------------------------


def test_a_truncated_checkpoint_raises_checkpoint_error(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path).save(make_state())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=path.name):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content",
    [b"", b"not a checkpoint at all\n", bytes(range(256)) * 8, b"PK\x03\x04" + b"\x00" * 100],
    ids=["empty", "text", "bytes", "zip-header-only"],
)
def test_a_garbage_file_raises_checkpoint_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ckpt-100.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_a_zip_that_is_not_a_torch_file_raises_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-100.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_load_latest_good_skips_a_corrupt_newest_checkpoint(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(make_state(env_steps=100))
    newest = manager.save(make_state(env_steps=200))
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / layout.LATEST)
    good = load_latest_good(tmp_path)
    assert good["env_steps"] == 100
    assert good["path"] == str(tmp_path / "ckpt-100.pt")


def test_load_latest_good_reports_every_failure_when_none_loads(tmp_path: Path) -> None:
    (tmp_path / "ckpt-1.pt").write_bytes(b"junk")
    (tmp_path / "ckpt-2.pt").write_bytes(b"more junk")
    with pytest.raises(CheckpointError) as info:
        load_latest_good(tmp_path)
    assert "ckpt-1.pt" in str(info.value)
    assert "ckpt-2.pt" in str(info.value)


def test_load_latest_good_on_an_empty_dir(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no loadable checkpoint"):
        load_latest_good(tmp_path)


def test_a_dict_without_the_format_key_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-100.pt"
    torch.save(make_state(), path)  # every field but 'format'
    with pytest.raises(CheckpointError, match="not an a3c-ray checkpoint"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "obj",
    [{**make_state(), "format": "a3c-ray/0"}, torch.zeros(3), [1, 2, 3]],
    ids=["other-format", "tensor", "list"],
)
def test_other_torch_files_are_rejected(tmp_path: Path, obj: Any) -> None:
    path = tmp_path / "ckpt-100.pt"
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="not an a3c-ray checkpoint"):
        load_checkpoint(path)


def test_a_checkpoint_missing_a_required_key_is_rejected(tmp_path: Path) -> None:
    state = {**make_state(), "format": FORMAT}
    del state["params"]
    path = tmp_path / "ckpt-100.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="lacks params"):
        load_checkpoint(path)


UNPICKLED: list[str] = []


def _record_unpickling(tag: str) -> str:
    UNPICKLED.append(tag)
    return tag


class Payload:
    """A custom object; unpickling it would run ``_record_unpickling``."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_record_unpickling, ("ran",))


def test_a_pickled_custom_object_is_rejected_without_running_it(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-100.pt"
    torch.save({**make_state(), "format": FORMAT, "extra": Payload()}, path)
    UNPICKLED.clear()
    with pytest.raises(CheckpointError, match=path.name):
        load_checkpoint(path)
    assert UNPICKLED == []


def test_resume_with_another_optimizer_exits_2_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of RMSProp holds RMSProp's statistics, which Adam cannot continue: refused where the
    run directory is checked, before Ray starts."""
    from a3c_ray.algo.messages import CheckpointMeta
    from a3c_ray.algo.parameter_server import ParameterServer, initial_params
    from a3c_ray.commands.cli import main
    from a3c_ray.config import Config

    from .test_cli import snapshot

    cfg = Config()
    cfg.run.run_dir = str(tmp_path)
    meta = CheckpointMeta.of(cfg, (4,), 2)
    ps = ParameterServer(cfg, initial_params(cfg, (4,), 2), meta)
    cfg.save(tmp_path / layout.CONFIG)
    CheckpointManager(tmp_path / layout.CHECKPOINTS, keep=2).save(ps.state_dict())
    before = snapshot(tmp_path)
    assert main(["train", "--resume", str(tmp_path), "--set", "algo.optimizer=adam"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "holds rmsprop statistics" in err and "algo.optimizer=rmsprop" in err, err
    assert snapshot(tmp_path) == before


def test_an_atari_checkpoint_rebuilds_the_frames_it_was_trained_on() -> None:
    """The screen's size, the max-pool and the serve travel in the checkpoint, so eval, serve and export see
    42x42 frames where the run trained on them; a checkpoint written before they did is read
    from its [stack, H, W] observations."""
    from a3c_ray.algo.messages import CheckpointMeta
    from a3c_ray.config import Config

    cfg = Config.from_dict(
        {
            "env": {
                "id": "PongNoFrameskip-v4",
                "screen_size": 42,
                "max_pool": False,
                "fire_reset": True,
            }
        }
    )
    meta = CheckpointMeta.from_state(CheckpointMeta.of(cfg, (4, 42, 42), 6).to_state())
    env = meta.env_config(stack_from_shape=True)
    assert (env.screen_size, env.max_pool, env.fire_reset) == (42, False, True)
    older = {**meta.to_state(), "env": {"frame_stack": None}}
    env = CheckpointMeta.from_state(older).env_config(stack_from_shape=True)
    assert env.screen_size == 42
    assert CheckpointMeta.of(Config(), (4,), 2).env_config(stack_from_shape=False).screen_size == 84
