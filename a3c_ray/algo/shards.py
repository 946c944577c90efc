"""A ParameterServer in S shards: shard k owns the slice ``bounds[k]`` of the flat weights and the
optimizer statistics of that slice, so shared RMSProp/Adam stay exact per parameter.

Shard 0 is the coordinator: it alone receives a push's episodes and statistics, so its counters
and its stop decision are the run's, and every caller that reads the run (the driver, ``status``,
``scale``, metrics) reads it. Every shard sees every push's env steps (for the learning-rate
schedule) and the norm of the whole gradient as the wire carries it (for the finite check and for
clipping), so each shard applies exactly what one ParameterServer would to the same parameters.

A push is applied on every shard or on none. Its norm makes the finite check the same everywhere.
The one exception is a Worker that dies while it sends a push: the shards its calls reached apply
their slices, the others never receive theirs (or, with ``max_staleness``, a verdict whose owner
died). That costs those slices one update, as a dropped gradient would, and nothing else: shards
never compare versions, each Worker tracks every shard's version, and the next pushes apply
everywhere.
Staleness is not: pushes of several Workers reach the shards in different orders, so each shard
would count a push's staleness differently. With ``algo.max_staleness`` the coordinator alone
judges it, and the other shards take the push with its verdict (``ShardRouter.judged``).

Checkpoints hold the whole model in one ParameterServer's format (``merge_states``), whatever S:
a run resumes, evaluates or restores with any number of shards (``slice_state``).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np
import torch

from a3c_ray.algo import wire
from a3c_ray.algo.messages import GradientPush, PushReply

ALIGN = 1024
"""Slice boundaries fall on multiples of this many parameters, so that the optimizer's vectorized
loops meet each parameter in the same position as in one flat vector (bit-identical steps)."""


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous [lo, hi) slices of ``n`` parameters, as equal as ALIGN allows."""
    if not 1 <= shards <= n:
        raise ValueError(f"cannot split {n} parameters into {shards} shards")
    cuts = [min(n, round(n * k / shards / ALIGN) * ALIGN) for k in range(shards + 1)]
    cuts[-1] = n
    if any(b <= a for a, b in itertools.pairwise(cuts)):  # a model too small to align
        cuts = [n * k // shards for k in range(shards + 1)]
    return list(itertools.pairwise(cuts))


def slice_state(state: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """The part of a whole-model checkpoint state that shard [lo, hi) restores from."""
    n = state["params"].numel()
    out = dict(state)
    out["params"] = state["params"][lo:hi].clone()
    if "optimizer" in state:
        opt = state["optimizer"]
        out["optimizer"] = {
            **opt,
            "state": {
                pid: {
                    k: v[lo:hi].clone() if torch.is_tensor(v) and v.numel() == n else v
                    for k, v in pstate.items()
                }
                for pid, pstate in opt["state"].items()
            },
        }
    return out


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """One whole-model state from the shards' states in shard order; counters are the coordinator's."""
    if len(states) == 1:
        return states[0]
    out = dict(states[0])
    out["params"] = torch.cat([s["params"] for s in states])
    sizes = [s["params"].numel() for s in states]
    if "optimizer" in states[0]:
        first = states[0]["optimizer"]
        merged: dict[Any, dict[str, Any]] = {}
        for pid, pstate in first["state"].items():
            merged[pid] = {
                k: (
                    torch.cat([s["optimizer"]["state"][pid][k] for s in states])
                    if torch.is_tensor(v) and v.numel() == sizes[0] and v.dim() > 0
                    else v
                )
                for k, v in pstate.items()
            }
        out["optimizer"] = {**first, "state": merged}
    return out


def coordinator_judges(shards: int, max_staleness: int | None) -> bool:
    """With several shards and ``algo.max_staleness``, the coordinator judges each push's
    staleness and the other shards follow its verdict."""
    return shards > 1 and max_staleness is not None


class ShardRouter:
    """A Worker's side of S shards: splits each push, and assembles the weights from the replies."""

    def __init__(self, n: int, shards: int, wire_dtype: str, max_staleness: int | None = None):
        self.bounds = shard_bounds(n, shards)
        self.wire_dtype = wire_dtype
        self.max_staleness = max_staleness
        self.versions = [-1] * shards
        self.lineages = [""] * shards
        self.weights = np.zeros(n, dtype=np.float32)
        # The shards' versions behind each set of weights a Worker took, by the coordinator's
        # (version, lineage) that the Worker records: a gradient pushed after a newer reply
        # arrived (the overlapped push) is still sent with the versions it was computed from.
        self._behind: dict[tuple[int, str], tuple[list[int], list[str]]] = {}

    @property
    def shards(self) -> int:
        return len(self.bounds)

    @property
    def coordinator_judges(self) -> bool:
        """Whether the shards past the coordinator must wait for its verdict on staleness."""
        return coordinator_judges(self.shards, self.max_staleness)

    def split(self, p: GradientPush) -> list[GradientPush]:
        """The push of each shard: its slice of the gradient, on the wire, with the version and
        lineage of that shard's weights; episodes and statistics go to the coordinator alone."""
        versions, lineages = self._behind.get(
            (p.version, p.lineage), (self.versions, self.lineages)
        )
        grad = wire.encode(p.grad, self.wire_dtype)
        # The norm of what the shards will apply: a float16 wire turns a value past 65,504 into
        # inf, which every shard must then see, however finite the float32 gradient was.
        norm = p.norm if p.norm is not None and grad is p.grad else wire.norm(grad, self.wire_dtype)
        out = []
        for k, (lo, hi) in enumerate(self.bounds):
            extra: dict[str, Any] = (
                {}
                if k == 0
                else {"episode_returns": [], "episode_lengths": [], "stats": {}, "env_restarts": 0}
            )
            out.append(
                dataclasses.replace(
                    p,
                    grad=grad[lo:hi],
                    version=versions[k],
                    lineage=lineages[k],
                    norm=norm,
                    **extra,
                )
            )
        return out

    def judged(self, rest: list[GradientPush], first: PushReply) -> list[GradientPush]:
        """The pushes of shards 1.. with the coordinator's verdict ``first`` on staleness (as they
        are without ``max_staleness``)."""
        if not self.coordinator_judges:
            return rest
        return [dataclasses.replace(q, stale=first.stale) for q in rest]

    def merge(self, replies: list[PushReply]) -> PushReply:
        """One reply: the whole weights when any slice moved, and the coordinator's version and stop."""
        weights: np.ndarray | None = None
        for k, (reply, (lo, hi)) in enumerate(zip(replies, self.bounds, strict=True)):
            if reply.weights is not None:
                weights = np.asarray(reply.weights)
                if self.shards > 1 or self.wire_dtype != "float32":
                    wire.decode_into(weights, self.wire_dtype, self.weights[lo:hi])
                    weights = self.weights
                # (one float32 shard: its reply is the whole weights, taken as they came)
            self.versions[k], self.lineages[k] = reply.version, reply.lineage
        first = replies[0]
        key = (first.version, first.lineage)
        self._behind.pop(key, None)  # (re-inserted: the newest)
        self._behind[key] = (list(self.versions), list(self.lineages))
        while len(self._behind) > 8:
            del self._behind[next(iter(self._behind))]
        return PushReply(
            weights,
            first.version,
            first.stop,
            all(r.applied for r in replies),
            first.lineage,
        )
