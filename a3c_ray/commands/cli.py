"""The ``a3c-ray`` command: ``train`` and ``eval`` here, the others in their own modules.

Exit codes: 0 done, 1 internal failure, 2 bad input (one line on stderr, no traceback),
130 interrupted after a final checkpoint.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from a3c_ray import configs
from a3c_ray.commands import flags
from a3c_ray.config import Config
from a3c_ray.configs import FOR_ENV
from a3c_ray.configs import resolve as resolve_config
from a3c_ray.errors import EXIT_BAD_INPUT, CheckpointError, ConfigError, UsageError
from a3c_ray.rundir import layout
from a3c_ray.version import package_version


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


# Commands that live in their own module, each with add_arguments(parser) and run(args) -> int.
MODULE_COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("a3c_ray.commands.status", "show the live runs on a Ray cluster"),
    "scale": ("a3c_ray.commands.scale", "change the number of Workers of a live run"),
    "submit": ("a3c_ray.commands.submit", "run a3c-ray train as a Ray job on a cluster"),
    "bench": ("a3c_ray.commands.bench", "measure throughput against this machine's own limit"),
    "tune": ("a3c_ray.commands.tune", "search hyperparameters with Ray Tune, each trial a run"),
    "serve": ("a3c_ray.commands.serve", "serve a trained policy over HTTP with Ray Serve"),
    "export": (
        "a3c_ray.commands.export",
        "write a policy as ONNX or TorchScript, to run without a3c-ray",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, other module commands' arguments are left out (not imported)."""
    p = Parser(prog="a3c-ray", description="Distributed A3C on Ray.")
    p.add_argument("--version", action="version", version=f"a3c-ray {package_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    t = sub.add_parser(
        "train", help="train an agent", description="Train an agent with A3C on Ray."
    )
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
    t.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="address the embedded Ray dashboard listens on (default 127.0.0.1: this machine only)",
    )
    flags.add_dashboard_port_flag(t)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    e = sub.add_parser("eval", help="evaluate a checkpoint", description="Evaluate a checkpoint.")
    e.add_argument(
        "checkpoint", help="a ckpt-*.pt file, a latest/best pointer, a checkpoints dir or a run dir"
    )
    e.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    e.add_argument("--seed", type=int, default=0, help="seed of the env and the action sampling")
    e.add_argument(
        "--greedy", action="store_true", help="take the most likely action instead of sampling"
    )
    e.add_argument(
        "--video",
        type=Path,
        metavar="DIR",
        help="write mp4 videos of the episodes into DIR (needs moviepy)",
    )
    e.add_argument(
        "--trust-env",
        action="store_true",
        help="import the env and wrappers the checkpoint names by import path (module:Name): "
        "runs their code, so only for checkpoints you trust (registered ids need no flag)",
    )
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    for name, (module, help_) in MODULE_COMMANDS.items():
        cmd = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        if command in (None, name):  # import only the command in use: `train` must import ray last
            importlib.import_module(module).add_arguments(cmd)
    return p


# Sections a resumed run must keep: its checkpoints only fit this env and this network.
FROZEN_ON_RESUME = ("env", "model")


def config_from_args(args: argparse.Namespace) -> Config:
    return config_and_note(args)[0]


def config_and_note(args: argparse.Namespace) -> tuple[Config, str | None]:
    """The run's config from the flags, and a line to print once it is valid when ``--env``
    took its shipped config (``configs.starting_config``)."""
    if args.resume == RESUME_AUTO:
        where = getattr(args, "run.run_dir")
        if not where:
            raise ConfigError(["--resume auto needs --run-dir DIR: the run to continue or start"])
        args.resume = where if holds_run(where) else None
        args.auto = True
    if args.resume is not None:
        return resume_config(args), None
    from a3c_ray.envs.make import is_atari

    cfg, note = configs.starting_config(
        args.config, getattr(args, "env.id"), not args.no_env_config, is_atari
    )
    apply_overrides(cfg, args)
    if note:
        note += "; --no-env-config for the package defaults"
    return cfg, note


RESUME_AUTO = "auto"


def holds_run(run_dir: str) -> bool:
    """True when ``run_dir`` (a path or a URI) holds a run: its config.yaml."""
    from a3c_ray.rundir.storage import RunStorage

    try:
        return RunStorage(run_dir).has(layout.CONFIG)
    except (OSError, ValueError, ImportError) as e:
        raise ConfigError(
            [f"cannot use run directory {run_dir}: {str(e).splitlines()[0]}"]
        ) from None


def resume_config(args: argparse.Namespace) -> Config:
    """The saved config of ``--resume RUN_DIR`` with the flags applied; env and model may not change."""
    from a3c_ray.rundir.storage import RunStorage

    storage = RunStorage(args.resume)
    try:
        saved_file = storage.download(layout.CONFIG) if storage.has(layout.CONFIG) else None
    except (OSError, ValueError, ImportError) as e:
        raise ConfigError([f"cannot resume {args.resume}: {str(e).splitlines()[0]}"]) from None
    if saved_file is None:
        raise ConfigError(
            [f"cannot resume {args.resume}: no config.yaml there (not an a3c-ray run directory)"]
        )
    if args.overwrite:
        raise ConfigError(["--resume and --overwrite exclude each other"])
    saved = Config.load_saved(saved_file)
    cfg = Config.load_saved(saved_file)
    if args.config:
        for section, values in Config.load(resolve_config(args.config)).to_dict().items():
            for key, value in values.items():
                if value != Config().get(f"{section}.{key}"):
                    cfg.set(f"{section}.{key}", value)
    apply_overrides(cfg, args)
    problems = [
        f"--resume cannot change {section}.{key} ({saved.get(f'{section}.{key}')!r} -> {value!r})"
        for section in FROZEN_ON_RESUME
        for key, value in getattr(cfg, section).__dict__.items()
        if value != saved.get(f"{section}.{key}")
    ]
    if cfg.run.run_dir not in (None, saved.run.run_dir, str(args.resume)):
        problems.append(f"--resume {args.resume} and --run-dir {cfg.run.run_dir} disagree")
    if problems:
        raise ConfigError(problems)
    # The saved config is data: an env it names by import path is imported only when the user
    # names it too (--env, --set, their --config) or trusts the run directory.
    from a3c_ray.envs.make import untrusted_env_problem

    named = Config.load(resolve_config(args.config)) if args.config else Config()
    apply_overrides(named, args)
    untrusted = untrusted_env_problem(cfg.env, f"run directory {args.resume}", named.env)
    if untrusted and not args.trust_env:
        raise ConfigError([untrusted])
    cfg.run.run_dir = str(args.resume)
    return cfg


def apply_overrides(cfg: Config, args: argparse.Namespace) -> None:
    """--set items, then the named flags, onto ``cfg``; every problem is reported at once."""
    problems = flags.apply_field_flags(cfg, args)
    if args.greedy:
        cfg.monitor.greedy = True
    if args.no_progress:
        cfg.run.progress = False
    if problems:
        raise ConfigError(problems)


def cmd_train(args: argparse.Namespace) -> int:
    if not (args.address or os.environ.get("RAY_ADDRESS")):
        # An embedded Ray serves this process only. Ray's single-machine mode (its default on macOS
        # and Windows) keeps every node service on the loopback address; it is read when ray is
        # first imported, hence here, before the driver imports it.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from a3c_ray.runtime.session import train

    cfg, note = config_and_note(args)
    if note:
        from a3c_ray.algo import choices
        from a3c_ray.envs.make import env_problems

        cfg.check(choices.problems, env_problems)  # bad input stays one line, without the note
        print(f"a3c-ray: {note}", file=sys.stderr)
    result = train(
        cfg,
        address=args.address,
        overwrite=args.overwrite,
        resume=args.resume is not None,
        existing_ok=getattr(args, "auto", False),
        dashboard_host=args.dashboard_host,
        dashboard_port=args.dashboard_port,
    )
    s = result.summary
    print(
        json.dumps(
            {
                k: s.get(k)
                for k in (
                    "stopped_because",
                    "env_steps",
                    "train_seconds",
                    "mean_return_100",
                    "best_eval_return",
                    "steps_to_target",
                    "seconds_to_target",
                    "checkpoint",
                )
            }
        )
    )
    print(f"run directory: {result.run_dir}", file=sys.stderr)
    for err in result.errors:
        print(f"a3c-ray: {err}", file=sys.stderr)
    return result.exit_code


def cmd_eval(args: argparse.Namespace) -> int:
    from a3c_ray.commands.evaluate import evaluate_checkpoint

    if args.episodes < 1:
        raise UsageError("a3c-ray eval: --episodes must be >= 1")
    res = evaluate_checkpoint(
        args.checkpoint, args.episodes, args.seed, args.greedy, args.video, args.trust_env
    )
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"{res['env_id']}: mean return {res['mean_return']:.2f} ± {res['std_return']:.2f} "
            f"over {res['episodes']} episodes (mean length {res['mean_length']:.1f}) [{res['checkpoint']}]"
        )
    return 0


def flag_value(words: list[str], flag: str) -> str | None:
    """The value of ``flag`` in an argument list, in either ``--flag V`` or ``--flag=V`` form."""
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(flag + "="):
            return w.split("=", 1)[1]
    return None


def on_this_machine(address: str | None) -> bool:
    """True when the cluster to look at is found on this machine or given by a loopback address."""
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    host = address.split("://")[-1].rpartition(":")[0].strip("[]") if ":" in address else address
    return address == "auto" or host in ("localhost", "::1") or host.startswith("127.")


def main(argv: Sequence[str] | None = None) -> int:
    commands: dict[str, Any] = {"train": cmd_train, "eval": cmd_eval}
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        command = next((w for w in words if not w.startswith("-")), None)
        local = command in ("status", "scale") and on_this_machine(flag_value(words, "--address"))
        if local or (command == "bench" and "--chaos" in words):  # --chaos: its own local cluster
            # Before Ray is first imported (with the command's module): Ray then keeps loopback
            # addresses as they are instead of rewriting them to this machine's interface
            # address, where an embedded Ray does not listen.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            # Ray's local clusters require the token that `ray start` and `ray.init` made; its
            # clients send it only in token mode. The chaos soak's own `local.sh up` makes the
            # token when there is none yet, after this point.
            if command == "bench" or (Path.home() / ".ray" / "auth_token").is_file():
                os.environ.setdefault("RAY_AUTH_MODE", "token")
        args = build_parser(command).parse_args(words)
        if args.command in MODULE_COMMANDS:
            return int(importlib.import_module(MODULE_COMMANDS[args.command][0]).run(args))
        return int(commands[args.command](args))
    except (UsageError, ConfigError, CheckpointError) as e:
        print(f"a3c-ray: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
