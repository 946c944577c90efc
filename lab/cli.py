"""``python -m lab MEASURE``: the project's own measurements, run from a source checkout.

- ``chaos``: the chaos soak, a run on a cluster of ``cluster/local.sh`` that loses Workers, the
  ParameterServer, the Monitor and a worker node on a schedule (``lab.chaos``);
- ``ps``: the ParameterServer alone under synthetic clients, for each number of shards, wire
  dtype, transport and load (``lab.ps``);
- ``stability``: the seeds table of runs that have already finished (``lab.stability``).

Each takes the flags it took as an ``a3c-ray bench`` measurement; exit codes are a3c-ray's (0
done, 1 a failed measurement, 2 bad input with one line and no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from a3c_ray.errors import EXIT_BAD_INPUT, CheckpointError, ConfigError, UsageError

PROG = "python -m lab"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A usage error: ``main`` prints it as one line, naming the measurement when known."""
        measure = self.prog.removeprefix(PROG).strip()
        if not measure:
            self.print_usage(sys.stderr)
        raise UsageError(f"{measure}: {message}" if measure else message)


def add_chaos(p: argparse.ArgumentParser) -> None:
    from a3c_ray.commands import bench, bench_stability
    from lab.chaos import command

    bench.add_config(p)
    command.add_arguments(p)
    bench_stability.add_judge_arguments(p)
    bench.add_json(p)


def add_ps(p: argparse.ArgumentParser) -> None:
    from a3c_ray.commands import bench
    from lab import ps

    bench.add_config(p)
    ps.add_arguments(p)
    bench.add_seconds(p)
    bench.add_ps_seconds(p)
    bench.add_repeat(p)
    bench.add_ray(p)
    bench.add_json(p)


def add_stability(p: argparse.ArgumentParser) -> None:
    from a3c_ray.commands import bench
    from lab import stability

    stability.add_arguments(p)
    bench.add_json(p)


MEASURES: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str]] = {
    "chaos": (
        add_chaos,
        "train on a local cluster of cluster/local.sh while Workers, the ParameterServer and the "
        "Monitor are killed and a worker node is lost, on a schedule: recoveries, checkpoints, "
        "learning, memory",
    ),
    "ps": (
        add_ps,
        "the ParameterServer alone: synthetic clients push prepared gradients for each number of "
        "shards, wire dtype, transport and load",
    ),
    "stability": (
        add_stability,
        "the seeds table of runs that have already finished (e.g. Ray jobs)",
    ),
}
"""Measurement -> (its flags, its help)."""


def build_parser() -> argparse.ArgumentParser:
    from a3c_ray.commands import flags

    p = Parser(prog=PROG, description="The project's own measurements, from a source checkout.")
    sub = p.add_subparsers(dest="measure", required=True, metavar="MEASURE", parser_class=Parser)
    flags.add_measures(sub, MEASURES)
    return p


def run(args: argparse.Namespace) -> int:
    """The measurement ``args`` names, its report printed; its exit code."""
    from a3c_ray.commands.bench import config_of
    from lab import ps, stability
    from lab.chaos import command

    if args.measure == "stability":
        return stability.run(args)
    if args.measure == "ps":
        return ps.run_ps_scale(config_of(args), args)
    return command.run(config_of(args), args)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if next((w for w in words if not w.startswith("-")), None) == "chaos":
        # Before Ray is first imported: Ray then keeps the cluster's loopback addresses as they
        # are, and its clients send the token that the soak's `local.sh up` makes.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        return run(build_parser().parse_args(words))
    except (UsageError, ConfigError, CheckpointError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
