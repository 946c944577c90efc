"""The random agent's score (``a3c-ray eval --random ENV``): what a trained agent is compared with,
played on the evaluation env a run from ``--env ENV`` would use."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from a3c_ray.algo.evaluation import UniformPolicy
from a3c_ray.commands.cli import main


def random_eval(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["eval", "--random", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_random_cartpole_is_short_seeded_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    a = random_eval(capsys, "CartPole-v1", "--episodes", "8", "--seed", "3")
    b = random_eval(capsys, "CartPole-v1", "--episodes", "8", "--seed", "3")
    c = random_eval(capsys, "CartPole-v1", "--episodes", "8", "--seed", "4")
    assert a["env_id"] == "CartPole-v1" and a["policy"] == "random" and a["checkpoint"] is None
    assert a["returns"] == b["returns"], "the same seed must play the same games"
    assert a["returns"] != c["returns"]
    # Uniform actions topple the pole in about 22 steps on average; a balancing policy lasts 500.
    assert 8 <= a["mean_length"] <= 60 and a["mean_return"] == pytest.approx(a["mean_length"])


def test_uniform_actions_cover_a_box_within_its_bounds() -> None:
    space = gym.spaces.Box(
        low=np.array([-2.0, 0.0], np.float32), high=np.array([2.0, 1.0], np.float32)
    )
    policy = UniformPolicy(space)
    actions, _, state = policy.act(
        np.zeros((4000, 3)), None, False, torch.Generator().manual_seed(0)
    )
    assert policy.continuous and state is None and actions.shape == (4000, 2)
    assert (actions >= space.low).all() and (actions <= space.high).all()
    # Uniform: each quarter of each bound's range gets about a quarter of the draws.
    for j in range(2):
        counts, _ = np.histogram(actions[:, j], bins=4, range=(space.low[j], space.high[j]))
        assert (np.abs(counts / 4000 - 0.25) < 0.03).all(), counts


def test_uniform_actions_over_a_discrete_space_hit_every_action() -> None:
    policy = UniformPolicy(gym.spaces.Discrete(6))
    actions, _, _ = policy.act(np.zeros((3000, 1)), None, False, torch.Generator().manual_seed(1))
    assert not policy.continuous and actions.dtype == np.int64
    counts = np.bincount(actions, minlength=6)
    assert len(counts) == 6 and (np.abs(counts / 3000 - 1 / 6) < 0.03).all(), counts


def test_an_unbounded_box_has_no_uniform_actions() -> None:
    with pytest.raises(ValueError, match="bounded Box"):
        UniformPolicy(gym.spaces.Box(low=-np.inf, high=np.inf, shape=(2,)))


def test_evaluate_random_from_python_is_the_command_s_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import a3c_ray

    cli = random_eval(capsys, "CartPole-v1", "--episodes", "4", "--seed", "2")
    res = a3c_ray.evaluate_random("CartPole-v1", episodes=4, seed=2)
    assert res.checkpoint is None and res.env_steps == 0
    assert res.returns == cli["returns"] and res.mean_return == pytest.approx(cli["mean_return"])
    with pytest.raises(ValueError, match="episodes"):
        a3c_ray.evaluate_random("CartPole-v1", episodes=0)
