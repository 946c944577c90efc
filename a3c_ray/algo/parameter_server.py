"""The ParameterServer: the one writer of the global weights.

Workers push gradients computed from the weights of some version v. The server checks each
gradient (finite, not too stale), clips it to a global norm, and applies it with one optimizer
over one flat parameter vector, so RMSProp's or Adam's statistics are shared by every Worker (the
paper's "shared RMSProp").

With ``ps.shards`` > 1 each shard is one ParameterServer over its slice of the weights
(``a3c_ray.algo.shards``). A shard holds what it uses: its weights, optimizer statistics, version
and drops. Shard 0 (or the only one) also coordinates the run: its ``run`` (a ``Coordinator``)
keeps the run's counters, its stop decision and its scaling; the other shards have none.
"""

from __future__ import annotations

import copy
import math
import uuid
from typing import Any

import numpy as np
import torch

from a3c_ray.algo import wire
from a3c_ray.algo.coordinator import Coordinator
from a3c_ray.algo.messages import (
    CheckpointMeta,
    GradientPush,
    Progress,
    PushReply,
    RunDecisions,
    ShardCounts,
)
from a3c_ray.algo.optim import make_optimizer, optimizer_mismatch, step_size
from a3c_ray.algo.stats import Window, WindowStats
from a3c_ray.config import Config
from a3c_ray.errors import CheckpointError

UPDATE_NORM_EVERY = 8
"""The size of the optimizer's step is measured on every 8th application (for its chart): the
measurement costs a copy of the weights and two passes over them."""


def initial_params(cfg: Config, obs_shape: tuple[int, ...], n_actions: int) -> np.ndarray:
    """The run's initial weights, a function of the seed alone."""
    from a3c_ray.algo.models import build_model, get_flat_params
    from a3c_ray.algo.seeding import Stream, derive_seeds

    torch.manual_seed(derive_seeds(cfg.run.seed, Stream.INIT)[0])
    return get_flat_params(build_model(cfg.model, obs_shape, n_actions))


class ParameterServer:
    """Applies gradients; with ``restore`` (a checkpoint's state), continues from it.

    As shard ``shard`` of several, ``init_params`` and ``restore`` are its slice of the weights
    (``shards.slice_state``); shard 0 coordinates the run (``run``)."""

    def __init__(
        self,
        cfg: Config,
        init_params: np.ndarray,
        meta: CheckpointMeta | None = None,
        restore: dict[str, Any] | None = None,
        shard: int = 0,
    ):
        self.cfg = cfg
        self.meta = meta
        self.shard = shard
        self.wire_dtype = cfg.ps.wire_dtype
        self.run: Coordinator | None = None
        self.reset(init_params, restore)

    def reset(self, init_params: np.ndarray, restore: dict[str, Any] | None = None) -> None:
        """Start over from ``init_params``, or from ``restore`` (a checkpoint's state): weights,
        optimizer statistics, counters and a new lineage, as a new server would; what the run
        decided (its stop, the Workers asked for and retired) stays decided."""
        cfg = self.cfg
        decided = self.run.decisions() if self.run is not None else None
        self.flat = torch.nn.Parameter(torch.tensor(np.asarray(init_params, dtype=np.float32)))
        self.optimizer = make_optimizer([self.flat], cfg.algo)
        # Each pushed gradient is copied into this one buffer (arrays from Ray are read-only).
        self._grad = torch.zeros_like(self.flat, requires_grad=False)
        self._grad_np = self._grad.numpy()
        # The weights before each step, so that the step's own size can be charted.
        self._before = torch.zeros_like(self._grad)
        self.version = 0
        # Every shard counts every push's env steps: the learning-rate schedule follows them.
        self.env_steps = 0
        self.gradients_applied = 0
        self.dropped_nonfinite = 0
        self.dropped_stale = 0
        self.dropped_resync = 0
        self.restarts = 0
        # Per Worker slot: the id of its last push, and whether it was applied and found stale.
        self._answered: dict[int, tuple[str, int, bool, bool]] = {}
        self._pending = Window()
        self._weights_cache: tuple[int, np.ndarray] | None = None
        self.lineage = uuid.uuid4().hex[:12]
        self.restored_from: str | None = None
        self.run = Coordinator(cfg.run) if self.shard == 0 else None
        if restore is not None:
            self.load_state_dict(restore)
            self.restored_from = restore.get("path")
        if self.run is not None and decided is not None:
            self.run.keep(decided)

    @property
    def coordinator(self) -> Coordinator:
        """The run's state; only the coordinating shard has it."""
        if self.run is None:
            raise RuntimeError(f"shard {self.shard} does not coordinate the run: ask shard 0")
        return self.run

    # -- the hot path ------------------------------------------------------------------------
    def push(self, p: GradientPush) -> PushReply:
        repeat = self._repeat(p)
        if repeat is not None:
            return repeat
        if np.shape(p.grad) != self._grad_np.shape:
            raise ValueError(
                f"gradient of size {np.size(p.grad)} for parameters of size {self.flat.numel()}"
            )
        if p.norm is None and self.cfg.ps.shards > 1:
            # A slice's own norm would clip each slice by another factor.
            raise ValueError(
                "a push to one shard of several must carry the norm of the whole gradient"
            )
        self.env_steps += p.env_steps
        if self.run is not None:
            self.run.record_push(p)
        for r, length in zip(p.episode_returns, p.episode_lengths, strict=True):
            if self.run is not None:
                self.run.record_episode(r)
            self._pending.episodes.append((self.env_steps, float(r), int(length)))
        staleness = self.version - p.version
        stale = (
            p.stale
            if p.stale is not None
            else self.cfg.algo.max_staleness is not None and staleness > self.cfg.algo.max_staleness
        )
        applied = False
        wire.decode_into(p.grad, self.wire_dtype, self._grad_np)
        # One pass over the gradient: its norm is finite exactly when every element is. The
        # router sends the norm of the whole gradient as the wire carries it (a shard sees only
        # a slice of it), so that every shard drops, or clips, alike.
        norm = wire.norm(self._grad_np, "float32") if p.norm is None else p.norm
        if p.lineage and p.lineage != self.lineage:
            # Computed from the weights of a server that has since been restored from a checkpoint.
            self.dropped_resync += 1
        elif not math.isfinite(norm):
            self.dropped_nonfinite += 1
        elif stale:
            self.dropped_stale += 1
        else:
            self._apply(self._grad, norm, staleness)
            applied = True
        self._pending.add_push(p.stats)
        if self.run is not None:
            self.run.check_stop(self.env_steps)
        if p.seq >= 0:
            self._answered[p.worker] = (p.sender, p.seq, applied, stale and not applied)
        return self._reply(p, applied, stale and not applied)

    def _reply(self, p: GradientPush, applied: bool, stale: bool) -> PushReply:
        """The newest weights when the Worker's are behind, the version, and whether to stop (the
        coordinator's word: the other shards never say stop)."""
        moved = self.version != p.version or bool(p.lineage and p.lineage != self.lineage)
        weights = self.weights() if moved else None
        stop = self.run is not None and self.run.stops(p.worker)
        return PushReply(weights, self.version, stop, applied, self.lineage, stale)

    def _repeat(self, p: GradientPush) -> PushReply | None:
        """The answer to a push this shard has seen already (sent again after a lost reply or a
        compiled graph's timeout), which is not applied again: applied or not, stale or not, as
        the first time, with the newest weights (not a copy per Worker kept for the purpose);
        None for a new push."""
        if p.seq < 0 or p.worker not in self._answered:
            return None
        sender, seq, applied, stale = self._answered[p.worker]
        if sender != p.sender or p.seq > seq:
            return None
        if p.seq < seq:  # an older push, arriving after the Worker's next: a graph's late message
            applied = stale = False
        return self._reply(p, applied, stale)

    def _apply(self, grad: torch.Tensor, norm: float, staleness: int) -> None:
        if self.run is not None:
            self.run.record_update(staleness)
        max_norm = self.cfg.algo.max_grad_norm
        if max_norm is not None and norm > max_norm:
            grad.mul_(max_norm / (norm + 1e-6))
        self._follow_schedule()
        self.flat.grad = grad
        flat = self.flat.detach()
        measure = self.gradients_applied % UPDATE_NORM_EVERY == 0
        if measure:
            self._before.copy_(flat)
        self.optimizer.step()
        # The effective step: the optimizer's update, however it scaled the gradient.
        update_norm = float(torch.linalg.vector_norm(self._before.sub_(flat))) if measure else None
        self.version += 1
        self.gradients_applied += 1
        self._pending.add_update(staleness, norm, update_norm)

    def _follow_schedule(self) -> None:
        """The learning rate of ``algo.lr_anneal`` / ``algo.lr_half_life`` at these env steps."""
        if self.cfg.algo.lr_anneal or self.cfg.algo.lr_half_life is not None:
            lr = step_size(self.cfg.algo, self.env_steps, self.cfg.run.max_steps)
            for g in self.optimizer.param_groups:
                g["lr"] = lr

    # -- reads -------------------------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """The current flat weights as the wire carries them; one copy per version, shared by
        every reader of it."""
        if self._weights_cache is None or self._weights_cache[0] != self.version:
            flat = self.flat.detach().numpy()
            encoded = wire.encode(flat, self.wire_dtype)
            self._weights_cache = (self.version, flat.copy() if encoded is flat else encoded)
        return self._weights_cache[1]

    def get_weights(self) -> tuple[np.ndarray, int, str]:
        return self.weights(), self.version, self.lineage

    def counts(self) -> ShardCounts:
        """This shard's own counters (any shard; the run's are ``progress``)."""
        return ShardCounts(
            version=self.version,
            env_steps=self.env_steps,
            gradients_applied=self.gradients_applied,
            dropped_nonfinite=self.dropped_nonfinite,
            dropped_stale=self.dropped_stale,
            dropped_resync=self.dropped_resync,
        )

    def progress(self) -> Progress:
        """The run's counters at this moment (the coordinator's)."""
        return self.coordinator.progress(
            self.counts(), self.gradients_dropped(), self.restarts, self.restored_from
        )

    def drain_stats(self) -> WindowStats:
        """Training statistics gathered since the last call, for the Monitor's charts."""
        window, self._pending = self._pending, Window()
        return window.summary(
            self.env_steps, self.version, float(self.optimizer.param_groups[0]["lr"])
        )

    def gradients_dropped(self) -> int:
        return self.dropped_nonfinite + self.dropped_stale + self.dropped_resync

    # -- the coordinator's calls, as the actor serves them -----------------------------------
    def set_workers(self, n: int) -> None:
        self.coordinator.set_workers(n)

    def retire(self, worker: int) -> None:
        self.coordinator.retire(worker)

    def note_worker_restarts(self, total: int) -> None:
        self.coordinator.note_worker_restarts(total)

    def evaluation_reached(self, mean: float, env_steps: int, train_seconds: float) -> bool:
        return self.coordinator.evaluation_reached(mean, env_steps, train_seconds)

    def request_stop(self, reason: str) -> None:
        self.coordinator.stop(reason)

    def keep_decisions(self, decided: RunDecisions) -> None:
        self.coordinator.keep(decided)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint needs: weights, optimizer statistics, version and counters
        (the run's, from the coordinator)."""
        return {
            **(self.meta.to_state() if self.meta else {}),
            "params": self.flat.detach().clone(),
            # A copy: torch's state_dict shares the live statistics tensors.
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "optimizer_name": self.cfg.algo.optimizer,
            "version": self.version,
            "env_steps": self.env_steps,
            "gradients_applied": self.gradients_applied,
            "gradients_dropped": self.gradients_dropped(),
            "dropped_nonfinite": self.dropped_nonfinite,
            "dropped_stale": self.dropped_stale,
            "dropped_resync": self.dropped_resync,
            "ps_restarts": self.restarts,
            **(self.run.state_dict() if self.run is not None else {}),
        }

    def check_compatible(self, state: dict[str, Any]) -> None:
        """A checkpoint of another env or model shape, or of another optimizer's statistics, is
        refused with a clear error."""
        where = state.get("path", "checkpoint")
        if self.meta is not None and "env_id" in state:
            problem = self.meta.mismatch(CheckpointMeta.from_state(state))
            if problem:
                raise CheckpointError(f"{where} {problem}")
        if state["params"].numel() != self.flat.numel():
            raise CheckpointError(
                f"{where} holds {state['params'].numel()} parameters, "
                f"this run's model has {self.flat.numel()}"
            )
        problem = optimizer_mismatch(state, self.cfg.algo)
        if problem:
            raise CheckpointError(f"{where} {problem}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_compatible(state)
        with torch.no_grad():
            self.flat.copy_(state["params"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
            # The statistics are the checkpoint's; the step size and the like are this config's
            # (a search may restart a trial from another's checkpoint with a new learning rate).
            for group in self.optimizer.param_groups:
                group.update({k: v for k, v in self.optimizer.defaults.items() if k in group})
        self.version = int(state.get("version", 0))
        self.env_steps = int(state.get("env_steps", 0))
        self.gradients_applied = int(state.get("gradients_applied", 0))
        self.restarts = int(state.get("ps_restarts", 0))
        self._follow_schedule()
        if self.run is not None:
            self.run.load_state_dict(state)
        if "dropped_nonfinite" in state:
            self.dropped_nonfinite = int(state["dropped_nonfinite"])
            self.dropped_stale = int(state.get("dropped_stale", 0))
            self.dropped_resync = int(state.get("dropped_resync", 0))
        else:  # a checkpoint from before the reasons were kept: the total, under one reason
            self.dropped_nonfinite = int(state.get("gradients_dropped", 0))
