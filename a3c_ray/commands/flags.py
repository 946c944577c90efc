"""What several commands take, defined once: the flags that set config fields (``train``, ``bench``),
``--set``, a live run (``status``, ``scale``), the embedded Ray's dashboard flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from a3c_ray.config import Config
from a3c_ray.configs import names as shipped_configs

TRAIN_FLAGS: dict[str, tuple[str, type, str]] = {
    "--env": ("env.id", str, "gymnasium environment id"),
    "--workers": ("run.workers", int, "number of Worker actors (default: one per CPU)"),
    "--envs-per-worker": ("env.num_envs", int, "environments per Worker (K)"),
    "--t-max": ("algo.t_max", int, "rollout length n per gradient push"),
    "--max-steps": ("run.max_steps", int, "stop after this many env steps in total"),
    "--target-return": (
        "run.target_return",
        float,
        "stop when the mean of the last 100 episode returns reaches this",
    ),
    "--time-limit": ("run.time_limit", float, "stop after this many seconds of training"),
    "--seed": ("run.seed", int, "root random seed"),
    "--run-dir": (
        "run.run_dir",
        str,
        "directory for config, checkpoints, TensorBoard and summary.json",
    ),
    "--lr": ("algo.lr", float, "learning rate"),
    "--eval-every": ("monitor.eval_every", float, "seconds between evaluations and checkpoints"),
}
"""Command-line flag -> (config field, type, help). Every other field is reachable with --set
or --config. A flag's value lands in ``args`` under its field's name (``getattr(args, "env.id")``)."""


def shown(value: Any) -> str:
    """A default as a user types it: lists as ``1,2,4``."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


class HelpFormatter(argparse.HelpFormatter):
    """Each flag's help ends with its default, where it has one (not None, not an off switch)
    and the help does not already say it (``(default ...``, ``(the default)`` or ``(VALUE)``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_ = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default is None
            or default is False
            or default == []
            or default == argparse.SUPPRESS
            or any(said in help_ for said in ("(default", "the default)", f"({shown(default)})"))
        ):
            return action.help
        return help_ + " (default " + shown(default).replace("%", "%%") + ")"


def add_measures(
    sub: Any, measures: Mapping[str, tuple[Callable[[argparse.ArgumentParser], None], str]]
) -> None:
    """One subcommand per measurement of ``measures`` (name: its flags' adder, its help), under
    the subparsers ``sub``; the help's first clause is the listing's line."""
    for name, (add, help_) in measures.items():
        m = sub.add_parser(
            name,
            help=help_.split(":")[0],
            description=help_[0].upper() + help_[1:] + ".",
            formatter_class=HelpFormatter,
        )
        add(m)


def field_help(dest: str, help_: str) -> str:
    """``help_`` ending with the default of config field ``dest``, where it has one."""
    value = Config().get(dest)
    if value is None or "(default" in help_:
        return help_
    return f"{help_} (default {shown(value)})".replace("%", "%%")


def add_field_flags(p: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """The flags of ``TRAIN_FLAGS`` named in ``names`` (all of them by default), each help with
    its field's default."""
    for flag in TRAIN_FLAGS if names is None else names:
        dest, typ, help_ = TRAIN_FLAGS[flag]
        # Shown as the flag's own name (MAX_STEPS), not the field it lands in (RUN.MAX_STEPS).
        metavar = flag.removeprefix("--").upper().replace("-", "_")
        p.add_argument(
            flag, dest=dest, type=typ, default=None, metavar=metavar, help=field_help(dest, help_)
        )


def add_set_flag(p: argparse.ArgumentParser, where: str = "") -> None:
    """``--set FIELD=VALUE`` (repeatable); ``where`` says what it sets, e.g. " for every trial"."""
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help=f"set any config field{where}, e.g. --set algo.gamma=0.98 (repeatable)",
    )


def add_config_flags(p: argparse.ArgumentParser) -> None:
    """``--config`` (a YAML file or a shipped config's name) and ``--set FIELD=VALUE``."""
    p.add_argument(
        "--config",
        help="YAML file of config sections (env, model, algo, run, monitor, ps, tune), or the "
        "name of a shipped one: " + ", ".join(shipped_configs()),
    )
    add_set_flag(p)


def add_track_flag(p: argparse.ArgumentParser) -> None:
    """``--track mlflow|wandb``: send the run (or each trial) to MLflow or Weights & Biases."""
    from a3c_ray.runtime.tracking import TRACKERS

    p.add_argument(
        "--track",
        choices=TRACKERS,
        help="also log the run to MLflow (at MLFLOW_TRACKING_URI) or Weights & Biases "
        "(WANDB_PROJECT, WANDB_MODE=offline works without network): config as params, every "
        "TensorBoard scalar as a metric, config, summary and best checkpoint as artifacts",
    )


RUN_HELP = (
    "its run directory (e.g. runs/cp) or that directory's name, its id, or the start of its id "
    "(see a3c-ray status)"
)
"""How a live run is named on every command that takes one (``status``, ``scale``)."""


def add_run_argument(p: argparse.ArgumentParser, what: str, optional: bool = False) -> None:
    """The live run ``RUN`` a command acts on (positional); ``optional``: all runs without it."""
    p.add_argument(
        "run", metavar="RUN", nargs="?" if optional else None, help=f"{what}: {RUN_HELP}"
    )


def add_dashboard_flags(p: argparse.ArgumentParser) -> None:
    """``--dashboard-host`` and ``--dashboard-port`` of the embedded Ray a command starts (both
    unused where the command attaches to a cluster)."""
    p.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="address the embedded Ray's dashboard listens on (default 127.0.0.1: this machine "
        "only)",
    )
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=None,
        help="port of the embedded Ray's dashboard (default 8265, or a free port when another "
        "Ray on this machine holds 8265)",
    )


def apply_field_flags(cfg: Config, args: argparse.Namespace) -> list[str]:
    """``--set`` items, then the field flags given, onto ``cfg``; returns every problem."""
    problems = cfg.apply_sets(args.set)
    for dest, _, _ in TRAIN_FLAGS.values():
        value = getattr(args, dest, None)
        if value is not None:
            cfg.set(dest, value)
    return problems
