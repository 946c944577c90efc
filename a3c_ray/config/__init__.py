"""A run's settings, importing no layer of the package.

- ``sections``: the sections (env, model, algo, run, monitor, ps, tune), a docstring per field;
- ``checks``: each field's range and the tune section's settings;
- ``fields``: ``Config``, the sections as one: read from YAML, set by dotted name, checked;
- ``values``: field values from YAML and the command line, typed by the annotations;
- ``space``: the tune section's samplers, parsed and checked against the fields they set;
- ``docs``: the reference table of docs/configuration.md, from the fields' docstrings.

Everything a caller needs is named here: ``from a3c_ray.config import Config``.
"""

from a3c_ray.config.checks import (
    LOG_STD_BOUNDS,
    MAX_GRAPH_WORKERS,
    METRICS,
    SCHEDULERS,
    TARGET_SOURCES,
    tune_problems,
)
from a3c_ray.config.fields import (
    SAVED_BEFORE,
    SECTIONS,
    AlgoConfig,
    Config,
    EnvConfig,
    ModelConfig,
    MonitorConfig,
    PSConfig,
    RunConfig,
    TuneConfig,
)

__all__ = [
    "LOG_STD_BOUNDS",
    "MAX_GRAPH_WORKERS",
    "METRICS",
    "SAVED_BEFORE",
    "SCHEDULERS",
    "SECTIONS",
    "TARGET_SOURCES",
    "AlgoConfig",
    "Config",
    "EnvConfig",
    "ModelConfig",
    "MonitorConfig",
    "PSConfig",
    "RunConfig",
    "TuneConfig",
    "tune_problems",
]
