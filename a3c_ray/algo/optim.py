"""The optimizers a config may name, in one registry: ``algo.optimizer`` -> how to build it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def step_size(algo: AlgoConfig, env_steps: int, max_steps: int) -> float:
    """The learning rate after ``env_steps``: ``algo.lr``, annealed linearly to 0 at ``max_steps``
    with ``lr_anneal`` and halved every ``lr_half_life`` env steps with that set."""
    lr = algo.lr
    if algo.lr_anneal:
        lr *= max(0.0, 1.0 - env_steps / max_steps)
    if algo.lr_half_life is not None:
        lr *= 0.5 ** (env_steps / algo.lr_half_life)
    return lr


def saved_optimizer(state: dict[str, Any]) -> str | None:
    """The OPTIMIZERS entry whose statistics a checkpoint ``state`` holds; None without any.

    A checkpoint names it; one written before it did is known by its parameter group's settings
    (RMSProp's ``alpha``, Adam's ``betas``): the entry whose own settings share the most with them.
    """
    if "optimizer" not in state:
        return None
    if "optimizer_name" in state:
        return str(state["optimizer_name"])
    groups = state["optimizer"].get("param_groups") or [{}]
    saved = set(groups[0]) - {"params"}

    def shared(name: str) -> int:
        probe = OPTIMIZERS[name]([torch.zeros(1, requires_grad=True)], AlgoConfig(optimizer=name))
        return len(saved & set(probe.param_groups[0]))

    return max(OPTIMIZERS, key=shared)


def optimizer_mismatch(state: dict[str, Any], algo: AlgoConfig) -> str | None:
    """Why a checkpoint's optimizer statistics cannot continue under ``algo``, or None."""
    saved = saved_optimizer(state)
    if saved is None or saved == algo.optimizer:
        return None
    return (
        f"holds {saved} statistics and algo.optimizer is {algo.optimizer}, which cannot "
        f"continue them; keep algo.optimizer={saved}"
    )
