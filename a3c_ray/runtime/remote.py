"""Helpers for the Ray shells around the plain actor classes."""

from __future__ import annotations

from typing import Any

import ray
import torch

NAMESPACE = "a3c-ray"
"""The Ray namespace of every run's named actors: ``<run-id>/ParameterServer``, ``.../Worker-<i>``."""


def actor_class(shell: type, name: str, **options: Any) -> Any:
    """A Ray actor class from ``shell``, shown in the dashboard under ``name`` (ParameterServer,
    ...), with the ``options`` only ``ray.remote`` takes (``concurrency_groups``)."""
    shell.__name__ = name
    shell.__qualname__ = name
    return ray.remote(**options)(shell) if options else ray.remote(shell)


def one_torch_thread() -> None:
    """Each actor is one process on a shared machine: one intra-op thread avoids oversubscription."""
    torch.set_num_threads(1)


def resolve(value: Any) -> Any:
    """Values that may arrive as object refs (large weights) are fetched; others pass through."""
    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


class RemoteProxy:
    """Calls an actor's methods as if they were local: ``proxy.f(x)`` is ``ray.get(actor.f.remote(x))``."""

    def __init__(self, handle: Any):
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._handle, name)
        return lambda *args, **kwargs: ray.get(method.remote(*args, **kwargs))
