"""``a3c-ray export CKPT FILE --format onnx|torchscript``: a policy as one file that runs
without a3c-ray and without Ray (``rundir.export`` says what its inputs and outputs are)."""

from __future__ import annotations

import argparse
import importlib.util
import json

from a3c_ray.errors import ConfigError, UsageError, install_hint

NEEDS = {"onnx": ("onnx", "onnxscript"), "torchscript": ()}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        help="a ckpt-*.pt file, a latest/best pointer, a checkpoints dir, a run dir, or a URI",
    )
    p.add_argument(
        "--format",
        choices=tuple(NEEDS),
        default="onnx",
        help="onnx (for onnxruntime and other ONNX runtimes; the default) or torchscript",
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="the file to write")
    # FILE was once given as --out FILE; that still works, unlisted (--out is a directory on the
    # other commands).
    p.add_argument("--out", dest="out_file", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.out_file is None):
        raise UsageError("a3c-ray export: give the file to write once: a3c-ray export CKPT FILE")
    out = args.file if args.file is not None else args.out_file
    missing = [m for m in NEEDS[args.format] if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            [f"--format {args.format} needs {', '.join(missing)}: {install_hint('export')}"]
        )
    from a3c_ray.rundir.export import export_policy, io_names
    from a3c_ray.rundir.policy import load_policy

    policy = load_policy(args.checkpoint)  # a bad checkpoint is exit 2 before anything is written
    path = export_policy(policy, args.format, out)
    inputs, outputs = io_names(policy)
    report = {
        "file": str(path),
        "format": args.format,
        "env_id": policy.env_id,
        "checkpoint": policy.checkpoint,
        "env_steps": policy.env_steps,
        "inputs": inputs,
        "outputs": outputs,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"{path}: {args.format}, {policy.env_id} at {policy.env_steps:,} env steps; "
            f"inputs {', '.join(inputs)}; outputs {', '.join(outputs)}"
        )
    return 0
