"""The trained Breakout agent shipped in examples/breakout plays Breakout well, as `a3c-ray eval`
runs it.

It was trained with `breakout.yaml` (docs/atari.md, "Breakout", has its curve) and kept at an
evaluation of at least 300 over 10 whole games. One whole game (all five lives, the raw score,
seed 0, sampled actions) must score above 100: a random policy scores about 1.7 and a policy that
never fires does not score at all, so 100 is far above any agent that has not learned to play,
and the margin to the 300 it was kept at absorbs the spread of one game."""

from __future__ import annotations

from pathlib import Path

import pytest

from a3c_ray.commands.evaluate import evaluate_checkpoint

AGENT = Path(__file__).resolve().parent.parent / "examples" / "breakout" / "breakout.pt"


@pytest.mark.slow  # one whole game of Breakout: a few thousand agent steps of the Nature CNN
def test_the_shipped_breakout_agent_scores_above_100_in_a_whole_game() -> None:
    result = evaluate_checkpoint(AGENT, episodes=1, seed=0)
    assert result["env_id"] == "BreakoutNoFrameskip-v4"
    assert result["returns"][0] > 100, result["returns"]


def test_the_shipped_breakout_config_is_the_one_its_checkpoint_was_trained_with() -> None:
    from a3c_ray.config import Config
    from a3c_ray.rundir.checkpoint import load_checkpoint

    cfg = Config.load(AGENT.parent / "config.yaml")
    state = load_checkpoint(AGENT)
    assert cfg.env.id == state["env_id"] == "BreakoutNoFrameskip-v4"
    for key, value in state["env"].items():
        assert getattr(cfg.env, key) == value, key
    for key, value in state["model"].items():
        assert getattr(cfg.model, key) == value, key
