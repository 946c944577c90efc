"""A policy as one file that runs without a3c-ray and without Ray: ONNX or TorchScript.

The file's first input is a batch of observations [B, *obs_shape] in the observation space's
dtype (uint8 images, float32 vectors); its outputs are, in order:

- ``logits`` [B, n_actions] of a categorical policy, or ``mean`` [B, action_dims] of a Gaussian;
- ``value`` [B];
- and for an LSTM policy, the new state ``h_out`` and ``c_out`` [B, lstm_size], whose inputs
  ``h`` and ``c`` follow the observations (zeros at an episode's start).

The greedy action is ``argmax(logits)``, or the mean clipped to the action space's bounds. The file
carries what it was made from as metadata (``a3c_ray.*`` keys: env id, spaces, env steps,
checkpoint; ONNX metadata_props, or TorchScript's extra file ``a3c_ray.json``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

from a3c_ray.algo.models import ActorCritic
from a3c_ray.algo.policy import Policy
from a3c_ray.envs.spaces import json_safe
from a3c_ray.rundir.checkpoint import atomic_write

FORMATS = ("onnx", "torchscript")
METADATA_FILE = "a3c_ray.json"


class FeedForwardHead(nn.Module):
    """observations -> (logits or Gaussian mean, value)."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model
        self.width = model.policy.out_features

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, value, _ = self.model(observations)
        return out[:, : self.width], value  # a Gaussian's [mean, log_std]: the mean


class RecurrentHead(nn.Module):
    """(observations, h, c) -> (logits or Gaussian mean, value, h_out, c_out)."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model
        self.width = model.policy.out_features

    def forward(
        self, observations: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        out, value, (h_out, c_out) = self.model(observations, (h, c))
        return out[:, : self.width], value, h_out, c_out


def io_names(policy: Policy) -> tuple[list[str], list[str]]:
    first = "mean" if policy.continuous else "logits"
    if policy.is_recurrent:
        return ["observations", "h", "c"], [first, "value", "h_out", "c_out"]
    return ["observations"], [first, "value"]


def metadata(policy: Policy) -> dict[str, str]:
    """The ``a3c_ray.*`` keys every exported file carries, each a string (JSON where structured)."""
    d = json_safe(policy.describe())
    inputs, outputs = io_names(policy)
    return {
        "a3c_ray.env_id": policy.env_id,
        "a3c_ray.env_steps": str(policy.env_steps),
        "a3c_ray.checkpoint": str(policy.checkpoint or ""),
        "a3c_ray.observation_space": json.dumps(d["observation_space"]),
        "a3c_ray.action_space": json.dumps(d["action_space"]),
        "a3c_ray.policy": d["policy"],
        "a3c_ray.inputs": ",".join(inputs),
        "a3c_ray.outputs": ",".join(outputs),
    }


def example_inputs(policy: Policy, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Inputs of ``batch`` rows (2: a batch of 1 would be taken as a fixed size by the export)."""
    dtype = np.dtype(getattr(policy.observation_space, "dtype", None) or np.float32)
    obs = torch.from_numpy(np.zeros((batch, *policy.obs_shape), dtype=dtype))
    state = policy.initial_state(batch)
    return (obs, *(torch.from_numpy(s) for s in state)) if state is not None else (obs,)


def head(policy: Policy) -> nn.Module:
    model = policy.model.eval()
    return RecurrentHead(model) if policy.is_recurrent else FeedForwardHead(model)


def export_policy(policy: Policy, fmt: str, out: str | Path) -> Path:
    """Write ``policy`` as ``fmt`` (onnx or torchscript) to ``out``, atomically."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    out = Path(out)
    net, args = head(policy), example_inputs(policy)
    if fmt == "onnx":
        data = onnx_bytes(policy, net, args)
        atomic_write(out, lambda f: f.write(data))
    else:
        with warnings.catch_warnings():
            # PyTorch deprecates TorchScript in favour of torch.export; the format still loads.
            warnings.simplefilter("ignore", DeprecationWarning)
            traced = torch.jit.trace(net, args)
            extra = {METADATA_FILE: json.dumps(metadata(policy))}
            atomic_write(out, lambda f: torch.jit.save(traced, f, _extra_files=extra))
    return out


def onnx_bytes(policy: Policy, net: nn.Module, args: tuple[torch.Tensor, ...]) -> bytes:
    """The ONNX model, exported by torch.export with a dynamic batch dimension."""
    import onnx

    inputs, outputs = io_names(policy)
    batch = torch.export.Dim("batch")
    shapes = {name: {0: batch} for name in inputs}
    with quiet_exporter():
        program = torch.onnx.export(
            net,
            args,
            dynamo=True,
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=shapes,
            external_data=False,
            verbose=False,
        )
    assert program is not None
    proto = program.model_proto
    for key, value in metadata(policy).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(proto)
    return bytes(proto.SerializeToString())


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporter's notes (optional torchvision ops it skips, its own progress) are not the
    user's business; its errors still raise."""
    log = logging.getLogger("torch.onnx")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)
