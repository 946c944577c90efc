"""a3c-ray: distributed A3C (asynchronous advantage actor-critic) on Ray.

From Python (``docs/python.md``): ``a3c_ray.train(...)`` trains as ``a3c-ray train`` does and
returns the run's summary; ``a3c_ray.evaluate(path)`` plays a checkpoint as ``a3c-ray eval`` does,
``a3c_ray.evaluate_random(env)`` random actions as ``a3c-ray eval --random`` does;
``a3c_ray.load_policy(path)`` loads a trained policy to act with, without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "CheckpointError",
    "Config",
    "ConfigError",
    "EvalResult",
    "Evaluation",
    "Policy",
    "Progress",
    "StopTraining",
    "Summary",
    "TrainingFailed",
    "evaluate",
    "evaluate_random",
    "load_policy",
    "train",
]

if TYPE_CHECKING:
    from a3c_ray.algo.messages import Progress
    from a3c_ray.algo.policy import Policy
    from a3c_ray.api import EvalResult, TrainingFailed, evaluate, evaluate_random, train
    from a3c_ray.config import Config
    from a3c_ray.errors import CheckpointError, ConfigError
    from a3c_ray.rundir.policy import load_policy
    from a3c_ray.rundir.summary import Summary
    from a3c_ray.runtime.callbacks import Evaluation, StopTraining

# Imported on first use: `import a3c_ray` (every CLI command) stays free of torch and Ray.
_WHERE = {
    "CheckpointError": "a3c_ray.errors",
    "Config": "a3c_ray.config",
    "ConfigError": "a3c_ray.errors",
    "EvalResult": "a3c_ray.api",
    "Evaluation": "a3c_ray.runtime.callbacks",
    "Policy": "a3c_ray.algo.policy",
    "Progress": "a3c_ray.algo.messages",
    "StopTraining": "a3c_ray.runtime.callbacks",
    "Summary": "a3c_ray.rundir.summary",
    "TrainingFailed": "a3c_ray.api",
    "evaluate": "a3c_ray.api",
    "evaluate_random": "a3c_ray.api",
    "load_policy": "a3c_ray.rundir.policy",
    "train": "a3c_ray.api",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # written once, in pyproject.toml
        from a3c_ray.version import package_version

        return package_version()
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'a3c_ray' has no attribute {name!r}")
