"""The config's named choices, checked against the registries that implement them."""

from __future__ import annotations

from a3c_ray.algo.losses import VALUE_LOSSES
from a3c_ray.algo.models import ACTIVATIONS, COMPUTE_DTYPES, CRITICS, MODEL_KINDS, POLICIES
from a3c_ray.algo.optim import OPTIMIZERS
from a3c_ray.algo.wire import WIRE_DTYPES
from a3c_ray.config import Config


def problems(cfg: Config) -> list[str]:
    """One line per choice no registry knows (a check for ``Config.validate``)."""
    out = []
    for field, value, known in (
        ("model.kind", cfg.model.kind, MODEL_KINDS),
        ("model.activation", cfg.model.activation, tuple(ACTIVATIONS)),
        ("model.critic", cfg.model.critic, CRITICS),
        ("model.policy", cfg.model.policy, POLICIES),
        ("algo.optimizer", cfg.algo.optimizer, tuple(OPTIMIZERS)),
        ("algo.value_loss", cfg.algo.value_loss, VALUE_LOSSES),
        ("algo.compute_dtype", cfg.algo.compute_dtype, tuple(COMPUTE_DTYPES)),
        ("ps.wire_dtype", cfg.ps.wire_dtype, WIRE_DTYPES),
    ):
        if value not in known:
            out.append(f"{field}: must be one of {', '.join(known)}, got '{value}'")
    return out
