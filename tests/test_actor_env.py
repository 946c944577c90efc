"""The run's actors' malloc settings (``run.actor_env``) keep a Worker's gradient pass from mapping
fresh pages from the system at every allocation: counted in minor page faults, not time."""

from __future__ import annotations

import os
import subprocess
import sys

from a3c_ray.config import RunConfig

# One gradient pass of breakout.yaml's Worker: the Nature CNN on 16 envs x t_max 5 frame stacks of
# 4 x 84 x 84, forward and backward, in float32; the page faults of the last 5 of 8 passes.
PASS = """
import resource, torch
from a3c_ray.algo.models import build_model
from a3c_ray.config import ModelConfig
torch.set_num_threads(1)
model = build_model(ModelConfig(kind="nature_cnn"), (4, 84, 84), 4)
obs = torch.randint(0, 256, (5, 16, 4, 84, 84), dtype=torch.uint8)
resets = torch.zeros(5, 16, dtype=torch.bool)
def gradient_pass():
    logits, values = model.forward_sequence(obs, (), resets)
    model.zero_grad(set_to_none=False)
    (logits.logsumexp(-1).mean() + values.pow(2).mean()).backward()
for _ in range(3):
    gradient_pass()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    gradient_pass()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
"""


def faults_per_pass(env: dict[str, str]) -> int:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PASS],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(out.stdout.split()[-1])


def test_the_default_actor_env_serves_a_gradient_pass_from_the_heap() -> None:
    """Under the default ``run.actor_env`` a pass of the Nature CNN over 80 frame stacks (a
    Breakout gradient) takes a few hundred minor faults at most; blocks of 1 MiB or more mapped
    per allocation (the setting before) take about ten thousand, which the same count shows."""
    default = faults_per_pass(RunConfig().actor_env)
    mapped = faults_per_pass({"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "1048576"})
    assert default < 1_000, default
    assert mapped > 10 * max(default, 100), (default, mapped)
