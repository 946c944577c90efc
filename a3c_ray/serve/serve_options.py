"""What ``a3c-ray serve`` is asked to serve, without Ray: the options (flags, or a Serve config
file's ``args``), the bearer token that locks it, and the policy to start with. The command checks
all three before Ray is imported, so a bad flag, token or checkpoint is exit 2 at once; the
application (``serving.build_app``) checks them again where it is built, which for ``serve deploy``
is on the cluster."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a3c_ray.errors import ConfigError

if TYPE_CHECKING:  # the command reads the options' defaults before torch is imported
    from a3c_ray.algo.policy import Policy

TOKEN_ENV = "A3C_RAY_SERVE_TOKEN"
"""The environment variable that holds the bearer token (``token_file`` names a file instead)."""
HOST = "127.0.0.1"
"""Where ``a3c-ray serve`` listens by default: this machine only."""
PORT = 8000
"""Serve's HTTP port by default."""


@dataclass(frozen=True)
class ServeOptions:
    """What ``a3c-ray serve`` and a Serve config file's ``args`` set; one docstring per field."""

    source: str
    """A checkpoint, pointer, checkpoints dir, run dir or URI; with ``follow``, the run dir."""
    follow: bool = False
    """Swap in each newer ``best`` checkpoint of the run ``source`` while serving."""
    follow_every: float = 5.0
    """Seconds between two looks at the run's ``best`` pointer."""
    replicas: int = 1
    """Replicas of the Policy deployment."""
    replica_cpus: float = 1.0
    """CPUs Ray reserves for each replica."""
    max_batch_size: int = 32
    """Requests in one forward pass at most; 1 turns batching off."""
    batch_wait_ms: float = 2.0
    """How long the first request of a batch waits for others."""
    max_body_bytes: int = 8 << 20
    """Larger request bodies are refused (413)."""
    max_observations: int = 1024
    """Observations in one request at most (also the envs of one session)."""
    max_sessions: int = 10_000
    """Sessions kept at once; past it ``POST /sessions`` answers 503 (no live session is evicted)."""
    session_idle_seconds: float = 3600.0
    """A session unused this long is dropped."""
    max_session_bytes: int = 256 << 20
    """Bytes of recurrent state all sessions hold together (2 x lstm_size x 4 bytes per env);
    past it ``POST /sessions`` answers 503."""
    token_file: str | None = None
    """A file holding the bearer token that every route but ``/healthz`` then needs; without it,
    the token is ``A3C_RAY_SERVE_TOKEN`` of the process that builds the application."""
    no_auth: bool = False
    """Serve without a token on a non-loopback address, on purpose (anyone who reaches the port
    may call the policy)."""

    @classmethod
    def from_dict(cls, args: dict[str, Any]) -> ServeOptions:
        """Options from a Serve config file's ``args``; every problem at once, as ConfigError."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ConfigError([f"unknown serve option(s): {', '.join(unknown)}"])
        if "source" not in args:
            raise ConfigError(["serve needs 'source': a checkpoint or run directory"])
        options = cls(**args)
        problems = options.problems()
        if problems:
            raise ConfigError(problems)
        return options

    def problems(self) -> list[str]:
        out = _type_problems(self)
        if out:
            return out
        for name in (
            "replicas",
            "max_batch_size",
            "max_body_bytes",
            "max_observations",
            "max_sessions",
            "max_session_bytes",
        ):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("batch_wait_ms", "replica_cpus"):
            if getattr(self, name) < 0:
                out.append(f"{name}: must be >= 0, got {getattr(self, name)}")
        for name in ("follow_every", "session_idle_seconds"):
            if not 0 < getattr(self, name) < float("inf"):
                out.append(f"{name}: must be > 0 seconds, got {getattr(self, name)}")
        return out


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "str | None": (str, type(None)),
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
}
"""What each field's annotation accepts from a config file's ``args`` (YAML gives ints for
whole-number floats)."""


def _type_problems(options: ServeOptions) -> list[str]:
    out = []
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        want = _TYPES[str(f.type)]
        if not isinstance(value, want) or (isinstance(value, bool) and bool not in want):
            out.append(f"{f.name}: must be {f.type}, got {type(value).__name__} {value!r}")
    return out


# -- the lock ------------------------------------------------------------------------------------


def read_token(options: ServeOptions, environ: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token of ``options.token_file``, else of ``A3C_RAY_SERVE_TOKEN``; None when
    neither is given. A ConfigError when one is given but unusable, or given with ``no_auth``."""
    if options.token_file is not None:
        where = f"token_file {options.token_file}"
        try:
            token = Path(options.token_file).expanduser().read_text().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError([f"{where} cannot be read ({e.__class__.__name__})"]) from None
    elif TOKEN_ENV in environ:
        where, token = TOKEN_ENV, environ[TOKEN_ENV].strip()
    else:
        return None
    if not token:
        raise ConfigError([f"{where} is empty: the token is one line of text"])
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ConfigError(
            [f"{where}: the token must be one word of printable ASCII (an HTTP header carries it)"]
        )
    if options.no_auth:
        raise ConfigError([f"a token ({where}) and no_auth were both given: leave out one of them"])
    return token


def is_loopback(host: str) -> bool:
    """True when ``host`` is reached from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a name other than localhost: it may resolve to any interface
        return False


def exposure_problem(
    host: str | None, token: str | None, no_auth: bool, direct_ingress: bool
) -> str | None:
    """Why the policy may not be served open (no token) as asked, or None. Open is allowed on a
    loopback address, or anywhere with ``no_auth``. ``host`` None: where HTTP listens is not
    known, so it counts as reachable from other machines; ``direct_ingress``: the replicas answer
    HTTP themselves on every interface of their node (``--ingress haproxy``)."""
    if token is not None or no_auth:
        return None
    if host is not None and is_loopback(host) and not direct_ingress:
        return None
    where = (
        "the replicas' own HTTP ports (--ingress haproxy) listen on every interface"
        if direct_ingress
        else f"HTTP listens on {host}"
        if host is not None
        else "HTTP may listen on any address"
    )
    return (
        f"{where}, and no token locks the policy: give one in {TOKEN_ENV} or a token file "
        "(--token-file PATH, or token_file in a Serve config's args), or serve it open on "
        "purpose with --no-auth (no_auth: true)"
    )


def run_of(checkpoint: str | None) -> str | None:
    """The run directory of a checkpoint file inside one (``RUN/checkpoints/ckpt-N.pt``)."""
    if not checkpoint:
        return None
    parent, _, _ = checkpoint.rstrip("/").rpartition("/")
    run, _, name = parent.rpartition("/")
    return run if name == "checkpoints" and run else None


def first_policy(options: ServeOptions) -> Policy:
    """The policy to start with: the checkpoint ``source`` names (with ``follow``, its run's
    ``best``). A CheckpointError says what is missing."""
    from a3c_ray.rundir.policy import load_policy
    from a3c_ray.serve.serve_follow import first_of_run

    if options.follow:
        return first_of_run(options.source)
    return load_policy(options.source)
