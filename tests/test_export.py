"""a3c-ray export: ONNX and TorchScript files that run in a process that never imports a3c_ray or
Ray, and act as the policy does (MLP, CNN, LSTM with its state as inputs and outputs, Gaussian)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from a3c_ray import load_policy
from a3c_ray.commands.cli import main

from .policy_checkpoints import KINDS, save_checkpoint

pytest.importorskip("onnxruntime")

STEPS = 3  # a recurrent policy's state is carried through this many steps
BATCHES = (5, 1)  # a batch size other than the export's example, and one row

# Runs in a fresh interpreter: only numpy, onnxruntime and torch may be imported.
RUNNER = r"""
import json, sys
import numpy as np

jobs = json.loads(sys.argv[1])
out = {}
for job in jobs:
    data = np.load(job["inputs"])
    if job["format"] == "onnx":
        import onnxruntime as ort
        sess = ort.InferenceSession(job["file"], providers=["CPUExecutionProvider"])
        meta = sess.get_modelmeta().custom_metadata_map
        names = [i.name for i in sess.get_inputs()]
        run = lambda feed: sess.run(None, dict(zip(names, feed)))
    else:
        import torch
        files = {"a3c_ray.json": ""}
        net = torch.jit.load(job["file"], _extra_files=files)
        meta = json.loads(files["a3c_ray.json"])
        run = lambda feed: [t.detach().numpy() for t in net(*(torch.from_numpy(x) for x in feed))]
    space = json.loads(meta["a3c_ray.action_space"])
    recurrent = meta["a3c_ray.inputs"] == "observations,h,c"
    result = {"env_id": meta["a3c_ray.env_id"]}
    for b in job["batches"]:
        state = [data[f"h{b}"], data[f"c{b}"]] if recurrent else []
        for t in range(job["steps"]):
            first, value, *state = run([data[f"obs{b}_{t}"], *state])
            if space["type"] == "Box":
                low, high = (float(x) for x in (space["low"], space["high"]))
                actions = np.clip(first, low, high)
            else:
                actions = first.argmax(-1)
            result[f"actions{b}_{t}"] = actions.tolist()
            result[f"values{b}_{t}"] = value.tolist()
    out[job["name"]] = result
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("a3c_ray", "ray"))
assert not loaded, f"the runner imported {loaded}"
print(json.dumps(out))
"""


def observations(policy: Any, batch: int, rng: np.random.Generator) -> np.ndarray:
    shape = (batch, *policy.obs_shape)
    if policy.observation_space.dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return (rng.normal(size=shape) * 2).astype(np.float32)


# The MLP is the edit-test loop's check (make fast); the other kinds take seconds each to export
# to ONNX, so they are exported together, once, when a test of one of them runs.
FAST_KINDS = ("mlp",)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """For a kind: its group exported in both formats, the policy's own actions and values, and
    the runner's."""
    groups: dict[bool, dict[str, Any]] = {}

    def get(kind: str) -> dict[str, Any]:
        fast = kind in FAST_KINDS
        if fast not in groups:
            kinds = [k for k in KINDS if (k in FAST_KINDS) == fast]
            groups[fast] = export_and_run(kinds, tmp_path_factory.mktemp("export"))
        return groups[fast]

    return get


def export_and_run(kinds: list[str], root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    jobs, expected = [], {}
    for kind in kinds:
        save_checkpoint(root / kind, kind)
        policy = load_policy(root / kind)
        steps = STEPS if policy.is_recurrent else 1
        arrays: dict[str, np.ndarray] = {}
        want: dict[str, Any] = {}
        for b in BATCHES:
            state = policy.initial_state(b)
            if state is not None:
                arrays[f"h{b}"], arrays[f"c{b}"] = state
            for t in range(steps):
                obs = observations(policy, b, rng)
                arrays[f"obs{b}_{t}"] = obs
                acted = policy.act(obs, state, greedy=True)
                state = acted.state
                want[f"actions{b}_{t}"], want[f"values{b}_{t}"] = acted.actions, acted.values
        np.savez(root / f"{kind}.npz", **arrays)
        for fmt, suffix in (("onnx", "onnx"), ("torchscript", "pt")):
            file = root / f"{kind}.{suffix}"
            assert main(["export", str(root / kind), str(file), "--format", fmt]) == 0
            name = f"{kind}-{fmt}"
            expected[name] = want
            jobs.append(
                {
                    "name": name,
                    "format": fmt,
                    "file": str(file),
                    "inputs": str(root / f"{kind}.npz"),
                    "batches": list(BATCHES),
                    "steps": steps,
                }
            )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(jobs)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {"expected": expected, "got": json.loads(done.stdout)}


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=[] if k in FAST_KINDS else [pytest.mark.slow]) for k in KINDS]
)
def test_the_exported_file_acts_as_the_policy_without_a3c_ray(
    exported: Callable[[str], dict[str, Any]], kind: str, fmt: str
) -> None:
    group = exported(kind)
    want, got = group["expected"][f"{kind}-{fmt}"], group["got"][f"{kind}-{fmt}"]
    assert got["env_id"] == KINDS[kind][0]
    assert set(got) - {"env_id"} == set(want)
    for key, value in want.items():
        if key.startswith("actions") and value.dtype == np.int64:
            np.testing.assert_array_equal(np.array(got[key]), value, err_msg=key)
        else:
            np.testing.assert_allclose(np.array(got[key]), value, rtol=1e-4, atol=1e-5, err_msg=key)


def test_export_of_a_missing_checkpoint_is_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.onnx"
    assert main(["export", str(tmp_path / "none"), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint" in err[0]
    assert not out.exists()
    assert main(["export", str(tmp_path), str(out), "--format", "tflite"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    # The file given twice (FILE and the older --out FILE), or not at all: one line, exit 2.
    assert main(["export", str(tmp_path), str(out), "--out", str(out)]) == 2
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("give the file to write once" in e for e in err), err
    assert not out.exists()
    # The older --out FILE still names the file: the missing checkpoint is what stops it.
    assert main(["export", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "no checkpoint" in capsys.readouterr().err
