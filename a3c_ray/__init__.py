"""a3c-ray: distributed A3C (asynchronous advantage actor-critic) on Ray.

``from a3c_ray import load_policy`` loads a trained policy to act with, without Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Policy", "load_policy"]

if TYPE_CHECKING:
    from a3c_ray.algo.policy import Policy
    from a3c_ray.rundir.policy import load_policy


def __getattr__(name: str) -> Any:
    if name == "__version__":  # written once, in pyproject.toml
        from a3c_ray.version import package_version

        return package_version()
    # Imported on first use: `import a3c_ray` (every CLI command) stays free of torch.
    if name == "load_policy":
        from a3c_ray.rundir.policy import load_policy

        return load_policy
    if name == "Policy":
        from a3c_ray.algo.policy import Policy

        return Policy
    raise AttributeError(f"module 'a3c_ray' has no attribute {name!r}")
