"""``a3c-ray train``: train an agent; and a run's config from what its user asked for, said once
for the command line and for Python (``a3c_ray.train``).

What a user asks (``TrainRequest``) becomes a config (``plan``): a new run starts from ``--config``
(a file, a shipped name, or from Python a ``Config``) or from ``--env``'s starting point, then takes
the ``--set`` items and the named flags; a resumed run starts from its saved config, and may not
change its env or its network.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a3c_ray import configs
from a3c_ray.commands import flags
from a3c_ray.config import Config
from a3c_ray.configs import FOR_ENV
from a3c_ray.configs import resolve as resolve_config
from a3c_ray.errors import ConfigError
from a3c_ray.rundir import layout

# Sections a resumed run must keep: its checkpoints only fit this env and this network.
FROZEN_ON_RESUME = ("env", "model")
RESUME_AUTO = "auto"


@dataclass
class TrainRequest:
    """What a user asks of a run, before any config is read."""

    config: str | Path | Config | None = None
    """A YAML file, a shipped config's name, or (from Python) a ``Config``."""
    sets: list[str] = field(default_factory=list)
    """``--set FIELD=VALUE`` items, each value parsed as YAML."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """``section.field`` -> value, from Python: applied after ``sets``."""
    fields: dict[str, Any] = field(default_factory=dict)
    """The named flags' fields (``env.id``, ``run.seed``, ...) -> value, applied last; None: not
    given."""
    resume: str | None = None
    """A run directory to continue, or ``auto`` (with ``run.run_dir``): continue it if it holds a
    run, else start one there."""
    use_env_config: bool = True
    greedy: bool = False
    progress: bool = True
    overwrite: bool = False
    trust_env: bool = False

    @property
    def env(self) -> str | None:
        value = self.fields.get("env.id")
        return None if value is None else str(value)


@dataclass
class RunPlan:
    """A request made into a run: its config, and how the run directory is to be taken."""

    cfg: Config
    note: str | None = None
    """A line to print once the config is valid, when ``--env`` chose the starting config."""
    resume: bool = False
    existing_ok: bool = False
    """A new run may start in a directory that exists without a run in it (``--resume auto``)."""
    config_name: str | None = None
    """The config's name: a shipped one, a file's stem, or the one ``--env`` started from."""


def plan(req: TrainRequest) -> RunPlan:
    """The run's config from ``req``; a ConfigError (every problem at once) if it cannot be."""
    existing_ok = False
    if req.resume == RESUME_AUTO:
        where = req.fields.get("run.run_dir")
        if not where:
            raise ConfigError(["--resume auto needs --run-dir DIR: the run to continue or start"])
        req.resume = str(where) if holds_run(str(where)) else None
        existing_ok = True
    if req.resume is not None:
        return RunPlan(resume_config(req), None, True, existing_ok, _name_of(req.config))
    if isinstance(req.config, Config):
        cfg, note = copy.deepcopy(req.config), None
        name = None
    else:
        from a3c_ray.envs.make import is_atari

        cfg, note = configs.starting_config(req.config, req.env, req.use_env_config, is_atari)
        name = _name_of(req.config) or _start_name(cfg.env.id, req.use_env_config, is_atari)
    apply_overrides(cfg, req)
    if note:
        note += "; --no-env-config for the package defaults"
    return RunPlan(cfg, note, False, existing_ok, name)


def _name_of(config: str | Path | Config | None) -> str | None:
    return None if config is None or isinstance(config, Config) else Path(config).stem


def _start_name(env_id: str, use_env_config: bool, is_atari: Any) -> str:
    """The name of the config ``--env env_id`` alone starts from (``defaults``: the package's)."""
    shipped = configs.for_env(env_id) if use_env_config else None
    if shipped is None and use_env_config and is_atari(env_id):
        return configs.ATARI
    return shipped or "defaults"


def holds_run(run_dir: str) -> bool:
    """True when ``run_dir`` (a path or a URI) holds a run: its config.yaml."""
    from a3c_ray.rundir.storage import RunStorage

    try:
        return RunStorage(run_dir).has(layout.CONFIG)
    except (OSError, ValueError, ImportError) as e:
        raise ConfigError(
            [f"cannot use run directory {run_dir}: {str(e).splitlines()[0]}"]
        ) from None


def _as_config(config: str | Path | Config) -> Config:
    return config if isinstance(config, Config) else Config.load(resolve_config(config))


def resume_config(req: TrainRequest) -> Config:
    """The saved config of the run to resume with the request applied; env and model may not
    change."""
    from a3c_ray.rundir.storage import RunStorage

    where = str(req.resume)
    storage = RunStorage(where)
    try:
        saved_file = storage.download(layout.CONFIG) if storage.has(layout.CONFIG) else None
    except (OSError, ValueError, ImportError) as e:
        raise ConfigError([f"cannot resume {where}: {str(e).splitlines()[0]}"]) from None
    if saved_file is None:
        raise ConfigError(
            [f"cannot resume {where}: no config.yaml there (not an a3c-ray run directory)"]
        )
    if req.overwrite:
        raise ConfigError(["--resume and --overwrite exclude each other"])
    saved = Config.load_saved(saved_file)
    cfg = Config.load_saved(saved_file)
    if req.config is not None:
        for section, values in _as_config(req.config).to_dict().items():
            for key, value in values.items():
                if value != Config().get(f"{section}.{key}"):
                    cfg.set(f"{section}.{key}", value)
    apply_overrides(cfg, req)
    problems = [
        f"--resume cannot change {section}.{key} ({saved.get(f'{section}.{key}')!r} -> {value!r})"
        for section in FROZEN_ON_RESUME
        for key, value in getattr(cfg, section).__dict__.items()
        if value != saved.get(f"{section}.{key}")
    ]
    if cfg.run.run_dir not in (None, saved.run.run_dir, where):
        problems.append(f"--resume {where} and --run-dir {cfg.run.run_dir} disagree")
    if problems:
        raise ConfigError(problems)
    # The saved config is data: an env it names by import path is imported only when the user
    # names it too (--env, --set, their --config) or trusts the run directory.
    from a3c_ray.envs.make import untrusted_env_problem

    named = copy.deepcopy(_as_config(req.config)) if req.config is not None else Config()
    apply_overrides(named, req)
    untrusted = untrusted_env_problem(cfg.env, f"run directory {where}", named.env)
    if untrusted and not req.trust_env:
        raise ConfigError([untrusted])
    cfg.run.run_dir = where
    return cfg


def apply_overrides(cfg: Config, req: TrainRequest) -> None:
    """``--set`` items, then Python's overrides, then the named flags, onto ``cfg``; every
    problem is reported at once."""
    problems = cfg.apply_sets(req.sets)
    given = {k: v for k, v in req.fields.items() if v is not None}
    for dotted, value in [*req.overrides.items(), *given.items()]:
        try:
            cfg.set(dotted, value)
        except ConfigError as e:
            problems += e.problems
    if req.greedy:
        cfg.monitor.greedy = True
    if not req.progress:
        cfg.run.progress = False
    if problems:
        raise ConfigError(problems)


# -- the command ----------------------------------------------------------------------------------
def add_arguments(t: argparse.ArgumentParser) -> None:
    flags.add_field_flags(t)
    flags.add_config_flags(t)
    t.add_argument(
        "--no-env-config",
        action="store_true",
        help="with --env and no --config: start from the package defaults, not from the shipped "
        "config for that env (" + ", ".join(f"{e}: {n}" for e, n in FOR_ENV.items()) + ")",
    )
    t.add_argument(
        "--greedy", action="store_true", default=None, help="evaluate with the most likely action"
    )
    t.add_argument(
        "--address", help="Ray cluster to attach to (default: RAY_ADDRESS, else an embedded Ray)"
    )
    t.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    t.add_argument(
        "--resume",
        type=str,
        metavar="RUN_DIR",
        help="continue a run from its newest good checkpoint, with its saved config "
        "(flags may extend --max-steps and --time-limit; the env and model cannot change); "
        "'--resume auto' with --run-dir DIR: continue the run in DIR if it holds one, else start "
        "it there (what a resubmitted or retried job needs)",
    )
    t.add_argument(
        "--trust-env",
        action="store_true",
        help="with --resume: import the env and wrappers the run directory's config names by "
        "import path (module:Name) when neither --env nor --config names them: runs their code",
    )
    flags.add_dashboard_flags(t)
    flags.add_track_flag(t)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")


def request_of(args: argparse.Namespace) -> TrainRequest:
    return TrainRequest(
        config=args.config,
        sets=list(args.set),
        fields={dest: getattr(args, dest, None) for dest, _, _ in flags.TRAIN_FLAGS.values()},
        resume=args.resume,
        use_env_config=not args.no_env_config,
        greedy=bool(args.greedy),
        progress=not args.no_progress,
        overwrite=args.overwrite,
        trust_env=args.trust_env,
    )


def config_and_note(args: argparse.Namespace) -> tuple[Config, str | None]:
    """The run's config from the flags, and the line to print once it is valid (``plan``)."""
    p = plan(request_of(args))
    return p.cfg, p.note


def embedded_ray_on_loopback(address: str | None) -> None:
    """Before ray is first imported: an embedded Ray (no address, no ``RAY_ADDRESS``) serves this
    process only, so it takes Ray's single-machine mode (its default on macOS and Windows), which
    keeps every node service on the loopback address."""
    if not (address or os.environ.get("RAY_ADDRESS")):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def checked(p: RunPlan) -> None:
    """Print the plan's note once its config is valid: bad input stays one line, without it."""
    if p.note:
        from a3c_ray.algo import choices
        from a3c_ray.envs.make import env_problems

        p.cfg.check(choices.problems, env_problems)
        print(f"a3c-ray: {p.note}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    embedded_ray_on_loopback(args.address)
    from a3c_ray.runtime.session import train

    p = plan(request_of(args))
    checked(p)
    tracker = None
    if args.track:
        from a3c_ray.runtime.tracking import Tracker, track_spec

        tracker = Tracker(track_spec(args.track, p.config_name))
    result = train(
        p.cfg,
        address=args.address,
        overwrite=args.overwrite,
        resume=p.resume,
        existing_ok=p.existing_ok,
        dashboard_host=args.dashboard_host,
        dashboard_port=args.dashboard_port,
        tracker=tracker,
    )
    s = result.summary
    keys = (
        "stopped_because",
        "env_steps",
        "train_seconds",
        "mean_return_100",
        "best_eval_return",
        "steps_to_target",
        "seconds_to_target",
        "checkpoint",
    )
    print(json.dumps({k: s.get(k) for k in keys}))
    print(f"run directory: {result.run_dir}", file=sys.stderr)
    for err in result.errors:
        print(f"a3c-ray: {err}", file=sys.stderr)
    return result.exit_code
