"""Actor-critic networks and flat access to their parameters and gradients.

Every model maps (observation, recurrent state) to (policy logits, value, new state). Feed-forward
models carry an empty state, so Workers, the Monitor and ``eval`` treat all models the same way.
Weights and gradients leave a model as one flat float32 vector, the unit the ParameterServer works
on and the only thing that travels between actors.

Bodies: an MLP for vector observations; for images [C, H, W] with pixel values in 0..255, the
A3C paper's CNN (Mnih et al. 2016, Section 8, after Mnih et al. 2013) and the larger Nature CNN
(Mnih et al. 2015). The paper's A3C LSTM puts 256 LSTM cells after the body's last hidden layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import torch
from torch import nn

from a3c_ray.config import LOG_STD_BOUNDS, ModelConfig

State = tuple[torch.Tensor, ...]


Layer = TypeVar("Layer", nn.Linear, nn.Conv2d)


def layer_init(layer: Layer, std: float = math.sqrt(2), bias: float = 0.0) -> Layer:
    """Orthogonal weights with gain ``std`` and constant bias (policy head 0.01, value head 1.0)."""
    nn.init.orthogonal_(layer.weight, std)
    if layer.bias is not None:
        nn.init.constant_(layer.bias, bias)
    return layer


def lstm_cell(in_dim: int, size: int) -> nn.LSTMCell:
    """Orthogonal weights, zero biases but a forget-gate bias of 1 (Jozefowicz et al. 2015), so
    that the cell keeps its memory by default. PyTorch orders the gates i, f, g, o."""
    cell = nn.LSTMCell(in_dim, size)
    for name, p in cell.named_parameters():
        if name.startswith("weight"):
            nn.init.orthogonal_(p, 1.0)
        else:
            nn.init.zeros_(p)
    with torch.no_grad():
        cell.bias_ih[size : 2 * size].fill_(1.0)
    return cell


class ActorCritic(nn.Module):
    """A body shared by a policy head and a value head.

    The policy head gives logits over discrete actions, or with ``continuous`` the mean of a
    diagonal Gaussian over ``n_actions`` dimensions, whose log standard deviation is a learned
    parameter of its own (state-independent, as in the A3C paper's continuous-control agents'
    simplest form), held within ``LOG_STD_BOUNDS``; the policy output is then [mean, log_std],
    2 x ``n_actions`` wide, in the env's units. Given the action Box's ``bounds``, the mean starts
    at its centre and the learned log std is in units of its half-width, so that a policy starts
    with the same spread relative to the bounds on any Box; the gradient of the log-probability
    with respect to the weights is the same as without them (the offset and the scale are
    constants), so a Box of [-1, 1] learns exactly as before.

    With ``lstm_size`` set, an LSTM cell sits between body and heads; its state is reset to zeros
    wherever ``reset`` is true, before the step that starts a new episode.
    """

    action_centre: torch.Tensor
    log_half_width: torch.Tensor

    def __init__(
        self,
        body: nn.Module,
        body_out: int,
        n_actions: int,
        lstm_size: int | None = None,
        value_body: nn.Module | None = None,
        continuous: bool = False,
        log_std_init: float = 0.0,
        bounds: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        super().__init__()
        if value_body is not None and lstm_size:
            raise ValueError("a separate value body is for feed-forward models only")
        self.body = body
        self.scales_input = isinstance(body, nn.Sequential) and isinstance(body[0], Scale)
        self.lstm = lstm_cell(body_out, lstm_size) if lstm_size else None
        head_in = lstm_size if lstm_size else body_out
        self.continuous = continuous
        self.policy = layer_init(nn.Linear(head_in, n_actions), std=0.01)
        self.log_std = nn.Parameter(torch.full((n_actions,), log_std_init)) if continuous else None
        # With the action Box's ``bounds``, the mean is offset to its centre and the standard
        # deviation is in units of its half-width; neither is a parameter, nor in the flat vector.
        low, high = bounds if bounds is not None else (-np.ones(n_actions), np.ones(n_actions))
        centre = torch.as_tensor((np.asarray(high, np.float64) + low) / 2, dtype=torch.float32)
        half = torch.as_tensor((np.asarray(high, np.float64) - low) / 2, dtype=torch.float32)
        self.register_buffer("action_centre", centre, persistent=False)
        self.register_buffer("log_half_width", half.log(), persistent=False)
        # With its own body, the value's regression never moves the policy's features.
        self.value_body = value_body
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
        obs = self._input(obs)
        x = self.body(obs)
        if self.value_body is not None:
            return self._policy(x), self.value(self.value_body(obs)).squeeze(-1), state
        if self.lstm is not None:
            x, state = self._lstm_step(x, state, reset)
        return self._policy(x), self.value(x).squeeze(-1), state

    def _input(self, obs: torch.Tensor) -> torch.Tensor:
        # A CNN body takes uint8 frames as they are and scales them in the dtype it computes in.
        if obs.dtype != torch.float32 and not (obs.dtype == torch.uint8 and self.scales_input):
            return obs.float()
        return obs

    def _lstm_step(
        self, x: torch.Tensor, state: State, reset: torch.Tensor | None
    ) -> tuple[torch.Tensor, State]:
        assert self.lstm is not None
        h, c = state
        if reset is not None:
            keep = (~reset).to(h.dtype).unsqueeze(-1)
            h, c = h * keep, c * keep
        h, c = self.lstm(x, (h, c))
        return h, (h, c)

    def _policy(self, x: torch.Tensor) -> torch.Tensor:
        out = self.policy(x)
        if self.log_std is None:
            return out
        # Held within bounds: a collapsed std makes the log-prob, and its gradient, unbounded.
        log_std = self.log_std.clamp(*LOG_STD_BOUNDS) + self.log_half_width
        return torch.cat([out + self.action_centre, log_std.expand_as(out)], dim=-1)

    def forward_sequence(
        self, obs: torch.Tensor, state: State, resets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole rollout: obs [T, K, ...], state at t=0, resets [T, K] -> logits [T, K, A], values [T, K].

        Feed-forward models run it as one batch of T*K. Recurrent ones run the body (the CNN) as
        one batch of T*K too, as it sees one frame stack at a time, and step only the LSTM cell
        through time from the rollout's initial state, so the gradient flows through the whole
        rollout; the heads take the T*K outputs as one batch.
        """
        t, k = obs.shape[:2]
        if self.lstm is None:
            logits, values, _ = self.forward(obs.reshape(t * k, *obs.shape[2:]))
            return logits.reshape(t, k, -1), values.reshape(t, k)
        x = self.body(self._input(obs.reshape(t * k, *obs.shape[2:])))
        x = x.reshape(t, k, *x.shape[1:])
        outputs = []
        for i in range(t):
            h, state = self._lstm_step(x[i], state, resets[i])
            outputs.append(h)
        hs = torch.stack(outputs).reshape(t * k, -1)
        return self._policy(hs).reshape(t, k, -1), self.value(hs).reshape(t, k)


def sample_actions(
    logits: torch.Tensor,
    generator: torch.Generator | None,
    greedy: bool = False,
    continuous: bool = False,
) -> torch.Tensor:
    """One action per row of ``logits``: the most likely with ``greedy``, else drawn from their
    softmax by the Gumbel-max trick. Training and evaluation both act through it.

    argmax(logits + G) with G standard Gumbel is a sample of softmax(logits); -log(E) with
    E ~ Exp(1) is such a G. A third of the cost of softmax + multinomial on a small batch.

    With ``continuous``, ``logits`` is a Gaussian policy's [mean, log_std]: the mean with
    ``greedy``, else mean + std x N(0, 1) (unclipped: the env's bounds are applied where it steps).
    """
    if continuous:
        mean, log_std = logits.chunk(2, dim=-1)
        if greedy:
            return mean
        noise = torch.empty_like(mean).normal_(generator=generator)
        return mean + log_std.exp() * noise
    if greedy:
        return logits.argmax(-1)
    noise = torch.empty_like(logits).exponential_(generator=generator)
    return (logits - noise.log()).argmax(-1)


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}
"""``model.activation`` -> the MLP's nonlinearity."""
CRITICS = ("shared", "separate")
"""``model.critic``: the value head on the policy's body, or on an MLP body of its own."""

COMPUTE_DTYPES: dict[str, torch.dtype | None] = {
    "float32": None,
    "bfloat16": torch.bfloat16,
    "auto": None,
}
"""``algo.compute_dtype``: the autocast dtype of a Worker's passes (None: plain float32);
``auto`` is resolved by :func:`resolve_compute_dtype` on the machine the Worker runs on."""

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (Linux's /proc/cpuinfo names) under which bfloat16 convolutions are fast on CPU."""


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """This machine's CPU flags, empty where /proc/cpuinfo cannot be read (not Linux)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def resolve_compute_dtype(name: str, flags: frozenset[str] | None = None) -> str:
    """``auto`` -> ``bfloat16`` on a CPU with avx512_bf16 or AMX, else ``float32``; the
    others as they are. Without those instructions oneDNN emulates bfloat16 and a CNN's passes
    are several times slower than in float32 (docs/atari.md)."""
    if name != "auto":
        return name
    flags = cpu_flags() if flags is None else flags
    return "bfloat16" if any(f in flags for f in BF16_CPU_FLAGS) else "float32"


def compute_context(name: str) -> torch.autocast:
    """The context a Worker's forward and backward passes run in for ``algo.compute_dtype``
    (``auto`` already resolved): torch's CPU autocast to bfloat16, or (float32) one that does
    nothing. The weights and their gradients stay float32 either way: autocast casts each
    layer's inputs, not the parameters."""
    dtype = COMPUTE_DTYPES[name]
    return torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def mlp(in_dim: int, hidden_sizes: Sequence[int], activation: str) -> nn.Sequential:
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(in_dim, width)), act()]
        in_dim = width
    return nn.Sequential(*layers)


class Scale(nn.Module):
    """Pixels 0..255 to 0..1, inside the model so that observations travel as uint8.

    The result is channels-last in memory: oneDNN's convolutions then keep that layout through the
    whole stack, which is a fifth to a quarter less CPU for forward and backward on a Worker's
    batches (docs/atari.md); the weights stay in the default layout, as the flat vector has them.

    Frames come in as uint8 and are cast once, straight to the dtype the passes compute in
    (bfloat16 under ``algo.compute_dtype: bfloat16``'s autocast, else float32), after the change
    of layout, which so moves uint8 bytes, a quarter of float32's.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        on = torch.is_autocast_enabled("cpu")
        return x.to(torch.get_autocast_dtype("cpu") if on else torch.float32) * (1.0 / 255.0)


class CnnSpec(NamedTuple):
    convs: list[tuple[int, int, int, int]]
    """(out_channels, kernel, stride, padding) of each convolution."""
    hidden: int
    """Width of the fully connected layer after them."""
    activation: str
    """Nonlinearity after every layer (a key of ACTIVATIONS)."""


CNN_LAYERS: dict[str, CnnSpec] = {
    # Mnih et al. 2013; the A3C paper's network.
    "cnn": CnnSpec([(16, 8, 4, 0), (32, 4, 2, 0)], 256, "relu"),
    # Mnih et al. 2015.
    "nature_cnn": CnnSpec([(32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0)], 512, "relu"),
    # The A3C references that learn Pong in minutes (universe-starter-agent, pytorch-a3c): four
    # 3x3 stride-2 convolutions of 32 channels with ELU, made for 42x42 frames (a 3x3x32 output).
    "small_cnn": CnnSpec([(32, 3, 2, 1)] * 4, 256, "elu"),
}


MODEL_KINDS = ("auto", "mlp", *CNN_LAYERS)
"""``model.kind``: auto (a CNN for images, else an MLP), mlp, or a CNN of CNN_LAYERS."""


def cnn(kind: str, obs_shape: Sequence[int]) -> tuple[nn.Sequential, int]:
    """A convolutional body for [C, H, W] images and the width of its output."""
    spec = CNN_LAYERS[kind]
    act = ACTIVATIONS[spec.activation]
    layers: list[nn.Module] = [Scale()]
    channels = int(obs_shape[0])
    for out, kernel, stride, padding in spec.convs:
        layers += [layer_init(nn.Conv2d(channels, out, kernel, stride, padding)), act()]
        channels = out
    layers.append(nn.Flatten())
    with torch.no_grad():
        flat = int(nn.Sequential(*layers)(torch.zeros(1, *obs_shape)).shape[1])
    layers += [layer_init(nn.Linear(flat, spec.hidden)), act()]
    return nn.Sequential(*layers), spec.hidden


def resolve_kind(kind: str, obs_shape: Sequence[int]) -> str:
    """The body ``auto`` stands for: the A3C paper's CNN for images [C, H, W], else an MLP."""
    if kind != "auto":
        return kind
    return "cnn" if len(obs_shape) == 3 else "mlp"


POLICIES = ("auto", "categorical", "gaussian")
"""``model.policy``: ``auto`` is resolved from the env's action space before a run starts."""


def build_model(
    cfg: ModelConfig,
    obs_shape: Sequence[int],
    n_actions: int,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> ActorCritic:
    """The network a config asks for, for observations of ``obs_shape`` and ``n_actions`` actions
    (the dimensions of a Box action space with ``model.policy: gaussian``, whose ``bounds`` the
    Gaussian is fitted to with ``model.scale_actions``; the weights do not depend on them)."""
    bounds = bounds if cfg.scale_actions else None
    kind = resolve_kind(cfg.kind, obs_shape)
    continuous = cfg.policy == "gaussian"
    lstm_size = cfg.lstm_size if cfg.lstm else None
    if kind == "mlp":
        body = mlp(int(np.prod(obs_shape)), cfg.hidden_sizes, cfg.activation)
        value_body = (
            mlp(int(np.prod(obs_shape)), cfg.hidden_sizes, cfg.activation)
            if cfg.critic == "separate"
            else None
        )
        return ActorCritic(
            body,
            cfg.hidden_sizes[-1],
            n_actions,
            lstm_size,
            value_body,
            continuous,
            cfg.log_std_init,
            bounds,
        )
    if kind in CNN_LAYERS:
        if len(obs_shape) != 3:
            raise ValueError(
                f"model kind '{kind}' needs image observations [C, H, W], got shape {tuple(obs_shape)}"
            )
        body, width = cnn(kind, obs_shape)
        return ActorCritic(
            body,
            width,
            n_actions,
            lstm_size,
            continuous=continuous,
            log_std_init=cfg.log_std_init,
            bounds=bounds,
        )
    raise ValueError(f"unknown model kind '{cfg.kind}'")


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
