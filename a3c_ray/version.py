"""The package's version: written once, in pyproject.toml, and read back from the installed
package's metadata (``a3c-ray --version``, ``a3c_ray.__version__``)."""

from __future__ import annotations


def package_version() -> str:
    """The installed a3c-ray's version, or a note saying it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("a3c-ray")
    except PackageNotFoundError:
        return "(not installed: pip install the checkout)"
