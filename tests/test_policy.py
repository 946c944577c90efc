"""a3c_ray.load_policy: every way to name a checkpoint, the policy's spaces and act(), its recurrent
state, and the guarantee that eval acts exactly as the loaded policy does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from a3c_ray import load_policy
from a3c_ray.algo.evaluation import run_episodes
from a3c_ray.errors import CheckpointError
from a3c_ray.rundir import layout
from a3c_ray.rundir.checkpoint import CheckpointManager, load_checkpoint
from a3c_ray.rundir.policy import best_checkpoint_name, policy_from_state

from .conftest import moto_s3
from .policy_checkpoints import save_checkpoint

REPO = Path(__file__).resolve().parents[1]


def test_every_way_to_name_a_checkpoint_loads_the_same_policy(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / layout.CHECKPOINTS, keep=5)
    save_checkpoint(tmp_path, env_steps=100, seed=1, eval_return=9.0, manager=manager)
    save_checkpoint(tmp_path, env_steps=200, seed=2, eval_return=1.0, manager=manager)
    ckpts = tmp_path / layout.CHECKPOINTS
    best = load_policy(ckpts / "ckpt-100.pt")
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    for where in (tmp_path, ckpts, ckpts / layout.BEST, str(ckpts / "ckpt-100.pt")):
        policy = load_policy(where)
        assert policy.env_steps == 100 and policy.checkpoint == str(ckpts / "ckpt-100.pt")
        np.testing.assert_array_equal(policy.act(obs).values, best.act(obs).values)
    latest = load_policy(ckpts / layout.LATEST)
    assert latest.env_steps == 200
    assert not np.allclose(latest.act(obs).values, best.act(obs).values)


def test_the_policy_knows_its_env_and_spaces(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "mlp")
    policy = load_policy(tmp_path)
    env = gym.make("CartPole-v1")
    assert policy.env_id == "CartPole-v1"
    assert policy.observation_space == env.observation_space
    assert policy.action_space == env.action_space
    assert not policy.is_recurrent and policy.initial_state(3) is None
    obs, _ = env.reset(seed=0)
    actions, values, state = policy.act(obs[None])
    assert actions.shape == (1,) and actions.dtype == np.int64 and 0 <= actions[0] < 2
    assert values.shape == (1,) and values.dtype == np.float32 and state is None


def test_a_checkpoint_without_recorded_spaces_gets_the_spaces_its_shapes_imply(
    tmp_path: Path,
) -> None:
    save_checkpoint(tmp_path, "cnn")
    state = load_checkpoint(tmp_path)
    del state["spaces"]  # as checkpoints written before spaces were recorded
    policy = policy_from_state(state)
    assert policy.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert policy.action_space == gym.spaces.Discrete(6)


def test_greedy_takes_the_argmax_and_sampling_follows_the_generator(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "mlp")
    policy = load_policy(tmp_path)
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    logits = policy.model(torch.from_numpy(obs))[0]
    greedy = policy.act(obs, greedy=True).actions
    np.testing.assert_array_equal(greedy, logits.argmax(-1).numpy())
    a = policy.act(obs, greedy=False, generator=torch.Generator().manual_seed(3)).actions
    b = policy.act(obs, greedy=False, generator=torch.Generator().manual_seed(3)).actions
    np.testing.assert_array_equal(a, b)
    # Per row: the greedy rows take the argmax whatever the draw.
    mask = np.arange(64) % 2 == 0
    mixed = policy.act(obs, greedy=mask, generator=torch.Generator().manual_seed(3)).actions
    np.testing.assert_array_equal(mixed[mask], logits.argmax(-1).numpy()[mask])


def test_a_gaussian_policy_acts_inside_its_box(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "gaussian")
    policy = load_policy(tmp_path)
    assert policy.action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    obs = np.random.default_rng(2).normal(size=(256, 3)).astype(np.float32) * 50
    # A wide spread so that samples leave the Box, then come back clipped to it.
    with torch.no_grad():
        policy.model.log_std.fill_(2.0)  # type: ignore[union-attr]
    actions = policy.act(obs, greedy=False, generator=torch.Generator().manual_seed(0)).actions
    assert actions.shape == (256, 1) and actions.dtype == np.float32
    assert actions.min() == -2.0 and actions.max() == 2.0


def test_a_recurrent_policy_carries_its_state_and_resets_it(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "lstm")
    policy = load_policy(tmp_path)
    assert policy.is_recurrent
    h, c = policy.initial_state(2)  # type: ignore[misc]
    assert h.shape == (2, 8) and not h.any() and not c.any()
    obs = np.array([[0.1, 0.2], [0.3, -0.1]], dtype=np.float32)
    first = policy.act(obs)
    second = policy.act(obs, first.state)
    assert not np.allclose(first.values, second.values)  # the state changed the second step
    again = policy.act(obs, second.state, reset=np.array([True, False]))
    fresh = policy.act(obs)
    np.testing.assert_allclose(again.values[0], fresh.values[0], rtol=1e-6)
    assert not np.isclose(again.values[1], fresh.values[1])


def test_eval_acts_exactly_as_the_loaded_policy(tmp_path: Path) -> None:
    """run_episodes (eval and the Monitor) against a hand loop over load_policy's act."""
    save_checkpoint(tmp_path, "lstm")
    policy = load_policy(tmp_path)
    env = gym.make("a3c_ray/MaskedCartPole-v1")
    episodes = run_episodes(policy, env, episodes=1, seed=4, greedy=True)
    obs, _ = env.reset(seed=4)
    state, length, done = None, 0, False
    while not done:
        actions, _, state = policy.act(obs[None], state, greedy=True)
        obs, _, terminated, truncated, _ = env.step(int(actions[0]))
        length, done = length + 1, terminated or truncated
    assert episodes[0].length == length


@pytest.mark.parametrize(
    "content", [b"", b"garbage", b"PK\x03\x04" + b"\x00" * 64], ids=["empty", "text", "zip"]
)
def test_a_missing_or_corrupt_checkpoint_is_one_clear_error(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_policy(tmp_path / "nowhere")
    (tmp_path / "ckpt-5.pt").write_bytes(content)
    with pytest.raises(CheckpointError, match=r"ckpt-5\.pt"):
        load_policy(tmp_path / "ckpt-5.pt")


def test_a_checkpoint_whose_weights_do_not_fit_its_model_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, "mlp")
    state = torch.load(path, weights_only=True)
    state["params"] = state["params"][:-1]
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="parameters"):
        load_policy(path)


def test_best_checkpoint_name_follows_the_pointer(tmp_path: Path) -> None:
    assert best_checkpoint_name(tmp_path) is None
    manager = CheckpointManager(tmp_path / layout.CHECKPOINTS, keep=5)
    save_checkpoint(tmp_path, env_steps=100, eval_return=1.0, manager=manager)
    assert best_checkpoint_name(tmp_path) == "ckpt-100.pt"
    save_checkpoint(tmp_path, env_steps=200, eval_return=0.5, manager=manager)
    assert best_checkpoint_name(tmp_path) == "ckpt-100.pt"
    save_checkpoint(tmp_path, env_steps=300, eval_return=2.0, manager=manager)
    assert best_checkpoint_name(tmp_path) == "ckpt-300.pt"


@pytest.mark.slow  # a fresh interpreter
def test_load_policy_imports_neither_ray_nor_torch_before_it_is_used(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, "mlp")
    script = (
        "import sys, a3c_ray\n"
        "assert 'torch' not in sys.modules, 'import a3c_ray pulled in torch'\n"
        "from a3c_ray import load_policy\n"
        f"p = load_policy({str(tmp_path)!r})\n"
        "print(p.env_id, p.act([[0.0, 0.1, 0.0, -0.1]]).actions.tolist())\n"
        "assert 'ray' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ray'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CartPole-v1 [")


# -- on S3 ------------------------------------------------------------------------------------


@pytest.fixture
def s3_bucket(tmp_path: Path) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with one bucket; the AWS settings point at it."""
    with moto_s3("policies", tmp_path / "staging"):
        yield "policies"


@pytest.mark.slow  # an S3 server of its own
def test_load_policy_reads_a_run_directory_on_s3(s3_bucket: str, tmp_path: Path) -> None:
    import s3fs

    save_checkpoint(tmp_path / "run", env_steps=700)
    fs = s3fs.S3FileSystem()
    fs.put(str(tmp_path / "run"), f"{s3_bucket}/runs/cp", recursive=True)
    uri = f"s3://{s3_bucket}/runs/cp"
    local = load_policy(tmp_path / "run")
    obs = np.zeros((1, 4), dtype=np.float32)
    for where in (uri, f"{uri}/checkpoints/best", f"{uri}/checkpoints/ckpt-700.pt"):
        policy = load_policy(where)
        assert policy.env_steps == 700 and policy.checkpoint == f"{uri}/checkpoints/ckpt-700.pt"
        np.testing.assert_array_equal(policy.act(obs).values, local.act(obs).values)
    assert best_checkpoint_name(uri) == "ckpt-700.pt"
    with pytest.raises(CheckpointError, match="no checkpoint at s3://"):
        load_policy(f"s3://{s3_bucket}/runs/none")


def test_the_readme_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's "From Python", with training stood in for by a checkpoint already written."""
    import types

    import a3c_ray

    readme = (REPO / "README.md").read_text()
    section = readme.split("## From Python", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 8
    save_checkpoint(tmp_path / "runs" / "cp", "mlp")
    trained: list[dict[str, object]] = []

    def train(**kwargs: object) -> object:
        trained.append(kwargs)
        return types.SimpleNamespace(run_dir=str(tmp_path / "runs" / "cp"))

    monkeypatch.setattr(a3c_ray, "train", train, raising=False)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert trained == [{"env": "CartPole-v1", "target_return": 450}]
    assert float(capsys.readouterr().out.strip()) > 0  # the evaluation's mean return
    assert scope["state"] is None and np.asarray(scope["actions"]).shape == (1,)
