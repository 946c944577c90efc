"""One default for acting everywhere a policy acts: sampled actions, as in training. `a3c-ray eval`,
the Monitor's evaluations, `load_policy(...).act` and `a3c-ray serve` agree, so a checkpoint scores
the same wherever it is evaluated; `--greedy` / `greedy=True` / `"greedy": true` opt in to the
most likely action."""

from __future__ import annotations

import inspect
import io
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from a3c_ray.algo.evaluation import run_episodes
from a3c_ray.algo.policy import Policy
from a3c_ray.commands.cli import build_parser
from a3c_ray.commands.evaluate import evaluate_checkpoint
from a3c_ray.config import Config
from a3c_ray.rundir.policy import load_policy
from a3c_ray.serve.serve_protocol import ActRequest, Limits, parse_act

from .policy_checkpoints import save_checkpoint


def default_of(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]


def test_every_way_to_act_samples_unless_told_to_be_greedy() -> None:
    assert default_of(Policy.act, "greedy") is False
    assert default_of(run_episodes, "greedy") is False
    assert default_of(evaluate_checkpoint, "greedy") is False
    assert build_parser("eval").parse_args(["eval", "ckpt.pt"]).greedy is False
    assert build_parser("eval").parse_args(["eval", "ckpt.pt", "--greedy"]).greedy is True
    assert Config().monitor.greedy is False
    assert ActRequest(np.zeros((1, 4), np.float32)).greedy is False


def test_a_served_request_samples_unless_it_asks_for_the_most_likely_action() -> None:
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    limits = Limits(max_body_bytes=1 << 20, max_observations=8)
    frames = io.BytesIO()
    np.save(frames, np.zeros((1, 4), np.float32))
    assert parse_act(frames.getvalue(), "application/x-npy", {}, space, limits).greedy is False
    body = json.dumps({"observations": [[0.0, 0.1, 0.2, 0.3]]}).encode()
    assert parse_act(body, "application/json", {}, space, limits).greedy is False
    body = json.dumps({"observations": [[0.0, 0.1, 0.2, 0.3]], "greedy": True}).encode()
    assert parse_act(body, "application/json", {}, space, limits).greedy is True


def test_the_loaded_policy_samples_by_default(tmp_path: Path) -> None:
    """An untrained CartPole policy is near uniform: 256 sampled actions are not all its argmax,
    and the same generator draws the same actions."""
    save_checkpoint(tmp_path, "mlp")
    policy = load_policy(tmp_path)
    obs = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32)
    argmax = policy.act(obs, greedy=True).actions
    first = policy.act(obs, generator=torch.Generator().manual_seed(1)).actions
    again = policy.act(obs, generator=torch.Generator().manual_seed(1)).actions
    np.testing.assert_array_equal(first, again)
    assert (first != argmax).sum() > 20
