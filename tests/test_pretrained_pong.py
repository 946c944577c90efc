"""The trained Pong agent shipped in examples/pong plays Pong well, as `a3c-ray eval` runs it.

It was trained by `make learn-pong` (docs/atari.md has its curve) and stopped at an evaluation of
18 over 10 games. Three whole games with seed 0 and sampled actions must average above 10: a
random policy scores about -20.7, a policy that returns the ball most of the time scores above 0,
so the margin to the 18 it was stopped at absorbs the spread of three games, not a broken agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3c_ray.commands.evaluate import evaluate_checkpoint

AGENT = Path(__file__).resolve().parent.parent / "examples" / "pong" / "pong.pt"


@pytest.mark.slow  # three whole games of Pong (about 10 s of one core)
def test_the_shipped_pong_agent_wins_three_games_by_more_than_10() -> None:
    result = evaluate_checkpoint(AGENT, episodes=3, seed=0)
    assert result["env_id"] == "PongNoFrameskip-v4"
    assert result["mean_return"] > 10, result["returns"]
