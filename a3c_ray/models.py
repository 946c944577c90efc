"""Actor-critic networks and flat access to their parameters and gradients.

Every model maps (observation, recurrent state) to (policy logits, value, new state). Feed-forward
models carry an empty state, so Workers, the Monitor and ``eval`` treat all models the same way.
Weights and gradients leave a model as one flat float32 vector, the unit the ParameterServer works
on and the only thing that travels between actors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from a3c_ray.config import ModelConfig

State = tuple[torch.Tensor, ...]


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std`` and constant bias (policy head 0.01, value head 1.0)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class ActorCritic(nn.Module):
    """A body shared by a policy head (logits over discrete actions) and a value head.

    With ``lstm_size`` set, an LSTM cell sits between body and heads; its state is reset to zeros
    wherever ``reset`` is true, before the step that starts a new episode.
    """

    def __init__(
        self, body: nn.Module, body_out: int, n_actions: int, lstm_size: int | None = None
    ):
        super().__init__()
        self.body = body
        self.lstm = nn.LSTMCell(body_out, lstm_size) if lstm_size else None
        head_in = lstm_size if lstm_size else body_out
        self.policy = layer_init(nn.Linear(head_in, n_actions), std=0.01)
        self.value = layer_init(nn.Linear(head_in, 1), std=1.0)

    @property
    def is_recurrent(self) -> bool:
        return self.lstm is not None

    def initial_state(self, batch: int) -> State:
        if self.lstm is None:
            return ()
        zeros = torch.zeros(batch, self.lstm.hidden_size)
        return (zeros, zeros.clone())

    def forward(
        self, obs: torch.Tensor, state: State = (), reset: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """One step for a batch: obs [B, ...] -> logits [B, A], value [B], new state."""
        x = self.body(obs)
        if self.lstm is not None:
            h, c = state
            if reset is not None:
                keep = (~reset).to(h.dtype).unsqueeze(-1)
                h, c = h * keep, c * keep
            h, c = self.lstm(x, (h, c))
            x, state = h, (h, c)
        return self.policy(x), self.value(x).squeeze(-1), state

    def forward_sequence(
        self, obs: torch.Tensor, state: State, resets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole rollout: obs [T, K, ...], state at t=0, resets [T, K] -> logits [T, K, A], values [T, K].

        Feed-forward models run it as one batch of T*K; recurrent ones step through time from the
        rollout's initial state, so the gradient flows through the whole rollout.
        """
        t, k = obs.shape[:2]
        if self.lstm is None:
            logits, values, _ = self.forward(obs.reshape(t * k, *obs.shape[2:]))
            return logits.reshape(t, k, -1), values.reshape(t, k)
        all_logits, all_values = [], []
        for i in range(t):
            logits, values, state = self.forward(obs[i], state, resets[i])
            all_logits.append(logits)
            all_values.append(values)
        return torch.stack(all_logits), torch.stack(all_values)


def mlp(in_dim: int, hidden_sizes: Sequence[int], activation: str) -> nn.Sequential:
    act = {"tanh": nn.Tanh, "relu": nn.ReLU}[activation]
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(in_dim, width)), act()]
        in_dim = width
    return nn.Sequential(*layers)


def build_model(cfg: ModelConfig, obs_shape: Sequence[int], n_actions: int) -> ActorCritic:
    """The network a config asks for, for observations of ``obs_shape`` and ``n_actions`` actions."""
    kind = cfg.kind
    if kind == "auto":
        kind = "mlp"
    if kind != "mlp":
        raise ValueError(f"unknown model kind '{cfg.kind}'")
    body = mlp(int(np.prod(obs_shape)), cfg.hidden_sizes, cfg.activation)
    return ActorCritic(body, cfg.hidden_sizes[-1], n_actions, cfg.lstm_size if cfg.lstm else None)


def get_flat_params(model: nn.Module) -> np.ndarray:
    return nn.utils.parameters_to_vector(model.parameters()).detach().numpy().astype(np.float32)


def set_flat_params(model: nn.Module, flat: np.ndarray) -> None:
    with torch.no_grad():
        nn.utils.vector_to_parameters(torch.tensor(flat, dtype=torch.float32), model.parameters())


def get_flat_grad(model: nn.Module) -> np.ndarray:
    grads = [
        p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
        for p in model.parameters()
    ]
    return torch.cat(grads).numpy().astype(np.float32, copy=False)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
