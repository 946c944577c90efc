"""Metric names, defined once: TensorBoard tags (group/name) and Ray metric names."""

from __future__ import annotations

# TensorBoard tags.
EPISODIC_RETURN = "charts/episodic_return"
EPISODIC_LENGTH = "charts/episodic_length"
SPS = "charts/SPS"
EVAL_RETURN = "eval/total_reward"
EVAL_LENGTH = "eval/episode_length"
EVAL_VIDEO = "eval/video"
POLICY_LOSS = "losses/policy_loss"
VALUE_LOSS = "losses/value_loss"
ENTROPY = "losses/entropy"
GRAD_NORM = "losses/grad_norm"
STALENESS = "ps/staleness"
UPDATES_PER_SECOND = "ps/updates_per_second"
UPDATE_NORM = "ps/update_norm"
LEARNING_RATE = "ps/learning_rate"

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
    UPDATE_NORM,
    LEARNING_RATE,
)

# Worker statistics (keys of GradientPush.stats) and the tags they are charted under.
LOSS_TAGS = {"policy_loss": POLICY_LOSS, "value_loss": VALUE_LOSS, "entropy": ENTROPY}

# Ray metrics (Prometheus shows them with a ray_ prefix; counters also get a _total suffix).
RAY_ENV_STEPS = "a3c_env_steps"
RAY_GRADIENTS_APPLIED = "a3c_gradients_applied"
RAY_GRADIENTS_DROPPED = "a3c_gradients_dropped"
RAY_PARAM_VERSION = "a3c_param_version"
RAY_GRADIENT_STALENESS = "a3c_gradient_staleness"
RAY_EPISODE_RETURN = "a3c_episode_return"
RAY_EVAL_RETURN = "a3c_eval_return"
RAY_ENV_STEPS_PER_SECOND = "a3c_env_steps_per_second"
RAY_WORKER_RESTARTS = "a3c_worker_restarts"
RAY_METRICS = (
    RAY_ENV_STEPS,
    RAY_GRADIENTS_APPLIED,
    RAY_GRADIENTS_DROPPED,
    RAY_PARAM_VERSION,
    RAY_GRADIENT_STALENESS,
    RAY_EPISODE_RETURN,
    RAY_EVAL_RETURN,
    RAY_ENV_STEPS_PER_SECOND,
    RAY_WORKER_RESTARTS,
)


DROP_REASONS = ("nonfinite", "stale", "resync")
