"""A run's settings, importing no layer of the package.

- ``fields``: the sections (env, model, algo, run, monitor, ps, tune) and their checks;
- ``values``: field values from YAML and the command line, typed by the annotations;
- ``space``: the tune section's samplers, parsed and checked against the fields they set;
- ``docs``: the reference table of docs/configuration.md, from the fields' docstrings.

Everything a caller needs is named here: ``from a3c_ray.config import Config``.
"""

from a3c_ray.config.fields import (
    LOG_STD_BOUNDS,
    MAX_GRAPH_WORKERS,
    METRICS,
    SAVED_BEFORE,
    SCHEDULERS,
    SECTIONS,
    TARGET_SOURCES,
    AlgoConfig,
    Config,
    EnvConfig,
    ModelConfig,
    MonitorConfig,
    PSConfig,
    RunConfig,
    TuneConfig,
    tune_problems,
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
