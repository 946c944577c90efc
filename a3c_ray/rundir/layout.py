"""The run directory's layout: every file and folder name in it, said once.

::

    RUN_DIR/
      config.yaml              the run's whole config, written before training starts
      summary.json             written when the run ends (RunSummary)
      segment.json             a Tune trial's run that continued another's checkpoint: which one
      tracking.json            the MLflow or W&B run it logs to (train --track), for a resume
      tb/                      TensorBoard events of the Monitor
      checkpoints/
        ckpt-<env_steps>.pt    the newest monitor.keep_checkpoints of them
        latest, best           pointer files naming one checkpoint each
"""

from __future__ import annotations

import re

CONFIG = "config.yaml"
SUMMARY = "summary.json"
SEGMENT = "segment.json"
TRACKING = "tracking.json"
TENSORBOARD = "tb"
CHECKPOINTS = "checkpoints"
LATEST = "latest"
BEST = "best"
CHECKPOINT_GLOB = "ckpt-*.pt"
CHECKPOINT_RE = re.compile(r"^ckpt-(\d+)\.pt$")


def checkpoint_name(env_steps: int) -> str:
    return f"ckpt-{int(env_steps)}.pt"
