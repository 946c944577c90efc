"""The actor-critic loss of A3C: policy gradient, value regression and entropy bonus.

L = -mean(log pi(a_t|s_t) * A_t) + c_v * 0.5 * mean((R_t - V(s_t))^2) - c_e * mean(H(pi(.|s_t)))

with advantages A_t and returns R_t treated as constants (Mnih et al. 2016, Algorithm S3). Means
rather than sums keep the step size independent of the rollout's size. The value term may instead
be Huber's (``VALUE_LOSSES``): 0.5 e^2 for errors |e| <= 1 and |e| - 0.5 beyond, the same where
the value is close and a gradient of at most 1 per step where it is far off.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

HALF_LOG_2PI_E = 0.5 * math.log(2 * math.pi * math.e)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


VALUE_LOSSES = ("mse", "huber")
"""``algo.value_loss``: 0.5 x the squared error, or Huber's loss with its bend at an error of 1."""


class LossOutput(NamedTuple):
    loss: torch.Tensor
    """The scalar to differentiate."""
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor


def actor_critic_loss(
    logits: torch.Tensor,
    values: torch.Tensor,
    actions: torch.Tensor,
    returns: torch.Tensor,
    advantages: torch.Tensor,
    value_coef: float,
    entropy_coef: float,
    continuous: bool = False,
    value_loss: str = "mse",
    bound_coef: float = 0.0,
    bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> LossOutput:
    """Loss over a flat batch: logits [N, A], values [N], actions [N] (int), returns and advantages
    [N]; with ``continuous``, a Gaussian's [mean, log_std] [N, 2D] and actions [N, D] (float);
    ``value_loss`` one of VALUE_LOSSES. With ``continuous``, ``bound_coef`` > 0 and ``bounds``
    (the action Box's centre and half-width, [D] each), ``bound_coef`` x ``mean_bound_loss`` is
    added."""
    if continuous:
        taken, entropies = gaussian_log_prob_entropy(logits, actions)
        entropy = entropies.mean()
    else:
        log_probs = F.log_softmax(logits, dim=-1)
        taken = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    policy_loss = -(taken * advantages.detach()).mean()
    if value_loss == "mse":
        v_loss = 0.5 * (returns.detach() - values).pow(2).mean()
    elif value_loss == "huber":
        v_loss = F.smooth_l1_loss(values, returns.detach(), beta=1.0)
    else:
        raise ValueError(f"unknown value loss '{value_loss}' (known: {', '.join(VALUE_LOSSES)})")
    loss = policy_loss + value_coef * v_loss - entropy_coef * entropy
    if continuous and bound_coef > 0 and bounds is not None:
        loss = loss + bound_coef * mean_bound_loss(logits.chunk(2, dim=-1)[0], *bounds)
    return LossOutput(loss, policy_loss.detach(), v_loss.detach(), entropy.detach())


def gaussian_log_prob_entropy(
    mean_log_std: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(a|s) and the entropy of a diagonal Gaussian, each summed over the action's dimensions.

    log N(a; mu, sigma) = -((a - mu) / sigma)^2 / 2 - log sigma - log(2 pi) / 2 per dimension;
    its entropy is log sigma + log(2 pi e) / 2 per dimension.
    """
    mean, log_std = mean_log_std.chunk(2, dim=-1)
    z = (actions - mean) * torch.exp(-log_std)
    log_prob = (-0.5 * z.pow(2) - log_std - HALF_LOG_2PI).sum(-1)
    entropy = (log_std + HALF_LOG_2PI_E).sum(-1)
    return log_prob, entropy


def mean_bound_loss(
    mean: torch.Tensor, centre: torch.Tensor, half_width: torch.Tensor
) -> torch.Tensor:
    """0.5 x (how far each mean [N, D] lies past the Box, in half-widths)^2, summed over the
    dimensions and averaged over the batch: zero, with zero gradient, inside the Box."""
    past = (torch.abs(mean - centre) / half_width - 1.0).clamp(min=0.0)
    return 0.5 * past.pow(2).sum(-1).mean()
