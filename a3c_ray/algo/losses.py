"""The actor-critic loss of A3C: policy gradient, value regression and entropy bonus.

L = -mean(log pi(a_t|s_t) * A_t) + c_v * 0.5 * mean((R_t - V(s_t))^2) - c_e * mean(H(pi(.|s_t)))

with advantages A_t and returns R_t treated as constants (Mnih et al. 2016, Algorithm S3). Means
rather than sums keep the step size independent of the rollout's size.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


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
) -> LossOutput:
    """Loss over a flat batch: logits [N, A], values [N], actions [N] (int), returns and advantages [N]."""
    log_probs = F.log_softmax(logits, dim=-1)
    taken = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    policy_loss = -(taken * advantages.detach()).mean()
    value_loss = 0.5 * (returns.detach() - values).pow(2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    return LossOutput(loss, policy_loss.detach(), value_loss.detach(), entropy.detach())
