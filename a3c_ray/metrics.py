"""Metric names, defined once: TensorBoard tags (group/name) and Ray metric names."""

from __future__ import annotations

# TensorBoard tags.
EPISODIC_RETURN = "charts/episodic_return"
EPISODIC_LENGTH = "charts/episodic_length"
SPS = "charts/SPS"
EVAL_RETURN = "eval/total_reward"
EVAL_LENGTH = "eval/episode_length"
POLICY_LOSS = "losses/policy_loss"
VALUE_LOSS = "losses/value_loss"
ENTROPY = "losses/entropy"
GRAD_NORM = "losses/grad_norm"
STALENESS = "ps/staleness"
UPDATES_PER_SECOND = "ps/updates_per_second"

TENSORBOARD_TAGS = (
    EPISODIC_RETURN,
    EPISODIC_LENGTH,
    SPS,
    EVAL_RETURN,
    EVAL_LENGTH,
    POLICY_LOSS,
    VALUE_LOSS,
    ENTROPY,
    GRAD_NORM,
    STALENESS,
    UPDATES_PER_SECOND,
)

# Worker statistics (keys of GradientPush.stats) and the tags they are charted under.
LOSS_TAGS = {"policy_loss": POLICY_LOSS, "value_loss": VALUE_LOSS, "entropy": ENTROPY}
