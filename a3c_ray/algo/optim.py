"""The optimizers a config may name, in one registry: ``algo.optimizer`` -> how to build it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from a3c_ray.config import AlgoConfig


def _rmsprop(params: list[torch.Tensor], algo: AlgoConfig) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(params, lr=algo.lr, alpha=algo.rmsprop_alpha, eps=algo.optimizer_eps)


def _adam(params: list[torch.Tensor], algo: AlgoConfig) -> torch.optim.Optimizer:
    try:
        # fused: the whole update of the one flat parameter in one kernel, no per-step Python
        # loop (on CPU since torch 2.4).
        return torch.optim.Adam(params, lr=algo.lr, eps=algo.optimizer_eps, fused=True)
    except RuntimeError:
        return torch.optim.Adam(params, lr=algo.lr, eps=algo.optimizer_eps)


OPTIMIZERS: dict[str, Callable[[list[torch.Tensor], AlgoConfig], torch.optim.Optimizer]] = {
    "rmsprop": _rmsprop,
    "adam": _adam,
}


def make_optimizer(params: list[torch.Tensor], algo: AlgoConfig) -> torch.optim.Optimizer:
    """The optimizer ``algo.optimizer`` names (a key of OPTIMIZERS); any other name is refused."""
    if algo.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{algo.optimizer}' (known: {', '.join(OPTIMIZERS)})")
    return OPTIMIZERS[algo.optimizer](params, algo)
