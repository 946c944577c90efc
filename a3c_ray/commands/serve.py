"""``a3c-ray serve CKPT_OR_RUN``: a trained policy behind HTTP, as a Ray Serve application.

The flags, the token and the checkpoint are checked here first, so that a bad one is exit 2
with one line before Ray starts: among them, a ``--host`` other than loopback with no token
(``A3C_RAY_SERVE_TOKEN`` or ``--token-file``) unless ``--no-auth`` says so. Then the application
runs (``serve.serving``) until Ctrl-C or SIGTERM (exit 0), on an embedded Ray by default or on
the cluster at ``--address``; the application is deleted at exit. A deployment that fails, at
start or later, is exit 1. docs/serving.md has the protocol, the token, sessions, ``--follow``
and the measured figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from a3c_ray.commands import flags
from a3c_ray.errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    CheckpointError,
    ConfigError,
    UsageError,
    one_line,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from a3c_ray.serve.serve_options import HOST, PORT
    from a3c_ray.serve.serve_options import ServeOptions as D

    mb = 1 << 20
    p.add_argument(
        "checkpoint",
        nargs="?",
        help="a ckpt-*.pt file, a latest/best pointer, a checkpoints dir, a run dir (its best "
        "checkpoint), or a URI of one",
    )
    p.add_argument(
        "--follow",
        metavar="RUN",
        help="serve the run's best checkpoint and swap in each newer one while it trains: its "
        "run directory (or URI)",
    )
    p.add_argument(
        "--follow-every",
        type=float,
        default=D.follow_every,
        help="seconds between looks at the run",
    )
    p.add_argument("--replicas", type=int, default=D.replicas, help="replicas of the policy")
    p.add_argument(
        "--replica-cpus", type=float, default=D.replica_cpus, help="CPUs Ray reserves per replica"
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=D.max_batch_size,
        help="requests in one forward pass at most; 1 turns batching off",
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=D.batch_wait_ms,
        help="how long a batch's first request waits for others, in milliseconds",
    )
    p.add_argument(
        "--max-body-mb",
        type=float,
        default=D.max_body_bytes / mb,
        help="larger request bodies get 413",
    )
    p.add_argument(
        "--max-observations",
        type=int,
        default=D.max_observations,
        help="observations in one request at most",
    )
    p.add_argument(
        "--ingress",
        choices=("proxy", "haproxy"),
        default="proxy",
        help="proxy: Serve's HTTP proxy (the default); haproxy: Ray's high-throughput mode "
        "(HAProxy, replicas answering HTTP directly), an embedded Ray only (docs/serving.md)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=D.max_sessions,
        help="sessions of an LSTM policy kept at once; past it POST /sessions gets 503",
    )
    p.add_argument(
        "--max-session-mb",
        type=float,
        default=D.max_session_bytes / mb,
        help="recurrent state all sessions hold together; past it POST /sessions gets 503",
    )
    p.add_argument(
        "--session-idle-seconds",
        type=float,
        default=D.session_idle_seconds,
        help="a session unused this long is dropped",
    )
    p.add_argument(
        "--host",
        default=HOST,
        help="address the HTTP proxy listens on; other than loopback, it needs a token or "
        "--no-auth",
    )
    p.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file holding the bearer token every route but /healthz then needs (default: "
        "the A3C_RAY_SERVE_TOKEN environment variable, else no token)",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without a token on a --host other than loopback: anyone who reaches the "
        "port may call the policy",
    )
    p.add_argument("--port", type=int, default=PORT, help="port of the HTTP proxy")
    p.add_argument(
        "--address", help="Ray cluster to deploy on (default: RAY_ADDRESS, else an embedded Ray)"
    )
    flags.add_dashboard_flags(p)


def options_from_args(args: argparse.Namespace) -> dict[str, object]:
    if (args.checkpoint is None) == (args.follow is None):
        raise UsageError("a3c-ray serve: give a checkpoint or --follow RUN (one of the two)")
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
        "max_sessions": args.max_sessions,
        "max_session_bytes": int(args.max_session_mb * (1 << 20)),
        "session_idle_seconds": args.session_idle_seconds,
        "token_file": args.token_file,
        "no_auth": args.no_auth,
    }


def run(args: argparse.Namespace) -> int:
    embedded = not (args.address or os.environ.get("RAY_ADDRESS"))
    if embedded:
        # As for train: the embedded Ray keeps every service on loopback (read at ray's import).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        from a3c_ray.serve.serve_ingress import set_ingress

        set_ingress(args.ingress)  # before ray is imported: Serve reads it at import
    elif args.ingress != "proxy":
        raise UsageError(
            "a3c-ray serve: --ingress haproxy sets up an embedded Ray; on a cluster, start every "
            "node with RAY_SERVE_ENABLE_HA_PROXY=1 RAY_SERVE_THROUGHPUT_OPTIMIZED=1"
        )
    from a3c_ray.serve.serve_ingress import INGRESS_ENV
    from a3c_ray.serve.serve_options import (
        ServeOptions,
        exposure_problem,
        first_policy,
        read_token,
    )

    options = ServeOptions.from_dict(options_from_args(args))
    token = read_token(options)
    direct = bool(INGRESS_ENV[args.ingress]) and embedded
    problem = exposure_problem(args.host, token, options.no_auth, direct)
    if problem is not None:
        raise UsageError(f"a3c-ray serve: {problem}")
    policy = first_policy(options)  # exit 2 on a bad checkpoint, before Ray is imported
    from a3c_ray.runtime.session import stop_signals_as_interrupt
    from a3c_ray.serve import serve_run

    with stop_signals_as_interrupt():
        try:
            started = serve_run.start(
                options,
                args.address,
                args.host,
                args.port,
                dashboard_host=args.dashboard_host,
                dashboard_port=args.dashboard_port,
            )
        except KeyboardInterrupt:  # before the application was up: start() cleaned up
            return EXIT_INTERRUPTED
        except (UsageError, ConfigError, CheckpointError):  # found where the app is built
            raise
        except Exception as e:  # the deployment failed: its replicas did not start
            print(f"a3c-ray: the application did not deploy: {one_line(e)}", file=sys.stderr)
            return EXIT_FAILURE
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
                        "auth": "bearer" if token is not None else "none",
                        **{k: v for k, v in dataclasses.asdict(options).items() if k != "source"},
                    }
                ),
                flush=True,
            )
            print(f"a3c-ray: serving at {url}/act; Ctrl-C stops", file=sys.stderr, flush=True)
            # Ctrl-C is how serving ends (exit 0); a failed or deleted application is exit 1.
            interrupted = serve_run.wait_until_interrupted()
        finally:
            serve_run.stop(started)
    return 0 if interrupted else EXIT_FAILURE
