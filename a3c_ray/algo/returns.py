"""n-step returns and GAE(lambda) for one rollout, as pure numpy functions.

Notation (Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", Algorithm S3;
Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation"): a rollout has T steps of K environments. Transition t of env k took s_t to s_{t+1}
with reward r_t and flags ``terminated`` (s_{t+1} is terminal: its value is 0) and ``truncated``
(the episode was cut by a time limit: s_{t+1} is the env's ``final_obs``, whose value V(final) is
the bootstrap). Either flag ends the episode inside the rollout, so nothing flows back across it.
The rollout's last state s_T is bootstrapped from V(s_T).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Targets(NamedTuple):
    returns: np.ndarray
    """Targets for the value head, [T, K]."""
    advantages: np.ndarray
    """Advantages for the policy gradient, [T, K]."""


def next_values(
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
) -> np.ndarray:
    """V of the state each transition led to, within its episode: [T, K].

    V(s_{t+1}) inside an episode, V(s_T) at the rollout's end, V(final_obs) after a truncation,
    0 after a termination.
    """
    nv = np.empty_like(values)
    nv[:-1] = values[1:]
    nv[-1] = last_values
    nv = np.where(truncated, final_values, nv)
    return np.where(terminated, 0.0, nv).astype(values.dtype)


def nstep_returns(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
) -> Targets:
    """The paper's longest-available n-step returns R_t = r_t + gamma r_{t+1} + ... + gamma^n V."""
    nv = next_values(values, terminated, truncated, final_values, last_values)
    cont = ~(terminated | truncated)
    returns = np.empty_like(rewards, dtype=np.float32)
    running = last_values.astype(np.float32)
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * np.where(cont[t], running, nv[t])
        returns[t] = running
    return Targets(returns, returns - values)


def gae(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    values: np.ndarray,
    final_values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lam: float,
) -> Targets:
    """GAE(lambda): A_t = sum_l (gamma lambda)^l delta_{t+l}; lambda = 1 equals ``nstep_returns``."""
    nv = next_values(values, terminated, truncated, final_values, last_values)
    deltas = rewards + gamma * nv - values
    decay = gamma * lam * ~(terminated | truncated)
    adv = np.empty_like(deltas, dtype=np.float32)
    running = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in reversed(range(rewards.shape[0])):
        running = deltas[t] + decay[t] * running
        adv[t] = running
    return Targets(adv + values, adv)
