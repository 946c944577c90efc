"""The ``a3c-ray`` command: ``eval`` here, the others in their own modules (``train``).

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

from a3c_ray.commands import flags
from a3c_ray.config import Config
from a3c_ray.errors import EXIT_BAD_INPUT, CheckpointError, ConfigError, UsageError
from a3c_ray.version import package_version


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A usage error: the top level's prints its usage line first; ``main`` prints the one
        ``a3c-ray: error:`` line, naming the command when a command's parser found it."""
        command = self.prog.removeprefix("a3c-ray").strip()
        if not command:
            self.print_usage(sys.stderr)
        raise UsageError(f"{command}: {message}" if command else message)


# Commands that live in their own module, each with add_arguments(parser) and run(args) -> int.
MODULE_COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("a3c_ray.commands.train", "train an agent with A3C on Ray"),
    "status": ("a3c_ray.commands.status", "show the live runs on a Ray cluster"),
    "scale": ("a3c_ray.commands.scale", "change the number of Workers of a live run"),
    "submit": ("a3c_ray.commands.submit", "run a3c-ray train as a Ray job on a cluster"),
    "bench": (
        "a3c_ray.commands.bench",
        "measure this machine: throughput, profile, atari, serve or seeds",
    ),
    "plot": ("a3c_ray.commands.plot", "draw the learning curves of training runs as PNG files"),
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

    def add(name: str) -> None:
        module, help_ = MODULE_COMMANDS[name]
        cmd = sub.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ".",
            formatter_class=flags.HelpFormatter,
        )
        if command in (None, name):  # import only the command in use: `train` must import ray last
            importlib.import_module(module).add_arguments(cmd)

    add("train")
    e = sub.add_parser(
        "eval",
        help="evaluate a checkpoint",
        description="Evaluate a checkpoint.",
        formatter_class=flags.HelpFormatter,
    )
    e.add_argument(
        "checkpoint",
        help="a ckpt-*.pt file, a latest/best pointer, a checkpoints dir or a run dir; "
        "with --random, an env id",
    )
    e.add_argument("--episodes", type=int, default=10, help="episodes to play")
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
    e.add_argument(
        "--random",
        action="store_true",
        help="play uniformly random actions on the env id given in place of a checkpoint, "
        "evaluated as a run from --env ID would be: the random agent's score",
    )
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    for name in MODULE_COMMANDS:
        if name != "train":
            add(name)
    return p


def config_and_note(args: argparse.Namespace) -> tuple[Config, str | None]:
    """``train``'s config from its flags, and the line it prints (``commands.train``)."""
    from a3c_ray.commands.train import config_and_note as of_train

    return of_train(args)


def cmd_eval(args: argparse.Namespace) -> int:
    from a3c_ray.commands.evaluate import evaluate_checkpoint

    if args.episodes < 1:
        raise UsageError("a3c-ray eval: --episodes must be >= 1")
    if args.random:
        from a3c_ray.commands.evaluate import evaluate_random

        if args.greedy or args.trust_env:
            raise UsageError("a3c-ray eval: --random takes neither --greedy nor --trust-env")
        res = evaluate_random(args.checkpoint, args.episodes, args.seed, args.video)
    else:
        res = evaluate_checkpoint(
            args.checkpoint, args.episodes, args.seed, args.greedy, args.video, args.trust_env
        )
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"{res['env_id']}: mean return {res['mean_return']:.2f} ± {res['std_return']:.2f} "
            f"over {res['episodes']} episodes (mean length {res['mean_length']:.1f}) "
            f"[{res['checkpoint'] or 'random actions'}]"
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
    commands: dict[str, Any] = {"eval": cmd_eval}
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        command = next((w for w in words if not w.startswith("-")), None)
        local = command in ("status", "scale") and on_this_machine(flag_value(words, "--address"))
        if local:
            # Before Ray is first imported (with the command's module): Ray then keeps loopback
            # addresses as they are instead of rewriting them to this machine's interface
            # address, where an embedded Ray does not listen.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            # Ray's local clusters require the token that `ray start` and `ray.init` made; its
            # clients send it only in token mode.
            if (Path.home() / ".ray" / "auth_token").is_file():
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
