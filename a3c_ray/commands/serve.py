"""``a3c-ray serve CKPT_OR_RUN``: a trained policy behind HTTP, as a Ray Serve application.

The checkpoint is loaded here first, so that a missing or corrupt one is exit 2 with one line
before Ray starts. Then the application runs (``runtime.serving``) until Ctrl-C or SIGTERM, on an
embedded Ray by default or on the cluster at ``--address``; the application is deleted at exit.
docs/serving.md has the protocol, sessions, ``--follow`` and the measured figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from a3c_ray.errors import EXIT_INTERRUPTED, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        nargs="?",
        help="a ckpt-*.pt file, a latest/best pointer, a checkpoints dir, a run dir (its best "
        "checkpoint), or a URI of one",
    )
    p.add_argument(
        "--follow",
        metavar="RUN_DIR",
        help="serve the run's best checkpoint and swap in each newer one while it trains",
    )
    p.add_argument(
        "--follow-every", type=float, default=5.0, help="seconds between looks at the run (5)"
    )
    p.add_argument("--replicas", type=int, default=1, help="replicas of the policy (default 1)")
    p.add_argument(
        "--replica-cpus", type=float, default=1.0, help="CPUs Ray reserves per replica (default 1)"
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=32,
        help="requests in one forward pass at most (default 32; 1 turns batching off)",
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=2.0,
        help="how long a batch's first request waits for others (default 2 ms)",
    )
    p.add_argument(
        "--max-body-mb", type=float, default=8.0, help="larger request bodies get 413 (default 8)"
    )
    p.add_argument(
        "--max-observations",
        type=int,
        default=1024,
        help="observations in one request at most (default 1024)",
    )
    p.add_argument(
        "--ingress",
        choices=("proxy", "haproxy"),
        default="proxy",
        help="proxy: Serve's HTTP proxy (the default); haproxy: Ray's high-throughput mode "
        "(HAProxy, replicas answering HTTP directly), an embedded Ray only (docs/serving.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address the HTTP proxy listens on")
    p.add_argument("--port", type=int, default=8000, help="port of the HTTP proxy (default 8000)")
    p.add_argument(
        "--address", help="Ray cluster to deploy on (default: RAY_ADDRESS, else an embedded Ray)"
    )
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=None,
        help="port of the embedded Ray's dashboard (default 8265, or a free one)",
    )


def options_from_args(args: argparse.Namespace) -> dict[str, object]:
    if (args.checkpoint is None) == (args.follow is None):
        raise UsageError("a3c-ray serve: give a checkpoint or --follow RUN_DIR (one of the two)")
    if not 0 < args.port < 65536:
        raise UsageError(f"a3c-ray serve: --port must be 1-65535, got {args.port}")
    return {
        "source": args.follow or args.checkpoint,
        "follow": args.follow is not None,
        "follow_every": args.follow_every,
        "replicas": args.replicas,
        "replica_cpus": args.replica_cpus,
        "max_batch_size": args.max_batch_size,
        "batch_wait_ms": args.batch_wait_ms,
        "max_body_bytes": int(args.max_body_mb * (1 << 20)),
        "max_observations": args.max_observations,
    }


def run(args: argparse.Namespace) -> int:
    embedded = not (args.address or os.environ.get("RAY_ADDRESS"))
    if embedded:
        # As for train: the embedded Ray keeps every service on loopback (read at ray's import).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        from a3c_ray.runtime.serve_ingress import set_ingress

        set_ingress(args.ingress)  # before ray is imported: Serve reads it at import
    elif args.ingress != "proxy":
        raise UsageError(
            "a3c-ray serve: --ingress haproxy sets up an embedded Ray; on a cluster, start every "
            "node with RAY_SERVE_ENABLE_HA_PROXY=1 RAY_SERVE_THROUGHPUT_OPTIMIZED=1"
        )
    from a3c_ray.runtime.serve_options import ServeOptions, first_policy

    options = ServeOptions.from_dict(options_from_args(args))
    policy = first_policy(options)  # exit 2 on a bad checkpoint, before Ray is imported
    from a3c_ray.runtime import serve_run
    from a3c_ray.runtime.session import stop_signals_as_interrupt

    with stop_signals_as_interrupt():
        try:
            started = serve_run.start(
                options, args.address, args.host, args.port, dashboard_port=args.dashboard_port
            )
        except KeyboardInterrupt:  # before the application was up: start() cleaned up
            return EXIT_INTERRUPTED
        try:
            url = f"http://{args.host}:{args.port}"
            print(
                json.dumps(
                    {
                        "url": url,
                        "env_id": policy.env_id,
                        "checkpoint": policy.checkpoint,
                        "env_steps": policy.env_steps,
                        "recurrent": policy.is_recurrent,
                        **{k: v for k, v in dataclasses.asdict(options).items() if k != "source"},
                    }
                ),
                flush=True,
            )
            print(f"a3c-ray: serving at {url}/act; Ctrl-C stops", file=sys.stderr, flush=True)
            serve_run.wait_until_interrupted()  # Ctrl-C is how serving ends: exit 0
        finally:
            serve_run.stop(started)
    return 0
